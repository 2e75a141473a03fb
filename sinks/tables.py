"""The LanceDB tables: one per topic, their Arrow schemas, and event → row conversion.

Every row keeps the whole event as JSON (``payload``) next to flat columns for filtering,
and where it came from (``source_topic``, ``source_partition``, ``source_offset``) so a
restarted sink resumes past what it stored.
"""

from __future__ import annotations

import time

import pyarrow as pa

from ..infra.consumer import Delivery
from ..schemas import (
    EpisodeEnded,
    EpisodeStarted,
    Event,
    Label,
    Score,
    Skill,
    Step,
    Trajectory,
    Verdict,
)
from .base import ColumnMaker, Columns

TEXT_LIMIT = 4000
"""Characters of step text kept for full-text and vector search."""

COMMON = [
    pa.field("event_id", pa.string(), nullable=False),
    pa.field("schema", pa.string()),
    pa.field("episode_id", pa.string()),
    pa.field("env", pa.string()),
    pa.field("task_id", pa.string()),
    pa.field("policy_version", pa.int64()),
    pa.field("produced_at", pa.float64()),
    pa.field("ingested_at", pa.float64()),
    pa.field("source_topic", pa.string()),
    pa.field("source_partition", pa.int32()),
    pa.field("source_offset", pa.int64()),
    pa.field("payload", pa.string()),
]

