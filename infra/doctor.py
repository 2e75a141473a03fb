"""What this machine is and how each embedded model computes on it (``safactory doctor``).

Every compute path is measured on the machine and cached (:mod:`.compute`); this module
makes the choices that are not cached yet and lists them all, so a slow figure can be
read against the CPU and the path that produced it. Benchmarks print :func:`summary`.
"""

from __future__ import annotations

from .compute import choices, cpu_class, native_bf16

ENCODERS = {
    "the audit tier's heads (3 layers, 64 pieces, int8)": (3, True, 64),
    "the deep tier's heads (6 layers, 128 pieces, int8)": (6, True, 128),
    "search, scores, skills (6 layers, 256 pieces, float32)": (6, False, 256),
}


def survey(*, with_torch: bool = True) -> dict[str, object]:
    """The CPU class and, per model, the path each kind of process uses here (measuring
    what is not cached; ``with_torch`` loads torch so the paths of processes that hold it
    are measured too)."""
    from .embedding import encoder_key, encoder_path

    if with_torch:
        import torch  # noqa: F401  (a process holding torch may choose its paths)
    models: dict[str, str] = {}
    for what, (layers, int8, tokens) in ENCODERS.items():
        held = encoder_path(layers, int8, tokens) if with_torch else "not measured"
        entry = choices().get(encoder_key(layers, int8), {})
        timings = entry.get("ms")
        again = "; timed under load: again at the next load" if entry.get("provisional") else ""
        models[what] = f"onnxruntime in processes that only judge; {held} where torch is loaded" + (
            f" (measured: {', '.join(f'{p} {ms} ms' for p, ms in timings.items())}{again})"
            if timings
            else ""
        )
    models["DataElf planner build (SmolLM2 fine-tune)"] = (
        "bfloat16 autocast (native here)" if native_bf16() else "float32 (no native bfloat16)"
    )
    models["trainer and policy (SmolLM2)"] = "float32 on CPU (bfloat16 only on a GPU or NPU)"
    return {"cpu": cpu_class(), "models": models, "measured": choices()}


def lines(report: dict[str, object]) -> list[str]:
    """The survey as text: the CPU, its flags, then one line per model."""
    cpu: dict[str, object] = report["cpu"]  # type: ignore[assignment]
    caps = f", capped by {cpu['caps']}" if cpu["caps"] else ""
    head = [
        f"cpu: {cpu['class']}, {cpu['model']}, {cpu['cores']} cores{caps}",
        f"flags: {' '.join(cpu['flags'])}",  # type: ignore[arg-type]
    ]
    return head + [f"{what}: {how}" for what, how in report["models"].items()]  # type: ignore[union-attr]


def summary() -> str:
    """One line: the CPU class, its model, and the cached path choices with their timings."""
    cpu = cpu_class()
    caps = f", capped by {cpu['caps']}" if cpu["caps"] else ""
    chosen = "; ".join(
        f"{key} → {entry['chosen']} ({', '.join(f'{p} {ms} ms' for p, ms in entry['ms'].items())})"  # type: ignore[union-attr]
        for key, entry in sorted(choices().items())
    )
    return (
        f"cpu: {cpu['class']} ({cpu['model']}, {cpu['cores']} cores{caps}); "
        f"paths: {chosen or 'none measured yet'}"
    )
