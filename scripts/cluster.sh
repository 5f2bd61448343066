#!/usr/bin/env bash
# A local Lockstep cluster of N nodes on this machine, for trying a cluster out and for tests.
#
#   scripts/cluster.sh start N [--kfactor K] [--sites S]   start N nodes, wait until all are ready
#   scripts/cluster.sh stop                                stop every node started here
#
# Node i (0-based) takes clients on 127.0.0.1:(21212+i), serves HTTP (JSON API, /metrics) on
# 127.0.0.1:(8080+i), talks to the other nodes on 127.0.0.1:(3021+i), and keeps its data, its log (server.log) and its process id (pid) in
# ./lockstep-cluster/node-i (under the directory the script is run from). `start` returns
# once every node printed its ready line, and fails (stopping the nodes it started) if one
# exits or the cluster is not ready in time. `stop` sends SIGTERM to each node and waits for
# it (SIGKILL after the wait). Connect with `lockstep sql --server 127.0.0.1:21212`.
#
# Environment (the tests use these; a user needs none of them):
#   LOCKSTEP_BIN                  run this binary instead of building target/release/lockstep
#   LOCKSTEP_CLUSTER_DIR          where the nodes' directories go (default ./lockstep-cluster)
#   LOCKSTEP_CLUSTER_CLIENT_PORT  node 0's client port; node i takes the next ones (default 21212)
#   LOCKSTEP_CLUSTER_INTERNAL_PORT  node 0's internal port (default 3021)
#   LOCKSTEP_CLUSTER_HTTP_PORT    node 0's HTTP port; node i takes the next ones; off for none
#                                 (default 8080)
#   LOCKSTEP_CLUSTER_WAIT_S       how long `start` waits for the ready lines (default 60)
set -euo pipefail

script_dir=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$script_dir")
root=${LOCKSTEP_CLUSTER_DIR:-lockstep-cluster}
client_port=${LOCKSTEP_CLUSTER_CLIENT_PORT:-21212}
internal_port=${LOCKSTEP_CLUSTER_INTERNAL_PORT:-3021}
http_port=${LOCKSTEP_CLUSTER_HTTP_PORT:-8080}
wait_s=${LOCKSTEP_CLUSTER_WAIT_S:-60}
# How long `stop` waits for one node to exit after SIGTERM before it kills it.
stop_wait_s=10

usage() {
  echo "usage: $0 start N [--kfactor K] [--sites S] | stop" >&2
  exit 2
}

# Whether the process in a node's pid file is running.
running() {
  local pidfile=$1/pid
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

stop_all() {
  local dir pid waited
  for dir in "$root"/node-*; do
    [ -d "$dir" ] || continue
    if running "$dir"; then
      pid=$(cat "$dir/pid")
      kill -TERM "$pid" 2>/dev/null || true
      waited=0
      while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((stop_wait_s * 10)) ]; do
        sleep 0.1
        waited=$((waited + 1))
      done
      if kill -0 "$pid" 2>/dev/null; then
        echo "$(basename "$dir") did not stop within ${stop_wait_s} s: killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
      fi
      echo "$(basename "$dir") stopped"
    fi
    rm -f "$dir/pid"
  done
}

start() {
  local nodes=$1
  shift
  local kfactor=0 sites=2
  while [ $# -gt 0 ]; do
    case $1 in
      --kfactor) kfactor=${2:?--kfactor needs a value}; shift 2 ;;
      --sites) sites=${2:?--sites needs a value}; shift 2 ;;
      *) usage ;;
    esac
  done
  case $nodes in
    '' | *[!0-9]*) usage ;;
  esac
  [ "$nodes" -ge 1 ] || usage

  local bin=${LOCKSTEP_BIN:-$repo/target/release/lockstep}
  if [ -z "${LOCKSTEP_BIN:-}" ]; then
    echo "Building Lockstep (cargo build --release -p lockstep-cli); the first build takes several minutes."
    (cd "$repo" && cargo build --release -p lockstep-cli)
  fi

  local i hosts=""
  for ((i = 0; i < nodes; i++)); do
    if running "$root/node-$i"; then
      echo "node-$i is already running (pid $(cat "$root/node-$i/pid")): run '$0 stop' first" >&2
      exit 1
    fi
    hosts="${hosts:+$hosts,}127.0.0.1:$((internal_port + i))"
  done
  for ((i = 0; i < nodes; i++)); do
    local dir=$root/node-$i
    mkdir -p "$dir"
    local http=off
    if [ "$http_port" != off ]; then
      http="127.0.0.1:$((http_port + i))"
    fi
    "$bin" server --listen "127.0.0.1:$((client_port + i))" --internal "127.0.0.1:$((internal_port + i))" \
      --http "$http" --pg off --hosts "$hosts" --kfactor "$kfactor" --sites "$sites" --data "$dir" >"$dir/server.log" 2>&1 &
    echo $! >"$dir/pid"
  done

  # Every node prints a line with "ready" once the cluster formed and it takes clients.
  local deadline=$((SECONDS + wait_s)) ready
  while :; do
    ready=0
    for ((i = 0; i < nodes; i++)); do
      local dir=$root/node-$i
      if grep -q ready "$dir/server.log" 2>/dev/null; then
        ready=$((ready + 1))
      elif ! running "$dir"; then
        echo "node-$i exited before it was ready; its log ($dir/server.log) ends with:" >&2
        tail -n 5 "$dir/server.log" >&2 || true
        stop_all >/dev/null
        exit 1
      fi
    done
    [ "$ready" -eq "$nodes" ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "only $ready of $nodes nodes were ready after ${wait_s} s; logs are in $root/node-*/server.log" >&2
      stop_all >/dev/null
      exit 1
    fi
    sleep 0.2
  done
  for ((i = 0; i < nodes; i++)); do
    grep ready "$root/node-$i/server.log" | head -n 1
  done
  echo "cluster of $nodes nodes (k=$kfactor) ready: lockstep sql --server 127.0.0.1:$client_port"
}

case ${1:-} in
  start) shift; start "${1:-}" "${@:2}" ;;
  stop) stop_all ;;
  *) usage ;;
esac
