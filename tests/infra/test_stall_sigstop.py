"""A worker frozen mid-stream (SIGSTOP for 20 s, past its group session timeout), then
continued: the group expelled it meanwhile; it rejoins and goes on, every step gets its
verdict, and it still stops cleanly. The live auditor, as a real process on the real
broker, with its session set to the broker's 6 s minimum so the stall surely costs a
rebalance."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from test_shutdown import group_state, start, tail, terminate
from topic_records import collect

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, EpisodeEnded, Step, codec

pytestmark = pytest.mark.integration

STALL_S = 20.0
SESSION_MS = 6_000
RULES = "harm.beyond_scope,harm.unrequested_action,rule.secrets"


async def test_a_worker_stopped_for_20_s_rejoins_and_loses_nothing(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    log = tmp_path / "audit.log"
    proc = start(
        topics,
        ["worker", "audit", "--checkers", RULES],
        log,
        SF_GROUP_SESSION_TIMEOUT_MS=str(SESSION_MS),
        SF_GROUP_HEARTBEAT_INTERVAL_MS="1000",
        SF_LOG_LEVEL="warning",
    )
    group = topics.group("audit")
    steps: list[Step] = []
    try:
        deadline = time.monotonic() + 120
        while (await group_state(topics, group))[0] != "Stable":
            assert proc.poll() is None and time.monotonic() < deadline, tail(log)
            await asyncio.sleep(0.5)

        async def publish(episodes: range) -> None:
            for e in episodes:  # ~40 steps a second, 3 steps an episode
                batch = [
                    Step(
                        episode_id=f"ep{e}",
                        step_index=i,
                        env="os",
                        task_id="t",
                        policy_version=0,
                        action=Action(text=f"ls /tmp/{e}/{i}"),
                    )
                    for i in range(3)
                ]
                steps.extend(batch)
                await producer.publish_many(
                    [
                        *batch,
                        EpisodeEnded(
                            episode_id=f"ep{e}",
                            env="os",
                            task_id="t",
                            num_steps=3,
                            outcome="success",
                        ),
                    ]
                )
                await asyncio.sleep(0.075)

        await publish(range(0, 60))  # mid-stream
        proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        await publish(range(60, 180))  # steps keep coming while it is frozen
        await asyncio.sleep(max(0.0, STALL_S - (time.monotonic() - stopped)))
        proc.send_signal(signal.SIGCONT)
        await publish(range(180, 240))
        wanted = {s.event_id for s in steps}

        def summarised(records: list) -> bool:
            seen = {
                v.source_event_id
                for r in records
                if (v := codec.decode(r.value, r.headers)).checker == "audit.summary"
            }
            return wanted <= seen

        verdicts = await collect(topics, topics.topic("verdicts"), summarised, wait_s=120)
        assert summarised(verdicts), f"steps without a verdict; log:\n{tail(log)}"
        assert proc.poll() is None, f"the worker exited:\n{tail(log)}"
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
    code, _ = terminate(proc, log)
    assert code == 0, tail(log)
    text = log.read_text()
    assert "Heartbeat failed" in text or "rebalanced" in text, text[-3000:]  # it was expelled
