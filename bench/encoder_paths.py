"""MiniLM's compute paths side by side on this CPU: torch int8 (``_int_mm``), torch float32,
and onnxruntime (the path of processes that only judge: int8 products on integers where the
CPU has VNNI or AMX, the int8 levels multiplied in float32 elsewhere), for each setting the
project uses, at one text and at 16, one thread, timed in alternation; then the memory a
process that only judges holds.

    python bench/encoder_paths.py
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
        OPENBLAS_CORETYPE=Haswell python bench/encoder_paths.py

The caps reach torch and OpenBLAS; onnxruntime picks its kernels from the CPU's own flags
and cannot be capped, so its figure under a cap is still this CPU's full instruction set
(the cap does make it multiply the levels in float32, as an AVX2 CPU's run does).
"""

from __future__ import annotations

import subprocess
import sys

from safactory.infra.bert_onnx import OnnxMiniLM, integer_products
from safactory.infra.compute import interleaved
from safactory.infra.doctor import ENCODERS, summary

JUDGE_RSS = (  # VmHWM: ru_maxrss would carry this parent's peak across the exec
    "import sys\n"
    "from safactory.streams.audit.engine import configured_engine\n"
    "from safactory.streams.audit.embedding import shared_embedder, deep_embedder\n"
    "engine = configured_engine(None, 2.0, 1)\n"
    "shared_embedder().embed(['rm -rf /']); deep_embedder().embed(['rm -rf /'])\n"
    "hwm = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
    "print(int(hwm) // 1024, 'torch' in sys.modules)\n"
)


def main() -> None:
    import torch

    from safactory.infra.embedding import _forward, _model_dir, set_threads

    weights = _model_dir() / "model.safetensors"

    set_threads(1)
    torch.set_num_threads(1)
    print(summary())
    columns = ("torch int8", "torch fp32", "onnxruntime", "onnx levels")
    print(f"{'setting':<58}{'rows':>5}" + "".join(f"{c:>13}" for c in columns))
    print("  (onnxruntime: this CPU's graph; onnx levels: int8 levels multiplied in float32)")
    for what, (layers, int8, tokens) in ENCODERS.items():
        row = [101, *range(2000, 2000 + min(62, tokens - 2)), 102]
        paths = {"onnxruntime": _forward("onnxruntime", layers, int8)}
        paths["torch fp32"] = _forward("torch", layers, False)
        if int8:
            paths["torch int8"] = _forward("torch", layers, True)
        if int8 and integer_products():
            levels = OnnxMiniLM(weights, layers=layers, int8=True, threads=1, integer=False)
            paths["onnx levels"] = levels.vectors
        for rows in (1, 16):
            batch = [row] * rows
            runs = {k: (lambda f=f, b=batch: f(b)) for k, f in paths.items()}
            ms = {k: v * 1000 for k, v in interleaved(runs).items()}
            cells = [f"{ms[k]:.1f} ms" if k in ms else "-" for k in columns]
            print(f"{what:<58}{rows:>5}" + "".join(f"{c:>13}" for c in cells))
    out = subprocess.run(
        [sys.executable, "-c", JUDGE_RSS], capture_output=True, text=True, check=True
    ).stdout.split()
    print(
        f"a process that only judges (engine + both encoders): {out[0]} MB peak RSS, torch {out[1]}"
    )


if __name__ == "__main__":
    main()
