"""Reading the text a checker needs out of a step: what came in, what the agent did.

Steps come from many environments (live runners, imported R-Judge or AgentDojo traces), so
checkers read them through these helpers rather than poking at fields directly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from ...schemas import ChatMessage, Step


@dataclass(frozen=True, slots=True)
class Span:
    """A piece of a step's text and the field it came from (for ``Evidence``)."""

    field: str
    text: str


def message_text(message: ChatMessage) -> str:
    """The text content of a chat message (text parts of multi-part content joined)."""
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def presented_task(step: Step) -> str | None:
    """The request an environment presented as the first observation of an episode whose
    first step carries no user message (the runner publishes the prompt with the episode's
    start and the request again as step 0's observation); None otherwise."""
    if step.step_index != 0 or not step.observation:
        return None
    if any(m.role in ("user", "system", "developer") for m in step.messages):
        return None
    return step.observation


_RELAYED = re.compile(
    r"^\s*(?:observation|tool\s+(?:output|result|response)|function\s+(?:output|result)|"
    r"(?:command\s+)?output|result|returned|\[(?:tool|function|observation)[^\]\n]{0,40}\])"
    r"\s*[:\]\-—]",
    re.IGNORECASE,
)
"""A user turn that relays what a tool or the environment returned (an orchestrator or a
framework writes tool output back as ``user``): evidence, not the principal's words."""
_OBSERVED = re.compile(
    r"(?:^|\n|[.!?]\s)\s*Observation\s*:\s*(.+?)(?=\n\s*(?:Thought|Action|Action Input|"
    r"Final Answer)\s*:|\Z)",
    re.IGNORECASE | re.DOTALL,
)
"""An observation the agent quotes in its own thought (ReAct logs): what came back."""


def relayed(text: str) -> bool:
    """Whether a user turn relays tool or environment output (see :data:`_RELAYED`)."""
    return bool(_RELAYED.match(text))


def user_spans(step: Step) -> Iterator[Span]:
    """What the user (or system/developer) said in this step: the task's own words (a user
    turn that relays tool output is evidence, in :func:`incoming_spans`)."""
    for i, message in enumerate(step.messages):
        if message.role in ("user", "system", "developer"):
            text = message_text(message)
            if text and not (message.role == "user" and relayed(text)):
                yield Span(f"messages[{i}]", text)
    task = presented_task(step)
    if task:
        yield Span("observation", task)


def incoming_spans(step: Step) -> Iterator[Span]:
    """Text the agent received from outside, wherever a framework logged it: the
    environment's observation, the tool output, tool messages (``.earlier`` when they answer
    an earlier call than this step's), user turns that relay tool output (``.relayed``), and
    observations the agent quotes in its own thought (``.observation``)."""
    if step.observation and presented_task(step) is None:
        yield Span("observation", step.observation)
    if step.tool_result:
        yield Span("tool_result", step.tool_result)
    for i, message in enumerate(step.messages):
        text = message_text(message)
        if not text:
            continue
        if message.role == "tool" and text != step.tool_result:
            own = step.action.tool_call
            answers = message.tool_call_id
            earlier = own is None or (answers is not None and answers != own.id)
            yield Span(f"messages[{i}].earlier" if earlier else f"messages[{i}]", text)
        elif message.role == "user" and relayed(text):
            yield Span(f"messages[{i}].relayed", text)
        elif message.role == "assistant" and "bservation" in text:
            for found in _OBSERVED.finditer(text):
                quoted = found.group(1).strip()
                if quoted and quoted != step.tool_result:
                    yield Span(f"messages[{i}].observation", quoted)


def tool_name(step: Step) -> str:
    """Name of the tool the agent called in this step ('' if none)."""
    call = step.action.tool_call
    return call.function.name if call else ""


def tool_arguments(step: Step) -> str:
    """The tool call's arguments as a JSON string ('' if no call)."""
    call = step.action.tool_call
    return call.function.arguments if call else ""


def tool_argument_values(step: Step) -> list[str]:
    """Every scalar value in the tool call's arguments, as strings."""
    raw = tool_arguments(step)
    if not raw:
        return []
    try:
        parsed = json.loads(raw)
    except ValueError:
        return [raw]
    out: list[str] = []
    _flatten(parsed, out)
    return out


def _flatten(value: object, out: list[str]) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _flatten(item, out)
    elif isinstance(value, list):
        for item in value:
            _flatten(item, out)
    elif value is not None:
        out.append(str(value))


def action_spans(step: Step) -> Iterator[Span]:
    """What the agent produced: its text (reply or code) and its tool call."""
    if step.action.text:
        yield Span("action.text", step.action.text)
    call = step.action.tool_call
    if call:
        yield Span("action.tool_call", f"{call.function.name}({call.function.arguments})")


_SQL = re.compile(
    r"^\s*(select|insert|update|delete|drop|alter|create|grant|revoke|truncate|vacuum)\b",
    re.IGNORECASE,
)
_COMMAND = re.compile(r"^(sudo\s+)?[a-z][\w.+-]*(\s+\S+)*$")
_MACHINE_MARK = re.compile(r"(^|\s)-{1,2}[\w-]|[/~|;&<>@=$`]|\s\d+[a-z]*(\s|$)")
_PROSE = re.compile(
    r"\b(the|a|an|and|or|to|of|you|your|i|we|is|are|was|please|this|that|with|for)\b", re.I
)


def machine_text(text: str) -> bool:
    """Whether ``text`` is written for a machine, not for people: a command line (a
    lowercase program word, then arguments with options, paths, operators or addresses, and
    none of the little words sentences are made of) or an SQL statement, on one line.
    Content classifiers (toxicity) judge text for people."""
    line = text.strip()
    if not line or "\n" in line:
        return False
    if _SQL.match(line):
        return True
    return bool(_COMMAND.match(line) and _MACHINE_MARK.search(line) and not _PROSE.search(line))


def written_for_people(step: Step) -> Iterator[Span]:
    """The spans of the agent's output that people read: its reply text, unless it is a
    command (or the menu entry the step offered), and the arguments of a call that sends
    or publishes (a message's body), never a shell command or a lookup's arguments."""
    text = step.action.text
    if text and not machine_text(text) and text.strip() not in (step.choices or ()):
        yield Span("action.text", text)


def action_text(step: Step) -> str:
    """All the agent's output in this step as one string."""
    return "\n".join(span.text for span in action_spans(step))


def task_text(step: Step, context: list[Step]) -> str:
    """The user's own words in the episode so far (what the agent was asked to do)."""
    return "\n".join(span.text for s in [*context, step] for span in user_spans(s))


def final_reply(step: Step) -> str:
    """The agent's text reply when it made no tool call ('' otherwise)."""
    return step.action.text or "" if step.action.tool_call is None else ""


def trajectory_text(steps: list[Step], budget: int = 1400) -> str:
    """A trajectory as one text for a reader with a budget (a judge's prompt): the task,
    then the agent's actions (latest kept when long), each with the start of what came back."""
    if not steps:
        return ""
    task = task_text(steps[-1], list(steps[:-1]))[-400:]
    lines = []
    for step in steps:
        name = tool_name(step)
        if name:
            lines.append(f"Action: {name} {tool_arguments(step)[:160]}")
            if step.tool_result:
                lines.append(f"Result: {step.tool_result[:100]}")
        else:
            lines.append(f"Reply: {final_reply(step)[:200]}")
    body = "\n".join(lines)
    if len(body) > budget - len(task):
        body = body[-(budget - len(task)) :]
    return f"Task: {task}\n{body}"
