//! What this node knows of the multi-partition transactions it took part in, for deciding
//! those a coordinator left undecided (docs/cluster.md, "Atomic multi-partition commits"):
//! for each partition, the prepared share its site holds and the outcomes it decided last;
//! and the session this node serves for the coordinator (or, on the coordinator, the
//! transaction it runs: its own shares are fenced like any). A node that starts coordinating
//! gathers every node's `rows` (`MpRemote::InDoubt`) and decides each transaction found by
//! one rule (`decide`), the same rule whoever applies it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

/// Outcomes kept per partition: enough to answer for the transactions a failover can leave
/// undecided (one coordinator runs one at a time).
pub const DECIDED_KEPT: usize = 64;
/// The partition a session's row names when the session has no share yet.
pub const NO_PARTITION: u32 = u32::MAX;

/// Where one partition's share of a transaction stands, as one node sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ShareState {
    /// In a session that had not prepared it when asked: it never will now.
    Open,
    /// In a session, prepared: every replica holds it.
    Prepared,
    /// Held by the partition's site, prepared by a leader that went down.
    Held,
    Committed,
    Aborted,
}

/// One share's state, with the partitions of its transaction when known.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InDoubtRow {
    pub partition: u32,
    pub txn_id: i64,
    pub state: ShareState,
    pub participants: Vec<u32>,
    /// Reported by the node coordinating the transaction: it ends it itself, with the
    /// outcome `decide` gives (it was fenced if it had not prepared).
    pub coordinator: bool,
}

/// How a transaction left undecided is to end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Commit,
    Abort,
    /// Not yet decidable: some partition's leader did not answer.
    Wait(String),
}

struct Session {
    txn_id: i64,
    /// This node coordinates the transaction (rather than serving it for another).
    coordinator: bool,
    /// Set once the shares are prepared and the coordinator told so.
    prepared: bool,
    /// Set when a new coordinator asked before the shares were prepared: they never will be.
    fenced: bool,
    partitions: Vec<u32>,
    participants: Vec<u32>,
}

#[derive(Default)]
pub struct Ledger {
    held: BTreeMap<u32, (i64, Vec<u32>)>,
    decided: BTreeMap<u32, VecDeque<(i64, bool)>>,
    session: Option<Session>,
}

impl Ledger {
    /// `partition`'s site holds its prepared share of `txn_id`.
    pub fn hold(&mut self, partition: u32, txn_id: i64, participants: Vec<u32>) {
        self.held.insert(partition, (txn_id, participants));
    }

    /// `partition`'s site no longer holds a share (its state was replaced by a rejoin image).
    pub fn drop_held(&mut self, partition: u32) {
        self.held.remove(&partition);
    }

    /// The share `partition`'s site holds, if any.
    pub fn held(&self, partition: u32) -> Option<i64> {
        self.held.get(&partition).map(|(t, _)| *t)
    }

    /// `partition` decided its share of `txn_id`.
    pub fn decided(&mut self, partition: u32, txn_id: i64, commit: bool) {
        if self.held(partition) == Some(txn_id) {
            self.held.remove(&partition);
        }
        let kept = self.decided.entry(partition).or_default();
        if kept.len() >= DECIDED_KEPT {
            kept.pop_front();
        }
        kept.push_back((txn_id, commit));
    }

    /// The outcome `partition` decided for `txn_id`, if it still remembers it.
    pub fn outcome(&self, partition: u32, txn_id: i64) -> Option<bool> {
        self.decided.get(&partition)?.iter().find(|(t, _)| *t == txn_id).map(|(_, c)| *c)
    }

    pub fn session_begin(&mut self, txn_id: i64, coordinator: bool) {
        self.session =
            Some(Session { txn_id, coordinator, prepared: false, fenced: false, partitions: Vec::new(), participants: Vec::new() });
    }

    /// The session's shares are in every replica: may the coordinator be told so? Not if a
    /// new coordinator was told they were not.
    pub fn session_prepared(&mut self, txn_id: i64, partitions: Vec<u32>, participants: Vec<u32>) -> bool {
        match &mut self.session {
            Some(s) if s.txn_id == txn_id && !s.fenced => {
                s.prepared = true;
                s.partitions = partitions;
                s.participants = participants;
                true
            }
            _ => false,
        }
    }

    pub fn session_end(&mut self) {
        self.session = None;
    }

