#!/usr/bin/env bash
# Side by side: runs each WORKLOAD against Lockstep and against PostgreSQL 15, Tarantool and
# Redis 7 on this machine, with the same load generator (`lockstep bench`), duration, warm-up
# and client concurrency, then prints per system TPS, p50, p99 and the server's CPU per
# transaction (user + system time of its whole process tree, from /proc, over the measured
# run), with Lockstep's ratios to each peer, and writes compare-WORKLOAD[-sync].json:
#   {"lockstep": {"tps", "p50_us", "p99_us", "server_cpu_us"}, "postgres": {…}, …}
# This machine's speed moves from day to day, so only figures of one run are compared:
# ratios, and CPU per transaction, which the machine's load disturbs far less than TPS.
# Peers that have no version of a workload are absent (Redis runs voter and ycsb-a/b/c/e/f).
# A system whose answers fail the workload's check is reported as WRONG (its figures are
# null in the JSON and it gets no ratio): wrong answers are not counted as fast.
#
#   scripts/compare.sh voter tatp charging ycsb-a ycsb-c
#   DURABILITY=sync scripts/compare.sh voter
#
# Settings (environment): DURATION seconds per run (30), WARMUP seconds of load before it,
# not counted (5), SCALE (each workload's default), WINDOW transactions in flight (512),
# CLIENT_THREADS (1), DURABILITY off|sync (off), LOCKSTEP_BIN (target/release/lockstep,
# built if absent), OUT_DIR for the JSON files (.), SYSTEMS to restrict ("lockstep postgres
# tarantool redis"). Installs missing peers with apt-get, starts each on 127.0.0.1 with its
# own data directory, and stops everything it started on exit.
# Durability is the same on every side: off = Lockstep --command-log off and the peers'
# settings without durability; sync = Lockstep --command-log sync (acknowledged after
# fdatasync) and the peers' synchronous settings (scripts/peers.sh says which).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

[ $# -ge 1 ] || { echo "usage: scripts/compare.sh WORKLOAD…" >&2; exit 2; }
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-5}
WINDOW=${WINDOW:-512}
DURABILITY=${DURABILITY:-off}
case "$DURABILITY" in off|sync) ;; *) echo "DURABILITY must be off or sync" >&2; exit 2 ;; esac
export PEER_DURABILITY=$DURABILITY
CLIENT_THREADS=${CLIENT_THREADS:-1}
OUT_DIR=${OUT_DIR:-.}
SYSTEMS=${SYSTEMS:-"lockstep postgres tarantool redis"}
BIN=${LOCKSTEP_BIN:-target/release/lockstep}
PEERS="$ROOT/scripts/peers.sh"
command -v jq >/dev/null 2>&1 || { echo "compare.sh needs jq (apt-get install jq)" >&2; exit 2; }

if [ ! -x "$BIN" ]; then
  echo "building $BIN (release)" >&2
  cargo build --release -p lockstep-cli >&2
fi
bash "$PEERS" install

WORK=$(mktemp -d /tmp/lockstep-compare.XXXXXX)
chmod 755 "$WORK"
STARTED=()
cleanup() {
  for s in "${STARTED[@]}"; do
    if [ "$s" = lockstep ]; then
      [ -f "$WORK/lockstep.pid" ] && kill "$(cat "$WORK/lockstep.pid")" 2>/dev/null || true
    else
      bash "$PEERS" stop "$s" "$WORK/$s" || true
    fi
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# Free ports above 20000, one per system.
LOCKSTEP_PORT=${LOCKSTEP_PORT:-22212}
declare -A PORT=([postgres]=25432 [tarantool]=23301 [redis]=26379)
declare -A TARGET

has() { [[ " $SYSTEMS " == *" $1 "* ]]; }

# Which peers have a version of the workload.
applies() {
  local system=$1 workload=$2
  case "$system:$workload" in
    lockstep:*|postgres:*|tarantool:*) return 0 ;;
    redis:voter|redis:ycsb-a|redis:ycsb-b|redis:ycsb-c|redis:ycsb-e|redis:ycsb-f) return 0 ;;
    *) return 1 ;;
  esac
}

