//! Multi-partition reads that do not park the sites. A read-only multi-partition call
//! whose work is one round of fragments (one statement reading every partition, say a
//! lookup by a column that is not the partitioning key) is handed by the coordinator to a
//! pool of read workers. A worker puts the round's fragment on every site's queue, as an
//! ordinary message, and goes on waiting for the answers while the sites keep running
//! their single-partition calls; the coordinator meanwhile starts the next transaction.
//!
//! Why it stays serializable: the coordinator parks the sites for a transaction that
//! writes by putting its `MpBegin` on every queue, and a worker puts a read's fragments on
//! every queue, both while holding `Shared::mp_order`. So every site sees reads and
//! multi-partition writes in the same order, and a read sees each such write everywhere or
//! nowhere. A read that needs a second round (a procedure that runs two statements, a
//! statement that asks the partitions twice) could see a write between its rounds: it
//! stops at the second round and goes back to the coordinator, which runs it parked, as
//! before. So does a read that reaches a site whose catalog changed since it was planned.
//!
//! Calls keep their order: before the coordinator runs anything itself it waits until the
//! reads handed off before it have finished (running the ones handed back first), so a
//! write never overtakes a read queued ahead of it, nor a read a write.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use lockstep_core::{Catalog, Error, HashRing, Result, ResultTable};
use lockstep_procs::{CallContext, ProcOutput};
use lockstep_sql::{Deadline, ExecCtx, SiteAccess, SiteFn, Target};

use crate::engine::Shared;
use crate::mp::{record_mp_call, run_statements, MpRunner, MpWork, Sites};
use crate::outcome::{Outcome, Reply};
use crate::registry::{Registry, Scope};
use crate::site::{ReadAnswer, SiteMsg};
use crate::site_queue::SiteSender;
use crate::txn_id::timestamp_micros;

/// Read workers: how many multi-partition reads wait for their sites at once. Each holds
/// its own Lua state. A read waits about as long as a site's queue takes to drain (a
/// millisecond under a flood), so 16 workers allow some 16,000 reads a second.
pub const MP_READ_WORKERS: usize = 16;
/// Reads handed to the pool and not yet taken by a worker; beyond it the coordinator waits
/// (clients' calls are bounded before that, by `MP_QUEUE_CALLS_MAX`).
const MP_READ_QUEUE_MAX: usize = 1024;

/// A read for a worker: the call, its transaction id (for `NOW` and the like) and the
/// catalog it was accepted under.
pub(crate) struct ReadJob {
    pub work: MpWork,
    pub txn_id: i64,
    pub catalog: Arc<Catalog>,
}

/// The workers; dropping the pool stops them once they finish what they hold.
pub(crate) struct ReadPool {
    jobs: Option<Sender<ReadJob>>,
    threads: Vec<JoinHandle<()>>,
    in_flight: Arc<InFlight>,
}

/// Reads handed to the pool and not yet answered or handed back.
#[derive(Default)]
struct InFlight {
    count: Mutex<usize>,
    none: Condvar,
}

