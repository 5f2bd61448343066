//! A partition site: one thread that owns one partition's data and runs its transactions
//! one after another, with no locks. Single-partition calls arrive on its queue; a
//! multi-partition transaction parks the site at its place in the queue and feeds it
//! fragments until the coordinator commits or rolls back.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use lockstep_core::{Catalog, DataType, Error, HashRing, Result, ResultTable, TableId, Value};
use lockstep_procs::{CallContext, ProcOutput};
use lockstep_sql::{Deadline, ExecCtx, Limits, Prepared, SiteFn};
use lockstep_storage::{BulkLoad, Partition};

use crate::cluster::ClusterHooks;
use crate::cmdlog::Record;
use crate::config::EngineConfig;
use crate::durable::Durable;
use crate::export::ExportWriter;
use crate::memory::MemoryGuard;
use crate::mp::MpWork;
use crate::outcome::{Outcome, Reply};
use crate::registry::{Registry, Scope, StatementRunner};
use crate::site_queue::SiteReceiver;
use crate::snapshot::{FileEntry, PartitionReader, SnapshotItem, SnapshotReader, SnapshotWriter};
use crate::stats::{self, ProcStats};
use crate::txn_id::{timestamp_micros, TxnIdGenerator};

/// Answers a busy site holds before sending them together: a send writes each connection's
/// socket (or wakes its writer), and one write for many answers costs far less than one
/// each. A site whose queue runs dry sends at once, so only a busy site holds this many.
const ANSWERS_HELD_MAX: usize = 256;
/// Answers waiting for the log (sync mode) held before they are handed to it behind one
/// barrier: the log's sync sets their pace, not this.
const WAITING_HELD_MAX: usize = 16;
/// Nor does a busy site hold an answer longer than this (by the clock its calls read).
const ANSWERS_HELD_FOR_MAX: std::time::Duration = std::time::Duration::from_micros(200);
/// Rows a site writes to a snapshot between two transactions: small, so a transaction
/// never waits long behind snapshot work.
const SNAPSHOT_CHUNK_ROWS: usize = 256;
/// Over the memory limit, an idle site gives freed memory back at most this often.
const RELEASE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// What a single-partition call runs.
pub enum SpWork {
    /// A procedure of the site's registry.
    Proc(Arc<str>),
    /// One planned ad-hoc statement.
    Statement(Arc<Prepared>),
    /// Ad-hoc SQL from the command log, planned by the site against its own catalog (which
    /// at that point of a replay is the one the statement first ran against).
    Sql(String),
}

/// A site's answer to a multi-partition read's fragment.
pub enum ReadAnswer {
    Done(Result<ResultTable>),
    /// The site's catalog changed since the read was planned: it must run again, parked.
    Stale,
}

/// A message on a site's queue.
pub enum SiteMsg {
    /// A client's call; `timeout` is its query timeout (None: no limit).
    Call {
        work: SpWork,
        params: Vec<Value>,
        timeout: Option<std::time::Duration>,
        reply: Reply,
    },
    /// A logged transaction run again during recovery, with its original id.
    Replay {
        work: SpWork,
        params: Vec<Value>,
        txn_id: i64,
    },
    /// In a cluster: entry `seq` of this partition, ordered by its leader, run here with the
    /// leader's transaction id; the result's hash goes back to the leader.
    Replicated {
        work: SpWork,
        params: Vec<Value>,
        txn_id: i64,
        seq: u64,
    },
    /// In a cluster: entry `seq` of this partition is its prepared share of multi-partition
    /// transaction `txn_id`: the fragments its leader ran, held here (not run) until the
    /// outcome (`ReplicatedDecide`). Without `seq`, read back from the command log.
    ReplicatedMp {
        txn_id: i64,
        seq: Option<u64>,
        participants: Vec<u32>,
        specs: Vec<lockstep_sql::FragmentSpec>,
    },
    /// The outcome of the share held: run it in one transaction (commit) or drop it.
    ReplicatedDecide {
        txn_id: i64,
        seq: Option<u64>,
        commit: bool,
    },
    /// On a partition's new leader, whose predecessor prepared a share and went down: the
    /// outcome of the share held, decided by the coordinator; this site applies it and
    /// replicates it; `done` once every replica has it.
    Resolve {
        txn_id: i64,
        commit: bool,
        done: Box<dyn FnOnce(std::result::Result<(), String>) + Send>,
    },
    /// Enter the multi-partition transaction `txn_id`: serve the MP link until it ends.
    /// `log_marker` records where it fell in this site's order (not during replay, nor for
    /// transactions that are not logged).
    MpBegin {
        txn_id: i64,
        log_marker: bool,
    },
    /// A multi-partition read's fragment (`mp_read.rs`): run it at this place in the queue,
    /// between transactions, without parking, if the site's catalog is still version
    /// `catalog_version` (the one it was planned against).
    Read {
        catalog_version: u64,
        f: SiteFn,
        reply: Sender<ReadAnswer>,
    },
    /// Run a closure on the site's partition outside any transaction (statistics).
    Inspect(Box<dyn FnOnce(&Partition) + Send>),
    /// Run a closure on the partition and the site's procedure counters (`@Statistics`).
    Stats(StatsFn),
    /// Flush exported rows to their files, then run the closure (`@Quiesce`).
    Quiesce(Box<dyn FnOnce() + Send>),
    /// In a cluster, on a partition's leader: make node `joiner` a learner of the partition
    /// and write the partition's image for it into directory `dir`, between later
    /// transactions (copy-on-write); `done` gets where it was taken, once written.
    RejoinSnapshot {
        joiner: u32,
        dir: std::path::PathBuf,
        done: RejoinSnapshotDone,
    },
    /// In a cluster, on a node rejoining a partition: replace the partition's contents with
    /// its leader's image `file` (as `entry` describes it), taken at entry `seq` of `term`,
    /// then take the entries after it; `done` gets the rows loaded.
    RejoinLoad {
        file: std::path::PathBuf,
        entry: FileEntry,
        term: u64,
        seq: u64,
        done: Box<dyn FnOnce(Result<u64>) + Send>,
    },
    Shutdown,
}

