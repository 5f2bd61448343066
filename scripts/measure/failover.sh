#!/usr/bin/env bash
# Failover time: a 3-node cluster with k = 1 (2 sites a node, command log off); a client
# writes one key as fast as it can through a node that survives; the node leading the key's
# partition is killed with SIGKILL. Failover is the time from the last acknowledged write
# before the kill to the first acknowledged write after it (the longest pause in
# acknowledgements that ends after the kill). Rounds alternate between killing
# the membership group's leader and killing another node (the output says which); between
# rounds the killed node is started again and waits until it holds its partitions again.
# Prints each round, then p50 and max per case.
#
#   LOCKSTEP_BIN=target/debug/lockstep scripts/measure/failover.sh [ROUNDS]   (default 20)
#
# Environment: LOCKSTEP_BIN (required: a debug or release lockstep binary);
# FAILOVER_PORT_BASE (default 35000: clients on +121.., internal +21.., HTTP +221..);
# FAILOVER_SIGNAL=STOP pauses the node (SIGSTOP) instead of killing it (it is killed for
# good once the round is scored, then started again like a killed one).
# The writer is a small Python client of the HTTP JSON API (one kept-alive connection, one
# call at a time). The group's leader is the node that proposed the last membership change
# (it logs "proposing a membership change"). A measurement, not a test: figures go to
# docs/cluster.md, never into assertions.
set -euo pipefail
BIN=${LOCKSTEP_BIN:?set LOCKSTEP_BIN to a lockstep binary}
ROUNDS=${1:-20}
BASE=${FAILOVER_PORT_BASE:-35000}
# How long the writer runs after the kill before the round is scored.
AFTER_KILL_S=4
SIGNAL=${FAILOVER_SIGNAL:-KILL}
# How long a restarted node may take to hold both replicas again.
REJOIN_LIMIT_S=90
W=$(mktemp -d /tmp/lockstep-failover.XXXXXX)
hosts="127.0.0.1:$((BASE + 21)),127.0.0.1:$((BASE + 22)),127.0.0.1:$((BASE + 23))"
client() { echo "127.0.0.1:$((BASE + 121 + $1))"; }
http() { echo "127.0.0.1:$((BASE + 221 + $1))"; }

start() {
  mkdir -p "$W/n$1"
  "$BIN" server --listen "$(client "$1")" --internal "127.0.0.1:$((BASE + 21 + $1))" --hosts "$hosts" --kfactor 1 \
    --sites 2 --http "$(http "$1")" --pg off --command-log off --data "$W/n$1" >>"$W/n$1/out.log" 2>&1 &
  echo $! >"$W/n$1/pid"
}
# Waits until node $1 printed its ready line $2 times (once per start).
wait_ready() {
  local deadline=$((SECONDS + 60))
  until [ "$(cat "$W/n$1/out.log" 2>/dev/null | grep -c "lockstep ready" || true)" -ge "$2" ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "node $1 not ready; its log ends:" >&2; tail -5 "$W/n$1/out.log" >&2; exit 1; }
    sleep 0.1
  done
}
stop_all() { for i in 0 1 2; do [ -f "$W/n$i/pid" ] && kill -9 "$(cat "$W/n$i/pid")" 2>/dev/null || true; done; }
trap 'stop_all; [ -n "${FAILOVER_KEEP:-}" ] || rm -rf "$W"' EXIT
sql() { "$BIN" sql --server "$(client "$1")" --format csv -c "$2"; }
# "partition,leader node" for each partition (from @Statistics TOPO through node $1).
leaders() { sql "$1" "exec @Statistics TOPO 0" | awk -F, '/^[0-9]+,/ && $1 < 16383 { split($NF, l, ":"); print $1 "," l[1] }'; }
# Rows of TOPO whose replica list names two sites: partitions with both replicas.
replicated() { sql "$1" "exec @Statistics TOPO 0" 2>/dev/null | grep -cE '^[0-9]+,"[0-9]+:[0-9]+,[0-9]+:[0-9]+"' || true; }
# The node that logged the last membership proposal (log lines start with an RFC 3339 time).
group_leader() {
  for i in 0 1 2; do
    { grep -h "proposing a membership change" "$W/n$i/out.log" || true; } | tail -1 | sed "s/^\([^ ]*\).*/\1 $i/"
  done | sort | tail -1 | cut -d' ' -f2
}