impl InFlight {
    fn add(&self) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }

    fn done(&self) {
        let mut n = self.count.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.none.notify_all();
        }
    }

    fn wait_none(&self) {
        let mut n = self.count.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            n = self.none.wait(n).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl ReadPool {
    /// Starts the workers. A read that must run parked goes back to the coordinator on
    /// `parked`.
    pub(crate) fn start(shared: Arc<Shared>, queues: Vec<SiteSender>, parked: Sender<MpWork>) -> Result<ReadPool> {
        let (tx, rx) = crossbeam_channel::bounded::<ReadJob>(MP_READ_QUEUE_MAX);
        let queues: Arc<[SiteSender]> = queues.into();
        let in_flight = Arc::new(InFlight::default());
        let mut threads = Vec::with_capacity(MP_READ_WORKERS);
        for i in 0..MP_READ_WORKERS {
            let (shared, queues, parked, jobs, in_flight) = (shared.clone(), queues.clone(), parked.clone(), rx.clone(), in_flight.clone());
            // A Lua state cannot move between threads: the worker is built on its own.
            let thread = std::thread::Builder::new()
                .name(format!("mp-read-{i}"))
                .spawn(move || ReadWorker { shared, queues, parked, registry: None }.run(jobs, &in_flight))
                .map_err(|e| Error::graceful(format!("cannot start a multi-partition read worker: {e}")))?;
            threads.push(thread);
        }
        Ok(ReadPool { jobs: Some(tx), threads, in_flight })
    }

    /// Waits until every read handed to the pool was answered or handed back.
    pub(crate) fn wait_idle(&self) {
        self.in_flight.wait_none();
    }

    /// Hands a read to the workers (waits while `MP_READ_QUEUE_MAX` are queued).
    pub(crate) fn submit(&self, job: ReadJob) -> std::result::Result<(), MpWork> {
        let Some(jobs) = &self.jobs else { return Err(job.work) };
        self.in_flight.add();
        jobs.send(job).map_err(|e| {
            self.in_flight.done();
            e.0.work
        })
    }
}

impl Drop for ReadPool {
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

struct ReadWorker {
    shared: Arc<Shared>,
    queues: Arc<[SiteSender]>,
    parked: Sender<MpWork>,
    /// Procedures compiled for the catalog version it carries.
    registry: Option<(u64, Registry)>,
}

impl ReadWorker {
    fn run(mut self, jobs: Receiver<ReadJob>, in_flight: &InFlight) {
        while let Ok(job) = jobs.recv() {
            self.serve(job);
            in_flight.done();
        }
    }

    fn serve(&mut self, job: ReadJob) {
        let ReadJob { work, txn_id, catalog } = job;
        let started = std::time::Instant::now();
        match work {
            MpWork::Proc { name, params, timeout, reply } => {
                let registry = match registry_for(&mut self.registry, &self.shared, &catalog) {
                    Ok(r) => r,
                    Err(e) => return reply(Outcome::error(e)),
                };
                let body = |runner: &mut MpRunner, call: &CallContext| registry.call(&name, &params, call, runner);
                match attempt(&self.shared, &self.queues, catalog.version, txn_id, timeout, body) {
                    Some(outcome) => self.answer(&name, started, &params, outcome, reply),
                    None => self.run_parked(MpWork::Proc { name, params, timeout, reply }),
                }
            }
            MpWork::Statements { stmts, params, timeout, reply } => {
                let body = |runner: &mut MpRunner, _: &CallContext| run_statements(runner, &stmts, &params);
                match attempt(&self.shared, &self.queues, catalog.version, txn_id, timeout, body) {
                    Some(outcome) => self.answer(crate::stats::ADHOC_PROCEDURE, started, &params, outcome, reply),
                    None => self.run_parked(MpWork::Statements { stmts, params, timeout, reply }),
                }
            }
            other => self.run_parked(other),
        }
    }

    /// Counts the call and answers it. It was not logged: the answer waits behind the
    /// writes logged before it, as a parked read's does.
    fn answer(&self, name: &str, started: std::time::Instant, params: &[lockstep_core::Value], outcome: Outcome, reply: Reply) {
        record_mp_call(&self.shared, name, started, params, &outcome);
        self.shared.durable.reply_after_earlier_writes(None, outcome, reply);
    }

    fn run_parked(&self, work: MpWork) {
        if let Err(e) = self.parked.send(work) {
            crate::engine::fail_work(e.0, crate::engine::shutting_down);
        }
    }
}

/// The procedures of `catalog`, compiled again in `slot` when the catalog changed.
fn registry_for<'a>(slot: &'a mut Option<(u64, Registry)>, shared: &Shared, catalog: &Catalog) -> Result<&'a mut Registry> {
    if slot.as_ref().is_none_or(|(v, _)| *v != catalog.version) {
        let config = &shared.config;
        let mut registry = Registry::new(Scope::Coordinator, config.lua_instruction_budget, config.lua_memory_limit_bytes)?;
        registry.rebuild(catalog, None)?;
        *slot = Some((catalog.version, registry));
    }
    match slot {
        Some((_, r)) => Ok(r),
        None => Err(Error::unexpected("no procedures compiled")),
    }
}

/// Runs `body` as a read over queued fragments. None: it must run parked (a second round,
/// or a site whose catalog changed); whatever it computed is dropped.
fn attempt(
    shared: &Shared,
    queues: &[SiteSender],
    catalog_version: u64,
    txn_id: i64,
    timeout: Option<std::time::Duration>,
    body: impl FnOnce(&mut MpRunner, &CallContext) -> Result<ProcOutput>,
) -> Option<Outcome> {
    let ts = timestamp_micros(txn_id);
    let mut ctx = ExecCtx::new(txn_id, ts);
    ctx.deadline = timeout.and_then(Deadline::after);
    let sites = QueuedSites { queues, ring: &shared.ring, order: &shared.mp_order, catalog_version, rounds: 0, must_park: false };
    let mut runner = MpRunner { sites: Sites::Queued(sites), ctx };
    let time_limit = crate::registry::time_limit(ctx.deadline);
    let call = CallContext { txn_id, timestamp_micros: ts, partition: None, time_limit };
    let result = catch_unwind(AssertUnwindSafe(|| body(&mut runner, &call))).unwrap_or_else(|p| Err(Error::from_panic(&*p)));
    match runner.sites {
        Sites::Queued(QueuedSites { must_park: true, .. }) => None,
        _ => Some(Outcome::from_result(result)),
    }
}

