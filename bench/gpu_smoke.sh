#!/usr/bin/env bash
# GPU smoke of the #13 loop (rollout, one update, publish, vLLM reload; see bench/gpu_smoke.py),
# then, on a machine with two GPUs or more, the trainer on 1 vs 2 NCCL ranks (bench/trainer_ranks.py).
#   bash bench/gpu_smoke.sh                                         # GPU machine, SmolLM2
#   bash bench/gpu_smoke.sh --device cpu --model tiny --episodes 4  # dry run anywhere
# PYTHON picks the interpreter (default: python on PATH, with safactory installed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"${PYTHON:-python}" "$here/gpu_smoke.py" "$@"
# Multi-GPU stage (#22): the trainer's ranks on NCCL, 1 vs 2 GPUs, when the machine has two.
gpus="$(nvidia-smi -L 2>/dev/null | wc -l || true)"
if [ "${gpus:-0}" -ge 2 ]; then
  "${PYTHON:-python}" "$here/trainer_ranks.py" --device cuda --ranks 1,2 --hidden 1024
else
  echo "multi-GPU stage skipped: ${gpus:-0} GPU(s) visible (needs 2)"
fi
