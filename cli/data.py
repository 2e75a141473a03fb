"""Data-platform commands: the sink and assembler workers, ``query`` and ``export``."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from ..infra import aio
from .errors import fail as _fail
from .errors import get_settings

if TYPE_CHECKING:  # lancedb loads only when a command needs it
    from ..sinks.location import LanceLocation
    from ..sinks.query import Selection

console = Console()

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        show_default=False,
        help="LanceDB database: a folder or s3://bucket/prefix (default: SF_LANCE_URI, or "
        "lance_uri in the config, else ./lancedb; storage options: SF_LANCE_STORAGE, AWS_*)",
    ),
]


def lance_location(db: str | None) -> LanceLocation:
    """``--db``, else the configured ``lance_uri``, with the configured storage options.
    ``SF_LANCEDB`` (the old name) fails instead of being ignored."""
    import os

    from ..sinks.location import LanceLocation

    if "SF_LANCEDB" in os.environ:
        raise _fail(
            "SF_LANCEDB was renamed SF_LANCE_URI (a folder or s3://bucket/prefix); rename it"
        )
    return LanceLocation.configured(get_settings(), db)


def sink(
    db: DbOption = None,
    group: Annotated[
        str, typer.Option(help="consumer group, one per database (scoped by the topic prefix)")
    ] = "safactory-sink",
    embed: Annotated[
        bool, typer.Option(help="embed step and skill text with MiniLM for --like search")
    ] = True,
    max_records: Annotated[
        int, typer.Option(min=1, help="most records per write (one LanceDB commit per table)")
    ] = 5000,
    gather: Annotated[
        float, typer.Option(min=0, help="seconds a record may wait for others to share a write")
    ] = 2.0,
    maintain_every: Annotated[
        float, typer.Option(min=1, help="seconds between compaction / index / cleanup passes")
    ] = 60.0,
    keep_versions: Annotated[
        float, typer.Option(min=0, help="minutes of untagged table versions kept by cleanup")
    ] = 10.0,
    idle_exit: Annotated[
        float | None, typer.Option(help="exit after this many idle seconds (backfills)")
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="log every batch")] = False,
) -> None:
    """Store steps, episodes, verdicts, trajectories, scores and skills in LanceDB.

    Each event once (idempotent on the event id); records are gathered into few large
    writes, offsets are committed only after a write is durable; indexes, compaction and
    cleanup of untagged old versions run periodically. SIGINT / SIGTERM stop it cleanly.
    """
    from datetime import timedelta

    from ..infra.embedding import MiniLM as MiniLMEmbedder
    from ..sinks.worker import SinkOptions, run_sink

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING)
    options = SinkOptions(
        db_path=lance_location(db),
        group_id=group,
        max_records=max_records,
        gather_s=gather,
        maintain_every_s=maintain_every,
        keep_versions=timedelta(minutes=keep_versions),
        idle_timeout_s=idle_exit,
    )
    embedder = MiniLMEmbedder() if embed else None
    try:
        result = aio.run(run_sink(get_settings(), options, embedder))
    except ValueError as exc:
        raise _fail(str(exc)) from None
    console.print(f"sink stopped: {result.stats}")


def assemble(
    verdict_timeout: Annotated[
        float, typer.Option(help="seconds after an episode ends to wait for its verdicts")
    ] = 30.0,
    episode_timeout: Annotated[
        float, typer.Option(help="seconds of silence before an unended episode is abandoned")
    ] = 900.0,
    require_verdicts: Annotated[
        bool, typer.Option(help="wait for episode-level verdicts (off: complete at the end)")
    ] = True,
    checker: Annotated[
        list[str] | None,
        typer.Option(help="a checker whose episode verdict is required (repeatable; default any)"),
    ] = None,
    rule: Annotated[
        Path | None,
        typer.Option(
            help='JSON file of the reward rule: {"rule": NAME, ...its parameters} (default rule '
            "outcome-minus-safety, parameters the fields of RewardRule)"
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="info-level logs")] = False,
) -> None:
    """Assemble reward-complete trajectories onto sf.trajectories.

    Folds steps, episode events and verdicts; keyed by group id, sf-policy-version = the
    oldest version in the trajectory; unended episodes are closed as abandoned.
    """
    from pydantic import ValidationError

    from ..streams.assembly import AssemblerConfig, RewardRule
    from ..streams.assembly.processor import AssemblerWorker
    from ..streams.assembly.reward import reward_rule_from_json

    reward_rule = RewardRule()
    if rule is not None:
        try:
            reward_rule = reward_rule_from_json(rule.read_bytes())
        except OSError as exc:
            raise _fail(f"--rule {rule}: cannot read ({exc.strerror})") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise _fail(f"--rule {rule}: field {field!r}: {first['msg']}") from None
        except (LookupError, ValueError) as exc:
            raise _fail(f"--rule {rule}: {exc}") from None
    config = AssemblerConfig(
        reward_rule=reward_rule,
        require_verdicts=require_verdicts,
        required_checkers=frozenset(checker or ()),
        verdict_timeout_s=verdict_timeout,
        episode_timeout_s=episode_timeout,
    )
    AssemblerWorker(get_settings(), config).run("info" if verbose else "warning")


EnvOpt = Annotated[str | None, typer.Option(help="only this environment")]
TaskOpt = Annotated[str | None, typer.Option(help="only this task id")]
RiskOpt = Annotated[str | None, typer.Option(help="only data with a verdict of this risk type")]
SeverityOpt = Annotated[
    str | None, typer.Option(help="only data with a verdict at least this severe (low..critical)")
]
VersionOpt = Annotated[int | None, typer.Option(help="only this policy version")]
MinVersionOpt = Annotated[int | None, typer.Option(help="only policy versions >= this")]
SinceOpt = Annotated[str | None, typer.Option(help="produced at or after (unix s or ISO 8601)")]
UntilOpt = Annotated[str | None, typer.Option(help="produced before (unix s or ISO 8601)")]


def _selection(
    env: str | None,
    task: str | None,
    risk_type: str | None,
    severity: str | None,
    policy_version: int | None,
    min_policy_version: int | None,
    since: str | None,
    until: str | None,
) -> Selection:
    from ..schemas import Severity
    from ..sinks.query import Selection

    min_severity = None
    if severity is not None:
        try:
            min_severity = Severity(severity.lower())
        except ValueError:
            choices = ", ".join(s.value for s in Severity)
            raise _fail(f"--severity {severity!r}: choose one of {choices}") from None
    start, end = _time("--since", since), _time("--until", until)
    return Selection(
        env=env,
        task=task,
        risk_type=risk_type,
        min_severity=min_severity,
        policy_version=policy_version,
        min_policy_version=min_policy_version,
        since=start,
        until=end,
    )


def _time(option: str, text: str | None) -> float | None:
    """Unix seconds of a ``--since``/``--until`` value; a bad one fails naming the option."""
    from ..sinks.query import QueryError, parse_time

    if not text:
        return None
    try:
        moment = parse_time(text)
    except QueryError as exc:
        raise _fail(f"{option}: {exc}") from None
    except (OverflowError, ValueError, OSError):  # a date outside what the clock can convert
        moment = math.nan
    if not math.isfinite(moment):
        raise _fail(
            f"{option} {text!r}: give a finite time, e.g. 1700000000 or 2026-11-30T12:00:00Z"
        )
    return moment


SHOWN = {
    "steps": ["episode_id", "step_index", "env", "task_id", "policy_version", "text"],
    "episodes": ["episode_id", "kind", "env", "task_id", "outcome", "task_reward", "unsafe"],
    "verdicts": ["episode_id", "step_index", "checker", "risk_type", "severity", "decision"],
    "trajectories": ["episode_id", "group_id", "env", "outcome", "reward", "policy_version"],
    "scores": ["episode_id", "scorer", "composite"],
    "skills": ["skill_id", "title", "env", "text"],
}


TableOpt = Annotated[
    str, typer.Option(help="steps, episodes, verdicts, trajectories, scores or skills")
]


def query(
    table: TableOpt = "steps",
    db: DbOption = None,
    env: EnvOpt = None,
    task: TaskOpt = None,
    risk_type: RiskOpt = None,
    severity: SeverityOpt = None,
    policy_version: VersionOpt = None,
    min_policy_version: MinVersionOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    like: Annotated[
        str | None, typer.Option(help="semantic search: rows nearest in meaning to this text")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="most rows to return (at least 1)")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="full stored events, one per line")] = (
        False
    ),
) -> None:
    """Look up stored data by filters or by meaning (--like).

    Filters: env, task, risk type, minimum severity, policy version, time range. Prints a
    table, or the stored events as JSON lines (--json).
    """
    import json

    from rich.table import Table

    from ..sinks.query import QueryError, run_query

    sel = _selection(
        env, task, risk_type, severity, policy_version, min_policy_version, since, until
    )
    embedder = None
    if like is not None and table in ("steps", "skills"):
        from ..infra.embedding import MiniLM as MiniLMEmbedder

        embedder = MiniLMEmbedder()
    try:
        rows = run_query(lance_location(db), table, sel, like=like, embedder=embedder, limit=limit)
    except QueryError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        for row in rows.to_pylist():
            record = json.loads(row["payload"])
            if "_distance" in row:
                record["_distance"] = row["_distance"]
            print(json.dumps(record, ensure_ascii=False))
        return
    shown = SHOWN[table] + [c for c in ("_distance", "_score") if c in rows.column_names]
    out = Table(*shown, title=f"{table}: {rows.num_rows} rows")
    for row in rows.to_pylist():
        out.add_row(*(_cell(row.get(c)) for c in shown))
    console.print(out)


def _cell(value: object) -> str:
    text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    return text.replace("\n", " ")[:80]


def export(
    out: Annotated[
        Path, typer.Option(help="output file (.jsonl, .parquet; otel: .json or .jsonl)")
    ],
    db: DbOption = None,
    fmt: Annotated[
        str, typer.Option("--format", help="jsonl, parquet or otel (OpenTelemetry GenAI spans)")
    ] = "jsonl",
    env: EnvOpt = None,
    task: TaskOpt = None,
    risk_type: RiskOpt = None,
    severity: SeverityOpt = None,
    policy_version: VersionOpt = None,
    min_policy_version: MinVersionOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    min_reward: Annotated[float | None, typer.Option(help="only trajectories rewarded >= this")] = (
        None
    ),
    tag: Annotated[
        str | None, typer.Option(help="tag the LanceDB version read, so cleanup keeps it")
    ] = None,
) -> None:
    """Export trajectories for fine-tuning (OpenAI chat format, JSONL or Parquet), or as
    OpenTelemetry GenAI spans with verdicts as span events (--format otel, OTLP/JSON).

    A dataset card is written beside the file: counts, sources, selection rule, LanceDB
    version (and tag, with --tag, so cleanup keeps that version).
    """
    from ..sinks.export import card_path, export_trajectories
    from ..sinks.query import QueryError

    if fmt not in ("jsonl", "parquet", "otel"):
        raise _fail(f"--format {fmt!r}: choose jsonl, parquet or otel")
    if fmt == "otel" and out.suffix not in (".json", ".jsonl"):
        raise _fail(
            f"--out {out}: OTLP/JSON goes to a .json file (one request) or .jsonl (one a line)"
        )
    if fmt != "otel" and out.suffix in (".jsonl", ".parquet") and out.suffix != f".{fmt}":
        raise _fail(
            f"--out {out} ends in {out.suffix} but --format is {fmt}: pass --format "
            f"{out.suffix[1:]} or an --out ending in .{fmt}"
        )
    if min_reward is not None and not math.isfinite(min_reward):
        raise _fail(f"--min-reward {min_reward}: give a finite number, e.g. --min-reward 0.5")
    sel = _selection(
        env, task, risk_type, severity, policy_version, min_policy_version, since, until
    )
    where = lance_location(db)
    try:
        facts = export_trajectories(where, out, sel, fmt=fmt, min_reward=min_reward, tag=tag)  # type: ignore[arg-type]
    except QueryError as exc:
        raise _fail(str(exc)) from None
    spans = f" as {facts['spans']} spans" if fmt == "otel" else ""
    console.print(f"wrote {facts['records']} trajectories{spans} to {out}; card {card_path(out)}")


GROUP_HELP = "consumer group (scoped by the topic prefix: NAME-<prefix> unless it is sf.)"
IdleOpt = Annotated[
    float | None, typer.Option(help="exit after this many idle seconds (backfills)")
]


def score(
    model: Annotated[
        Path | None,
        typer.Option(
            help="local Hugging Face causal LM folder for perplexity and IFD "
            "(default: no LM components)"
        ),
    ] = None,
    group: Annotated[str, typer.Option(help=GROUP_HELP)] = "safactory-scorer",
    idle_exit: IdleOpt = None,
) -> None:
    """Score trajectories' data value onto sf.scores.

    Components: quality, complexity, IFD (with --model), novelty, safety; and a composite.
    """
    from ..infra.embedding import MiniLM
    from ..streams.scoring.worker import run_scorer

    lm = None
    if model is not None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ..streams.scoring.perplexity import LMScorer

        if not (model / "config.json").is_file():
            raise _fail(f"--model {model}: no config.json there; give a saved HF model folder")
        lm = LMScorer(
            AutoModelForCausalLM.from_pretrained(model, local_files_only=True),
            AutoTokenizer.from_pretrained(model, local_files_only=True),
        )
    stats = aio.run(
        run_scorer(get_settings(), MiniLM(), lm, group_id=group, idle_timeout_s=idle_exit)
    )
    console.print(f"scorer stopped: {stats}")


def skills(
    group: Annotated[str, typer.Option(help=GROUP_HELP)] = "safactory-skills",
    max_waiting: Annotated[
        int,
        typer.Option(
            min=1,
            help="episodes per partition that may wait for their verdicts or trajectory; "
            "past that the oldest is distilled with what it has",
        ),
    ] = 10_000,
    merge_above: Annotated[
        float, typer.Option(help="cosine similarity above which two lessons are one skill")
    ] = 0.9,
    idle_exit: IdleOpt = None,
) -> None:
    """Distil skills from failed and unsafe trajectories onto sf.skills.

    Lessons come from verdict evidence and the step that went wrong; near-duplicates (by
    embedding) merge into one skill. A trajectory waits for every verdict it names.
    """
    from ..infra.embedding import MiniLM
    from ..streams.skills.library import SkillLibrary
    from ..streams.skills.worker import run_skills

    library = SkillLibrary(MiniLM(), merge_above=merge_above)
    run = run_skills(
        get_settings(), library, group_id=group, max_waiting=max_waiting, idle_timeout_s=idle_exit
    )
    worker = aio.run(run)
    console.print(f"skills worker stopped: {worker.stats}, published {worker.published}")
