//! What the engine needs from a cluster. On a single node there is none (`EngineConfig::
//! cluster` is `None`) and everything runs here. In a cluster every node runs a site for
//! every partition, but only the partitions it holds a replica of ever get work: a
//! single-partition call for a partition led elsewhere is forwarded to its leader; a leader
//! that ran a transaction which changed data hands it to the replication before answering;
//! a replica runs what its leader ordered, with the leader's transaction id.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockstep_core::{DataType, Error, ErrorKind, ResultTable, Value};
use lockstep_sql::FragmentSpec;

use crate::outcome::Reply;

/// Called once every replica of the partition ran the transaction (`Ok`), or when that can
/// no longer be known (`Err` says why: the outcome is unknown).
pub type Committed = Box<dyn FnOnce(Result<(), String>) + Send>;

/// A single-partition call as it travels to the partition's leader.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum SpRequest {
    /// A procedure, by name.
    Proc(String),
    /// One ad-hoc statement that runs on one partition.
    Sql(String),
}

/// A multi-partition call as it travels to the node that coordinates them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum MpRequest {
    Proc {
        name: String,
        params: Vec<Value>,
    },
    /// Ad-hoc SQL (one or more statements run as one transaction).
    Sql {
        sql: String,
        params: Vec<Value>,
    },
}

/// From the multi-partition coordinator to a node that leads partitions.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum MpRemote {
    /// Park every partition this node leads at transaction `txn_id`'s place in its order.
    Begin { txn_id: i64 },
    /// Run a fragment of transaction `txn_id` on a parked partition.
    Fragment { txn_id: i64, partition: u32, spec: FragmentSpec },
    /// Prepare: hand each partition's share to its replicas, which hold it without running
    /// it; answered once every replica has it. `participants`: every partition with a share.
    Prepare { txn_id: i64, participants: Vec<u32> },
    /// The transaction's outcome: every share's replicas run it (commit) or drop it; the
    /// partitions go.
    End { txn_id: i64, commit: bool },
    /// From a newly coordinating node: what this node knows of transactions a coordinator
    /// left undecided (`InDoubtRow`s). A session not yet prepared is ended here, so it can
    /// never be prepared later.
    InDoubt,
    /// The outcome of `txn_id` for a share `partition`'s site holds (its leader, which
    /// prepared it, went down before deciding it).
    Resolve { txn_id: i64, partition: u32, commit: bool },
}

/// A result table as it travels between nodes (column types by their wire codes).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TableData {
    pub columns: Vec<(String, i8)>,
    pub rows: Vec<Vec<Value>>,
}

/// An error as it travels between nodes.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ErrorData {
    pub status: i8,
    pub message: String,
}

/// What a node answers the coordinator.
pub type RemoteAnswer = std::result::Result<TableData, ErrorData>;

impl From<&ResultTable> for TableData {
    fn from(t: &ResultTable) -> TableData {
        TableData { columns: t.columns.iter().map(|c| (c.name.to_string(), c.ty.wire_code())).collect(), rows: t.rows.clone() }
    }
}

impl TableData {
    pub fn into_table(self) -> lockstep_core::Result<ResultTable> {
        let columns: lockstep_core::Result<Vec<(String, DataType)>> = self
            .columns
            .into_iter()
            .map(|(name, code)| {
                DataType::from_wire_code(code)
                    .map(|ty| (name, ty))
                    .ok_or_else(|| Error::unexpected(format!("a peer sent column type {code}")))
            })
            .collect();
        let columns = columns?;
        let named: Vec<(&str, DataType)> = columns.iter().map(|(n, t)| (n.as_str(), *t)).collect();
        let mut t = ResultTable::with_columns(&named);
        t.rows = self.rows;
        Ok(t)
    }
}

impl From<&Error> for ErrorData {
    fn from(e: &Error) -> ErrorData {
        ErrorData { status: e.kind.status_code(), message: e.message.clone() }
    }
}

impl From<ErrorData> for Error {
    fn from(e: ErrorData) -> Error {
        let kind = match e.status {
            -1 => ErrorKind::UserAbort,
            -2 => ErrorKind::Graceful,
            -5 => ErrorKind::Unavailable,
            _ => ErrorKind::Unexpected,
        };
        Error { kind, message: e.message }
    }
}

