//! `Replicas`: the replication of every partition this node holds, carried out. It follows
//! the cluster view, feeds each partition's `Replication` the messages peers send and a tick,
//! posts what it says to send, hands entries to run to the `Executor`, and answers the
//! leader's appends once they commit (through the callback each append came with).
//!
//! Each partition's state sits behind its own mutex, so the thread that runs a partition's
//! transactions appends to it directly (`append`, no hop through a task) and can roll a
//! transaction back when the append is refused. Actions are carried out after the mutex is
//! released, so an executor may call `applied` from inside `run`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{interval, MissedTickBehavior};

use crate::node::{ClusterNode, ClusterView, PartitionMessage, Poster};
use crate::placement::{NodeId, PartitionId};
use crate::replication::{Action, AppendError, Entry, LearnError, Replication, Seq, Term};

/// How often each partition's replication ticks (resends what was not acknowledged after
/// three ticks), by default.
pub const TICK_DEFAULT_MS: u64 = 20;
/// Membership notices waiting to be read (`Replicas::member_changes`); more are dropped,
/// and said again later by the replication.
const MEMBER_CHANGES_QUEUE_MAX: usize = 64;

/// A change of a partition's members that a leader asks the cluster state for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberChange {
    /// The learner caught up: make it a member (`Command::Rejoined`).
    CaughtUp,
    /// The member acknowledges nothing though the group hears it: drop it
    /// (`Command::Evict`).
    Unresponsive,
}

/// A notice for the cluster state: (partition, node, term, what).
pub type MemberNotice = (PartitionId, NodeId, Term, MemberChange);

/// Runs entries ordered by another replica on this node's copy of a partition.
pub trait Executor: Send + Sync + 'static {
    /// Run `entry` after every entry handed over before it for the same partition, and
    /// give the hash of its results: at once (`Some`), or later through `Replicas::applied`
    /// (`None`: the work was queued, as on a site's queue). Must not block for long: it is
    /// called from the replication task.
    fn run(&self, partition: PartitionId, entry: Entry<Vec<u8>>) -> Option<u64>;
}

/// Why an append did not commit.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplicateError {
    /// Refused before anything was sent: the caller must roll the transaction back.
    #[error(transparent)]
    Refused(#[from] AppendError),
    #[error("this node holds no replica of partition {0}")]
    NotHere(PartitionId),
    /// Sent, but this node stopped leading before every replica confirmed it: the new
    /// leader may or may not have it.
    #[error("the outcome is unknown: this node stopped leading the partition before every replica confirmed the transaction")]
    Unknown,
}

/// Called once with the fate of one append: Ok once every member ran it. It runs on
/// whichever thread learnt the outcome (the replication task, or a site calling
/// `applied`), never under a partition's lock.
pub type Committed = Box<dyn FnOnce(Result<(), ReplicateError>) + Send>;

struct Partition {
    repl: Replication<Vec<u8>>,
    /// The appends waiting to commit, by sequence number.
    waiting: BTreeMap<Seq, Committed>,
    /// Answers waiting for every entry up to a sequence number to commit
    /// (`Replicas::after_appended`).
    barriers: BTreeMap<Seq, Vec<Committed>>,
}

struct Inner {
    partitions: BTreeMap<PartitionId, Mutex<Partition>>,
    poster: Poster,
    executor: Arc<dyn Executor>,
    /// Members and learners of partitions this node leads that should change.
    member_changes: mpsc::Sender<MemberNotice>,
}

/// The replication of this node's partitions; see the module header.
pub struct Replicas {
    inner: Arc<Inner>,
    task: JoinHandle<()>,
    member_changes: Mutex<Option<mpsc::Receiver<MemberNotice>>>,
}

impl Replicas {
    /// Starts replicating the partitions `node` holds, with nothing run yet on any of them.
    /// Returns None if another `Replicas` already took the node's partition messages.
    pub fn start(node: &ClusterNode, executor: Arc<dyn Executor>, tick: Duration) -> Option<Replicas> {
        let inbox = node.partition_messages()?;
        let me = node.id();
        let view = node.view();
        let partitions = view
            .state
            .placement()
            .partitions_of(me)
            .into_iter()
            .map(|p| (p, Mutex::new(Partition { repl: Replication::new(me, 0), waiting: BTreeMap::new(), barriers: BTreeMap::new() })))
            .collect();
        let (member_changes, notices) = mpsc::channel(MEMBER_CHANGES_QUEUE_MAX);
        let inner = Arc::new(Inner { partitions, poster: node.poster(), executor, member_changes });
        let task = tokio::spawn(run(inner.clone(), node.subscribe(), inbox, tick));
        Some(Replicas { inner, task, member_changes: Mutex::new(Some(notices)) })
    }

