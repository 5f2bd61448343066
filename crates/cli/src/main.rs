//! The `lockstep` command: `server` starts a node, `sql` is the shell, `bench` measures.

mod bench_cmd;
mod server_cmd;
mod shell;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "lockstep", version, about = "Lockstep: an in-memory, partitioned, stored-procedure SQL database")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a database node (defaults: 127.0.0.1:21212, data in ./lockstep-data, one site per core).
    Server(server_cmd::ServerArgs),
    /// The SQL shell: run statements and procedures against a server.
    Sql(SqlArgs),
    /// Measure a workload (voter, tatp, charging, ycsb-a … ycsb-f) and check its results.
    Bench(bench_cmd::BenchArgs),
    /// Snapshots of a running server: `save` takes one now, `scan` lists them.
    Snapshot {
        #[arg(value_parser = ["save", "scan"])]
        action: String,
        /// Server address.
        #[arg(long, default_value = "127.0.0.1:21212")]
        server: String,
    },
}

#[derive(clap::Args)]
struct SqlArgs {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:21212")]
    server: String,
    /// Run these statements (may be repeated) and exit.
    #[arg(short = 'c', long = "command")]
    commands: Vec<String>,
    /// Run the statements in this file and exit.
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: shell::Format,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Server(args) => server_cmd::run(args),
        Command::Bench(args) => ExitCode::from(bench_cmd::run(args).clamp(0, 255) as u8),
        Command::Snapshot { action, server } => {
            let proc = if action == "save" { "@SnapshotSave" } else { "@SnapshotScan" };
            let opts = shell::ShellOptions { server, commands: vec![format!("exec {proc}")], file: None, format: shell::Format::Table };
            run_shell(opts)
        }
        Command::Sql(args) => {
            run_shell(shell::ShellOptions { server: args.server, commands: args.commands, file: args.file, format: args.format })
        }
    }
}

fn run_shell(opts: shell::ShellOptions) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(shell::run(opts));
    ExitCode::from(code.clamp(0, 255) as u8)
}