/// What a replica is sent to run: a single-partition transaction (its command-log record)
/// or one partition's share of a multi-partition transaction (the fragments it ran there,
/// in order, with their statements named by their SQL text so a site can plan them).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub enum ReplicatedEntry {
    Txn(Vec<u8>),
    /// A prepared share: held, not run, until the `MpDecide` that follows it.
    MpPart {
        txn_id: i64,
        participants: Vec<u32>,
        specs: Vec<FragmentSpec>,
    },
    /// The outcome of the share held: run it (commit) or drop it.
    MpDecide {
        txn_id: i64,
        commit: bool,
    },
}

impl ReplicatedEntry {
    pub fn encode(&self) -> lockstep_core::Result<Vec<u8>> {
        postcard::to_allocvec(self).map_err(|e| Error::unexpected(format!("cannot encode a replicated entry: {e}")))
    }
    pub fn decode(bytes: &[u8]) -> lockstep_core::Result<ReplicatedEntry> {
        postcard::from_bytes(bytes).map_err(|e| Error::unexpected(format!("a replicated entry cannot be decoded: {e}")))
    }
}

/// The cluster as clients should see it (`@Statistics TOPO`, `@SystemInformation`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// This node's host id.
    pub me: u32,
    pub hosts: Vec<Host>,
    /// By partition id.
    pub partitions: Vec<PartitionPlacement>,
}

/// Calls one node passed to others, and ran for them, since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClusterCounters {
    /// Single-partition calls sent on to the partition's leader on another node.
    pub forwarded: u64,
    /// Multi-partition calls sent on to the node that coordinates them.
    pub forwarded_mp: u64,
    /// Calls other nodes sent here to run.
    pub run_for_others: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Host {
    pub id: u32,
    /// Where its clients connect, once known.
    pub client_address: Option<SocketAddr>,
    pub alive: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PartitionPlacement {
    pub leader: Option<u32>,
    /// The hosts holding a replica, the leader among them.
    pub replicas: Vec<u32>,
}

/// The cluster's side of the engine (the server provides it).
pub trait ClusterHooks: Send + Sync + 'static {
    /// Whether this node leads `partition` now: its calls run here.
    fn leads(&self, partition: u32) -> bool;

    /// Sends a single-partition call to the node leading `partition` and answers `reply`
    /// with its answer (or with why it could not be delivered).
    fn forward(&self, partition: u32, request: SpRequest, params: Vec<Value>, timeout: Option<Duration>, reply: Reply);

    /// The leader ran a transaction on `partition` that changed data: `record` is its
    /// command-log record, `hash` the hash of its results. Err: nothing was sent, and the
    /// site rolls the transaction back. Ok: `committed` is called once every replica ran it.
    fn replicate(&self, partition: u32, record: Vec<u8>, hash: u64, committed: Committed) -> Result<(), String>;

    /// The leader answers a call that changed nothing: `done` is called once every entry
    /// it appended to `partition` before now is run by every replica (at once if all are).
    /// Err: this node does not lead the partition, or stopped leading it first.
    fn after_appended(&self, partition: u32, done: Committed) {
        let _ = partition;
        done(Ok(()))
    }

    /// A replica ran entry `seq` of `partition` (handed over by `Engine::run_replicated`).
    fn applied(&self, partition: u32, seq: u64, hash: u64);

    /// Changes the schema everywhere (DDL must reach every node in the same order);
    /// `reply` answers once this node applied it.
    fn change_schema(&self, statements: Vec<String>, reply: Reply);

    fn topology(&self) -> Topology;

    /// Whether this node serves now (it is not cut off from the majority).
    fn serving(&self) -> bool {
        true
    }

    /// What this node did for and with the others (`@Statistics CLUSTER`).
    fn counters(&self) -> ClusterCounters {
        ClusterCounters::default()
    }

    /// Rejoin, on the partition's leader, from its site thread between transactions: makes
    /// node `joiner` a learner of `partition`; gives the entry and term its image is taken at.
    fn add_learner(&self, _partition: u32, _joiner: u32) -> Result<(u64, u64), String> {
        Err("this node is not in a cluster".into())
    }

    /// Rejoin, on the joiner, from the partition's site thread: it loaded the leader's image
    /// taken at entry `seq` of `term`, and takes the entries after it from now on.
    fn learn(&self, _partition: u32, _term: u64, _seq: u64) -> Result<(), String> {
        Err("this node is not in a cluster".into())
    }

    /// The node that coordinates multi-partition transactions now (None: none can run).
    fn mp_coordinator(&self) -> Option<u32> {
        None
    }

    /// Sends a multi-partition call to the coordinating node `to`; `reply` gets its answer.
    fn forward_mp(&self, to: u32, request: MpRequest, timeout: Option<Duration>, reply: Reply) {
        let _ = (to, request, timeout);
        reply(crate::outcome::Outcome::error(Error::unavailable("this cluster cannot forward multi-partition calls")));
    }

    /// Export, on the partition's leader: where its replication stands here, as (the last
    /// entry appended, the last entry every member has run). None: no replication to wait
    /// for (the exporter delivers what it reads).
    fn replication_marks(&self, partition: u32) -> Option<(u64, u64)> {
        let _ = partition;
        None
    }

    /// Export, on the partition's leader: target `target` acknowledged the partition's rows
    /// through sequence number `seq`; tell the partition's other replicas, which then pass
    /// those rows over in their own buffers (see `export/deliver.rs`). Best effort: a
    /// replica that misses it resends more after a failover, never less.
    fn export_acked(&self, partition: u32, target: &str, seq: u64) {
        let _ = (partition, target, seq);
    }

    /// Coordinator to node `node`: one step of a multi-partition transaction, waiting for
    /// the answer (called from the coordinator's thread, never from an async task).
    fn mp_remote(&self, node: u32, message: MpRemote) -> RemoteAnswer {
        let _ = (node, message);
        Err(ErrorData { status: -5, message: "this cluster cannot reach other nodes' partitions".into() })
    }
}

