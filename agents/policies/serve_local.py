"""The project's own OpenAI-compatible model server: a weight-store model behind HTTP.

vLLM is the server for scale (``bench/gpu_smoke.sh``); this one needs no GPU, so tests, drills
and (later) the gateway get a real HTTP model server that speaks the contract of
:mod:`safactory.schemas.serving`: it says which weights it serves.

- ``POST /v1/chat/completions`` — the model (an :class:`HFLocalPolicy`: its chat template,
  a tool call parsed from a JSON reply) answers one chat; ``logprobs`` with
  ``return_tokens_as_token_ids`` returns each token as ``token_id:<n>`` as vLLM does, and
  ``system_fingerprint`` names the revision that wrote the reply. Sampling temperature and
  length are the server's (``--temperature``, ``--max-new-tokens``); the request's ``seed``
  is honoured.
- ``GET /v1/models`` — the served model, with its revision under ``sf_revision``.
- ``POST /collective_rpc {"method": "reload_weights"}`` — vLLM's development endpoint, so
  the trainer's reloader drives either server: reload from ``source`` (a version folder, or
  the weight store's ``current`` link, resolved at each reload), check the weights against
  the folder's ``revision.json``, swap, answer with the revision. A reload that fails leaves
  the old weights serving and says why (HTTP 500).
- ``POST /v1/admin/fail_reloads {"count": n}`` — refuse the next ``n`` reloads (a drill of
  an inference server that does not come back with new weights).

A server started before the trainer has published anything serves nothing (HTTP 503, an
empty model list) until its first reload succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ...infra.http import HttpGuard, json_object, openai_error
from ...infra.listen import MAX_BODY
from ...schemas import ChatMessage, ToolSchema
from ...schemas.serving import MODELS_FIELD, REVISION_FILE, ServedRevision
from ..env import TaskSpec
from .base import PolicyInput
from .hf_local import HFLocalPolicy, checkpoint_sha256

log = logging.getLogger(__name__)
_TASK = TaskSpec(task_id="chat-completion", kind="capability", instruction="")
"""What the server's policy is told about the task: nothing beyond the chat itself."""


class ReloadFailed(RuntimeError):
    """The server could not load new weights; the old ones (if any) still serve."""


