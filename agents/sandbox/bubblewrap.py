"""A bubblewrap sandbox over a stack of overlayfs layers, with exact checkpoint and restore.

Layout of one sandbox's state directory (on a size-limited tmpfs when we may mount one)::

    base/          the seeded root: /home/agent (documents, ~/.ssh, configs), /etc, /tmp
    layers/<n>/    frozen upper layers, immutable once made (one per checkpoint)
    upper.<n>/ work.<n>/   the live writable layer (a new pair at each restore)
    devices/       the session's own device nodes
    merged/        mount point (mounted only inside each command's private mount namespace)
    outbound.sock  the fake outbound endpoint (see :mod:`.outbound`)

A *session* is one ``unshare --mount`` → ``mount -t overlay`` → ``bwrap`` start: the overlay
exists only in the session's mount namespace, so nothing is left mounted on the host if the
process dies. Inside: no network, own PID/IPC/UTS/user/cgroup namespaces, an unprivileged
user (``agent``, uid 1000) with every capability dropped, host ``/usr`` read only, a fresh
``/proc`` and minimal ``/dev``. In the session runs a small command server (``_SERVER``,
the host's ``python3`` from the read-only ``/usr``, not dumpable, so the agent can neither
trace it nor open its pipes); each command is a fresh ``/bin/sh -c`` the server forks,
moved by the host into the sandbox's cgroup before it may run, its stdout and stderr relayed
back capped. When a command returns, every process it left is killed (the server sweeps the
PID namespace, the host empties the cgroup), so commands share only the filesystem. A
session lasts until a checkpoint, :meth:`Sandbox.end_session` or close: a restore replaces
its root filesystem in place before the next command (:mod:`.rootswap`, unless the session
holds state outside its filesystem), so many episodes cost one bubblewrap start
(``bench/sim_throughput.py``). The device nodes are the session's own, not the host's
(the agent's uid is the host's root: through the host's nodes it could chmod them).

A checkpoint ends the session, renames the live layer to a new frozen layer and starts an
empty one on top; an anchor is the tuple of frozen layers. Restoring discards the live layer
and mounts the anchor's layers with a new one: the merged tree is exactly what it was
(deletions are whiteouts and permission changes are copy-ups, both inside the frozen layer).
A command's processes never outlive it, so the layers plus the environment's own Python
state are all the state an anchor has to hold.

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
import logging
import os
import select
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .limits import Limits, ProcessGroup, processes_of_this_user
from .outbound import OutboundEndpoint, OutboundRecord, install_shims
from .rootswap import ANCHOR, ANCHOR_BYTES, RootSwapper, SwapError, dev_listing, top_level

AGENT_UID = 1000
AGENT_HOME = "/home/agent"
SANDBOX_PATH = "/opt/sf/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
LAUNCH_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
"""The whole launch chain (unshare, mount, bwrap) starts with this environment and no other:
bwrap's init inside the sandbox keeps the environment it was started with, and an agent can
read it from /proc/1/environ, so host variables (API keys, tokens) must never reach it."""
_LAUNCH_ASSIGNMENTS = " ".join(shlex.quote(f"{k}={v}") for k, v in LAUNCH_ENV.items())
_LIBC = ctypes.CDLL(None, use_errno=True)
log = logging.getLogger(__name__)
_MNT_DETACH = 2
_DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
"""The device nodes bwrap's ``--dev`` binds from the host's ``/dev``."""
_OVERLAY_XATTRS = {"trusted.overlay.uuid", "trusted.overlay.origin", "trusted.overlay.impure"}
"""What overlayfs writes on an upper layer's root (a command, without CAP_SYS_ADMIN on the
host, can set no ``trusted.`` attribute)."""
_DRAIN_S = 5.0
"""After a timeout kill, how long to wait for output before giving up on the pipes."""
_HASH_SCRIPT = r"""cd "$1" && find . -xdev \( -path ./proc -o -path ./dev -o -path ./usr \
-o -path ./opt/sf -o -path ./run/sf \) -prune -o \( -type d -printf 'd %m %U %G %T@ %p\n' \) \
-o \( -type l -printf 'l %U %G %p -> %l\n' \) \
-o \( ! -type d ! -type l -printf '%y %m %U %G %s %T@ %p\n' \) \
| LC_ALL=C sort && find . -xdev \( -path ./proc -o -path ./dev -o -path ./usr -o -path ./opt/sf \
-o -path ./run/sf \) -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum --"""


_SERVER = r"""
import ctypes, os, selectors, signal, struct, sys
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
CAP = int(sys.argv[1])
ME = os.getpid()
def write(data):
    while data:
        data = data[os.write(1, data):]