/// The hash replicas compare: of a transaction's answer (its tables and app status), or of
/// its error. Deterministic across processes of one build (SipHash with fixed keys).
pub fn results_hash(result: std::result::Result<&lockstep_procs::ProcOutput, &Error>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    match result {
        Ok(out) => {
            out.app_status.hash(&mut h);
            out.app_status_string.hash(&mut h);
            for t in &out.tables {
                t.rows.hash(&mut h);
            }
        }
        Err(e) => e.message.hash(&mut h),
    }
    h.finish()
}

/// The hash replicas compare for one partition's share of a multi-partition transaction:
/// of every fragment's answer, in order, or of the error that stopped them.
pub fn parts_hash(results: std::result::Result<&[ResultTable], &Error>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    match results {
        Ok(tables) => {
            for t in tables {
                t.rows.hash(&mut h);
            }
        }
        Err(e) => e.message.hash(&mut h),
    }
    h.finish()
}

/// The hash replicas compare for a prepared share (held, not run: nothing to compare but
/// that they hold it) and for a dropped one.
pub fn held_hash(txn_id: i64, commit: Option<bool>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    ("mp-share", txn_id, commit).hash(&mut h);
    h.finish()
}

/// A leader's answer waits for two things: its own command log (as durable as the mode
/// promises) and every replica. `join` splits the client's reply in two halves, one for
/// each; the client is answered once both are in: with the log's answer if the replicas
/// ran it, or "outcome unknown" if they may not have. A failed log half (the transaction
/// was refused and rolled back) is the answer whatever the replicas say, and a replica
/// half dropped without an answer counts as one.
pub fn join(reply: Reply) -> (Reply, Committed) {
    join_as(reply, true)
}

/// `join` for an answer that changed nothing (a read, a refusal) but may show writes not
/// yet on every replica (`ClusterHooks::after_appended`). If the replicas may never get
/// them, the answer is withheld, and the client told that nothing changed and to try again.
pub fn join_unchanged(reply: Reply) -> (Reply, Committed) {
    join_as(reply, false)
}

fn join_as(reply: Reply, wrote: bool) -> (Reply, Committed) {
    let state = Arc::new(Mutex::new(Join { logged: None, replicated: None, reply: Some(reply), wrote }));
    let for_log = state.clone();
    let logged: Reply = Box::new(move |outcome| finish(&for_log, |j| j.logged = Some(outcome)));
    let half = ReplicatedHalf(Some(state));
    let replicated: Committed = Box::new(move |result| half.done(result));
    (logged, replicated)
}

