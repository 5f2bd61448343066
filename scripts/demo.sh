#!/usr/bin/env bash
# Starts a Lockstep node with defaults (127.0.0.1:21212, data in ./lockstep-data, one site per
# core), loads the Voter application, casts a few votes and prints the results. The server
# keeps running in the foreground afterwards: try `target/release/lockstep sql`, stop with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

# LOCKSTEP_BIN runs an already built binary instead (the tests use a debug build).
bin=${LOCKSTEP_BIN:-target/release/lockstep}
if [ -z "${LOCKSTEP_BIN:-}" ]; then
  cargo build --release -p lockstep-cli
fi

"$bin" server &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null' EXIT INT TERM
# Wait until it answers; if it stopped instead (its data directory or port is taken by a
# server already running, say), say so rather than talk to another server.
for _ in $(seq 1 100); do
  kill -0 $server 2>/dev/null || break
  "$bin" sql -c "exec @Ping" >/dev/null 2>&1 && break
  sleep 0.1
done
sleep 0.2
if ! kill -0 $server 2>/dev/null; then
  trap - EXIT
  wait $server || true
  echo "The server did not start (see its message above); is another Lockstep already running here?" >&2
  exit 1
fi

# Load the app once (the catalog survives restarts in ./lockstep-data).
if ! "$bin" sql --format csv -c "exec @SystemCatalog PROCEDURES" | grep -qi '^,,Vote,'; then
  "$bin" sql -f apps/voter/ddl.sql
fi
"$bin" sql -c "exec Initialize 6 'Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,Alana Bregman,Jessie Eichman'"
for phone in 5551234567 5552345678 6175550100 2125550199 3125550123; do
  "$bin" sql -c "exec Vote $phone $((phone % 6 + 1)) 2" >/dev/null
done
"$bin" sql -c "exec Results"
echo "Lockstep is running on 127.0.0.1:21212 (Ctrl-C to stop). Shell: $bin sql"
wait $server
