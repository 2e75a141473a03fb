"""Export a selection of trajectories: OpenAI chat format for fine-tuning (JSONL, Parquet),
or OpenTelemetry GenAI spans (OTLP/JSON) for tracing tools; a dataset card beside the file.

In the ``otel`` format each episode is a trace: an ``invoke_agent`` span (the prompt as
``gen_ai.input.messages``), one ``chat`` span per step (its new messages in, the agent's turn
out) and, under it, one ``execute_tool`` span per tool call (arguments, result); verdicts are
``gen_ai.evaluation.result`` span events on their step's ``chat`` span (episode verdicts on
the ``invoke_agent`` span). Trajectories record no step times, so spans are laid out 1 ms
per step, ending at the trajectory's assembly time; ids derive from the episode id, so an
export repeated gives the same trace. ``.json`` holds one request, ``.jsonl`` one per episode
per line (as the OpenTelemetry Collector's file exporter writes).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.parquet as pq

from ..schemas import ChatMessage, Trajectory, Verdict
from ..schemas import otel as o
from .lance import sql_quote, tag_versions
from .location import Db, location
from .query import QueryError, Selection, open_table, where_clause


def chat_record(t: Trajectory) -> dict:
    """One fine-tuning record: ``messages`` (prompt, then every step's turns) + metadata."""
    messages = [m.model_dump(exclude_none=True) for m in t.prompt]
    for step in t.steps:
        messages += [m.model_dump(exclude_none=True) for m in step.messages]
    return {
        "messages": messages,
        "metadata": {
            "episode_id": t.episode_id,
            "group_id": t.group_id,
            "task_id": t.task_id,
            "env": t.env,
            "outcome": t.outcome.value,
            "reward": t.reward,
            "reward_components": t.reward_components,
            "policy_version": t.policy_version,
            "max_policy_version": t.max_policy_version,
            "trajectory_id": t.event_id,
        },
    }


def check_output(out: Path, fmt: str, min_reward: float | None) -> None:
    """Refuse (:class:`QueryError`) an unknown format, an ``--out`` whose suffix says
    another one, and a ``--min-reward`` that is not finite."""
    if fmt not in ("jsonl", "parquet", "otel"):
        raise QueryError(f"--format {fmt!r}: choose jsonl, parquet or otel")
    if fmt == "otel" and out.suffix not in (".json", ".jsonl"):
        raise QueryError(
            f"--out {out}: OTLP/JSON goes to a .json file (one request) or .jsonl (one a line)"
        )
    if fmt != "otel" and out.suffix in (".jsonl", ".parquet") and out.suffix != f".{fmt}":
        raise QueryError(
            f"--out {out} ends in {out.suffix} but --format is {fmt}: pass --format "
            f"{out.suffix[1:]} or an --out ending in .{fmt}"
        )
    if min_reward is not None and not math.isfinite(min_reward):
        raise QueryError(f"--min-reward {min_reward}: give a finite number, e.g. --min-reward 0.5")


def export_trajectories(
    db_path: Db,
    out: Path,
    sel: Selection,
    *,
    fmt: Literal["jsonl", "parquet", "otel"] = "jsonl",
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
    trajectories = [Trajectory.model_validate_json(p) for p in payloads]
    records = [chat_record(t) for t in trajectories]
    if tag:  # before the file is written: a tag that cannot be made leaves nothing behind
        try:
            tag_versions(db_path, tag, ["trajectories"], {"trajectories": version})
        except RuntimeError as exc:  # lance: "Ref conflict error: tag … already exists"
            raise QueryError(
                f"--tag {tag!r}: {exc}; choose a tag not used yet (tags keep versions)"
            ) from None
    out.parent.mkdir(parents=True, exist_ok=True)
    otel: dict[str, int] = {}
    if fmt == "otel":
        otel = _write_otel(out, trajectories, stored_verdicts(db_path, trajectories))
    elif fmt == "jsonl":
        with out.open("w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        pq.write_table(
            pa.table(
                {
                    "messages": [json.dumps(r["messages"], ensure_ascii=False) for r in records],
                    **{
                        k: [r["metadata"][k] for r in records]
                        for k in (
                            "episode_id",
                            "group_id",
                            "task_id",
                            "env",
                            "outcome",
                            "reward",
                            "policy_version",
                            "max_policy_version",
                            "trajectory_id",
                        )
                    },
                }
            ),
            out,
        )
    facts = {
        "file": str(out),
        "format": fmt,
        "records": len(records),
        "messages": sum(len(r["messages"]) for r in records),
        "by_env": dict(Counter(r["metadata"]["env"] for r in records)),
        "by_outcome": dict(Counter(r["metadata"]["outcome"] for r in records)),
        "policy_versions": sorted({r["metadata"]["policy_version"] for r in records}),
        "source": f"{location(db_path).shown()} table trajectories",
        "lancedb_version": version,
        "lancedb_tag": tag,
        "selection": sel.describe() + ("" if min_reward is None else f" AND reward>={min_reward}"),
        "exported_at": time.time(),
        **otel,
    }
    _write_card(out, facts)
    return facts


def stored_verdicts(db_path: Db, trajectories: list[Trajectory]) -> dict[str, list[Verdict]]:
    """The stored verdicts of the trajectories' episodes (none if there is no verdicts table)."""
    try:
        table = open_table(db_path, "verdicts")
    except QueryError:
        return {}
    ids = sorted({t.episode_id for t in trajectories})
    found: dict[str, list[Verdict]] = {}
    for start in range(0, len(ids), 500):
        chunk = ", ".join(sql_quote(i) for i in ids[start : start + 500])
        rows = table.search().where(f"episode_id IN ({chunk})").select(["payload"])
        for payload in rows.limit(None).to_arrow()["payload"].to_pylist():
            verdict = Verdict.model_validate_json(payload)
            found.setdefault(verdict.episode_id, []).append(verdict)
    return found


def _write_otel(
    out: Path, trajectories: list[Trajectory], verdicts: dict[str, list[Verdict]]
) -> dict[str, int]:
    """Write the episodes as OTLP/JSON; returns span and event counts for the card."""
    traces = [episode_spans(t, verdicts.get(t.episode_id, [])) for t in trajectories]
    with out.open("w", encoding="utf-8") as fh:
        if out.suffix == ".jsonl":
            for spans in traces:
                fh.write(json.dumps(otlp_request(spans), ensure_ascii=False) + "\n")
        else:
            json.dump(otlp_request([s for spans in traces for s in spans]), fh, ensure_ascii=False)
    spans = [s for t in traces for s in t]
    return {"spans": len(spans), "verdict_events": sum(len(s.get("events", [])) for s in spans)}


def otlp_request(spans: list[dict]) -> dict:
    """An ``ExportTraceServiceRequest`` (OTLP/JSON) holding ``spans``."""
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": o.attributes({"service.name": "safactory"})},
                "scopeSpans": [
                    {"scope": {"name": "safactory.export", "version": "1"}, "spans": spans}
                ],
            }
        ]
    }


