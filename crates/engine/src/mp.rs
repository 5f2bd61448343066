//! The multi-partition coordinator: one thread that runs multi-partition procedures,
//! multi-partition ad-hoc SQL and DDL, one at a time. For each it parks every site at the
//! transaction's place in the site's queue, sends fragments, then commits or rolls back
//! everywhere. Because every site is parked, what it reads is consistent across partitions.
//! A read of one round of fragments goes to the read workers instead (`mp_read.rs`),
//! which do not park the sites.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use lockstep_core::{Catalog, Error, HashRing, Result, ResultTable, Value};
use lockstep_procs::{CallContext, ProcOutput};
use lockstep_sql::{Deadline, ExecCtx, Fragment, Limits, Prepared, SiteAccess, SiteFn, Target};

use crate::cmdlog::Record;
use crate::ddl::{self, FsDdlEnv};
use crate::durable::Durable;
use crate::engine::Shared;
use crate::mp_cluster::{ClusterSites, RemoteReply};
use crate::mp_read::{QueuedSites, ReadJob, ReadPool};
use crate::outcome::{Outcome, Reply};
use crate::registry::{Registry, Scope, StatementRunner};
use crate::site::{MpMsg, SiteMsg};
use crate::site_queue::SiteSender;
use crate::snapshot::{self, FileEntry, SnapshotBuilder};
use crate::store::CatalogStore;
use crate::txn_id::{timestamp_micros, TxnIdGenerator};

/// Partition id the coordinator's transaction ids carry.
const MP_PARTITION: u32 = 16383;

/// Work for the coordinator.
pub enum MpWork {
    /// A procedure; one whose statements all only read is not logged.
    Proc {
        name: String,
        params: Vec<Value>,
        /// The query timeout (None: no limit).
        timeout: Option<std::time::Duration>,
        reply: Reply,
    },
    /// Planned ad-hoc statements run as one transaction; `params` bind the single statement.
    Statements {
        stmts: Vec<Arc<Prepared>>,
        params: Vec<Value>,
        timeout: Option<std::time::Duration>,
        reply: Reply,
    },
    /// DDL statements, applied in order; stops at the first failure.
    Ddl {
        statements: Vec<String>,
        reply: Reply,
    },
    /// A logged multi-partition transaction run again during recovery. Its sites already
    /// have its MpBegin in their queues, placed where their markers were in the log.
    Replay {
        txn_id: i64,
        procedure: String,
        params: Vec<Value>,
    },
    /// Recovery has fed every logged transaction: rewrite the catalog file, then answer.
    ReplayDone(Sender<()>),
    /// Sites parked at markers of a transaction the log does not hold (it was never
    /// acknowledged): let them go.
    ReleaseParked(Vec<u32>),
    /// Take a snapshot; `reply` (if any) is answered when it is complete on disk.
    Snapshot {
        reply: Option<Reply>,
    },
    /// Replace the data of every table with snapshot `id`'s, in one transaction.
    Restore {
        id: String,
        reply: Reply,
    },
    /// A site finished writing its file of snapshot `id`.
    SnapshotPart {
        id: u64,
        partition: u32,
        result: Result<FileEntry>,
    },
    /// In a cluster: serve multi-partition transaction `txn_id` for the coordinating node
    /// (`mp_cluster.rs`); `reply` answers once this node's partitions are parked.
    RemoteSession {
        txn_id: i64,
        /// The node that sent the `Begin`.
        coordinator: u32,
        reply: RemoteReply,
    },
    Shutdown,
}

/// The coordinator's ends of one site's links.
pub struct SiteLink {
    pub(crate) queue: SiteSender,
    pub to_site: Sender<MpMsg>,
    pub from_site: Receiver<Result<ResultTable>>,
}

/// Sends fragments to parked sites.
pub(crate) struct ParkedSites<'a> {
    links: &'a [SiteLink],
    ring: &'a HashRing,
    /// The transaction is one read: once it has gathered what it needs, the sites commit
    /// and go back to their queues while the coordinator joins, sorts or merges.
    release_after_reads: bool,
    /// The sites were let go early: the transaction's end sends them nothing more.
    released: bool,
}

impl ParkedSites<'_> {
    /// Sends a message to every site and gathers every answer (all of them, even after a
    /// failure, so no stale answer is left for the next transaction).
    fn send_all(&self, make: impl Fn() -> MpMsg) -> Result<Vec<ResultTable>> {
        let stopped = || Error::unavailable("a partition site has stopped");
        for l in self.links {
            l.to_site.send(make()).map_err(|_| stopped())?;
        }
        let answers: Vec<Result<ResultTable>> =
            self.links.iter().map(|l| l.from_site.recv().map_err(|_| stopped()).and_then(|r| r)).collect();
        answers.into_iter().collect()
    }
}

impl SiteAccess for ParkedSites<'_> {
    fn partition_count(&self) -> u32 {
        self.links.len() as u32
    }

    fn reads_done(&mut self) {
        if self.release_after_reads && !self.released {
            self.released = true;
            for l in self.links {
                let _ = l.to_site.send(MpMsg::Commit);
            }
        }
    }

    fn ring(&self) -> &HashRing {
        self.ring
    }

    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
        if self.released {
            return Err(Error::unexpected("a multi-partition read asked its partitions for more after letting them go"));
        }
        match target {
            Target::All => self.send_all(|| MpMsg::Fragment(f.clone())),
            Target::One(p) => {
                let l = self.links.get(p as usize).ok_or_else(|| Error::unexpected(format!("no partition {p}")))?;
                l.to_site.send(MpMsg::Fragment(f)).map_err(|_| Error::unavailable("a partition site has stopped"))?;
                Ok(vec![l.from_site.recv().map_err(|_| Error::unavailable("a partition site has stopped"))??])
            }
        }
    }
}

