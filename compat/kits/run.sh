#!/usr/bin/env bash
# Builds the VoltDB kits' own client programs from their sources and runs each, unchanged,
# against a fresh Lockstep server loaded with the matching app; prints a table of results.
#
# Usage: compat/kits/run.sh KIT_SRC_DIR [path/to/lockstep]
#   KIT_SRC_DIR holds the kit sources the user fetched (see compat/kits/README.md):
#     tatp/      srmadscience/voltdb-tatpbenchmark
#     charging/  srmadscience/voltdb-chargingdemo
#     ycsb/      brianfrankcooper/YCSB (only voltdb/ is used)
#     voter/     VoltDB/voltdb examples/voter/client/voter (AsyncBenchmark.java, PhoneCallGenerator.java)
# Environment: KITS (default "voter tatp charging ycsb"), KIT_SECONDS (client run time,
# default 20; TATP's passes last a minute each), KIT_WORK (build and log directory, default
# a new temporary one), KIT_PORT (first port, default 23000), KIT_SITES (server sites).
# Not run by scripts/test.sh: the kit sources cannot be downloaded in CI. compat/java's
# Kit*Test classes replay the kits' call sequences there instead.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
src="$(cd "$1" && pwd)" || { echo "kits: no directory $1" >&2; exit 2; }
bin="${2:-$repo/target/debug/lockstep}"
kits="${KITS:-voter tatp charging ycsb}"
seconds="${KIT_SECONDS:-20}"
port="${KIT_PORT:-23000}"
work="${KIT_WORK:-$(mktemp -d /tmp/lockstep-kits-XXXXXX)}"
sites_flag=()
[ -n "${KIT_SITES:-}" ] && sites_flag=(--sites "$KIT_SITES")
# Java 17 needs this for voltdbclient 10.1.1's NIO code.
java_opts=(--add-opens java.base/sun.nio.ch=ALL-UNNAMED)

for tool in java javac mvn; do
    command -v "$tool" >/dev/null || { echo "kits: '$tool' not found (install a JDK 17 and Maven)" >&2; exit 2; }
done
[ -x "$bin" ] || { echo "kits: lockstep binary not found at $bin (cargo build -p lockstep-cli)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
mkdir -p "$work"
echo "kits: sources $src, binary $bin, work in $work"

# The libraries every kit compiles against, from Maven Central (voltdbclient pinned to 10.1.1).
if ! (cd "$here" && mvn -B -q --no-transfer-progress dependency:build-classpath -Dmdep.outputFile="$work/classpath.txt" >"$work/maven.log" 2>&1); then
    echo "kits: resolving the classpath failed, see $work/maven.log" >&2; exit 1
fi
cp="$(cat "$work/classpath.txt")"

server_pid=""
stop_server() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null
        wait "$server_pid" 2>/dev/null
        server_pid=""
    fi
}
trap stop_server EXIT

# start_server NAME APP: a fresh server on the next port; its address goes in $addr.
start_server() {
    local name="$1" app="$2"
    port=$((port + 1))
    addr="127.0.0.1:$port"
    rm -rf "$work/$name/data"
    mkdir -p "$work/$name"
    "$bin" server --data "$work/$name/data" --listen "$addr" --http off --pg off --procedures "$repo/apps/$app/procedures" \
        --command-log async "${sites_flag[@]}" >"$work/$name/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 100); do
        grep -q "lockstep ready" "$work/$name/server.log" && return 0
        kill -0 "$server_pid" 2>/dev/null || break
        sleep 0.2
    done
    echo "kits: $name: the server did not start, see $work/$name/server.log" >&2
    return 1
}

load_ddl() {
    (cd "$repo/apps/$1" && "$bin" sql --server "$addr" -f ddl.sql) >"$work/$2/ddl.log" 2>&1
}

# stubs DIR PACKAGE NAMES…: empty classes, so a kit that puts its procedure classes in an
# @UpdateClasses jar finds them on its classpath (the server binds NAME.lua instead).
stubs() {
    local out="$1" pkg="$2"; shift 2
    local dir="$work/stubs/${pkg//.//}"
    mkdir -p "$dir"
    for c in "$@"; do
        printf 'package %s;\n/** Stand-in for the kit'"'"'s procedure class; Lockstep runs %s.lua. */\npublic final class %s {}\n' "$pkg" "$c" "$c" >"$dir/$c.java"
    done
    local files=()
    for c in "$@"; do files+=("$dir/$c.java"); done
    javac -nowarn -d "$out" "${files[@]}"
}

compile() { # compile NAME FILES…
    local name="$1"; shift
    mkdir -p "$work/$name/classes"
    javac -nowarn -encoding UTF-8 -d "$work/$name/classes" -cp "$cp" "$@" >"$work/$name/javac.log" 2>&1
}

