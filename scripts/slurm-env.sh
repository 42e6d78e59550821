#!/usr/bin/env bash
# Bring up a one-node Slurm cluster for replay-tui on a Debian bookworm host (root):
# munge, slurmctld and slurmd from Debian's slurm-wlm (22.05), and accounting through
# slurmdbd + a local MariaDB so that `sacct` lists every job.  Jobs run as the submitting
# user and can call the local Docker engine (scripts/docker-env.sh brings it up).
#
# Idempotent: a second run only checks that everything is there and answers.
#
# Usage: scripts/slurm-env.sh [--no-accounting | --stop-controller | --start-controller | --status]
#   --no-accounting     no slurmdbd/MariaDB (sacct then has nothing; squeue/scontrol still work)
#   --stop-controller   stop slurmctld only (to see what clients do when it is down)
#   --start-controller  start slurmctld again (a plain run does that too)
#   --status            print sinfo and exit (non-zero when the cluster does not answer)
#
# Environment:
#   REPLAY_TUI_SLURM_DIR   state dir (default /var/lib/replay-tui-slurm): slurm.conf lives
#                          in /etc/slurm, everything the daemons write (state, spool,
#                          logs, pid files, the MariaDB data) lives here.
#
# Ports: slurmctld 6817, slurmd 6818, slurmdbd 6819 (localhost); MariaDB has no TCP port.
set -euo pipefail

STATE="${REPLAY_TUI_SLURM_DIR:-/var/lib/replay-tui-slurm}"
CLUSTER="replaytui"
PARTITION="main"
HOST=$(hostname -s)
CONF=/etc/slurm/slurm.conf
DBD_CONF=/etc/slurm/slurmdbd.conf
MYSQL_SOCK=/run/mysqld/mysqld.sock
ACCOUNTING=1
ACTION=up

log() { printf '[slurm-env] %s\n' "$*" >&2; }
die() { printf '[slurm-env] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'rc=$?; printf "[slurm-env] ERROR: command failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2' ERR

while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-accounting) ACCOUNTING=0 ;;
    --stop-controller) ACTION=stop-controller ;;
    --start-controller) ACTION=up ;;
    --status) ACTION=status ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) die "unknown option: $1 (see --help)" ;;
  esac
  shift
done

if [[ $ACTION == status ]]; then
  exec sinfo -N -o '%N %t %c %m %P'
fi

[[ $(id -u) -eq 0 ]] || die "must run as root"
mkdir -p "$STATE"/{state,spool,log,run}

# One run at a time (tests and engineers may call this concurrently).
exec 9>"$STATE/.lock"
flock -w 600 9 || die "another slurm-env.sh run holds $STATE/.lock"

# wait_for SECONDS DESCRIPTION CMD...: poll CMD until it succeeds or time runs out.
wait_for() {
  local secs=$1 what=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
  log "$what is up"
}

# daemonize LOG CMD...: start CMD (in the foreground mode of the daemon) in its own
# session, detached from us, with every inherited fd above 2 closed (the daemon must not
# hold our lock or a caller's pipe).
daemonize() {
  local logf=$1 fd; shift
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      if ((fd > 2)); then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec setsid nohup "$@" >>"$logf" 2>&1 </dev/null
  ) &
}

running() { pgrep -x "$1" >/dev/null; }

pid_of() {  # the pid in a pid file, if that process is alive
  local f=$1 p
  [[ -s $f ]] || return 1
  p=$(cat "$f")
  kill -0 "$p" 2>/dev/null && echo "$p"
}

if [[ $ACTION == stop-controller ]]; then
  if p=$(pid_of "$STATE/run/slurmctld.pid"); then
    log "stopping slurmctld (pid $p)"
    kill -TERM "$p"
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$p" 2>/dev/null && die "slurmctld (pid $p) did not stop within 10 s"
  else
    log "slurmctld is not running"
  fi
  exit 0
fi

# ---------------------------------------------------------------- 1. packages
missing=()
command -v slurmctld >/dev/null || missing+=(slurmctld)
command -v slurmd >/dev/null || missing+=(slurmd)
command -v sbatch >/dev/null || missing+=(slurm-client)
command -v munged >/dev/null || missing+=(munge)
if ((ACCOUNTING)); then
  command -v slurmdbd >/dev/null || missing+=(slurmdbd)
  command -v mariadbd >/dev/null || missing+=(mariadb-server)
