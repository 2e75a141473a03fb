"""``safactory worker control``: verdicts in, halt / pause decisions out to ``sf.control``.

One processor, no state: each verdict goes through :meth:`ControlPolicy.decide` (the
``[control]`` rules of the config; none by default, and then nothing is published). A
replayed verdict (``sf-replay`` header) is passed over unread: a re-audit of an old episode
must not stop a live one. A new group starts at the log's beginning, like every processor:
starting at its end would lose the verdicts published while the group was joining (the
position of "the end" is fixed only after the assignment); a decision about a verdict of an
episode that has ended stops nothing. A decision's id is derived from its verdict's, so a
batch handled again after a crash publishes the same decisions.
"""

from __future__ import annotations

from ...infra.config import Settings
from ...infra.consumer import Delivery
from ...infra.processor import Context, Processor, Runtime, live_only
from ...schemas import Verdict
from .policy import ControlPolicy


def controller(policy: ControlPolicy, *, group_id: str = "safactory-control") -> Processor:
    """The control processor: ``policy`` applied to every live verdict."""

    async def decide(record: Delivery, ctx: Context) -> None:
        if isinstance(record.event, Verdict):
            control = policy.decide(record.event)
            if control is not None:
                ctx.emit(control)

    return Processor(
        "control",
        inputs=("verdicts",),
        outputs=("control",),
        handle=decide,
        screen=live_only,
        group=group_id,
    )


def policy_of(settings: Settings) -> ControlPolicy:
    """The control policy the config names (``[control]`` in the TOML file, or
    ``SF_CONTROL='{"rules": [...]}'``)."""
    return ControlPolicy.model_validate(settings.control)


def control_runtime(
    settings: Settings, policy: ControlPolicy | None = None, *, group_id: str = "safactory-control"
) -> Runtime:
    """The control worker's runtime (``policy`` defaults to the config's)."""
    return Runtime(settings, controller(policy or policy_of(settings), group_id=group_id))
