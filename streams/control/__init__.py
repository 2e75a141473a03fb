"""Real-time intervention: verdicts turned into halt / pause decisions on ``sf.control``, and
a person's answers to the pauses."""

from .approval import answer
from .policy import ControlPolicy, ControlRule

__all__ = ["ControlPolicy", "ControlRule", "answer"]
