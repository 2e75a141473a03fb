"""Export a selection of trajectories for fine-tuning: OpenAI chat format + a dataset card."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from ..schemas import Trajectory
from .lance import tag_versions
from .query import QueryError, Selection, open_table, where_clause


def chat_record(t: Trajectory) -> dict:
    """One fine-tuning record: ``messages`` (prompt, then every step's turns) + metadata."""
    messages = [m.model_dump(exclude_none=True) for m in t.prompt]
    for step in t.steps:
        messages += [m.model_dump(exclude_none=True) for m in step.messages]
    return {
        "messages": messages,
        "metadata": {
            "episode_id": t.episode_id, "group_id": t.group_id, "task_id": t.task_id,
            "env": t.env, "outcome": t.outcome.value, "reward": t.reward,
            "reward_components": t.reward_components, "policy_version": t.policy_version,
            "max_policy_version": t.max_policy_version, "trajectory_id": t.event_id,
        },
    }  # fmt: skip


def export_trajectories(
    db_path: str | Path,
    out: Path,
    sel: Selection,
    *,
    fmt: Literal["jsonl", "parquet"] = "jsonl",
    min_reward: float | None = None,
    tag: str | None = None,
) -> dict:
    """Write the selected trajectories to ``out`` and a card beside it (``<out>.card.md``).

    With ``tag``, the LanceDB versions read are tagged so cleanup keeps them (training runs
    reproduce their data from the tag). Returns the card's facts.
    """
    table = open_table(db_path, "trajectories")
    version = table.version
    where = where_clause(db_path, "trajectories", sel)
    if min_reward is not None:
        where = " AND ".join(c for c in (where, f"reward >= {float(min_reward)!r}") if c)
    query = table.search().select(["payload"])
    if where:
        query = query.where(where)
    payloads = query.limit(None).to_arrow()["payload"].to_pylist()
    records = [chat_record(Trajectory.model_validate_json(p)) for p in payloads]
    if tag:  # before the file is written: a tag that cannot be made leaves nothing behind
        try:
            tag_versions(db_path, tag, ["trajectories"], {"trajectories": version})
        except RuntimeError as exc:  # lance: "Ref conflict error: tag … already exists"
            raise QueryError(
                f"--tag {tag!r}: {exc}; choose a tag not used yet (tags keep versions)"
            ) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        with out.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        pq.write_table(
            pa.table({
                "messages": [json.dumps(r["messages"], ensure_ascii=False) for r in records],
                **{k: [r["metadata"][k] for r in records]
                   for k in ("episode_id", "group_id", "task_id", "env", "outcome", "reward",
                             "policy_version", "max_policy_version", "trajectory_id")},
            }),
            out,
        )  # fmt: skip
    facts = {
        "file": str(out),
        "format": fmt,
        "records": len(records),
        "messages": sum(len(r["messages"]) for r in records),
        "by_env": dict(Counter(r["metadata"]["env"] for r in records)),
        "by_outcome": dict(Counter(r["metadata"]["outcome"] for r in records)),
        "policy_versions": sorted({r["metadata"]["policy_version"] for r in records}),
        "source": f"{Path(db_path).resolve()} table trajectories",
        "lancedb_version": version,
        "lancedb_tag": tag,
        "selection": sel.describe() + ("" if min_reward is None else f" AND reward>={min_reward}"),
        "exported_at": time.time(),
    }
    _write_card(out, facts)
    return facts


def _write_card(out: Path, facts: dict) -> None:
    lines = [
        f"# Dataset card: {out.name}",
        "",
        "Agent trajectories from Safactory, in OpenAI chat format (`messages`), one per "
        "episode, with reward and provenance in `metadata`.",
        "",
        *(f"- **{k}**: {v}" for k, v in facts.items()),
        "",
    ]
    card_path(out).write_text("\n".join(lines), encoding="utf-8")


def card_path(out: Path) -> Path:
    """Where the card of an export lives."""
    return out.with_name(out.name + ".card.md")
