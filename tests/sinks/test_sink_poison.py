"""The sink worker on the real broker with a record that makes its write raise: that record
alone is dead-lettered, the rest of its batch and the batches after it are stored."""

from __future__ import annotations

from pathlib import Path

import pytest
from example_events import example_events
from poison import POISON, Poisoned, assert_poison_pill_dead_lettered

from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import Step, codec
from safactory.sinks.options import SinkOptions
from safactory.sinks.worker import SinkWorker

pytestmark = pytest.mark.integration


async def test_a_step_its_columns_cannot_be_made_of_is_dead_lettered(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    worker = SinkWorker(topics, SinkOptions(db_path=tmp_path / "db", gather_s=0.5))
    make = worker.sink.columns["steps"]

    def raising(deliveries):  # type: ignore[no-untyped-def]
        if any(d.event.observation == POISON for d in deliveries):
            raise Poisoned(POISON)
        return make(deliveries)

    worker.sink.columns["steps"] = raising
    step = next(e for e in example_events() if isinstance(e, Step))
    good = [step.model_copy(update={"event_id": f"s{i}", "step_index": i}) for i in range(6)]
    poison = step.model_copy(update={"event_id": "poison", "step_index": 9, "observation": POISON})

    async def publish() -> None:
        await producer.publish_many([*good[:3], poison, *good[3:]])

    def stored() -> int:
        return worker.sink.stats.per_table.get("steps", 0)

    dead = await assert_poison_pill_dead_lettered(
        topics, worker.runtime, publish, lambda: stored() >= 6
    )
    assert codec.decode(dead.value, dead.headers).event_id == "poison"
    assert sorted(worker.sink.table("steps").to_arrow()["event_id"].to_pylist()) == sorted(
        s.event_id for s in good
    )