/// Where a rejoin's image of a partition was taken, and its file.
#[derive(Clone, Debug)]
pub struct RejoinPoint {
    /// The partition's entry the image holds everything up to.
    pub seq: u64,
    /// The term of the leadership it was taken under.
    pub term: u64,
    pub file: FileEntry,
}

/// What a leader starts a rejoin image with: the entry and term it is taken at, its file's
/// writer, and where each export target's numbering stands.
type RejoinStart = (u64, u64, SnapshotWriter, Vec<crate::export::ImageMark>);

/// Gets a rejoin image's place once its file is written (or why it failed).
pub type RejoinSnapshotDone = Box<dyn FnOnce(Result<RejoinPoint>) + Send>;

/// Reads a site's partition and procedure counters for `@Statistics`.
pub type StatsFn = Box<dyn FnOnce(&Partition, &mut ProcStats, &Registry) + Send>;

/// A message from the MP coordinator to a parked site.
pub enum MpMsg {
    Fragment(SiteFn),
    /// Adopt a new catalog (DDL); replies Ok or the reason the site cannot.
    Schema(Arc<Catalog>),
    /// Mark the partition's state for snapshot `id` and write it out between later
    /// transactions (copy-on-write); replies Ok once marked.
    SnapshotBegin {
        id: u64,
        writer: SnapshotWriter,
    },
    /// Log this site's marker of the transaction: its body has succeeded, and the site,
    /// parked since the transaction began, has logged nothing since, so the marker falls
    /// exactly where the transaction did in the site's order. Replies Ok once appended.
    LogMarker,
    Commit,
    Rollback,
}

/// How a single-partition transaction came to run.
enum Run {
    /// A client's call, answered through `reply`, stopped after `timeout` (None: never).
    Live { reply: Reply, timeout: Option<std::time::Duration> },
    /// A logged transaction run again during recovery, with its original id.
    Replay(i64),
    /// A transaction its leader ordered as entry `seq` (cluster), with the leader's id.
    Replicated { txn_id: i64, seq: u64 },
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

    fn run_each(&mut self, p: &Arc<Prepared>, params: &[Value], row: &mut dyn FnMut(&[Value]) -> Result<bool>) -> Result<i64> {
        lockstep_sql::execute_each(p, params, &self.ctx, self.part, row).map(|n| n as i64)
    }

    fn restart(&mut self) -> Result<()> {
        // The transaction began with the call: undo everything and stay in it.
        self.part.rollback_to(0);
        Ok(())
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
    queue: SiteReceiver,
    mp_in: Receiver<MpMsg>,
    mp_out: Sender<Result<ResultTable>>,
    stats: ProcStats,
    durable: Arc<Durable>,
    /// Where finished snapshot files are reported.
    coordinator: Sender<MpWork>,
    memory: Arc<MemoryGuard>,
    /// Hands freed memory back to the system (see `EngineConfig::release_memory`).
    release_memory: Option<fn()>,
    released_at: Option<std::time::Instant>,
    snapshot: Option<SiteSnapshot>,
    /// Answers ready to go out, sent when the queue runs dry, `ANSWERS_HELD_MAX` wait, or
    /// the first has waited `ANSWERS_HELD_FOR_MAX`.
    answers: Vec<(Outcome, Reply)>,
    /// When the first of `answers` was ready, and the site's latest look at the clock (the
    /// end of its latest call): the two tell how long answers have been held.
    held_since: std::time::Instant,
    clock: std::time::Instant,
    /// Nothing but calls ran since `clock` was read (see `run`).
    clock_fresh: bool,
    /// Answers that logged nothing but saw writes not yet durable (sync mode): at the same
    /// moments they are handed to the log behind one barrier, rather than one each.
    waiting: Vec<(Outcome, Reply)>,
    /// Set once this node joined a cluster.
    cluster: ClusterLink,
    /// Plans for replicated multi-partition shares, at the site's catalog version.
    plans: Option<lockstep_sql::PlanCache>,
    /// A prepared share of a multi-partition transaction, waiting for its outcome: no new
    /// work runs here until it comes.
    held: Option<HeldShare>,
    /// A multi-partition transaction that asked to park this site while a share was held.
    deferred: std::collections::VecDeque<SiteMsg>,
    ledger: Arc<std::sync::Mutex<crate::mp_ledger::Ledger>>,
    busy_ns: Arc<[crate::engine::BusyCounter]>,
}

/// A prepared share this site holds.
struct HeldShare {
    txn_id: i64,
    specs: Vec<lockstep_sql::FragmentSpec>,
}

/// At most this many requests to park the site wait while it holds a share (one coordinator
/// runs one multi-partition transaction at a time).
const DEFERRED_MAX: usize = 8;

/// The engine's cluster hooks, once set (`Engine::set_cluster`); shared by every site.
pub type ClusterLink = Arc<std::sync::OnceLock<Arc<dyn ClusterHooks>>>;

/// A snapshot this site is writing between transactions.
struct SiteSnapshot {
    report: SnapshotReport,
    writer: SnapshotWriter,
    /// The catalog when the snapshot began (tables may change while it is written).
    catalog: Arc<Catalog>,
    table: Option<TableId>,
}

/// Whom a finished snapshot file is reported to.
enum SnapshotReport {
    /// The coordinator, as part of snapshot `id` of every partition.
    Coordinator(u64),
    /// A rejoining node, through its leader's cluster glue; `export` is where each export
    /// target's numbering stood when the image was taken (written into it at its end).
    Rejoin { seq: u64, term: u64, done: RejoinSnapshotDone, export: Vec<crate::export::ImageMark> },
}

/// The links a site needs besides its queue.
pub struct SiteLinks {
    pub(crate) queue: SiteReceiver,
    pub mp_in: Receiver<MpMsg>,
    pub mp_out: Sender<Result<ResultTable>>,
    pub coordinator: Sender<MpWork>,
    pub durable: Arc<Durable>,
    pub memory: Arc<MemoryGuard>,
    pub cluster: ClusterLink,
    pub ledger: Arc<std::sync::Mutex<crate::mp_ledger::Ledger>>,
    /// Nanoseconds each site has spent running transactions and fragments, by site.
    pub(crate) busy_ns: Arc<[crate::engine::BusyCounter]>,
}

impl Site {
    /// Builds the site; with `restore`, loads this partition's rows from that snapshot.
    pub fn new(
        id: u32,
        config: &EngineConfig,
        catalog: Arc<Catalog>,
        ring: HashRing,
        links: SiteLinks,
        restore: Option<&std::path::Path>,
    ) -> Result<Site> {
        let mut part = Partition::new(id);
        part.apply_schema(&catalog, &ring)?;
        let mut registry = Registry::new(Scope::Site, config.lua_instruction_budget, config.lua_memory_limit_bytes)?;
        registry.rebuild(&catalog, None)?;
        let mut site = Site {
            id,
            part,
            registry,
            catalog,
            ring,
            ids: TxnIdGenerator::new(id),
            export: ExportWriter::new(&config.data_dir, id, config.export.clone()),
            queue: links.queue,
            mp_in: links.mp_in,
            mp_out: links.mp_out,
            stats: ProcStats::default(),
            durable: links.durable,
            coordinator: links.coordinator,
            memory: links.memory,
            release_memory: config.release_memory,
            released_at: None,
            snapshot: None,
            answers: Vec::with_capacity(ANSWERS_HELD_MAX),
            held_since: std::time::Instant::now(),
            clock: std::time::Instant::now(),
            clock_fresh: false,
            waiting: Vec::with_capacity(WAITING_HELD_MAX),
            cluster: links.cluster,
            plans: None,
            held: None,
            deferred: Default::default(),
            ledger: links.ledger,
            busy_ns: links.busy_ns,
        };
        if let Some(dir) = restore {
            site.load_snapshot(dir).map_err(|e| e.context(format!("partition {id}: cannot load snapshot {}", dir.display())))?;
        }
        Ok(site)
    }

