//! Runtime statistics behind `@Statistics`: per-procedure counters (owned by the thread that
//! runs the procedure, so the transaction path takes no lock), a lock-free latency histogram
//! fed by the front end, process memory figures, and a helper that gathers one answer from
//! every site without blocking the caller.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockstep_core::{hash::MP_PARTITION_ID, DataType, Error, ErrorKind, ResultTable, Value};
use lockstep_storage::Partition;

use crate::engine::{Call, Engine};
use crate::name_cache::NameCache;
use crate::outcome::{Outcome, Reply};
use crate::registry::Registry;
use crate::site::SiteMsg;
use crate::sysprocs;

/// Name under which single-statement ad-hoc work is counted (VoltDB counts its ad-hoc
/// executor procedures the same way).
pub const ADHOC_PROCEDURE: &str = "@AdHoc";
/// Procedures tracked per site at most; calls of further names are not counted, so a
/// client cannot grow the map without bound (names come from the catalog, but stay safe).
pub const PROCEDURES_TRACKED_MAX: usize = 100_000;

/// Counters of one procedure on one site (VoltDB's ProcedureStatsCollector figures; every
/// call is timed, not one in twenty, because a timer read is cheap here).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcCounters {
    pub invocations: u64,
    pub total_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub total_result_bytes: u64,
    pub min_result_bytes: u64,
    pub max_result_bytes: u64,
    pub total_param_bytes: u64,
    pub min_param_bytes: u64,
    pub max_param_bytes: u64,
    /// Rolled back by the procedure or by a constraint (VoltDB: aborts).
    pub aborts: u64,
    /// Ended by an unexpected error (VoltDB: failures).
    pub failures: u64,
    /// Extremes since the last interval read of any connection (VoltDB resets its
    /// interval MIN/MAX at each one): what `@Statistics … 1` reports as MIN and MAX.
    pub window: Extremes,
}

/// Least and greatest time and sizes of the calls since the extremes were last reset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extremes {
    pub calls: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub min_result_bytes: u64,
    pub max_result_bytes: u64,
    pub min_param_bytes: u64,
    pub max_param_bytes: u64,
}

impl Extremes {
    fn record(&mut self, elapsed_ns: u64, param_bytes: u64, result_bytes: u64) {
        self.merge(&Extremes {
            calls: 1,
            min_ns: elapsed_ns,
            max_ns: elapsed_ns,
            min_result_bytes: result_bytes,
            max_result_bytes: result_bytes,
            min_param_bytes: param_bytes,
            max_param_bytes: param_bytes,
        });
    }

    fn merge(&mut self, o: &Extremes) {
        if o.calls == 0 {
            return;
        }
        if self.calls == 0 {
            *self = *o;
            return;
        }
        self.calls += o.calls;
        self.min_ns = self.min_ns.min(o.min_ns);
        self.max_ns = self.max_ns.max(o.max_ns);
        self.min_result_bytes = self.min_result_bytes.min(o.min_result_bytes);
        self.max_result_bytes = self.max_result_bytes.max(o.max_result_bytes);
        self.min_param_bytes = self.min_param_bytes.min(o.min_param_bytes);
        self.max_param_bytes = self.max_param_bytes.max(o.max_param_bytes);
    }
}

impl ProcCounters {
    fn record(&mut self, elapsed_ns: u64, param_bytes: u64, result_bytes: u64, error: Option<ErrorKind>) {
        let first = self.invocations == 0;
        self.invocations += 1;
        self.total_ns += elapsed_ns;
        self.min_ns = if first { elapsed_ns } else { self.min_ns.min(elapsed_ns) };
        self.max_ns = self.max_ns.max(elapsed_ns);
        self.total_result_bytes += result_bytes;
        self.min_result_bytes = if first { result_bytes } else { self.min_result_bytes.min(result_bytes) };
        self.max_result_bytes = self.max_result_bytes.max(result_bytes);
        self.total_param_bytes += param_bytes;
        self.min_param_bytes = if first { param_bytes } else { self.min_param_bytes.min(param_bytes) };
        self.max_param_bytes = self.max_param_bytes.max(param_bytes);
        self.window.record(elapsed_ns, param_bytes, result_bytes);
        match error {
            None => {}
            Some(ErrorKind::Unexpected | ErrorKind::Unavailable) => self.failures += 1,
            Some(_) => self.aborts += 1,
        }
    }

    pub fn avg_ns(&self) -> u64 {
        self.total_ns.checked_div(self.invocations).unwrap_or(0)
    }

    pub fn avg_result_bytes(&self) -> u64 {
        self.total_result_bytes.checked_div(self.invocations).unwrap_or(0)
    }

    pub fn avg_param_bytes(&self) -> u64 {
        self.total_param_bytes.checked_div(self.invocations).unwrap_or(0)
    }

    /// Adds another site's counters (for PROCEDUREPROFILE, which sums over partitions).
    pub fn merge(&mut self, o: &ProcCounters) {
        if o.invocations == 0 {
            return;
        }
        let first = self.invocations == 0;
        self.invocations += o.invocations;
        self.total_ns += o.total_ns;
        self.min_ns = if first { o.min_ns } else { self.min_ns.min(o.min_ns) };
        self.max_ns = self.max_ns.max(o.max_ns);
        self.total_result_bytes += o.total_result_bytes;
        self.min_result_bytes = if first { o.min_result_bytes } else { self.min_result_bytes.min(o.min_result_bytes) };
        self.max_result_bytes = self.max_result_bytes.max(o.max_result_bytes);
        self.total_param_bytes += o.total_param_bytes;
        self.min_param_bytes = if first { o.min_param_bytes } else { self.min_param_bytes.min(o.min_param_bytes) };
        self.max_param_bytes = self.max_param_bytes.max(o.max_param_bytes);
        self.aborts += o.aborts;
        self.failures += o.failures;
        self.window.merge(&o.window);
    }

    /// The change from `before` (an earlier reading of the same counters) to these: counts
    /// and sums subtracted, MIN and MAX those of the window since the extremes were reset.
    pub fn since(&self, before: Option<&ProcCounters>) -> ProcCounters {
        let b = before.cloned().unwrap_or_default();
        let w = self.window;
        ProcCounters {
            invocations: self.invocations.saturating_sub(b.invocations),
            total_ns: self.total_ns.saturating_sub(b.total_ns),
            min_ns: w.min_ns,
            max_ns: w.max_ns,
            total_result_bytes: self.total_result_bytes.saturating_sub(b.total_result_bytes),
            min_result_bytes: w.min_result_bytes,
            max_result_bytes: w.max_result_bytes,
            total_param_bytes: self.total_param_bytes.saturating_sub(b.total_param_bytes),
            min_param_bytes: w.min_param_bytes,
            max_param_bytes: w.max_param_bytes,
            aborts: self.aborts.saturating_sub(b.aborts),
            failures: self.failures.saturating_sub(b.failures),
            window: w,
        }
    }
}

