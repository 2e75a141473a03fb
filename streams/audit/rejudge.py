"""Stored steps judged again with a chosen checker set (DataElf's ``reaudit``, wired by the
CLI): each episode's steps in order, each with the ones before it as context."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ...schemas import Step
from . import registry
from .engine import FAST_KINDS, AuditEngine, StepAudit


def rejudge(
    steps: Sequence[Step], checkers: Sequence[str] | None = None, without: Sequence[str] = ()
) -> dict[str, StepAudit]:
    """Each step's audit (by event id) by ``checkers`` (default: the fast tier) less
    ``without``; an unknown checker name raises ValueError naming the known ones."""
    known = registry.available()
    chosen = list(checkers) if checkers else [n for n, f in known.items() if f.kind in FAST_KINDS]
    unknown = sorted(n for n in {*chosen, *without} if n not in known)
    if unknown:
        raise ValueError(
            f"unknown checker(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    engine = AuditEngine(registry.create(n for n in chosen if n not in without))
    return asyncio.run(_by_episode(engine, steps))


async def _by_episode(engine: AuditEngine, steps: Sequence[Step]) -> dict[str, StepAudit]:
    episodes: dict[str, list[Step]] = {}
    for step in steps:
        episodes.setdefault(step.episode_id, []).append(step)
    out = {}
    for group in episodes.values():
        ordered = sorted(group, key=lambda s: s.step_index)
        for audit in await engine.audit_episode(ordered, tier="step"):
            out[audit.step.event_id] = audit
    return out