    /// The leader ran a transaction whose results hash to `hash`: order it and send it to
    /// the partition's other members. Err means nothing was sent, `committed` is dropped
    /// uncalled and the caller must roll the transaction back; otherwise `committed` is
    /// called once every member ran it (or once that can no longer be known).
    pub fn append(&self, partition: PartitionId, payload: Vec<u8>, hash: u64, committed: Committed) -> Result<(), ReplicateError> {
        let slot = self.inner.partitions.get(&partition).ok_or(ReplicateError::NotHere(partition))?;
        let actions = {
            let mut p = lock(slot);
            let (seq, actions) = p.repl.append(payload, hash)?;
            p.waiting.insert(seq, committed);
            actions
        };
        self.inner.act(partition, actions);
        Ok(())
    }

    /// The leader answers a call that changed nothing (a read, a refusal): `done` is called
    /// once every entry appended to `partition` before now has committed — at once if all
    /// have. The answer may show those entries' writes, and a failover could still lose
    /// them until then. Err if this node does not lead the partition (its copy may hold
    /// writes the new leader lacks) or stops leading it first.
    pub fn after_appended(&self, partition: PartitionId, done: Committed) {
        let Some(slot) = self.inner.partitions.get(&partition) else { return done(Err(ReplicateError::NotHere(partition))) };
        let mut p = lock(slot);
        if !p.repl.accepts() {
            drop(p);
            return done(Err(ReplicateError::Refused(AppendError::NotLeader)));
        }
        let last = p.repl.received();
        if p.repl.committed() >= last {
            drop(p);
            return done(Ok(()));
        }
        p.barriers.entry(last).or_default().push(done);
    }

    /// Whether this node may append to `partition` now (it leads it and has taken over).
    pub fn accepts(&self, partition: PartitionId) -> bool {
        self.inner.partitions.get(&partition).is_some_and(|p| lock(p).repl.accepts())
    }

    /// The executor ran entry `seq` of `partition`; its results hash to `hash`.
    pub fn applied(&self, partition: PartitionId, seq: Seq, hash: u64) {
        self.inner.with(partition, |r| r.applied_entry(seq, hash));
    }

    /// The partitions this node holds a replica of.
    pub fn partitions(&self) -> Vec<PartitionId> {
        self.inner.partitions.keys().copied().collect()
    }

    /// Leader: makes `node` a learner of `partition` (see `Replication::add_learner`);
    /// returns the entry its snapshot must be taken at, and the term. Call it from the
    /// partition's site thread, between transactions, and take the snapshot right after.
    pub fn add_learner(&self, partition: PartitionId, node: NodeId) -> Result<(Seq, Term), ReplicateError> {
        let slot = self.inner.partitions.get(&partition).ok_or(ReplicateError::NotHere(partition))?;
        let mut p = lock(slot);
        let seq = p.repl.add_learner(node)?;
        Ok((seq, p.repl.view().term))
    }

    /// Joiner: this node's copy of `partition` now holds the leader's snapshot taken at
    /// `seq` in `term`: it takes the entries after it (see `Replication::learn`).
    pub fn learn(&self, partition: PartitionId, term: Term, seq: Seq) -> Result<(), String> {
        let slot = self.inner.partitions.get(&partition).ok_or_else(|| ReplicateError::NotHere(partition).to_string())?;
        let actions = lock(slot).repl.learn(term, seq).map_err(|e: LearnError| e.to_string())?;
        self.inner.act(partition, actions);
        Ok(())
    }

    /// Whether this node is learning `partition`.
    pub fn learning(&self, partition: PartitionId) -> bool {
        self.inner.partitions.get(&partition).is_some_and(|p| lock(p).repl.learning())
    }

