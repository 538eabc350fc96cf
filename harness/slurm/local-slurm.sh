#!/usr/bin/env bash
# A real single-node Slurm on this machine, for tests: munged, slurmctld and slurmd with a
# generated configuration in DIR, talking over loopback only (needs root, slurm-wlm and munge).
#
#   local-slurm.sh up DIR      start them; prints "export SLURM_CONF=DIR/slurm.conf" when the node
#                              takes jobs (exit 77 when root, slurm or munge is missing)
#   local-slurm.sh down DIR    stop exactly the daemons `up` started (their pid files) and cancel
#                              every job of this cluster
set -euo pipefail
usage() { echo "usage: $0 up|down DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
cmd=$1 dir=$2

stop() {
  if [[ -f $dir/slurm.conf ]]; then SLURM_CONF=$dir/slurm.conf scancel --full --quiet -u root 2>/dev/null || true; fi
  for d in slurmd slurmctld munged; do
    local f=$dir/$d.pid
    [[ -s $f ]] || continue
    local pid
    pid=$(cat "$f")
    # Only the process this directory started: its command line names the directory.
    if [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$dir"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do [[ -e /proc/$pid ]] || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

case $cmd in
up)
  [[ $EUID -eq 0 ]] || { echo "SKIP: a local Slurm needs root" >&2; exit 77; }
  for t in slurmctld slurmd munged srun sbatch scontrol; do
    command -v "$t" >/dev/null || { echo "SKIP: $t not found (Debian: slurm-wlm munge)" >&2; exit 77; }
  done
  mkdir -p "$dir"/{state,spool,munge}
  dir=$(cd "$dir" && pwd)
  chmod 0700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
  node=$(hostname -s)
  cat >"$dir/slurm.conf" <<C
ClusterName=faultline
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE OverSubscribe=FORCE:64 State=UP
C
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -i -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF" -N "$node"
  for _ in $(seq 150); do
    if sinfo -h -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
      echo "export SLURM_CONF=$SLURM_CONF"
      exit 0
    fi
    sleep 0.2
  done
  echo "$0: the node did not become idle within 30 s (see $dir/*.log)" >&2
  stop
  exit 1
  ;;
down) [[ -d $dir ]] && dir=$(cd "$dir" && pwd) && stop ;;
*) usage ;;
esac
