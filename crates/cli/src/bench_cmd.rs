//! `lockstep bench`: the benchmark tool (crates/bench) behind the command line.

pub use lockstep_bench::BenchArgs;

/// Runs the benchmark and returns its exit code (0 passed, 1 check failed, 2 error).
pub fn run(args: BenchArgs) -> i32 {
    lockstep_bench::run(args)
}
