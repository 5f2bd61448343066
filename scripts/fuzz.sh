#!/usr/bin/env bash
# Runs Lockstep's coverage-guided fuzzers (AFL++ through cargo-afl, on the pinned stable
# toolchain) for a given number of seconds per target, and fails if any finds a crash (a
# panic, an allocation over the input's limit, a stack overflow) or a hang.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default: 25 s, every target)
#
# Targets (fuzz/src/lib.rs): wire, sql, cmdlog, snapshot. Each starts from its seed corpus
# fuzz/corpus/<target>/; what a run finds is left in $LOCKSTEP_FUZZ_OUT/<target>/default/
# (crashes/, hangs/, queue/; default fuzz/out). A crashing input belongs, once fixed, in
# fuzz/regressions/<target>/, which the crates' ordinary tests replay (fuzz/README.md).
#
# Installs what it needs when missing: cargo-afl (crates.io, a pinned version), which
# builds AFL++ from the source it ships for the active Rust toolchain (needs make and a C
# compiler). Nothing is changed in the system's settings: AFL++ is told to run without
# its preferred CPU governor and core_pattern instead.
#
# Environment:
#   LOCKSTEP_FUZZ_TARGET_DIR  cargo target directory of the instrumented build (fuzz/target)
#   LOCKSTEP_FUZZ_OUT         AFL++ output directories (fuzz/out; emptied per target run)
#   LOCKSTEP_FUZZ_JOBS        fuzzers run at once (the number of cores)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

CARGO_AFL_VERSION=0.18.2
seconds=${1:-25}
if [ $# -gt 0 ]; then shift; fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(wire sql cmdlog snapshot); fi
target_dir=${LOCKSTEP_FUZZ_TARGET_DIR:-$repo/fuzz/target}
out=${LOCKSTEP_FUZZ_OUT:-$repo/fuzz/out}
jobs=${LOCKSTEP_FUZZ_JOBS:-$(nproc)}
# A test slower than this (ms) counts as a hang; generous, as other work may share the cores.
timeout_ms=2000
# A saved hang is confirmed by running it alone for this long (s) before it fails the run.
hang_confirm_s=10
# Virtual memory of one target process (MB); the targets also limit single allocations.
memory_mb=2048

step_start=$SECONDS

# 1. cargo-afl, and AFL++ built for this toolchain (both skipped when already there).
if ! cargo afl --version 2>/dev/null | grep -q "cargo-afl $CARGO_AFL_VERSION\b"; then
  echo "fuzz: installing cargo-afl $CARGO_AFL_VERSION (builds AFL++)"
  if ! command -v make >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -q
    $sudo apt-get install -y -q make gcc
  fi
  cargo install cargo-afl --locked --version "$CARGO_AFL_VERSION"
fi
if ! config=$(cargo afl config --build 2>&1) && ! grep -q "already built" <<<"$config"; then
  echo "$config" >&2
  echo "fuzz: cannot build AFL++ for this toolchain" >&2
  exit 1
fi

# 2. The instrumented targets. With an explicit --target, build scripts and proc macros
# are compiled plainly (not instrumented, not at opt-level 3), which halves the build.
host=$(rustc -vV | sed -n 's/^host: //p')
bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
(cd fuzz && CARGO_INCREMENTAL=0 CARGO_TARGET_DIR="$target_dir" cargo afl build --locked --features afl --target "$host" "${bins[@]}")
bin_dir=$target_dir/$host/debug
build_s=$((SECONDS - step_start))

# 3. The fuzzers, $jobs at a time. AFL_SKIP_CPUFREQ and AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES
# let AFL++ run on machines whose governor and core_pattern it would otherwise refuse; the
# targets' scratch files go to memory when /dev/shm is there (the command log reader syncs).
scratch=$(mktemp -d "$( [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/lockstep-fuzz.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
run_one() {
  local t=$1
  rm -rf "${out:?}/$t"
  mkdir -p "$out"
  AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1 \
    AFL_FAST_CAL=1 AFL_SUPPRESS_GIT_VERSION=1 TMPDIR="$scratch" \
    nice -n 10 cargo afl fuzz -i "fuzz/corpus/$t" -o "$out/$t" -V "$seconds" -t "$timeout_ms" -m "$memory_mb" \
    "$bin_dir/$t" >"$out/$t.log" 2>&1
}
pids=()
names=()
failed=0
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  if [ ${#pids[@]} -ge "$jobs" ]; then
    if ! wait "${pids[0]}"; then echo "fuzz: $t: afl-fuzz failed, see $out/${names[0]}.log" >&2; failed=1; fi
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then echo "fuzz: afl-fuzz failed for ${names[$i]}, see $out/${names[$i]}.log" >&2; failed=1; fi
done

# 4. What each found. A crash fails the run; a hang does only if it hangs again alone.
stat() { sed -n "s/^$1 *: //p" "$out/$2/default/fuzzer_stats" 2>/dev/null || true; }
for t in "${targets[@]}"; do
  crashes=()
  hangs=0
  for f in "$out/$t/default/crashes/"id*; do [ -e "$f" ] && crashes+=("$f"); done
  for f in "$out/$t/default/hangs/"id*; do
    [ -e "$f" ] || continue
    rc=0
    TMPDIR="$scratch" timeout "$hang_confirm_s" "$bin_dir/$t" <"$f" >/dev/null 2>&1 || rc=$?
    if [ "$rc" -eq 124 ]; then
      echo "fuzz: $t: hang (over ${hang_confirm_s}s alone): $f" >&2
      hangs=$((hangs + 1))
    fi
  done
  echo "fuzz: $t: $(stat execs_done "$t") executions in $(stat run_time "$t") s, corpus $(stat corpus_count "$t"), ${#crashes[@]} crashes, $hangs hangs"
  for f in "${crashes[@]}"; do
    echo "fuzz: $t: crash: $f" >&2
    TMPDIR="$scratch" "$bin_dir/$t" <"$f" 2>&1 | grep -v '^note:' | head -n 5 >&2 || true
  done
  if [ ${#crashes[@]} -gt 0 ] || [ "$hangs" -gt 0 ]; then failed=1; fi
done
echo "fuzz: $((SECONDS - step_start)) s in all (install and build ${build_s} s)"
if [ "$failed" -ne 0 ]; then
  echo "fuzz: FAILED: reproduce with '$bin_dir/<target> < <input>'; fix, then add the input to fuzz/regressions/<target>/" >&2
  exit 1
fi