/// The procedure counters of one site (or of the multi-partition coordinator).
#[derive(Clone, Debug, Default)]
pub struct ProcStats {
    procs: Vec<(String, ProcCounters)>,
    by_name: lockstep_core::NameMap<usize>,
    /// Positions in `procs` by shared name: a site's calls skip the hash lookup.
    recent: NameCache<usize>,
}

impl ProcStats {
    /// Records one finished call. `params` and `result_bytes` give the size figures.
    pub fn record(&mut self, name: &str, elapsed: Duration, params: &[Value], result_bytes: u64, error: Option<ErrorKind>) {
        if let Some(c) = self.counters(name) {
            c.record(duration_ns(elapsed), params_bytes(params), result_bytes, error);
        }
    }

    /// `record` for a name shared by every call of its procedure (a routed call's).
    pub fn record_shared(&mut self, name: &Arc<str>, elapsed: Duration, params: &[Value], result_bytes: u64, error: Option<ErrorKind>) {
        let (procs, by_name) = (&mut self.procs, &mut self.by_name);
        if let Some(&at) = self.recent.get_or_find(name, || position(procs, by_name, name)) {
            self.procs[at].1.record(duration_ns(elapsed), params_bytes(params), result_bytes, error);
        }
    }

    fn counters(&mut self, name: &str) -> Option<&mut ProcCounters> {
        let at = position(&mut self.procs, &mut self.by_name, name)?;
        Some(&mut self.procs[at].1)
    }

    /// Starts a new window of extremes (after an interval read).
    pub fn reset_windows(&mut self) {
        for (_, c) in &mut self.procs {
            c.window = Extremes::default();
        }
    }

    /// Counters by procedure name, sorted by name.
    pub fn snapshot(&self) -> Vec<(String, ProcCounters)> {
        let mut v = self.procs.clone();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// Where `name`'s counters are in `procs`, added if new; None once the table is full.
fn position(procs: &mut Vec<(String, ProcCounters)>, by_name: &mut lockstep_core::NameMap<usize>, name: &str) -> Option<usize> {
    // Look up by &str first so the common case allocates nothing.
    if let Some(&at) = by_name.get(name) {
        return Some(at);
    }
    if procs.len() >= PROCEDURES_TRACKED_MAX {
        return None;
    }
    procs.push((name.to_string(), ProcCounters::default()));
    by_name.insert(name.to_string(), procs.len() - 1);
    Some(procs.len() - 1)
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn params_bytes(params: &[Value]) -> u64 {
    params.iter().map(value_bytes).sum()
}

/// The error kind behind a failed outcome's status code (for counting aborts and failures).
pub fn error_kind_of(status: i8) -> ErrorKind {
    match status {
        -1 => ErrorKind::UserAbort,
        -2 => ErrorKind::Graceful,
        -5 => ErrorKind::Unavailable,
        _ => ErrorKind::Unexpected,
    }
}

/// Approximate serialized size of a value (VoltDB's parameter/result size figures).
pub fn value_bytes(v: &Value) -> u64 {
    match v {
        Value::Null | Value::Bool(_) => 1,
        Value::Int(_) | Value::Float(_) | Value::Timestamp(_) => 8,
        Value::Decimal(_) => 16,
        Value::Str(s) => 4 + s.len() as u64,
        Value::Bytes(b) => 4 + b.len() as u64,
        Value::Array(a) => 2 + a.iter().map(value_bytes).sum::<u64>(),
        Value::Point(_) => 16,
        Value::Geography(g) => 4 + g.wire_len() as u64,
    }
}

/// Approximate serialized size of result tables.
pub fn tables_bytes(tables: &[lockstep_core::ResultTable]) -> u64 {
    tables.iter().map(|t| 8 + t.rows.iter().map(|r| 4 + r.iter().map(value_bytes).sum::<u64>()).sum::<u64>()).sum()
}

/// Sub-buckets per power of two: latencies are kept to within 1/16 (about 6 %).
const LATENCY_SUB_BUCKETS: usize = 16;
/// Powers of two covered: up to 2^40 µs (about 12 days); longer calls land in the last bucket.
const LATENCY_OCTAVES: usize = 41;
const LATENCY_BUCKETS: usize = LATENCY_OCTAVES * LATENCY_SUB_BUCKETS;

/// Length of the window `@Statistics LATENCY` reports, as VoltDB's: the last complete one.
pub const LATENCY_WINDOW: Duration = Duration::from_secs(5);

/// Call latencies in microseconds, recorded with relaxed atomics by any thread, in
/// consecutive 5-second windows counted from the engine's start. The current window fills
/// `buckets`; the first call (or read) after it ends moves its counts to `last`, so a read
/// reports the last complete window, like VoltDB's LATENCY statistics.
pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    max_us: AtomicU64,
    started: Instant,
    /// Wall-clock time of `started`, in ms since the epoch (for the windows' end times).
    started_unix_ms: i64,
    /// Index of the window `buckets` holds (windows since `started`).
    window: AtomicU64,
    /// The window before, once it has ended; only taken when a window ends (every 5 s).
    last: Mutex<LastWindow>,
}

/// Counts of a finished window.
#[derive(Default)]
struct LastWindow {
    /// Which window these counts belong to; None before the first has ended.
    window: Option<u64>,
    counts: Vec<u64>,
    max_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..LATENCY_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
            started: Instant::now(),
            started_unix_ms: sysprocs::now_millis(),
            window: AtomicU64::new(0),
            last: Mutex::new(LastWindow::default()),
        }
    }
}

/// Bucket of a value: below 16 one bucket per microsecond, then 16 per power of two.
fn bucket_of(us: u64) -> usize {
    if us < LATENCY_SUB_BUCKETS as u64 {
        return us as usize;
    }
    let octave = 63 - us.leading_zeros() as usize; // >= 4
    let sub = ((us >> (octave - 4)) & 0xF) as usize;
    ((octave - 3) * LATENCY_SUB_BUCKETS + sub).min(LATENCY_BUCKETS - 1)
}

/// The largest value a bucket holds (what a percentile reports, like HdrHistogram).
fn bucket_high(b: usize) -> u64 {
    if b < LATENCY_SUB_BUCKETS {
        return b as u64;
    }
    let octave = b / LATENCY_SUB_BUCKETS + 3;
    let sub = (b % LATENCY_SUB_BUCKETS) as u64;
    ((LATENCY_SUB_BUCKETS as u64 + sub + 1) << (octave - 4)) - 1
}

/// Percentiles of the calls of one window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencySummary {
    /// When the window ended, in ms since the epoch (None when no window has ended yet).
    pub ended_unix_ms: Option<i64>,
    pub interval_ms: u64,
    pub count: u64,
    /// Microseconds at 50, 95, 99, 99.9, 99.99 and 99.999 %.
    pub percentiles_us: [u64; 6],
    pub max_us: u64,
}

