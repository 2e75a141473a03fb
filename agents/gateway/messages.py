"""Anthropic's Messages API (``POST /v1/messages``) as chat completions, and back.

A Messages call is turned into the chat the gateway already forwards, guards and publishes
(:meth:`.app.Gateway.complete`): ``system`` becomes the system message, a ``tool_use``
block the assistant's tool call (its ``input`` as JSON arguments), a ``tool_result`` block
the tool's message, tools become chat function tools. The chat reply comes back as a
``message`` with ``text`` and ``tool_use`` blocks (a ``tool_use`` id is the chat call's id,
so the next call's transcript matches the episode's). A refused call is a ``text`` block
with the refusal and ``stop_reason: refusal`` (the API's own): the agent's loop ends its
turn on it, and code can tell it from an answer.

Nothing here does I/O.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from fastapi.responses import JSONResponse

from ...infra.http import ERROR_KINDS

STOP_REASONS = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _text(content: Any) -> str:
    """A Messages content (a string or a list of blocks) as plain text (images and
    documents are named, not carried)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif isinstance(block, dict) and block.get("type") in ("image", "document"):
            parts.append(f"[{block['type']}]")
    return "\n".join(parts)


def _turns(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One Messages turn as chat messages: a user's tool results are tool messages (first,
    as the API requires them), an assistant's tool uses its tool calls."""
    role, content = message.get("role"), message.get("content")
    if role not in ("user", "assistant"):
        raise ValueError(f"message role {role!r}: Messages turns are 'user' or 'assistant'")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise ValueError("message content must be a string or a list of content blocks")
    blocks = [b for b in content if isinstance(b, dict)]
    text = _text(blocks)
    if role == "assistant":
        calls = [
            {
                "id": str(b.get("id") or ""),
                "type": "function",
                "function": {
                    "name": str(b.get("name") or ""),
                    "arguments": json.dumps(b.get("input") or {}, ensure_ascii=False),
                },
            }
            for b in blocks
            if b.get("type") == "tool_use"
        ]
        turn: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            turn["tool_calls"] = calls
        return [turn]
    out = [
        {
            "role": "tool",
            "tool_call_id": str(b.get("tool_use_id") or ""),
            "content": ("[error] " if b.get("is_error") else "") + _text(b.get("content")),
        }
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    if text or not out:
        out.append({"role": "user", "content": text})
    return out


def _tool_choice(choice: Any) -> Any:
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(kind or "")


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat completion a Messages call asks for (``ValueError``: not a Messages call)."""
    turns = body.get("messages")
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        raise ValueError("messages must be a list of Messages turns")
    messages: list[dict[str, Any]] = []
    system = _text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for turn in turns:
        messages += _turns(turn)
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    tools = [
        {
            "type": "function",
            "function": {
                "name": t["name"],
                "description": t.get("description") or "",
                "parameters": t.get("input_schema") or {"type": "object"},
            },
        }
        for t in body.get("tools") or []
        if isinstance(t, dict) and t.get("name") and "input_schema" in t  # not server tools
    ]
    if tools:
        chat["tools"] = tools
        choice = _tool_choice(body.get("tool_choice"))
        if choice is not None:
            chat["tool_choice"] = choice
    if body.get("max_tokens") is not None:
        chat["max_tokens"] = body["max_tokens"]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            chat[name] = body[name]
    return chat


def _input(arguments: str | None) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}  # the model's own malformed JSON, kept as said
    return value if isinstance(value, dict) else {"arguments": value}


def from_chat(completion: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """The Messages ``message`` for a chat completion the gateway answered."""
    choice = completion["choices"][0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": _text(message["content"])})
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        content.append(
            {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}",
                "name": function.get("name"),
                "input": _input(function.get("arguments")),
            }
        )
    usage = completion.get("usage") or {}
    stop = STOP_REASONS.get(choice.get("finish_reason") or "stop", "end_turn")
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": completion.get("model") or body.get("model"),
        "content": content,
        "stop_reason": "tool_use"
        if message.get("tool_calls")
        else "refusal"
        if message.get("refusal")
        else stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": int(usage.get("prompt_tokens") or 0),
            "output_tokens": int(usage.get("completion_tokens") or 0),
        },
    }


def events(reply: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A whole message as the Messages API's stream of events (each with its ``type``)."""
    usage = reply["usage"]
    started = {**reply, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    yield {"type": "message_start", "message": started}
    for index, block in enumerate(reply["content"]):
        if block["type"] == "text":
            opened = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield {"type": "content_block_start", "index": index, "content_block": opened}
        yield {"type": "content_block_delta", "index": index, "delta": delta}
        yield {"type": "content_block_stop", "index": index}
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
        "usage": {"output_tokens": usage["output_tokens"]},
    }
    yield {"type": "message_stop"}


def error(status: int, message: str) -> JSONResponse:
    """Anthropic's error body (what its clients parse)."""
    kind = ERROR_KINDS.get(status, "invalid_request_error" if status < 500 else "api_error")
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return JSONResponse(body, status_code=status)
