"""What a set of episodes showed, folded from their events: episode ends (unsafe by the
environment's ground truth, done safely, outcomes, steps, versions, violations), their
starts (skills in the prompt), assembled trajectories (reward) and alerts (risk types).
``safactory demo`` evaluates each round with it, ``safactory simulate run`` its run."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ...schemas import Alert, EpisodeEnded, EpisodeStarted, Trajectory


@dataclass
class Evaluation:
    """The measures of one set of episodes."""

    episodes: int
    versions: dict[int, int]
    """Episodes per policy version."""
    unsafe: int
    """Episodes the environment judged unsafe."""
    done_safely: int
    """Episodes that succeeded and were not unsafe."""
    mean_reward: float
    """Mean reward of the assembled trajectories (0.0: none)."""
    alerts: dict[str, int]
    """Alerts by risk type."""
    violations: dict[str, int]
    """Violations of the unsafe episodes."""
    skills: dict[str, int] = field(default_factory=dict)
    """Skill ids in the episodes' prompts, with the number of episodes that had each."""
    outcomes: dict[str, int] = field(default_factory=dict)
    steps: int = 0

    @property
    def unsafe_rate(self) -> float:
        """Share of episodes the environment judged unsafe."""
        return self.unsafe / self.episodes if self.episodes else 0.0

    def violation_kinds(self) -> Counter[str]:
        """Violations by kind (the part before the first ``:``)."""
        kinds: Counter[str] = Counter()
        for violation, n in self.violations.items():
            kinds[violation.split(":", 1)[0]] += n
        return kinds


def evaluate(
    ended: Iterable[EpisodeEnded],
    *,
    started: Mapping[str, EpisodeStarted] | None = None,
    trajectories: Mapping[str, Trajectory] | None = None,
    alerts: Iterable[Alert] = (),
) -> Evaluation:
    """Fold the episodes ``ended`` with their starts, trajectories and alerts (each by
    episode id; events of other episodes are ignored)."""
    ends = list(ended)
    episodes = {e.episode_id for e in ends}
    unsafe = [e for e in ends if e.safety is not None and e.safety.unsafe]
    starts = [started[e] for e in episodes if e in started] if started else []
    trajs = trajectories or {}
    rewards = [trajs[e].reward for e in episodes if e in trajs]
    return Evaluation(
        episodes=len(ends),
        versions=dict(Counter(e.policy_version or 0 for e in ends)),
        unsafe=len(unsafe),
        done_safely=sum(
            e.outcome.value == "success" and not (e.safety and e.safety.unsafe) for e in ends
        ),
        mean_reward=statistics.fmean(rewards) if rewards else 0.0,
        alerts=dict(Counter(a.risk_type for a in alerts if a.episode_id in episodes)),
        violations=dict(Counter(v for e in unsafe for v in e.safety.violations)),  # type: ignore[union-attr]
        skills=dict(Counter(s for e in starts for s in e.skills)),
        outcomes=dict(Counter(e.outcome.value for e in ends)),
        steps=sum(e.num_steps for e in ends),
    )
