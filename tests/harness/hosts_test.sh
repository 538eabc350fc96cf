#!/usr/bin/env bash
# ctest hosts.*: ranks across hosts that are network namespaces on this machine
# (harness/hosts/netns-hosts.sh), reached by mpirun and the harness through netns-rsh.
#   tests/harness/hosts_test.sh FAULTLINE_BIN SOURCE_DIR CASE
# CASE: spread  4 ranks over 2 hosts finish; ranks 0-1 report host 0's name, 2-3 host 1's
#       cut     host 1 cut off at step 3 (the harness acts on rank 0's step event; the tiny model
#               steps in milliseconds, so the run has many steps left when the cut lands): the
#               cross-host all-reduce times out, tp never; the
#               run's iptables chain is gone from both hosts afterwards
#       unreachable  a host that does not exist: exit 2 naming it, before any launch, nothing
#               left running
#       agent_kill  the agent on host 1 SIGKILLs rank 2 (on host 1) at step 3: the rank's end is the
#               symptom; the history has both agents' agent_up/agent_stopped and the signal sent
#               through the agent of host 1
#       agent_lost  the agent of host 1 is killed mid-run (a rate limit of the run on that host):
#               exit 2 naming the host, agent_lost in the history, and the run's chain and qdisc
#               removed from both hosts all the same
#       half_setup  host 1 refuses the run's set-up after host 0 took it (an address that is not its
#               own): exit 2 naming host 1, host 0's chain removed, nothing launched or left
#       agent_unreachable  the control plane on 127.0.0.1, which the namespace hosts cannot reach:
#               no agent attaches, exit 2 naming both hosts, no rank launched, nothing left
#       agent_squat  port_squat: host 0's agent holds the rendezvous port before launch; rank 0's
#               store cannot listen (the symptom), and the port is let go at the end
#       hostfile  the spread case with the hosts in a hostfile (relative to the scenario)
#       input   mistakes in topology.hosts / hostfile / rsh_agent refused by `faultline validate` (no root)
# Exit 77 (skipped) without root or without `ip netns` (all but input).
set -euo pipefail
faultline=$1 src=$2 case=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$src/tests/harness/history_lib.sh"
if [[ $case == input ]]; then
  # What the file alone tells (no root, no hosts): each mistake refused naming its key.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  refuse() {  # YAML, then a text the error must contain
    printf '%s\n' "name: bad" "$1" "expect: {oracle: completed}" >"$tmp/bad.yaml"
    local out
    if out=$("$faultline" validate "$tmp/bad.yaml" 2>&1); then fail "accepted: $1"; fi
    grep -qF -- "$2" <<<"$out" || fail "for '$1' want '$2', got: $out"
  }
  refuse 'topology: {ranks: 2, hosts: [a, b]}' 'topology.launcher: topology.hosts needs launcher mpirun'
  refuse 'topology: {ranks: 3, launcher: mpirun, hosts: [a, b]}' '3 ranks do not spread evenly over 2 hosts'
  refuse 'topology: {ranks: 2, launcher: mpirun, hosts: [a, a]}' 'topology.hosts[1]: host a is listed twice'
  refuse 'topology: {ranks: 2, launcher: mpirun, hosts: [a, "b;reboot"]}' "'b;reboot' is not a host name"
  refuse 'topology: {ranks: 2, launcher: mpirun, hosts: [a=10.0.0.1, b=10.0.0.x]}' "'10.0.0.x' is not an IP address"
  refuse 'topology: {ranks: 4, nodes: 4, launcher: mpirun, hosts: [a, b]}' 'topology.nodes is 4 but topology.hosts lists 2 hosts'
  refuse 'topology: {ranks: 2, rsh_agent: ssh}' 'an rsh agent needs topology.hosts'
  refuse 'topology: {ranks: 2, launcher: mpirun, hosts: [a, b], rsh_agent: "ssh -p 22"}' "'ssh -p 22' is not a program"
  refuse $'topology: {ranks: 2, launcher: mpirun, hosts: [a=10.0.0.1, b]}\nfaults: [{network: {node: 1}}]' \
    "network faults between hosts need every host's address (topology.hosts[1] is b"
  # topology.hostfile: the same checks, and the hostfile's own line named.
  printf '%s\n' "# two hosts" "a=10.0.0.1 slots=2" "" "b slots=2" >"$tmp/hf"
  printf '%s\n' "a slots=2" "b slots=two" >"$tmp/badhf"
  refuse 'topology: {ranks: 2, launcher: mpirun, hosts: [a, b], hostfile: hf}' 'allowed: exactly one of them'
  refuse 'topology: {ranks: 2, hostfile: hf}' 'topology.hostfile needs launcher mpirun'
  refuse 'topology: {ranks: 3, launcher: mpirun, hostfile: hf}' '3 ranks do not spread evenly over 2 hosts'
  refuse 'topology: {ranks: 6, launcher: mpirun, hostfile: hf}' "$tmp/hf:4: host b has slots=2 but gets 3 of the 6 ranks"
  refuse 'topology: {ranks: 2, launcher: mpirun, hostfile: badhf}' "$tmp/badhf:2: slots='two' is not a positive whole number"
  refuse 'topology: {ranks: 2, launcher: mpirun, hostfile: nohf}' "$tmp/nohf: cannot read the hostfile"
  printf '%s\n' "name: okf" "topology: {ranks: 4, launcher: mpirun, hostfile: hf}" \
    "expect: {oracle: completed}" >"$tmp/okf.yaml"
  "$faultline" validate "$tmp/okf.yaml" >/dev/null || fail "a good hostfile was refused"
  printf '%s\n' "name: ok" "topology: {ranks: 4, launcher: mpirun, hosts: [a=10.0.0.1, b]}" \
    "expect: {oracle: completed}" >"$tmp/ok.yaml"
  "$faultline" validate "$tmp/ok.yaml" >/dev/null || fail "a good hosts list was refused"
  # The control plane listens beyond loopback only for a run over hosts: refused before anything.
  printf '%s\n' "name: nohosts" "topology: {ranks: 2}" "expect: {oracle: completed}" >"$tmp/nh.yaml"
  set +e
  out=$("$faultline" run "$tmp/nh.yaml" --results "$tmp/r" --run-id nh -q --control 10.9.8.7:0 2>&1)
  status=$?
  set -e
  [[ $status -eq 2 ]] || fail "--control beyond loopback without hosts: exit $status, want 2: $out"
  grep -qF "listens beyond loopback only for a run over topology.hosts" <<<"$out" || fail "$out"
  [[ $(count_events "$tmp/r/nh/history.jsonl" launch) == 0 ]] ||
    fail "launched with a refused --control"
  echo "input ok"
  exit 0
