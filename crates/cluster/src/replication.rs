//! One partition's replication, as seen by one of its replicas.
//!
//! The partition's leader orders its transactions: it runs each one, gives it the next
//! sequence number and sends it to the other *members* (the live replicas that hold the
//! partition's whole history). Members run the same entries in the same order and answer
//! with a hash of each one's results. An entry is *committed* once every member has run it
//! with the leader's hash; only then may its client be answered. A member whose hash differs
//! has diverged (the transaction was not deterministic) and is reported, never kept quietly.
//!
//! When the leader changes (a new *term* for the partition), the new leader *repairs*
//! before it takes new work: it asks every member for the entries it received beyond the
//! committed point, takes the union (each member's entries are a prefix of the old leader's
//! order, so the union is the longest of them), runs what it lacks, and sends every member
//! what that member lacks. An entry some member had is therefore never lost; one that no
//! surviving member had was never committed, so no client was told it happened.
//!
//! A node that comes back (its old copy lost with its old process) *rejoins*: the leader
//! makes it a *learner* at a point of the order where it snapshots the partition for it
//! (`add_learner`), and sends it every entry after that point while it loads the snapshot
//! and catches up (`learn`). Once it has run every committed entry, commits wait for it as
//! for a member (`CaughtUp`), so it holds every committed entry when the cluster state
//! lists it as a member again.
//!
//! Pure and deterministic: no clock and no sockets. The caller gives it the partition's view
//! of the cluster state (`View`), the messages that arrive, the results of the entries it
//! ran, and ticks; it carries out the `Action`s returned. The simulation at the bottom of
//! this file runs it over a lossy network with crashes and late views.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::placement::NodeId;

/// The position of an entry in the partition's order; the first entry is 1.
pub type Seq = u64;
/// Which leadership of the partition this is: grows every time its leader changes.
pub type Term = u64;

/// Uncommitted entries a leader holds; past this `append` refuses (the caller pushes back).
pub const UNCOMMITTED_MAX: usize = 8_192;
/// Entries received out of order that a member keeps while it waits for the gap to fill.
pub const OUT_OF_ORDER_MAX: usize = 8_192;
/// Entries in one resent message.
pub const RESEND_BATCH_MAX: usize = 256;
/// Ticks without progress from a member before the leader sends again what it lacks.
pub const RESEND_AFTER_TICKS: u32 = 3;
/// Ticks between two `CaughtUp`s for a learner the cluster state has not made a member yet.
pub const CAUGHT_UP_AGAIN_TICKS: u32 = 50;
/// Ticks a member may leave entries unacknowledged before the leader says so
/// (`Unresponsive`), and between two such notices: well past the failure timeout, so a
/// member that is down is declared down first.
pub const UNRESPONSIVE_AFTER_TICKS: u32 = 100;
/// Entries a leader sends a learner ahead of its acknowledgements.
pub const LEARNER_WINDOW: u64 = 4_096;
/// Entries a leader keeps for a learner that has not acknowledged them; a learner further
/// behind is dropped (it starts its rejoin again), so a stalled one cannot hold the leader's
/// memory.
pub const LEARNER_BACKLOG_MAX: u64 = 262_144;

/// One transaction in the partition's order. The payload is what the replicas run (the
/// invocation and its transaction id); this module never looks inside it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry<P> {
    pub seq: Seq,
    /// The term of the leader that ordered it.
    pub term: Term,
    pub payload: P,
}

/// The partition as the cluster state describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    pub term: Term,
    pub leader: Option<NodeId>,
    /// The replicas that must run every entry: alive and holding the whole history. The
    /// leader is one of them.
    pub members: BTreeSet<NodeId>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Message<P> {
    /// Leader to member: entries in order, and how far every member has run.
    Replicate { term: Term, entries: Vec<Entry<P>>, committed: Seq },
    /// Member to leader: it has run every entry up to `seq`, and `seq`'s results hash so.
    Ack { term: Term, seq: Seq, hash: u64 },
    /// New leader to member: which entries did you receive beyond the committed point?
    RepairRequest { term: Term },
    /// Member to new leader: the entries it holds beyond `committed`, in order, up to the
    /// last it received.
    RepairReply { term: Term, committed: Seq, entries: Vec<Entry<P>> },
    /// Learner to leader: it loaded the image and has run every entry up to `seq` (said
    /// again every few ticks while it learns, as an entry's `Ack` may never come on an idle
    /// partition).
    Loaded { term: Term, seq: Seq },
}

