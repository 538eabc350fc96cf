#!/usr/bin/env bash
# ctest hosts.*: host faults applied by the host's own agent (handlers in faults/KIND.cpp) on
# hosts that are network and mount namespaces on this machine (harness/hosts/netns-hosts.sh).
#   tests/harness/hosts_faults_test.sh FAULTLINE_BIN SOURCE_DIR CASE
# CASE: memory  a memory limit on rank 2 (host 1) that leaks every step: host 1's agent makes the
#               cgroup, moves the rank in, and sees the kernel's OOM killer end it; the verdict is
#               the OOM kill of rank 2, and the cgroup is gone afterwards
#       disk    disk_full on rank 2's host: host 1's agent mounts a 16 KiB tmpfs on the run's
#               checkpoints there; only host 1's ranks fail to write their shards (host 0 writes to
#               the shared directory), and the mount is gone afterwards
#       files   a file fault on rank 2 deletes its checkpoint shard through host 1's agent once
#               the run ended; the restart from that checkpoint fails on the missing shard, and
#               the shard is back in place when the run is over
#       killed  host 1's agent is killed with its tmpfs mounted and a file truncated (exit 2,
#               heal_error): the harness puts the file back from the agent's copies on the shared
#               run directory, and the next run's agent on host 1 removes the mount
#       cpu     a CPU quota on rank 2 from step 2: host 1's agent makes the cpu cgroup, moves rank
#               2's process (and no other) in, sets the quota, and reports the kernel's throttling
#       shm     /dev/shm of 256 KiB for rank 2's host: host 1's agent holds a mount namespace with
#               the small tmpfs, its ranks start inside it and die of SIGBUS in the shared-memory
#               transport; host 0's ranks, this machine and host 1's own /dev/shm are untouched
#       hide    a library hidden from rank 2: host 1's agent links rank 2's plugin directory to
#               host 1's own plugin directory (which has a library this machine's has not), less
#               the hidden one, and rank 3's (same host) to all of it; rank 2 cannot load it,
#               and the link is back afterwards
#       input   a memory limit over hosts validates, with a device arena it is refused (no root)
# Each checks `via: agent` in the history and that nothing is left on any host: no process or
# agent of the run, no cgroup of it, no mount of it, no chain. Exit 77 (skipped) without root,
# ip netns, or a writable cgroup v1 memory hierarchy (memory) or cpu hierarchy (cpu).
set -euo pipefail
faultline=$1 src=$2 case=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
cgroot=${FAULTLINE_CGROUP_ROOT:-/sys/fs/cgroup/memory}
cpuroot=${FAULTLINE_CPU_CGROUP_ROOT:-/sys/fs/cgroup/cpu}
if [[ $case == input ]]; then
  # What the file alone tells (no root, no hosts): a memory limit needs rank processes, hosts or srun.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  check() {  # YAML, then "ok" or a text the error must contain
    printf '%s\n' "name: t" "$1" "expect: {oracle: completed}" >"$tmp/s.yaml"
    local out
    if out=$("$faultline" validate "$tmp/s.yaml" 2>&1); then
      [[ $2 == ok ]] || fail "accepted: $1"
    else
      [[ $2 != ok ]] || fail "refused: $1: $out"
      grep -qF -- "$2" <<<"$out" || fail "for '$1' want '$2', got: $out"
    fi
  }
  hosts='topology: {ranks: 2, launcher: mpirun, hosts: [a, b]}'
  check "$hosts"$'\nfaults: [{memory_limit: 300m, rank: 1}]' ok
  check "$hosts"$'\nfaults: [{disk_full: {path: checkpoints, size: 16k}, rank: 1}]' ok
  check "$hosts"$'\nfaults: [{cpu_quota: 0.1, rank: 1, step: 2}]' ok
  check $'topology: {ranks: 2, launcher: mpirun}\nfaults: [{cpu_quota: 0.1, rank: 1}]' \
    'topology.hosts or launcher srun (the agent of the rank'"'"'s host or node applies it)'
  check "$hosts"$'\nfaults: [{memory_limit: 300m, device_arena: 512m, rank: 1}]' \
    'faults[0].device_arena: a device arena is not supported with topology.hosts'
  check $'topology: {ranks: 2, launcher: mpirun}\nfaults: [{memory_limit: 300m, rank: 1}]' \
    'topology.hosts or launcher srun (the agent of the rank'"'"'s host or node applies it)'
  # launcher srun without hosts: every node's agent prepares a cgroup, the rank's node's acts; what
  # needs the rank's node before launch is refused naming the fault and the launcher.
  srun='topology: {ranks: 2, launcher: srun}'
  check "$srun"$'\nfaults: [{memory_limit: 300m, rank: 1}, {cpu_quota: 0.1, rank: 0, step: 2}]' ok
  check "$srun"$'\nfaults: [{shm: {size: 1m}}]' \
    'faults[0].shm: shm cannot go through the agents with topology.launcher: srun and no topology.hosts'
  check "$srun"$'\nfaults: [{disk_full: {size: 16k}, rank: 1}]' \
    'faults[0].rank: disk_full on one rank cannot go through the agents with topology.launcher: srun'
  echo "input ok"
  exit 0
