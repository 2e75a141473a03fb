"""Counting after a chaos run: the topics read to their end offsets, the LanceDB tables read
whole, and the figures that say whether anything was lost, doubled or left out.

Records are read raw (``sf-schema`` header + JSON payload), not through the codec, so the
count does not depend on the code under test: a record the workers could not decode is
still counted here, and shows up as a dead letter on ``sf.dlq``.

Definitions (all per run, on the run's own topic prefix):

- a table's *expected* rows are the distinct event ids on its source topic; *lost* =
  expected ids with no row; *duplicated* = rows − distinct ids; *unexpected* = stored ids
  that no source record has;
- a step is *in no trajectory* when no trajectory of its episode lists its step index
  (step ids are ``step_id(episode, index)``, so the trajectory names its steps exactly);
- a trajectory is *complete* when it holds every step of its episode seen on ``sf.steps``
  and, if the episode ended, exactly ``num_steps`` steps;
- *acknowledged but missing*: steps the campaign's agent had acknowledged (``acks=all``)
  that are not on ``sf.steps`` at all: loss by the brokers themselves.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from safactory.infra.config import Settings
from safactory.infra.reader import TopicReader
from safactory.infra.topics import admin_client
from safactory.schemas import headers as h
from safactory.schemas import step_id

TABLE_TOPICS = ("steps", "episodes", "verdicts", "trajectories", "scores", "skills")
"""LanceDB tables the sink fills, each from the catalogue topic of the same name."""


@dataclass
class TopicCensus:
    """What the run's topics hold, folded while they are read once."""

    records: Counter[str] = field(default_factory=Counter)
    ids: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    undecodable: Counter[str] = field(default_factory=Counter)
    step_indices: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    """Episode → step indices in the order sf.steps holds them (redeliveries included)."""
    started: set[str] = field(default_factory=set)
    ended: dict[str, int] = field(default_factory=dict)
    """Episode → the step count its end event declared."""
    judged: set[str] = field(default_factory=set)
    """Step event ids that at least one verdict names."""
    trajectories: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    """Episode → its distinct trajectories: {event_id, steps (indices), completed_by}."""
    dead_letters: Counter[str] = field(default_factory=Counter)
    flagged: set[str] = field(default_factory=set)
    """Verdict ids that blocked a step with evidence (confirmed signal: a lesson comes from
    one)."""
    lessons_due: dict[str, tuple[list[str], bool]] = field(default_factory=dict)
    """Episode → (its trajectory's verdict ids, whether its environment found it unsafe):
    what skills need."""
    scored: set[str] = field(default_factory=set)
    """Episodes with a score on sf.scores."""
    taught: set[str] = field(default_factory=set)
    """Episodes some skill on sf.skills names as a source."""

    def fold(self, topic: str, value: bytes | None, headers: Iterable[tuple[str, bytes]]) -> None:
        """Take one record of catalogue topic ``topic`` into account."""
        self.records[topic] += 1
        if topic == "dlq":
            origin = h.header_value(headers, h.ORIGIN_TOPIC) or "?"
            error = (h.header_value(headers, h.ERROR) or "?").split("\n")[0][:90]
            self.dead_letters[f"{origin}: {error}"] += 1
            return
        schema = (h.header_value(headers, h.SCHEMA) or "").split("/")[0]
        try:
            event = json.loads(value or b"")
            event_id = event["event_id"]
        except (ValueError, KeyError, TypeError):
            self.undecodable[topic] += 1
            return
        new = event_id not in self.ids[topic]
        self.ids[topic].add(event_id)
        if schema == "step":
            self.step_indices[event["episode_id"]].append(int(event["step_index"]))
        elif schema == "episode_started":
            self.started.add(event["episode_id"])
        elif schema == "episode_ended":
            self.ended[event["episode_id"]] = int(event.get("num_steps") or 0)
        elif schema == "verdict":
            if event.get("step_index") is not None:
                self.judged.add(event["source_event_id"])
            confirmed = event.get("decision") == "block" and event.get("evidence")
            if confirmed and event.get("step_index") is not None and event.get("choice") is None:
                self.flagged.add(event_id)
        elif schema == "score":
            self.scored.add(event["episode_id"])
        elif schema == "skill":
            self.taught.update(event.get("source_episode_ids", []))
        if schema == "trajectory":
            unsafe = bool((event.get("safety") or {}).get("unsafe"))
            self.lessons_due[event["episode_id"]] = (
                list(event.get("verdict_ids", [])),
                unsafe and bool(event.get("steps")),
            )
        if schema == "trajectory" and new:
            self.trajectories[event["episode_id"]].append(
                {
                    "event_id": event_id,
                    "steps": [int(s["step_index"]) for s in event.get("steps", [])],
                    "completed_by": event.get("completed_by"),
                }
            )


