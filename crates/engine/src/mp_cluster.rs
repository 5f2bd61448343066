//! Multi-partition transactions in a cluster. One node coordinates them all (the hooks say
//! which); its coordinator parks the partitions it leads, asks every other node that leads
//! partitions to park theirs (`MpRemote::Begin`), and sends each fragment to the node that
//! leads its partition, as data (`FragmentSpec`), or runs it here. A node that leads
//! partitions serves such a transaction on its own coordinator thread (`remote_session`).
//!
//! What a transaction did to a partition reaches the partition's replicas in two entries of
//! its replication, at the place where the partition was parked. First the *prepared share*:
//! the fragments that ran on it, in order (`ReplicatedEntry::MpPart`), which the replicas
//! hold without running. Once every share is in every replica, the coordinator decides to
//! commit, and a second entry (`ReplicatedEntry::MpDecide`) has the replicas run the share
//! again (their hash of the answers must equal the leader's) or drop it. Each is in the
//! command log of every replica (`Record::MpShare`, `Record::MpDecide`).
//!
//! A coordinator or a leader lost between the two entries leaves shares held undecided. The
//! node coordinating next gathers what every node knows (`mp_ledger`) and decides each such
//! transaction by one rule: an outcome any partition applied stands; otherwise commit if
//! and only if every share was prepared (docs/cluster.md).

use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::RecvTimeoutError;
use lockstep_core::{Error, HashRing, Result, ResultTable};
use lockstep_procs::{CallContext, ProcOutput};
use lockstep_sql::{Deadline, ExecCtx, Fragment, FragmentSpec, PlanCache, SiteAccess, SiteFn, StatementRef, StatementResolver, Target};

use crate::cluster::{ClusterHooks, ErrorData, MpRemote, RemoteAnswer, ReplicatedEntry, TableData};
use crate::cmdlog::Record;
use crate::mp::{Coordinator, MpRunner, SiteLink, Sites};
use crate::mp_ledger::{self, Decision, InDoubtRow, Ledger, ShareState};
use crate::outcome::Outcome;
use crate::registry::Registry;
use crate::site::{MpMsg, SiteMsg};
use crate::txn_id::timestamp_micros;

/// How long a node serving a transaction waits for the coordinator's next step before it
/// rolls back (the coordinator is gone).
pub const REMOTE_SESSION_IDLE: Duration = Duration::from_secs(30);
/// How often a node serving a transaction that has only read looks whether its coordinator
/// was declared down (then it lets its partitions go at once: see `remote_session`).
pub const REMOTE_SESSION_POLL: Duration = Duration::from_millis(50);
/// How long a transaction's answer waits for the replicas of the partitions led here.
pub const REPLICATION_WAIT: Duration = Duration::from_secs(30);
/// How long a new leader's site is given to apply the outcome of a share it holds.
const RESOLVE_WAIT: Duration = Duration::from_secs(10);

/// The answer to one step of a remote session.
pub type RemoteReply = Box<dyn FnOnce(RemoteAnswer) + Send>;

/// A step of the transaction a node serves, with where its answer goes.
pub struct RemoteStep {
    pub message: MpRemote,
    pub reply: RemoteReply,
}

/// The steps of the transaction this node serves for the coordinator (`remote_session`),
/// and which transaction that is. A step is queued only while its transaction is served,
/// and a session that ends answers every step still queued, both under one lock: a step
/// that arrives as its session ends is refused at once, never left in a queue nobody
/// reads. (One was: the End a new coordinator sent while settling a transaction whose
/// session was just ending waited 30 s for an answer, and every multi-partition call
/// waited behind it.)
pub(crate) struct RemoteSteps {
    /// The transaction served (0: none).
    serving: std::sync::Mutex<i64>,
    /// The transaction whose `Begin` arrived last: once it is not the one served, the
    /// coordinator has moved on (see `remote_session`).
    begun_last: std::sync::atomic::AtomicI64,
    tx: crossbeam_channel::Sender<RemoteStep>,
    rx: crossbeam_channel::Receiver<RemoteStep>,
}

impl RemoteSteps {
    pub(crate) fn new(max: usize) -> RemoteSteps {
        let (tx, rx) = crossbeam_channel::bounded(max);
        RemoteSteps { serving: std::sync::Mutex::new(0), begun_last: std::sync::atomic::AtomicI64::new(0), tx, rx }
    }

    fn serving(&self) -> std::sync::MutexGuard<'_, i64> {
        self.serving.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues a step of transaction `txn_id` for its session, or answers it with why not.
    pub(crate) fn offer(&self, txn_id: i64, step: RemoteStep) {
        let serving = self.serving();
        let refused = match *serving == txn_id {
            // A step of a transaction not served here (it ended here, or a coordinator
            // that lost its place still runs it).
            false => Some((step, format!("this node is not serving multi-partition transaction {txn_id}"))),
            true => self.tx.try_send(step).err().map(|e| (e.into_inner(), "this node has too many multi-partition steps waiting".into())),
        };
        drop(serving);
        if let Some((step, message)) = refused {
            (step.reply)(Err(ErrorData { status: -5, message }));
        }
    }