results=()
record() { # record KIT STATUS SUMMARY
    results+=("$(printf '%-9s %-5s %s' "$1" "$2" "$3")")
}

run_voter() {
    local d="$src/voter"
    local files=()
    for f in AsyncBenchmark.java PhoneCallGenerator.java; do
        local found; found="$(find "$d" -path '*voter/*' -name "$f" | grep -v '/src/com/\|Client2' | head -1)"
        [ -n "$found" ] || { record voter FAIL "$f not found under $d"; return; }
        files+=("$found")
    done
    compile voter "${files[@]}" || { record voter FAIL "javac failed, see $work/voter/javac.log"; return; }
    start_server voter voter || { record voter FAIL "server did not start"; return; }
    # The example's own schema script when it is there (its FROM CLASS voter.X binds X.lua on
    # the server's procedure path, apps/voter/procedures); apps/voter/ddl.sql otherwise.
    local kit_ddl; kit_ddl="$(find "$d" -maxdepth 3 -name ddl.sql | head -1)"
    if [ -n "$kit_ddl" ]; then
        (cd "$(dirname "$kit_ddl")" && "$bin" sql --server "$addr" -f ddl.sql) >"$work/voter/ddl.log" 2>&1 \
            || { record voter FAIL "the example's ddl.sql failed, see $work/voter/ddl.log"; stop_server; return; }
    else
        load_ddl voter voter || { record voter FAIL "ddl failed, see $work/voter/ddl.log"; stop_server; return; }
    fi
    timeout $((seconds + 120)) java "${java_opts[@]}" -cp "$work/voter/classes:$cp" voter.AsyncBenchmark \
        --servers="$addr" --duration="$seconds" --warmup=2 --latencyreport=true >"$work/voter/client.log" 2>&1
    local rc=$?
    stop_server
    local line; line="$(grep -m1 'Average throughput' "$work/voter/client.log" | tr -s ' ')"
    local p99; p99="$(grep -m1 '^99th percentile latency' "$work/voter/client.log" | tr -s ' ')"
    if [ $rc -eq 0 ] && [ -n "$line" ] && grep -q 'The Winner is' "$work/voter/client.log"; then
        record voter OK "$line; $p99"
    else
        record voter FAIL "exit $rc, see $work/voter/client.log"
    fi
}

run_tatp() {
    local d="$src/tatp/src/main/java"
    [ -d "$d/org/voltdb/tatp/client" ] || { record tatp FAIL "no $d/org/voltdb/tatp/client"; return; }
    # Client packages only: voltdbtatp.db needs VoltDB's server jar.
    compile tatp $(find "$d/org" -name '*.java') || { record tatp FAIL "javac failed, see $work/tatp/javac.log"; return; }
    local classes
    classes=$(grep -o 'FROM CLASS voltdbtatp\.db\.[A-Za-z0-9_]*' "$d/org/voltdb/tatp/client/TatpClient.java" | sed 's/.*\.//' | sort -u)
    stubs "$work/tatp/classes" voltdbtatp.db $classes
    # No DDL loaded: the client creates the schema itself (@AdHoc, @UpdateClasses, FROM CLASS).
    start_server tatp tatp || { record tatp FAIL "server did not start"; return; }
    mkdir -p "$work/tatp/run/results"
    # Pass 1 at KIT_TATP_TPS for one minute (the kit's shortest pass); pass 2 asks for 1M TPS
    # more, which misses the kit's 75% rule and ends the run, as the kit's own stepping does.
    (cd "$work/tatp/run" && timeout 400 java "${java_opts[@]}" -cp "$work/tatp/classes:$cp" org.voltdb.tatp.client.TatpClient \
        kits "$addr" "${KIT_TATP_TPS:-2000}" 1000000 "${KIT_TATP_SUBSCRIBERS:-10000}" "${KIT_TATP_FKMODE:-1}" 1 2) >"$work/tatp/client.log" 2>&1
    local rc=$?
    stop_server
    local first; first="$(ls -tr "$work/tatp/run/results/"*.dat 2>/dev/null | head -1)"
    local line=""; [ -n "$first" ] && line="$(grep -m1 'Expected transactions' "$first")"
    if [ $rc -eq 0 ] && [ -n "$line" ] && grep -q 'Finished' "$work/tatp/client.log"; then
        record tatp OK "pass 1: $line (per minute); $(grep -m1 -A2 'GET_SUBSCRIBER_DATA_WALL' "$first" | tr '\n' ' ' | tr -s ' ' | cut -c1-160)"
    else
        record tatp FAIL "exit $rc, see $work/tatp/client.log"
    fi
}

