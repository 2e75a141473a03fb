"""A DataElf plan: a list of operator calls, validated before it runs, run into a folder
with the plan and a manifest of what it wrote, so a saved plan reruns to the same bytes."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, SerializeAsAny, ValidationError, field_validator

from ..location import Db
from .operators import (
    MANIFEST_FILE,
    PLAN_FILE,
    Operator,
    PlanError,
    RunContext,
    Services,
    available,
)

PREVIEW_ROWS = 20


class Plan(BaseModel):
    """What to do: the intent it answers, and its steps in order."""

    model_config = ConfigDict(extra="forbid")
    intent: str = ""
    steps: list[SerializeAsAny[Operator]] = Field(min_length=1)

    @field_validator("steps", mode="before")
    @classmethod
    def _operators(cls, raw: Any) -> list[Operator]:
        if not isinstance(raw, list):
            raise ValueError("steps must be a list of operator calls ({'op': name, ...})")
        catalogue = available()
        out = []
        for i, step in enumerate(raw):
            if isinstance(step, Operator):
                out.append(step)
                continue
            name = step.get("op") if isinstance(step, dict) else None
            if name not in catalogue:
                raise ValueError(
                    f"steps[{i}].op={name!r}: not an operator; choose one of "
                    f"{', '.join(sorted(catalogue))}"
                )
            try:
                out.append(catalogue[name].model_validate(step))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(f"steps[{i}] ({name}).{where}: {first['msg']}") from None
        named: set[str] = set()
        for i, step in enumerate(out):
            if (i == 0) == step.needs_input:
                raise ValueError(
                    f"steps[{i}] ({step.NAME}): "
                    + (
                        "a plan starts with select (or a read_* of a file)"
                        if i == 0
                        else f"{step.NAME} only starts a plan"
                    )
                )
            name = getattr(step, "name", None)
            if isinstance(name, str):
                if name in named:
                    raise ValueError(f"steps[{i}] ({step.NAME}).name: {name!r} is written twice")
                named.add(name)
        return out

    def pinned(self, now: float) -> Plan:
        """The plan with relative times (``within_days``) made absolute at ``now``."""
        return self.model_copy(update={"steps": [s.pinned(now) for s in self.steps]})

    def located(self, base: Path) -> Plan:
        """The plan with relative file paths (scientific readers) made absolute at ``base``."""
        return self.model_copy(update={"steps": [s.located(base) for s in self.steps]})

    def files(self) -> list[Path]:
        """Files outside the database the plan reads."""
        return [path for step in self.steps for path in step.files()]

    def describe(self) -> str:
        """The plan in words, one numbered step a line."""
        lines = [f"{i + 1}. {step.describe()}" for i, step in enumerate(self.steps)]
        return "\n".join(([f"intent: {self.intent}"] if self.intent else []) + lines)


def load_plan(path: Path) -> Plan:
    """A plan from a JSON file (a plan, or a run folder's ``plan.json``): :class:`PlanError`
    naming the file and the field."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise PlanError(f"{path}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise PlanError(f"{path}: not JSON ({exc})") from None
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        said = first["msg"].removeprefix("Value error, ")
        named = said if said.startswith("steps") else f"{where}: {said}"
        raise PlanError(f"{path}: {named}") from None


def run_plan(
    plan: Plan, db: Db, out: Path, services: Services | None = None
) -> tuple[pa.Table, dict[str, str]]:
    """Run ``plan`` on ``db``, writing into ``out`` (created): its outputs, ``plan.json``
    and ``manifest.json`` (sha256 of every output). Returns the last table and the
    manifest. ``services`` are what operators borrow (the auditor, the scorer, ...); with
    a ``mask`` it masks what the run writes (a private run: :mod:`.private`)."""
    out.mkdir(parents=True, exist_ok=True)
    plan = plan.pinned(time.time())
    ctx = RunContext(db, out, services or Services())
    table: pa.Table | None = None
    for step in plan.steps:
        table = step.apply(table, ctx)
    assert table is not None
    (out / PLAN_FILE).write_text(plan.model_dump_json(indent=2) + "\n")
    manifest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in ctx.outputs}
    manifest["rows"] = str(table.num_rows)
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return table, manifest


def preview(table: pa.Table, rows: int = PREVIEW_ROWS) -> str:
    """The first rows of a result as text (raw payloads and vectors left out)."""
    from .operators import HIDDEN_COLUMNS

    shown = table.select([n for n in table.column_names if n not in HIDDEN_COLUMNS])
    lines = ["\t".join(shown.column_names)]
    for record in shown.slice(0, rows).to_pylist():
        lines.append("\t".join(str(v) for v in record.values()))
    if table.num_rows > rows:
        lines.append(f"… {table.num_rows - rows} more rows")
    return "\n".join(lines)
