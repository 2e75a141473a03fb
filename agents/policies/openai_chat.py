"""A policy served by any OpenAI-compatible chat endpoint (vLLM's server, or a hosted API).

Sends the chat and the tools to ``{base_url}/chat/completions`` and turns the reply into an
action (the first tool call, or the text). With ``record_tokens`` (vLLM) it asks for
logprobs with tokens as ids (``return_tokens_as_token_ids``) and records both.

Versions. The weights are the server's, so the version a step is stamped with is the one
the server reports (:mod:`safactory.schemas.serving`), never one the policy was told about:
each reply's ``system_fingerprint`` names the revision that wrote it, and :meth:`reload`
adopts the revision ``/models`` reports (waiting a little for the server to catch up with an
announcement). A server that reports no revision (vLLM, a hosted API) leaves the version at
the one configured at start, and a reload against it fails, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

import httpx

from ...schemas import Action, ChatMessage, FunctionCall, PolicyVersion, ToolCall
from ...schemas.serving import MODELS_FIELD, ServedRevision, version_of_fingerprint
from .base import Policy, PolicyError, PolicyInput, PolicyOutput

log = logging.getLogger(__name__)


class OpenAIChatPolicy(Policy):
    """Chat-completions client with tool calls; see the module docstring."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        version: int = 0,
        temperature: float = 0.0,
        max_tokens: int = 512,
        timeout_s: float = 60.0,
        record_tokens: bool = False,
        name: str | None = None,
        reload_wait_s: float = 10.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = name or model
        self.version = version
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.record_tokens = record_tokens
        self.reload_wait_s = reload_wait_s
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.AsyncClient(timeout=timeout_s, headers=headers)

    def request_body(self, inp: PolicyInput) -> dict[str, Any]:
        """The JSON body sent for one step."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [m.model_dump(exclude_none=True) for m in inp.messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "seed": inp.seed,
        }
        if inp.tools:
            body["tools"] = [t.model_dump() for t in inp.tools]
        if self.record_tokens:
            body["logprobs"] = True
            body["return_tokens_as_token_ids"] = True
        return body

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        url = f"{self.base_url}/chat/completions"
        try:
            response = await self._client.post(url, json=self.request_body(inp))
        except httpx.HTTPError as exc:
            raise PolicyError(f"{url}: {exc!r}") from exc
        if response.status_code != 200:
            raise PolicyError(f"{url}: HTTP {response.status_code}: {response.text[:300]}")
        try:
            reply = response.json()
            choice = reply["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError) as exc:
            raise PolicyError(f"{url}: reply is not a chat completion ({exc!r})") from exc
        try:
            calls = [
                ToolCall(
                    id=c.get("id") or f"call_{inp.step_index}",
                    function=FunctionCall(
                        name=c["function"]["name"],
                        arguments=c["function"].get("arguments") or "{}",
                    ),
                )
                for c in message.get("tool_calls") or []
            ]
        except (KeyError, TypeError) as exc:
            raise PolicyError(f"{url}: malformed tool call in reply ({exc!r})") from exc
        action = Action(text=message.get("content"), tool_call=calls[0] if calls else None)
        turn = ChatMessage(
            role="assistant", content=message.get("content"), tool_calls=calls[:1] or None
        )
        token_ids, logprobs = tokens_of(choice.get("logprobs"))
        info: dict[str, object] = {"finish_reason": choice.get("finish_reason")}
        served = version_of_fingerprint(reply.get("system_fingerprint"))
        if served is not None:  # the weights that wrote this reply (runner stamps the step)
            info["policy_version"] = served
        return PolicyOutput(
            action=action,
            message=turn,
            token_ids=token_ids,
            logprobs=logprobs,
            info=info,
        )

    async def served_revision(self) -> ServedRevision | None:
        """The revision the server reports serving (``/models``), or None if it reports
        none; :class:`PolicyError` if it cannot be asked."""
        url = f"{self.base_url}/models"
        try:
            response = await self._client.get(url)
            models = response.json().get("data") or []
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise PolicyError(f"{url}: cannot read the served models ({exc!r})") from exc
        for model in models:
            if (
                isinstance(model, dict)
                and model.get("id") == self.model
                and model.get(MODELS_FIELD)
            ):
                try:
                    return ServedRevision.model_validate(model[MODELS_FIELD])
                except ValueError as exc:
                    raise PolicyError(f"{url}: malformed {MODELS_FIELD} ({exc})") from exc
        return None

    async def reload(self, announcement: PolicyVersion) -> None:
        """Adopt the version the server serves, waiting up to ``reload_wait_s`` for it to
        reach the announced one (the announcement only says the server should have it)."""
        deadline = time.monotonic() + self.reload_wait_s
        while True:
            served = await self.served_revision()
            if served is None:
                raise PolicyError(
                    f"{self.base_url}/models reports no revision for {self.model!r}: the "
                    f"version it serves is unknown, so v{announcement.policy_version} cannot "
                    "be confirmed; serve it with `safactory model-server` (or a server that "
                    "reports sf_revision)"
                )
            if served.policy_version >= announcement.policy_version:
                break
            if time.monotonic() >= deadline:
                log.warning(
                    "%s: v%d announced, the server still serves v%d; staying on v%d",
                    self.base_url,
                    announcement.policy_version,
                    served.policy_version,
                    served.policy_version,
                )
                break
            await asyncio.sleep(0.2)
        self.version = served.policy_version

    async def close(self) -> None:
        await self._client.aclose()


def tokens_of(logprobs: dict[str, Any] | None) -> tuple[list[int] | None, list[float] | None]:
    """Token ids and logprobs from a vLLM reply (tokens rendered as ``token_id:<n>``)."""
    entries = (logprobs or {}).get("content") or []
    ids, values = [], []
    for entry in entries:
        token = str(entry.get("token", ""))
        if not token.startswith("token_id:"):
            return None, None
        ids.append(int(token.split(":", 1)[1]))
        values.append(float(entry["logprob"]))
    return (ids, values) if ids else (None, None)
