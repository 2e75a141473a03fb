"""Evaluation, the loop's *verify* step: what a set of episodes showed, folded from their
events (``fold``), the rounds of a before / after comparison (``rounds``), and the observer
that tallies a run's topics (``observer``)."""

from .fold import Evaluation, evaluate
from .rounds import HELD_OUT, RoundPlan

__all__ = ["HELD_OUT", "Evaluation", "RoundPlan", "evaluate"]
