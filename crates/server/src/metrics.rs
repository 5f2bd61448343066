//! Figures for Prometheus' `/metrics`, in its text exposition format (version 0.0.4).
//!
//! Most figures are counters the front end and the engine keep in shared atomics, read
//! without asking any partition for work: calls, aborts and failures by procedure (counted
//! here as answers come back), a cumulative latency histogram, queue depths, the command
//! log's counters, memory and connections. Rows and memory by table live on the sites, so
//! they are read the way `@Statistics TABLE` reads them (one short message per site, behind
//! its queued work), with a deadline: a scrape of a saturated server leaves them out rather
//! than wait.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use lockstep_core::catalog::NameMap;
use lockstep_core::{ResultTable, Value};
use lockstep_engine::{stats, Call, Engine, Outcome};

use crate::Front;

/// Procedures counted by name at most; calls of further names are counted under
/// `OTHER_PROCEDURES`, so no client can grow the set of series without bound.
pub const PROCEDURES_COUNTED_MAX: usize = 1000;
/// The label of calls past `PROCEDURES_COUNTED_MAX` names.
const OTHER_PROCEDURES: &str = "(other)";
/// How long a scrape waits for the sites' table figures before leaving them out.
pub const TABLE_FIGURES_TIMEOUT_MS: u64 = 2000;
/// Upper bounds of the latency histogram's buckets, in microseconds (100 µs to 10 s).
pub(crate) const LATENCY_BOUNDS_US: [u64; 16] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000];

/// Calls of one procedure, by how they ended.
#[derive(Default)]
pub struct ProcCounters {
    calls: AtomicU64,
    /// Rolled back: the procedure aborted, or the request failed gracefully (VoltDB's
    /// USER_ABORT and GRACEFUL_FAILURE).
    aborts: AtomicU64,
    /// Any other failure (unexpected, unavailable, timed out …).
    failures: AtomicU64,
    /// Round trips of all the calls, summed in microseconds (the console's mean latency).
    latency_us: AtomicU64,
}

