"""Where the LanceDB database lives (a folder or an object-store URI), and opening it.

Every reader and writer (sink, maintenance, query, export, replay, serve, benches) opens the
database through :func:`open_db`, so ``s3://bucket/prefix`` works wherever a folder does, and
a database that cannot be reached fails with one line naming the setting to fix instead of
lance's retry dump. Storage options (endpoint, region, ``allow_http``, keys) go to
``lancedb.connect``; lance itself also reads the ``AWS_*`` environment variables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import lancedb

from ..infra.config import Settings

STORAGE_ENV = "SF_LANCE_STORAGE"
"""The environment variable of ``Settings.lance_storage`` (JSON); child processes get the
options through it, never on their command line."""

SETTING = "--db / SF_LANCE_URI"


class DbUnavailable(ValueError):
    """The database cannot be opened; the message names the setting and the fix."""


@dataclass(frozen=True)
class LanceLocation:
    """A LanceDB database: ``uri`` (a folder, or ``s3://bucket/prefix``) and the storage
    options lance connects to it with (empty for a folder)."""

    uri: str
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def configured(cls, settings: Settings, db: str | Path | None = None) -> LanceLocation:
        """``db`` (a command's ``--db``), else ``settings.lance_uri``, with the configured
        storage options (booleans as lance spells them: ``true``/``false``)."""
        options = {
            k: (str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in settings.lance_storage.items()
        }
        return cls(str(db) if db is not None else settings.lance_uri, options)

    @property
    def remote(self) -> bool:
        """True for an object-store URI (``scheme://...``), False for a folder."""
        return "://" in self.uri

    def shown(self) -> str:
        """The URI, or the folder's absolute path (dataset cards, logs)."""
        return self.uri if "://" in self.uri else str(Path(self.uri).resolve())

    def child_env(self) -> dict[str, str]:
        """Environment for a child process that opens this location (``maintain``)."""
        return {**os.environ, STORAGE_ENV: json.dumps(dict(self.storage_options))}

    def __str__(self) -> str:
        return self.uri


Db = str | Path | LanceLocation
"""What the sink, query and export functions accept: a folder, a URI, or a location."""


def location(db: Db) -> LanceLocation:
    """``db`` as a :class:`LanceLocation` (a plain path or URI has no storage options)."""
    return db if isinstance(db, LanceLocation) else LanceLocation(str(db))


WRITER_CACHE_BYTES = 8 << 20
"""Index and metadata cache of a long-running writer (the sink). LanceDB's default session
keeps every table version's manifest it has seen until its cache (a gigabyte) is full, so a
writer that commits every few seconds grows by megabytes a minute: 1,500 appends took a
process from 183 to 627 MB with the default session. A writer needs only each table's
latest manifest; the cache fills to its bound and stays there (2,000 appends with compaction
in a child: +67 MB at 64 MiB, +13 MB at 4 MiB; the hour-long soak's sink grew 2.1 MB a
minute towards the 64 MiB bound) (docs/DECISIONS.md). Readers keep the default: a query on a
large table reads its indexes."""


def open_db(db: Db, *, writer: bool = False) -> lancedb.DBConnection:
    """Connect to the database at ``db`` (a folder is created if missing); a ``writer``
    gets a bounded cache (:data:`WRITER_CACHE_BYTES`). An object-store URI that is malformed
    or cannot be reached raises :class:`DbUnavailable`."""
    where = location(db)
    session = (
        lancedb.Session(
            index_cache_size_bytes=WRITER_CACHE_BYTES, metadata_cache_size_bytes=WRITER_CACHE_BYTES
        )
        if writer
        else None
    )
    if not where.remote:
        return lancedb.connect(where.uri, session=session)
    parts = urlsplit(where.uri)
    if not parts.netloc:
        raise DbUnavailable(
            f"{SETTING} {where.uri!r}: malformed: no bucket; write {parts.scheme}://bucket/prefix"
        )
    try:
        return lancedb.connect(
            where.uri, storage_options=dict(where.storage_options), session=session
        )
    except (ValueError, RuntimeError, OSError) as exc:
        raise DbUnavailable(f"{SETTING} {where.uri!r}: {_reason(exc, where)}") from None


def _reason(exc: BaseException, where: LanceLocation) -> str:
    """Lance's error (a retry dump of several hundred characters) as its cause and fix."""
    text = str(exc)
    bucket = urlsplit(where.uri).netloc
    options = {k.lower(): v for k, v in where.storage_options.items()}
    endpoint = (
        options.get("aws_endpoint")
        or options.get("endpoint")
        or os.environ.get("AWS_ENDPOINT")
        or os.environ.get("AWS_ENDPOINT_URL")
        or "the AWS default"
    )
    set_endpoint = (
        f"set aws_endpoint in {STORAGE_ENV} (or [lance_storage], or AWS_ENDPOINT), "
        "with allow_http for an http:// endpoint"
    )
    if "NoSuchBucket" in text:
        return (
            f"bucket {bucket!r} does not exist at {endpoint}; create it (aws s3 mb s3://{bucket}, "
            f"mc mb, or weed shell: s3.bucket.create -name {bucket}) or fix the URI"
        )
    if "kind: Connect" in text or "tcp connect" in text.lower() or "dns error" in text.lower():
        return f"cannot reach the object store at {endpoint}; start it or {set_endpoint}"
    if "BadScheme" in text:  # reqwest refuses http:// unless allowed
        return f"{endpoint} is plain http: add allow_http=true to {STORAGE_ENV} (or AWS_ALLOW_HTTP)"
    if any(s in text for s in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied")):
        return (
            f"the object store at {endpoint} refused the credentials; set aws_access_key_id and "
            f"aws_secret_access_key in {STORAGE_ENV} (or AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
        )
    if "Failed to resolve region" in text:
        return (
            f"no region for bucket {bucket!r}: set aws_region in {STORAGE_ENV} (or AWS_REGION), "
            "and aws_endpoint for a store other than AWS S3"
        )
    if "did not match any known pattern" in text:
        return "malformed URI; write s3://bucket/prefix"
    if "Valid schemes" in text or "No object store provider" in text:
        return "unknown scheme; use s3:// (or gs://, az://) for object storage, or a folder"
    return " ".join(text.split())[:300] + f"; check the URI and {set_endpoint}"
