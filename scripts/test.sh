#!/usr/bin/env bash
# Runs every test of Lockstep: unit, property and integration tests of the whole workspace.
# The integration tests start the real `lockstep` binary on 127.0.0.1 and drive it over TCP.
# Set LOCKSTEP_LONG=1 to also run the long soak and crash loops.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo is required: install Rust from https://rustup.rs (the toolchain is pinned in rust-toolchain.toml)" >&2
  exit 1
fi

# Build once (tests and the server binary), then run the tests.
cargo build --workspace --tests --bins
cargo test --workspace --no-fail-fast
