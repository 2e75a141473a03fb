"""``safactory gateway``: the OpenAI-compatible entry for agents built elsewhere.

Only wiring: the gateway itself is :mod:`safactory.agents.gateway`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..infra import listen
from . import serve as web
from .errors import fail, get_settings
from .options import AllowHostOption, HostOption, MaxBodyOption, PortOption


def gateway(
    upstream: Annotated[
        str,
        typer.Option(
            envvar="SF_GATEWAY_UPSTREAM",
            help="the model server's OpenAI base URL (vLLM, `safactory model-server`, a hosted "
            "API), e.g. http://127.0.0.1:8000/v1",
        ),
    ],
    host: HostOption = "127.0.0.1",
    port: PortOption = 8400,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SF_GATEWAY_TOKEN",
            show_default=False,
            help="clients must send it as their API key (Authorization: Bearer)",
        ),
    ] = None,
    upstream_key: Annotated[
        str | None,
        typer.Option(
            envvar="SF_UPSTREAM_API_KEY",
            show_default=False,
            help="API key for the upstream (default: the client's own, unless --token)",
        ),
    ] = None,
    policy_version: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="version stamped on steps (default: the one the upstream's "
            "system_fingerprint names, else 0)",
        ),
    ] = None,
    record_tokens: Annotated[
        bool,
        typer.Option(
            help="ask the upstream for token ids and logprobs (vLLM, `safactory model-server`; "
            "hosted APIs refuse return_tokens_as_token_ids)"
        ),
    ] = False,
    control: Annotated[bool, typer.Option(help="obey halt / pause / block on sf.control")] = True,
    idle_s: Annotated[
        float, typer.Option(min=1.0, help="an episode with no call for this long ends")
    ] = 600.0,
    log_level: Annotated[str, typer.Option(envvar="SF_LOG_LEVEL")] = "warning",
    allow_host: AllowHostOption = None,
    max_body: MaxBodyOption = listen.MAX_BODY,
) -> None:
    """Serve http://HOST:PORT/v1/chat/completions in front of UPSTREAM: every call becomes
    steps on the log, each tool call is audited (fast tier) before the client sees it, and
    a blocked one comes back as a refusal. Send x-sf-episode to name the episode (else one
    is assigned and returned in that header); end it with POST /v1/sf/episodes/{id}/end."""
    from ..agents.gateway.app import Gateway
    from ..infra.http import log_to_console, redacted
    from ..streams.audit.guard import AuditGuard

    if not upstream.startswith(("http://", "https://")):
        raise fail(f"--upstream {upstream!r}: give an http(s) URL, e.g. http://127.0.0.1:8000/v1")
    web.check_exposure(host, token, "SF_GATEWAY_TOKEN")
    log_to_console(log_level)
    settings = get_settings()
    sock = web.listen_socket(host, port)
    service = Gateway(
        upstream,
        settings,
        guard=AuditGuard(),
        control=control,
        policy_version=policy_version,
        record_tokens=record_tokens,
        upstream_key=upstream_key,
        idle_s=idle_s,
    )
    typer.echo(f"gateway on {listen.address(host, sock)}/v1 -> {redacted(service.upstream)}")
    app = service.app(token, bound=host, allow_hosts=tuple(allow_host or ()), max_body=max_body)
    listen.serve_on(app, sock, graceful_s=5)
