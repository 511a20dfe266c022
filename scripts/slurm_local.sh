#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for tests and for trying the slurm launcher.
#
#   eval "$(scripts/slurm_local.sh up)"   # start (idempotent); prints only `export ...` lines
#   srun -n 3 hostname; sbatch --wrap 'sleep 1'; squeue; scontrol requeue JOBID
#   scripts/slurm_local.sh status         # exit 0 if up (prints the exports again), 1 if not
#   scripts/slurm_local.sh down           # cancel jobs, stop the daemons it started, remove its files
#
# Needs root (slurmd runs jobs as any user) and, the first time, apt-get (installs Debian's
# slurm-wlm and munge). Everything it makes lives in one state directory (mktemp -d): slurm.conf,
# a private munge key and socket, the daemons' state, spool, logs and PID files. The path of
# that directory is recorded in the state file $XPDIST_SLURM_STATE (default /tmp/xpdist-slurm).
# The daemons (munged, slurmctld, slurmd) run in the foreground of their own sessions; `down`
# stops exactly those PIDs (TERM, then KILL after a bound). Nothing system-wide is started.
# All traffic stays on 127.0.0.1 (SlurmctldHost/NodeAddr), on two free ports picked at `up`.
#
# The node declares CPUs=8 (more than the machine has) and the partition OverSubscribe=FORCE,
# memory is not a consumable resource: several multi-task jobs fit on 2 cores.
# There is no accounting database (sacct does not work): use squeue / scontrol show job
# (finished jobs stay visible for MinJobAge=300 s).
set -Eeuo pipefail

STATE_FILE="${XPDIST_SLURM_STATE:-/tmp/xpdist-slurm}"
UP_TIMEOUT="${XPDIST_SLURM_UP_TIMEOUT:-60}"
STOP_TIMEOUT=10

log() { echo "slurm_local.sh: $*" >&2; }
die() { echo "slurm_local.sh: $*" >&2; exit 1; }

# A zombie is not alive: PID 1 here reaps orphans late, and `kill -0` succeeds on a zombie.
alive() { local s; [[ -n "${1:-}" ]] && s="$(ps -o stat= -p "$1" 2>/dev/null)" && [[ "$s" != Z* ]]; }

# stop_pid NAME PIDFILE: TERM the recorded PID, then KILL it after $STOP_TIMEOUT s.
stop_pid() {
  local name="$1" file="$2" pid
  [[ -f "$file" ]] || return 0
  pid="$(cat "$file")"
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((STOP_TIMEOUT * 10))); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then
      log "$name ($pid) ignored TERM for ${STOP_TIMEOUT}s: KILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.2
    fi
  fi
  rm -f "$file"
}

state_dir() { [[ -f "$STATE_FILE" ]] && cat "$STATE_FILE" || true; }

print_exports() {
  echo "export SLURM_CONF=$1/slurm.conf"
  echo "export XPDIST_SLURM_DIR=$1"
}

is_up() {  # is_up DIR: all three recorded daemons alive
  local d="$1" n
  [[ -n "$d" && -d "$d" ]] || return 1
  for n in munged slurmctld slurmd; do alive "$(cat "$d/$n.pid" 2>/dev/null)" || return 1; done
}

ensure_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
    && command -v sinfo >/dev/null && return 0
  command -v apt-get >/dev/null || die "slurm-wlm/munge missing and no apt-get to install them"
  log "installing slurm-wlm and munge with apt-get (a minute or two)"
  apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >&2 \
    || die "apt-get install slurm-wlm munge failed"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME LOGFILE CMD...: runs CMD in the foreground of a new session, in the background of
# this script; records its PID in $dir/NAME.pid.
start() {
  local name="$1" logf="$2"; shift 2
  setsid "$@" </dev/null >>"$logf" 2>&1 &
  echo $! >"$dir/$name.pid"
}

