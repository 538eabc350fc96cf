#!/usr/bin/env bash
# The test command: install dependencies, configure, build, run every test. Usage:
#   ci/test.sh            # all tests (unit, mpi; gpu tests skip without a device), then the
#                         # smoke suite (scenarios/suites/smoke.yaml)
#   ci/test.sh -L unit    # extra arguments go to ctest
# It ends with one line of measured phase times and counts (the README's numbers come from it),
# also written to build/ci-timing.json.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
phase_start=$start
declare -A took
phase_done() { local now; now=$(date +%s); took[$1]=$((now - phase_start)); phase_start=$now; }
bash ci/install-deps.sh
phase_done install
# mpirun refuses to run as root unless told that it is intended (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bash ci/build.sh default
phase_done build
ctest_log=build/ctest-output.log
set +e
ctest --preset default --timeout 600 "$@" 2>&1 | tee "$ctest_log"
ctest_status=${PIPESTATUS[0]}
set -e
phase_done ctest
# "100% tests passed, 0 tests failed out of 222" and the skipped list, as ctest prints them.
tests=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$ctest_log" | tail -n 1)
failed_tests=$(sed -n 's/.*, \([0-9]*\) tests failed out of.*/\1/p' "$ctest_log" | tail -n 1)
skipped=$(grep -c '(Skipped)' "$ctest_log" || true)
runs="" suite_failed=""
if [[ $ctest_status -eq 0 && $# -eq 0 ]]; then
  # The smoke suite: every symptom scenario must still reproduce and every fix still clear it.
  set +e
  build/harness/faultline suite scenarios/suites/smoke.yaml -j 2 --results build/suites \
    --junit build/suites/smoke-junit.xml
  suite_status=$?
  set -e
  smoke=$(ls -td build/suites/*-smoke* | head -n 1)
  read -r runs suite_failed < <(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
print(len(s["cases"]), s["failed"])' "$smoke/summary.json")
  phase_done smoke
  # Its report, and the comparison with the committed baseline (a regression fails CI).
  build/harness/faultline report "$smoke"
  build/harness/faultline diff results/baselines/smoke.json "$smoke" --outcomes-only
  [[ $suite_status -eq 0 ]] || { echo "ci/test.sh: the smoke suite failed" >&2; exit 1; }
fi
total=$(( $(date +%s) - start ))
summary="ci/test.sh: finished in ${total} s on $(nproc) cores: install ${took[install]} s, build ${took[build]} s, ctest ${took[ctest]} s (${tests:-?} tests, ${failed_tests:-?} failed, ${skipped} skipped)"
[[ -n "$runs" ]] && summary+=", smoke ${took[smoke]} s (${runs} runs, ${suite_failed} failed)"
echo "$summary"
printf '{"total_s":%s,"cores":%s,"install_s":%s,"build_s":%s,"ctest_s":%s,"tests":%s,"tests_failed":%s,"tests_skipped":%s,"smoke_s":%s,"smoke_runs":%s,"smoke_failed":%s}\n' \
  "$total" "$(nproc)" "${took[install]}" "${took[build]}" "${took[ctest]}" "${tests:-null}" \
  "${failed_tests:-null}" "$skipped" "${took[smoke]:-null}" "${runs:-null}" "${suite_failed:-null}" \
  > build/ci-timing.json
exit "$ctest_status"