    /// The changes of members the partitions this node leads need (learners that caught
    /// up, members that do not answer), for the caller to ask the cluster state for; the
    /// first call takes the receiver.
    pub fn member_changes(&self) -> Option<mpsc::Receiver<MemberNotice>> {
        self.member_changes.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Where `partition`'s replication stands here: (the last entry this node holds — on
    /// its leader, the last appended —, the last entry every member has run). An exporter
    /// on the leader waits for the second to reach the first before it delivers rows it
    /// read, so it never delivers a transaction a failover could still lose.
    pub fn marks(&self, partition: PartitionId) -> Option<(Seq, Seq)> {
        self.inner.partitions.get(&partition).map(|p| {
            let p = lock(p);
            (p.repl.received(), p.repl.committed())
        })
    }

    /// How far this node has run `partition`.
    pub fn applied_seq(&self, partition: PartitionId) -> Option<Seq> {
        self.inner.partitions.get(&partition).map(|p| lock(p).repl.applied())
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lock(p: &Mutex<Partition>) -> MutexGuard<'_, Partition> {
    // The state is changed by `Replication`'s methods, which do not panic midway.
    p.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    /// Runs `f` on the partition's replication, then carries out what it returned.
    fn with(&self, partition: PartitionId, f: impl FnOnce(&mut Replication<Vec<u8>>) -> Vec<Action<Vec<u8>>>) {
        let Some(slot) = self.partitions.get(&partition) else { return };
        let actions = f(&mut lock(slot).repl);
        self.act(partition, actions);
    }

    fn act(&self, partition: PartitionId, actions: Vec<Action<Vec<u8>>>) {
        for action in actions {
            match action {
                Action::Send { to, message } => self.poster.post(to, partition, message),
                Action::Apply(entry) => {
                    let seq = entry.seq;
                    if let Some(hash) = self.executor.run(partition, entry) {
                        self.with(partition, |r| r.applied_entry(seq, hash));
                    }
                }
                Action::Commit(upto) => self.answer(partition, ..=upto, Ok(())),
                Action::Deposed(after) => self.answer(partition, after + 1.., Err(ReplicateError::Unknown)),
                Action::Diverged { node, seq } => diverged(partition, node, seq),
                Action::CaughtUp { node, term } => {
                    let _ = self.member_changes.try_send((partition, node, term, MemberChange::CaughtUp));
                }
                Action::Unresponsive { node, term } => {
                    let _ = self.member_changes.try_send((partition, node, term, MemberChange::Unresponsive));
                }
            }
        }
    }

    fn answer(&self, partition: PartitionId, seqs: impl std::ops::RangeBounds<Seq>, result: Result<(), ReplicateError>) {
        let Some(slot) = self.partitions.get(&partition) else { return };
        let done: Vec<_> = {
            let mut p = lock(slot);
            let keys: Vec<Seq> = p.waiting.range((seqs.start_bound().cloned(), seqs.end_bound().cloned())).map(|(s, _)| *s).collect();
            let mut done: Vec<Committed> = keys.into_iter().filter_map(|s| p.waiting.remove(&s)).collect();
            let keys: Vec<Seq> = p.barriers.range(seqs).map(|(s, _)| *s).collect();
            done.extend(keys.into_iter().filter_map(|s| p.barriers.remove(&s)).flatten());
            done
        };
        for committed in done {
            committed(result.clone());
        }
    }

    fn set_views(&self, view: &ClusterView) {
        for &p in self.partitions.keys() {
            let v = view.state.view(p);
            self.with(p, |r| {
                let mut actions = r.set_view(v);
                // A learner whose node went down is waited for no more.
                let gone: Vec<NodeId> = r.learners().filter(|n| !view.state.is_alive(*n)).collect();
                for n in gone {
                    actions.extend(r.drop_learner(n));
                }
                actions
            });
        }
    }
}

fn diverged(partition: PartitionId, node: NodeId, seq: Seq) {
    tracing::error!(
        partition,
        node,
        seq,
        "node {node} ran transaction {seq} of partition {partition} with other results than its leader: the transaction was not deterministic, and the replica must be removed"
    );
}

async fn run(inner: Arc<Inner>, mut views: watch::Receiver<ClusterView>, mut inbox: mpsc::Receiver<PartitionMessage>, tick: Duration) {
    let mut ticker = interval(tick);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let first = views.borrow_and_update().clone();
    inner.set_views(&first);
    loop {
        tokio::select! {
            changed = views.changed() => {
                if changed.is_err() {
                    return;
                }
                let view = views.borrow_and_update().clone();
                inner.set_views(&view);
            }
            message = inbox.recv() => {
                let Some(m) = message else { return };
                inner.with(m.partition, |r| r.receive(m.from, m.message));
            }
            _ = ticker.tick() => {
                for &p in inner.partitions.keys() {
                    inner.with(p, |r| r.tick());
                }
            }
        }
    }
}