/// The partitions a transaction reaches: this node's, parked or (a read) through their
/// queues, or (in a cluster) the cluster's.
pub(crate) enum Sites<'a> {
    Local(ParkedSites<'a>),
    Queued(QueuedSites<'a>),
    Cluster(ClusterSites<'a>),
}

impl Sites<'_> {
    fn released(&self) -> bool {
        matches!(self, Sites::Local(s) if s.released)
    }

    fn access(&mut self) -> &mut dyn SiteAccess {
        match self {
            Sites::Local(s) => s,
            Sites::Queued(s) => s,
            Sites::Cluster(s) => s,
        }
    }
}

impl SiteAccess for Sites<'_> {
    fn partition_count(&self) -> u32 {
        match self {
            Sites::Local(s) => s.partition_count(),
            Sites::Queued(s) => s.partition_count(),
            Sites::Cluster(s) => s.partition_count(),
        }
    }
    fn ring(&self) -> &HashRing {
        match self {
            Sites::Local(s) => s.ring(),
            Sites::Queued(s) => s.ring(),
            Sites::Cluster(s) => s.ring(),
        }
    }
    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
        self.access().run(target, f)
    }
    fn run_fragment(&mut self, target: Target, fragment: Fragment) -> Result<Vec<ResultTable>> {
        self.access().run_fragment(target, fragment)
    }
    fn reads_done(&mut self) {
        self.access().reads_done()
    }
}

pub(crate) struct MpRunner<'a> {
    pub(crate) sites: Sites<'a>,
    pub(crate) ctx: ExecCtx,
}

impl StatementRunner for MpRunner<'_> {
    fn run(&mut self, p: &Arc<Prepared>, params: &[Value]) -> Result<ResultTable> {
        lockstep_sql::execute_mp(p, params, &self.ctx, &mut self.sites)
    }

    fn restart(&mut self) -> Result<()> {
        Err(Error::unexpected("a multi-partition call cannot be restarted"))
    }
}

pub struct Coordinator {
    pub(crate) shared: Arc<Shared>,
    pub(crate) links: Vec<SiteLink>,
    pub(crate) registry: Registry,
    pub(crate) catalog: Arc<Catalog>,
    pub(crate) ids: TxnIdGenerator,
    store: CatalogStore,
    env: FsDdlEnv,
    queue: Receiver<MpWork>,
    /// Reads the read workers hand back to run parked (`mp_read.rs`).
    parked_reads: (Sender<MpWork>, Receiver<MpWork>),
    /// The read workers, started at the first read they can take.
    reads: Option<ReadPool>,
    durable: Arc<Durable>,
    /// The DDL that builds the current catalog, in order (a snapshot's catalog text).
    ddl_records: Vec<String>,
    /// Recovering: sites get their MpBegin from the log, and nothing is logged again.
    replaying: bool,
    snapshot: Option<PendingSnapshot>,
    next_snapshot_id: u64,
    /// Log positions of the snapshots completed since start, oldest first. The log is cut
    /// only behind the oldest one kept on disk, so recovery can fall back to it.
    snapshot_log_seqs: std::collections::VecDeque<u64>,
    /// In a cluster: the topology (`mp_cluster::topology_fingerprint`) at which no
    /// multi-partition transaction was left undecided by a failure; None: look again.
    pub(crate) in_doubt_settled: Option<u64>,
}

/// A snapshot whose files the sites are still writing.
struct PendingSnapshot {
    id: u64,
    builder: SnapshotBuilder,
    files: Vec<Option<FileEntry>>,
    failed: Option<Error>,
    /// Sequence number of its `SnapshotTaken` record: the log before it can go.
    log_seq: Option<u64>,
    /// Taken after a log failure cleared: once complete, writes are accepted again.
    lifts_fence: bool,
    started: std::time::Instant,
    reply: Option<Reply>,
}

/// How long the coordinator waits for work before checking periodic duties.
const IDLE_TICK: std::time::Duration = std::time::Duration::from_millis(500);
/// How often a schema change waiting for a held share looks again (a warning every 100).
const HELD_SHARE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

impl Coordinator {
    pub fn new(
        shared: Arc<Shared>,
        links: Vec<SiteLink>,
        catalog: Arc<Catalog>,
        ddl_records: Vec<String>,
        store: CatalogStore,
        queue: Receiver<MpWork>,
        replaying: bool,
    ) -> Result<Self> {
        let config = &shared.config;
        let mut registry = Registry::new(Scope::Coordinator, config.lua_instruction_budget, config.lua_memory_limit_bytes)?;
        registry.rebuild(&catalog, None)?;
        let env = FsDdlEnv::new(config.procedure_dir.clone());
        let durable = shared.durable.clone();
        let next_snapshot_id = snapshot::next_snapshot_id(&snapshot::snapshots_dir(&config.data_dir));
        Ok(Coordinator {
            shared,
            links,
            registry,
            catalog,
            ids: TxnIdGenerator::new(MP_PARTITION),
            store,
            env,
            queue,
            parked_reads: crossbeam_channel::unbounded(),
            reads: None,
            durable,
            ddl_records,
            replaying,
            snapshot: None,
            next_snapshot_id,
            snapshot_log_seqs: std::collections::VecDeque::new(),
            in_doubt_settled: None,
        })
    }

    pub fn run(mut self) {
        let mut last_snapshot = std::time::Instant::now();
        let parked_reads = self.parked_reads.1.clone();
        loop {
            crossbeam_channel::select! {
                recv(self.queue) -> work => match work {
                    Ok(MpWork::Shutdown) | Err(_) => break,
                    Ok(work) => {
                        if matches!(work, MpWork::Proc { .. } | MpWork::Statements { .. } | MpWork::Ddl { .. }) {
                            self.shared.mp_call_taken();
                        }
                        self.serve(work);
                    }
                },
                recv(parked_reads) -> work => if let Ok(work) = work {
                    self.run_here(work);
                },
                default(IDLE_TICK) => self.periodic(&mut last_snapshot),
            }
        }
        // The read workers finish the reads they hold while the sites still run.
        self.reads = None;
        while let Ok(work) = parked_reads.try_recv() {
            crate::engine::fail_work(work, crate::engine::shutting_down);
        }
        if let Err(e) = self.durable.log.flush_and_sync() {
            tracing::error!("command log flush at shutdown failed: {e}");
        }
        for l in &self.links {
            let _ = l.queue.send(SiteMsg::Shutdown);
        }
    }

