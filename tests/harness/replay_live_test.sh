#!/usr/bin/env bash
# ctest dataset.replay_equals_live (issue 35): real runs with detectors attached (a frozen rank the
# hang detector must find by its own timeout, a collective timeout the log and comm detectors
# find, and a slow-checkpoint decoy that must draw no alarm), exported as a dataset, then replayed
# offline to the same detectors at 20x over the control plane: every run's scoring record (class,
# detected, false alarm, alarms, symptom / stage / rank right) must equal the live one
# (`faultline score --offline --check-live` exits 1 otherwise). The latency differences are
# printed, not compared: they carry each tool's reaction time stretched by the speed.
#   tests/harness/replay_live_test.sh FAULTLINE_BIN SOURCE_DIR [SPEED]
set -euo pipefail
faultline=$1
src=$2
speed=${3:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/scen"
for s in symptoms/4.11-frozen-rank symptoms/2.2-first-collective-timeout clean/decoy-slow-checkpoint; do
  cp "$src/scenarios/$s.yaml" "$tmp/scen/"
done
dets=(--detector hang --detector comm --detector logs)
"$faultline" suite "$tmp/scen" -j 2 --results "$tmp/suites" "${dets[@]}" ||
  echo "(a run did not pass its oracle: it is excluded live and in the replay alike)"
suite=$(ls -d "$tmp/suites"/*/)
"$faultline" export "$suite" -o "$tmp/ds"
test -f "$tmp/ds/manifest.json"
"$faultline" score --offline "$tmp/ds" "${dets[@]}" --speed "$speed" --check-live \
  --replays "$tmp/replays"
