#!/usr/bin/env bash
# SQL speed against PostgreSQL 15, in one run (issue #23's figures): the same data loaded
# into Lockstep (a release build) and PostgreSQL, the same queries timed the same way —
# psql's \timing over each system's PostgreSQL wire port, each query REPEATS times, the
# median kept — and printed with the ratio Lockstep / PostgreSQL (above 1: Lockstep slower).
#   (a) a 7-table join on equalities, written in an unhelpful order (j1 … j7, JOIN_ROWS
#       rows each, the filter on the last table written);
#   (b) over a 1,000,000-row table (BIG_ROWS): SUM, COUNT(*), GROUP BY on a column of 10
#       values, and a selective filter (0.1 % of the rows) on a column without an index.
# Durability is off on both sides (Lockstep's command log off; PostgreSQL's fsync and
# synchronous_commit off, scripts/peers.sh); Lockstep runs 2 sites, the machine's cores;
# PostgreSQL has its default parallel workers and fresh statistics (ANALYZE).
#   scripts/measure/sql-vs-pg.sh [path/to/lockstep]     REPEATS=5 BIG_ROWS=1000000 JOIN_ROWS=20000
# Builds target/release/lockstep when it is absent and no path is given (about 10 minutes).
# A measurement, not a test: figures go to the issue's notes, never into assertions.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
BIN=${1:-$TARGET/release/lockstep}
REPEATS=${REPEATS:-5}; BIG_ROWS=${BIG_ROWS:-1000000}; JOIN_ROWS=${JOIN_ROWS:-20000}
LS_PORT=55312; LS_PG_PORT=55313; PG_PORT=55314
if [ ! -x "$BIN" ]; then
  [ $# -eq 0 ] || { echo "no lockstep binary at $BIN" >&2; exit 1; }
  echo "building the release binary (cargo build --release -p lockstep-cli)" >&2
  (cd "$REPO" && cargo build --release -p lockstep-cli >&2)
fi
W=$(mktemp -d /tmp/lockstep-sqlvspg.XXXXXX)
chmod 755 "$W"
LS=""
trap '[ -n "$LS" ] && kill $LS 2>/dev/null; "$REPO/scripts/peers.sh" stop postgres "$W/pg" >/dev/null 2>&1 || true; rm -rf "$W"' EXIT

# The data, the same files for both: deterministic, no randomness.
awk -v n="$BIG_ROWS" 'BEGIN { for (i = 1; i <= n; i++) printf "%d,%d,%d,%d\n", i, i % 10, (i * 7919) % 100000, (i * 31) % 1000 }' >"$W/big.csv"
for t in 1 2 3 4 5 6 7; do
  awk -v n="$JOIN_ROWS" -v t="$t" 'BEGIN { for (i = 1; i <= n; i++) printf "%d,%d\n", i, (i * (t + 3)) % 1000 }' >"$W/j$t.csv"
done
DDL=("CREATE TABLE big (id BIGINT NOT NULL PRIMARY KEY, grp INTEGER NOT NULL, v BIGINT NOT NULL, w INTEGER NOT NULL)")
for t in 1 2 3 4 5 6 7; do DDL+=("CREATE TABLE j$t (id BIGINT NOT NULL PRIMARY KEY, v INTEGER NOT NULL)"); done

JOIN7="SELECT COUNT(*), SUM(j1.v) FROM j1 JOIN j2 ON j2.id = j1.id JOIN j3 ON j3.id = j2.id JOIN j4 ON j4.id = j3.id JOIN j5 ON j5.id = j4.id JOIN j6 ON j6.id = j5.id JOIN j7 ON j7.id = j6.id WHERE j7.v < 10"
QUERIES=(
  "join7|$JOIN7"
  "sum|SELECT SUM(v) FROM big"
  "count|SELECT COUNT(*) FROM big"
  "group by|SELECT grp, COUNT(*), SUM(v) FROM big GROUP BY grp ORDER BY grp"
  "filter|SELECT COUNT(*), SUM(v) FROM big WHERE w = 7"
)

# PostgreSQL.
url=$("$REPO/scripts/peers.sh" start postgres "$W/pg" "$PG_PORT")
for d in "${DDL[@]}"; do psql -q "$url" -c "$d"; done
psql -q "$url" -c "\\copy big FROM '$W/big.csv' CSV"
for t in 1 2 3 4 5 6 7; do psql -q "$url" -c "\\copy j$t FROM '$W/j$t.csv' CSV"; done
psql -q "$url" -c "VACUUM ANALYZE"

# Lockstep: big and j1 partitioned on id, the other join tables too (a 7-way join across
# partitions), loaded through `lockstep load csv`.
"$BIN" server --listen 127.0.0.1:$LS_PORT --http off --pg 127.0.0.1:$LS_PG_PORT --command-log off \
  --query-timeout-ms 0 --sites 2 --data "$W/ls" >"$W/ls.log" 2>&1 &
LS=$!
until grep -q ready "$W/ls.log"; do sleep 0.2; done
for d in "${DDL[@]}"; do "$BIN" sql --server 127.0.0.1:$LS_PORT -c "$d" >/dev/null; done
for t in big j1 j2 j3 j4 j5 j6 j7; do
  "$BIN" sql --server 127.0.0.1:$LS_PORT -c "PARTITION TABLE $t ON COLUMN id" >/dev/null
  "$BIN" load csv --table "$t" --server 127.0.0.1:$LS_PORT "$W/$t.csv" >"$W/load-$t.log" 2>&1
done

# One psql session per system and query: \timing on, the query REPEATS times; the median.
time_query() {
  local conn=$1 sql=$2
  { echo '\timing on'; for _ in $(seq 1 "$REPEATS"); do echo "$sql;"; done; } >"$W/q.sql"
  psql -X -q -o /dev/null "$conn" -f "$W/q.sql" 2>&1 | grep -oE '^Time: [0-9.]+' | cut -d' ' -f2 | sort -g \
    | awk '{ a[NR] = $1 } END { if (NR == 0) print "failed"; else print a[int((NR + 1) / 2)] }'
}
answer() { psql -X -A -t -q "$1" -c "$2" 2>&1 | tr '\n' ' '; }

LS_URL="postgresql://lockstep@127.0.0.1:$LS_PG_PORT/lockstep"
printf '%-10s %14s %14s %8s   %s\n' query "lockstep ms" "postgres ms" ratio "answers (lockstep | postgres)"
for q in "${QUERIES[@]}"; do
  name=${q%%|*}; sql=${q#*|}
  ls_ms=$(time_query "$LS_URL" "$sql")
  pg_ms=$(time_query "$url" "$sql")
  ratio=$(awk -v a="$ls_ms" -v b="$pg_ms" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }')
  printf '%-10s %14s %14s %8s   %s| %s\n' "$name" "$ls_ms" "$pg_ms" "$ratio" "$(answer "$LS_URL" "$sql" | cut -c1-60)" "$(answer "$url" "$sql" | cut -c1-60)"
done