impl<P> Message<P> {
    pub fn term(&self) -> Term {
        match self {
            Message::Replicate { term, .. }
            | Message::Ack { term, .. }
            | Message::RepairRequest { term }
            | Message::RepairReply { term, .. }
            | Message::Loaded { term, .. } => *term,
        }
    }
}

/// What the caller must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<P> {
    Send {
        to: NodeId,
        message: Message<P>,
    },
    /// Run this entry on the local partition after every entry handed out before it, then
    /// call `applied(seq, hash)`.
    Apply(Entry<P>),
    /// Every member has run every entry up to this one: their clients may be answered.
    Commit(Seq),
    /// This node no longer leads: calls it appended after `Seq` may or may not commit under
    /// the new leader, so their clients must be told the outcome is unknown.
    Deposed(Seq),
    /// A member's results for `seq` differ from the leader's: it must leave the partition.
    Diverged {
        node: NodeId,
        seq: Seq,
    },
    /// A learner holds every committed entry, and counts for commits from now on: the
    /// cluster state may make it a member in this term (said again from time to time until
    /// it does).
    CaughtUp {
        node: NodeId,
        term: Term,
    },
    /// A member has acknowledged nothing for `UNRESPONSIVE_AFTER_TICKS` while entries wait
    /// for it, and commits wait with them. A member that is down is declared down before
    /// this; one that is not (the group hears it, but the link from this leader to it, or
    /// back, is cut) would hold the partition for as long as that lasts: the cluster state
    /// may drop it from the members of this term (said again until it does).
    Unresponsive {
        node: NodeId,
        term: Term,
    },
}

/// Why `append` refused an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error("this node does not lead the partition")]
    NotLeader,
    #[error("the partition's new leader is still taking over")]
    Repairing,
    #[error("the partition has {UNCOMMITTED_MAX} transactions waiting for its replicas")]
    Busy,
    #[error("the node is already a member of the partition")]
    AlreadyMember,
}

/// Why `learn` refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LearnError {
    #[error("the partition's leader or term changed (this node's view is of term {view_term}, the snapshot of term {term})")]
    ViewChanged { view_term: Term, term: Term },
    #[error("this node is already a member of the partition")]
    AlreadyMember,
}

/// An entry this node holds, with the hash of its results once it has run it.
#[derive(Clone, Debug)]
struct Slot<P> {
    entry: Entry<P>,
    hash: Option<u64>,
    /// Members' hashes that arrived before this node's own.
    early: Vec<(NodeId, u64)>,
}

/// How far the leader knows a learner to be, and how far it has sent to it.
#[derive(Clone, Copy, Debug)]
struct Learner {
    /// The entry its image was taken at.
    from: Seq,
    acked: Seq,
    sent: Seq,
    idle_ticks: u32,
    /// Caught up once: from then on it counts for commits like a member, so that it holds
    /// every committed entry when the cluster state makes it one. Not before every entry of
    /// its image is committed: the image may hold entries the members have not all run, and
    /// a learner holds them in its state but not in its log, so it could not hand them to a
    /// new leader's repair.
    counted: bool,
    /// Ticks since `CaughtUp` was last said (it is said again while it stays a learner).
    ready_ticks: u32,
}

/// How far the leader knows a member to be.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Has run every entry up to this one.
    acked: Seq,
    /// Ticks since `acked` last grew while entries were outstanding (reset by a resend).
    idle_ticks: u32,
    /// Ticks since `acked` last grew while entries were outstanding (not reset).
    stalled_ticks: u32,
}

#[derive(Debug)]
enum Role {
    /// Not a member of the partition (or no view yet): holds nothing, does nothing.
    Outside,
    Member,
    /// Loaded the partition as its leader had it at some entry (a rejoin's snapshot) and
    /// runs the entries after it, but is not a member yet. It becomes one when a view of
    /// the same term lists it.
    Learning {
        ticks: u32,
    },
    /// Leader, still gathering what the members received (`waiting` have not answered).
    Repairing {
        waiting: BTreeSet<NodeId>,
        ticks: u32,
    },
    Leading {
        progress: BTreeMap<NodeId, Progress>,
    },
}