    /// Loads this partition's rows of a snapshot in bulk: tables are filled, then their
    /// indexes built and views populated once (start-up, so no transaction to undo).
    fn load_snapshot(&mut self, dir: &std::path::Path) -> Result<()> {
        let started = std::time::Instant::now();
        let mut load = BulkLoad::default();
        let mut rows = 0;
        // Each chunk goes into its table's slots as it is read: the rows are never all
        // held a second time.
        read_snapshot_rows(self.part.id(), &self.catalog, &self.ring, dir, &mut |table, chunk| {
            rows += chunk.len() as u64;
            load.add(&self.part, table, chunk)
        })?;
        let read_ms = started.elapsed().as_millis() as u64;
        self.part.finish_load(load)?;
        self.release_load_buffers();
        // Where a restart's time goes: reading and storing rows, then building indexes.
        let index_ms = started.elapsed().as_millis() as u64 - read_ms;
        tracing::info!(site = self.id, rows, read_ms, index_ms, "loaded snapshot {}", dir.display());
        Ok(())
    }

    /// The site's loop: runs until Shutdown or until every sender is gone.
    pub fn run(mut self) {
        loop {
            if self.answers.len() >= ANSWERS_HELD_MAX
                || self.waiting.len() >= WAITING_HELD_MAX
                || (!self.answers.is_empty() && self.clock.duration_since(self.held_since) >= ANSWERS_HELD_FOR_MAX)
            {
                self.send_answers();
            }
            // Whether `clock` still tells the time: nothing but a call has run since it was
            // read, and a call taken straight off the queue may start from it.
            let mut clock_fresh = std::mem::take(&mut self.clock_fresh);
            let deferred = if self.held.is_none() { self.deferred.pop_front() } else { None };
            let msg = match deferred.map_or_else(|| self.queue.try_recv(), Ok) {
                Ok(m) => m,
                Err(_) if !self.answers.is_empty() || !self.waiting.is_empty() => {
                    self.send_answers();
                    continue;
                }
                Err(_) if self.snapshot.is_some() => {
                    // Idle while writing a snapshot: write more of it.
                    self.snapshot_step();
                    continue;
                }
                Err(_) => {
                    // Idle: push exported rows out before sleeping.
                    if let Err(e) = self.export.flush() {
                        tracing::error!(site = self.id, "export flush failed: {e}");
                    }
                    // Over the memory limit, what this thread freed may be all it takes.
                    if self.memory.refuses_writes() {
                        self.release_freed_memory();
                    }
                    // Blocks. Yielding the core a few hundred times first, to spare the
                    // waker a futex call, gave no more throughput on 2 vCPUs and cost a
                    // third of the server's CPU at 10K calls/s.
                    clock_fresh = false;
                    match self.queue.recv() {
                        Ok(m) => m,
                        Err(_) => break,
                    }
                }
            };
            match msg {
                SiteMsg::Call { reply, .. } if self.held.is_some() => {
                    let txn = self.held.as_ref().map_or(0, |h| h.txn_id);
                    let why = format!(
                        "partition {} waits for the outcome of multi-partition transaction {txn}, which its previous leader prepared: try again shortly",
                        self.id
                    );
                    self.answer(Outcome::error(Error::unavailable(why)), reply)
                }
                msg @ SiteMsg::MpBegin { .. } if self.held.is_some() => {
                    if self.deferred.len() >= DEFERRED_MAX {
                        tracing::error!(site = self.id, "too many multi-partition transactions wait for a held share: one is dropped");
                    } else {
                        self.deferred.push_back(msg);
                    }
                }
                SiteMsg::Call { work, params, timeout, reply } => self.run_single(work, params, Run::Live { reply, timeout }, clock_fresh),
                SiteMsg::Replay { work, params, txn_id } => self.run_single(work, params, Run::Replay(txn_id), clock_fresh),
                SiteMsg::Replicated { work, params, txn_id, seq } => {
                    self.run_single(work, params, Run::Replicated { txn_id, seq }, clock_fresh)
                }
                SiteMsg::ReplicatedMp { txn_id, seq, participants, specs } => self.hold_share(txn_id, seq, participants, specs),
                SiteMsg::ReplicatedDecide { txn_id, seq, commit } => self.replicated_decide(txn_id, seq, commit),
                SiteMsg::Resolve { txn_id, commit, done } => self.resolve_held(txn_id, commit, done),
                SiteMsg::MpBegin { txn_id, log_marker } => {
                    // The transaction may hold the site for a while: answer the callers first.
                    self.send_answers();
                    if log_marker {
                        // Mark this site's place in the log, then tell the coordinator, which
                        // logs the transaction itself only after every site's marker: the
                        // log then never holds the transaction without all its markers.
                        self.durable.append(&Record::MpMarker { partition: self.id, mp_txn_id: txn_id });
                        if self.mp_out.send(Ok(ResultTable::default())).is_err() {
                            continue;
                        }
                    }
                    self.serve_mp(txn_id)
                }
                SiteMsg::Read { catalog_version, f, reply } => {
                    let _ = reply.send(self.run_read(catalog_version, f));
                }
                SiteMsg::Inspect(f) => f(&self.part),
                SiteMsg::Stats(f) => f(&self.part, &mut self.stats, &self.registry),
                SiteMsg::Quiesce(done) => {
                    if let Err(e) = self.export.flush() {
                        tracing::error!(site = self.id, "export flush failed: {e}");
                    }
                    done();
                }
                SiteMsg::RejoinSnapshot { joiner, dir, done } => match self.begin_rejoin_snapshot(joiner, &dir) {
                    Ok((seq, term, writer, export)) => {
                        let report = SnapshotReport::Rejoin { seq, term, done, export };
                        self.snapshot = Some(SiteSnapshot { report, writer, catalog: self.catalog.clone(), table: None });
                    }
                    Err(e) => done(Err(e)),
                },
                SiteMsg::RejoinLoad { file, entry, term, seq, done } => done(self.load_rejoin(file, entry, term, seq)),
                SiteMsg::Shutdown => break,
            }
            if self.snapshot.is_some() {
                self.snapshot_step();
            }
        }
        self.send_answers();
        if let Err(e) = self.export.flush() {
            tracing::error!(site = self.id, "export flush failed: {e}");
        }
    }

