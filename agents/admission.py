"""Admission control with hot reload: whether a simulation worker may start an episode now.

Before each episode starts, :class:`StalenessController` is asked whether the worker's
policy lags the latest version announced on ``sf.policy`` by too much; if so the policy
reloads first (hot reload). Given the trainer's batch size
(``StalenessController(batch_size=..., workers=...)``), it also holds episodes back while
the trainer's announced ``consumed`` count leaves no capacity for them to arrive fresh
(reloading first when newer weights would).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from ..infra import metrics
from ..infra.staleness import Admission, StalenessController
from ..schemas import PolicyVersion
from .policies.base import Policy

log = logging.getLogger(__name__)


class ReloadStats(metrics.Tally):
    """Policy hot reloads (in the metrics registry)."""

    reloads = metrics.Count("sf_simulate_policy_reloads", "policy hot reloads")


class PolicyAdmission:
    """Admits episodes of ``policy`` against the announcements in ``latest`` (policy name
    → newest :class:`PolicyVersion`, a view kept current by its owner)."""

    def __init__(
        self,
        policy: Policy,
        staleness: StalenessController,
        latest: Mapping[str, PolicyVersion],
    ) -> None:
        self.policy, self.staleness, self.latest = policy, staleness, latest
        self.stats = ReloadStats()
        # Episodes admitted at once wait for one reload instead of each loading the weights.
        self._reloading = asyncio.Lock()

    async def admit(self, in_flight: Callable[[], int]) -> None:
        """Return once the calling episode may start (``in_flight``: episodes running now),
        reloading the policy first when it lags."""
        while True:
            latest = self.latest.get(self.policy.name)
            decision = self.staleness.admit_episode(
                self.policy.version,
                latest.policy_version if latest else self.policy.version,
                in_flight(),
                consumed=latest.consumed if latest else None,
                key=asyncio.current_task(),  # the episode's own task (ActorPool.run_one)
            )
            if decision is Admission.START:
                return
            if decision is Admission.RELOAD and latest is not None:
                async with self._reloading:
                    if latest.policy_version > self.policy.version:  # not done while waiting
                        log.info(
                            "policy %s: reloading v%s -> v%s",
                            self.policy.name,
                            self.policy.version,
                            latest.policy_version,
                        )
                        await self.policy.reload(latest)
                        self.stats.reloads += 1
                continue
            await asyncio.sleep(0.05)

    def ended(self) -> None:
        """The calling episode ended (its capacity is free again)."""
        self.staleness.episode_ended(asyncio.current_task())