    /// A `Begin` of `txn_id` arrived (its session starts once this node's coordinator
    /// thread takes it).
    pub(crate) fn begin_arrived(&self, txn_id: i64) {
        self.begun_last.store(txn_id, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether a `Begin` of a transaction other than `txn_id` arrived after `txn_id`'s.
    fn superseded(&self, txn_id: i64) -> bool {
        self.begun_last.load(std::sync::atomic::Ordering::SeqCst) != txn_id
    }

    /// The next step for the session, waiting at most `wait`.
    fn next(&self, wait: Duration) -> std::result::Result<RemoteStep, RecvTimeoutError> {
        self.rx.recv_timeout(wait)
    }

    fn begin(&self, txn_id: i64) {
        *self.serving() = txn_id;
    }

    /// The session has ended: steps still queued are answered, and no more are taken.
    fn end(&self) {
        let mut serving = self.serving();
        let ended = std::mem::take(&mut *serving);
        let left: Vec<RemoteStep> = self.rx.try_iter().collect();
        drop(serving);
        for step in left {
            let message = format!("multi-partition transaction {ended} ended here before this step was taken");
            (step.reply)(Err(ErrorData { status: -5, message }));
        }
    }
}

/// What a transaction did to one partition led here: for its replicas.
#[derive(Default)]
pub(crate) struct Share {
    specs: Vec<FragmentSpec>,
    results: Vec<ResultTable>,
}

/// The partitions of the whole cluster, as a transaction's fragments reach them.
pub(crate) struct ClusterSites<'a> {
    links: &'a [SiteLink],
    ring: &'a HashRing,
    hooks: &'a dyn ClusterHooks,
    me: u32,
    txn_id: i64,
    /// By partition.
    leaders: Vec<u32>,
    plans: &'a PlanCache,
    shares: BTreeMap<u32, Share>,
    /// Partitions led elsewhere where a fragment ran: each has a share there.
    remote: BTreeSet<u32>,
}

impl ClusterSites<'_> {
    pub(crate) fn take_shares(&mut self) -> BTreeMap<u32, Share> {
        std::mem::take(&mut self.shares)
    }

    fn targets(&self, target: Target) -> Vec<u32> {
        match target {
            Target::All => (0..self.links.len() as u32).collect(),
            Target::One(p) => vec![p],
        }
    }

    fn link(&self, p: u32) -> Result<&SiteLink> {
        self.links.get(p as usize).ok_or_else(|| Error::unexpected(format!("no partition {p}")))
    }
}

impl SiteAccess for ClusterSites<'_> {
    fn partition_count(&self) -> u32 {
        self.links.len() as u32
    }

    fn ring(&self) -> &HashRing {
        self.ring
    }

    /// Only for work that never leaves this node: it cannot reach a partition led elsewhere.
    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
        let targets = self.targets(target);
        if let Some(p) = targets.iter().find(|p| self.leaders.get(**p as usize) != Some(&self.me)) {
            return Err(Error::graceful(format!(
                "this operation cannot run in a cluster yet: it needs partition {p}, led by another node"
            )));
        }
        run_here(self.links, &targets, &|| MpMsg::Fragment(f.clone()))
    }

    fn run_fragment(&mut self, target: Target, fragment: Fragment) -> Result<Vec<ResultTable>> {
        let targets = self.targets(target);
        let stopped = || Error::unavailable("a partition site has stopped");
        // The partitions here work in parallel while the others are asked in turn.
        for &p in &targets {
            if self.leaders.get(p as usize) == Some(&self.me) {
                self.link(p)?.to_site.send(MpMsg::Fragment(fragment.local.clone())).map_err(|_| stopped())?;
            }
        }
        let named = named_by_text(&fragment.spec, self.plans);
        let mut answers = Vec::with_capacity(targets.len());
        for &p in &targets {
            let leader = self.leaders.get(p as usize).copied().unwrap_or(self.me);
            let answer = if leader == self.me {
                let r = self.link(p)?.from_site.recv().map_err(|_| stopped()).and_then(|r| r);
                if let (Ok(t), Ok(spec)) = (&r, &named) {
                    let share = self.shares.entry(p).or_default();
                    share.specs.push(spec.clone());
                    share.results.push(t.clone());
                }
                r
            } else {
                let message = MpRemote::Fragment { txn_id: self.txn_id, partition: p, spec: (*fragment.spec).clone() };
                let answer = self.hooks.mp_remote(leader, message).map_err(Error::from).and_then(TableData::into_table);
                if answer.is_ok() {
                    self.remote.insert(p);
                }
                answer
            };
            answers.push(answer);
        }
        // Named for the replicas only once every answer is read (none is left behind).
        named?;
        answers.into_iter().collect()
    }
}

/// Sends a message to the parked sites `targets` here and gathers every answer.
fn run_here(links: &[SiteLink], targets: &[u32], make: &dyn Fn() -> MpMsg) -> Result<Vec<ResultTable>> {
    let stopped = || Error::unavailable("a partition site has stopped");
    for &p in targets {
        links.get(p as usize).ok_or_else(stopped)?.to_site.send(make()).map_err(|_| stopped())?;
    }
    let answers: Vec<Result<ResultTable>> =
        targets.iter().map(|&p| links[p as usize].from_site.recv().map_err(|_| stopped()).and_then(|r| r)).collect();
    answers.into_iter().collect()
}

