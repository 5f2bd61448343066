//! The `lockstep` command: `server` starts a node, `sql` is the shell, `bench` measures,
//! `user` keeps the users of a server with security on, `load` loads data files.

mod alloc;
mod bench_cmd;
mod load_cmd;
mod load_kafka;
mod server_cmd;
mod shell;
mod user_cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use lockstep_bench::conn::LoginArgs;

#[global_allocator]
static GLOBAL: alloc::MiMalloc = alloc::MiMalloc;

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
    /// The SQL shell: run statements and procedures against a server (interactive without
    /// -c or -f; type help in it).
    Sql(SqlArgs),
    /// Measure a workload (voter, tatp, charging, bank, ycsb-a … ycsb-f) and check its results.
    Bench(bench_cmd::BenchArgs),
    /// Snapshots of a running server: `save` takes one now, `scan` lists them.
    Snapshot {
        /// save: take a snapshot now (@SnapshotSave); scan: list the complete snapshots
        /// on disk (@SnapshotScan).
        #[arg(value_parser = ["save", "scan"])]
        action: String,
        /// Server address (host:port).
        #[arg(long, default_value = "127.0.0.1:21212")]
        server: String,
        #[command(flatten)]
        login: LoginArgs,
    },
    /// Users of a server with --security on, in its TOML config: add, list, remove.
    User(user_cmd::UserArgs),
    /// Load data files into a table or through a procedure (`load csv`, `load kafka`).
    Load(load_cmd::LoadArgs),
}

#[derive(clap::Args)]
struct SqlArgs {
    /// Server address (host:port).
    #[arg(long, default_value = "127.0.0.1:21212")]
    server: String,
    /// Run this statement, or a shell command such as `exec PROC args…`, and exit; may be
    /// repeated (they run in order, up to the first error).
    #[arg(short = 'c', long = "command")]
    commands: Vec<String>,
    /// Run the statements in this file and exit (FROM FILE paths in it are read relative
    /// to the file, and their source sent to the server).
    #[arg(short = 'f', long = "file")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    format: shell::Format,
    /// --user, --password, --tls, --tls-ca: for a server with security or TLS on.
    #[command(flatten)]
    login: LoginArgs,
}

/// Turns transparent huge pages off for this process unless `MIMALLOC_ALLOW_THP` says
/// otherwise. Memory that grows under load (votes, charging records) is faulted in 2 MiB at a
/// time, and the kernel zeroes each huge page inside the transaction that first touches it:
/// measured here, stalls of 3-13 ms that put charging's p99 at 10,000 TPS at 4-5 ms instead
/// of 1 ms. Huge pages do save TLB misses on large data read at random (flood runs of
/// YCSB-A were about 7% faster with them), so `MIMALLOC_ALLOW_THP=1` brings them back.
fn disable_transparent_huge_pages() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return;
    }
    // SAFETY: prctl with PR_SET_THP_DISABLE only sets a flag on this process; no memory is
    // passed to the kernel.
    let rc = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    if rc != 0 {
        eprintln!("warning: cannot turn transparent huge pages off: {}", std::io::Error::last_os_error());
    }
}

fn main() -> ExitCode {
    disable_transparent_huge_pages();
    let cli = Cli::parse();
    match cli.command {
        Command::Server(args) => server_cmd::run(args),
        Command::Bench(args) => ExitCode::from(bench_cmd::run(args).clamp(0, 255) as u8),
        Command::Snapshot { action, server, login } => {
            let proc = if action == "save" { "@SnapshotSave" } else { "@SnapshotScan" };
            let commands = vec![format!("exec {proc}")];
            run_shell(server, commands, None, shell::Format::Table, &login)
        }
        Command::Sql(args) => run_shell(args.server, args.commands, args.file, args.format, &args.login),
        Command::User(args) => user_cmd::run(args),
        Command::Load(args) => load_cmd::run(args),
    }
}

fn run_shell(server: String, commands: Vec<String>, file: Option<PathBuf>, format: shell::Format, login: &LoginArgs) -> ExitCode {
    let client = match login.client_config(lockstep_client::MAX_IN_FLIGHT_DEFAULT) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {}", e.message);
            return ExitCode::FAILURE;
        }
    };
    let opts = shell::ShellOptions { server, commands, file, format, client };
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