cat >"$W/writer.py" <<'EOF'
# Writes key K through one node's HTTP JSON API as fast as it can; prints the wall-clock
# time of every acknowledged write, one a line, until it is killed.
import http.client, json, sys, time, urllib.parse
host, port = sys.argv[1].split(":")
key = int(sys.argv[2])
conn, i = None, 0
while True:
    i += 1
    query = urllib.parse.urlencode({"Procedure": "R.upsert", "Parameters": json.dumps([key, i])})
    try:
        if conn is None:
            conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("GET", "/api/1.0/?" + query)
        answer = json.loads(conn.getresponse().read())
        if answer.get("status") == 1:
            print("%.6f" % time.time(), flush=True)
    except Exception:
        conn = None
        time.sleep(0.001)
EOF

for i in 0 1 2; do start $i; done
for i in 0 1 2; do wait_ready $i 1; done
sql 0 "CREATE TABLE r (k INTEGER NOT NULL PRIMARY KEY, v INTEGER NOT NULL); PARTITION TABLE r ON COLUMN k;" >/dev/null
declare -A starts=([0]=1 [1]=1 [2]=1)
results=()
for ((round = 1; round <= ROUNDS; round++)); do
  want=$([ $((round % 2)) -eq 1 ] && echo "group leader" || echo "other node")
  g=$(group_leader)
  # A partition led by a node of the wanted kind; a node back from a failure leads nothing,
  # so the other kind may be all there is: then the round kills that kind and says so.
  pick=""
  for kind in "$want" "group leader" "other node"; do
    while IFS=, read -r p l; do
      if { [ "$kind" = "group leader" ] && [ "$l" = "$g" ]; } || { [ "$kind" = "other node" ] && [ "$l" != "$g" ]; }; then
        pick="$p,$l,$kind"
        break
      fi
    done < <(leaders "$g")
    [ -n "$pick" ] && break
  done
  IFS=, read -r part victim kind <<<"$pick"
  via=$(((victim + 1) % 3))
  key=$(sql "$via" "exec @GetPartitionKeys INTEGER" | awk -F, -v p="$part" '$1 == p { print $2 }')
  python3 -u "$W/writer.py" "$(http "$via")" "$key" >"$W/acks" 2>/dev/null &
  writer=$!
  sleep 1.5
  kill_at=$(date +%s.%N)
  kill -"$SIGNAL" "$(cat "$W/n$victim/pid")"
  sleep "$AFTER_KILL_S"
  kill -9 "$(cat "$W/n$victim/pid")" 2>/dev/null || true
  kill "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
  # The longest pause between two acknowledgements that ends after the kill (a killed
  # process may still answer for a few milliseconds while the kernel tears it down).
  gap=$(awk -v k="$kill_at" 'NR > 1 && $1 > k && $1 - prev > best { best = $1 - prev } { prev = $1 }
    END { if (best) printf "%d", best * 1000; else print "none" }' "$W/acks")
  echo "round $round: SIG$SIGNAL to node $victim ($kind, led partition $part), writes through node $via: failover $gap ms"
  [ "$gap" != none ] && results+=("$kind,$gap")
  # Back again, and holding both replicas of every partition, before the next round.
  start "$victim"
  starts[$victim]=$((starts[$victim] + 1))
  wait_ready "$victim" "${starts[$victim]}"
  deadline=$((SECONDS + REJOIN_LIMIT_S))
  until [ "$(replicated "$via")" -ge 3 ]; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "node $victim did not rejoin within $REJOIN_LIMIT_S s" >&2; exit 1; }
    sleep 0.2
  done
done

for kind in "group leader" "other node"; do
  printf '%s\n' "${results[@]}" | awk -F, -v k="$kind" '$1 == k { print $2 }' | sort -n >"$W/sorted"
  n=$(wc -l <"$W/sorted")
  if [ "$n" -gt 0 ]; then
    echo "SIG$SIGNAL to the $kind: $n rounds, p50 $(sed -n "$(((n + 1) / 2))p" "$W/sorted") ms, max $(tail -1 "$W/sorted") ms"
  fi
done
