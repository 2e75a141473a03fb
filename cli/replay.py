"""``safactory replay``: re-ask the log a question (re-audit, re-execute, backfill).

Every command reads topics without a consumer group, so the live workers' committed offsets
are never read or moved; what a replay publishes carries the ``sf-replay`` header and ids
derived with its replay id, so the original records stay as they were.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from ..schemas import Severity
from .errors import console, err, failing, get_settings, progress
from .options import CheckersOption, DbOption, JudgeTimeoutOption, lance_location

app = typer.Typer(
    help="Replay the log: re-audit past steps, re-run past episodes, rebuild LanceDB tables.",
    no_args_is_help=True,
)

FromOpt = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="start: an offset (on every partition, e.g. 1200), unix "
        "seconds (1738324800) or an ISO time (2025-01-31T12:00, UTC)",
    ),
]
ToOpt = Annotated[
    str | None,
    typer.Option(
        "--to",
        help="end (exclusive), like --from; default: the end of the topic when the replay starts",
    ),
]
EpisodeOpt = Annotated[
    list[str] | None, typer.Option("--episode", help="only this episode id (repeatable)")
]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", help="only this env (repeatable)")]
WithAlertOpt = Annotated[
    Severity | None,
    typer.Option(
        "--with-alert", help="only episodes with an original alert at or above this severity"
    ),
]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="write the report as JSON here")]


@contextmanager
def progress_bar(what: str) -> Iterator[tuple[Any, Any]]:
    """A rich progress bar; yields (add_to_total, advance) callbacks."""
    with progress(TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True) as bars:
        bar = bars.add_task(what, total=None)

        def total(n: int) -> None:
            bars.update(bar, total=(bars.tasks[0].total or 0) + n)

        def advance(n: int) -> None:
            bars.advance(bar, n)

        yield total, advance


ThreadsOpt = Annotated[
    int, typer.Option("--threads", min=1, help="model checkers' encoder threads (1: one core)")
]


def _write_json(out: Path | None, report: dict[str, Any]) -> None:
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    console.print(f"wrote {out}")


@app.command("audit")
def audit(
    start: FromOpt = None,
    end: ToOpt = None,
    episode: EpisodeOpt = None,
    env: EnvOpt = None,
    with_alert: WithAlertOpt = None,
    checkers: CheckersOption = None,
    judge_timeout: JudgeTimeoutOption = 2.0,
    context_limit: Annotated[int, typer.Option(min=3, help="steps of context per episode")] = 32,
    replay_id: Annotated[
        str | None,
        typer.Option(
            help="id of this replay (default: a new one); rerunning one id republishes "
            "the same ids, which sinks deduplicate"
        ),
    ] = None,
    threads: ThreadsOpt = 1,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="publish nothing; only print and write the diff")
    ] = False,
    out: OutOpt = None,
    show: Annotated[int, typer.Option(min=0, help="raised / cleared alerts listed")] = 10,
) -> None:
    """Re-audit past steps with a checker set and diff its alerts against the originals.

    Reads the steps topic between --from and --to with no consumer group, judges each step
    with its episode's earlier steps (never shed), publishes verdicts and alerts with the
    header sf-replay=<replay id> and ids derived from it (unless --dry-run), then prints the
    alerts newly raised, cleared and kept per risk type and per env.
    """
    from ..streams.audit.engine import configured_engine  # not loaded for --help
    from ..streams.replay.audit import AuditWindow, Progress, reaudit
    from ..streams.replay.tables import print_diff

    with failing(ValueError, broker=OSError):
        window = AuditWindow.of(start, end, episode, env, with_alert)
        settings = get_settings()
        engine = configured_engine(checkers, judge_timeout, threads)
        with progress_bar(f"re-auditing {settings.topic('steps')}") as (total, advance):
            rerun = reaudit(
                settings,
                engine,
                window,
                replay_id=replay_id,
                context_limit=context_limit,
                publish=not dry_run,
                progress=Progress(total, advance),
            )
            diff = asyncio.run(rerun)
    print_diff(console, diff, show)
    _write_json(out, diff.as_json())


@app.command("sink")
def sink(
    db: DbOption = None,
    table: Annotated[
        list[str] | None,
        typer.Option("--table", help="table to rebuild (repeatable; default: every table)"),
    ] = None,
    embed: Annotated[
        bool, typer.Option(help="MiniLM vectors for steps and skills (as the sink's --embed)")
    ] = False,
) -> None:
    """Rebuild LanceDB tables from the log: write every record a table does not hold yet.

    Reads each table's topic from its beginning with no consumer group; a dropped table is
    rebuilt whole, an intact one is left as it is (rows are skipped by offset and event id).
    """
    from ..infra.embedding import MiniLM
    from ..sinks.backfill import backfill
    from ..sinks.tables import TOPICS

    settings = get_settings()
    where = lance_location(db)
    chosen = table or list(TOPICS)
    embedder = MiniLM() if embed else None
    with failing(ValueError, broker=OSError), progress_bar(f"backfilling {where}") as bar:
        total, advance = bar
        report = asyncio.run(
            backfill(settings, where, chosen, embedder=embedder, on_total=total, on_advance=advance)
        )
    result = Table(title=f"backfill of {where} from {settings.topic_prefix}*")
    for column in ("table", "records read", "rows written"):
        result.add_column(column, justify="left" if column == "table" else "right")
    for name in chosen:
        result.add_row(name, str(report.read.get(name, 0)), str(report.written.get(name, 0)))
    console.print(result)
    if report.undecodable:
        console.print(f"{report.undecodable} undecodable records skipped (see sf.dlq)")


@app.command("run")
def run(
    episode: EpisodeOpt = None,
    env: EnvOpt = None,
    with_alert: WithAlertOpt = None,
    unsafe: Annotated[
        bool, typer.Option("--unsafe", help="only episodes the environment judged unsafe")
    ] = False,
    limit: Annotated[int | None, typer.Option(min=1, help="at most this many episodes")] = None,
    policy_version: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="the version the re-runs should use (default: the latest "
            "announced on the policy topic); workers run the version they "
            "hold, and every episode that ran another is reported",
        ),
    ] = None,
    checkers: CheckersOption = None,
    threads: ThreadsOpt = 1,
    replay_id: Annotated[str | None, typer.Option(help="id of this replay (default: new)")] = None,
    timeout: Annotated[
        float, typer.Option(min=1, help="seconds to wait for the re-run episodes to end")
    ] = 300.0,
    trajectory_wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="seconds to wait for the re-runs' trajectories (an "
            "assembler must run; else rewards are task rewards)",
        ),
    ] = 0.0,
    out: OutOpt = None,
) -> None:
    """Run past episodes again through the simulation workers and compare before / after.

    Rebuilds each chosen episode's task (env, spec, seed, attack plan) from the log, puts it
    on the tasks topic for the running simulation workers, waits for the new episodes to
    end, and compares per episode: unsafe (the environment's ground truth), reward, and the
    first step the checker set alerts on (both sides judged now by the same checkers).
    """
    from ..streams.audit.engine import configured_engine
    from ..streams.replay import new_replay_id
    from ..streams.replay import rerun as rr
    from ..streams.replay.tables import print_comparison

    settings = get_settings()
    rid = replay_id or new_replay_id()

    @contextmanager
    def display(count: int, version: int | None) -> Iterator[Callable[[int], None]]:
        shown = "any" if version is None else version
        tasks = settings.topic("tasks")
        console.print(
            f"replay {rid}: re-running {count} episodes (policy version {shown}) via {tasks}"
        )
        with progress_bar("episodes re-run") as (total, advance):
            total(count)
            yield advance

    with failing(rr.ReplayRunError, ValueError, broker=OSError):
        rows, version = asyncio.run(
            rr.rerun(
                settings,
                configured_engine(checkers, 2.0, threads),
                rid,
                episodes=episode,
                envs=env,
                with_alert=with_alert,
                unsafe=unsafe,
                limit=limit,
                policy_version=policy_version,
                timeout_s=timeout,
                trajectory_wait_s=trajectory_wait,
                display=display,
            )
        )
    report = rr.summary(rows, rid, version)
    print_comparison(console, rows, report)
    off = rr.off_version(rows, version)
    if off:
        ran = ", ".join(f"v{v}" for v in sorted({r.version_after for r in off}))
        err.print(
            f"[yellow]warning:[/yellow] {len(off)} episodes ran on {ran}, not "
            f"v{version}: workers run the version they hold; start one with "
            f"`safactory simulate worker --policy-version {version}`"
        )
    _write_json(out, report)
