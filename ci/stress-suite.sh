#!/usr/bin/env bash
# Runs suites while a CPU hog keeps every core busy, and counts wrong verdicts: a faulty variant
# that did not reproduce its symptom, a fix variant that did not clear it, a clean run that
# failed. A verdict must not depend on how busy the machine is, so the answer must be 0.
#
#   ci/stress-suite.sh                       # the smoke suite 5 times under one hog per core
#   ci/stress-suite.sh --runs 2 --nightly    # 2 smoke rounds, then the nightly suite once
#   ci/stress-suite.sh --suite scenarios/suites/detectors.yaml --runs 1 --hogs 4
#
# Options: --runs N (smoke rounds, default 5), --nightly (also the nightly suite: 3 seeds + clean
# runs), --suite FILE (another suite instead of smoke), --hogs N (busy loops, default: one per
# core), --jobs N (runs at the same time, default 2), --results DIR (default build/stress).
# Not part of CI (it takes an hour on 2 cores). Exit status 1 when any verdict was wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5 nightly=0 suite=scenarios/suites/smoke.yaml hogs=$(nproc) jobs=2 results=build/stress
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --nightly) nightly=1; shift ;;
    --suite) suite="$2"; shift 2 ;;
    --hogs) hogs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --results) results="$2"; shift 2 ;;
    *) echo "stress-suite: unknown option '$1' (allowed: --runs N, --nightly, --suite FILE," \
         "--hogs N, --jobs N, --results DIR)" >&2; exit 2 ;;
  esac
done
for n in "$runs" "$hogs" "$jobs"; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "stress-suite: '$n' is not a count" >&2; exit 2; }
done
[[ -f "$suite" ]] || { echo "stress-suite: $suite: no such suite file" >&2; exit 2; }
faultline=build/harness/faultline
[[ -x "$faultline" ]] || { echo "stress-suite: $faultline not built (run ci/build.sh)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$results"

# The hog: one busy loop per core, at the same priority as the suite, for the whole session.
hog_pids=()
stop_hogs() { [[ ${#hog_pids[@]} -eq 0 ]] || kill "${hog_pids[@]}" 2>/dev/null || true; }
trap stop_hogs EXIT INT TERM
for ((i = 0; i < hogs; i++)); do
  bash -c 'while :; do :; done' &
  hog_pids+=("$!")
done
echo "stress-suite: $hogs busy loop(s) on $(nproc) core(s); load average $(cut -d' ' -f1-3 /proc/loadavg)"

total_wrong=0 total_runs=0
log="$results/stress-$(date +%Y%m%d-%H%M%S).tsv"
printf "round\tsuite\truns\twrong\tseconds\tload1\tsuite_dir\n" > "$log"
one_suite() {  # name, suite file, extra args...
  local name="$1" file="$2"; shift 2
  local t0=$SECONDS before dir n wrong
  before=$( (ls -d "$results"/*/ 2>/dev/null || true) | wc -l)
  "$faultline" suite "$file" -j "$jobs" --results "$results" "$@" > "$results/last.txt" 2>&1 || true
  dir=$(ls -td "$results"/*/ | head -n 1 | sed 's#/$##')
  if [[ $( (ls -d "$results"/*/ 2>/dev/null || true) | wc -l) -le $before || ! -f "$dir/summary.json" ]]; then
    echo "stress-suite: $name produced no summary (see $results/last.txt)" >&2
    tail -n 20 "$results/last.txt" >&2
    exit 2
  fi
  read -r n wrong < <(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
cases = s["cases"]
print(len(cases), sum(1 for c in cases if c["outcome"] in ("fail", "error", "unknown")))' "$dir/summary.json")
  total_wrong=$((total_wrong + wrong)) total_runs=$((total_runs + n))
  printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$name" "$file" "$n" "$wrong" $((SECONDS - t0)) \
    "$(cut -d' ' -f1 /proc/loadavg)" "$dir" >> "$log"
  echo "stress-suite: $name: $n runs, $wrong wrong verdict(s), $((SECONDS - t0)) s, load $(cut -d' ' -f1 /proc/loadavg)"
  if [[ "$wrong" != 0 ]]; then
    python3 -c '
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if c["outcome"] in ("fail", "error", "unknown"):
        print("  WRONG", c["scenario"], c["variant"], "seed", c["seed"], "-", c["outcome"] + ":", c["explanation"])' \
      "$dir/summary.json"
  fi
}
for ((r = 1; r <= runs; r++)); do one_suite "round $r" "$suite"; done
if [[ "$nightly" == 1 ]]; then one_suite "nightly" scenarios/suites/nightly.yaml; fi
echo "stress-suite: $total_runs runs under $hogs busy loop(s), $total_wrong wrong verdict(s); table $log"
[[ "$total_wrong" == 0 ]]
