#!/usr/bin/env bash
# Step-time cost of the injector and telemetry on a clean run, as a ratio in the same session:
#   A: fl-train built with -DFAULTLINE_FAULT_SITES=OFF, no telemetry, launched by mpirun;
#   B: the normal build under `faultline run` (launcher mpirun): every rank streams telemetry
#      (hello, steps, every collective state change, heartbeats) to the harness over gRPC and
#      writes its event file, with a plan armed whose entries never match (so every site takes
#      the armed path: context built, handler called, filters checked).
# A and B alternate REPS times; the figure is median(B step) / median(A step), steps 3.. of each.
#   bench/injector_overhead.sh [build-dir] [nosites-build-dir]   (REPS, STEPS, MODELS env)
set -euo pipefail
BUILD="${1:-build}"
NOSITES="${2:-build-nosites}"
REPS="${REPS:-5}"
STEPS="${STEPS:-40}"
MODELS="${MODELS:-tiny small}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ ! -x "$NOSITES/workloads/train/fl-train" ]]; then
  cmake -S . -B "$NOSITES" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFAULTLINE_FAULT_SITES=OFF \
    -DFAULTLINE_CUDA=OFF -DFAULTLINE_GRPC=OFF > /dev/null
  cmake --build "$NOSITES" --target fl-train > /dev/null
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PLAN='comm.all_reduce[rank=99]=drop;optimizer.step[rank=99]=nan;memory.alloc[rank=99]=oom;data.fetch[rank=99]=error'
for model in $MODELS; do
  cat > "$TMP/s.yaml" <<YAML
name: overhead-$model
topology: {ranks: 2, dp: 2, launcher: mpirun}
workload: {model: $model, steps: $STEPS, args: [--metrics, $TMP/b.jsonl]}
faults:
  - plan: "$PLAN"
expect: {oracle: completed}
YAML
  : > "$TMP/a.all"; : > "$TMP/b.all"
  for ((i = 0; i < REPS; i++)); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun --oversubscribe \
      --bind-to none -np 2 "$NOSITES/workloads/train/fl-train" --model "$model" --dp 2 \
      --steps "$STEPS" --metrics "$TMP/a.jsonl" > /dev/null
    tail -n +3 "$TMP/a.jsonl" >> "$TMP/a.all"
    "$BUILD/harness/faultline" run "$TMP/s.yaml" --results "$TMP/runs" > /dev/null
    tail -n +3 "$TMP/b.jsonl" >> "$TMP/b.all"
  done
  python3 - "$TMP/a.all" "$TMP/b.all" "$model" "$REPS" <<'PY'
import json, statistics, sys
med = lambda f: statistics.median(json.loads(l)["step_time_s"] for l in open(f))
a, b = med(sys.argv[1]), med(sys.argv[2])
print(f"{sys.argv[3]:6} dp2  sites off, no telemetry {a*1e3:7.3f} ms | sites armed + telemetry "
      f"{b*1e3:7.3f} ms | ratio {b/a:.3f} ({sys.argv[4]} alternating runs each)")
PY
done
