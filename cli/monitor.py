"""``safactory monitor``: the live safety dashboard in the terminal (rich Live: redrawn within
50 ms of a change, at most ``--refresh`` times a second, default 4).

Renders :meth:`~safactory.streams.monitor.LiveView.snapshot`, the same data ``safactory
serve`` streams to the web page. ``q`` quits (stdin is read in cbreak mode when it is a
terminal); so do Ctrl-C and SIGTERM. ``a`` approves and ``d`` denies the episode that has
waited longest for approval (a pause on ``sf.control``): the answer is published there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.columns import Columns
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..infra import aio
from ..infra.config import Settings
from .errors import broker_failure, get_settings
from .errors import fail as _fail

if TYPE_CHECKING:  # the Kafka side loads when the command runs
    from ..infra.producer import EventProducer
    from ..streams.monitor import Follower, LiveView

TICK_S = 0.05
"""How often the dashboard looks for a change (a change waits at most this long)."""
IDLE_REDRAW_S = 1.0
"""Longest between redraws while nothing arrives (rates decay, the clock moves)."""
SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "cyan"}
FromBeginningOption = Annotated[
    bool, typer.Option("--from-beginning", help="read the topics from their start, not now")
]
WindowOption = Annotated[
    float, typer.Option(min=1, help="seconds of the sliding window for rates and latency")
]


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
    for name, ratio in (
        ("time", None),
        ("severity", None),
        ("risk type", None),
        ("env", None),
        ("episode:step", None),
        ("action", 1),
    ):
        alerts.add_column(
            name, ratio=ratio, min_width=24 if ratio else None, overflow="ellipsis", no_wrap=True
        )
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
    envs = Table(
        "env",
        "steps/min",
        "alerts/min",
        "episodes/min",
        "unsafe/min",
        title="by environment",
        title_justify="left",
    )
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
def _keys(on_key: Callable[[bytes], None]) -> Iterator[None]:
    """Call ``on_key(bytes)`` for keys typed on a terminal stdin (cbreak mode meanwhile)."""
    if not sys.stdin.isatty():
        yield
        return
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    loop = asyncio.get_running_loop()
    try:
        tty.setcbreak(fd)
        loop.add_reader(fd, lambda: on_key(os.read(fd, 64)))
        yield
    finally:
        loop.remove_reader(fd)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


@contextlib.contextmanager
def _warnings_shown_in(view: LiveView) -> Iterator[None]:
    """Log warnings go to the dashboard's last line instead of over the screen."""
    from ..streams.monitor.view import WarningsToView

    root = logging.getLogger()
    handler = WarningsToView(view)
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


async def _run(settings: Settings, from_beginning: bool, window: float, refresh: float) -> None:
    from ..infra.producer import EventProducer
    from ..streams.monitor import Follower, LiveView

    view = LiveView(window)
    with _warnings_shown_in(view):
        async with EventProducer(settings) as producer:
            follower = Follower(settings, view, from_beginning=from_beginning)
            await _watch(view, follower, refresh, producer)


async def _watch(
    view: LiveView, follower: Follower, refresh: float, producer: EventProducer | None = None
) -> None:
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, done.set)
    console = Console()
    try:
        with console.status(f"connecting to {follower.settings.kafka_bootstrap}"):
            await follower.start()
    except Exception:
        await follower.stop()
        raise

    answering: set[asyncio.Task[object]] = set()

    def on_key(typed: bytes) -> None:
        typed = typed.lower()
        if b"q" in typed:
            done.set()
        for key, approve in ((b"a", True), (b"d", False)):
            pause = view.oldest_paused()
            if key in typed and pause is not None and producer is not None:
                from ..streams.control import answer

                task = asyncio.create_task(producer.publish(answer(pause, approve, "monitor")))
                answering.add(task)
                task.add_done_callback(answering.discard)

    live = Live(
        console=console, screen=console.is_terminal, auto_refresh=False, redirect_stderr=False
    )
    try:
        with live, _keys(on_key):
            drawn_seq, drawn_at = -1, 0.0
            while not done.is_set():
                now = loop.time()
                changed = view.seq != drawn_seq and now - drawn_at >= 1.0 / refresh
                if changed or now - drawn_at >= IDLE_REDRAW_S:
                    drawn_seq, drawn_at = view.seq, now
                    live.update(render(view.snapshot(), follower.settings), refresh=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), TICK_S)
    finally:
        await follower.stop()


def monitor(
    from_beginning: FromBeginningOption = False,
    window: WindowOption = 60.0,
    refresh: Annotated[float, typer.Option(min=0.5, max=30, help="most redraws per second")] = 4.0,
) -> None:
    """Live safety dashboard: alerts as they arrive (risk type, severity, env, episode, the
    offending action), alert rates per risk type and environment, step→verdict latency
    p50/p99, consumer-group lag and the policy versions announced and in use. q quits."""
    settings = get_settings()
    try:
        aio.run(_run(settings, from_beginning, window, refresh), settings)
    except Exception as exc:
        raise _fail(broker_failure(exc, settings.kafka_bootstrap)) from None