    /// Hands the buffers a bulk load freed (decoded rows, gathered keys: hundreds of MB
    /// for a large snapshot) back to the system now: the allocator would otherwise keep
    /// them until this thread next allocates past its purge delay, and an idle site may
    /// not for a long time.
    fn release_load_buffers(&mut self) {
        if let Some(release) = self.release_memory {
            release();
        }
    }

    /// Hands memory this thread freed back to the system, at most once per
    /// `RELEASE_INTERVAL` (it walks the thread's heap).
    fn release_freed_memory(&mut self) {
        let Some(release) = self.release_memory else { return };
        let now = std::time::Instant::now();
        if self.released_at.is_none_or(|t| now.duration_since(t) >= RELEASE_INTERVAL) {
            self.released_at = Some(now);
            release();
        }
    }

    fn send_answers(&mut self) {
        // Writing the answers takes a while: the clock must be read again after it.
        self.clock_fresh = false;
        // One socket write per connection for the lot, not one per answer.
        crate::answer_batch::batch(|| {
            for (outcome, reply) in self.answers.drain(..) {
                reply(outcome);
            }
        });
        if !self.waiting.is_empty() {
            let waiting = std::mem::replace(&mut self.waiting, Vec::with_capacity(WAITING_HELD_MAX));
            self.durable.reply_when_appended_are_durable(waiting);
        }
    }

    /// Sends an answer that logs nothing once the writes before it are durable (at once if
    /// they are); either way held briefly with others. On a cluster's leader it also waits
    /// until every replica has those writes: it may show them, and until then a failover
    /// could lose them.
    fn answer(&mut self, outcome: Outcome, reply: Reply) {
        let reply = match self.cluster.get() {
            Some(cluster) => {
                let (reply, replicated) = crate::cluster::join_unchanged(reply);
                cluster.after_appended(self.id, replicated);
                reply
            }
            None => reply,
        };
        if self.durable.must_wait(Some(self.id)) {
            self.waiting.push((outcome, reply));
        } else {
            if self.answers.is_empty() {
                self.held_since = self.clock;
            }
            self.answers.push((outcome, reply));
        }
    }

