"""The assembler keeps open episodes across a restart (state restored from its changelog)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from data_episodes import episode_events
from test_assembly_worker import _assembler, _collect

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import EpisodeEnded, Step, Trajectory, Verdict

pytestmark = pytest.mark.integration


async def test_open_episodes_survive_a_sigkill_and_restart(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    episodes = {n: episode_events(n, steps=3) for n in range(6)}
    first = [e for evs in episodes.values() for e in evs if isinstance(e, Step)]
    rest = [e for evs in episodes.values() for e in evs if not isinstance(e, Step)]
    rest = [e for e in rest if isinstance(e, EpisodeEnded | Verdict) or e.TOPIC == "episodes"]
    probes = [e for n in range(100, 106) for e in episode_events(n, steps=1)]
    await producer.publish_many(first)
    await producer.publish_many(probes)  # their trajectories show the worker got this far
    proc = _assembler(topics, tmp_path, episode_timeout=600)
    try:
        got = await _collect(topics, want=6, wait_s=120, proc=proc)
        assert {d.event.episode_id for d in got} == {f"ep-{n}" for n in range(100, 106)}
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    await producer.publish_many(rest)
    again = _assembler(topics, tmp_path, episode_timeout=600)
    try:
        got = await _collect(topics, want=6, wait_s=120, proc=again)  # same group: new ones
    finally:
        again.send_signal(signal.SIGTERM)
        out, _ = again.communicate(timeout=30)
    done = {d.event.episode_id: d.event for d in got}
    assert set(done) == {f"ep-{n}" for n in range(6)}, out.decode()[-3000:]
    for n in range(6):
        t = done[f"ep-{n}"]
        assert isinstance(t, Trajectory) and t.completed_by == "verdicts"
        assert [s.step_index for s in t.steps] == [0, 1, 2]  # steps seen before the restart
