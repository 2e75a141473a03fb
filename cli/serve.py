"""``safactory serve``: the live safety view as a web page (FastAPI, server-sent events).

Bound to 127.0.0.1 by default. Any other address needs a token (``--token`` or
``SF_SERVE_TOKEN``, at least 16 characters), and then every request must carry it. Every
request passes :class:`~safactory.infra.http.HttpGuard` (Host allow-list, no state change
from another origin, bounded bodies). The gateway and the model server share these helpers.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Annotated

import typer

from .data import DbOption, lance_location
from .errors import broker_failure, get_settings
from .errors import fail as _fail
from .monitor import FromBeginningOption, WindowOption

MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("localhost",)
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


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (only this machine can connect)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse a bind that others can reach without a token, and a token too short to guess."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise _fail(
            f"--token has {len(token)} characters; use at least {MIN_TOKEN_CHARS}, e.g. "
            "`python -c 'import secrets; print(secrets.token_urlsafe())'`"
        )
    if not is_loopback(host) and not token:
        raise _fail(
            f"--host {host} is reachable from other machines; pass --token (or set "
            "SF_SERVE_TOKEN) so every request must carry it, or bind 127.0.0.1"
        )


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening socket on HOST:PORT (0: a free port), or a one-line error naming the fix."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise _fail(
            f"--host {host} --port {port}: cannot listen ({exc.strerror}); "
            "choose another --port (0 picks a free one)"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve(
    host: HostOption = "127.0.0.1",
    port: PortOption = 8765,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SF_SERVE_TOKEN",
            show_default=False,
            help="every request must carry it (Authorization: Bearer, or ?token=)",
        ),
    ] = None,
    db: DbOption = None,
    from_beginning: FromBeginningOption = False,
    window: WindowOption = 60.0,
    allow_host: AllowHostOption = None,
) -> None:
    """Live safety view as a web page: alerts, rates, latency, lag and policy versions
    streamed by server-sent events (/events), an episode view with each step's verdicts from
    LanceDB (/episodes/<id>), and Prometheus metrics (/metrics). Ctrl-C stops it."""
    import uvicorn

    from ..infra.topics import BY_NAME, create_topics
    from ..streams.monitor import FOLLOWED
    from .web.app import create_app

    check_exposure(host, token)
    settings = get_settings()
    where = lance_location(db)
    try:
        asyncio.run(create_topics(settings, [BY_NAME[n] for n in (*FOLLOWED, "policy")]))
    except Exception as exc:
        raise _fail(broker_failure(exc, settings.kafka_bootstrap)) from None
    sock = listen_socket(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    typer.echo(
        f"serving http://{shown}:{bound}/  (topics {settings.topic_prefix}*, db {where}"
        f"{'; add ?token=<token> to the URL' if token else ''})",
        err=False,
    )
    app = create_app(
        settings,
        db=where,
        token=token,
        from_beginning=from_beginning,
        window_s=window,
        bound=host,
        allow_hosts=tuple(allow_host or ()),
    )
    config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=2,
        access_log=False,
        loop="uvloop" if settings.event_loop == "uvloop" else "asyncio",
    )
    uvicorn.Server(config).run(sockets=[sock])