class ModelServer:
    """Holds the served policy and its revision; :meth:`app` is the HTTP face."""

    def __init__(
        self,
        source: Path,
        *,
        name: str = "hf-local",
        temperature: float = 1.0,
        max_new_tokens: int = 32,
        device: str = "cpu",
        version: int | None = None,
    ) -> None:
        self.source = Path(source)
        self.version = version
        """The version of a plain Hugging Face folder (one without a weight-store
        revision): its weights' digest is taken as it loads."""
        self.name = name
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.device = device
        self.policy: HFLocalPolicy | None = None
        self.revision: ServedRevision | None = None
        self.reloads = 0
        self.failed_reloads = 0
        self.refuse_next = 0
        """Reloads still to refuse (``/v1/admin/fail_reloads``)."""
        self._reloading = asyncio.Lock()

    async def reload(self) -> ServedRevision:
        """Load the weights ``source`` points at now and serve them; :class:`ReloadFailed`
        (old weights kept) if they cannot be loaded or are not what their revision says."""
        async with self._reloading:
            try:
                if self.refuse_next > 0:
                    self.refuse_next -= 1
                    raise ReloadFailed("reload refused (a drill: /v1/admin/fail_reloads)")
                policy, revision = await asyncio.to_thread(self._load)
            except ReloadFailed:
                self.failed_reloads += 1
                raise
            self.policy, self.revision = policy, revision
            self.reloads += 1
            return revision

    def _load(self) -> tuple[HFLocalPolicy, ServedRevision]:
        folder = Path(os.path.realpath(self.source))
        try:
            revision = ServedRevision.model_validate_json((folder / REVISION_FILE).read_text())
        except (OSError, ValueError) as exc:
            if self.version is None or not (folder / "model.safetensors").is_file():
                raise ReloadFailed(
                    f"{folder}: no readable {REVISION_FILE} ({exc}); serve a weight-store "
                    "version, or a Hugging Face folder with --version N"
                ) from None
            revision = ServedRevision(
                policy_name=self.name,
                policy_version=self.version,
                sha256=checkpoint_sha256(folder),
            )
        try:
            actual = checkpoint_sha256(folder)
            if actual != revision.sha256:
                raise ReloadFailed(
                    f"{folder}: model.safetensors has sha256 {actual}, its {REVISION_FILE} "
                    f"says {revision.sha256} (v{revision.policy_version}); partly written?"
                )
            policy = HFLocalPolicy(
                folder,
                version=revision.policy_version,
                max_new_tokens=self.max_new_tokens,
                temperature=self.temperature,
                device=self.device,
                name=self.name,
                decode="free",
            )
        except ReloadFailed:
            raise
        except Exception as exc:  # a folder transformers cannot load: say so, keep serving
            raise ReloadFailed(f"{folder}: cannot load ({type(exc).__name__}: {exc})") from None
        return policy, revision

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion (OpenAI format) by the weights served now."""
        policy, revision = self.policy, self.revision
        if policy is None or revision is None:
            raise ReloadFailed("no weights loaded yet (reload once the trainer has published)")
        messages = [ChatMessage.model_validate(m) for m in body.get("messages") or []]
        tools = [ToolSchema.model_validate(t) for t in body.get("tools") or []]
        out = await policy.act(
            PolicyInput(
                messages=messages, tools=tools, task=_TASK, step_index=0, seed=body.get("seed") or 0
            )
        )
        message: dict[str, Any] = {"role": "assistant", "content": out.message.content}
        if out.message.tool_calls:
            message["tool_calls"] = [c.model_dump() for c in out.message.tool_calls]
        ended = bool(out.token_ids) and out.token_ids[-1] == policy.tokenizer.eos_token_id
        finish = "tool_calls" if out.message.tool_calls else "stop" if ended else "length"
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish}
        if body.get("logprobs") and out.token_ids is not None and out.logprobs is not None:
            as_ids = body.get("return_tokens_as_token_ids")
            choice["logprobs"] = {
                "content": [
                    {
                        "token": f"token_id:{t}" if as_ids else policy.tokenizer.decode([t]),
                        "logprob": lp,
                    }
                    for t, lp in zip(out.token_ids, out.logprobs, strict=True)
                ]
            }
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "system_fingerprint": revision.fingerprint(),
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(out.prompt_token_ids or ()),
                "completion_tokens": len(out.token_ids or ()),
                "total_tokens": len(out.prompt_token_ids or ()) + len(out.token_ids or ()),
            },
        }

    def models(self) -> dict[str, Any]:
        """``/v1/models``: the served model and its revision (empty before the first load)."""
        if self.revision is None:
            return {"object": "list", "data": []}
        entry = {
            "id": self.name,
            "object": "model",
            "created": 0,
            "owned_by": "safactory",
            "root": str(self.source),
            MODELS_FIELD: self.revision.model_dump(),
        }
        return {"object": "list", "data": [entry]}

    def app(
        self,
        token: str | None = None,
        *,
        bound: str = "127.0.0.1",
        allow_hosts: tuple[str, ...] = (),
        max_body: int = MAX_BODY,
    ) -> FastAPI:
        """The HTTP application behind :class:`~...infra.http.HttpGuard` (with ``token``,
        every request must carry it; the reload drill needs it always). It loads
        ``source`` as it starts, if there is anything there yet."""

        @contextlib.asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            try:
                revision = await self.reload()
                log.info("serving %s v%d", revision.policy_name, revision.policy_version)
            except ReloadFailed as exc:
                log.warning("serving nothing until a reload succeeds: %s", exc)
            yield

        app = FastAPI(
            title="safactory model server", docs_url=None, redoc_url=None, lifespan=lifespan
        )

        app.add_middleware(
            HttpGuard, bound=bound, token=token, allow_hosts=allow_hosts, max_body=max_body
        )

        @app.get("/health")
        async def _health() -> dict[str, Any]:
            return {"serving": self.revision.model_dump() if self.revision else None}

        @app.get("/v1/models")
        async def _models() -> dict[str, Any]:
            return self.models()

        @app.post("/v1/chat/completions")
        async def _chat(request: Request) -> Any:
            body = await json_object(request)
            if isinstance(body, JSONResponse):
                return body
            try:
                return await self.complete(body)
            except ReloadFailed as exc:
                return openai_error(503, str(exc))
            except ValueError as exc:  # a message or tool that is not OpenAI chat format
                return openai_error(400, str(exc)[:500])

        @app.post("/collective_rpc")
        async def _rpc(request: Request) -> Any:
            body = await json_object(request)
            if isinstance(body, JSONResponse):
                return body
            if body.get("method") != "reload_weights":
                return openai_error(400, "only {'method': 'reload_weights'} is supported")
            try:
                revision = await self.reload()
            except ReloadFailed as exc:
                return openai_error(500, str(exc))
            return {"results": [revision.model_dump()]}

        @app.post("/v1/admin/fail_reloads")
        async def _fail(request: Request) -> Any:
            if token is None:
                return openai_error(403, "the reload drill needs the server's --token")
            body = await json_object(request)
            if isinstance(body, JSONResponse):
                return body
            count = body.get("count")
            if not isinstance(count, int) or count < 0:
                return openai_error(400, "send {'count': <reloads to refuse, >= 0>}")
            self.refuse_next = count
            return {"refuse_next": count}

        return app
