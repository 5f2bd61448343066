#!/usr/bin/env bash
# Installs, starts and stops the peer databases of the side-by-side benchmark (issue 6) on
# 127.0.0.1, each in its own data directory. Used by scripts/compare.sh and by the tests of
# crates/bench (tests/peers.rs).
#
#   scripts/peers.sh install                    apt-get the peers (and jq) that are missing
#   scripts/peers.sh start SYSTEM DIR PORT      start postgres|tarantool|redis; prints its target URL
#   scripts/peers.sh stop SYSTEM DIR            stop what `start` started in DIR
#   scripts/peers.sh pid SYSTEM DIR             the process id of what `start` started in DIR
#
# Durability (PEER_DURABILITY) matches Lockstep's run:
# - off (default; Lockstep with --command-log off): PostgreSQL uses UNLOGGED tables (the
#   apps' peers/postgres.sql) with fsync and synchronous_commit off; Tarantool runs memtx
#   with wal_mode='none'; Redis has neither RDB snapshots nor an AOF.
# - sync (Lockstep with --command-log sync: acknowledged after fdatasync): PostgreSQL with
#   fsync and synchronous_commit on (the benchmark then creates logged tables); Tarantool
#   with wal_mode='fsync'; Redis with an AOF and appendfsync always.
# Memory: PEER_MEMORY_MB (default 4096) for PostgreSQL's shared buffers / 4 and
# Tarantool's memtx arena.
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
MEMORY_MB=${PEER_MEMORY_MB:-4096}
DURABILITY=${PEER_DURABILITY:-off}
case "$DURABILITY" in off|sync) ;; *) echo "peers.sh: PEER_DURABILITY must be off or sync" >&2; exit 1 ;; esac

die() { echo "peers.sh: $*" >&2; exit 1; }

install() {
  local need=()
  [ -x "$PG_BIN/postgres" ] || need+=(postgresql-15)
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  command -v tarantool >/dev/null 2>&1 || need+=(tarantool)
  command -v jq >/dev/null 2>&1 || need+=(jq)  # compare.sh reads the reports with it
  [ ${#need[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${need[*]} (services are started by hand, never by the package)" >&2
  $sudo apt-get update -q >&2
  $sudo apt-get install -y -q "${need[@]}" >&2
}

start_postgres() {
  local dir=$1 port=$2 run=()
  [ -x "$PG_BIN/postgres" ] || die "PostgreSQL 15 is not installed in $PG_BIN (run: scripts/peers.sh install)"
  mkdir -p "$dir"
  # PostgreSQL refuses to run as root.
  if [ "$(id -u)" -eq 0 ]; then chown -R postgres: "$dir"; run=(runuser -u postgres --); fi
  "${run[@]}" "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust --locale=C -E UTF8 >"$dir/initdb.log" 2>&1 \
    || die "initdb failed: see $dir/initdb.log"
  local sync=off
  [ "$DURABILITY" = sync ] && sync=on
  "${run[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w start -o \
    "-p $port -h 127.0.0.1 -c unix_socket_directories=$dir -c shared_buffers=$((MEMORY_MB / 4))MB \
     -c fsync=$sync -c synchronous_commit=$sync -c full_page_writes=$sync -c max_connections=300" >/dev/null \
    || die "PostgreSQL did not start: see $dir/postgres.log"
  echo "postgres://postgres@127.0.0.1:$port/postgres"
}

start_tarantool() {
  local dir=$1 port=$2
  command -v tarantool >/dev/null 2>&1 || die "tarantool is not installed (run: scripts/peers.sh install)"
  mkdir -p "$dir"
  cat >"$dir/init.lua" <<LUA
box.cfg{ listen = '127.0.0.1:$port', work_dir = '$dir', wal_mode = '$(if [ "$DURABILITY" = sync ]; then echo fsync; else echo none; fi)',
         memtx_memory = $MEMORY_MB * 1024 * 1024, log = '$dir/tarantool.log' }
box.schema.user.create('bench', { password = 'bench', if_not_exists = true })
box.schema.user.grant('bench', 'super', nil, nil, { if_not_exists = true })
-- The port opens before bootstrap ends: this file says the instance takes calls.
local f = io.open('$dir/ready', 'w'); f:close()
LUA
  rm -f "$dir/ready"
  nohup tarantool "$dir/init.lua" >"$dir/stdout.log" 2>&1 &
  echo $! >"$dir/pid"
  wait_port "$port" tarantool "$dir/tarantool.log"
  for _ in $(seq 1 300); do [ -f "$dir/ready" ] && break; sleep 0.1; done
  [ -f "$dir/ready" ] || die "tarantool did not finish bootstrap: see $dir/tarantool.log"
  echo "tarantool://bench:bench@127.0.0.1:$port"
}

start_redis() {
  local dir=$1 port=$2
  command -v redis-server >/dev/null 2>&1 || die "redis-server is not installed (run: scripts/peers.sh install)"
  mkdir -p "$dir"
  local aof=(--appendonly no)
  [ "$DURABILITY" = sync ] && aof=(--appendonly yes --appendfsync always)
  nohup redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' "${aof[@]}" \
    --protected-mode no --logfile "$dir/redis.log" >"$dir/stdout.log" 2>&1 &
  echo $! >"$dir/pid"
  wait_port "$port" redis "$dir/redis.log"
  echo "redis://127.0.0.1:$port"
}

# Waits up to 30 s for a listener on 127.0.0.1:PORT; the server just started (its pid in
# $dir/pid, $dir from the log's path) must still run, or another process holds the port.
wait_port() {
  local pid
  pid=$(cat "$(dirname "$3")/pid")
  for _ in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || die "$2 exited at start (port $1 taken?): see $3"
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$2 did not listen on port $1: see $3"
}

stop() {
  local system=$1 dir=$2
  case "$system" in
    postgres)
      [ -d "$dir/data" ] || return 0
      local run=()
      [ "$(id -u)" -eq 0 ] && run=(runuser -u postgres --)
      "${run[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true ;;
    tarantool|redis)
      [ -f "$dir/pid" ] || return 0
      local pid
      pid=$(cat "$dir/pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      rm -f "$dir/pid" ;;
    *) die "unknown system $system" ;;
  esac
}

pid() {
  local system=$1 dir=$2
  case "$system" in
    postgres) head -1 "$dir/data/postmaster.pid" ;;
    tarantool|redis) cat "$dir/pid" ;;
    *) die "unknown system $system" ;;
  esac
}

case "${1:-}" in
  install) install ;;
  pid)
    [ $# -eq 3 ] || die "usage: peers.sh pid SYSTEM DIR"
    pid "$2" "$3" ;;
  start)
    [ $# -eq 4 ] || die "usage: peers.sh start postgres|tarantool|redis DIR PORT"
    case "$2" in
      postgres) start_postgres "$3" "$4" ;;
      tarantool) start_tarantool "$3" "$4" ;;
      redis) start_redis "$3" "$4" ;;
      *) die "unknown system $2" ;;
    esac ;;
  stop)
    [ $# -eq 3 ] || die "usage: peers.sh stop SYSTEM DIR"
    stop "$2" "$3" ;;
  *) die "usage: peers.sh install | start SYSTEM DIR PORT | stop SYSTEM DIR | pid SYSTEM DIR" ;;
esac
