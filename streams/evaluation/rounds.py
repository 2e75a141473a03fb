"""The rounds of a before / after evaluation (``safactory demo``): held-out tasks run
before any change, with skills injected only, and after training, on the same tasks and
seeds; each training round runs the other tasks on new seeds and trains one version."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...schemas import Task
from .fold import Evaluation
from .observer import Tally

HELD_OUT = "-heldout-"
"""In the task ids of evaluation episodes; the trainer never trains on them."""


class SuiteTask(Protocol):
    """A task of an environment's suite (``agents.env.TaskSpec``)."""

    @property
    def task_id(self) -> str: ...

    @property
    def params(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RoundPlan:
    """One run's rounds: before, injection (when ``injection``), ``training`` train
    rounds, after; ``episodes`` per round cycling the suite's tasks of the round's split."""

    run: str
    env: str
    episodes: int
    training: int
    seed: int = 0
    injection: bool = False
    shuffle: bool = False
    """Ask the environment to shuffle each menu by the episode seed."""

    @property
    def kinds(self) -> list[str]:
        """The kind of each round, in order."""
        injection = ["injection"] if self.injection else []
        return ["before", *injection, *["train"] * self.training, "after"]

    def training_round(self, index: int) -> int:
        """1 for the first training round, ...: the version its trajectories train."""
        return self.kinds[: index + 1].count("train")

    def tasks(self, index: int, suite: Sequence[SuiteTask]) -> list[Task]:
        """Round ``index``'s tasks from ``suite`` (split by ``params["split"]``): held-out
        tasks with the same seeds before, with injection and after training, training
        tasks with new seeds (new menu orders) every training round."""
        train = self.kinds[index] == "train"
        chosen = [t for t in suite if t.params.get("split") == ("train" if train else "heldout")]
        first = self.seed + (1000 * self.training_round(index) if train else 0)
        tag = "" if train else HELD_OUT.strip("-") + "-"
        return [
            Task(
                task_id=f"{self.run}-r{index}-{tag}{i:03d}-{spec.task_id}",
                env=self.env,
                spec={"suite_task": spec.task_id, "params": {"shuffle": self.shuffle}},
                seed=first + i,
                group_id=f"{self.run}-r{index}-{spec.task_id}",
            )
            for i, spec in ((i, chosen[i % len(chosen)]) for i in range(self.episodes))
        ]


@dataclass
class RoundResult:
    """What one round of episodes showed."""

    index: int
    kind: str
    episodes: int
    versions: dict[int, int]
    unsafe: int
    done_safely: int
    mean_reward: float
    alerts: dict[str, int]
    violations: dict[str, int]
    seconds: float = 0.0
    """Wall time of the round: its episodes and their trajectories."""
    update_seconds: float | None = None
    """Wall time from the round's last trajectory to the version it trained (train rounds)."""
    skills: dict[str, int] = field(default_factory=dict)
    """Skill ids in the episodes' prompts, with the number of episodes that had each."""

    @classmethod
    def of(cls, index: int, kind: str, e: Evaluation) -> RoundResult:
        """Round ``index`` of ``kind`` with the measures of its evaluation ``e``."""
        measures = (e.episodes, e.versions, e.unsafe, e.done_safely, e.mean_reward, e.alerts)
        return cls(index, kind, *measures, e.violations, skills=e.skills)

    @property
    def unsafe_rate(self) -> float:
        """Share of episodes the environment judged unsafe."""
        return self.unsafe / self.episodes if self.episodes else 0.0


def run_summary(results: Sequence[RoundResult], tally: Tally) -> dict[str, Any]:
    """A run's record: every round, before / injection only / after on the held-out tasks,
    and what each stage produced (``tally``)."""
    return {
        "rounds": [r.__dict__ for r in results],
        "before": {"unsafe_rate": results[0].unsafe_rate, "mean_reward": results[0].mean_reward},
        "injection": next(
            (
                {"unsafe_rate": r.unsafe_rate, "mean_reward": r.mean_reward, "skills": r.skills}
                for r in results
                if r.kind == "injection"
            ),
            None,
        ),
        "skills": {k: v.model_dump() for k, v in tally.skills.items()},
        "after": {"unsafe_rate": results[-1].unsafe_rate, "mean_reward": results[-1].mean_reward},
        "episodes": len(tally.ended),
        "steps": len(tally.steps),
        "verdicts": tally.verdicts,
        "alerts_by_risk": dict(tally.alerts_by_risk()),
        "alerted_episodes": sorted(tally.alerted_episodes()),
        "unsafe_episodes": sorted(
            e.episode_id for e in tally.ended.values() if e.safety is not None and e.safety.unsafe
        ),
        "trajectories": len(tally.trajectories),
        "trajectories_with_verdicts": sum(bool(t.verdict_ids) for t in tally.trajectories.values()),
        "trajectory_records": tally.trajectory_records,
        "policy_versions": sorted(tally.policy),
        "versions_run": sorted({e.policy_version or 0 for e in tally.ended.values()}),
    }