fi
if [[ $case == memory && ! -w $cgroot/cgroup.procs ]]; then
  echo "SKIP: no writable cgroup v1 memory hierarchy at $cgroot"
  exit 77
fi
if [[ $case == cpu && ! -w $cpuroot/cgroup.procs ]]; then
  echo "SKIP: no writable cgroup v1 cpu hierarchy at $cpuroot"
  exit 77
fi
. "$src/tests/harness/hosts_lib.sh"
hosts_up f
topo="topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}"

case $case in
memory)
  cat >"$tmp/s.yaml" <<Y
name: hosts-memory
$topo
workload: {steps: 200}
faults:
  - {memory_limit: 250m, rank: 2}
  - plan: "optimizer.step[rank=2]=leak(20000000)"
timeouts: {comm_ms: 5000, run_s: 120}
expect: {oracle: exit_class, exit_class: oom_kill, ranks: [2]}
Y
  run_ok mem "rank 2's OOM kill was not judged"
  python3 - "$tmp/r/mem" "$h1" <<'PY'
import json, sys
d, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
inj = [e for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "memory_limit"]
assert len(inj) == 1 and inj[0]["rank"] == 2, inj
lim = inj[0]["data"]
assert lim["via"] == "agent" and lim["host"] == h1, lim
assert lim["cgroup"].endswith(".mem.rank2") and lim["agent"]["limit"] == 250 << 20, lim
first_launch = min(e["t_ns"] for e in ev if e["kind"] == "launch")
assert inj[0]["t_ns"] < first_launch, "the limit came after the launch"
oom = [e for e in ev if e["kind"] == "oom_kill"]
assert len(oom) == 1 and oom[0]["rank"] == 2 and oom[0]["data"]["kills"] >= 1, oom
assert oom[0]["data"]["via"] == "agent" and oom[0]["data"]["host"] == h1, oom
ex = [e["data"] for e in ev if e["kind"] == "rank_exit" and e["rank"] == 2]
assert ex and ex[0]["signaled"] and ex[0]["code"] == 9 and ex[0]["class"] == "signal", ex
assert "OOM killer" in ex[0]["note"] and ex[0]["pid"] > 0, ex
mem = [e["data"] for e in ev if e["kind"] == "cgroup_memory"]
assert mem and mem[0]["oom_kills"] >= 1 and 0 < mem[0]["max_usage"] <= 250 << 20, mem
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "memory_limit"]
assert len(healed) == 1 and healed[0]["via"] == "agent" and healed[0]["removed"] is True, healed
assert not [e for e in ev if e["kind"] in ("agent_lost", "heal_error")]
assert len(mem[0]["adopted_after_ms"]) >= 1, mem
print("memory ok:", lim["cgroup"], "kills", oom[0]["data"]["kills"], "max_usage", mem[0]["max_usage"],
      "moved in after (ms)", mem[0]["adopted_after_ms"])
PY
  nothing_left "$tmp/r/mem"
  ;;
disk)
  cat >"$tmp/s.yaml" <<Y
name: hosts-disk
$topo
workload: {steps: 4, checkpoint: {every: 2}}
faults:
  - disk_full: {path: checkpoints, size: 16k}
    rank: 2
timeouts: {comm_ms: 5000, run_s: 120}
expect: {oracle: checkpoint_error}
Y
  run_ok disk "the full disk was not judged a checkpoint error"
  python3 - "$tmp/r/disk" "$h1" <<'PY'