/// The spec with its statement named by SQL text, which a replica's site can plan without
/// the procedure that holds it.
fn named_by_text(spec: &FragmentSpec, plans: &PlanCache) -> Result<FragmentSpec> {
    let mut named = spec.clone();
    if let StatementRef::Procedure { .. } = &spec.statement {
        let p = plans.resolve(spec.catalog_version, &spec.statement)?;
        named.statement = StatementRef::Sql(p.sql.clone());
    }
    Ok(named)
}

/// Answers awaited from the replicas (and this node's log) of the shares led here.
pub(crate) struct Pending {
    rx: crossbeam_channel::Receiver<std::result::Result<(), String>>,
    expected: usize,
    /// Why a share could not be sent at all.
    failed: Option<String>,
}

impl Pending {
    fn new() -> (crossbeam_channel::Sender<std::result::Result<(), String>>, Pending) {
        let (tx, rx) = crossbeam_channel::unbounded();
        (tx, Pending { rx, expected: 0, failed: None })
    }

    /// Waits for every answer, for `REPLICATION_WAIT` in all; the reason if any failed or
    /// any did not come in time.
    fn wait(self) -> Option<String> {
        let mut failed = self.failed;
        let deadline = std::time::Instant::now() + REPLICATION_WAIT;
        for _ in 0..self.expected {
            match self.rx.recv_deadline(deadline) {
                Ok(Ok(())) => {}
                Ok(Err(why)) => failed = Some(why),
                Err(_) => return Some(format!("the replicas did not confirm within {} s", REPLICATION_WAIT.as_secs())),
            }
        }
        failed
    }
}

/// Prepares each share led here: its replicas hold it, not run; it is logged here too (the
/// partition is parked, so the record falls at the share's place in its order).
fn prepare_shares(
    hooks: &dyn ClusterHooks,
    durable: &Arc<crate::durable::Durable>,
    txn_id: i64,
    participants: &[u32],
    shares: &BTreeMap<u32, Share>,
) -> Pending {
    let (tx, mut pending) = Pending::new();
    for (&p, share) in shares {
        let record = match durable.logging() {
            true => postcard::to_allocvec(&share.specs)
                .map(|specs| Some(Record::MpShare { txn_id, partition: p, participants: participants.to_vec(), specs })),
            false => Ok(None),
        };
        let sent = record.map_err(|e| format!("the share cannot be encoded: {e}")).and_then(|record| {
            let entry = ReplicatedEntry::MpPart { txn_id, participants: participants.to_vec(), specs: share.specs.clone() };
            let entry = entry.encode().map_err(|e| e.message)?;
            let replicated = tx.clone();
            hooks.replicate(p, entry, crate::cluster::held_hash(txn_id, None), Box::new(move |r| drop(replicated.send(r))))?;
            Ok(record)
        });
        match sent {
            Ok(record) => {
                pending.expected += 1;
                if let Some(record) = record {
                    let logged = tx.clone();
                    let done =
                        move |o: Outcome| drop(logged.send(if o.is_success() { Ok(()) } else { Err(o.status_string.unwrap_or_default()) }));
                    durable.append_then_reply(&record, Outcome::tables(Vec::new()), Box::new(done));
                    pending.expected += 1;
                }
            }
            Err(why) => pending.failed = Some(format!("partition {p}: {why}")),
        }
    }
    pending
}

/// Decides each share led here: its replicas run it (commit) or drop it; logged here and
/// recorded in the ledger.
fn decide_shares(
    hooks: &dyn ClusterHooks,
    durable: &Arc<crate::durable::Durable>,
    ledger: &std::sync::Mutex<Ledger>,
    txn_id: i64,
    commit: bool,
    shares: &BTreeMap<u32, Share>,
) -> Pending {
    let (tx, mut pending) = Pending::new();
    for (&p, share) in shares {
        mp_ledger::lock(ledger).decided(p, txn_id, commit);
        let hash = match commit {
            true => crate::cluster::parts_hash(Ok(&share.results)),
            false => crate::cluster::held_hash(txn_id, Some(false)),
        };
        if durable.logging() {
            durable.append(&Record::MpDecide { txn_id, partition: p, commit });
        }
        let replicated = tx.clone();
        let sent = ReplicatedEntry::MpDecide { txn_id, commit }
            .encode()
            .map_err(|e| e.message)
            .and_then(|entry| hooks.replicate(p, entry, hash, Box::new(move |r| drop(replicated.send(r)))));
        match sent {
            Ok(()) => pending.expected += 1,
            Err(why) => pending.failed = Some(format!("partition {p}: {why}")),
        }
    }
    pending
}

