#!/usr/bin/env bash
# Reproduction rates: runs a suite N times (default: the smoke suite, 20 times) and counts, per
# scenario and seed, how often the faulty variant reproduced its symptom and how often the fix
# variant cleared it (clean scenarios: how often they finished cleanly). Run directories of
# passing runs are deleted as it goes; failed ones are kept and listed at the end.
#   ci/reliability.sh [N] [suite] [build-dir] [results-dir]
set -euo pipefail
N="${1:-20}"
SUITE="${2:-scenarios/suites/smoke.yaml}"
BUILD="${3:-build}"
OUT="${4:-results/reliability/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
for ((i = 1; i <= N; i++)); do
  "$BUILD/harness/faultline" suite "$SUITE" -j 2 --results "$OUT" --json "$OUT/run$i.json" \
    > "$OUT/run$i.log" 2>&1 || true
  python3 - "$OUT/run$i.json" <<'PY' || true
import json, shutil, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    if c["outcome"] == "pass" and c.get("run_dir"):
        shutil.rmtree(c["run_dir"], ignore_errors=True)
PY
  echo "repetition $i of $N done" >&2
done
python3 - "$OUT" "$N" <<'PY'
import collections, glob, json, sys
rep = collections.defaultdict(lambda: [0, 0, 0, 0])  # key -> [faulty pass, faulty n, fix pass, fix n]
failed = []
files = sorted(glob.glob(sys.argv[1] + "/run*.json"))
if len(files) != int(sys.argv[2]):
    print(f"warning: only {len(files)} of {sys.argv[2]} repetitions produced a summary")
for f in files:
    for c in json.load(open(f))["cases"]:
        r = rep[(c["symptom"] or "clean", c["scenario"], c["seed"])]
        k = 2 if c["variant"] == "fix" else 0
        r[k] += c["outcome"] == "pass"
        r[k + 1] += 1
        if c["outcome"] != "pass":
            failed.append(f'{c["scenario"]} [{c["variant"]}] seed {c["seed"]}: '
                          f'{c["explanation"]} ({c["run_dir"]})')
print(f"{'symptom':<7} {'scenario':<36} {'seed':>5} {'reproduced':>11} {'fix clears':>11}")
for (sym, name, seed), (a, an, b, bn) in sorted(rep.items()):
    fix = f"{b}/{bn}" if bn else "-"
    print(f"{sym:<7} {name:<36} {seed:>5} {f'{a}/{an}':>11} {fix:>11}")
print(f"\n{len(failed)} failed runs (kept):")
for f in failed:
    print("  " + f)
PY
echo "results: $OUT" >&2
