"""Query latency (p50/p99) of a filtered lookup and a semantic search on the steps table.

Builds a steps table of --rows synthetic rows in the sink's schema (vectors are random
clustered unit vectors of MiniLM's 384 dimensions: embedding 1M texts with MiniLM is hours
of CPU, and latency depends on the index, not on where the vectors came from), builds the
sink's scalar indexes and an IVF-SQ vector index (what the sink builds), then times:

* lookup   — ``episode_id = X`` (one episode's steps, BTree);
* filtered — ``env = E AND policy_version = V AND produced_at >= T`` limit 20;
* semantic — nearest 10 by cosine to a query vector, prefiltered by ``env = E``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from lancedb.index import Bitmap, BTree, IvfSq

from safactory.sinks.lance import open_db
from safactory.sinks.tables import table_schema

DIM = 384
STEPS_PER_EPISODE = 20


def synthetic_batch(start: int, n: int, rng: np.random.Generator, centers: np.ndarray) -> pa.Table:
    """``n`` step rows numbered from ``start`` in the sink's steps schema, with vectors."""
    idx = np.arange(start, start + n)
    episode = idx // STEPS_PER_EPISODE
    cluster = rng.integers(0, len(centers), n)
    vectors = centers[cluster] + 0.35 * rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    text = [
        f"observation {i}: topic {c} page with {i % 97} items; action click {i % 13}"
        for i, c in zip(idx.tolist(), cluster.tolist(), strict=True)
    ]
    columns = {
        "event_id": [f"{i:032x}" for i in idx.tolist()],
        "schema": ["step/1"] * n,
        "episode_id": [f"ep-{e}" for e in episode.tolist()],
        "env": [f"env-{e % 8}" for e in episode.tolist()],
        "task_id": [f"task-{e // 4}" for e in episode.tolist()],
        "policy_version": (episode % 10).tolist(),
        "produced_at": (1.7e9 + idx).astype(np.float64).tolist(),
        "ingested_at": [time.time()] * n,
        "source_topic": ["sf.steps"] * n,
        "source_partition": (episode % 3).astype(np.int32).tolist(),
        "source_offset": idx.tolist(),
        "payload": ['{"synthetic": true}'] * n,
        "step_index": (idx % STEPS_PER_EPISODE).astype(np.int32).tolist(),
        "group_id": [f"g-{e // 8}" for e in episode.tolist()],
        "blocked": [False] * n,
        "injected": (idx % 50 == 0).tolist(),
        "text": text,
    }
    table = pa.Table.from_pydict(columns, table_schema("steps"))
    flat = pa.array(vectors.reshape(-1), type=pa.float32())
    return table.append_column(
        pa.field("vector", pa.list_(pa.float32(), DIM)),
        pa.FixedSizeListArray.from_arrays(flat, DIM),
    )


def percentiles(fn, queries: int) -> tuple[float, float]:
    times = []
    for q in range(queries):
        start = time.perf_counter()
        fn(q)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="step rows to generate")
    parser.add_argument("--batch", type=int, default=20_000, help="rows per append")
    parser.add_argument(
        "--kmeans-iterations", type=int, default=10, help="k-means iterations of the IVF training"
    )
    parser.add_argument("--queries", type=int, default=200, help="queries per kind")
    parser.add_argument("--db", type=Path, default=None, help="database folder (default: temp)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    centers = rng.standard_normal((64, DIM)).astype(np.float32)
    db = open_db(args.db or Path(tempfile.mkdtemp(prefix="query-bench-")))
    schema = table_schema("steps", DIM)
    table = db.create_table("steps", schema=schema, mode="overwrite")
    start = time.perf_counter()
    for first in range(0, args.rows, args.batch):
        table.add(synthetic_batch(first, min(args.batch, args.rows - first), rng, centers))
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    for column in ("event_id", "episode_id", "policy_version", "produced_at"):
        table.create_index(column, config=BTree())
    table.create_index("env", config=Bitmap())
    scalar_s = time.perf_counter() - start
    start = time.perf_counter()
    partitions = max(1, int(np.sqrt(args.rows)) // 2)
    table.create_index(
        "vector",
        config=IvfSq(
            distance_type="cosine", num_partitions=partitions, max_iterations=args.kmeans_iterations
        ),
    )
    vector_s = time.perf_counter() - start
    episodes = args.rows // STEPS_PER_EPISODE
    probes = rng.standard_normal((args.queries, DIM)).astype(np.float32)
    probes = centers[rng.integers(0, 64, args.queries)] + 0.35 * probes
    probes /= np.linalg.norm(probes, axis=1, keepdims=True)

    def lookup(q: int) -> None:
        rows = table.search().where(f"episode_id = 'ep-{(q * 7919) % episodes}'").limit(50)
        assert rows.to_arrow().num_rows == STEPS_PER_EPISODE

    def filtered(q: int) -> None:
        where = (
            f"env = 'env-{q % 8}' AND policy_version = {q % 10} AND "
            f"produced_at >= {1.7e9 + (q * 104729) % args.rows}"
        )
        table.search().where(where).limit(20).to_arrow()

    def semantic(q: int) -> None:
        hits = (
            table.search(probes[q], vector_column_name="vector")
            .distance_type("cosine")
            .where(f"env = 'env-{q % 8}'", prefilter=True)
            .limit(10)
            .to_arrow()
        )
        assert hits.num_rows == 10

    print(
        f"rows={args.rows}: load {load_s:.1f}s ({args.rows / load_s:.0f} rows/s), scalar "
        f"indexes {scalar_s:.1f}s, IVF-SQ({partitions} partitions) {vector_s:.1f}s"
    )
    for name, fn in (("lookup episode", lookup), ("filtered", filtered), ("semantic", semantic)):
        p50, p99 = percentiles(fn, args.queries)
        print(f"{name:>15}: p50 {p50:7.2f} ms   p99 {p99:7.2f} ms")


if __name__ == "__main__":
    main()
