#!/usr/bin/env bash
# Runs an MLflow tracking server that several machines (or processes) log to: runs, metrics and
# params in a database, artifacts uploaded through the server into a directory it owns.
#
#   scripts/mlflow_server.sh [--backend-store-uri URI] [--artifacts-destination DIR_OR_URI]
#                            [--host ADDR] [--port PORT] [--workers N]
#                            [--background] [--pidfile FILE] [--log FILE] [--timeout SECONDS]
#                            [-- EXTRA_MLFLOW_SERVER_ARGS...]
#   scripts/mlflow_server.sh --stop --pidfile FILE
#
#   --backend-store-uri      default $XPDIST_MLFLOW_BACKEND, else $XPDIST_PG_URI (see
#                            scripts/pg_local.sh), e.g. postgresql://user:pass@127.0.0.1:5432/mlflow.
#                            Required: the point of this server is a shared database.
#   --artifacts-destination  where uploaded artifacts go (--serve-artifacts is on): default
#                            $XPDIST_MLFLOW_ARTIFACTS, else ./mlartifacts.
#   --host                   address to bind, default 127.0.0.1. Other machines need an address
#                            they can reach (e.g. the bridge address in tests, or 0.0.0.0). The
#                            server has NO authentication: bind a trusted network only.
#                            MLflow 3.17 checks the Host header of requests: localhost and private
#                            addresses (10.*, 172.16-31.*, 192.168.*) pass by default; for a DNS
#                            name add `-- --allowed-hosts name,name:PORT`.
#   --port                   default $XPDIST_MLFLOW_PORT, else 5000.
#   --workers                uvicorn worker processes, default 1 (MLflow's own default is 4).
#   --background             start it in its own process group, wait (at most --timeout, default
#                            120 s) until GET /health answers OK, write the PID to --pidfile
#                            (default ./mlflow-server.pid), print `export MLFLOW_TRACKING_URI=...`
#                            and return. Without it the server runs in the foreground (exec);
#                            Ctrl-C stops it.
#   --stop                   TERM the process group recorded in --pidfile (KILL after 10 s).
#
# MLflow's GenAI job runner (7 huey consumer processes, a temp dir in /dev/shm that a killed
# server leaves behind) is off unless MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true is set.
# Clients: MLFLOW_TRACKING_URI=http://HOST:PORT (MlflowClient("http://HOST:PORT")).
# The database needs a driver in this Python: `pip install "psycopg[binary]"` for
# postgresql:// URIs (SQLAlchemy 2's default dialect), or psycopg2-binary with postgresql+psycopg2://.
set -euo pipefail

log() { echo "mlflow_server.sh: $*" >&2; }
die() { echo "mlflow_server.sh: $*" >&2; exit 2; }
alive() { local s; [[ -n "${1:-}" ]] && s="$(ps -o stat= -p "$1" 2>/dev/null)" && [[ "$s" != Z* ]]; }
group_alive() { [[ -n "$(ps -o stat= -g "$1" 2>/dev/null | grep -v '^Z' || true)" ]]; }

backend="${XPDIST_MLFLOW_BACKEND:-${XPDIST_PG_URI:-}}"
artifacts="${XPDIST_MLFLOW_ARTIFACTS:-./mlartifacts}"
host=127.0.0.1
port="${XPDIST_MLFLOW_PORT:-5000}"
workers=1
background=0
stop=0
pidfile=./mlflow-server.pid
logfile=""
timeout=120
extra=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --backend-store-uri) backend="${2:?}"; shift 2 ;;
    --artifacts-destination) artifacts="${2:?}"; shift 2 ;;
    --host) host="${2:?}"; shift 2 ;;
    --port) port="${2:?}"; shift 2 ;;
    --workers) workers="${2:?}"; shift 2 ;;
    --pidfile) pidfile="${2:?}"; shift 2 ;;
    --log) logfile="${2:?}"; shift 2 ;;
    --timeout) timeout="${2:?}"; shift 2 ;;
    --background) background=1; shift ;;
    --stop) stop=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

if (( stop )); then
  [[ -f "$pidfile" ]] || die "no pidfile $pidfile"
  pid="$(cat "$pidfile")"
  if group_alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 100); do group_alive "$pid" || break; sleep 0.1; done
    if group_alive "$pid"; then log "server group $pid ignored TERM for 10s: KILL"; kill -KILL -- "-$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidfile"
  log "stopped $pid"
  exit 0
fi

[[ -n "$backend" ]] || die "no backend store: pass --backend-store-uri URI (or set XPDIST_PG_URI)"
command -v mlflow >/dev/null || die "no mlflow command in PATH (pip install mlflow)"
if [[ "$artifacts" != *://* ]]; then mkdir -p "$artifacts"; artifacts="$(cd "$artifacts" && pwd)"; fi

export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"
cmd=(mlflow server --backend-store-uri "$backend" --serve-artifacts --artifacts-destination "$artifacts"
     --host "$host" --port "$port" --workers "$workers" ${extra[@]+"${extra[@]}"})
probe_host="$host"; [[ "$host" == 0.0.0.0 ]] && probe_host=127.0.0.1
url="http://$probe_host:$port"

if (( ! background )); then
  log "serving $url (backend ${backend%%://*}://..., artifacts $artifacts); Ctrl-C stops it"
  exec "${cmd[@]}"
fi

if [[ -f "$pidfile" ]] && alive "$(cat "$pidfile")"; then die "already running: pid $(cat "$pidfile") in $pidfile"; fi
[[ -n "$logfile" ]] || logfile="${pidfile%.pid}.log"
t0=$SECONDS
setsid "${cmd[@]}" </dev/null >>"$logfile" 2>&1 &
pid=$!
echo "$pid" >"$pidfile"
while true; do
  if ! alive "$pid"; then
    log "server exited during start; last lines of $logfile:"; tail -n 15 "$logfile" >&2; rm -f "$pidfile"; exit 1
  fi
  if python3 - "$url/health" <<'PY' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
PY
  then break; fi
  if (( SECONDS - t0 >= timeout )); then
    log "no answer from $url/health after ${timeout}s; stopping it (log: $logfile)"
    tail -n 15 "$logfile" >&2
    "$0" --stop --pidfile "$pidfile"
    exit 1
  fi
  sleep 0.5
done
log "up in $((SECONDS - t0))s: $url, pid $pid (process group), log $logfile"
echo "export MLFLOW_TRACKING_URI=$url"