import json, sys
d, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
inj = [e["data"] for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "disk_full"]
assert len(inj) == 1 and inj[0]["via"] == "agent" and inj[0]["host"] == h1, inj
assert inj[0]["agent"]["mount"] == d + "/checkpoints" and inj[0]["agent"]["fs"] == "tmpfs", inj
# Only host 1's ranks (2, 3) ran out of space: host 0 writes to the shared directory.
err = {e["rank"] for e in ev if e["source"] == "rank" and e["kind"] == "error"
       and "No space left on device" in json.dumps(e["data"])}
assert err and err <= {2, 3}, err
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "disk_full"]
assert len(healed) == 1 and healed[0]["via"] == "agent" and healed[0]["host"] == h1, healed
assert healed[0]["path"] == d + "/checkpoints", healed
assert not [e for e in ev if e["kind"] in ("agent_lost", "heal_error")]
print("disk ok: ENOSPC on ranks", sorted(err))
PY
  nothing_left "$tmp/r/disk"
  ;;
files)
  cat >"$tmp/s.yaml" <<Y
name: hosts-files
$topo
workload: {steps: 4, checkpoint: {every: 4}}
faults:
  - file: {path: "checkpoints/step_4/shard_rank2.bin", action: delete}
    rank: 2
    at: exit
    restart: true
timeouts: {comm_ms: 5000, run_s: 120}
expect: {oracle: checkpoint_error, ranks: [2]}
Y
  run_ok files "the missing shard was not judged a checkpoint error"
  python3 - "$tmp/r/files" "$h1" <<'PY'
import json, os, sys
d, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
inj = [e for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "file"]
assert inj and all(e["data"]["via"] == "agent" and e["data"]["host"] == h1 for e in inj), inj
paths = [e["data"]["path"] for e in inj]
assert paths == ["checkpoints/step_4/shard_rank2.bin"], paths
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "file"]
assert sorted(h["path"] for h in healed) == sorted(paths), healed
assert all(h["via"] == "agent" for h in healed), healed
for p in paths:
    assert os.path.exists(os.path.join(d, p)), "not restored: " + p
assert not os.path.exists(os.path.join(d, ".faultline")), "backups left"
print("files ok:", paths)
PY
  nothing_left "$tmp/r/files"
  ;;
killed)
  # Host 1's agent is killed mid-run with its tmpfs mounted: it cannot unmount it, the run ends
  # with exit 2 and a heal_error naming the host; the next run's agent on host 1 removes it.
  cat >"$tmp/s.yaml" <<Y
name: hosts-agent-killed
$topo
workload: {steps: 100000}
faults:
  - disk_full: {path: checkpoints, size: 64m}
    rank: 2
  - file: {path: scenario.yaml, action: truncate, bytes: 5}
    rank: 2
    at: launch
timeouts: {run_s: 60}
expect: {oracle: completed}
Y
  "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id killed -q >"$tmp/out" 2>&1 &
  run=$!
  kill_agent_once_stepping killed "$h1" "$run"
  cat "$tmp/out"
  [[ $status -eq 2 ]] || fail "exit $status after losing an agent, want 2"
  has_event "$tmp/r/killed/history.jsonl" heal_error fault=disk_full host="$h1" ||
    fail "no heal_error naming $h1"
  mounts_on "$h1" | grep -qF "$tmp/r/killed/checkpoints" || fail "the killed agent's mount is not there"
  # The file its agent truncated was put back by the harness from the agent's copies.
  python3 - "$tmp/r/killed" "$h1" <<'PY'
import json, os, sys
d, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
cut = [e["data"] for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "file"]
assert len(cut) == 1 and cut[0]["via"] == "agent" and cut[0]["host"] == h1, cut
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "file"]
assert len(healed) == 1 and healed[0]["via"] == "harness" and healed[0]["path"] == "scenario.yaml", healed
assert os.path.getsize(d + "/scenario.yaml") == cut[0]["size"], "scenario.yaml not restored"
PY
  cat >"$tmp/n.yaml" <<Y
