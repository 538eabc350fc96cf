# Sourced by the hosts_*_test.sh scripts: two hosts as network namespaces (harness/hosts/), and
# what several of those tests do with them. Needs $src (the source tree) and fail().
. "$src/tests/harness/history_lib.sh"

# hosts_up LETTER: skips (exit 77) without root or `ip netns`; otherwise brings up two hosts,
# sets h0 a0 h1 a1 (name and address), lines (netns-hosts.sh's output), tmp (a fresh directory),
# agent (the rsh agent), and tears all of it down when the script exits (KEEP=1 keeps it).
hosts_up() {
  if [[ $EUID -ne 0 ]] || ! unshare --net --mount true 2>/dev/null || ! ip netns list >/dev/null 2>&1; then
    echo "SKIP: hosts as network namespaces need root (creating namespaces) and ip netns"
    exit 77
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  hosts=$src/harness/hosts
  prefix=$(printf '%s%04x' "$1" $((RANDOM)))
  tmp=$(mktemp -d "/tmp/fl$1.XXXXXX")
  trap hosts_down EXIT
  mapfile -t lines < <(bash "$hosts/netns-hosts.sh" up "$prefix" 2)
  read -r h0 a0 <<<"${lines[0]}"
  read -r h1 a1 <<<"${lines[1]}"
  agent=$hosts/netns-rsh
}
hosts_down() {
  [[ -n ${KEEP:-} ]] && return
  bash "$hosts/netns-hosts.sh" down "$prefix" || true
  rm -rf "$tmp"
}

# kill_agent_once_stepping RUN_ID HOST PID: once rank 0 of the run started in the background as
# PID stepped, SIGKILLs HOST's agent, waits for the run and sets `status` to its exit status.
kill_agent_once_stepping() {
  local id=$1 host=$2 run=$3 pid=""
  for _ in $(seq 1 600); do
    if has_event "$tmp/r/$id/ranks/rank0/events.jsonl" step; then
      # The agent itself (not the rsh agent's shells, whose command lines hold the same words).
      pid=$(pgrep -f -- "^[^ ]*/faultline agent --control unix:$tmp/r/$id/control.sock --host $host " || true)
      [[ -n $pid ]] && break
    fi
    sleep 0.1
  done
  [[ -n $pid ]] || { kill "$run"; cat "$tmp/out"; fail "no step or no agent on $host"; }
  kill -KILL "$pid"
  set +e
  wait "$run"
  status=$?
  set -e
}

# The disk_full mounts in host $1's mount namespace: "TARGET SOURCE" lines.
mounts_on() {
  nsenter --mount="/run/faultline-hosts/$prefix/$1.mnt" findmnt -rn -t tmpfs -o TARGET,SOURCE |
    grep faultline-disk-full || true
}

# nothing_left RUN_DIR: after a run (passed or failed) nothing of it is left on this machine or
# either host: no process or agent, cgroup, mount, iptables chain or rate limit.
nothing_left() {
  local d=$1 id h
  local cgroot=${FAULTLINE_CGROUP_ROOT:-/sys/fs/cgroup/memory}
  local cpuroot=${FAULTLINE_CPU_CGROUP_ROOT:-/sys/fs/cgroup/cpu}
  id=$(basename "$d")
  if pgrep -f -- "$d" >/dev/null; then pgrep -af -- "$d"; fail "processes of the run are left"; fi
  if pgrep -f -- "faultline agent .*--run-dir $d" >/dev/null; then fail "an agent is left"; fi
  if compgen -G "$cgroot/faultline.*.$id.rank*" >/dev/null || compgen -G "$cpuroot/faultline.*.$id.rank*" >/dev/null; then
    ls -d "$cgroot"/faultline.*."$id".rank* "$cpuroot"/faultline.*."$id".rank* 2>/dev/null || true
    fail "a cgroup of the run is left"
  fi
  for h in "$h0" "$h1"; do
    if mounts_on "$h" | grep -qF "$d/"; then fail "a mount of the run is left on $h"; fi
    if ip netns exec "$h" iptables -S | grep -q 'FL-'; then
      ip netns exec "$h" iptables -S
      fail "a chain of the run is left on $h"
    fi
    ! ip netns exec "$h" tc qdisc show dev eth0 | grep -q tbf || fail "a rate limit is left on $h"
  done
  ! findmnt -rn -t tmpfs -o TARGET,SOURCE | grep faultline-disk-full | grep -qF "$d/" ||
    fail "a mount of the run is left here"
}

# run_ok RUN_ID WHY: runs $tmp/s.yaml as RUN_ID under $tmp/r and prints its output (also left in
# $out); a run that exits non-zero prints it and fails with WHY.
run_ok() {
  out=$("$faultline" run "$tmp/s.yaml" --results "$tmp/r" --run-id "$1" 2>&1) || {
    echo "$out"
    fail "$2"
  }
  echo "$out"
}
