#!/usr/bin/env bash
# ctest hosts.relay*, hosts.vanish: the ranks' telemetry relayed by their host's agent, and a host
# that vanishes, over hosts that are network namespaces on this machine (netns-hosts.sh).
#   tests/harness/hosts_relay_test.sh FAULTLINE_BIN SOURCE_DIR CASE
# CASE: relay       4 ranks over 2 hosts: each rank streams to its host's agent (the app file says
#                   so), the history has every rank's events live, and each host's relay counts
#                   (the harness's and the agent's own) equal its ranks' streamed events
#       relay_only  the control plane on 127.0.0.1 of this machine, which the hosts cannot reach;
#                   the agents run in this machine's namespace (a wrapper rsh agent), the ranks in
#                   the hosts: the events still arrive live, through the agents. The same run with
#                   FAULTLINE_AGENT_RELAY=0 streams nothing and has them only from the ranks' files
#                   (merged at the end: that run is judged without its live events).
#       vanish      the control plane on the bridge; host 1's link goes down mid-run (inside its
#                   namespace): the harness reports host 1 lost (heartbeat overdue), exit 2, every
#                   rank's events are in the history (host 1's last ones merged from its files),
#                   and no agent, chain or rate limit is left on any host
# Exit 77 (skipped) without root or without `ip netns`.
set -euo pipefail
faultline=$1 src=$2 case=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
. "$src/tests/harness/hosts_lib.sh"
hosts_up r
read -r _ bridge _ <<<"${lines[2]}"
# Every rank's events: in its file, and in the history live (streamed) or merged from the file
# (late). Prints per host the relay counts; $2: "relay" (each host's counts must equal its ranks'
# streamed events) or "direct" (nothing relayed, nothing streamed).
check_history() {
  python3 - "$1" "$2" "$h0" "$h1" <<'PY'
import json, sys
d, mode, h0, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
hosts = {0: h0, 1: h0, 2: h1, 3: h1}
streamed = {r: 0 for r in hosts}
late = {r: 0 for r in hosts}
for e in ev:
    if e["source"] == "rank":
        (late if e.get("late") else streamed)[e["rank"]] += 1
for r in hosts:
    in_file = sum(1 for l in open(f"{d}/ranks/rank{r}/events.jsonl") if l.strip())
    assert streamed[r] + late[r] == in_file, (r, streamed[r], late[r], in_file)
relay = next(e["data"] for e in ev if e["kind"] == "telemetry_relay")
stopped = {e["data"]["host"]: e["data"]["relayed"] for e in ev if e["kind"] == "agent_stopped"}
assert set(stopped) == {h0, h1}, stopped
for h in (h0, h1):
    mine = sum(streamed[r] for r in hosts if hosts[r] == h)
    c = stopped[h]
    print(h, "relayed", c, "streamed", mine)
    if mode == "relay":
        assert relay["on"] is True and relay["ranks_send_to"][h] == f"unix:{d}/agents/{h}.sock", relay
        assert mine > 0, (h, "no live event")
        assert c["events"] == mine == c["agent_events"], (h, c, mine)
        assert c["batches"] == c["agent_batches"] > 0, (h, c)
    else:
        assert relay["on"] is False, relay
        assert c["events"] == 0 and mine == 0, (h, c, mine)
assert not [e for e in ev if e["kind"] == "agent_lost"]
if mode == "relay":
    # Each rank was told its host's agent (the app file carries it), never the control plane.
    app = open(d + "/appfile").read().splitlines()
    for r, line in enumerate(app):
        assert f"FAULTLINE_CONTROL_ADDR=unix:{d}/agents/{hosts[r]}.sock " in line, line
print(mode, "ok")
PY
}

case $case in
relay)
  cat >"$tmp/s.yaml" <<Y
name: hosts-relay
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 20}
expect: {oracle: completed}
Y
  "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id relay -q || fail "run failed"
  check_history "$tmp/r/relay" relay
  nothing_left "$tmp/r/relay"
  ;;
relay_only)
  # The agents in this machine's namespace (they reach 127.0.0.1), everything else in the hosts.
  cat >"$tmp/rsh" <<SH
