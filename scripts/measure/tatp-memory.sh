#!/usr/bin/env bash
# Memory and restart at scale: populates TATP with SCALE subscribers (10 rows each, on
# average) through `lockstep bench tatp`, prints the server's RSS, takes a snapshot and
# prints its size, SIGKILLs the server 3 s later, starts it again on the same data
# directory and prints the time to its `ready` line and the RSS after recovery.
#
#   scripts/measure/tatp-memory.sh 1000000
#   LOCKSTEP_BIN=target/release/lockstep scripts/measure/tatp-memory.sh 100000
set -euo pipefail
cd "$(dirname "$0")/../.."
scale=${1:-1000000}
bin=${LOCKSTEP_BIN:-target/release/lockstep}
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p lockstep-cli" >&2; exit 2; }
work=$(mktemp -d /tmp/lockstep-memory.XXXXXX)
port=$((24000 + RANDOM % 1000))
server=
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT

start() {
  : >"$work/server.out"
  "$bin" server --listen "127.0.0.1:$port" --http off --pg off --data "$work/data" --command-log async \
    >"$work/server.out" 2>"$work/server.err" &
  server=$!
  for _ in $(seq 1 3000); do grep -q ready "$work/server.out" 2>/dev/null && return 0; sleep 0.05; done
  echo "the server did not start: $(tail -3 "$work/server.err")" >&2
  exit 1
}
rss() { awk '/VmRSS/ { printf "%.0f MB", $2 / 1024 }' "/proc/$server/status"; }

start
"$bin" bench tatp --server "127.0.0.1:$port" --scale "$scale" --duration 5 >"$work/bench.out" 2>&1 \
  || { echo "the benchmark failed: $(tail -3 "$work/bench.out")" >&2; exit 1; }
grep -E '^ALL' "$work/bench.out"
echo "RSS after population and 5 s of load: $(rss)"
"$bin" snapshot save --server "127.0.0.1:$port" >/dev/null
echo "snapshot: $(du -sm "$work/data/snapshots"/* | tail -1 | cut -f1) MB"
sleep 3
kill -9 "$server"
wait "$server" 2>/dev/null || true
t0=$(date +%s.%N)
start
t1=$(date +%s.%N)
echo "restart to ready: $(echo "$t1 - $t0" | bc) s"
echo "RSS after restart: $(rss)"
kill "$server"
wait "$server" 2>/dev/null || true
server=