/// One partition's replication at one node.
pub struct Replication<P> {
    me: NodeId,
    view: View,
    role: Role,
    /// Entries from `committed` (exclusive, or earlier ones not yet run here) to `received`.
    log: VecDeque<Slot<P>>,
    /// Every member has run every entry up to this one.
    committed: Seq,
    /// This node has run every entry up to this one.
    applied: Seq,
    /// This node holds every entry up to this one.
    received: Seq,
    /// Entries up to this one have been handed out as `Apply` (or ran here as leader).
    handed_out: Seq,
    /// A member's entries that came after a gap.
    out_of_order: BTreeMap<Seq, Entry<P>>,
    reported: BTreeSet<NodeId>,
    /// Leader: the nodes loading the partition to rejoin it, which get every entry after
    /// their snapshot's.
    learners: BTreeMap<NodeId, Learner>,
}

impl<P: Clone> Replication<P> {
    /// A replica that has run every entry up to `applied` (0 for a new partition).
    pub fn new(me: NodeId, applied: Seq) -> Replication<P> {
        Replication {
            me,
            view: View::default(),
            role: Role::Outside,
            log: VecDeque::new(),
            committed: applied,
            applied,
            received: applied,
            handed_out: applied,
            out_of_order: BTreeMap::new(),
            reported: BTreeSet::new(),
            learners: BTreeMap::new(),
        }
    }

    pub fn view(&self) -> &View {
        &self.view
    }
    pub fn applied(&self) -> Seq {
        self.applied
    }
    pub fn committed(&self) -> Seq {
        self.committed
    }
    /// This node holds every entry up to this one (on a leader: the last it appended).
    pub fn received(&self) -> Seq {
        self.received
    }
    /// Whether `append` would take an entry now (leading, repaired and caught up).
    pub fn accepts(&self) -> bool {
        matches!(self.role, Role::Leading { .. }) && self.applied == self.received
    }

    /// Adopts the cluster state's view of the partition. A new term with this node as leader
    /// starts a repair; a new term led by another makes it a member; not being a member
    /// makes it hold nothing.
    pub fn set_view(&mut self, view: View) -> Vec<Action<P>> {
        let mut out = Vec::new();
        if view.term < self.view.term {
            return out;
        }
        let new_term = view.term > self.view.term;
        let was_leading = matches!(self.role, Role::Leading { .. } | Role::Repairing { .. });
        // A learner stays one through views of its term (other partitions change), and
        // becomes a member, keeping all it ran, once a view of its term lists it.
        if matches!(self.role, Role::Learning { .. }) && !new_term {
            self.view = view;
            if self.view.members.contains(&self.me) {
                self.role = Role::Member;
            }
            return out;
        }
        self.view = view;
        if new_term || !self.view.members.contains(&self.me) || self.view.leader != Some(self.me) {
            self.learners.clear();
        }
        if !self.view.members.contains(&self.me) {
            if was_leading {
                out.push(Action::Deposed(self.committed));
            }
            self.role = Role::Outside;
            self.log.clear();
            self.out_of_order.clear();
            return out;
        }
        let leads = self.view.leader == Some(self.me);
        // A node that was outside (or has no view yet) starts its part afresh, as in a new term.
        if new_term || matches!(self.role, Role::Outside) {
            if was_leading && !leads {
                out.push(Action::Deposed(self.committed));
            }
            self.out_of_order.clear();
            if leads {
                let waiting: BTreeSet<NodeId> = self.others().collect();
                for &to in &waiting {
                    out.push(Action::Send { to, message: Message::RepairRequest { term: self.view.term } });
                }
                self.role = Role::Repairing { waiting, ticks: 0 };
                self.finish_repair_if_complete(&mut out);
            } else {
                self.role = Role::Member;
            }
            return out;
        }
        // Same term, fewer (or other) members: nobody waits for those that left.
        match &mut self.role {
            Role::Repairing { waiting, .. } => {
                waiting.retain(|n| self.view.members.contains(n));
                self.finish_repair_if_complete(&mut out);
            }
            Role::Leading { progress } => {
                progress.retain(|n, _| self.view.members.contains(n));
                for &n in self.view.members.iter().filter(|&&n| n != self.me) {
                    if progress.contains_key(&n) {
                        continue;
                    }
                    // A learner that caught up and became a member has run what it
                    // acknowledged. One that has not caught up is named by a late view of an
                    // earlier time it was a member: it stays a learner, and the member is
                    // waited for from scratch until a later view drops it.
                    let acked = match self.learners.get(&n) {
                        Some(l) if l.counted => self.learners.remove(&n).map_or(0, |l| l.acked),
                        _ => 0,
                    };
                    progress.insert(n, Progress { acked, ..Progress::default() });
                }
                self.advance_commit(&mut out);
            }
            Role::Outside | Role::Member | Role::Learning { .. } => {}
        }
        out
    }

