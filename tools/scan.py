"""The auditor as a library call: judge what an agent is about to do, in its own process,
with no broker, no worker and no database.

    from safactory.tools.scan import scan

    decision = scan(messages)  # the OpenAI chat so far, ending with the turn to judge
    if decision.decision == "block":
        ...  # do not run the tool call; decision.reasons says why

``messages`` is an OpenAI chat message list (dicts, as the Chat Completions API takes them);
the last step it holds (its last tool call, or its last reply) is judged with everything
before it as context, by the same checkers and calibration the live audit worker runs
(``checkers`` chooses others, as ``--checkers`` does). A :class:`~safactory.schemas.Step`
can be given instead, with its episode's earlier steps as ``context``. The answer is a
:class:`~safactory.schemas.guard.GuardDecision`: ``decision`` (allow, warn, uncertain,
block), ``probability`` (calibrated, None when nothing measured fired), ``reasons``,
``risk_types``, ``score`` and every verdict.

:func:`scan` is for plain code; inside a running event loop use ``await ascan(...)``. The
checkers load on the first call (a few seconds for the model checkers) and stay loaded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from functools import cache
from typing import Any

from ..schemas import Step
from ..schemas.guard import GuardDecision
from ..streams.audit.engine import configured_engine
from ..streams.audit.guard import AuditGuard
from .importers import chat_steps

_local = threading.local()


def scan(
    conversation: Sequence[dict[str, Any]] | Step,
    context: Sequence[Step] = (),
    *,
    checkers: str | None = None,
) -> GuardDecision:
    """Judge the last step of ``conversation`` (see the module docstring)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        runner = getattr(_local, "runner", None)
        if runner is None:  # one loop per thread, kept: the engine's clients stay on it
            runner = _local.runner = asyncio.Runner()
        return runner.run(ascan(conversation, context, checkers=checkers))
    raise RuntimeError("scan() was called inside a running event loop: use `await ascan(...)`")


async def ascan(
    conversation: Sequence[dict[str, Any]] | Step,
    context: Sequence[Step] = (),
    *,
    checkers: str | None = None,
) -> GuardDecision:
    """:func:`scan` for async code."""
    if isinstance(conversation, Step):
        step, earlier = conversation, list(context)
    else:
        steps = chat_steps(list(conversation), episode_id="scan")
        if not steps:
            raise ValueError(
                "nothing to judge: the messages hold no assistant turn (a reply or a tool "
                "call); pass the chat up to and including the turn to judge"
            )
        step, earlier = steps[-1], steps[:-1]
    return await _guard(checkers).check(step, earlier)


@cache
def _guard(checkers: str | None) -> AuditGuard:
    """The checkers, loaded once per process and choice (``ValueError`` names a bad one)."""
    engine = configured_engine(checkers)
    return AuditGuard(engine, budget_ms=float("inf"))