    /// Writes the next chunk of the snapshot in progress; reports the file when done.
    fn snapshot_step(&mut self) {
        self.clock_fresh = false;
        let Some(snap) = &mut self.snapshot else { return };
        let result = match self.part.snapshot_chunk(SNAPSHOT_CHUNK_ROWS) {
            Some(chunks) => {
                let mut r = Ok(());
                for (table, rows) in chunks {
                    r = write_snapshot_rows(snap, table, &rows);
                    if r.is_err() {
                        break;
                    }
                }
                match r {
                    Ok(()) => return,
                    Err(e) => Err(e),
                }
            }
            None => Ok(()),
        };
        self.part.end_snapshot();
        let Some(snap) = self.snapshot.take() else { return };
        // Flushing and syncing the file takes milliseconds: not on the transaction thread.
        let (coordinator, partition) = (self.coordinator.clone(), self.id);
        let (writer, report) = (snap.writer, snap.report);
        let finish = move || match report {
            SnapshotReport::Coordinator(id) => {
                let result = result.and_then(|()| writer.finish());
                let _ = coordinator.send(MpWork::SnapshotPart { id, partition, result });
            }
            SnapshotReport::Rejoin { seq, term, done, export } => {
                let mut writer = writer;
                // The export rows are read from the files here, off the transaction thread.
                let result = result.and_then(|()| crate::export::write_image(&mut writer, &export)).and_then(|()| writer.finish());
                done(result.map(|file| RejoinPoint { seq, term, file }))
            }
        };
        if let Err(e) = std::thread::Builder::new().name(format!("snapshot-{partition}")).spawn(finish) {
            // The closure is gone with the failed spawn: the snapshot is abandoned, and its
            // requester learns it by its own timeout.
            tracing::error!(partition, "cannot start the snapshot writer thread: {e}");
        }
    }

    /// On a partition's leader, between transactions: make `joiner` a learner from this
    /// point of the partition's order and start writing the partition's image as it is now,
    /// with where each export target's numbering stands at this point.
    fn begin_rejoin_snapshot(&mut self, joiner: u32, dir: &std::path::Path) -> Result<RejoinStart> {
        if self.snapshot.is_some() {
            return Err(Error::unavailable("a snapshot of the partition is being written; rejoin again when it is done"));
        }
        if self.held.is_some() {
            // An image now would lack the share its replicas hold.
            return Err(Error::unavailable("the partition waits for a multi-partition transaction's outcome; rejoin again when it has it"));
        }
        let cluster = self.cluster.get().cloned().ok_or_else(|| Error::unexpected("not in a cluster"))?;
        let writer = SnapshotWriter::create(dir, self.id, self.ids.high_water())?;
        let export =
            self.export.image_marks().map_err(|e| Error::unavailable(format!("cannot note the partition's export numbering: {e}")))?;
        let (seq, term) = cluster.add_learner(self.id, joiner).map_err(Error::unavailable)?;
        self.part.begin_snapshot()?;
        Ok((seq, term, writer, export))
    }

    /// On a node rejoining the partition: swaps in the leader's image, then takes the
    /// entries after it. The old contents (a copy lost with the node's last process, or an
    /// earlier attempt's) go.
    fn load_rejoin(&mut self, file: std::path::PathBuf, entry: FileEntry, term: u64, seq: u64) -> Result<u64> {
        if self.snapshot.is_some() {
            return Err(Error::unavailable("a snapshot of the partition is being written here; rejoin again when it is done"));
        }
        let cluster = self.cluster.get().cloned().ok_or_else(|| Error::unexpected("not in a cluster"))?;
        let mut reader = PartitionReader::open(file, entry, self.id)?;
        let mut part = Partition::new(self.id);
        part.apply_schema(&self.catalog, &self.ring)?;
        let mut load = BulkLoad::default();
        let mut loaded = 0;
        let mut export = self.export.stage();
        read_file_rows(
            &mut reader,
            &self.catalog,
            &mut |def, rows| {
                loaded += rows.len() as u64;
                load.add(&part, def.id, rows)
            },
            &mut |chunk| export.add(chunk),
        )?;
        part.finish_load(load)?;
        self.release_load_buffers();
        self.adopt_export(export)?;
        self.part = part;
        self.ids.advance_past(reader.txn_id());
        // The image is taken between transactions, never between a share's prepare and its
        // outcome: a share held here from before (replayed from this node's log) is stale.
        if let Some(stale) = self.held.take() {
            tracing::info!(site = self.id, txn_id = stale.txn_id, "a share held from before the rejoin is superseded by the image");
            crate::mp_ledger::lock(&self.ledger).drop_held(self.id);
        }
        cluster.learn(self.id, term, seq).map_err(Error::unavailable)?;
        Ok(loaded)
    }

    /// On a node rejoining the partition: its export files become the leader's rows from the
    /// image, numbered as the leader numbers them (`ExportWriter::adopt`).
    fn adopt_export(&mut self, staged: crate::export::ImageStaging) -> Result<()> {
        let adopted = self
            .export
            .adopt(staged)
            .map_err(|e| Error::unavailable(format!("cannot replace the partition's export files with the image's: {e}")))?;
        if !adopted.is_empty() {
            tracing::info!(site = self.id, "export numbering of {} taken from the leader's image", adopted.join(", "));
        }
        Ok(())
    }

