#!/usr/bin/env bash
# Overhead of the harness + probe on a real PyTorch job (issue 21: step time within 2% of the job
# alone, measured in the same run). The DDP job of workloads/torch/ddp_train.py on 2 CPU ranks
# (gloo) runs PAIRS times alone (two plain processes with the env:// contract, --no-probe) and
# PAIRS times under `faultline run` as a command workload reporting every step, section and
# bucket all-reduce through the probe, interleaved in pairs (ABBA: odd pairs alone first, even
# pairs harness first, so a drift of the host's load falls on both sides alike). Each run prints
# its ranks' median and 10th-percentile step time (between consecutive step ends, the first step
# left out), wall and CPU (all threads of the rank, the probe's heartbeat thread included); a
# run's figure is the mean of its two ranks'. The overhead is the median over pairs of the
# per-pair ratio harness/alone, for each of the four, with its interquartile range and a
# bootstrap 90% interval of that median (2000 resamples of the pairs). The 10th percentile is the
# step that other processes did not disturb: on a busy host it follows the job's own cost, where
# the median follows the load. The load average is printed with every pair: the interval, not
# one ratio, says whether 2% can be told apart from the noise.
#
# A harness run that fails, or is not done within the scenario's run_s (120 s) plus a margin, is
# reported and its pair left out; the run directories are kept (the path is printed) whenever
# one did. Then bench/torch_probe_micro.py measures the probe's own cost in-process (CPU per event,
# per wrapped all_reduce and per DDP step with the probe's comm hook).
# Usage: bench/torch_probe_overhead.sh [build dir] [pairs] [steps]   (defaults: build 16 100)
set -euo pipefail
build=${1:-build}
pairs=${2:-16}
steps=${3:-100}
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || { echo "torch_probe_overhead: $py has no torch"; exit 77; }
src=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d /tmp/faultline-bench-XXXX)
trap 'if [ -e "$out/keep" ]; then echo "run directories kept in $out"; else rm -rf "$out"; fi' EXIT
job=(--steps "$steps" --batch 64 --hidden 512 --print-every 0)
cat > "$out/bench.yaml" <<YAML
name: torch-overhead
topology: {ranks: 2, dp: 2}
workload:
  kind: command
  command: ["$py", "{source_dir}/workloads/torch/ddp_train.py", "--steps", "$steps", "--batch", "64",
            "--hidden", "512", "--print-every", "0"]
timeouts: {comm_ms: 60000, run_s: 120}
expect: {oracle: completed}
YAML
# "wall cpu p10wall p10cpu" of one run: the mean over its two ranks of their median step (wall),
# CPU per step, and the 10th percentiles of both.
figures() {
  sed -n 's/.*median step \([0-9.]*\) s, cpu \([0-9.]*\) s; p10 step \([0-9.]*\) s, cpu \([0-9.]*\) s.*/\1 \2 \3 \4/p' "$@" |
    awk '{for (k = 1; k <= 4; k++) v[k] += $k; n++}
         END {if (n == 2) printf "%.6f %.6f %.6f %.6f\n", v[1] / n, v[2] / n, v[3] / n, v[4] / n}'
}
alone() {
  local i=$1 port=$((20000 + RANDOM % 10000))
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 300 "$py" "$src/workloads/torch/ddp_train.py" "${job[@]}" --no-probe \
      > "$out/alone-$i-$r.log" 2>&1 &
  done
  wait || true
  figures "$out"/alone-"$i"-*.log
}
harness() {
  local i=$1 rc=0
  timeout 200 "$build/harness/faultline" run "$out/bench.yaml" --results "$out/runs" \
    --run-id "h$i" -q > "$out/harness-$i.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    touch "$out/keep"  # (a subshell: a variable would not outlive it)
    echo "pair $i: faultline run exited $rc ($out/runs/h$i, $out/harness-$i.log)" >&2
    return
  fi
  figures "$out"/runs/h"$i"/ranks/rank*/output.log
}
: > "$out/pairs.txt"
echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg); $pairs pairs of $steps-step runs"
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) = 1 ]; then a=$(alone "$i"); h=$(harness "$i"); else h=$(harness "$i"); a=$(alone "$i"); fi
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [ -z "$a" ] || [ -z "$h" ]; then
    echo "pair $i: left out (alone '${a}', harness '${h}'), load $load"
    continue
  fi
  echo "$a $h $load" >> "$out/pairs.txt"
  read -r aw ac _ _ hw hc _ <<< "$a $h"
  events=$(grep -c '"source":"rank"' "$out/runs/h$i/history.jsonl" || true)
  awk -v i="$i" -v aw="$aw" -v ac="$ac" -v hw="$hw" -v hc="$hc" -v l="$load" -v e="$events" 'BEGIN {
    printf "pair %2d: alone %.2f ms (cpu %.2f), harness+probe %.2f ms (cpu %.2f): wall %.3f cpu %.3f; load %s; %d rank events\n",
      i, aw * 1e3, ac * 1e3, hw * 1e3, hc * 1e3, hw / aw, hc / ac, l, e }'
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$out/pairs.txt" <<'PY'
import random, statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
if len(rows) < 2:
    sys.exit("torch_probe_overhead: fewer than 2 complete pairs")
def q(v, p):  # linear interpolation between closest ranks
    v = sorted(v); k = (len(v) - 1) * p; f = int(k)
    return v[f] + (v[min(f + 1, len(v) - 1)] - v[f]) * (k - f)
rng = random.Random(21)
# columns: alone wall, cpu, p10 wall, p10 cpu; harness the same; load
for name, a in (("wall", 0), ("cpu", 1), ("p10 wall", 2), ("p10 cpu", 3)):
    r = [row[a + 4] / row[a] for row in rows]
    boot = [statistics.median(rng.choices(r, k=len(r))) for _ in range(2000)]
    print("step %-8s harness+probe / alone over %d pairs: median %.4f, IQR %.4f-%.4f, "
          "bootstrap 90%% of the median %.4f-%.4f (alone %.3f ms, harness %.3f ms)"
          % (name, len(r), statistics.median(r), q(r, .25), q(r, .75), q(boot, .05), q(boot, .95),
             statistics.median(x[a] for x in rows) * 1e3,
             statistics.median(x[a + 4] for x in rows) * 1e3))
print("load average over the pairs: %.1f-%.1f" % (min(x[8] for x in rows), max(x[8] for x in rows)))
PY
"$py" "$src/bench/torch_probe_micro.py" "$src"
