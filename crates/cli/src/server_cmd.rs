//! `lockstep server`: configuration from flags (and an optional TOML file), start-up (as a
//! single node, or as one node of a cluster once the cluster has formed), the `ready` line,
//! and a clean stop on Ctrl-C or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use lockstep_cluster::{ClusterConfig, ClusterNode, Standing};
use lockstep_engine::cmdlog::Durability;
use lockstep_engine::memory::MemoryLimit;
use lockstep_engine::{Engine, EngineConfig};
use lockstep_server::cluster::{cluster_dir, ClusterGlue, ClusterSettings};
use lockstep_server::config::{FileConfig, HostList};
use lockstep_server::security::{OnOff, Security};
use lockstep_server::{serve, Front, ServerConfig};

// The defaults are written into the help texts, not given to clap as `default_value`s:
// a flag left out must not override the same key of the --config file.
#[derive(clap::Args)]
pub struct ServerArgs {
    /// Address to listen on for VoltDB-protocol clients (host:port; port 0 picks a free
    /// one, printed on the ready line) [default: 127.0.0.1:21212]
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    #[arg(long, value_name = "HOST:PORT|off", help = http_help())]
    http: Option<String>,
    /// Address to listen on for PostgreSQL clients (psql, PostgreSQL drivers), or off
    /// [default: 127.0.0.1:5433]
    #[arg(long, value_name = "HOST:PORT|off")]
    pg: Option<String>,
    /// Data directory, created if missing: the schema (catalog.sql), the command log
    /// (cmdlog/), snapshots (snapshots/), export files (export/), Lua procedures for FROM
    /// CLASS (procedures/) and the lock file that keeps a second server out
    /// (lockstep.lock) [default: ./lockstep-data]
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Number of partition sites, one thread each [default: one per core]
    #[arg(long, value_name = "N")]
    sites: Option<u32>,
    /// Directory of Lua procedures: FROM CLASS a.b.Name loads Name.lua from it, and FROM
    /// FILE reads only files inside it [default: <DIR>/procedures]
    #[arg(long, value_name = "DIR")]
    procedures: Option<PathBuf>,
    /// Command log: sync (answer after fdatasync; many transactions share one), async
    /// (answer at once, sync every --flush-ms) or off (keep only the schema) [default: sync]
    #[arg(long, value_parser = ["off", "async", "sync"])]
    command_log: Option<String>,
    #[arg(long, value_name = "MS", help = flush_ms_help())]
    flush_ms: Option<u64>,
    /// Take a snapshot every this many seconds; 0 takes them only on demand (@SnapshotSave,
    /// `lockstep snapshot save`) [default: 0]
    #[arg(long, value_name = "SECS")]
    snapshot_interval: Option<u64>,
    #[arg(long, value_name = "N", help = snapshots_keep_help())]
    snapshots_keep: Option<usize>,
    #[arg(long, value_name = "N", help = max_connections_help())]
    max_connections: Option<usize>,
    #[arg(long, value_name = "SECS", help = idle_timeout_help())]
    idle_timeout: Option<u64>,
    #[arg(long, value_name = "MS", help = query_timeout_help())]
    query_timeout_ms: Option<u64>,
    #[arg(long, value_name = "SIZE|PCT%|off", help = memory_limit_help())]
    memory_limit: Option<String>,
    /// TOML file with the same keys (listen, http, pg, data, sites, procedures, command_log,
    /// flush_ms, snapshot_interval, snapshots_keep, max_connections, idle_timeout_s,
    /// client_timeout_s, in_flight_per_connection, query_timeout_ms, memory_limit,
    /// security, tls_cert, tls_key, internal, hosts, kfactor, failure_timeout_ms) and the [[users]] that
    /// `lockstep user add` writes; flags win. See docs/guide/configuration.md
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// Security: on checks every login against the configured users and every call against
    /// their roles' permissions; off accepts anyone and allows everything [default: off]
    #[arg(long, value_parser = ["on", "off"])]
    security: Option<String>,
    /// TLS on the client port: this PEM certificate (chain); needs --tls-key. Clients must
    /// then speak TLS [default: plain TCP]
    #[arg(long, value_name = "FILE")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE")]
    tls_key: Option<PathBuf>,
    /// Cluster: where this node listens for the other nodes (one of --hosts)
    #[arg(long, value_name = "HOST:PORT")]
    internal: Option<String>,
    /// Cluster: listen for the other nodes here instead of on --internal, which stays the
    /// address they connect to (through a proxy, a NAT or a container's port mapping)
    /// [default: --internal]
    #[arg(long, value_name = "HOST:PORT")]
    internal_listen: Option<String>,
    /// Cluster: every node's internal address, the same list in the same order on every
    /// node (a node's id is its place in it); --sites is then per node [default: one node,
    /// no cluster]
    #[arg(long, value_name = "H1:P,H2:P,...")]
    hosts: Option<String>,
    /// Cluster: extra copies of each partition, on other nodes; the cluster survives k
    /// nodes failing [default: 0]
    #[arg(long, value_name = "K")]
    kfactor: Option<u32>,
    #[arg(long, value_name = "MS", help = failure_timeout_help())]
    failure_timeout_ms: Option<u64>,
}

