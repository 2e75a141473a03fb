"""DataElf's operator catalogue: typed data operations a plan is made of.

Each operator is a pydantic model (its parameters, validated before anything runs) with
``apply(table, ctx)``: it takes the table the previous step produced (None for the first)
and returns the next one; operators that write (``export``, ``plot``) write into the run's
output folder and pass their input on. New operators register by name (:func:`register`,
or the ``safactory.operators`` entry point), like checkers.
"""

from __future__ import annotations

import functools
import json
import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, ClassVar, Literal, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ...schemas import Severity, Step, Trajectory, Verdict
from ..export import chat_record, episode_spans, otlp_request, stored_verdicts
from ..lance import sql_quote
from ..location import Db
from ..query import TABLES, Selection, open_table, where_clause
from .masking import mask_columns, mask_value

HIDDEN_COLUMNS = frozenset({"payload", "vector", "source_topic", "source_partition"})
"""Columns a ``select`` leaves out unless it names them (raw events, embeddings, plumbing)."""


Mask = Callable[[str], str]
"""Text with the secrets and personal data in it replaced."""


class Judged(Protocol):
    """One step's new judgement: its summary verdict and the blocking risk types."""

    summary: Verdict
    risk_types: list[str]


Rejudge = Callable[[list[Step], list[str] | None, list[str]], Mapping[str, Judged]]
"""Steps, checker names (None: the default set), names left out → judgement by event id;
ValueError for an unknown name."""

Embed = Callable[[list[str]], np.ndarray]
"""Texts → unit-length vectors, one row each (cosine similarity is their dot product)."""

ScoreValue = Callable[[list[Trajectory], bool], list[dict[str, float]]]
"""Trajectories, whether to use the language model → each one's value components and its
composite ``value``."""

FindPoison = Callable[[list[str], list[str], list[str]], list[tuple[str, str]]]
"""Record ids, texts, labels → each record's finding (``trigger``, ``flip`` or ``""``) and
what it rests on."""

PickDiverse = Callable[[np.ndarray, int, np.ndarray | None], list[int]]
"""Vectors, k, optional weights → the indexes of k rows far apart (greedy k-center)."""


Column = Annotated[str, Field(json_schema_extra={"x-kind": "column"})]
Finite = Annotated[float, Field(allow_inf_nan=False)]
"""A float that is a number (NaN and infinities are refused, naming the field)."""
Instant = Annotated[float, Field(allow_inf_nan=False, ge=0.0, le=1e11)]
"""A Unix time in seconds (up to the year 5138)."""
Count = Annotated[int, Field(ge=1, le=1_000_000)]
PLAN_FILE = "plan.json"
MANIFEST_FILE = "manifest.json"
"""What the host writes into a run's folder beside the plan's own outputs."""


def _output_name(name: str) -> str:
    if name.startswith(".") or name in (PLAN_FILE, MANIFEST_FILE):
        raise ValueError(
            f"{name!r} is not a name the run may write: no name starting with '.', and "
            f"not {PLAN_FILE} or {MANIFEST_FILE} (the host writes those)"
        )
    return name


OutputName = Annotated[str, Field(pattern=r"^[\w.-]{1,80}$"), AfterValidator(_output_name)]
"""A file the run writes into its folder."""
"""A column's name (the planner's grammar narrows it to the columns that exist)."""
Checker = Annotated[str, Field(json_schema_extra={"x-kind": "checker"})]
"""A checker's registered name."""


class PlanError(ValueError):
    """A plan that cannot run; the message names the step, the field and the fix."""


@dataclass(frozen=True)
class Services:
    """What operators borrow from other components; the CLI wires them (DataElf itself
    imports no auditor or scorer)."""

    mask: Mask | None = None
    """Private mode: what leaves (exports, aggregate keys) is masked with it (:mod:`.private`)."""
    rejudge: Rejudge | None = None
    """Judges steps again, for ``reaudit``."""
    score: ScoreValue | None = None
    """Data value, for ``score``."""
    poison: FindPoison | None = None
    """The poisoning audit, for ``poison``."""
    diverse: PickDiverse | None = None
    """Diverse selection, for ``diverse``."""
    embed: Embed | None = None
    """Embeddings, for ``search``, ``diverse`` and near-duplicate ``dedupe``."""


