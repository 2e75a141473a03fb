"""``safactory data``: DataElf's commands. Only wiring: plans and operators live in
:mod:`safactory.sinks.dataelf`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from .data import DbOption, lance_location
from .errors import fail as _fail

app = typer.Typer(help="DataElf: data tasks run as validated plans of typed operators")
console = Console()


@app.command("ask")
def ask(
    intent: Annotated[
        str | None, typer.Argument(help="what you want, in plain language (needs a planner)")
    ] = None,
    plan_file: Annotated[
        Path | None,
        typer.Option("--plan", help="a saved plan (JSON: {'intent', 'steps': [{'op': ...}, ...]})"),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="folder for the run: outputs, plan.json, manifest.json")
    ] = Path("dataelf-run"),
    db: DbOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="run without asking")] = False,
    private: Annotated[
        bool,
        typer.Option(
            "--private",
            help="run in a sandbox (no network, database read-only); only aggregates, plots "
            "and masked exports leave, raw rows are never printed",
        ),
    ] = False,
) -> None:
    """Print a plan in words and as JSON, then run it on confirmation (--yes to skip).
    The run folder holds the plan with its results, so `--plan <out>/plan.json` reruns it
    to the same bytes. Operators: select, where, aggregate, top, sample, join, reaudit,
    dedupe, export, plot."""
    from ..sinks.dataelf.operators import PlanError
    from ..sinks.dataelf.plan import load_plan, preview, run_plan
    from ..sinks.dataelf.private import run_private
    from ..sinks.query import QueryError
    from ..streams.audit.mask import mask_text
    from ..streams.audit.rejudge import rejudge
    from .dataelf_job import JOB

    if plan_file is None:
        raise _fail(
            f"no --plan given for {intent!r}: turning plain language into a plan is not built "
            "yet; write the plan as JSON (docs/DATAELF.md) and pass --plan FILE",
            code=2,
        )
    try:
        plan = load_plan(plan_file)
    except PlanError as exc:
        raise _fail(str(exc), code=2) from None
    console.print(escape(plan.describe()), highlight=False)
    console.print(plan.model_dump_json(indent=2), highlight=False, markup=False)
    if not yes and not typer.confirm("run it?"):
        raise typer.Exit(1)
    try:
        if private:
            shown, manifest = run_private(plan, lance_location(db), out, mask=mask_text, job=JOB)
        else:
            table, manifest = run_plan(plan, lance_location(db), out, rejudge=rejudge)
            shown = preview(table)
    except (PlanError, QueryError) as exc:
        raise _fail(str(exc), code=2) from None
    console.print(shown, highlight=False, markup=False)
    files = ", ".join(sorted(k for k in manifest if k != "rows")) or "none"
    rows = f"{manifest['rows']} rows; " if "rows" in manifest else ""  # private: not said
    console.print(f"{rows}wrote {files} in {out}", highlight=False)
