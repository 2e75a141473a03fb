"""Shared fixtures: a real Kafka broker (started here if none answers) and isolated topics.

Integration tests talk to the real broker at ``SF_KAFKA_BOOTSTRAP`` (default
127.0.0.1:9092). If nothing answers there, a local KRaft broker is started under
``SF_HOME`` for the session and stopped afterwards. Each test gets its own topic prefix,
so tests never see each other's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from example_events import example_events

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.local import local_broker
from safactory.infra.producer import EventProducer
from safactory.infra.topics import create_topics, delete_topics_where

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _reachable(bootstrap: str) -> bool:
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def kafka() -> Iterator[str]:
    """Bootstrap address of a running broker (started for the session if needed)."""
    settings = Settings()
    if _reachable(settings.kafka_bootstrap):
        yield settings.kafka_bootstrap
        return
    broker = local_broker(settings)
    broker.up()
    try:
        yield broker.bootstrap
    finally:
        broker.down()


@pytest.fixture
def settings(kafka: str) -> Iterator[Settings]:
    """Settings on the test broker with a topic prefix unique to this test; the test's
    topics are deleted afterwards (a broker holding every test's partitions runs out of
    file descriptors: 19,909 partition folders ended a shared broker with "Too many open
    files")."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    yield Settings(kafka_bootstrap=kafka, topic_prefix=prefix)
    doomed = delete_topics_where(Settings(kafka_bootstrap=kafka), lambda t: t.startswith(prefix))
    with ThreadPoolExecutor(1) as thread, contextlib.suppress(Exception):  # a test that
        thread.submit(asyncio.run, doomed).result(timeout=30)  # stopped the broker leaves them


@pytest.fixture
async def topics(settings: Settings) -> Settings:
    """``settings`` with every catalogue topic created under its prefix."""
    await create_topics(settings)
    return settings


@pytest.fixture
async def producer(topics: Settings) -> AsyncIterator[EventProducer]:
    """A started producer on the test's topics."""
    async with EventProducer(topics) as p:
        yield p


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def events() -> list[s.Event]:
    """One example of every event type (tests/support/example_events.py)."""
    return example_events()
