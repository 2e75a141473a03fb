"""One-line errors for commands that talk to Kafka: the broker hint only where it helps."""

from __future__ import annotations

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

UNREACHABLE = (KafkaConnectionError, KafkaTimeoutError, ConnectionError, TimeoutError)
"""Exceptions that mean the broker could not be reached (not that the input was wrong)."""


def broker_failure(exc: BaseException, bootstrap: str) -> str:
    """What went wrong, in one line: "cannot reach the broker …" with how to start one when
    the broker was unreachable, else the error itself (a bad record, a bad config file)."""
    if isinstance(exc, UNREACHABLE):
        return (
            f"cannot reach the Kafka broker at {bootstrap} ({type(exc).__name__}: {exc}); "
            "start one with `safactory broker up`, or point SF_KAFKA_BOOTSTRAP at yours"
        )
    return f"{type(exc).__name__}: {exc}"
