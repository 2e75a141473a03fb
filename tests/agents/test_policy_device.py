"""The ``hf`` policy's device: ``PolicyConfig.device`` and ``simulate --device`` reach
:class:`HFLocalPolicy`; a device that is not usable here fails at start, naming the fix."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from typer.testing import CliRunner

from safactory.agents.policies import PolicyConfig, PolicyError, make_policy
from safactory.agents.policies.hf_local import HFLocalPolicy, build_tiny_checkpoint
from safactory.cli.main import app


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-device"))


def test_an_unknown_device_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValidationError, match="device='gpu': use one of cpu, cuda, npu"):
        PolicyConfig(kind="hf", device="gpu")


def test_the_device_reaches_the_hf_policy(tiny: Path) -> None:
    policy = make_policy(PolicyConfig(kind="hf", checkpoint=str(tiny), device="cpu"))
    assert isinstance(policy, HFLocalPolicy)
    assert policy.device == "cpu" and next(policy.model.parameters()).device.type == "cpu"


def test_cuda_runs_there_or_fails_naming_the_fix(tiny: Path) -> None:
    config = PolicyConfig(kind="hf", checkpoint=str(tiny), device="cuda")
    if torch.cuda.is_available():
        policy = make_policy(config)
        assert next(policy.model.parameters()).device.type == "cuda"  # type: ignore[attr-defined]
    else:
        with pytest.raises(PolicyError, match="sees no CUDA GPU; use --device cpu"):
            make_policy(config)


@pytest.mark.skipif(importlib.util.find_spec("torch_npu") is not None, reason="torch_npu here")
def test_npu_without_torch_npu_names_the_package(tiny: Path) -> None:
    with pytest.raises(PolicyError, match=r"needs the torch-npu package"):
        make_policy(PolicyConfig(kind="hf", checkpoint=str(tiny), device="npu"))


@pytest.mark.parametrize("command", ["run", "worker"])
def test_simulate_takes_device(command: str) -> None:
    runner = CliRunner()
    help_text = runner.invoke(app, ["simulate", command, "--help"], terminal_width=200).output
    assert "--device" in help_text
    args = ["simulate", command, "--policy", "hf", "--device", "gpu"]
    if command == "run":
        args += ["--env", "choice"]
    bad = runner.invoke(app, args)
    assert bad.exit_code == 1 and "use one of cpu, cuda, npu" in bad.output
