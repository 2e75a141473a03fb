"""The assembler under the faults a campaign found: restarts behind a backlog, episodes over
1 MB, and instances of one group dying under each other (issue #14 items 1-2, #11 item 2)."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from data_episodes import episode_events
from test_assembly_worker import _assembler, _collect, _raw_records

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import EpisodeEnded, EpisodeStarted, Step, Trajectory, Verdict, codec
from safactory.streams.assembly import AssemblerConfig
from safactory.streams.assembly.worker import STATE_TOPIC, AssemblerWorker

pytestmark = pytest.mark.integration


def _kill(proc) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    return out.decode(errors="replace")[-3000:]


async def test_restart_behind_a_backlog_keeps_every_step(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    """Ends read before their steps, then a restart after the verdict timeout passed, with
    the steps far back in the backlog: no episode may close without its steps."""
    episodes = {n: episode_events(n, steps=4) for n in range(8)}
    heads = [e for evs in episodes.values() for e in evs if not isinstance(e, Step)]
    await producer.publish_many(heads)  # every end and verdict, no step yet
    first = _assembler(topics, tmp_path, episode_timeout=600)
    probe = episode_events(900, steps=1)
    await producer.publish_many(probe)
    got = await _collect(topics, want=1, wait_s=90, proc=first)  # it has read the ends
    log = _kill(first)
    assert [d.event.episode_id for d in got] == ["ep-900"], log
    await asyncio.sleep(4)  # longer than the verdict timeout (3 s) of the assembler
    filler = [e for n in range(1000, 1400) for e in episode_events(n, steps=5)]
    await producer.publish_many(filler)  # a backlog ahead of the steps
    await producer.publish_many(
        [e for evs in episodes.values() for e in evs if isinstance(e, Step)]
    )
    again = _assembler(topics, tmp_path, episode_timeout=600)
    try:
        got = await _collect(topics, want=400 + 8, wait_s=180, proc=again)
    finally:
        log = _kill(again)
    done = {d.event.episode_id: d.event for d in got}
    for n in range(8):
        t = done.get(f"ep-{n}")
        assert isinstance(t, Trajectory), log
        assert [s.step_index for s in t.steps] == [0, 1, 2, 3], (t.completed_by, log)
    filled = [t for e, t in done.items() if int(e.removeprefix("ep-")) >= 1000]
    assert len(filled) == 400 and all(len(t.steps) == 5 for t in filled)


async def test_episodes_over_a_megabyte_are_assembled(topics: Settings, tmp_path: Path) -> None:
    """12 steps of 100 KB, one step of 1.5 MB, then a small episode: all three complete."""
    async with EventProducer(topics) as producer:
        big = _padded(episode_events(1, steps=12), 100_000)
        huge = _padded(episode_events(2, steps=1), 1_500_000)
        small = episode_events(3, steps=2)
        for events in (big, huge, small):
            await producer.publish_many(events)
    proc = _assembler(topics, tmp_path, episode_timeout=600)
    try:
        got = await _collect(topics, want=3, wait_s=120, proc=proc)
    finally:
        log = _kill(proc)
    done = {d.event.episode_id: d.event for d in got}
    assert set(done) == {"ep-1", "ep-2", "ep-3"}, log
    assert len(done["ep-1"].steps) == 12 and len(done["ep-2"].steps) == 1
    assert len(done["ep-2"].steps[0].messages[0].content) >= 1_500_000
    assert all(t.completed_by == "verdicts" for t in done.values())
    assert await _raw_records(topics, topics.topic("dlq")) == []


async def test_two_instances_share_the_work_and_survive_a_death(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    """Two assemblers in one group; one is killed mid-flow; every episode is assembled
    completely by the survivor (its partitions' state is taken over)."""
    a = _assembler(topics, tmp_path / "a", episode_timeout=600)
    b = _assembler(topics, tmp_path / "b", episode_timeout=600)
    try:
        batch1 = [episode_events(n, steps=3) for n in range(60)]
        await producer.publish_many(_without_ends(batch1))
        await asyncio.sleep(8)  # both joined and folded the open episodes
        _kill(a)
        await producer.publish_many([e for evs in batch1 for e in evs if _is_end(e)])
        batch2 = [e for n in range(60, 90) for e in episode_events(n, steps=3)]
        await producer.publish_many(batch2)
        got = await _collect(topics, want=90, wait_s=120, proc=b)
    finally:
        log = _kill(a) + _kill(b)
    done = {d.event.episode_id: d.event for d in got}
    assert set(done) == {f"ep-{n}" for n in range(90)}, log
    assert all(len(t.steps) == 3 and t.completed_by == "verdicts" for t in done.values()), log
    assert len(got) == len(done), "an episode was emitted twice"


def _is_end(event: object) -> bool:
    return isinstance(event, EpisodeEnded) or (
        isinstance(event, Verdict) and event.step_index is None
    )


def _without_ends(episodes: list[list]) -> list:
    return [e for evs in episodes for e in evs if not _is_end(e)]


def _padded(events: list, size: int) -> list:
    """The episode's steps with an assistant message of ``size`` characters."""
    out = []
    for e in events:
        if isinstance(e, Step):
            message = e.messages[0].model_copy(update={"content": "x" * size})
            e = e.model_copy(update={"messages": [message]})
        out.append(e)
    assert any(isinstance(e, EpisodeStarted) for e in out)
    return out


class _Crash(Exception):
    """Stands for a SIGKILL at one exact point."""


async def test_a_crash_between_outputs_and_their_state_loses_nothing(
    topics: Settings, producer: EventProducer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window of #11: a timer's trajectory is acknowledged, the state record that
    closes its episode is not. A restarted assembler must emit the trajectory again (same
    id), and a batch's state must never be written before its trajectory."""
    events = [e for n in range(4) for e in episode_events(n, steps=2, episode_verdict=False)]
    await producer.publish_many(events)  # no episode verdict: they close by the timer
    config = AssemblerConfig(verdict_timeout_s=1.0, required_step_checkers=frozenset())
    state_topic = topics.topic(STATE_TOPIC.name)
    sent: list[tuple[str, str]] = []  # ("trajectory" | "closed", episode) in send order
    original = EventProducer.send_raw

    async def crashing(self: EventProducer, topic: str, **kwargs: Any) -> object:
        key, value = kwargs["key"] or b"", kwargs["value"]
        if topic == state_topic and key.endswith(b"\0closed") and value is not None:
            if any(kind == "trajectory" for kind, _ in sent):
                raise _Crash
            sent.append(("closed", key.split(b"\0")[0].decode()))
        elif topic.endswith(".trajectories"):
            sent.append(("trajectory", json.loads(value)["episode_id"]))
        return await original(self, topic, **kwargs)

    monkeypatch.setattr(EventProducer, "send_raw", crashing)
    with pytest.raises(_Crash):
        await AssemblerWorker(topics, config, tick_every_s=0.2).serve(idle_timeout=30)
    monkeypatch.setattr(EventProducer, "send_raw", original)
    first = await _trajectories(topics)
    assert first, "the crash came before any trajectory was acknowledged"
    assert ("trajectory", sent[0][1]) == sent[0], "an episode's close left before its output"
    await AssemblerWorker(topics, config, tick_every_s=0.2).serve(idle_timeout=6)
    after = await _trajectories(topics)
    assert {t.episode_id for t in after} == {f"ep-{n}" for n in range(4)}
    assert all(len(t.steps) == 2 for t in after)
    repeated = [t for t in after if t.episode_id in {f.episode_id for f in first}]
    assert len({t.event_id for t in repeated}) == len(first)  # re-emitted under the same id


async def _trajectories(settings: Settings) -> list[Trajectory]:
    records = await _raw_records(settings, settings.topic("trajectories"))
    return [codec.decode(r.value, r.headers) for r in records]  # type: ignore[misc]


async def test_a_trajectory_over_the_record_limit_is_dead_lettered_not_fatal(
    topics: Settings, tmp_path: Path
) -> None:
    """Six 1.5 MB steps fit the steps topic one by one; their trajectory (9 MB) does not:
    it goes to the dead-letter topic by reference with the reason, and work goes on."""
    from safactory.schemas import DeadLetter

    async with EventProducer(topics) as producer:
        await producer.publish_many(_padded(episode_events(1, steps=6), 1_500_000))
        await producer.publish_many(episode_events(2, steps=2))
    proc = _assembler(topics, tmp_path, episode_timeout=600)
    try:
        got = await _collect(topics, want=1, wait_s=120, proc=proc)
        dead = []
        for _ in range(60):
            dead = await _raw_records(topics, topics.topic("dlq"))
            if dead:
                break
            await asyncio.sleep(1)
    finally:
        log = _kill(proc)
    assert [d.event.episode_id for d in got] == ["ep-2"], log
    (letter,) = [DeadLetter.from_record(r.key, r.value, r.headers) for r in dead]
    assert letter.error.startswith("encode: Trajectory of episode ep-1")
    assert letter.value_bytes > 9_000_000 and len(dead[0].value) <= DeadLetter.PREVIEW_BYTES


async def test_replay_verdicts_are_not_folded_into_live_episodes(
    topics: Settings, producer: EventProducer
) -> None:
    from safactory.schemas import Decision, Severity, derive_id
    from safactory.schemas import headers as h

    events = episode_events(1, steps=2)
    step = next(e for e in events if isinstance(e, Step))
    replayed = Verdict(
        event_id=derive_id("replay", 1, step.event_id),
        episode_id=step.episode_id,
        source_event_id=step.event_id,
        step_index=step.step_index,
        env=step.env,
        checker="rules",
        risk_type="destructive_operation",
        severity=Severity.CRITICAL,
        score=1.0,
        decision=Decision.BLOCK,
    )
    record = codec.encode(replayed)
    await (
        await producer.send_raw(
            topics.topic("verdicts"),
            key=record.key,
            value=record.value,
            headers=[*record.headers, (h.REPLAY, b"r1")],
        )
    )
    await producer.publish_many(events)
    await AssemblerWorker(topics, AssemblerConfig(), tick_every_s=0.2).serve(idle_timeout=4)
    (t,) = await _trajectories(topics)
    assert replayed.event_id not in t.verdict_ids and t.verdict_ids
