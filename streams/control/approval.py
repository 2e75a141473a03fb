"""A person's answer to a paused episode: approve (it goes on) or deny (it halts).

``safactory monitor`` (keys ``a`` / ``d``) and ``safactory serve`` (a button, behind its token)
publish the answer on ``sf.control``; the runner waiting on the pause reads it. The answer's
id is derived from the pause's, so pressing twice sends one decision.
"""

from __future__ import annotations

from ...schemas import Control, ControlCommand, derive_id

PRODUCER = "control-answer"
PRODUCER_VERSION = 1


def answer(pause: Control, approve: bool, by: str) -> Control:
    """The decision that answers ``pause``: ``resume`` if ``approve`` else ``halt``."""
    verb = "approved" if approve else "denied"
    return Control(
        event_id=derive_id(PRODUCER, PRODUCER_VERSION, pause.event_id, verb),
        episode_id=pause.episode_id,
        command=ControlCommand.RESUME if approve else ControlCommand.HALT,
        reason=f"{verb} by {by}: {pause.reason}"[:1000],
        source_event_id=pause.source_event_id,
        verdict_ids=list(pause.verdict_ids),
        decided_by=f"person:{by}"[:128],
        trace_id=pause.trace_id,
    )