/// The sites as a read over queued fragments sees them: one round, then it must park.
pub(crate) struct QueuedSites<'a> {
    queues: &'a [SiteSender],
    ring: &'a HashRing,
    order: &'a Mutex<()>,
    catalog_version: u64,
    rounds: u32,
    must_park: bool,
}

impl QueuedSites<'_> {
    fn park(&mut self, why: &str) -> Error {
        self.must_park = true;
        Error::graceful(format!("this multi-partition read runs again with its partitions parked: {why}"))
    }
}

impl SiteAccess for QueuedSites<'_> {
    fn partition_count(&self) -> u32 {
        self.queues.len() as u32
    }

    fn ring(&self) -> &HashRing {
        self.ring
    }

    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
        if self.must_park {
            return Err(self.park("it was stopped"));
        }
        if self.rounds > 0 {
            return Err(self.park("it asks the partitions more than once"));
        }
        self.rounds += 1;
        let targets: Vec<usize> = match target {
            Target::All => (0..self.queues.len()).collect(),
            Target::One(p) if (p as usize) < self.queues.len() => vec![p as usize],
            Target::One(p) => return Err(Error::unexpected(format!("no partition {p}"))),
        };
        let mut answers = Vec::with_capacity(targets.len());
        {
            // Every site gets the fragment at the same place relative to multi-partition
            // writes (see the top of this file).
            let _order = self.order.lock().unwrap_or_else(|p| p.into_inner());
            for &p in &targets {
                let (tx, rx) = crossbeam_channel::bounded(1);
                let msg = SiteMsg::Read { catalog_version: self.catalog_version, f: f.clone(), reply: tx };
                self.queues[p].send(msg).map_err(|_| Error::unavailable("a partition site has stopped"))?;
                answers.push(rx);
            }
        }
        let mut tables = Vec::with_capacity(answers.len());
        let mut stale = false;
        for rx in answers {
            // Every answer is gathered, even after a failure, so no site is left writing
            // to a channel nobody reads (it would not block: the channel has room for one).
            match rx.recv() {
                Ok(ReadAnswer::Done(r)) => tables.push(r),
                Ok(ReadAnswer::Stale) => stale = true,
                Err(_) => tables.push(Err(Error::unavailable("a partition site has stopped"))),
            }
        }
        if stale {
            return Err(self.park("the schema changed since it was planned"));
        }
        tables.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use lockstep_core::{ResultTable, Value};

    use crate::mp::tests::{run, start};
    use crate::site::{ReadAnswer, SiteMsg};
    use crate::{Call, Outcome};

    /// A bound on waiting for something that would never come if the feature broke.
    const PATIENCE: Duration = Duration::from_secs(30);

    fn call(procedure: &str, params: Vec<Value>) -> Call {
        Call { procedure: procedure.into(), params, ..Default::default() }
    }

    fn text(s: &str) -> Value {
        Value::Str(s.into())
    }

    /// Keeps site `p` busy until the returned sender is dropped or sent to.
    fn hold_site(e: &crate::Engine, p: u32) -> std::sync::mpsc::Sender<()> {
        let (release, held) = channel::<()>();
        e.shared().send_site(
            p,
            SiteMsg::Inspect(Box::new(move |_| {
                let _ = held.recv_timeout(PATIENCE);
            })),
        );
        release
    }

    /// Parked, a read would hold partition 1 until partition 0 (here kept busy) answered
    /// too; through the queues, partition 1 answers its fragment and goes on.
    #[test]
    fn a_read_does_not_hold_up_the_partitions_that_answered_it() {
        let (e, dir) = start("queued");
        let (hold_0, hold_1) = (hold_site(&e, 0), hold_site(&e, 1));
        let queued = |p: usize| e.shared().sites[p].len() > 0;
        let deadline = std::time::Instant::now() + PATIENCE;
        let wait_until = |what: &str, done: &dyn Fn() -> bool| {
            while !done() {
                assert!(std::time::Instant::now() < deadline, "{what}");
                std::thread::yield_now();
            }
        };
        wait_until("the sites took the holds", &|| !queued(0) && !queued(1));
        let (read_tx, read_rx) = channel();
        e.submit(call("ByName", vec![text("n1")]), Box::new(move |o| read_tx.send(o).unwrap()));
        // Partition 1's queue holds the read's message (a fragment, or a parking MpBegin)
        // before the single-partition calls below go in behind it.
        wait_until("the read reached partition 1", &|| queued(1));
        let (sp_tx, sp_rx) = channel();
        for id in 0..10 {
            let tx = sp_tx.clone();
            e.submit(call("T.select", vec![Value::Int(id)]), Box::new(move |o: Outcome| tx.send(o.is_success()).unwrap()));
        }
        hold_1.send(()).unwrap();
        // Those on partition 1 are answered while partition 0 is still busy and the read
        // waits for it.
        assert_eq!(sp_rx.recv_timeout(PATIENCE), Ok(true), "a single-partition call behind the read was answered");
        assert!(read_rx.try_recv().is_err(), "the read still waits for partition 0");
        hold_0.send(()).unwrap();
        let read = read_rx.recv_timeout(PATIENCE).unwrap();
        let ids: Vec<Value> = read.tables[0].rows.iter().map(|r| r[0].clone()).collect();
        assert_eq!(ids, [1, 3, 5, 7, 9].map(Value::Int));
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Reads and multi-partition writes queued back to back, many at once: each read sees
    /// every write queued before it, everywhere, and none queued after it.
    #[test]
    fn reads_see_exactly_the_writes_queued_before_them() {
        let (e, dir) = start("interleaved");
        let setup = "CREATE PROCEDURE Spread AS SELECT MIN(LENGTH(name)), MAX(LENGTH(name)) FROM t";
        assert!(run(&e, "@AdHoc", vec![text(setup)]).is_success());
        let grow = "CREATE PROCEDURE Grow AS UPDATE t SET name = name || 'x' WHERE LENGTH(name) < 8";
        assert!(run(&e, "@AdHoc", vec![text(grow)]).is_success());
        let (tx, rx) = channel();
        let mut writes = 0;
        let mut reads = Vec::new();
        for i in 0..120 {
            let tx = tx.clone();
            if i % 20 == 19 {
                writes += 1;
                e.submit(call("Grow", vec![]), Box::new(move |o: Outcome| tx.send((None, o)).unwrap()));
            } else {
                reads.push(writes);
                let tag = Some(reads.len() - 1);
                e.submit(call("Spread", vec![]), Box::new(move |o: Outcome| tx.send((tag, o)).unwrap()));
            }
        }
        for _ in 0..120 {
            let (tag, o) = rx.recv_timeout(PATIENCE).unwrap();
            assert!(o.is_success(), "{:?}", o.status_string);
            let Some(i) = tag else { continue };
            let row = &o.tables[0].rows[0];
            // Names start 2 long and grow by one per write, on every partition at once.
            let expected = Value::Int(2 + reads[i] as i64);
            assert_eq!((&row[0], &row[1]), (&expected, &expected), "read {i}");
        }
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A read that asks the partitions twice runs parked, and answers both statements.
    #[test]
    fn a_read_of_two_rounds_runs_parked_and_answers_right() {
        let (e, dir) = start("rounds");
        let src = "CREATE PROCEDURE TwoLua FROM FILE 'two.lua' SOURCE $lua$local c = sql [[SELECT COUNT(*) AS n FROM t]]
             local b = sql [[SELECT id FROM t WHERE name = ? ORDER BY id]]
             return function() return c:query(), b:query('n0') end$lua$";
        assert!(run(&e, "@AdHoc", vec![text(src)]).is_success());
        let o = run(&e, "TwoLua", vec![]);
        assert!(o.is_success(), "{:?}", o.status_string);
        assert_eq!(o.tables[0].rows, vec![vec![Value::Int(10)]]);
        assert_eq!(o.tables[1].rows.iter().map(|r| r[0].clone()).collect::<Vec<_>>(), [0, 2, 4, 6, 8].map(Value::Int));
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A fragment planned against another catalog version is not run.
    #[test]
    fn a_site_refuses_a_read_planned_against_another_catalog() {
        let (e, dir) = start("stale");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let f: lockstep_sql::SiteFn = std::sync::Arc::new(|_| Ok(ResultTable::default()));
        e.shared().send_site(0, SiteMsg::Read { catalog_version: u64::MAX, f, reply: tx });
        assert!(matches!(rx.recv_timeout(PATIENCE), Ok(ReadAnswer::Stale)));
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }
}
