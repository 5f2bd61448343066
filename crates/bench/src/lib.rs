//! `lockstep bench`: loads an application, populates it, drives load (flood, fixed rate or
//! stepping to an SLA), measures latency per transaction type with HDR histograms, checks the
//! data afterwards, and writes a JSON report and an SVG chart.

pub mod apps;
pub mod conn;
pub mod cpu;
pub mod peers;
pub mod report;
pub mod rng;
pub mod runner;
pub mod stats;
pub mod workload;
pub mod workloads;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use lockstep_core::Error;
use serde_json::json;

use conn::Conn;
use report::StepPoint;
use runner::{run_phase, Phase};
use workload::Workload;
use workloads::tatp::FkMode;
use workloads::ycsb::Mix;

/// Longest run or step we accept (a day).
pub const DURATION_MAX_S: u64 = 86_400;
/// Most transactions in flight in flood mode.
pub const WINDOW_MAX: usize = 100_000;
/// Most steps a stepping run takes.
pub const STEPS_MAX: usize = 1000;
/// Share of the requested transactions a step must complete to count as good.
pub const STEP_COMPLETION_MIN: f64 = 0.9;

/// Arguments of `lockstep bench`.
#[derive(clap::Args, Clone, Debug)]
pub struct BenchArgs {
    /// voter, tatp, charging, bank, ycsb-a, ycsb-b, ycsb-c, ycsb-d, ycsb-e or ycsb-f.
    pub workload: String,
    /// Server address; for a cluster, its nodes' addresses comma-separated (H1:P,H2:P,…):
    /// one connection to each, every call sent to the node that leads its partition.
    #[arg(long, default_value = "127.0.0.1:21212", conflicts_with = "embedded")]
    pub server: String,
    /// System under load: lockstep://HOST:PORT (default: --server), postgres://USER@HOST:PORT/DB,
    /// tarantool://USER:PASSWORD@HOST:PORT or redis://HOST:PORT. Same workloads and checks.
    #[arg(long, conflicts_with = "embedded")]
    pub target: Option<String>,
    /// Connections to a peer (default: 4 per core for PostgreSQL, 2 for Tarantool and Redis).
    #[arg(long)]
    pub peer_connections: Option<usize>,
    /// Run an engine in this process instead (no network): the engine's own ceiling.
    #[arg(long)]
    pub embedded: bool,
    /// Sites of the embedded engine (default: one per core).
    #[arg(long)]
    pub sites: Option<u32>,
    /// Seconds of load (per step with --step).
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Seconds of load before the measured run, not counted (caches, allocator, JIT warm).
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,
    /// The server's process id on this machine: the report gives the CPU its whole process
    /// tree spent per transaction over the measured run (read from /proc).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Hold this many transactions per second (open loop); the starting rate with --step.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Raise the rate in steps until p99 breaks --sla-ms or under 90% completes.
    #[arg(long)]
    pub step: bool,
    /// Rate added per step (default: the starting rate).
    #[arg(long)]
    pub step_size: Option<f64>,
    /// The p99 latency a step must stay under, in milliseconds.
    #[arg(long, default_value_t = 10.0)]
    pub sla_ms: f64,
    /// Data size: TATP subscribers, charging users, YCSB records, bank accounts, Voter phones per area code.
    #[arg(long)]
    pub scale: Option<u64>,
    /// Write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the SVG chart here.
    #[arg(long)]
    pub chart: Option<PathBuf>,
    /// TATP: how sub_nbr is resolved to s_id.
    #[arg(long, value_enum, default_value = "all-partitions-first")]
    pub fk_mode: FkMode,
    /// YCSB: scan with one multi-partition ScanAll instead of every-partition Scan calls.
    #[arg(long)]
    pub scan_all: bool,
    /// Flood mode (no --rate): how many calls are kept in flight, sent and not yet
    /// answered; each answer sends the next call. Ignored with --rate and --step.
    // Why 2048 (on two vCPUs): docs/guide/benchmarking.md.
    #[arg(long, default_value_t = 2048)]
    pub window: usize,
    /// Seed of the transaction generator.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Threads driving the load (on a small machine the server needs the other cores).
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// --user, --password, --tls, --tls-ca: for a server with security or TLS on.
    #[command(flatten)]
    pub login: conn::LoginArgs,
}

/// CPU used so far by the server's process tree and by this process.
struct CpuSample {
    server: Option<Duration>,
    client: Option<Duration>,
}

/// CPU per transaction over a run, in microseconds.
struct CpuPerTxn {
    server_us: Option<f64>,
    client_us: Option<f64>,
}

impl CpuSample {
    fn take(server_pid: Option<u32>) -> CpuSample {
        CpuSample { server: server_pid.and_then(cpu::tree_cpu), client: cpu::own_cpu() }
    }

