#!/usr/bin/env bash
# Runs the PostgreSQL driver suites of compat/pg against the lockstep binary: Python's
# psycopg 3 (python/, from PyPI into a virtual environment under target/pg-python) and Go's
# pgx v5 (go/, from the Go module proxy). Each test starts its own server with
# `--pg 127.0.0.1:0 --http off`. The JDBC driver's suite is compat/java's PgJdbcTest.
# Usage: compat/pg/run.sh [path/to/lockstep]   (default: target/debug/lockstep of this repo)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-${LOCKSTEP_BIN:-$repo/target/debug/lockstep}}"
if [ ! -x "$bin" ]; then
  echo "compat/pg: lockstep binary not found at $bin; build it with 'cargo build -p lockstep-cli'" >&2
  exit 2
fi
export LOCKSTEP_BIN="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

# psycopg 3 with its own libpq (the binary wheel), pinned; the venv is made once.
venv="$repo/target/pg-python"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q "psycopg[binary]==3.3.9"
echo "compat/pg: psycopg $("$venv/bin/python" -c 'import psycopg; print(psycopg.__version__)')"
"$venv/bin/python" "$here/python/test_psycopg.py"

# pgx v5.7 needs Go 1.23; a Go from 1.21 on fetches that toolchain itself (GOTOOLCHAIN).
if ! go version | grep -qE 'go1\.(2[1-9]|[3-9][0-9])'; then
  echo "compat/pg: pgx needs Go 1.21 or later ($(go version)); install one from go.dev or golang-1.23 from bookworm-backports" >&2
  exit 2
fi
(cd "$here/go" && go mod download && go vet ./... && go test -count=1 -v ./...)
