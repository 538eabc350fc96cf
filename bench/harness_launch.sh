#!/usr/bin/env bash
# Launch + rendezvous time of N ranks under each launcher: from the harness's first launch event
# to the last rank's "layout" event (world checked, MPI world built, groups split), read from the
# run history. Usage: bench/harness_launch.sh [build dir] [ranks...]
set -euo pipefail
build=${1:-build}; shift || true
sizes=${*:-8 16 32}
out=$(mktemp -d /tmp/faultline-bench-XXXX)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for launcher in ${LAUNCHERS:-local mpirun}; do
  for n in $sizes; do
    "$build/harness/faultline" run scenarios/clean/clean-dp2-tp2.yaml --results "$out" \
      --run-id "$launcher-$n" --set topology.ranks=$n --set topology.dp=$((n / 2)) \
      --set topology.launcher=$launcher --set workload.steps=1 --set timeouts.run_s=120 >/dev/null
    python3 - "$out/$launcher-$n/history.jsonl" "$launcher" "$n" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
t0 = min(e["t_ns"] for e in ev if e["kind"] == "launch")
ready = [e["t_ns"] for e in ev if e["source"] == "rank" and e["kind"] == "layout"]
hello = [e["t_ns"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"]
print(f"{sys.argv[2]:7s} {int(sys.argv[3]):3d} ranks: all hello {(max(hello)-t0)/1e9:6.2f} s, "
      f"world ready {(max(ready)-t0)/1e9:6.2f} s ({len(ready)} ranks)")
PY
  done
done
