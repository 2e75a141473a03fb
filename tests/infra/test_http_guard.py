"""Every HTTP surface is safe to leave running: a foreign Host is refused (DNS rebinding), a
state change needs JSON from this origin (CSRF), the reload drill needs the model server's
token, bodies are bounded before anything is forwarded, credentials are never echoed, bad
bodies get JSON errors, non-finite numbers are refused, and open gateway episodes hold a
bounded amount of memory. Each case is one the surfaces got wrong before (issue #31)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient
from gateway_support import gateway_process, scripted_upstream

from safactory.agents.gateway.conversations import CONTEXT_BYTES, Conversations, step_bytes
from safactory.agents.policies.serve_local import ModelServer
from safactory.cli.serve import web_app
from safactory.infra.config import Settings
from safactory.schemas import Action, ChatMessage, Step

LOCAL = "http://127.0.0.1"
GATEWAY_RSS_MB = 600
"""The gateway's documented bound (docs/RELIABILITY.md): its start plus the contexts'
and the chains' own bounds, far under."""


@pytest.fixture
def serve(tmp_path: Path) -> TestClient:
    return TestClient(web_app(Settings(), tmp_path / "db", follow=False), base_url=LOCAL)


@pytest.fixture
def model_server(tmp_path: Path) -> TestClient:
    return TestClient(ModelServer(tmp_path / "none", name="tiny").app(), base_url=LOCAL)


def test_a_foreign_host_is_refused(serve: TestClient, model_server: TestClient) -> None:
    for client in (serve, model_server):
        rebound = client.get(
            "/health" if client is model_server else "/api/view", headers={"Host": "evil.example"}
        )
        assert rebound.status_code == 421 and "DNS rebinding" in rebound.text
    assert serve.get("/api/view", headers={"Host": "localhost:8765"}).status_code == 200


def test_no_state_change_from_another_origin(serve: TestClient, model_server: TestClient) -> None:
    approve = '{"episode_id": "e1", "approve": true}'
    forged = serve.post("/api/control", content=approve, headers={"Content-Type": "text/plain"})
    assert forged.status_code == 415  # a cross-site form post cannot send JSON unasked
    foreign = serve.post(
        "/api/control",
        content=approve,
        headers={"Content-Type": "application/json", "Origin": "http://evil.example"},
    )
    assert foreign.status_code == 403
    here = {"Content-Type": "application/json", "Host": "127.0.0.1:8765"}
    for elsewhere in ("http://127.0.0.1:9999", "http://127.0.0.1", "file://", "null"):
        other = serve.post("/api/control", content=approve, headers={**here, "Origin": elsewhere})
        assert other.status_code == 403, elsewhere  # another port is another site's page
    mine = serve.post(
        "/api/control", content=approve, headers={**here, "Origin": "http://127.0.0.1:8765"}
    )
    assert mine.status_code == 404  # allowed through: nothing is paused here
    portless = {"Content-Type": "application/json", "Origin": "http://127.0.0.1"}
    assert serve.post("/api/control", content=approve, headers=portless).status_code == 404
    drill = model_server.post("/v1/admin/fail_reloads", json={"count": 5})
    assert drill.status_code == 403 and "token" in drill.json()["error"]["message"]
    rpc = model_server.post(
        "/collective_rpc",
        json={"method": "reload_weights"},
        headers={"Origin": "http://evil.example"},
    )
    assert rpc.status_code == 403