impl LatencySummary {
    /// Percentiles of bucket counts (VoltDB's columns: 0 when nothing was recorded).
    fn of(counts: &[u64], max_us: u64, interval_ms: u64) -> Self {
        let total: u64 = counts.iter().sum();
        let at = |pct: f64| -> u64 {
            if total == 0 {
                return 0;
            }
            let rank = ((pct / 100.0) * total as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_high(b).min(max_us);
                }
            }
            max_us
        };
        LatencySummary {
            ended_unix_ms: None,
            interval_ms,
            count: total,
            percentiles_us: [at(50.0), at(95.0), at(99.0), at(99.9), at(99.99), at(99.999)],
            max_us,
        }
    }
}

impl LatencyHistogram {
    fn window_at(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.started).as_millis();
        u64::try_from(since / LATENCY_WINDOW.as_millis()).unwrap_or(u64::MAX)
    }

    /// Moves the counts of an ended window to `last`. Only the thread that advances
    /// `window` does it; a call recorded by another thread during the move may land in the
    /// newer window, which is harmless for statistics.
    fn roll(&self, now_window: u64) {
        let current = self.window.load(Ordering::Acquire);
        if now_window <= current {
            return;
        }
        if self.window.compare_exchange(current, now_window, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return;
        }
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.swap(0, Ordering::Relaxed)).collect();
        self.count.swap(0, Ordering::Relaxed);
        let max_us = self.max_us.swap(0, Ordering::Relaxed);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        *last = LastWindow { window: Some(current), counts, max_us };
    }

    pub fn record(&self, elapsed: Duration) {
        self.record_at(Instant::now(), elapsed);
    }

    /// `record`, for a caller that has just read the clock (`now`).
    pub fn record_at(&self, now: Instant, elapsed: Duration) {
        self.roll(self.window_at(now));
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// The last complete 5-second window (all zeros when no call ended in it).
    pub fn summary(&self) -> LatencySummary {
        self.summary_at(Instant::now())
    }

    fn summary_at(&self, now: Instant) -> LatencySummary {
        let now_window = self.window_at(now);
        self.roll(now_window);
        let interval_ms = u64::try_from(LATENCY_WINDOW.as_millis()).unwrap_or(u64::MAX);
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = match last.window {
            Some(w) if w + 1 == now_window => LatencySummary::of(&last.counts, last.max_us, interval_ms),
            _ => LatencySummary::of(&[], 0, interval_ms),
        };
        if now_window > 0 {
            let ended_ms = now_window.saturating_mul(interval_ms);
            s.ended_unix_ms = Some(self.started_unix_ms.saturating_add(i64::try_from(ended_ms).unwrap_or(i64::MAX)));
        }
        s
    }
}

/// Statistics shared by the whole engine.
#[derive(Default)]
pub struct EngineStats {
    /// Multi-partition work, counted by the coordinator (one thread: the lock is uncontended).
    pub mp: Mutex<ProcStats>,
    /// Round trip of every call as the front end saw it.
    pub latency: LatencyHistogram,
    /// What TTL deleted, by table (`@Statistics TTL`).
    pub ttl: crate::ttl::TtlStats,
    /// What scheduled tasks did, by task (`@Statistics TASK`).
    pub tasks: crate::tasks::TaskStats,
}

/// Gathers one value from each of `n` senders and hands them over once every sender has
/// answered or been dropped (a site that stopped leaves `None`), without blocking anyone.
pub struct Gather<T: Send + 'static> {
    slots: Mutex<Vec<Option<T>>>,
    finish: Mutex<Option<Finish<T>>>,
}

/// What a `Gather` does with the answers.
type Finish<T> = Box<dyn FnOnce(Vec<Option<T>>) + Send>;

impl<T: Send + 'static> Gather<T> {
    pub fn new(n: usize, finish: impl FnOnce(Vec<Option<T>>) + Send + 'static) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Gather { slots: Mutex::new((0..n).map(|_| None).collect()), finish: Mutex::new(Some(Box::new(finish))) })
    }

    pub fn put(&self, i: usize, v: T) {
        let mut g = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = g.get_mut(i) {
            *slot = Some(v);
        }
    }
}

impl<T: Send + 'static> Drop for Gather<T> {
    fn drop(&mut self) {
        let slots = std::mem::take(self.slots.get_mut().unwrap_or_else(|p| p.into_inner()));
        if let Some(f) = self.finish.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            f(slots);
        }
    }
}

/// Resident set size of this process in KiB (VmRSS), 0 where /proc is unavailable.
pub fn rss_kb() -> u64 {
    proc_kb("/proc/self/status", "VmRSS:")
}

/// CPU time this process has used, user and system, in seconds (from /proc/self/stat,
/// counted in clock ticks of 1/100 s on Linux); 0 where /proc is unavailable.
pub fn process_cpu_seconds() -> f64 {
    const TICKS_PER_SECOND: f64 = 100.0;
    let Ok(text) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the command name (which may hold spaces, so it ends at the last ')'):
    // state is field 3; utime and stime are fields 14 and 15.
    let Some(rest) = text.rfind(')').map(|i| &text[i + 1..]) else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / TICKS_PER_SECOND
}

/// Physical memory of the machine in KiB (MemTotal), 0 where /proc is unavailable.
pub fn physical_memory_kb() -> u64 {
    proc_kb("/proc/meminfo", "MemTotal:")
}

fn proc_kb(path: &str, key: &str) -> u64 {
    let Ok(text) = std::fs::read_to_string(path) else { return 0 };
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|rest| rest.split_whitespace().next()).and_then(|n| n.parse().ok()).unwrap_or(0)
}

// ---- @Statistics selectors ---------------------------------------------------------------

/// One table as one site holds it.
struct TableFigures {
    def: std::sync::Arc<lockstep_core::TableDef>,
    tuples: u64,
    memory_bytes: u64,
}

/// What `@Statistics` reads from each site.
struct SiteFigures {
    procs: Vec<(String, ProcCounters)>,
    tables: Vec<TableFigures>,
    /// What each Lua procedure's module keeps on the site's heap, in bytes.
    modules: Vec<(String, usize)>,
}

fn site_figures(part: &Partition, procs: &ProcStats, registry: &Registry) -> SiteFigures {
    let tables = part
        .tables()
        .map(|t| TableFigures { def: t.def().clone(), tuples: t.len() as u64, memory_bytes: t.memory_bytes() as u64 })
        .collect();
    SiteFigures { procs: procs.snapshot(), tables, modules: registry.procedure_memory() }
}

/// Estimated bytes of one index entry: its key values plus the tree's per-entry overhead.
fn index_entry_bytes(key_columns: usize) -> u64 {
    const TREE_ENTRY_OVERHEAD_BYTES: u64 = 32;
    key_columns as u64 * std::mem::size_of::<Value>() as u64 + TREE_ENTRY_OVERHEAD_BYTES
}

/// Procedure counters a connection saw at its last interval read of each selector: the
/// baseline its next `@Statistics selector 1` subtracts. One per connection (the front end
/// keeps it); bounded by the procedures tracked per site.
#[derive(Default)]
pub struct IntervalBaselines {
    /// (selector, site index (the coordinator after the sites), procedure) → counters.
    last: Mutex<HashMap<(String, usize, String), ProcCounters>>,
}