    fn per_txn_since(&self, before: &CpuSample, txns: u64) -> CpuPerTxn {
        let per = |a: Option<Duration>, b: Option<Duration>| match (a, b) {
            (Some(a), Some(b)) if txns > 0 => Some(a.saturating_sub(b).as_secs_f64() * 1e6 / txns as f64),
            _ => None,
        };
        CpuPerTxn { server_us: per(self.server, before.server), client_us: per(self.client, before.client) }
    }
}

/// Runs the benchmark; returns the process exit code (0 when the run and its check passed).
pub fn run(args: BenchArgs) -> i32 {
    // One network client thread runs a current-thread runtime: no work stealing, no
    // cross-thread wakeups between the calls it drives (7% less client CPU per call in
    // Voter). An embedded run keeps the multi-thread runtime: its answers come from the
    // sites' threads, and YCSB-C ran 17% slower on a current-thread one.
    let runtime = if args.client_threads <= 1 && !args.embedded {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_multi_thread().worker_threads(args.client_threads).enable_all().build()
    };
    let runtime = match runtime {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return 2;
        }
    };
    match runtime.block_on(run_async(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", e.message);
            2
        }
    }
}

fn validate(args: &BenchArgs) -> Result<(), Error> {
    if args.duration == 0 || args.duration > DURATION_MAX_S {
        return Err(Error::graceful(format!("--duration must be 1..={DURATION_MAX_S} seconds")));
    }
    if args.window == 0 || args.window > WINDOW_MAX {
        return Err(Error::graceful(format!("--window must be 1..={WINDOW_MAX}")));
    }
    for (name, v) in [("--rate", args.rate), ("--step-size", args.step_size)] {
        if let Some(v) = v {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::graceful(format!("{name} must be a positive number")));
            }
        }
    }
    if !(args.sla_ms.is_finite() && args.sla_ms > 0.0) {
        return Err(Error::graceful("--sla-ms must be a positive number"));
    }
    Ok(())
}

async fn run_async(args: BenchArgs) -> Result<i32, Error> {
    validate(&args)?;
    let target = match &args.target {
        Some(t) => peers::parse_target(t)?,
        None => peers::Target::Lockstep(args.server.clone()),
    };
    let conn = if args.embedded {
        Conn::embedded(args.sites)?
    } else if let Some(peer) = peers::Peer::connect(&target, args.peer_connections).await? {
        Conn::Peer(Arc::new(peer))
    } else {
        let peers::Target::Lockstep(server) = &target else {
            return Err(Error::unexpected("a peer target did not connect to a peer"));
        };
        // Room for the window plus every-partition fan-out and periodic queries.
        Conn::connect_as(server, &args.login, args.window.saturating_mul(4).max(1024)).await?
    };
    let name = args.workload.to_ascii_lowercase();
    let ycsb = |m| Arc::new(workloads::ycsb::Ycsb::new(m, args.scale, args.scan_all));
    match name.as_str() {
        "voter" => drive(Arc::new(workloads::voter::Voter::new(args.scale)), &conn, &args, json!({})).await,
        "bank" => drive(Arc::new(workloads::bank::Bank::new(args.scale)), &conn, &args, json!({})).await,
        "tatp" => {
            let fk = json!({ "fk_mode": args.fk_mode.name() });
            drive(Arc::new(workloads::tatp::Tatp::new(args.scale, args.fk_mode)), &conn, &args, fk).await
        }
        "charging" => drive(Arc::new(workloads::charging::Charging::new(args.scale)), &conn, &args, json!({})).await,
        "ycsb-a" => drive(ycsb(Mix::A), &conn, &args, json!({})).await,
        "ycsb-b" => drive(ycsb(Mix::B), &conn, &args, json!({})).await,
        "ycsb-c" => drive(ycsb(Mix::C), &conn, &args, json!({})).await,
        "ycsb-d" => drive(ycsb(Mix::D), &conn, &args, json!({})).await,
        "ycsb-e" => drive(ycsb(Mix::E), &conn, &args, json!({ "scan": if args.scan_all { "ScanAll" } else { "Scan" } })).await,
        "ycsb-f" => drive(ycsb(Mix::F), &conn, &args, json!({})).await,
        other => Err(Error::graceful(format!("unknown workload {other}: use voter, tatp, charging, bank or ycsb-a … ycsb-f"))),
    }
}

