#!/usr/bin/env bash
# The test command: install dependencies, configure, build, run every test. Usage:
#   ci/test.sh            # all tests (unit, mpi; gpu tests skip without a device), then the
#                         # main job (ci/main.sh: the smoke suite and its report) and the diff
#                         # against results/baselines/smoke.json
#   ci/test.sh -L unit    # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash ci/install-deps.sh
# mpirun refuses to run as root unless told that it is intended (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash ci/build.sh default
ctest --preset default --timeout 600 "$@"
status=0
if [[ $# -eq 0 ]]; then
  # The main job (ci/main.sh): the smoke suite and its report. Then the comparison with the
  # committed baseline: a symptom that stopped reproducing or a fix that stopped working fails CI.
  bash ci/main.sh || status=$?
  if [[ -f build/suites/smoke-summary.json ]]; then
    build/harness/faultline diff results/baselines/smoke.json build/suites/smoke-summary.json \
      --outcomes-only || status=1
  fi
fi
echo "ci/test.sh: finished in $(( $(date +%s) - start )) s"
exit "$status"
