#!/usr/bin/env bash
# Restart time at scale, repeatable: populates TATP with SCALE subscribers once into DIR
# (kept: later runs reuse it), snapshots it and SIGKILLs that server; then ROUNDS times, for
# each binary in turn, starts the server on a fresh copy of the data, prints the time to its
# `ready` line, the RSS, the process's CPU and the phases it logs, and SIGKILLs it.
#
#   scripts/measure/restart.sh /work/restart-data 1000000 2 /tmp/lockstep-before target/release/lockstep
set -euo pipefail
dir=${1:?data directory to keep}
scale=${2:?subscribers}
rounds=${3:?rounds}
shift 3
[ $# -gt 0 ] || { echo "give at least one lockstep binary" >&2; exit 2; }
mkdir -p "$dir"
port=$((25000 + RANDOM % 1000))
server=
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; true' EXIT

start() { # binary, data directory
  : >"$dir/server.out"
  RUST_LOG=info "$1" server --listen "127.0.0.1:$port" --http off --pg off --data "$2" --command-log async \
    >"$dir/server.out" 2>"$dir/server.err" &
  server=$!
  for _ in $(seq 1 6000); do grep -q ready "$dir/server.out" 2>/dev/null && return 0; sleep 0.01; done
  echo "the server did not start: $(tail -3 "$dir/server.err")" >&2
  exit 1
}

if [ ! -d "$dir/pristine" ]; then
  start "$1" "$dir/populating"
  "$1" bench tatp --server "127.0.0.1:$port" --scale "$scale" --duration 5 >"$dir/bench.out" 2>&1 \
    || { echo "the benchmark failed: $(tail -3 "$dir/bench.out")" >&2; exit 1; }
  "$1" snapshot save --server "127.0.0.1:$port" >/dev/null
  sleep 3
  kill -9 "$server"
  wait "$server" 2>/dev/null || true
  server=
  mv "$dir/populating" "$dir/pristine"
fi

hz=$(getconf CLK_TCK)
for round in $(seq 1 "$rounds"); do
  for bin in "$@"; do
    rm -rf "$dir/run"
    cp -a "$dir/pristine" "$dir/run"
    # From the page cache, as after a crash: the copy's cost is not the restart's.
    cat "$dir"/run/snapshots/*/* "$dir"/run/cmdlog/* >/dev/null
    t0=$(date +%s.%N)
    start "$bin" "$dir/run"
    t1=$(date +%s.%N)
    echo "round $round, $bin: ready in $(echo "$t1 - $t0" | bc) s"
    awk -v hz="$hz" '{ printf "  CPU user %d ms, system %d ms\n", $14 * 1000 / hz, $15 * 1000 / hz }' "/proc/$server/stat"
    awk '/VmRSS/ { printf "  RSS %.0f MB\n", $2 / 1024 }' "/proc/$server/status"
    grep -E "passed over|loaded snapshot" "$dir/server.err" | sed -E 's/^[^ ]+ +INFO [^ ]+ /  /' || true
    kill -9 "$server"
    wait "$server" 2>/dev/null || true
    server=
  done
done
rm -rf "$dir/run"
