"""``safactory serve``: the live safety view as a web page (FastAPI, server-sent events).

Bound to 127.0.0.1 by default. Any other address needs a token (``--token`` or
``SF_SERVE_TOKEN``, at least 16 characters), and then every request must carry it. Every
request passes :class:`~safactory.infra.http.HttpGuard` (Host allow-list, no state change
from another origin, bounded bodies). The gateway and the model server bind the same way.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..infra import listen
from ..infra.config import Settings
from . import options as opt
from .errors import failing, get_settings

if TYPE_CHECKING:  # lancedb loads only when an episode is asked for
    from fastapi import FastAPI

    from ..sinks.location import Db


def check_exposure(host: str, token: str | None, env: str = "SF_SERVE_TOKEN") -> None:
    """:func:`~safactory.infra.listen.check_exposure`, refused in one line."""
    with failing(listen.ListenError):
        listen.check_exposure(host, token, env)


def listen_socket(host: str, port: int) -> socket.socket:
    """:func:`~safactory.infra.listen.listen_socket`, or a one-line error naming the fix."""
    with failing(listen.ListenError):
        return listen.listen_socket(host, port)


def web_app(settings: Settings, db: Db, **options: Any) -> FastAPI:
    """The web page's app: its episode view (with the trust factors) and review queue."""
    from ..sinks import episode
    from ..sinks.query import QueryError
    from ..streams.audit.explain import stored_factors
    from ..streams.monitor.web import create_app
    from ..tools import casebook, review

    def trace(episode_id: str) -> dict[str, Any]:
        try:
            return episode.episode_trace(db, episode_id, stored_factors)
        except QueryError as exc:  # no database there: as missing as the episode
            raise episode.EpisodeNotFound(str(exc)) from None

    desk = review.Desk(lambda: casebook.Casebook(db))
    return create_app(settings, episode=trace, review=desk, **options)


def serve(
    host: opt.HostOption = "127.0.0.1",
    port: opt.PortOption = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SF_SERVE_TOKEN",
            show_default=False,
            help="every request must carry it (Authorization: Bearer, or ?token=)",
        ),
    ] = None,
    db: opt.DbOption = None,
    from_beginning: opt.FromBeginningOption = False,
    window: opt.WindowOption = 60.0,
    allow_host: opt.AllowHostOption = None,
) -> None:
    """Live safety view as a web page: alerts, rates, latency, lag and policy versions
    streamed by server-sent events (/events), an episode view with each step's verdicts from
    LanceDB (/episodes/<id>), and Prometheus metrics (/metrics). Ctrl-C stops it."""
    from ..infra.topics import BY_NAME, create_topics
    from ..streams.monitor import FOLLOWED

    check_exposure(host, token)
    settings = get_settings()
    where = opt.lance_location(db)
    with failing(broker=Exception):
        asyncio.run(create_topics(settings, [BY_NAME[n] for n in (*FOLLOWED, "policy")]))
    sock = listen_socket(host, port)
    typer.echo(
        f"serving {listen.address(host, sock)}/  (topics {settings.topic_prefix}*, db {where}"
        f"{'; add ?token=<token> to the URL' if token else ''})",
        err=False,
    )
    app = web_app(
        settings,
        where,
        token=token,
        from_beginning=from_beginning,
        window_s=window,
        bound=host,
        allow_hosts=tuple(allow_host or ()),
    )
    loop = "uvloop" if settings.event_loop == "uvloop" else "asyncio"
    listen.serve_on(app, sock, graceful_s=2, loop=loop)