/// The in-doubt report a node answers `MpRemote::InDoubt` with: the partitions it leads and
/// is ready to answer for, and its rows (one cell, encoded).
#[derive(serde::Serialize, serde::Deserialize)]
struct InDoubtReport {
    ready: Vec<u32>,
    rows: Vec<InDoubtRow>,
}

/// This node's in-doubt report, as a table that travels like any answer.
pub(crate) fn in_doubt_report(hooks: &dyn ClusterHooks, ledger: &std::sync::Mutex<Ledger>, partitions: u32) -> RemoteAnswer {
    let ready: Vec<u32> = (0..partitions).filter(|p| hooks.leads(*p)).collect();
    let rows = mp_ledger::lock(ledger).rows(|p| ready.contains(&p));
    let bytes = postcard::to_allocvec(&InDoubtReport { ready, rows })
        .map_err(|e| ErrorData { status: -5, message: format!("an in-doubt report cannot be encoded: {e}") })?;
    Ok(TableData {
        columns: vec![("REPORT".into(), lockstep_core::DataType::Varbinary.wire_code())],
        rows: vec![vec![lockstep_core::Value::Bytes(bytes.into())]],
    })
}

fn read_report(t: TableData) -> Option<InDoubtReport> {
    match t.rows.first()?.first()? {
        lockstep_core::Value::Bytes(b) => postcard::from_bytes(b).ok(),
        _ => None,
    }
}

/// What decides whether transactions left undecided must be looked for again: which nodes
/// are alive and who leads each partition.
fn topology_fingerprint(t: &crate::cluster::Topology) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    for host in &t.hosts {
        (host.id, host.alive).hash(&mut h);
    }
    for p in &t.partitions {
        p.leader.hash(&mut h);
    }
    h.finish()
}

/// Whether the cluster has declared `node` down (the topology lists it, not alive).
fn declared_down(hooks: &dyn ClusterHooks, node: u32) -> bool {
    hooks.topology().hosts.iter().any(|h| h.id == node && !h.alive)
}

fn ended(links: &[SiteLink], partitions: &[u32], commit: bool) {
    for &p in partitions {
        if let Some(l) = links.get(p as usize) {
            let _ = l.to_site.send(if commit { MpMsg::Commit } else { MpMsg::Rollback });
        }
    }
}

