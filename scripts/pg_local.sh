#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1, e.g. as the backend store of an MLflow server.
#
#   eval "$(scripts/pg_local.sh up)"   # start (idempotent); prints only the export line:
#                                      #   export XPDIST_PG_URI=postgresql://xpdist:PASSWORD@127.0.0.1:PORT/mlflow
#   scripts/pg_local.sh status         # exit 0 and print the export if up, 1 if not
#   scripts/pg_local.sh down           # stop it and remove its directory
#
# Everything lives in $XPDIST_PG_STATE (default /tmp/xpdist-pg): the data directory (initdb),
# the unix socket, the log, the password and the server's PID. The port is $XPDIST_PG_PORT, or a
# free one. The server listens on 127.0.0.1 only; TCP logins need the password
# (scram-sha-256); the unix socket in the state directory allows only its OS user (peer).
# As root, the server runs as the `postgres` user that Debian's package creates; otherwise as
# the calling user. If the server binaries are missing, installs Debian's `postgresql`
# (root and apt-get needed). Clients need a driver: `pip install psycopg2-binary`.
set -Eeuo pipefail

STATE="${XPDIST_PG_STATE:-/tmp/xpdist-pg}"
DB=mlflow
DBUSER=xpdist
STOP_TIMEOUT=10

log() { echo "pg_local.sh: $*" >&2; }
die() { echo "pg_local.sh: $*" >&2; exit 1; }
# A zombie is not alive: PID 1 here reaps orphans late, and `kill -0` succeeds on a zombie.
alive() { local s; [[ -n "${1:-}" ]] && s="$(ps -o stat= -p "$1" 2>/dev/null)" && [[ "$s" != Z* ]]; }

pg_bin() {  # the newest installed server's bin directory
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  [[ -n "$d" && -x "$d/initdb" ]] && echo "$d"
}

ensure_packages() {
  pg_bin >/dev/null && return 0
  [[ "$(id -u)" -eq 0 ]] || die "PostgreSQL server binaries missing; installing them needs root"
  command -v apt-get >/dev/null || die "PostgreSQL server binaries missing and no apt-get to install them"
  log "installing postgresql with apt-get"
  apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2 || die "apt-get install postgresql failed"
  pg_bin >/dev/null || die "postgresql installed but no /usr/lib/postgresql/*/bin/initdb"
}

# as_owner CMD...: runs CMD as the OS user that owns the server.
as_owner() {
  if [[ "$(id -u)" -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

uri() { echo "postgresql://$DBUSER:$(cat "$STATE/password")@127.0.0.1:$(cat "$STATE/port")/$DB"; }

is_up() { [[ -f "$STATE/postgres.pid" ]] && alive "$(cat "$STATE/postgres.pid")"; }

cmd_up() {
  if is_up; then echo "export XPDIST_PG_URI=$(uri)"; return 0; fi
  if [[ -e "$STATE" ]]; then log "stale $STATE: cleaning it first"; cmd_down; fi
  ensure_packages
  if [[ "$(id -u)" -eq 0 ]]; then id postgres >/dev/null 2>&1 || die "no 'postgres' OS user to run the server as"; fi
  local bin port pass t0=$SECONDS
  bin="$(pg_bin)"
  port="${XPDIST_PG_PORT:-$(free_port)}"
  pass="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"

  mkdir -m 0700 "$STATE"
  : >"$STATE/.xpdist-pg"  # down removes only a directory that carries this mark
  trap 'log "up failed"; tail -n 20 "$STATE/postgres.log" >&2 2>/dev/null || true; cmd_down' ERR
  echo "$port" >"$STATE/port"
  echo "$pass" >"$STATE/password"
  chmod 0600 "$STATE/password"
  [[ "$(id -u)" -eq 0 ]] && chown -R postgres: "$STATE"

  as_owner "$bin/initdb" -D "$STATE/data" -U postgres --auth-local=peer --auth-host=scram-sha-256 \
    -E UTF8 --locale=C.UTF-8 >"$STATE/initdb.log" 2>&1 || { tail -n 20 "$STATE/initdb.log" >&2; false; }
  cat >"$STATE/data/pg_hba.conf" <<EOF
# Written by scripts/pg_local.sh
local all all               peer map=owner
host  all all 127.0.0.1/32  scram-sha-256
EOF
  echo "owner $(id -un) postgres" >>"$STATE/data/pg_ident.conf"
  echo "owner postgres postgres" >>"$STATE/data/pg_ident.conf"
  as_owner "$bin/pg_ctl" -D "$STATE/data" -l "$STATE/postgres.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $STATE -c fsync=off" start >/dev/null
  head -n 1 "$STATE/data/postmaster.pid" >"$STATE/postgres.pid"

  as_owner "$bin/psql" -h "$STATE" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q >/dev/null <<EOF
CREATE ROLE $DBUSER LOGIN PASSWORD '$pass';
CREATE DATABASE $DB OWNER $DBUSER;
EOF
  trap - ERR
  log "up in $((SECONDS - t0))s: 127.0.0.1:$port, pid $(cat "$STATE/postgres.pid"), dir $STATE"
  echo "export XPDIST_PG_URI=$(uri)"
}

cmd_down() {
  trap - ERR
  [[ -e "$STATE" ]] || { log "not up"; return 0; }
  [[ -f "$STATE/.xpdist-pg" ]] || die "$STATE was not made by pg_local.sh: not touching it"
  local bin pid
  pid="$(cat "$STATE/postgres.pid" 2>/dev/null || true)"
  [[ -n "$pid" ]] || pid="$(head -n 1 "$STATE/data/postmaster.pid" 2>/dev/null || true)"
  bin="$(pg_bin || true)"
  if alive "$pid" && [[ -n "$bin" ]]; then
    as_owner "$bin/pg_ctl" -D "$STATE/data" -m fast -w -t "$STOP_TIMEOUT" stop >/dev/null 2>&1 || true
  fi
  if alive "$pid"; then
    log "postgres ($pid) still alive after pg_ctl stop: TERM, then KILL"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq $((STOP_TIMEOUT * 10))); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$STATE"
  log "down"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) if is_up; then echo "export XPDIST_PG_URI=$(uri)"; else log "not up"; exit 1; fi ;;
  *) die "usage: $0 up|down|status" ;;
esac
