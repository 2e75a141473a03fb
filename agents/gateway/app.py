"""``safactory gateway``: an OpenAI- and Anthropic-compatible endpoint in front of a model
server.

Agents built elsewhere point their client at the gateway (``base_url``) and change nothing
else. A Responses API call (:mod:`.responses`) or an Anthropic Messages call
(:mod:`.messages`) is translated to a chat completion and its answer back; for each chat
completion the gateway

1. finds the call's episode (:mod:`.conversations`) and obeys ``sf.control`` for it (a
   halted episode gets a refusal; a paused one waits for a person, as our runner does);
2. forwards the chat to ``--upstream`` (never streamed: a tool call is judged whole before
   the client sees any of it), asking for token ids and logprobs with ``record_tokens``;
3. runs the fast audit tier on every returned tool call with the episode before it: a
   blocked call is replaced by a refusal the client's loop reads as the assistant's reply
   (``finish_reason: stop``), the step keeps the attempted call with ``blocked``, and the
   guard's verdicts and alerts are published;
4. publishes the steps (and the episode's start) with the header contract, waiting for the
   broker's ack, then answers: JSON, or server-sent events when the client asked to stream.

The version a step carries is ``--policy-version`` when given, else the one the upstream's
``system_fingerprint`` names (our model server; vLLM and hosted APIs name none: 0). An
episode ends by ``POST /v1/sf/episodes/{id}/end`` (outcome and reward) or after
``idle_s`` without a call (outcome ``abandoned``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...infra import metrics
from ...infra.config import Settings
from ...infra.http import HttpGuard, json_object, loads, openai_error, redacted
from ...infra.listen import MAX_BODY
from ...infra.producer import EventProducer
from ...schemas import (
    Control,
    EpisodeEnded,
    EpisodeStarted,
    Event,
    Outcome,
    Step,
    Verdict,
)
from ...schemas.guard import GuardDecision
from ...schemas.serving import version_of_fingerprint
from ..control import ControlFollower, ControlSource, obey
from ..policies.openai_chat import tokens_of
from . import messages, responses
from .conversations import (
    ENV_HEADER,
    EPISODE_HEADER,
    TASK_HEADER,
    Conversation,
    Conversations,
    chat_messages,
    steps_of,
)

log = logging.getLogger(__name__)
OVERHEAD_HEADER = "x-sf-gateway-ms"
VERDICT_HEADER = "x-sf-verdict"
"""``block`` on a reply the gateway refused (else ``allow``): the signal in every API."""
"""Response header: milliseconds the gateway itself spent on the call (all but the
upstream's time): finding the episode, judging, publishing with the broker's ack."""
GATEWAY_POLICY = "gateway"
"""``policy_name`` of gateway episodes when the request names no model."""


class StepGuard(Protocol):
    """What judges a returned tool call: the step with the episode before it. The command
    line wires the auditor's fast tier in (``streams.audit.guard.AuditGuard``)."""

    async def check(self, step: Step, context: Sequence[Step]) -> GuardDecision:
        """Decide on ``step``'s action."""
        ...


class GatewayStats(metrics.Tally):
    """What the gateway did (a view over the metrics registry)."""

    calls = metrics.Count("sf_gateway_calls", "chat completions answered")
    blocked = metrics.Count("sf_gateway_blocked", "replies refused by the guard or control")
    upstream_errors = metrics.Count("sf_gateway_upstream_errors", "upstream calls that failed")


@dataclass
class Answered:
    """One call's outcome: the completion the client gets, and its timings."""

    completion: dict[str, Any]
    episode_id: str
    blocked: bool
    upstream_ms: float
    total_ms: float
    status: int = 200


def refusal(reason: str) -> str:
    """The assistant reply that replaces a refused one (the client's loop reads it)."""
    return (
        f"[safactory gateway] The action was blocked: {reason}. It was not run. Do not "
        "retry it; do the task another way, or stop and tell the user why."
    )


FINAL_ANSWER_TOOL = "final_answer"
"""A tool some agents end their run with (smolagents): a refusal is given through it."""


def refused(reason: str, tools: Any) -> dict[str, Any]:
    """The assistant message that replaces a refused reply: the refusal as text, or as the
    answer of the agent's own final-answer tool when it offers one (its loop ends only
    through that tool; a text reply would be retried as a malformed one). Either way the
    message's ``refusal`` field (the Chat Completions API's own) holds it too, so code can
    tell a block from an answer without reading the text."""
    for tool in tools if isinstance(tools, list) else ():
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == FINAL_ANSWER_TOOL:
            properties = (function.get("parameters") or {}).get("properties") or {"answer": {}}
            arguments = json.dumps({next(iter(properties)): refusal(reason)})
            call = {"name": FINAL_ANSWER_TOOL, "arguments": arguments}
            tool_call = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function"}
            return {
                "role": "assistant",
                "content": None,
                "refusal": refusal(reason),
                "tool_calls": [{**tool_call, "function": call}],
            }
    return {"role": "assistant", "content": refusal(reason), "refusal": refusal(reason)}


NAME_LIMITS = {EPISODE_HEADER: 120, ENV_HEADER: 64, TASK_HEADER: 128}
"""Longest value of each naming header: what a step's field holds (an episode's name
leaves room for the ``.N`` a reused name gets)."""


def check_names(headers: dict[str, str]) -> None:
    """``ValueError`` naming the header when a name is empty, too long or not printable."""
    for header, limit in NAME_LIMITS.items():
        value = headers.get(header)
        if value is None:
            continue
        if not value or len(value) > limit or not value.isprintable():
            raise ValueError(
                f"header {header}: a name of 1 to {limit} printable characters "
                f"(this one has {len(value)})"
            )


class Gateway:
    """The forwarding, judging and publishing behind the HTTP face (:meth:`app`)."""

    def __init__(
        self,
        upstream: str,
        settings: Settings,
        *,
        guard: StepGuard,
        control: ControlSource | bool = True,
        policy_version: int | None = None,
        record_tokens: bool = False,
        upstream_key: str | None = None,
        idle_s: float = 600.0,
        approval_timeout_s: float = 300.0,
        timeout_s: float = 120.0,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        if not self.upstream.endswith("/v1"):
            self.upstream += "/v1"
        self.settings = settings
        self.guard = guard
        self._follow_control = control is True
        self.control: ControlSource | None = control if not isinstance(control, bool) else None
        self.policy_version = policy_version
        self.record_tokens = record_tokens
        self.upstream_key = upstream_key
        self.idle_s = idle_s
        self.approval_timeout_s = approval_timeout_s
        self.conversations = Conversations()
        self.responses = responses.ResponseStore()
        """Answered transcripts, for Responses calls chained by ``previous_response_id``."""
        self.stats = GatewayStats()
        self._timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None
        self._producer: EventProducer | None = None
        self._handled: dict[str, set[str]] = {}
        self._expiry: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect to the broker and the upstream; start ending idle episodes."""
        self._producer = EventProducer(self.settings)
        await self._producer.start()
        self._client = httpx.AsyncClient(
            timeout=self._timeout_s, limits=httpx.Limits(max_keepalive_connections=64)
        )
        if self._follow_control:  # created here: its reader needs the running loop
            follower = ControlFollower(self.settings)
            await follower.start()
            self.control = follower
        self._expiry = asyncio.create_task(self._expire(), name="gateway-expiry")

    async def stop(self) -> None:
        """End every open episode (``abandoned``), flush, disconnect."""
        if self._expiry is not None:
            self._expiry.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._expiry
        for conversation in self.conversations.all():
            await self.end(conversation.episode_id, Outcome.ABANDONED)
        if isinstance(self.control, ControlFollower):
            await self.control.stop()
        if self._client is not None:
            await self._client.aclose()
        if self._producer is not None:
            await self._producer.stop()

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, max(0.05, self.idle_s / 4)))
            for conversation in self.conversations.idle(self.idle_s):
                await self.end(conversation.episode_id, Outcome.ABANDONED)

    # ------------------------------------------------------------------ one call

    async def complete(self, body: dict[str, Any], headers: dict[str, str]) -> Answered:
        """Answer one chat completion (see the module docstring)."""
        started = time.perf_counter()
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("messages must be a list of OpenAI chat messages")
        chat_messages(messages)  # refuse a malformed conversation before forwarding it
        check_names(headers)  # and a name no step could carry
        call = self.conversations.resolve(
            messages,
            episode_id=headers.get(EPISODE_HEADER),
            env=headers.get(ENV_HEADER),
            task_id=headers.get(TASK_HEADER),
        )
        conversation = call.conversation
        handled = self._handled.setdefault(conversation.episode_id, set())
        if self.control is not None:
            obeyed = await obey(
                self.control, conversation.episode_id, handled, self.approval_timeout_s
            )
            if obeyed.do == "halt":
                return await self._halted(conversation, obeyed.control, body, started)
        upstream_started = time.perf_counter()
        reply = await self._forward(body, headers)
        upstream_ms = (time.perf_counter() - upstream_started) * 1000
        if "choices" not in reply:  # an upstream error, passed through as it came
            self.stats.count("upstream_errors")
            return Answered(
                reply, conversation.episode_id, False, upstream_ms, 0.0, reply.pop("_status")
            )
        choice = reply["choices"][0]
        message = dict(choice.get("message") or {})
        version = self._version(reply)
        token_ids, logprobs = tokens_of(choice.get("logprobs"))
        steps = steps_of(
            call,
            message,
            body.get("tools"),
            version,
            token_ids=token_ids,
            logprobs=logprobs,
            info={"finish_reason": choice.get("finish_reason"), "model": reply.get("model")},
        )
        conversation.tools = body.get("tools") or conversation.tools
        steps, published, reason = await self._judge(conversation, steps, handled)
        if reason is not None:
            blocked = next((s for s in steps if s.blocked), steps[-1])
            log.warning(  # a block is shown at the default level (GATEWAY.md)
                "blocked episode %s step %d: %s", blocked.episode_id, blocked.step_index, reason
            )
            message = refused(reason, body.get("tools"))
            finish = "tool_calls" if message.get("tool_calls") else "stop"
            choice = {**choice, "message": message, "finish_reason": finish}
            self.stats.count("blocked")
        if not (body.get("logprobs") or not self.record_tokens):
            choice.pop("logprobs", None)
        reply["choices"] = [choice, *reply["choices"][1:]]
        events: list[Event] = []
        if call.started:
            events.append(self._started(conversation, body, messages, version))
        events += [*steps, *published]
        await self._publish(events)
        self.conversations.published(conversation, steps)
        for gone in self.conversations.let_go():  # memory stays bounded: the oldest end
            await self._ended(gone, Outcome.ABANDONED)
        if conversation.policy_version is None or version < conversation.policy_version:
            conversation.policy_version = version
        self.conversations.answered(conversation, messages, message)
        self.stats.count("calls")
        total_ms = (time.perf_counter() - started) * 1000
        return Answered(reply, conversation.episode_id, reason is not None, upstream_ms, total_ms)

    async def end(
        self, episode_id: str, outcome: Outcome, reward: float = 0.0, halted_by: list[str] = ()
    ) -> bool:
        """End an open episode (publish its end); False if it is not open."""
        conversation = self.conversations.close(episode_id)
        if conversation is None:
            self._handled.pop(episode_id, None)
            return False
        await self._ended(conversation, outcome, reward, halted_by)
        return True

    async def _ended(
        self,
        conversation: Conversation,
        outcome: Outcome,
        reward: float = 0.0,
        halted_by: list[str] = (),  # type: ignore[assignment]
    ) -> None:
        """Publish the end of an episode no longer open (ended, or let go to bound memory)."""
        self._handled.pop(conversation.episode_id, None)
        if conversation.started:
            await self._publish(
                [
                    EpisodeEnded(
                        episode_id=conversation.episode_id,
                        task_id=conversation.task_id,
                        env=conversation.env,
                        outcome=outcome,
                        task_reward=reward,
                        num_steps=conversation.step_count,
                        policy_version=conversation.policy_version,
                        halted_by=list(halted_by),
                    )
                ]
            )

    # ------------------------------------------------------------------ the parts

    async def _forward(self, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        assert self._client is not None, "Gateway.start() first"
        upstream_body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        if self.record_tokens:
            upstream_body["logprobs"] = True
            upstream_body["return_tokens_as_token_ids"] = True
        auth = (
            {"Authorization": f"Bearer {self.upstream_key}"}
            if self.upstream_key
            else {"Authorization": headers["authorization"]}
            if "authorization" in headers
            else {}
        )
        url = f"{self.upstream}/chat/completions"
        shown = redacted(url)  # an upstream's password is never echoed
        try:
            response = await self._client.post(url, json=upstream_body, headers=auth)
            reply = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            said = str(exc).replace(url, shown)
            return {"error": {"message": f"upstream {shown}: {said}", "code": 502}, "_status": 502}
        if response.status_code != 200 or not isinstance(reply, dict) or not reply.get("choices"):
            error = reply.get("error") if isinstance(reply, dict) else None
            return {
                "error": error or {"message": f"upstream {shown}: HTTP {response.status_code}"},
                "_status": response.status_code if response.status_code != 200 else 502,
            }
        return reply

    def _version(self, reply: dict[str, Any]) -> int:
        if self.policy_version is not None:
            return self.policy_version
        served = version_of_fingerprint(reply.get("system_fingerprint"))
        return served if served is not None else 0

    async def _judge(
        self, conversation: Conversation, steps: list[Step], handled: set[str]
    ) -> tuple[list[Step], list[Verdict], str | None]:
        """Guard every tool call (and obey a ``block_action``): the steps as published, the
        guard's verdicts and alerts, and why the reply is refused (None: it is not)."""
        judged: list[Step] = []
        published: list[Verdict] = []
        reason: str | None = None
        if self.control is not None and any(s.action.tool_call for s in steps):
            obeyed = await obey(
                self.control, conversation.episode_id, handled, self.approval_timeout_s
            )
            if obeyed.do in ("block", "halt") and obeyed.control is not None:
                reason = f"control decision {obeyed.control.command}: {obeyed.control.reason}"
        for step in steps:
            if step.action.tool_call is not None and reason is None:
                decision = await self.guard.check(step, [*conversation.steps, *judged])
                published += decision.verdicts
                published += decision.alerts
                if not decision.allow:
                    reason = decision.reason or "judged unsafe"
            if reason is not None and step.action.tool_call is not None:
                step = step.model_copy(update={"blocked": True, "block_reason": reason[:2000]})
            judged.append(step)
        return judged, published, reason

    def _started(
        self,
        conversation: Conversation,
        body: dict[str, Any],
        messages: list[dict[str, Any]],
        version: int,
    ) -> EpisodeStarted:
        conversation.started = True
        return EpisodeStarted(
            episode_id=conversation.episode_id,
            task_id=conversation.task_id,
            env=conversation.env,
            policy_name=str(body.get("model") or GATEWAY_POLICY)[:128],
            policy_version=version,
            prompt=chat_messages(messages),
        )

    async def _halted(
        self,
        conversation: Conversation,
        control: Control | None,
        body: dict[str, Any],
        started: float,
    ) -> Answered:
        why = f"the episode was halted ({control.reason if control else 'control'})"
        message = {"role": "assistant", "content": refusal(why), "refusal": refusal(why)}
        completion = _completion(str(body.get("model") or GATEWAY_POLICY), message, "stop")
        episode = conversation.episode_id
        await self.end(episode, Outcome.HALTED, halted_by=control.verdict_ids if control else [])
        self.stats.count("blocked")
        return Answered(completion, episode, True, 0.0, (time.perf_counter() - started) * 1000)

    async def _publish(self, events: list[Event]) -> None:
        assert self._producer is not None, "Gateway.start() first"
        await self._producer.publish_many(events)

    # ------------------------------------------------------------------ HTTP

    def app(
        self,
        token: str | None = None,
        *,
        bound: str = "127.0.0.1",
        allow_hosts: tuple[str, ...] = (),
        max_body: int = MAX_BODY,
    ) -> FastAPI:
        """The HTTP application behind :class:`~...infra.http.HttpGuard` (with ``token``,
        requests must carry it as a bearer; the upstream then gets ``upstream_key`` or
        nothing). A body over ``max_body`` bytes is refused before anything is forwarded."""

        @contextlib.asynccontextmanager
        async def lifespan(_: FastAPI) -> AsyncIterator[None]:
            await self.start()
            try:
                yield
            finally:
                await self.stop()

        app = FastAPI(title="safactory gateway", docs_url=None, redoc_url=None, lifespan=lifespan)

        app.add_middleware(
            HttpGuard,
            bound=bound,
            token=token,
            allow_hosts=allow_hosts,
            max_body=max_body,
            dialects={"/v1/messages": messages.error},
        )

        @app.get("/health")
        async def _health() -> dict[str, Any]:
            return {"upstream": redacted(self.upstream), "open_episodes": len(self.conversations)}

        @app.get("/v1/models")
        async def _models() -> Any:
            assert self._client is not None
            try:
                response = await self._client.get(f"{self.upstream}/models")
                return JSONResponse(response.json(), status_code=response.status_code)
            except (httpx.HTTPError, ValueError) as exc:
                return openai_error(502, f"upstream {redacted(self.upstream)}/models: {exc!r}")

        def client_headers(request: Request) -> dict[str, str]:
            headers = {k.lower(): v for k, v in request.headers.items()}
            if token:  # the gateway's own token stays here
                headers.pop("authorization", None)
                headers.pop("x-api-key", None)
            elif "x-api-key" in headers and "authorization" not in headers:
                headers["authorization"] = f"Bearer {headers['x-api-key']}"
            return headers

        @app.post("/v1/chat/completions")
        async def _chat(request: Request) -> Any:
            body = await json_object(request)
            if isinstance(body, JSONResponse):
                return body
            try:
                answered = await self.complete(body, client_headers(request))
            except ValueError as exc:
                return openai_error(400, str(exc)[:500])
            if answered.status != 200:
                return _reply(answered, answered.completion, status_code=answered.status)
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return _reply(answered, _sse(answered.completion, include_usage))
            return _reply(answered, answered.completion)

        @app.post("/v1/responses")
        async def _responses(request: Request) -> Any:
            body = await json_object(request)
            if isinstance(body, JSONResponse):
                return body
            previous = body.get("previous_response_id")
            caller = responses.caller_of({k.lower(): v for k, v in request.headers.items()})
            try:
                before = self.responses.transcript(previous, caller) if previous else []
            except KeyError:
                return openai_error(404, f"Previous response with id {previous!r} not found.")
            try:
                chat = responses.to_chat(body, before)
                answered = await self.complete(chat, client_headers(request))
            except ValueError as exc:
                return openai_error(400, str(exc)[:500])
            if answered.status != 200:
                return _reply(answered, answered.completion, status_code=answered.status)
            response = responses.from_chat(answered.completion, body, responses.new_id())
            if body.get("store") is not False:
                said = answered.completion["choices"][0]["message"]
                self.responses.keep(response["id"], [*chat["messages"], said], caller)
            if body.get("stream"):
                return _reply(answered, _named_sse(responses.events(response)))
            return _reply(answered, response)

        @app.post("/v1/messages")
        async def _messages(request: Request) -> Any:
            body = await json_object(request, messages.error)
            if isinstance(body, JSONResponse):
                return body
            try:
                answered = await self.complete(messages.to_chat(body), client_headers(request))
            except ValueError as exc:
                return messages.error(400, str(exc)[:500])
            if answered.status != 200:
                said = (answered.completion.get("error") or {}).get("message")
                return messages.error(answered.status, str(said or "upstream error")[:2000])
            reply = messages.from_chat(answered.completion, body)
            if body.get("stream"):
                return _reply(answered, _named_sse(messages.events(reply)))
            return _reply(answered, reply)

        @app.exception_handler(StarletteHTTPException)
        async def _no_route(request: Request, exc: StarletteHTTPException) -> Response:
            error = messages.error if request.url.path.startswith("/v1/messages") else openai_error
            if exc.status_code not in (404, 405):
                return error(exc.status_code, str(exc.detail))
            return error(
                exc.status_code,
                f"no route {request.method} {request.url.path}: the gateway serves POST "
                "/v1/chat/completions, /v1/responses and /v1/messages (no legacy "
                "/v1/completions), and GET /v1/models",
            )

        @app.post("/v1/sf/episodes/{episode_id}/end")
        async def _end(episode_id: str, request: Request) -> Any:
            raw = await request.body()
            try:
                data = loads(raw) if raw else {}
                outcome = Outcome(data.get("outcome", "success"))
                reward = float(data.get("reward", 0.0))
                if not math.isfinite(reward):
                    raise ValueError(f"reward {data.get('reward')!r} is not a finite number")
            except (ValueError, TypeError, AttributeError) as exc:
                return openai_error(
                    400,
                    f"send {{'outcome': one of {[o.value for o in Outcome]}, 'reward': "
                    f"<number>}} ({exc})",
                )
            if not await self.end(episode_id, outcome, reward):
                return openai_error(404, f"no open episode {episode_id!r}")
            return Response(status_code=204)

        return app


def _reply(answered: Answered, content: Any, status_code: int = 200) -> Response:
    """The HTTP answer to one call: JSON, or a stream of server-sent events; with the
    episode and the gateway's own time in headers."""
    headers = {
        EPISODE_HEADER: answered.episode_id,
        OVERHEAD_HEADER: f"{max(0.0, answered.total_ms - answered.upstream_ms):.3f}",
        VERDICT_HEADER: "block" if answered.blocked else "allow",
    }
    if isinstance(content, dict):
        return JSONResponse(content, status_code=status_code, headers=headers)
    return StreamingResponse(content, media_type="text/event-stream", headers=headers)


async def _named_sse(events: Iterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Events as server-sent events named by their ``type`` (the Responses and Messages
    APIs' streams)."""
    for event in events:
        yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _completion(model: str, message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


async def _sse(completion: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    """A whole completion as OpenAI's stream of ``chat.completion.chunk`` events."""
    base = {
        "id": completion.get("id"),
        "object": "chat.completion.chunk",
        "created": completion.get("created", int(time.time())),
        "model": completion.get("model"),
        "system_fingerprint": completion.get("system_fingerprint"),
    }

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, **extra}
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n".encode()

    choice = completion["choices"][0]
    message = choice.get("message") or {}
    yield chunk({"role": "assistant", "content": ""})
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for i, call in enumerate(message.get("tool_calls") or []):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call.get("id"),
                        "type": "function",
                        "function": call.get("function"),
                    }
                ]
            }
        )
    yield chunk({}, choice.get("finish_reason") or "stop")
    if include_usage:
        usage = {**base, "choices": [], "usage": completion.get("usage")}
        yield f"data: {json.dumps(usage)}\n\n".encode()
    yield b"data: [DONE]\n\n"
