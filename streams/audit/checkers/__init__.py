"""The built-in checkers; importing this package registers them."""

from . import deep, harm, models, rules, secondary

__all__ = ["deep", "harm", "judge", "models", "rules", "secondary"]
