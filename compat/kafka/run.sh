#!/usr/bin/env bash
# Runs the Kafka tests (crates/cli/tests/kafka.rs) against a real Apache Kafka 4.x broker in
# KRaft mode: installs the broker's jars from Maven Central (compat/kafka/pom.xml) once,
# then runs the tests, which start and stop their brokers with compat/kafka/broker.sh.
# A plain `cargo test` leaves them out (they need a JDK and Maven); LOCKSTEP_KAFKA=1 runs them.
# Usage: compat/kafka/run.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

bash "$here/broker.sh" install
cd "$repo"
# One test at a time: each starts a broker (a JVM) and a server on a 2-core machine.
LOCKSTEP_KAFKA=1 cargo test -p lockstep-cli --test kafka -- --test-threads=1
