"""The topics the skills worker owns besides the catalogue's, named after its group."""

from __future__ import annotations

from dataclasses import dataclass

from ...infra.topics import TopicSpec


@dataclass(frozen=True)
class SkillsTopics:
    """The re-keyed trajectories and the keyed state of the skills worker ``group_id``."""

    by_episode: TopicSpec
    """Trajectories re-keyed by episode, partitioned like ``sf.verdicts`` (the join's input)."""
    join_state: TopicSpec
    """The join's changelog: an episode's verdicts, its trajectory, or ``done``."""
    siblings: TopicSpec
    """The route's changelog: the acts of each group's safe episodes."""

    @classmethod
    def of(cls, group_id: str) -> SkillsTopics:
        """The topics of the skills worker whose consumer group is ``group_id``."""
        return cls(
            by_episode=TopicSpec(
                f"{group_id}-by-episode", "episode id", "trajectories re-keyed for the skills join"
            ),
            join_state=TopicSpec(
                f"{group_id}-join",
                "<episode>\\0<verdict id> | <episode>\\0trajectory | <episode>\\0done",
                "the skills worker's verdicts and trajectories waiting for each other",
                cleanup="compact",
            ),
            siblings=TopicSpec(
                f"{group_id}-siblings",
                "<group>\\0<episode id>",
                "the acts of each group's safe episodes, for its unsafe episodes' lessons",
                cleanup="compact",
            ),
        )
