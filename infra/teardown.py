"""How a long-running worker process ends once it has stopped cleanly.

A worker that has committed, left its group and flushed its producer has nothing left to
tear down but the interpreter and the shared libraries it loaded. The second is not free:
the exit-time destructors of torch's CUDA libraries (``libcublasLt``, loaded with any model)
page their code back in from disk when the page cache has dropped it, and an idle score
worker then took 15.5 s from SIGTERM to exit (14.3 s in CI), against the 10 s that workers
promise. Its runtime had stopped after 0.06 s of that (gdb: ``__run_exit_handlers`` in
``libcublasLt.so.13``).

So the ``safactory`` entry point ends a worker command with Python's exit handlers (logging
flushed, temporary directories removed, ...) and then ``os._exit``: no module teardown, no
C++ destructors. Commands invoked in-process (``CliRunner``) are not affected."""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn

_requested = False


def skip_teardown() -> None:
    """Ask that this process, once the command returns, end without library teardown."""
    global _requested
    _requested = True


def requested() -> bool:
    """Whether a command asked for :func:`skip_teardown`."""
    return _requested


def end_now(code: int) -> NoReturn:
    """Run Python's exit handlers, flush stdout and stderr, and end the process with ``code``."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or gone: nothing left to lose
            pass
    os._exit(code)