async def topic_partitions(
    settings: Settings, topics: Iterable[str] | None = None
) -> list[TopicPartition]:
    """Every partition of the named topics that exist (default: all under the run's prefix)."""
    admin = admin_client(settings)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = sorted(
            existing & set(topics)
            if topics is not None
            else {t for t in existing if t.startswith(settings.topic_prefix)}
        )
        meta = await admin.describe_topics(wanted) if wanted else []
    finally:
        await admin.close()
    return [
        TopicPartition(t["topic"], p["partition"])
        for t in meta
        for p in sorted(t["partitions"], key=lambda p: p["partition"])
    ]


async def read_topics(settings: Settings, names: Iterable[str]) -> TopicCensus:
    """Read every partition of the named catalogue topics from the start to its end offset."""
    census = TopicCensus()
    by_topic = {settings.topic(n): n for n in names}
    partitions = await topic_partitions(settings, by_topic)
    if not partitions:
        return census
    async with TopicReader(settings, "chaos-census", committed_only=False) as reader:
        await reader.open(partitions, until="end")  # read raw, not through the codec
        async for records in reader:
            for record in records:
                census.fold(by_topic[record.topic], record.value, record.headers)
    return census


@dataclass
class TableCensus:
    """What one LanceDB table holds: every row's event id, and trajectories' step lists."""

    event_ids: list[str] = field(default_factory=list)
    trajectory_steps: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    """Episode → union of step indices over its stored trajectories (trajectories only)."""


def read_tables(db: Path) -> dict[str, TableCensus]:
    """Every table of the sink's database that exists, read whole."""
    from safactory.sinks.location import open_db

    out: dict[str, TableCensus] = {}
    if not db.exists():
        return out
    conn = open_db(db)
    names = set(conn.list_tables().tables)
    for name in TABLE_TOPICS:
        if name not in names:
            continue
        table = conn.open_table(name)
        columns = ["event_id", "payload"] if name == "trajectories" else ["event_id"]
        data = table.search().select(columns).limit(None).to_arrow()
        census = TableCensus(event_ids=data["event_id"].to_pylist())
        if name == "trajectories":
            for payload in data["payload"].to_pylist():
                event = json.loads(payload)
                census.trajectory_steps[event["episode_id"]].update(
                    int(s["step_index"]) for s in event.get("steps", [])
                )
        out[name] = census
    return out


