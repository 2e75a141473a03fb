"""A sandbox session outlives restores: its root filesystem is replaced in place, and a
session holding anything outside its filesystem is replaced by a new one instead."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from safactory.agents.sandbox.bubblewrap import Sandbox, SandboxError, check_host
from safactory.agents.sandbox.limits import Limits
from safactory.agents.sandbox.rootswap import RootSwapper, SwapError

try:
    check_host()
except SandboxError as exc:  # pragma: no cover - CI installs bubblewrap
    pytest.skip(f"bubblewrap sandbox unavailable: {exc}", allow_module_level=True)
if os.geteuid() != 0:  # pragma: no cover - the swap needs root; rootless restarts sessions
    pytest.skip("root swaps need root", allow_module_level=True)

LIMITS = Limits(timeout_s=5.0, memory_mb=256, max_processes=32, disk_mb=16)


@pytest.fixture
def box() -> Iterator[tuple[Sandbox, tuple[str, ...]]]:
    with Sandbox({"/home/agent/plan.txt": "v1\n"}, LIMITS) as sandbox:
        clean = sandbox.checkpoint()
        sandbox.start_session()
        yield sandbox, clean


def _out(sandbox: Sandbox, command: str) -> str:
    return sandbox.run(command).stdout


def test_a_restore_keeps_the_session_and_gives_the_anchor_exactly(
    box: tuple[Sandbox, tuple[str, ...]],
) -> None:
    sandbox, clean = box
    expected = _out(sandbox, "find / -xdev -path /proc -prune -o -print | sort | md5sum")
    server = _out(sandbox, "cat /proc/1/status | grep -c .")  # the session's pid 1 answers
    _out(sandbox, "echo v2 > plan.txt; mkdir -p new/deep; rm -f /etc/hostname; touch /tmp/x")
    sandbox.restore(clean)
    assert _out(sandbox, "cat plan.txt; ls /tmp; cat /etc/hostname") == "v1\nsandbox\n"
    assert _out(sandbox, "find / -xdev -path /proc -prune -o -print | sort | md5sum") == expected
    assert _out(sandbox, "cat /proc/1/status | grep -c .") == server
    sandbox.run("echo hello | nc 203.0.113.7 25")  # the outbound recorder is still bound
    assert sandbox.received()[-1].command.startswith("nc 203.0.113.7")
    assert (sandbox.sessions_started, sandbox.roots_swapped) == (1, 1)


def test_a_restore_adds_the_task_files_and_an_unchanged_tree_keeps_its_root(
    box: tuple[Sandbox, tuple[str, ...]],
) -> None:
    sandbox, clean = box
    sandbox.restore(clean, files={"/home/agent/todo.txt": "buy milk\n"})
    assert _out(sandbox, "cat todo.txt plan.txt") == "buy milk\nv1\n"
    sandbox.restore(clean)
    assert _out(sandbox, "ls") == "plan.txt\n"
    _out(sandbox, "cat plan.txt >/dev/null")  # reading changes nothing
    sandbox.restore(clean)
    assert _out(sandbox, "ls") == "plan.txt\n"
    assert (sandbox.sessions_started, sandbox.roots_swapped, sandbox.roots_kept) == (1, 2, 1)
    with pytest.raises(SandboxError, match="leaves the sandbox root"):
        sandbox.restore(clean, files={"/../../../../tmp/out": "x"})


@pytest.mark.parametrize(
    "leftover",
    [
        "touch /dev/shm/note",
        "chmod 600 /dev/null",
        "ipcmk -M 4096",
        "python3 -c \"import ctypes, os; ctypes.CDLL(None).mq_open(b'/q', os.O_CREAT | os.O_RDWR,"
        ' 0o600, None)"',
    ],
)
def test_state_outside_the_filesystem_gets_a_new_session(
    box: tuple[Sandbox, tuple[str, ...]], leftover: str
) -> None:
    sandbox, clean = box
    assert sandbox.run(leftover).exit_code == 0
    sandbox.restore(clean)
    fresh = _out(sandbox, "ls /dev/shm; ipcs -m -q -s | grep -c '^0x'; stat -c %a /dev/null")
    assert fresh == "0\n666\n"
    assert sandbox.sessions_started == 2 and sandbox.roots_swapped == 0


def test_a_failed_swap_gets_a_new_session(
    box: tuple[Sandbox, tuple[str, ...]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox, clean = box
    _out(sandbox, "echo v2 > plan.txt")

    def refuse(*_: object) -> None:
        raise SwapError(16, "move_mount: Device or resource busy")

    monkeypatch.setattr(RootSwapper, "swap", refuse)
    sandbox.restore(clean)
    assert _out(sandbox, "cat plan.txt; ls /opt/sf/bin | head -1") == "v1\ncurl\n"
    assert sandbox.sessions_started == 2 and sandbox.roots_swapped == 0
