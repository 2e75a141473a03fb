"""The local broker as configured by :class:`Settings` (what ``safactory broker`` drives)."""

from __future__ import annotations

from .broker import LocalBroker
from .config import Settings


def local_broker(settings: Settings) -> LocalBroker:
    """The broker under ``settings.home`` on ``settings.broker_port``."""
    return LocalBroker(
        settings.home,
        port=settings.broker_port,
        controller_port=settings.controller_port,
        heap=settings.broker_heap,
        kafka_version=settings.kafka_version,
        name=settings.broker_name,
    )


def uses_local_broker(settings: Settings) -> bool:
    """True when ``kafka_bootstrap`` points at the local broker rather than a cluster."""
    return settings.kafka_bootstrap in {
        f"127.0.0.1:{settings.broker_port}",
        f"localhost:{settings.broker_port}",
    }