@dataclass
class RunContext:
    """What a run's operators share: the database, the output folder, what was written."""

    db: Db
    out: Path
    services: Services = field(default_factory=Services)
    outputs: list[Path] = field(default_factory=list)
    source_table: str | None = None
    """The table the rows came from (``export`` needs it to know what a row is)."""

    @property
    def mask(self) -> Mask | None:
        """The private run's masker (None in a plain run)."""
        return self.services.mask

    def need(self, service: str, step: str) -> Callable:
        """The wired ``service``, or a :class:`PlanError` saying this run has none."""
        found = getattr(self.services, service)
        if found is None:
            raise PlanError(f"{step}: this run has no {service} wired (safactory data ask has)")
        return found


class Operator(BaseModel):
    """Base of every operator: ``op`` is its registered name."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    NAME: ClassVar[str]
    needs_input: ClassVar[bool] = True
    ADDS: ClassVar[tuple[str, ...]] = ()
    """Columns this operator adds to (or makes of) the rows."""

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        """The table after this step."""
        raise NotImplementedError

    def pinned(self, now: float) -> Operator:
        """This step with times relative to ``now`` made absolute (most steps: itself)."""
        return self

    def files(self) -> list[Path]:
        """Files outside the database this step reads (most steps: none)."""
        return []

    def located(self, base: Path) -> Operator:
        """This step with relative file paths made absolute against ``base``."""
        return self

    def describe(self) -> str:
        """The step in words (what ``data ask`` prints before it runs a plan)."""
        args = ", ".join(f"{k}={v!r}" for k, v in self.model_dump(exclude={"op"}).items() if v)
        return f"{self.NAME}({args})"


_REGISTRY: dict[str, type[Operator]] = {}


def register(cls: type[Operator]) -> type[Operator]:
    """Make ``cls`` usable in plans under ``cls.NAME``."""
    _REGISTRY[cls.NAME] = cls
    return cls


def available() -> dict[str, type[Operator]]:
    """Every operator by name: the built-in ones and those of installed packages."""
    _load_operators(tuple(sys.path))
    return dict(_REGISTRY)


@functools.cache
def _load_operators(path: tuple[str, ...]) -> None:
    """Register the operators over meaning, the scientific readers (imported here, so the
    package itself loads nothing heavy) and the operators of the packages installed on
    ``path``, once for each import path: scanning the entry points took 25 ms, and every
    plan validates (building the planner's corpus took 66 s of it)."""
    from . import meaning, science  # noqa: F401

    for entry in entry_points(group="safactory.operators"):
        if entry.name not in _REGISTRY:
            register(entry.load())


def column_of(table: pa.Table, name: str, step: str) -> pa.ChunkedArray:
    """Column ``name`` of ``table``, or a :class:`PlanError` naming the columns there."""
    if name not in table.column_names:
        raise PlanError(
            f"{step}: no column {name!r}; the rows here have {', '.join(table.column_names)}"
        )
    return table[name]


def put_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    """``table`` with column ``name`` set to ``values``: replaced where a step before wrote
    it (a plan that scores twice keeps one column), appended otherwise."""
    if name in table.column_names:
        return table.set_column(table.column_names.index(name), name, values)
    return table.append_column(name, values)


@register
class Select(Operator):
    """Rows of a stored table, filtered as ``safactory query`` filters them."""

    NAME: ClassVar[str] = "select"
    needs_input: ClassVar[bool] = False
    op: Literal["select"] = "select"
    table: Literal["steps", "episodes", "verdicts", "trajectories", "scores", "skills"]
    env: Annotated[str, Field(json_schema_extra={"x-kind": "env"})] | None = None
    task: str | None = None
    risk_type: Annotated[str, Field(json_schema_extra={"x-kind": "risk_type"})] | None = None
    min_severity: Severity | None = None
    policy_version: int | None = Field(default=None, ge=0)
    min_policy_version: int | None = Field(default=None, ge=0)
    since: Instant | None = None
    until: Instant | None = None
    within_days: Finite | None = Field(default=None, gt=0, le=36_500)
    """The last this many days: turned into ``since`` when the plan runs (:meth:`pinned`),
    so the saved plan reruns on the same rows."""
    columns: list[Column] | None = None
    """Columns to keep (default: all but raw payloads and vectors)."""

    def pinned(self, now: float) -> Select:
        if self.within_days is None:
            return self
        since = now - self.within_days * 86400.0
        since = since if self.since is None else max(since, self.since)
        return self.model_copy(update={"since": round(since, 3), "within_days": None})

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert self.table in TABLES
        if self.within_days is not None:
            raise PlanError("select: within_days is pinned to since before a plan runs")
        target = open_table(ctx.db, self.table)
        selection = Selection(
            env=self.env,
            task=self.task,
            risk_type=self.risk_type,
            min_severity=self.min_severity,
            policy_version=self.policy_version,
            min_policy_version=self.min_policy_version,
            since=self.since,
            until=self.until,
        )
        where = where_clause(ctx.db, self.table, selection)
        names = self.columns or [n for n in target.schema.names if n not in HIDDEN_COLUMNS]
        if self.table in ("trajectories", "steps", "episodes") and "payload" not in names:
            names = [*names, "payload"]  # for ``export``; csv and parquet leave it out
        unknown = sorted(set(names) - set(target.schema.names))
        if unknown:
            raise PlanError(
                f"select: table {self.table!r} has no column(s) {', '.join(unknown)}; it has "
                f"{', '.join(n for n in target.schema.names if n != 'vector')}"
            )
        query = target.search().select(names)
        if where:
            query = query.where(where)
        rows = query.limit(None).to_arrow()
        ctx.source_table = self.table
        return rows.sort_by([("event_id", "ascending")]) if "event_id" in names else rows


@register
class Where(Operator):
    """Rows whose ``column`` equals ``equals``, or lies within [``min``, ``max``]."""

    NAME: ClassVar[str] = "where"
    op: Literal["where"] = "where"
    column: Column
    equals: str | int | float | bool | None = None
    min: Finite | None = None
    max: Finite | None = None

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        values = column_of(table, self.column, "where")
        mask = pc.is_valid(values)
        try:
            if self.equals is not None:
                wanted = pa.scalar(self.equals).cast(values.type)
                mask = pc.and_(mask, pc.equal(values, wanted))
            if self.min is not None:
                mask = pc.and_(mask, pc.greater_equal(values, self.min))
            if self.max is not None:
                mask = pc.and_(mask, pc.less_equal(values, self.max))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            given = {"equals": self.equals, "min": self.min, "max": self.max}
            shown = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None)
            raise PlanError(
                f"where: column {self.column!r} holds {values.type}; {shown} cannot be "
                "compared with it"
            ) from None
        return table.filter(mask)


