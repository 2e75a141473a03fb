#!/usr/bin/env bash
# The test command: set up from nothing, start the real Kafka broker, run every test, stop.
#   bash infra/scripts/test.sh [pytest args]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$SF_ROOT"

# Tests use a broker of their own with fresh data: every test creates topics under a prefix
# of its own, and a broker that keeps thousands of old partitions starts slowly. A broker
# already answering at SF_KAFKA_BOOTSTRAP is used as it is.
export SF_BROKER_NAME="${SF_BROKER_NAME:-test-broker}"
started=0
if ! python -c "import socket, sys; from safactory.infra.config import Settings
h, _, p = Settings().kafka_bootstrap.split(',')[0].rpartition(':')
sys.exit(socket.socket().connect_ex((h, int(p))))" 2>/dev/null; then
  say "starting a fresh Kafka broker for the tests (KRaft; jars from Maven Central on first run)"
  rm -rf "${SF_HOME:?}/$SF_BROKER_NAME"
  safactory broker up
  started=1
fi
cleanup() {
  if [ "$started" = 1 ]; then safactory broker down || true; rm -rf "${SF_HOME:?}/$SF_BROKER_NAME"; fi
}
trap cleanup EXIT

ruff check .
ruff format --check .
# DataElf's planner: SmolLM2 fine-tuned on the generated corpus, built once (cached in
# $SF_MODELS, rebuilt when the corpus or the recipe changes); its tests load it.
python -m safactory.sinks.dataelf.tuning >/dev/null
rc=0
python -m pytest -q -p no:cacheprovider "$@" || rc=$?
if [ "$rc" = 5 ]; then say "pytest collected no tests"; fi
exit "$rc"
