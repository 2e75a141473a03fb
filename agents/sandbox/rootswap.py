"""Replace the root filesystem of a running sandbox session, so a session outlives a restore.

A session's root is an overlay mounted once, at its start (see :mod:`.bubblewrap`). To give
the next episode a fresh filesystem without a new bubblewrap start, :func:`swap_root`
mounts the new overlay from the host, enters the session's mount namespace on a thread of
its own (``unshare(CLONE_FS)`` lets one thread of a threaded process ``setns`` into a mount
namespace), attaches the overlay on the session's anchor (an empty tmpfs at
``ANCHOR``), moves the session's other mounts (``/usr``, ``/proc``, ``/dev``, the shims, the
outbound socket) into it at the paths bubblewrap gave them, gives it a fresh anchor and
``pivot_root``\\s into it: the kernel moves the root of every process of that namespace
whose root was the old one (the command server's), and the old overlay is detached. It
takes about a millisecond; a bubblewrap start, 45 ms of CPU.

Only the filesystem is replaced, so :func:`residue` first looks for state a command can
leave outside it: entries added to or changed in ``/dev`` (a tmpfs of the session), and
System V or POSIX IPC objects in the session's IPC namespace. Any of them, or any failure
here, and the caller starts a new session instead (:meth:`.Sandbox.restore`). Destination
paths are resolved beneath the new root without following symlinks, so a tree the agent
shaped cannot steer a mount elsewhere; nothing here runs while a command runs.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

ANCHOR = "/run/sf/swap"
"""Where every session has an empty tmpfs on which its next root is attached."""
ANCHOR_BYTES = 4096
THREADS = 4
"""Swaps run at once (32 sandboxes queued behind one thread waited 39 ms per swap)."""

_LIBC = ctypes.CDLL(None, use_errno=True)
_SYSCALLS = {  # x86_64 and aarch64 share these numbers (the "generic" table) above 424
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "openat2": 437,
}
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE = 1, 6
_MOVE_MOUNT_F_EMPTY_PATH, _MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x2, 0x4, 0x8
_AT_FDCWD = -100
_MNT_DETACH = 2
_CLONE_FS, _CLONE_NEWNS, _CLONE_NEWIPC = 0x200, 0x20000, 0x08000000


class SwapError(OSError):
    """The root could not be replaced; the session must be restarted instead."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _call(name: str, *args: object) -> int:
    number = _SYSCALLS.get(name) or _PIVOT_ROOT[os.uname().machine]
    result = _LIBC.syscall(number, *args)
    if result < 0:
        errno = ctypes.get_errno()
        raise SwapError(errno, f"{name}: {os.strerror(errno)}")
    return result


def _c(text: str | bytes) -> ctypes.c_char_p:
    return ctypes.c_char_p(os.fsencode(text))


def _setns(fd: int, kind: int) -> None:
    if _LIBC.setns(fd, kind) != 0:
        errno = ctypes.get_errno()
        raise SwapError(errno, f"setns: {os.strerror(errno)}")


def _new_mount(fstype: str, options: dict[str, str]) -> int:
    """A detached mount (its fd) of a new ``fstype`` filesystem; paths in ``options`` are
    resolved now, in the caller's namespace."""
    context = _call("fsopen", _c(fstype), 1)
    try:
        for key, value in options.items():
            _call("fsconfig", context, _FSCONFIG_SET_STRING, _c(key), _c(value), 0)
        _call("fsconfig", context, _FSCONFIG_CMD_CREATE, None, None, 0)
        return _call("fsmount", context, 1, 0)
    finally:
        os.close(context)


def _beneath(root: int, path: str) -> int:
    """An O_PATH fd of ``path`` under ``root``, refusing symlinks on the way."""
    how = _OpenHow(
        os.O_PATH | os.O_CLOEXEC,
        0,
        _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
    )
    return _call(
        "openat2", root, _c(path.lstrip("/") or "."), ctypes.byref(how), ctypes.sizeof(how)
    )


@dataclass(frozen=True)
class Mount:
    """One line of a mountinfo table."""

    id: int
    parent: int
    path: str


def mounts(pid: int) -> list[Mount]:
    """The mounts of ``pid``'s namespace, paths as seen from its root."""
    out = []
    for line in Path(f"/proc/{pid}/mountinfo").read_bytes().splitlines():
        fields = line.split(b" ")
        out.append(Mount(int(fields[0]), int(fields[1]), os.fsdecode(_unescape(fields[4]))))
    return out


def _unescape(field: bytes) -> bytes:
    """mountinfo writes space, tab, newline and backslash as ``\\ooo``."""
    parts = field.split(b"\\")
    return parts[0] + b"".join(bytes([int(p[:3], 8)]) + p[3:] for p in parts[1:])


def top_level(pid: int) -> tuple[Mount, list[Mount]]:
    """The root mount of ``pid``'s namespace and the mounts right under it."""
    table = mounts(pid)
    roots = [m for m in table if m.path == "/"]
    if len(roots) != 1:
        raise SwapError(0, f"{len(roots)} mounts on / in the session")
    root = roots[0]
    return root, [m for m in table if m.parent == root.id and m.id != root.id]