@register
class Aggregate(Operator):
    """Counts per group of ``by`` columns (and the mean of ``mean`` if given: of a yes/no
    column, its rate), sorted by the groups."""

    NAME: ClassVar[str] = "aggregate"
    ADDS: ClassVar[tuple[str, ...]] = ("count", "mean_*")
    op: Literal["aggregate"] = "aggregate"
    by: list[Column] = Field(min_length=1)
    mean: Column | None = None

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        for name in [*self.by, *([self.mean] if self.mean else [])]:
            column_of(table, name, "aggregate")
        aggregations: list[tuple] = [([], "count_all")]  # rows, nulls in the keys included
        if self.mean and pa.types.is_boolean(table.schema.field(self.mean).type):
            at = table.schema.get_field_index(self.mean)  # a boolean's mean is a rate
            table = table.set_column(at, self.mean, pc.cast(table[self.mean], pa.float64()))
        if self.mean:
            kind = table.schema.field(self.mean).type
            if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
                raise PlanError(
                    f"aggregate: mean needs a number or yes/no column; {self.mean!r} holds {kind}"
                )
            aggregations.append((self.mean, "mean"))
        grouped = table.group_by(self.by, use_threads=False).aggregate(aggregations)
        names = {"count_all": "count", f"{self.mean}_mean": f"mean_{self.mean}"}
        grouped = grouped.rename_columns([names.get(n, n) for n in grouped.column_names])
        ordered = [*self.by, "count", *([f"mean_{self.mean}"] if self.mean else [])]
        grouped = grouped.select(ordered).sort_by([(b, "ascending") for b in self.by])
        return mask_columns(grouped, ctx.mask) if ctx.mask else grouped