    /// The leader ran a new transaction whose results hash to `hash`: it becomes the next
    /// entry. Returns its sequence number, and the messages that send it.
    pub fn append(&mut self, payload: P, hash: u64) -> Result<(Seq, Vec<Action<P>>), AppendError> {
        match &self.role {
            Role::Leading { .. } if self.applied == self.received => {}
            Role::Leading { .. } | Role::Repairing { .. } => return Err(AppendError::Repairing),
            _ => return Err(AppendError::NotLeader),
        }
        if self.received - self.committed >= UNCOMMITTED_MAX as Seq {
            return Err(AppendError::Busy);
        }
        let seq = self.received + 1;
        let entry = Entry { seq, term: self.view.term, payload };
        self.log.push_back(Slot { entry: entry.clone(), hash: Some(hash), early: Vec::new() });
        (self.received, self.applied, self.handed_out) = (seq, seq, seq);
        let mut out = Vec::new();
        for to in self.others() {
            out.push(Action::Send {
                to,
                message: Message::Replicate { term: self.view.term, entries: vec![entry.clone()], committed: self.committed },
            });
        }
        let learners: Vec<NodeId> = self.learners.keys().copied().collect();
        for node in learners {
            self.send_to_learner(node, &mut out);
        }
        self.advance_commit(&mut out);
        self.drop_stalled_learners();
        Ok((seq, out))
    }

    /// This node ran entry `seq` (handed out by an `Apply`) and its results hash to `hash`.
    pub fn applied_entry(&mut self, seq: Seq, hash: u64) -> Vec<Action<P>> {
        let mut out = Vec::new();
        if seq != self.applied + 1 {
            return out;
        }
        self.applied = seq;
        let Some(i) = self.index_of(seq) else { return out };
        self.log[i].hash = Some(hash);
        let early = std::mem::take(&mut self.log[i].early);
        match &self.role {
            Role::Member | Role::Learning { .. } => {
                if let Some(to) = self.view.leader {
                    out.push(Action::Send { to, message: Message::Ack { term: self.view.term, seq, hash } });
                }
            }
            Role::Leading { .. } => {
                for (node, theirs) in early {
                    self.check_hash(node, seq, theirs, hash, &mut out);
                }
                self.advance_commit(&mut out);
            }
            _ => {}
        }
        self.trim();
        out
    }

    /// A message from `from` about this partition.
    pub fn receive(&mut self, from: NodeId, message: Message<P>) -> Vec<Action<P>> {
        let mut out = Vec::new();
        // Only this term's messages count: an older one comes from a deposed leader (or
        // answers one), a newer one from a view this node has not applied yet (it is sent
        // again on a later tick).
        let learner_ack = matches!(message, Message::Ack { .. } | Message::Loaded { .. }) && self.learners.contains_key(&from);
        if message.term() != self.view.term || !(self.view.members.contains(&from) || learner_ack) {
            return out;
        }
        match message {
            Message::Replicate { entries, committed, .. } => self.on_replicate(from, entries, committed, &mut out),
            Message::Ack { seq, hash, .. } => self.on_ack(from, seq, hash, &mut out),
            Message::RepairRequest { term } => {
                if matches!(self.role, Role::Member) && self.view.leader == Some(from) {
                    let entries = self.log.iter().filter(|s| s.entry.seq > self.committed).map(|s| s.entry.clone()).collect();
                    let message = Message::RepairReply { term, committed: self.committed, entries };
                    out.push(Action::Send { to: from, message });
                }
            }
            Message::RepairReply { committed, entries, .. } => self.on_repair_reply(from, committed, entries, &mut out),
            Message::Loaded { seq, .. } => {
                if matches!(self.role, Role::Leading { .. }) {
                    self.learner_progress(from, seq, &mut out);
                }
            }
        }
        out
    }

