#!/usr/bin/env bash
# Runs the web console's browser test (compat/console/console.test.mjs): Debian's headless
# Chromium driven by playwright-core against the lockstep binary. Screenshots go to
# target/console/ of this repository.
# Usage: compat/console/run.sh [path/to/lockstep]   (default: target/debug/lockstep of this repo)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${1:-${LOCKSTEP_BIN:-$repo/target/debug/lockstep}}"
chromium="${CHROMIUM:-$(command -v chromium || true)}"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "compat/console: 'node' or 'npm' not found; install them (e.g. apt-get install nodejs npm)" >&2
    exit 2
fi
if [ -z "$chromium" ]; then
    echo "compat/console: 'chromium' not found; install it (e.g. apt-get install chromium) or set CHROMIUM" >&2
    exit 2
fi
if [ ! -x "$bin" ]; then
    echo "compat/console: lockstep binary not found at $bin; build it with 'cargo build -p lockstep-cli'" >&2
    exit 2
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

cd "$here"
# The exact packages of package-lock.json (playwright-core only; it downloads no browser).
if [ ! -d node_modules/playwright-core ]; then
    npm ci --no-audit --no-fund
fi
CHROMIUM="$chromium" exec node console.test.mjs "$bin" "$repo/target/console"