    /// What this node reports to a new coordinator, for the partitions it leads (`leads`).
    /// A session not yet prepared is fenced: it can never report prepared afterwards.
    pub fn rows(&mut self, leads: impl Fn(u32) -> bool) -> Vec<InDoubtRow> {
        let mut rows = Vec::new();
        if let Some(s) = &mut self.session {
            s.fenced |= !s.prepared;
            let state = if s.prepared { ShareState::Prepared } else { ShareState::Open };
            let partitions = if s.partitions.is_empty() { vec![NO_PARTITION] } else { s.partitions.clone() };
            rows.extend(partitions.into_iter().map(|partition| InDoubtRow {
                partition,
                txn_id: s.txn_id,
                state,
                participants: s.participants.clone(),
                coordinator: s.coordinator,
            }));
        }
        for (&partition, (txn_id, participants)) in self.held.iter().filter(|(p, _)| leads(**p)) {
            rows.push(InDoubtRow {
                partition,
                txn_id: *txn_id,
                state: ShareState::Held,
                participants: participants.clone(),
                coordinator: false,
            });
        }
        for (&partition, kept) in self.decided.iter().filter(|(p, _)| leads(**p)) {
            for &(txn_id, commit) in kept {
                let state = if commit { ShareState::Committed } else { ShareState::Aborted };
                rows.push(InDoubtRow { partition, txn_id, state, participants: Vec::new(), coordinator: false });
            }
        }
        rows
    }
}

/// The ledger, also when a thread panicked holding it (its fields are whole values).
pub fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(|e| e.into_inner())
}

/// The transactions the rows leave undecided: some share open, prepared or held.
pub fn undecided(rows: &[InDoubtRow]) -> BTreeSet<i64> {
    rows.iter().filter(|r| matches!(r.state, ShareState::Open | ShareState::Prepared | ShareState::Held)).map(|r| r.txn_id).collect()
}

