"""``safactory model-server``: serve a weight-store model over the OpenAI chat API.

The project's own inference server (:mod:`safactory.agents.policies.serve_local`): it
reports the revision it serves, reloads on vLLM's ``/collective_rpc`` endpoint, and can be
told to refuse reloads (a drill). vLLM is the server for GPUs; this one runs anywhere.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from ..infra import listen
from ..infra.listen import MAX_BODY
from . import serve as web
from .errors import fail
from .options import AllowHostOption, HostOption, MaxBodyOption, PortOption


def model_server(
    source: Annotated[
        Path,
        typer.Argument(
            help="a weight-store version folder, or the store's <weight_dir>/<policy>/current "
            "link (resolved at every reload; with its store there, it may not exist yet)"
        ),
    ],
    host: HostOption = "127.0.0.1",
    port: PortOption = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SF_MODEL_SERVER_TOKEN",
            show_default=False,
            help="every request must carry it (Authorization: Bearer)",
        ),
    ] = None,
    name: Annotated[str, typer.Option(help="the served model name")] = "hf-local",
    temperature: Annotated[float, typer.Option(min=0.01, help="sampling temperature")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="tokens per reply at most")] = 32,
    device: Annotated[str, typer.Option(help="torch device: cpu | cuda")] = "cpu",
    version: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="serve a plain Hugging Face folder (model.safetensors, no revision.json) "
            "as this policy version",
        ),
    ] = None,
    allow_host: AllowHostOption = None,
    max_body: MaxBodyOption = MAX_BODY,
    wait: Annotated[
        bool, typer.Option(help="start even where SOURCE's store does not exist yet")
    ] = False,
) -> None:
    """Serve SOURCE at http://HOST:PORT/v1 (chat completions, models with the served
    revision, reload by POST /collective_rpc). Prints its address once it listens."""
    from ..agents.policies.serve_local import ModelServer

    if not (wait or source.exists() or source.parent.is_dir()):
        raise fail(
            f"{source}: no such folder, nor its store {source.parent}: train a policy first "
            "(`safactory train` writes <weight_dir>/<policy>/current), give a Hugging Face "
            "folder with --version N, or start before the trainer with --wait"
        )
    web.check_exposure(host, token, "SF_MODEL_SERVER_TOKEN")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    sock = web.listen_socket(host, port)
    server = ModelServer(
        source,
        name=name,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        device=device,
        version=version,
    )
    typer.echo(f"model server on {listen.address(host, sock)}/v1 (source {source})")
    app = server.app(token, bound=host, allow_hosts=tuple(allow_host or ()), max_body=max_body)
    listen.serve_on(app, sock, graceful_s=2)
