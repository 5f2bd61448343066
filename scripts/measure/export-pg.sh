#!/usr/bin/env bash
# The PostgreSQL export target under Voter (issue #27's figures): runs `lockstep bench
# voter` three times against a fresh server each — the stock schema; every vote also
# inserted into a stream kept in local files (type file, no delivery); and every vote
# exported to a table of a real PostgreSQL 15 (scripts/peers.sh) — and prints Voter's
# throughput in each, the rows PostgreSQL had at the end of the run and how long the rest
# of the backlog took to arrive.
#
#   scripts/measure/export-pg.sh [path/to/lockstep] [SECONDS]   (default: target/release/lockstep, 10)
#
# A measurement, not a test: figures go to the issue's notes, never into assertions.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${1:-$repo/target/release/lockstep}"
seconds="${2:-10}"
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p lockstep-cli" >&2; exit 2; }
SITES=2
DRAIN_WAIT_S=300
PG_PORT=$((25500 + RANDOM % 400))
work="$(mktemp -d /tmp/lockstep-export-pg.XXXXXX)"
chmod 755 "$work"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  "$repo/scripts/peers.sh" stop postgres "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts a server with the given config file; sets $addr.
start_server() {
  local data="$1" config="$2"
  addr="127.0.0.1:$(free_port)"
  "$bin" server --data "$data" --sites "$SITES" --listen "$addr" --http off --pg off --command-log off --config "$config" >"$data.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do
    if "$bin" sql --server "$addr" -c "exec @Ping" >/dev/null 2>&1; then return; fi
    sleep 0.2
  done
  echo "the server did not start; see $data.log" >&2
  exit 1
}

stop_server() { kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""; }

pg_rows() { PGPASSWORD= psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -At -c "SELECT COUNT(*) FROM vote_events"; }

# Voter's schema with every vote also inserted into stream VOTE_EVENTS.
schema="$work/voter"
mkdir -p "$schema/procedures"
cp "$repo"/apps/voter/procedures/*.lua "$schema/procedures/"
cat > "$schema/ddl.sql" <<'SQL'
CREATE STREAM vote_events PARTITION ON COLUMN phone_number EXPORT TO TARGET warehouse (
  phone_number BIGINT NOT NULL, state VARCHAR(2), contestant_number INTEGER NOT NULL);
SQL
cat "$repo/apps/voter/ddl.sql" >> "$schema/ddl.sql"
sed -i 's|^local insert_vote .*|&\nlocal insert_event    = sql [[INSERT INTO vote_events (phone_number, state, contestant_number) VALUES (?, ?, ?)]]|; s|^  insert_vote:exec(phone_number, state or "XX", contestant_number)|&\n  insert_event:exec(phone_number, state or "XX", contestant_number)|' "$schema/procedures/Vote.lua"
grep -q insert_event:exec "$schema/procedures/Vote.lua"

"$repo/scripts/peers.sh" start postgres "$work/pg" "$PG_PORT" >/dev/null
psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -q -c \
  "CREATE TABLE vote_events (phone_number BIGINT NOT NULL, state VARCHAR(2), contestant_number INTEGER NOT NULL)"
printf '[[export.targets]]\nname = "warehouse"\ntype = "postgresql"\nurl = "host=127.0.0.1 port=%s user=postgres dbname=postgres"\ntable = "public.vote_events"\n' "$PG_PORT" > "$work/pg.toml"
printf '[[export.targets]]\nname = "warehouse"\ntype = "file"\n' > "$work/file.toml"
: > "$work/none.toml"

run_voter() { "$bin" bench voter --server "$addr" --duration "$seconds" --warmup 2 | tee "$1" | grep -E "^ALL|^check (PASSED|FAILED)" || cat "$1"; }

echo "== Voter without export ($seconds s, $SITES sites)"
start_server "$work/plain" "$work/none.toml"
run_voter "$work/plain.out"
stop_server

echo "== Voter with every vote into a stream kept in local files ($seconds s)"
start_server "$work/file" "$work/file.toml"
(cd "$schema" && "$bin" sql --server "$addr" -f ddl.sql >/dev/null)
run_voter "$work/file.out"
stop_server

echo "== Voter with every vote exported to PostgreSQL ($seconds s)"
start_server "$work/export" "$work/pg.toml"
(cd "$schema" && "$bin" sql --server "$addr" -f ddl.sql >/dev/null)
run_voter "$work/export.out"
stored=$("$bin" sql --server "$addr" -c "SELECT COUNT(*) FROM votes" | awk -F'│' 'NR==4 {gsub(/ /,""); print $2}')
at_end=$(pg_rows)
echo "at the end of the run: $at_end rows in PostgreSQL of about $stored votes (warm-up included)"
start=$(date +%s.%N)
deadline=$((SECONDS + DRAIN_WAIT_S))
while [ "$(pg_rows)" -lt "${stored:-0}" ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
end=$(date +%s.%N)
final=$(pg_rows)
echo "backlog drained: $final rows in PostgreSQL, the last $((final - at_end)) in $(echo "$end - $start" | bc) s after the run"
stop_server