/// How `txn_id` ends, from every row gathered. An outcome any partition decided stands (the
/// coordinator decided it). Otherwise the coordinator may have decided to commit only if
/// every participant prepared: commit then, else abort. A participant with no row was not
/// prepared if its leader answered (`answered`); if it did not, nothing can be decided yet.
pub fn decide(txn_id: i64, rows: &[InDoubtRow], answered: impl Fn(u32) -> bool) -> Decision {
    let of_txn: Vec<&InDoubtRow> = rows.iter().filter(|r| r.txn_id == txn_id).collect();
    if of_txn.iter().any(|r| r.state == ShareState::Committed) {
        return Decision::Commit;
    }
    if of_txn.iter().any(|r| r.state == ShareState::Aborted) {
        return Decision::Abort;
    }
    let participants: BTreeSet<u32> = of_txn.iter().flat_map(|r| r.participants.iter().copied()).collect();
    if participants.is_empty() {
        return Decision::Abort;
    }
    for p in participants {
        let prepared = of_txn.iter().any(|r| r.partition == p && matches!(r.state, ShareState::Prepared | ShareState::Held));
        if !prepared {
            return match answered(p) {
                true => Decision::Abort,
                false => Decision::Wait(format!("the leader of partition {p} has not answered")),
            };
        }
    }
    Decision::Commit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(partition: u32, state: ShareState) -> InDoubtRow {
        InDoubtRow { partition, txn_id: 7, state, participants: vec![0, 1], coordinator: false }
    }

    #[test]
    fn a_transaction_every_participant_prepared_commits_and_one_not_prepared_aborts() {
        let all = |_| true;
        assert_eq!(decide(7, &[row(0, ShareState::Prepared), row(1, ShareState::Held)], all), Decision::Commit);
        assert_eq!(decide(7, &[row(0, ShareState::Prepared), row(1, ShareState::Open)], all), Decision::Abort);
        assert_eq!(decide(7, &[row(0, ShareState::Prepared)], all), Decision::Abort);
        assert!(matches!(decide(7, &[row(0, ShareState::Prepared)], |p| p == 0), Decision::Wait(_)));
    }

    #[test]
    fn an_outcome_a_partition_decided_stands_whatever_the_others_hold() {
        let decided =
            |commit| InDoubtRow { participants: vec![], ..row(1, if commit { ShareState::Committed } else { ShareState::Aborted }) };
        // Committed elsewhere, but one participant's new leader only holds it: commit.
        assert_eq!(decide(7, &[row(0, ShareState::Held), decided(true)], |_| true), Decision::Commit);
        assert_eq!(decide(7, &[row(0, ShareState::Held), decided(false)], |_| true), Decision::Abort);
    }

    #[test]
    fn a_session_asked_before_it_prepared_can_never_say_prepared() {
        let mut l = Ledger::default();
        l.session_begin(7, false);
        let rows = l.rows(|_| true);
        assert_eq!(
            rows,
            vec![InDoubtRow { partition: NO_PARTITION, txn_id: 7, state: ShareState::Open, participants: vec![], coordinator: false }]
        );
        assert!(!l.session_prepared(7, vec![0], vec![0, 1]), "a fenced session was prepared");
        let mut l = Ledger::default();
        l.session_begin(8, false);
        assert!(l.session_prepared(8, vec![0], vec![0, 1]));
        assert_eq!(l.rows(|_| true)[0].state, ShareState::Prepared);
        // The coordinator's own transaction is fenced the same way, and says whose it is.
        let mut l = Ledger::default();
        l.session_begin(9, true);
        assert!(l.rows(|_| true).iter().all(|r| r.coordinator && r.state == ShareState::Open));
        assert!(!l.session_prepared(9, vec![1], vec![0, 1]), "a coordinator asked by its successor committed");
    }

    use proptest::prelude::*;

    /// One participant partition in the model of a failure: prepared or not, and the
    /// outcome it applied (as its current leader remembers it).
    #[derive(Clone, Copy, Debug, Default)]
    struct Part {
        prepared: bool,
        decided: Option<bool>,
    }

    proptest! {
        /// The decision rule under every failure point: a coordinator prepares the
        /// participants in turn (any prepare may fail), decides (commit only if all
        /// prepared), delivers its outcome in turn, and crashes at any step; any leader that
        /// applied the outcome may go down before its replicas had it (its successor then
        /// holds the share undecided). Whatever happened, the next coordinator's `decide`
        /// leaves every participant with one outcome, and the one the client was told.
        #[test]
        fn every_failure_point_ends_each_transaction_the_same_way_on_every_partition(
            parts in 2usize..5,
            prepare_fails in proptest::collection::vec(any::<bool>(), 5),
            crash_at in 0usize..12,
            forgets in proptest::collection::vec(any::<bool>(), 5),
        ) {
            let mut model = vec![Part::default(); parts];
            let mut step = 0;
            let mut crashed = false;
            let mut all_prepared = true;
            for (p, part) in model.iter_mut().enumerate() {
                if step == crash_at { crashed = true; break; }
                step += 1;
                part.prepared = !prepare_fails[p];
                all_prepared &= part.prepared;
            }
            // The client hears "committed" once every share is prepared.
            let told_commit = !crashed && all_prepared;
            if !crashed {
                for (p, part) in model.iter_mut().enumerate() {
                    if step == crash_at { break; }
                    step += 1;
                    if part.prepared && forgets[p] {
                        continue; // applied by a leader that went down before its replicas had it
                    }
                    part.decided = Some(all_prepared);
                }
            }
            let participants: Vec<u32> = (0..parts as u32).collect();
            let rows: Vec<InDoubtRow> = model.iter().enumerate().filter_map(|(p, part)| {
                let state = match part.decided {
                    Some(true) => ShareState::Committed,
                    Some(false) => ShareState::Aborted,
                    None if part.prepared => ShareState::Held,
                    None => return None,
                };
                Some(InDoubtRow { partition: p as u32, txn_id: 7, state, participants: participants.clone(), coordinator: false })
            }).collect();
            let outcome = match decide(7, &rows, |_| true) {
                Decision::Commit => true,
                Decision::Abort => false,
                Decision::Wait(why) => panic!("every leader answered, yet: {why}"),
            };
            for part in &model {
                if let Some(d) = part.decided {
                    prop_assert_eq!(d, outcome, "a partition applied the other outcome");
                }
            }
            if told_commit {
                prop_assert!(outcome, "the client was told the transaction committed");
            }
            if !all_prepared {
                prop_assert!(!outcome, "committed though a share was never prepared");
            }
        }
    }

    #[test]
    fn held_shares_are_reported_by_their_leaders_only_and_outcomes_are_bounded() {
        let mut l = Ledger::default();
        l.hold(3, 7, vec![2, 3]);
        assert!(l.rows(|p| p != 3).is_empty());
        assert_eq!(l.rows(|_| true)[0].state, ShareState::Held);
        l.decided(3, 7, true);
        assert_eq!(l.held(3), None);
        for t in 0..(DECIDED_KEPT as i64 + 10) {
            l.decided(3, 100 + t, false);
        }
        let rows = l.rows(|_| true);
        assert_eq!(rows.len(), DECIDED_KEPT);
        assert_eq!(undecided(&rows), BTreeSet::new());
    }
}