    /// Runs one single-partition transaction. A live call (`reply`) that changed data is
    /// logged before it is answered; a replayed one (`replay_id`) runs with its logged id.
    /// `clock_fresh`: it follows the last call at once, and starts when that one ended.
    fn run_single(&mut self, work: SpWork, params: Vec<Value>, run: Run, clock_fresh: bool) {
        // One look at the clock serves the id, the statistics and the deadline; in a run of
        // calls, the look at the end of the one before serves.
        let started = if clock_fresh { self.clock } else { std::time::Instant::now() };
        let (txn_id, reply, replay_id, timeout, replicated) = match run {
            Run::Replay(id) => {
                self.ids.advance_past(id);
                (id, None, Some(id), None, None)
            }
            // Like a replay: it ran to its end once, on the leader.
            Run::Replicated { txn_id, seq } => {
                self.ids.advance_past(txn_id);
                (txn_id, None, Some(txn_id), None, Some(seq))
            }
            Run::Live { reply, timeout } => (self.ids.next_id_at(started), Some(reply), None, timeout, None),
        };
        let mut ctx = ExecCtx::new(txn_id, timestamp_micros(txn_id));
        if replay_id.is_some() {
            // A replayed transaction ran to its end once: no cap may stop it now (and it
            // has no deadline).
            ctx.limits = Limits::UNLIMITED;
        } else {
            ctx.deadline = timeout.and_then(|t| Some(Deadline { started, at: started.checked_add(t)? }));
        }
        self.part.begin();
        let result = catch_unwind(AssertUnwindSafe(|| -> Result<ProcOutput> {
            let mut runner = LocalRunner { part: &mut self.part, ctx };
            let tables = |t| Ok(ProcOutput { tables: vec![t], app_status: -128, app_status_string: None });
            match &work {
                SpWork::Proc(name) => {
                    // The query timeout stops the Lua code as it stops the statements.
                    let time_limit = crate::registry::time_limit(ctx.deadline);
                    let call = CallContext { txn_id, timestamp_micros: ctx.timestamp_micros, partition: Some(self.id), time_limit };
                    self.registry.call_shared(name, &params, &call, &mut runner)
                }
                SpWork::Statement(p) => tables(runner.run(p, &params)?),
                SpWork::Sql(sql) => {
                    let p = Arc::new(lockstep_sql::prepare(&self.catalog, sql)?);
                    tables(runner.run(&p, &params)?)
                }
            }
        }))
        .unwrap_or_else(|panic| Err(Error::from_panic(&*panic)));
        let result_bytes = result.as_ref().map(|o| stats::tables_bytes(&o.tables)).unwrap_or(0);
        let error = result.as_ref().err().map(|e| e.kind);
        let took = started.elapsed();
        self.clock = started + took;
        self.clock_fresh = true;
        self.add_busy(took);
        match &work {
            SpWork::Proc(name) => self.stats.record_shared(name, took, &params, result_bytes, error),
            SpWork::Statement(_) | SpWork::Sql(_) => self.stats.record(stats::ADHOC_PROCEDURE, took, &params, result_bytes, error),
        }
        let changed = self.part.savepoint() > 0 || !self.part.pending_exports().is_empty();
        let result = match result {
            Ok(_) if changed && replay_id.is_none() && self.durable.fenced() => Err(self.durable.fence_error()),
            r => r,
        };
        if let Some(seq) = replicated {
            return self.finish_replicated(work, params, txn_id, seq, result, changed);
        }
        let cluster = if changed && reply.is_some() { self.cluster.get().cloned() } else { None };
        match result {
            Ok(out) if cluster.is_some() => {
                let Some((cluster, reply)) = cluster.zip(reply) else { return };
                self.replicate_then_reply(&*cluster, work, params, txn_id, out, reply);
            }
            Ok(out) => {
                self.commit(txn_id);
                if replay_id.is_some() {
                    return;
                }
                let outcome = Outcome::from_output(out);
                let Some(reply) = reply else { return };
                if !(changed && self.durable.logging()) {
                    return self.answer(outcome, reply);
                }
                let record = self.record(work, params, txn_id);
                self.durable.append_then_reply(&record, outcome, reply);
            }
            Err(e) => {
                self.part.rollback();
                if let Some(reply) = reply {
                    self.answer(Outcome::error(e), reply);
                } else {
                    self.durable.replay_errors.record(format!("transaction {txn_id} on partition {}: {e}", self.id));
                }
            }
        }
    }

    fn record(&self, work: SpWork, params: Vec<Value>, txn_id: i64) -> Record {
        match work {
            SpWork::Proc(procedure) => Record::Sp { txn_id, partition: self.id, procedure, params },
            SpWork::Statement(p) => Record::AdHocSp { txn_id, partition: self.id, sql: p.sql.to_string(), params },
            SpWork::Sql(sql) => Record::AdHocSp { txn_id, partition: self.id, sql, params },
        }
    }

    /// A leader's transaction that changed data: ordered and sent to the replicas before it
    /// commits here (refused: rolled back and answered so), then answered once the log and
    /// every replica have it.
    fn replicate_then_reply(
        &mut self,
        cluster: &dyn ClusterHooks,
        work: SpWork,
        params: Vec<Value>,
        txn_id: i64,
        out: ProcOutput,
        reply: Reply,
    ) {
        let hash = crate::cluster::results_hash(Ok(&out));
        let record = self.record(work, params, txn_id);
        let encoded = match record.encode() {
            Ok(bytes) => bytes,
            Err(e) => {
                self.part.rollback();
                return self.answer(Outcome::error(e), reply);
            }
        };
        let entry = match crate::cluster::ReplicatedEntry::Txn(encoded).encode() {
            Ok(bytes) => bytes,
            Err(e) => {
                self.part.rollback();
                return self.answer(Outcome::error(e), reply);
            }
        };
        let (logged, replicated) = crate::cluster::join(reply);
        if let Err(why) = cluster.replicate(self.id, entry, hash, replicated) {
            self.part.rollback();
            return logged(Outcome::error(Error::unavailable(format!("partition {} cannot take the transaction now: {why}", self.id))));
        }
        self.commit(txn_id);
        if self.durable.logging() {
            self.durable.append_then_reply(&record, Outcome::from_output(out), logged);
        } else {
            logged(Outcome::from_output(out));
        }
    }

    /// A replicated entry ran: commit or roll back as the leader's did, log it like the
    /// leader, and tell the replication (once logged) the hash of what came out.
    fn finish_replicated(&mut self, work: SpWork, params: Vec<Value>, txn_id: i64, seq: u64, result: Result<ProcOutput>, changed: bool) {
        let hash = crate::cluster::results_hash(result.as_ref());
        match &result {
            Ok(_) => self.commit(txn_id),
            Err(_) => self.part.rollback(),
        }
        let Some(cluster) = self.cluster.get().cloned() else { return };
        let partition = self.id;
        if result.is_ok() && changed && self.durable.logging() {
            let record = self.record(work, params, txn_id);
            self.durable.append_then_reply(&record, Outcome::tables(Vec::new()), Box::new(move |_| cluster.applied(partition, seq, hash)));
        } else {
            cluster.applied(partition, seq, hash);
        }
    }