    /// Time passes: a leader sends again what members lack, a repair asks again.
    pub fn tick(&mut self) -> Vec<Action<P>> {
        let mut out = Vec::new();
        let term = self.view.term;
        match &mut self.role {
            Role::Repairing { waiting, ticks } => {
                *ticks += 1;
                if *ticks >= RESEND_AFTER_TICKS {
                    *ticks = 0;
                    for &to in waiting.iter() {
                        out.push(Action::Send { to, message: Message::RepairRequest { term } });
                    }
                }
            }
            Role::Learning { ticks } => {
                *ticks += 1;
                if *ticks >= RESEND_AFTER_TICKS {
                    *ticks = 0;
                    if let Some(to) = self.view.leader {
                        out.push(Action::Send { to, message: Message::Loaded { term, seq: self.applied } });
                    }
                }
            }
            Role::Leading { progress } => {
                let mut resend = Vec::new();
                for (&node, p) in progress.iter_mut() {
                    if p.acked >= self.received {
                        p.idle_ticks = 0;
                        p.stalled_ticks = 0;
                        continue;
                    }
                    p.stalled_ticks += 1;
                    if p.stalled_ticks.is_multiple_of(UNRESPONSIVE_AFTER_TICKS) {
                        out.push(Action::Unresponsive { node, term });
                    }
                    p.idle_ticks += 1;
                    if p.idle_ticks >= RESEND_AFTER_TICKS {
                        p.idle_ticks = 0;
                        resend.push((node, p.acked));
                    }
                }
                for (to, acked) in resend {
                    let entries = self.entries_after(acked, RESEND_BATCH_MAX);
                    if !entries.is_empty() {
                        out.push(Action::Send { to, message: Message::Replicate { term, entries, committed: self.committed } });
                    }
                }
                // A learner that acknowledged nothing for a while lost messages: send again
                // from what it acknowledged.
                let learners: Vec<NodeId> = self.learners.keys().copied().collect();
                for node in learners {
                    if let Some(l) = self.learners.get_mut(&node) {
                        if l.counted {
                            l.ready_ticks += 1;
                            if l.ready_ticks >= CAUGHT_UP_AGAIN_TICKS {
                                l.ready_ticks = 0;
                                out.push(Action::CaughtUp { node, term });
                            }
                        }
                        if l.acked >= l.sent {
                            l.idle_ticks = 0;
                        } else {
                            l.idle_ticks += 1;
                            if l.idle_ticks >= RESEND_AFTER_TICKS {
                                l.idle_ticks = 0;
                                l.sent = l.acked;
                            }
                        }
                    }
                    self.send_to_learner(node, &mut out);
                }
            }
            _ => {}
        }
        out
    }

    /// Leader: `node` is about to load the partition as it is now (a snapshot taken at once,
    /// before any other entry runs here): from now on it gets every entry after the one
    /// returned, as a learner, until a view lists it as a member. A node already learning
    /// starts again.
    pub fn add_learner(&mut self, node: NodeId) -> Result<Seq, AppendError> {
        match &self.role {
            Role::Leading { .. } if self.applied == self.received => {}
            Role::Leading { .. } | Role::Repairing { .. } => return Err(AppendError::Repairing),
            _ => return Err(AppendError::NotLeader),
        }
        if self.view.members.contains(&node) {
            return Err(AppendError::AlreadyMember);
        }
        let at = self.received;
        self.learners.insert(node, Learner { from: at, acked: at, sent: at, idle_ticks: 0, counted: false, ready_ticks: 0 });
        Ok(at)
    }

    /// Joiner: this node's copy of the partition now holds what its leader had at `seq`, in
    /// term `term` (from the leader's `add_learner`): it takes the entries after it as a
    /// learner. Err if this node's view is not of that term, or already lists it.
    pub fn learn(&mut self, term: Term, seq: Seq) -> Result<Vec<Action<P>>, LearnError> {
        if self.view.term != term {
            return Err(LearnError::ViewChanged { view_term: self.view.term, term });
        }
        if self.view.members.contains(&self.me) {
            return Err(LearnError::AlreadyMember);
        }
        self.role = Role::Learning { ticks: 0 };
        self.log.clear();
        self.out_of_order.clear();
        // The snapshot may hold entries not committed yet: what is committed, the leader says.
        (self.committed, self.applied, self.received, self.handed_out) = (0, seq, seq, seq);
        Ok(self.view.leader.map(|to| Action::Send { to, message: Message::Loaded { term, seq } }).into_iter().collect())
    }

