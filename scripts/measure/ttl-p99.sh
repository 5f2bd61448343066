#!/usr/bin/env bash
# TTL's effect on latency: two runs of open-loop Voter at RATE calls/s for DURATION s, each
# beside a table of ROWS rows that are all past their time to live. In the first run the
# table has no TTL; in the second it has one (BATCH_SIZE 1000, MAX_FREQUENCY 20), so the
# server deletes expired rows in the background for the whole run. Prints each run's
# Voter p50/p99/p99.9 and how many rows the TTL deleted during the run.
#
#   scripts/measure/ttl-p99.sh                     # 2,000,000 rows, 20,000 calls/s, 10 s
#   ROWS=500000 RATE=10000 scripts/measure/ttl-p99.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${LOCKSTEP_BIN:-target/release/lockstep}
ROWS=${ROWS:-2000000}
RATE=${RATE:-20000}
DURATION=${DURATION:-10}
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p lockstep-cli" >&2; exit 2; }
work=$(mktemp -d /tmp/lockstep-ttl.XXXXXX)
server=
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT
# Rows stamped in 1970 (seconds since the epoch): every one is long expired.
awk -v n="$ROWS" 'BEGIN { for (i = 1; i <= n; i++) print i "," (i % 86400) }' >"$work/events.csv"

run() {
  local ttl=$1 port=$((24000 + RANDOM % 1000))
  rm -rf "$work/data"
  "$BIN" server --listen "127.0.0.1:$port" --http off --pg off --data "$work/data" --command-log off >"$work/server.out" 2>"$work/server.err" &
  server=$!
  for _ in $(seq 1 300); do grep -q ready "$work/server.out" 2>/dev/null && break; sleep 0.1; done
  "$BIN" sql --server "127.0.0.1:$port" -c "CREATE TABLE events (id BIGINT NOT NULL PRIMARY KEY, ts BIGINT NOT NULL)" \
    -c "PARTITION TABLE events ON COLUMN id" -c "CREATE INDEX events_ts ON events (ts)" >/dev/null
  "$BIN" load csv --server "127.0.0.1:$port" --table events "$work/events.csv" >/dev/null 2>&1
  # Voter's schema and data first, so the TTL's deletions overlap the measured run only.
  "$BIN" bench voter --server "127.0.0.1:$port" --duration 1 --rate 1000 >/dev/null 2>&1
  if [ "$ttl" = on ]; then
    "$BIN" sql --server "127.0.0.1:$port" -c "ALTER TABLE events USING TTL 1 SECONDS ON COLUMN ts BATCH_SIZE 1000 MAX_FREQUENCY 20" >/dev/null
  fi
  "$BIN" bench voter --server "127.0.0.1:$port" --duration "$DURATION" --warmup 2 --rate "$RATE" --server-pid "$server" >"$work/bench.out" 2>&1
  local left
  left=$("$BIN" sql --server "127.0.0.1:$port" --format csv -c "SELECT COUNT(*) FROM events" | tail -1 | tr -d "\r")
  echo "TTL $ttl: $(grep -E '^ALL' "$work/bench.out" | awk '{print "p50 " $5 " ms, p99 " $7 " ms, p99.9 " $8 " ms, " $3 " calls/s"}'); rows deleted $((ROWS - left))"
  kill "$server"; wait "$server" 2>/dev/null || true; server=
}
run off
run on
