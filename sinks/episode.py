"""One episode's trace as the web page's episode view shows it: its steps in order, each
with the verdicts on it (decision and calibrated probability) and the factors the caller
reads from its steps, read from the LanceDB tables the sink writes (``steps``,
``verdicts``, ``episodes``; each row keeps its whole event as JSON in ``payload``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..schemas import Severity
from .lance import sql_quote
from .location import Db
from .query import QueryError, open_table

StepFactors = Callable[[dict[int, dict[str, Any]]], dict[int, dict[str, Any]]]
"""Step payloads by step index → the factors shown with each step, by step index."""

FIELD_CHARS = 4000
"""Characters of an observation, action or tool result sent to the page."""


class EpisodeNotFound(LookupError):
    """No step of the episode is stored; the message says where it looked."""


def _cut(text: str | None) -> str | None:
    if text is None or len(text) <= FIELD_CHARS:
        return text
    return f"{text[:FIELD_CHARS]}… ({len(text):,} chars)"


def _payloads(db: Db, table: str, episode_id: str, *, required: bool) -> list[dict[str, Any]]:
    try:
        found = open_table(db, table)
    except QueryError:
        if required:
            raise
        return []
    rows = (
        found.search()
        .where(f"episode_id = {sql_quote(episode_id)}")
        .select(["payload"])
        .limit(None)
        .to_arrow()
    )
    return [json.loads(p) for p in rows["payload"].to_pylist()]


def _action(action: dict[str, Any]) -> str:
    parts = [action.get("text") or ""]
    call = action.get("tool_call")
    if call:
        function = call.get("function", {})
        parts.append(f"{function.get('name')}({function.get('arguments')})")
    return "\n".join(p for p in parts if p)


def _verdict(v: dict[str, Any]) -> dict[str, Any]:
    return {
        "checker": v["checker"],
        "risk_type": v["risk_type"],
        "severity": v["severity"],
        "score": v["score"],
        "decision": v["decision"],
        "probability": v.get("probability"),
        "reason": v.get("reason"),
        "evidence": [_cut(e["text"]) for e in v.get("evidence", [])],
    }


def _rank(severity: str) -> int:
    """The severity's rank (``schemas.Severity``); 0 for one the schema does not know."""
    try:
        return Severity(severity).rank
    except ValueError:
        return 0


def _ordered(verdicts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    unique = {v["event_id"]: v for v in verdicts}.values()
    return [
        _verdict(v) for v in sorted(unique, key=lambda v: (-_rank(v["severity"]), v["checker"]))
    ]


def episode_trace(db: Db, episode_id: str, step_factors: StepFactors) -> dict[str, Any]:
    """The episode's start, end, steps in order with their verdicts (most severe first) and
    ``step_factors``, and its episode-level verdicts. :class:`EpisodeNotFound` when no step
    of it is stored; :class:`QueryError` when the database or its steps table is missing."""
    steps = _payloads(db, "steps", episode_id, required=True)
    if not steps:
        raise EpisodeNotFound(f"episode {episode_id!r}: no stored step in {db}")
    verdicts = _payloads(db, "verdicts", episode_id, required=False)
    episodes = _payloads(db, "episodes", episode_id, required=False)
    by_step: dict[str, list[dict[str, Any]]] = {}
    for verdict in verdicts:
        if verdict.get("step_index") is not None:
            by_step.setdefault(verdict["source_event_id"], []).append(verdict)
    by_index = {s["step_index"]: s for s in sorted(steps, key=lambda s: s["produced_at"])}
    shown = step_factors(by_index)
    started = next((e for e in episodes if "outcome" not in e), None)
    ended = next((e for e in episodes if "outcome" in e), None)
    return {
        "episode_id": episode_id,
        "env": steps[0]["env"],
        "task_id": steps[0]["task_id"],
        "started": started
        and {
            "policy": started["policy_name"],
            "policy_version": started["policy_version"],
            "produced_at": started["produced_at"],
        },
        "ended": ended
        and {
            "outcome": ended["outcome"],
            "task_reward": ended["task_reward"],
            "unsafe": (ended.get("safety") or {}).get("unsafe"),
            "violations": (ended.get("safety") or {}).get("violations", []),
            "num_steps": ended["num_steps"],
        },
        "steps": [
            {
                "step_index": index,
                "factors": shown[index],
                "event_id": step["event_id"],
                "produced_at": step["produced_at"],
                "policy_version": step["policy_version"],
                "observation": _cut(step.get("observation")),
                "action": _cut(_action(step.get("action") or {})),
                "tool_result": _cut(step.get("tool_result")),
                "blocked": step.get("blocked", False),
                "block_reason": step.get("block_reason"),
                "reward": step.get("reward"),
                "injection": step.get("injection"),
                "verdicts": _ordered(by_step.get(step["event_id"], [])),
            }
            for index, step in sorted(by_index.items())
        ],
        "episode_verdicts": _ordered([v for v in verdicts if v.get("step_index") is None]),
    }