impl IntervalBaselines {
    /// Replaces the cumulative counters of `groups` (one per site, then the coordinator's)
    /// by their change since this connection's last interval read of `selector`, and
    /// remembers the cumulative ones for the next.
    fn since_last(&self, selector: &str, groups: &mut [&mut Vec<(String, ProcCounters)>]) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        for (site, procs) in groups.iter_mut().enumerate() {
            for (name, c) in procs.iter_mut() {
                let key = (selector.to_string(), site, name.clone());
                let now = c.clone();
                *c = now.since(last.get(&key));
                last.insert(key, now);
            }
        }
    }
}

/// VoltDB's interval flag, `@Statistics selector interval`: 1 (any non-zero) for the change
/// since the caller's last interval read, 0 or absent for totals since start.
fn interval_flag(call: &Call) -> bool {
    match call.params.get(1) {
        Some(Value::Int(v)) => *v != 0,
        Some(Value::Bool(b)) => *b,
        _ => false,
    }
}

/// Answers `@Statistics selector [interval]` with cumulative figures (a call without a
/// connection to keep interval baselines for).
pub fn statistics(engine: &Engine, call: &Call, reply: Reply) {
    statistics_for(engine, call, None, reply)
}

/// Answers `@Statistics selector [interval]`. Selectors that need site data ask every site
/// (behind the work already queued there) and answer when all have replied. With the
/// interval flag and the caller's `baselines`, the procedure selectors (the ones made of
/// counters) answer the change since the caller's last interval read: invocations, aborts,
/// failures and times counted since then, AVG over those calls, MIN and MAX over the calls
/// since the last interval read by any connection. The other selectors are gauges (rows,
/// memory, queue lengths) or, for LATENCY, already a window: the same either way.
pub fn statistics_for(engine: &Engine, call: &Call, baselines: Option<Arc<IntervalBaselines>>, reply: Reply) {
    let selector = match sysprocs::str_param(call, 0, "a selector") {
        Ok(s) => s.to_ascii_uppercase(),
        Err(e) => return reply(Outcome::error(e)),
    };
    let shared = engine.shared().clone();
    let header = Header { timestamp: sysprocs::now_millis(), host_id: engine.host_id(), hostname: sysprocs::hostname() };
    let sync = |tables: Vec<ResultTable>| Outcome::tables(tables);
    match selector.as_str() {
        "TOPO" => return reply(sync(sysprocs::topology(engine))),
        "PARTITIONCOUNT" => {
            let mut t = ResultTable::with_columns(&[("PARTITION_COUNT", DataType::Integer)]);
            t.push(vec![Value::Int(engine.partition_count() as i64)]);
            return reply(sync(vec![t]));
        }
        "LATENCY" => return reply(sync(vec![latency_table(&header, &shared.stats.latency.summary())])),
        "COMMANDLOG" => return reply(sync(vec![command_log_table(&header, engine)])),
        "CLUSTER" => return reply(sync(vec![cluster_table(&header, engine)])),
        "TTL" => return reply(sync(vec![ttl_table(&header, engine)])),
        "EXPORT" => return export_statistics(engine, header, reply),
        "TASK" => return reply(sync(vec![task_table(&header, engine)])),
        "PROCEDURE" | "PROCEDUREPROFILE" | "PROCEDUREMEMORY" | "TABLE" | "INDEX" | "MEMORY" => {}
        other => {
            return reply(Outcome::error(Error::graceful(format!(
                "@Statistics selector {other} is not supported: use PROCEDURE, PROCEDUREPROFILE, PROCEDUREMEMORY, LATENCY, TABLE, INDEX, MEMORY, PARTITIONCOUNT, COMMANDLOG, LIVECLIENTS, TOPO, TTL, TASK, EXPORT or CLUSTER"
            ))))
        }
    }
    let counters = matches!(selector.as_str(), "PROCEDURE" | "PROCEDUREPROFILE");
    let interval = match baselines {
        Some(b) if counters && interval_flag(call) => Some(b),
        _ => None,
    };
    let reset = interval.is_some();
    let n = engine.partition_count() as usize;
    let mp = {
        let mut g = shared.stats.mp.lock().unwrap_or_else(|p| p.into_inner());
        let snap = g.snapshot();
        if reset {
            g.reset_windows();
        }
        snap
    };
    let gather = Gather::new(n, move |sites: Vec<Option<SiteFigures>>| {
        if sites.iter().any(Option::is_none) {
            return reply(Outcome::error(Error::unavailable("a partition site has stopped; statistics are incomplete")));
        }
        let mut sites: Vec<SiteFigures> = sites.into_iter().flatten().collect();
        let mut mp = mp;
        if let Some(b) = interval {
            let mut groups: Vec<&mut Vec<(String, ProcCounters)>> = sites.iter_mut().map(|s| &mut s.procs).collect();
            groups.push(&mut mp);
            b.since_last(&selector, &mut groups);
        }
        let table = match selector.as_str() {
            "PROCEDURE" => procedure_table(&header, &sites, &mp),
            "PROCEDUREPROFILE" => procedure_profile_table(&header, &sites, &mp),
            "PROCEDUREMEMORY" => procedure_memory_table(&header, &sites),
            "TABLE" => table_table(&header, &sites),
            "INDEX" => index_table(&header, &sites),
            _ => memory_table(&header, &sites),
        };
        reply(Outcome::tables(vec![table]))
    });
    for site in 0..n {
        let g = gather.clone();
        shared.send_site(
            site as u32,
            SiteMsg::Stats(Box::new(move |part, procs, registry| {
                let figures = site_figures(part, procs, registry);
                if reset {
                    procs.reset_windows();
                }
                g.put(site, figures)
            })),
        );
    }
}

/// The columns every VoltDB statistics row starts with.
struct Header {
    timestamp: i64,
    host_id: i32,
    hostname: String,
}

impl Header {
    fn columns(site: bool) -> Vec<(&'static str, DataType)> {
        let mut c = vec![("TIMESTAMP", DataType::BigInt), ("HOST_ID", DataType::Integer), ("HOSTNAME", DataType::Varchar)];
        if site {
            c.extend([("SITE_ID", DataType::Integer), ("PARTITION_ID", DataType::Integer)]);
        }
        c
    }

    fn row(&self, site: Option<(i64, i64)>) -> Vec<Value> {
        let mut r = vec![Value::Int(self.timestamp), Value::Int(self.host_id as i64), Value::from(self.hostname.as_str())];
        if let Some((site, partition)) = site {
            r.extend([Value::Int(site), Value::Int(partition)]);
        }
        r
    }
}

fn table_with(mut cols: Vec<(&'static str, DataType)>, more: &[(&'static str, DataType)]) -> ResultTable {
    cols.extend_from_slice(more);
    ResultTable::with_columns(&cols)
}

fn kb(bytes: u64) -> Value {
    Value::Int((bytes / 1024) as i64)
}

