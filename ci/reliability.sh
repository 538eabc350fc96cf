#!/usr/bin/env bash
# Reproduction rates: runs a suite N times (default: the smoke suite, 20 times) and counts, per
# scenario, how often the faulty variant reproduced its symptom and how often the fix variant
# cleared it.
#   ci/reliability.sh [N] [suite] [build-dir]
set -euo pipefail
N="${1:-20}"
SUITE="${2:-scenarios/suites/smoke.yaml}"
BUILD="${3:-build}"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for ((i = 1; i <= N; i++)); do
  "$BUILD/harness/faultline" suite "$SUITE" -j 2 --results "$OUT" --json "$OUT/run$i.json" \
    > /dev/null 2>&1 || true
  echo "repetition $i of $N done" >&2
done
python3 - "$OUT" "$N" <<'PY'
import collections, glob, json, sys
rep = collections.defaultdict(lambda: [0, 0])  # name -> [faulty pass, fix pass]
files = glob.glob(sys.argv[1] + "/run*.json")
if len(files) != int(sys.argv[2]):
    print(f"warning: only {len(files)} of {sys.argv[2]} repetitions produced a summary")
for f in files:
    for c in json.load(open(f))["cases"]:
        rep[(c["symptom"], c["scenario"])][c["variant"] == "fix"] += c["outcome"] == "pass"
n = len(files)
print(f"{'symptom':<7} {'scenario':<34} {'reproduced':>11} {'fix clears':>11}")
for (sym, name), (a, b) in sorted(rep.items()):
    print(f"{sym:<7} {name:<34} {a:>8}/{n} {b:>8}/{n}")
PY
