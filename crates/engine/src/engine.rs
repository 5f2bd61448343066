//! The engine handle front ends talk to: starts the sites and the coordinator, routes each
//! call to the site that owns its partition or to the coordinator, and answers system
//! procedures that need no transaction.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use crossbeam_channel::{unbounded, Sender, TrySendError};
use lockstep_core::{Catalog, Error, HashRing, Result, Value};
use lockstep_sql::Route;

use crate::auth::{self, AdHocKind, Principal};
use crate::cluster::{ClusterHooks, ErrorData, MpRemote, MpRequest, ReplicatedEntry, SpRequest, TableData};
use crate::cmdlog::{self, CommandLog, Durability, Record};
use crate::compound::{CompoundLink, CompoundThread};
use crate::config::EngineConfig;
use crate::datadir::DataDirLock;
use crate::ddl::FsDdlEnv;
use crate::durable::Durable;
use crate::memory::MemoryGuard;
use crate::mp::{Coordinator, MpWork, SiteLink};
use crate::mp_cluster::{RemoteReply, RemoteStep, RemoteSteps};
use crate::mp_ledger::Ledger;
use crate::outcome::{Outcome, Reply};
use crate::recovery;
use crate::registry::{procedure_infos, ProcInfo, ProcRoute};
use crate::site::{ClusterLink, RejoinSnapshotDone, Site, SiteLinks, SiteMsg, SpWork};
use crate::site_queue::SiteSender;
use crate::snapshot::{FileEntry, SnapshotReader};
use crate::store::CatalogStore;
use crate::sysprocs;

/// Messages a site's queue holds at most; a client's call beyond them is refused.
pub const SITE_QUEUE_CALLS_MAX: usize = 65_536;
/// Clients' multi-partition calls and DDL waiting for the coordinator at most.
pub const MP_QUEUE_CALLS_MAX: usize = 4_096;
/// Steps of a remote multi-partition transaction waiting for this node's coordinator (the
/// coordinating node sends one at a time).
pub const REMOTE_STEPS_MAX: usize = 1_024;

/// One call of a procedure, as a front end received it.
#[derive(Clone, Debug, Default)]
pub struct Call {
    pub procedure: String,
    pub params: Vec<Value>,
    /// Set by every-partition calls (VoltDB's PARTITION_DESTINATION extension).
    pub partition_destination: Option<i32>,
    /// Set by every-partition calls (VoltDB's ALL_PARTITION extension).
    pub all_partition: bool,
    /// The caller's query timeout in ms (VoltDB's BATCH_TIMEOUT): it can only shorten the
    /// server's; 0 or a negative value leaves the server's in force.
    pub timeout_ms: Option<i32>,
    /// The logged-in caller, whose permissions are checked; None with security off (and
    /// for the server's own calls): everything is allowed.
    pub principal: Option<Arc<crate::auth::Principal>>,
}

/// The catalog as the front ends see it, replaced whole on every schema change.
pub struct CatalogView {
    pub catalog: Arc<Catalog>,
    pub procs: lockstep_core::NameMap<ProcInfo>,
}

impl CatalogView {
    fn new(catalog: Arc<Catalog>) -> Self {
        let procs = procedure_infos(&catalog).into_iter().map(|p| (p.name.to_ascii_lowercase(), p)).collect();
        CatalogView { catalog, procs }
    }
}

/// State shared by the engine handle, the coordinator and the system procedures.
pub struct Shared {
    pub config: EngineConfig,
    pub ring: HashRing,
    view: RwLock<Arc<CatalogView>>,
    pub(crate) sites: Vec<SiteSender>,
    pub(crate) mp: Mutex<Option<Sender<MpWork>>>,
    /// The command log and the write fence.
    pub durable: Arc<Durable>,
    round_robin: AtomicU64,
    /// Milliseconds since the Unix epoch when this engine started (the cluster instance id).
    pub started_ms: i64,
    shutting_down: AtomicBool,
    /// The address clients connect to, once a front end is listening.
    client_address: std::sync::OnceLock<std::net::SocketAddr>,
    /// Counters and latencies behind `@Statistics`.
    pub stats: crate::stats::EngineStats,
    /// Set by `@Pause`: calls that write are refused until `@Resume`.
    paused: AtomicBool,
    /// The resource monitor: writes are refused while memory is over `--memory-limit`.
    pub memory: Arc<MemoryGuard>,
    /// Clients' calls queued for the coordinator (see `submit_mp`).
    mp_queued: std::sync::atomic::AtomicUsize,
    /// The cluster this node belongs to, once joined (`Engine::set_cluster`).
    pub(crate) cluster: ClusterLink,
    /// Steps of the multi-partition transaction this node serves for the cluster's
    /// coordinator, and which one that is (`mp_cluster.rs`).
    pub(crate) remote_steps: RemoteSteps,
    /// What this node knows of multi-partition transactions prepared here.
    pub(crate) ledger: Arc<Mutex<Ledger>>,
    /// Time each site spent running work, in nanoseconds.
    busy_ns: Arc<[BusyCounter]>,
    /// Held while a multi-partition transaction's `MpBegin` or a read's fragments go onto
    /// the sites' queues, so every site sees them in the same order (`mp_read.rs`).
    pub(crate) mp_order: Mutex<()>,
}

