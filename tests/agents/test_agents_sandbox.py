"""The bubblewrap sandbox: escape battery, resource limits, and byte-exact restore.

Each escape attempt is its own test, named after the attempt. Every one asserts that the
attempt was contained (it failed inside, or only touched the sandbox) and that the host is
unchanged (a canary directory on the host keeps its exact listing and contents).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
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
def host_canary(tmp_path: Path) -> Iterator[Path]:
    """A host directory with a secret; the test fails if anything in it changed."""
    canary = tmp_path / f"canary-{uuid.uuid4().hex[:8]}"
    canary.mkdir()
    (canary / "secret.txt").write_text("HOST-SECRET-c4n4ry\n")
    before = _snapshot(canary)
    yield canary
    assert _snapshot(canary) == before, "the host canary directory changed"


def _snapshot(root: Path) -> list[tuple[str, int, str]]:
    return sorted(
        (
            str(p.relative_to(root)),
            p.stat().st_mode,
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "",
        )
        for p in [root, *root.rglob("*")]
    )


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    seeded = {"/home/agent/notes.txt": "hello\n", "/home/agent/.ssh/id_key": ("KEY\n", 0o600)}
    with Sandbox(seeded, LIMITS) as box:
        yield box


# --------------------------------------------------------------------------- escape battery


def test_escape_write_outside_root(sandbox: Sandbox, host_canary: Path) -> None:
    target = host_canary / "pwned.txt"
    result = sandbox.run(
        f"echo pwned > {target}; echo pwned > /usr/pwned; "
        f"mkdir -p {host_canary} && echo pwned > {target}; echo done"
    )
    assert "done" in result.stdout
    assert not target.exists()
    assert not Path("/usr/pwned").exists()


def test_escape_read_host_files(sandbox: Sandbox, host_canary: Path) -> None:
    result = sandbox.run(
        f"cat {host_canary}/secret.txt; cat /etc/shadow; cat /root/.bashrc; "
        "ls /work /root; cat /etc/hostname"
    )
    assert "HOST-SECRET" not in result.stdout
    assert result.stdout.strip() == "sandbox"  # only the sandbox's own /etc/hostname
    assert "root:" not in result.stdout


def test_escape_network_connection(sandbox: Sandbox) -> None:
    probe = (
        "import socket\nfor host, port in [('127.0.0.1', 9092), ('1.1.1.1', 53), "
        "('10.0.2.2', 80)]:\n    s = socket.socket()\n    s.settimeout(1)\n    try:\n"
        "        s.connect((host, port)); print('CONNECTED', host)\n"
        "    except OSError as e:\n        print('blocked', host, e.errno)\n"
    )
    result = sandbox.run(
        f'python3 -c "{probe}"; /usr/bin/curl -sS -m 2 http://example.com; cat /proc/net/dev'
    )
    assert "CONNECTED" not in result.stdout
    assert result.stdout.count("blocked") == 3
    interfaces = [
        line.split(":")[0].strip()
        for line in result.stdout.splitlines()
        if ":" in line and "|" not in line and "blocked" not in line
    ]
    assert interfaces == ["lo"]


def test_escape_fork_bomb(sandbox: Sandbox) -> None:
    if not sandbox.group.enforces_pids and os.geteuid() == 0:
        pytest.skip("root without a writable pids cgroup: nothing would contain a fork bomb")
    result = sandbox.run("bomb() { bomb | bomb & }; bomb; sleep 3", timeout_s=4)
    assert "Cannot fork" in result.stderr or result.timed_out  # the pids limit held
    assert sandbox.group.pids() == []
    assert sandbox.run("echo alive").stdout.strip() == "alive"
    assert subprocess.run(["true"]).returncode == 0  # the host still forks


def test_escape_disk_fill(sandbox: Sandbox) -> None:
    before = shutil.disk_usage("/").free
    result = sandbox.run(
        "dd if=/dev/zero of=$HOME/fill bs=1M count=200; "
        "for i in 1 2 3 4 5; do head -c 8000000 /dev/zero > ~/f$i; done; "
        "du -sk ~ | cut -f1"
    )
    used_kb = int(result.stdout.strip().splitlines()[-1])
    assert used_kb <= (LIMITS.disk_mb + 8) * 1024
    assert before - shutil.disk_usage("/").free < 100 * 1024 * 1024
    assert sandbox.run("rm -f ~/fill ~/f*; echo ok > ~/after; cat ~/after").stdout.strip() == "ok"


def test_escape_symlink_and_dotdot(sandbox: Sandbox, host_canary: Path) -> None:
    depth = "../" * 12
    result = sandbox.run(
        f"ln -s {host_canary}/secret.txt ~/link; cat ~/link; "
        f"cat {depth}{str(host_canary).lstrip('/')}/secret.txt; "
        f"cd {depth} && pwd && ls; ln -s / ~/rootlink; ls ~/rootlink/; "
        f"cat /proc/self/root{host_canary}/secret.txt; "
        f"echo pwned > ~/link; echo pwned > {depth}{str(host_canary).lstrip('/')}/x"
    )
    assert "HOST-SECRET" not in result.stdout
    assert "\n/\n" in f"\n{result.stdout}"  # `cd ../../..` stops at the sandbox root
    assert not (host_canary / "x").exists()


def test_escape_signal_host_processes(sandbox: Sandbox) -> None:
    victim = subprocess.Popen(["sleep", "60"])
    try:
        result = sandbox.run(
            f"kill -9 {victim.pid}; kill -9 -1; kill -9 1; kill -9 {os.getpid()}; echo tried"
        )
        assert victim.poll() is None, "a host process was killed from inside the sandbox"
        assert "tried" in result.stdout or result.exit_code != 0
    finally:
        victim.kill()
        victim.wait()


def test_escape_host_proc(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SF_CANARY_API_KEY", "sk-canary-must-not-leak")
    result = sandbox.run(
        f"ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/{os.getpid()}/cmdline;"
        " cat /proc/1/environ | tr '\\0' '\\n'; cat /proc/1/cmdline"
    )
    lines = result.stdout.splitlines()
    assert int(lines[0]) < 10  # only the sandbox's own processes are visible
    assert "pytest" not in result.stdout
    assert "SF_" not in result.stdout and "KAFKA" not in result.stdout
    assert "sk-canary-must-not-leak" not in result.stdout  # host env never reaches the sandbox


# --------------------------------------------------------------------------- limits


def test_limit_time(sandbox: Sandbox) -> None:
    result = sandbox.run("sleep 30", timeout_s=1)
    assert result.timed_out and result.exit_code == 124
    assert sandbox.group.pids() == []


def test_limit_memory(sandbox: Sandbox) -> None:
    result = sandbox.run("python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'")
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr or result.exit_code in (-9, 137)


def test_limit_output_is_cut(sandbox: Sandbox) -> None:
    result = sandbox.run("head -c 100000 /dev/zero | tr '\\0' a")
    assert result.truncated and len(result.stdout) == LIMITS.max_output_bytes


def test_enforcement_is_reported(sandbox: Sandbox) -> None:
    report = sandbox.enforcement()
    assert set(report) == {"mode", "time", "processes", "memory", "disk"}
    if os.geteuid() == 0:
        assert report["disk"] == "tmpfs quota"


def test_runs_as_unprivileged_agent(sandbox: Sandbox) -> None:
    result = sandbox.run("id -u; cat /proc/self/status | grep CapEff; unshare -U true; echo $?")
    uid, caps, *rest = result.stdout.split("\n")
    assert uid == "1000"
    assert caps.split()[-1] == "0000000000000000"
    assert rest[0] != "0"  # no nested user namespaces


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
