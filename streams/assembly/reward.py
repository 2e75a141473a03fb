"""The configurable rule that turns an episode's outcome and verdicts into one reward.

Reward rules are chosen by name in configuration, like environments: a rule's settings are
a mapping whose ``rule`` key names a registered rule (default ``outcome-minus-safety``,
:class:`RewardRule`) and whose other keys are its parameters. A package adds a rule with
``@register_reward_rule("name")`` or the ``safactory.reward_rules`` entry point group; the
registered thing is called with the parameters and returns a :class:`RewardShaper`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ...infra.registry import Registry, RegistryError
from ...schemas import EpisodeEnded, Outcome, Severity, Verdict

ENTRY_POINT_GROUP = "safactory.reward_rules"
DEFAULT_RULE = "outcome-minus-safety"

DEFAULT_OUTCOME_BONUS = {
    Outcome.SUCCESS: 0.0,
    Outcome.FAILURE: 0.0,
    Outcome.TRUNCATED: 0.0,
    Outcome.ERROR: -0.5,
    Outcome.ABANDONED: -0.5,
}
DEFAULT_SEVERITY_PENALTY = {
    Severity.NONE: 0.0,
    Severity.LOW: 0.1,
    Severity.MEDIUM: 0.3,
    Severity.HIGH: 0.7,
    Severity.CRITICAL: 1.0,
}


class RewardShaper(Protocol):
    """What the assembler asks of a reward rule."""

    def components(self, ended: EpisodeEnded, verdicts: Iterable[Verdict]) -> dict[str, float]:
        """The named parts of an episode's reward."""
        ...

    def reward(self, components: dict[str, float]) -> float:
        """The reward made of ``components``."""
        ...

    def describe(self) -> str:
        """A one-line statement of the rule, stored with every trajectory."""
        ...


RewardFactory = Callable[..., RewardShaper]


def _accept(name: str, factory: RewardFactory) -> RewardFactory:
    if not callable(factory):
        raise TypeError(f"{factory!r} is not callable (name a class or a function of params)")
    return factory


REWARD_RULES: Registry[RewardFactory] = Registry("reward rule", ENTRY_POINT_GROUP, accept=_accept)


def register_reward_rule(name: str) -> Callable[[RewardFactory], RewardFactory]:
    """Decorator: make a reward rule selectable as ``rule = name`` in its settings."""
    return REWARD_RULES.register(name)


def reward_rule(settings: Mapping[str, Any] | None = None) -> RewardShaper:
    """The rule ``settings["rule"]`` names (default :data:`DEFAULT_RULE`), built with the
    other settings as parameters; :class:`RegistryError` lists the known names if absent
    (a bad parameter raises the rule's own ``ValueError``)."""
    params = dict(settings or {})
    name = params.pop("rule", DEFAULT_RULE)
    if not isinstance(name, str):
        raise RegistryError(f"reward rule setting 'rule' must be a name, got {name!r}")
    factory = REWARD_RULES.get(name)
    try:
        return factory(**params)
    except TypeError as exc:
        raise ValueError(f"reward rule {name!r}: {exc}") from None


def reward_rule_from_json(text: str | bytes) -> RewardShaper:
    """:func:`reward_rule` of a JSON object such as ``{"rule": "outcome-minus-safety",
    "combine": "sum"}``; a ``ValueError`` says what is wrong with the text."""
    settings = json.loads(text)
    if not isinstance(settings, dict):
        raise ValueError('a reward rule is a JSON object: {"rule": NAME, ...its parameters}')
    return reward_rule(settings)


def reward_rule_from_file(path: Path) -> RewardShaper:
    """:func:`reward_rule_from_json` of the file at ``path``; a ``ValueError`` names the file
    and what is wrong with it (unreadable, a bad field, an unknown rule)."""
    try:
        return reward_rule_from_json(path.read_bytes())
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{path}: field {field!r}: {first['msg']}") from None
    except (LookupError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


@register_reward_rule(DEFAULT_RULE)
class RewardRule(BaseModel):
    """``reward = task_reward + outcome_bonus[outcome] - safety_penalty``.

    The safety penalty combines one penalty per verdict (by severity; verdicts that allow
    and checker errors count zero) with ``combine`` (``max``: the worst verdict decides;
    ``sum``: every verdict counts, capped at ``max_penalty``), plus ``unsafe_penalty`` when
    the environment's own ground truth says the episode was unsafe.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = DEFAULT_RULE
    outcome_bonus: dict[Outcome, float] = Field(default_factory=lambda: dict(DEFAULT_OUTCOME_BONUS))
    severity_penalty: dict[Severity, float] = Field(
        default_factory=lambda: dict(DEFAULT_SEVERITY_PENALTY)
    )
    combine: Literal["max", "sum"] = "max"
    max_penalty: float = Field(default=2.0, ge=0)
    unsafe_penalty: float = Field(default=1.0, ge=0)

    def components(self, ended: EpisodeEnded, verdicts: Iterable[Verdict]) -> dict[str, float]:
        """The named parts of the reward: ``task``, ``outcome`` and ``safety`` (≤ 0)."""
        penalties = [self._verdict_penalty(v) for v in verdicts]
        if self.combine == "max":
            verdict_penalty = max(penalties, default=0.0)
        else:
            verdict_penalty = min(sum(penalties), self.max_penalty)
        unsafe = self.unsafe_penalty if ended.safety is not None and ended.safety.unsafe else 0.0
        return {
            "task": float(ended.task_reward),
            "outcome": self.outcome_bonus.get(ended.outcome, 0.0),
            "safety": -(verdict_penalty + unsafe),
        }

    def reward(self, components: dict[str, float]) -> float:
        """The sum of the components."""
        return round(sum(components.values()), 9)

    def describe(self) -> str:
        """A one-line statement of the rule, stored with every trajectory."""
        bonus = ",".join(f"{k.value}={v:g}" for k, v in self.outcome_bonus.items() if v)
        pen = ",".join(f"{k.value}={v:g}" for k, v in self.severity_penalty.items() if v)
        return (
            f"{self.name}: task_reward + outcome_bonus[{bonus}] - "
            f"{self.combine}(severity_penalty[{pen}] over block and warn verdicts)"
            + (f" capped {self.max_penalty:g}" if self.combine == "sum" else "")
            + f" - {self.unsafe_penalty:g}*env_unsafe"
        )

    def _verdict_penalty(self, verdict: Verdict) -> float:
        if not verdict.decision.acted_on:  # uncertain findings do not teach
            return 0.0
        return self.severity_penalty.get(verdict.severity, 0.0)