    /// Holds this partition's prepared share of a multi-partition transaction its leader
    /// ran; logs it like the leader, and reports (once logged) that it holds it. In recovery
    /// (no `seq`) it only holds it.
    fn hold_share(&mut self, txn_id: i64, seq: Option<u64>, participants: Vec<u32>, specs: Vec<lockstep_sql::FragmentSpec>) {
        self.ids.advance_past(txn_id);
        if let Some(h) = &self.held {
            tracing::error!(site = self.id, txn_id, "a share was prepared while the share of {} waits for its outcome", h.txn_id);
        }
        let logged = match seq.is_some() && self.durable.logging() {
            true => match postcard::to_allocvec(&specs) {
                Ok(bytes) => Some(Record::MpShare { txn_id, partition: self.id, participants: participants.clone(), specs: bytes }),
                Err(e) => {
                    tracing::error!(site = self.id, txn_id, "a share cannot be encoded for the command log: {e}");
                    None
                }
            },
            false => None,
        };
        crate::mp_ledger::lock(&self.ledger).hold(self.id, txn_id, participants);
        self.held = Some(HeldShare { txn_id, specs });
        self.report_applied(seq, logged, crate::cluster::held_hash(txn_id, None));
    }

    /// Logs `record` (if any), then reports entry `seq` (if any) as run with `hash`.
    fn report_applied(&mut self, seq: Option<u64>, record: Option<Record>, hash: u64) {
        let (Some(seq), Some(cluster)) = (seq, self.cluster.get().cloned()) else { return };
        let partition = self.id;
        match record {
            Some(record) => self.durable.append_then_reply(
                &record,
                Outcome::tables(Vec::new()),
                Box::new(move |_| cluster.applied(partition, seq, hash)),
            ),
            None => cluster.applied(partition, seq, hash),
        }
    }

    /// A replica's outcome of the share held, ordered by its leader as entry `seq` (none in
    /// recovery): run it or drop it, log it, report the hash.
    fn replicated_decide(&mut self, txn_id: i64, seq: Option<u64>, commit: bool) {
        let hash = self.decide_held(txn_id, commit);
        let record = (seq.is_some() && self.durable.logging()).then_some(Record::MpDecide { txn_id, partition: self.id, commit });
        self.report_applied(seq, record, hash);
    }

    /// On a new leader: applies the coordinator's outcome of the share held and hands it to
    /// the replication, as the leader that prepared it would have.
    fn resolve_held(&mut self, txn_id: i64, commit: bool, done: Box<dyn FnOnce(std::result::Result<(), String>) + Send>) {
        if self.held.as_ref().is_none_or(|h| h.txn_id != txn_id) {
            // Decided already (a repeated message), or never prepared here: nothing to do
            // for an abort; a commit of a share never held would be a broken promise.
            let known = crate::mp_ledger::lock(&self.ledger).outcome(self.id, txn_id);
            return done(match (commit, known) {
                (false, None | Some(false)) | (true, Some(true)) => Ok(()),
                _ => Err(format!("partition {} holds no prepared share of transaction {txn_id}", self.id)),
            });
        }
        let Some(cluster) = self.cluster.get().cloned() else { return done(Err("this node is not in a cluster".into())) };
        let entry = match (crate::cluster::ReplicatedEntry::MpDecide { txn_id, commit }).encode() {
            Ok(e) => e,
            Err(e) => return done(Err(e.message)),
        };
        let hash = self.decide_held(txn_id, commit);
        if self.durable.logging() {
            self.durable.append(&Record::MpDecide { txn_id, partition: self.id, commit });
        }
        if let Err(why) = cluster.replicate(self.id, entry, hash, done) {
            tracing::error!(site = self.id, txn_id, "the outcome of a held share could not be replicated: {why}");
        }
    }

    /// Runs the share held (commit: its fragments in order, all or nothing) or drops it;
    /// records the outcome; the hash replicas compare.
    fn decide_held(&mut self, txn_id: i64, commit: bool) -> u64 {
        let Some(held) = self.held.take_if(|h| h.txn_id == txn_id) else {
            tracing::error!(site = self.id, txn_id, "an outcome came for a share this site does not hold");
            return !crate::cluster::held_hash(txn_id, Some(commit));
        };
        crate::mp_ledger::lock(&self.ledger).decided(self.id, txn_id, commit);
        if !commit {
            return crate::cluster::held_hash(txn_id, Some(false));
        }
        if self.plans.as_ref().is_none_or(|p| p.catalog_version() != self.catalog.version) {
            self.plans = Some(lockstep_sql::PlanCache::new(self.catalog.clone()));
        }
        self.part.begin();
        let (part, plans) = (&mut self.part, &self.plans);
        let result = catch_unwind(AssertUnwindSafe(|| -> Result<Vec<ResultTable>> {
            let plans = plans.as_ref().ok_or_else(|| Error::unexpected("no plan cache"))?;
            held.specs.into_iter().map(|spec| lockstep_sql::fragment_fn(spec, plans).and_then(|f| f(part))).collect()
        }))
        .unwrap_or_else(|panic| Err(Error::from_panic(&*panic)));
        let hash = crate::cluster::parts_hash(result.as_deref());
        match result {
            Ok(_) => self.commit(txn_id),
            Err(_) => self.part.rollback(),
        }
        hash
    }

