#!/usr/bin/env bash
# The main job: a 4-rank collective check (every op's result checked, throughput against raw MPI)
# and short 4-rank training smokes (an MLP over DP, the GPT over DP x TP). Later issues make this
# the smoke suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -x build/bench/fl-bench-collectives ] || [ ! -x build/workloads/train/fl-train ]; then
  bash ci/build.sh default
else
  cmake --build build -j "$(nproc)"
fi
MPIRUN=(mpirun --oversubscribe --bind-to none -np 4)
mkdir -p results
for op in all_reduce reduce_scatter all_gather broadcast; do
  echo "== collective check: $op, 4 ranks"
  "${MPIRUN[@]}" build/bench/fl-bench-collectives -o "$op" -b 1K -e 4M -J "results/collectives-$op.json"
done
echo "== training smoke: data-parallel MLP, 4 ranks"
"${MPIRUN[@]}" build/workloads/train/fl-dp-smoke --steps 100
echo "== training smoke: GPT tiny, dp 2 x tp 2, 60 steps"
"${MPIRUN[@]}" build/workloads/train/fl-train --dp 2 --tp 2 --micro-batch 4 --steps 60
echo "main: PASS"
