//! A partition site: one thread that owns one partition's data and runs its transactions
//! one after another, with no locks. Single-partition calls arrive on its queue; a
//! multi-partition transaction parks the site at its place in the queue and feeds it
//! fragments until the coordinator commits or rolls back.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use lockstep_core::{Catalog, Error, HashRing, ResultTable, Result, Value};
use lockstep_procs::{CallContext, ProcOutput};
use lockstep_sql::{ExecCtx, Prepared, SiteFn};
use lockstep_storage::Partition;

use crate::config::EngineConfig;
use crate::export::ExportWriter;
use crate::outcome::{Outcome, Reply};
use crate::registry::{Registry, Scope, StatementRunner};
use crate::stats::{self, ProcStats};
use crate::txn_id::{timestamp_micros, TxnIdGenerator};

/// Times an idle site yields its core before it blocks on its queue.
const IDLE_YIELDS_BEFORE_SLEEP: u32 = 200;

/// What a single-partition call runs.
pub enum SpWork {
    /// A procedure of the site's registry.
    Proc(String),
    /// One planned ad-hoc statement.
    Statement(Arc<Prepared>),
}

/// A message on a site's queue.
pub enum SiteMsg {
    Call { work: SpWork, params: Vec<Value>, reply: Reply },
    /// Enter the multi-partition transaction `txn_id`: serve the MP link until it ends.
    MpBegin { txn_id: i64 },
    /// Run a closure on the site's partition outside any transaction (statistics).
    Inspect(Box<dyn FnOnce(&Partition) + Send>),
    /// Run a closure on the partition and the site's procedure counters (`@Statistics`).
    Stats(StatsFn),
    /// Flush exported rows to their files, then run the closure (`@Quiesce`).
    Quiesce(Box<dyn FnOnce() + Send>),
    Shutdown,
}

/// Reads a site's partition and procedure counters for `@Statistics`.
pub type StatsFn = Box<dyn FnOnce(&Partition, &ProcStats) + Send>;

/// A message from the MP coordinator to a parked site.
pub enum MpMsg {
    Fragment(SiteFn),
    /// Adopt a new catalog (DDL); replies Ok or the reason the site cannot.
    Schema(Arc<Catalog>),
    Commit,
    Rollback,
}

/// Runs statements on the site's own partition.
struct LocalRunner<'a> {
    part: &'a mut Partition,
    ctx: ExecCtx,
}

impl StatementRunner for LocalRunner<'_> {
    fn run(&mut self, p: &Arc<Prepared>, params: &[Value]) -> Result<ResultTable> {
        lockstep_sql::execute(p, params, &self.ctx, self.part)
    }
}

pub struct Site {
    id: u32,
    part: Partition,
    registry: Registry,
    catalog: Arc<Catalog>,
    ring: HashRing,
    ids: TxnIdGenerator,
    export: ExportWriter,
    queue: Receiver<SiteMsg>,
    mp_in: Receiver<MpMsg>,
    mp_out: Sender<Result<ResultTable>>,
    stats: ProcStats,
}

impl Site {
    pub fn new(
        id: u32,
        config: &EngineConfig,
        catalog: Arc<Catalog>,
        ring: HashRing,
        queue: Receiver<SiteMsg>,
        mp_in: Receiver<MpMsg>,
        mp_out: Sender<Result<ResultTable>>,
    ) -> Result<Site> {
        let mut part = Partition::new(id);
        part.apply_schema(&catalog, &ring)?;
        let mut registry = Registry::new(Scope::Site, config.lua_instruction_budget, config.lua_memory_limit_bytes)?;
        registry.rebuild(&catalog)?;
        Ok(Site {
            id,
            part,
            registry,
            catalog,
            ring,
            ids: TxnIdGenerator::new(id),
            export: ExportWriter::new(&config.data_dir, id),
            queue,
            mp_in,
            mp_out,
            stats: ProcStats::default(),
        })
    }

