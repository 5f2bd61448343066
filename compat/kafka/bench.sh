#!/usr/bin/env bash
# Measures the Kafka export target under Voter: runs `lockstep bench voter` twice against a
# fresh server, once with the stock schema, and once with Voter's Vote procedure also
# inserting each vote into a stream exported to a real Kafka broker (broker.sh). Prints
# Voter's throughput in both runs, and the export's: rows delivered to Kafka during the
# run and how long the backlog then took to drain.
# Usage: compat/kafka/bench.sh [path/to/lockstep] [SECONDS]   (default: target/debug/lockstep, 20)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-$repo/target/debug/lockstep}"
seconds="${2:-20}"
DRAIN_WAIT_S=600
SITES=2
work="$(mktemp -d)"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  bash "$here/broker.sh" stop "$work/kafka" || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Starts a server with the given config file; sets $addr.
start_server() {
  local data="$1" config="$2" port
  port="$(free_port)"
  addr="127.0.0.1:$port"
  "$bin" server --data "$data" --sites "$SITES" --listen "$addr" --http off --pg off --config "$config" >"$data.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do
    if "$bin" sql --server "$addr" -c "exec @Ping" >/dev/null 2>&1; then return; fi
    sleep 0.2
  done
  echo "the server did not start; see $data.log" >&2
  exit 1
}

stop_server() {
  kill -TERM "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
}

# Voter's schema with every vote also inserted into stream VOTE_EVENTS (exported to KAFKA).
schema="$work/voter"
mkdir -p "$schema/procedures"
cp "$repo"/apps/voter/procedures/*.lua "$schema/procedures/"
# The stream first: the procedures that insert into it are checked when created.
cat > "$schema/ddl.sql" <<'SQL'
CREATE STREAM vote_events PARTITION ON COLUMN phone_number EXPORT TO TARGET kafka (
  phone_number BIGINT NOT NULL, state VARCHAR(2), contestant_number INTEGER NOT NULL);
SQL
cat "$repo/apps/voter/ddl.sql" >> "$schema/ddl.sql"
sed -i 's|^local insert_vote .*|&\nlocal insert_event    = sql [[INSERT INTO vote_events (phone_number, state, contestant_number) VALUES (?, ?, ?)]]|; s|^  insert_vote:exec(phone_number, state or "XX", contestant_number)|&\n  insert_event:exec(phone_number, state or "XX", contestant_number)|' "$schema/procedures/Vote.lua"
grep -q insert_event:exec "$schema/procedures/Vote.lua"

bash "$here/broker.sh" start "$work/kafka" >/dev/null
broker="127.0.0.1:$(cat "$work/kafka/port")"
printf '[[export.targets]]\nname = "kafka"\ntype = "kafka"\nbrokers = "%s"\ntopic = "votes"\nkey_column = "phone_number"\nbatch_size = 1000\nlinger_ms = 5\n' "$broker" > "$work/kafka.toml"
: > "$work/none.toml"

echo "== Voter without export ($seconds s, $SITES sites)"
start_server "$work/plain" "$work/none.toml"
"$bin" bench voter --server "$addr" --duration "$seconds" | tee "$work/plain.out" | grep -E "^ALL|^check (ok|PASSED|FAILED)" || cat "$work/plain.out"
stop_server

echo "== Voter with every vote into a stream kept in local files (type file: no delivery) ($seconds s, $SITES sites)"
sed 's/^type = "kafka"/type = "file"/; /^brokers\|^topic\|^key_column\|^batch_size\|^linger_ms/d' "$work/kafka.toml" > "$work/file.toml"
start_server "$work/file" "$work/file.toml"
(cd "$schema" && "$bin" sql --server "$addr" -f ddl.sql >/dev/null)
"$bin" bench voter --server "$addr" --duration "$seconds" | tee "$work/file.out" | grep -E "^ALL|^check (ok|PASSED|FAILED)" || cat "$work/file.out"
stop_server

echo "== Voter with every vote exported to Kafka ($seconds s, $SITES sites)"
start_server "$work/export" "$work/kafka.toml"
(cd "$schema" && "$bin" sql --server "$addr" -f ddl.sql >/dev/null)
"$bin" bench voter --server "$addr" --duration "$seconds" | tee "$work/export.out" | grep -E "^ALL|^check (ok|PASSED|FAILED)" || cat "$work/export.out"
stats() { "$bin" sql --server "$addr" -c "exec @Statistics EXPORT 0" | awk -F'┆' 'NR>3 && NF>10 {gsub(/ /,""); w+=$10; d+=$11; p+=$12} END {print w, d, p}'; }
read -r written delivered pending < <(stats)
echo "export at the end of the run: $written rows written, $delivered delivered to Kafka, $pending pending"
wait_drained() {
  local deadline=$((SECONDS + DRAIN_WAIT_S))
  while [ "$pending" != 0 ] && [ $SECONDS -lt $deadline ]; do sleep 0.2; read -r written delivered pending < <(stats); done
}
wait_drained

echo "== The exporters' own pace: Voter runs $seconds s with the broker stopped, then the backlog drains"
bash "$here/broker.sh" stop "$work/kafka"
"$bin" bench voter --server "$addr" --duration "$seconds" >/dev/null
read -r written before pending < <(stats)
echo "backlog with the broker stopped: $pending rows"
bash "$here/broker.sh" restart "$work/kafka" >/dev/null
# The exporters retry with a wait of up to 5 s after an outage: the drain is timed from
# their first delivery after it, not from the broker's restart.
first=$before
while [ "$first" = "$before" ]; do sleep 0.05; read -r written first pending < <(stats); done
start=$(date +%s.%N)
wait_drained
end=$(date +%s.%N)
echo "backlog drained: $((delivered - first)) rows in $(echo "$end - $start" | bc) s after the first delivery, $(echo "($delivered - $first) / ($end - $start)" | bc) rows/s"
stop_server
