"""Table maintenance in a process of its own: ``python -m safactory.sinks.maintain DB``.

Index updates and compaction allocate a lot inside LanceDB and the memory does not come
back: a sink that ran them in-process grew by about 55 MB a pass (measured: 60k indexed rows
took a process from 190 MB to 1.35 GB, flat at 195 MB with the same passes in a child). So
the sink worker runs each pass here and waits for it; the memory goes with the process.
Prints the indexes it created, one per line. An object-store database's storage options come
in ``SF_LANCE_STORAGE`` (JSON), never on the command line.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta

from .lance import LanceSink
from .location import STORAGE_ENV, LanceLocation


def main(argv: list[str] | None = None) -> None:
    """Create missing indexes, compact, and drop untagged versions older than the limit."""
    parser = argparse.ArgumentParser(
        prog="python -m safactory.sinks.maintain", description=main.__doc__
    )
    parser.add_argument("db", help="LanceDB folder or object-store URI")
    parser.add_argument(
        "--keep-seconds",
        type=float,
        default=600.0,
        help="untagged versions younger than this are kept",
    )
    args = parser.parse_args(argv)
    storage = json.loads(os.environ.get(STORAGE_ENV) or "{}")
    sink = LanceSink(LanceLocation(args.db, {k: str(v) for k, v in storage.items()}))
    for made in sink.ensure_indexes():
        print(made)
    sink.maintain(timedelta(seconds=args.keep_seconds))


if __name__ == "__main__":
    main()