fn failure_timeout_help() -> String {
    format!(
        "Cluster: a node silent this long (in milliseconds) is declared down and its partitions fail over; a node that has not heard the majority for 70% of it stops taking calls. Lower fails over sooner, higher rides out longer stalls of a busy machine (a node declared down must rejoin with a full copy) [default: {}]",
        lockstep_cluster::detector::FAILURE_TIMEOUT_DEFAULT_MS
    )
}

fn http_help() -> String {
    format!(
        "Address of the HTTP port: VoltDB's JSON API (/api/1.0/, /api/2.0/) and Prometheus metrics (/metrics); port 0 picks a free one, printed on the ready line; off turns it off [default: {}]",
        lockstep_server::config::HTTP_LISTEN_DEFAULT
    )
}

fn flush_ms_help() -> String {
    format!(
        "With --command-log async: how often the log is synced to disk, in milliseconds, which bounds what a crash can lose [default: {}]",
        lockstep_engine::config::FLUSH_MS_DEFAULT
    )
}

fn snapshots_keep_help() -> String {
    format!("Complete snapshots kept on disk; older ones are deleted [default: {}]", lockstep_engine::config::SNAPSHOTS_KEEP_DEFAULT)
}

fn max_connections_help() -> String {
    format!(
        "Client connections open at once; more are refused (\"Server has too many connections\") [default: {}]",
        lockstep_server::config::MAX_CONNECTIONS_DEFAULT
    )
}

fn idle_timeout_help() -> String {
    format!(
        "Close a logged-in connection that sends nothing for this many seconds; 0 never does [default: {}]",
        lockstep_server::config::IDLE_TIMEOUT_S_DEFAULT
    )
}

fn query_timeout_help() -> String {
    format!(
        "Stop a query (or a procedure call) that runs longer than this, in milliseconds, and roll it back; 0 for no limit. A call may ask for less (VoltDB's per-call timeout) [default: {}]",
        lockstep_engine::config::QUERY_TIMEOUT_DEFAULT.as_millis()
    )
}

fn memory_limit_help() -> String {
    format!(
        "Above this much memory, writes are refused with a clear error and reads go on, until memory falls 5% below it: a size in bytes with an optional k/m/g/t suffix (12g), a percentage of the machine's (or the container's) memory (75%), or off [default: {}%]",
        lockstep_engine::memory::MEMORY_LIMIT_PERCENT_DEFAULT
    )
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
        http: args.http,
        pg: args.pg,
        data: args.data,
        sites: args.sites,
        procedures: args.procedures,
        command_log: args.command_log,
        flush_ms: args.flush_ms,
        snapshot_interval: args.snapshot_interval,
        snapshots_keep: args.snapshots_keep,
        max_connections: args.max_connections,
        idle_timeout_s: args.idle_timeout,
        query_timeout_ms: args.query_timeout_ms,
        memory_limit: args.memory_limit,
        security: args.security.as_deref().map(|v| OnOff(v == "on")),
        tls_cert: args.tls_cert,
        tls_key: args.tls_key,
        internal: args.internal,
        internal_listen: args.internal_listen,
        hosts: args.hosts.map(HostList::Joined),
        kfactor: args.kfactor,
        failure_timeout_ms: args.failure_timeout_ms,
        ..FileConfig::default()
    }
    .apply_to(&mut c);
    Ok(c)
}

/// What the log shows without LOCKSTEP_LOG: Lockstep's own events, not the Raft library's
/// (its info lines describe every election step, and it logs an error twice a second for
/// as long as a node is down). The cluster logs what matters of it itself: membership
/// changes and why they failed. `LOCKSTEP_LOG=info,openraft=warn` shows the library's too.
/// rskafka (the Kafka export target) logs every reconnection attempt while a broker is
/// down; the exporter logs the target going down and coming back itself.
const DEFAULT_LOG_FILTER: &str = "info,openraft=off,rskafka=error";

