"""What our HTTP servers share (the gateway, the model server, ``serve``): the error body,
the JSON body reader, and the guard every request passes before a route runs.

Every surface is safe to leave running (DESIGN.md, "The unified inference entry"):

* **Host allow-list.** Without a token, a request's ``Host`` must name the address served on
  or loopback (``--allow-host`` adds names): a page on another site whose name an attacker
  points at 127.0.0.1 (DNS rebinding) is refused.
* **No state change from another origin.** ``POST``/``PUT``/``PATCH``/``DELETE`` need a
  JSON content type (a form or ``text/plain`` post from a foreign page is refused) and, when
  the browser says where it comes from (``Origin``), that origin must be this server:
  scheme, host and port.
* **A token, where one is set**, on every request (``Authorization: Bearer``, ``x-api-key``
  as Anthropic's clients send it, or ``?token=``); with it, host and origin are not asked
  (a rebinding page cannot hold it).
* **Bounded bodies.** A body over ``max_body`` bytes is refused (413) before any route reads
  it, whether its length is declared or streamed.
* **Bodies that are JSON**: invalid UTF-8, nesting too deep to read, and numbers that are
  not finite get a 400 in the API's own error form, never a plain-text 500.

Errors are written by the surface's ``error`` function, in the form its clients read (an
OpenAI error body, an Anthropic one under the routes ``dialects`` names, the web page's).
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .listen import MAX_BODY

STATE_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_DEPTH = 64
"""Deepest JSON nesting a body may have (a chat is a handful of levels)."""

ErrorBody = Callable[[int, str], Response]


def openai_error(status: int, message: str) -> JSONResponse:
    """An OpenAI-style error body."""
    kind = ERROR_KINDS.get(status, "api_error")
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status_code=status
    )


ERROR_KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    421: "invalid_request_error",
    429: "rate_limit_error",
}
"""An error's ``type`` by HTTP status (OpenAI's and Anthropic's bodies use the same names)."""


def plain_error(status: int, message: str) -> JSONResponse:
    """The web page's error body."""
    return JSONResponse({"error": message}, status_code=status)


