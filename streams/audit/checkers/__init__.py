"""The built-in checkers; importing this package registers them."""

from . import heuristics, judge, models, rules

__all__ = ["heuristics", "judge", "models", "rules"]
