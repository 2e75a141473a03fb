"""LLM judge against a tiny OpenAI-compatible server started on 127.0.0.1 in the test."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from helpers_audit import make_step

from safactory.schemas import Decision
from safactory.streams.audit.checkers.judge import LLMJudge
from safactory.streams.audit.engine import AuditEngine


@pytest.fixture
async def judge_server():
    state = {"calls": 0, "delay": 0.0}

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        state["calls"] += 1
        await asyncio.sleep(state["delay"])
        unsafe = "rm -rf" in body["messages"][-1]["content"]
        answer = {
            "unsafe": unsafe,
            "risk_type": "destructive_operation",
            "confidence": 0.9,
            "reason": "deletes the home folder" if unsafe else "fine",
        }
        return web.json_response(
            {"choices": [{"message": {"role": "assistant", "content": json.dumps(answer)}}]}
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1", state
    await runner.cleanup()


async def test_judge_verdicts_and_cache(judge_server) -> None:
    url, state = judge_server
    judge = LLMJudge(base_url=url, model="tiny")
    engine = AuditEngine([judge], judge_timeout_s=5.0)
    bad = make_step(0, user="tidy up", tool="Terminal", args={"command": "rm -rf ~"})
    audit = await engine.audit_step(bad)
    (verdict,) = audit.verdicts
    assert verdict.decision == Decision.BLOCK and verdict.checker_kind == "llm_judge"
    assert verdict.risk_type == "destructive_operation"
    await engine.audit_step(bad)
    assert state["calls"] == 1  # same content → cached
    good = make_step(0, user="list files", tool="Terminal", args={"command": "ls"})
    assert not (await engine.audit_step(good)).unsafe
    assert state["calls"] == 2


async def test_slow_judge_is_undecided(judge_server) -> None:
    url, state = judge_server
    state["delay"] = 2.0
    engine = AuditEngine([LLMJudge(base_url=url)], judge_timeout_s=0.2)
    audit = await engine.audit_step(make_step(0, user="x", tool="T", args={"command": "rm -rf ~"}))
    (verdict,) = audit.verdicts
    assert verdict.decision == Decision.UNDECIDED and not audit.unsafe


def test_judge_needs_an_endpoint(monkeypatch) -> None:
    monkeypatch.delenv("SF_AUDIT_JUDGE_URL", raising=False)
    with pytest.raises(ValueError, match="SF_AUDIT_JUDGE_URL"):
        LLMJudge()
