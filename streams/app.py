"""The faust-streaming application every processor in ``streams/`` runs in.

Processors stay plain (decode, call a pure function, emit); this module only wires a faust
``App`` to the configured cluster. Records are read as raw bytes and decoded with the
``schemas`` codec so headers and dead-lettering behave exactly as in ``infra``.
Per DESIGN.md: agent concurrency 1 where order matters, and no ``exactly_once``.
"""

from __future__ import annotations

from typing import Any

import faust

from ..infra.config import Settings, get_settings


def make_app(name: str, settings: Settings | None = None, **overrides: Any) -> faust.App:
    """A faust App named ``safactory-<name>`` on the configured brokers, tables in memory
    backed by changelog topics (a restarted worker rebuilds its tables from them)."""
    settings = settings or get_settings()
    servers = ";".join(f"kafka://{s.strip()}" for s in settings.kafka_bootstrap.split(","))
    options: dict[str, Any] = {
        "broker": servers,
        "store": "memory://",
        "value_serializer": "raw",
        "key_serializer": "raw",
        "topic_partitions": settings.default_partitions,
        "topic_replication_factor": 1,
        "processing_guarantee": "at_least_once",
        "web_enabled": False,
        "broker_commit_every": 100,
        "broker_commit_interval": 1.0,
        "consumer_auto_offset_reset": "earliest",
        "producer_acks": -1,
        "table_cleanup_interval": 30.0,
    }
    options.update(overrides)
    return faust.App(f"{settings.client_id}-{name}", **options)
