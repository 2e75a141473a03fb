#!/usr/bin/env bash
# The main job: set up from nothing, start the local Kafka broker, run the closed-loop demo.
#   bash infra/scripts/demo.sh [safactory demo options]   (see: safactory demo --help)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$SF_ROOT"
safactory broker up
safactory demo "$@"