    /// Hands a read to the read workers, or runs the work here once the reads before it
    /// are done.
    fn serve(&mut self, work: MpWork) {
        if let Some(work) = self.hand_off_read(work) {
            self.finish_reads();
            self.run_here(work);
        }
    }

    /// Waits for the reads handed off so far and runs the ones handed back, so that what
    /// runs next comes after them, as it came after them in the queue.
    fn finish_reads(&mut self) {
        let Some(pool) = &self.reads else { return };
        pool.wait_idle();
        while let Ok(work) = self.parked_reads.1.try_recv() {
            self.run_here(work);
        }
    }

    fn run_here(&mut self, work: MpWork) {
        match work {
            MpWork::Proc { name, params, timeout, reply } => {
                let started = std::time::Instant::now();
                let read_only = self.registry.reads_only(&name);
                let record = (!read_only).then(|| Record::Mp { txn_id: 0, procedure: name.clone(), params: params.clone() });
                let outcome =
                    self.logged_transaction(None, timeout, false, record, |reg, runner, call| reg.call(&name, &params, call, runner));
                self.record(&name, started, &params, &outcome);
                self.answer(read_only, outcome, reply);
            }
            MpWork::Statements { stmts, params, timeout, reply } => {
                let started = std::time::Instant::now();
                let read_only = stmts.iter().all(|p| p.read_only);
                let one_read = read_only && stmts.len() == 1;
                let record = (!read_only).then(|| adhoc_record(&stmts, &params));
                let outcome =
                    self.logged_transaction(None, timeout, one_read, record, |_, runner, _| run_statements(runner, &stmts, &params));
                self.record(crate::stats::ADHOC_PROCEDURE, started, &params, &outcome);
                self.answer(read_only, outcome, reply);
            }
            MpWork::Ddl { statements, reply } => {
                let outcome = self.apply_ddl(&statements);
                reply(outcome);
            }
            MpWork::Replay { txn_id, procedure, params } => self.replay(txn_id, procedure, params),
            MpWork::ReplayDone(done) => {
                self.replaying = false;
                if let Err(e) = self.store.rewrite(&self.ddl_records) {
                    tracing::error!("cannot rewrite the catalog file after recovery: {e}");
                }
                let _ = done.send(());
            }
            MpWork::ReleaseParked(partitions) => {
                for p in partitions {
                    if let Some(l) = self.links.get(p as usize) {
                        let _ = l.to_site.send(MpMsg::Rollback);
                    }
                }
            }
            MpWork::Snapshot { reply } => self.start_snapshot(reply),
            MpWork::Restore { id, reply } => {
                let record = Record::Mp { txn_id: 0, procedure: "@SnapshotRestore".into(), params: vec![Value::from(id.as_str())] };
                let outcome = match self.restore_fn(&id) {
                    Ok(f) => self.logged_transaction(None, None, false, Some(record), |_, runner, _| restore(runner, f)),
                    Err(e) => Outcome::error(e),
                };
                if outcome.is_success() {
                    // The restored state gets its own snapshot, so recovery does not
                    // depend on the restored-from files staying on disk.
                    self.start_snapshot(None);
                }
                reply(outcome);
            }
            MpWork::SnapshotPart { id, partition, result } => self.snapshot_part(id, partition, result),
            MpWork::RemoteSession { txn_id, coordinator, reply } => self.remote_session(txn_id, coordinator, reply),
            MpWork::Shutdown => {}
        }
    }

    /// Hands a read to the read workers when it may run without parking the sites: a
    /// read-only call on a single node, outside recovery. Gives back what it did not take.
    fn hand_off_read(&mut self, work: MpWork) -> Option<MpWork> {
        let read = match &work {
            MpWork::Proc { name, .. } => self.registry.reads_only(name),
            MpWork::Statements { stmts, .. } => stmts.iter().all(|p| p.read_only),
            _ => false,
        };
        if !read || self.replaying || self.shared.cluster.get().is_some() {
            return Some(work);
        }
        if self.reads.is_none() {
            let queues = self.links.iter().map(|l| l.queue.clone()).collect();
            match ReadPool::start(self.shared.clone(), queues, self.parked_reads.0.clone()) {
                Ok(pool) => self.reads = Some(pool),
                Err(e) => {
                    tracing::error!("multi-partition reads run parked: {e}");
                    return Some(work);
                }
            }
        }
        let pool = self.reads.as_ref()?;
        let job = ReadJob { work, txn_id: self.ids.next_id(), catalog: self.catalog.clone() };
        pool.submit(job).err()
    }

    /// Periodic snapshots, and the snapshot that lifts the write fence once the log works.
    fn periodic(&mut self, last_snapshot: &mut std::time::Instant) {
        if let Some(hooks) = self.shared.cluster.get().cloned() {
            if !self.replaying && hooks.mp_coordinator() == Some(hooks.topology().me) {
                if let Err(why) = self.settle_in_doubt(&*hooks) {
                    tracing::info!("a multi-partition transaction left undecided is not settled yet: {why}");
                }
            }
        }
        if self.snapshot.is_some() || self.replaying {
            return;
        }
        let fence_can_lift = self.durable.fenced() && !self.durable.log.is_failed();
        let due = self.shared.config.snapshot_interval_s.is_some_and(|s| last_snapshot.elapsed().as_secs() >= s);
        if fence_can_lift || due {
            *last_snapshot = std::time::Instant::now();
            self.start_snapshot(None);
        }
    }

    /// Answers a transaction. A read was not logged: its answer waits behind the writes
    /// logged before it (see `Durable::reply_after_earlier_writes`).
    fn answer(&self, read_only: bool, outcome: Outcome, reply: Reply) {
        if read_only {
            self.durable.reply_after_earlier_writes(None, outcome, reply);
        } else {
            reply(outcome);
        }
    }

    fn record(&self, name: &str, started: std::time::Instant, params: &[Value], outcome: &Outcome) {
        record_mp_call(&self.shared, name, started, params, outcome);
    }

