#!/usr/bin/env bash
# The test command: install dependencies, configure, build, run every test. Usage:
#   ci/test.sh            # all tests (unit, mpi; gpu tests skip without a device), then the
#                         # smoke suite (scenarios/suites/smoke.yaml)
#   ci/test.sh -L unit    # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash ci/install-deps.sh
# mpirun refuses to run as root unless told that it is intended (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash ci/build.sh default
ctest --preset default --timeout 600 "$@"
if [[ $# -eq 0 ]]; then
  # The smoke suite: every symptom scenario must still reproduce and every fix still clear it.
  build/harness/faultline suite scenarios/suites/smoke.yaml -j 2 --results build/suites \
    --junit build/suites/smoke-junit.xml
  # Its report, and the comparison with the committed baseline (a regression fails CI).
  smoke=$(ls -d build/suites/*-smoke | tail -n 1)
  build/harness/faultline report "$smoke"
  build/harness/faultline diff results/baselines/smoke.json "$smoke" --outcomes-only
fi
echo "ci/test.sh: finished in $(( $(date +%s) - start )) s"
