#!/usr/bin/env bash
# Overhead of the harness + probe on a real PyTorch job (issue 21): the DDP job of
# workloads/torch/ddp_train.py on 2 CPU ranks (gloo), alone (plain processes with the env://
# contract, --no-probe) and under `faultline run` as a command workload reporting every step,
# section and collective through the probe, alternated ROUNDS times in the same run. Each run
# prints its ranks' median step time (between consecutive step ends, first step left out); the
# ratio harness/alone of the medians over rounds is the overhead (the target: within 2%). Wall
# time on a shared machine follows its load; the ranks' CPU time per step (all threads of the
# process, the probe's heartbeat thread included) is printed beside it as the steadier figure.
# Usage: bench/torch_probe_overhead.sh [build dir] [rounds] [steps]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
steps=${3:-200}
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "torch_probe_overhead: $py has no torch"; exit 77; }
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d /tmp/faultline-bench-XXXX)
trap 'rm -rf "$out"' EXIT
job=(--steps "$steps" --batch 64 --hidden 512 --print-every 0)
cat > "$out/bench.yaml" <<YAML
name: torch-overhead
topology: {ranks: 2, dp: 2}
workload:
  kind: command
  command: ["$py", "{source_dir}/workloads/torch/ddp_train.py", "--steps", "$steps", "--batch", "64",
            "--hidden", "512", "--print-every", "0"]
timeouts: {comm_ms: 60000, run_s: 900}
expect: {oracle: completed}
YAML
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
: > "$out/alone.txt"; : > "$out/harness.txt"; : > "$out/alone-cpu.txt"; : > "$out/harness-cpu.txt"
for i in $(seq 1 "$rounds"); do
  port=$((20000 + RANDOM % 10000))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$py" "$src/workloads/torch/ddp_train.py" "${job[@]}" --no-probe > "$out/alone-$i-$r.log" 2>&1 &
  done
  wait
  cat "$out"/alone-"$i"-*.log | sed -n 's/.*median step \([0-9.]*\) s.*/\1/p' | median >> "$out/alone.txt"
  cat "$out"/alone-"$i"-*.log | sed -n 's/.*, cpu \([0-9.]*\) s/\1/p' | median >> "$out/alone-cpu.txt"
  "$build/harness/faultline" run "$out/bench.yaml" --results "$out/runs" --run-id "h$i" -q > /dev/null
  cat "$out"/runs/h"$i"/ranks/rank*/output.log | sed -n 's/.*median step \([0-9.]*\) s.*/\1/p' |
    median >> "$out/harness.txt"
  cat "$out"/runs/h"$i"/ranks/rank*/output.log | sed -n 's/.*, cpu \([0-9.]*\) s/\1/p' |
    median >> "$out/harness-cpu.txt"
  events=$(grep -c '"source":"rank"' "$out/runs/h$i/history.jsonl")
  printf 'round %d: alone %.5f s/step (cpu %.5f), harness+probe %.5f s/step (cpu %.5f; %d rank events)\n' \
    "$i" "$(tail -1 "$out/alone.txt")" "$(tail -1 "$out/alone-cpu.txt")" \
    "$(tail -1 "$out/harness.txt")" "$(tail -1 "$out/harness-cpu.txt")" "$events"
done
a=$(median < "$out/alone.txt"); h=$(median < "$out/harness.txt")
ac=$(median < "$out/alone-cpu.txt"); hc=$(median < "$out/harness-cpu.txt")
awk -v a="$a" -v h="$h" 'BEGIN {printf "median step wall: alone %.5f s, harness+probe %.5f s, ratio %.4f\n", a, h, h / a}'
awk -v a="$ac" -v h="$hc" 'BEGIN {printf "median step cpu:  alone %.5f s, harness+probe %.5f s, ratio %.4f\n", a, h, h / a}'
# The probe's own cost, measured in-process (CPU time, steadier than either run on a busy host):
# one Python event, and the events a step of this job sends (step, two sections, two collective).
FAULTLINE_PROBE_FILE="$out/cost.jsonl" PYTHONPATH="$src/python" "$py" - "$(grep -c '"kind":"step"' "$out/runs/h$rounds/history.jsonl")" \
  "$(grep -c '"source":"rank"' "$out/runs/h$rounds/history.jsonl")" <<'PY'
import sys, time
import faultline_probe as p
p.event("hello", {"world_size": 1})
n = 20000
t = time.process_time()
for i in range(n):
    p.collective("all_reduce", "started", "ddp", i, 82689, "float32")
per = (time.process_time() - t) / n
steps, events = int(sys.argv[1]), int(sys.argv[2])
print("probe event: %.1f us CPU (Python); the harness run sent %.1f events per step: %.0f us per step"
      % (per * 1e6, events / max(steps, 1), per * 1e6 * events / max(steps, 1)))
PY