impl ProcCounters {
    pub fn record(&self, status: i8, round_trip: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.latency_us.fetch_add(u64::try_from(round_trip.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        match status {
            lockstep_engine::outcome::STATUS_SUCCESS => {}
            -1 | -2 => {
                self.aborts.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl ProcCounters {
    /// (calls, aborts, failures, summed round trips in µs), for the console.
    pub(crate) fn figures(&self) -> (u64, u64, u64, u64) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        (get(&self.calls), get(&self.aborts), get(&self.failures), get(&self.latency_us))
    }
}

/// A cumulative latency histogram with Prometheus' bucket bounds (one atomic add per
/// bucket hit; the cumulative counts are summed when scraped).
pub struct LatencyBuckets {
    /// One per bound, then the overflow (+Inf) bucket.
    counts: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Default for LatencyBuckets {
    fn default() -> Self {
        LatencyBuckets { counts: std::array::from_fn(|_| AtomicU64::new(0)), sum_us: AtomicU64::new(0) }
    }
}

impl LatencyBuckets {
    pub fn record(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let at = LATENCY_BOUNDS_US.partition_point(|b| *b < us);
        self.counts[at].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// The count of each bucket (not cumulative; the last is the overflow), for the console.
    pub(crate) fn counts(&self) -> Vec<u64> {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect()
    }
}

/// The front end's own figures.
#[derive(Default)]
pub struct Metrics {
    /// By name (foldhash: it is looked up for every call; only procedures that exist
    /// are added, so no client chooses its keys).
    procedures: RwLock<NameMap<Arc<ProcCounters>>>,
    /// Round trips of user procedures and ad-hoc SQL, as `@Statistics LATENCY` counts them.
    pub latency: LatencyBuckets,
    /// HTTP API requests answered (any path, any status).
    pub http_requests: AtomicU64,
    /// HTTP connections accepted (with keep-alive, far fewer than requests).
    pub http_connections: AtomicU64,
}

impl Metrics {
    /// The counters of a procedure already counted (the common case: a read lock on the
    /// front end's thread, nothing allocated).
    pub fn procedure(&self, name: &str) -> Option<Arc<ProcCounters>> {
        self.procedures.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    /// Counts the first answer of a procedure not counted yet. A call of a procedure that
    /// does not exist adds no series (a client that tries names must not grow the set).
    pub fn record_new(&self, name: &str, outcome: &Outcome, round_trip: Duration) {
        let unknown = outcome.status == -3 && outcome.status_string.as_deref().is_some_and(|s| s.ends_with("was not found"));
        if unknown {
            return;
        }
        let mut map = self.procedures.write().unwrap_or_else(|p| p.into_inner());
        let key = if map.len() < PROCEDURES_COUNTED_MAX || map.contains_key(name) { name } else { OTHER_PROCEDURES };
        map.entry(key.into()).or_default().record(outcome.status, round_trip);
    }

    pub(crate) fn procedures_sorted(&self) -> Vec<(Box<str>, Arc<ProcCounters>)> {
        let map = self.procedures.read().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(Box<str>, Arc<ProcCounters>)> = map.iter().map(|(k, c)| (k.as_str().into(), c.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// The `/metrics` page: every figure, with its HELP and TYPE lines.
pub async fn render(front: &Arc<Front>) -> String {
    let tables = table_figures(&front.engine).await;
    let dir = lockstep_engine::snapshot::snapshots_dir(&front.engine.shared().config.data_dir);
    let snaps = tokio::task::spawn_blocking(move || crate::console::read_snapshots(&dir)).await.unwrap_or_default();
    let mut out = Exposition::default();
    procedures(&mut out, &front.metrics);
    latency(&mut out, &front.metrics.latency);
    engine(&mut out, front);
    if let Some(t) = tables {
        by_table(&mut out, &t);
    }
    snapshots(&mut out, &snaps);
    export(&mut out, &front.engine);
    out.text
}

/// Export delivery per (streams, target, partition); see `@Statistics EXPORT`.
fn export(out: &mut Exposition, engine: &lockstep_engine::Engine) {
    use std::sync::atomic::Ordering::Relaxed;
    let lanes = engine.shared().config.export.lanes();
    let catalog = engine.catalog();
    let labelled: Vec<_> = lanes
        .iter()
        .map(|l| {
            let streams: Vec<&str> = catalog
                .tables()
                .filter(|d| matches!(&d.kind, lockstep_core::TableKind::Stream { target: Some(t) } if t.eq_ignore_ascii_case(&l.target)))
                .map(|d| d.name.as_str())
                .collect();
            (streams.join(","), l.partition.to_string(), l)
        })
        .collect();
    out.family("lockstep_export_backlog_rows", "gauge", "Exported rows written locally and not yet delivered to their target.");
    for (streams, p, l) in &labelled {
        let rows = if l.delivered_by_exporter { l.backlog_rows.load(Relaxed).max(0) } else { 0 };
        out.sample("lockstep_export_backlog_rows", &[("stream", streams), ("target", &l.target), ("partition", p)], rows);
    }
    out.family("lockstep_export_delivered_rows_total", "counter", "Exported rows the target acknowledged since start.");
    for (streams, p, l) in &labelled {
        out.sample(
            "lockstep_export_delivered_rows_total",
            &[("stream", streams), ("target", &l.target), ("partition", p)],
            l.rows_delivered.load(Relaxed),
        );
    }
}

/// The snapshots on disk (their manifests), and one being written.
fn snapshots(out: &mut Exposition, s: &crate::console::Snapshots) {
    out.single("lockstep_snapshots_complete", "gauge", "Complete snapshots in the data directory.", s.complete);
    let (created_ms, bytes) = s.newest.map_or((0, 0), |(_, at, bytes)| (at, bytes));
    out.single(
        "lockstep_snapshot_last_complete_timestamp_seconds",
        "gauge",
        "When the newest complete snapshot was taken (0: none).",
        created_ms as f64 / 1e3,
    );
    out.single("lockstep_snapshot_last_bytes", "gauge", "Size of the newest complete snapshot.", bytes);
    out.single(
        "lockstep_snapshot_in_progress_bytes",
        "gauge",
        "Bytes written so far of the snapshot being written (0: none).",
        s.writing.map_or(0, |(_, b)| b),
    );
}

/// Text in the exposition format, one family at a time.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape_label(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// A family with one unlabelled sample.
    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

/// A label value as the format requires: backslash, double quote and newline escaped.
fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn procedures(out: &mut Exposition, m: &Metrics) {
    let procs = m.procedures_sorted();
    let families: [(&str, &str, fn(&ProcCounters) -> &AtomicU64); 3] = [
        ("lockstep_procedure_calls_total", "Calls answered, by procedure (system procedures and @AdHoc included).", |c| &c.calls),
        (
            "lockstep_procedure_aborts_total",
            "Calls rolled back by the procedure or refused as invalid (USER_ABORT, GRACEFUL_FAILURE).",
            |c| &c.aborts,
        ),
        ("lockstep_procedure_failures_total", "Calls that failed otherwise (unexpected failure, unavailable, timeout).", |c| &c.failures),
    ];
    for (name, help, field) in families {
        out.family(name, "counter", help);
        for (proc_name, c) in &procs {
            out.sample(name, &[("procedure", proc_name)], field(c).load(Ordering::Relaxed));
        }
    }
}

fn latency(out: &mut Exposition, l: &LatencyBuckets) {
    let name = "lockstep_call_latency_seconds";
    out.family(name, "histogram", "Round trip of user procedure and @AdHoc calls, from receipt to answer.");
    let mut cumulative = 0u64;
    for (i, bound) in LATENCY_BOUNDS_US.iter().enumerate() {
        cumulative += l.counts[i].load(Ordering::Relaxed);
        let le = format!("{}", *bound as f64 / 1e6);
        out.sample(&format!("{name}_bucket"), &[("le", &le)], cumulative);
    }
    cumulative += l.counts[LATENCY_BOUNDS_US.len()].load(Ordering::Relaxed);
    out.sample(&format!("{name}_bucket"), &[("le", "+Inf")], cumulative);
    out.sample(&format!("{name}_sum"), &[], l.sum_us.load(Ordering::Relaxed) as f64 / 1e6);
    out.sample(&format!("{name}_count"), &[], cumulative);
}

fn engine(out: &mut Exposition, front: &Front) {
    let shared = front.engine.shared();
    out.family("lockstep_partition_queue_depth", "gauge", "Messages waiting in each partition's queue.");
    for (p, depth) in shared.site_queue_depths().iter().enumerate() {
        out.sample("lockstep_partition_queue_depth", &[("partition", &p.to_string())], depth);
    }
    out.family(
        "lockstep_partition_busy_seconds_total",
        "counter",
        "Time each partition's thread spent running transactions and fragments.",
    );
    for (p, busy) in shared.site_busy_seconds().iter().enumerate() {
        out.sample("lockstep_partition_busy_seconds_total", &[("partition", &p.to_string())], busy);
    }
    out.single("process_cpu_seconds_total", "counter", "User and system CPU time of the server process.", stats::process_cpu_seconds());
    out.single("lockstep_mp_queue_depth", "gauge", "Clients' calls waiting for the multi-partition coordinator.", shared.mp_queue_depth());
    out.single("lockstep_connections_open", "gauge", "Open wire-protocol client connections.", front.live.len());
    out.single(
        "lockstep_http_requests_total",
        "counter",
        "Requests the HTTP port answered.",
        front.metrics.http_requests.load(Ordering::Relaxed),
    );
    out.single(
        "lockstep_http_connections_total",
        "counter",
        "Connections the HTTP port accepted.",
        front.metrics.http_connections.load(Ordering::Relaxed),
    );
    out.single("lockstep_memory_resident_bytes", "gauge", "Resident memory of the server process.", stats::rss_kb() * 1024);
    out.single(
        "lockstep_start_time_seconds",
        "gauge",
        "When the server started, in seconds since the Unix epoch.",
        shared.started_ms as f64 / 1e3,
    );
    let log = shared.durable.log.stats();
    out.single("lockstep_command_log_bytes_total", "counter", "Bytes written to the command log, framing included.", log.bytes);
    out.single("lockstep_command_log_records_total", "counter", "Records written to the command log.", log.records);
    out.single("lockstep_command_log_syncs_total", "counter", "fdatasync calls the command log made.", log.syncs);
    out.single(
        "lockstep_command_log_last_sync_seconds",
        "gauge",
        "How long the command log's last fdatasync took.",
        log.last_sync_latency_us as f64 / 1e6,
    );
    out.single("lockstep_command_log_failures_total", "counter", "Command-log writes or syncs that failed.", log.failures);
    out.single("lockstep_command_log_queued_records", "gauge", "Records waiting to be written to the command log.", log.queued);
}

/// Rows and memory of each table, summed over the partitions.
pub(crate) struct TableFigures {
    /// (table, rows, bytes), by name.
    pub(crate) tables: Vec<(String, i64, i64)>,
}

/// Reads `@Statistics TABLE` from the sites; None if they do not answer in time.
pub(crate) async fn table_figures(engine: &Arc<Engine>) -> Option<TableFigures> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let call = Call {
        procedure: "@Statistics".into(),
        params: vec![Value::from("TABLE"), Value::Int(0)],
        partition_destination: None,
        all_partition: false,
        timeout_ms: None,
        principal: None,
    };
    stats::statistics(
        engine,
        &call,
        Box::new(move |o| {
            let _ = tx.send(o);
        }),
    );
    let outcome = tokio::time::timeout(Duration::from_millis(TABLE_FIGURES_TIMEOUT_MS), rx).await.ok()?.ok()?;
    let catalog = engine.catalog();
    let replicated = |name: &str| catalog.table(name).is_some_and(|t| t.is_replicated());
    outcome.tables.first().map(|t| sum_by_table(t, replicated))
}

/// Sums each table's partitions; a replicated table, whole on every site, counts once.
fn sum_by_table(t: &ResultTable, replicated: impl Fn(&str) -> bool) -> TableFigures {
    let col = |n: &str| t.column_index(n);
    let (Some(name), Some(rows), Some(kb)) = (col("TABLE_NAME"), col("TUPLE_COUNT"), col("TUPLE_ALLOCATED_MEMORY")) else {
        return TableFigures { tables: Vec::new() };
    };
    let mut by: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for r in &t.rows {
        let (Some(Value::Str(n)), Some(Value::Int(rc)), Some(Value::Int(k))) = (r.get(name), r.get(rows), r.get(kb)) else { continue };
        let e = by.entry(n.to_string()).or_default();
        if replicated(n) {
            *e = (*rc, k.saturating_mul(1024));
        } else {
            e.0 += rc;
            e.1 += k.saturating_mul(1024);
        }
    }
    TableFigures { tables: by.into_iter().map(|(n, (r, b))| (n, r, b)).collect() }
}

fn by_table(out: &mut Exposition, t: &TableFigures) {
    out.family("lockstep_table_rows", "gauge", "Rows of each table, all partitions together.");
    for (name, rows, _) in &t.tables {
        out.sample("lockstep_table_rows", &[("table", name)], rows);
    }
    out.family("lockstep_table_memory_bytes", "gauge", "Memory the rows of each table take, all partitions together.");
    let mut total = 0i64;
    for (name, _, bytes) in &t.tables {
        out.sample("lockstep_table_memory_bytes", &[("table", name)], bytes);
        total += bytes;
    }
    out.single("lockstep_tables_memory_bytes", "gauge", "Memory the rows of all tables take.", total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_the_first_bucket_that_holds_them() {
        let l = LatencyBuckets::default();
        for us in [50, 100, 101, 20_000_000] {
            l.record(Duration::from_micros(us));
        }
        let counts: Vec<u64> = l.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect();
        assert_eq!((counts[0], counts[1], counts[LATENCY_BOUNDS_US.len()]), (2, 1, 1));
        let mut out = Exposition::default();
        latency(&mut out, &l);
        assert!(out.text.contains("lockstep_call_latency_seconds_bucket{le=\"0.0001\"} 2\n"), "{}", out.text);
        assert!(out.text.contains("lockstep_call_latency_seconds_bucket{le=\"0.00025\"} 3\n"), "{}", out.text);
        assert!(out.text.contains("lockstep_call_latency_seconds_bucket{le=\"+Inf\"} 4\n"), "{}", out.text);
        assert!(out.text.contains("lockstep_call_latency_seconds_count 4\n"), "{}", out.text);
    }

    #[test]
    fn procedures_count_by_status_and_unknown_names_add_no_series() {
        let m = Metrics::default();
        m.record_new("Vote", &Outcome::tables(Vec::new()), Duration::from_micros(10));
        let c = m.procedure("Vote").unwrap();
        c.record(-1, Duration::from_micros(10));
        c.record(-3, Duration::from_micros(10));
        m.record_new("Nope", &Outcome::error(lockstep_core::Error::unexpected("Procedure Nope was not found")), Duration::ZERO);
        assert!(m.procedure("Nope").is_none());
        let mut out = Exposition::default();
        procedures(&mut out, &m);
        for line in [
            "lockstep_procedure_calls_total{procedure=\"Vote\"} 3",
            "lockstep_procedure_aborts_total{procedure=\"Vote\"} 1",
            "lockstep_procedure_failures_total{procedure=\"Vote\"} 1",
        ] {
            assert!(out.text.contains(line), "{line} missing from {}", out.text);
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
