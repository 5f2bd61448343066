//! `lockstep server`: configuration from flags (and an optional TOML file), start-up,
//! the `ready` line, and a clean stop on Ctrl-C or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use lockstep_engine::cmdlog::Durability;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_server::config::FileConfig;
use lockstep_server::security::{OnOff, Security};
use lockstep_server::{serve, Front, ServerConfig};

#[derive(clap::Args)]
pub struct ServerArgs {
    /// Address to listen on for VoltDB-protocol clients.
    #[arg(long)]
    listen: Option<String>,
    /// Data directory (catalog, export files).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Number of partition sites (default: one per core).
    #[arg(long)]
    sites: Option<u32>,
    /// Directory holding Lua procedures for `FROM CLASS` (default: <data>/procedures).
    #[arg(long)]
    procedures: Option<PathBuf>,
    /// Command log: off, async (acknowledge at once, sync every --flush-ms) or sync
    /// (acknowledge after fdatasync; group commit).
    #[arg(long, value_parser = ["off", "async", "sync"])]
    command_log: Option<String>,
    /// Async mode: how often the command log is synced to disk (milliseconds).
    #[arg(long)]
    flush_ms: Option<u64>,
    /// Take a snapshot every this many seconds (0: only on demand).
    #[arg(long)]
    snapshot_interval: Option<u64>,
    /// Complete snapshots to keep on disk.
    #[arg(long)]
    snapshots_keep: Option<usize>,
    /// TOML file with the same keys (listen, data, sites, procedures, command_log,
    /// flush_ms, snapshot_interval, snapshots_keep, security, tls_cert, tls_key) and the
    /// [[users]] that `lockstep user add` writes; flags win.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Security: on checks every login against the configured users and every call against
    /// their roles' permissions; off (the default) accepts anyone and allows everything.
    #[arg(long, value_parser = ["on", "off"])]
    security: Option<String>,
    /// TLS on the client port: this PEM certificate (chain); needs --tls-key. Clients must
    /// then speak TLS.
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
}

/// Defaults, then the TOML file, then the flags: flags take the same keys as the file and
/// are applied the same way, last, so they win.
fn configure(args: ServerArgs) -> Result<ServerConfig, String> {
    let mut c = ServerConfig::default();
    if let Some(path) = &args.config {
        FileConfig::load(path)?.apply_to(&mut c);
    }
    FileConfig {
        listen: args.listen,
        data: args.data,
        sites: args.sites,
        procedures: args.procedures,
        in_flight_per_connection: None,
        command_log: args.command_log,
        flush_ms: args.flush_ms,
        snapshot_interval: args.snapshot_interval,
        snapshots_keep: args.snapshots_keep,
        security: args.security.as_deref().map(|v| OnOff(v == "on")),
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        users: None,
    }
    .apply_to(&mut c);
    Ok(c)
}

pub fn run(args: ServerArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("LOCKSTEP_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    match start(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn start(args: ServerArgs) -> Result<(), String> {
    let config = configure(args)?;
    let mut engine_config = EngineConfig::new(&config.data_dir);
    if let Some(s) = config.sites {
        engine_config.sites = s;
    }
    if let Some(p) = &config.procedures {
        engine_config.procedure_dir = p.clone();
    }
    let flush_ms = config.flush_ms.unwrap_or(lockstep_engine::config::FLUSH_MS_DEFAULT).max(1);
    engine_config.durability = match config.command_log.as_deref() {
        None | Some("sync") => Durability::Sync,
        Some("async") => Durability::Async { flush_ms },
        Some("off") => Durability::Off,
        Some(other) => return Err(format!("--command-log must be off, async or sync, not {other}")),
    };
    engine_config.snapshot_interval_s = config.snapshot_interval.filter(|s| *s > 0);
    if let Some(k) = config.snapshots_keep {
        engine_config.snapshots_keep = k.max(1);
    }
    let sites = engine_config.sites;
    let security = Security::from_config(&config.security)?;
    let engine = Engine::start(engine_config).map_err(|e| e.to_string())?;
    if let Err(e) = security.check_can_start(&engine.catalog()) {
        engine.shutdown();
        return Err(e);
    }
    tracing::info!(
        "security {}, client port {}",
        if security.enabled() { "on" } else { "off" },
        if security.tls().is_some() { "TLS only" } else { "plain TCP" }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("front")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the network runtime: {e}"))?;
    let result = runtime.block_on(async {
        let listener =
            tokio::net::TcpListener::bind(&config.listen).await.map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        engine.shared().set_client_address(addr);
        println!(
            "lockstep ready: listening on {addr}, {sites} sites, command log {}, data in {}",
            engine.shared().durable.log.mode_name(),
            config.data_dir.display()
        );
        let front = Front::with_security(engine.clone(), config.clone(), security);
        serve(listener, front, stop_signal()).await;
        Ok::<(), String>(())
    });
    // Open connections are simply dropped: their calls have been answered or never will be.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    engine.shutdown();
    println!("lockstep stopped");
    result
}

async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return ctrl_c.await.unwrap_or(()),
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
