#!/usr/bin/env bash
# Step time and tokens/s of the GPT training step per layout, tiny and small configs, on this
# machine (ranks oversubscribe the cores beyond 2). Medians over the steps after the first two.
#   bench/train_layouts.sh [build-dir]
set -euo pipefail
BUILD="${1:-build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
run() {  # model ranks args...
  local model=$1 np=$2; shift 2
  local f="$TMP/m.jsonl"
  MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun --oversubscribe --bind-to none -np "$np" \
    "$BUILD/workloads/train/fl-train" --model "$model" --steps 12 --metrics "$f" "$@" > /dev/null
  python3 - "$f" "$model" "$np" "$*" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
t = statistics.median(r["step_time_s"] for r in rows)
tok = statistics.median(r["tokens_per_s"] for r in rows)
peak = max(r["mem_peak"] for r in rows) / 2**20
print(f"{sys.argv[2]:6} {sys.argv[3]:>3} {sys.argv[4]:46} {t*1e3:9.2f} {tok:10.0f} {peak:9.2f}")
PY
}
printf "%-6s %3s %-46s %9s %10s %9s\n" model np layout "step ms" "tokens/s" "peak MiB"
for model in tiny small; do
  run $model 1 --micro-batch 8
  run $model 2 --dp 2 --micro-batch 4
  run $model 2 --tp 2 --micro-batch 8
  run $model 2 --pp 2 --micro-batch 2 --grad-accum 4
  run $model 2 --dp 2 --zero 3 --micro-batch 4
  run $model 4 --dp 2 --tp 2 --micro-batch 4
  run $model 4 --dp 2 --pp 2 --micro-batch 2 --grad-accum 2
done
