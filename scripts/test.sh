#!/usr/bin/env bash
# Runs every test of Lockstep:
#   0. `cargo fmt --check` and `cargo clippy -D warnings` over every crate and test;
#   1. the Rust workspace: unit, property and integration tests (the integration tests start
#      the real `lockstep` binary on 127.0.0.1 and drive it over TCP);
#   2. the fuzzers (scripts/fuzz.sh, AFL++ via cargo-afl): 25 s per target, or 15 minutes
#      each (an hour in all) with LOCKSTEP_LONG=1; a crash or hang fails the run;
#   3. compat/java: the real VoltDB Java client (org.voltdb:voltdbclient:10.1.1 from Maven
#      Central) and its JDBC driver against the real server;
#   4. compat/console: the web console in headless Chromium (playwright-core from npm), its
#      screenshots kept under target/console/;
#   5. compat/pg: PostgreSQL drivers on the --pg port, Python's psycopg 3 (PyPI, in a venv
#      under target/pg-python) and Go's pgx v5 (Go module proxy); Java's PostgreSQL JDBC
#      driver (Maven Central) is compat/java's PgJdbcTest.
#   6. compat/kafka: the Kafka export target and `lockstep load kafka` against a real Apache
#      Kafka 4.x broker in KRaft mode (its jars from Maven Central), started and stopped there.
# Installs what the tests need when it is missing (a JDK 17, Maven and openssl; Prometheus; Chromium,
# Node.js and npm for the console; Go for the history
# checker; PostgreSQL 15, Redis and Tarantool for the side-by-side adapters' tests; all from Debian).
# Set LOCKSTEP_LONG=1 to also run the long soak and crash loops.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install Rust (the toolchain is pinned in rust-toolchain.toml)" >&2
  exit 1
fi
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  echo "installing a JDK and Maven for the VoltDB client compatibility suite"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  $sudo apt-get install -y -q openjdk-17-jdk-headless maven
fi
# compat/java's SecurityTest makes its TLS certificate with openssl (and its trust store with
# the JDK's keytool).
if ! command -v openssl >/dev/null 2>&1; then
  echo "installing openssl for the TLS compatibility test"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  $sudo apt-get install -y -q openssl
fi

# crates/cli/tests/http.rs has a real Prometheus scrape the server's /metrics and query it.
if ! command -v prometheus >/dev/null 2>&1; then
  echo "installing Prometheus for the /metrics test"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  $sudo apt-get install -y -q prometheus
fi

# compat/console drives Debian's Chromium with playwright-core (npm ci in its directory).
# Only what is missing is installed: a Node.js from elsewhere (NodeSource's carries its own
# npm) conflicts with Debian's npm package.
console_packages=""
command -v chromium >/dev/null 2>&1 || console_packages="chromium"
command -v node >/dev/null 2>&1 || console_packages="$console_packages nodejs npm"
command -v node >/dev/null 2>&1 && ! command -v npm >/dev/null 2>&1 && console_packages="$console_packages npm"
if [ -n "$console_packages" ]; then
  echo "installing$console_packages for the web console's browser test"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  # shellcheck disable=SC2086 # the list is meant to split into packages
  $sudo apt-get install -y -q $console_packages
fi

# The peers the side-by-side adapters are tested against (PostgreSQL, Redis, Tarantool).
bash scripts/peers.sh install

# The history checker (compat/history: Go and porcupine from the Go module proxy), which
# crates/cli/tests/history.rs builds and runs; its own tests prove it reports anomalies.
if ! command -v go >/dev/null 2>&1; then
  echo "installing Go for the history checker"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  $sudo apt-get install -y -q golang-go
fi
(cd compat/history && go mod download && go vet ./... && go test ./...)

# compat/pg's psycopg suite runs in a virtual environment (Debian ships venv apart).
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "installing Python's venv for the psycopg suite"
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -q
  $sudo apt-get install -y -q python3 python3-venv
fi

# Formatting and lints first: they take seconds and fail fast.
cargo fmt --check
cargo clippy --workspace --all-targets -- -D warnings

# Build once (tests and the server binary), then run the tests.
cargo build --workspace --tests --bins
cargo test --workspace --no-fail-fast
# Coverage-guided fuzzing of the decoders, the SQL front end and the durability readers.
if [ "${LOCKSTEP_LONG:-}" = 1 ]; then fuzz_seconds=900; else fuzz_seconds=25; fi
bash scripts/fuzz.sh "$fuzz_seconds"
bash compat/java/run.sh target/debug/lockstep
# PostgreSQL drivers in Python and Go; bounded, since a driver that hangs must not stall the run.
timeout 600 bash compat/pg/run.sh target/debug/lockstep
# Kafka export and import against a real broker; bounded, since a JVM that hangs must not stall the run.
timeout 400 bash compat/kafka/run.sh
# The web console in a real browser; bounded, since a browser that hangs must not stall the run.
timeout 300 bash compat/console/run.sh target/debug/lockstep