    /// Leader: stops sending to a learner and counting it (its node went down).
    pub fn drop_learner(&mut self, node: NodeId) -> Vec<Action<P>> {
        let mut out = Vec::new();
        if self.learners.remove(&node).is_some() {
            self.advance_commit(&mut out);
            self.trim();
        }
        out
    }

    /// The nodes this leader has as learners.
    pub fn learners(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.learners.keys().copied()
    }

    /// Whether this node is learning the partition (see `learn`).
    pub fn learning(&self) -> bool {
        matches!(self.role, Role::Learning { .. })
    }

    /// Leader: learner `node` has run every entry up to `seq`. Once that covers every
    /// committed entry it counts for commits, and the cluster state may make it a member.
    fn learner_progress(&mut self, node: NodeId, seq: Seq, out: &mut Vec<Action<P>>) {
        let Some(l) = self.learners.get_mut(&node) else { return };
        if seq > l.acked {
            l.acked = seq.min(self.received);
            l.idle_ticks = 0;
        }
        if !l.counted && l.acked >= self.committed && self.committed >= l.from {
            l.counted = true;
            out.push(Action::CaughtUp { node, term: self.view.term });
        }
        self.send_to_learner(node, out);
        self.advance_commit(out);
        self.trim();
    }

    /// Leader: sends `node` the entries after what it was last sent, within its window.
    fn send_to_learner(&mut self, node: NodeId, out: &mut Vec<Action<P>>) {
        loop {
            let Some(l) = self.learners.get(&node).copied() else { return };
            if l.sent >= self.received || l.sent - l.acked >= LEARNER_WINDOW {
                return;
            }
            let room = (LEARNER_WINDOW - (l.sent - l.acked)).min(RESEND_BATCH_MAX as u64) as usize;
            let entries = self.entries_after(l.sent, room);
            let Some(last) = entries.last().map(|e| e.seq) else { return };
            if let Some(l) = self.learners.get_mut(&node) {
                l.sent = last;
            }
            out.push(Action::Send { to: node, message: Message::Replicate { term: self.view.term, entries, committed: self.committed } });
        }
    }

    /// Leader: forgets learners so far behind that keeping their entries would grow without
    /// bound (a counted one is never that far behind: commits wait for it).
    fn drop_stalled_learners(&mut self) {
        let received = self.received;
        self.learners.retain(|_, l| l.counted || received - l.acked <= LEARNER_BACKLOG_MAX);
    }

    fn others(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.view.members.iter().copied().filter(move |&n| n != self.me)
    }

    fn index_of(&self, seq: Seq) -> Option<usize> {
        let first = self.log.front()?.entry.seq;
        let i = usize::try_from(seq.checked_sub(first)?).ok()?;
        (i < self.log.len()).then_some(i)
    }

    fn entries_after(&self, seq: Seq, max: usize) -> Vec<Entry<P>> {
        let Some(first) = self.log.front().map(|s| s.entry.seq) else { return Vec::new() };
        let start = usize::try_from((seq + 1).saturating_sub(first)).unwrap_or(usize::MAX).min(self.log.len());
        self.log.range(start..).take(max).map(|s| s.entry.clone()).collect()
    }

    /// Takes entries in order into the log, and hands out those next in line to run.
    fn take_in_order(&mut self, entries: impl IntoIterator<Item = Entry<P>>, out: &mut Vec<Action<P>>) {
        for e in entries {
            if e.seq <= self.received {
                continue;
            }
            if e.seq == self.received + 1 {
                self.received = e.seq;
                self.log.push_back(Slot { entry: e, hash: None, early: Vec::new() });
            } else if self.out_of_order.len() < OUT_OF_ORDER_MAX {
                self.out_of_order.insert(e.seq, e);
            }
            while let Some(next) = self.out_of_order.remove(&(self.received + 1)) {
                self.received = next.seq;
                self.log.push_back(Slot { entry: next, hash: None, early: Vec::new() });
            }
        }
        self.out_of_order.retain(|&s, _| s > self.received);
        while self.handed_out < self.received {
            let Some(i) = self.index_of(self.handed_out + 1) else { break };
            out.push(Action::Apply(self.log[i].entry.clone()));
            self.handed_out += 1;
        }
    }

