"""DataElf's operators over meaning and value: search by meaning, diverse selection, data
value scores and the poisoning audit. They borrow the embedder, the scorer and the
poisoning audit from the run's :class:`~.operators.Services` (the CLI wires them)."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from ...schemas import Trajectory
from .operators import Column, Operator, PlanError, RunContext, column_of, put_column, register


def trajectory_text(t: Trajectory) -> str:
    """What a trajectory says: its prompt and every step's messages, one per line."""
    messages = [*t.prompt, *(m for s in t.steps for m in s.messages)]
    return "\n".join(m.content for m in messages if isinstance(m.content, str))


def row_texts(table: pa.Table, ctx: RunContext, column: str | None, step: str) -> list[str]:
    """The text of each row: ``column``, else the rows' ``text``, else (trajectories) what
    the trajectory says."""
    if column is None and "text" in table.column_names:
        column = "text"
    if column is not None:
        return ["" if v is None else str(v) for v in column_of(table, column, step).to_pylist()]
    if ctx.source_table == "trajectories" and "payload" in table.column_names:
        payloads = table["payload"].to_pylist()
        return [trajectory_text(Trajectory.model_validate_json(p)) for p in payloads]
    raise PlanError(
        f"{step}: the rows have no text; name one with column= (they have "
        f"{', '.join(table.column_names)})"
    )


def row_vectors(table: pa.Table, ctx: RunContext, column: str | None, step: str) -> np.ndarray:
    """Unit vectors of the rows' texts (:func:`row_texts`)."""
    embed = ctx.need("embed", step)
    texts = row_texts(table, ctx, column, step)
    return np.asarray(embed(texts), dtype=np.float32) if texts else np.zeros((0, 1), np.float32)


@register
class Search(Operator):
    """The ``k`` rows nearest in meaning to ``query`` (cosine similarity of MiniLM vectors
    of their text), nearest first, with their ``similarity``."""

    NAME: ClassVar[str] = "search"
    ADDS: ClassVar[tuple[str, ...]] = ("similarity",)
    op: Literal["search"] = "search"
    query: str = Field(min_length=1, max_length=500)
    k: int = Field(default=20, ge=1)
    column: Column | None = None

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        vectors = row_vectors(table, ctx, self.column, "search")
        if not len(vectors):
            return put_column(table, "similarity", pa.array([], pa.float64()))
        query = np.asarray(ctx.need("embed", "search")([self.query])[0], dtype=np.float32)
        similarity = np.round(vectors @ query, 6)
        order = np.argsort(-similarity, kind="stable")[: self.k]
        found = table.take(pa.array(order))
        return put_column(found, "similarity", pa.array(similarity[order].astype(float)))


@register
class Diverse(Operator):
    """``k`` rows far apart in meaning (greedy k-center over their texts' vectors), the
    rows with the highest ``weight`` (a numeric column, e.g. ``value``) favoured."""

    NAME: ClassVar[str] = "diverse"
    op: Literal["diverse"] = "diverse"
    k: int = Field(ge=1)
    weight: Column | None = None
    column: Column | None = None

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        pick = ctx.need("diverse", "diverse")
        weights = None
        if self.weight is not None:
            values = column_of(table, self.weight, "diverse").to_pylist()
            weights = np.array([0.0 if v is None else float(v) for v in values])
        if table.num_rows <= self.k:
            return table
        vectors = row_vectors(table, ctx, self.column, "diverse")
        return table.take(pa.array(pick(vectors, self.k, weights)))


@register
class Score(Operator):
    """Each trajectory's data value: ``quality`` and ``complexity`` (DEITA-style
    heuristics), ``novelty`` (how far it lies from the others in meaning), ``safety`` (from
    its verdicts), with ``lm`` also ``ifd`` and ``perplexity`` by the language model; and
    their weighted mean, ``value``."""

    NAME: ClassVar[str] = "score"
    ADDS: ClassVar[tuple[str, ...]] = (
        "quality",
        "complexity",
        "novelty",
        "safety",
        "ifd",
        "perplexity",
        "value",
    )
    op: Literal["score"] = "score"
    lm: bool = False

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        if ctx.source_table != "trajectories" or "payload" not in table.column_names:
            raise PlanError(
                "score: scores trajectories; start the plan with select(table='trajectories')"
            )
        score = ctx.need("score", "score")
        trajectories = [Trajectory.model_validate_json(p) for p in table["payload"].to_pylist()]
        rows = score(trajectories, self.lm) if trajectories else []
        names = [*sorted({k for r in rows for k in r} - {"value"}), "value"]
        for name in names:
            values = [r.get(name) for r in rows]
            table = put_column(table, name, pa.array(values, pa.float64()))
        return table


@register
class Poison(Operator):
    """Rows whose ``label`` (a column) looks poisoned: a backdoor trigger (a rare phrase
    that, not the content, decides the label) or a label flip (the nearest rows in meaning
    mostly carry another label). Adds ``poison`` (``trigger``, ``flip`` or empty) and
    ``poison_detail``."""

    NAME: ClassVar[str] = "poison"
    ADDS: ClassVar[tuple[str, ...]] = ("poison", "poison_detail")
    op: Literal["poison"] = "poison"
    label: Column
    column: Column | None = None

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        find = ctx.need("poison", "poison")
        labels = [
            "" if v is None else str(v) for v in column_of(table, self.label, "poison").to_pylist()
        ]
        ids = column_of(table, "event_id", "poison").to_pylist()
        texts = row_texts(table, ctx, self.column, "poison")
        found = find(ids, texts, labels) if ids else []
        table = put_column(table, "poison", pa.array([f for f, _ in found], pa.string()))
        return put_column(table, "poison_detail", pa.array([d for _, d in found], pa.string()))
