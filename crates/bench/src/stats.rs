//! Per-transaction-type statistics: counts, errors, aborts by reason, expected outcomes,
//! and latency in HDR histograms (microseconds), plus a per-second timeline for the chart.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Highest latency a histogram records; slower calls are clamped to it (1 minute).
pub const LATENCY_MAX_US: u64 = 60_000_000;
/// Significant figures the histograms keep (≤ 0.1% error).
const HISTOGRAM_SIGFIGS: u8 = 3;
/// Distinct abort reasons or outcomes kept per transaction type; more are folded into "other".
const REASONS_MAX: usize = 64;

/// How one logical transaction ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Done {
    /// Succeeded; `outcome` names the expected result (e.g. "hit", "miss", "accepted").
    Ok { outcome: &'static str },
    /// Rolled back or refused for a reason the workload expects (not a system error).
    Abort { reason: String },
    /// A failure of the system: lost connection, unexpected failure, wrong answer shape.
    Error { message: String },
}

impl Done {
    pub fn ok(outcome: &'static str) -> Done {
        Done::Ok { outcome }
    }
    pub fn error(message: impl Into<String>) -> Done {
        Done::Error { message: message.into() }
    }
    pub fn abort(reason: impl Into<String>) -> Done {
        Done::Abort { reason: reason.into() }
    }
}

fn histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts; failure here is a programming error.
    Histogram::new_with_bounds(1, LATENCY_MAX_US, HISTOGRAM_SIGFIGS).expect("valid histogram bounds")
}

/// Everything known about one transaction type.
#[derive(Clone, Debug)]
pub struct TxnStats {
    pub count: u64,
    pub errors: u64,
    pub aborts: BTreeMap<String, u64>,
    pub outcomes: BTreeMap<String, u64>,
    /// The first few error messages, to show the user what went wrong.
    pub error_samples: Vec<String>,
    pub latency_us: Histogram<u64>,
}

/// Error messages kept per transaction type.
const ERROR_SAMPLES_MAX: usize = 3;

impl Default for TxnStats {
    fn default() -> Self {
        TxnStats {
            count: 0,
            errors: 0,
            aborts: BTreeMap::new(),
            outcomes: BTreeMap::new(),
            error_samples: Vec::new(),
            latency_us: histogram(),
        }
    }
}

fn bump(map: &mut BTreeMap<String, u64>, key: &str) {
    if let Some(v) = map.get_mut(key) {
        *v += 1;
    } else if map.len() < REASONS_MAX {
        map.insert(key.to_string(), 1);
    } else {
        *map.entry("other".to_string()).or_insert(0) += 1;
    }
}

impl TxnStats {
    /// Records one transaction. Every transaction counts; errors are also counted apart.
    pub fn record(&mut self, latency: Duration, done: &Done) {
        self.count += 1;
        let us = (latency.as_micros() as u64).clamp(1, LATENCY_MAX_US);
        // Clamped into the histogram's range, so recording cannot fail.
        let _ = self.latency_us.record(us);
        match done {
            Done::Ok { outcome } => bump(&mut self.outcomes, outcome),
            Done::Abort { reason } => bump(&mut self.aborts, reason),
            Done::Error { message } => {
                self.errors += 1;
                if self.error_samples.len() < ERROR_SAMPLES_MAX {
                    self.error_samples.push(message.clone());
                }
            }
        }
    }

    /// The latency at quantile q (0..=1), in microseconds; 0 when nothing was recorded.
    pub fn percentile_us(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        self.latency_us.value_at_quantile(q)
    }

    pub fn merge(&mut self, other: &TxnStats) {
        self.count += other.count;
        self.errors += other.errors;
        for (k, v) in &other.aborts {
            *self.aborts.entry(k.clone()).or_insert(0) += v;
        }
        for (k, v) in &other.outcomes {
            *self.outcomes.entry(k.clone()).or_insert(0) += v;
        }
        for m in &other.error_samples {
            if self.error_samples.len() < ERROR_SAMPLES_MAX {
                self.error_samples.push(m.clone());
            }
        }
        // Same bounds on both sides, so adding cannot fail.
        let _ = self.latency_us.add(&other.latency_us);
    }
}