fn int(v: u64) -> Value {
    Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

fn procedure_table(h: &Header, sites: &[SiteFigures], mp: &[(String, ProcCounters)]) -> ResultTable {
    use DataType::{BigInt as B, Integer as I, TinyInt as T, Varchar as V};
    let mut t = table_with(
        Header::columns(true),
        &[
            ("PROCEDURE", V),
            ("INVOCATIONS", B),
            ("TIMED_INVOCATIONS", B),
            ("MIN_EXECUTION_TIME", B),
            ("MAX_EXECUTION_TIME", B),
            ("AVG_EXECUTION_TIME", B),
            ("MIN_RESULT_SIZE", I),
            ("MAX_RESULT_SIZE", I),
            ("AVG_RESULT_SIZE", I),
            ("MIN_PARAMETER_SET_SIZE", I),
            ("MAX_PARAMETER_SET_SIZE", I),
            ("AVG_PARAMETER_SET_SIZE", I),
            ("ABORTS", B),
            ("FAILURES", B),
            ("TRANSACTIONAL", T),
        ],
    );
    let mp_site = sites.len() as i64;
    let rows = sites
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.procs.iter().map(move |p| ((i as i64, i as i64), p)))
        .chain(mp.iter().map(|p| ((mp_site, MP_PARTITION_ID as i64), p)));
    for (site, (name, c)) in rows {
        let mut r = h.row(Some(site));
        r.extend([
            Value::from(name.as_str()),
            int(c.invocations),
            int(c.invocations),
            int(c.min_ns),
            int(c.max_ns),
            int(c.avg_ns()),
            int(c.min_result_bytes),
            int(c.max_result_bytes),
            int(c.avg_result_bytes()),
            int(c.min_param_bytes),
            int(c.max_param_bytes),
            int(c.avg_param_bytes()),
            int(c.aborts),
            int(c.failures),
            Value::Int(1),
        ]);
        t.push(r);
    }
    t
}

/// PROCEDUREPROFILE: each procedure summed over partitions, heaviest first; WEIGHTED_PERC is
/// its share of all execution time, in percent.
fn procedure_profile_table(h: &Header, sites: &[SiteFigures], mp: &[(String, ProcCounters)]) -> ResultTable {
    use DataType::{BigInt as B, Varchar as V};
    let mut t = ResultTable::with_columns(&[
        ("TIMESTAMP", B),
        ("PROCEDURE", V),
        ("WEIGHTED_PERC", B),
        ("INVOCATIONS", B),
        ("AVG", B),
        ("MIN", B),
        ("MAX", B),
        ("ABORTS", B),
        ("FAILURES", B),
    ]);
    let mut by_name: HashMap<&str, ProcCounters> = HashMap::new();
    for (name, c) in sites.iter().flat_map(|s| s.procs.iter()).chain(mp.iter()) {
        by_name.entry(name.as_str()).or_default().merge(c);
    }
    let total_ns: u64 = by_name.values().map(|c| c.total_ns).sum();
    let mut rows: Vec<_> = by_name.into_iter().collect();
    rows.sort_by(|a, b| b.1.total_ns.cmp(&a.1.total_ns).then(a.0.cmp(b.0)));
    for (name, c) in rows {
        let perc = if total_ns == 0 { 0 } else { (c.total_ns as u128 * 100 + total_ns as u128 / 2) / total_ns as u128 };
        t.push(vec![
            Value::Int(h.timestamp),
            Value::Str(name.to_string().into()),
            Value::Int(perc as i64),
            int(c.invocations),
            int(c.avg_ns()),
            int(c.min_ns),
            int(c.max_ns),
            int(c.aborts),
            int(c.failures),
        ]);
    }
    t
}

fn table_type(def: &lockstep_core::TableDef) -> &'static str {
    match def.kind {
        lockstep_core::TableKind::Stream { .. } => "StreamedTable",
        _ => "PersistentTable",
    }
}

fn table_table(h: &Header, sites: &[SiteFigures]) -> ResultTable {
    use DataType::{BigInt as B, Integer as I, Varchar as V};
    let mut t = table_with(
        Header::columns(true),
        &[
            ("TABLE_NAME", V),
            ("TABLE_TYPE", V),
            ("TUPLE_COUNT", B),
            ("TUPLE_ALLOCATED_MEMORY", B),
            ("TUPLE_DATA_MEMORY", B),
            ("STRING_DATA_MEMORY", B),
            ("TUPLE_LIMIT", I),
            ("PERCENT_FULL", I),
            ("DR", V),
            ("EXPORT", V),
        ],
    );
    for (i, s) in sites.iter().enumerate() {
        for f in &s.tables {
            let mut r = h.row(Some((i as i64, i as i64)));
            let exported = matches!(f.def.kind, lockstep_core::TableKind::Stream { target: Some(_) });
            r.extend([
                Value::from(f.def.name.as_str()),
                Value::Str(table_type(&f.def).into()),
                int(f.tuples),
                kb(f.memory_bytes),
                kb(f.memory_bytes),
                // Strings are counted with their rows (Table::memory_bytes does not split them).
                Value::Int(0),
                Value::Null,
                Value::Int(0),
                Value::Str("false".into()),
                Value::Str(exported.to_string().into()),
            ]);
            t.push(r);
        }
    }
    t
}

fn index_table(h: &Header, sites: &[SiteFigures]) -> ResultTable {
    use DataType::{BigInt as B, TinyInt as T, Varchar as V};
    let mut t = table_with(
        Header::columns(true),
        &[
            ("INDEX_NAME", V),
            ("TABLE_NAME", V),
            ("INDEX_TYPE", V),
            ("IS_UNIQUE", T),
            ("IS_COUNTABLE", T),
            ("ENTRY_COUNT", B),
            ("MEMORY_ESTIMATE", B),
        ],
    );
    for (i, s) in sites.iter().enumerate() {
        for f in &s.tables {
            for ix in &f.def.indexes {
                let unique = ix.unique || ix.assume_unique || ix.primary;
                let kind = if unique { "CompactingTreeUniqueIndex" } else { "CompactingTreeMultiMapIndex" };
                let mut r = h.row(Some((i as i64, i as i64)));
                r.extend([
                    Value::from(ix.name.as_str()),
                    Value::from(f.def.name.as_str()),
                    Value::Str(kind.into()),
                    Value::Int(unique as i64),
                    Value::Int(0),
                    int(f.tuples),
                    kb(f.tuples * index_entry_bytes(ix.columns.len())),
                ]);
                t.push(r);
            }
        }
    }
    t
}

/// PROCEDUREMEMORY (Lockstep's own): what each Lua procedure's module keeps on each site's
/// heap once loaded; a load over the per-procedure limit is refused.
fn procedure_memory_table(h: &Header, sites: &[SiteFigures]) -> ResultTable {
    use DataType::{BigInt as B, Varchar as V};
    let mut t = table_with(Header::columns(true), &[("PROCEDURE", V), ("MODULE_BYTES", B)]);
    for (i, s) in sites.iter().enumerate() {
        for (name, bytes) in &s.modules {
            let mut r = h.row(Some((i as i64, i as i64)));
            r.extend([Value::from(name.as_str()), Value::Int(*bytes as i64)]);
            t.push(r);
        }
    }
    t
}

