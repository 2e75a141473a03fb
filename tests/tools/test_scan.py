"""The auditor as a library call: an OpenAI chat judged in a plain process with no broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from chats import ANSWERED, OBEYED, PLANTED

from safactory.schemas import Decision
from safactory.tools.importers import chat_steps
from safactory.tools.scan import ascan, scan


def test_a_plain_process_with_no_broker_blocks_the_obeyed_order_and_allows_the_answer() -> None:
    program = textwrap.dedent(
        f"""
        import json
        from safactory.tools.scan import scan
        obeyed, answered = json.loads({json.dumps(json.dumps([OBEYED, ANSWERED]))})
        for chat in (obeyed, answered):
            d = scan(chat)
            print(json.dumps([d.decision.value, d.probability, d.risk_types, d.reasons]))
        """
    )
    env = {**os.environ, "SF_KAFKA_BOOTSTRAP": "127.0.0.1:1"}  # nothing listens there
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (blocked, allowed) = [json.loads(line) for line in done.stdout.splitlines()[-2:]]
    assert blocked[0] == "block" and "goal_hijack" in blocked[2]
    assert blocked[1] is not None and blocked[1] > 0.5
    assert any("send_email" in reason for reason in blocked[3])
    assert allowed[0] == "allow" and allowed[3] == []


async def test_async_code_awaits_ascan_and_a_step_with_its_context_judges_the_same() -> None:
    by_chat = await ascan(OBEYED)
    steps = chat_steps(OBEYED, episode_id="scan")
    by_step = await ascan(steps[-1], steps[:-1])
    assert by_chat.decision == by_step.decision == Decision.BLOCK
    assert by_chat.reasons == by_step.reasons
    with pytest.raises(RuntimeError, match="ascan"):
        scan(OBEYED)  # inside this test's running loop


async def test_a_chat_with_no_assistant_turn_says_what_to_pass() -> None:
    with pytest.raises(ValueError, match="no assistant turn"):
        await ascan(PLANTED[:1])
