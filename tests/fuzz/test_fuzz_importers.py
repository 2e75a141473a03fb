"""Fuzz the trace importers (docs/AUDIT_FORMATS.md): any file, in any format, imports or is
refused with ImportFormatError or a SkippedRecord whose reason is one line naming file and
record; never another exception. Every step imported goes on the wire (``safactory import``
publishes them)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from fuzz_strategies import fuzz, json_objects, json_values, one_line
from hypothesis import given
from hypothesis import strategies as st

from safactory import schemas as s
from safactory.tools.importers import (
    FORMATS,
    AuditRecord,
    ImportFormatError,
    SkippedRecord,
    read_entries,
)

WORK = Path(tempfile.mkdtemp(prefix="sf-fuzz-import-"))

# Text now and then with lone surrogates: json.dumps writes them as "\ud800" escapes, which
# json.loads reads back as unpaired surrogates that UTF-8 cannot encode.
texts = st.text(max_size=30) | st.text(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF) | st.sampled_from("ab {}:\n"),
    max_size=6,
)
actions = st.one_of(
    texts,
    st.builds(lambda n, a: f"{n}: {a}", st.sampled_from(["Bash", "Thought", "send"]), texts),
    st.builds(lambda n, a: f"{n}{json.dumps(a)}", st.sampled_from(["Read", "X_y"]), json_values),
    st.builds(lambda n, a: f"{n}{{{a}", st.sampled_from(["Cut", "A1"]), texts),
    st.builds(
        lambda n, a, o: f"Thought: t\nAction: {n}\nAction Input: {a}\nObservation: {o}",
        st.sampled_from(["Read", "x.y"]),
        texts,
        texts,
    ),
    json_objects,
)


def _field(good: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Mostly the right kind of value for a field, sometimes anything JSON."""
    return st.one_of(good, good, json_values)


def _record(fields: dict[str, st.SearchStrategy[object]]) -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({}, optional={k: _field(v) for k, v in fields.items()})


labels = st.sampled_from([0, 1, "1", "true", "unsafe", "safe", "maybe", True, None])
rjudge_turn = _record(
    {
        "role": st.sampled_from(
            ["user", "agent", "environment", "assistant", "tool", "human", "x"]
        ),
        "content": texts,
        "thought": texts,
        "action": actions,
    }
)
rjudge = st.lists(
    _record(
        {
            "id": st.integers() | texts,
            "contents": st.lists(st.lists(rjudge_turn, max_size=3), max_size=2)
            | st.lists(rjudge_turn, max_size=3),
            "profile": texts,
            "scenario": texts,
            "label": labels,
            "attack_type": texts,
            "risk_description": texts,
        }
    ),
    max_size=3,
)
tool_call = _record(
    {
        "id": texts,
        "type": st.just("function"),
        "function": _record({"name": texts, "arguments": texts | json_objects}),
        "args": json_values,
    }
)
content = texts | st.lists(_record({"type": st.just("text"), "text": texts}), max_size=2)
chat_message = _record(
    {
        "role": st.sampled_from(
            ["system", "developer", "user", "assistant", "tool", "function", "x"]
        ),
        "content": content,
        "tool_calls": st.lists(tool_call, max_size=2),
        "tool_call_id": texts,
        "function_call": _record({"name": texts, "arguments": texts}),
        "refusal": texts,
        "error": texts,
        "name": texts,
    }
)
openhands_event = _record(
    {
        "id": st.integers(0, 5),
        "source": st.sampled_from(["user", "agent", "environment", "x"]),
        "action": st.sampled_from(
            ["run", "read", "message", "finish", "think", "system", "recall"]
        ),
        "observation": st.sampled_from(["run", "error", "null", "chat"]),
        "cause": st.integers(0, 5),
        "args": json_objects,
        "content": content,
        "message": texts,
        "tool_call_metadata": _record({"tool_call_id": texts}),
    }
)
generic_turn = _record(
    {
        "role": st.sampled_from(
            ["user", "system", "agent", "assistant", "tool", "observation", "x"]
        ),
        "content": content,
        "text": texts,
        "tool": texts,
        "name": texts,
        "arguments": json_values,
        "output": content,
        "result": texts,
        "id": texts,
    }
)
metadata = _record(
    {
        "group": texts,
        "attack": texts,
        "suite_name": texts,
        "user_task_id": texts,
        "injection_task_id": texts,
        "security": labels,
    }
)


def _trajectories(field: str, items: st.SearchStrategy[dict]) -> st.SearchStrategy[object]:
    record = _record(
        {
            "id": texts,
            "instance_id": texts,
            "label": labels,
            "unsafe": labels,
            "group": texts,
            "attack": texts,
            "metadata": metadata,
            field: st.lists(items, max_size=4),
        }
    )
    return st.one_of(record, st.lists(items, max_size=4), st.lists(record, max_size=3))


otel_value = st.one_of(
    st.fixed_dictionaries({"stringValue": texts}),
    st.fixed_dictionaries({"intValue": texts}),
    st.fixed_dictionaries({"boolValue": st.booleans()}),
    json_objects,
)
otel_attributes = st.lists(
    _record(
        {
            "key": st.sampled_from(
                [
                    "gen_ai.operation.name",
                    "gen_ai.tool.name",
                    "gen_ai.conversation.id",
                    "gen_ai.input.messages",
                    "gen_ai.output.messages",
                    "gen_ai.tool.call.arguments",
                    "gen_ai.tool.call.result",
                    "safactory.unsafe",
                    "x",
                ]
            ),
            "value": otel_value,
        }
    ),
    max_size=5,
)
otel_span = _record(
    {
        "traceId": st.sampled_from(["a" * 32, "b" * 32]) | texts,
        "spanId": st.sampled_from(["1" * 16, "2" * 16, "3" * 16]) | texts,
        "parentSpanId": st.sampled_from(["", "1" * 16, "2" * 16]) | texts,
        "name": st.sampled_from(["invoke_agent a", "chat m", "execute_tool t", "x"]),
        "startTimeUnixNano": texts,
        "endTimeUnixNano": texts,
        "attributes": otel_attributes,
        "events": st.lists(_record({"name": texts, "attributes": otel_attributes}), max_size=2),
    }
)
otel = _record(
    {
        "resourceSpans": st.lists(
            _record(
                {
                    "resource": _record({"attributes": otel_attributes}),
                    "scopeSpans": st.lists(
                        _record({"spans": st.lists(otel_span, max_size=4)}), max_size=2
                    ),
                }
            ),
            max_size=2,
        )
    }
)


