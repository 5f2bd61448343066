#!/usr/bin/env bash
# Rejoin time: a 3-node cluster with k = 1 (2 sites a node, command log off) is loaded with
# TATP at SCALE subscribers; node 1 is killed with SIGKILL and started again on its data
# directory; prints how long it took to be ready, and then until every partition has both
# replicas again (it received an image of each of its partitions and caught up).
#   scripts/measure/rejoin.sh [path/to/lockstep]      SCALE=1000000 by default
# A measurement, not a test: figures go to the performance notes, never into assertions.
set -euo pipefail
BIN=${1:-target/release/lockstep}
SCALE=${SCALE:-1000000}
W=$(mktemp -d /tmp/lockstep-rejoin.XXXXXX)
hosts=127.0.0.1:33021,127.0.0.1:33022,127.0.0.1:33023
servers=127.0.0.1:33121,127.0.0.1:33122,127.0.0.1:33123
start() {
  mkdir -p "$W/n$1"
  "$BIN" server --listen "127.0.0.1:$((33121 + $1))" --internal "127.0.0.1:$((33021 + $1))" --hosts $hosts --kfactor 1 \
    --sites 2 --http off --pg off --command-log off --data "$W/n$1" >"$W/n$1/out.log" 2>&1 &
  echo $! >"$W/n$1/pid"
}
wait_ready() { until grep -q ready "$W/n$1/out.log"; do sleep 0.1; done; }
stop_all() { for i in 0 1 2; do [ -f "$W/n$i/pid" ] && kill "$(cat "$W/n$i/pid")" 2>/dev/null || true; done; }
trap 'stop_all; rm -rf "$W"' EXIT
for i in 0 1 2; do start $i; done
for i in 0 1 2; do wait_ready $i; done
echo "loading TATP, $SCALE subscribers"
"$BIN" bench tatp --server $servers --scale "$SCALE" --duration 2 >"$W/bench.log" 2>&1
kill -9 "$(cat "$W/n1/pid")"
sleep 3 # the cluster declares node 1 down and fails its partitions over
t0=$(date +%s.%N)
start 1
wait_ready 1
t1=$(date +%s.%N)
# Fully replicated: every partition's row of @Statistics TOPO lists two replicas.
until [ "$("$BIN" sql --server 127.0.0.1:33121 -c "exec @Statistics TOPO 0" 2>/dev/null | grep -cE '\b[0-9]+:[0-9]+,[0-9]+:[0-9]+')" -ge 3 ]; do
  sleep 0.1
done
t2=$(date +%s.%N)
echo "restart to ready: $(echo "$t1 - $t0" | bc) s; ready to every partition fully replicated: $(echo "$t2 - $t1" | bc) s"
grep -hE "receiving its image|loaded partition" "$W"/n1/out.log | sed -E 's/^[^ ]+ +INFO [^ ]+ //' || true
