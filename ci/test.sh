#!/usr/bin/env bash
# The test command: install dependencies, configure, build, run every test. Usage:
#   ci/test.sh            # all tests (unit, mpi; gpu tests skip without a device)
#   ci/test.sh -L unit    # extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash ci/install-deps.sh
# mpirun refuses to run as root unless told that it is intended (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash ci/build.sh default
ctest --preset default --timeout 600 "$@"
echo "ci/test.sh: finished in $(( $(date +%s) - start )) s"
