//! Scheduled tasks (`CREATE TASK`): a thread that calls each enabled task's procedure on
//! its schedule — once, or once on every partition — as an ordinary call, so what the
//! procedure does is logged and replayed like any other call. A run does not start while
//! the task's previous run is still out. `@Statistics TASK` reads the counters here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockstep_core::cron::Cron;
use lockstep_core::{Result, TaskDef, TaskOnError, TaskRunOn, TaskSchedule};

use crate::engine::{Call, Engine};
use crate::outcome::Outcome;

/// How often the thread looks for tasks that are due: the finest grain of a schedule.
const TASK_TICK_MS: u64 = 50;

/// A task's counters since the server started (`@Statistics TASK`).
#[derive(Clone, Debug, Default)]
pub struct TaskCounters {
    /// Runs whose answers are all in.
    pub runs: i64,
    /// Procedure calls made (one per run, or one per partition per run).
    pub calls: i64,
    pub failures: i64,
    /// When the last run's answers were all in, ms since the Unix epoch (0: never).
    pub last_run_ms: i64,
    pub last_error: Option<String>,
    /// Stopped by a failure under ON ERROR STOP, until the task is enabled again.
    pub stopped: bool,
}

/// Counters by task name, shared with `@Statistics`.
#[derive(Default)]
pub struct TaskStats {
    tasks: Mutex<BTreeMap<String, TaskCounters>>,
}