    fn on_replicate(&mut self, from: NodeId, entries: Vec<Entry<P>>, committed: Seq, out: &mut Vec<Action<P>>) {
        if !matches!(self.role, Role::Member | Role::Learning { .. }) || self.view.leader != Some(from) {
            return;
        }
        let resent = entries.first().is_some_and(|e| e.seq <= self.applied);
        self.take_in_order(entries, out);
        self.committed = self.committed.max(committed.min(self.applied));
        self.trim();
        // A resend means an ack was lost (or is late): say again how far this node is.
        if resent && self.applied > 0 {
            let hash = self.index_of(self.applied).and_then(|i| self.log[i].hash);
            if let Some(hash) = hash {
                out.push(Action::Send { to: from, message: Message::Ack { term: self.view.term, seq: self.applied, hash } });
            }
        }
    }

    fn on_ack(&mut self, from: NodeId, seq: Seq, hash: u64, out: &mut Vec<Action<P>>) {
        if !matches!(self.role, Role::Leading { .. }) {
            return;
        }
        if self.learners.contains_key(&from) {
            if let Some(mine) = self.index_of(seq).and_then(|i| self.log[i].hash) {
                self.check_hash(from, seq, hash, mine, out);
            }
            return self.learner_progress(from, seq, out);
        }
        let Role::Leading { progress } = &mut self.role else { return };
        let Some(p) = progress.get_mut(&from) else { return };
        if seq > p.acked {
            p.acked = seq.min(self.received);
            p.idle_ticks = 0;
            p.stalled_ticks = 0;
        }
        if let Some(i) = self.index_of(seq) {
            match self.log[i].hash {
                Some(mine) => self.check_hash(from, seq, hash, mine, out),
                None => self.log[i].early.push((from, hash)),
            }
        }
        self.advance_commit(out);
    }

    fn check_hash(&mut self, node: NodeId, seq: Seq, theirs: u64, mine: u64, out: &mut Vec<Action<P>>) {
        if theirs != mine && self.reported.insert(node) {
            out.push(Action::Diverged { node, seq });
        }
    }

    fn on_repair_reply(&mut self, from: NodeId, committed: Seq, entries: Vec<Entry<P>>, out: &mut Vec<Action<P>>) {
        let Role::Repairing { waiting, .. } = &mut self.role else { return };
        if !waiting.remove(&from) {
            return;
        }
        // Everything up to a member's committed point is committed for all.
        self.committed = self.committed.max(committed.min(self.applied));
        self.take_in_order(entries, out);
        self.finish_repair_if_complete(out);
    }

    /// Once every member has answered: lead, and send each member the entries it lacks.
    fn finish_repair_if_complete(&mut self, out: &mut Vec<Action<P>>) {
        if !matches!(&self.role, Role::Repairing { waiting, .. } if waiting.is_empty()) {
            return;
        }
        // What each member already holds is unknown beyond the committed point; sending from
        // there is safe, members skip what they hold and answer with how far they ran.
        let progress: BTreeMap<NodeId, Progress> =
            self.others().map(|n| (n, Progress { acked: self.committed, ..Progress::default() })).collect();
        let entries = self.entries_after(self.committed, usize::MAX);
        for &to in progress.keys() {
            for chunk in entries.chunks(RESEND_BATCH_MAX) {
                out.push(Action::Send {
                    to,
                    message: Message::Replicate { term: self.view.term, entries: chunk.to_vec(), committed: self.committed },
                });
            }
        }
        self.role = Role::Leading { progress };
        self.advance_commit(out);
    }

    /// The leader's committed point: the least of what every member (itself too) has run.
    fn advance_commit(&mut self, out: &mut Vec<Action<P>>) {
        let Role::Leading { progress } = &self.role else { return };
        let counted = self.learners.values().filter(|l| l.counted).map(|l| l.acked);
        let least = progress.values().map(|p| p.acked).chain(counted).fold(self.applied, Seq::min);
        if least > self.committed {
            self.committed = least;
            out.push(Action::Commit(least));
            self.trim();
        }
    }

    /// Drops entries every member has run (and this node too).
    fn trim(&mut self) {
        let learners_acked = self.learners.values().map(|l| l.acked).min().unwrap_or(Seq::MAX);
        let keep_after = self.committed.min(self.applied).min(learners_acked);
        while self.log.front().is_some_and(|s| s.entry.seq <= keep_after) {
            self.log.pop_front();
        }
    }
}
