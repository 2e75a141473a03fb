"""Evict the page cache of what a fresh machine reads from disk: a cold start, on demand.

The first run a new user makes reads torch's shared libraries, the MiniLM and SmolLM2
weights and the virtualenv's Python files from disk while five workers start at once on
two cores; later runs find them in memory. ``posix_fadvise(POSIX_FADV_DONTNEED)`` on every
file under the given folders drops their clean pages, so a test or a bench can start from
that first state again without rebooting (no root needed: it is advice about one's own
readable files). Pages a running process has mapped stay until that process unmaps them.

    python -m safactory.bench.cold_cache            # the virtualenv and the models
    python -m safactory.bench.cold_cache PATH ...   # those folders
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path


def default_paths() -> list[Path]:
    """The virtualenv (``sys.prefix``) and the converted models (``SF_MODELS``)."""
    home = Path(os.environ.get("SF_HOME", Path.home() / ".cache" / "safactory"))
    models = Path(os.environ.get("SF_MODELS", home / "models"))
    return [p for p in (Path(sys.prefix), models) if p.exists()]


def evict(paths: Iterable[Path]) -> tuple[int, int]:
    """Drop the cached pages of every regular file under ``paths``; returns (files, bytes)."""
    files = size = 0
    for root in paths:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    continue
                try:
                    length = os.fstat(fd).st_size
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    files += 1
                    size += length
                except OSError:
                    pass
                finally:
                    os.close(fd)
    return files, size


def main(argv: list[str]) -> None:
    """Evict the folders named on the command line (default: :func:`default_paths`)."""
    paths = [Path(a) for a in argv] or default_paths()
    files, size = evict(paths)
    print(
        f"evicted the page cache of {files} files ({size / 2**20:.0f} MiB) under "
        + ", ".join(map(str, paths))
    )


if __name__ == "__main__":
    main(sys.argv[1:])
