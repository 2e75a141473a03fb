"""Back-pressure in the live auditor: a step that waited past the budget gets the fast tier
only, and its skipped checkers say so in their verdicts (issue #14 item 8)."""

from __future__ import annotations

import re
import time

import pytest
from helpers_audit import make_step, measured
from test_audit_engine import AlwaysHigh, CountingModel
from topic_records import everything

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.schemas import Decision, codec
from safactory.streams.audit.engine import AuditEngine
from safactory.streams.audit.worker import AuditWorker

pytestmark = pytest.mark.integration


async def test_late_steps_skip_the_model_tier_and_say_so(topics: Settings) -> None:
    model = CountingModel()
    policy = measured("test.high", "test.model")
    worker = AuditWorker(AuditEngine([AlwaysHigh(), model], policy=policy), topics, shed_after_s=30)
    late = make_step(0, episode="ep-late", user="hi", reply="ok")
    late = late.model_copy(update={"produced_at": time.time() - 120})
    fresh = make_step(0, episode="ep-fresh", user="hi", reply="ok")
    deliveries = [
        Delivery(s, topics.topic("steps"), 0, i, s.episode_id.encode(), [])
        for i, s in enumerate((late, fresh))
    ]
    async with worker.runtime.offline() as runtime:
        await runtime.feed(deliveries)
    sent = [
        codec.decode(r.value, r.headers) for r in await everything(topics, topics.topic("verdicts"))
    ]
    by = {(v.episode_id, v.checker): v for v in sent if getattr(v, "checker", None)}
    assert by[("ep-late", "test.model")].decision == Decision.UNDECIDED
    # 120 s late when sent, a second or two more by the time the worker judges it
    assert re.match(r"not run: worker 12\d s behind", by[("ep-late", "test.model")].reason)
    assert by[("ep-late", "test.high")].decision == Decision.BLOCK  # the fast tier still judged
    assert by[("ep-fresh", "test.model")].decision == Decision.BLOCK
    assert model.calls == 1 and worker.stats.steps_shed == 1
    never = AuditWorker(AuditEngine([model]), topics, shed_after_s=None)
    assert never.live._shed(late) is None
