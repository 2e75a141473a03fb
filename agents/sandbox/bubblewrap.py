"""A bubblewrap sandbox over a stack of overlayfs layers, with exact checkpoint and restore.

Layout of one sandbox's state directory (on a size-limited tmpfs when we may mount one)::

    base/          the seeded root: /home/agent (documents, ~/.ssh, configs), /etc, /tmp
    layers/<n>/    frozen upper layers, immutable once made (one per checkpoint)
    upper/ work/   the live writable layer
    merged/        mount point (mounted only inside each command's private mount namespace)
    outbound.sock  the fake outbound endpoint (see :mod:`.outbound`)

Each command runs as ``unshare --mount`` → ``mount -t overlay`` → ``bwrap``: the overlay
exists only in that command's mount namespace, so nothing is left mounted on the host if
the process dies. Inside: no network, own PID/IPC/UTS/user/cgroup namespaces, an
unprivileged user (``agent``, uid 1000) with every capability dropped, host ``/usr`` read
only, a fresh ``/proc`` and minimal ``/dev``.

A checkpoint renames ``upper`` to a new frozen layer and starts an empty ``upper`` on top;
an anchor is the tuple of frozen layers. Restoring discards ``upper`` and mounts the
anchor's layers again: the merged tree is exactly what it was (deletions are whiteouts
and permission changes are copy-ups, both inside the frozen layer). A command's processes
never outlive it (its PID namespace and cgroup are emptied when it returns), so the layers
plus the environment's own Python state are all the state an anchor has to hold.

The sandbox cannot grow the host process: a command's stdout and stderr are read in chunks
and only their first ``Limits.max_output_bytes`` kept, and the outbound endpoint keeps
capped records (see :mod:`.outbound`). Nor does it see host paths: bwrap's options, which
name the state directory, reach it through a pipe (``--args``) rather than its command line,
and it starts with only ``LAUNCH_ENV``, so the sandbox's ``/proc/1/cmdline`` and
``/proc/1/environ`` hold neither.

Without root, the same runs rootless: ``unshare --user --map-root-user`` and an overlay
mounted with ``userxattr``; processes are then capped by ``RLIMIT_NPROC`` and there is no
tmpfs disk quota (``Sandbox.enforcement()`` reports what is in effect).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .limits import Limits, ProcessGroup, processes_of_this_user
from .outbound import OutboundEndpoint, OutboundRecord, install_shims

AGENT_UID = 1000
AGENT_HOME = "/home/agent"
SANDBOX_PATH = "/opt/sf/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
"""The whole launch chain (unshare, mount, bwrap) starts with this environment and no other:
bwrap's init inside the sandbox keeps the environment it was started with, and an agent can
read it from /proc/1/environ, so host variables (API keys, tokens) must never reach it."""
_LAUNCH_ASSIGNMENTS = " ".join(shlex.quote(f"{k}={v}") for k, v in LAUNCH_ENV.items())
_LIBC = ctypes.CDLL(None, use_errno=True)
_MNT_DETACH = 2
_DRAIN_S = 5.0
"""After a timeout kill, how long to wait for output before giving up on the pipes."""
_HASH_SCRIPT = r"""cd "$1" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./usr \
-o -path ./opt/sf -o -path ./run/sf \) -prune -o \( -type d -printf 'd %m %U %G %T@ %p\n' \) \
-o \( -type l -printf 'l %U %G %p -> %l\n' \) \
-o \( ! -type d ! -type l -printf '%y %m %U %G %s %T@ %p\n' \) \
| LC_ALL=C sort && find . -xdev \( -path ./proc -o -path ./dev -o -path ./usr -o -path ./opt/sf \
-o -path ./run/sf \) -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum --"""


class SandboxError(RuntimeError):
    """The sandbox cannot be built or run here; the message says why and how to fix it."""


@dataclass(frozen=True)
class CommandResult:
    """What one command did."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    truncated: bool = False

    def text(self) -> str:
        """stdout and stderr as the agent sees them, with the exit status."""
        parts = [self.stdout]
        if self.stderr:
            parts.append(self.stderr)
        if self.timed_out:
            parts.append("[killed: time limit]")
        parts.append(f"[exit {self.exit_code}]")
        return "\n".join(p.rstrip("\n") for p in parts if p)


def check_host() -> None:
    """Raise :class:`SandboxError` unless bubblewrap and overlay mounts work here."""
    for tool in ("bwrap", "unshare", "prlimit"):
        if shutil.which(tool) is None:
            raise SandboxError(
                f"{tool!r} not found; install it (Debian: apt-get install -y bubblewrap util-linux)"
            )
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise SandboxError("the kernel has no overlayfs (modprobe overlay)")