impl Shared {
    /// Records where clients connect (reported by `@SystemInformation`).
    pub fn set_client_address(&self, addr: std::net::SocketAddr) {
        let _ = self.client_address.set(addr);
    }

    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Why a write may not start now (paused, or memory over the limit), if it may not.
    /// Writes that free memory (`frees_memory`: DELETE, DROP) pass the memory limit.
    fn refuse_write(&self, frees_memory: bool) -> Option<Error> {
        if self.is_paused() {
            return Some(sysprocs::paused_error());
        }
        (!frees_memory && self.memory.refuses_writes()).then(|| self.memory.error())
    }

    /// Whether `Engine::shutdown` has begun (background threads stop then).
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    pub fn client_address(&self) -> Option<std::net::SocketAddr> {
        self.client_address.get().copied()
    }

    pub fn view(&self) -> Arc<CatalogView> {
        self.view.read().map(|v| v.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    pub(crate) fn publish(&self, catalog: Arc<Catalog>) {
        let v = Arc::new(CatalogView::new(catalog));
        match self.view.write() {
            Ok(mut g) => *g = v,
            Err(p) => *p.into_inner() = v,
        }
    }

    /// Hands the coordinator a client's call, unless `MP_QUEUE_CALLS_MAX` wait already.
    fn submit_mp(&self, work: MpWork) {
        if self.mp_queued.fetch_add(1, Ordering::Relaxed) >= MP_QUEUE_CALLS_MAX {
            self.mp_queued.fetch_sub(1, Ordering::Relaxed);
            return fail_work(work, || {
                Error::unavailable(format!(
                    "the server is overloaded: {MP_QUEUE_CALLS_MAX} multi-partition calls are waiting; slow down and retry"
                ))
            });
        }
        self.send_mp(work);
    }

    /// The coordinator took a call `submit_mp` queued.
    pub(crate) fn mp_call_taken(&self) {
        self.mp_queued.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn send_mp(&self, work: MpWork) {
        let sender = self.mp.lock().ok().and_then(|g| g.clone());
        match sender {
            Some(tx) => {
                if let Err(e) = tx.send(work) {
                    fail_work(e.0, shutting_down);
                }
            }
            None => fail_work(work, shutting_down),
        }
    }

    /// Messages waiting in each site's queue, read off the queues themselves (no site
    /// work): what monitoring shows as each partition's queue depth.
    pub fn site_queue_depths(&self) -> Vec<usize> {
        self.sites.iter().map(|tx| tx.len()).collect()
    }

    /// Seconds each site has spent running transactions and fragments since start.
    pub fn site_busy_seconds(&self) -> Vec<f64> {
        self.busy_ns.iter().map(|n| n.0.load(Ordering::Relaxed) as f64 / 1e9).collect()
    }

    /// Clients' calls waiting for the multi-partition coordinator.
    pub fn mp_queue_depth(&self) -> usize {
        self.mp_queued.load(Ordering::Relaxed)
    }

    pub(crate) fn send_site(&self, site: u32, msg: SiteMsg) {
        let Some(tx) = self.sites.get(site as usize) else {
            if let SiteMsg::Call { reply, .. } = msg {
                reply(Outcome::error(Error::graceful(format!("invalid partition {site}"))));
            }
            return;
        };
        // A client's call never waits for room (the front end's thread must not block): a
        // full queue refuses it. The engine's own messages wait, as the queue drains.
        let sent = match msg {
            SiteMsg::Call { .. } => tx.try_send(msg).map_err(|e| match e {
                TrySendError::Full(m) => (m, true),
                TrySendError::Disconnected(m) => (m, false),
            }),
            other => tx.send(other).map_err(|e| (e.0, false)),
        };
        if let Err((SiteMsg::Call { reply, .. }, full)) = sent {
            reply(Outcome::error(if full {
                Error::unavailable(format!("partition {site} is overloaded: {SITE_QUEUE_CALLS_MAX} calls are waiting; slow down and retry"))
            } else {
                shutting_down()
            }));
        }
    }

    fn any_site(&self) -> u32 {
        (self.round_robin.fetch_add(1, Ordering::Relaxed) % self.sites.len() as u64) as u32
    }
}

/// A site's busy time, alone on its cache lines: each site adds to its own after every
/// call, and counters sharing a line would make the sites take it from each other.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct BusyCounter(pub(crate) AtomicU64);

pub(crate) fn shutting_down() -> Error {
    Error::unavailable("the server is shutting down")
}

/// Answers the caller of work that will not run, with `error`.
pub(crate) fn fail_work(work: MpWork, error: impl Fn() -> Error) {
    let e = || Outcome::error(error());
    match work {
        MpWork::Proc { reply, .. } | MpWork::Statements { reply, .. } | MpWork::Ddl { reply, .. } => reply(e()),
        MpWork::Snapshot { reply: Some(reply) } | MpWork::Restore { reply, .. } => reply(e()),
        MpWork::RemoteSession { reply, .. } => reply(Err(ErrorData::from(&error()))),
        _ => {}
    }
}

/// A running engine.
pub struct Engine {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Ownership of the data directory, given up when the engine has shut down.
    data_dir_lock: Mutex<Option<DataDirLock>>,
    /// The threads that run compound procedures.
    compound: CompoundLink,
}

impl Engine {
    /// Recovers the database from the data directory and starts the sites and the
    /// coordinator. With the command log on: the newest complete snapshot, then the log
    /// after it. With it off: the catalog file only (data is not kept).
    pub fn start(config: EngineConfig) -> Result<Arc<Engine>> {
        if config.sites == 0 || config.sites > 1024 {
            return Err(Error::graceful(format!("--sites must be between 1 and 1024, not {}", config.sites)));
        }
        // Before anything in the directory is read: another process may own it.
        let data_dir_lock = DataDirLock::acquire(&config.data_dir)?;
        let store = CatalogStore::open(&config.data_dir)?;
        // Count what the export files still hold before the sites (and replay) add to them.
        crate::export::prepare(&config.export, &config.data_dir, config.sites);
        let env = FsDdlEnv::new(config.procedure_dir.clone());
        let log_dir = cmdlog::log_dir(&config.data_dir);
        let logging = config.durability != Durability::Off;
        let base = if logging { recovery::newest_snapshot(&config.data_dir)? } else { None };
        let mut log_reader = if logging { Some(recovery::open_log(&log_dir)?) } else { None };
        // The log must know the snapshot it starts from (refused here, before anything runs).
        let base_in_log = match (&base, log_reader.as_mut()) {
            (Some(b), Some(reader)) => recovery::skip_to_snapshot(reader, b)?,
            _ => true,
        };
        let mut log_reader = log_reader.map(Iterator::peekable);
        // Read only without a snapshot, so before anything was skipped.
        let log_is_empty = log_reader.as_mut().is_none_or(|r| r.peek().is_none());
        // The catalog to start from: the snapshot's; or, with nothing logged yet, the catalog
        // file (a first start with the log on); or empty when the log holds every change.
        let records: Vec<String> = match &base {
            Some(info) => lockstep_sql::split_statements(&SnapshotReader::open(&info.dir)?.catalog_text()?)?,
            None if log_is_empty => store.load()?,
            None => Vec::new(),
        };
        let mut catalog = Catalog::default();
        for (i, sql) in records.iter().enumerate() {
            lockstep_sql::apply_ddl(&mut catalog, sql, &env)
                .map_err(|e| e.context(format!("cannot restore the catalog: statement {} of {}", i + 1, config.data_dir.display())))?;
        }
        let catalog = Arc::new(catalog);
        let ring = HashRing::new(config.sites);
        let log = CommandLog::open(&log_dir, config.durability)?;
        let durable = Arc::new(Durable::new(log, config.sites));
        let memory = MemoryGuard::start(config.memory_limit);
        let (mp_tx, mp_rx) = unbounded();
        let cluster = ClusterLink::default();
        let ledger: Arc<Mutex<Ledger>> = Default::default();
        let busy_ns: Arc<[BusyCounter]> = (0..config.sites).map(|_| BusyCounter::default()).collect();
        let mut links = Vec::new();
        let mut sites = Vec::new();
        let mut threads = Vec::new();
        let mut starting = Vec::new();
        for id in 0..config.sites {
            let (queue_tx, queue_rx) = crate::site_queue::site_queue(SITE_QUEUE_CALLS_MAX);
            let (to_site_tx, to_site_rx) = unbounded();
            let (from_site_tx, from_site_rx) = unbounded();
            let site_links = SiteLinks {
                queue: queue_rx,
                mp_in: to_site_rx,
                mp_out: from_site_tx,
                coordinator: mp_tx.clone(),
                durable: durable.clone(),
                memory: memory.clone(),
                cluster: cluster.clone(),
                ledger: ledger.clone(),
                busy_ns: busy_ns.clone(),
            };
            // A site's Lua state cannot move between threads: build the site on its own.
            let (site_config, site_catalog, site_ring) = (config.clone(), catalog.clone(), ring.clone());
            let restore = base.as_ref().map(|b| b.dir.clone());
            starting.push(spawn_building(
                format!("site-{id}"),
                move || Site::new(id, &site_config, site_catalog, site_ring, site_links, restore.as_deref()),
                Site::run,
            )?);
            links.push(SiteLink { queue: queue_tx.clone(), to_site: to_site_tx, from_site: from_site_rx });
            sites.push(queue_tx);
        }
        // The sites build (and load their share of a snapshot) in parallel.
        for site in starting {
            threads.push(site.wait()?);
        }
        let started_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        let shared = Arc::new(Shared {
            config,
            ring,
            view: RwLock::new(Arc::new(CatalogView::new(catalog.clone()))),
            sites,
            mp: Mutex::new(Some(mp_tx)),
            round_robin: AtomicU64::new(0),
            started_ms,
            shutting_down: AtomicBool::new(false),
            client_address: std::sync::OnceLock::new(),
            stats: Default::default(),
            paused: AtomicBool::new(false),
            memory,
            mp_queued: Default::default(),
            durable,
            cluster,
            remote_steps: RemoteSteps::new(REMOTE_STEPS_MAX),
            ledger,
            busy_ns,
            mp_order: Mutex::new(()),
        });
        let coordinator_shared = shared.clone();
        let replaying = log_reader.is_some();
        threads.push(spawn_built(
            "mp-coordinator".into(),
            move || Coordinator::new(coordinator_shared, links, catalog, records, store, mp_rx, replaying),
            Coordinator::run,
        )?);
        let (compound, compound_queues) = crate::compound::channels();
        let engine = Arc::new(Engine {
            shared,
            threads: Mutex::new(threads),
            data_dir_lock: Mutex::new(Some(data_dir_lock)),
            compound: compound.clone(),
        });
        for (i, queue) in compound_queues.into_iter().enumerate() {
            let (weak, link) = (Arc::downgrade(&engine), compound.clone());
            let thread = spawn_built(format!("compound-{i}"), move || CompoundThread::new(weak, &link, queue), CompoundThread::run)?;
            if let Ok(mut t) = engine.threads.lock() {
                t.push(thread);
            }
        }
        // Delivery runs beside the sites and never holds them up (see `export.rs`).
        let (hub, cluster) = (&engine.shared.config.export, &engine.shared.cluster);
        let exporters = crate::export::start_exporters(hub, &engine.shared.config.data_dir, engine.shared.config.sites, cluster)
            .map_err(|e| Error::graceful(format!("cannot start the export threads: {e}")))?;
        if let Ok(mut t) = engine.threads.lock() {
            t.extend(exporters);
        }
        if let Some(reader) = log_reader {
            let replayed = recovery::replay(&engine, reader, base.as_ref())?;
            // A fresh snapshot makes the next recovery short and gives a catalog that came
            // from the catalog file, or a snapshot the (new, empty) log does not know, a base
            // in the log's world; wait for it, so a crash soon after start cannot lose it.
            let catalog_without_base = base.is_none() && engine.catalog().tables().next().is_some();
            let needs_base = !base_in_log || catalog_without_base;
            if replayed > 0 || needs_base {
                let (tx, rx) = crossbeam_channel::bounded(1);
                engine.snapshot(Box::new(move |o| {
                    let _ = tx.send(o);
                }));
                match rx.recv() {
                    Ok(o) if o.is_success() => {}
                    // Without it the next restart could not tell what the log holds.
                    Ok(o) if needs_base => {
                        return Err(Error::unexpected(format!(
                            "cannot take the snapshot that starts the command log: {}",
                            o.status_string.unwrap_or_default()
                        )))
                    }
                    Ok(o) => tracing::warn!("the snapshot after recovery failed: {}", o.status_string.unwrap_or_default()),
                    Err(_) => return Err(Error::unexpected("the coordinator stopped during recovery")),
                }
            }
        }
        // Only after recovery: a replay must see the TTL deletions and task runs the log
        // holds, no others.
        let (ttl, tasks) = (crate::ttl::start(&engine)?, crate::tasks::start(&engine)?);
        let migrate = crate::migrate::start(&engine)?;
        if let Ok(mut t) = engine.threads.lock() {
            t.extend([ttl, tasks, migrate]);
        }
        Ok(engine)
    }

    /// Takes a snapshot now; `reply` is answered when it is complete on disk.
    pub fn snapshot(&self, reply: Reply) {
        self.shared.send_mp(MpWork::Snapshot { reply: Some(reply) });
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub fn partition_count(&self) -> u32 {
        self.shared.sites.len() as u32
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.shared.view().catalog.clone()
    }

    /// The query timeout of a call that asked for `timeout_ms` (see `Call::timeout_ms`).
    pub fn call_timeout(&self, timeout_ms: Option<i32>) -> Option<std::time::Duration> {
        let server = self.shared.config.query_timeout;
        match timeout_ms.and_then(|ms| u64::try_from(ms).ok()).filter(|ms| *ms > 0) {
            Some(ms) => {
                let asked = std::time::Duration::from_millis(ms);
                Some(server.map_or(asked, |s| s.min(asked)))
            }
            None => server,
        }
    }

    /// Runs a call; `reply` gets its outcome exactly once, on some engine thread.
    pub fn submit(&self, call: Call, reply: Reply) {
        if self.shared.shutting_down.load(Ordering::Relaxed) {
            return reply(Outcome::error(Error::unavailable("the server is shutting down")));
        }
        if call.procedure.starts_with('@') {
            return sysprocs::submit(self, call, reply);
        }
        let view = self.shared.view();
        let Some(info) = lockstep_core::get_ignoring_case(&view.procs, &call.procedure) else {
            return reply(Outcome::error(Error::unexpected(format!("Procedure {} was not found", call.procedure))));
        };
        if let Err(e) = auth::check_procedure(call.principal.as_deref(), &view.catalog, &info.name, &info.access) {
            return reply(Outcome::error(e));
        }
        if !info.read_only {
            if let Some(e) = self.shared.refuse_write(false) {
                return reply(Outcome::error(e));
            }
        }
        let timeout = self.call_timeout(call.timeout_ms);
        if info.route == ProcRoute::Compound {
            if call.partition_destination.is_some() {
                return reply(Outcome::error(Error::graceful(format!(
                    "procedure {} is a compound procedure and cannot be sent to one partition",
                    info.name
                ))));
            }
            return self.compound.start(info.name.clone(), call, timeout, reply);
        }
        match self.route(info, call) {
            Ok(Routed::Site(site, params)) => self.run_sp(site, SpWork::Proc(info.name.clone()), params, timeout, reply),
            Ok(Routed::Mp(params)) => match self.mp_elsewhere() {
                Some(Ok(to)) => self.forward_mp(to, MpRequest::Proc { name: info.name.to_string(), params }, timeout, reply),
                Some(Err(e)) => reply(Outcome::error(e)),
                None => self.shared.submit_mp(MpWork::Proc { name: info.name.to_string(), params, timeout, reply }),
            },
            Err(e) => reply(Outcome::error(e)),
        }
    }

    /// Runs a single-partition call here, or, in a cluster, on the node that leads its
    /// partition.
    fn run_sp(&self, site: u32, work: SpWork, params: Vec<Value>, timeout: Option<std::time::Duration>, reply: Reply) {
        if let Some(cluster) = self.shared.cluster.get() {
            if !cluster.leads(site) {
                let request = match &work {
                    SpWork::Proc(name) => SpRequest::Proc(name.to_string()),
                    SpWork::Statement(p) => SpRequest::Sql(p.sql.to_string()),
                    SpWork::Sql(sql) => SpRequest::Sql(sql.clone()),
                };
                return cluster.forward(site, request, params, timeout, reply);
            }
        }
        self.shared.send_site(site, SiteMsg::Call { work, params, timeout, reply })
    }

    /// In a cluster whose multi-partition transactions another node coordinates: that node
    /// (or why none can). None: they run here.
    fn mp_elsewhere(&self) -> Option<Result<u32>> {
        let cluster = self.shared.cluster.get()?;
        match cluster.mp_coordinator() {
            Some(n) if n == cluster.topology().me => None,
            Some(n) => Some(Ok(n)),
            None => Some(Err(Error::unavailable("no node coordinates multi-partition transactions now; retry"))),
        }
    }

    fn forward_mp(&self, to: u32, request: MpRequest, timeout: Option<std::time::Duration>, reply: Reply) {
        if let Some(cluster) = self.shared.cluster.get() {
            cluster.forward_mp(to, request, timeout, reply);
        }
    }

    /// Runs a multi-partition call another node forwarded to this, the coordinating node.
    pub fn run_forwarded_mp(&self, request: MpRequest, timeout: Option<std::time::Duration>, reply: Reply) {
        if let Some(Ok(n)) = self.mp_elsewhere() {
            return reply(Outcome::error(Error::unavailable(format!(
                "node {n} coordinates multi-partition transactions now, not this one; retry"
            ))));
        }
        match request {
            MpRequest::Proc { name, params } => match lockstep_core::get_ignoring_case(&self.shared.view().procs, &name) {
                Some(info) => self.shared.submit_mp(MpWork::Proc { name: info.name.to_string(), params, timeout, reply }),
                None => reply(Outcome::error(Error::unexpected(format!("Procedure {name} was not found")))),
            },
            MpRequest::Sql { sql, params } => {
                let stmts: Result<Vec<Arc<lockstep_sql::Prepared>>> = lockstep_sql::split_statements(&sql)
                    .and_then(|ss| ss.iter().map(|s| lockstep_sql::prepare(&self.catalog(), s).map(Arc::new)).collect());
                match stmts {
                    Ok(stmts) => self.shared.submit_mp(MpWork::Statements { stmts, params, timeout, reply }),
                    Err(e) => reply(Outcome::error(e)),
                }
            }
        }
    }

    /// One step of a multi-partition transaction that node `from` coordinates; `reply` gets
    /// this node's answer.
    pub fn mp_participant(&self, from: u32, message: MpRemote, reply: RemoteReply) {
        match message {
            MpRemote::Begin { txn_id } => {
                self.shared.remote_steps.begin_arrived(txn_id);
                self.shared.send_mp(MpWork::RemoteSession { txn_id, coordinator: from, reply })
            }
            MpRemote::InDoubt => match self.shared.cluster.get() {
                Some(hooks) => reply(crate::mp_cluster::in_doubt_report(&**hooks, &self.shared.ledger, self.shared.sites.len() as u32)),
                None => reply(Err(ErrorData { status: -5, message: "this node is not in a cluster".into() })),
            },
            MpRemote::Resolve { txn_id, partition, commit } => {
                let done = Box::new(move |r: std::result::Result<(), String>| {
                    reply(
                        r.map(|()| TableData { columns: Vec::new(), rows: Vec::new() })
                            .map_err(|message| ErrorData { status: -5, message }),
                    )
                });
                if let Some(SiteMsg::Resolve { done, .. }) = self.try_send_site(partition, SiteMsg::Resolve { txn_id, commit, done }) {
                    done(Err(format!("partition {partition}'s site cannot take the outcome of transaction {txn_id} now")));
                }
            }
            MpRemote::Fragment { txn_id, .. } | MpRemote::Prepare { txn_id, .. } | MpRemote::End { txn_id, .. } => {
                self.shared.remote_steps.offer(txn_id, RemoteStep { message, reply })
            }
        }
    }

    /// This node's host id: its node id in a cluster, 0 on its own.
    pub fn host_id(&self) -> i32 {
        self.shared.cluster.get().map_or(sysprocs::HOST_ID, |c| c.topology().me as i32)
    }

    /// Whether this node starts the background work (TTL, tasks) for `partition`, or, with
    /// None, the work done once for the whole database: in a cluster, the node leading the
    /// partition, or the one coordinating multi-partition work, so that no run is made
    /// once per node.
    pub fn runs_background_for(&self, partition: Option<u32>) -> bool {
        let Some(c) = self.shared.cluster.get() else { return true };
        let me = c.topology().me;
        c.serving()
            && match partition {
                Some(p) => c.leads(p),
                None => c.mp_coordinator() == Some(me),
            }
    }

    /// Where one run of background work goes from this node: each partition it leads
    /// (`every_partition`), or the whole database once (None) when it coordinates; empty when
    /// another node does the work (see `runs_background_for`).
    pub fn background_destinations(&self, every_partition: bool) -> Vec<Option<i32>> {
        if every_partition {
            (0..self.partition_count())
                .filter(|p| self.runs_background_for(Some(*p)))
                .filter_map(|p| i32::try_from(p).ok())
                .map(Some)
                .collect()
        } else if self.runs_background_for(None) {
            vec![None]
        } else {
            Vec::new()
        }
    }

    /// Joins a cluster: from now on calls for partitions led elsewhere are forwarded, a
    /// leader's changes are replicated before they are answered, DDL goes through the
    /// cluster, and multi-partition work is refused (not built for clusters yet).
    pub fn set_cluster(&self, hooks: Arc<dyn ClusterHooks>) {
        let _ = self.shared.cluster.set(hooks);
    }

    /// Runs a call another node forwarded because this node leads `partition`.
    pub fn run_forwarded(
        &self,
        partition: u32,
        request: SpRequest,
        params: Vec<Value>,
        timeout: Option<std::time::Duration>,
        reply: Reply,
    ) {
        if partition >= self.partition_count() {
            return reply(Outcome::error(Error::graceful(format!("invalid partition {partition}"))));
        }
        if self.shared.cluster.get().is_some_and(|c| !c.leads(partition)) {
            return reply(Outcome::error(Error::unavailable(format!(
                "this node no longer leads partition {partition}; the call was not run, retry"
            ))));
        }
        let work = match request {
            SpRequest::Proc(name) => match lockstep_core::get_ignoring_case(&self.shared.view().procs, &name) {
                Some(info) => SpWork::Proc(info.name.clone()),
                None => return reply(Outcome::error(Error::unexpected(format!("Procedure {name} was not found")))),
            },
            SpRequest::Sql(sql) => match lockstep_sql::prepare(&self.catalog(), &sql) {
                Ok(p) => SpWork::Statement(Arc::new(p)),
                Err(e) => return reply(Outcome::error(e)),
            },
        };
        self.shared.send_site(partition, SiteMsg::Call { work, params, timeout, reply })
    }

    /// Queues entry `seq` of `partition`, ordered by its leader (a `ReplicatedEntry`). The
    /// site runs it and reports its hash to the cluster.
    pub fn run_replicated(&self, partition: u32, seq: u64, entry: &[u8]) -> Result<()> {
        let msg = match ReplicatedEntry::decode(entry)? {
            ReplicatedEntry::Txn(record) => match Record::decode(&record)? {
                Record::Sp { txn_id, partition: p, procedure, params } if p == partition => {
                    SiteMsg::Replicated { work: SpWork::Proc(procedure), params, txn_id, seq }
                }
                Record::AdHocSp { txn_id, partition: p, sql, params } if p == partition => {
                    SiteMsg::Replicated { work: SpWork::Sql(sql), params, txn_id, seq }
                }
                other => {
                    return Err(Error::unexpected(format!("partition {partition} was sent a replicated entry it cannot run: {other:?}")))
                }
            },
            ReplicatedEntry::MpPart { txn_id, participants, specs } => {
                SiteMsg::ReplicatedMp { txn_id, seq: Some(seq), participants, specs }
            }
            ReplicatedEntry::MpDecide { txn_id, commit } => SiteMsg::ReplicatedDecide { txn_id, seq: Some(seq), commit },
        };
        let tx = self.shared.sites.get(partition as usize).ok_or_else(|| Error::graceful(format!("invalid partition {partition}")))?;
        // A follower's queue holds only what its leader ordered, which the replication bounds
        // far below the queue's size; full means something is badly wrong, not busy.
        tx.try_send(msg)
            .map_err(|_| Error::unavailable(format!("partition {partition}'s queue is full or stopped: a replicated entry was not queued")))
    }

    /// Rejoin, on `partition`'s leader: makes node `joiner` a learner of it and writes the
    /// partition's image for it into `dir` between transactions; `done` gets where it was
    /// taken once the file is written (or why it was not).
    pub fn rejoin_snapshot(&self, partition: u32, joiner: u32, dir: std::path::PathBuf, done: RejoinSnapshotDone) {
        if let Some(SiteMsg::RejoinSnapshot { done, .. }) = self.try_send_site(partition, SiteMsg::RejoinSnapshot { joiner, dir, done }) {
            done(Err(site_busy(partition)));
        }
    }

    /// Rejoin, on the joining node: replaces `partition`'s contents with its leader's image
    /// `file` (taken at entry `seq` of `term`), then takes the entries after it; `done` gets
    /// the rows loaded.
    pub fn rejoin_load(
        &self,
        partition: u32,
        file: std::path::PathBuf,
        entry: FileEntry,
        term: u64,
        seq: u64,
        done: Box<dyn FnOnce(Result<u64>) + Send>,
    ) {
        if let Some(SiteMsg::RejoinLoad { done, .. }) = self.try_send_site(partition, SiteMsg::RejoinLoad { file, entry, term, seq, done })
        {
            done(Err(site_busy(partition)));
        }
    }

    /// Queues `msg` on a site without waiting; gives it back if it was not queued.
    fn try_send_site(&self, partition: u32, msg: SiteMsg) -> Option<SiteMsg> {
        match self.shared.sites.get(partition as usize) {
            Some(tx) => tx.try_send(msg).err().map(|e| e.into_inner()),
            None => Some(msg),
        }
    }

    /// Applies DDL on this node only: what a schema change the cluster ordered comes to on
    /// every node, in the same order.
    pub fn apply_schema(&self, statements: Vec<String>, reply: Reply) {
        self.shared.submit_mp(MpWork::Ddl { statements, reply });
    }

    fn route(&self, info: &ProcInfo, call: Call) -> Result<Routed> {
        let count = self.partition_count();
        let destination = match call.partition_destination {
            Some(d) if d < 0 || d as u32 >= count => {
                return Err(Error::graceful(format!("Invalid destination partition {d}: the server has partitions 0 to {}", count - 1)))
            }
            Some(d) => Some(d as u32),
            None => None,
        };
        let mut params = call.params;
        match &info.route {
            ProcRoute::Single { param, key_type } => {
                if let Some(d) = destination {
                    if *param != 0 {
                        return Err(Error::graceful(format!(
                            "procedure {} cannot be called on every partition: it is partitioned on parameter {param}, not 0",
                            info.name
                        )));
                    }
                    return Ok(Routed::Site(d, params));
                }
                let key = params.get(*param).ok_or_else(|| {
                    Error::graceful(format!(
                        "procedure {} is partitioned on parameter {} but received {} parameters",
                        info.name,
                        param + 1,
                        params.len()
                    ))
                })?;
                let key = key.coerce_to(*key_type).map_err(|e| e.context(format!("partition parameter of {}", info.name)))?;
                Ok(Routed::Site(self.shared.ring.partition_for(&key), params))
            }
            ProcRoute::Fixed(p) => Ok(Routed::Site(*p, params)),
            ProcRoute::Any => Ok(Routed::Site(destination.unwrap_or_else(|| self.shared.any_site()), params)),
            ProcRoute::Directed => {
                let d = destination.ok_or_else(|| {
                    Error::graceful(format!(
                        "procedure {} runs on every partition: call it with callAllPartitionProcedure (or a partition destination)",
                        info.name
                    ))
                })?;
                if call.all_partition && !params.is_empty() {
                    params.remove(0);
                }
                Ok(Routed::Site(d, params))
            }
            ProcRoute::Compound => Err(Error::unexpected(format!("compound procedure {} reached the router", info.name))),
            ProcRoute::Multi => {
                if destination.is_some() {
                    return Err(Error::graceful(format!("procedure {} is multi-partition and cannot be sent to one partition", info.name)));
                }
                Ok(Routed::Mp(params))
            }
        }
    }

    /// Runs `@AdHoc` SQL: DDL through the coordinator, a statement pinned to one partition on
    /// that site, everything else as one multi-partition transaction.
    pub fn adhoc(&self, sql: &str, params: Vec<Value>, reply: Reply) {
        self.adhoc_as(None, sql, params, self.shared.config.query_timeout, reply)
    }

    /// `adhoc` for a caller whose permissions are checked (None: security off): SQLREAD for
    /// statements that only read, SQL for writes, ADMIN for DDL; stopped after `timeout`
    /// (None: never).
    pub fn adhoc_as(
        &self,
        principal: Option<&Principal>,
        sql: &str,
        params: Vec<Value>,
        timeout: Option<std::time::Duration>,
        reply: Reply,
    ) {
        let statements = match lockstep_sql::split_statements(sql) {
            Ok(s) if s.is_empty() => return reply(Outcome::error(Error::sql("no SQL statement given"))),
            Ok(s) => s,
            Err(e) => return reply(Outcome::error(e)),
        };
        let ddl = statements.iter().filter(|s| lockstep_sql::is_ddl(s)).count();
        if ddl > 0 {
            if let Err(e) = auth::check_adhoc(principal, &self.catalog(), AdHocKind::Ddl) {
                return reply(Outcome::error(e));
            }
            let drops_only = statements.iter().all(|s| s.trim_start().get(..4).is_some_and(|w| w.eq_ignore_ascii_case("DROP")));
            if let Some(e) = self.shared.refuse_write(drops_only) {
                return reply(Outcome::error(e));
            }
        }
        if ddl == statements.len() {
            if let Some(cluster) = self.shared.cluster.get() {
                return cluster.change_schema(statements, reply);
            }
            return self.shared.submit_mp(MpWork::Ddl { statements, reply });
        }
        if ddl > 0 {
            return reply(Outcome::error(Error::sql("DDL and other statements cannot be mixed in one @AdHoc call; send them separately")));
        }
        if statements.len() > 1 && !params.is_empty() {
            return reply(Outcome::error(Error::sql("parameters can only be bound when @AdHoc has a single statement")));
        }
        let catalog = self.catalog();
        let mut stmts = Vec::with_capacity(statements.len());
        for s in &statements {
            match lockstep_sql::prepare(&catalog, s) {
                Ok(p) => stmts.push(Arc::new(p)),
                Err(e) => return reply(Outcome::error(e)),
            }
        }
        let kind = if stmts.iter().all(|p| p.read_only) { AdHocKind::Read } else { AdHocKind::Write };
        if let Err(e) = auth::check_adhoc(principal, &catalog, kind) {
            return reply(Outcome::error(e));
        }
        let writes = stmts.iter().filter(|p| !p.read_only);
        if let Some(e) = writes.clone().next().and_then(|_| self.shared.refuse_write(writes.clone().all(|p| p.frees_memory()))) {
            return reply(Outcome::error(e));
        }
        if stmts.len() == 1 {
            let p = &stmts[0];
            if p.param_types.len() != params.len() {
                return reply(Outcome::error(Error::sql(format!(
                    "the statement has {} parameter markers but {} values were given",
                    p.param_types.len(),
                    params.len()
                ))));
            }
            let site = match &p.route {
                Route::PartitionParam { param, key_type } => match params.get(*param).map(|v| v.coerce_to(*key_type)) {
                    Some(Ok(k)) => Some(self.shared.ring.partition_for(&k)),
                    Some(Err(e)) => return reply(Outcome::error(e)),
                    None => None,
                },
                Route::PartitionConst(v) => Some(self.shared.ring.partition_for(v)),
                Route::AnyPartition => Some(self.shared.any_site()),
                Route::All => None,
            };
            if let (Some(site), Some(p)) = (site, stmts.first()) {
                return self.run_sp(site, SpWork::Statement(p.clone()), params, timeout, reply);
            }
        }
        match self.mp_elsewhere() {
            Some(Ok(to)) => self.forward_mp(to, MpRequest::Sql { sql: sql.to_string(), params }, timeout, reply),
            Some(Err(e)) => reply(Outcome::error(e)),
            None => self.shared.submit_mp(MpWork::Statements { stmts, params, timeout, reply }),
        }
    }

    /// Stops accepting calls, lets queued work finish, and joins every thread.
    pub fn shutdown(&self) {
        self.shared.shutting_down.store(true, Ordering::Relaxed);
        self.shared.config.export.stopping.store(true, Ordering::Relaxed);
        self.compound.shutdown();
        let mp = self.shared.mp.lock().ok().and_then(|mut g| g.take());
        if let Some(tx) = mp {
            let _ = tx.send(MpWork::Shutdown);
        }
        let threads = self.threads.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default();
        for t in threads {
            let _ = t.join();
        }
        drop(self.data_dir_lock.lock().map(|mut l| l.take()));
    }
}

enum Routed {
    Site(u32, Vec<Value>),
    Mp(Vec<Value>),
}

/// Starts a thread that builds its state with `build` and then runs it with `run`; waits
/// until `build` has finished and returns its error, if any.
fn spawn_built<T, B, R>(name: String, build: B, run: R) -> Result<JoinHandle<()>>
where
    B: FnOnce() -> Result<T> + Send + 'static,
    R: FnOnce(T) + Send + 'static,
{
    let started = spawn_building(name, build, run)?;
    started.wait()
}

/// A thread still building its state.
struct Starting {
    name: String,
    handle: JoinHandle<()>,
    built: std::sync::mpsc::Receiver<Result<()>>,
}

impl Starting {
    /// Waits until the thread's state is built; its error if building failed.
    fn wait(self) -> Result<JoinHandle<()>> {
        self.built.recv().map_err(|_| Error::unexpected(format!("thread {} died while starting", self.name)))??;
        Ok(self.handle)
    }
}

/// Starts a thread that builds its state with `build`, then runs it with `run`; does not
/// wait, so several can build at once (sites loading a snapshot).
fn spawn_building<T, B, R>(name: String, build: B, run: R) -> Result<Starting>
where
    B: FnOnce() -> Result<T> + Send + 'static,
    R: FnOnce(T) + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || match build() {
            Ok(state) => {
                let _ = tx.send(Ok(()));
                run(state);
            }
            Err(e) => {
                let _ = tx.send(Err(e));
            }
        })
        .map_err(|e| Error::unexpected(format!("cannot start thread {name}: {e}")))?;
    Ok(Starting { name, handle, built: rx })
}

/// Why a message for partition `partition` could not be queued.
fn site_busy(partition: u32) -> Error {
    Error::unavailable(format!("partition {partition}'s queue is full or stopped (or there is no such partition); try again"))
}
