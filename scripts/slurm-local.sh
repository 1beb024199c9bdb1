#!/usr/bin/env bash
# A single-node SLURM on this machine, to try (and test) hydra/launcher=submitit_slurm for real.
#
#   sudo scripts/slurm-local.sh start    # install Debian's slurmctld slurmd slurmdbd munge slurm-client
#                                        # mariadb-server if missing, write the config, start munged,
#                                        # MariaDB, slurmdbd, slurmctld and slurmd, wait for the node
#   scripts/slurm-local.sh status        # exit 0 when the node answers sinfo (idle, mixed or allocated)
#   sudo scripts/slurm-local.sh stop     # stop slurmd, slurmctld and slurmdbd
# Exit status of start: 0 up, 3 the packages are missing and cannot be installed here, 1 anything else.
#
# Root is needed: the daemons, the munge key and /etc/slurm/. Idempotent: daemons already running are
# left as they are (unless the config this script writes changed). The config is one node, "localhost"
# (all of this machine's CPUs and most of its memory), in one partition, "local"; no cgroups
# (proctrack/linuxproc, task/none), so it also runs inside containers. A /etc/slurm/slurm.conf or
# slurmdbd.conf that this script did not write is never replaced.
#
# Why accounting (slurmdbd + MariaDB) on a one-node toy: submitit learns that a job ended without a
# result (a preempted job that exited 143, an OOM kill) only from `sacct`; without accounting the
# sweep's launcher waits for such a job forever.
set -euo pipefail

STATE=${SLURM_LOCAL_STATE:-/var/spool/tcgexp-slurm}   # pid files, logs, slurmctld/slurmd state
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
MARK="# written by tcgexp scripts/slurm-local.sh"
CLUSTER=tcgexp-local
PARTITION=local
WAIT_S=${SLURM_LOCAL_WAIT_S:-60}
CHANGED=0

die() { echo "slurm-local: $*" >&2; exit 1; }

# $1: a daemon's pid file. A stale one (the daemon died with the machine) may name a pid that another
# process has since taken, so the pid must also be that daemon (slurmd.pid -> slurmd).
running() {
  local pid
  [ -f "$1" ] && pid=$(cat "$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null \
    && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(basename "$1" .pid)" ]
}

install() {
  local missing=() bin
  for bin in /usr/sbin/slurmctld:slurmctld /usr/sbin/slurmd:slurmd /usr/sbin/slurmdbd:slurmdbd \
             /usr/sbin/munged:munge /usr/bin/sbatch:slurm-client /usr/sbin/mariadbd:mariadb-server; do
    [ -x "${bin%%:*}" ] || missing+=("${bin##*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  # exit 3: this machine cannot have SLURM (the tests skip on it); any other failure is a failure
  command -v apt-get >/dev/null || { echo "slurm-local: missing ${missing[*]} and no apt-get to install them" >&2; exit 3; }
  echo "slurm-local: installing ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
    || { echo "slurm-local: apt-get install ${missing[*]} failed" >&2; exit 3; }
}

# $1: the file; stdin: its new content. Replaced only when it changed (CHANGED=1: restart the daemons).
put() {
  if [ -f "$1" ] && ! grep -qF "$MARK" "$1"; then
    die "$1 exists and was not written by this script; not replacing it"
  fi
  cat >"$1.new"
  chmod 600 "$1.new"   # slurmdbd refuses a config that others can read (it holds the DB password)
  if cmp -s "$1.new" "$1"; then rm "$1.new"; else mv "$1.new" "$1"; CHANGED=1; fi
}

write_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  # leave 1 GiB to the system; jobs ask for --mem within this (submitit: hydra.launcher.mem_gb)
  mem_mb=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  mkdir -p /etc/slurm "$STATE/ctld" "$STATE/slurmd"
  put "$CONF" <<EOF
$MARK
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
# no cgroups: works in containers; nothing enforces --mem, which is fine for trying things out
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
MpiDefault=none
SchedulerType=sched/backfill
# jobs share the node by core and memory, so a 2-job sweep runs both at once on 2 CPUs
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# the node comes back by itself after a restart of the daemons
ReturnToService=2
# the node's CPUs and memory are what this file says, whatever slurmd detects (no DRAIN on a mismatch)
SlurmdParameters=config_overrides
# a job that scancel --signal=TERM stops gets this long before SIGKILL (at its time limit too)
KillWait=30
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
  chmod 644 "$CONF"   # every client (sbatch, sinfo, sacct) reads it
  put "$DBD_CONF" <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/slurmdbd.log
EOF
}