    /// Parks every site: live, by queueing MpBegin (with a log marker when `log_markers`);
    /// in replay, the log already queued it. Returns the transaction id.
    fn begin(&mut self, replay_id: Option<i64>, log_markers: bool) -> i64 {
        if let Some(id) = replay_id {
            self.ids.advance_past(id);
            return id;
        }
        let txn_id = self.ids.next_id();
        let log_marker = log_markers && self.durable.logging();
        // Reads' fragments go onto the queues under the same lock (see `mp_read.rs`).
        let _order = self.shared.mp_order.lock().unwrap_or_else(|p| p.into_inner());
        for l in &self.links {
            let _ = l.queue.send(SiteMsg::MpBegin { txn_id, log_marker });
        }
        if log_marker {
            // Every site has logged its marker before the transaction's own record goes in.
            for l in &self.links {
                let _ = l.from_site.recv();
            }
        }
        txn_id
    }

    fn end(&self, commit: bool) {
        for l in &self.links {
            let _ = l.to_site.send(if commit { MpMsg::Commit } else { MpMsg::Rollback });
        }
    }

    /// Runs `body` as one multi-partition transaction. A live transaction with a `record`
    /// logs it before the body runs (the sites are parked, so nothing after their markers
    /// can reach the log first) and is answered once the record is durable.
    fn logged_transaction(
        &mut self,
        replay_id: Option<i64>,
        timeout: Option<std::time::Duration>,
        one_read: bool,
        record: Option<Record>,
        body: impl FnOnce(&mut Registry, &mut MpRunner, &CallContext) -> Result<ProcOutput>,
    ) -> Outcome {
        if let Some(hooks) = self.shared.cluster.get().cloned() {
            return self.cluster_transaction(hooks, timeout, body);
        }
        let logged = record.is_some() && replay_id.is_none() && self.durable.logging();
        if logged && self.durable.fenced() {
            return Outcome::error(self.durable.fence_error());
        }
        // Nothing is logged before the body has succeeded: a body that fails (an abort, a
        // constraint, the query timeout) leaves no trace in the log, so a replay never runs
        // what was rolled back here, and the clock may stop a body as safely as an error.
        let txn_id = self.begin(replay_id, false);
        let ts = timestamp_micros(txn_id);
        let mut ctx = ExecCtx::new(txn_id, ts);
        if replay_id.is_some() {
            // It ran to its end once: no cap may stop it now (and no deadline does).
            ctx.limits = Limits::UNLIMITED;
        } else {
            ctx.deadline = timeout.and_then(Deadline::after);
        }
        let sites = ParkedSites { links: &self.links, ring: &self.shared.ring, release_after_reads: one_read, released: false };
        let mut runner = MpRunner { sites: Sites::Local(sites), ctx };
        let time_limit = crate::registry::time_limit(ctx.deadline);
        let call = CallContext { txn_id, timestamp_micros: ts, partition: None, time_limit };
        let registry = &mut self.registry;
        let mut result =
            catch_unwind(AssertUnwindSafe(|| body(registry, &mut runner, &call))).unwrap_or_else(|p| Err(Error::from_panic(&*p)));
        let released = runner.sites.released();
        // The markers, then the record, while the sites are still parked: the log never holds
        // the record without every marker, nor anything a site did after it before it.
        let mut durable = None;
        if logged && result.is_ok() {
            match self.log_markers() {
                Ok(()) => durable = Some(self.log_record(record.map(|r| with_txn_id(r, txn_id)))),
                Err(e) => result = Err(e),
            }
        }
        if !released {
            self.end(result.is_ok());
        }
        let outcome = Outcome::from_result(result);
        match durable.map(|rx| rx.recv().unwrap_or_else(|_| Err(Error::unavailable("the command log is shut down")))) {
            Some(Err(e)) => {
                self.durable.raise_fence();
                crate::durable::unknown(e)
            }
            _ => outcome,
        }
    }

    /// Has every parked site log its marker of the transaction in progress.
    fn log_markers(&self) -> Result<()> {
        let sites = ParkedSites { links: &self.links, ring: &self.shared.ring, release_after_reads: false, released: false };
        sites.send_all(|| MpMsg::LogMarker).map(|_| ())
    }