def redacted(url: str) -> str:
    """``url`` without the password of its user part (``http://u:***@host/v1``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


_USERINFO = re.compile(r"(://[^/\s:@]*):[^/\s@]*@")


class CredentialFilter(logging.Filter):
    """Masks the password of every URL a log record holds (httpx logs each request's
    full URL at info, user part included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "@" in message:
            record.msg, record.args = _USERINFO.sub(r"\1:***@", message), None
        return True


def log_to_console(level: str) -> None:
    """Log at ``level`` to stderr, every record's URLs without their passwords."""
    logging.basicConfig(level=level.upper(), format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(CredentialFilter())


def _refuse_constant(value: str) -> Any:
    raise ValueError(f"{value} is not a number JSON allows")


def loads(raw: bytes) -> Any:
    """A JSON body, strictly: UTF-8, finite numbers, at most :data:`MAX_DEPTH` deep
    (``ValueError`` naming what is wrong)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"body is not UTF-8 (byte {exc.start})") from None
    if _deeper_than(text, MAX_DEPTH):
        raise ValueError(f"body nests deeper than {MAX_DEPTH} levels")
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"body is not JSON ({exc.msg} at {exc.pos})") from None
    if _has_non_finite(value):
        raise ValueError("body holds a number too large to be finite")
    return value


_ESCAPE = re.compile(r"\\.", re.DOTALL)
_STRING = re.compile(r'"[^"]*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _deeper_than(text: str, limit: int) -> bool:
    """Whether the brackets outside strings nest deeper than ``limit``, in linear time:
    escape pairs go first (so no quote left is escaped), then whole strings (each match
    ends at the next quote: no position is scanned twice), then everything but brackets;
    the deepest point is the largest running sum of what is left."""
    bare = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    if bare.count("[") + bare.count("{") <= limit:
        return False
    return max(accumulate(map(_DEPTH_STEP.__getitem__, bare))) > limit


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


async def json_object(
    request: Request, error: ErrorBody = openai_error
) -> dict[str, Any] | Response:
    """The request's JSON object body, or the 400 answer saying why it is not one."""
    try:
        body = loads(await request.body())
    except ValueError as exc:
        return error(400, str(exc))
    if not isinstance(body, dict):
        return error(400, "body must be a JSON object")
    return body


class HttpGuard:
    """ASGI middleware: the checks of the module docstring, before any route runs."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        bound: str,
        token: str | None = None,
        allow_hosts: Iterable[str] = (),
        max_body: int = MAX_BODY,
        error: ErrorBody = openai_error,
        dialects: Mapping[str, ErrorBody] | None = None,
    ) -> None:
        """``dialects``: the error body of the routes under a path prefix, when their
        clients parse another API's errors than ``error``."""
        self.app = app
        self.dialects = dict(dialects or {})
        self.token = token.encode() if token else None
        self.hosts = LOOPBACK | {bound.strip("[]")} | {h.lower() for h in allow_hosts}
        self.max_body = max_body
        self.error = error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope.get("path", "")
        error = next((e for p, e in self.dialects.items() if path.startswith(p)), self.error)
        refused = self._refusal(scope, headers, error)
        if refused is None:
            body, refused = await self._body(headers, receive, error)
        if refused is not None:
            await refused(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()  # a disconnect, while streaming the answer
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    def _refusal(self, scope: Scope, headers: dict[str, str], error: ErrorBody) -> Response | None:
        if self.token is not None:
            if not self._carries_token(scope, headers):
                return error(
                    401,
                    "this server needs its token: send 'Authorization: Bearer <token>' or "
                    "add ?token=<token> to the URL",
                )
            return None  # a holder of the token may come from anywhere
        host = _host_name(headers.get("host", ""))
        if host not in self.hosts:
            return error(
                421,
                f"host {host!r} is not served here (a guard against DNS rebinding); "
                "serve it with --allow-host or a token",
            )
        if scope["method"] in STATE_CHANGES:
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                why = "a request that changes state needs Content-Type: application/json"
                return error(415, why)
            origin = headers.get("origin")
            if origin is not None and not self._own_origin(origin, headers, scope):
                return error(403, f"a state change from another origin ({origin}) is refused")
        return None

    def _own_origin(self, origin: str, headers: dict[str, str], scope: Scope) -> bool:
        """Whether ``origin`` is this server: scheme http(s), a served host, and the port
        the request came to (another port on the same host is another site's page)."""
        try:
            parts = urlsplit(origin)
            port = parts.port or DEFAULT_PORTS.get(parts.scheme)
            here = urlsplit("//" + headers.get("host", "")).port
        except ValueError:
            return False
        if here is None:
            here = (scope.get("server") or (None, None))[1] or DEFAULT_PORTS.get(scope["scheme"])
        return (
            parts.scheme in DEFAULT_PORTS
            and _host_name(parts.netloc) in self.hosts
            and port == here
        )

    def _carries_token(self, scope: Scope, headers: dict[str, str]) -> bool:
        assert self.token is not None
        given = headers.get("authorization", "")
        if given.startswith("Bearer "):
            return hmac.compare_digest(given[7:].strip().encode(), self.token)
        if "x-api-key" in headers:  # how Anthropic's clients send their key
            return hmac.compare_digest(headers["x-api-key"].strip().encode(), self.token)
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        return any(hmac.compare_digest(v.encode(), self.token) for v in query.get("token", ()))

    async def _body(
        self, headers: dict[str, str], receive: Receive, error: ErrorBody
    ) -> tuple[bytes, Response | None]:
        """The whole body, read before any route sees it (None: within the limit)."""
        too_large = error(413, f"request body over {self.max_body:,} bytes")
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return b"", too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return b"", too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks), None


DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_name(host: str) -> str:
    """The host of a ``Host`` header or netloc, lower-case, without port or brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
