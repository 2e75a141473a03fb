"""``bench/gpu_smoke.sh``: the #13 loop (rollout, one update, publish, vLLM reload) on a GPU
when torch sees one, and the same path as a CPU dry run with the tiny model everywhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from safactory.infra.models import SMOLLM2, ModelError, resolve_model

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_smoke.sh"
NO_CUDA = "torch sees no CUDA GPU (bench/gpu_smoke.sh --device cuda runs on a GPU machine)"


def smoke(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run the wrapper with this interpreter; stdout and stderr together."""
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_all_stages(stdout: str, episodes: int) -> None:
    """Every stage printed its summary line with numbers."""
    lines = {line.split()[0]: line for line in stdout.splitlines() if line.strip()}
    assert re.search(rf"^rollout +{episodes} episodes in [\d.]+ s", lines["rollout"])
    assert re.search(rf"unsafe \d+/{episodes} = \d+%, success \d+/{episodes}", lines["rollout"])
    assert re.search(r"[\d,]+ prompt\+reply tokens/s", lines["rollout"])
    assert re.search(rf"^train +1 update of {episodes} trajectories \(\d+ tokens\)", lines["train"])
    assert re.search(r"[\d,]+ tokens/s, loss [+-]\d+\.\d+", lines["train"])
    assert re.search(r"^publish +v1 at .*v000001 .*current -> v000001$", lines["publish"])
    assert lines["vllm"].startswith("vllm")
    assert re.search(r"^done +all stages passed in [\d.]+ s$", lines["done"])


def test_cpu_dry_run_prints_every_stage() -> None:
    result = smoke("--device", "cpu", "--model", "tiny", "--episodes", "4", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert_all_stages(result.stdout, episodes=4)
    if not _vllm_installed():
        assert "vllm not installed: reload step skipped" in result.stdout


def test_a_failing_stage_is_named_and_exits_non_zero(tmp_path: Path) -> None:
    result = smoke("--device", "cpu", "--model", str(tmp_path / "nowhere"), timeout=120)
    assert result.returncode == 1
    assert "FAILED model: ModelError" in result.stdout and "not a folder" in result.stdout
    assert "rollout" not in result.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_gpu_smoke_tiny_on_cuda() -> None:
    result = smoke("--device", "cuda", "--model", "tiny", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert_all_stages(result.stdout, episodes=16)
    assert "peak GPU memory" in result.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_gpu_smoke_smollm2_on_cuda() -> None:
    try:
        resolve_model(SMOLLM2, progress=False)
    except ModelError as exc:
        pytest.skip(f"{SMOLLM2} not on this machine: {exc}")
    result = smoke("--device", "cuda", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert_all_stages(result.stdout, episodes=16)


def _vllm_installed() -> bool:
    try:
        import vllm  # noqa: F401
    except ImportError:
        return False
    return True
