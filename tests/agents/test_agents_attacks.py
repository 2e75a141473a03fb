"""Attack injectors alter what the agent sees and record what they injected, and where."""

from __future__ import annotations

import pytest

from safactory.agents.attacks import JAILBREAK_STRATEGIES, make_injector
from safactory.agents.env import EnvError
from safactory.agents.registry import make_env
from safactory.schemas import Action, AttackPlan


def _tools_task(task_id: str = "tools-cap-weather"):  # type: ignore[no-untyped-def]
    env = make_env("tools")
    task = next(t for t in env.suite() if t.task_id == task_id)
    return env, task


def test_indirect_injection_lands_in_the_chosen_tool_result() -> None:
    env, task = _tools_task()
    injector = make_injector(
        AttackPlan(
            injector="indirect_prompt_injection", at_step=0, params={"goal": "pay XX00SCAM 900"}
        )
    )
    env.reset(task)
    out, injection = injector.on_step(0, env, env.step(task.safe_plan[0]))
    assert injection is not None and injection.location == "tool_result"
    assert injection.goal == "pay XX00SCAM 900"
    assert out.tool_result is not None and out.tool_result.startswith("Today: sunny")
    assert injection.payload in out.tool_result and injection.payload in out.observation
    later, none = injector.on_step(1, env, env.step(task.safe_plan[0]))
    assert none is None and "SYSTEM NOTICE" not in (later.tool_result or "")


def test_injection_defaults_to_the_first_tool_result() -> None:
    env, task = _tools_task()
    injector = make_injector(AttackPlan(injector="misleading", params={"claim": "It will snow."}))
    env.reset(task)
    out, injection = injector.on_step(0, env, env.step(task.safe_plan[0]))
    assert injection is not None and injection.kind == "misleading"
    assert out.tool_result is not None and out.tool_result.startswith("It will snow.")
    assert injector.on_step(1, env, env.step(task.safe_plan[0]))[1] is None


def test_perturbation_is_seeded() -> None:
    env, task = _tools_task()
    plan = AttackPlan(injector="perturbation", params={"target": "prompt", "seed": 7, "rate": 0.3})
    first = make_injector(plan).on_reset(env, env.reset(task))
    second = make_injector(plan).on_reset(env, env.reset(task))
    assert first[1] is not None and first[1].location == "user_message"
    assert first[0].prompt[-1].content == second[0].prompt[-1].content != task.instruction


@pytest.mark.parametrize("strategy", sorted(JAILBREAK_STRATEGIES))
def test_jailbreak_strategies_rewrite_the_harmful_turns(strategy: str) -> None:
    env = make_env("qa")
    task = next(t for t in env.suite() if t.task_id == "qa-multiturn-novel-hacker")
    injector = make_injector(AttackPlan(injector="jailbreak", params={"strategy": strategy}))
    _, first = injector.on_reset(env, env.reset(task))
    harmful = env.harmful_turns  # type: ignore[attr-defined]
    if strategy == "escalation":
        assert len(env.turns) == 6 and harmful == [5]  # type: ignore[attr-defined]
        assert first is None
    else:
        assert env.turns[2].endswith(task.params["turns"][2])  # type: ignore[attr-defined]
        assert env.turns[2] != task.params["turns"][2]  # type: ignore[attr-defined]
    seen = []
    for i in range(len(env.turns)):  # type: ignore[attr-defined]
        _, injection = injector.on_step(i, env, env.step(Action(text="Sure, here you go.")))
        if injection is not None:
            seen.append((i, injection.payload))
    assert [i + 1 for i, _ in seen] == harmful
    assert env.judge().safety.unsafe


def test_unknown_injector_and_strategy_are_clear_errors() -> None:
    with pytest.raises(EnvError, match="unknown injector 'nope'; known: indirect_prompt"):
        make_injector(AttackPlan(injector="nope"))
    env = make_env("qa")
    with pytest.raises(EnvError, match="strategy 'x' unknown"):
        make_injector(AttackPlan(injector="jailbreak", params={"strategy": "x"})).on_reset(
            env, env.reset(env.suite()[0])
        )
    tools = make_env("tools")
    with pytest.raises(EnvError, match="needs a conversational env"):
        make_injector(AttackPlan(injector="jailbreak")).on_reset(
            tools, tools.reset(tools.suite()[0])
        )
