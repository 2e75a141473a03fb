#!/usr/bin/env bash
# The test command: set up from nothing, start the real Kafka broker, run every test, stop.
#   bash infra/scripts/test.sh [pytest args]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$SF_ROOT"

started=0
if ! safactory broker status >/dev/null 2>&1; then
  say "starting the Kafka broker (KRaft; jars from Maven Central on first run)"
  safactory broker up
  started=1
fi
cleanup() { if [ "$started" = 1 ]; then safactory broker down || true; fi; }
trap cleanup EXIT

ruff check .
rc=0
python -m pytest -q -p no:cacheprovider "$@" || rc=$?
if [ "$rc" = 5 ]; then say "pytest collected no tests"; fi
exit "$rc"
