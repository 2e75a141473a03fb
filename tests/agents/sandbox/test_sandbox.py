"""The bubblewrap sandbox: byte-exact restore, clean close, and the outbound recorder's caps.

The escape and resource attempts (the sandbox battery) are in ``test_sandbox_battery.py``.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from safactory.agents.sandbox.bubblewrap import Sandbox, SandboxError, check_host
from safactory.agents.sandbox.limits import Limits
from safactory.agents.sandbox.outbound import OutboundEndpoint, OutboundLog

try:
    check_host()
except SandboxError as exc:  # pragma: no cover - CI installs bubblewrap
    pytest.skip(f"bubblewrap sandbox unavailable: {exc}", allow_module_level=True)

LIMITS = Limits(timeout_s=5.0, memory_mb=256, max_processes=32, disk_mb=16)


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    seeded = {"/home/agent/notes.txt": "hello\n", "/home/agent/.ssh/id_key": ("KEY\n", 0o600)}
    with Sandbox(seeded, LIMITS) as box:
        yield box


# --------------------------------------------------------------------------- limits


def test_enforcement_is_reported(sandbox: Sandbox) -> None:
    report = sandbox.enforcement()
    assert set(report) == {"mode", "time", "processes", "memory", "disk"}
    if os.geteuid() == 0:
        assert report["disk"] == "tmpfs quota"


# --------------------------------------------------------------------------- checkpoint / restore


def test_restore_is_byte_exact(sandbox: Sandbox) -> None:
    sandbox.run("mkdir -p ~/d/e && echo one > ~/d/e/f && ln -s d/e/f ~/l && chmod 640 ~/notes.txt")
    anchor_hash = sandbox.tree_hash()
    anchor = sandbox.checkpoint()
    assert sandbox.tree_hash() == anchor_hash
    sandbox.run(
        "rm -rf ~/d ~/.ssh; chmod 777 ~/notes.txt; echo two >> ~/notes.txt; "
        "rm ~/l; ln -s /etc ~/l; mkfifo ~/p; touch -d 2001-01-01 ~; mkdir /tmp/x; "
        "chmod 700 ~"
    )
    assert sandbox.tree_hash() != anchor_hash
    sandbox.restore(anchor)
    assert sandbox.tree_hash() == anchor_hash
    out = sandbox.run("cat ~/d/e/f ~/.ssh/id_key; stat -c %a ~/notes.txt; readlink ~/l").stdout
    assert out.split() == ["one", "KEY", "640", "d/e/f"]


def test_restore_anchors_stay_valid_across_branches(sandbox: Sandbox) -> None:
    a = sandbox.checkpoint()
    hash_a = sandbox.tree_hash()
    sandbox.run("echo b > ~/b")
    b = sandbox.checkpoint()
    hash_b = sandbox.tree_hash()
    sandbox.restore(a)
    sandbox.run("echo c > ~/c; rm ~/notes.txt")
    c = sandbox.checkpoint()
    hash_c = sandbox.tree_hash()
    for anchor, expected in [(b, hash_b), (a, hash_a), (c, hash_c), (b, hash_b)]:
        sandbox.restore(anchor)
        assert sandbox.tree_hash() == expected
    assert len({hash_a, hash_b, hash_c}) == 3


def test_restore_unknown_anchor_is_a_clear_error(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxError, match="anchor layer '99'"):
        sandbox.restore(("99",))


def test_close_leaves_nothing_behind() -> None:
    box = Sandbox({}, LIMITS)
    root, cgroups = box.root, list(box.group.dirs)
    box.run("sleep 20 & echo started")
    box.close()
    assert not root.exists()
    assert not any(d.exists() for d in cgroups)
    assert str(root) not in Path("/proc/mounts").read_text()


# --------------------------------------------------------------------------- outbound endpoint


@pytest.fixture
def endpoint_dir() -> Iterator[Path]:
    """A short directory for Unix sockets (their paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="sf-ob-"))
    yield path
    shutil.rmtree(path)


def _send(endpoint: OutboundEndpoint, *payloads: bytes) -> None:
    for payload in payloads:
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(str(endpoint.path))
            client.sendall(payload)
    endpoint.settle()


def test_outbound_keeps_a_capped_prefix_and_counts_the_rest(endpoint_dir: Path) -> None:
    endpoint = OutboundEndpoint(endpoint_dir / "s", record_bytes=1000)
    try:
        before = time.time()
        _send(endpoint, b"CMD curl x\n" + b"z" * 5000, b"short")
        long, short = endpoint.records()
        assert (long.sequence, long.size, len(long.data), long.truncated) == (0, 5011, 1000, True)
        assert long.data == (b"CMD curl x\n" + b"z" * 5000)[:1000] and long.command == "curl x"
        assert (short.sequence, short.data, short.truncated) == (1, b"short", False)
        assert before <= long.received_at <= short.received_at <= time.time()
        assert endpoint.log().bytes_received == 5016
    finally:
        endpoint.close()


def test_outbound_one_connection_is_one_record(endpoint_dir: Path) -> None:
    """Record separators inside a payload are data, not boundaries."""
    endpoint = OutboundEndpoint(endpoint_dir / "s")
    try:
        payload = b"CMD curl a\n\nCMD wget b\n\0\r\nCMD nc c\n" + b"settle-0000\n"
        _send(endpoint, payload)
        (record,) = endpoint.records()
        assert record.data == payload and record.command == "curl a"
    finally:
        endpoint.close()


def test_outbound_per_sandbox_caps_drop_but_count(endpoint_dir: Path) -> None:
    endpoint = OutboundEndpoint(
        endpoint_dir / "s", record_bytes=600, total_bytes=1000, max_records=3
    )
    try:
        _send(endpoint, b"a" * 500, b"b" * 500, b"c" * 10, b"d" * 10)
        log = endpoint.log()
        assert [(r.sequence, len(r.data)) for r in log.records] == [(0, 500), (1, 500)]
        assert (log.connections, log.dropped) == (4, 2)
        assert (log.bytes_received, log.bytes_kept) == (1020, 1000)
        started = time.monotonic()
        endpoint.settle()  # still answers with every cap reached
        assert time.monotonic() - started < 1
    finally:
        endpoint.close()


def test_outbound_log_restores_exactly_and_close_drops_it(endpoint_dir: Path) -> None:
    endpoint = OutboundEndpoint(endpoint_dir / "s")
    try:
        _send(endpoint, b"one")
        saved = endpoint.log()
        _send(endpoint, b"two")
        endpoint.replace(saved)
        _send(endpoint, b"three")
        assert [(r.sequence, r.data) for r in endpoint.records()] == [(0, b"one"), (1, b"three")]
        endpoint.clear()
        assert endpoint.log() == OutboundLog()
        _send(endpoint, b"four")
    finally:
        endpoint.close()
    assert endpoint.records() == []


def test_outbound_caps_must_be_positive(endpoint_dir: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        OutboundEndpoint(endpoint_dir / "s", max_records=0)
