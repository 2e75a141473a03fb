"""``safactory monitor``: the live safety dashboard in the terminal (rich Live: redrawn within
50 ms of a change, at most ``--refresh`` times a second, default 4).

Renders :meth:`~safactory.streams.monitor.LiveView.snapshot`, the same data ``safactory
serve`` streams to the web page; the loop and its keys (``q`` quits, ``a`` approves, ``d``
denies the oldest pause) are :mod:`safactory.streams.monitor.watch`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.columns import Columns
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..infra import aio
from ..infra.config import Settings
from .errors import failing, get_settings
from .options import FromBeginningOption, WindowOption

if TYPE_CHECKING:  # the Kafka side loads when the command runs
    from ..streams.monitor.watch import Draw

SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan"}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def render(snap: dict[str, Any], settings: Settings, shown_alerts: int = 12) -> RenderableType:
    """The dashboard for one snapshot of the live view."""
    totals = snap["totals"]
    status_style = "green" if snap["status"] == "live" else "yellow"
    head = Text.assemble(
        ("Safactory monitor", "bold"),
        f"  {settings.topic_prefix}*  {settings.kafka_bootstrap}  ",
        (snap["status"], status_style),
        f"  window {snap['window_s']:g}s   ",
        f"steps {totals.get('steps', 0):,}  verdicts {totals.get('verdicts', 0):,}  "
        f"alerts {totals.get('alerts', 0):,}  uncertain steps {totals.get('uncertain', 0):,}  "
        f"episodes ended {totals.get('episodes_ended', 0):,}"
        f" (unsafe {totals.get('unsafe_episodes', 0):,})   ",
        ("q quits", "dim"),
    )
    latency = snap["latency"]
    policies = ", ".join(p["shown"] for p in snap["policies"].values()) or "none"
    in_use = ", ".join(f"{env} v{v}" for env, v in snap["policy_in_use"].items()) or "-"
    facts = Text.assemble(
        ("step→verdict ", "bold"),
        f"p50 {_ms(latency['p50_ms'])}  p99 {_ms(latency['p99_ms'])}"
        f"  ({latency['samples']:,} verdicts, {snap['verdicts_per_min']:,.0f}/min)   ",
        ("policy ", "bold"),
        f"announced {policies}; in use {in_use}",
    )

    alerts = Table(title="recent alerts (newest first)", expand=True, title_justify="left")
    for name in ("time", "severity", "risk type", "env", "episode:step"):
        alerts.add_column(name, overflow="ellipsis", no_wrap=True)
    alerts.add_column("action", ratio=1, min_width=24, overflow="ellipsis", no_wrap=True)
    for row in snap["alerts"][:shown_alerts]:
        step = "" if row["step_index"] is None else f":{row['step_index']}"
        alerts.add_row(
            time.strftime("%H:%M:%S", time.localtime(row["at"])),
            Text(row["severity"], SEVERITY_STYLE.get(row["severity"], "")),
            row["risk_type"],
            row["env"] or "-",
            f"{row['episode_id'][:14]}{step}",
            Text(row["action"]),
        )
    if not snap["alerts"]:
        alerts.add_row("", "", Text("no alerts yet", "dim"), "", "", "")

    risks = Table("risk type", "alerts/min", title="by risk type", title_justify="left")
    for risk, rate in snap["alert_rates"].items():
        risks.add_row(risk, f"{rate:.1f}")
    columns = ("env", "steps/min", "alerts/min", "episodes/min", "unsafe/min")
    envs = Table(*columns, title="by environment", title_justify="left")
    for env, rates in snap["envs"].items():
        envs.add_row(env, *(f"{rates[k]:.1f}" for k in ("steps", "alerts", "episodes", "unsafe")))
    lag = Table("group", "lag", "topics", title="consumer-group lag", title_justify="left")
    for group, reading in snap["lag"].items():
        topics = " ".join(f"{t}={n:,}" for t, n in reading["topics"].items())
        lag.add_row(group, f"{reading['lag']:,}", topics)
    parts: list[RenderableType] = [head, facts]
    if snap["paused"]:
        waiting = ", ".join(f"{p['episode_id'][:14]} ({p['reason']})" for p in snap["paused"])
        parts.append(
            Text.assemble(
                ("paused for approval ", "bold yellow"),
                waiting,
                ("   a approves, d denies the oldest", "dim"),
                overflow="ellipsis",
                no_wrap=True,
            )
        )
    parts += [alerts, Columns([risks, envs, lag], padding=(0, 2))]
    if snap["warning"]:
        parts.append(
            Text(f"last warning: {snap['warning']}", "dim", overflow="ellipsis", no_wrap=True)
        )
    return Group(*parts)


@contextlib.contextmanager
def _screen(console: Console, settings: Settings) -> Iterator[Draw]:
    """The full-screen dashboard (on a terminal) while inside; yields its draw function."""
    live = Live(
        console=console, screen=console.is_terminal, auto_refresh=False, redirect_stderr=False
    )
    with live:
        yield lambda snap: live.update(render(snap, settings), refresh=True)


def monitor(
    from_beginning: FromBeginningOption = False,
    window: WindowOption = 60.0,
    refresh: Annotated[float, typer.Option(min=0.5, max=30, help="most redraws per second")] = 4.0,
) -> None:
    """Live safety dashboard: alerts as they arrive (risk type, severity, env, episode, the
    offending action), alert rates per risk type and environment, step→verdict latency
    p50/p99, consumer-group lag and the policy versions announced and in use. q quits."""
    from ..streams.monitor.watch import watch

    settings = get_settings()
    console = Console()
    shown = watch(
        settings,
        from_beginning=from_beginning,
        window_s=window,
        refresh=refresh,
        connecting=console.status(f"connecting to {settings.kafka_bootstrap}"),
        screen=_screen(console, settings),
    )
    with failing(broker=Exception):
        aio.run(shown, settings)
