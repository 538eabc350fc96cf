#!/usr/bin/env bash
# What relaying the ranks' telemetry through their host's agent costs (docs/cluster.md, "Telemetry
# through the agent"): the same run over 2 namespace hosts (4 ranks, tiny model), alternately with
# the relay (default) and with the ranks streaming straight to the control plane
# (FAULTLINE_AGENT_RELAY=0), PAIRS times, relay first in odd pairs and direct first in even ones,
# so drifting machine load falls on both alike.
# Per run, from its history alone: each live rank event's delivery latency, the harness's receipt
# (run_start's wall clock + t_ns offset) minus the rank's emit time (same machine, same clock).
# Prints per run the median and p90 latency and the events streamed, then per pair the ratio
# relay / direct of the medians.
#   bench/relay_ratio.sh BUILD_DIR [PAIRS=3] [STEPS=300]      (root: network namespaces)
set -euo pipefail
build=${1:?usage: $0 BUILD_DIR [PAIRS] [STEPS]}
pairs=${2:-3} steps=${3:-300}
src=$(cd "$(dirname "$0")/.." && pwd)
fl=$(realpath "$build/harness/faultline")
[[ $EUID -eq 0 ]] || { echo "$0: namespace hosts need root" >&2; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
prefix=$(printf 'b%04x' $((RANDOM)))
tmp=$(mktemp -d /tmp/flb.XXXXXX)
trap 'bash "$src/harness/hosts/netns-hosts.sh" down "$prefix" || true; rm -rf "$tmp"' EXIT
mapfile -t lines < <(bash "$src/harness/hosts/netns-hosts.sh" up "$prefix" 2)
read -r h0 a0 <<<"${lines[0]}"
read -r h1 a1 <<<"${lines[1]}"
cat >"$tmp/s.yaml" <<Y
name: relay-bench
topology: {ranks: 4, tp: 2, launcher: mpirun, hosts: [$h0=$a0, $h1=$a1], rsh_agent: $src/harness/hosts/netns-rsh}
workload: {steps: $steps}
expect: {oracle: completed}
Y
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
run() {  # MODE ID
  local relay=1
  [[ $1 == direct ]] && relay=0
  FAULTLINE_AGENT_RELAY=$relay "$fl" run "$tmp/s.yaml" --results "$tmp/r" --run-id "$2" -q >/dev/null
}
for ((p = 1; p <= pairs; p++)); do
  if ((p % 2)); then order="relay direct"; else order="direct relay"; fi
  for m in $order; do run "$m" "$m$p"; done
done
python3 - "$tmp/r" "$pairs" <<'PY'
import json, statistics, sys
root, pairs = sys.argv[1], int(sys.argv[2])
def lat(run):
    ev = [json.loads(l) for l in open(f"{root}/{run}/history.jsonl")]
    start = next(e for e in ev if e["kind"] == "run_start")
    base = start["time_unix_ns"] - start["t_ns"]
    relay = next(e["data"]["on"] for e in ev if e["kind"] == "telemetry_relay")
    xs = sorted((base + e["t_ns"] - e["time_unix_ns"]) / 1e6 for e in ev
                if e["source"] == "rank" and not e.get("late"))
    return relay, xs
print(f"{'run':<9}{'relay':>6}{'events':>8}{'median ms':>11}{'p90 ms':>9}")
med = {}
for p in range(1, pairs + 1):
    for m in ("relay", "direct"):
        on, xs = lat(f"{m}{p}")
        assert on == (m == "relay"), (m, on)
        med[(m, p)] = statistics.median(xs)
        print(f"{m+str(p):<9}{str(on):>6}{len(xs):>8}{med[(m, p)]:>11.2f}{xs[int(0.9 * (len(xs) - 1))]:>9.2f}")
for p in range(1, pairs + 1):
    print(f"pair {p}: median latency relay/direct = {med[('relay', p)] / med[('direct', p)]:.2f}")
PY
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
