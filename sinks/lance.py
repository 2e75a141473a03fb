"""The LanceDB store: how a batch is written, and what a table already holds.

Several sink processes may write one database (members of one consumer group): lance
retries a commit that raced another writer's append, and a sink given partitions another
wrote re-reads what the tables hold (``BatchSink.forget``). Maintenance compacts, updates
indexes and drops old versions; versions a training run used are tagged so they survive.
"""

from __future__ import annotations

from datetime import timedelta

import lancedb
import pyarrow as pa
import pyarrow.compute as pc
from lancedb.index import FTS, Bitmap, BTree, IvfSq

from ..infra.embedding import TextEmbedder as Embedder
from .base import BatchSink, Columns
from .location import Db, location, open_db
from .tables import COLUMNS, EMBEDDED_TABLES, SCALAR_INDEXES, TABLE_OF, table_schema

VECTOR_INDEX_MIN_ROWS = 20_000
"""Below this many rows vector search scans (exact and fast enough); above, IVF-SQ."""


def sql_quote(text: str) -> str:
    """A SQL string literal for a LanceDB filter."""
    return "'" + text.replace("'", "''") + "'"


class LanceSink(BatchSink):
    """Writes the factory's tables to a LanceDB database (a folder or an object-store URI)."""

    def __init__(self, db: Db, *, embedder: Embedder | None = None, check_ids: bool = True) -> None:
        super().__init__(TABLE_OF, COLUMNS, check_ids=check_ids)
        self.location = location(db)
        self.db = open_db(self.location, writer=True)
        self.embedder = embedder
        self._open: dict[str, lancedb.table.Table] = {}
        self._vector_field: dict[str, pa.Field] = {}

    def table(self, name: str) -> lancedb.table.Table:
        """The table ``name``, created with its schema if it does not exist yet."""
        if name not in self._open:
            dim = self.embedder.dim if self.embedder else None
            schema = table_schema(name, dim)
            # exist_ok: another sink of the group may create it at the same moment
            table = self.db.create_table(name, schema=schema, exist_ok=True)
            if "vector" in table.schema.names and name in EMBEDDED_TABLES and not dim:
                raise ValueError(
                    f"{self.location}/{name}: table has a 'vector' column but embedding is "
                    "off; run the sink with embedding on (drop --no-embed)"
                )
            self._open[name] = table
            if "vector" in table.schema.names:
                self._vector_field[name] = table.schema.field("vector")
        return self._open[name]

    # ------------------------------------------------------------------ BatchSink
    def write(self, table: str, columns: Columns) -> None:
        """Append in one commit (embedding the text first where the table has vectors)."""
        target = self.table(table)
        arrow = pa.Table.from_pydict(columns, table_schema(table))
        if table in self._vector_field:
            assert self.embedder is not None
            vectors = self.embedder.embed(columns["text"])
            flat = pa.array(vectors.reshape(-1), type=pa.float32())
            column = pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1])
            arrow = arrow.append_column(self._vector_field[table], column)
        target.add(arrow)

    def stored_offsets(self, table: str) -> dict[tuple[str, int], int]:
        """Max ``source_offset`` per (topic, partition), from three narrow columns."""
        target = self.table(table)
        if target.count_rows() == 0:
            return {}
        cols = ["source_topic", "source_partition", "source_offset"]
        data = target.search().select(cols).limit(None).to_arrow()
        grouped = data.group_by(["source_topic", "source_partition"]).aggregate(
            [("source_offset", "max")]
        )
        return {
            (t, p): o
            for t, p, o in zip(
                grouped["source_topic"].to_pylist(),
                grouped["source_partition"].to_pylist(),
                grouped["source_offset_max"].to_pylist(),
                strict=True,
            )
        }

    def existing_ids(self, table: str, ids: list[str]) -> set[str]:
        """One indexed ``event_id IN (...)`` lookup."""
        target = self.table(table)
        if not ids or target.count_rows() == 0:
            return set()
        where = f"event_id IN ({', '.join(sql_quote(i) for i in ids)})"
        found = target.search().where(where).select(["event_id"]).limit(len(ids)).to_arrow()
        return set(pc.unique(found["event_id"]).to_pylist())

    def stored_ids(self, table: str) -> list[str]:
        """The ``event_id`` column, read alone."""
        target = self.table(table)
        if target.count_rows() == 0:
            return []
        return target.search().select(["event_id"]).limit(None).to_arrow()["event_id"].to_pylist()

    # ------------------------------------------------------------------ maintenance
    def ensure_indexes(self) -> list[str]:
        """Create missing scalar, full-text and (once big enough) vector indexes."""
        made = []
        for name in self._stored():
            target = self._existing(name)
            have = {tuple(i.columns) for i in target.list_indices()}
            for column, kind in SCALAR_INDEXES[name]:
                if (column,) not in have:
                    target.create_index(column, config=BTree() if kind == "BTREE" else Bitmap())
                    made.append(f"{name}.{column}:{kind}")
            if "text" in target.schema.names and ("text",) not in have:
                target.create_index("text", config=FTS(with_position=False))
                made.append(f"{name}.text:FTS")
            if (
                "vector" in target.schema.names
                and ("vector",) not in have
                and target.count_rows() >= VECTOR_INDEX_MIN_ROWS
            ):
                vector_index = IvfSq(distance_type="cosine", max_iterations=10)
                target.create_index("vector", config=vector_index)
                made.append(f"{name}.vector:IVF_SQ")
        return made

    def maintain(self, keep_versions_for: timedelta = timedelta(minutes=10)) -> None:
        """Compact fragments, fold new rows into indexes, drop untagged versions older than
        ``keep_versions_for`` (each version keeps a manifest listing every fragment, so
        history left for hours outgrew the data: 707 MB of manifests for 50 MB of rows)."""
        for name in self._stored():
            self._existing(name).optimize(cleanup_older_than=keep_versions_for)

    def refresh(self) -> None:
        """See the latest version of every open table (another process maintained them)."""
        for table in self._open.values():
            table.checkout_latest()

    def reread(self) -> None:
        """See every table's latest version and read its watermarks and ids again: another
        sink of the group wrote the partitions this one was just given."""
        self.refresh()
        self.forget()

    def _stored(self) -> list[str]:
        """The sink's tables that exist (maintenance never creates one: a maintaining
        process has no embedder to give a new table its vector column)."""
        return sorted(set(self.tables()) & set(self.db.list_tables().tables))

    def _existing(self, name: str) -> lancedb.table.Table:
        return self._open.get(name) or self.db.open_table(name)


def tag_versions(
    db: Db,
    tag: str,
    tables: list[str] | None = None,
    versions: dict[str, int] | None = None,
) -> dict[str, int]:
    """Tag a version of each table (e.g. the data a training run used), so that cleanup
    keeps it and ``checkout(tag)`` reproduces it: the version given in ``versions`` (the one
    a reader used), else the current one. Returns table → version. A tag already in use
    raises lance's ``RuntimeError`` ("Ref conflict error")."""
    conn = open_db(db)
    tagged = {}
    for name in tables or conn.list_tables().tables:
        table = conn.open_table(name)
        version = (versions or {}).get(name, table.version)
        table.tags.create(tag, version)
        tagged[name] = version
    return tagged