    /// Counts time this site spent running work (`lockstep_partition_busy_seconds_total`).
    fn add_busy(&self, took: std::time::Duration) {
        if let Some(n) = self.busy_ns.get(self.id as usize) {
            n.0.fetch_add(took.as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
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

    /// Runs a multi-partition read's fragment between transactions. It changes nothing, so
    /// its undo scope is rolled back whatever it did.
    fn run_read(&mut self, catalog_version: u64, f: SiteFn) -> ReadAnswer {
        if self.catalog.version != catalog_version {
            return ReadAnswer::Stale;
        }
        let started = std::time::Instant::now();
        self.part.begin();
        let r = catch_unwind(AssertUnwindSafe(|| f(&mut self.part))).unwrap_or_else(|p| Err(Error::from_panic(&*p)));
        self.part.rollback();
        self.add_busy(started.elapsed());
        ReadAnswer::Done(r)
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
                    let started = std::time::Instant::now();
                    let r = catch_unwind(AssertUnwindSafe(|| f(&mut self.part))).unwrap_or_else(|p| Err(Error::from_panic(&*p)));
                    self.add_busy(started.elapsed());
                    if self.mp_out.send(r).is_err() {
                        self.part.rollback();
                        return;
                    }
                }
                MpMsg::LogMarker => {
                    self.durable.append(&Record::MpMarker { partition: self.id, mp_txn_id: txn_id });
                    if self.mp_out.send(Ok(ResultTable::default())).is_err() {
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
                MpMsg::SnapshotBegin { id, writer } => {
                    let r = self.begin_snapshot(id, writer).map(|_| ResultTable::default());
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

    /// Marks the state to snapshot. The MP transaction that carries this has changed
    /// nothing, so its (empty) undo scope is closed around the mark.
    fn begin_snapshot(&mut self, id: u64, writer: SnapshotWriter) -> Result<()> {
        if self.snapshot.is_some() {
            return Err(Error::graceful("a snapshot is already being written"));
        }
        self.part.commit();
        let marked = self.part.begin_snapshot();
        self.part.begin();
        marked?;
        self.snapshot = Some(SiteSnapshot { report: SnapshotReport::Coordinator(id), writer, catalog: self.catalog.clone(), table: None });
        Ok(())
    }

    fn adopt(&mut self, catalog: Arc<Catalog>) -> Result<()> {
        self.part.apply_schema(&catalog, &self.ring)?;
        // No load time limit: the coordinator loaded these modules within its limit first
        // (live DDL), and a catalog change replayed in recovery must not fail by the clock.
        self.registry.rebuild(&catalog, None)?;
        self.catalog = catalog;
        Ok(())
    }
}

/// Reads the rows of a snapshot that belong to `partition`: a partitioned table's rows by
/// the hash of their partition column (so the partition count may change), a replicated
/// table's from partition 0's file. `on_rows` gets them a chunk at a time, with their table.
pub(crate) fn read_snapshot_rows(
    partition: u32,
    catalog: &Catalog,
    ring: &HashRing,
    dir: &std::path::Path,
    on_rows: &mut dyn FnMut(TableId, Vec<Vec<Value>>) -> Result<()>,
) -> Result<()> {
    let reader = SnapshotReader::open(dir)?;
    // With the same number of partitions (so the same ring), partition p's rows are all in
    // file p: read only that one.
    let files = reader.manifest().partitions;
    let own = (files == ring.partitions()).then_some(partition);
    for p in (0..files).filter(|p| own.is_none_or(|o| o == *p)) {
        let mut file = reader.partition(p)?;
        let mine = &mut |def: &lockstep_core::TableDef, rows: Vec<Vec<Value>>| {
            let mine: Vec<Vec<Value>> = match def.partition_column {
                _ if own.is_some() => rows,
                Some(c) => rows.into_iter().filter(|row| ring.partition_for(&row[c]) == partition).collect(),
                None if p == 0 => rows,
                None => Vec::new(),
            };
            on_rows(def.id, mine)
        };
        // Only a rejoin image carries export rows.
        read_file_rows(&mut file, catalog, mine, &mut |_| Ok(()))?;
    }
    Ok(())
}

/// Reads one partition file's rows, a chunk at a time with their table (checked against
/// the catalog), and hands a rejoin image's export rows to `on_export`.
fn read_file_rows(
    file: &mut PartitionReader,
    catalog: &Catalog,
    on_rows: &mut dyn FnMut(&lockstep_core::TableDef, Vec<Vec<Value>>) -> Result<()>,
    on_export: &mut dyn FnMut(crate::snapshot::format::ExportChunk) -> Result<()>,
) -> Result<()> {
    let mut table: Option<Arc<lockstep_core::TableDef>> = None;
    while let Some(item) = file.next_item()? {
        match item {
            SnapshotItem::Table { name, types } => {
                let def =
                    catalog.table(&name).ok_or_else(|| Error::graceful(format!("table {name} of the snapshot is not in the catalog")))?;
                let expected: Vec<DataType> = def.columns.iter().map(|c| c.ty).collect();
                if expected != types {
                    return Err(Error::graceful(format!("table {name}: the snapshot's column types differ from the catalog's")));
                }
                table = Some(def.clone());
            }
            SnapshotItem::Rows(rows) => {
                let def = table.as_ref().ok_or_else(|| Error::unexpected("rows before any table in a snapshot file"))?;
                on_rows(def, rows)?;
            }
            SnapshotItem::Export(chunk) => on_export(chunk)?,
        }
    }
    Ok(())
}

/// Appends rows of `table` to a snapshot file, starting the table's section if needed.
fn write_snapshot_rows(snap: &mut SiteSnapshot, table: TableId, rows: &[Vec<Value>]) -> Result<()> {
    if snap.table != Some(table) {
        let def = snap
            .catalog
            .table_by_id(table)
            .ok_or_else(|| Error::unexpected(format!("snapshot: table {table} is not in the catalog it began with")))?;
        let types: Vec<DataType> = def.columns.iter().map(|c| c.ty).collect();
        snap.writer.begin_table(&def.name, &types)?;
        snap.table = Some(table);
    }
    if rows.is_empty() {
        return Ok(());
    }
    snap.writer.write_rows(rows)
}
