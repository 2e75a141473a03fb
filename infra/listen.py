"""Where an HTTP surface listens (``serve``, the gateway, the model server): a bind that other
machines can reach needs a token, the socket is opened before the app starts (port 0: a free
one), and uvicorn serves the app on it."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

MAX_BODY = 8 << 20
"""Default largest request body (8 MiB): a long chat with tool outputs fits, a flood not."""

MIN_TOKEN_CHARS = 16
HEAD_TIMEOUT_S = 10.0
"""Most seconds a connection may take to send a request's line and headers."""
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


def serve_on(
    app: Any,
    sock: socket.socket,
    *,
    graceful_s: int,
    loop: str = "auto",
    head_timeout_s: float = HEAD_TIMEOUT_S,
) -> None:
    """Serve ``app`` with uvicorn on ``sock`` until Ctrl-C (warnings only, no access log); a
    connection that has not sent a whole request head ``head_timeout_s`` after connecting,
    or after its previous response, is closed."""
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=graceful_s,
        loop=loop,
        http=head_deadline(head_timeout_s),
    )
    uvicorn.Server(config).run(sockets=[sock])


def head_deadline(timeout_s: float) -> type:
    """uvicorn's h11 protocol with a deadline on each request's line and headers: uvicorn
    has none (its keep-alive timer restarts on every byte), so a client trickling a header
    a byte at a time would hold its connection, and enough of them every connection."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadline(H11Protocol):
        _overdue: Any = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle and self._overdue is not None:  # a whole head came
                self._overdue.cancel()
                self._overdue = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._overdue is not None:
                self._overdue.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._overdue is not None:
                self._overdue.cancel()
            self._overdue = self.loop.call_later(timeout_s, self.transport.close)

    return HeadDeadline