impl TaskStats {
    /// Every task of the catalog with its counters and its state (ENABLED, DISABLED, or
    /// STOPPED after a failure under ON ERROR STOP).
    pub fn snapshot(&self, catalog: &lockstep_core::Catalog) -> Vec<(Arc<TaskDef>, &'static str, TaskCounters)> {
        let map = self.lock();
        catalog
            .tasks()
            .map(|t| {
                let c = map.get(&t.name).cloned().unwrap_or_default();
                let state = match (t.enabled, c.stopped) {
                    (false, _) => "DISABLED",
                    (true, true) => "STOPPED",
                    (true, false) => "ENABLED",
                };
                (t.clone(), state, c)
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, TaskCounters>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A task as the scheduler follows it.
struct Scheduled {
    def: Arc<TaskDef>,
    /// When it runs next, µs since the Unix epoch; None while a DELAY task waits for its
    /// run to end, or for a cron schedule that never fires.
    next: Option<i64>,
    run: Arc<Mutex<Run>>,
}

/// One run, filled in as the answers arrive.
#[derive(Default)]
struct Run {
    waiting: usize,
    /// When the last run ended (µs), for DELAY.
    ended: Option<i64>,
}

fn now_micros() -> i64 {
    crate::sysprocs::now_millis().saturating_mul(1000)
}

/// When `def` first runs after it appears (or is enabled) at `now`.
fn first_run(def: &TaskDef, now: i64) -> Option<i64> {
    match &def.schedule {
        TaskSchedule::Every { millis } | TaskSchedule::Delay { millis } => Some(now.saturating_add(millis.saturating_mul(1000))),
        TaskSchedule::Cron(text) => Cron::parse(text).ok().and_then(|c| c.next_after(now)),
        // A Java scheduler class: never enabled, so never run (see ddl_task.rs).
        TaskSchedule::FromClass(_) => None,
    }
}

/// Starts the task thread; it stops when the engine shuts down.
pub fn start(engine: &Arc<Engine>) -> Result<std::thread::JoinHandle<()>> {
    let weak = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("tasks".into())
        .spawn(move || run(weak))
        .map_err(|e| lockstep_core::Error::unexpected(format!("cannot start the task thread: {e}")))
}

fn run(engine: Weak<Engine>) {
    let mut tasks: BTreeMap<String, Scheduled> = BTreeMap::new();
    loop {
        std::thread::sleep(Duration::from_millis(TASK_TICK_MS));
        let Some(engine) = engine.upgrade() else { return };
        if engine.shared().is_shutting_down() {
            return;
        }
        let catalog = engine.catalog();
        tasks.retain(|name, _| catalog.task(name).is_some());
        let now = now_micros();
        for def in catalog.tasks() {
            let key = def.name.to_ascii_lowercase();
            // A new definition (created, altered, enabled again) starts afresh.
            if tasks.get(&key).is_none_or(|s| !Arc::ptr_eq(&s.def, def)) {
                engine.shared().stats.tasks.lock().entry(def.name.clone()).or_default().stopped = false;
                tasks.insert(key.clone(), Scheduled { def: def.clone(), next: first_run(def, now), run: Arc::default() });
            }
            let Some(task) = tasks.get_mut(&key) else { continue };
            if !def.enabled || engine.shared().stats.tasks.lock().get(&def.name).is_some_and(|c| c.stopped) {
                continue;
            }
            let (busy, ended) = task.run.lock().map(|r| (r.waiting > 0, r.ended)).unwrap_or((true, None));
            if busy {
                continue;
            }
            if let (TaskSchedule::Delay { millis }, None, Some(ended)) = (&def.schedule, task.next, ended) {
                task.next = Some(ended.saturating_add(millis.saturating_mul(1000)));
            }
            if task.next.is_some_and(|at| now >= at) {
                task.next = match &def.schedule {
                    // Runs missed while the last one was out are skipped, not made up in a burst.
                    TaskSchedule::Every { millis } => task.next.map(|at| (at + millis * 1000).max(now + 1)),
                    TaskSchedule::Delay { .. } | TaskSchedule::FromClass(_) => None,
                    TaskSchedule::Cron(text) => Cron::parse(text).ok().and_then(|c| c.next_after(now)),
                };
                start_run(&engine, def, &task.run);
            }
        }
    }
}

/// Sends one run's calls (in a cluster, only those for what this node leads or
/// coordinates); counts them into the task's statistics once all are answered.
fn start_run(engine: &Arc<Engine>, def: &Arc<TaskDef>, run: &Arc<Mutex<Run>>) {
    let destinations = engine.background_destinations(def.run_on == TaskRunOn::Partitions);
    if destinations.is_empty() {
        return;
    }
    let calls = destinations.len() as i64;
    if let Ok(mut r) = run.lock() {
        r.waiting = destinations.len();
    }
    // The failures of this run, gathered until its last answer.
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    for destination in destinations {
        let call =
            Call { procedure: def.procedure.clone(), params: def.args.clone(), partition_destination: destination, ..Call::default() };
        let (run, failures, engine2, def) = (run.clone(), failures.clone(), engine.clone(), def.clone());
        engine.submit(
            call,
            Box::new(move |o: Outcome| {
                if !o.is_success() {
                    let e = o.status_string.clone().unwrap_or_else(|| format!("status {}", o.status));
                    failures.lock().unwrap_or_else(|e| e.into_inner()).push(e);
                }
                let mut r = run.lock().unwrap_or_else(|e| e.into_inner());
                r.waiting -= 1;
                if r.waiting > 0 {
                    return;
                }
                r.ended = Some(now_micros());
                let failed = std::mem::take(&mut *failures.lock().unwrap_or_else(|e| e.into_inner()));
                finish_run(&engine2, &def, calls, failed);
            }),
        );
    }
}

fn finish_run(engine: &Engine, def: &TaskDef, calls: i64, failed: Vec<String>) {
    let mut map = engine.shared().stats.tasks.lock();
    let c = map.entry(def.name.clone()).or_default();
    c.runs += 1;
    c.calls += calls;
    c.last_run_ms = crate::sysprocs::now_millis();
    c.failures += failed.len() as i64;
    let Some(first) = failed.into_iter().next() else { return };
    match def.on_error {
        TaskOnError::Log => tracing::warn!("task {}: {} failed: {first}", def.name, def.procedure),
        TaskOnError::Ignore => {}
        TaskOnError::Stop => {
            tracing::warn!("task {} stopped: {} failed: {first} (ALTER TASK {} ENABLE starts it again)", def.name, def.procedure, def.name);
            c.stopped = true;
        }
    }
    c.last_error = Some(first);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(schedule: TaskSchedule) -> TaskDef {
        TaskDef {
            name: "T".into(),
            schedule,
            procedure: "@Ping".into(),
            args: vec![],
            run_on: TaskRunOn::Database,
            on_error: TaskOnError::Log,
            enabled: true,
        }
    }

    #[test]
    fn first_runs_follow_the_schedule() {
        let now = 1_700_000_000_000_000;
        assert_eq!(first_run(&task(TaskSchedule::Every { millis: 1500 }), now), Some(now + 1_500_000));
        assert_eq!(first_run(&task(TaskSchedule::Delay { millis: 20 }), now), Some(now + 20_000));
        // 1_700_000_000 s is 22:13:20 UTC: the next whole minute is 40 s later.
        assert_eq!(first_run(&task(TaskSchedule::Cron("0 * * * * *".into())), now), Some(now + 40_000_000));
    }
}