def dev_listing(pid: int) -> frozenset[tuple[str, int, int, str]]:
    """Every entry of the session's ``/dev`` tmpfs (devpts excluded): path, mode, device,
    link target."""
    base = f"/proc/{pid}/root/dev"
    found = set()
    todo = [""]
    while todo:
        relative = todo.pop()
        with os.scandir(f"{base}{relative}") as entries:
            for entry in entries:
                path = f"{relative}/{entry.name}"
                info = entry.stat(follow_symlinks=False)
                target = os.readlink(entry.path) if entry.is_symlink() else ""
                found.add((path, info.st_mode, info.st_rdev, target))
                if stat.S_ISDIR(info.st_mode) and path != "/pts":
                    todo.append(path)
    return frozenset(found)


class RootSwapper:
    """Threads that may enter sandbox namespaces (each with its filesystem context
    unshared)."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(THREADS, "sf-rootswap", initializer=_own_fs_context)

    def swap(self, pid: int, overlay: dict[str, str], canonical: dict[int, str]) -> None:
        """Make the overlay of ``overlay`` (lowerdir, upperdir, workdir) the root of
        ``pid``'s session; ``canonical``: the session's mounts (id → path) to carry over."""
        self._thread.submit(_swap, pid, overlay, canonical).result()

    def queues(self, pid: int) -> int:
        """A (detached) mount of the POSIX message queues of ``pid``'s IPC namespace, for
        :meth:`residue`; closing it unmounts it."""
        return self._thread.submit(_in_ipc_namespace, pid, _new_mount, "mqueue", {}).result()

    def residue(
        self, pid: int, dev: frozenset[tuple[str, int, int, str]], queues: int
    ) -> str | None:
        """What ``pid``'s session holds outside its root filesystem (None: nothing), given
        its ``/dev`` at the start and its :meth:`queues` mount."""
        return self._thread.submit(_residue, pid, dev, queues).result()


def _own_fs_context() -> None:
    if _LIBC.unshare(_CLONE_FS) != 0:
        errno = ctypes.get_errno()
        raise SwapError(errno, f"unshare(CLONE_FS): {os.strerror(errno)}")


def _swap(pid: int, overlay: dict[str, str], canonical: dict[int, str]) -> None:
    root, top = top_level(pid)
    current = {m.id: m.path for m in top}
    anchors = [m for m in top if m.id not in canonical]
    missing = sorted(set(canonical) - set(current))
    if missing or len(anchors) != 1 or any(current[i] != p for i, p in canonical.items()):
        raise SwapError(0, f"the session's mounts changed: {sorted(current.values())}")
    anchor = anchors[0].path
    fresh = _new_mount("overlay", overlay)
    spare = _new_mount("tmpfs", {"size": str(ANCHOR_BYTES), "mode": "755"})
    home = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target, _CLONE_NEWNS)
        try:
            _call("move_mount", fresh, _c(""), _AT_FDCWD, _c(anchor), _MOVE_MOUNT_F_EMPTY_PATH)
            for path in canonical.values():
                where = _beneath(fresh, path)
                try:
                    _call(
                        "move_mount", _AT_FDCWD, _c(path), where, _c(""), _MOVE_MOUNT_T_EMPTY_PATH
                    )
                finally:
                    os.close(where)
            where = _beneath(fresh, ANCHOR)
            try:
                flags = _MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH
                _call("move_mount", spare, _c(""), where, _c(""), flags)
            finally:
                os.close(where)
            os.fchdir(fresh)
            _call("pivot_root", _c("."), _c("."))
            if _LIBC.umount2(_c("."), _MNT_DETACH) != 0:
                errno = ctypes.get_errno()
                raise SwapError(errno, f"detaching the old root: {os.strerror(errno)}")
        finally:
            _setns(home, _CLONE_NEWNS)
    finally:
        for fd in (home, target, fresh, spare):
            os.close(fd)
    _, top = top_level(pid)
    fresh_anchors = [m for m in top if m.id not in canonical and m.path == ANCHOR]
    if len(fresh_anchors) != 1 or root.id in {m.id for m in top}:
        raise SwapError(0, "the new root is not in place")


def _in_ipc_namespace(pid: int, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` run in ``pid``'s IPC namespace."""
    home = os.open("/proc/thread-self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
    target = os.open(f"/proc/{pid}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(target, _CLONE_NEWIPC)
        try:
            return fn(*args)
        finally:
            _setns(home, _CLONE_NEWIPC)
    finally:
        os.close(home)
        os.close(target)


def _system_v_objects() -> str | None:
    for kind in ("shm", "sem", "msg"):
        if len(Path(f"/proc/sysvipc/{kind}").read_text().splitlines()) > 1:
            return f"System V {kind} objects"
    return None


def _residue(pid: int, dev: frozenset[tuple[str, int, int, str]], queues: int) -> str | None:
    if dev_listing(pid) != dev:
        return "/dev changed"
    listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=queues)
    try:
        if os.listdir(listing):
            return "POSIX message queues"
    finally:
        os.close(listing)
    return _in_ipc_namespace(pid, _system_v_objects)
