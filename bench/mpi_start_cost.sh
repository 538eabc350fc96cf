#!/usr/bin/env bash
# What starting N MPI processes with mpirun costs on this machine, without the harness:
#   bench/mpi_start_cost.sh [ranks...]          (default ranks: 1 32 128; REPS=2 rounds)
# Each round runs bench/mpi_start_cost.c under four settings, one after the other (so a busy
# machine weighs on all four alike):
#   defaults  mpirun --oversubscribe --bind-to none, Open MPI's defaults
#   slack     the same, under a 5 ms timer slack (fl-train's ranks raise theirs while they join the
#             world, FAULTLINE_MPI_START_SLACK_US; here set on mpirun, which the ranks inherit)
#   mca       slack + the harness's MCA parameters for one machine (harness/launch/mpi_tuning.cpp:
#             pml ob1, osc ^ucx, btl ^openib,ofi)
#   harness   mca + the harness's environment for one machine (same file: hwloc without its
#             plugins and I/O discovery) — what the harness gives its MPI ranks
# and prints, per run: ready (first rank's start to the last past one barrier), how far apart
# mpirun started the ranks, the CPU per rank in MPI_Init (getrusage in each rank), and the CPU of
# the whole job (mpirun and every rank to its exit: /usr/bin/time's user + system). The last is
# what two cores must get through, so (job CPU / cores) is a floor for the wall time of a start.
# Keep the two lists below in step with harness/launch/mpi_tuning.cpp. Nothing is asserted.
set -euo pipefail
sizes=${*:-1 32 128}
out=$(mktemp -d /tmp/faultline-startcost-XXXX)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpicc -O1 "$(dirname "$0")/mpi_start_cost.c" -o "$out/cost"
mca=(--mca pml ob1 --mca osc ^ucx --mca btl ^openib,ofi)
hwloc=(HWLOC_PLUGINS_BLACKLIST=hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml
       HWLOC_COMPONENTS=-linuxio)
slack=(python3 -c 'import ctypes, os, sys
ctypes.CDLL(None).prctl(29, ctypes.c_ulong(5000000), 0, 0, 0)
os.execvp(sys.argv[1], sys.argv[1:])')
one() {  # one NAME N [wrapper words...] -- [mpirun options...]
  local name=$1 n=$2 wrap=() opts=() load line cpu
  shift 2
  while [[ $1 != -- ]]; do wrap+=("$1"); shift; done
  shift
  opts=("$@")
  load=$(cut -d' ' -f1 /proc/loadavg)
  START_COST_EXIT=1 /usr/bin/time -o "$out/time" -f '%U %S' timeout -k 5 180 \
    "${wrap[@]}" mpirun --oversubscribe --bind-to none "${opts[@]}" -np "$n" "$out/cost" \
    >"$out/stdout" 2>"$out/stderr" || true
  line=$(grep '^ranks' "$out/stdout" || echo "no result ($(head -c 200 "$out/stderr"))")
  cpu=$(awk '{printf "%.2f", $1 + $2}' "$out/time" 2>/dev/null || echo "?")
  printf '%-8s %4d: %s; job cpu %s s; load %s\n' "$name" "$n" "$line" "$cpu" "$load"
}
for n in $sizes; do
  for round in $(seq "${REPS:-2}"); do
    one defaults "$n" env --
    one slack "$n" "${slack[@]}" --
    one mca "$n" "${slack[@]}" -- "${mca[@]}"
    one harness "$n" env "${hwloc[@]}" "${slack[@]}" -- "${mca[@]}"
  done
done