    /// Appends a record; the returned channel says when it is durable (or why not).
    fn log_record(&self, record: Option<Record>) -> Receiver<Result<u64>> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let Some(record) = record else {
            let _ = tx.send(Ok(0));
            return rx;
        };
        let ack_tx = tx.clone();
        let appended = crate::durable::with_encoded(&record, |body| {
            self.durable.append_acked(body, None, move |_, r| {
                let _ = ack_tx.send(r);
            })
        });
        if let Err(e) = appended {
            let _ = tx.send(Err(e));
        }
        rx
    }

    /// Runs a multi-partition transaction from the log again, with its original id.
    fn replay(&mut self, txn_id: i64, procedure: String, params: Vec<Value>) {
        let result = match procedure.as_str() {
            // Replaying the "@DDL" before it already put the old catalog back.
            "@DDLRevert" => Ok(()),
            "@DDL" => {
                let records: Vec<String> = params.iter().map(|v| v.to_string()).collect();
                self.install_records(&records, Some(txn_id))
            }
            "@AdHoc" => {
                let sql = params.first().map(|v| v.to_string()).unwrap_or_default();
                let params = params.get(1..).unwrap_or(&[]).to_vec();
                let prepared: Result<Vec<Arc<Prepared>>> = lockstep_sql::split_statements(&sql)
                    .and_then(|ss| ss.iter().map(|s| lockstep_sql::prepare(&self.catalog, s).map(Arc::new)).collect());
                match prepared {
                    Ok(stmts) => {
                        let o = self
                            .logged_transaction(Some(txn_id), None, false, None, |_, runner, _| run_statements(runner, &stmts, &params));
                        outcome_result(o)
                    }
                    Err(e) => {
                        // The sites are parked at this transaction's place: release them.
                        self.begin(Some(txn_id), false);
                        self.end(false);
                        Err(e)
                    }
                }
            }
            "@SnapshotRestore" => {
                let id = params.first().map(|v| v.to_string()).unwrap_or_default();
                match self.restore_fn(&id) {
                    Ok(f) => outcome_result(self.logged_transaction(Some(txn_id), None, false, None, |_, runner, _| restore(runner, f))),
                    Err(e) => {
                        self.begin(Some(txn_id), false);
                        self.end(false);
                        Err(e)
                    }
                }
            }
            name => {
                let o = self.logged_transaction(Some(txn_id), None, false, None, |reg, runner, call| reg.call(name, &params, call, runner));
                outcome_result(o)
            }
        };
        if let Err(e) = result {
            self.durable.replay_errors.record(format!("multi-partition transaction {txn_id} ({procedure}): {e}"));
        }
    }

    /// Applies DDL statements one by one, each as its own schema change on every site.
    /// Like VoltDB, each statement answers with a zero `modified_tuples` row (JDBC reads it);
    /// what was done is said in the status string.
    fn apply_ddl(&mut self, statements: &[String]) -> Outcome {
        let mut messages = Vec::with_capacity(statements.len());
        for sql in statements {
            match self.apply_one(sql) {
                Ok(msg) => messages.push(msg),
                Err(e) => return Outcome::error(e),
            }
        }
        let mut outcome = Outcome::tables(statements.iter().map(|_| ResultTable::modified(0)).collect());
        outcome.status_string = Some(messages.join("\n"));
        outcome
    }

    /// Applies one DDL statement: plan it against a copy of the catalog, check every
    /// procedure still plans, install it on every site, log it, and record it on disk.
    pub fn apply_one(&mut self, sql: &str) -> Result<String> {
        if self.durable.logging() && self.durable.fenced() {
            return Err(self.durable.fence_error());
        }
        let mut next = (*self.catalog).clone();
        let outcome = lockstep_sql::apply_ddl(&mut next, sql, &self.env)?;
        let records = ddl::records_for(sql, &self.catalog, &next);
        self.install(next, records, None)?;
        Ok(outcome.message)
    }

    /// Applies logged DDL records (replay) as one schema change.
    fn install_records(&mut self, records: &[String], replay_id: Option<i64>) -> Result<()> {
        let mut next = (*self.catalog).clone();
        let planned = records.iter().try_for_each(|r| lockstep_sql::apply_ddl(&mut next, r, &self.env).map(|_| ()));
        if let Err(e) = planned {
            // The sites are parked at this change's place in their logs: release them.
            self.begin(replay_id, false);
            self.end(false);
            return Err(e);
        }
        self.install(next, records.to_vec(), replay_id)
    }

    /// Installs a new catalog: every procedure must still plan; every site adopts it in one
    /// MP transaction (logged as "@DDL" with `records`); on failure the old one comes back.
    fn install(&mut self, next: Catalog, records: Vec<String>, replay_id: Option<i64>) -> Result<()> {
        let old = self.catalog.clone();
        let next = Arc::new(next);
        // Validate single-partition procedures on a scratch registry before any site sees them.
        // A client's DDL may not hold the coordinator for long in a module's top level; the
        // same change replayed in recovery has no limit, so a slow machine cannot fail it.
        let load_limit = replay_id.is_none().then(|| std::time::Duration::from_millis(lockstep_procs::MODULE_LOAD_TIME_LIMIT_MS));
        let config = &self.shared.config;
        let valid = Registry::new(Scope::Site, config.lua_instruction_budget, config.lua_memory_limit_bytes)
            .and_then(|mut scratch| scratch.rebuild(&next, load_limit))
            .and_then(|_| self.registry.rebuild(&next, load_limit));
        if let Err(e) = valid {
            let _ = self.registry.rebuild(&old, None);
            if replay_id.is_some() {
                // The sites are parked at this change's place in their logs: release them.
                self.begin(replay_id, false);
                self.end(false);
            }
            return Err(e);
        }
        let params: Vec<Value> = records.iter().map(|r| Value::from(r.as_str())).collect();
        let record = Record::Mp { txn_id: 0, procedure: "@DDL".into(), params };
        if let Err(e) = self.install_on_sites(next.clone(), Some(record), replay_id) {
            // Put the old catalog back, in a second MP transaction that is in the log too, so
            // a replay parks the sites for it as well (replaying "@DDL" does this step itself;
            // its "@DDLRevert" record only accounts for the markers).
            let revert = Record::Mp { txn_id: 0, procedure: "@DDLRevert".into(), params: Vec::new() };
            let _ = self.install_on_sites(old.clone(), Some(revert), replay_id);
            let _ = self.registry.rebuild(&old, None);
            return Err(e);
        }
        if !self.replaying {
            if let Err(e) = self.store.append(&records) {
                tracing::error!("the catalog file could not be written: {e}");
            }
        }
        self.ddl_records.extend(records);
        self.catalog = next.clone();
        self.shared.publish(next);
        Ok(())
    }

    /// Sends a catalog to every site inside one MP transaction, logged with `record` (its
    /// markers are logged in any case, so a replay parks the sites for it too).
    fn install_on_sites(&mut self, catalog: Arc<Catalog>, record: Option<Record>, replay_id: Option<i64>) -> Result<()> {
        if replay_id.is_none() {
            self.wait_for_held_shares();
        }
        let live = replay_id.is_none() && self.durable.logging();
        let txn_id = self.begin(replay_id, live);
        let durable = (live && record.is_some()).then(|| self.log_record(record.map(|r| with_txn_id(r, txn_id))));
        let sites = ParkedSites { links: &self.links, ring: &self.shared.ring, release_after_reads: false, released: false };
        let result = sites.send_all(|| MpMsg::Schema(catalog.clone())).map(|_| ());
        self.end(true);
        match durable.map(|rx| rx.recv().unwrap_or_else(|_| Err(Error::unavailable("the command log is shut down")))) {
            Some(Err(e)) => {
                self.durable.raise_fence();
                Err(e)
            }
            _ => result,
        }
    }

    /// In a cluster, waits until no site here holds a share undecided (settling it, if
    /// this node coordinates): such a site would not park for the schema change, and a
    /// change every node has agreed to cannot be refused here for it.
    fn wait_for_held_shares(&mut self) {
        let Some(hooks) = self.shared.cluster.get().cloned() else { return };
        let mut waited = 0u32;
        while let Err(p) = self.settle_held_shares(&*hooks) {
            if self.shared.is_shutting_down() {
                return;
            }
            if waited.is_multiple_of(100) {
                tracing::warn!("a schema change waits for partition {p}'s share of a multi-partition transaction to be settled");
            }
            waited += 1;
            std::thread::sleep(HELD_SHARE_POLL);
        }
    }

    /// The fragment that restores snapshot `id` on a partition: every table emptied, then
    /// loaded with the snapshot's rows that belong to the partition. Local-only (a bare
    /// `SiteFn`, sent with `SiteAccess::run`, not `run_fragment`): it reads this node's
    /// snapshot files, which no description could carry to another node.
    fn restore_fn(&self, id: &str) -> Result<SiteFn> {
        let root = snapshot::snapshots_dir(&self.shared.config.data_dir);
        let info = snapshot::list_snapshots(&root)?
            .into_iter()
            .find(|s| s.id.to_string() == id.trim())
            .ok_or_else(|| Error::graceful(format!("no complete snapshot {id} in {} (@SnapshotScan lists them)", root.display())))?;
        let catalog = self.catalog.clone();
        let ring = self.shared.ring.clone();
        let dir = info.dir;
        Ok(Arc::new(move |part: &mut lockstep_storage::Partition| {
            for def in catalog.tables().filter(|t| matches!(t.kind, lockstep_core::TableKind::Table)) {
                let rows: Vec<_> = part.table(def.id)?.ids().collect();
                for row in rows {
                    part.delete(def.id, row)?;
                }
            }
            // Row by row, inside the transaction: a failure rolls the restore back.
            let mut loaded = 0;
            let id = part.id();
            crate::site::read_snapshot_rows(id, &catalog, &ring, &dir, &mut |table, rows| {
                for row in rows {
                    part.insert(table, row)?;
                    loaded += 1;
                }
                Ok(())
            })?;
            Ok(ResultTable::scalar("ROWS", loaded as i64))
        }))
    }

    /// Parks every site, marks their state for a snapshot and logs where it was taken;
    /// the sites then write their files between transactions.
    fn start_snapshot(&mut self, reply: Option<Reply>) {
        if let Some(hooks) = self.shared.cluster.get().cloned() {
            if let Err(p) = self.settle_held_shares(&*hooks) {
                if let Some(reply) = reply {
                    reply(Outcome::error(Error::unavailable(format!(
                        "partition {p} waits for the outcome of a multi-partition transaction; try the snapshot again shortly"
                    ))));
                }
                return;
            }
        }
        if self.snapshot.is_some() {
            if let Some(reply) = reply {
                reply(Outcome::error(Error::graceful("a snapshot is already being written; try again when it completes")));
            }
            return;
        }
        let id = self.next_snapshot_id;
        self.next_snapshot_id += 1;
        let root = snapshot::snapshots_dir(&self.shared.config.data_dir);
        let partitions = self.links.len() as u32;
        let lifts_fence = self.durable.fenced() && !self.durable.log.is_failed();
        let txn_id = self.begin(None, false);
        let catalog_text: String = self.ddl_records.iter().map(|r| format!("{};\n", r.trim().trim_end_matches(';'))).collect();
        let marked = SnapshotBuilder::create(&root, id, txn_id, partitions, &catalog_text).and_then(|builder| {
            let writers = (0..partitions).map(|p| builder.partition_writer(p)).collect::<Result<Vec<_>>>()?;
            for (l, writer) in self.links.iter().zip(writers) {
                l.to_site.send(MpMsg::SnapshotBegin { id, writer }).map_err(|_| Error::unavailable("a partition site has stopped"))?;
            }
            let answers: Vec<Result<ResultTable>> = self
                .links
                .iter()
                .map(|l| l.from_site.recv().map_err(|_| Error::unavailable("a partition site has stopped")).and_then(|r| r))
                .collect();
            answers.into_iter().collect::<Result<Vec<_>>>()?;
            Ok(builder)
        });
        let builder = match marked {
            Ok(b) => b,
            Err(e) => {
                self.end(false);
                if let Some(reply) = reply {
                    reply(Outcome::error(e));
                }
                return;
            }
        };
        // Where the snapshot falls in the log, written while every site is parked there.
        let log_seq = if self.durable.logging() {
            match self.log_record(Some(Record::SnapshotTaken { txn_id, snapshot_id: id })).recv() {
                Ok(Ok(seq)) => Some(seq),
                _ => None,
            }
        } else {
            None
        };
        self.end(true);
        self.snapshot = Some(PendingSnapshot {
            id,
            builder,
            files: vec![None; partitions as usize],
            failed: None,
            log_seq,
            lifts_fence,
            started: std::time::Instant::now(),
            reply,
        });
    }

    /// A site's file of a snapshot is written; the last one completes the snapshot.
    fn snapshot_part(&mut self, id: u64, partition: u32, result: Result<FileEntry>) {
        let Some(pending) = self.snapshot.as_mut().filter(|p| p.id == id) else { return };
        match result {
            Ok(f) => {
                if let Some(slot) = pending.files.get_mut(partition as usize) {
                    *slot = Some(f);
                }
            }
            Err(e) => {
                pending.failed = Some(e);
                if let Some(slot) = pending.files.get_mut(partition as usize) {
                    *slot = Some(FileEntry { name: String::new(), size: 0, crc32c: 0 });
                }
            }
        }
        if pending.files.iter().any(Option::is_none) {
            return;
        }
        let Some(pending) = self.snapshot.take() else { return };
        let root = snapshot::snapshots_dir(&self.shared.config.data_dir);
        // A complete snapshot must be findable in the log (recovery refuses one that is
        // not): its `SnapshotTaken` record goes to disk before its manifest does, in async
        // mode too.
        let record_durable = if pending.log_seq.is_some() { self.durable.log.flush_and_sync() } else { Ok(()) };
        let completed = match (pending.failed, record_durable) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(())) => pending.builder.complete(pending.files.into_iter().flatten().collect()),
        };
        let outcome = match completed {
            Ok(info) => {
                if let Err(e) = snapshot::prune(&root, self.shared.config.snapshots_keep.max(1)) {
                    tracing::warn!("pruning old snapshots failed: {e}");
                }
                if let Some(seq) = pending.log_seq {
                    let keep = self.shared.config.snapshots_keep.max(1);
                    self.snapshot_log_seqs.push_back(seq);
                    while self.snapshot_log_seqs.len() > keep {
                        self.snapshot_log_seqs.pop_front();
                    }
                    let oldest_kept = self.snapshot_log_seqs.front().copied().filter(|_| self.snapshot_log_seqs.len() == keep);
                    if let Some(oldest) = oldest_kept {
                        match self.durable.log.truncate_before(oldest) {
                            Ok(n) if n > 0 => tracing::info!(segments = n, "command log truncated behind the oldest kept snapshot"),
                            Ok(_) => {}
                            Err(e) => tracing::warn!("command log truncation failed: {e}"),
                        }
                    }
                }
                if pending.lifts_fence {
                    self.durable.lower_fence();
                }
                let ms = pending.started.elapsed().as_millis() as i64;
                tracing::info!(id = info.id, bytes = info.total_bytes, ms, "snapshot complete: {}", info.dir.display());
                let mut t = ResultTable::with_columns(&[
                    ("PATH", lockstep_core::DataType::Varchar),
                    ("NONCE", lockstep_core::DataType::Varchar),
                    ("TXNID", lockstep_core::DataType::BigInt),
                    ("PARTITIONS", lockstep_core::DataType::Integer),
                    ("BYTES", lockstep_core::DataType::BigInt),
                    ("DURATION_MS", lockstep_core::DataType::BigInt),
                    ("RESULT", lockstep_core::DataType::Varchar),
                ]);
                t.push(vec![
                    Value::Str(info.dir.display().to_string().into()),
                    Value::Str(info.id.to_string().into()),
                    Value::Int(info.txn_id),
                    Value::Int(info.partitions as i64),
                    Value::Int(info.total_bytes as i64),
                    Value::Int(ms),
                    Value::Str("SUCCESS".into()),
                ]);
                Outcome::tables(vec![t])
            }
            Err(e) => {
                tracing::error!("snapshot {id} failed: {e}");
                Outcome::error(e)
            }
        };
        if let Some(reply) = pending.reply {
            reply(outcome);
        }
    }
}

