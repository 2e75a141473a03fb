"""Sink ingest rate vs a raw LanceDB append of the same Arrow batches, in one run.

Both paths write the same rows in the same batch sizes into fresh tables of one database:

* raw      — ``table.add(arrow_batch)`` of pre-built Arrow batches (the floor of the cost);
* sink     — ``LanceSink.write_batch(deliveries)``: event → row conversion, offset
             watermark, in-batch dedupe, one indexed id lookup per batch, then ``add``;
* sink-noid — the sink without the id lookup (offset watermark and in-batch dedupe only);
* merge    — ``merge_insert("event_id").when_not_matched_insert_all()`` of the raw batches,
             the obvious alternative for idempotency, for reference.

Embedding is off (it is measured separately with --embed-sample). With ``--db
s3://bucket/prefix`` every path runs on object storage and in a local folder, side by side.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa

from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.infra.objectstore import LocalS3
from safactory.schemas import Action, Step, codec
from safactory.sinks.lance import LanceSink
from safactory.sinks.location import LanceLocation, open_db
from safactory.sinks.tables import COLUMNS, step_text, table_schema


def make_deliveries(n: int, partitions: int = 3) -> list[Delivery]:
    """``n`` step events spread over partitions, as the consumer hands them over."""
    out = []
    for i in range(n):
        step = Step(
            episode_id=f"ep-{i // 20}",
            step_index=i % 20,
            env=f"env-{i % 4}",
            task_id=f"task-{i // 200}",
            policy_version=i // 5000,
            observation=f"observation {i}: the page lists {i % 97} items and a note",
            action=Action(text=f"click item {i % 13}"),
            tool_result=f"ok {i}",
        )
        record = codec.encode(step)
        p = i % partitions
        out.append(
            Delivery(step, "sf.steps", p, i // partitions, record.key, record.headers, record.value)
        )
    return out


def timed(fn, batches) -> float:
    start = time.perf_counter()
    for batch in batches:
        fn(batch)
    return time.perf_counter() - start


def _merge_insert(table):
    return lambda batch: table.merge_insert("event_id").when_not_matched_insert_all().execute(batch)


def sink_ratio(rows: int = 10_000, batch: int = 1000, rounds: int = 4) -> float:
    """The sink's rows/s over a raw append of the same rows (``bench/quick.py``): the
    median of ``rounds`` rounds, each in fresh tables, the order alternating (one round of
    each read anywhere from 0.14 to 7.3: a single append that waits on the disk decides it)."""
    root = Path(tempfile.mkdtemp(prefix="sink-quick-"))
    deliveries = make_deliveries(rows)
    chunks = [deliveries[i : i + batch] for i in range(0, rows, batch)]
    schema = table_schema("steps")
    arrow = [pa.Table.from_pydict(COLUMNS["steps"](c), schema) for c in chunks]
    ratios = []
    try:
        for r in range(rounds):
            took = {}
            for name in ("raw", "sink") if r % 2 == 0 else ("sink", "raw"):
                if name == "raw":
                    add = open_db(root / f"raw{r}").create_table("raw", schema=schema).add
                    took[name] = timed(add, arrow)
                else:
                    took[name] = timed(LanceSink(root / f"sink{r}").write_batch, chunks)
            ratios.append(took["raw"] / took["sink"])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return statistics.median(ratios)


def rates_at(
    bases: list[LanceLocation], deliveries: list[Delivery], batch: int, rounds: int
) -> list[dict[str, list[float]]]:
    """Rows/s of each path per round at each of ``bases``, each round in fresh tables under
    ``base/round<r>``; the bases take turns within a round, and the order of the paths
    alternates between rounds (load that drifts during the run hits all alike)."""
    rows = len(deliveries)
    chunks = [deliveries[i : i + batch] for i in range(0, rows, batch)]
    schema = table_schema("steps")
    arrow = [pa.Table.from_pydict(COLUMNS["steps"](c), schema) for c in chunks]

    def under(root: LanceLocation, name: str) -> LanceLocation:
        return LanceLocation(f"{root.uri}/{name}", root.storage_options)

    paths = {
        "raw add": lambda db, root: (db.create_table("raw", schema=schema).add, arrow),
        "sink": lambda db, root: (LanceSink(under(root, "sink")).write_batch, chunks),
        "sink no id lookup": lambda db, root: (
            LanceSink(under(root, "noid"), check_ids=False).write_batch,
            chunks,
        ),
        "merge_insert": lambda db, root: (
            _merge_insert(db.create_table("merge", schema=schema)),
            arrow,
        ),
    }
    rates: list[dict[str, list[float]]] = [{name: [] for name in paths} for _ in bases]
    for r in range(rounds):
        order = list(paths) if r % 2 == 0 else list(reversed(paths))
        for base, rate in zip(bases, rates, strict=True):
            root = under(base, f"round{r}")
            db = open_db(root)
            for name in order:
                fn, batches = paths[name](db, root)
                rate[name].append(rows / timed(fn, batches))
            counts = {t: db.open_table(t).count_rows() for t in ("raw", "merge")}
            assert counts == {"raw": rows, "merge": rows}, counts
    return rates


def _object_store(where: LanceLocation, stack: ExitStack) -> LanceLocation:
    """``where`` as given when an endpoint is configured; else on a SeaweedFS server started
    here on loopback, with the URI's bucket created."""
    options = {k.lower() for k in where.storage_options}
    if {"aws_endpoint", "endpoint"} & options or {"AWS_ENDPOINT", "AWS_ENDPOINT_URL"} & set(
        os.environ
    ):
        return where
    s3 = stack.enter_context(LocalS3())
    s3.create_bucket(urlsplit(where.uri).netloc)
    print(f"no endpoint configured: SeaweedFS started at {s3.endpoint}")
    return LanceLocation(where.uri, s3.storage_options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000, help="rows per path")
    parser.add_argument("--batch", type=int, default=1000, help="rows per batch (one commit)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; order alternates")
    parser.add_argument(
        "--db",
        default=None,
        help="database folder (default: temp), or s3://bucket/prefix: then the same rounds run "
        "in a local temp folder too and the S3 / local ratio is printed; storage options from "
        "SF_LANCE_STORAGE / AWS_*, and with no endpoint there a SeaweedFS server is started",
    )
    parser.add_argument(
        "--embed-sample",
        type=int,
        default=0,
        help="also time MiniLM embedding of this many step texts",
    )
    args = parser.parse_args()
    local = LanceLocation(tempfile.mkdtemp(prefix="sink-bench-"))
    where = LanceLocation.configured(Settings(), args.db) if args.db else local
    deliveries = make_deliveries(args.rows)
    print(f"rows={args.rows} batch={args.batch} rounds={args.rounds} (median) db={where}")
    with ExitStack() as stack:
        if where.remote:
            where = _object_store(where, stack)
            local_rates, s3_rates = rates_at([local, where], deliveries, args.batch, args.rounds)
            print(f"{'':>18}  {'local rows/s':>12}  {'S3 rows/s':>10}  S3 / local")
            for name, values in local_rates.items():
                here, there = statistics.median(values), statistics.median(s3_rates[name])
                print(f"{name:>18}: {here:12.0f}  {there:10.0f}  {there / here:9.1%}")
        else:
            (rates,) = rates_at([where], deliveries, args.batch, args.rounds)
            raw_rate = statistics.median(rates["raw add"])
            for name, values in rates.items():
                rate = statistics.median(values)
                print(f"{name:>18}: {rate:10.0f} rows/s  ({rate / raw_rate:6.1%} of raw)")
    if args.embed_sample:
        from safactory.infra.embedding import MiniLM as MiniLMEmbedder

        texts = [step_text(d.event) for d in deliveries[: args.embed_sample]]  # type: ignore[arg-type]
        embedder = MiniLMEmbedder()
        start = time.perf_counter()
        embedder.embed(texts)
        print(
            f"{'MiniLM embedding':>18}: {len(texts) / (time.perf_counter() - start):10.0f} "
            "texts/s (CPU)"
        )


if __name__ == "__main__":
    main()