fi
. "$src/tests/harness/hosts_lib.sh"
hosts_up h

case $case in
spread)
  cat >"$tmp/s.yaml" <<Y
name: hosts-spread
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 3}
expect: {oracle: completed}
Y
  "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id spread -q || fail "run failed"
  python3 - "$tmp/r/spread" "$h0" "$h1" "$a0" <<'PY'
import json, sys
d, h0, h1, a0 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
start = next(e for e in ev if e["kind"] == "run_start")
assert start["data"]["nodes"] == 2, start
steps = {e["rank"] for e in ev if e["source"] == "rank" and e["kind"] == "step"}
assert steps == {0, 1, 2, 3}, steps
app = open(d + "/appfile").read().splitlines()
want = [h0, h0, h1, h1]
for r, line in enumerate(app):
    assert f"--host {want[r]} " in line, (r, line)
    assert f"MASTER_ADDR={a0}" in line, line
# Each rank ran on its host: the rsh agent gives a host its name, and every rank reports the
# host name it sees in its hello.
seen = {e["rank"]: e["data"]["host"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"}
assert seen == dict(enumerate(want)), seen
print("spread ok")
PY
  ;;
hostfile)
  # The spread case with the hosts in a hostfile next to the scenario (a relative path).
  printf '%s\n' "# namespace hosts" "$h0=$a0 slots=2" "$h1=$a1 slots=2" >"$tmp/hosts.txt"
  cat >"$tmp/s.yaml" <<Y
name: hosts-hostfile
topology: {ranks: 4, tp: 2, launcher: mpirun, hostfile: hosts.txt, rsh_agent: $agent}
workload: {steps: 3}
expect: {oracle: completed}
Y
  fl=$(realpath "$faultline")  # run from / so that only the scenario's directory can resolve it
  (cd / && "$fl" run "$tmp/s.yaml" --results "$tmp/r" --run-id hostfile -q) || fail "run failed"
  python3 - "$tmp/r/hostfile" "$h0" "$h1" "$tmp/hosts.txt" <<'PY'
import json, sys
d, h0, h1, hf = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
seen = {e["rank"]: e["data"]["host"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"}
assert seen == {0: h0, 1: h0, 2: h1, 3: h1}, seen
assert f"hostfile: {hf}" in open(d + "/scenario.yaml").read(), "the resolved scenario names the file"
print("hostfile ok")
PY
  ;;
cut)
  cat >"$tmp/s.yaml" <<Y
name: hosts-cut
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 2000}
faults:
  - network: {action: drop, node: 1}
    step: 3
timeouts: {comm_ms: 3000}
expect: {oracle: comm_timeout}
Y
  run_ok cut "the cut was not judged a comm timeout"
  grep -Eq "all_reduce on group (dp|world) \(seq " <<<"$out" || fail "no cross-host all_reduce timed out"
  ! grep -q "on group tp (seq " <<<"$out" || fail "a tp group (inside one host) was hit"
  python3 - "$tmp/r/cut" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/history.jsonl")]
inj = [e for e in ev if e["kind"] == "fault_injected"]
assert len(inj) == 1 and inj[0]["data"]["peers"] == [0], inj
setup = next(e for e in ev if e["kind"] == "network_setup")
assert setup["data"]["devices"] == ["eth0", "eth0"], setup
healed = {e["data"]["fault"]: e["data"] for e in ev if e["kind"] == "fault_healed"}
assert "network" in healed, healed
assert healed["host_chains"]["removed"] == 2 and not healed["host_chains"]["errors"], healed
# Applied and healed by the hosts' agents, not one rsh command at a time.
up = {e["data"]["host"] for e in ev if e["kind"] == "agent_up"}
assert len(up) == 2, up
assert setup["data"]["via"] == ["agent", "agent"], setup
assert inj[0]["data"]["via"] == "agent", inj
assert healed["network"]["via"] == "agent", healed
assert healed["host_chains"]["via"] == ["agent", "agent"], healed
stopped = {e["data"]["host"] for e in ev if e["kind"] == "agent_stopped"}
assert stopped == up and not [e for e in ev if e["kind"] == "agent_lost"], stopped
print("cut ok:", setup["data"]["chain"])
PY
  nothing_left "$tmp/r/cut"
  ;;
agent_kill)
  cat >"$tmp/s.yaml" <<Y