# A fresh server per workload and system, so that no run sees another's data or garbage.
start() {
  local s=$1
  rm -rf "${WORK:?}/$s"
  if [ "$s" = lockstep ]; then
    mkdir -p "$WORK/lockstep"
    # The same promise as the peers' (scripts/peers.sh): no durability, or fdatasync per ack.
    "$BIN" server --listen "127.0.0.1:$LOCKSTEP_PORT" --http off --pg off --data "$WORK/lockstep/data" --command-log "$DURABILITY" >"$WORK/lockstep/server.log" 2>&1 &
    echo $! >"$WORK/lockstep.pid"
    for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$LOCKSTEP_PORT") 2>/dev/null && break; sleep 0.1; done
    TARGET[lockstep]="lockstep://127.0.0.1:$LOCKSTEP_PORT"
  else
    TARGET[$s]=$(bash "$PEERS" start "$s" "$WORK/$s" "${PORT[$s]}")
  fi
  STARTED+=("$s")
}

server_pid() {
  if [ "$1" = lockstep ]; then cat "$WORK/lockstep.pid"; else bash "$PEERS" pid "$1" "$WORK/$1"; fi
}

stop() {
  local s=$1
  if [ "$s" = lockstep ]; then
    local pid
    pid=$(cat "$WORK/lockstep.pid")
    kill "$pid" 2>/dev/null || true
    # A server busy in a long query may not stop at once: 10 s, then SIGKILL.
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    rm -f "$WORK/lockstep.pid"
  else
    bash "$PEERS" stop "$s" "$WORK/$s"
  fi
  local kept=()
  for x in "${STARTED[@]}"; do [ "$x" = "$s" ] || kept+=("$x"); done
  STARTED=("${kept[@]+"${kept[@]}"}")
}

for workload in "$@"; do
  out="$OUT_DIR/compare-$workload$(if [ "$DURABILITY" = sync ]; then echo -sync; fi).json"
  echo '{}' >"$out"
  for s in lockstep postgres tarantool redis; do
    has "$s" && applies "$s" "$workload" || continue
    echo "== $workload on $s" >&2
    start "$s"
    report="$WORK/$workload-$s.json"
    args=(bench "$workload" --target "${TARGET[$s]}" --duration "$DURATION" --warmup "$WARMUP"
          --window "$WINDOW" --client-threads "$CLIENT_THREADS" --server-pid "$(server_pid "$s")" --report "$report")
    [ -n "${SCALE:-}" ] && args+=(--scale "$SCALE")
    code=0
    "$BIN" "${args[@]}" >"$WORK/$workload-$s.out" 2>"$WORK/$workload-$s.err" || code=$?
    grep -E '^(ALL|check)' "$WORK/$workload-$s.out" >&2 || true
    if [ -f "$report" ] && [ "$code" -eq 0 ]; then
      jq --arg s "$s" --slurpfile r "$report" \
        '.[$s] = {tps: ($r[0].tps * 10 | round / 10), p50_us: $r[0].all.p50_us, p99_us: $r[0].all.p99_us,
                  server_cpu_us: (if $r[0].server_cpu_us_per_txn == null then null else ($r[0].server_cpu_us_per_txn * 100 | round / 100) end)}' "$out" >"$out.tmp"
    else
      why=$(if [ -f "$report" ]; then echo "check failed"; else tail -1 "$WORK/$workload-$s.err"; fi)
      jq --arg s "$s" --arg why "$why" '.[$s] = {tps: null, p50_us: null, p99_us: null, server_cpu_us: null, wrong: $why}' "$out" >"$out.tmp"
    fi
    mv "$out.tmp" "$out"
    stop "$s"
  done
  echo
  echo "$workload: ${DURATION}s per system after ${WARMUP}s of warm-up, window $WINDOW, durability $DURABILITY, $(nproc) cores, $(if [[ $BIN == *release* ]]; then echo release; else echo "$BIN"; fi)"
  jq -r '
    (.lockstep.tps // null) as $l | (.lockstep.server_cpu_us // null) as $lc
    | def ratio(a; b): if a == null or b == null or b == 0 then "" else (a / b * 100 | round / 100 | tostring) + "x" end;
      ["system", "TPS", "p50 ms", "p99 ms", "server us/txn", "TPS Lockstep/peer", "CPU peer/Lockstep"],
      (to_entries[] | .key as $k | .value as $v
       | if $v.tps == null then [$k, "WRONG: \($v.wrong)", "", "", "", "", ""]
         else [$k, ($v.tps | floor | tostring), ($v.p50_us / 1000 | tostring), ($v.p99_us / 1000 | tostring),
               ($v.server_cpu_us // "?" | tostring),
               (if $k == "lockstep" then "" else ratio($l; $v.tps) end),
               (if $k == "lockstep" then "" else ratio($v.server_cpu_us; $lc) end)]
         end)
    | @tsv' "$out" | column -t -s $'\t'
  echo "written $out"
done
