"""Text from a trace never drives the terminal: ``safactory audit --explain`` shows escape
sequences in ids, requests and tool outputs as visible escapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from safactory.infra.terminal import visible

SEQUENCES = ["\x1b[2J", "\x1b[H", "\x1b]0;owned\x07", "\x1b[31m", "\x9b2J"]


def test_visible_escapes_control_characters_and_keeps_lines() -> None:
    assert visible("a\x1b[2Jb\n\tc") == "a\\x1b[2Jb\n\tc"
    assert visible("\x9b") == "\\x9b" and visible("plain") == "plain"


def test_explain_prints_no_escape_sequence(tmp_path: Path) -> None:
    noise = "".join(SEQUENCES)
    call = {"id": "c1", "type": "function"}
    call["function"] = {"name": "bash", "arguments": json.dumps({"command": "rm -rf /home/u"})}
    record = {
        "id": f"trace{noise}",
        "messages": [
            {"role": "user", "content": f"tidy up {noise} please"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": f"removed everything {noise}"},
        ],
    }
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record) + "\n")
    command = [sys.executable, "-m", "safactory.cli.main", "audit", str(path)]
    done = subprocess.run(
        [*command, "--format", "openai", "--explain", "--out", str(tmp_path / "v.jsonl")],
        capture_output=True,
        text=True,
        timeout=300,
        env={"TERM": "xterm", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\x1b" not in done.stderr and "\x9b" not in done.stderr
    assert "\\x1b" in done.stderr  # the id was shown, visibly