@register
class Histogram(Operator):
    """How many rows fall in each of ``bins`` equal-width bins of a numeric ``column``
    (rows where it is missing left out): ``bin_low``, ``bin_high``, ``count``."""

    NAME: ClassVar[str] = "histogram"
    ADDS: ClassVar[tuple[str, ...]] = ("bin_low", "bin_high", "count")
    op: Literal["histogram"] = "histogram"
    column: Column
    bins: int = Field(default=10, ge=1, le=1000)

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        values = column_of(table, self.column, "histogram").to_pylist()
        try:
            numbers = np.array([float(v) for v in values if v is not None])
        except (TypeError, ValueError):
            raise PlanError(f"histogram: column {self.column!r} is not numeric") from None
        counts, edges = np.histogram(numbers, bins=self.bins) if len(numbers) else ([], [0.0])
        return pa.table(
            {
                "bin_low": pa.array([float(e) for e in edges[:-1]], pa.float64()),
                "bin_high": pa.array([float(e) for e in edges[1:]], pa.float64()),
                "count": pa.array([int(c) for c in counts], pa.int64()),
            }
        )


@register
class Top(Operator):
    """The ``k`` rows with the highest (or lowest) ``column``."""

    NAME: ClassVar[str] = "top"
    op: Literal["top"] = "top"
    column: Column
    k: Count
    lowest: bool = False

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        column_of(table, self.column, "top")
        order = "ascending" if self.lowest else "descending"
        keys = [(self.column, order)]
        if "event_id" in table.column_names:
            keys.append(("event_id", "ascending"))  # ties in a fixed order
        return table.sort_by(keys).slice(0, self.k)


@register
class Sample(Operator):
    """``k`` rows drawn at random with ``seed`` (the same rows on every run)."""

    NAME: ClassVar[str] = "sample"
    op: Literal["sample"] = "sample"
    k: Count
    seed: int = Field(default=0, ge=0, le=2**32 - 1)

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        if table.num_rows <= self.k:
            return table
        picked = sorted(random.Random(self.seed).sample(range(table.num_rows), self.k))
        return table.take(picked)


@register
class Join(Operator):
    """Each row with the matching rows of a stored ``table`` (``left_on`` here equal to
    ``right_on`` there; default: the verdicts of each step), its ``columns`` added with the
    table's name as prefix; rows without a match are kept (``inner`` drops them)."""

    NAME: ClassVar[str] = "join"
    op: Literal["join"] = "join"
    table: Literal["steps", "episodes", "verdicts", "trajectories", "scores", "skills"] = "verdicts"
    ADDS: ClassVar[tuple[str, ...]] = ("<table>_*",)
    left_on: Column = "event_id"
    right_on: Column = "source_event_id"
    columns: list[Column] = Field(
        default_factory=lambda: ["checker", "risk_type", "severity", "decision"], min_length=1
    )
    inner: bool = False

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        column_of(table, self.left_on, "join")
        other = open_table(ctx.db, self.table)
        unknown = sorted({self.right_on, *self.columns} - set(other.schema.names))
        if unknown:
            raise PlanError(
                f"join: table {self.table!r} has no column(s) {', '.join(unknown)}; it has "
                f"{', '.join(n for n in other.schema.names if n not in HIDDEN_COLUMNS)}"
            )
        names = list(dict.fromkeys([self.right_on, *self.columns]))  # the key may be asked for
        stored = other.search().select(names).limit(None).to_arrow()
        right = pa.table(
            {
                self.right_on: stored[self.right_on],
                **{f"{self.table}_{c}": stored[c] for c in dict.fromkeys(self.columns)},
            }
        )
        joined = table.join(
            right,
            keys=self.left_on,
            right_keys=self.right_on,
            join_type="inner" if self.inner else "left outer",
            use_threads=False,
        )
        order = [
            (self.left_on, "ascending"),
            *((f"{self.table}_{c}", "ascending") for c in self.columns),
        ]
        return joined.sort_by(order)


