#!/usr/bin/env bash
# Cross-checks the SQL suite's expected answers (tests/slt/*.slt) against SQLite and
# PostgreSQL 15: starts a throw-away PostgreSQL on 127.0.0.1 (scripts/peers.sh), runs the
# portable records of every file on both (crates/engine/tests/slt_crosscheck.rs), prints how
# many records ran on each and how many agree, lists the ones that differ, and stops
# PostgreSQL. `cargo test` runs the SQLite half on its own.
#
#   scripts/slt-crosscheck.sh [PORT]     (default port 55433)
set -euo pipefail
cd "$(dirname "$0")/.."

port=${1:-55433}
dir=$(mktemp -d /tmp/lockstep-slt-pg.XXXXXX)
bash scripts/peers.sh install
cleanup() { bash scripts/peers.sh stop postgres "$dir"; rm -rf "$dir"; }
trap cleanup EXIT
url=$(bash scripts/peers.sh start postgres "$dir" "$port")

# The test prints the figures and the records that differ; it fails only if SQLite differs.
out="$dir/report.txt"
status=0
LOCKSTEP_PG_URL=$url cargo test -q -p lockstep-engine --test slt_crosscheck -- --nocapture >"$out" 2>&1 || status=$?
sed -n '/^SQLite: /,$p' "$out" | grep -v -E '^(\.|test result.*|running .*|)$'
[ "$status" -eq 0 ] || { echo "the cross-check failed: cargo's output follows" >&2; cat "$out" >&2; }
exit "$status"