name: hosts-next
$topo
workload: {steps: 2}
expect: {oracle: completed}
Y
  "$faultline" run "$tmp/n.yaml" --results "$tmp/r" --run-id next -q || fail "the next run failed"
  grep -q "stale: unmounted $tmp/r/killed/checkpoints (its agent is gone)" "$tmp/r/next/helpers.log" ||
    { cat "$tmp/r/next/helpers.log"; fail "the next agent on $h1 did not remove the stale mount"; }
  nothing_left "$tmp/r/killed"
  nothing_left "$tmp/r/next"
  echo "agent_killed ok"
  ;;
cpu)
  cat >"$tmp/s.yaml" <<Y
name: hosts-cpu
$topo
workload: {steps: 8}
faults:
  - {cpu_quota: 0.02, rank: 2, step: 2}
timeouts: {comm_ms: 120000, run_s: 170}
expect: {oracle: completed}
Y
  run_ok cpu "the run under a CPU quota did not complete"
  python3 - "$tmp/r/cpu" "$h1" "$cpuroot" <<'PY'
import json, sys
d, h1, root = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
agent_pid = {e["data"]["host"]: e["data"]["pid"] for e in ev if e["kind"] == "agent_up"}
hello = {e["rank"]: e["data"]["pid"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"}
inj = [e for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "cpu_quota"]
assert len(inj) == 1 and inj[0]["rank"] == 2, inj
q = inj[0]["data"]
assert q["via"] == "agent" and q["host"] == h1 and q["at_step"] >= 2, q
# The group is the agent's (named after its pid and start time), in the cpu hierarchy of rank 2's
# host.
assert q["cgroup"].startswith("%s/faultline.%d-" % (root, agent_pid[h1])), (q, agent_pid)
assert q["cgroup"].endswith(".cpu.rank2") and q["agent"]["quota_us"] == 2000, q
cpu = [e for e in ev if e["kind"] == "cgroup_cpu"]
assert len(cpu) == 1 and cpu[0]["rank"] == 2, cpu
c = cpu[0]["data"]
assert c["via"] == "agent" and c["host"] == h1, c
# Rank 2's process, and no other rank's, was in the group, and the kernel throttled it.
assert hello[2] in c["pids"], (hello, c)
assert not set(c["pids"]) & {hello[r] for r in (0, 1, 3)}, (hello, c)
assert c["nr_periods"] > 0 and c["nr_throttled"] > 0, c
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "cpu_quota"]
assert len(healed) == 1 and healed[0]["via"] == "agent" and healed[0]["host"] == h1, healed
assert healed[0]["removed"] is True and healed[0]["cgroup"] == q["cgroup"], healed
assert not [e for e in ev if e["kind"] in ("agent_lost", "heal_error", "fault_failed")]
print("cpu ok:", q["cgroup"], "throttled", c["nr_throttled"], "of", c["nr_periods"], "periods")
PY
  nothing_left "$tmp/r/cpu"
  ;;
shm)
  # Rank 2's host gets a /dev/shm too small for its two ranks' transport segments.
  cat >"$tmp/s.yaml" <<Y
name: hosts-shm
$topo
workload: {model: small, steps: 12, args: ["--seq-len", "16"]}
env: {FAULTLINE_SHM_TRANSPORT: "1", FAULTLINE_SHM_BUFFER_BYTES: "25165824"}
faults:
  - shm: {size: 256k}
    rank: 2
timeouts: {run_s: 150, comm_ms: 20000}
expect: {oracle: error_signature,
         pattern: "bus error \\\\(SIGBUS\\\\) in .* the filesystem behind /dev/shm could not back the page"}
