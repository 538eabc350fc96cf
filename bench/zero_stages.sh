#!/usr/bin/env bash
# Step time of ZeRO-1/2/3 against stage 0 on dp 4, as ratios measured in one run, and each
# stage's peak memory per category on rank 0 (fl-train --memory-report). The stages run
# interleaved, ROUNDS times, so load on the machine falls on all of them alike; the ratio is the
# median step time of a stage over the median of stage 0 (steps after the first two of each run).
# Further arguments go to every fl-train run (e.g. --precision bf16).
#   bench/zero_stages.sh [build-dir] [rounds] [fl-train args...]
set -euo pipefail
BUILD="${1:-build}"
ROUNDS="${2:-3}"
EXTRA=("${@:3}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ARGS=(--model small --dp 4 --micro-batch 1 --seq-len 16 --steps 12 --memory-report)
for round in $(seq 1 "$ROUNDS"); do
  for zero in 0 1 2 3; do
    MASTER_PORT=$((20000 + RANDOM % 20000)) mpirun --oversubscribe --bind-to none -np 4 \
      "$BUILD/workloads/train/fl-train" "${ARGS[@]}" "${EXTRA[@]}" --zero "$zero" \
      --metrics "$TMP/z$zero.r$round.jsonl" > "$TMP/z$zero.r$round.out"
  done
done
python3 - "$TMP" "$ROUNDS" <<'PY'
import glob, json, re, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
times, mem = {}, {}
for z in range(4):
    t = []
    for r in range(1, rounds + 1):
        t += [json.loads(l)["step_time_s"] for l in open(f"{tmp}/z{z}.r{r}.jsonl")][2:]
    times[z] = statistics.median(t)
    out = open(f"{tmp}/z{z}.r1.out").read()
    line = re.search(r"memory rank 0:(.*)", out).group(1)
    mem[z] = {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", line)}
print("| stage | step ms (median) | ratio to stage 0 |")
print("|---|---|---|")
for z in range(4):
    print(f"| ZeRO-{z} | {times[z]*1e3:.1f} | {times[z]/times[0]:.2f} |")
print()
cols = ["params", "grads", "optimizer", "activations", "buffers", "gathers", "model_states", "peak"]
print("| stage | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for z in range(4):
    print(f"| ZeRO-{z} | " + " | ".join(f"{mem[z][c]/2**20:.2f}" for c in cols) + " |")
PY