class Sandbox:
    """One bubblewrap sandbox with layered, checkpointable filesystem state.

    ``files`` seeds the base layer: ``{"/home/agent/notes.txt": "…"}`` or
    ``{path: (content, mode)}``. Use as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        files: Mapping[str, str | bytes | tuple[str | bytes, int]] | None = None,
        limits: Limits | None = None,
        *,
        state_root: Path | None = None,
    ) -> None:
        check_host()
        self.limits = limits or Limits()
        self.root = Path(tempfile.mkdtemp(prefix="sf-sandbox-", dir=state_root))
        self.disk_quota = False
        try:
            self.disk_quota = self._mount_quota()
            self._set_up(files or {})
        except BaseException:  # nothing may stay mounted or in a cgroup
            self._discard()
            raise
        self.closed = False

    # ------------------------------------------------------------------ setup

    def _set_up(self, files: Mapping[str, str | bytes | tuple[str | bytes, int]]) -> None:
        """Layer directories, cgroup, the seeded base layer, shims and the outbound endpoint."""
        self._rootless = os.geteuid() != 0
        self.base = self.root / "base"
        self.layers_dir = self.root / "layers"
        self.upper = self.root / "upper"
        self.work = self.root / "work"
        self.merged = self.root / "merged"
        for d in (self.base, self.layers_dir, self.upper, self.work, self.merged):
            d.mkdir()
        self._stack: tuple[str, ...] = ()
        self._next_layer = 0
        self._lock = threading.Lock()
        self.group = ProcessGroup(self.limits)
        self._seed(files)
        shutil.copystat(self.base, self.upper)
        self.shims = self.root / "shims"
        install_shims(self.shims)
        self.outbound = OutboundEndpoint(
            self.root / "outbound.sock",
            record_bytes=self.limits.outbound_record_bytes,
            total_bytes=self.limits.outbound_total_bytes,
            max_records=self.limits.outbound_records,
        )

    def _mount_quota(self) -> bool:
        if os.geteuid() != 0:
            return False
        size = f"size={self.limits.disk_mb + 8}m"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"{size},mode=700", "sf-sandbox", str(self.root)],
            capture_output=True,
        )
        return done.returncode == 0

    def _seed(self, files: Mapping[str, str | bytes | tuple[str | bytes, int]]) -> None:
        for d in (
            "home/agent",
            "etc",
            "tmp",
            "proc",
            "dev",
            "usr",
            "opt/sf/bin",
            "run/sf",
            "var/tmp",
            "var/spool",
        ):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        for link in ("bin", "lib", "lib64", "sbin"):
            if Path(f"/{link}").exists():
                (self.base / link).symlink_to(f"usr/{link}")
        (self.base / "tmp").chmod(0o1777)
        (self.base / "etc/passwd").write_text(
            f"root:x:0:0:root:/root:/bin/sh\nagent:x:{AGENT_UID}:{AGENT_UID}::{AGENT_HOME}:/bin/sh\n"
        )
        (self.base / "etc/group").write_text(f"root:x:0:\nagent:x:{AGENT_UID}:\n")
        (self.base / "etc/hostname").write_text("sandbox\n")
        for path, spec in files.items():
            content, mode = spec if isinstance(spec, tuple) else (spec, 0o644)
            target = self.base / path.lstrip("/")
            if not target.resolve().is_relative_to(self.base.resolve()):
                raise SandboxError(f"seed path {path!r} leaves the sandbox root")
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                content = content.encode()
            target.write_bytes(content)
            target.chmod(mode)

    # ------------------------------------------------------------------ running

    def _lowerdir(self) -> str:
        return ":".join([*(f"layers/{n}" for n in reversed(self._stack)), "base"])

    def _namespace_prefix(self) -> list[str]:
        # A PID namespace of our own: bwrap's inner init outlives its monitor, and orphans
        # must be reaped by an init that exits with the command, not by the host's.
        flags = [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount",
            "--propagation",
            "private",
        ]
        if self._rootless:
            flags[1:1] = ["--user", "--map-root-user"]
        return flags

    def _mount_script(self, then: str) -> str:
        options = f"lowerdir={self._lowerdir()},upperdir=upper,workdir=work"
        if self._rootless:
            options += ",userxattr"
        return (
            f"{self.group.join_script()}cd {shlex.quote(str(self.root))} && "
            f"mount -t overlay overlay -o {shlex.quote(options)} merged && {then}"
        )

    def _bwrap_options(self, cwd: str) -> list[str]:
        """bwrap's options; they name host paths, so they reach bwrap through a pipe
        (``--args``), not its command line, which the sandbox reads as /proc/1/cmdline."""
        return [
            "--bind",
            str(self.merged),
            "/",
            "--ro-bind",
            "/usr",
            "/usr",
            "--ro-bind",
            str(self.shims),
            "/opt/sf/bin",
            "--bind",
            str(self.outbound.path),
            "/run/sf/outbound.sock",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--unshare-all",
            "--unshare-user",
            "--uid",
            str(AGENT_UID),
            "--gid",
            str(AGENT_UID),
            "--disable-userns",
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
            "--clearenv",
            "--setenv",
            "PATH",
            SANDBOX_PATH,
            "--setenv",
            "HOME",
            AGENT_HOME,
            "--setenv",
            "USER",
            "agent",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--chdir",
            cwd,
        ]

    def run(
        self,
        command: str,
        *,
        cwd: str = AGENT_HOME,
        timeout_s: float | None = None,
    ) -> CommandResult:
        """Run ``command`` with ``/bin/sh -c`` inside the sandbox and wait for it."""
        if self.closed:
            raise SandboxError("sandbox is closed")
        options = b"".join(f"{o}\0".encode() for o in self._bwrap_options(cwd))
        with self._lock:
            # env -i: bwrap's init (the sandbox's /proc/1) keeps bwrap's environment, which
            # would otherwise carry PWD/OLDPWD host paths from the `cd` above.
            script = self._mount_script(f'exec env -i {_LAUNCH_ASSIGNMENTS} "$@"')
            read_end, write_end = os.pipe()
            try:
                os.write(write_end, options)  # a few host paths: far below a pipe's buffer
                os.close(write_end)
                bwrap = ["bwrap", "--args", str(read_end), "--", "/bin/sh", "-c", command]
                full = [*self._namespace_prefix(), "/bin/sh", "-c", script, "sh", *bwrap]
                return self._execute(full, timeout_s or self.limits.timeout_s, read_end)
            finally:
                os.close(read_end)

    def _execute(self, argv: list[str], timeout_s: float, args_fd: int) -> CommandResult:
        nproc = None
        if not self.group.enforces_pids and os.geteuid() != 0:
            nproc = processes_of_this_user() + self.limits.max_processes
        try:
            with subprocess.Popen(
                [*self.limits.prlimit_argv(nproc), *argv],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=LAUNCH_ENV,
                pass_fds=(args_fd,),
            ) as proc:
                try:
                    out, err, timed_out = self._collect(proc, timeout_s)
                finally:
                    self._kill(proc)
                    self.group.kill_all()
        finally:
            self.outbound.settle()
        code = proc.returncode if not timed_out else 124
        return CommandResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            truncated=out.truncated or err.truncated,
        )

    def _collect(
        self, proc: subprocess.Popen[bytes], timeout_s: float
    ) -> tuple[_Capped, _Capped, bool]:
        """Read the command's stdout and stderr until both close, keeping only their first
        bytes (the host never holds more than the output cap, whatever the sandbox prints);
        kill the command at the deadline."""
        assert proc.stdout is not None and proc.stderr is not None
        cap = self.limits.max_output_bytes
        streams = {proc.stdout.fileno(): _Capped(cap), proc.stderr.fileno(): _Capped(cap)}
        deadline = time.monotonic() + timeout_s
        timed_out = False
        with selectors.DefaultSelector() as selector:
            for fd in streams:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0 and not timed_out:
                    timed_out = True
                    self._kill(proc)
                    self.group.kill_all()
                ready = selector.select(timeout=_DRAIN_S if timed_out else left)
                if not ready and timed_out:
                    break  # killed, yet something still holds the pipes: stop reading
                for key, _ in ready:
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        streams[key.fd].add(chunk)
                    else:
                        selector.unregister(key.fd)
        return streams[proc.stdout.fileno()], streams[proc.stderr.fileno()], timed_out

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return

    # ------------------------------------------------------------------ state

    def checkpoint(self) -> tuple[str, ...]:
        """Freeze the live layer; returns the anchor (the stack of frozen layers)."""
        with self._lock:
            name = str(self._next_layer)
            self._next_layer += 1
            self.upper.rename(self.layers_dir / name)
            self._stack = (*self._stack, name)
            self._fresh_upper()
            return self._stack

    def restore(self, anchor: tuple[str, ...]) -> None:
        """Return the filesystem exactly to ``anchor`` (from :meth:`checkpoint`)."""
        with self._lock:
            for name in anchor:
                if not (self.layers_dir / name).is_dir():
                    raise SandboxError(f"anchor layer {name!r} does not exist in {self.root}")
            _remove_tree(self.upper)
            self._stack = tuple(anchor)
            self._fresh_upper()

    def _fresh_upper(self) -> None:
        """An empty live layer whose root carries the top frozen layer's metadata (the
        merged root's mode and mtime come from the upper layer)."""
        self.upper.mkdir()
        top = self.layers_dir / self._stack[-1] if self._stack else self.base
        shutil.copystat(top, self.upper)
        _remove_tree(self.work)
        self.work.mkdir()

    def adopt_layers(self, other: Sandbox, anchor: tuple[str, ...]) -> None:
        """Copy ``other``'s frozen layers of ``anchor`` here and restore to it (branching)."""
        with self._lock:
            for name in anchor:
                dest = self.layers_dir / name
                if not dest.exists():
                    subprocess.run(
                        ["cp", "-a", str(other.layers_dir / name), str(dest)], check=True
                    )
            shutil.rmtree(self.base)
            subprocess.run(["cp", "-a", str(other.base), str(self.base)], check=True)
            self._next_layer = max(self._next_layer, *(int(n) + 1 for n in anchor), 0)
        self.restore(anchor)

    def tree_hash(self) -> str:
        """SHA-256 over the merged tree: every path, type, mode, owner, size, mtime, link
        target and file content (``/usr``, ``/proc`` and ``/dev`` excluded)."""
        return hashlib.sha256(self.listing().encode()).hexdigest()

    def listing(self) -> str:
        """The text :meth:`tree_hash` is computed over (read it to debug a mismatch)."""
        with self._lock:
            script = self._mount_script('exec "$@"')
            argv = [
                *self._namespace_prefix(),
                "/bin/sh",
                "-c",
                script,
                "sh",
                "/bin/sh",
                "-c",
                _HASH_SCRIPT,
                "sh",
                "merged",
            ]
            done = subprocess.run(argv, capture_output=True, timeout=60, env=LAUNCH_ENV)
        if done.returncode != 0:
            raise SandboxError(f"tree hash failed: {done.stderr.decode(errors='replace')[:500]}")
        return done.stdout.decode(errors="replace")

    def enforcement(self) -> dict[str, str]:
        """Which mechanism enforces each limit on this host (see :mod:`.limits`)."""
        memory_cgroup = any(
            "memory" in str(d) or (d / "memory.max").exists() for d in self.group.dirs
        )
        return {
            "mode": "rootless (user namespace)" if self._rootless else "root",
            "time": "process-group kill",
            "processes": "pids cgroup"
            if self.group.enforces_pids
            else ("none" if not self._rootless else "RLIMIT_NPROC"),
            "memory": "memory cgroup + RLIMIT_AS" if memory_cgroup else "RLIMIT_AS",
            "disk": "tmpfs quota" if self.disk_quota else "RLIMIT_FSIZE per file",
        }

    def received(self) -> list[OutboundRecord]:
        """Everything sent to the fake outbound endpoint so far."""
        return self.outbound.records()

    def healthy(self) -> bool:
        """The sandbox still runs commands."""
        if self.closed:
            return False
        try:
            return self.run("echo ok", timeout_s=5).stdout.strip() == "ok"
        except (OSError, SandboxError):
            return False

    def close(self) -> None:
        """Kill leftover processes, stop the endpoint, unmount and delete the state."""
        if self.closed:
            return
        self.closed = True
        self.outbound.close()
        self._discard()

    def _discard(self) -> None:
        """Kill what is left, remove the cgroup, unmount and delete the state directory."""
        if hasattr(self, "group"):
            self.group.remove()
        if self.disk_quota:
            _unmount_lazily(self.root)
        _remove_tree(self.root)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # close() starts no subprocess (a fork from a finalizer can deadlock the host)
        if not getattr(self, "closed", True):
            warnings.warn(
                f"sandbox {self.root} was not closed: use 'with Sandbox(...)' or close()",
                ResourceWarning,
                stacklevel=2,
            )
            self.close()


class _Capped:
    """A stream's first bytes and its total size."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept = bytearray()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        """Count ``chunk``; keep what still fits under the cap."""
        self.size += len(chunk)
        if len(self.kept) < self.cap:
            self.kept += chunk[: self.cap - len(self.kept)]

    @property
    def truncated(self) -> bool:
        """More came than was kept."""
        return self.size > len(self.kept)

    def text(self) -> str:
        """The kept bytes as text."""
        return self.kept.decode(errors="replace")


def _unmount_lazily(path: Path) -> None:
    """``umount -l path`` as the system call itself (no subprocess); errors are ignored, as
    the tree is deleted next either way."""
    _LIBC.umount2(os.fsencode(path), _MNT_DETACH)


def _remove_tree(path: Path) -> None:
    """Delete a layer or work directory, including the mode-000 directories overlayfs leaves
    in its work dir when mounted in a user namespace."""
    if not path.exists():
        return
    for parent, dirs, _ in os.walk(path):
        for name in dirs:
            child = os.path.join(parent, name)
            if not os.path.islink(child):
                with contextlib.suppress(OSError):
                    os.chmod(child, 0o700)
    shutil.rmtree(path)
