"""A worker command's process ends after Python's exit handlers, without the interpreter's
module teardown and the shared libraries' destructors (``infra/teardown.py``: torch's CUDA
libraries made an idle worker's exit take 15 s once their pages were reclaimed); other
commands end normally, and the exit status is kept either way."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A module-level object is finalised during module teardown, an atexit handler before it.
PROGRAM = """
import atexit, sys
class Teardown:
    def __del__(self):
        sys.stderr.write("torn down\\n")
kept = Teardown()
atexit.register(lambda: sys.stderr.write("exit handlers ran\\n"))
sys.argv = ["safactory", *sys.argv[1:]]
from safactory.cli.main import main
main()
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "status", "said"),
    [
        (("worker", "score", "--help"), 0, "Usage:"),
        (("worker", "score", "--no-such-option"), 2, "No such option"),
        (("simulate", "worker", "--warm", "mars"), 1, "unknown env"),
    ],
    ids=["help", "usage-error", "refused"],
)
def test_a_worker_command_skips_teardown_but_keeps_exit_handlers_output_and_status(
    args: tuple[str, ...], status: int, said: str
) -> None:
    done = run(*args)
    assert done.returncode == status, done.stderr
    assert said in done.stdout + done.stderr  # written before the exit, and flushed
    assert "exit handlers ran" in done.stderr
    assert "torn down" not in done.stderr


def test_other_commands_end_with_the_normal_teardown() -> None:
    done = run("topics", "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout
    assert "exit handlers ran" in done.stderr
    assert "torn down" in done.stderr
