#!/usr/bin/env bash
# ctest slurm.*: a real single-node Slurm (harness/slurm/local-slurm.sh: munged, slurmctld and
# slurmd with a generated configuration, loopback only), started for the case and stopped after
# it (no daemon may be left).
#   tests/harness/slurm_test.sh FAULTLINE_BIN SOURCE_DIR CASE
# CASE: sbatch_run     the harness as a batch job (docs/cluster.md's template): 4 ranks under
#                      mpirun inside the allocation; the run, named after the job, passes
#       srun_launcher  the same job with topology.launcher: srun: one job step, every rank's
#                      output attributed to it, the run passes; the ranks' MPI took one
#                      machine's settings and (more ranks than CPUs) yielding from srun's
#                      environment (rank 0's mpi_show_mca_params); one multi-program line
#                      (0-3, the rank as %t) started all four
#       small_allocation  an allocation of 2 tasks for 4 ranks: exit 2 naming both, no launch
#       no_allocation  launcher srun outside any allocation: exit 2 before any launch (needs no
#                      Slurm at all)
#       srun_agents    launcher srun: the run's agent comes up as a job step of its own on the
#                      node (agent_up before any launch) and SIGKILLs rank 1 at step 3 (via: agent);
#                      no step of the run is left once it ends
#       srun_hosts     launcher srun with logical topology.hosts [a]: a lands on the allocation's
#                      node (slurm_allocation records it), its agent signals the rank; hosts [a, b]
#                      on a 1-node allocation: exit 2 naming both counts, nothing started
#       srun_faults    launcher srun, without hosts and with hosts [a]: a memory limit on rank 1
#                      and a CPU quota on rank 0 from step 2 go through the node's agent (its
#                      cgroups take the rank's pid, the quota throttles it, both healed through
#                      it; a file fault on rank 1 at step 5 goes to the agent running it and is
#                      put back); shm without hosts is refused at load (exit 2, nothing started)
#       srun_shm       launcher srun: shm with hosts [a] (the ranks' multi-program lines enter
#                      a's agent's mount namespace: bus errors in the shm transport) and
#                      disk_full without hosts (every node's agent mounts it: ENOSPC on the
#                      checkpoint), both through the agents and healed there
#       mpirun_agents  launcher mpirun over topology.hosts [this node] inside the allocation: the
#                      agent comes up as a job step (srun), never through ssh (an ssh on PATH that
#                      fails and leaves a mark), and SIGKILLs rank 1 at step 3 (via: agent)
#       suite          faultline suite --executor slurm: a small suite (two scenarios and their
#                      fixes) as one job array gathers the same outcomes as the local executor,
#                      `faultline diff` finds no change; --partition nope and a stopped
#                      controller: exit 2, nothing submitted
#       suite_cancel   a task of the array cancelled by Slurm (scancel) is an error naming the
#                      array task, the case and CANCELLED; the other case passes; SIGTERM to the
#                      suite cancels its array: the case is interrupted, exit 4, no job left
#       sacct          the same Slurm with accounting (a private MariaDB and slurmdbd, started
#                      and stopped here): array tasks the controller has purged are resolved
#                      through the real sacct (tests/harness/slurm_sacct_test.sh)
# Exit 77 (skipped) without root, slurm-wlm or munge (sacct: also slurmdbd and mariadb-server).
set -euo pipefail
faultline=$1 src=$2 case=$3
tmp=$(mktemp -d /tmp/flslurm.XXXXXX)
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$src/tests/harness/history_lib.sh"
scenario() {  # launcher
  cat >"$tmp/s.yaml" <<Y
name: slurm-$1
topology: {ranks: 4, launcher: $1}
workload: {steps: 3}
expect: {oracle: completed}
Y
  # Open MPI's rank 0 prints the MCA parameters it took from its environment.
  [[ $1 == srun ]] && echo "env: {OMPI_MCA_mpi_show_mca_params: enviro}" >>"$tmp/s.yaml"
  true
}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [[ $case == no_allocation ]]; then
  trap 'rm -rf "$tmp"' EXIT
  scenario srun
  set +e
  out=$(env -u SLURM_JOB_ID -u SLURM_NTASKS "$faultline" run "$tmp/s.yaml" --results "$tmp/r" \
    --run-id none -q 2>&1)
  status=$?
  set -e
  echo "$out"
  [[ $status -eq 2 ]] || fail "exit $status, want 2"
  grep -Eq "launcher srun: (not inside a Slurm allocation|no srun on PATH)" <<<"$out" ||
    fail "no clear error"
  [[ $(count_events "$tmp/r/none/history.jsonl" launch) == 0 ]] || fail "something was launched"
  exit 0