/// MEMORY: one row for this host, in KiB like VoltDB; the JAVA* columns are 0 (no JVM).
fn memory_table(h: &Header, sites: &[SiteFigures]) -> ResultTable {
    use DataType::{BigInt as B, Integer as I};
    let mut t = table_with(
        Header::columns(false),
        &[
            ("RSS", I),
            ("JAVAUSED", I),
            ("JAVAUNUSED", I),
            ("TUPLEDATA", B),
            ("TUPLEALLOCATED", B),
            ("INDEXMEMORY", B),
            ("STRINGMEMORY", B),
            ("TUPLECOUNT", B),
            ("POOLEDMEMORY", B),
            ("PHYSICALMEMORY", B),
            ("JAVAMAXHEAP", I),
        ],
    );
    let tables = sites.iter().flat_map(|s| s.tables.iter());
    let (mut bytes, mut tuples, mut index_bytes) = (0u64, 0u64, 0u64);
    for f in tables {
        bytes += f.memory_bytes;
        tuples += f.tuples;
        index_bytes += f.def.indexes.iter().map(|ix| f.tuples * index_entry_bytes(ix.columns.len())).sum::<u64>();
    }
    let mut r = h.row(None);
    r.extend([
        int(rss_kb()),
        Value::Int(0),
        Value::Int(0),
        kb(bytes),
        kb(bytes),
        kb(index_bytes),
        Value::Int(0),
        int(tuples),
        Value::Int(0),
        int(physical_memory_kb()),
        Value::Int(0),
    ]);
    t.push(r);
    t
}

/// LATENCY: round trips of user procedure and @AdHoc calls in the last complete 5-second
/// window, in microseconds; INTERVAL is the window in milliseconds, TPS its calls per second.
fn latency_table(h: &Header, s: &LatencySummary) -> ResultTable {
    use DataType::{BigInt as B, Integer as I};
    let mut t = table_with(
        Header::columns(false),
        &[
            ("INTERVAL", I),
            ("COUNT", I),
            ("TPS", I),
            ("P50", B),
            ("P95", B),
            ("P99", B),
            ("P99.9", B),
            ("P99.99", B),
            ("P99.999", B),
            ("MAX", B),
        ],
    );
    let tps = (s.count * 1000).checked_div(s.interval_ms).unwrap_or(0);
    // TIMESTAMP is the end of the window reported, so consecutive reads tell windows apart.
    let h = Header { timestamp: s.ended_unix_ms.unwrap_or(h.timestamp), host_id: h.host_id, hostname: h.hostname.clone() };
    let mut r = h.row(None);
    r.extend([int(s.interval_ms.min(i32::MAX as u64)), int(s.count.min(i32::MAX as u64)), int(tps.min(i32::MAX as u64))]);
    r.extend(s.percentiles_us.iter().map(|p| int(*p)));
    r.push(int(s.max_us));
    t.push(r);
    t
}

/// COMMANDLOG, with VoltDB's columns.
fn command_log_table(h: &Header, engine: &Engine) -> ResultTable {
    use DataType::{BigInt as B, Integer as I};
    let log = &engine.shared().durable.log;
    let st = log.stats();
    let segments = crate::cmdlog::segment::list_segments(&crate::cmdlog::log_dir(&engine.shared().config.data_dir))
        .map(|s| s.len())
        .unwrap_or(0) as i64;
    let fsync_interval = match log.mode() {
        crate::cmdlog::Durability::Async { flush_ms } => flush_ms as i64,
        _ => 0,
    };
    let mut t = table_with(
        Header::columns(false),
        &[("OUTSTANDING_BYTES", B), ("OUTSTANDING_TXNS", B), ("IN_USE_SEGMENT_COUNT", I), ("SEGMENT_COUNT", I), ("FSYNC_INTERVAL", I)],
    );
    let mut r = h.row(None);
    r.extend([Value::Int(0), Value::Int(st.queued as i64), Value::Int(segments.min(1)), Value::Int(segments), Value::Int(fsync_interval)]);
    t.push(r);
    t
}

/// Migrating rows (flagged, not yet deleted) by (target, partition).
type Migrating = HashMap<(String, u32), u64>;

/// `@Statistics EXPORT`: counts each site's migrating rows (the rows of its migrating
/// tables' flags tables, a length read per table, behind the work queued there), then
/// answers with `export_table`.
fn export_statistics(engine: &Engine, header: Header, reply: Reply) {
    let catalog = engine.catalog();
    let flags: Arc<Vec<(String, lockstep_core::TableId)>> =
        Arc::new(lockstep_sql::ddl_migrate::migrations(&catalog).map(|m| (m.target.to_ascii_uppercase(), m.flags.id)).collect());
    let shared = engine.shared().clone();
    if flags.is_empty() {
        return reply(Outcome::tables(vec![export_table(&header, &catalog, &shared.config.export, &Migrating::new())]));
    }
    let n = engine.partition_count() as usize;
    let hub_shared = shared.clone();
    let gather = Gather::new(n, move |sites: Vec<Option<Vec<(String, u64)>>>| {
        if sites.iter().any(Option::is_none) {
            return reply(Outcome::error(Error::unavailable("a partition site has stopped; statistics are incomplete")));
        }
        let hub = &hub_shared.config.export;
        let mut migrating = Migrating::new();
        for (partition, counts) in sites.into_iter().flatten().enumerate() {
            let Ok(partition) = u32::try_from(partition) else { continue };
            for (target, rows) in counts.into_iter().filter(|(_, rows)| *rows > 0) {
                // A target no row was written to since the start has no lane yet; its
                // migrating rows (flagged before a restart) still get their row.
                hub.lane(&target, partition);
                *migrating.entry((target, partition)).or_insert(0) += rows;
            }
        }
        reply(Outcome::tables(vec![export_table(&header, &catalog, hub, &migrating)]))
    });
    for site in 0..n {
        let (g, flags) = (gather.clone(), flags.clone());
        shared.send_site(
            site as u32,
            SiteMsg::Stats(Box::new(move |part, _, _| {
                let counts = flags.iter().map(|(target, id)| (target.clone(), part.table(*id).map_or(0, |t| t.len() as u64))).collect();
                g.put(site, counts)
            })),
        );
    }
}

