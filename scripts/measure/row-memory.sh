#!/usr/bin/env bash
# Memory per row, as docs/guide/sizing.md reports it: for each table shape, a fresh server
# (2 sites, --command-log off), the table created, its RSS read, ROWS rows loaded with
# `lockstep load csv` (one insert call each), the RSS read again; prints the difference
# divided by the rows, and what `@Statistics TABLE` estimates per row.
#
#   scripts/measure/row-memory.sh                 # 500,000 rows a shape
#   ROWS=100000 LOCKSTEP_BIN=/tmp/lockstep-old scripts/measure/row-memory.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=${ROWS:-500000}
bin=${LOCKSTEP_BIN:-target/release/lockstep}
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p lockstep-cli" >&2; exit 2; }
work=$(mktemp -d /tmp/lockstep-rowmem.XXXXXX)
port=$((23000 + RANDOM % 1000))
server=
trap '[ -n "$server" ] && kill -9 $server 2>/dev/null; rm -rf "$work"' EXIT

rss_kib() { awk '/VmRSS/ { print $2 }' "/proc/$server/status"; }
sql() { "$bin" sql --server "127.0.0.1:$port" "$@"; }

# shape: a label, the CREATE TABLE statement, and the text each row's v holds.
measure() {
  local label=$1 ddl=$2 text=$3
  rm -rf "$work/data"
  "$bin" server --listen "127.0.0.1:$port" --http off --pg off --sites 2 --data "$work/data" --command-log off \
    >"$work/server.out" 2>"$work/server.err" &
  server=$!
  for _ in $(seq 1 600); do grep -q ready "$work/server.out" 2>/dev/null && break; sleep 0.05; done
  sql -c "$ddl" >/dev/null
  awk -v n="$rows" -v t="$text" 'BEGIN { for (i = 0; i < n; i++) print i "," t }' >"$work/rows.csv"
  sleep 1
  local before after
  before=$(rss_kib)
  "$bin" load csv --server "127.0.0.1:$port" --table t "$work/rows.csv" >/dev/null
  sleep 1
  after=$(rss_kib)
  # TUPLE_ALLOCATED_MEMORY is in KiB, one line per site.
  local estimate
  estimate=$(sql --format csv -c "exec @Statistics TABLE 0" |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
             $col["TABLE_NAME"] == "T" { kib += $col["TUPLE_ALLOCATED_MEMORY"]; n += $col["TUPLE_COUNT"] }
             END { printf "%.0f", n ? kib * 1024 / n : 0 }')
  printf '%s: %d rows, %d resident bytes per row, @Statistics TABLE %s per row\n' \
    "$label" "$rows" $(((after - before) * 1024 / rows)) "$estimate"
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=
}

ten=$(printf 'x%.0s' $(seq 1 10))
hundred=$(printf 'x%.0s' $(seq 1 100))
thousand=$(printf 'x%.0s' $(seq 1 1000))
measure "k BIGINT (partitioning, no index), v 10 characters" \
  "CREATE TABLE t (k BIGINT NOT NULL, v VARCHAR(1000)); PARTITION TABLE t ON COLUMN k;" "$ten"
measure "k BIGINT PRIMARY KEY, v 10 characters" \
  "CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(1000)); PARTITION TABLE t ON COLUMN k;" "$ten"
measure "k BIGINT PRIMARY KEY, v 100 characters" \
  "CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(1000)); PARTITION TABLE t ON COLUMN k;" "$hundred"
measure "k BIGINT PRIMARY KEY, v 1,000 characters" \
  "CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(1000)); PARTITION TABLE t ON COLUMN k;" "$thousand"
measure "k BIGINT, g INTEGER, PRIMARY KEY (k, g), v 10 characters" \
  "CREATE TABLE t (k BIGINT NOT NULL, g INTEGER NOT NULL, v VARCHAR(1000), PRIMARY KEY (k, g)); PARTITION TABLE t ON COLUMN k;" "7,$ten"