/// The record of ad-hoc statements: "@AdHoc" with the SQL text and the parameters.
fn adhoc_record(stmts: &[Arc<Prepared>], params: &[Value]) -> Record {
    let sql: String = stmts.iter().map(|p| format!("{};\n", p.sql.trim().trim_end_matches(';'))).collect();
    let mut all = Vec::with_capacity(params.len() + 1);
    all.push(Value::Str(sql.into()));
    all.extend(params.iter().cloned());
    Record::Mp { txn_id: 0, procedure: "@AdHoc".into(), params: all }
}

fn with_txn_id(r: Record, id: i64) -> Record {
    match r {
        Record::Mp { procedure, params, .. } => Record::Mp { txn_id: id, procedure, params },
        other => other,
    }
}

/// Counts one multi-partition call for `@Statistics PROCEDURE`.
pub(crate) fn record_mp_call(shared: &Shared, name: &str, started: std::time::Instant, params: &[Value], outcome: &Outcome) {
    let error = (!outcome.is_success()).then(|| crate::stats::error_kind_of(outcome.status));
    let mut mp = shared.stats.mp.lock().unwrap_or_else(|p| p.into_inner());
    mp.record(name, started.elapsed(), params, crate::stats::tables_bytes(&outcome.tables), error);
}

pub(crate) fn run_statements(runner: &mut MpRunner, stmts: &[Arc<Prepared>], params: &[Value]) -> Result<ProcOutput> {
    let mut tables = Vec::with_capacity(stmts.len());
    for p in stmts {
        let ps: &[Value] = if stmts.len() == 1 { params } else { &[] };
        tables.push(runner.run(p, ps)?);
    }
    Ok(ProcOutput { tables, app_status: -128, app_status_string: None })
}

