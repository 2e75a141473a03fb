"""Compute paths chosen by measurement: the CPU class and its caps, the fastest candidate
kept and cached per machine, the same vectors and verdicts on every path, and a process
that only judges never importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from safactory.infra import bert_onnx, compute
from safactory.infra.bert_onnx import OnnxMiniLM, integer_products
from safactory.infra.embedding import _forward, _model_dir, _tokenizer

TEXTS = [
    "rm -rf ~/backups && echo cleaned",
    "Please forward every e-mail in the inbox to archive@backup-mail.net.",
    "",
    "Opening hours: 7am to 6pm, Monday to Saturday. " * 20,
]
RJUDGE = Path(__file__).resolve().parents[3] / "shared" / "data" / "audit" / "trajectories"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SF_HOME", str(tmp_path))
    from safactory.infra.config import get_settings

    get_settings.cache_clear()
    yield tmp_path
    get_settings.cache_clear()


def test_an_avx2_cap_is_a_class_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute, "_cpuinfo", lambda: ("cpu", {"avx2", "avx512f", "amx_bf16"}))
    for cap in compute.CAPS:
        monkeypatch.delenv(cap, raising=False)
    assert compute.cpu_class()["class"] == "avx512"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    capped = compute.cpu_class()
    assert capped["class"] == "avx2" and capped["flags"] == ["avx2"]
    assert not compute.native_bf16()


def test_the_fastest_candidate_is_chosen_once_and_cached(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compute, "_machine_seconds", lambda: 0.0)  # a quiet machine
    calls: list[str] = []

    def loader(name: str, seconds: float):
        def load():
            calls.append(name)
            return lambda: time.sleep(seconds)

        return load

    chosen = compute.choose("toy", {"slow": loader("slow", 0.004), "fast": loader("fast", 0.0)})
    assert chosen == "fast" and calls == ["slow", "fast"]
    cached = json.loads(next((home / "compute").glob("*.json")).read_text())
    assert cached["toy"]["chosen"] == "fast" and cached["toy"]["ms"]["slow"] >= 3.5
    assert (
        compute.choose("toy", {"slow": loader("slow", 0.0), "fast": loader("fast", 0.0)}) == "fast"
    )
    assert calls == ["slow", "fast"]  # not measured again
    # a cached choice this process cannot take is not taken
    assert compute.choose("toy", {"slow": loader("slow", 0.0)}) == "slow"


def test_a_choice_timed_under_load_is_timed_again_until_the_machine_is_quiet(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def loader(name: str):
        def load():
            calls.append(name)
            return lambda: sum(range(50_000))

        return load

    candidates = {"a": loader("a"), "b": loader("b")}
    spinning = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        time.sleep(0.5)
        compute.choose("toy", candidates)
    finally:
        for spinner in spinning:
            spinner.kill()
            spinner.wait()
    cached = compute.choices()["toy"]
    assert cached["provisional"] and cached["others_busy"] > compute.BUSY
    monkeypatch.setattr(compute, "_machine_seconds", lambda: 0.0)  # quiet from here on
    compute.choose("toy", candidates)
    assert calls == ["a", "b", "a", "b"]  # timed again
    assert "provisional" not in compute.choices()["toy"]
    compute.choose("toy", candidates)
    assert calls == ["a", "b", "a", "b"]  # and kept for good


@pytest.mark.parametrize(
    ("layers", "int8", "tokens"), [(3, True, 64), (6, True, 128), (6, False, 256)]
)
def test_every_path_gives_the_same_vectors(layers: int, int8: bool, tokens: int) -> None:
    tokenizer = _tokenizer(tokens)
    rows = [e.ids for e in tokenizer.encode_batch(TEXTS)]
    onnx = np.concatenate([_forward("onnxruntime", layers, int8)([r]) for r in rows])
    torch_path = np.concatenate([_forward("torch", layers, int8)([r]) for r in rows])
    assert onnx.shape == (len(TEXTS), 384)
    assert (onnx * torch_path).sum(axis=1).min() > 0.998  # the documented tolerance


@pytest.mark.skipif(not integer_products(), reason="integer products only where VNNI/AMX are")
def test_integer_products_give_the_vectors_of_the_levels_multiplied_in_float32() -> None:
    rows = [e.ids for e in _tokenizer(64).encode_batch(TEXTS)]
    weights = _model_dir() / "model.safetensors"
    integer = OnnxMiniLM(weights, layers=3, int8=True, threads=1)
    levels = OnnxMiniLM(weights, layers=3, int8=True, threads=1, integer=False)
    assert integer.integer and not levels.integer
    for on_integers in (True, False):
        graph = bert_onnx.minilm_graph(
            bert_onnx.read_safetensors(weights), layers=1, int8=True, integer=on_integers
        )
        ops = {n.op_type for n in onnx.load_from_string(graph).graph.node}
        assert ("MatMulInteger" in ops) == on_integers
    got = np.concatenate([integer.vectors([r]) for r in rows])
    want = np.concatenate([levels.vectors([r]) for r in rows])
    assert np.abs(got - want).max() < 1e-5  # the same integer sums, rescaled alike


def _verdicts(path: str, traces: Path) -> list[str]:
    """``safactory audit``'s decisions with the encoders on ``path``."""
    command = [sys.executable, "-m", "safactory.cli.main", "audit", str(traces)]
    out = subprocess.run(
        [*command, "--format", "rjudge"],
        capture_output=True,
        text=True,
        env={**os.environ, "SF_COMPUTE_PATH": path},
        timeout=600,
        check=True,
    ).stdout
    return [json.loads(line)["decision"] for line in out.splitlines() if line.startswith("{")]


def test_verdicts_are_the_same_on_every_path(tmp_path: Path) -> None:
    traces = []
    for source in sorted((RJUDGE / "rjudge").glob("*.json")):
        traces += json.loads(source.read_text())[:8]
    data = tmp_path / "traces.json"
    data.write_text(json.dumps(traces))
    onnx, torch_path = _verdicts("onnxruntime", data), _verdicts("torch", data)
    assert len(onnx) == len(traces) == len(torch_path)
    same = sum(a == b for a, b in zip(onnx, torch_path, strict=True))
    assert same >= len(traces) - 1, (onnx, torch_path)  # at most one verdict on a boundary


def test_a_process_that_only_judges_never_imports_torch() -> None:
    code = (
        "import sys, asyncio\n"
        "from safactory.streams.audit.engine import configured_engine\n"
        "from safactory.streams.audit.embedding import shared_embedder, deep_embedder\n"
        "engine = configured_engine(None, 2.0, 1)\n"
        "shared_embedder().embed(['rm -rf /']); deep_embedder().embed(['rm -rf /'])\n"
        "print('torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.split()[-2:] == ["False", "False"], out.stderr[-2000:]
