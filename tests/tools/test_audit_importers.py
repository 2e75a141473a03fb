"""Importers: real R-Judge and AgentDojo files, and clear errors on broken input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from safactory.tools.importers import (
    AuditRecord,
    ImportFormatError,
    SkippedRecord,
    read_entries,
    read_records,
)


def test_rjudge_records_become_steps(shared_data: Path) -> None:
    records = read_records(shared_data / "audit/trajectories/rjudge/Finance_harmful.json", "rjudge")
    assert len(records) == 39 and all(r.unsafe for r in records)
    first = records[0]
    assert first.id == "31" and first.source == "rjudge"
    calls = [s.action.tool_call.function.name for s in first.steps if s.action.tool_call]
    assert calls[:2] == ["BinanceGetAccountBalances", "EvernoteManagerSearchNotes"]
    assert "BinanceWithdraw" in calls
    assert first.steps[0].messages[-2].role == "user"  # the task travels with step 0
    assert first.steps[0].tool_result and "balances" in first.steps[0].tool_result
    assert [s.step_index for s in first.steps] == list(range(len(first.steps)))


def test_agentdojo_labels_and_ids(shared_data: Path) -> None:
    path = shared_data / "audit/trajectories/agentdojo/agentdojo-gpt-4o-mini-2024-07-18.jsonl"
    records = read_records(path, "agentdojo")
    assert len(records) == 114
    assert records[0].id == f"{path.name}:2"  # line 1 is the metadata header
    attacks = {r.attack for r in records}
    assert attacks == {"clean", "resisted", "succeeded"}
    assert all(r.unsafe == (r.attack == "succeeded") for r in records)
    send = next(
        s
        for s in records[0].steps
        if s.action.tool_call and s.action.tool_call.function.name == "send_money"
    )
    assert json.loads(send.action.tool_call.function.arguments)["recipient"]
    assert "sent" in (send.tool_result or "")


def test_bad_inputs_name_file_record_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": 7, "label": 1}]))
    with pytest.raises(ImportFormatError, match=r"bad.json: record 0: missing field 'contents'"):
        read_records(bad, "rjudge")
    broken = tmp_path / "trace.jsonl"
    broken.write_text('{"metadata": {}}\n{"messages": [\n')
    with pytest.raises(ImportFormatError, match=r"trace.jsonl:2: not valid JSON"):
        read_records(broken, "agentdojo")
    with pytest.raises(ImportFormatError, match="--format 'csv'"):
        read_records(bad, "csv")
    with pytest.raises(ImportFormatError, match="no such file"):
        read_records(tmp_path / "missing.json", "rjudge")


def test_read_entries_keeps_order_and_says_why_a_record_was_skipped(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    ok = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}
    trace.write_text(
        "\n".join(
            [
                json.dumps({"metadata": {}}),
                json.dumps(ok),
                "[1, 2]",
                json.dumps({"messages": [{"role": "wizard"}]}),
                json.dumps(ok),
            ]
        )
        + "\n"
    )
    entries = read_entries(trace, "agentdojo")
    assert [type(e).__name__ for e in entries] == [
        "AuditRecord",
        "SkippedRecord",
        "SkippedRecord",
        "AuditRecord",
    ]
    assert [e.id for e in entries] == [f"trace.jsonl:{n}" for n in (2, 3, 4, 5)]
    assert "expected a JSON object" in entries[1].reason
    assert "messages[0] has no valid 'role'" in entries[2].reason


def test_rjudge_variants_other_exporters_write(tmp_path: Path) -> None:
    """A flat list of turns, assistant/tool role names, a structured action, a text label."""
    record = {
        "id": "v1",
        "label": "unsafe",
        "contents": [
            {"role": "user", "content": "Empty my trash"},
            {
                "role": "assistant",
                "thought": "ok",
                "action": {"name": "TerminalExecute", "arguments": {"command": "rm -rf ~/.Trash"}},
            },
            {"role": "tool", "content": "done"},
        ],
    }
    path = tmp_path / "variants.json"
    path.write_text(json.dumps([record, {**record, "id": "v2", "label": "maybe"}]))
    entries = read_entries(path, "rjudge")
    first = entries[0]
    assert isinstance(first, AuditRecord) and first.unsafe is True
    (step,) = first.steps
    assert step.action.tool_call is not None
    assert step.action.tool_call.function.name == "TerminalExecute"
    assert json.loads(step.action.tool_call.function.arguments) == {"command": "rm -rf ~/.Trash"}
    assert step.tool_result == "done" and step.messages[0].content == "Empty my trash"
    assert isinstance(entries[1], SkippedRecord) and "'label' is 'maybe'" in entries[1].reason


def test_agentdojo_security_written_as_text(tmp_path: Path) -> None:
    trace = {
        "messages": [{"role": "user", "content": "hi"}],
        "metadata": {"suite_name": "bank", "injection_task_id": "i1", "security": "false"},
    }
    path = tmp_path / "t.jsonl"
    path.write_text(
        json.dumps(trace)
        + "\n"
        + json.dumps({**trace, "metadata": {**trace["metadata"], "security": "True"}})
        + "\n"
    )
    resisted, succeeded = read_records(path, "agentdojo")
    assert (resisted.attack, resisted.unsafe) == ("resisted", False)
    assert (succeeded.attack, succeeded.unsafe) == ("succeeded", True)


def test_calls_written_other_ways_become_tool_calls(tmp_path) -> None:
    """Agents write calls as ``Name(k=v)``, ``Name('k': v)``, fenced shell blocks and UI
    acts on bracketed elements; each is the act, not a reply."""
    import json as _json

    from safactory.tools.importers import read_records

    turns = [
        {"role": "user", "content": "tidy my account"},
        {"role": "agent", "thought": None, "action": "ArchiveUsers(users=['Ana', 'Bo'])"},
        {"role": "environment", "content": "ok"},
        {"role": "agent", "thought": None, "action": "Update('ticket_id': 7, 'state': 'done')"},
        {"role": "environment", "content": "ok"},
        {"role": "agent", "thought": None, "action": "```bash\nrm -rf ./tmp\n```"},
        {"role": "environment", "content": ""},
        {"role": "agent", "thought": None, "action": "click <Confirm payment>"},
        {"role": "environment", "content": "paid"},
        {"role": "agent", "thought": None, "action": "All done (nothing else to do)."},
    ]
    path = tmp_path / "traces.json"
    path.write_text(_json.dumps([{"id": 1, "contents": [turns], "label": 1}]))
    (record,) = read_records(path, "rjudge")
    calls = [s.action.tool_call for s in record.steps]
    assert [c.function.name if c else None for c in calls] == [
        "ArchiveUsers",
        "Update",
        "bash",
        "ui_click",
        None,
    ]
    assert _json.loads(calls[0].function.arguments) == {"users": ["Ana", "Bo"]}
    assert _json.loads(calls[1].function.arguments) == {"ticket_id": 7, "state": "done"}
    assert _json.loads(calls[2].function.arguments) == {"command": "rm -rf ./tmp"}
    assert _json.loads(calls[3].function.arguments) == {"element": "Confirm payment"}


def test_an_oversized_record_is_refused_unread_and_the_rest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SF_AUDIT_MAX_RECORD_MB", "1")
    chat = {"messages": [{"role": "user", "content": "hello"}]}
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps(chat) + "\n" + "x" * (3 << 20) + "\n" + json.dumps(chat) + "\n")
    entries = read_entries(path, "openai")
    assert len(entries) == 3
    skipped = entries[1]
    assert isinstance(skipped, SkippedRecord) and "over 1 MiB" in skipped.reason
    assert "SF_AUDIT_MAX_RECORD_MB" in skipped.reason
    assert all(not isinstance(e, SkippedRecord) for e in (entries[0], entries[2]))


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_device_or_pipe_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    import os

    path = Path("/dev/zero") if kind == "device" else tmp_path / "pipe"
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(ImportFormatError, match="not a regular file"):
        read_entries(path, "openai")


def test_safactory_audit_of_dev_zero_ends_in_one_line_holding_little() -> None:
    import subprocess
    import sys

    measured = (  # a fresh parent: its children's peak is this command's alone
        "import resource, subprocess, sys; "
        "done = subprocess.run([sys.executable, '-m', 'safactory.cli.main', 'audit', "
        "'/dev/zero'], capture_output=True, text=True); "
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
        "print(done.stdout + done.stderr)"
    )
    out = subprocess.run(
        [sys.executable, "-c", measured], capture_output=True, text=True, timeout=60
    ).stdout
    first, *said = [line for line in out.splitlines() if line.strip()]
    code, peak_kb = map(int, first.split())
    assert code != 0 and len(said) == 1 and "/dev/zero" in said[0], said
    assert peak_kb < 300 * 1024, peak_kb  # it loads no model and no database to say so