def send(kind, payload=b""):
    write(kind + struct.pack(">I", len(payload)) + payload)
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(0, n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data
def frame():
    head = read(5)
    return head[:1], read(struct.unpack(">I", head[1:])[0])
def sweep():
    for _ in range(400):
        others = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, ME)]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os.sched_yield()
send(b"R", str(ME).encode())
while True:
    kind, body = frame()
    cwd, command = body.split(b"\0", 1)
    gate_r, gate_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(gate_w)
        os.read(gate_r, 1)
        os.setsid()
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 1024)
        try:
            os.chdir(cwd)
        except OSError:
            pass
        os.execv("/bin/sh", ["/bin/sh", "-c", command])
        os._exit(127)
    for fd in (gate_r, out_w, err_w):
        os.close(fd)
    send(b"P", str(pid).encode())
    frame()
    os.write(gate_w, b"g")
    os.close(gate_w)
    kept = {out_r: bytearray(), err_r: bytearray()}
    sizes = {out_r: 0, err_r: 0}
    with selectors.DefaultSelector() as selector:
        for fd in kept:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            for key, _ in selector.select():
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                sizes[key.fd] += len(chunk)
                room = CAP - len(kept[key.fd])
                if room > 0:
                    kept[key.fd] += chunk[:room]
    os.close(out_r)
    os.close(err_r)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    sweep()
    out, err = bytes(kept[out_r]), bytes(kept[err_r])
    send(b"D", struct.pack(">iQQI", code, sizes[out_r], sizes[err_r], len(out)) + out + err)
