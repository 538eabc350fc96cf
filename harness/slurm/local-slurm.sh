#!/usr/bin/env bash
# A real single-node Slurm on this machine, for tests: munged, slurmctld and slurmd with a
# generated configuration in DIR, talking over loopback only (needs root, slurm-wlm and munge).
#
#   local-slurm.sh up DIR      start them; prints "export SLURM_CONF=DIR/slurm.conf" when the node
#                              takes jobs (exit 77 when root, slurm or munge is missing)
#   local-slurm.sh up DIR accounting
#                              the same with job accounting: a private MariaDB (datadir, socket
#                              and a loopback port in DIR/db, no system service touched) and a
#                              slurmdbd on it, the cluster registered (sacctmgr), slurmctld with
#                              accounting_storage/slurmdbd and MinJobAge=2 (a finished job leaves
#                              the controller within seconds; `sacct` still answers for it).
#                              Exit 77 when slurmdbd, sacct or MariaDB is missing (Debian:
#                              slurmdbd mariadb-server)
#   local-slurm.sh down DIR    stop exactly the daemons `up` started (their pid files) and cancel
#                              every job of this cluster
set -euo pipefail
usage() { echo "usage: $0 up DIR [accounting] | down DIR" >&2; exit 2; }
[[ $# -eq 2 || ( $# -eq 3 && $1 == up && $3 == accounting ) ]] || usage
cmd=$1 dir=$2 accounting=${3:-}

stop() {
  # Only while this directory's controller runs: once it is gone, scancel spends about 18 s
  # retrying it (a second `down`, as the tests' exit traps do after their own, paid that each time).
  if [[ -f $dir/slurm.conf && -s $dir/slurmctld.pid ]]; then
    SLURM_CONF=$dir/slurm.conf scancel --full --quiet -u root 2>/dev/null || true
  fi
  for d in slurmd slurmctld slurmdbd mariadbd mariadbd-spawn munged; do
    local f=$dir/$d.pid
    [[ -s $f ]] || continue
    local pid
    pid=$(cat "$f")
    # Only the process this directory started: its command line names the directory (slurmdbd,
    # which takes no file argument: its SLURM_CONF).
    if [[ -r /proc/$pid/cmdline ]] && { tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$dir" ||
      tr '\0' '\n' <"/proc/$pid/environ" | grep -qxF "SLURM_CONF=$dir/slurm.conf"; }; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do [[ -e /proc/$pid ]] || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A private MariaDB in $dir/db (bootstrapped by mariadb-install-db, no option file of the system
# read, loopback only) with a user for slurmdbd, then slurmdbd on it: its configuration in
# $dir/slurmdbd.conf (mode 0600, as slurmdbd demands of a file holding a password), found beside
# $SLURM_CONF. Prints the slurm.conf lines that point slurmctld at it.
start_accounting() {
  local db=$dir/db dbport dbdport pass
  # Called as $(start_accounting) || ...: errexit is off in here, so every step checks itself.
  mkdir -p "$db" || return 1
  mariadb-install-db --no-defaults --datadir="$db/data" --user=root --skip-test-db \
    --auth-root-authentication-method=socket --skip-name-resolve \
    --innodb-log-file-size=8M >"$dir/mariadb-install.log" 2>&1 ||
    { echo "$0: mariadb-install-db failed (see $dir/mariadb-install.log)" >&2; return 1; }
  dbport=$(free_port)
  mariadbd --no-defaults --datadir="$db/data" --socket="$db/mysqld.sock" --port="$dbport" \
    --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$dir/mariadbd.pid" \
    --log-error="$dir/mariadbd.log" --user=root --innodb-log-file-size=8M \
    --innodb-buffer-pool-size=32M --skip-log-bin </dev/null >/dev/null 2>&1 &
  # Its own pid file comes only once it is up; this one lets `down` stop one that never was.
  echo $! >"$dir/mariadbd-spawn.pid"
  local ok=
  for _ in $(seq 150); do
    mariadb --no-defaults -S "$db/mysqld.sock" -u root -e 'SELECT 1' >/dev/null 2>&1 && ok=1 && break
    sleep 0.2
  done
  [[ -n $ok ]] || { echo "$0: MariaDB did not answer within 30 s (see $dir/mariadbd.log)" >&2; return 1; }
  pass=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  # On stdin, so that the password never shows in a command line.
  mariadb --no-defaults -S "$db/mysqld.sock" -u root <<<"CREATE USER 'slurm'@'127.0.0.1' \
IDENTIFIED BY '$pass'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" ||
    { echo "$0: could not create slurmdbd's database user" >&2; return 1; }
  dbdport=$(free_port)
  (umask 077 && cat >"$dir/slurmdbd.conf" <<C
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
DbdAddr=127.0.0.1
DbdHost=$(hostname -s)
DbdPort=$dbdport
SlurmUser=root
PidFile=$dir/slurmdbd.pid
LogFile=$dir/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$dbport
StorageUser=slurm
StoragePass=$pass
StorageLoc=slurm_acct_db
C
  ) || return 1
  chmod 0600 "$dir/slurmdbd.conf" || return 1
  # AccountingStoragePass: the munge socket for slurmdbd connections (sacctmgr, sacct, slurmctld).
  cat <<C
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbdport
AccountingStoragePass=$dir/munge/munge.sock
MinJobAge=2
C
}

case $cmd in
up)
  [[ $EUID -eq 0 ]] || { echo "SKIP: a local Slurm needs root" >&2; exit 77; }
  for t in slurmctld slurmd munged srun sbatch scontrol; do
    command -v "$t" >/dev/null || { echo "SKIP: $t not found (Debian: slurm-wlm munge)" >&2; exit 77; }
  done
  if [[ -n $accounting ]]; then
    for t in slurmdbd sacctmgr sacct mariadbd mariadb-install-db mariadb; do
      command -v "$t" >/dev/null ||
        { echo "SKIP: $t not found (Debian: slurmdbd mariadb-server)" >&2; exit 77; }
    done
  fi
  mkdir -p "$dir"/{state,spool,munge}
  dir=$(cd "$dir" && pwd)
  chmod 0700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed"
  node=$(hostname -s)
  acct="AccountingStorageType=accounting_storage/none"
  if [[ -n $accounting ]]; then
    acct=$(start_accounting) || { stop; exit 1; }
  fi
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
$acct
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
  if [[ -n $accounting ]]; then
    slurmdbd || { echo "$0: slurmdbd did not start (see $dir/slurmdbd.log)" >&2; stop; exit 1; }
    # The cluster's row in the database, once slurmdbd answers (it creates its tables first).
    ok=
    for _ in $(seq 150); do
      sacctmgr -i add cluster faultline >"$dir/sacctmgr.log" 2>&1 && ok=1 && break
      sleep 0.2
    done
    [[ -n $ok ]] || { echo "$0: sacctmgr could not register the cluster within 30 s (see $dir/sacctmgr.log, $dir/slurmdbd.log)" >&2; stop; exit 1; }
  fi
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
