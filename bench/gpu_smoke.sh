#!/usr/bin/env bash
# GPU smoke of the #13 loop (rollout, one update, publish, vLLM reload); see bench/gpu_smoke.py.
#   bash bench/gpu_smoke.sh                                         # GPU machine, SmolLM2
#   bash bench/gpu_smoke.sh --device cpu --model tiny --episodes 4  # dry run anywhere
# PYTHON picks the interpreter (default: python on PATH, with safactory installed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python}" "$here/gpu_smoke.py" "$@"
