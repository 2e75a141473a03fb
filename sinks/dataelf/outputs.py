"""The outputs a request asks for, as it says them: a file (``export``) or a chart (``plot``)
only when asked (:func:`asked_outputs`), in the format named, under the file name the
request gives, a chart of what its aggregate made, split and titled as said
(:func:`said_outputs`)."""

from __future__ import annotations

import re
from typing import Any

from .corpus import EXTENSION
from .plan import Plan

ASKS_FOR = {
    "export": re.compile(
        r"\b(?:export|save|saved|write|dump|download|send me|file|csv|comma-separated|parquet"
        r"|jsonl?|chat|otel|otlp|opentelemetry|spreadsheet|excel|fine-tuning|sft|spans|traces)\b"
    ),
    "plot": re.compile(r"\b(?:plot|plotted|chart|graph|visuali[sz]e|draw|bars?|picture|figure)\b"),
}
"""The words that ask for an output: a file (``export``), a picture (``plot``)."""


FORMAT_WORDS = {
    "csv": re.compile(r"\b(?:csv|comma-separated|spreadsheet|excel)\b"),
    "parquet": re.compile(r"\bparquet\b"),
    "otel": re.compile(r"\b(?:otel|otlp|opentelemetry)\b"),
    "chat_jsonl": re.compile(r"\b(?:chat|fine-tuning|sft)\b"),
}
"""How a request names each export format."""


def _said_format(said: str, table: str) -> str | None:
    found = [f for f, words in FORMAT_WORDS.items() if words.search(said)]
    if table != "trajectories":
        found = [f for f in found if f in ("csv", "parquet")]
    return found[0] if len(found) == 1 else None


def _chart(steps: list[Any]) -> dict[str, Any] | None:
    """The bar chart of the plan's last aggregate: x its first group, series its second, y
    its mean (the corpus's own convention)."""
    aggregate = next((s for s in reversed(steps) if s.NAME == "aggregate"), None)
    if aggregate is None or not aggregate.by:
        return None
    plot: dict[str, Any] = {"op": "plot", "x": aggregate.by[0], "name": "chart.png"}
    if len(aggregate.by) > 1:
        plot["series"] = aggregate.by[1]
    if aggregate.mean:
        plot["y"] = f"mean_{aggregate.mean}"
    return plot


def asked_outputs(intent: str, plan: Plan) -> Plan:
    """``plan`` with the outputs the request asks for and no other: no file is written and no
    chart drawn unless it says so (:data:`ASKS_FOR`); a chart it asks for of counts or means
    is drawn, a file format it names (:data:`FORMAT_WORDS`) is the one exported."""
    said = intent.lower()
    steps = [s for s in plan.steps if s.NAME not in ASKS_FOR or ASKS_FOR[s.NAME].search(said)]
    names = [s.NAME for s in steps]
    if ASKS_FOR["plot"].search(said) and "plot" not in names and (chart := _chart(steps)):
        steps.append(chart)
    fmt = _said_format(said, plan.steps[0].table)
    if fmt and "export" not in names and "plot" not in names:
        table = plan.steps[0].table
        steps.append({"op": "export", "format": fmt, "name": f"{table}.{EXTENSION[fmt]}"})
    elif fmt:
        steps = [
            s.model_copy(update={"format": fmt}) if getattr(s, "NAME", "") == "export" else s
            for s in steps
        ]
    return Plan.model_validate(
        {
            "intent": plan.intent,
            "steps": [
                s if isinstance(s, dict) else s.model_dump(exclude_unset=True) | {"op": s.NAME}
                for s in steps
            ],
        }
    )


FILE_NAMED = re.compile(r"(?<![\w/.-])((?:[\w-]+\.)*[\w-]+\.(png|csv|parquet|jsonl))\b", re.I)
"""A file name the request gives, with its extension."""
TITLED = re.compile(r"\btitled?\b[^'\"“‘]{0,20}['\"“‘]([^'\"”’]+)['\"”’]", re.I)
"""A chart's title, quoted ("with the title 'Trajectories per version'")."""


def _chart_of(plot: dict[str, Any], aggregate: Any) -> dict[str, Any]:
    """``plot`` drawing what ``aggregate`` made: x one of its groups, the other its series,
    y its count or its mean (the corpus's own convention, :func:`_chart`)."""
    by = list(aggregate.by)
    if plot.get("x") not in by:
        plot["x"] = by[0]
    others = [g for g in by if g != plot["x"]]
    if plot.get("series") not in others:
        plot.pop("series", None)
        if len(others) == 1:
            plot["series"] = others[0]
    if plot.get("y", "count") not in ("count", f"mean_{aggregate.mean}"):
        plot.pop("y")
    return plot


def said_outputs(intent: str, plan: Plan) -> Plan:
    """``plan`` whose outputs are as the request says them: a ``.png`` it names is the
    chart's file (and, when it names no other file or format, nothing is exported), a
    ``.csv``/``.parquet``/``.jsonl`` it names is the export's, a quoted title is the chart's,
    and a chart after an aggregate draws what that aggregate made (:func:`_chart_of`)."""
    files = FILE_NAMED.findall(intent)
    pictures = [f for f, ext in files if ext.lower() == "png"]
    tables = [(f, ext.lower()) for f, ext in files if ext.lower() != "png"]
    said = intent.lower()
    title = TITLED.search(intent)
    steps: list[dict[str, Any]] = []
    aggregate = None
    for step in plan.steps:
        fields = step.model_dump(exclude_unset=True) | {"op": step.NAME}
        if step.NAME == "aggregate":
            aggregate = step
        if step.NAME == "export":
            if pictures and not tables and not _said_format(said, plan.steps[0].table):
                continue  # "saved as counts.png" asks for a chart, not a file of rows
            if len(tables) == 1:
                name, ext = tables[0]
                fields["name"] = name
                if ext in ("csv", "parquet"):
                    fields["format"] = ext
        if step.NAME == "plot":
            if len(pictures) == 1:
                fields["name"] = pictures[0]
            if title:
                fields["title"] = title.group(1)
            if aggregate is not None and aggregate.by:
                fields = _chart_of(fields, aggregate)
        steps.append(fields)
    return Plan.model_validate({"intent": plan.intent, "steps": steps})
