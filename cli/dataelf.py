"""``safactory data``: DataElf's commands. Only wiring: plans and operators live in
:mod:`safactory.sinks.dataelf`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from ..sinks.dataelf.limits import Limits
from .errors import console, fail, failing
from .options import DbOption, lance_location

if TYPE_CHECKING:
    from ..sinks.dataelf.planner import Planner
    from ..sinks.location import Db

app = typer.Typer(help="DataElf: data tasks run as validated plans of typed operators")


@app.command("ask")
def ask(
    intent: Annotated[
        str | None,
        typer.Argument(help="what you want, in plain language (planned by the planner)"),
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
    planner_url: Annotated[
        str | None,
        typer.Option(
            envvar="SF_PLANNER_URL",
            help="an OpenAI-compatible endpoint (…/v1) to plan with; default: SmolLM2 here",
        ),
    ] = None,
    planner_model: Annotated[
        str, typer.Option(envvar="SF_PLANNER_MODEL", help="the endpoint's model name")
    ] = "default",
    planner_key: Annotated[
        str | None,
        typer.Option(envvar="SF_PLANNER_API_KEY", show_default=False, help="the endpoint's key"),
    ] = None,
    private: Annotated[
        bool,
        typer.Option(
            "--private",
            help="only aggregates, plots and masked exports leave the sandbox (every plan "
            "runs in one: no network, database read-only); raw rows are never printed",
        ),
    ] = False,
    memory_limit: Annotated[
        int, typer.Option(min=64, help="MiB of memory the sandboxed job may use")
    ] = Limits.memory_mb,
    cpu_limit: Annotated[
        int, typer.Option(min=1, help="CPU seconds the sandboxed job may use")
    ] = Limits.cpu_s,
    output_limit: Annotated[
        int, typer.Option(min=1, help="MiB the largest file the job writes may hold")
    ] = Limits.output_mb,
) -> None:
    """Plan INTENT (or read --plan), print the plan in words and as JSON, then run it on
    confirmation (--yes to skip). The run folder holds the plan with its results, so
    `--plan <out>/plan.json` reruns it to the same bytes. Operators: select, where,
    aggregate, histogram, top, sample, join, search, dedupe, diverse, score, reaudit,
    poison, export, plot."""
    from ..infra.models import ModelError
    from ..sinks.dataelf.operators import PlanError
    from ..sinks.dataelf.plan import load_plan
    from ..sinks.dataelf.planner import PlanQuestion
    from ..sinks.dataelf.private import run_anywhere
    from ..sinks.query import QueryError
    from ..streams.audit.mask import mask_text
    from ..tools.dataelf_job import JOB, services

    if (plan_file is None) == (intent is None):
        raise fail("give an intent to plan or --plan FILE (a saved plan), one of the two", code=2)
    try:
        if plan_file is not None:
            plan = load_plan(plan_file)
        else:
            planner = _planner(lance_location(db), planner_url, planner_model, planner_key)
            plan = planner.plan(intent or "")
    except PlanQuestion as exc:  # the planner asks back instead of guessing: one line
        typer.echo(str(exc))
        raise typer.Exit(2) from None
    except (PlanError, QueryError, ModelError) as exc:  # a model error says how to fetch it
        raise fail(str(exc), code=2) from None
    console.print(escape(plan.describe()), highlight=False)
    console.print(plan.model_dump_json(indent=2), highlight=False, markup=False)
    if not yes and not typer.confirm("run it?"):
        raise typer.Exit(1)
    where = lance_location(db)
    if not where.remote and not Path(where.uri).is_dir():
        why = "the sink writes one (`safactory worker sink`); pass --db to read another"
        raise fail(f"no LanceDB at {where.shown()}: {why}", code=2)
    limits = Limits(memory_limit, cpu_limit, output_limit)
    mask = mask_text if private else None
    with failing(PlanError, QueryError, code=2):
        shown, manifest = run_anywhere(
            plan, where, out, job=JOB, services=services, mask=mask, limits=limits
        )
    console.print(shown, highlight=False, markup=False)
    files = ", ".join(sorted(k for k in manifest if k != "rows")) or "none"
    rows = f"{manifest['rows']} rows; " if "rows" in manifest else ""  # private: not said
    console.print(f"{rows}wrote {files} in {out}", highlight=False)


def _planner(db: Db, url: str | None, model: str, key: str | None) -> Planner:
    """The endpoint's planner when one is configured, else SmolLM2 here (:mod:`background`)."""
    from ..agents import env_names
    from ..infra.embedding import MiniLM
    from ..sinks.dataelf.background import local_planner
    from ..sinks.dataelf.planner import EndpointPlanner, Prompt, known_values
    from ..streams.audit.registry import available

    values = known_values(db, env_names(), list(available()))
    if url:
        return EndpointPlanner(Prompt(MiniLM().embed, values=values), url, model, api_key=key)
    console.print(escape((local := local_planner(values))[1]), highlight=False)
    return local[0]