/// `@Statistics EXPORT`: per export target and partition (with the streams that export to
/// it), the rows written to the local files and delivered to the target since start, the
/// rows and bytes not yet delivered, whether the backlog is over the target's limit, whether
/// the target is up (ACTIVE), its last error, and the rows of tables migrating to it that
/// are flagged and not yet deleted (`migrating`). File targets deliver nothing: their files
/// are the output.
fn export_table(h: &Header, catalog: &lockstep_core::Catalog, hub: &crate::export::ExportHub, migrating: &Migrating) -> ResultTable {
    use DataType::{BigInt as B, Integer as I, Varchar as V};
    let mut t = table_with(
        Header::columns(true),
        &[
            ("SOURCE", V),
            ("TARGET", V),
            ("TARGET_TYPE", V),
            ("ACTIVE", V),
            ("TUPLE_COUNT", B),
            ("TUPLE_DELIVERED", B),
            ("TUPLE_PENDING", B),
            ("BYTES_PENDING", B),
            ("MAX_BACKLOG_BYTES", B),
            ("OVER_BACKLOG_LIMIT", I),
            ("LAST_ERROR", V),
            ("TUPLE_MIGRATING", B),
        ],
    );
    for lane in hub.lanes() {
        let streams: Vec<&str> = catalog
            .tables()
            .filter(|d| matches!(&d.kind, lockstep_core::TableKind::Stream { target: Some(t) } if t.eq_ignore_ascii_case(&lane.target)))
            .map(|d| d.name.as_str())
            .collect();
        let kind = hub.target(&lane.target).map_or("file", |c| c.kind.name());
        let p = i64::from(lane.partition);
        let mut r = h.row(Some((p, p)));
        let load = |a: &std::sync::atomic::AtomicI64| Value::Int(a.load(std::sync::atomic::Ordering::Relaxed).max(0));
        let error = lane.last_error();
        r.extend([
            Value::from(streams.join(",").as_str()),
            Value::from(lane.target.as_str()),
            Value::from(kind),
            Value::from(if lane.down.load(std::sync::atomic::Ordering::Relaxed) { "FALSE" } else { "TRUE" }),
            int(lane.rows_written.load(std::sync::atomic::Ordering::Relaxed)),
            int(lane.rows_delivered.load(std::sync::atomic::Ordering::Relaxed)),
            if lane.delivered_by_exporter { load(&lane.backlog_rows) } else { Value::Int(0) },
            if lane.delivered_by_exporter { load(&lane.backlog_bytes) } else { Value::Int(0) },
            int(lane.max_backlog_bytes.load(std::sync::atomic::Ordering::Relaxed)),
            Value::Int(i64::from(lane.over_limit.load(std::sync::atomic::Ordering::Relaxed))),
            if error.is_empty() { Value::Null } else { Value::from(error.as_str()) },
            int(migrating.get(&(lane.target.clone(), lane.partition)).copied().unwrap_or(0)),
        ]);
        t.push(r);
    }
    t
}

/// `@Statistics TTL`: per table with a TTL, the rows its background deletion removed (in
/// all, and in its last run, over every partition), its runs, the calls that failed and
/// the last failure, and when it last ran (ms since the Unix epoch; 0: not yet).
fn ttl_table(h: &Header, engine: &Engine) -> ResultTable {
    use DataType::{BigInt as B, Varchar as V};
    let mut t = table_with(
        Header::columns(false),
        &[
            ("TABLE_NAME", V),
            ("ROWS_DELETED", B),
            ("ROWS_DELETED_LAST_ROUND", B),
            ("LAST_DELETE_TIMESTAMP", B),
            ("RUNS", B),
            ("FAILED_CALLS", B),
            ("LAST_ERROR", V),
        ],
    );
    for (name, c) in engine.shared().stats.ttl.snapshot(&engine.catalog()) {
        let mut r = h.row(None);
        r.extend([
            Value::from(name.as_str()),
            Value::Int(c.rows_deleted),
            Value::Int(c.rows_deleted_last_round),
            Value::Int(c.last_run_ms),
            Value::Int(c.runs),
            Value::Int(c.failed_calls),
            c.last_error.map_or(Value::Null, |e| Value::from(e.as_str())),
        ]);
        t.push(r);
    }
    t
}

/// `@Statistics TASK`: per scheduled task, its state (ENABLED, DISABLED, or STOPPED by a
/// failure under ON ERROR STOP), where it runs, its procedure, and since start its runs,
/// the procedure calls they made, the calls that failed, the last failure and when the last
/// run ended (ms since the Unix epoch; 0: not yet).
fn task_table(h: &Header, engine: &Engine) -> ResultTable {
    use DataType::{BigInt as B, Varchar as V};
    let mut t = table_with(
        Header::columns(false),
        &[
            ("TASK_NAME", V),
            ("STATE", V),
            ("SCOPE", V),
            ("PROCEDURE_NAME", V),
            ("RUNS", B),
            ("PROCEDURE_INVOCATIONS", B),
            ("PROCEDURE_FAILURES", B),
            ("LAST_RUN_TIMESTAMP", B),
            ("LAST_ERROR", V),
        ],
    );
    for (def, state, c) in engine.shared().stats.tasks.snapshot(&engine.catalog()) {
        let scope = match def.run_on {
            lockstep_core::TaskRunOn::Database => "DATABASE",
            lockstep_core::TaskRunOn::Partitions => "PARTITIONS",
        };
        let mut r = h.row(None);
        r.extend([
            Value::from(def.name.as_str()),
            Value::from(state),
            Value::from(scope),
            Value::from(def.procedure.as_str()),
            Value::Int(c.runs),
            Value::Int(c.calls),
            Value::Int(c.failures),
            Value::Int(c.last_run_ms),
            c.last_error.map_or(Value::Null, |e| Value::from(e.as_str())),
        ]);
        t.push(r);
    }
    t
}

