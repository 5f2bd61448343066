#!/usr/bin/env bash
# Instructions the server executes per transaction: a count the machine's speed and load
# do not move, for changes too small for CPU time to show (time on this machine moves by
# more than 5% from one run to the next; this count by well under 1%).
#
# Starts the server (command log off) under valgrind's callgrind, runs `lockstep bench
# WORKLOAD` against it (window 64), and counts the server's instructions over a window in
# the middle of the run: from SKIP seconds after the run's first report, for SECONDS
# seconds. The window leaves out the set-up and the run's final check (a scan), which a
# slowed-down server would otherwise weigh far above their share of a real run. The
# transactions in the window come from the run's per-second totals, interpolated to the
# moments the counting started and stopped.
#
#   scripts/measure/instructions.sh voter
#   LOCKSTEP_BIN=/tmp/before SECONDS_COUNTED=20 scripts/measure/instructions.sh ycsb-c
#
# Prints: binary, workload, transactions counted, instructions, instructions per
# transaction; KEEP=DIR keeps the callgrind output there (callgrind_annotate reads it).
# Needs valgrind and bc. Callgrind runs the server about 50 times slower: a workload that
# populates much data (tatp) spends minutes setting up.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: scripts/measure/instructions.sh WORKLOAD [bench options…]" >&2; exit 2; }
workload=$1; shift
BIN=${LOCKSTEP_BIN:-target/release/lockstep}
SKIP=${SKIP_SECONDS:-10}
COUNTED=${SECONDS_COUNTED:-10}
for tool in valgrind callgrind_control bc; do
  command -v $tool >/dev/null || { echo "needs $tool (apt-get install valgrind bc)" >&2; exit 2; }
done
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p lockstep-cli" >&2; exit 2; }

work=$(mktemp -d /tmp/lockstep-instructions.XXXXXX)
port=$((27000 + RANDOM % 1000))
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
  "$BIN" server --listen "127.0.0.1:$port" --http off --pg off --data "$work/data" --command-log off \
  >"$work/server.out" 2>"$work/server.err" &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 600); do grep -q ready "$work/server.out" 2>/dev/null && break; sleep 0.2; done
grep -q ready "$work/server.out" || { echo "the server did not start: $(tail -3 "$work/server.err")" >&2; exit 1; }

# Each line of the run's output, stamped with when it was printed.
("$BIN" bench "$workload" --server "127.0.0.1:$port" --duration $((SKIP + COUNTED + 8)) --window 64 "$@" 2>&1 |
  while IFS= read -r line; do echo "$(date +%s.%N) $line"; done) >"$work/bench.out" &
bench=$!
for _ in $(seq 1 3000); do grep -q " total " "$work/bench.out" 2>/dev/null && break; sleep 0.2; done
sleep "$SKIP"
t0=$(date +%s.%N); callgrind_control -z $server >/dev/null 2>&1; t0=$(echo "($t0 + $(date +%s.%N)) / 2" | bc -l)
sleep "$COUNTED"
t1=$(date +%s.%N); callgrind_control -d $server >/dev/null 2>&1; t1=$(echo "($t1 + $(date +%s.%N)) / 2" | bc -l)
wait $bench || { echo "the benchmark failed: $(tail -3 "$work/bench.out")" >&2; exit 1; }

# The run's cumulative total at time T, between the two reports around it.
total_at() {
  awk -v t="$1" '/ total /{ if ($1 <= t) { pt = $1; pn = $NF } else if (!after) { nt = $1; nn = $NF; after = 1 } }
    END { if (after && nt > pt) printf "%.0f\n", pn + (nn - pn) * (t - pt) / (nt - pt); else print pn }' "$work/bench.out"
}
txns=$(( $(total_at "$t1") - $(total_at "$t0") ))
dump=$(ls "$work"/cg.out.* | head -1)
ir=$(awk '/^totals:/{print $2}' "$dump")
[ "$txns" -gt 0 ] || { echo "no transaction in the counted window" >&2; exit 1; }
echo "$(basename "$BIN") $workload transactions=$txns instructions=$ir per_transaction=$((ir / txns))"
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$dump" "$KEEP/"; fi
