#!/usr/bin/env bash
# The main job: a 4-rank collective check (every op's result checked, throughput against raw MPI)
# and a short 4-rank data-parallel training smoke. Later issues make this the smoke suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ ! -x build/bench/fl-bench-collectives ] || [ ! -x build/workloads/train/fl-dp-smoke ]; then
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
echo "main: PASS"