async fn drive<W: Workload>(w: Arc<W>, conn: &Conn, args: &BenchArgs, extra: serde_json::Value) -> Result<i32, Error> {
    eprintln!("setting up {} …", args.workload);
    w.setup(conn).await?;
    conn.refresh_routing().await;
    let duration = Duration::from_secs(args.duration);
    let mode = if args.step {
        "step"
    } else if args.rate.is_some() {
        "rate"
    } else {
        "flood"
    };
    if args.warmup > 0 && !args.step {
        eprintln!("warming up for {} s …", args.warmup);
        let phase = Phase {
            duration: Duration::from_secs(args.warmup),
            rate: args.rate,
            window: args.window,
            seed: args.seed.wrapping_add(1),
            t_offset_s: 0.0,
            label: "warm-up ".into(),
        };
        run_phase(w.clone(), conn, &phase).await;
    }
    let cpu_before = CpuSample::take(args.server_pid);
    let (result, steps) = if args.step {
        stepping(&w, conn, args, duration).await
    } else {
        let phase = Phase { duration, rate: args.rate, window: args.window, seed: args.seed, t_offset_s: 0.0, label: String::new() };
        let r = run_phase(w.clone(), conn, &phase).await;
        (r, Vec::new())
    };
    let cpu_after = CpuSample::take(args.server_pid);
    let by_type = result.stats.snapshot();
    let cpu = cpu_after.per_txn_since(&cpu_before, stats::total(&by_type).count);
    let secs = result.elapsed.as_secs_f64();
    eprintln!("checking …");
    let check = w.check(conn).await;
    println!("{} ({mode}, {:.1} s{})", args.workload, secs, if args.embedded { ", embedded" } else { "" });
    print!("{}", report::summary(&by_type, secs));
    for d in &check.details {
        println!("check {d}");
    }
    println!("check {}", if check.passed { "PASSED" } else { "FAILED" });
    if let Some(us) = cpu.server_us {
        println!("server CPU {us:.2} us per transaction (process tree of pid {})", args.server_pid.unwrap_or_default());
    }
    if let Some(us) = cpu.client_us {
        println!("{} CPU {us:.2} us per transaction", if args.embedded { "process (engine and load)" } else { "load generator" });
    }
    let server = server_settings(conn).await;
    let mut config = json!({
        "mode": mode,
        "sites": server.sites,
        "command_log": server.command_log,
        "target": if args.embedded { "embedded".to_string() } else { args.target.clone().unwrap_or_else(|| format!("lockstep://{}", args.server)) },
        "system": if args.embedded { "lockstep" } else { match &args.target { Some(t) => t.split("://").next().unwrap_or("lockstep"), None => "lockstep" } },
        "duration_s_requested": args.duration,
        "rate": args.rate,
        "window": args.window,
        "scale": args.scale,
        "sla_ms": args.sla_ms,
        "seed": args.seed,
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "warmup_s": args.warmup,
    });
    if let (Some(c), Some(e)) = (config.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
        if !steps.is_empty() {
            c.insert(
                "steps".into(),
                json!(steps
                    .iter()
                    .map(|s| json!({
                        "requested_tps": s.requested_tps, "achieved_tps": s.achieved_tps, "p99_us": s.p99_us, "good": s.good
                    }))
                    .collect::<Vec<_>>()),
            );
        }
    }
    let mut doc = report::json_report(&args.workload, secs, &by_type, &check, config);
    if let Some(d) = doc.as_object_mut() {
        d.insert("server_cpu_us_per_txn".into(), json!(cpu.server_us));
        d.insert("client_cpu_us_per_txn".into(), json!(cpu.client_us));
    }
    if let Some(path) = &args.report {
        let text = serde_json::to_string_pretty(&doc).map_err(|e| Error::unexpected(e.to_string()))?;
        std::fs::write(path, text).map_err(|e| Error::unexpected(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("report written to {}", path.display());
    }
    if let Some(path) = &args.chart {
        let title = chart_title(args, mode, &server);
        std::fs::write(path, report::svg_chart(&title, &result.timeline, &steps))
            .map_err(|e| Error::unexpected(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("chart written to {}", path.display());
    }
    Ok(if check.passed { 0 } else { 1 })
}

/// How the server under load runs, as its `@SystemInformation DEPLOYMENT` says; unknown
/// (None) for a peer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServerSettings {
    pub sites: Option<u32>,
    pub command_log: Option<String>,
}

async fn server_settings(conn: &Conn) -> ServerSettings {
    if matches!(conn, Conn::Peer(_)) {
        return ServerSettings::default();
    }
    let Ok(answer) = conn.call("@SystemInformation", vec![lockstep_core::Value::from("DEPLOYMENT")]).await else {
        return ServerSettings::default();
    };
    let mut settings = ServerSettings::default();
    for row in answer.rows(0) {
        match (row.first().and_then(|v| v.as_str()), row.get(1).and_then(|v| v.as_str())) {
            (Some("sitesperhost"), Some(v)) => settings.sites = v.parse().ok(),
            (Some("commandlogmode"), Some(v)) => settings.command_log = Some(v.to_string()),
            _ => {}
        }
    }
    settings
}

/// The chart's title and the line of run details under it: workload, mode and length;
/// target, sites, command log, and the window (flood) or the rate (open loop).
fn chart_title(args: &BenchArgs, mode: &str, server: &ServerSettings) -> report::ChartTitle {
    let target = if args.embedded {
        "embedded engine".to_string()
    } else {
        args.target.clone().unwrap_or_else(|| format!("lockstep://{}", args.server))
    };
    let mut details = vec![format!("target {target}")];
    if let Some(n) = server.sites {
        details.push(format!("{n} site{}", if n == 1 { "" } else { "s" }));
    }
    if let Some(log) = &server.command_log {
        details.push(format!("command log {log}"));
    }
    match (mode, args.rate) {
        ("flood", _) => details.push(format!("window {}", args.window)),
        ("step", Some(r)) => details.push(format!("rate from {r:.0}/s")),
        (_, Some(r)) => details.push(format!("rate {r:.0}/s")),
        _ => {}
    }
    if let Some(scale) = args.scale {
        details.push(format!("scale {scale}"));
    }
    let per_step = if mode == "step" { " per step" } else { "" };
    report::ChartTitle {
        title: format!("lockstep bench {} ({mode}, {} s{per_step})", args.workload, args.duration),
        details: details.join(" · "),
    }
}

/// Raises the rate step by step; returns the last good step's result (or the first step's
/// when none was good) and every step's figures.
async fn stepping<W: Workload>(w: &Arc<W>, conn: &Conn, args: &BenchArgs, duration: Duration) -> (runner::PhaseResult, Vec<StepPoint>) {
    let start = args.rate.unwrap_or(10_000.0);
    let inc = args.step_size.unwrap_or(start);
    let mut steps = Vec::new();
    let mut timeline = Vec::new();
    let mut best: Option<runner::PhaseResult> = None;
    let mut first: Option<runner::PhaseResult> = None;
    for k in 0..STEPS_MAX {
        let rate = start + inc * k as f64;
        let phase = Phase {
            duration,
            rate: Some(rate),
            window: args.window,
            seed: args.seed.wrapping_add(k as u64),
            t_offset_s: timeline.last().map(|p: &stats::TimePoint| p.t_s).unwrap_or(0.0),
            label: format!("step {rate:.0}/s "),
        };
        let r = run_phase(w.clone(), conn, &phase).await;
        let all = stats::total(&r.stats.snapshot());
        let achieved = all.count as f64 / r.elapsed.as_secs_f64().max(1e-9);
        let p99 = all.percentile_us(0.99);
        let good = p99 as f64 <= args.sla_ms * 1000.0 && achieved >= STEP_COMPLETION_MIN * rate && all.errors == 0;
        eprintln!("step {rate:.0}/s: achieved {achieved:.0}/s, p99 {:.3} ms: {}", p99 as f64 / 1000.0, if good { "good" } else { "stop" });
        steps.push(StepPoint { requested_tps: rate, achieved_tps: achieved, p99_us: p99, good });
        timeline.extend(r.timeline.iter().cloned());
        if !good {
            if best.is_none() && first.is_none() {
                first = Some(r);
            }
            break;
        }
        best = Some(r);
    }
    let mut chosen = match (best, first) {
        (Some(b), _) => b,
        (None, Some(f)) => f,
        // STEPS_MAX ≥ 1, so at least one step ran and set one of them.
        (None, None) => unreachable!("stepping ran no step"),
    };
    chosen.timeline = timeline;
    (chosen, steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(line: &[&str]) -> BenchArgs {
        Cli::parse_from(std::iter::once("bench").chain(line.iter().copied())).bench
    }

    #[test]
    fn the_chart_title_names_the_workload_target_sites_log_and_window_or_rate() {
        let server = ServerSettings { sites: Some(2), command_log: Some("sync".into()) };
        let t = chart_title(&args(&["voter", "--duration", "5", "--server", "10.0.0.1:21212"]), "flood", &server);
        assert_eq!(t.title, "lockstep bench voter (flood, 5 s)");
        assert_eq!(t.details, "target lockstep://10.0.0.1:21212 · 2 sites · command log sync · window 2048");
        let t = chart_title(&args(&["tatp", "--rate", "5000", "--scale", "1000"]), "rate", &ServerSettings::default());
        assert_eq!(t.title, "lockstep bench tatp (rate, 30 s)");
        assert_eq!(t.details, "target lockstep://127.0.0.1:21212 · rate 5000/s · scale 1000");
        let one = ServerSettings { sites: Some(1), command_log: Some("off".into()) };
        let t = chart_title(&args(&["ycsb-c", "--embedded", "--step", "--rate", "1000", "--duration", "10"]), "step", &one);
        assert_eq!(t.title, "lockstep bench ycsb-c (step, 10 s per step)");
        assert_eq!(t.details, "target embedded engine · 1 site · command log off · rate from 1000/s");
    }
}
