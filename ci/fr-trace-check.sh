#!/usr/bin/env bash
# PyTorch's own Flight Recorder analyzer (torch.distributed.flight_recorder.fr_trace) on dumps of
# real faultline runs. This machine's Debian has no PyTorch that ships the analyzer (bookworm:
# 1.13; trixie: 2.6, which has it only in its source tree), so the check builds a throwaway Debian
# sid root with debootstrap, installs sid's python3-torch into it (never into the system), and
# runs the analyzer there on dumps the built harness writes:
#   skipped-allreduce   rank 2 drops one gradient all-reduce; its peers time out in it and dump
#   uneven-batches-hang scenarios/symptoms/4.11-uneven-batches-hang: the harness declares the hang
#                       and every rank dumps on demand (SIGUSR2); ranks 2-3 never join the
#                       all-reduce of the 5th step
#   order-mismatch      scenarios/symptoms/4.7-collective-order-mismatch: rank 1 postpones one
#                       gradient all-reduce behind a collective of another group
# and asserts that it loaded every rank's dump and named the rank(s) that never joined the dp
# group's all-reduce, and that -j lines up the ranks' entries (rank 2 one op ahead). Everything it created (the root, its /proc mount, the runs) is removed at
# exit; a root passed in is reused and kept. Then two PyTorch jobs (the probe's own dumps), see below.
#   ci/fr-trace-check.sh FAULTLINE_BIN SOURCE_DIR [ROOT]
#   FR_TRACE_SUITE=sid (the Debian suite of the root) FR_TRACE_MIRROR=http://deb.debian.org/debian
# Exit 0 when the analyzer named every culprit, 1 when not, 77 (skipped: ci/nightly.sh reports it
# as such) without root, debootstrap or curl (ci/install-deps.sh --nightly installs them) or when
# the mirror does not answer (one line naming it and what to do). Takes about 3 minutes and 2 GB
# under /tmp (2 CPUs): nightly (ctest label slow), not CI.
set -euo pipefail
faultline=$1 src=$2 given_root=${3:-}
suite=${FR_TRACE_SUITE:-sid}
mirror=${FR_TRACE_MIRROR:-http://deb.debian.org/debian}
fail() { echo "FAIL: $*" >&2; exit 1; }

if [[ -z "$given_root" ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "SKIP: building the root needs root (debootstrap, chroot)"; exit 77; }
  command -v debootstrap >/dev/null ||
    { echo "SKIP: no debootstrap (bash ci/install-deps.sh --nightly installs it)"; exit 77; }
  command -v curl >/dev/null ||
    { echo "SKIP: no curl to probe $mirror (bash ci/install-deps.sh --nightly installs it)"; exit 77; }
  # Before debootstrap, whose own failure to fetch is a page of log: one line saying what to do.
  if ! err=$(curl -sSfI --max-time 20 "$mirror/dists/$suite/Release" 2>&1 >/dev/null); then
    echo "SKIP: the Debian mirror $mirror is not reachable (${err//$'\n'/ }):" \
      "give this machine access to it, set FR_TRACE_MIRROR to a mirror that is reachable, or" \
      "pass a root built before as the third argument"
    exit 77
  fi
fi

work=$(mktemp -d /tmp/fr-trace-check.XXXXXX)
root=${given_root:-$work/root}
proc_mounted=
cleanup() {
  if [[ -n "$proc_mounted" ]]; then umount "$root/proc" || umount -l "$root/proc" || true; fi
  # The dumps copied into a root that was passed in, then everything under our own directory.
  if [[ -n "$given_root" ]]; then rm -rf "$given_root/fr-dumps.$(basename "$work")"; fi
  if mountpoint -q "$work/root/proc" 2>/dev/null; then
    echo "fr-trace-check: $work/root/proc is still mounted; $work left in place" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

if [[ -z "$given_root" ]]; then
  t0=$(date +%s)
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log"; fail "debootstrap $suite failed"; }
  t1=$(date +%s)
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc" && proc_mounted=1
  # A mirror snapshot may serve a sid Release past its Valid-Until; the root is thrown away.
  chroot "$root" env DEBIAN_FRONTEND=noninteractive sh -c \
    'apt-get -q -o Acquire::Check-Valid-Until=false update &&
     apt-get install -y -q --no-install-recommends python3-torch python3-tabulate' >"$work/apt.log" 2>&1 ||
    { tail -n 20 "$work/apt.log"; fail "installing python3-torch and python3-tabulate into the $suite root failed"; }
  umount "$root/proc" && proc_mounted=
  t2=$(date +%s)
  echo "root: debootstrap $suite $((t1 - t0)) s, python3-torch $((t2 - t1)) s," \
       "$(du -sxh "$root" | cut -f1)"
fi
echo "torch in the root: $(chroot "$root" dpkg-query -W -f '${Version}' python3-torch 2>/dev/null)"
chroot "$root" python3 -c 'import torch.distributed.flight_recorder.fr_trace' 2>/dev/null ||
  fail "the root's python3-torch has no torch.distributed.flight_recorder.fr_trace (newer than 2.6)"

# The dumps, from the built harness and workers.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cat >"$work/skipped-allreduce.yaml" <<'Y'
name: fr-skipped-allreduce
description: Rank 2 skips one gradient all-reduce; its peers wait in it until the deadline.
topology: {ranks: 4, dp: 4}
workload: {steps: 8}
faults:
  - plan: "comm.all_reduce[rank=2,group=dp,seq=4]=drop"
timeouts: {comm_ms: 3000}
expect: {oracle: comm_timeout, op: all_reduce}
seed: 7
Y
declare -A scenario=(
  [skipped-allreduce]="$work/skipped-allreduce.yaml"
  [uneven-batches-hang]="$src/scenarios/symptoms/4.11-uneven-batches-hang.yaml"
  [order-mismatch]="$src/scenarios/symptoms/4.7-collective-order-mismatch.yaml")
# What the analyzer must say: the ranks missing from the dp group's all-reduce, and world size.
declare -A missing=([skipped-allreduce]="{2}" [uneven-batches-hang]="{2, 3}" [order-mismatch]="{1}")
declare -A world=([skipped-allreduce]=4 [uneven-batches-hang]=4 [order-mismatch]=2)
dumps=$root/fr-dumps.$(basename "$work")
status=0
for name in skipped-allreduce uneven-batches-hang order-mismatch; do
  rc=0
  "$faultline" run "${scenario[$name]}" --results "$work/runs" --run-id "$name" -q \
    >"$work/$name.run.log" 2>&1 || rc=$?
  [[ $rc -eq 0 ]] || { cat "$work/$name.run.log"; fail "$name: faultline run exited $rc"; }
  n=$(compgen -G "$work/runs/$name/ranks/rank*/nccl_trace_rank_*" | wc -l || true)
  [[ $n -eq ${world[$name]} ]] || fail "$name: $n of ${world[$name]} ranks wrote nccl_trace_rank_<R>"
  mkdir -p "$dumps/$name"
  cp -r "$work/runs/$name/ranks" "$dumps/$name/"
  out=$work/$name.fr_trace.txt
  rc=0
  chroot "$root" python3 -m torch.distributed.flight_recorder.fr_trace \
    "/$(basename "$dumps")/$name/ranks" -p nccl_trace_rank_ -v >"$out" 2>&1 || rc=$?
  echo "== $name: fr_trace exited $rc"
  # The analyzer's findings (its noise about UCX, /proc/cpuinfo and tabulate left out).
  grep -v -e 'UCX' -e 'cpuinfo' -e 'tabulate' "$out" | grep -e '^loaded' -e '^Not all ranks' \
    -e '^group info' -e '^collective:' -e '^missing ranks' -e 'Error' || true
  python3 - "$out" "${missing[$name]}" "${world[$name]}" <<'PY' || status=1
import re, sys
text, want, world = open(sys.argv[1]).read(), sys.argv[2], int(sys.argv[3])
problems = []
m = re.search(r"^loaded (\d+) files", text, re.M)
if not m or int(m.group(1)) != world:
    problems.append(f"did not load {world} dumps ({m.group(0) if m else 'no loaded line'})")
if "Traceback" in text:
    problems.append("raised: " + text[text.index("Traceback"):][-400:])
blocks = text.split("Not all ranks joining collective")[1:]
named = [b for b in blocks if re.search(r"^group info: \d+:dp$", b, re.M)
         and re.search(r"^collective: nccl:all_reduce$", b, re.M)
         and re.search(rf"^missing ranks: {re.escape(want)}$", b, re.M)
         and re.search(rf"^world size: {world}$", b, re.M)]
if not named:
    problems.append(f"no report of the dp all-reduce with missing ranks {want}")
for p in problems:
    print("FAIL:", p)
sys.exit(1 if problems else 0)
PY
done
# -j (the raw entries side by side, one column per rank, on stderr; needs python3-tabulate): in the run where
# rank 2 dropped a gradient all-reduce, the last row holds rank 2 in the next world all-reduce
# (one element) and the others in the gradient all-reduce.
chroot "$root" python3 -m torch.distributed.flight_recorder.fr_trace \
  "/$(basename "$dumps")/skipped-allreduce/ranks" -p nccl_trace_rank_ -j \
  >"$work/entries.txt" 2>&1 || { cat "$work/entries.txt"; status=1; }
echo "== skipped-allreduce, -j: the last row"
python3 - "$work/entries.txt" <<'PY' || status=1
import re, sys
noise = ("UCX", "cpuinfo", "tabulate")  # the root's complaints, not the analyzer's findings
lines = [l.rstrip() for l in open(sys.argv[1]) if l.strip() and not any(n in l for n in noise)]
header = next((l for l in lines if l.startswith("Rank 0")), None)
if header is None or re.split(r"\s{2,}", header) != ["Rank 0", "Rank 1", "Rank 2", "Rank 3"]:
    sys.exit(f"FAIL: no header of ranks 0-3 in -j's output: {header!r}")
last = re.split(r"\s{2,}", lines[-1])
print(" | ".join(last))
want = ["all_reduce(input_sizes=[[30080]], state=started)"] * 4
want[2] = "all_reduce(input_sizes=[[1]], state=started)"
if last != want:
    sys.exit(f"FAIL: last row {last}, expected {want}")
PY
# PyTorch jobs: the probe's flight recorder (faultline_probe.flight) dumps when the harness
# declares the hang; the analyzer must load both ranks' dumps. hung-allreduce: both ranks in the
# same all-reduce (the stuck rank never returns from it), nothing missing; uneven-batches-hang:
# at collective_seq_id 1 rank 1 (its shard ran out) is in the final barrier while rank 0 is in
# DDP's bucket-order broadcast, a COLLECTIVE_TYPE_MISMATCH. Where /usr/bin/python3 has no torch,
# this part is left out.
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  for name in hung-allreduce uneven-batches-hang; do
    rc=0
    "$faultline" run "$src/scenarios/torch/$name.yaml" --results "$work/runs" --run-id "torch-$name" \
      -q >"$work/torch-$name.run.log" 2>&1 || rc=$?
    [[ $rc -eq 0 ]] || { cat "$work/torch-$name.run.log"; fail "torch $name: faultline run exited $rc"; }
    mkdir -p "$dumps/torch-$name"
    cp -r "$work/runs/torch-$name/ranks" "$dumps/torch-$name/"
    out=$work/torch-$name.fr_trace.txt
    chroot "$root" python3 -m torch.distributed.flight_recorder.fr_trace \
      "/$(basename "$dumps")/torch-$name/ranks" -p nccl_trace_rank_ -v >"$out" 2>&1 || true
    echo "== torch $name"
    grep -e '^loaded' -e '^Not all ranks' -e '^collective:' -e '^missing ranks' -e '^error msg' \
      "$out" || true
    python3 - "$out" "$name" <<'PY' || status=1
import re, sys
text, name = open(sys.argv[1]).read(), sys.argv[2]
problems = []
if not re.search(r"^loaded 2 files", text, re.M):
    problems.append("did not load both ranks' dumps")
if "Traceback" in text:
    problems.append("raised: " + text[text.index("Traceback"):][-400:])
blocks = text.split("Not all ranks joining collective")[1:]
if name == "hung-allreduce" and blocks:
    problems.append("a rank reported missing, though both wait in the same all-reduce")
if name == "uneven-batches-hang" and not re.search(
        r"^error msg: Culprit rank \d; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective "
        r"type: '(barrier|broadcast)' does not match found collective type: '(barrier|broadcast)'",
        text, re.M):
    problems.append("no COLLECTIVE_TYPE_MISMATCH between the barrier and the broadcast")
for p in problems:
    print("FAIL: torch", name + ":", p)
sys.exit(1 if problems else 0)
PY
  done
else
  echo "== torch jobs left out: /usr/bin/python3 has no torch"
fi
[[ $status -eq 0 ]] || { echo "FAIL: fr_trace did not name every culprit (output above)"; exit 1; }
echo "fr_trace read every dump and named every culprit"