@register
class Dedupe(Operator):
    """The first row of each group of rows whose ``columns`` hold the same text once case
    and runs of whitespace are set aside; with ``near``, also every later row whose text is
    at least that similar in meaning (cosine) to a row kept."""

    NAME: ClassVar[str] = "dedupe"
    op: Literal["dedupe"] = "dedupe"
    columns: list[Column] = Field(min_length=1)
    near: Finite | None = Field(default=None, gt=0.0, le=1.0)

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        values = [column_of(table, c, "dedupe").to_pylist() for c in self.columns]
        texts = [
            " ".join(" ".join(str(v).casefold().split()) for v in row)
            for row in zip(*values, strict=True)
        ]
        vectors = None
        if self.near is not None and texts:
            vectors = np.asarray(ctx.need("embed", "dedupe")(texts), dtype=np.float32)
        seen: set[str] = set()
        kept: list[int] = []
        for i, text in enumerate(texts):
            if text in seen:
                continue
            if (
                vectors is not None
                and kept
                and float(np.max(vectors[kept] @ vectors[i])) >= self.near
            ):
                continue
            seen.add(text)
            kept.append(i)
        return table.take(pa.array(kept, pa.int64()))


@register
class Reaudit(Operator):
    """Judge the rows' steps again with a chosen checker set (default: the fast tier, rules
    and heuristics) less ``without``: each episode's selected steps in order, each with the
    ones before it as context. Adds ``reaudit_decision``, ``reaudit_risk_types`` and
    ``reaudit_reason``, the stored step verdict's ``stored_decision`` and ``changed``
    (the two differ)."""

    NAME: ClassVar[str] = "reaudit"
    ADDS: ClassVar[tuple[str, ...]] = (
        "reaudit_decision",
        "reaudit_risk_types",
        "reaudit_reason",
        "stored_decision",
        "changed",
    )
    op: Literal["reaudit"] = "reaudit"
    checkers: list[Checker] | None = None
    without: list[Checker] = Field(default_factory=list)

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        if ctx.source_table != "steps" or "payload" not in table.column_names:
            raise PlanError("reaudit: judges steps; start the plan with select(table='steps')")
        rejudge = ctx.need("rejudge", "reaudit")
        steps = [Step.model_validate_json(p) for p in table["payload"].to_pylist()]
        try:
            judged = rejudge(steps, self.checkers, self.without)
        except ValueError as exc:
            raise PlanError(f"reaudit: {exc}") from None
        audits = [judged[s.event_id] for s in steps]
        summaries = {a.summary.checker for a in audits}
        stored = _stored_decisions(ctx, summaries.pop()) if summaries else {}
        before = [stored.get(s.event_id) for s in steps]
        now = [a.summary.decision.value for a in audits]
        columns = {
            "reaudit_decision": (now, pa.string()),
            "reaudit_risk_types": ([",".join(a.risk_types) for a in audits], pa.string()),
            "reaudit_reason": ([a.summary.reason for a in audits], pa.string()),
            "stored_decision": (before, pa.string()),
            "changed": (
                [b is not None and b != n for b, n in zip(before, now, strict=True)],
                pa.bool_(),
            ),
        }
        for name, (values, kind) in columns.items():  # typed: no rows is not a null column
            table = put_column(table, name, pa.array(values, type=kind))
        return table


def _stored_decisions(ctx: RunContext, checker: str) -> dict[str, str]:
    """Stored step verdicts of ``checker``: step event id → decision."""
    verdicts = open_table(ctx.db, "verdicts")
    rows = (
        verdicts.search()
        .where(f"checker = {sql_quote(checker)}")
        .select(["source_event_id", "decision"])
        .limit(None)
        .to_arrow()
    )
    return dict(zip(rows["source_event_id"].to_pylist(), rows["decision"].to_pylist(), strict=True))


