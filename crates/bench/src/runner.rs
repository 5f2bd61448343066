//! Drives a workload: flood (a fixed window of transactions always in flight), or open loop
//! at a target rate (latency measured from each transaction's intended send time, so
//! queueing shows instead of being hidden by a slowed-down client), with a live line on
//! stderr for each whole second of the run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

use crate::conn::Conn;
use crate::rng::Rng;
use crate::stats::{Collector, TimePoint};
use crate::workload::Workload;

/// Transactions an open-loop run lets be outstanding before the sender waits (the wait
/// still counts in the latency of what it delays).
pub const OPEN_LOOP_OUTSTANDING_MAX: usize = 200_000;
/// Longest the open-loop sender sleeps at once (it rechecks the end of the phase).
const PACER_SLEEP_MAX: Duration = Duration::from_millis(10);
/// One point of the timeline, and one live line, per this much of the run.
const MONITOR_INTERVAL: Duration = Duration::from_secs(1);

/// How to drive one phase.
#[derive(Clone, Debug)]
pub struct Phase {
    pub duration: Duration,
    /// Target rate in transactions per second; None floods.
    pub rate: Option<f64>,
    /// Transactions in flight in flood mode.
    pub window: usize,
    pub seed: u64,
    /// Added to the timeline's seconds (for consecutive steps).
    pub t_offset_s: f64,
    /// Printed at the start of each live line.
    pub label: String,
}

/// What a phase measured.
pub struct PhaseResult {
    pub stats: Arc<Collector>,
    pub timeline: Vec<TimePoint>,
    pub elapsed: Duration,
    /// Transactions the phase meant to start (open loop) or started (flood).
    pub requested: u64,
}

pub async fn run_phase<W: Workload>(w: Arc<W>, conn: &Conn, phase: &Phase) -> PhaseResult {
    let stats = Arc::new(Collector::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(Notify::new());
    let started = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + phase.duration;
    let monitor = tokio::spawn(monitor(stats.clone(), ended.clone(), start.into(), phase.t_offset_s, phase.label.clone()));
    let periodic = w.periodic_every().map(|every| {
        let (w, conn, stats, stop) = (w.clone(), conn.clone(), stats.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(every).await;
                for (name, latency, done) in w.periodic(&conn).await {
                    stats.record(name, latency, &done);
                }
            }
        })
    });
    match phase.rate {
        None => flood(&w, conn, phase, end, &stats, &started).await,
        Some(rate) => open_loop(&w, conn, phase.seed, rate, start, end, &stats, &started).await,
    }
    let elapsed = start.elapsed();
    stop.store(true, Ordering::Relaxed);
    ended.notify_one();
    if let Some(p) = periodic {
        p.abort();
    }
    let timeline = monitor.await.unwrap_or_default();
    PhaseResult { stats, timeline, elapsed, requested: started.load(Ordering::Relaxed) }
}