fi

cleanup() { bash "$src/harness/slurm/local-slurm.sh" down "$tmp/slurm" || true; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 1' TERM INT
up=(up "$tmp/slurm")
[[ $case == sacct ]] && up+=(accounting)
set +e
conf=$(bash "$src/harness/slurm/local-slurm.sh" "${up[@]}")
status=$?
set -e
[[ $status -eq 77 ]] && exit 77
[[ $status -eq 0 ]] || { cat "$tmp"/slurm/*.log >&2 || true; exit 1; }
eval "$conf"
# The cluster down, no daemon of it left, and the case passed.
finish() {
  bash "$src/harness/slurm/local-slurm.sh" down "$tmp/slurm"
  for f in "$tmp"/slurm/*.pid; do [[ -e $f ]] && fail "a daemon is left: $f"; done
  exit 0
}

if [[ $case == suite || $case == suite_cancel || $case == sacct ]]; then
  if [[ $case == sacct ]]; then
    bash "$src/tests/harness/slurm_sacct_test.sh" "$faultline" "$src" "$tmp"
  else
    bash "$src/tests/harness/slurm_suite_test.sh" "$faultline" "$src" "$case" "$tmp"
  fi
  bash "$src/harness/slurm/local-slurm.sh" down "$tmp/slurm"
  for f in "$tmp"/slurm/*.pid; do [[ -e $f ]] && fail "a daemon is left: $f"; done
  if [[ $case == suite ]]; then
    # The controller is gone now (SLURM_CONF still names it): refused before anything.
    set +e
    out=$("$faultline" suite "$tmp/suite.yaml" --executor slurm --results "$tmp/gone" 2>&1)
    status=$?
    set -e
    echo "$out"
    [[ $status -eq 2 ]] || fail "a suite without a controller: exit $status, want 2"
    grep -q "the Slurm controller does not answer (scontrol ping" <<<"$out" || fail "no clear error"
    [[ ! -e $tmp/gone ]] || fail "a suite directory without a controller"
  fi
  exit 0
fi

if [[ $case == srun_agents || $case == srun_hosts || $case == srun_faults || $case == srun_shm ]]; then
  # submit ID...: one batch job runs $tmp/ID.yaml for each ID in turn (each sbatch --wait costs
  # seconds of polls) -> each run's exit status in $tmp/ID.rc, its output in $tmp/ID.out; the
  # job lists its own steps once the runs have ended, and none may be left.
  submit() {
    local job=$1-job
    cat >"$tmp/$job.sh" <<J
#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for id in $*; do
  "$faultline" run "$tmp/\$id.yaml" --results "$tmp/r" --run-id "\$id" > "$tmp/\$id.out" 2>&1
  echo \$? > "$tmp/\$id.rc"
done
squeue -h -s -j "\$SLURM_JOB_ID" -o "%i %j" | grep -v -e '\.batch' -e '\.extern' > "$tmp/$job.steps" || true
J
    chmod +x "$tmp/$job.sh"
    timeout 200 sbatch --wait --overcommit --time=3 -N1 -n 2 -o "$tmp/$job.out" "$tmp/$job.sh" >/dev/null || true
    cat "$tmp/$job.out" || true
    for id; do
      cat "$tmp/$id.out" || true
      [[ -f $tmp/$id.rc ]] || fail "the job did not run $id"
    done
    [[ ! -s $tmp/$job.steps ]] || fail "steps left after $*: $(cat "$tmp/$job.steps")"
  }
  node=$(hostname -s)
  if [[ $case == srun_shm ]]; then
    cat >"$tmp/shm.yaml" <<Y
name: slurm-srun-shm-hosts
topology: {ranks: 2, launcher: srun, hosts: [a]}
workload: {model: small, steps: 12, args: ["--seq-len", "16"]}
env: {FAULTLINE_SHM_TRANSPORT: "1", FAULTLINE_SHM_BUFFER_BYTES: "25165824"}
faults:
  - shm: {size: 256k}
timeouts: {run_s: 100, comm_ms: 20000}
expect: {oracle: error_signature,
         pattern: "bus error \\\\(SIGBUS\\\\) in .* the filesystem behind /dev/shm could not back the page"}
Y
    cat >"$tmp/disk.yaml" <<Y
name: slurm-srun-disk
topology: {ranks: 2, launcher: srun}
workload: {steps: 4, checkpoint: {every: 2}}
faults:
  - disk_full: {path: checkpoints, size: 16k}
timeouts: {comm_ms: 5000, run_s: 100}
expect: {oracle: checkpoint_error}
Y
    before=$(findmnt -rn -o SOURCE /dev/shm)
    submit shm disk
    for id in shm disk; do
      [[ $(cat "$tmp/$id.rc") == 0 ]] || fail "the run of $id: exit $(cat "$tmp/$id.rc")"
    done
    python3 - "$tmp/r" "$node" <<'PY'
import json, sys
r, node = sys.argv[1:]
def events(run):
    return [json.loads(l) for l in open(f"{r}/{run}/history.jsonl")]
ev = events("shm")
kinds = [e["kind"] for e in ev]
inj = [e for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "shm"]
assert len(inj) == 1 and inj[0]["data"]["via"] == "agent" and inj[0]["data"]["host"] == "a", inj
assert ev.index(inj[0]) < kinds.index("launch"), "the namespace came after the launch"
a = inj[0]["data"]["agent"]
assert a["size_bytes"] == 256 << 10 and a["namespace_pid"] > 0, a
# The ranks started inside the agent's namespace: srun's multi-program lines ran nsenter.
prog = open(f"{r}/shm/multiprog").read().splitlines()
assert len(prog) == 1 and prog[0].startswith("0-1 "), prog  # one line for both ranks (%t)
assert f"nsenter --mount=/proc/{a['namespace_pid']}/ns/mnt" in prog[0], prog
bus = {e["rank"] for e in ev if e["kind"] == "output" and "bus error (SIGBUS)" in e["data"].get("line", "")}
assert bus, "no bus error in the shm transport"
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "shm"]
assert len(healed) == 1 and healed[0]["via"] == "agent" and healed[0]["host"] == "a", healed
ev = events("disk")
inj = [e["data"] for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "disk_full"]
assert len(inj) == 1 and inj[0]["via"] == "agent" and inj[0]["host"] == node, inj
assert inj[0]["agent"]["mount"] == f"{r}/disk/checkpoints" and inj[0]["agent"]["fs"] == "tmpfs", inj
err = {e["rank"] for e in ev if e["source"] == "rank" and e["kind"] == "error"
       and "No space left on device" in json.dumps(e["data"])}
assert err, "no ENOSPC"
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "disk_full"]
assert len(healed) == 1 and healed[0]["via"] == "agent" and healed[0]["host"] == node, healed
for run in ("shm", "disk"):
    assert not [e for e in events(run) if e["kind"] in ("heal_error", "fault_failed", "agent_lost")]
print("srun_shm ok: bus errors on ranks", sorted(bus), "ENOSPC on ranks", sorted(err))
PY
    [[ $(findmnt -rn -o SOURCE /dev/shm) == "$before" ]] || fail "this machine's /dev/shm changed"
    ! findmnt -rn "$tmp/r/disk/checkpoints" >/dev/null || fail "the disk_full mount is left"
    finish
  fi
  if [[ $case == srun_faults ]]; then
    # One batch job runs the three scenarios in turn (each sbatch --wait costs seconds of polls).
    for id in nohosts hosts; do
      hosts=""
      [[ $id == hosts ]] && hosts=", hosts: [a]"
      cat >"$tmp/$id.yaml" <<Y
name: slurm-srun-faults-$id
topology: {ranks: 2, launcher: srun$hosts}
workload: {steps: 12, checkpoint: {every: 2}}
faults:
  - {memory_limit: 1g, rank: 1}
  - {cpu_quota: 0.02, rank: 0, step: 2}
  - {file: {path: checkpoints/step_2/shard_rank1.bin, action: corrupt}, rank: 1, step: 5}
timeouts: {comm_ms: 60000, run_s: 100}
expect: {oracle: completed}
Y
    done
    # Without hosts Slurm picks the rank's node at launch: shm cannot start the rank inside its
    # node's agent's mount namespace, so it is refused before anything starts.
    cat >"$tmp/shm.yaml" <<Y
name: slurm-srun-shm
topology: {ranks: 2, launcher: srun}
workload: {steps: 3}
faults:
  - shm: {size: 1m}
Y
    submit nohosts hosts shm
    for id in nohosts hosts; do
      host=$node
      [[ $id == hosts ]] && host=a
      [[ $(cat "$tmp/$id.rc") == 0 ]] || fail "the run of $id: exit $(cat "$tmp/$id.rc")"
      python3 - "$tmp/r/$id" "$host" <<'PY'
import json, sys
d, host = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
kinds = [e["kind"] for e in ev]
hello = {e["rank"]: e["data"]["pid"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"}
inj = {e["data"]["fault"]: e for e in ev if e["kind"] == "fault_injected"}
lim = inj["memory_limit"]["data"]
assert lim["via"] == "agent" and lim["host"] == host and lim["agent"]["limit"] == 1 << 30, lim
assert ev.index(inj["memory_limit"]) < kinds.index("launch"), "the limit came after the launch"
healed = {e["data"]["fault"]: e["data"] for e in ev if e["kind"] == "fault_healed"}
mem = healed["memory_limit"]
# The node's agent moved rank 1's process, and no other rank's, into its group, which the kernel
# charged (its peak, reported when the agent removed the group).
assert hello[1] in mem["pids"] and hello[0] not in mem["pids"], (hello, mem)
assert mem["max_usage"] > 0 and mem["oom_kills"] == 0, mem
q = inj["cpu_quota"]["data"]
assert q["via"] == "agent" and q["host"] == host and q["at_step"] >= 2, q
cpu = [e["data"] for e in ev if e["kind"] == "cgroup_cpu" and e["rank"] == 0]
assert cpu and cpu[0]["via"] == "agent" and hello[0] in cpu[0]["pids"], (hello, cpu)
assert hello[1] not in cpu[0]["pids"] and cpu[0]["nr_throttled"] > 0, cpu
for f in ("memory_limit", "cpu_quota"):
    assert healed[f]["via"] == "agent" and healed[f]["host"] == host, healed
    assert healed[f]["removed"] is True, healed
# The file fault on rank 1 went to the agent of the node running it (without hosts: found by
# its pid), which kept a copy and put it back.
fi = inj["file"]["data"]
assert fi["via"] == "agent" and fi["host"] == host and fi["path"] == "checkpoints/step_2/shard_rank1.bin", fi
assert healed["file"]["via"] == "agent" and healed["file"]["path"] == fi["path"], healed
assert not [e for e in ev if e["kind"] in ("heal_error", "fault_failed", "agent_lost")]
assert json.load(open(d + "/verdict.json"))["outcome"] == "pass"
print(host, "ok: memory", mem["cgroup"], "pids", mem["pids"], "max_usage", mem["max_usage"],
      "cpu throttled", cpu[0]["nr_throttled"], "of", cpu[0]["nr_periods"])
PY
    done
    [[ $(cat "$tmp/shm.rc") == 2 ]] || fail "shm under srun: exit $(cat "$tmp/shm.rc"), want 2"
    grep -q "faults\\[0\\].shm: shm cannot go through the agents with topology.launcher: srun and no topology.hosts" \
      "$tmp/shm.out" || fail "no clear error for shm"
    [[ $(count_events "$tmp/r/shm/history.jsonl" launch) == 0 &&
       $(count_events "$tmp/r/shm/history.jsonl" agents_step) == 0 ]] ||
      fail "something was started for shm"
    finish
  fi
  hosts=""
  [[ $case == srun_hosts ]] && hosts=", hosts: [a]"
  cat >"$tmp/kill.yaml" <<Y
name: slurm-srun-agent-kill
topology: {ranks: 2, launcher: srun$hosts}
workload: {steps: 2000}
faults:
  - {signal: KILL, rank: 1, step: 3}
timeouts: {comm_ms: 5000}
expect: {oracle: exit_class, ranks: [1]}
Y
  submit kill
  [[ $(cat "$tmp/kill.rc") == 0 ]] || fail "the run of kill: exit $(cat "$tmp/kill.rc")"
  python3 - "$tmp/r/kill" "$node" "$case" <<'PY'
import json, sys
d, node, case = sys.argv[1:]
v = json.load(open(d + "/verdict.json"))
assert v["outcome"] == "pass", v
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
kinds = [e["kind"] for e in ev]
host = "a" if case == "srun_hosts" else node
alloc = [e["data"] for e in ev if e["kind"] == "slurm_allocation"]
assert alloc and alloc[0]["nodes"] == [node], alloc
if case == "srun_hosts":
    assert alloc[0]["hosts"] == {"a": node}, alloc
up = [e["data"] for e in ev if e["kind"] == "agent_up"]
assert [u["host"] for u in up] == [host], up
assert kinds.index("agents_ready") < kinds.index("launch"), "agents after the launch"
sig = [e["data"] for e in ev if e["kind"] == "fault_injected" and e["data"].get("fault") == "signal"]
assert sig and sig[0]["via"] == "agent" and sig[0]["host"] == host and sig[0]["delivered"], sig
assert [e["data"]["host"] for e in ev if e["kind"] == "agent_stopped"] == [host]
print(case, "ok: agent", up[0], "signal", sig[0])
PY
  if [[ $case == srun_hosts ]]; then
    cat >"$tmp/two.yaml" <<Y
name: slurm-srun-two-hosts
topology: {ranks: 2, launcher: srun, hosts: [a, b]}
workload: {steps: 3}
expect: {oracle: completed}
Y
    submit two
    [[ $(cat "$tmp/two.rc") == 2 ]] || fail "two hosts on one node: exit $(cat "$tmp/two.rc"), want 2"
    grep -q "topology.hosts lists 2 host(s) but the allocation has 1 node(s) ($node)" "$tmp/two.out" ||
      fail "no clear error"
    [[ $(count_events "$tmp/r/two/history.jsonl" launch) == 0 &&
       $(count_events "$tmp/r/two/history.jsonl" agents_step) == 0 ]] ||
      fail "something was started"
  fi
  finish
fi

if [[ $case == mpirun_agents ]]; then
  node=$(hostname -s)
  mkdir -p "$tmp/bin"
  printf '#!/bin/sh\necho "$*" >> %s/ssh-called\nexit 255\n' "$tmp" >"$tmp/bin/ssh"
  chmod +x "$tmp/bin/ssh"
  cat >"$tmp/ma.yaml" <<Y
name: slurm-mpirun-agents
topology: {ranks: 2, launcher: mpirun, hosts: [$node=127.0.0.1]}
workload: {steps: 2000}
faults:
  - {signal: KILL, rank: 1, step: 3}
timeouts: {comm_ms: 5000}
expect: {oracle: exit_class, ranks: [1]}
Y
  cat >"$tmp/ma-job.sh" <<J
#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PATH="$tmp/bin:\$PATH"
"$faultline" run "$tmp/ma.yaml" --results "$tmp/r" --run-id ma > "$tmp/ma.out" 2>&1
echo \$? > "$tmp/ma.rc"
J
  chmod +x "$tmp/ma-job.sh"
  timeout 200 sbatch --wait --overcommit --time=3 -N1 -n 2 -o "$tmp/ma-job.out" "$tmp/ma-job.sh" >/dev/null || true
  cat "$tmp/ma-job.out" "$tmp/ma.out" || true
  [[ $(cat "$tmp/ma.rc") == 0 ]] || fail "the run: exit $(cat "$tmp/ma.rc")"
  [[ ! -e $tmp/ssh-called ]] || fail "ssh was used: $(cat "$tmp/ssh-called")"
  python3 - "$tmp/r/ma" "$node" <<'PY'
import json, sys
d, node = sys.argv[1:]
assert json.load(open(d + "/verdict.json"))["outcome"] == "pass"
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
kinds = [e["kind"] for e in ev]
alloc = [e["data"] for e in ev if e["kind"] == "slurm_allocation"]
assert alloc and alloc[0]["hosts"] == {node: node} and alloc[0]["agents_via"] == "srun", alloc
step = [e["data"] for e in ev if e["kind"] == "agents_step"]
assert step and step[0]["argv"][:2] == ["srun", "--overlap"], step
assert [u["data"]["host"] for u in ev if u["kind"] == "agent_up"] == [node]
assert kinds.index("agents_ready") < kinds.index("launch"), "agents after the launch"
assert {e["data"]["launcher"] for e in ev if e["kind"] == "launch"} == {"mpirun"}
sig = [e["data"] for e in ev if e["kind"] == "fault_injected" and e["data"].get("fault") == "signal"]
assert sig and sig[0]["via"] == "agent" and sig[0]["host"] == node and sig[0]["delivered"], sig
relay = [e["data"] for e in ev if e["kind"] == "telemetry_relay"]
assert relay and relay[0]["on"], relay
print("mpirun_agents ok: agent", step[0]["argv"][:2], "signal", sig[0])
PY
  finish
fi

launcher=mpirun tasks=4 want=0
case $case in
sbatch_run) ;;
srun_launcher) launcher=srun ;;
small_allocation) launcher=srun tasks=2 want=2 ;;
*) fail "unknown case $case" ;;
esac
scenario "$launcher"
cat >"$tmp/job.sh" <<J
#!/bin/bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id "job\$SLURM_JOB_ID" -q
J
chmod +x "$tmp/job.sh"
set +e
# --overcommit: more tasks than the node's CPUs (CI-sized machines); the time limit and the
# timeout end a stuck job inside ctest's own limit, so the trap still stops the daemons.
out=$(timeout 150 sbatch --wait --parsable --overcommit --time=2 -N1 -n "$tasks" \
  -o "$tmp/job-%j.out" "$tmp/job.sh")
status=$?
set -e
job=${out%%;*}
cat "$tmp"/job-*.out || true
run=$tmp/r/job$job
[[ -f $run/verdict.json ]] || fail "no run directory job$job"
if [[ $want -ne 0 ]]; then
  [[ $status -ne 0 ]] || fail "the job succeeded"
  grep -q "the allocation has 2 task(s) (SLURM_NTASKS) but topology.ranks is 4" "$tmp/job-$job.out" ||
    fail "no clear error"
  [[ $(count_events "$run/history.jsonl" launch) == 0 ]] || fail "something was launched"
else
  [[ $status -eq 0 ]] || fail "the batch job failed"
  python3 - "$run" "$launcher" "$(nproc)" <<'PY'
import json, os, sys
d, launcher, cpus = sys.argv[1], sys.argv[2], int(sys.argv[3])
v = json.load(open(d + "/verdict.json"))
assert v["outcome"] == "pass", v
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
steps = {e["rank"] for e in ev if e["source"] == "rank" and e["kind"] == "step"}
assert steps == {0, 1, 2, 3}, steps
launch = {e["data"]["launcher"] for e in ev if e["kind"] == "launch"}
assert launch == {launcher}, launch
# Every rank's own output reached its log (srun --label / mpirun --tag-output split back).
for r in range(4):
    assert os.path.getsize(f"{d}/ranks/rank{r}/output.log") > 0, r
if launcher == "srun":
    # One node: srun's environment gave the ranks one machine's Open MPI settings, and yielding
    # when the node has more ranks (4) than CPUs; rank 0's MPI_Init took them from there.
    want = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_osc": "^ucx", "OMPI_MCA_btl": "^openib,ofi",
            "HWLOC_PLUGINS_BLACKLIST": "hwloc_pci,hwloc_opencl,hwloc_gl,hwloc_xml_libxml",
            "HWLOC_COMPONENTS": "-linuxio"}
    if 4 > cpus:
        want["OMPI_MCA_mpi_yield_when_idle"] = "1"
    # One multi-program line for the four ranks: the rank's number and directory as %t.
    prog = open(f"{d}/multiprog").read().splitlines()
    assert len(prog) == 1 and prog[0].startswith(f"0-3 env -C {d}/ranks/rank%t "), prog
    assert " RANK=%t " in prog[0] and " LOCAL_RANK=%t " in prog[0], prog
    got = [e["data"]["mpi_env"] for e in ev if e["kind"] == "launch"]
    assert got == [want] * 4, got
    out = open(f"{d}/ranks/rank0/output.log").read()
    for line in ["pml=ob1 (environment)", "btl=^openib,ofi (environment)"] + (
            ["mpi_yield_when_idle=true (environment)"] if 4 > cpus else []):
        assert line in out, (line, out[-2000:])
print(launcher, "run ok")
PY
fi
bash "$src/harness/slurm/local-slurm.sh" down "$tmp/slurm"
for f in "$tmp"/slurm/*.pid; do [[ -e $f ]] && fail "a daemon is left: $f"; done
true