/// One whole second of the run, for the live line and the chart.
#[derive(Clone, Debug, PartialEq)]
pub struct TimePoint {
    /// The end of the second, from the start of the run (1, 2, 3, …).
    pub t_s: f64,
    pub tps: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub errors: u64,
}

/// What one interval of the run saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub errors: u64,
}

/// Statistics for a whole run, by transaction type, plus the current one-second interval.
#[derive(Default)]
pub struct Collector {
    inner: Mutex<Totals>,
}

#[derive(Default)]
struct Totals {
    by_type: BTreeMap<&'static str, TxnStats>,
    interval: TxnStats,
}

impl Collector {
    pub fn record(&self, name: &'static str, latency: Duration, done: &Done) {
        // A poisoned lock only means another recorder panicked; the numbers are still sound.
        let mut t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        t.by_type.entry(name).or_default().record(latency, done);
        t.interval.record(latency, done);
    }

    /// Ends the current interval, returning what it saw.
    pub fn take_interval(&self) -> Interval {
        let mut t = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let i = std::mem::take(&mut t.interval);
        Interval { count: i.count, p50_us: i.percentile_us(0.5), p99_us: i.percentile_us(0.99), errors: i.errors }
    }

    /// A copy of the per-type statistics so far.
    pub fn snapshot(&self) -> BTreeMap<&'static str, TxnStats> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).by_type.clone()
    }
}

/// All types merged into one.
pub fn total(by_type: &BTreeMap<&'static str, TxnStats>) -> TxnStats {
    let mut all = TxnStats::default();
    for s in by_type.values() {
        all.merge(s);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_latencies() {
        let mut s = TxnStats::default();
        // 1..=1000 µs once each: p50 = 500, p99 = 990, p99.9 = 999, max = 1000.
        for us in 1..=1000u64 {
            s.record(Duration::from_micros(us), &Done::ok("hit"));
        }
        assert_eq!(s.count, 1000);
        assert_eq!(s.percentile_us(0.5), 500);
        assert_eq!(s.percentile_us(0.99), 990);
        assert_eq!(s.percentile_us(0.999), 999);
        assert_eq!(s.percentile_us(1.0), 1000);
        assert_eq!(s.outcomes.get("hit"), Some(&1000));
    }

    #[test]
    fn errors_and_aborts_are_counted_by_reason() {
        let mut s = TxnStats::default();
        s.record(Duration::from_micros(10), &Done::abort("no money"));
        s.record(Duration::from_micros(10), &Done::abort("no money"));
        s.record(Duration::from_micros(10), &Done::abort("over limit"));
        s.record(Duration::from_micros(10), &Done::error("connection lost"));
        assert_eq!(s.count, 4);
        assert_eq!(s.errors, 1);
        assert_eq!(s.aborts.get("no money"), Some(&2));
        assert_eq!(s.aborts.get("over limit"), Some(&1));
        assert_eq!(s.error_samples, vec!["connection lost".to_string()]);
    }

    #[test]
    fn large_latencies_keep_three_significant_figures_and_merge() {
        let mut a = TxnStats::default();
        let mut b = TxnStats::default();
        for _ in 0..99 {
            a.record(Duration::from_micros(100), &Done::ok("ok"));
        }
        b.record(Duration::from_millis(250), &Done::ok("ok"));
        a.merge(&b);
        assert_eq!(a.count, 100);
        assert_eq!(a.percentile_us(0.99), 100);
        let max = a.percentile_us(1.0);
        assert!((250_000..=250_250).contains(&max), "{max}");
        // The interval view resets after each take.
        let c = Collector::default();
        c.record("x", Duration::from_micros(5), &Done::error("boom"));
        c.record("x", Duration::from_micros(9), &Done::ok("ok"));
        c.record("x", Duration::from_micros(7), &Done::ok("ok"));
        assert_eq!(c.take_interval(), Interval { count: 3, p50_us: 7, p99_us: 9, errors: 1 });
        assert_eq!(c.take_interval(), Interval::default());
        assert_eq!(c.snapshot()["x"].errors, 1);
        assert_eq!(c.snapshot()["x"].count, 3);
    }
}
