"""Trajectory assembly: steps, episode events and verdicts folded into trajectories."""

from .fold import AssemblerConfig, AssemblerStats, EpisodeState, TrajectoryAssembler
from .reward import RewardRule

__all__ = ["AssemblerConfig", "AssemblerStats", "EpisodeState", "RewardRule", "TrajectoryAssembler"]