def test_bad_bodies_get_json_errors(model_server: TestClient) -> None:
    for body in (b'{"messages": "\xff"}', b"[" * 100_000 + b"]" * 100_000, b'{"a": 1e999}'):
        answer = model_server.post(
            "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["type"] == "invalid_request_error"


def test_the_nesting_check_is_linear_in_the_body() -> None:
    """Shapes that made the old bracket scan quadratic (an unterminated string of escaped
    quotes took 117 s at 128 KB) are refused at once; strings hide their brackets."""
    from safactory.infra.http import MAX_DEPTH, _deeper_than, loads

    for body in ('\\"' * 32_000, '"' + "\\" * 64_000, '"[' * 32_000):
        started = time.perf_counter()
        with pytest.raises(ValueError):
            loads(body.encode())
        assert time.perf_counter() - started < 1.0  # linear: milliseconds; quadratic: minutes
    deep = "[" * (MAX_DEPTH + 1)
    assert _deeper_than(deep, MAX_DEPTH) and not _deeper_than(deep[:-1], MAX_DEPTH)
    assert not _deeper_than('["' + deep + '"]', MAX_DEPTH)  # inside a string
    assert not _deeper_than('["\\"' + deep + '"]', MAX_DEPTH)  # an escaped quote
    assert _deeper_than('["\\\\"' + deep, MAX_DEPTH)  # an escaped backslash ends it


def test_the_gateway_bounds_bodies_before_forwarding_and_hides_credentials(
    topics: Settings, tmp_path: Path
) -> None:
    seen: list[dict] = []
    reply = {"role": "assistant", "content": "ok"}
    with scripted_upstream([reply], seen=seen) as upstream:
        secret = upstream.replace("http://", "http://agent:hunter2pass@")
        debug = ("--log-level", "debug")  # httpx logs each upstream URL from info on
        with gateway_process(
            secret, topics, tmp_path / "gw.log", "--max-body", "1048576", *debug
        ) as gw:
            health = httpx.get(gw.removesuffix("/v1") + "/health").text
            assert "hunter2pass" not in health and "agent:***@" in health
            huge = {"model": "m", "messages": [{"role": "user", "content": "x" * (2 << 20)}]}
            too_large = httpx.post(f"{gw}/chat/completions", json=huge, timeout=30)
            assert too_large.status_code == 413 and seen == []  # never forwarded
            assert too_large.json()["error"]["code"] == 413
            ended = httpx.post(
                f"{gw}/sf/episodes/nope/end",
                content='{"outcome": "success", "reward": "nan"}',
                headers={"Content-Type": "application/json"},
            )
            assert ended.status_code == 400 and "finite" in ended.text
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            assert httpx.post(f"{gw}/chat/completions", json=chat).status_code == 200
    with gateway_process(secret, topics, tmp_path / "gw2.log") as gw:  # the upstream is gone
        down = httpx.post(f"{gw}/chat/completions", json=chat, timeout=30)
        assert down.status_code == 502 and "hunter2pass" not in down.text
    logged = (tmp_path / "gw.log").read_text()
    assert "hunter2pass" not in logged and "agent:***@" in logged  # the URL was logged, masked


def test_open_episodes_hold_bounded_memory() -> None:
    open_ = Conversations(max_bytes=10 * CONTEXT_BYTES)
    for n in range(30):  # thirty different chats of 2 MB each, then more turns
        call = open_.resolve([{"role": "user", "content": f"chat {n}"}])
        for turn in range(4):
            step = Step(
                episode_id=call.conversation.episode_id,
                step_index=turn,
                env="gateway",
                task_id="t",
                policy_version=0,
                action=Action(text="ok"),
                messages=[ChatMessage(role="tool", content="x" * (2 << 20))],
            )
            open_.published(call.conversation, [step])
        assert call.conversation.nbytes <= CONTEXT_BYTES
    assert open_.nbytes <= 10 * CONTEXT_BYTES + CONTEXT_BYTES
    gone = open_.let_go()
    assert len(gone) + len(open_) == 30 and gone[0].step_count == 4  # the oldest went first
    assert json.dumps([c.episode_id for c in gone])  # each is ended by the gateway
    empty = Conversations(max_bytes=10 * CONTEXT_BYTES)  # many empty messages weigh too
    for n in range(40):
        call = empty.resolve([{"role": "user", "content": f"empty {n}"}])
        step = Step(
            episode_id=call.conversation.episode_id,
            step_index=0,
            env="gateway",
            task_id="t",
            policy_version=0,
            action=Action(text=""),
            messages=[ChatMessage(role="user", content="")] * 30_000,
        )
        empty.published(call.conversation, [step])
        assert step_bytes(step) > 30_000 * 256 and call.conversation.steps == []
    assert empty.nbytes <= 10 * CONTEXT_BYTES


def test_chains_belong_to_their_caller_and_empty_messages_stay_bounded(
    topics: Settings, tmp_path: Path
) -> None:
    reply = {"role": "assistant", "content": "ok"}
    seen: list[dict] = []
    with (
        scripted_upstream([reply], seen=seen) as upstream,
        gateway_process(upstream, topics, tmp_path / "gw.log") as gw,
    ):
        a, b = ({"Authorization": f"Bearer sk-{who}"} for who in ("alice", "bob"))
        first = httpx.post(f"{gw}/responses", json={"model": "m", "input": "mine"}, headers=a)
        chained = {"model": "m", "input": "more", "previous_response_id": first.json()["id"]}
        assert httpx.post(f"{gw}/responses", json=chained, headers=b).status_code == 404
        assert httpx.post(f"{gw}/responses", json=chained).status_code == 404  # no key either
        assert httpx.post(f"{gw}/responses", json=chained, headers=a).status_code == 200
        named = {"x-sf-episode": "e" * 5000}
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        calls = len(seen)
        refused = httpx.post(f"{gw}/chat/completions", json=chat, headers=named)
        assert refused.status_code == 400 and "x-sf-episode" in refused.text
        assert len(seen) == calls  # refused before the upstream was called
        gateway = next(
            p for p in psutil.Process().children(recursive=True) if "gateway" in p.cmdline()
        )
        empty = [{"role": "user", "content": ""}] * 30_000  # 1 MB of JSON, 30,000 objects
        rss = []
        for n in range(40):
            chat = {"model": "m", "messages": [{"role": "user", "content": f"{n}"}, *empty]}
            assert httpx.post(f"{gw}/chat/completions", json=chat, timeout=60).status_code == 200
            rss.append(gateway.memory_info().rss / 2**20)
        # a plateau: what calls 10-40 add stays far under one call's 30,000 messages each
        assert rss[-1] - rss[9] < 150, rss
        assert rss[-1] < GATEWAY_RSS_MB, rss
