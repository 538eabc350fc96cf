#!/usr/bin/env bash
# How long N ranks take to be ready, and the same machine's reference in the same window.
#   bench/harness_launch.sh [build dir] [ranks...]        (default ranks: 8 32 128)
# Ready: from the harness's first `launch` history event (it starts the launcher) to the last
# rank's `layout` event (each rank has connected its telemetry, said hello, passed the store's
# world check, joined the MPI world and split its DP/TP groups). "all hello" is the same up to
# the last rank's `hello`. Both use the events' own time_unix_ns (one machine, one clock), not
# when the harness received them: a rank whose telemetry stream did not connect has its events
# merged from its events.jsonl at the end of the run ("streamed" counts the ranks whose events
# all came live, from the harness's `telemetry` events).
# Reference, taken right before each run with the same mpirun: `mpirun -np N mpi_hello`
# (MPI_Init, one barrier, MPI_Finalize; bench/mpi_hello.c) with Open MPI's defaults, wall time.
# Each line prints ready / that after every reference: a busy machine slows both sides, so the
# ratio holds where the seconds do not. "before launch" is the harness's first event to its first
# launch (under srun: the allocation's check and the agents' job step). (`mpirun -np 32 true` hung in 2 of 2 tries here, so it is not a reference.)
# A second reference runs the same under a 5 ms timer slack (what fl-train's ranks use while they
# join the world, FAULTLINE_MPI_START_SLACK_US; set here on mpirun, which its ranks inherit).
# A third reference, "tuned", is the same bare program with everything the harness gives its
# mpirun on one machine: the 5 ms slack, the MCA parameters and the hwloc environment of
# harness/launch/mpi_tuning.cpp (keep the two lists below in step with it). ready / tuned is then
# what the harness and fl-train add above the cheapest bare start this mpirun offers. The
# references' wall time also holds MPI_Finalize and mpirun's end (about 1 s more than their ranks'
# own ready time at 128 ranks here), which "ready" does not, so the ratios flatter the harness.
# Each line ends with the ranks' mean CPU (their hello/layout cpu_ms and world_cpu_ms fields).
# SETS adds `--set key=value` words to each run (e.g. SETS="--set env.FAULTLINE_MPI_START_SLACK_US=0").
# Ranks in network namespaces (root): SETS="--set topology.network=namespaces".
# Nothing is asserted.
# LAUNCHERS (default "mpirun local"): local is the local launcher (since stop 72 every MPI world
# direct-launched; FAULTLINE_MPI_START=singleton measures singletons joining pairwise in log2(ranks)
# rounds); "auto" is the harness's own choice (topology.launcher: auto: mpirun above 8
# ranks for this clean scenario). FAULTLINE_BIN overrides the harness binary (to compare two
# builds; an older build's local launcher joined one by one unless SETS has
# "--set env.FAULTLINE_MPI_JOIN=tree").
# LAUNCHERS=srun: the srun launcher, in a Slurm allocation. Outside one the whole bench runs again
# inside `salloc -N1 -n MAX --overcommit` (MAX the largest size; SALLOC_ARGS adds words, e.g. a
# partition); inside one (sbatch, salloc: SLURM_JOB_ID set) it needs MAX tasks. Its references,
# each run in the same allocation right before the harness: bare `mpirun -np N mpi_hello` as above
# (the issue's reference), `srun --mpi=pmix -n N mpi_hello` with Slurm's and Open MPI's defaults
# ("bare srun": what Slurm itself costs) and the same with the environment the harness gives its
# srun ranks on one node ("srun tuned": keep the list below in step with srun_mpi_env,
# harness/launch/slurm_alloc.cpp; no timer slack: srun's tasks are slurmstepd's children). Every mpirun here (references and the mpirun launcher) runs
# with the SLURM_* variables removed, as outside Slurm: inside an allocation Open MPI's mpirun
# would start its daemons through srun instead.
# Since issue 39 the local launcher starts MPI worlds above 8 ranks (since stop 72, of 2 or
# more) through the harness's own PMIx
# server (direct launch, `mpi_start: pmix` in the launch events) rather than as joining singletons.
set -euo pipefail
build=${1:-build}; shift || true
sizes=${*:-8 32 128}
if [[ " ${LAUNCHERS:-} " == *" srun "* && -z ${SLURM_JOB_ID:-} ]]; then
  max=$(printf '%s\n' $sizes | sort -n | tail -1)
  # shellcheck disable=SC2086  # SALLOC_ARGS is words
  exec salloc -N1 -n "$max" --overcommit ${SALLOC_ARGS:-} "$0" "$build" $sizes
