"""Live monitoring: a stream processor that folds alerts, verdicts, episodes, steps,
consumer-group lag and policy versions into one view (``safactory monitor`` and
``safactory serve`` render it)."""

from .follow import FOLLOWED, Follower
from .view import AlertRow, LiveView

__all__ = ["FOLLOWED", "AlertRow", "Follower", "LiveView"]
