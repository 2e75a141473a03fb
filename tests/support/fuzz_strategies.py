"""Shared pieces of the fuzz tests: the settings profile and generators of events and JSON.

Every fuzz test runs ``SF_FUZZ_EXAMPLES`` cases (a test may scale it), derandomised and
without an example database, so a run is the same every time. The default, 1,000, keeps the
folder to a few minutes in ordinary runs; the acceptance run of issue #14 (>= 10,000 cases a
target) is ``SF_FUZZ_EXAMPLES=10000 pytest tests/fuzz`` (about 10 ms a case on two cores).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from safactory import schemas as s
from safactory.schemas import headers as h

EXAMPLES = int(os.environ.get("SF_FUZZ_EXAMPLES", "1000"))
"""Cases per fuzz target (10000 for the acceptance run)."""


def fuzz(scale: float = 1.0) -> settings:
    """Hypothesis settings of a fuzz target: ``scale`` × ``SF_FUZZ_EXAMPLES`` cases."""
    return settings(
        max_examples=max(1, int(EXAMPLES * scale)),
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=True,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


def one_line(message: str, limit: int = 2000) -> bool:
    """Whether an error message is one short line."""
    return "\n" not in message and 0 < len(message) <= limit


# --------------------------------------------------------------------------- JSON values

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
"""Any JSON-like value (NaN and infinities included: Python's json reads and writes them)."""
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)


# --------------------------------------------------------------------------- events

text = st.text(max_size=30)
ident = st.text(min_size=1, max_size=40)
opt_text = st.none() | text
nonneg = st.integers(0, 2**63)
any_float = st.floats()
nonneg_float = st.floats(min_value=0)


def _ident(n: int) -> st.SearchStrategy[str]:
    return st.text(min_size=1, max_size=n)


function_calls = st.builds(s.FunctionCall, name=text, arguments=text)
tool_calls = st.builds(s.ToolCall, id=text, function=function_calls)
chat_messages = st.builds(
    s.ChatMessage,
    role=st.sampled_from(["system", "developer", "user", "assistant", "tool"]),
    content=st.none() | text | st.lists(json_objects, max_size=2),
    name=opt_text,
    tool_calls=st.none() | st.lists(tool_calls, max_size=2),
    tool_call_id=opt_text,
)
attack_plans = st.builds(
    s.AttackPlan, injector=text, at_step=st.none() | nonneg, params=json_objects
)
_base = {
    "event_id": _ident(128),
    "produced_at": nonneg_float,
    "trace_id": st.none() | st.text(max_size=64),
}
_episode = {**_base, "episode_id": _ident(128)}
_verdict = {
    **_episode,
    "source_event_id": text,
    "step_index": st.none() | nonneg,
    "env": opt_text,
    "checker": text,
    "checker_version": text,
    "checker_kind": st.sampled_from(["rule", "heuristic", "model", "llm_judge", "composite"]),
    "risk_type": text,
    "severity": st.sampled_from(list(s.Severity)),
    "score": st.floats(0.0, 1.0),
    "decision": st.sampled_from(list(s.Decision)),
    "evidence": st.lists(
        st.builds(
            s.Evidence, text=text, field=text, start=st.none() | nonneg, end=st.none() | nonneg
        ),
        max_size=2,
    ),
    "reason": opt_text,
    "latency_ms": nonneg_float,
    "policy_version": st.none() | nonneg,
}


@st.composite
def _tokens(draw: st.DrawFn) -> dict[str, Any]:
    ids = draw(st.none() | st.lists(st.integers(-(2**40), 2**40), max_size=6))
    logprobs = None
    if ids is not None and draw(st.booleans()):
        logprobs = draw(st.lists(any_float, min_size=len(ids), max_size=len(ids)))
    return {
        "token_ids": ids,
        "logprobs": logprobs,
        "prompt_token_ids": draw(st.none() | st.lists(st.integers(0, 2**31), max_size=4)),
    }


@st.composite
def _steps(draw: st.DrawFn) -> s.Step:
    return draw(
        st.builds(
            s.Step,
            **_episode,
            step_index=nonneg,
            env=_ident(64),
            task_id=_ident(128),
            group_id=st.none() | st.text(max_size=128),
            policy_version=nonneg,
            observation=opt_text,
            action=st.builds(s.Action, text=opt_text, tool_call=st.none() | tool_calls),
            tool_result=opt_text,
            messages=st.lists(chat_messages, max_size=3),
            injection=st.none()
            | st.builds(
                s.Injection, injector=text, kind=text, location=text, payload=text, goal=opt_text
            ),
            reward=st.none() | any_float,
            blocked=st.booleans(),
            block_reason=opt_text,
            timing=st.none()
            | st.builds(
                s.Timing, started_at=nonneg_float, policy_ms=nonneg_float, env_ms=nonneg_float
            ),
            info=json_objects,
            **{k: st.just(v) for k, v in draw(_tokens()).items()},
        )
    )


