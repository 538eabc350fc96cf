#!/usr/bin/env bash
# Launch + rendezvous time of N ranks under each launcher: from the harness's first launch event
# to the last rank's "layout" event (world checked, MPI world built, groups split), read from the
# run history. Usage: bench/harness_launch.sh [build dir] [ranks...]
# LAUNCHERS (default "local local-tree mpirun"): local-tree is the local launcher with
# FAULTLINE_MPI_JOIN=tree (MPI singletons join pairwise in log2(ranks) rounds, not one by one).
# Each line also prints the time against the issue's targets (32 ranks ready <= 3 s with any
# launcher, 128 with mpirun <= 5 s); nothing is asserted.
set -euo pipefail
build=${1:-build}; shift || true
sizes=${*:-8 16 32}
out=$(mktemp -d /tmp/faultline-bench-XXXX)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for spec in ${LAUNCHERS:-local local-tree mpirun}; do
  launcher=${spec%-tree}
  join=chain
  [[ $spec == *-tree ]] && join=tree
  for n in $sizes; do
    "$build/harness/faultline" run scenarios/clean/clean-dp2-tp2.yaml --results "$out" \
      --run-id "$spec-$n" --set topology.ranks=$n --set topology.dp=$((n / 2)) \
      --set topology.launcher=$launcher --set env.FAULTLINE_MPI_JOIN=$join --set workload.steps=1 --set timeouts.run_s=120 >/dev/null
    python3 - "$out/$spec-$n/history.jsonl" "$spec" "$n" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
t0 = min(e["t_ns"] for e in ev if e["kind"] == "launch")
ready = [e["t_ns"] for e in ev if e["source"] == "rank" and e["kind"] == "layout"]
hello = [e["t_ns"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"]
n = int(sys.argv[3])
ready_s = (max(ready) - t0) / 1e9
target = 3.0 if n <= 32 else 5.0 if sys.argv[2] == "mpirun" else None
vs = f", {ready_s / target:4.2f} x the {target:.0f} s target" if target else ""
print(f"{sys.argv[2]:10s} {n:3d} ranks: all hello {(max(hello)-t0)/1e9:6.2f} s, "
      f"world ready {ready_s:6.2f} s ({len(ready)} ranks){vs}")
PY
  done
done