impl Coordinator {
    /// Runs `body` as one multi-partition transaction across the cluster (see the module
    /// header). Called on the coordinating node only.
    pub(crate) fn cluster_transaction(
        &mut self,
        hooks: Arc<dyn ClusterHooks>,
        timeout: Option<Duration>,
        body: impl FnOnce(&mut Registry, &mut MpRunner, &CallContext) -> Result<ProcOutput>,
    ) -> Outcome {
        if let Err(why) = self.settle_in_doubt(&*hooks) {
            return Outcome::error(Error::unavailable(format!(
                "a multi-partition transaction left undecided by a failure is being settled ({why}): try again shortly"
            )));
        }
        let topology = hooks.topology();
        let me = topology.me;
        let mut leaders = Vec::with_capacity(self.links.len());
        for p in 0..self.links.len() {
            match topology.partitions.get(p).and_then(|x| x.leader) {
                Some(l) => leaders.push(l),
                None => {
                    return Outcome::error(Error::unavailable(format!(
                        "partition {p} has no leader now: multi-partition transactions wait until it has one"
                    )))
                }
            }
        }
        let here: Vec<u32> = (0..leaders.len() as u32).filter(|p| leaders[*p as usize] == me).collect();
        let txn_id = self.ids.next_id();
        // The transaction is in the ledger like a session: a node that takes over coordinating
        // (this one lost its place) fences it by asking, and it then cannot commit.
        struct Coordinating<'a>(&'a std::sync::Mutex<Ledger>);
        impl Drop for Coordinating<'_> {
            fn drop(&mut self) {
                mp_ledger::lock(self.0).session_end();
            }
        }
        mp_ledger::lock(&self.shared.ledger).session_begin(txn_id, true);
        let ledger = self.shared.ledger.clone();
        let _coordinating = Coordinating(&ledger);
        for &p in &here {
            let _ = self.links[p as usize].queue.send(SiteMsg::MpBegin { txn_id, log_marker: false });
        }
        let mut begun = Vec::new();
        let mut result = Ok(ProcOutput { tables: Vec::new(), app_status: crate::outcome::APP_STATUS_UNSET, app_status_string: None });
        for n in leaders.iter().copied().filter(|l| *l != me).collect::<BTreeSet<u32>>() {
            match hooks.mp_remote(n, MpRemote::Begin { txn_id }) {
                Ok(_) => begun.push(n),
                Err(e) => {
                    // The `Begin` may have reached the node all the same (only its answer
                    // was lost, or the wait gave up): the next settling, on an idle tick if
                    // no call comes first, finds such a session and ends it.
                    self.in_doubt_settled = None;
                    result = Err(Error::from(e));
                    break;
                }
            }
        }
        let plans = self.registry.plan_cache(self.catalog.clone());
        let (mut shares, mut participants) = (BTreeMap::new(), BTreeSet::new());
        if result.is_ok() {
            let ts = timestamp_micros(txn_id);
            let mut ctx = ExecCtx::new(txn_id, ts);
            ctx.deadline = timeout.and_then(Deadline::after);
            let sites = ClusterSites {
                links: &self.links,
                ring: &self.shared.ring,
                hooks: &*hooks,
                me,
                txn_id,
                leaders: leaders.clone(),
                plans: &plans,
                shares: BTreeMap::new(),
                remote: BTreeSet::new(),
            };
            let mut runner = MpRunner { sites: Sites::Cluster(sites), ctx };
            let call = CallContext { txn_id, timestamp_micros: ts, partition: None, time_limit: crate::registry::time_limit(ctx.deadline) };
            let registry = &mut self.registry;
            result = catch_unwind(AssertUnwindSafe(|| body(registry, &mut runner, &call))).unwrap_or_else(|p| Err(Error::from_panic(&*p)));
            if let Sites::Cluster(s) = &mut runner.sites {
                shares = s.take_shares();
                participants = s.remote.iter().copied().chain(shares.keys().copied()).collect();
            }
        }
        let participants: Vec<u32> = participants.into_iter().collect();
        let durable = self.shared.durable.clone();
        // Prepare: every share into every replica, held, before anything commits anywhere.
        let prepare = result.is_ok() && !participants.is_empty();
        let mut not_prepared = None;
        if prepare {
            let local = prepare_shares(&*hooks, &durable, txn_id, &participants, &shares);
            for &n in &begun {
                if let Err(e) = hooks.mp_remote(n, MpRemote::Prepare { txn_id, participants: participants.clone() }) {
                    not_prepared = Some(format!("node {n}: {}", e.message));
                }
            }
            if let Some(why) = local.wait() {
                not_prepared = Some(why);
            }
            let partitions = shares.keys().copied().collect();
            if not_prepared.is_none() && !mp_ledger::lock(&ledger).session_prepared(txn_id, partitions, participants.clone()) {
                not_prepared = Some("another node took over coordinating before every share was prepared".into());
            }
        }
        // Decide. Once every share is prepared the outcome is settled: whoever decides it
        // later (after a failure here) decides the same.
        let commit = result.is_ok() && not_prepared.is_none();
        let local = match prepare {
            true => decide_shares(&*hooks, &durable, &ledger, txn_id, commit, &shares),
            false => Pending::new().1,
        };
        ended(&self.links, &here, commit);
        let mut undelivered = None;
        for n in begun {
            if let Err(e) = hooks.mp_remote(n, MpRemote::End { txn_id, commit }) {
                undelivered = Some(format!("node {n}: {}", e.message));
            }
        }
        // An abort after a prepare is final only once every replica has dropped its share.
        if prepare && !commit {
            if let Some(why) = local.wait() {
                undelivered = Some(why);
            }
        }
        if let Some(why) = &undelivered {
            tracing::warn!(
                txn_id,
                commit,
                "the outcome of multi-partition transaction {txn_id} has not reached every node yet ({why}): it will be settled again"
            );
            self.in_doubt_settled = None;
        }
        match (result, not_prepared) {
            (Ok(out), None) => Outcome::from_output(out),
            (Ok(_), Some(why)) => match undelivered {
                Some(more) => crate::cluster::unknown(&format!("{why}; then {more}")),
                None => Outcome::error(Error::unavailable(format!(
                    "the transaction was rolled back: it could not be prepared everywhere ({why})"
                ))),
            },
            (Err(e), _) => Outcome::error(e),
        }
    }

    /// Before this node parks partitions as the coordinator: settles the transactions a
    /// failure left undecided, if the cluster changed since they were last looked for.
    pub(crate) fn settle_in_doubt(&mut self, hooks: &dyn ClusterHooks) -> std::result::Result<(), String> {
        let fingerprint = topology_fingerprint(&hooks.topology());
        if self.in_doubt_settled == Some(fingerprint) {
            return Ok(());
        }
        let (settled, _) = self.resolve_in_doubt(hooks);
        settled.map(|()| self.in_doubt_settled = Some(fingerprint))
    }

    /// Before this node parks its sites outside a cluster transaction (a schema change, a
    /// snapshot): a site holding a prepared share parks only once it has the share's
    /// outcome, and on the coordinating node only this thread can decide it. So the
    /// coordinator looks for undecided transactions now, whatever it found last time.
    /// Returns a partition whose share is still held.
    pub(crate) fn settle_held_shares(&mut self, hooks: &dyn ClusterHooks) -> std::result::Result<(), u32> {
        let partitions = self.links.len() as u32;
        let shared = self.shared.clone();
        let held = || (0..partitions).find(|p| mp_ledger::lock(&shared.ledger).held(*p).is_some());
        if held().is_none() {
            return Ok(());
        }
        if hooks.mp_coordinator() == Some(hooks.topology().me) {
            self.in_doubt_settled = None;
            // Debug only: a schema change asks again every 50 ms and says itself, every
            // 5 s, what it waits for.
            if let Err(why) = self.settle_in_doubt(hooks) {
                tracing::debug!("a share held undecided is not settled yet: {why}");
            }
        }
        held().map_or(Ok(()), Err)
    }

    /// As the coordinating node: asks every node leading partitions what it knows of
    /// undecided transactions, and ends each by `mp_ledger::decide`. Returns Ok once
    /// nothing is left undecided, and the outcomes decided (this node's own session is
    /// ended by its caller).
    pub(crate) fn resolve_in_doubt(&mut self, hooks: &dyn ClusterHooks) -> (std::result::Result<(), String>, BTreeMap<i64, bool>) {
        let topology = hooks.topology();
        let me = topology.me;
        let partitions = self.links.len() as u32;
        let leaders: BTreeSet<u32> = topology.partitions.iter().filter_map(|p| p.leader).collect();
        let (mut rows, mut ready) = (Vec::<(u32, InDoubtRow)>::new(), BTreeSet::new());
        let mut left = None;
        for &n in &leaders {
            let answer =
                if n == me { in_doubt_report(hooks, &self.shared.ledger, partitions) } else { hooks.mp_remote(n, MpRemote::InDoubt) };
            match answer.ok().and_then(read_report) {
                Some(report) => {
                    ready.extend(report.ready);
                    rows.extend(report.rows.into_iter().map(|r| (n, r)));
                }
                None => left = Some(format!("node {n} did not say what it holds")),
            }
        }
        if let Some(p) = (0..partitions).find(|p| !ready.contains(p)) {
            left = Some(format!("partition {p} has no leader ready"));
        }
        let all: Vec<InDoubtRow> = rows.iter().map(|(_, r)| r.clone()).collect();
        let mut outcomes = BTreeMap::new();
        for txn_id in mp_ledger::undecided(&all) {
            let commit = match mp_ledger::decide(txn_id, &all, |p| ready.contains(&p)) {
                Decision::Commit => true,
                Decision::Abort => false,
                Decision::Wait(why) => {
                    left = Some(why);
                    continue;
                }
            };
            tracing::warn!(txn_id, commit, "settling multi-partition transaction {txn_id}, left undecided by a failure");
            outcomes.insert(txn_id, commit);
            let mut sessions = BTreeSet::new();
            for (n, r) in rows.iter().filter(|(_, r)| r.txn_id == txn_id) {
                let sent = match r.state {
                    // The coordinator of the transaction ends it itself, the same way.
                    ShareState::Open | ShareState::Prepared if r.coordinator => Ok(()),
                    ShareState::Open | ShareState::Prepared if *n != me && sessions.insert(*n) => {
                        hooks.mp_remote(*n, MpRemote::End { txn_id, commit }).map(drop).map_err(|e| e.message)
                    }
                    ShareState::Held if *n == me => self.resolve_here(r.partition, txn_id, commit),
                    ShareState::Held => {
                        hooks.mp_remote(*n, MpRemote::Resolve { txn_id, partition: r.partition, commit }).map(drop).map_err(|e| e.message)
                    }
                    _ => Ok(()),
                };
                if let Err(why) = sent {
                    left = Some(format!("node {n}: {why}"));
                }
            }
        }
        (left.map_or(Ok(()), Err), outcomes)
    }

    /// Hands the outcome of a share held to a site here and waits until it is replicated.
    fn resolve_here(&self, partition: u32, txn_id: i64, commit: bool) -> std::result::Result<(), String> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let done = Box::new(move |r| drop(tx.send(r)));
        let link = self.links.get(partition as usize).ok_or_else(|| format!("no partition {partition}"))?;
        link.queue.send(SiteMsg::Resolve { txn_id, commit, done }).map_err(|_| "a partition site has stopped".to_string())?;
        rx.recv_timeout(RESOLVE_WAIT).unwrap_or_else(|_| Err(format!("partition {partition} did not apply the outcome in time")))
    }

    /// Serves transaction `txn_id` for the coordinating node: parks the partitions this
    /// node leads, runs the fragments it sends, prepares their shares when asked, and
    /// applies the outcome it decides before letting the partitions go.
    pub(crate) fn remote_session(&mut self, txn_id: i64, coordinator: u32, begun: RemoteReply) {
        let Some(hooks) = self.shared.cluster.get().cloned() else {
            return begun(Err(ErrorData { status: -5, message: "this node is not in a cluster".into() }));
        };
        let topology = hooks.topology();
        let here: Vec<u32> = (0..self.links.len() as u32)
            .filter(|p| topology.partitions.get(*p as usize).and_then(|x| x.leader) == Some(topology.me))
            .collect();
        for &p in &here {
            let _ = self.links[p as usize].queue.send(SiteMsg::MpBegin { txn_id, log_marker: false });
        }
        self.shared.remote_steps.begin(txn_id);
        mp_ledger::lock(&self.shared.ledger).session_begin(txn_id, false);
        // Steps of this transaction are taken from here until the session returns.
        struct Serving<'a>(&'a crate::engine::Shared);
        impl Drop for Serving<'_> {
            fn drop(&mut self) {
                self.0.remote_steps.end();
                mp_ledger::lock(&self.0.ledger).session_end();
            }
        }
        let shared = self.shared.clone();
        let _serving = Serving(&shared);
        begun(Ok(TableData { columns: Vec::new(), rows: Vec::new() }));
        let plans = self.registry.plan_cache(self.catalog.clone());
        let mut shares: BTreeMap<u32, Share> = BTreeMap::new();
        let (mut prepare_sent, mut prepared) = (false, false);
        let mut last_step = std::time::Instant::now();
        let durable = shared.durable.clone();
        loop {
            let step = match self.shared.remote_steps.next(REMOTE_SESSION_POLL) {
                Ok(step) => step,
                Err(RecvTimeoutError::Timeout) if prepared => {
                    // Prepared, the outcome is the coordinator's to give, or its successor's.
                    // The successor is this node, and this session its thread.
                    if declared_down(&*hooks, coordinator) && hooks.mp_coordinator() == Some(hooks.topology().me) {
                        let (_, outcomes) = self.resolve_in_doubt(&*hooks);
                        if let Some(&commit) = outcomes.get(&txn_id) {
                            tracing::warn!(txn_id, commit, "node {coordinator}, coordinating multi-partition transaction {txn_id}, went down after it was prepared: settled here");
                            drop(decide_shares(&*hooks, &durable, &shared.ledger, txn_id, commit, &shares));
                            return ended(&self.links, &here, commit);
                        }
                    }
                    // Deposed: the partitions' new leaders hold the shares and get the outcome.
                    let topology = hooks.topology();
                    if !here.iter().any(|p| topology.partitions.get(*p as usize).and_then(|x| x.leader) == Some(topology.me)) {
                        tracing::warn!(
                            txn_id,
                            "this node no longer leads the partitions of prepared transaction {txn_id}: its new leaders settle it"
                        );
                        return ended(&self.links, &here, false);
                    }
                    continue;
                }
                Err(RecvTimeoutError::Timeout) if last_step.elapsed() < REMOTE_SESSION_IDLE => {
                    // Not prepared: the coordinator cannot commit without this node, so the
                    // session may end here as soon as the coordinator is gone or this node
                    // is cut off from the majority.
                    if declared_down(&*hooks, coordinator) {
                        tracing::warn!(txn_id, "node {coordinator}, coordinating multi-partition transaction {txn_id}, was declared down before it was prepared: rolled back here");
                        return self.session_abort(&*hooks, txn_id, &here, prepare_sent, &shares);
                    }
                    // A coordinator runs one transaction at a time and begins the next only
                    // once this one has ended: a later `Begin` means its coordinator gave up
                    // on this one (its `Begin` came late, or its `End` was lost), or another
                    // node coordinates now (and its question fenced this session).
                    if self.shared.remote_steps.superseded(txn_id) {
                        tracing::warn!(txn_id, "another multi-partition transaction began before {txn_id} was prepared: rolled back here");
                        return self.session_abort(&*hooks, txn_id, &here, prepare_sent, &shares);
                    }
                    if !hooks.serving() {
                        tracing::warn!(txn_id, "this node was cut off from the majority before multi-partition transaction {txn_id} was prepared: rolled back here");
                        return self.session_abort(&*hooks, txn_id, &here, prepare_sent, &shares);
                    }
                    continue;
                }
                Err(_) => {
                    tracing::warn!(
                        txn_id,
                        "the coordinating node went silent during multi-partition transaction {txn_id}: rolled back here"
                    );
                    return self.session_abort(&*hooks, txn_id, &here, prepare_sent, &shares);
                }
            };
            last_step = std::time::Instant::now();
            match step.message {
                MpRemote::Fragment { txn_id: t, partition, spec } if t == txn_id && !prepare_sent => {
                    let answer = self.remote_fragment(&here, &plans, partition, spec, &mut shares);
                    (step.reply)(answer.as_ref().map(TableData::from).map_err(ErrorData::from));
                }
                MpRemote::Prepare { txn_id: t, participants } if t == txn_id && !prepare_sent => {
                    prepare_sent = true;
                    let failed = prepare_shares(&*hooks, &durable, txn_id, &participants, &shares).wait();
                    let partitions: Vec<u32> = shares.keys().copied().collect();
                    let answer = match failed {
                        None if mp_ledger::lock(&shared.ledger).session_prepared(txn_id, partitions, participants) => {
                            prepared = true;
                            Ok(TableData { columns: Vec::new(), rows: Vec::new() })
                        }
                        None => Err("a new coordinator settled the transaction before it was prepared here".to_string()),
                        Some(why) => Err(why),
                    };
                    (step.reply)(answer.map_err(|message| ErrorData { status: -5, message }));
                }
                MpRemote::End { txn_id: t, commit } if t == txn_id => {
                    if commit && !prepared {
                        tracing::error!(
                            txn_id,
                            "told to commit multi-partition transaction {txn_id}, which was not prepared here: rolled back"
                        );
                    }
                    let commit = commit && prepared;
                    let pending = match prepare_sent {
                        true => decide_shares(&*hooks, &durable, &shared.ledger, txn_id, commit, &shares),
                        false => Pending::new().1,
                    };
                    ended(&self.links, &here, commit);
                    // A commit was settled when every share was prepared; an abort is final
                    // here once every replica dropped its share.
                    let failed = if commit { None } else { pending.wait() };
                    (step.reply)(match failed {
                        None => Ok(TableData { columns: Vec::new(), rows: Vec::new() }),
                        Some(why) => Err(ErrorData { status: crate::durable::STATUS_RESPONSE_UNKNOWN, message: why }),
                    });
                    return;
                }
                _ => (step.reply)(Err(ErrorData {
                    status: -5,
                    message: format!("this node is serving multi-partition transaction {txn_id}, not that step of it"),
                })),
            }
        }
    }

    /// Ends a session that was not prepared: its shares (if a prepare began) are dropped.
    fn session_abort(&self, hooks: &dyn ClusterHooks, txn_id: i64, here: &[u32], prepare_sent: bool, shares: &BTreeMap<u32, Share>) {
        if prepare_sent {
            drop(decide_shares(hooks, &self.shared.durable, &self.shared.ledger, txn_id, false, shares));
        }
        ended(&self.links, here, false);
    }

    fn remote_fragment(
        &self,
        here: &[u32],
        plans: &PlanCache,
        partition: u32,
        spec: FragmentSpec,
        shares: &mut BTreeMap<u32, Share>,
    ) -> Result<ResultTable> {
        if !here.contains(&partition) {
            return Err(Error::unavailable(format!("partition {partition} is not led by this node now")));
        }
        let named = named_by_text(&spec, plans)?;
        let f = lockstep_sql::fragment_fn(spec, plans)?;
        let t = run_here(&self.links, &[partition], &|| MpMsg::Fragment(f.clone()))?.pop().ok_or_else(|| Error::unexpected("no answer"))?;
        let share = shares.entry(partition).or_default();
        share.specs.push(named);
        share.results.push(t.clone());
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A step whose answer is counted, and sent on `answers` (Ok or the error's message).
    fn step(answers: &crossbeam_channel::Sender<std::result::Result<(), String>>) -> RemoteStep {
        let answers = answers.clone();
        RemoteStep {
            message: MpRemote::InDoubt,
            reply: Box::new(move |a: RemoteAnswer| drop(answers.send(a.map(drop).map_err(|e| e.message)))),
        }
    }

    #[test]
    fn a_step_is_queued_only_while_its_transaction_is_served_and_answered_when_it_ends() {
        let steps = RemoteSteps::new(4);
        let (tx, rx) = crossbeam_channel::unbounded();
        steps.offer(7, step(&tx));
        assert!(rx.try_recv().expect("answered at once").unwrap_err().contains("not serving multi-partition transaction 7"));
        steps.begin(7);
        steps.offer(8, step(&tx));
        assert!(rx.try_recv().expect("another transaction's step is answered at once").is_err());
        steps.offer(7, step(&tx));
        let taken = steps.next(Duration::from_millis(1)).expect("the served transaction's step is queued");
        (taken.reply)(Ok(TableData { columns: Vec::new(), rows: Vec::new() }));
        assert_eq!(rx.try_recv(), Ok(Ok(())));
        // A step queued as the session ends is answered by the end, not left behind.
        steps.offer(7, step(&tx));
        assert!(rx.try_recv().is_err(), "answered before the session ended");
        steps.end();
        assert!(rx.try_recv().expect("answered by the end").unwrap_err().contains("ended here before this step was taken"));
        steps.offer(7, step(&tx));
        assert!(rx.try_recv().expect("answered at once after the end").is_err());
        assert!(steps.next(Duration::from_millis(1)).is_err(), "a step was left in the queue");
        // A full queue refuses rather than waits.
        steps.begin(9);
        for _ in 0..5 {
            steps.offer(9, step(&tx));
        }
        assert!(rx.try_recv().expect("the fifth step is refused").unwrap_err().contains("too many"));
    }

    /// Sessions begin and end on one thread while steps of them arrive on another: every
    /// step is answered (taken by its session, or refused), none is left unanswered.
    #[test]
    fn steps_racing_the_end_of_their_session_are_all_answered() {
        let steps = Arc::new(RemoteSteps::new(64));
        let current = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let (tx, rx) = crossbeam_channel::unbounded();
        let offered = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let offering = {
            let (steps, current, offered, stop, tx) = (steps.clone(), current.clone(), offered.clone(), stop.clone(), tx.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    steps.offer(current.load(Ordering::SeqCst), step(&tx));
                    offered.fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        for txn_id in 1..=2_000 {
            current.store(txn_id, Ordering::SeqCst);
            steps.begin(txn_id);
            if let Ok(s) = steps.next(Duration::from_micros(50)) {
                (s.reply)(Ok(TableData { columns: Vec::new(), rows: Vec::new() }));
            }
            steps.end();
        }
        stop.store(true, Ordering::Relaxed);
        offering.join().expect("the offering thread");
        // Steps left queued (and their senders) go with the queue.
        drop((steps, tx));
        let answered = rx.iter().count();
        assert!(offered.load(Ordering::SeqCst) > 0);
        assert_eq!(answered, offered.load(Ordering::SeqCst), "a step was never answered");
    }
}