/// The replicas' half of a joined answer.
struct ReplicatedHalf(Option<Arc<Mutex<Join>>>);

impl ReplicatedHalf {
    fn done(mut self, result: Result<(), String>) {
        if let Some(state) = self.0.take() {
            finish(&state, |j| j.replicated = Some(result));
        }
    }
}

impl Drop for ReplicatedHalf {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            finish(&state, |j| j.replicated = Some(Err("the replication dropped the transaction".into())));
        }
    }
}

struct Join {
    logged: Option<crate::outcome::Outcome>,
    replicated: Option<Result<(), String>>,
    reply: Option<Reply>,
    /// The call changed data (else the replicas' half only confirms what it read).
    wrote: bool,
}

fn finish(state: &Mutex<Join>, set: impl FnOnce(&mut Join)) {
    // Only plain fields are set under the lock: a poisoned one still holds whole values.
    let mut j = state.lock().unwrap_or_else(|e| e.into_inner());
    set(&mut j);
    if j.logged.is_none() || j.replicated.is_none() {
        return;
    }
    let (Some(outcome), Some(replicated), Some(reply)) = (j.logged.take(), j.replicated.take(), j.reply.take()) else { return };
    let wrote = j.wrote;
    drop(j);
    reply(match replicated {
        Err(why) if !wrote => crate::outcome::Outcome::error(Error::unavailable(format!(
            "the answer is withheld: it may show writes that have not reached every replica ({why}); nothing was changed, try again"
        ))),
        Err(why) if outcome.is_success() => unknown(&why),
        _ => outcome,
    });
}

/// The answer for a transaction that ran here but may not have reached every replica.
pub fn unknown(why: &str) -> crate::outcome::Outcome {
    crate::outcome::Outcome {
        status: crate::durable::STATUS_RESPONSE_UNKNOWN,
        status_string: Some(format!("the transaction ran on the partition's leader, but its outcome is unknown: {why}")),
        app_status: crate::outcome::APP_STATUS_UNSET,
        app_status_string: None,
        tables: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;
    use std::sync::mpsc;

    #[test]
    fn a_joined_answer_waits_for_the_log_and_the_replicas_and_says_unknown_if_they_failed() {
        for (log_first, replicated) in [(true, Ok(())), (false, Ok(())), (true, Err("deposed".to_string()))] {
            let (tx, rx) = mpsc::channel();
            let (logged, committed) = join(Box::new(move |o| tx.send(o).unwrap()));
            if log_first {
                logged(Outcome::tables(vec![]));
                assert!(rx.try_recv().is_err(), "answered before the replicas");
                committed(replicated.clone());
            } else {
                committed(replicated.clone());
                assert!(rx.try_recv().is_err(), "answered before the log");
                logged(Outcome::tables(vec![]));
            }
            let answer = rx.try_recv().unwrap();
            assert_eq!(answer.is_success(), replicated.is_ok());
            if replicated.is_err() {
                assert_eq!(answer.status, crate::durable::STATUS_RESPONSE_UNKNOWN);
            }
        }
    }

    #[test]
    fn a_refused_transaction_is_answered_with_its_error_when_the_replicas_half_is_dropped() {
        let (tx, rx) = mpsc::channel();
        let (logged, committed) = join(Box::new(move |o| tx.send(o).unwrap()));
        drop(committed);
        logged(Outcome::error(lockstep_core::Error::unavailable("not the leader")));
        let answer = rx.try_recv().unwrap();
        assert_eq!(answer.status_string.as_deref(), Some("not the leader"));
    }

    #[test]
    fn results_hash_tells_answers_apart() {
        let out = |v: i64| lockstep_procs::ProcOutput {
            tables: vec![lockstep_core::ResultTable::scalar("X", v)],
            app_status: -128,
            app_status_string: None,
        };
        assert_eq!(results_hash(Ok(&out(1))), results_hash(Ok(&out(1))));
        assert_ne!(results_hash(Ok(&out(1))), results_hash(Ok(&out(2))));
        let e = lockstep_core::Error::graceful("no");
        assert_ne!(results_hash(Err(&e)), results_hash(Ok(&out(1))));
    }
}