pub fn run(args: ServerArgs) -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("LOCKSTEP_LOG").unwrap_or_else(|_| DEFAULT_LOG_FILTER.into()))
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
    let failure_timeout_ms = config.failure_timeout_ms;
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
    engine_config.memory_limit = match &config.memory_limit {
        Some(text) => MemoryLimit::parse(text).map_err(|e| e.message)?,
        None => MemoryLimit::default(),
    };
    engine_config.release_memory = Some(crate::alloc::release_freed_memory);
    if let Some(ms) = config.query_timeout_ms {
        engine_config.query_timeout = (ms > 0).then(|| std::time::Duration::from_millis(ms));
    }
    // Users, certificates and the cluster's layout are checked before anything is touched.
    engine_config.export = std::sync::Arc::new(lockstep_engine::export::ExportHub::new(export_targets(&config)?));
    let cluster = ClusterSettings::from_config(&config, engine_config.sites)?;
    if cluster.is_none() && failure_timeout_ms.is_some() {
        return Err("--failure-timeout-ms needs a cluster: give --hosts and --internal too".into());
    }
    if let Some(c) = &cluster {
        // Every node runs a site for each of the cluster's partitions, so that partition
        // ids mean the same everywhere; only those this node holds get work.
        engine_config.sites = c.partitions();
    }
    let sites = engine_config.sites;
    let security = Security::from_config(&config.security)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("front")
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the network runtime: {e}"))?;
    // The port first, then the data directory (locked, then recovered): a second server
    // started by mistake stops here, before it reads or writes anything.
    let listener =
        runtime.block_on(tokio::net::TcpListener::bind(&config.listen)).map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let client_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let http_listener = match &config.http {
        None => None,
        Some(addr) => Some(runtime.block_on(tokio::net::TcpListener::bind(addr)).map_err(|e| {
            format!("cannot listen on {addr} for the HTTP port (--http): {e}; give another address with --http HOST:PORT, or turn it off with --http off")
        })?),
    };
    let http_addr = match &http_listener {
        Some(l) => Some(l.local_addr().map_err(|e| e.to_string())?),
        None => None,
    };
    let http_note = http_addr.map_or_else(|| "HTTP off".to_string(), |a| format!("HTTP on {a}"));
    let pg_listener = match &config.pg {
        Some(addr) => {
            let l = runtime.block_on(tokio::net::TcpListener::bind(addr)).map_err(|e| {
                format!("cannot listen for PostgreSQL clients on {addr}: {e}; give another address with --pg HOST:PORT, or --pg off")
            })?;
            Some(l)
        }
        None => None,
    };
    let pg_addr = pg_listener.as_ref().and_then(|l| l.local_addr().ok());
    // Configured Kafka imports are checked now, and start once the server serves.
    let imports = config
        .kafka_imports
        .iter()
        .map(|i| crate::load_kafka::server_import(i, client_addr, &config.data_dir))
        .collect::<Result<Vec<_>, _>>()?;
    let stop = stop_signal();
    tokio::pin!(stop);
    let node = match &cluster {
        None => None,
        Some(c) => match runtime.block_on(form_cluster(c, failure_timeout_ms, &config.data_dir, client_addr, stop.as_mut()))? {
            Some(node) => Some(node),
            None => {
                println!("lockstep stopped");
                return Ok(());
            }
        },
    };
    let engine = Engine::start(engine_config).map_err(|e| e.to_string())?;
    if let Err(e) = security.check_can_start(&engine.catalog()) {
        engine.shutdown();
        return Err(e);
    }
    let glue = match node {
        None => None,
        Some(node) => {
            let _entered = runtime.enter();
            let instance = cluster.as_ref().map_or((0, 0), ClusterSettings::instance_id);
            match ClusterGlue::start(node, &engine, &config.data_dir, instance) {
                Ok(g) => Some(g),
                Err(e) => {
                    engine.shutdown();
                    return Err(e);
                }
            }
        }
    };
    tracing::info!(
        "security {}, client port {}",
        if security.enabled() { "on" } else { "off" },
        if security.tls().is_some() { "TLS only" } else { "plain TCP" }
    );
    let result = runtime.block_on(async {
        let addr = client_addr;
        engine.shared().set_client_address(addr);
        let log = engine.shared().durable.log.mode_name();
        let data = config.data_dir.display();
        if let Some(a) = pg_addr {
            println!("lockstep: PostgreSQL clients on {a}");
        }
        match &glue {
            None => println!("lockstep ready: listening on {addr}, {http_note}, {sites} sites, command log {log}, data in {data}"),
            Some(g) => {
                let view = g.view();
                let me = view.me;
                let list = |ps: Vec<u32>| if ps.is_empty() { "none".to_string() } else { ps.iter().map(u32::to_string).collect::<Vec<_>>().join(",") };
                println!(
                    "lockstep ready: node {me} of a cluster of {} nodes (k={}), listening on {addr}, {http_note}, {sites} partitions, leading {} and holding {}, command log {log}, data in {data}",
                    view.state.node_count(),
                    view.state.placement().kfactor,
                    list(view.state.led_by(me)),
                    list(view.state.placement().partitions_of(me)),
                );
            }
        }
        let front = Front::with_security(engine.clone(), config.clone(), security);
        if let Some(g) = glue {
            let _ = front.cluster.set(g);
        }
        // The HTTP port ends with the runtime, when the server stops.
        if let Some(l) = http_listener {
            tokio::spawn(lockstep_server::http::serve(l, front.clone()));
        }
        let pg = pg_listener.map(|l| tokio::spawn(lockstep_pg::serve(l, front.clone())));
        for import in imports {
            crate::load_kafka::start_server_import(import).map_err(|e| format!("cannot start a Kafka import: {e}"))?;
        }
        serve(listener, front, stop).await;
        if let Some(pg) = pg {
            pg.abort();
        }
        Ok::<(), String>(())
    });
    exit_if_stuck(SHUTDOWN_GRACE);
    // Open connections are simply dropped: their calls have been answered or never will be.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    engine.shutdown();
    println!("lockstep stopped");
    result
}