def episode_spans(t: Trajectory, verdicts: list[Verdict]) -> list[dict]:
    """One episode as GenAI spans: ``invoke_agent``, a ``chat`` per step, an
    ``execute_tool`` per tool call; verdicts as ``gen_ai.evaluation.result`` events."""
    trace = t.trace_id if _is_hex(t.trace_id, 32) else o.hex_id(16, "trace", t.episode_id)
    ms = 1_000_000
    start = int(t.produced_at * 1e9) - (len(t.steps) + 1) * ms
    root_id = o.hex_id(8, t.episode_id, "invoke_agent")
    by_step: dict[int | None, list[Verdict]] = {}
    indexes = {s.step_index for s in t.steps}
    for v in sorted(verdicts, key=lambda v: (v.produced_at, v.event_id)):
        by_step.setdefault(v.step_index if v.step_index in indexes else None, []).append(v)
    common = {o.CONVERSATION: t.episode_id}
    root = _span(
        trace,
        root_id,
        None,
        f"{o.INVOKE_AGENT} {t.env}",
        o.SPAN_INTERNAL,
        start,
        start + (len(t.steps) + 1) * ms,
        {
            o.OPERATION: o.INVOKE_AGENT,
            o.AGENT_NAME: t.env,
            **common,
            o.INPUT_MESSAGES: o.messages_json(t.prompt),
            "safactory.env": t.env,
            "safactory.task_id": t.task_id,
            "safactory.group_id": t.group_id,
            "safactory.outcome": t.outcome.value,
            "safactory.reward": float(t.reward),
            "safactory.reward_components": json.dumps(t.reward_components),
            "safactory.policy_version": t.policy_version,
            "safactory.max_policy_version": t.max_policy_version,
            "safactory.trajectory_id": t.event_id,
            "safactory.completed_by": t.completed_by,
        },
        by_step.get(None, []),
    )
    if t.outcome.value == "error":
        root["status"] = {"code": o.STATUS_ERROR, "message": "episode ended in error"}
    spans = [root]
    for i, step in enumerate(t.steps):
        begin = start + (i + 1) * ms
        chat_id = o.hex_id(8, t.episode_id, "chat", str(step.step_index))
        said = [m for m in step.messages if m.role == "assistant"]
        heard = [m for m in step.messages if m.role not in ("assistant", "tool")]
        spans.append(
            _span(
                trace,
                chat_id,
                root_id,
                o.CHAT,
                o.SPAN_CLIENT,
                begin,
                begin + ms // 2,
                {
                    o.OPERATION: o.CHAT,
                    **common,
                    o.INPUT_MESSAGES: o.messages_json(heard),
                    o.OUTPUT_MESSAGES: o.messages_json(said),
                    o.OUTPUT_TOKENS: len(step.token_ids) if step.token_ids else None,
                    "safactory.step.index": step.step_index,
                    "safactory.policy_version": step.policy_version,
                    "safactory.step.blocked": step.blocked or None,
                },
                by_step.get(step.step_index, []),
            )
        )
        results = {m.tool_call_id: m for m in step.messages if m.role == "tool"}
        calls = [c for m in said for c in m.tool_calls or []]
        for n, call in enumerate(calls):
            result = results.get(call.id)
            spans.append(
                _span(
                    trace,
                    o.hex_id(8, t.episode_id, "tool", str(step.step_index), str(n)),
                    chat_id,
                    f"{o.EXECUTE_TOOL} {call.function.name}",
                    o.SPAN_INTERNAL,
                    begin + ms // 4,
                    begin + ms // 2,
                    {
                        o.OPERATION: o.EXECUTE_TOOL,
                        **common,
                        o.TOOL_NAME: call.function.name,
                        o.TOOL_TYPE: "function",
                        o.TOOL_CALL_ID: call.id,
                        o.TOOL_ARGUMENTS: call.function.arguments,
                        o.TOOL_RESULT: None if result is None else _content(result),
                    },
                    [],
                )
            )
    return spans


