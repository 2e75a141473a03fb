"""Replay: re-ask the log a question without touching the live consumer groups.

``window`` reads a bounded window of a topic with no consumer group; ``audit`` re-audits
past steps with a chosen checker set, publishes the verdicts under a replay id and diffs
the alerts against the originals.
"""

from .audit import (
    REPLAY_HEADER,
    AuditDiff,
    AuditWindow,
    ReAuditor,
    is_replay,
    new_replay_id,
    reaudit,
)
from .window import Position, PositionError, parse_position, read_window

__all__ = [
    "REPLAY_HEADER",
    "AuditDiff",
    "AuditWindow",
    "Position",
    "PositionError",
    "ReAuditor",
    "is_replay",
    "new_replay_id",
    "parse_position",
    "read_window",
    "reaudit",
]
