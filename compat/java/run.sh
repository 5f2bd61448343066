#!/usr/bin/env bash
# Runs the VoltDB Java client compatibility suite (compat/java) against the lockstep binary.
# Usage: compat/java/run.sh [path/to/lockstep]   (default: target/debug/lockstep of this repo)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-${LOCKSTEP_BIN:-$repo/target/debug/lockstep}}"

if ! command -v java >/dev/null 2>&1; then
    echo "compat/java: 'java' not found; install a JDK 17 (e.g. apt-get install openjdk-17-jdk-headless)" >&2
    exit 2
fi
if ! command -v mvn >/dev/null 2>&1; then
    echo "compat/java: 'mvn' not found; install Maven (e.g. apt-get install maven)" >&2
    exit 2
fi
if [ ! -x "$bin" ]; then
    echo "compat/java: lockstep binary not found at $bin; build it with 'cargo build -p lockstep-cli'" >&2
    exit 2
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

cd "$here"
# Not -q: Surefire's "Tests run: N, Failures: F" summary lines must reach the log.
exec mvn -B --no-transfer-progress test -Dlockstep.bin="$bin"
