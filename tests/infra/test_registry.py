"""One registry for environments, checkers, injectors, policies and reward rules: a name is
taken once, and a second claim is an error naming both origins."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from safactory.agents.attacks import INJECTORS, AttackInjector, register_injector
from safactory.agents.env import EnvError
from safactory.agents.policies import (
    POLICIES,
    CarefulPolicy,
    Policy,
    PolicyConfig,
    PolicyNameError,
    make_policy,
    register_policy,
)
from safactory.agents.registry import ENVIRONMENTS, env_class, register_env
from safactory.infra.registry import Registry, RegistryError
from safactory.schemas import EpisodeEnded, Outcome
from safactory.streams.assembly.reward import (
    REWARD_RULES,
    RewardRule,
    register_reward_rule,
    reward_rule,
    reward_rule_from_json,
)
from safactory.streams.audit import registry as checkers


def test_every_named_kind_uses_the_one_registry() -> None:
    for registry in (ENVIRONMENTS, checkers.CHECKERS, INJECTORS, POLICIES, REWARD_RULES):
        assert isinstance(registry, Registry)
        assert registry.names(), registry.kind


def test_a_second_claim_on_a_name_names_both_origins() -> None:
    registry: Registry[object] = Registry("widget", "safactory.test-widgets")

    @registry.register("w")
    def first() -> None: ...

    def second() -> None: ...

    registry.register("w")(first)  # the same thing again (a module imported twice): fine
    with pytest.raises(RegistryError) as caught:
        registry.add("w", second)
    message = str(caught.value)
    here = f"{__name__}.test_a_second_claim_on_a_name_names_both_origins.<locals>"
    assert f"{here}.first" in message and f"{here}.second" in message
    assert registry.get("w") is first


def test_duplicate_environment_injector_policy_and_rule_names_both_origins() -> None:
    qa = env_class("qa")

    class Impostor(qa):  # type: ignore[valid-type, misc]
        pass

    with pytest.raises(EnvError, match=r"safactory\.agents\.envs\.qa_env\.\w+.*\.Impostor"):
        register_env("qa")(Impostor)
    assert env_class("qa") is qa and qa.name == "qa"

    class Loud(AttackInjector):
        pass

    with pytest.raises(EnvError, match=r"safactory\.agents\.attacks\.MisleadingContent.*\.Loud"):
        register_injector("misleading")(Loud)
    assert INJECTORS.get("misleading").__name__ == "MisleadingContent"

    with pytest.raises(PolicyNameError, match=r"policies\._careful.*\.mine"):

        @register_policy("careful")
        def mine(config: PolicyConfig) -> Policy:
            return CarefulPolicy()

    with pytest.raises(RegistryError, match=r"reward\.RewardRule.*\.Mine"):

        @register_reward_rule("outcome-minus-safety")
        class Mine(RewardRule):
            pass


def test_a_plugin_clashing_with_a_built_in_names_the_package(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    package = tmp_path / "sf_clash_demo"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent("""
        from safactory.agents.attacks import AttackInjector

        class Clash(AttackInjector):
            pass
    """)
    )
    dist = tmp_path / "sf_clash_demo-0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sf-clash-demo\nVersion: 0.3\n")
    entry = "[safactory.injectors]\njailbreak = sf_clash_demo:Clash\n"
    (dist / "entry_points.txt").write_text(entry)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(EnvError) as caught:
            INJECTORS.get("jailbreak")
        message = str(caught.value)
        assert "safactory.agents.attacks.Jailbreak" in message
        assert "jailbreak = sf_clash_demo:Clash" in message and "sf-clash-demo 0.3" in message
    finally:
        monkeypatch.undo()
        sys.modules.pop("sf_clash_demo", None)
    assert INJECTORS.get("jailbreak").__name__ == "Jailbreak"  # gone with its package


def test_policies_are_chosen_by_name_like_environments() -> None:
    @register_policy("test-steady")
    def steady(config: PolicyConfig) -> Policy:
        return CarefulPolicy(config.version + 100)

    assert make_policy(PolicyConfig(kind="test-steady", version=2)).version == 102
    with pytest.raises(ValidationError, match=r"unknown policy 'nope'; known: careful, hf"):
        PolicyConfig(kind="nope")


def test_reward_rules_are_chosen_by_name_in_their_settings() -> None:
    class Flat:
        def __init__(self, value: float) -> None:
            self.value = value

        def components(self, ended: EpisodeEnded, verdicts: object) -> dict[str, float]:
            return {"flat": self.value}

        def reward(self, components: dict[str, float]) -> float:
            return components["flat"]

        def describe(self) -> str:
            return f"flat {self.value}"

    register_reward_rule("test-flat")(Flat)
    rule = reward_rule({"rule": "test-flat", "value": 0.25})
    ended = EpisodeEnded(episode_id="e", task_id="t", env="qa", outcome=Outcome.SUCCESS)
    assert rule.reward(rule.components(ended, [])) == 0.25
    default = reward_rule_from_json('{"combine": "sum", "unsafe_penalty": 0}')
    assert isinstance(default, RewardRule) and default.combine == "sum"
    with pytest.raises(RegistryError, match=r"unknown reward rule 'nope'; known: .*test-flat"):
        reward_rule({"rule": "nope"})
    with pytest.raises(ValueError, match=r"'test-flat'.*unexpected keyword argument 'wrong'"):
        reward_rule({"rule": "test-flat", "wrong": 1})
    with pytest.raises(ValueError, match="JSON object"):
        reward_rule_from_json("[1, 2]")
