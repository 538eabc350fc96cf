#!/usr/bin/env bash
# Hosts as network namespaces on one machine, for multi-host runs without a cluster (needs root).
#
#   netns-hosts.sh up PREFIX N     create N hosts PREFIX-h0 .. PREFIX-h(N-1); prints one line per
#                                  host, "NAME ADDRESS", then "bridge ADDRESS SUBNET"
#   netns-hosts.sh down PREFIX     remove everything `up` created for PREFIX (idempotent)
#
# Each host is a named network namespace (`ip netns`, so `ip netns exec NAME` enters it; see
# netns-rsh, Open MPI's rsh agent for them) and a mount namespace of its own with loopback and one veth on a bridge in the
# machine's own namespace; the bridge has the subnet's .254, so programs on the machine (mpirun,
# the harness's control plane) reach every host and the hosts reach each other. The subnet is
# 10.201.X.0/24 with the first X no other bridge uses (chosen under a lock). PREFIX is 1-6
# letters or digits (interface names are short); pick one per run so runs never clash.
set -euo pipefail
usage() { echo "usage: $0 up PREFIX N | down PREFIX" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
cmd=$1 prefix=$2
[[ $prefix =~ ^[a-z0-9]{1,6}$ ]] || { echo "$0: PREFIX must be 1-6 of a-z0-9 (got '$prefix')" >&2; exit 2; }
bridge="flb$prefix"
state="/run/faultline-hosts/$prefix"

down() {
  # Only what `up` recorded for this prefix: its namespaces and its bridge.
  if [[ -f $state/hosts ]]; then
    while read -r name _; do
      ip netns del "$name" 2>/dev/null || true
      umount "$state/$name.mnt" 2>/dev/null || true
    done <"$state/hosts"
  fi
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$state"
}

case $cmd in
up)
  [[ $# -eq 3 && $3 =~ ^[0-9]+$ && $3 -ge 1 && $3 -le 32 ]] || { echo "$0: N must be 1-32" >&2; exit 2; }
  n=$3
  [[ $EUID -eq 0 ]] || { echo "$0: creating network namespaces needs root" >&2; exit 77; }
  mkdir -p /run/faultline-hosts
  [[ ! -e $state ]] || { echo "$0: hosts with prefix $prefix exist already ($state)" >&2; exit 2; }
  trap 'down' ERR
  exec 9>/run/faultline-hosts/.lock
  flock 9
  x=""
  for i in $(seq 1 250); do
    if ! ip -o -4 addr show | grep -q " 10\.201\.$i\."; then x=$i; break; fi
  done
  [[ -n $x ]] || { echo "$0: no free 10.201.X.0/24 subnet" >&2; exit 1; }
  mkdir -p "$state"
  ip link add "$bridge" type bridge
  ip addr add "10.201.$x.254/24" dev "$bridge"
  # Traffic between the hosts is bridged; keep it out of this machine's own iptables (a FORWARD
  # policy of DROP there would cut every host off). Older kernels lack the option: ignored.
  ip link set "$bridge" type bridge nf_call_iptables 0 2>/dev/null || true
  ip link set "$bridge" up
  flock -u 9
  for ((k = 0; k < n; k++)); do
    name="$prefix-h$k" addr="10.201.$x.$((k + 1))" veth="flv$prefix$k"
    echo "$name $addr" >>"$state/hosts"
    ip netns add "$name"
    ip link add "$veth" type veth peer name eth0 netns "$name"
    ip link set "$veth" master "$bridge" up
    ip -n "$name" link set lo up
    ip -n "$name" addr add "$addr/24" dev eth0
    ip -n "$name" link set eth0 up
    # Its own mount namespace, kept by a bind mount of $state/NAME.mnt (netns-rsh enters it): a
    # host's mounts (a disk_full tmpfs its agent makes) are seen by that host's processes only.
    # The file's directory must not be a shared mount: if it is, make /run/faultline-hosts a
    # private mount of its own first (as ip netns does for /run/netns).
    touch "$state/$name.mnt"
    if ! unshare --mount="$state/$name.mnt" --propagation private true 2>/dev/null; then
      mountpoint -q /run/faultline-hosts ||
        mount --bind /run/faultline-hosts /run/faultline-hosts
      mount --make-private /run/faultline-hosts
      unshare --mount="$state/$name.mnt" --propagation private true
    fi
  done
  cat "$state/hosts"
  echo "bridge 10.201.$x.254 10.201.$x.0/24"
  ;;
down) down ;;
*) usage ;;
esac