fi
faultline=${FAULTLINE_BIN:-$build/harness/faultline}
out=$(mktemp -d /tmp/faultline-bench-XXXX)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpicc -O1 "$(dirname "$0")/mpi_hello.c" -o "$out/mpi_hello"
secs() {  # wall seconds of a command (a reference that hangs counts as its 60 s limit)
  local t0 t1
  t0=$(date +%s%N)
  timeout -k 5 60 "$@" >/dev/null 2>&1 || true
  t1=$(date +%s%N)
  echo "scale=3; ($t1 - $t0) / 1000000000" | bc
}
slack=(python3 -c 'import ctypes, os, sys
ctypes.CDLL(None).prctl(29, ctypes.c_ulong(5000000), 0, 0, 0)
os.execvp(sys.argv[1], sys.argv[1:])')
mca=(--mca pml ob1 --mca osc ^ucx --mca btl ^openib,ofi)
hwloc=(HWLOC_PLUGINS_BLACKLIST=hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml
       HWLOC_COMPONENTS=-linuxio)
# The srun launcher's ranks on one node: Open MPI's mpi_yield_when_idle (mpirun sets it itself
# when it oversubscribes; srun's direct launch does not), the MCA parameters and hwloc above.
srun_tuned=(OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx
            OMPI_MCA_btl=^openib,ofi "${hwloc[@]}")
bare=(env)  # a command as outside Slurm (no SLURM_* variables)
for v in ${!SLURM_*}; do bare+=(-u "$v"); done
runs=0
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for spec in ${LAUNCHERS:-mpirun local}; do
  launcher=$spec
  for n in $sizes; do
    refs=("reference=$(secs "${bare[@]}" mpirun --oversubscribe --bind-to none -np "$n" \
      "$out/mpi_hello")")
    run=("${bare[@]}" "$faultline")
    if [[ $spec == srun ]]; then
      refs+=("bare srun=$(secs srun --mpi=pmix -n "$n" "$out/mpi_hello")")
      refs+=("srun tuned=$(secs env "${srun_tuned[@]}" srun --mpi=pmix -n "$n" "$out/mpi_hello")")
      run=("$faultline")
    else
      refs+=("reference with 5 ms slack=$(secs "${bare[@]}" "${slack[@]}" mpirun --oversubscribe \
        --bind-to none -np "$n" "$out/mpi_hello")")
      refs+=("reference tuned=$(secs "${bare[@]}" "${hwloc[@]}" "${slack[@]}" mpirun --oversubscribe \
        --bind-to none "${mca[@]}" -np "$n" "$out/mpi_hello")")
    fi
    "${run[@]}" run scenarios/clean/clean-dp2-tp2.yaml --results "$out" \
      --run-id "$spec-$n-$((++runs))" --set topology.ranks=$n --set topology.dp=$((n / 2)) \
      --set topology.launcher=$launcher --set workload.steps=1 \
      --set timeouts.run_s=300 --set timeouts.rendezvous_ms=240000 ${SETS:-} >/dev/null || true
    python3 - "$out/$spec-$n-$runs/history.jsonl" "$spec" "$n" "${refs[@]}" <<'PY'
import json, sys
path, spec, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
refs = [(r.split("=")[0], float(r.split("=")[1])) for r in sys.argv[4:]]
ev = [json.loads(l) for l in open(path)]
t0 = min(e["time_unix_ns"] for e in ev if e["kind"] == "launch")
ready = [e["time_unix_ns"] for e in ev if e["source"] == "rank" and e["kind"] == "layout"]
hello = [e["time_unix_ns"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"]
# Before the launch (the harness's first event to its first launch): the control plane, and under
# srun the allocation's check and the agents' job step.
setup = f"; before launch {(t0 - min(e['time_unix_ns'] for e in ev)) / 1e9:.2f} s"
# CPU per rank (the ranks' own getrusage, carried by hello and layout): up to hello (exec,
# libraries, telemetry), in forming the world (MPI_Init, the world communicator), and in all up to
# layout (also the store's world check, the groups and building the model).
def mean_of(kind, key):
    v = [e["data"][key] for e in ev
         if e["source"] == "rank" and e["kind"] == kind and key in e["data"]]
    return sum(v) / len(v) if v else float("nan")
cpu = (f"; cpu per rank: to hello {mean_of('hello', 'cpu_ms'):.0f} ms, world "
       f"{mean_of('layout', 'world_cpu_ms'):.0f} ms, to ready {mean_of('layout', 'cpu_ms'):.0f} ms")
# Ranks whose events all reached the harness live (the rest came from their events.jsonl).
streamed = sum(1 for e in ev if e["kind"] == "telemetry" and e["data"].get("recovered_from_file") == 0)
if len(ready) < n:
    print(f"{spec:10s} {n:3d} ranks: only {len(ready)} ranks got ready (hello {len(hello)}); "
          + "; ".join(f"{name} {s:.2f} s" for name, s in refs))
    sys.exit(0)
ready_s = (max(ready) - t0) / 1e9
target = 3.0 if n <= 32 else 5.0 if spec == "mpirun" else None
vs = f", {ready_s / target:4.2f} x the {target:.0f} s target" if target else ""
print(f"{spec:10s} {n:3d} ranks: all hello {(max(hello) - t0) / 1e9:6.2f} s, ready {ready_s:6.2f} s"
      f"{vs}; " + "; ".join(f"{name} {s:.2f} s, ready / that {ready_s / s:.2f}" for name, s in refs)
      + f"; streamed {streamed}{setup}{cpu}")
PY
  done
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