name: hosts-agent-kill
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 2000}
faults:
  - {signal: KILL, rank: 2, step: 3}
timeouts: {comm_ms: 5000}
expect: {oracle: exit_class, ranks: [2]}
Y
  run_ok kill "rank 2's end was not judged"
  python3 - "$tmp/r/kill" "$h0" "$h1" <<'PY'
import json, sys
d, h0, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
up = {e["data"]["host"]: e for e in ev if e["kind"] == "agent_up"}
assert set(up) == {h0, h1}, up
assert all("signal" in e["data"]["can"] for e in up.values()), up
first_launch = min(e["t_ns"] for e in ev if e["kind"] == "launch")
assert all(e["t_ns"] < first_launch for e in up.values()), "an agent came after the ranks"
inj = [e for e in ev if e["kind"] == "fault_injected"]
assert len(inj) == 1, inj
sig = inj[0]["data"]
assert sig["fault"] == "signal" and sig["via"] == "agent" and sig["host"] == h1, sig
assert sig["delivered"] is True and inj[0]["rank"] == 2, sig
hello = {e["rank"]: e["data"]["pid"] for e in ev if e["source"] == "rank" and e["kind"] == "hello"}
assert sig["pid"] == hello[2], (sig, hello)
stopped = {e["data"]["host"] for e in ev if e["kind"] == "agent_stopped"}
assert stopped == {h0, h1}, stopped
assert not [e for e in ev if e["kind"] == "agent_lost"]
print("agent_kill ok")
PY
  nothing_left "$tmp/r/kill"
  ;;
agent_lost)
  cat >"$tmp/s.yaml" <<Y
name: hosts-agent-lost
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 100000}
faults:
  - network: {action: bandwidth, node: 1, rate: 200mbit}
    at: launch
timeouts: {run_s: 60}
expect: {oracle: completed}
Y
  "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id lost -q >"$tmp/out" 2>&1 &
  run=$!
  # Once rank 0 stepped, kill host 1's agent (the process whose command line names it).
  kill_agent_once_stepping lost "$h1" "$run"
  cat "$tmp/out"
  [[ $status -eq 2 ]] || fail "exit $status after losing an agent, want 2"
  grep -q "agent on host $h1 .* was lost" "$tmp/out" || fail "the error does not name the host"
  python3 - "$tmp/r/lost" "$h1" <<'PY'
