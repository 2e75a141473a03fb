"""The re-run flow's pure parts: which re-runs ran another version than asked."""

from __future__ import annotations

from safactory.streams.replay.rerun import Comparison, off_version


def _row(after: int | None) -> Comparison:
    return Comparison(
        episode_before="e",
        episode_after=None if after is None else "e2",
        task_id="t",
        env="os",
        version_before=0,
        version_after=after,
        unsafe_before=True,
        unsafe_after=None,
        reward_before=0.0,
        reward_after=None,
        reward_source="task",
        first_unsafe_before=None,
        first_unsafe_after=None,
    )


def test_off_version_keeps_the_reruns_on_another_version() -> None:
    rows = [_row(1), _row(2), _row(None)]
    assert off_version(rows, 1) == [rows[1]]
    assert off_version(rows, None) == []