def _span(
    trace: str,
    span_id: str,
    parent: str | None,
    name: str,
    kind: int,
    start: int,
    end: int,
    attrs: dict,
    verdicts: list[Verdict],
) -> dict:
    span = {
        "traceId": trace,
        "spanId": span_id,
        "name": name,
        "kind": kind,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": o.attributes(attrs),
    }
    if parent:
        span["parentSpanId"] = parent
    if verdicts:
        span["events"] = [_verdict_event(v) for v in verdicts]
    return span


def _verdict_event(v: Verdict) -> dict:
    """A verdict as a ``gen_ai.evaluation.result`` event (the rest under ``safactory.``)."""
    explanation = v.reason or "; ".join(e.text for e in v.evidence) or None
    return {
        "timeUnixNano": str(int(v.produced_at * 1e9)),
        "name": o.EVALUATION_EVENT,
        "attributes": o.attributes(
            {
                o.EVALUATION_NAME: v.checker,
                o.EVALUATION_SCORE: float(v.score),
                o.EVALUATION_LABEL: v.decision.value,
                o.EVALUATION_EXPLANATION: explanation,
                "safactory.verdict.id": v.event_id,
                "safactory.verdict.kind": v.SCHEMA_NAME,
                "safactory.verdict.risk_type": v.risk_type,
                "safactory.verdict.severity": v.severity.value,
                "safactory.verdict.checker_kind": v.checker_kind,
                "safactory.verdict.checker_version": v.checker_version,
                "safactory.verdict.source_event_id": v.source_event_id,
                "safactory.verdict.step_index": v.step_index,
                "safactory.verdict.evidence": json.dumps(
                    [e.model_dump(exclude_none=True) for e in v.evidence]
                )
                if v.evidence
                else None,
            }
        ),
    }


def _content(message: ChatMessage) -> str:
    return o.text_of(message.content) or ""


def _is_hex(text: str | None, size: int) -> bool:
    return text is not None and len(text) == size and all(c in "0123456789abcdef" for c in text)


def _write_card(out: Path, facts: dict) -> None:
    if facts["format"] == "otel":
        what = "as OpenTelemetry GenAI spans (OTLP/JSON), one trace per episode"
    else:
        what = (
            "in OpenAI chat format (`messages`), one per episode, with reward and provenance "
            "in `metadata`"
        )
    lines = [
        f"# Dataset card: {out.name}",
        "",
        f"Agent trajectories from Safactory, {what}.",
        "",
        *(f"- **{k}**: {v}" for k, v in facts.items()),
        "",
    ]
    card_path(out).write_text("\n".join(lines), encoding="utf-8")


def card_path(out: Path) -> Path:
    """Where the card of an export lives."""
    return out.with_name(out.name + ".card.md")
