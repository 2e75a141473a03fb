"""Resource limits of a sandbox, and the kernel mechanisms that enforce them here.

Time is enforced by killing the command's process group; memory and file size by rlimits;
processes by a ``pids`` cgroup (v1 or v2) when this host lets us create one, else by
``RLIMIT_NPROC``; disk by a size-limited tmpfs holding the sandbox's layers when we may
mount one, else by ``RLIMIT_FSIZE`` alone. ``Sandbox.enforcement()`` says which are in
effect. What a sandbox can make the host process hold (its command output, its outbound
records) is capped here too, since the host's memory is outside the sandbox's cgroup.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use."""

    timeout_s: float = 10.0
    """Wall-clock seconds per command."""
    memory_mb: int = 512
    """Address space per process (RLIMIT_AS) and, with a memory cgroup, the whole sandbox."""
    max_processes: int = 64
    """Processes and threads alive at once in the sandbox."""
    disk_mb: int = 64
    """Bytes the sandbox's writable layers may hold in all."""
    max_output_bytes: int = 16_384
    """Bytes of stdout/stderr returned to the agent per command (the rest is read and
    dropped, never held in the host)."""
    outbound_record_bytes: int = 132 * 1024
    """Bytes the outbound endpoint keeps per connection: the shim's headers, a full 64 KiB
    file and 64 KiB of stdin (the rest is counted, not kept)."""
    outbound_total_bytes: int = 4 * 1024 * 1024
    """Bytes the outbound endpoint keeps for the whole sandbox."""
    outbound_records: int = 256
    """Connections the outbound endpoint keeps a record of (later ones are only counted)."""

    def prlimit_argv(self, nproc: int | None = None) -> list[str]:
        """The launch chain's first command: ``prlimit`` sets the rlimits on itself and
        execs the rest, so the sandbox inherits them without a ``preexec_fn`` (unsafe when
        the host runs sandboxes from threads); ``nproc`` caps the processes of this user
        (the fallback without a pids cgroup)."""
        memory = self.memory_mb * 1024 * 1024
        file_size = self.disk_mb * 1024 * 1024
        argv = ["prlimit", f"--as={memory}", f"--fsize={file_size}", "--core=0"]
        if nproc is not None:
            argv.append(f"--nproc={nproc}")
        return [*argv, "--"]


def processes_of_this_user() -> int:
    """How many processes (threads included) the current real uid runs now."""
    uid, count = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid == uid:
                count += len(os.listdir(f"/proc/{entry.name}/task"))
        except OSError:
            continue
    return count


class ProcessGroup:
    """A ``pids`` (and, where available, ``memory``) cgroup for one sandbox.

    Two leaves under one ``safactory-<id>`` directory per hierarchy: ``session`` holds the
    long-lived launch chain (unlimited, so a command's limits and kills never reach it) and
    ``run`` holds commands, with the limits. The session's cgroup namespace is rooted at its
    own leaf, so inside the sandbox a command's ``/proc/self/cgroup`` reads ``/../run`` and
    never the host's cgroup path. :meth:`kill_all` reaps whatever a command left behind.
    """

    def __init__(self, limits: Limits) -> None:
        self.name = f"safactory-{uuid.uuid4().hex[:12]}"
        self.dirs: list[Path] = []
        """Every directory made, leaves first (so removal can go in order)."""
        self.procs_files: list[Path] = []
        """``cgroup.procs`` of the ``run`` leaves: where commands go."""
        self._session_procs: list[Path] = []
        v2 = CGROUP_ROOT / "cgroup.controllers"
        if v2.exists():
            self._make(
                CGROUP_ROOT / self.name,
                {
                    "pids.max": str(limits.max_processes),
                    "memory.max": str(limits.memory_mb * 1024 * 1024),
                },
                delegate="+pids +memory",
            )
        else:
            self._make(CGROUP_ROOT / "pids" / self.name, {"pids.max": str(limits.max_processes)})
            self._make(
                CGROUP_ROOT / "memory" / self.name,
                {"memory.limit_in_bytes": str(limits.memory_mb * 1024 * 1024)},
            )
        self.enforces_pids = any(
            (d / "pids.max").exists() and (d / "pids.max").read_text().strip() != "max"
            for d in self.dirs
        )

    def _make(self, path: Path, settings: dict[str, str], delegate: str | None = None) -> None:
        try:
            path.mkdir()
        except OSError:
            return
        if delegate is not None:
            with contextlib.suppress(OSError):
                (path / "cgroup.subtree_control").write_text(delegate)
        leaves = []
        for leaf in ("run", "session"):
            try:
                (path / leaf).mkdir()
            except OSError:
                for made in [*leaves, path]:
                    made.rmdir()
                return
            leaves.append(path / leaf)
        self.dirs += [*leaves, path]
        self.procs_files.append(path / "run" / "cgroup.procs")
        self._session_procs.append(path / "session" / "cgroup.procs")
        for name, value in settings.items():
            try:
                (path / "run" / name).write_text(value)
            except OSError:
                continue

    def session_script(self) -> str:
        """Shell code that moves the current shell (a session's launch chain) into the
        unlimited ``session`` leaf, before it makes its cgroup namespace."""
        return "".join(f"echo $$ > {shlex.quote(str(p))} && " for p in self._session_procs)

    def join_script(self) -> str:
        """Shell code that moves the current shell (and so its descendants) into the
        ``run`` leaf."""
        return "".join(f"echo $$ > {shlex.quote(str(p))} && " for p in self.procs_files)

    def adopt(self, pid: int) -> None:
        """Move process ``pid`` (not yet running anything: its children follow it) into
        the group."""
        for procs in self.procs_files:
            try:
                procs.write_text(str(pid))
            except OSError:
                continue

    def pids(self, *, session: bool = False) -> list[int]:
        """Processes currently running commands (with ``session``: the launch chain too)."""
        found: set[int] = set()
        for procs in [*self.procs_files, *(self._session_procs if session else [])]:
            try:
                found.update(int(x) for x in procs.read_text().split())
            except (OSError, ValueError):
                continue
        return sorted(found)

    def kill_all(self, timeout_s: float = 5.0, *, session: bool = False) -> int:
        """SIGKILL every process in the group and wait until the group is empty (a killed
        process stays listed until it has finished exiting), or ``timeout_s`` passed;
        returns how many signals were sent."""
        killed = 0
        deadline = time.monotonic() + timeout_s
        while (pids := self.pids(session=session)) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, 9)
                    killed += 1
                except ProcessLookupError:
                    continue
            time.sleep(0.005)
        return killed

    def remove(self) -> None:
        """Kill what is left (the session too) and delete the cgroup directories."""
        self.kill_all(session=True)
        for path in self.dirs:
            try:
                path.rmdir()
            except OSError:
                continue
        self.dirs.clear()
        self.procs_files.clear()
        self._session_procs.clear()