run_charging() {
    local d="$src/charging/src"
    [ -f "$d/org/voltdb/chargingdemo/ChargingDemo.java" ] || { record charging FAIL "no ChargingDemo.java under $d"; return; }
    # ReferenceData is plain constants; the other chargingdemoprocs need VoltDB's server jar.
    compile charging $(find "$d/org" -name '*.java') "$d/chargingdemoprocs/ReferenceData.java" \
        || { record charging FAIL "javac failed, see $work/charging/javac.log"; return; }
    start_server charging charging || { record charging FAIL "server did not start"; return; }
    load_ddl charging charging || { record charging FAIL "ddl failed, see $work/charging/ddl.log"; stop_server; return; }
    # hosts users offset tpms task loblength duration queryseconds initialcredit addcreditinterval
    timeout $((seconds + 180)) java "${java_opts[@]}" -cp "$work/charging/classes:$cp" org.voltdb.chargingdemo.ChargingDemo \
        "$addr" "${KIT_CHARGING_USERS:-10000}" 0 "${KIT_CHARGING_TPMS:-20}" RUN 10 "$seconds" 10 100000 5 >"$work/charging/client.log" 2>&1
    local rc=$?
    stop_server
    local line; line="$(grep -m1 'GREPABLE SUMMARY' "$work/charging/client.log" | cut -c1-200)"
    if [ $rc -eq 0 ] && [ -n "$line" ]; then
        record charging OK "$(grep -m1 'entries per ms' "$work/charging/client.log" | tr -s ' ' | cut -c1-80); $line"
    else
        record charging FAIL "exit $rc, see $work/charging/client.log"
    fi
}

run_ycsb() {
    local d="$src/ycsb/voltdb/src/main/java"
    [ -f "$d/site/ycsb/db/voltdb/VoltClient4.java" ] || { record ycsb FAIL "no VoltClient4.java under $d"; return; }
    # procs/Put, Scan, ScanAll need VoltDB's server jar; ByteWrapper is plain.
    compile ycsb $(find "$d" -name '*.java' | grep -v '/procs/\(Put\|Scan\|ScanAll\)\.java$') \
        || { record ycsb FAIL "javac failed, see $work/ycsb/javac.log"; return; }
    stubs "$work/ycsb/classes" site.ycsb.db.voltdb.procs Put Scan ScanAll
    local workload="$src/ycsb/workloads/workloada"
    [ -f "$workload" ] || { record ycsb FAIL "no $workload"; return; }
    # No DDL loaded: the binding creates the schema itself (@AdHoc, @UpdateClasses, FROM CLASS).
    start_server ycsb ycsb || { record ycsb FAIL "server did not start"; return; }
    local run=(java "${java_opts[@]}" -cp "$work/ycsb/classes:$cp" site.ycsb.Client -db site.ycsb.db.voltdb.VoltClient4
        -P "$workload" -p voltdb.servers="$addr" -p recordcount="${KIT_YCSB_RECORDS:-10000}" -threads "${KIT_YCSB_THREADS:-8}")
    timeout 300 "${run[@]}" -load >"$work/ycsb/load.log" 2>&1
    local rc_load=$?
    timeout $((seconds + 120)) "${run[@]}" -t -p operationcount=100000000 -p maxexecutiontime="$seconds" >"$work/ycsb/client.log" 2>&1
    local rc=$?
    stop_server
    local line; line="$(grep -m1 'OVERALL.*Throughput' "$work/ycsb/client.log")"
    local errors; errors="$(grep -h 'Return=ERROR' "$work/ycsb/load.log" "$work/ycsb/client.log" | head -1)"
    if [ $rc_load -eq 0 ] && [ $rc -eq 0 ] && [ -n "$line" ] && [ -z "$errors" ]; then
        record ycsb OK "$line; $(grep -m1 'READ\], 99thPercentileLatency' "$work/ycsb/client.log")"
    else
        record ycsb FAIL "load exit $rc_load, run exit $rc ${errors:+($errors)}, see $work/ycsb/"
    fi
}

for kit in $kits; do
    echo "kits: $kit …"
    case "$kit" in
        voter) run_voter ;;
        tatp) run_tatp ;;
        charging) run_charging ;;
        ycsb) run_ycsb ;;
        *) record "$kit" FAIL "unknown kit" ;;
    esac
done

echo
printf '%-9s %-5s %s\n' KIT RESULT SUMMARY
failed=0
for r in "${results[@]}"; do
    echo "$r"
    case "$r" in *" FAIL "*) failed=1 ;; esac
done
echo "logs: $work"
exit $failed