async fn flood<W: Workload>(w: &Arc<W>, conn: &Conn, phase: &Phase, end: Instant, stats: &Arc<Collector>, started: &Arc<AtomicU64>) {
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..phase.window.max(1) {
        let (w, conn, stats, started) = (w.clone(), conn.clone(), stats.clone(), started.clone());
        let mut rng = Rng::new(phase.seed ^ (i as u64).wrapping_mul(0x9E37_79B9));
        tasks.spawn(async move {
            // One clock read per call: the end of a call is the start of the next.
            let mut t = Instant::now();
            while t < end {
                started.fetch_add(1, Ordering::Relaxed);
                let (name, done) = w.one(&conn, &mut rng).await;
                let now = Instant::now();
                stats.record(name, now.saturating_duration_since(t), &done);
                t = now;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Calls an open loop at `rate` per second has due `elapsed` after its start: call k (from
/// 0) is due at k / rate, so the first is due at once.
fn calls_due(elapsed: Duration, rate: f64) -> u64 {
    (elapsed.as_secs_f64() * rate) as u64 + 1
}

/// Sends each call at its intended time from a thread of its own: the runtime's timers
/// tick in whole milliseconds, which would send in bursts and add up to a tick of the
/// client's own delay to every latency; a thread sleeping until the next call is due
/// wakes within tens of microseconds of it.
#[allow(clippy::too_many_arguments)]
async fn open_loop<W: Workload>(
    w: &Arc<W>,
    conn: &Conn,
    seed: u64,
    rate: f64,
    start: Instant,
    end: Instant,
    stats: &Arc<Collector>,
    started: &Arc<AtomicU64>,
) {
    let slots = Arc::new(Semaphore::new(OPEN_LOOP_OUTSTANDING_MAX));
    let runtime = tokio::runtime::Handle::current();
    let (w, conn, stats, started, pacer_slots) = (w.clone(), conn.clone(), stats.clone(), started.clone(), slots.clone());
    let pacer = tokio::task::spawn_blocking(move || {
        let mut sent: u64 = 0;
        let mut rng = Rng::new(seed);
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let due = calls_due(now.duration_since(start), rate);
            while sent < due {
                let intended = start + Duration::from_secs_f64(sent as f64 / rate);
                sent += 1;
                let Ok(permit) = runtime.block_on(pacer_slots.clone().acquire_owned()) else { return };
                let (w, conn, stats) = (w.clone(), conn.clone(), stats.clone());
                let mut task_rng = Rng::new(rng.next_u64());
                started.fetch_add(1, Ordering::Relaxed);
                runtime.spawn(async move {
                    let (name, done) = w.one(&conn, &mut task_rng).await;
                    // From the intended send time: a late send is the system's delay too.
                    stats.record(name, intended.elapsed(), &done);
                    drop(permit);
                });
            }
            let next = start + Duration::from_secs_f64(sent as f64 / rate);
            std::thread::sleep(next.saturating_duration_since(Instant::now()).min(PACER_SLEEP_MAX));
        }
    });
    let _ = pacer.await;
    // Wait for the stragglers, so the phase's numbers include them.
    let _ = slots.acquire_many(OPEN_LOOP_OUTSTANDING_MAX as u32).await;
}

/// Prints a line for each whole second of the phase and returns those seconds once `ended`
/// is notified. What is left of the last second when the phase ends (its stragglers) is
/// neither printed nor a point: as a point it would show throughput falling off a cliff at
/// the end of every run. It still counts in the run's totals.
async fn monitor(stats: Arc<Collector>, ended: Arc<Notify>, start: tokio::time::Instant, t_offset_s: f64, label: String) -> Vec<TimePoint> {
    let mut timeline = Vec::new();
    let mut last = start;
    let mut total: u64 = 0;
    let mut seconds = tokio::time::interval_at(start + MONITOR_INTERVAL, MONITOR_INTERVAL);
    loop {
        tokio::select! {
            // A second that is over is taken before the end of the phase, which may come
            // at the same instant.
            biased;
            _ = seconds.tick() => {}
            _ = ended.notified() => return timeline,
        }
        let now = tokio::time::Instant::now();
        let i = stats.take_interval();
        total += i.count;
        let secs = now.duration_since(last).as_secs_f64().max(1e-9);
        last = now;
        let t = t_offset_s + (timeline.len() + 1) as f64;
        let point = TimePoint { t_s: t, tps: i.count as f64 / secs, p50_us: i.p50_us, p99_us: i.p99_us, errors: i.errors };
        eprintln!(
            "{label}[{:>5.0}s] {:>10.0} txn/s  p50 {:>8.3} ms  p99 {:>8.3} ms  errors {:>6}  total {}",
            t,
            point.tps,
            i.p50_us as f64 / 1000.0,
            i.p99_us as f64 / 1000.0,
            i.errors,
            total
        );
        timeline.push(point);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Done;

    /// 2.5 s of calls, ten a second: two points (at 1 s and 2 s, ten calls each) and no
    /// third for the half second left when the phase ends, though its calls count.
    #[tokio::test(start_paused = true)]
    async fn the_timeline_has_a_point_for_each_whole_second_and_none_for_the_rest() {
        let stats = Arc::new(Collector::default());
        let ended = Arc::new(Notify::new());
        let start = tokio::time::Instant::now();
        let monitor = tokio::spawn(monitor(stats.clone(), ended.clone(), start, 0.0, "test ".into()));
        tokio::time::sleep(Duration::from_millis(50)).await;
        for k in 0..25u64 {
            stats.record("x", Duration::from_micros(100 + k), &Done::ok("ok"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ended.notify_one();
        let timeline = monitor.await.expect("monitor");
        let seconds: Vec<f64> = timeline.iter().map(|p| p.t_s).collect();
        assert_eq!(seconds, vec![1.0, 2.0]);
        assert_eq!(timeline.iter().map(|p| p.tps).collect::<Vec<_>>(), vec![10.0, 10.0]);
        // The first second saw 100..=109 µs: median 104 or 105, p99 109.
        assert!((104..=105).contains(&timeline[0].p50_us), "{:?}", timeline[0]);
        assert_eq!(timeline[0].p99_us, 109);
        assert_eq!(stats.snapshot()["x"].count, 25);
    }

    #[test]
    fn an_open_loop_sends_each_call_when_it_is_due_not_one_interval_later() {
        let ms = Duration::from_millis;
        // 10 calls per second: call 0 at 0 ms, call 1 at 100 ms, call 2 at 200 ms.
        assert_eq!(calls_due(ms(0), 10.0), 1);
        assert_eq!(calls_due(ms(99), 10.0), 1);
        assert_eq!(calls_due(ms(100), 10.0), 2);
        assert_eq!(calls_due(ms(250), 10.0), 3);
        assert_eq!(calls_due(Duration::from_secs(1), 50_000.0), 50_001);
    }
}
