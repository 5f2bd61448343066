//! `cargo run -p lockstep-bench --example bench -- WORKLOAD [options]`: the benchmark without
//! the `lockstep` binary (the same as `lockstep bench`).

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: lockstep_bench::BenchArgs,
}

fn main() {
    std::process::exit(lockstep_bench::run(Cli::parse().args));
}