"""
"""The command server of a session (see the module docstring): it reads a command, forks a
shell for it that waits until the host has moved it into the sandbox's cgroup, relays its
output (the first ``max_output_bytes`` of each stream; the rest is read and dropped), kills
whatever the command left in the PID namespace and answers with the exit status."""
_FRAME = struct.Struct(">cI")
_DONE = struct.Struct(">iQQI")


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
        self._generation = 0
        self._lock = threading.Lock()
        self._session: _Session | None = None
        self._due: Literal["swap", "check"] | None = None
        """What a restore left to do before the next command in the running session:
        replace its root with the new live layer (:mod:`.rootswap`), or only check that
        it holds nothing outside its filesystem (the episode changed no file)."""
        self._stale: list[Path] = []
        """Live layers a running session may still have mounted: deleted once it has not."""
        self.sessions_started = 0
        self.roots_swapped = 0
        self.roots_kept = 0
        """Counters: bubblewrap starts, roots replaced and roots kept by restores."""
        self.group = ProcessGroup(self.limits)
        self._seed(files)
        shutil.copystat(self.base, self.upper)
        self._upper_made = _stamp(self.upper)
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
            ANCHOR.lstrip("/"),
            "var/tmp",
            "var/spool",
        ):
            (self.base / d).mkdir(parents=True, exist_ok=True)
        for link in ("bin", "lib", "lib64", "sbin"):
            if Path(f"/{link}").exists():
                (self.base / link).symlink_to(f"usr/{link}")
        (self.base / "tmp").chmod(0o1777)
        (self.base / "run/sf/outbound.sock").touch()  # bubblewrap binds the socket on it
        (self.base / "etc/passwd").write_text(
            f"root:x:0:0:root:/root:/bin/sh\nagent:x:{AGENT_UID}:{AGENT_UID}::{AGENT_HOME}:/bin/sh\n"
        )
        (self.base / "etc/group").write_text(f"root:x:0:\nagent:x:{AGENT_UID}:\n")
        (self.base / "etc/hostname").write_text("sandbox\n")
        _write_files(self.base, files)

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

    def _mount_script(self, then: str, *, join: bool = False) -> str:
        """Mount the overlay in a private mount namespace, then ``then``; with ``join``,
        in the sandbox's cgroup (a session stays out of it: its commands are moved in)."""
        options = f"lowerdir={self._lowerdir()},upperdir={self.upper.name},workdir={self.work.name}"
        if self._rootless:
            options += ",userxattr"
        joined = self.group.join_script() if join else ""
        return (
            f"{joined}cd {shlex.quote(str(self.root))} && "
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
            "--size",
            str(ANCHOR_BYTES),
            "--tmpfs",
            ANCHOR,
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *self._private_devices(),
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

    def _private_devices(self) -> list[str]:
        """bwrap options that put nodes of the session's own over the device nodes
        ``--dev`` binds from the host: the agent's uid is the host's root, so through the
        host's nodes it could chmod or touch them on the host. Made afresh for each
        session (rootless, the agent cannot change the host's nodes, nor may we mknod)."""
        if self._rootless:
            return []
        devices = self.root / "devices"
        _remove_tree(devices)
        devices.mkdir(mode=0o755)
        options = []
        for name in _DEVICE_NODES:
            node = devices / name
            os.mknod(node, stat.S_IFCHR | 0o666, os.stat(f"/dev/{name}").st_rdev)
            node.chmod(0o666)  # mknod applies the umask
            options += ["--dev-bind", str(node), f"/dev/{name}"]
        return options

    def run(
        self,
        command: str,
        *,
        cwd: str = AGENT_HOME,
        timeout_s: float | None = None,
    ) -> CommandResult:
        """Run ``command`` with ``/bin/sh -c`` inside the sandbox and wait for it (in the
        session, started if none runs)."""
        if self.closed:
            raise SandboxError("sandbox is closed")
        with self._lock:
            try:
                self._settle_restore()
                session = self._session or self._start_session()
                return session.run(command, cwd, timeout_s or self.limits.timeout_s)
            except _SessionLost as lost:  # the command ended the server (kill -9 -1, ...)
                self._end_session()
                return CommandResult(exit_code=lost.code, stdout="", stderr=lost.reason)
            finally:
                self.group.kill_all()
                self.outbound.settle()

    def start_session(self) -> None:
        """Start the session now rather than at the first command (a pool warms its
        environments with it)."""
        with self._lock:
            self._settle_restore()
            if self._session is None:
                self._start_session()

    def end_session(self) -> None:
        """Stop the running session, if any (the episode ended: free its processes)."""
        with self._lock:
            self._end_session()

    def _start_session(self) -> _Session:
        """One bubblewrap start: the launch chain with the command server inside."""
        nproc = None
        if not self.group.enforces_pids and os.geteuid() != 0:
            nproc = processes_of_this_user() + self.limits.max_processes
        options = b"".join(f"{o}\0".encode() for o in self._bwrap_options(AGENT_HOME))
        # env -i: bwrap's init (the sandbox's /proc/1) keeps bwrap's environment, which would
        # otherwise carry PWD/OLDPWD host paths from the `cd` above.
        script = self.group.session_script() + self._mount_script(
            f'exec env -i {_LAUNCH_ASSIGNMENTS} "$@"'
        )
        server = ["/usr/bin/python3", "-I", "-S", "-c", _SERVER, str(self.limits.max_output_bytes)]
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, options)  # a few host paths: far below a pipe's buffer
            os.close(write_end)
            bwrap = ["bwrap", "--args", str(read_end), "--", *server]
            argv = [*self._namespace_prefix(), "/bin/sh", "-c", script, "sh", *bwrap]
            proc = subprocess.Popen(
                [*self.limits.prlimit_argv(nproc), *argv],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env=LAUNCH_ENV,
                pass_fds=(read_end,),
            )
        finally:
            os.close(read_end)
        self._session = _Session(proc, self.group)
        self.sessions_started += 1
        try:
            self._session.ready(swappable=not self._rootless)
        except BaseException:
            self._end_session()
            raise
        return self._session

    def _end_session(self) -> None:
        """Stop the session (the caller holds the lock): its overlay is unmounted with it."""
        session, self._session = self._session, None
        self._due = None
        if session is not None:
            session.stop()
            self.group.kill_all(session=True)
        for stale in self._stale:
            _remove_tree(stale)
        self._stale.clear()

    def _settle_restore(self) -> None:
        """After a restore, before a command: give the running session the current layers
        as its root, or end it when that cannot be done cleanly (the command then starts a
        new one)."""
        due, self._due = self._due, None
        session = self._session
        if due is None or session is None:
            return
        try:
            reason = session.residue()
            if reason is None and due == "check":
                self.roots_kept += 1
                return
            if reason is None:
                options = {
                    "lowerdir": ":".join(
                        [*(str(self.layers_dir / n) for n in reversed(self._stack)), str(self.base)]
                    ),
                    "upperdir": str(self.upper),
                    "workdir": str(self.work),
                }
                session.swap(options)
                self.roots_swapped += 1
                for stale in self._stale:
                    _remove_tree(stale)
                self._stale.clear()
                return
        except (SwapError, OSError) as exc:
            reason = f"root swap failed: {exc}"
        log.info("sandbox %s: new session (%s)", self.root, reason)
        self._end_session()

    # ------------------------------------------------------------------ state

    def checkpoint(self) -> tuple[str, ...]:
        """Freeze the live layer; returns the anchor (the stack of frozen layers)."""
        with self._lock:
            self._end_session()  # the overlay must not be mounted while its layers change
            name = str(self._next_layer)
            self._next_layer += 1
            self.upper.rename(self.layers_dir / name)
            _remove_tree(self.work)
            self._stack = (*self._stack, name)
            self._fresh_upper()
            return self._stack

    def restore(
        self,
        anchor: tuple[str, ...],
        files: Mapping[str, str | bytes | tuple[str | bytes, int]] | None = None,
    ) -> None:
        """Return the filesystem exactly to ``anchor`` (from :meth:`checkpoint`), with
        ``files`` (as for the constructor) added. A running session is kept: before its
        next command its root is replaced, or, when nothing changed since the same anchor,
        kept as it is."""
        with self._lock:
            for name in anchor:
                if not (self.layers_dir / name).is_dir():
                    raise SandboxError(f"anchor layer {name!r} does not exist in {self.root}")
            session = self._session
            if session is not None and session.swappable:
                if tuple(anchor) == self._stack and not files and self._untouched():
                    self._due = self._due or "check"
                    return
                self._stale += [self.upper, self.work]
                self._due = "swap"
            else:
                self._end_session()
                _remove_tree(self.upper)
                _remove_tree(self.work)
            self._stack = tuple(anchor)
            self._fresh_upper()
            _write_files(self.upper, files or {})

    def _untouched(self) -> bool:
        """Whether the live layer is as :meth:`_fresh_upper` made it: nothing in it, its
        root's metadata unchanged (any change to the merged tree is made in it)."""
        return not any(os.scandir(self.upper)) and _stamp(self.upper) == self._upper_made

    def _fresh_upper(self) -> None:
        """An empty live layer (new ``upper``/``work`` directories) whose root carries the
        top frozen layer's metadata (the merged root's mode and mtime come from the upper
        layer)."""
        self._generation += 1
        self.upper = self.root / f"upper.{self._generation}"
        self.work = self.root / f"work.{self._generation}"
        self.upper.mkdir()
        top = self.layers_dir / self._stack[-1] if self._stack else self.base
        shutil.copystat(top, self.upper)
        self._upper_made = _stamp(self.upper)
        self.work.mkdir()

    def adopt_layers(self, other: Sandbox, anchor: tuple[str, ...]) -> None:
        """Copy ``other``'s frozen layers of ``anchor`` here and restore to it (branching)."""
        with self._lock:
            self._end_session()
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
            self._end_session()
            script = self._mount_script('exec "$@"', join=True)
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
        """The sandbox can run commands: open, its tree in place, and its session (if one
        runs) alive. Starting a session to ask cost a second bubblewrap start per pooled
        episode; a sandbox that cannot start one fails its next command instead."""
        if self.closed or not (self.root / "merged").is_dir():
            return False
        session = self._session
        return session is None or session.proc.poll() is None

    def close(self) -> None:
        """Kill leftover processes, stop the endpoint, unmount and delete the state."""
        if self.closed:
            return
        self.closed = True
        with self._lock:
            self._end_session()
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