#!/bin/sh
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1
shift
if [ "\$2" = agent ]; then exec "\$@"; fi
exec $agent "\$host" "\$@"
SH
  chmod +x "$tmp/rsh"
  cat >"$tmp/s.yaml" <<Y
name: hosts-relay-only
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $tmp/rsh}
workload: {steps: 20}
expect: {oracle: completed}
Y
  "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id only -q --control 127.0.0.1:0 ||
    fail "run failed"
  check_history "$tmp/r/only" relay
  nothing_left "$tmp/r/only"
  # Without the relay the ranks cannot reach 127.0.0.1 of this machine: nothing arrives live, the
  # events come from the ranks' files at the end (and the run may be misjudged for want of them:
  # exit 0 or 1 both do here, a harness error does not).
  set +e
  FAULTLINE_AGENT_RELAY=0 "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id direct -q \
    --control 127.0.0.1:0
  status=$?
  set -e
  [[ $status -le 1 ]] || fail "run without relay: exit $status"
  check_history "$tmp/r/direct" direct
  nothing_left "$tmp/r/direct"
  ;;
vanish)
  cat >"$tmp/s.yaml" <<Y
name: hosts-vanish
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $agent}
workload: {steps: 100000}
faults:
  - network: {action: bandwidth, node: 1, rate: 200mbit}
    at: launch
timeouts: {run_s: 120, comm_ms: 100000}
expect: {oracle: completed}
Y
  "$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id vanish -q --control "$bridge:0" \
    >"$tmp/out" 2>&1 &
  run=$!
  for _ in $(seq 1 600); do
    has_event "$tmp/r/vanish/ranks/rank0/events.jsonl" step && break
    sleep 0.1
  done
  has_event "$tmp/r/vanish/ranks/rank0/events.jsonl" step || {
    kill "$run"
    cat "$tmp/out"
    fail "rank 0 never stepped"
  }
  # Host 1 vanishes: its only link goes down inside its own namespace. Nothing closes the
  # agent's connection; the harness must notice the silence.
  ip -n "$h1" link set eth0 down
  set +e
  wait "$run"
  status=$?
  set -e
  cat "$tmp/out"
  [[ $status -eq 2 ]] || fail "exit $status after host $h1 vanished, want 2"
  grep -q "agent on host $h1 .* was lost during the run: heartbeat overdue: nothing heard from host $h1" \
    "$tmp/out" || fail "the error does not name the host and why"
  python3 - "$tmp/r/vanish" "$h0" "$h1" <<'PY'
import json, sys
d, h0, h1 = sys.argv[1:]
ev = [json.loads(l) for l in open(d + "/history.jsonl")]
lost = [e["data"] for e in ev if e["kind"] == "agent_lost"]
assert len(lost) == 1 and lost[0]["host"] == h1, lost
assert lost[0]["reason"].startswith("heartbeat overdue: nothing heard from host " + h1), lost
assert f"while host {h0} was heard" in lost[0]["reason"], lost
stopped = [e["data"]["host"] for e in ev if e["kind"] == "agent_stopped"]
assert stopped == [h0], stopped
healed = {e["data"]["fault"]: e["data"] for e in ev if e["kind"] == "fault_healed"}
assert healed["bandwidth"]["via"] == "rsh", healed
assert healed["host_chains"]["removed"] == 2 and not healed["host_chains"]["errors"], healed
assert healed["host_chains"]["via"] == ["agent", "rsh"], healed
# Nothing of the ranks is lost with the host's agent: every event a rank wrote is in the history,
# live or merged from its file at the end; what host 1's ranks said after the link went down
# could only come from their files.
late = {r: 0 for r in range(4)}
for r in range(4):
    have = {e["seq"] for e in ev if e["source"] == "rank" and e["rank"] == r}
    late[r] = sum(1 for e in ev if e["source"] == "rank" and e["rank"] == r and e.get("late"))
    for line in open(f"{d}/ranks/rank{r}/events.jsonl"):
        try:
            seq = json.loads(line)["seq"]
        except (ValueError, KeyError):
            continue  # a torn last line of a killed rank
        assert seq in have, (r, seq)
assert late[2] + late[3] > 0, late
print("vanish ok:", lost[0]["reason"], "late:", late)
PY
  nothing_left "$tmp/r/vanish"
  ;;
*) fail "unknown case $case" ;;
esac
