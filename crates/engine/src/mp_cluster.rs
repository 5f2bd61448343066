//! Multi-partition transactions in a cluster. One node coordinates them all (the hooks say
//! which); its coordinator parks the partitions it leads, asks every other node that leads
//! partitions to park theirs (`MpRemote::Begin`), and sends each fragment to the node that
//! leads its partition, as data (`FragmentSpec`), or runs it here. A node that leads
//! partitions serves such a transaction on its own coordinator thread (`remote_session`).
//!
//! What a transaction did to a partition reaches the partition's replicas as one entry of
//! its replication, at the place where the partition was parked: the fragments that ran on
//! it, in order (`ReplicatedEntry::MpPart`), which the replicas' sites run again; their hash
//! of the answers must equal the leader's. The answer goes out once every replica has run
//! every share.
//!
//! Each share is in the command log of every replica of its partition (`Record::MpShare`, at
//! its place in the partition's order), so a whole cluster restarted from its logs has it. A
//! node lost between the first share replicated and the last leaves the transaction on some
//! partitions only (its answer then says the outcome is unknown): see docs/cluster.md.

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

/// The answer to one step of a remote session.
pub type RemoteReply = Box<dyn FnOnce(RemoteAnswer) + Send>;

/// A step of the transaction a node serves, with where its answer goes.
pub struct RemoteStep {
    pub message: MpRemote,
    pub reply: RemoteReply,
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
                self.hooks.mp_remote(leader, message).map_err(Error::from).and_then(TableData::into_table)
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

/// Replicates each share (when committing) and logs it here as the partition's leader
/// (the partition is parked, so the record falls at the share's place in its order);
/// returns the channel on which the replicas' answers and the log's arrive, how many to
/// wait for, or why a share could not be sent.
fn send_shares(
    hooks: &dyn ClusterHooks,
    durable: &Arc<crate::durable::Durable>,
    txn_id: i64,
    shares: BTreeMap<u32, Share>,
) -> (crossbeam_channel::Receiver<std::result::Result<(), String>>, usize, Option<String>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let (mut expected, mut failed) = (0, None);
    for (p, share) in shares {
        let hash = crate::cluster::parts_hash(Ok(&share.results));
        let record = match durable.logging() {
            true => postcard::to_allocvec(&share.specs).map(|specs| Some(Record::MpShare { txn_id, partition: p, specs })),
            false => Ok(None),
        };
        let sent = record.map_err(|e| format!("the share cannot be encoded: {e}")).and_then(|record| {
            let entry = ReplicatedEntry::MpPart { txn_id, specs: share.specs }.encode().map_err(|e| e.message)?;
            let replicated = tx.clone();
            hooks.replicate(p, entry, hash, Box::new(move |r| drop(replicated.send(r))))?;
            Ok(record)
        });
        match sent {
            Ok(record) => {
                expected += 1;
                if let Some(record) = record {
                    let logged = tx.clone();
                    let done =
                        move |o: Outcome| drop(logged.send(if o.is_success() { Ok(()) } else { Err(o.status_string.unwrap_or_default()) }));
                    durable.append_then_reply(&record, Outcome::tables(Vec::new()), Box::new(done));
                    expected += 1;
                }
            }
            Err(why) => failed = Some(format!("partition {p}: {why}")),
        }
    }
    (rx, expected, failed)
}

/// Waits for `expected` replication answers; the reason if any failed or none came.
fn wait_for_replicas(rx: crossbeam_channel::Receiver<std::result::Result<(), String>>, expected: usize) -> Option<String> {
    let mut failed = None;
    for _ in 0..expected {
        match rx.recv_timeout(REPLICATION_WAIT) {
            Ok(Ok(())) => {}
            Ok(Err(why)) => failed = Some(why),
            Err(_) => failed = Some(format!("the replicas did not confirm within {} s", REPLICATION_WAIT.as_secs())),
        }
    }
    failed
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
        for &p in &here {
            let _ = self.links[p as usize].queue.send(SiteMsg::MpBegin { txn_id, log_marker: false });
        }
        let mut begun = Vec::new();
        let mut result = Ok(ProcOutput { tables: Vec::new(), app_status: crate::outcome::APP_STATUS_UNSET, app_status_string: None });
        for n in leaders.iter().copied().filter(|l| *l != me).collect::<BTreeSet<u32>>() {
            match hooks.mp_remote(n, MpRemote::Begin { txn_id }) {
                Ok(_) => begun.push(n),
                Err(e) => {
                    result = Err(Error::from(e));
                    break;
                }
            }
        }
        let plans = self.registry.plan_cache(self.catalog.clone());
        let mut shares = BTreeMap::new();
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
            };
            let mut runner = MpRunner { sites: Sites::Cluster(sites), ctx };
            let call = CallContext { txn_id, timestamp_micros: ts, partition: None, time_limit: crate::registry::time_limit(ctx.deadline) };
            let registry = &mut self.registry;
            result = catch_unwind(AssertUnwindSafe(|| body(registry, &mut runner, &call))).unwrap_or_else(|p| Err(Error::from_panic(&*p)));
            if let Sites::Cluster(s) = &mut runner.sites {
                shares = s.take_shares();
            }
        }
        let commit = result.is_ok();
        let (acks, expected, mut unknown) =
            if commit { send_shares(&*hooks, &self.shared.durable, txn_id, shares) } else { (crossbeam_channel::never(), 0, None) };
        ended(&self.links, &here, commit);
        for n in begun {
            if let Err(e) = hooks.mp_remote(n, MpRemote::End { txn_id, commit }) {
                if commit {
                    unknown = Some(format!("node {n}: {}", e.message));
                }
            }
        }
        if let Some(why) = wait_for_replicas(acks, expected) {
            unknown = Some(why);
        }
        let outcome = Outcome::from_result(result);
        match unknown {
            Some(why) if outcome.is_success() => crate::cluster::unknown(&why),
            _ => outcome,
        }
    }

    /// Serves transaction `txn_id` for the coordinating node: parks the partitions this
    /// node leads, runs the fragments it sends, and at its end replicates each partition's
    /// share before letting the partitions go.
    pub(crate) fn remote_session(&mut self, txn_id: i64, begun: RemoteReply) {
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
        self.shared.serving_mp.store(txn_id, std::sync::atomic::Ordering::SeqCst);
        // Steps of this transaction are taken from here until the session returns.
        struct Serving<'a>(&'a std::sync::atomic::AtomicI64);
        impl Drop for Serving<'_> {
            fn drop(&mut self) {
                self.0.store(0, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let shared = self.shared.clone();
        let _serving = Serving(&shared.serving_mp);
        begun(Ok(TableData { columns: Vec::new(), rows: Vec::new() }));
        let plans = self.registry.plan_cache(self.catalog.clone());
        let mut shares: BTreeMap<u32, Share> = BTreeMap::new();
        // The node that coordinates now began this session. If the cluster declares it down
        // while the session has only read (or this node is cut off from the majority), the
        // session ends at once: a coordinator killed
        // mid-transaction would otherwise keep this node's partitions parked, and their
        // calls waiting, for `REMOTE_SESSION_IDLE`, long after the failover. Rolling back
        // what only read changes nothing, whatever the coordinator did. A session that wrote
        // still waits for its end (or the idle limit): with no prepare step yet, letting it
        // go early could undo here what the coordinator committed elsewhere.
        let coordinator = hooks.mp_coordinator();
        let mut wrote = false;
        let mut last_step = std::time::Instant::now();
        loop {
            let step = match self.shared.remote_steps.1.recv_timeout(REMOTE_SESSION_POLL) {
                Ok(step) => step,
                Err(RecvTimeoutError::Timeout) if last_step.elapsed() < REMOTE_SESSION_IDLE => {
                    if let Some(c) = coordinator.filter(|c| !wrote && declared_down(&*hooks, *c)) {
                        tracing::warn!(txn_id, "node {c}, coordinating multi-partition transaction {txn_id}, was declared down before the transaction wrote here: rolled back here");
                        return ended(&self.links, &here, false);
                    }
                    // Cut off from the majority, this node cannot take part in the end of
                    // the transaction anyway.
                    if !wrote && !hooks.serving() {
                        tracing::warn!(txn_id, "this node was cut off from the majority before multi-partition transaction {txn_id} wrote here: rolled back here");
                        return ended(&self.links, &here, false);
                    }
                    continue;
                }
                Err(_) => {
                    tracing::warn!(
                        txn_id,
                        "the coordinating node went silent during multi-partition transaction {txn_id}: rolled back here"
                    );
                    return ended(&self.links, &here, false);
                }
            };
            last_step = std::time::Instant::now();
            match step.message {
                MpRemote::Fragment { txn_id: t, partition, spec } if t == txn_id => {
                    // A fragment that fails to resolve runs nothing; any other may write.
                    wrote |= plans.resolve(spec.catalog_version, &spec.statement).is_ok_and(|p| !p.read_only);
                    let answer = self.remote_fragment(&here, &plans, partition, spec, &mut shares);
                    (step.reply)(answer.as_ref().map(TableData::from).map_err(ErrorData::from));
                }
                MpRemote::End { txn_id: t, commit } if t == txn_id => {
                    let (acks, expected, mut failed) = if commit {
                        send_shares(&*hooks, &self.shared.durable, txn_id, shares)
                    } else {
                        (crossbeam_channel::never(), 0, None)
                    };
                    ended(&self.links, &here, commit);
                    if let Some(why) = wait_for_replicas(acks, expected) {
                        failed = Some(why);
                    }
                    (step.reply)(match failed {
                        None => Ok(TableData { columns: Vec::new(), rows: Vec::new() }),
                        Some(why) => Err(ErrorData { status: crate::durable::STATUS_RESPONSE_UNKNOWN, message: why }),
                    });
                    return;
                }
                _ => (step.reply)(Err(ErrorData {
                    status: -5,
                    message: format!("this node is serving multi-partition transaction {txn_id}, not that one"),
                })),
            }
        }
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