Y
  before=$(findmnt -rn -o SOURCE /dev/shm)
  h1_before=$(nsenter --mount="/run/faultline-hosts/$prefix/$h1.mnt" findmnt -rn -o SOURCE /dev/shm)
  run_ok shm "the small /dev/shm on $h1 was not judged a bus error in the shm transport"
  ns=$(python3 - "$tmp/r/shm" "$h1" <<'PY'
import json, sys
d, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
inj = [e["data"] for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "shm"]
assert len(inj) == 1 and inj[0]["via"] == "agent" and inj[0]["host"] == h1, inj
a = inj[0]["agent"]
assert a["path"] == "/dev/shm" and a["size_bytes"] == 256 << 10 and a["namespace_pid"] > 0, a
# Only host 1's ranks (2, 3) ran out of /dev/shm: a bus error in the shared-memory transport.
bus = {e["rank"] for e in ev if e["kind"] == "output" and "bus error (SIGBUS)" in e["data"].get("line", "")}
assert bus and bus <= {2, 3}, bus
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "shm"]
assert len(healed) == 1 and healed[0]["via"] == "agent" and healed[0]["host"] == h1, healed
assert not [e for e in ev if e["kind"] in ("agent_lost", "heal_error")]
print(a["namespace"])
PY
) || fail "shm history"
  echo "shm: the ranks' mount namespace was $ns"
  [[ $(findmnt -rn -o SOURCE /dev/shm) == "$before" ]] || fail "this machine's /dev/shm changed"
  [[ $(nsenter --mount="/run/faultline-hosts/$prefix/$h1.mnt" findmnt -rn -o SOURCE /dev/shm) == "$h1_before" ]] ||
    fail "$h1's own /dev/shm changed"
  [[ $ns != "$(readlink /proc/self/ns/mnt)" ]] || fail "the ranks' namespace is this machine's"
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/mnt" 2>/dev/null) != "$ns" ]] || fail "${p#/proc/} still holds the ranks' namespace"
  done
  nothing_left "$tmp/r/shm"
  echo "shm ok"
  ;;
hide)
  # Host 1's plugin directory is its own (bind-mounted over the build's in host 1's mount
  # namespace): the build's libraries and one this machine has not.
  plugins=$(cd "$(dirname "$faultline")/../plugins" && pwd)
  mkdir "$tmp/h1plugins"
  cp "$plugins"/*.so "$tmp/h1plugins/"
  cp "$plugins/libfl_fused_adamw.so" "$tmp/h1plugins/libfl_hostonly.so"
  nsenter --mount="/run/faultline-hosts/$prefix/$h1.mnt" mount --bind "$tmp/h1plugins" "$plugins"
  [[ ! -e $plugins/libfl_hostonly.so ]] || fail "host 1's plugin directory shows here"
  cat >"$tmp/s.yaml" <<Y
name: hosts-hide
$topo
workload: {steps: 3, plugins: [fused_adamw]}
faults:
  - {hide: libfl_fused_adamw.so, rank: 2}
timeouts: {comm_ms: 5000, run_s: 120}
expect: {oracle: error_signature, ranks: [2],
         pattern: "cannot load kernel plugin 'fused_adamw': .*cannot open shared object file"}
Y
  run_ok hide "the hidden library was not judged rank 2's load error"
  python3 - "$tmp/r/hide" "$h1" "$plugins" <<'PY'
import json, os, sys
d, h1, plugins = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
inj = [e for e in ev if e["kind"] == "fault_injected" and e["data"]["fault"] == "hide"]
assert len(inj) == 1 and inj[0]["rank"] == 2, inj
h = inj[0]["data"]
links = d + "/ranks/rank2/plugins"
assert h["via"] == "agent" and h["host"] == h1 and h["dir"] == links, h
# The agent listed host 1's plugin directory, not this machine's.
assert "libfl_hostonly.so" in h["agent"]["libraries"], h
assert "libfl_hostonly.so" not in os.listdir(plugins)
assert os.path.islink(links + "/libfl_hostonly.so"), os.listdir(links)
# Rank 3 shares host 1: its directory links every library host 1 has (HidePlugin.also_link);
# host 0's ranks load from the plugin directory itself.
for lib in ("libfl_fused_adamw.so", "libfl_hostonly.so"):
    assert os.path.islink(d + "/ranks/rank3/plugins/" + lib), os.listdir(d + "/ranks/rank3/plugins")
for r in (0, 1):
    assert not os.path.exists(d + "/ranks/rank%d/plugins" % r), r
healed = [e for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "hide"]
assert len(healed) == 1 and healed[0]["rank"] == 2, healed
assert healed[0]["data"]["via"] == "agent" and healed[0]["data"]["host"] == h1, healed
assert os.path.islink(links + "/libfl_fused_adamw.so"), "the link is not back"
assert not [e for e in ev if e["kind"] in ("agent_lost", "heal_error", "fault_failed")]
print("hide ok:", sorted(os.listdir(links)))
PY
  nothing_left "$tmp/r/hide"
  ;;
*) fail "unknown case $case" ;;
esac