    /// The site's loop: runs until Shutdown or until every sender is gone.
    pub fn run(mut self) {
        loop {
            let msg = match self.queue.try_recv() {
                Ok(m) => m,
                Err(_) => {
                    // Idle: push exported rows out before sleeping.
                    if let Err(e) = self.export.flush() {
                        tracing::error!(site = self.id, "export flush failed: {e}");
                    }
                    match self.wait_for_work() {
                        Some(m) => m,
                        None => break,
                    }
                }
            };
            match msg {
                SiteMsg::Call { work, params, reply } => {
                    let outcome = self.run_single(work, &params);
                    reply(outcome);
                }
                SiteMsg::MpBegin { txn_id } => self.serve_mp(txn_id),
                SiteMsg::Inspect(f) => f(&self.part),
                SiteMsg::Stats(f) => f(&self.part, &self.stats),
                SiteMsg::Quiesce(done) => {
                    if let Err(e) = self.export.flush() {
                        tracing::error!(site = self.id, "export flush failed: {e}");
                    }
                    done();
                }
                SiteMsg::Shutdown => break,
            }
        }
        if let Err(e) = self.export.flush() {
            tracing::error!(site = self.id, "export flush failed: {e}");
        }
    }

    /// Waits for the next message. Work usually arrives within microseconds of the last
    /// answer, so the site yields the core a few times before it sleeps: waking a sleeping
    /// thread costs far more (futex and an inter-processor interrupt) than a yield.
    fn wait_for_work(&self) -> Option<SiteMsg> {
        for _ in 0..IDLE_YIELDS_BEFORE_SLEEP {
            match self.queue.try_recv() {
                Ok(m) => return Some(m),
                Err(crossbeam_channel::TryRecvError::Empty) => std::thread::yield_now(),
                Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
            }
        }
        self.queue.recv().ok()
    }

    fn run_single(&mut self, work: SpWork, params: &[Value]) -> Outcome {
        let txn_id = self.ids.next();
        let ctx = ExecCtx { txn_id, timestamp_micros: timestamp_micros(txn_id) };
        let started = std::time::Instant::now();
        self.part.begin();
        let result = catch_unwind(AssertUnwindSafe(|| -> Result<ProcOutput> {
            let mut runner = LocalRunner { part: &mut self.part, ctx };
            match &work {
                SpWork::Proc(name) => {
                    let call = CallContext { txn_id, timestamp_micros: ctx.timestamp_micros, partition: Some(self.id) };
                    self.registry.call(name, params, &call, &mut runner)
                }
                SpWork::Statement(p) => {
                    let t = runner.run(p, params)?;
                    Ok(ProcOutput { tables: vec![t], app_status: -128, app_status_string: None })
                }
            }
        }))
        .unwrap_or_else(|panic| Err(Error::unexpected(format!("internal error: {}", panic_message(&panic)))));
        let name = match &work {
            SpWork::Proc(name) => name.as_str(),
            SpWork::Statement(_) => stats::ADHOC_PROCEDURE,
        };
        let result_bytes = result.as_ref().map(|o| stats::tables_bytes(&o.tables)).unwrap_or(0);
        self.stats.record(name, started.elapsed(), params, result_bytes, result.as_ref().err().map(|e| e.kind));
        match result {
            Ok(out) => {
                self.commit(txn_id);
                Outcome::from_output(out)
            }
            Err(e) => {
                self.part.rollback();
                Outcome::error(e)
            }
        }
    }

    fn commit(&mut self, txn_id: i64) {
        let rows = self.part.commit();
        if !rows.is_empty() {
            if let Err(e) = self.export.write(&self.catalog, txn_id, rows) {
                tracing::error!(site = self.id, "export write failed: {e}");
            }
        }
    }

    /// Parked in a multi-partition transaction: nothing else runs here until it ends.
    fn serve_mp(&mut self, txn_id: i64) {
        self.part.begin();
        loop {
            let Ok(msg) = self.mp_in.recv() else {
                self.part.rollback();
                return;
            };
            match msg {
                MpMsg::Fragment(f) => {
                    let r = catch_unwind(AssertUnwindSafe(|| f(&mut self.part)))
                        .unwrap_or_else(|p| Err(Error::unexpected(format!("internal error: {}", panic_message(&p)))));
                    if self.mp_out.send(r).is_err() {
                        self.part.rollback();
                        return;
                    }
                }
                MpMsg::Schema(catalog) => {
                    let r = self.adopt(catalog).map(|_| ResultTable::default());
                    if self.mp_out.send(r).is_err() {
                        self.part.rollback();
                        return;
                    }
                }
                MpMsg::Commit => {
                    self.commit(txn_id);
                    return;
                }
                MpMsg::Rollback => {
                    self.part.rollback();
                    return;
                }
            }
        }
    }

    fn adopt(&mut self, catalog: Arc<Catalog>) -> Result<()> {
        self.part.apply_schema(&catalog, &self.ring)?;
        self.registry.rebuild(&catalog)?;
        self.catalog = catalog;
        Ok(())
    }
}

pub(crate) fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic".to_string()
    }
}