EXTRA: dict[str, list[pa.Field]] = {
    "steps": [
        pa.field("step_index", pa.int32()),
        pa.field("group_id", pa.string()),
        pa.field("blocked", pa.bool_()),
        pa.field("injected", pa.bool_()),
        pa.field("text", pa.string()),
    ],
    "episodes": [
        pa.field("kind", pa.string()),
        pa.field("group_id", pa.string()),
        pa.field("outcome", pa.string()),
        pa.field("task_reward", pa.float64()),
        pa.field("unsafe", pa.bool_()),
        pa.field("num_steps", pa.int32()),
    ],
    "verdicts": [
        pa.field("step_index", pa.int32()),
        pa.field("source_event_id", pa.string()),
        pa.field("checker", pa.string()),
        pa.field("risk_type", pa.string()),
        pa.field("severity", pa.string()),
        pa.field("severity_rank", pa.int8()),
        pa.field("score", pa.float64()),
        pa.field("decision", pa.string()),
    ],
    "trajectories": [
        pa.field("group_id", pa.string()),
        pa.field("outcome", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("completed_by", pa.string()),
        pa.field("max_policy_version", pa.int64()),
        pa.field("num_steps", pa.int32()),
    ],
    "scores": [pa.field("scorer", pa.string()), pa.field("composite", pa.float64())],
    "skills": [
        pa.field("skill_id", pa.string()),
        pa.field("title", pa.string()),
        pa.field("text", pa.string()),
    ],
}

LABEL_FIELDS: list[pa.Field] = [
    pa.field("step_index", pa.int32()),
    pa.field("unsafe", pa.bool_()),
    pa.field("risk_type", pa.string()),
    pa.field("labeller", pa.string()),
    pa.field("answers", pa.string()),
]
"""The ``labels`` table's own columns (people's labels; not a table DataElf plans over)."""
FIELDS: dict[str, list[pa.Field]] = {**EXTRA, "labels": LABEL_FIELDS}
"""Every sink table's own columns."""

EMBEDDED_TABLES = ("steps", "skills")
"""Tables with a ``text`` column that also get a ``vector`` column when embedding is on."""


def table_schema(table: str, vector_dim: int | None = None) -> pa.Schema:
    """Arrow schema of ``table``; with ``vector_dim``, embedded tables get ``vector``."""
    fields = COMMON + FIELDS[table]
    if vector_dim and table in EMBEDDED_TABLES:
        fields = [*fields, pa.field("vector", pa.list_(pa.float32(), vector_dim))]
    return pa.schema(fields)


def step_text(step: Step) -> str:
    """The searchable text of a step: observation, action, tool call and tool result."""
    action = step.action
    call = action.tool_call
    called = call and f"{call.function.name}({call.function.arguments})"
    parts = (step.observation, action.text, called, step.tool_result)
    return "\n".join(p for p in parts if p)[:TEXT_LIMIT]


def _json(event: Event) -> str:
    return event.__pydantic_serializer__.to_json(event).decode()


def _common(ds: list[Delivery]) -> Columns:
    events = [d.event for d in ds]
    now = time.time()
    schema_of = {cls: cls.schema_id() for cls in {type(e) for e in events}}
    return {
        "event_id": [e.event_id for e in events],
        "schema": [schema_of[type(e)] for e in events],
        "episode_id": [getattr(e, "episode_id", None) for e in events],
        "env": [getattr(e, "env", None) for e in events],
        "task_id": [getattr(e, "task_id", None) for e in events],
        "policy_version": [getattr(e, "policy_version", None) for e in events],
        "produced_at": [e.produced_at for e in events],
        "ingested_at": [now] * len(ds),
        "source_topic": [d.topic for d in ds],
        "source_partition": [d.partition for d in ds],
        "source_offset": [d.offset for d in ds],
        "payload": [
            (
                d.value if d.value is not None else d.event.__pydantic_serializer__.to_json(d.event)
            ).decode()
            for d in ds
        ],
    }


def _step_columns(ds: list[Delivery]) -> Columns:
    steps: list[Step] = [d.event for d in ds]  # type: ignore[misc]
    return _common(ds) | {
        "step_index": [s.step_index for s in steps],
        "group_id": [s.group_id for s in steps],
        "blocked": [s.blocked for s in steps],
        "injected": [s.injection is not None for s in steps],
        "text": [step_text(s) for s in steps],
    }


def _episode_columns(ds: list[Delivery]) -> Columns:
    events: list[EpisodeStarted | EpisodeEnded] = [d.event for d in ds]  # type: ignore[misc]
    ended = [e if isinstance(e, EpisodeEnded) else None for e in events]
    return _common(ds) | {
        "kind": ["started" if e is None else "ended" for e in ended],
        "group_id": [e.group_id for e in events],
        "outcome": [None if e is None else e.outcome.value for e in ended],
        "task_reward": [None if e is None else e.task_reward for e in ended],
        "unsafe": [None if e is None or e.safety is None else e.safety.unsafe for e in ended],
        "num_steps": [None if e is None else e.num_steps for e in ended],
    }


def _verdict_columns(ds: list[Delivery]) -> Columns:
    vs: list[Verdict] = [d.event for d in ds]  # type: ignore[misc]
    return _common(ds) | {
        "step_index": [v.step_index for v in vs],
        "source_event_id": [v.source_event_id for v in vs],
        "checker": [v.checker for v in vs],
        "risk_type": [v.risk_type for v in vs],
        "severity": [v.severity.value for v in vs],
        "severity_rank": [v.severity.rank for v in vs],
        "score": [v.score for v in vs],
        "decision": [v.decision.value for v in vs],
    }


def _trajectory_columns(ds: list[Delivery]) -> Columns:
    ts: list[Trajectory] = [d.event for d in ds]  # type: ignore[misc]
    return _common(ds) | {
        "group_id": [t.group_id for t in ts],
        "outcome": [t.outcome.value for t in ts],
        "reward": [t.reward for t in ts],
        "completed_by": [t.completed_by for t in ts],
        "max_policy_version": [t.max_policy_version for t in ts],
        "num_steps": [len(t.steps) for t in ts],
    }


def _score_columns(ds: list[Delivery]) -> Columns:
    ss: list[Score] = [d.event for d in ds]  # type: ignore[misc]
    return _common(ds) | {
        "scorer": [s.scorer for s in ss],
        "composite": [s.composite for s in ss],
    }


def _label_columns(ds: list[Delivery]) -> Columns:
    ls: list[Label] = [d.event for d in ds]  # type: ignore[misc]
    return _common(ds) | {
        "step_index": [x.step_index for x in ls],
        "unsafe": [x.unsafe for x in ls],
        "risk_type": [x.risk_type for x in ls],
        "labeller": [x.labeller for x in ls],
        "answers": [x.answers for x in ls],
    }


def _skill_columns(ds: list[Delivery]) -> Columns:
    ss: list[Skill] = [d.event for d in ds]  # type: ignore[misc]
    return _common(ds) | {
        "skill_id": [s.skill_id for s in ss],
        "title": [s.title for s in ss],
        "text": [f"{s.title}\n{s.applies_when}\n{s.lesson}"[:TEXT_LIMIT] for s in ss],
    }


TABLE_OF: dict[type[Event], str] = {
    Step: "steps",
    EpisodeStarted: "episodes",
    EpisodeEnded: "episodes",
    Verdict: "verdicts",
    Trajectory: "trajectories",
    Score: "scores",
    Skill: "skills",
    Label: "labels",
}
"""Which table each event type goes to."""

COLUMNS: dict[str, ColumnMaker] = {
    "steps": _step_columns,
    "episodes": _episode_columns,
    "verdicts": _verdict_columns,
    "trajectories": _trajectory_columns,
    "scores": _score_columns,
    "skills": _skill_columns,
    "labels": _label_columns,
}
"""How a table's deliveries become its columns."""

TOPICS = ("steps", "episodes", "verdicts", "trajectories", "scores", "skills", "labels")
"""Catalogue topics the sink consumes."""

SCALAR_INDEXES: dict[str, list[tuple[str, str]]] = {
    name: [
        ("event_id", "BTREE"),
        ("episode_id", "BTREE"),
        ("policy_version", "BTREE"),
        ("produced_at", "BTREE"),
        ("env", "BITMAP"),
    ]
    for name in FIELDS
}
SCALAR_INDEXES["verdicts"] += [("risk_type", "BITMAP"), ("severity", "BITMAP")]
SCALAR_INDEXES["steps"] += [("task_id", "BTREE")]