def figures(
    topics: TopicCensus, tables: dict[str, TableCensus], acked_steps: set[str]
) -> dict[str, Any]:
    """Lost, duplicated and orphaned counts per table and for the steps; dead letters."""
    per_table: dict[str, dict[str, int]] = {}
    for name in TABLE_TOPICS:
        expected = topics.ids.get(name, set())
        table = tables.get(name)
        if not expected and table is None:
            continue
        rows = table.event_ids if table else []
        stored = set(rows)
        per_table[name] = {
            "expected": len(expected),
            "rows": len(rows),
            "distinct": len(stored),
            "lost": len(expected - stored),
            "duplicated": len(rows) - len(stored),
            "unexpected": len(stored - expected),
        }
    step_ids = {
        step_id(episode, index): (episode, index)
        for episode, indices in topics.step_indices.items()
        for index in indices
    }
    in_topic_trajectories = {
        step_id(episode, index)
        for episode, trajectories in topics.trajectories.items()
        for t in trajectories
        for index in t["steps"]
    }
    stored_trajectories = tables.get("trajectories")
    in_table_trajectories = {
        step_id(episode, index)
        for episode, indices in (
            stored_trajectories.trajectory_steps.items() if stored_trajectories else ()
        )
        for index in indices
    }
    orphans = set(step_ids) - in_topic_trajectories
    orphans_unended = {s for s in orphans if step_ids[s][0] not in topics.ended}
    orphans_stored = set(step_ids) - in_table_trajectories
    return {
        "topics": {
            name: {"records": topics.records[name], "distinct": len(topics.ids.get(name, ()))}
            for name in sorted(topics.records)
        },
        "undecodable": dict(topics.undecodable),
        "tables": per_table,
        "steps": {
            "distinct": len(step_ids),
            "acked_by_agent": len(acked_steps),
            "acked_but_missing": len(acked_steps - set(step_ids)),
            "in_no_trajectory": len(orphans),
            "in_no_trajectory_of_unended_episodes": len(orphans_unended),
            "in_no_stored_trajectory": len(orphans_stored),
            "without_step_verdict": len(set(step_ids) - topics.judged),
            "episodes_out_of_order": sum(
                1 for indices in topics.step_indices.values() if not _in_order(indices)
            ),
            "orphan_examples": sorted(f"{step_ids[s][0]}#{step_ids[s][1]}" for s in orphans)[:10],
        },
        "trajectories": _trajectory_figures(topics),
        "scores": {
            "trajectories_never_scored": len(set(topics.lessons_due) - topics.scored),
        },
        "skills": _skill_figures(topics),
        "dead_letters": dict(topics.dead_letters.most_common()),
    }


def _in_order(indices: list[int]) -> bool:
    """True when an episode's steps first appear in index order (redeliveries may repeat)."""
    seen: set[int] = set()
    last = -1
    for index in indices:
        if index in seen:
            continue
        if index < last:
            return False
        seen.add(index)
        last = index
    return True


def _trajectory_figures(topics: TopicCensus) -> dict[str, Any]:
    episodes = set(topics.step_indices) | topics.started | set(topics.ended)
    complete = incomplete = 0
    by_completion: Counter[str] = Counter()
    for episode, trajectories in topics.trajectories.items():
        on_topic = set(topics.step_indices.get(episode, ()))
        for t in trajectories:
            by_completion[str(t["completed_by"])] += 1
            held = t["steps"]
            whole = on_topic <= set(held) and len(held) == len(set(held))
            if episode in topics.ended:
                whole = whole and len(held) == topics.ended[episode]
            complete += whole
            incomplete += not whole
    return {
        "episodes": len(episodes),
        "episodes_ended": len(topics.ended),
        "episodes_with_trajectory": len(topics.trajectories),
        "ended_without_trajectory": len(set(topics.ended) - set(topics.trajectories)),
        "episodes_with_several": sum(1 for t in topics.trajectories.values() if len(t) > 1),
        "complete": complete,
        "incomplete": incomplete,
        "completed_by": dict(by_completion),
    }


def _skill_figures(topics: TopicCensus) -> dict[str, Any]:
    """Trajectories that must teach something (confirmed signal: a block with evidence, or
    the environment's own finding that the episode was unsafe) and those no skill names: the
    skills worker lost them."""
    due = {
        episode
        for episode, (verdicts, unsafe) in topics.lessons_due.items()
        if unsafe or any(v in topics.flagged for v in verdicts)
    }
    missing = due - topics.taught
    return {
        "distillable": len(due),
        "in_no_skill": len(missing),
        "examples": sorted(missing)[:10],
    }
