"""The OpenAI Responses API (``POST /v1/responses``) as chat completions, and back.

A Responses call is turned into the chat the gateway already forwards, guards and
publishes (:meth:`.app.Gateway.complete`): ``instructions`` become the system message,
``input`` items become turns (a ``function_call`` is the assistant's tool call, a
``function_call_output`` the tool's result), function tools become chat tools. The chat
reply comes back as a ``response`` object: a ``message`` item for text, a ``function_call``
item per tool call (its ``call_id`` is the chat call's id, so the next call's transcript
matches the episode's). A refused call is a ``message`` item with the refusal (as text, and
as the API's own ``refusal`` content part, for code that tells a block from an answer): the agent's
run ends with it as the final output.

``previous_response_id`` chains a call to one answered here: :class:`ResponseStore` keeps
each answered transcript (bounded), and the new input continues it, as one episode.

Nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from .conversations import MESSAGE_BYTES

STORE_BYTES = 64 << 20
"""Most transcript memory kept for ``previous_response_id`` chaining (text, and
:data:`MESSAGE_BYTES` a message); the least recently used go first."""


class ResponseStore:
    """The transcripts of answered responses, by response id, each with the caller that
    made it, least recently used first out once their memory passes ``max_bytes``. A chain
    continues only for its own caller: another key asking for the id is told it is not
    here, as if it never was."""

    def __init__(self, max_bytes: int = STORE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._kept: OrderedDict[str, tuple[list[dict[str, Any]], int, str]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._kept)

    def keep(self, response_id: str, transcript: list[dict[str, Any]], caller: str = "") -> None:
        """Remember the chat transcript that ends with response ``response_id``'s reply,
        made by ``caller`` (:func:`caller_of`)."""
        size = len(json.dumps(transcript, ensure_ascii=False)) + MESSAGE_BYTES * len(transcript)
        self._kept[response_id] = (transcript, size, caller)
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._kept) > 1:
            _, (_, gone, _) = self._kept.popitem(last=False)
            self._bytes -= gone

    def transcript(self, response_id: str, caller: str = "") -> list[dict[str, Any]]:
        """The transcript response ``response_id`` ended (``KeyError``: not kept here, or
        kept for another caller)."""
        transcript, _, owner = self._kept[response_id]
        if not hmac.compare_digest(owner, caller):
            raise KeyError(response_id)
        self._kept.move_to_end(response_id)
        return list(transcript)


def caller_of(headers: dict[str, str]) -> str:
    """Who makes a call, for chaining: a digest of its credential (``authorization`` or
    ``x-api-key``; lower-case names), empty for a call without one."""
    credential = headers.get("authorization") or headers.get("x-api-key") or ""
    return hashlib.sha256(credential.encode()).hexdigest() if credential else ""


def _text(content: Any) -> str:
    """A Responses content (a string or a list of text parts) as plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return ""


def input_messages(items: Any) -> list[dict[str, Any]]:
    """``input`` (a string or a list of items) as chat messages (``ValueError``: not one).
    Items a chat has no place for (reasoning, references) are left out."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise ValueError("input must be a string or a list of items")
    messages: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError("each input item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise ValueError(f"input message role {role!r} is not one the API knows")
            role = "system" if role == "developer" else role
            messages.append({"role": role, "content": _text(item.get("content"))})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or item.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(item.get("name") or ""),
                    "arguments": str(item.get("arguments") or "{}"),
                },
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            elif last is not None and last["role"] == "assistant":
                last["tool_calls"] = [call]  # text and calls of one reply: one message
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id") or ""),
                    "content": output if isinstance(output, str) else _text(output),
                }
            )
    return messages


def _tools(tools: Any) -> list[dict[str, Any]]:
    """Function tools as chat tools (hosted tools, which only OpenAI runs, are left out)."""
    out = []
    for tool in tools or []:
        if isinstance(tool, dict) and tool.get("type") == "function" and tool.get("name"):
            function = {"name": tool["name"], "parameters": tool.get("parameters") or {}}
            if tool.get("description"):
                function["description"] = tool["description"]
            out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice if choice in ("auto", "none", "required") else None


def to_chat(body: dict[str, Any], before: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat completion a Responses call asks for; ``before`` is the transcript its
    ``previous_response_id`` names (empty: none)."""
    messages = list(before)
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions and not before:
        messages.append({"role": "system", "content": instructions})
    messages += input_messages(body.get("input", []))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    tools = _tools(body.get("tools"))
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
        if body.get("parallel_tool_calls") is not None:
            chat["parallel_tool_calls"] = bool(body["parallel_tool_calls"])
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p", "user"):
        if body.get(name) is not None:
            chat[name] = body[name]
    return chat


def new_id() -> str:
    """A response id (``resp_…``)."""
    return f"resp_{uuid.uuid4().hex}"


def from_chat(completion: dict[str, Any], body: dict[str, Any], response_id: str) -> dict[str, Any]:
    """The ``response`` object for a chat completion the gateway answered."""
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    if message.get("content"):
        output.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:24]}",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": _text(message["content"]), "annotations": []},
                    *(
                        [{"type": "refusal", "refusal": message["refusal"]}]
                        if message.get("refusal")
                        else []
                    ),
                ],
            }
        )
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:24]}",
                "call_id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments") or "{}",
                "status": "completed",
            }
        )
    usage = completion.get("usage") or {}
    took, gave = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    truncated = choice.get("finish_reason") == "length"
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(completion.get("created") or time.time()),
        "status": "incomplete" if truncated else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "error": None,
        "model": completion.get("model") or body.get("model"),
        "instructions": body.get("instructions"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "store": body.get("store", True),
        "usage": {
            "input_tokens": took,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": gave,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": took + gave,
        },
    }


def events(response: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A whole response as the Responses API's stream of events (each with its ``type``
    and ``sequence_number``)."""
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    sequence = 0

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        nonlocal sequence
        sequence += 1
        return {"type": kind, "sequence_number": sequence - 1, **fields}

    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        at = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            started = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", output_index=index, item=started)
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", **at, content_index=0, part=part)
            yield event("response.output_text.delta", **at, content_index=0, delta=text)
            yield event("response.output_text.done", **at, content_index=0, text=text)
            part = item["content"][0]
            yield event("response.content_part.done", **at, content_index=0, part=part)
            for index_, part in enumerate(item["content"][1:], 1):  # the refusal, if any
                said = part["refusal"]
                empty = {"type": "refusal", "refusal": ""}
                yield event("response.content_part.added", **at, content_index=index_, part=empty)
                yield event("response.refusal.delta", **at, content_index=index_, delta=said)
                yield event("response.refusal.done", **at, content_index=index_, refusal=said)
                yield event("response.content_part.done", **at, content_index=index_, part=part)
        else:
            arguments = item["arguments"]
            started = {**item, "status": "in_progress", "arguments": ""}
            yield event("response.output_item.added", output_index=index, item=started)
            yield event("response.function_call_arguments.delta", **at, delta=arguments)
            yield event("response.function_call_arguments.done", **at, arguments=arguments)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=response)