start_munge() {
  [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  if munge -n >/dev/null 2>&1; then return 0; fi   # a munged is answering already
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  # munged refuses to run as root; as the munge user, as its package's service does
  runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
  for _ in $(seq 50); do munge -n >/dev/null 2>&1 && return 0; sleep 0.1; done
  die "munged is not answering"
}

start_mariadb() {
  if ! mariadb-admin ping >/dev/null 2>&1; then
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    # mariadbd-safe stays in the foreground (it restarts mariadbd if that dies): detach it
    setsid mariadbd-safe >/dev/null 2>&1 </dev/null &
    for _ in $(seq 300); do mariadb-admin ping >/dev/null 2>&1 && break; sleep 0.1; done
    mariadb-admin ping >/dev/null 2>&1 || die "MariaDB did not start (see /var/log/mysql/)"
  fi
  # root reaches MariaDB through its socket without a password (Debian's unix_socket auth)
  mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
              GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "could not create MariaDB's slurm user"
}

node_up() {
  # the node's state as sinfo sees it: idle, mixed or allocated means it takes jobs
  sinfo -h -n localhost -o %t 2>/dev/null | grep -qE '^(idle|mix|alloc)'
}

dbd_up() { sacctmgr -n list cluster >/dev/null 2>&1; }

wait_for() {  # the command that says it is there, for at most WAIT_S
  local deadline=$(( $(date +%s) + WAIT_S ))
  until "$@"; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.5
  done
}

stop_daemons() {
  local pidfile pid
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid" "$STATE/slurmdbd.pid"; do
    if running "$pidfile"; then
      pid=$(cat "$pidfile")
      kill "$pid"
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  done
}

start() {
  [ "$(id -u)" -eq 0 ] || die "start needs root (the daemons and /etc/slurm/)"
  install
  write_conf
  [ "$CHANGED" = 1 ] && stop_daemons   # the daemons read their config at start
  start_munge
  start_mariadb
  running "$STATE/slurmdbd.pid" || /usr/sbin/slurmdbd || die "slurmdbd did not start (see $STATE/slurmdbd.log)"
  wait_for dbd_up || die "slurmdbd is not answering (see $STATE/slurmdbd.log)"
  # the cluster must be in the accounting DB before slurmctld registers with it
  sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
  running "$STATE/slurmctld.pid" || /usr/sbin/slurmctld || die "slurmctld did not start (see $STATE/slurmctld.log)"
  # -N: this node's name in the config, whatever the machine's hostname
  running "$STATE/slurmd.pid" || /usr/sbin/slurmd -N localhost || die "slurmd did not start (see $STATE/slurmd.log)"
  local deadline=$(( $(date +%s) + WAIT_S ))
  until node_up; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      sinfo -N -l >&2 || true
      tail -n 20 "$STATE/slurmctld.log" "$STATE/slurmd.log" >&2 || true
      die "the node is not up after ${WAIT_S}s"
    fi
    # a node left DOWN/DRAIN by an earlier run of the daemons: put it back
    scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true
    sleep 1
  done
  echo "slurm-local: up; partition '$PARTITION' on localhost ($(nproc) CPUs); state and logs in $STATE" >&2
}

stop() {
  [ "$(id -u)" -eq 0 ] || die "stop needs root"
  stop_daemons
  echo "slurm-local: stopped slurmd, slurmctld and slurmdbd (munged and MariaDB left running)" >&2
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) node_up ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