trajectory_steps = st.builds(
    s.TrajectoryStep,
    step_index=nonneg,
    messages=st.lists(chat_messages, max_size=2),
    token_ids=st.none() | st.lists(st.integers(0, 2**31), max_size=4),
    logprobs=st.none() | st.lists(any_float, max_size=4),
    prompt_token_ids=st.none() | st.lists(st.integers(0, 2**31), max_size=4),
    policy_version=nonneg,
    blocked=st.booleans(),
)

EVENTS: dict[type[s.Event], st.SearchStrategy[s.Event]] = {
    s.Task: st.builds(
        s.Task,
        **_base,
        task_id=_ident(128),
        env=_ident(64),
        spec=json_objects,
        seed=st.integers(-(2**63), 2**63),
        group_id=st.none() | _ident(128),
        attack=st.none() | attack_plans,
        policy=opt_text,
    ),
    s.Step: _steps(),
    s.EpisodeStarted: st.builds(
        s.EpisodeStarted,
        **_episode,
        task_id=_ident(128),
        env=_ident(64),
        group_id=st.none() | _ident(128),
        policy_name=text,
        policy_version=nonneg,
        seed=st.integers(-(2**63), 2**63),
        prompt=st.lists(chat_messages, max_size=2),
        attack=st.none() | attack_plans,
    ),
    s.EpisodeEnded: st.builds(
        s.EpisodeEnded,
        **_episode,
        task_id=_ident(128),
        env=_ident(64),
        group_id=st.none() | _ident(128),
        outcome=st.sampled_from(list(s.Outcome)),
        task_reward=any_float,
        safety=st.none()
        | st.builds(s.SafetyOutcome, unsafe=st.booleans(), violations=st.lists(text, max_size=2)),
        num_steps=nonneg,
        policy_version=st.none() | nonneg,
    ),
    s.Verdict: st.builds(s.Verdict, **_verdict),
    s.Alert: st.builds(s.Alert, **_verdict),
    s.Trajectory: st.builds(
        s.Trajectory,
        **_episode,
        group_id=_ident(128),
        task_id=text,
        env=text,
        prompt=st.lists(chat_messages, max_size=2),
        steps=st.lists(trajectory_steps, max_size=3),
        outcome=st.sampled_from(list(s.Outcome)),
        reward=any_float,
        reward_components=st.dictionaries(text, any_float, max_size=3),
        reward_rule=text,
        verdict_ids=st.lists(text, max_size=2),
        completed_by=st.sampled_from(["verdicts", "timeout", "abandoned"]),
        policy_version=nonneg,
        max_policy_version=nonneg,
    ),
    s.Score: st.builds(
        s.Score,
        **_episode,
        scorer=text,
        scorer_version=text,
        scores=st.dictionaries(text, any_float, max_size=3),
        composite=any_float,
    ),
    s.Skill: st.builds(
        s.Skill,
        **_base,
        skill_id=_ident(128),
        title=text,
        lesson=text,
        applies_when=text,
        env=opt_text,
        risk_types=st.lists(text, max_size=2),
        source_episode_ids=st.lists(text, max_size=2),
    ),
    s.PolicyVersion: st.builds(
        s.PolicyVersion,
        **_base,
        policy_name=_ident(128),
        policy_version=nonneg,
        uri=text,
        sha256=st.text("0123456789abcdef", min_size=64, max_size=64),
        base_model=opt_text,
        trained_on=nonneg,
        consumed=st.none() | nonneg,
    ),
    s.Control: st.builds(
        s.Control,
        **_episode,
        command=st.sampled_from(list(s.ControlCommand)),
        reason=text,
        source_event_id=opt_text,
    ),
}
"""A generator of valid instances of every event type in the catalogue."""

events = st.one_of(*EVENTS.values())


# --------------------------------------------------------------------------- raw records

header_names = st.sampled_from([*h.CONTRACT, h.ERROR, "x-other"]) | st.text(max_size=12)
header_values = (
    st.none()
    | st.binary(max_size=24)
    | st.sampled_from(
        [
            b"step/1",
            b"verdict/1",
            b"task/1",
            b"0",
            b"-1",
            b"1e9",
            b"nan",
            b"inf",
            b"",
            b"\xff",
            b"step/\xc2\xb2",
            b"9" * 5000,
        ]
    )
)
raw_headers = st.none() | st.lists(st.tuples(header_names, header_values), max_size=8)
