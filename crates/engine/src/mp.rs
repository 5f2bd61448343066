//! The multi-partition coordinator: one thread that runs multi-partition procedures,
//! multi-partition ad-hoc SQL and DDL, one at a time. For each it parks every site at the
//! transaction's place in the site's queue, sends fragments, then commits or rolls back
//! everywhere. Because every site is parked, what it reads is consistent across partitions.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use lockstep_core::{Catalog, Error, HashRing, ResultTable, Result, Value};
use lockstep_procs::{CallContext, ProcOutput};
use lockstep_sql::{ExecCtx, Prepared, SiteAccess, SiteFn, Target};

use crate::ddl::{self, FsDdlEnv};
use crate::engine::Shared;
use crate::outcome::{Outcome, Reply};
use crate::registry::{Registry, Scope, StatementRunner};
use crate::site::{panic_message, MpMsg, SiteMsg};
use crate::store::CatalogStore;
use crate::txn_id::{timestamp_micros, TxnIdGenerator};

/// Partition id the coordinator's transaction ids carry.
const MP_PARTITION: u32 = 16383;

/// Work for the coordinator.
pub enum MpWork {
    Proc { name: String, params: Vec<Value>, reply: Reply },
    /// Planned ad-hoc statements run as one transaction; `params` bind the single statement.
    Statements { stmts: Vec<Arc<Prepared>>, params: Vec<Value>, reply: Reply },
    /// DDL statements, applied in order; stops at the first failure.
    Ddl { statements: Vec<String>, reply: Reply },
    Shutdown,
}

/// The coordinator's ends of one site's links.
pub struct SiteLink {
    pub queue: Sender<SiteMsg>,
    pub to_site: Sender<MpMsg>,
    pub from_site: Receiver<Result<ResultTable>>,
}

/// Sends fragments to parked sites.
struct ParkedSites<'a> {
    links: &'a [SiteLink],
    ring: &'a HashRing,
}

impl ParkedSites<'_> {
    fn send_all(&self, make: impl Fn() -> MpMsg) -> Result<Vec<ResultTable>> {
        for l in self.links {
            l.to_site.send(make()).map_err(|_| Error::unavailable("a partition site has stopped"))?;
        }
        self.links.iter().map(|l| l.from_site.recv().map_err(|_| Error::unavailable("a partition site has stopped"))?).collect()
    }
}

impl SiteAccess for ParkedSites<'_> {
    fn partition_count(&self) -> u32 {
        self.links.len() as u32
    }

    fn ring(&self) -> &HashRing {
        self.ring
    }

    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
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

struct MpRunner<'a> {
    sites: ParkedSites<'a>,
    ctx: ExecCtx,
}

impl StatementRunner for MpRunner<'_> {
    fn run(&mut self, p: &Arc<Prepared>, params: &[Value]) -> Result<ResultTable> {
        lockstep_sql::execute_mp(p, params, &self.ctx, &mut self.sites)
    }
}

pub struct Coordinator {
    shared: Arc<Shared>,
    links: Vec<SiteLink>,
    registry: Registry,
    catalog: Arc<Catalog>,
    ids: TxnIdGenerator,
    store: CatalogStore,
    env: FsDdlEnv,
    queue: Receiver<MpWork>,
}

impl Coordinator {
    pub fn new(shared: Arc<Shared>, links: Vec<SiteLink>, catalog: Arc<Catalog>, store: CatalogStore, queue: Receiver<MpWork>) -> Result<Self> {
        let config = &shared.config;
        let mut registry = Registry::new(Scope::Coordinator, config.lua_instruction_budget, config.lua_memory_limit_bytes)?;
        registry.rebuild(&catalog)?;
        let env = FsDdlEnv::new(config.procedure_dir.clone());
        Ok(Coordinator { shared, links, registry, catalog, ids: TxnIdGenerator::new(MP_PARTITION), store, env, queue })
    }

    pub fn run(mut self) {
        while let Ok(work) = self.queue.recv() {
            match work {
                MpWork::Proc { name, params, reply } => {
                    let started = std::time::Instant::now();
                    let outcome = self.transaction(|reg, runner, call| reg.call(&name, &params, call, runner));
                    self.record(&name, started, &params, &outcome);
                    reply(outcome);
                }
                MpWork::Statements { stmts, params, reply } => {
                    let started = std::time::Instant::now();
                    let outcome = self.transaction(|_, runner, _| {
                        let mut tables = Vec::with_capacity(stmts.len());
                        for p in &stmts {
                            let ps: &[Value] = if stmts.len() == 1 { &params } else { &[] };
                            tables.push(runner.run(p, ps)?);
                        }
                        Ok(ProcOutput { tables, app_status: -128, app_status_string: None })
                    });
                    self.record(crate::stats::ADHOC_PROCEDURE, started, &params, &outcome);
                    reply(outcome);
                }
                MpWork::Ddl { statements, reply } => {
                    let outcome = self.apply_ddl(&statements);
                    reply(outcome);
                }
                MpWork::Shutdown => break,
            }
        }
        for l in &self.links {
            let _ = l.queue.send(SiteMsg::Shutdown);
        }
    }

