"""The judge tier against a scripted OpenAI-compatible server on 127.0.0.1: it decides the
steps the checkers left uncertain, with the deployment's policy, batched, cached, within a
budget and a timeout."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from helpers_audit import make_step

from safactory.schemas import Decision, Severity
from safactory.streams.audit.api import Checker, Finding, RiskType
from safactory.streams.audit.calibration import Calibration
from safactory.streams.audit.engine import JUDGE_CHECKER, AuditEngine, Policy
from safactory.streams.audit.judge_tier import JudgeConfig, JudgeTier
from safactory.streams.audit.view import EpisodeView

POLICY = "House rule 7: never delete anything under a home folder."


class Unsure(Checker):
    """Fires on every call; never measured, so always uncertain."""

    name = "test.unsure"
    kind = "heuristic"
    risk_types = (RiskType.DESTRUCTIVE_OPERATION,)

    def check(self, view: EpisodeView) -> list[Finding]:
        if view.call is None:
            return []
        return [Finding(RiskType.DESTRUCTIVE_OPERATION, 0.6, Severity.HIGH, "might destroy")]


@pytest.fixture
async def judge_server():
    state: dict = {"requests": [], "delay": 0.0}

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        state["requests"].append(body)
        await asyncio.sleep(state["delay"])
        cases = body["messages"][-1]["content"].split("\n\ncase ")
        verdicts = [
            {
                "case": i,
                "unsafe": "rm -rf" in case,
                "confidence": 0.9,
                "reason": "deletes a home folder" if "rm -rf" in case else "a lookup",
            }
            for i, case in enumerate(cases)
        ]
        content = json.dumps({"verdicts": verdicts})
        return web.json_response(
            {
                "choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {"total_tokens": 120},
            }
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


def engine(url: str, **config: object) -> AuditEngine:
    tier = JudgeTier(JudgeConfig(url=url, policy=POLICY, **config))  # type: ignore[arg-type]
    return AuditEngine([Unsure()], policy=Policy(calibration=Calibration({})), judge=tier)


def step(command: str, n: int = 0):
    return make_step(n, user=f"tidy up {n}", tool="Terminal", args={"command": command})


async def test_the_judge_decides_what_the_checkers_left_uncertain(judge_server) -> None:
    url, state = judge_server
    audit = await engine(url).audit_step(step("rm -rf ~"))
    judged = next(v for v in audit.verdicts if v.checker == JUDGE_CHECKER)
    assert judged.decision == Decision.BLOCK and judged.probability == pytest.approx(0.9)
    assert audit.decision == Decision.BLOCK and audit.unsafe
    assert "deletes a home folder" in judged.reason
    (request,) = state["requests"]
    assert POLICY in request["messages"][0]["content"]  # the deployment's own policy
    assert request["response_format"]["type"] == "json_schema"
    assert "JUDGE call: Terminal" in request["messages"][-1]["content"]
    safe = await engine(url).audit_step(step("ls ~"))
    assert safe.decision == Decision.ALLOW and not safe.unsafe  # the uncertain one is resolved


async def test_cases_that_arrive_together_go_in_one_request_and_answers_are_cached(
    judge_server,
) -> None:
    url, state = judge_server
    auditor = engine(url, batch_wait_s=0.05)
    steps = [step("rm -rf ~" if n % 2 else "ls", n) for n in range(5)]
    audits = await asyncio.gather(*(auditor.audit_step(s) for s in steps))
    assert len(state["requests"]) == 1  # five cases, one request
    assert [a.decision for a in audits] == [Decision.ALLOW, Decision.BLOCK] * 2 + [Decision.ALLOW]
    await auditor.audit_step(steps[1])
    assert len(state["requests"]) == 1  # the same case again: from the cache


async def test_over_budget_or_late_the_step_stays_uncertain_and_says_why(judge_server) -> None:
    url, state = judge_server
    auditor = engine(url, per_minute=1)
    await auditor.audit_step(step("rm -rf ~", 0))
    over = await auditor.audit_step(step("rm -rf ~", 1))
    assert over.decision == Decision.UNCERTAIN and "budget of 1 calls" in over.summary.reason
    state["delay"] = 1.0
    late = await engine(url, timeout_s=0.2).audit_step(step("rm -rf /", 2))
    assert late.decision == Decision.UNCERTAIN and "no answer within 0.2s" in late.summary.reason


def test_the_judge_is_configured_from_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("SF_AUDIT_JUDGE_URL", raising=False)
    assert JudgeConfig.from_env() is None
    policy = tmp_path / "policy.txt"
    policy.write_text(POLICY)
    monkeypatch.setenv("SF_AUDIT_JUDGE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("SF_AUDIT_JUDGE_POLICY", str(policy))
    monkeypatch.setenv("SF_AUDIT_JUDGE_PER_MINUTE", "30")
    config = JudgeConfig.from_env()
    assert config is not None and config.policy == POLICY and config.per_minute == 30
    monkeypatch.setenv("SF_AUDIT_JUDGE_POLICY", str(tmp_path / "missing.txt"))
    with pytest.raises(ValueError, match="SF_AUDIT_JUDGE_POLICY"):
        JudgeConfig.from_env()
