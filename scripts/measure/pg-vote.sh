#!/usr/bin/env bash
# pgbench -M prepared calling Voter's Vote: on Lockstep's PostgreSQL port (the Lua
# procedure, `CALL Vote(…)`) and on PostgreSQL 15 (the same procedure in PL/pgSQL,
# `SELECT ls_vote(…)`, from apps/voter/peers/postgres.sql), same clients, in turns, in one
# run; prints each run's TPS and the server's CPU per transaction (from /proc).
# Durability is off on both sides: Lockstep's command log off, PostgreSQL's unlogged
# tables with fsync and synchronous_commit off (scripts/peers.sh).
#   scripts/measure/pg-vote.sh [path/to/lockstep]     CLIENTS=4 SECONDS_EACH=10 ROUNDS=2
# A measurement, not a test: figures go to the performance notes, never into assertions.
set -euo pipefail
BIN=${1:-target/release/lockstep}
CLIENTS=${CLIENTS:-4}; SECONDS_EACH=${SECONDS_EACH:-10}; ROUNDS=${ROUNDS:-2}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
W=$(mktemp -d /tmp/lockstep-pgvote.XXXXXX)
chmod 755 "$W"
LS=""
trap '[ -n "$LS" ] && kill $LS 2>/dev/null; "$REPO/scripts/peers.sh" stop postgres "$W/pg" >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
ticks() { cut -d' ' -f14,15 "/proc/$1/stat" | tr ' ' '+' | bc; }
# The postmaster's CPU, its exited children's (cutime and cstime count them once waited
# for: the backends of a pgbench run) and its live children's.
pg_ticks() {
  local pm t
  pm=$(head -1 "$W/pg/data/postmaster.pid")
  t=$(cut -d' ' -f14-17 "/proc/$pm/stat" | tr ' ' '+' | bc)
  for p in $(pgrep -P "$pm"); do t=$((t + $(ticks "$p" 2>/dev/null || echo 0))); done
  echo "$t"
}
url=$("$REPO/scripts/peers.sh" start postgres "$W/pg" 55432)
"$BIN" bench voter --target "$url" --duration 1 >"$W/pg-setup.log" 2>&1
"$BIN" server --listen 127.0.0.1:55212 --http off --pg 127.0.0.1:55433 --command-log off --sites 2 --data "$W/ls" >"$W/ls.log" 2>&1 &
LS=$!
until grep -q ready "$W/ls.log"; do sleep 0.2; done
"$BIN" bench voter --server 127.0.0.1:55212 --duration 1 >"$W/ls-setup.log" 2>&1
script() { printf '\\set phone random(2000000000, 9999999999)\n\\set contestant random(1, 6)\n%s(:phone, :contestant, 10);\n' "$1"; }
script "CALL Vote" >"$W/ls.sql"
script "SELECT ls_vote" >"$W/pg.sql"
for round in $(seq 1 "$ROUNDS"); do
  for sys in lockstep postgres; do
    if [ $sys = lockstep ]; then port=55433; db=lockstep; c0=$(ticks $LS); f=ls; else port=55432; db=postgres; c0=$(pg_ticks); f=pg; fi
    out=$(pgbench -h 127.0.0.1 -p $port -U $db -n -M prepared -c "$CLIENTS" -j 2 -T "$SECONDS_EACH" -f "$W/$f.sql" $db 2>&1)
    sleep 0.5 # PostgreSQL's backends exit and are waited for
    if [ $sys = lockstep ]; then c1=$(ticks $LS); else c1=$(pg_ticks); fi
    tps=$(echo "$out" | grep -oE "tps = [0-9.]+" | head -1 | cut -d' ' -f3)
    n=$(echo "$out" | grep -oE "actually processed: [0-9]+" | grep -oE "[0-9]+$")
    failed=$(echo "$out" | grep -oE "failed transactions: [0-9]+" | grep -oE "[0-9]+$" || echo 0)
    # Clock ticks are 1/100 s: µs per transaction = ticks * 10,000 / transactions.
    echo "round $round $sys, $CLIENTS clients: $tps tps, $n transactions ($failed failed), server CPU $(echo "($c1 - $c0) * 10000 / $n" | bc) µs per transaction"
  done
done
