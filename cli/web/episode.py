"""One episode as the web page's episode view shows it (``sinks/episode.py``), each step
with the trust model's three factors of its call (harm, who asked, outcome:
``streams/audit/explain.py``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from ...schemas import Step
from ...sinks import episode
from ...streams.audit.explain import Factors, factors

if TYPE_CHECKING:  # lancedb loads only when an episode is asked for
    from ...sinks.location import Db


def _factors(by_index: dict[int, dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Harm, who asked and outcome of each stored step's call (the trust model's reading)."""
    try:
        steps = [Step.model_validate(payload) for _, payload in sorted(by_index.items())]
    except ValueError:
        steps = []  # a step the current schema cannot read: no factors, the rest shown
    found = {s.step_index: factors(s, steps[:i]) for i, s in enumerate(steps)}
    return {index: asdict(found.get(index, Factors())) for index in by_index}


def episode_trace(db: Db, episode_id: str) -> dict[str, Any]:
    """The episode's trace (``sinks.episode.episode_trace``) with each step's factors."""
    return episode.episode_trace(db, episode_id, _factors)
