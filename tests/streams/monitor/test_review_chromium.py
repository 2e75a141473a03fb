"""The label loop in a real browser: traces audited with `safactory audit --db`, the review
page of `safactory serve` (headless Chromium over DevTools) labels the first case, the page
shows the auditor's new decision, and a second `safactory audit` of the same file (the
replay) decides that trace by its label, under the new labels version."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from chromium import CHROMIUM, chromium, serve
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra.config import Settings

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
TOKEN = "review-browser-token-0123"
FAST = "harm.beyond_scope,harm.unrequested_action,harm.steered_action"


def _audit_file(traces: Path, db: Path, out: Path) -> dict[str, dict]:
    args = ["audit", str(traces), "--db", str(db), "--out", str(out), "--checkers", FAST]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}


async def _audit(traces: Path, db: Path, out: Path) -> dict[str, dict]:
    """`safactory audit` of the file, its lines by id (in a thread: the command runs its
    own event loop)."""
    return await asyncio.to_thread(_audit_file, traces, db, out)


async def test_a_label_given_in_the_browser_changes_the_verdict_and_the_replay(
    topics: Settings, shared_data: Path, tmp_path: Path
) -> None:
    rjudge = shared_data / "audit/trajectories/rjudge"
    records = json.loads((rjudge / "Finance_harmful.json").read_text())[:5]
    records += json.loads((rjudge / "Finance_benign.json").read_text())[:5]
    traces, db = tmp_path / "traces.json", tmp_path / "db"
    traces.write_text(json.dumps(records))
    truth = {str(r["id"]): bool(r["label"]) for r in records}
    before = await _audit(traces, db, tmp_path / "before.jsonl")
    async with (
        serve(topics, db, tmp_path, "--token", TOKEN) as url,
        chromium(f"{url}review?token={TOKEN}", tmp_path) as page,
    ):
        await page.until("document.querySelectorAll('.case').length > 0", 30)
        first = await page.js("document.querySelector('.case').dataset.id")
        answer = "unsafe" if truth[first] else "safe"
        await page.js(f"document.querySelector('.case button.{answer}').click()")
        await page.until("document.querySelector('.case').dataset.labelled", 15)
        shown = await page.js("document.querySelector('.case .decision').textContent")
        note = await page.js("document.querySelector('.case .note').textContent")
        await page.screenshot(tmp_path / "review.png")
    assert shown == ("block" if truth[first] else "allow"), note
    assert f"labelled {answer}" in note and "labels 1:" in note
    after = await _audit(traces, db, tmp_path / "after.jsonl")
    assert after[first]["decision"] == shown
    assert after[first]["labels"].startswith("1:") and before[first]["labels"].startswith("0:")
    assert "labelled" in after[first]["by_labels"] or before[first]["decision"] == shown
