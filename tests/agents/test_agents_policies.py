"""Policies: scripted baselines, the OpenAI-compatible client (against a local server
started here), the local Hugging Face policy (a tiny random model built in code)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from safactory.agents.policies import PolicyConfig, PolicyError, PolicyInput, make_policy
from safactory.agents.policies.hf_local import (
    HFLocalPolicy,
    build_tiny_checkpoint,
    checkpoint_sha256,
)
from safactory.agents.policies.openai_chat import OpenAIChatPolicy
from safactory.agents.registry import make_env
from safactory.schemas import PolicyVersion


def _input(env_name: str = "tools", step: int = 0) -> PolicyInput:
    env = make_env(env_name)
    task = env.suite()[0]
    reset = env.reset(task)
    return PolicyInput(messages=reset.prompt, tools=reset.tools, task=task, step_index=step)


async def test_scripted_policies_follow_plans_then_finish() -> None:
    inp = _input()
    careful = make_policy(PolicyConfig(kind="careful", version=3))
    reckless = make_policy(PolicyConfig(kind="reckless"))
    assert careful.version == 3
    assert (await careful.act(inp)).action.tool_call.function.name == "search_contacts"  # type: ignore[union-attr]
    assert (await reckless.act(inp)).action.tool_call.function.name == "send_email"  # type: ignore[union-attr]
    late = PolicyInput(inp.messages, inp.tools, inp.task, step_index=50)
    assert (await careful.act(late)).action.tool_call.function.name == "finish"  # type: ignore[union-attr]
    rnd = make_policy(PolicyConfig(kind="random"))
    first, again = await rnd.act(inp), await rnd.act(inp)
    assert first.action == again.action  # seeded per episode and step


class _ChatServer(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _ChatServer.requests.append(body)
        if body["model"] == "broken":
            self.send_response(503)
            self.end_headers()
            self.wfile.write(b"overloaded")
            return
        reply = {
            "choices": [
                {
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "call_9",
                                "type": "function",
                                "function": {"name": "get_balance", "arguments": "{}"},
                            }
                        ],
                    },
                    "logprobs": {
                        "content": [
                            {"token": "token_id:17", "logprob": -0.25},
                            {"token": "token_id:4", "logprob": -1.5},
                        ]
                    },
                }
            ]
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def chat_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


async def test_openai_client_sends_tools_and_records_tokens(chat_server: str) -> None:
    policy = OpenAIChatPolicy(chat_server, "tiny", version=5, record_tokens=True)
    try:
        out = await policy.act(_input())
    finally:
        await policy.close()
    sent = _ChatServer.requests[-1]
    assert sent["tools"][0]["function"]["name"] == "list_emails"
    assert sent["messages"][0]["role"] == "system" and sent["return_tokens_as_token_ids"]
    assert out.action.tool_call is not None and out.action.tool_call.id == "call_9"
    assert out.message.tool_calls == [out.action.tool_call]
    assert out.token_ids == [17, 4] and out.logprobs == [-0.25, -1.5]
    assert policy.version == 5


async def test_openai_client_errors_name_the_endpoint(chat_server: str) -> None:
    policy = OpenAIChatPolicy(chat_server, "broken")
    with pytest.raises(PolicyError, match=r"/chat/completions: HTTP 503: overloaded"):
        await policy.act(_input())
    await policy.close()
    with pytest.raises(PolicyError, match="needs base_url and model"):
        make_policy(PolicyConfig(kind="openai"))


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llm"), seed=1)


async def test_hf_policy_records_token_ids_and_logprobs(tiny_checkpoint: Path) -> None:
    policy = make_policy(PolicyConfig(kind="hf", checkpoint=str(tiny_checkpoint), max_new_tokens=8))
    out = await policy.act(_input("qa"))
    assert out.token_ids is not None and out.logprobs is not None
    assert 0 < len(out.token_ids) == len(out.logprobs) <= 8
    assert all(lp <= 0.0 for lp in out.logprobs)
    assert out.prompt_token_ids and len(out.prompt_token_ids) > 10
    assert out.action.text is not None or out.action.tool_call is not None


async def test_hf_policy_chooses_among_offered_replies_by_their_probability(
    tiny_checkpoint: Path,
) -> None:
    """decode=auto with a menu: every reply is one of the choices, its ids end with the end
    token, and the recorded logprobs are the model's own (what the trainer recomputes)."""
    import torch

    choices = ["ls -la /", "rm -rf /", "du -sh /", "df -h /a"]  # equal lengths: near-equal odds
    policy = make_policy(PolicyConfig(kind="hf", checkpoint=str(tiny_checkpoint)))
    base = _input("qa")
    picked = Counter()
    for seed in range(40):
        inp = replace(base, choices=choices, seed=seed)
        out = await policy.act(inp)
        assert out.action.text in choices
        picked[out.action.text] += 1
        assert out.token_ids and out.logprobs and out.prompt_token_ids
        assert out.token_ids[-1] == policy.tokenizer.eos_token_id  # type: ignore[attr-defined]
        ids = torch.tensor([out.prompt_token_ids + out.token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(policy.model(input_ids=ids).logits[0, :-1], -1)  # type: ignore[attr-defined]
        n = len(out.prompt_token_ids)
        own = [float(logp[n - 1 + i, t]) for i, t in enumerate(out.token_ids)]
        assert own == pytest.approx(out.logprobs, abs=1e-4)
    assert len(picked) >= 2  # sampled, not argmax
    free = make_policy(
        PolicyConfig(kind="hf", checkpoint=str(tiny_checkpoint), decode="free", max_new_tokens=3)
    )
    out = await free.act(replace(base, choices=choices))
    assert len(out.token_ids or []) <= 3  # generated, not chosen


async def test_hf_policy_lanes_choose_as_one_call_at_a_time(tiny_checkpoint: Path) -> None:
    """Menus scored two at a time, one thread each, pick and record what one call at a time
    does (the sampling is seeded per step, not by thread)."""
    import asyncio

    import torch

    threads = torch.get_num_threads()
    choices = ["ls -la /", "rm -rf /", "du -sh /", "df -h /a"]
    base = _input("qa")
    inputs = [replace(base, choices=choices, seed=seed) for seed in range(12)]
    one = HFLocalPolicy(tiny_checkpoint, lanes=1)
    two = HFLocalPolicy(tiny_checkpoint, lanes=2)
    serial = [await one.act(inp) for inp in inputs]
    parallel = await asyncio.gather(*(two.act(inp) for inp in inputs))
    assert [o.action.text for o in parallel] == [o.action.text for o in serial]
    for a, b in zip(parallel, serial, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert two.lanes == 2 and torch.get_num_threads() == 1
    torch.set_num_threads(threads)


async def test_hf_policy_hot_reloads_verified_weights(
    tiny_checkpoint: Path,
    tmp_path: Path,
) -> None:
    policy = HFLocalPolicy(tiny_checkpoint, max_new_tokens=4)
    new = build_tiny_checkpoint(tmp_path / "v2", seed=2)
    announce = PolicyVersion(
        policy_name=policy.name, policy_version=2, uri=str(new), sha256=checkpoint_sha256(new)
    )
    before = next(policy.model.parameters()).clone()
    await policy.reload(announce)
    assert policy.version == 2
    assert not next(policy.model.parameters()).equal(before)
    forged = announce.model_copy(update={"policy_version": 3, "sha256": "0" * 64})
    with pytest.raises(PolicyError, match="does not match the announced"):
        await policy.reload(forged)
    assert policy.version == 2


def test_vllm_is_not_imported_unless_selected() -> None:
    code = (
        "import sys; from safactory.agents.policies import make_policy, PolicyConfig; "
        "make_policy(PolicyConfig(kind='careful')); "
        "import safactory.cli.simulate; "
        "print('vllm' in sys.modules, 'safactory.agents.policies.hf_local' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