agentleak_run = _record(
    {
        "trace_id": texts,
        "vertical": texts,
        "input": _record({"request": texts, "vault": json_objects}),
        "llm_calls": st.lists(
            _record({"system_prompt": texts, "user_prompt": texts, "response": texts}), max_size=2
        ),
        "channel_messages": st.lists(
            _record(
                {
                    "channel": st.sampled_from(["C1", "C2", "C3", "C5", "C6", "x"]) | texts,
                    "target": texts,
                    "content": texts,
                }
            ),
            max_size=4,
        ),
        "results": _record({"c1_leaked": st.booleans(), "c2_leaked": labels}),
    }
)

SHAPED = {
    "otel": otel | st.lists(otel, max_size=2),
    "agentleak": st.lists(agentleak_run, max_size=3),
    "rjudge": rjudge,
    "agentdojo": st.lists(
        _record({"messages": st.lists(chat_message, max_size=4), "metadata": metadata}),
        max_size=3,
    ),
    "openai": _trajectories("messages", chat_message),
    "openhands": _trajectories("history", openhands_event)
    | _trajectories("events", openhands_event),
    "generic": _trajectories("steps", generic_turn) | _trajectories("turns", generic_turn),
}
"""Per format, values shaped like its records with any field now and then anything."""


@st.composite
def files(draw: st.DrawFn, fmt: str) -> tuple[str, bytes]:
    """(suffix, content) of a file to import as ``fmt``."""
    kind = draw(st.sampled_from(["shaped", "shaped-lines", "json", "bytes", "deep"]))
    suffix = (
        ".jsonl"
        if fmt in ("agentdojo", "agentleak")
        else draw(st.sampled_from([".json", ".jsonl"]))
    )
    if fmt == "rjudge":
        suffix = ".json"
    if kind == "bytes":
        return suffix, draw(st.binary(max_size=120))
    if kind == "deep":  # nesting past Python's recursion limit
        depth = draw(st.integers(900, 5_000))
        return suffix, b"[" * depth + b"]" * draw(st.sampled_from([depth, 0]))
    value = draw(SHAPED[fmt] if kind.startswith("shaped") else json_values)
    if kind == "shaped-lines" and isinstance(value, list):
        lines = [json.dumps(v) for v in value]
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(["", "{", "nul"])))
        return suffix, "\n".join(lines).encode()
    return suffix, json.dumps(value).encode()


def _import_checks(fmt: str, suffix: str, data: bytes) -> None:
    path = WORK / f"trace-{fmt}{suffix}"
    path.write_bytes(data)
    try:
        entries = read_entries(path, fmt)
    except ImportFormatError as exc:
        assert one_line(str(exc)), str(exc)
        return
    for entry in entries:
        if isinstance(entry, SkippedRecord):
            assert one_line(entry.reason), entry.reason
            assert path.name in entry.reason, entry.reason
        else:
            assert isinstance(entry, AuditRecord)
            for step in entry.steps:
                s.encode(step)  # `safactory import` publishes every step


@pytest.mark.parametrize("fmt", FORMATS)
def test_any_file_imports_or_is_refused_in_one_line(fmt: str) -> None:
    @fuzz()
    @given(files(fmt))
    def check(file: tuple[str, bytes]) -> None:
        _import_checks(fmt, *file)

    check()


@pytest.mark.parametrize(
    ("fmt", "suffix", "data", "imported"),
    [
        # RecursionError escaped json.loads
        ("openai", ".json", b"[" * 2000 + b"]" * 2000, False),
        # AttributeError: 'list' object has no attribute 'get'
        ("agentdojo", ".jsonl", b'{"messages": [], "metadata": [null]}', False),
        # the reason quoted the id as written: a newline split it over two lines
        ("generic", ".json", b'{"id": "a\\nb", "label": "maybe", "steps": []}', False),
        # json.loads read "\ud800" as a lone surrogate: encode (publish) crashed on it
        (
            "openai",
            ".json",
            b'[{"role": "user", "content": "\\ud800"}, {"role": "assistant",'
            b' "content": "x\\udfff", "tool_calls": [{"id": "1", "function": {"name": "f",'
            b' "arguments": {"\\ud801": 1}}}]}]',
            True,
        ),
        # a long scenario made env longer than Step allows: the record was skipped with a
        # multi-line pydantic error
        (
            "rjudge",
            ".json",
            b'[{"scenario": "' + b"s" * 100 + b'", "contents": [[{"role":'
            b' "agent", "action": "A: {}"}]]}]',
            True,
        ),
    ],
    ids=["deep", "agentdojo-metadata-list", "id-with-newline", "surrogates", "long-scenario"],
)
def test_minimal_cases_the_fuzzer_found(fmt: str, suffix: str, data: bytes, imported: bool) -> None:
    _import_checks(fmt, suffix, data)
    path = WORK / f"trace-{fmt}{suffix}"
    entries = read_entries(path, fmt)
    assert all(isinstance(e, AuditRecord) for e in entries) is imported
