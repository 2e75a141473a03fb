"""The OpenTelemetry GenAI vocabulary shared by ``export --format otel`` and the ``otel``
importer: attribute names, OTLP/JSON values and chat messages as GenAI message parts.

OTLP/JSON is the JSON encoding of ``ExportTraceServiceRequest`` (``resourceSpans`` →
``scopeSpans`` → ``spans``; ids as lowercase hex, times as decimal strings of Unix
nanoseconds, 64-bit integers as strings, attributes as ``{"key", "value": {"stringValue" |
"intValue" | "doubleValue" | "boolValue" | "arrayValue" | "kvlistValue"}}``). Message
attributes (``gen_ai.input.messages`` / ``gen_ai.output.messages``) hold JSON in the GenAI
conventions' parts form: ``{"role", "parts": [{"type": "text", "content"} | {"type":
"tool_call", "id", "name", "arguments"} | {"type": "tool_call_response", "id", "response"}]}``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .chat import ChatMessage, FunctionCall, ToolCall

OPERATION = "gen_ai.operation.name"
AGENT_NAME = "gen_ai.agent.name"
CONVERSATION = "gen_ai.conversation.id"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_NAME = "gen_ai.tool.name"
TOOL_TYPE = "gen_ai.tool.type"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_SCORE = "gen_ai.evaluation.score.value"
EVALUATION_LABEL = "gen_ai.evaluation.score.label"
EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"

INVOKE_AGENT, CHAT, EXECUTE_TOOL = "invoke_agent", "chat", "execute_tool"
MODEL_CALLS = frozenset({CHAT, "text_completion", "generate_content"})
"""Operation names of a model call: each one is an agent step."""
SPAN_INTERNAL, SPAN_CLIENT = 1, 3
STATUS_ERROR = 2


def hex_id(size: int, *parts: str) -> str:
    """A deterministic id of ``size`` bytes, as hex (trace ids 16, span ids 8)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[: 2 * size]


def any_value(value: Any) -> dict[str, Any]:
    """An OTLP/JSON ``AnyValue`` (bool before int: ``True`` is an ``int`` in Python)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, list | tuple):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": attributes(value)}}
    return {"stringValue": str(value)}


def from_any_value(value: Any) -> Any:
    """The Python value of an OTLP/JSON ``AnyValue`` (``intValue`` as string or number);
    None for anything malformed (a foreign trace never breaks the reader)."""
    if not isinstance(value, dict) or not value:
        return None
    kind, inner = next(iter(value.items()))
    try:
        if kind == "intValue":
            return int(inner)
        if kind == "doubleValue":
            return float(inner)
    except (TypeError, ValueError, OverflowError):
        return None
    if kind in ("arrayValue", "kvlistValue"):
        values = inner.get("values") if isinstance(inner, dict) else None
        if not isinstance(values, list):
            return None
        if kind == "arrayValue":
            return [from_any_value(v) for v in values]
        return attribute_dict(values)
    return inner


def attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    """OTLP/JSON attributes of ``values`` (None values left out)."""
    return [{"key": k, "value": any_value(v)} for k, v in values.items() if v is not None]


def attribute_dict(items: Any) -> dict[str, Any]:
    """``{key: value}`` of OTLP/JSON attributes (anything malformed is left out)."""
    if not isinstance(items, list):
        return {}
    return {
        str(a["key"]): from_any_value(a.get("value"))
        for a in items
        if isinstance(a, dict) and "key" in a
    }


def to_parts(message: ChatMessage) -> dict[str, Any]:
    """A chat message in the GenAI parts form."""
    parts: list[dict[str, Any]] = []
    if message.role == "tool":
        parts.append(
            {"type": "tool_call_response", "id": message.tool_call_id, "response": message.content}
        )
    elif isinstance(message.content, str):
        parts.append({"type": "text", "content": message.content})
    elif isinstance(message.content, list):
        parts += [
            {"type": "text", "content": p.get("text", "")} if p.get("type") == "text" else p
            for p in message.content
        ]
    for call in message.tool_calls or []:
        parts.append(
            {
                "type": "tool_call",
                "id": call.id,
                "name": call.function.name,
                "arguments": _arguments_value(call.function.arguments),
            }
        )
    out: dict[str, Any] = {"role": message.role, "parts": parts}
    if message.name:
        out["name"] = message.name
    return out


def from_parts(raw: Any) -> ChatMessage:
    """A chat message from the GenAI parts form (or an OpenAI-style message, as some
    instrumentations write); raises ValueError naming what is wrong."""
    if not isinstance(raw, dict) or "role" not in raw:
        raise ValueError("a message must be an object with a 'role'")
    role = str(raw["role"])
    if "parts" not in raw:  # OpenAI-style {"role", "content", "tool_calls"}
        return ChatMessage.model_validate(raw)
    texts: list[str] = []
    calls: list[ToolCall] = []
    response: tuple[str | None, Any] | None = None
    for part in raw.get("parts") or []:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("content", "")))
        elif kind == "tool_call":
            calls.append(
                ToolCall(
                    id=str(part.get("id") or f"call_{len(calls)}"),
                    function=FunctionCall(
                        name=str(part.get("name", "")),
                        arguments=arguments_text(part.get("arguments")),
                    ),
                )
            )
        elif kind == "tool_call_response":
            response = (part.get("id"), part.get("response"))
    if role == "tool" or response is not None:
        call_id, content = response or (None, "\n".join(texts))
        return ChatMessage(
            role="tool",
            tool_call_id=None if call_id is None else str(call_id),
            content=text_of(content),
        )
    return ChatMessage.model_validate(
        {
            "role": role,
            "content": "\n".join(texts) if texts else None,
            "tool_calls": calls or None,
            "name": raw.get("name"),
        }
    )


def messages_json(messages: list[ChatMessage]) -> str | None:
    """The JSON of a message attribute (None for no messages)."""
    return json.dumps([to_parts(m) for m in messages], ensure_ascii=False) if messages else None


def arguments_text(value: Any) -> str:
    """Tool-call arguments as OpenAI carries them: a JSON string."""
    if value is None:
        return "{}"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def text_of(value: Any) -> str | None:
    """A tool result or content as text (structured values as JSON)."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _arguments_value(arguments: str) -> Any:
    """Arguments as the parts form prefers them: the JSON object, else the string as given."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    return value if isinstance(value, dict) else arguments
