#!/usr/bin/env bash
# ctest hosts.*: host faults applied by the host's own agent (harness/agent/agent_faults.cpp) on
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
#       input   a memory limit over hosts validates, with a device arena it is refused (no root)
# Each checks `via: agent` in the history and that nothing is left on any host: no process or
# agent of the run, no cgroup of it, no mount of it, no chain. Exit 77 (skipped) without root,
# ip netns, or a writable cgroup v1 memory hierarchy (memory).
set -euo pipefail
faultline=$1 src=$2 case=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
cgroot=${FAULTLINE_CGROUP_ROOT:-/sys/fs/cgroup/memory}
if [[ $case == input ]]; then
  # What the file alone tells (no root, no hosts): a memory limit needs rank processes or hosts.
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
  check "$hosts"$'\nfaults: [{memory_limit: 300m, device_arena: 512m, rank: 1}]' \
    'faults[0].device_arena: a device arena is not supported with topology.hosts'
  check $'topology: {ranks: 2, launcher: mpirun}\nfaults: [{memory_limit: 300m, rank: 1}]' \
    'or topology.hosts (the rank'"'"'s host agent applies it)'
  echo "input ok"
  exit 0
fi
if [[ $case == memory && ! -w $cgroot/cgroup.procs ]]; then
  echo "SKIP: no writable cgroup v1 memory hierarchy at $cgroot"
  exit 77
fi
. "$src/tests/harness/hosts_lib.sh"
hosts_up f
topo="topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}"

# The disk_full mounts in host $1's mount namespace: "TARGET SOURCE" lines.
mounts_on() {
  nsenter --mount="/run/faultline-hosts/$prefix/$1.mnt" findmnt -rn -t tmpfs -o TARGET,SOURCE |
    grep faultline-disk-full || true
}

# After a run (passed or failed): nothing of it on any host.
nothing_left() {  # RUN_DIR
  local d=$1 id
  id=$(basename "$d")
  if pgrep -f -- "$d" >/dev/null; then pgrep -af -- "$d"; fail "processes of the run are left"; fi
  if pgrep -f -- "faultline agent .*--run-dir $d" >/dev/null; then fail "an agent is left"; fi
  if compgen -G "$cgroot/faultline.*.$id.rank*" >/dev/null; then
    ls -d "$cgroot"/faultline.*."$id".rank*
    fail "a cgroup of the run is left"
  fi
  for h in "$h0" "$h1"; do
    if mounts_on "$h" | grep -qF "$d/"; then fail "a mount of the run is left on $h"; fi
    if ip netns exec "$h" iptables -S | grep -q 'FL-'; then fail "a chain of the run is left on $h"; fi
  done
  ! findmnt -rn -t tmpfs -o TARGET,SOURCE | grep faultline-disk-full | grep -qF "$d/" ||
    fail "a mount of the run is left here"
}

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
  out=$("$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id mem 2>&1) || {
    echo "$out"
    fail "rank 2's OOM kill was not judged"
  }
  echo "$out"
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
  out=$("$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id disk 2>&1) || {
    echo "$out"
    fail "the full disk was not judged a checkpoint error"
  }
  echo "$out"
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
  out=$("$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id files 2>&1) || {
    echo "$out"
    fail "the missing shard was not judged a checkpoint error"
  }
  echo "$out"
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
  grep -q '"kind":"heal_error".*"disk_full".*'"$h1" "$tmp/r/killed/history.jsonl" ||
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
*) fail "unknown case $case" ;;
esac
