#!/usr/bin/env bash
# Starts a Lockstep node with defaults (127.0.0.1:21212, data in ./lockstep-data, one site per
# core), loads the Voter application (apps/voter), casts a few votes and prints the results.
# The server then keeps running in the foreground, holding this terminal: use the shell from
# another one, and stop the server with Ctrl-C (the script then exits 0).
#
# Environment (the tests use these; a user needs none of them):
#   LOCKSTEP_BIN          run this binary instead of building target/release/lockstep
#   LOCKSTEP_DEMO_LISTEN  address to listen on (default 127.0.0.1:21212)
#   LOCKSTEP_DEMO_DATA    data directory (default ./lockstep-data, under the repository)
#   LOCKSTEP_DEMO_HTTP    the server's --http (default: the server's own, 127.0.0.1:8080)
set -euo pipefail
started_in=$(pwd)
cd "$(dirname "$0")/.."
repo=$(pwd)

listen=${LOCKSTEP_DEMO_LISTEN:-127.0.0.1:21212}
data=${LOCKSTEP_DEMO_DATA:-lockstep-data}
contestants='Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,Alana Bregman,Jessie Eichman'

bin=${LOCKSTEP_BIN:-target/release/lockstep}
if [ -z "${LOCKSTEP_BIN:-}" ]; then
  echo "Building Lockstep (cargo build --release -p lockstep-cli). The first build compiles every"
  echo "dependency and takes several minutes (about 25 on a 2-core machine); later ones take seconds."
  cargo build --release -p lockstep-cli
fi

# The command that opens the shell on this server, as the user can type it from where they are.
shell_cmd="$bin sql"
if [ "$started_in" != "$repo" ] && [ "${bin#/}" = "$bin" ]; then
  shell_cmd="$repo/$bin sql"
fi
if [ "$listen" != 127.0.0.1:21212 ]; then
  shell_cmd="$shell_cmd --server $listen"
fi

http_args=()
if [ -n "${LOCKSTEP_DEMO_HTTP:-}" ]; then
  http_args=(--http "$LOCKSTEP_DEMO_HTTP")
fi
"$bin" server --pg off --listen "$listen" --data "$data" "${http_args[@]}" &
server=$!

# Ctrl-C or SIGTERM: stop the server, wait for it, and exit with its status (0 for a clean
# stop). A failure of this script stops the server too, rather than leave it behind.
stop_server() {
  trap - INT TERM EXIT
  kill -TERM "$server" 2>/dev/null || true
  local code=0
  wait "$server" || code=$?
  exit "$code"
}
trap stop_server INT TERM
trap 'kill -TERM "$server" 2>/dev/null || true' EXIT

sql() { "$bin" sql --server "$listen" "$@"; }
# The single value a call returns (its CSV has a header line, then the value and a CR LF).
value_of() { sql --format csv -c "$1" | tail -n 1 | tr -d '\r'; }

# Wait until it answers; if it stopped instead (its data directory or port is taken by a
# server already running, say), say so rather than talk to another server.
for _ in $(seq 1 100); do
  kill -0 "$server" 2>/dev/null || break
  sql -c "exec @Ping" >/dev/null 2>&1 && break
  sleep 0.1
done
sleep 0.2
if ! kill -0 "$server" 2>/dev/null; then
  trap - INT TERM EXIT
  wait "$server" || true
  echo "The server did not start (see its message above); is another Lockstep already running here?" >&2
  exit 1
fi

# Load the app once (the schema and procedures survive restarts in the data directory).
if ! sql --format csv -c "exec @SystemCatalog PROCEDURES" | grep -qi '^,,Vote,'; then
  echo "Loading apps/voter/ddl.sql: tables, views and the Vote, Initialize and Results procedures."
  sql -f apps/voter/ddl.sql >/dev/null
fi
# Initialize returns how many contestants the contest has (it adds them only once).
n=$(value_of "exec Initialize 6 '$contestants'")
echo "The contest has $n contestants."
for vote in "5551234567 1" "5552345678 2" "6175550100 2" "2125550199 3" "3125550123 2"; do
  set -- $vote
  # Vote returns 0 when the vote counts, 1 for an unknown contestant, 2 when the phone
  # number has used its votes (2 here).
  result=$(value_of "exec Vote $1 $2 2")
  case $result in
    0) outcome="counted" ;;
    1) outcome="refused: no such contestant" ;;
    2) outcome="refused: this phone has used its votes" ;;
    *) outcome="answered $result" ;;
  esac
  echo "Vote from $1 for contestant $2: $outcome."
done
echo "Results, most votes first:"
sql -c "exec Results"
echo
echo "Lockstep is running on $listen with its data in $data/."
echo "This terminal now holds the server: press Ctrl-C to stop it."
echo "From another terminal, open the SQL shell with: $shell_cmd"
# Exits through stop_server on Ctrl-C, or here with the server's status if it stops otherwise.
code=0
wait "$server" || code=$?
trap - INT TERM EXIT
exit "$code"
