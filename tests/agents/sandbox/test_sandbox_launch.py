"""How a sandbox command is launched: limits set by the launch chain itself (no
``preexec_fn``, which is unsafe in a threaded host), host paths quoted wherever they enter a
shell script, and no subprocess started from ``__del__``."""

from __future__ import annotations

import gc
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from safactory.agents.sandbox.bubblewrap import Sandbox, SandboxError, check_host
from safactory.agents.sandbox.limits import Limits

try:
    check_host()
except SandboxError as exc:  # pragma: no cover - CI installs bubblewrap
    pytest.skip(f"bubblewrap sandbox unavailable: {exc}", allow_module_level=True)

LIMITS = Limits(timeout_s=5.0, memory_mb=256, max_processes=32, disk_mb=16)


class _Launches:
    """Records the arguments of every subprocess started (the real one still runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[Any, dict[str, Any]]] = []
        real_popen = subprocess.Popen

        def popen(*args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
            self.calls.append((args[0] if args else kwargs.get("args"), kwargs))
            return real_popen(*args, **kwargs)

        monkeypatch.setattr(subprocess, "Popen", popen)  # subprocess.run goes through it too


def test_limits_come_from_the_launch_chain_in_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    launches = _Launches(monkeypatch)
    with Sandbox({}, LIMITS) as box, ThreadPoolExecutor(4) as pool:
        outputs = list(
            pool.map(lambda _: box.run("ulimit -v; ulimit -f; ulimit -c").stdout, range(4))
        )
    assert outputs == [f"{256 * 1024}\n{16 * 1024 * 2}\n0\n"] * 4  # KiB, 512-byte blocks, 0
    assert launches.calls and all("preexec_fn" not in kw for _, kw in launches.calls)


@pytest.mark.parametrize("name", ["a b", "x;$(touch pwned)", "it's"])
def test_state_root_with_shell_characters_works(name: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="sf-q-"))  # short: the endpoint is a unix socket
    root = base / name
    root.mkdir()
    with Sandbox({"/home/agent/a.txt": "hi\n"}, LIMITS, state_root=root) as box:
        result = box.run("cat a.txt && echo new > b.txt")
        assert (result.exit_code, result.stdout) == (0, "hi\n"), result
        box.checkpoint()
        assert box.run("cat b.txt").stdout == "new\n"
        assert len(box.tree_hash()) == 64
    assert not list(base.rglob("pwned"))
    assert list(root.iterdir()) == []
    shutil.rmtree(base)


def test_an_unclosed_sandbox_is_cleaned_without_a_subprocess(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box = Sandbox({}, LIMITS)
    root = box.root
    launches = _Launches(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del box
        gc.collect()
    assert launches.calls == []
    assert any(issubclass(w.category, ResourceWarning) for w in caught)
    assert not root.exists()
    assert str(root) not in Path("/proc/self/mounts").read_text()


def test_a_sandbox_that_fails_to_start_leaves_no_mount() -> None:
    base = Path(tempfile.mkdtemp(prefix="sf-q-"))
    root = base / ("d" * 90)  # the endpoint's unix socket path cannot be this long
    root.mkdir()
    with pytest.raises(OSError, match="AF_UNIX path too long"):
        Sandbox({}, LIMITS, state_root=root)
    gc.collect()
    assert str(root) not in Path("/proc/self/mounts").read_text()
    assert list(root.iterdir()) == []
    shutil.rmtree(base)