/// `@Statistics CLUSTER` (Lockstep's own): this node's share of the cluster and the calls
/// it passed on to other nodes or ran for them. A single node leads every partition and
/// passes nothing on.
fn cluster_table(h: &Header, engine: &Engine) -> ResultTable {
    use DataType::{BigInt as B, Integer as I};
    let mut t = table_with(
        Header::columns(false),
        &[("PARTITIONS_LED", I), ("PARTITIONS_HELD", I), ("FORWARDED_CALLS", B), ("FORWARDED_MP_CALLS", B), ("CALLS_RUN_FOR_OTHERS", B)],
    );
    let (led, held, c) = match engine.shared().cluster.get() {
        Some(hooks) => {
            let topo = hooks.topology();
            let led = topo.partitions.iter().filter(|p| p.leader == Some(topo.me)).count();
            let held = topo.partitions.iter().filter(|p| p.replicas.contains(&topo.me)).count();
            (led, held, hooks.counters())
        }
        None => (engine.partition_count() as usize, engine.partition_count() as usize, Default::default()),
    };
    let mut r = h.row(None);
    r.extend([Value::Int(led as i64), Value::Int(held as i64), int(c.forwarded), int(c.forwarded_mp), int(c.run_for_others)]);
    t.push(r);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_track_min_max_avg_and_outcomes() {
        let mut s = ProcStats::default();
        s.record("P", Duration::from_nanos(300), &[Value::Int(1)], 10, None);
        s.record("P", Duration::from_nanos(100), &[Value::Str("abc".into())], 30, Some(ErrorKind::UserAbort));
        s.record("P", Duration::from_nanos(200), &[], 20, Some(ErrorKind::Unexpected));
        let snap = s.snapshot();
        assert_eq!(snap.len(), 1);
        let c = &snap[0].1;
        assert_eq!((c.invocations, c.min_ns, c.max_ns, c.avg_ns()), (3, 100, 300, 200));
        assert_eq!((c.min_param_bytes, c.max_param_bytes, c.avg_param_bytes()), (0, 8, 5));
        assert_eq!((c.min_result_bytes, c.max_result_bytes, c.avg_result_bytes()), (10, 30, 20));
        assert_eq!((c.aborts, c.failures), (1, 1));
    }

    #[test]
    fn calls_by_shared_name_count_with_calls_by_name_and_the_table_stays_bounded() {
        let mut s = ProcStats::default();
        let vote: Arc<str> = "Vote".into();
        s.record_shared(&vote, Duration::from_nanos(10), &[], 0, None);
        s.record("Vote", Duration::from_nanos(30), &[], 0, None);
        // A later routing table shares a new name for the same procedure.
        s.record_shared(&"Vote".into(), Duration::from_nanos(20), &[], 0, None);
        s.record_shared(&vote, Duration::from_nanos(40), &[], 0, None);
        let snap = s.snapshot();
        assert_eq!(snap.len(), 1);
        assert_eq!((snap[0].1.invocations, snap[0].1.min_ns, snap[0].1.max_ns), (4, 10, 40));
        for i in 0..PROCEDURES_TRACKED_MAX + 5 {
            s.record_shared(&format!("P{i}").into(), Duration::from_nanos(1), &[], 0, None);
        }
        assert_eq!(s.snapshot().len(), PROCEDURES_TRACKED_MAX);
    }

    #[test]
    fn merge_sums_counts_and_keeps_extremes() {
        let mut a = ProcStats::default();
        a.record("P", Duration::from_nanos(50), &[], 0, None);
        let mut b = ProcStats::default();
        b.record("P", Duration::from_nanos(500), &[], 0, Some(ErrorKind::Constraint));
        let mut m = ProcCounters::default();
        m.merge(&a.snapshot()[0].1);
        m.merge(&b.snapshot()[0].1);
        assert_eq!((m.invocations, m.min_ns, m.max_ns, m.avg_ns(), m.aborts), (2, 50, 500, 275, 1));
    }

    /// One interval read of `selector` by the connection holding `b`, of a site's counters.
    fn read_interval(b: &IntervalBaselines, selector: &str, site: &mut ProcStats) -> ProcCounters {
        let mut procs = site.snapshot();
        site.reset_windows();
        b.since_last(selector, &mut [&mut procs]);
        procs.into_iter().find(|(n, _)| n == "P").map(|(_, c)| c).unwrap_or_default()
    }

    #[test]
    fn an_interval_read_counts_only_the_calls_since_the_callers_last_one() {
        let mut site = ProcStats::default();
        let (first, second) = (IntervalBaselines::default(), IntervalBaselines::default());
        site.record("P", Duration::from_nanos(900), &[], 0, None);
        site.record("P", Duration::from_nanos(100), &[], 0, Some(ErrorKind::Constraint));
        let a = read_interval(&first, "PROCEDUREPROFILE", &mut site);
        assert_eq!((a.invocations, a.aborts, a.min_ns, a.max_ns, a.avg_ns()), (2, 1, 100, 900, 500));

        site.record("P", Duration::from_nanos(300), &[], 0, None);
        site.record("P", Duration::from_nanos(500), &[], 0, Some(ErrorKind::Unexpected));
        let b = read_interval(&first, "PROCEDUREPROFILE", &mut site);
        // Only the two calls in between: their own extremes and average, not the totals'.
        assert_eq!((b.invocations, b.aborts, b.failures, b.min_ns, b.max_ns, b.avg_ns()), (2, 0, 1, 300, 500, 400));

        // Nothing since: zeros.
        let c = read_interval(&first, "PROCEDUREPROFILE", &mut site);
        assert_eq!((c.invocations, c.total_ns, c.min_ns, c.max_ns), (0, 0, 0, 0));

        // Another connection, and another selector of the same connection, have baselines of
        // their own: their first interval read counts everything.
        assert_eq!(read_interval(&second, "PROCEDUREPROFILE", &mut site).invocations, 4);
        assert_eq!(read_interval(&first, "PROCEDURE", &mut site).invocations, 4);
        // The cumulative counters are untouched by interval reads.
        assert_eq!(site.snapshot()[0].1.invocations, 4);
    }

    #[test]
    fn buckets_bound_their_values() {
        for us in [0u64, 1, 15, 16, 17, 31, 32, 100, 1000, 123_456, 1 << 39] {
            let b = bucket_of(us);
            assert!(bucket_high(b) >= us, "{us} in bucket {b} high {}", bucket_high(b));
            if b > 0 {
                assert!(bucket_high(b - 1) < us, "{us} belongs above bucket {}", b - 1);
            }
        }
        assert_eq!(bucket_high(bucket_of(16)), 16);
        assert_eq!(bucket_high(bucket_of(100)), 103);
    }

    #[test]
    fn latency_percentiles_of_the_last_complete_window() {
        let h = LatencyHistogram::default();
        let t0 = h.started;
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        for us in 1..=100u64 {
            h.record_at(at(1_000), Duration::from_micros(us));
        }
        // The first window has not ended: nothing complete to report yet.
        assert_eq!(h.summary_at(at(4_999)).count, 0);
        h.record_at(at(6_000), Duration::from_micros(7_000));
        let s = h.summary_at(at(9_999));
        assert_eq!((s.interval_ms, s.count, s.max_us), (5_000, 100, 100));
        assert_eq!(s.ended_unix_ms, Some(h.started_unix_ms + 5_000));
        // 50th value is 50 (bucket 48..=51), 95th 95 (92..=95), 99th 99 (96..=99), then capped at max.
        assert_eq!(s.percentiles_us, [51, 95, 99, 100, 100, 100]);
        // Next window: only the one slow call.
        let s = h.summary_at(at(10_000));
        assert_eq!((s.count, s.max_us, s.percentiles_us[0]), (1, 7_000, 7_000));
        // A window with no calls reports zeros, not the older figures.
        let s = h.summary_at(at(20_000));
        assert_eq!((s.count, s.max_us, s.percentiles_us), (0, 0, [0; 6]));
    }

    #[test]
    fn gather_finishes_when_every_part_is_dropped() {
        let (tx, rx) = std::sync::mpsc::channel();
        let g = Gather::new(3, move |v: Vec<Option<u32>>| tx.send(v).unwrap());
        let (a, b) = (g.clone(), g.clone());
        drop(g);
        a.put(0, 7);
        drop(a);
        assert!(rx.try_recv().is_err());
        drop(b); // a part that never answered
        assert_eq!(rx.recv().unwrap(), vec![Some(7), None, None]);
    }

    #[test]
    fn rss_is_read_from_proc() {
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(rss_kb() > 0);
        }
    }
}
