#!/usr/bin/env bash
# Where a server's CPU goes per transaction: starts a Lockstep server (command log off),
# floods it with `lockstep bench WORKLOAD` (window 512, after a warm-up), records the
# server's threads with `perf record` for a few seconds in the middle of the run, and
# prints the samples grouped by thread and by part of the code, each part as a share of
# the samples and as microseconds of the server's CPU per transaction (the share times the
# CPU per transaction that the run itself measured from /proc).
#
#   scripts/measure/where-time-goes.sh voter
#   LOCKSTEP_BIN=target/release/lockstep SECONDS_RECORDED=8 scripts/measure/where-time-goes.sh tatp
#
# Needs perf (linux-perf) and python3. The groups are name patterns over the symbols
# (below), so they are approximate: an inlined function counts where it was inlined.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: scripts/measure/where-time-goes.sh WORKLOAD [bench options…]" >&2; exit 2; }
workload=$1; shift
BIN=${LOCKSTEP_BIN:-target/release/lockstep}
RECORDED=${SECONDS_RECORDED:-8}
command -v perf >/dev/null || { echo "needs perf (apt-get install linux-perf)" >&2; exit 2; }
[ -x "$BIN" ] || { echo "no $BIN: cargo build --release -p lockstep-cli" >&2; exit 2; }

work=$(mktemp -d /tmp/lockstep-where.XXXXXX)
port=$((24000 + RANDOM % 1000))
"$BIN" server --listen "127.0.0.1:$port" --http off --pg off --data "$work/data" --command-log off >"$work/server.out" 2>"$work/server.err" &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do grep -q ready "$work/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$work/server.out" || { echo "the server did not start: $(tail -3 "$work/server.err")" >&2; exit 1; }

"$BIN" bench "$workload" --server "127.0.0.1:$port" --duration $((RECORDED + 6)) --warmup 2 --window 512 \
  --server-pid "$server" "$@" >"$work/bench.out" 2>"$work/bench.err" &
bench=$!
sleep 5
perf record -F 2000 -p "$server" -o "$work/perf.data" -- sleep "$RECORDED" >/dev/null 2>&1
wait $bench || { echo "the benchmark failed: $(tail -3 "$work/bench.err")" >&2; exit 1; }
grep -E '^ALL|CPU' "$work/bench.out"
us=$(awk '/^server CPU/{print $3}' "$work/bench.out")

cat >"$work/group.py" <<'PY'
import re, sys
us = float(sys.argv[1])
# First match wins: kernel parts, then our crates and the libraries they call.
groups = [
    ("kernel: scheduling, wake-ups, syscalls", r"\[k\].*(switch|schedule|futex|wake|idle|enqueue|dequeue|pick_next|update_curr|ttwu|select_task|syscall|_raw_spin|irq)"),
    ("kernel: network", r"\[k\].*(tcp|ip_|skb|sock|inet|net_|loopback|sk_|copy_user|_copy_to|_copy_from|csum)"),
    ("kernel: other", r"\[k\]"),
    ("Lua VM", r"lua[A-Z_]|mlua|sweepgen|propagatemark|singlestep"),
    ("indexes: hash and B-tree lookups", r"lockstep_storage::(index|row_hash|key)|hashbrown|btree::|Value as core::cmp"),
    ("tables, rows, views", r"lockstep_storage"),
    ("SQL execution", r"lockstep_sql"),
    ("procedure glue: parameters, results", r"lockstep_procs"),
    ("memory allocation and copies", r"_mi_|mi_|malloc|free|realloc|memcpy|memmove|memset"),
    ("clock reads", r"clock_gettime|vdso|Timespec|Instant"),
    ("site loop, engine, statistics", r"lockstep_engine"),
    ("wire codec, connections, runtime", r"lockstep_wire|lockstep_server|tokio|mio|crossbeam"),
]
share = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+(\S+)\s+(.*)", line)
    if not m:
        continue
    pct, comm, sym = float(m.group(1)), m.group(2), m.group(4)
    thread = "site" if comm.startswith("site") else "front" if comm == "front" else "other threads"
    group = next((name for name, rx in groups if re.search(rx, sym)), "other")
    share[(thread, group)] = share.get((thread, group), 0.0) + pct
print(f"\n{'thread':<14} {'part':<40} {'share':>6} {'us/txn':>7}")
for (thread, group), pct in sorted(share.items(), key=lambda kv: (kv[0][0], -kv[1])):
    if pct >= 0.5:
        print(f"{thread:<14} {group:<40} {pct:5.1f}% {pct * us / 100:7.2f}")
PY
perf report -i "$work/perf.data" --no-children --sort comm,dso,sym -q --stdio 2>/dev/null | python3 "$work/group.py" "${us:-0}"