/// How often the progress of a forming cluster is printed (when it changed).
const FORMING_PROGRESS_MS: u64 = 500;

/// Starts this node's part of the cluster and waits until the cluster has formed and this
/// node serves, printing progress; None if the server was told to stop meanwhile.
/// The configured export targets, checked: names unique, URLs of a form the target takes.
fn export_targets(config: &ServerConfig) -> Result<Vec<lockstep_engine::export::TargetConfig>, String> {
    let targets = config.export_targets.clone();
    for (i, t) in targets.iter().enumerate() {
        if targets[..i].iter().any(|o| o.name.eq_ignore_ascii_case(&t.name)) {
            return Err(format!("export target {:?} is configured twice: give each [[export.targets]] its own name", t.name));
        }
        if let lockstep_engine::export::TargetKind::Http { url } = &t.kind {
            if !url.starts_with("http://") {
                return Err(format!("export target {:?}: url {url:?} must start with http:// (https is not supported yet)", t.name));
            }
        }
    }
    Ok(targets)
}

async fn form_cluster(
    c: &ClusterSettings,
    failure_timeout_ms: Option<u64>,
    data_dir: &std::path::Path,
    client: std::net::SocketAddr,
    mut stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Result<Option<ClusterNode>, String> {
    let mut config = ClusterConfig::new(c.node_id, c.hosts.clone(), c.kfactor, c.sites_per_node, cluster_dir(data_dir));
    config.client_address = Some(client);
    config.listen = c.listen;
    if let Some(ms) = failure_timeout_ms {
        config = config.with_failure_timeout(std::time::Duration::from_millis(ms));
    }
    let node = ClusterNode::start(config).await.map_err(|e| e.to_string())?;
    let nodes = c.hosts.len();
    println!("lockstep: node {} of {nodes} started, internal address {}; waiting for the cluster to form", c.node_id, node.local_addr());
    let mut views = node.subscribe();
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(FORMING_PROGRESS_MS));
    let mut said = None;
    loop {
        if views.borrow_and_update().standing == Standing::Serving {
            return Ok(Some(node));
        }
        let heard = node.heard_count();
        if said != Some(heard) {
            println!("lockstep: waiting for the cluster to form: heard from {heard} of {nodes} nodes");
            said = Some(heard);
        }
        tokio::select! {
            _ = &mut stop => {
                node.shutdown().await;
                return Ok(None);
            }
            changed = views.changed() => if changed.is_err() {
                return Err("the cluster node stopped before the cluster formed".into());
            },
            _ = tick.tick() => {}
        }
    }
}

/// How long a stop may take before the process exits without waiting for it.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Ends the process if the stop has not finished within `grace`: a stop must not wait on a
/// site that is busy (a long query, a runaway call). Leaving at once is as safe as a crash:
/// everything acknowledged is in the command log (in async mode, up to its flush window).
fn exit_if_stuck(grace: std::time::Duration) {
    let spawned = std::thread::Builder::new().name("stop-deadline".into()).spawn(move || {
        std::thread::sleep(grace);
        eprintln!("lockstep: the stop did not finish within {} s (a partition is still busy): exiting now", grace.as_secs());
        std::process::exit(1);
    });
    if let Err(e) = spawned {
        eprintln!("lockstep: cannot start the stop deadline ({e}); stopping without one");
    }
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
