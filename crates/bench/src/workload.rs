//! What a benchmark workload provides to the runner, and the parallel, batched population
//! helper the workloads share.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockstep_core::Error;

use crate::conn::Conn;
use crate::rng::Rng;
use crate::stats::Done;

/// The end-of-run correctness check.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub passed: bool,
    pub details: Vec<String>,
}

impl Check {
    /// Starts a passing check; `expect` adds findings.
    pub fn new() -> Check {
        Check { passed: true, details: Vec::new() }
    }

    /// Notes `what`; a false `ok` fails the check.
    pub fn expect(&mut self, ok: bool, what: impl Into<String>) {
        let what = what.into();
        self.details.push(if ok { format!("ok: {what}") } else { format!("FAILED: {what}") });
        self.passed &= ok;
    }

    /// A check that could not run.
    pub fn failed(what: impl Into<String>) -> Check {
        let mut c = Check::new();
        c.expect(false, what);
        c
    }
}

impl Default for Check {
    fn default() -> Self {
        Check::new()
    }
}

/// A benchmark: loads and populates its app, generates transactions, checks the result.
pub trait Workload: Send + Sync + 'static {
    /// Loads the app if absent and populates it (idempotent for a populated database).
    fn setup(&self, conn: &Conn) -> impl Future<Output = Result<(), Error>> + Send;

    /// Runs one logical transaction (possibly several calls); returns its type and outcome.
    fn one<'a>(&'a self, conn: &'a Conn, rng: &'a mut Rng) -> impl Future<Output = (&'static str, Done)> + Send + 'a;

    /// A query run every `periodic_every()` during the run (charging's value-at-risk).
    fn periodic<'a>(&'a self, _conn: &'a Conn) -> impl Future<Output = Vec<(&'static str, Duration, Done)>> + Send + 'a {
        async { Vec::new() }
    }

    fn periodic_every(&self) -> Option<Duration> {
        None
    }

    /// Verifies the data after the run.
    fn check<'a>(&'a self, conn: &'a Conn) -> impl Future<Output = Check> + Send + 'a;
}

/// Calls populating one item in flight at once, per population worker.
pub const POPULATE_CONCURRENCY: usize = 256;

/// Runs `f(i)` for i in 0..total with `POPULATE_CONCURRENCY` in flight, printing progress on
/// stderr once a second. Stops at the first error.
pub async fn populate<F, Fut>(label: &str, total: u64, f: F) -> Result<(), Error>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..POPULATE_CONCURRENCY.min(total.max(1) as usize) {
        let (f, next, done) = (f.clone(), next.clone(), done.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<(), Error>(());
                }
                f(i).await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let progress = {
        let (done, label) = (done.clone(), label.to_string());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let d = done.load(Ordering::Relaxed);
                let pct = d as f64 * 100.0 / total.max(1) as f64;
                let bar = "#".repeat((pct / 5.0) as usize);
                eprintln!("populating {label}: [{bar:<20}] {d}/{total} ({pct:.0}%)");
            }
        })
    };
    let mut result = Ok(());
    while let Some(r) = tasks.join_next().await {
        let r = r.map_err(|e| Error::unexpected(format!("a population task failed: {e}"))).and_then(|r| r);
        if let Err(e) = r {
            // Stop the other workers: they would only repeat the same failure.
            next.store(total, Ordering::Relaxed);
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    progress.abort();
    if result.is_ok() {
        eprintln!("populated {label}: {total} in {:.1} s", start.elapsed().as_secs_f64());
    }
    result
}
