"""``safactory``: run the local broker, manage topics, and run the factory's workers."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Annotated

import typer
from rich.table import Table

from ..infra.broker import BrokerError
from ..infra.failures import unreachable_broker
from ..infra.local import local_broker, uses_local_broker
from ..infra.teardown import end_now, requested
from ..infra.topics import create_topics, describe_topics, retention_text
from . import audit as _audit
from . import data as _data
from .dataelf import app as dataelf_app
from .demo import demo
from .errors import console, fail, failing, get_settings
from .gateway import gateway
from .label import app as label_app
from .label import review
from .model_server import model_server
from .monitor import monitor
from .replay import app as replay_app
from .serve import serve
from .simulate import app as simulate_app
from .train import train
from .worker import app as worker_app

JsonOption = Annotated[bool, typer.Option("--json", help="machine-readable output")]
app = typer.Typer(
    help="Safactory: discover unsafe agent behaviour, keep it as data, train the fix, verify.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
broker_app = typer.Typer(help="A local single-node Kafka broker (KRaft).", no_args_is_help=True)
topics_app = typer.Typer(help="The topic catalogue of DESIGN.md.", no_args_is_help=True)
app.add_typer(broker_app, name="broker")
app.add_typer(topics_app, name="topics")
app.add_typer(simulate_app, name="simulate")
app.add_typer(replay_app, name="replay")
app.command("demo")(demo)
app.command("train")(train)
app.add_typer(worker_app, name="worker")
worker_app.command("train")(train)  # the trainer started as every worker is
app.add_typer(dataelf_app, name="data")
app.command("audit")(_audit.audit)
app.command("import")(_audit.import_traces)
app.add_typer(label_app, name="label")
app.command("review")(review)
app.command("query")(_data.query)
app.command("export")(_data.export)
app.command("monitor")(monitor)
app.command("serve")(serve)
app.command("model-server")(model_server)
app.command("gateway")(gateway)


@app.command("doctor")
def doctor(json_out: JsonOption = False) -> None:
    """The CPU, its flags and the compute path each embedded model takes here (measured once
    per machine and cached; a path slower than float32 is never taken)."""
    from ..infra.doctor import lines, survey

    report = survey()
    for line in [json.dumps(report, indent=1)] if json_out else lines(report):
        console.print(line, markup=False, highlight=False)


@broker_app.command("up")
def broker_up(
    timeout: Annotated[float, typer.Option(help="seconds to wait for readiness")] = 180.0,
) -> None:
    """Start the local broker (first run fetches the Kafka jars with mvn) and create topics."""
    settings = get_settings()
    if not uses_local_broker(settings):
        raise fail(
            f"SF_KAFKA_BOOTSTRAP={settings.kafka_bootstrap} names another cluster; "
            "unset it to run the local broker"
        )
    broker = local_broker(settings)
    with (
        failing(BrokerError),
        console.status("starting Kafka broker (first run resolves jars from Maven Central)"),
    ):
        status = broker.up(timeout=timeout)
    created = asyncio.run(create_topics(settings))
    new = sum(created.values())
    console.print(
        f"broker up: pid {status.pid}, bootstrap {status.bootstrap}, data {status.data_dir}; "
        f"{new} topics created, {len(created) - new} existed"
    )


@broker_app.command("down")
def broker_down() -> None:
    """Stop the local broker cleanly; its data stays for the next ``up``."""
    stopped = local_broker(get_settings()).down()
    console.print("broker stopped" if stopped else "broker was not running")


@broker_app.command("status")
def broker_status(as_json: JsonOption = False) -> None:
    """Whether the local broker runs, its pid, address and data directory."""
    status = local_broker(get_settings()).status()
    if as_json:
        console.print_json(json.dumps({**status.__dict__, "data_dir": str(status.data_dir)}))
        return
    state = "[green]running[/green]" if status.running else "[yellow]stopped[/yellow]"
    console.print(
        f"{state}  pid={status.pid}  bootstrap={status.bootstrap}  "
        f"kafka={status.kafka_version}  data={status.data_dir}"
    )
    if not status.running:
        raise typer.Exit(code=3)


@broker_app.command("logs")
def broker_logs(
    lines: Annotated[int, typer.Option("-n", "--lines", help="how many lines")] = 50,
) -> None:
    """Print the end of the broker's log."""
    console.print(local_broker(get_settings()).logs(lines), markup=False, highlight=False)


@topics_app.command("create")
def topics_create() -> None:
    """Create every catalogue topic that does not exist yet (idempotent)."""
    with failing(broker=Exception):
        created = asyncio.run(create_topics(get_settings()))
    for name, new in created.items():
        console.print(f"{'created' if new else 'exists '}  {name}")


@topics_app.command("list")
@topics_app.command("describe")
def topics_list(as_json: JsonOption = False) -> None:
    """The catalogue: each topic's key, partitions, cleanup and retention, and whether it exists."""
    with failing(broker=Exception):
        rows = asyncio.run(describe_topics(get_settings()))
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table("topic", "exists", "partitions", "key", "cleanup", "retention", "what")
    for row in rows:
        exists = "yes" if row["exists"] else "[red]no[/red]"
        retention = retention_text(row["retention_ms"])  # type: ignore[arg-type]
        cells = (row["partitions"], row["key"], row["cleanup"], retention, row["description"])
        table.add_row(str(row["topic"]), exists, *(str(c) for c in cells))
    console.print(table)


BROKER_FIRST = (
    "worker",
    "gateway",
    "import",
    "train",
    "replay",
    "monitor",
    "topics",
    "simulate run",
    "simulate worker",
)
"""Commands that need the broker: one line if it does not answer, before they load a model."""


def main() -> None:
    """The ``safactory`` command; a worker command's process ends without the shared
    libraries' teardown (:mod:`..infra.teardown`)."""
    try:
        words = " ".join(a for a in sys.argv[1:3] if not a.startswith("-"))
        if words.startswith(BROKER_FIRST) and not {"--help", "-h"} & set(sys.argv):
            if line := unreachable_broker(get_settings(), wait=words.startswith("worker")):
                raise fail(line)
        app()
    except typer.Exit as stopped:  # the one line was printed before the app ran
        raise SystemExit(stopped.exit_code) from None
    except SystemExit as done:
        if requested() and (done.code is None or isinstance(done.code, int)):
            end_now(done.code or 0)
        raise


if __name__ == "__main__":
    main()
