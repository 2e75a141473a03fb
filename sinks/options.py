"""How the sink worker runs: its database, group, batching and maintenance settings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .location import Db
from .tables import TOPICS


@dataclass(frozen=True)
class SinkOptions:
    """How the sink worker runs."""

    db_path: Db
    """A folder, an object-store URI, or a :class:`~.location.LanceLocation` with options."""
    group_id: str = "safactory-sink"
    """Scoped by the topic prefix (``Settings.group``): one sink group per database."""
    topics: tuple[str, ...] = TOPICS
    max_records: int = 5000
    """Most records written in one commit."""
    gather_s: float = 2.0
    """Longest a record waits for others to share its commit."""
    maintain_every_s: float = 60.0
    keep_versions: timedelta = timedelta(minutes=10)
    """Untagged table versions older than this are deleted by maintenance (readers of an older
    version tag it first, as ``export --tag`` does)."""
    idle_timeout_s: float | None = None
    """Return after this long without records (tests, one-shot backfills); None: run on."""