fi
if ((${#missing[@]})); then
  log "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update || die "apt-get update failed"
  apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}" \
    || die "apt-get install ${missing[*]} failed"
fi

# ---------------------------------------------------------------- 2. munge
if [[ ! -s /etc/munge/munge.key ]]; then
  log "creating a munge key"
  mungekey -c -k /etc/munge/munge.key
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "munged already running"
else
  rm -f /run/munge/munged.pid
  log "starting munged as the munge user"
  daemonize "$STATE/log/munged.out" runuser -u munge -- munged -F
  wait_for 20 "munged" sh -c 'munge -n | unmunge' || die "munged did not come up (see $STATE/log/munged.out)"
fi

# ---------------------------------------------------------------- 3. configuration
CPUS=$(nproc)
# The node's socket/core layout as slurmd sees it (a mismatch drains the node).
TOPO=$(slurmd -C | head -n1 | grep -o 'Boards=[0-9]* SocketsPerBoard=[0-9]* CoresPerSocket=[0-9]* ThreadsPerCore=[0-9]*' || true)
MEM_MB=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
REAL_MEM=$((MEM_MB - 1024 < 16000 ? MEM_MB - 1024 : 16000))
if ((ACCOUNTING)); then
  ACCT_LINES="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none"
else
  ACCT_LINES="AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none"
fi
NEW_CONF=$(cat <<EOF
# Written by replay-tui scripts/slurm-env.sh: a one-node cluster on $HOST.
ClusterName=$CLUSTER
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
StateSaveLocation=$STATE/state
SlurmdSpoolDir=$STATE/spool
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# Short waits so that cancelled and timed-out jobs end within seconds.
KillWait=5
MinJobAge=300
MessageTimeout=10
$ACCT_LINES
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
NodeName=$HOST CPUs=$CPUS $TOPO RealMemory=$REAL_MEM State=UNKNOWN
PartitionName=$PARTITION Nodes=$HOST Default=YES MaxTime=7-00:00:00 State=UP
EOF
)
CONF_CHANGED=0
if [[ ! -f $CONF ]] || [[ "$(cat "$CONF")" != "$NEW_CONF" ]]; then
  log "writing $CONF"
  mkdir -p /etc/slurm
  printf '%s\n' "$NEW_CONF" >"$CONF.tmp" && mv "$CONF.tmp" "$CONF"
  CONF_CHANGED=1
fi

# ---------------------------------------------------------------- 4. accounting
if ((ACCOUNTING)); then
  if [[ -S $MYSQL_SOCK ]] && mariadb-admin --socket="$MYSQL_SOCK" ping >/dev/null 2>&1; then
    log "MariaDB already answering"
  else
    if [[ ! -d $STATE/mysql/mysql ]]; then
      log "initialising MariaDB data in $STATE/mysql"
      install -d -o mysql -g mysql "$STATE/mysql"
      mariadb-install-db --user=mysql --datadir="$STATE/mysql" --skip-test-db \
        --auth-root-authentication-method=socket >"$STATE/log/mariadb-install.log" 2>&1 \
        || die "mariadb-install-db failed (see $STATE/log/mariadb-install.log)"
    fi
    install -d -o mysql -g mysql /run/mysqld
    log "starting MariaDB (no TCP, socket $MYSQL_SOCK)"
    daemonize "$STATE/log/mariadb.log" mariadbd --user=mysql --datadir="$STATE/mysql" \
      --socket="$MYSQL_SOCK" --skip-networking --pid-file=/run/mysqld/mariadb.pid \
      --innodb-buffer-pool-size=64M --performance-schema=OFF
    wait_for 60 "MariaDB" mariadb-admin --socket="$MYSQL_SOCK" ping \
      || die "MariaDB did not come up (see $STATE/log/mariadb.log)"
  fi
  NEW_DBD=$(cat <<EOF
# Written by replay-tui scripts/slurm-env.sh
DbdHost=localhost
SlurmUser=root
AuthType=auth/munge
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
PidFile=$STATE/run/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
DebugLevel=info
EOF
)
  if [[ ! -f $DBD_CONF ]] || [[ "$(cat "$DBD_CONF")" != "$NEW_DBD" ]]; then
    log "writing $DBD_CONF"
    (umask 077; printf '%s\n' "$NEW_DBD" >"$DBD_CONF.tmp") && mv "$DBD_CONF.tmp" "$DBD_CONF"
    if p=$(pid_of "$STATE/run/slurmdbd.pid"); then kill -TERM "$p"; sleep 1; fi
  fi
  chmod 0600 "$DBD_CONF"
  if pid_of "$STATE/run/slurmdbd.pid" >/dev/null; then
    log "slurmdbd already running"
  else
    log "starting slurmdbd"
    daemonize "$STATE/log/slurmdbd.out" slurmdbd -D
    wait_for 60 "slurmdbd" sacctmgr -n list cluster \
      || die "slurmdbd did not answer (see $STATE/log/slurmdbd.log)"
  fi
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
    log "registering cluster $CLUSTER in the accounting database"
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
fi

# ---------------------------------------------------------------- 5. controller and node
if ((CONF_CHANGED)); then
  for d in slurmctld slurmd; do
    if p=$(pid_of "$STATE/run/$d.pid"); then
      log "restarting $d for the new configuration"
      kill -TERM "$p"
      for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    fi
  done
fi
if pid_of "$STATE/run/slurmctld.pid" >/dev/null; then
  log "slurmctld already running"
else
  log "starting slurmctld"
  daemonize "$STATE/log/slurmctld.out" slurmctld -D
fi
wait_for 60 "slurmctld" scontrol ping || die "slurmctld does not answer (see $STATE/log/slurmctld.log)"
if pid_of "$STATE/run/slurmd.pid" >/dev/null; then
  log "slurmd already running"
else
  log "starting slurmd"
  daemonize "$STATE/log/slurmd.out" slurmd -D
fi

node_ready() {
  local st
  st=$(sinfo -h -N -n "$HOST" -o '%t' 2>/dev/null | head -n1)
  [[ $st == idle || $st == mix || $st == alloc ]]
}
if ! wait_for 60 "node $HOST" node_ready; then
  st=$(sinfo -h -N -n "$HOST" -o '%t %E' 2>/dev/null || true)
  if [[ $st == drain* || $st == down* ]]; then
    log "node $HOST is '$st'; resuming it"
    scontrol update NodeName="$HOST" State=RESUME || true
  fi
  wait_for 30 "node $HOST" node_ready || die "node $HOST is not idle: $(sinfo -h -N -o '%t %E')"
fi
log "cluster $CLUSTER ready: $(sinfo -h -N -o '%N %t cpus=%c mem=%m partition=%P')"