    /// Counts one multi-partition call for `@Statistics PROCEDURE`.
    fn record(&self, name: &str, started: std::time::Instant, params: &[Value], outcome: &Outcome) {
        let error = (!outcome.is_success()).then(|| crate::stats::error_kind_of(outcome.status));
        let mut mp = self.shared.stats.mp.lock().unwrap_or_else(|p| p.into_inner());
        mp.record(name, started.elapsed(), params, crate::stats::tables_bytes(&outcome.tables), error);
    }

    fn begin(&mut self) -> i64 {
        let txn_id = self.ids.next();
        for l in &self.links {
            let _ = l.queue.send(SiteMsg::MpBegin { txn_id });
        }
        txn_id
    }

    fn end(&self, commit: bool) {
        for l in &self.links {
            let _ = l.to_site.send(if commit { MpMsg::Commit } else { MpMsg::Rollback });
        }
    }

    /// Runs `body` as one multi-partition transaction.
    fn transaction(
        &mut self,
        body: impl FnOnce(&mut Registry, &mut MpRunner, &CallContext) -> Result<ProcOutput>,
    ) -> Outcome {
        let txn_id = self.begin();
        let ts = timestamp_micros(txn_id);
        let mut runner = MpRunner { sites: ParkedSites { links: &self.links, ring: &self.shared.ring }, ctx: ExecCtx { txn_id, timestamp_micros: ts } };
        let call = CallContext { txn_id, timestamp_micros: ts, partition: None };
        let registry = &mut self.registry;
        let result = catch_unwind(AssertUnwindSafe(|| body(registry, &mut runner, &call)))
            .unwrap_or_else(|p| Err(Error::unexpected(format!("internal error: {}", panic_message(&p)))));
        self.end(result.is_ok());
        Outcome::from_result(result)
    }

    /// Applies DDL statements one by one, each as its own schema change on every site.
    /// Like VoltDB, each statement answers with a zero `modified_tuples` row (JDBC reads it);
    /// what was done is said in the status string.
    fn apply_ddl(&mut self, statements: &[String]) -> Outcome {
        let mut messages = Vec::with_capacity(statements.len());
        for sql in statements {
            match self.apply_one(sql, true) {
                Ok(msg) => messages.push(msg),
                Err(e) => return Outcome::error(e),
            }
        }
        let mut outcome = Outcome::tables(statements.iter().map(|_| ResultTable::modified(0)).collect());
        outcome.status_string = Some(messages.join("\n"));
        outcome
    }

    /// Applies one DDL statement: plan it against a copy of the catalog, check every
    /// procedure still plans, install it on every site, then record it on disk.
    pub fn apply_one(&mut self, sql: &str, persist: bool) -> Result<String> {
        let old = self.catalog.clone();
        let mut next = (*old).clone();
        let outcome = lockstep_sql::apply_ddl(&mut next, sql, &self.env)?;
        let next = Arc::new(next);
        // Validate single-partition procedures on a scratch registry before any site sees them.
        let config = &self.shared.config;
        Registry::new(Scope::Site, config.lua_instruction_budget, config.lua_memory_limit_bytes)?.rebuild(&next)?;
        self.registry.rebuild(&next)?;
        if let Err(e) = self.install(next.clone()) {
            let _ = self.install(old.clone());
            let _ = self.registry.rebuild(&old);
            return Err(e);
        }
        if persist {
            let records = ddl::records_for(sql, &old, &next);
            if let Err(e) = self.store.append(&records) {
                let _ = self.install(old.clone());
                let _ = self.registry.rebuild(&old);
                return Err(e);
            }
        }
        self.catalog = next.clone();
        self.shared.publish(next);
        Ok(outcome.message)
    }

    /// Sends a catalog to every site inside one MP transaction.
    fn install(&mut self, catalog: Arc<Catalog>) -> Result<()> {
        self.begin();
        let sites = ParkedSites { links: &self.links, ring: &self.shared.ring };
        let result = sites.send_all(|| MpMsg::Schema(catalog.clone())).map(|_| ());
        self.end(true);
        result
    }
}
