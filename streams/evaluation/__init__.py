"""Evaluation, the loop's *verify* step: what a set of episodes showed, folded from their
events (``fold``), the rounds of a before / after comparison (``rounds``), the observer
that tallies a run's topics (``observer``), their learning curve (``picture``); and the
closed loop that ``safactory demo`` runs on one machine (``loop``, ``profiles``)."""

from .fold import Evaluation, evaluate
from .rounds import HELD_OUT, RoundPlan

__all__ = ["HELD_OUT", "Evaluation", "RoundPlan", "evaluate"]