class _SessionLost(Exception):
    """The session's server ended mid-command (the command killed it, or it died)."""

    def __init__(self, code: int, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.code, self.reason, self.timed_out = code, reason, timed_out


_SWAPPER: RootSwapper | None = None
_SWAPPER_LOCK = threading.Lock()


def _swapper() -> RootSwapper:
    """The process's one thread that enters sessions' namespaces."""
    global _SWAPPER
    with _SWAPPER_LOCK:
        if _SWAPPER is None:
            _SWAPPER = RootSwapper()
        return _SWAPPER


class _Session:
    """The host's end of one session: the launch chain and the command server in it."""

    def __init__(self, proc: subprocess.Popen[bytes], group: ProcessGroup) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.group = group
        self._to = proc.stdin.fileno()
        self._from = proc.stdout.fileno()
        self._buffer = bytearray()
        self.server = 0
        """The command server's host pid."""
        self.swappable = False
        """Whether its root can be replaced (as root; see :mod:`.rootswap`)."""
        self._mounts: dict[int, str] = {}
        self._dev: frozenset[tuple[str, int, int, str]] = frozenset()
        self._queues = -1

    def ready(self, timeout_s: float = 15.0, *, swappable: bool = False) -> None:
        """Wait for the server's hello; find its host pid (the descendant of the launch
        chain whose innermost PID is the one it announced); with ``swappable``, note the
        mounts and ``/dev`` a root swap must carry over and find unchanged."""
        _, body = self._expect(b"R", time.monotonic() + timeout_s)
        inner = int(body)
        for _ in range(100):
            found = _descendant_with_inner_pid(self.proc.pid, inner)
            if found:
                self.server = found
                break
            time.sleep(0.01)
        else:
            raise SandboxError("the sandbox's command server started but cannot be found")
        if swappable:
            try:
                _, top = top_level(self.server)
                self._mounts = {m.id: m.path for m in top if m.path != ANCHOR}
                self._dev = dev_listing(self.server)
                self._queues = _swapper().queues(self.server)
                self.swappable = len(self._mounts) == len(top) - 1
            except (SwapError, OSError) as exc:
                log.info("sandbox session %d: root swaps off (%s)", self.server, exc)

    def residue(self) -> str | None:
        """State the session holds outside its root filesystem, if any."""
        return _swapper().residue(self.server, self._dev, self._queues)

    def swap(self, overlay: dict[str, str]) -> None:
        """Make the overlay of ``overlay`` the session's root (:func:`.rootswap`)."""
        _swapper().swap(self.server, overlay, self._mounts)

    def run(self, command: str, cwd: str, timeout_s: float) -> CommandResult:
        """One command: sent, its shell moved into the cgroup and let go, its answer read;
        at the deadline the cgroup is killed (the answer then says so)."""
        self._send(b"C", os.fsencode(cwd) + b"\0" + os.fsencode(command))
        self._expect(b"P", time.monotonic() + _DRAIN_S)
        for pid in _children(self.server):
            self.group.adopt(pid)
        self._send(b"G")
        timed_out = False
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                _, body = self._expect(b"D", deadline)
                break
            except TimeoutError:
                if timed_out:  # killed, yet no answer: the session goes
                    raise _SessionLost(124, "", timed_out=True) from None
                timed_out = True
                self.group.kill_all()
                deadline = time.monotonic() + _DRAIN_S
        code, out_size, err_size, out_len = _DONE.unpack_from(body)
        out = body[_DONE.size : _DONE.size + out_len]
        err = body[_DONE.size + out_len :]
        return CommandResult(
            exit_code=124 if timed_out else code,
            stdout=out.decode(errors="replace"),
            stderr=err.decode(errors="replace"),
            timed_out=timed_out,
            truncated=out_size > len(out) or err_size > len(err),
        )

    def stop(self) -> None:
        """End the session: the server exits on end of input; whatever remains is killed."""
        # through the file objects: closing their descriptors with os.close left the objects
        # to close the same numbers again when collected, by then another sandbox's socket
        # (EBADF in a concurrent pool's close)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdout.close()  # type: ignore[union-attr]
        if self._queues >= 0:
            os.close(self._queues)
            self._queues = -1

    def _send(self, kind: bytes, payload: bytes = b"") -> None:
        data = _FRAME.pack(kind, len(payload)) + payload
        try:
            while data:
                data = data[os.write(self._to, data) :]
        except OSError as exc:
            raise _SessionLost(137, f"the sandbox's command server is gone ({exc})") from None

    def _expect(self, kind: bytes, deadline: float) -> tuple[bytes, bytes]:
        """The next frame, which must be of ``kind``; TimeoutError past ``deadline``."""
        while True:
            if len(self._buffer) >= _FRAME.size:
                got, size = _FRAME.unpack_from(self._buffer)
                if len(self._buffer) >= _FRAME.size + size:
                    body = bytes(self._buffer[_FRAME.size : _FRAME.size + size])
                    del self._buffer[: _FRAME.size + size]
                    if got != kind:
                        raise _SessionLost(137, f"the command server said {got!r}, not {kind!r}")
                    return got, body
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self._from], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from, 65536)
            if not chunk:
                raise _SessionLost(137, "the sandbox's command server ended")
            self._buffer += chunk


