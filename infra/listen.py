"""Where an HTTP surface listens (``serve``, the gateway, the model server): a bind that other
machines can reach needs a token, the socket is opened before the app starts (port 0: a free
one), and uvicorn serves the app on it."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

MIN_TOKEN_CHARS = 16
LOOPBACK_NAMES = ("localhost",)


class ListenError(ValueError):
    """A bind refused (reachable without a token, a token too short) or impossible (the port
    is taken); the message names the fix."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (only this machine can connect)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None, env: str = "SF_SERVE_TOKEN") -> None:
    """Refuse a bind that others can reach without a token (``env``: the variable that sets
    this server's), and a token too short to guess."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ListenError(
            f"--token has {len(token)} characters; use at least {MIN_TOKEN_CHARS}, e.g. "
            "`python -c 'import secrets; print(secrets.token_urlsafe())'`"
        )
    if not is_loopback(host) and not token:
        raise ListenError(
            f"--host {host} is reachable from other machines; pass --token (or set "
            f"{env}) so every request must carry it, or bind 127.0.0.1"
        )


def listen_socket(host: str, port: int) -> socket.socket:
    """A listening socket on HOST:PORT (0: a free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ListenError(
            f"--host {host} --port {port}: cannot listen ({exc.strerror}); "
            "choose another --port (0 picks a free one)"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def address(host: str, sock: socket.socket) -> str:
    """``http://HOST:PORT`` of the bound socket (an IPv6 address in brackets)."""
    return f"http://{f'[{host}]' if ':' in host else host}:{sock.getsockname()[1]}"


def serve_on(app: Any, sock: socket.socket, *, graceful_s: int, loop: str = "auto") -> None:
    """Serve ``app`` with uvicorn on ``sock`` until Ctrl-C (warnings only, no access log)."""
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=graceful_s,
        loop=loop,
    )
    uvicorn.Server(config).run(sockets=[sock])