import json, sys
d, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
lost = [e for e in ev if e["kind"] == "agent_lost"]
assert len(lost) == 1 and lost[0]["data"]["host"] == h1, lost
healed = {e["data"]["fault"]: e["data"] for e in ev if e["kind"] == "fault_healed"}
# Host 1's rate limit and chain went through the rsh agent once its agent was gone.
assert healed["bandwidth"]["via"] == "rsh", healed
assert healed["host_chains"]["removed"] == 2 and not healed["host_chains"]["errors"], healed
assert healed["host_chains"]["via"] == ["agent", "rsh"], healed
print("agent_lost ok")
PY
  nothing_left "$tmp/r/lost"
  for h in "$h0" "$h1"; do
    ! ip netns exec "$h" tc qdisc show dev eth0 | grep -q tbf || fail "a rate limit is left on $h"
  done
  ;;
unreachable)
  cat >"$tmp/s.yaml" <<Y
name: hosts-unreachable
topology: {ranks: 2, launcher: mpirun, hosts: [$h0=$a0, $prefix-nohost], rsh_agent: $agent}
workload: {steps: 3}
expect: {oracle: completed}
Y
  set +e
  out=$("$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id unreach -q 2>&1)
  status=$?
  set -e
  echo "$out"
  [[ $status -eq 2 ]] || fail "exit $status, want 2"
  grep -q "$prefix-nohost" <<<"$out" || fail "the message does not name the host"
  grep -q "cannot be reached" <<<"$out" || fail "the message does not say why"
  [[ $(count_events "$tmp/r/unreach/history.jsonl" launch) == 0 ]] || fail "something was launched"
  if pgrep -f "$tmp/r/unreach" >/dev/null; then fail "processes of the run are left"; fi
  ;;
half_setup)
  # Host 1 refuses the run's set-up after host 0 took it: the address given for it is none of its
  # own, so it has no interface to carry the run's chain. Host 0's chain is removed again, the
  # error names host 1 and the address, and nothing is launched or left.
  bad=192.0.2.1  # TEST-NET-1: no host has it
  cat >"$tmp/s.yaml" <<Y
name: hosts-half-setup
topology: {ranks: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$bad], rsh_agent: $agent}
workload: {steps: 3}
faults:
  - network: {action: drop, node: 1}
    step: 2
expect: {oracle: completed}
Y
  set +e
  out=$("$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id half -q 2>&1)
  status=$?
  set -e
  echo "$out"
  [[ $status -eq 2 ]] || fail "exit $status, want 2"
  grep -qF "host $h1 has no interface with address $bad" <<<"$out" || fail "the message does not name host 1 and its address"
  [[ $(count_events "$tmp/r/half/history.jsonl" launch) == 0 ]] || fail "something was launched"
  python3 - "$tmp/r/half/history.jsonl" "$h0" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"].get("fault") == "host_chains"]
assert len(healed) == 1, healed
assert healed[0]["hosts"] == 1 and healed[0]["removed"] == 1 and healed[0]["errors"] == [], healed
PY
  nothing_left "$tmp/r/half"
  ;;
agent_unreachable)
  cat >"$tmp/s.yaml" <<Y
name: hosts-agent-unreachable
topology: {ranks: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 3}
expect: {oracle: completed}
Y
  set +e
  out=$("$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id noagent -q --control 127.0.0.1:0 2>&1)
  status=$?
  set -e
  echo "$out"
  [[ $status -eq 2 ]] || fail "exit $status, want 2"
  grep -q "agent: 2 of 2 host(s) have no agent attached" <<<"$out" || fail "no agent error"
  grep -q "$h0 (" <<<"$out" && grep -q "$h1 (" <<<"$out" || fail "the message does not name both hosts"
  [[ $(count_events "$tmp/r/noagent/history.jsonl" launch) == 0 ]] || fail "a rank was launched"
  nothing_left "$tmp/r/noagent"
  ;;
agent_squat)
  cat >"$tmp/s.yaml" <<Y
name: hosts-agent-squat
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 4}
faults: [{port_squat: true}]
timeouts: {rendezvous_ms: 8000, comm_ms: 8000, run_s: 60}
expect: {oracle: error_signature, pattern: "cannot listen on .*address already in use", ranks: [0]}
Y
  run_ok squat "rank 0's store did not fail to listen"
  python3 - "$tmp/r/squat" "$h0" <<'PY'
import json, sys
d, h0 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
inj = [e["data"] for e in ev if e["kind"] == "fault_injected"]
assert len(inj) == 1 and inj[0]["fault"] == "port_squat", inj
assert inj[0]["host"] == h0 and inj[0]["via"] == "agent", inj
healed = [e["data"] for e in ev if e["kind"] == "fault_healed" and e["data"]["fault"] == "port_squat"]
assert len(healed) == 1 and healed[0]["via"] == "agent", healed
print("agent_squat ok")
PY
  nothing_left "$tmp/r/squat"
  ;;
*) fail "unknown case $case" ;;
esac