cmd_up() {
  [[ "$(id -u)" -eq 0 ]] || die "must run as root (slurmd starts jobs as their users)"
  dir="$(state_dir)"
  if is_up "$dir"; then print_exports "$dir"; return 0; fi
  if [[ -n "$dir" ]]; then log "stale state in $dir: cleaning it first"; cmd_down; fi
  ensure_packages

  local host ctld_port slurmd_port t0 conf
  host="$(hostname -s)"
  t0=$SECONDS
  dir="$(mktemp -d /tmp/xpdist-slurm.XXXXXX)"
  echo "$dir" >"$STATE_FILE"
  trap 'log "up failed; the ends of its logs:"; tail -n 20 "$dir"/log/*.log >&2 2>/dev/null || true; cmd_down' ERR
  chmod 0700 "$dir"
  mkdir -p "$dir/munge" "$dir/ctld" "$dir/spool" "$dir/log"
  chmod 0700 "$dir/munge"

  # munge: a key of its own (the system key belongs to the munge user) and a private socket, so
  # neither a system munged nor another cluster is touched.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
  start munged "$dir/log/munged.out" munged --foreground --force \
    --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munged.seed" \
    --log-file="$dir/log/munged.log"
  for _ in $(seq 100); do [[ -S "$dir/munge/munge.socket" ]] && break; sleep 0.1; done
  [[ -S "$dir/munge/munge.socket" ]] || { tail -n 5 "$dir/log/munged.log" >&2 || true; false; }

  ctld_port="$(free_port)"
  slurmd_port="$(free_port)"
  while [[ "$slurmd_port" == "$ctld_port" ]]; do slurmd_port="$(free_port)"; done
  conf="$dir/slurm.conf"
  cat >"$conf" <<EOF
# Written by scripts/slurm_local.sh: a single-node cluster for tests.
ClusterName=xpdist
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobRequeue=1
MailProg=/bin/true
ReturnToService=2
InactiveLimit=0
KillWait=5
MinJobAge=300
# Schedule promptly (a requeued job otherwise waits for the next 60 s pass).
SchedulerParameters=sched_interval=2,bf_interval=2
SlurmdTimeout=60
SlurmctldTimeout=60
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.daemon.pid
SlurmdPidFile=$dir/slurmd.daemon.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/plugstack.conf
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=2048 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
  : >"$dir/plugstack.conf"

  export SLURM_CONF="$conf"
  start slurmctld "$dir/log/slurmctld.out" slurmctld -D -i -f "$conf"
  start slurmd "$dir/log/slurmd.out" slurmd -D -f "$conf"

  local state=""
  while (( SECONDS - t0 < UP_TIMEOUT )); do
    is_up "$dir" || { log "a daemon exited during start"; false; }
    state="$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true)"
    [[ "$state" == idle* ]] && break
    sleep 0.5
  done
  [[ "$state" == idle* ]] || { log "node not idle after ${UP_TIMEOUT}s (state '${state:-none}')"; false; }
  trap - ERR
  log "up in $((SECONDS - t0))s: $dir (node $host idle, ports $ctld_port/$slurmd_port)"
  print_exports "$dir"
}

cmd_down() {
  local d; d="${dir:-$(state_dir)}"
  trap - ERR
  if [[ -z "$d" ]]; then log "not up"; return 0; fi
  if [[ -d "$d" ]]; then
    if alive "$(cat "$d/slurmctld.pid" 2>/dev/null)"; then
      # Cancel every job of this cluster, so that no slurmstepd or job process outlives it.
      SLURM_CONF="$d/slurm.conf" scancel --quiet --full --signal=KILL --state=RUNNING -u root 2>/dev/null || true
      SLURM_CONF="$d/slurm.conf" scancel --quiet -u root 2>/dev/null || true
      for _ in $(seq 100); do
        [[ -z "$(SLURM_CONF="$d/slurm.conf" squeue -h -t R,CG,S -o %i 2>/dev/null)" ]] && break
        sleep 0.1
      done
    fi
    stop_pid slurmd "$d/slurmd.pid"
    stop_pid slurmctld "$d/slurmctld.pid"
    stop_pid munged "$d/munged.pid"
    case "$d" in /tmp/xpdist-slurm.*) rm -rf "$d" ;; *) log "not removing unexpected dir $d" ;; esac
  fi
  rm -f "$STATE_FILE"
  log "down"
}

cmd_status() {
  local d; d="$(state_dir)"
  if is_up "$d"; then print_exports "$d"; SLURM_CONF="$d/slurm.conf" sinfo >&2; return 0; fi
  log "not up"; return 1
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) die "usage: $0 up|down|status" ;;
esac