@register
class Export(Operator):
    """Write the rows: ``chat_jsonl`` (trajectories as OpenAI chat records), ``otel``
    (trajectories as OpenTelemetry GenAI traces with their verdicts, OTLP/JSON a line per
    episode), ``parquet`` or ``csv`` (the visible columns), into the run's folder as
    ``name``."""

    NAME: ClassVar[str] = "export"
    op: Literal["export"] = "export"
    format: Literal["chat_jsonl", "otel", "parquet", "csv"]
    name: OutputName

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        path = ctx.out / self.name
        if self.format in ("chat_jsonl", "otel"):
            if ctx.source_table != "trajectories" or "payload" not in table.column_names:
                raise PlanError(
                    f"export: {self.format} writes trajectories; start the plan with "
                    "select(table='trajectories')"
                )
            trajectories = [Trajectory.model_validate_json(p) for p in table["payload"].to_pylist()]
            verdicts = stored_verdicts(ctx.db, trajectories) if self.format == "otel" else {}
            with path.open("w", encoding="utf-8") as fh:
                for t in trajectories:
                    if self.format == "otel":
                        record = otlp_request(episode_spans(t, verdicts.get(t.episode_id, [])))
                    else:
                        record = chat_record(t)
                    if ctx.mask:
                        record = mask_value(record, ctx.mask)
                    fh.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        else:
            visible = table.select([n for n in table.column_names if n not in HIDDEN_COLUMNS])
            if ctx.mask:
                visible = mask_columns(visible, ctx.mask)
            if self.format == "parquet":
                pq.write_table(visible, path)
            else:
                import pyarrow.csv as pcsv

                pcsv.write_csv(visible, path)
        ctx.outputs.append(path)
        return table


@register
class Plot(Operator):
    """A bar chart of ``y`` (default ``count``) per ``x``, one bar colour per ``series``
    value, as a PNG named ``name``; in a private run its labels and title are masked before
    they are drawn."""

    NAME: ClassVar[str] = "plot"
    op: Literal["plot"] = "plot"
    x: Column
    y: Column = "count"
    series: Column | None = None
    name: Annotated[OutputName, Field(pattern=r"^[\w.-]{1,76}\.png$")]
    title: str = ""

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        assert table is not None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        shown = ctx.mask or str  # a private chart draws masked labels only
        xs = [shown(str(v)) for v in column_of(table, self.x, "plot").to_pylist()]
        ys = [float(v) for v in column_of(table, self.y, "plot").to_pylist()]
        groups = (
            [shown(str(v)) for v in column_of(table, self.series, "plot").to_pylist()]
            if self.series
            else [""] * len(xs)
        )
        labels = sorted(set(xs), key=_natural)
        kinds = sorted(set(groups))
        width = 0.8 / max(1, len(kinds))
        figure, axes = plt.subplots(figsize=(7, 4), dpi=100)
        for j, kind in enumerate(kinds):
            heights = {x: y for x, y, g in zip(xs, ys, groups, strict=True) if g == kind}
            axes.bar(
                [i + j * width for i in range(len(labels))],
                [heights.get(x, 0.0) for x in labels],
                width=width,
                label=kind or None,
            )
        axes.set_xticks([i + width * (len(kinds) - 1) / 2 for i in range(len(labels))], labels)
        axes.set_xlabel(self.x)
        axes.set_ylabel(self.y)
        axes.set_title(shown(self.title) if self.title else f"{self.y} per {self.x}")
        if self.series and xs:  # no rows, no bars to name
            axes.legend(title=self.series, fontsize="small")
        figure.tight_layout()
        path = ctx.out / self.name
        figure.savefig(path, metadata={"Software": None})  # no version stamp: reruns match
        plt.close(figure)
        ctx.outputs.append(path)
        return table


def _natural(text: str) -> tuple[int, float | str]:
    try:
        return (0, float(text))
    except ValueError:
        return (1, text)
