"""OpenAI chat-format messages and tool calls, as they travel in step and trajectory events."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CHAT_CONFIG = ConfigDict(extra="forbid", ser_json_inf_nan="constants")
"""Non-finite floats (in ``content`` parts, ``arguments`` of schemas) are written as the JSON
constants ``NaN``/``Infinity`` so they decode back (see ``events.WIRE_CONFIG``)."""


class FunctionCall(BaseModel):
    """The function part of an OpenAI tool call; ``arguments`` is a JSON string."""

    model_config = CHAT_CONFIG
    name: str
    arguments: str = "{}"


class ToolCall(BaseModel):
    """An OpenAI chat tool call (``{"id", "type": "function", "function": {...}}``)."""

    model_config = CHAT_CONFIG
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message in OpenAI chat format."""

    model_config = CHAT_CONFIG
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class ToolSchema(BaseModel):
    """A tool offered to the model, in OpenAI ``tools`` format."""

    model_config = CHAT_CONFIG
    type: Literal["function"] = "function"
    function: dict[str, Any] = Field(description="{name, description, parameters (JSON schema)}")