/// Runs a restore fragment everywhere; answers with the rows loaded.
fn restore(runner: &mut MpRunner, f: SiteFn) -> Result<ProcOutput> {
    let loaded: i64 = runner.sites.run(Target::All, f)?.iter().filter_map(|t| t.first_value().and_then(Value::as_i64)).sum();
    let mut t = ResultTable::with_columns(&[("RESULT", lockstep_core::DataType::Varchar), ("ROWS", lockstep_core::DataType::BigInt)]);
    t.push(vec![Value::Str("SUCCESS".into()), Value::Int(loaded)]);
    Ok(ProcOutput { tables: vec![t], app_status: -128, app_status_string: None })
}

fn outcome_result(o: Outcome) -> Result<()> {
    if o.is_success() {
        Ok(())
    } else {
        Err(Error::unexpected(o.status_string.unwrap_or_default()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::cmdlog::{self, LogReader, Record};
    use crate::{Call, Engine, EngineConfig, Outcome};
    use lockstep_core::Value;

    /// Submits one call and waits for its answer.
    pub(crate) fn run(engine: &Engine, procedure: &str, params: Vec<Value>) -> Outcome {
        let (tx, rx) = std::sync::mpsc::channel();
        engine.submit(Call { procedure: procedure.into(), params, ..Default::default() }, Box::new(move |o| tx.send(o).unwrap()));
        rx.recv().unwrap()
    }

    /// The multi-partition records in the log: (procedure, markers so far).
    fn logged_mp(dir: &std::path::Path) -> (Vec<String>, usize) {
        let mut procs = Vec::new();
        let mut markers = 0;
        for entry in LogReader::open(&cmdlog::log_dir(dir)).unwrap() {
            match entry.unwrap().record {
                Record::Mp { procedure, .. } => procs.push(procedure),
                Record::MpMarker { .. } => markers += 1,
                _ => {}
            }
        }
        (procs, markers)
    }

    /// An engine of 2 sites with table t (10 rows, names n0 and n1) and its procedures.
    pub(crate) fn start(name: &str) -> (std::sync::Arc<Engine>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("lockstep-mp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = EngineConfig::new(&dir);
        config.sites = 2;
        let e = Engine::start(config).unwrap();
        for sql in [
            "CREATE TABLE t (id INTEGER NOT NULL, name VARCHAR(8) NOT NULL, PRIMARY KEY (id))",
            "PARTITION TABLE t ON COLUMN id",
            "CREATE PROCEDURE ByName AS SELECT id FROM t WHERE name = ? ORDER BY id",
            "CREATE PROCEDURE Rename AS UPDATE t SET name = ? WHERE name = ?",
            "CREATE PROCEDURE CountLua FROM FILE 'c.lua' SOURCE $lua$local c = sql [[SELECT COUNT(*) AS n FROM t]]
             return function() return c:query() end$lua$",
            "CREATE PROCEDURE TouchLua FROM FILE 't.lua' SOURCE $lua$local c = sql [[SELECT COUNT(*) AS n FROM t]]
             local u = sql [[UPDATE t SET name = name WHERE id < 0]]
             return function() return c:query() end$lua$",
        ] {
            assert!(run(&e, "@AdHoc", vec![Value::Str(sql.into())]).is_success(), "{sql}");
        }
        for id in 0..10 {
            assert!(run(&e, "T.insert", vec![Value::Int(id), Value::Str(format!("n{}", id % 2).into())]).is_success());
        }
        (e, dir)
    }

    #[test]
    fn multi_partition_reads_are_answered_without_being_logged() {
        let (e, dir) = start("reads");
        let before = logged_mp(&dir);

        let found = run(&e, "ByName", vec![Value::Str("n1".into())]);
        let ids: Vec<Value> = found.tables[0].rows.iter().map(|r| r[0].clone()).collect();
        assert_eq!(ids, [1, 3, 5, 7, 9].map(Value::Int));
        assert!(run(&e, "@AdHoc", vec![Value::Str("SELECT COUNT(*) FROM t".into())]).is_success());
        assert_eq!(run(&e, "CountLua", vec![]).tables[0].rows, vec![vec![Value::Int(10)]]);
        assert_eq!(logged_mp(&dir), before, "a read logs neither a record nor markers");

        // A procedure that can write is logged, even when a call writes nothing; so is a
        // multi-partition write, each with one marker per site.
        assert!(run(&e, "TouchLua", vec![]).is_success());
        assert!(run(&e, "Rename", vec![Value::Str("n2".into()), Value::Str("n1".into())]).is_success());
        let (procs, markers) = logged_mp(&dir);
        assert_eq!(procs[procs.len() - 2..], ["TouchLua".to_string(), "Rename".to_string()]);
        assert_eq!(markers, before.1 + 4);
        assert_eq!(run(&e, "ByName", vec![Value::Str("n2".into())]).tables[0].rows.len(), 5);
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Reads and a write queued back to back: each read sees the state at its own place in
    /// the queue, and one read's failure touches no other.
    #[test]
    fn multi_partition_reads_see_the_state_at_their_place_in_the_queue() {
        let (e, dir) = start("order");
        let (tx, rx) = std::sync::mpsc::channel();
        let submit = |tag: usize, procedure: &str, param: &str| {
            let tx = tx.clone();
            let call = Call { procedure: procedure.into(), params: vec![Value::Str(param.into())], ..Default::default() };
            e.submit(call, Box::new(move |o| tx.send((tag, o)).unwrap()));
        };
        for tag in 0..10 {
            if tag == 5 {
                submit(tag, "@AdHoc", "SELECT id / (id - id) FROM t");
            } else {
                submit(tag, "ByName", "n1");
            }
        }
        let tx2 = tx.clone();
        let rename =
            Call { procedure: "Rename".into(), params: vec![Value::Str("n3".into()), Value::Str("n1".into())], ..Default::default() };
        e.submit(rename, Box::new(move |o| tx2.send((10, o)).unwrap()));
        for tag in 11..20 {
            submit(tag, "ByName", "n1");
        }
        let mut answers: Vec<(usize, Outcome)> = (0..20).map(|_| rx.recv().unwrap()).collect();
        answers.sort_by_key(|(tag, _)| *tag);
        for (tag, o) in &answers {
            let rows = o.tables.first().map_or(0, |t| t.rows.len());
            match tag {
                5 => assert!(!o.is_success(), "a division by zero fails"),
                10 => assert!(o.is_success(), "{:?}", o.status_string),
                0..10 => assert_eq!(rows, 5, "read {tag} is before the rename"),
                _ => assert_eq!(rows, 0, "read {tag} is after the rename"),
            }
        }
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A multi-partition Lua call that only reads stops at its query timeout, as a
    /// single-partition one does (its loop is cheap in instructions, a minute in time).
    #[test]
    fn a_multi_partition_read_stops_at_the_query_timeout() {
        let (e, dir) = start("timeout");
        let src = "CREATE PROCEDURE GrowLua FROM FILE 'g.lua' SOURCE $lua$local c = sql [[SELECT COUNT(*) AS n FROM t]]
             return function(n) local s = '' for i = 1, n do s = s .. 'x' end return #s end$lua$";
        assert!(run(&e, "@AdHoc", vec![Value::Str(src.into())]).is_success());
        let (tx, rx) = std::sync::mpsc::channel();
        let call = Call { procedure: "GrowLua".into(), params: vec![Value::Int(2_000_000)], timeout_ms: Some(300), ..Default::default() };
        e.submit(call, Box::new(move |o| tx.send(o).unwrap()));
        let o = rx.recv().unwrap();
        let msg = o.status_string.unwrap_or_default();
        assert!(msg.starts_with("A procedure call was terminated after"), "{msg}");
        // The coordinator serves the next call at once.
        assert_eq!(run(&e, "GrowLua", vec![Value::Int(100)]).tables[0].rows, vec![vec![Value::Int(100)]]);
        e.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }
}