def _write_files(root: Path, files: Mapping[str, str | bytes | tuple[str | bytes, int]]) -> None:
    """Write ``files`` (path → content, or (content, mode)) under ``root``."""
    for path, spec in files.items():
        content, mode = spec if isinstance(spec, tuple) else (spec, 0o644)
        target = root / path.lstrip("/")
        if not target.resolve().is_relative_to(root.resolve()):
            raise SandboxError(f"path {path!r} leaves the sandbox root")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        target.write_bytes(content)
        target.chmod(mode)


def _stamp(directory: Path) -> tuple[int, int, int, int, tuple[str, ...]]:
    """What a command can change of a directory itself: mode, owner, group, mtime and
    extended attributes (less those overlayfs sets on an upper layer when mounting it)."""
    info = directory.stat()
    attributes = (a for a in os.listxattr(directory) if a not in _OVERLAY_XATTRS)
    return info.st_mode, info.st_uid, info.st_gid, info.st_mtime_ns, tuple(sorted(attributes))


def _children(pid: int) -> list[int]:
    """The host pids of ``pid``'s children."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _descendant_with_inner_pid(root: int, inner: int) -> int:
    """The descendant of ``root`` whose innermost PID (``NSpid``'s last) is ``inner``."""
    todo = _children(root)
    while todo:
        pid = todo.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        nspid = next(
            (line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), []
        )
        if len(nspid) > 1 and int(nspid[-1]) == inner:
            return pid
        todo += _children(pid)
    return 0


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
