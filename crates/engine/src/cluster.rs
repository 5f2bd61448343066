//! What the engine needs from a cluster. On a single node there is none (`EngineConfig::
//! cluster` is `None`) and everything runs here. In a cluster every node runs a site for
//! every partition, but only the partitions it holds a replica of ever get work: a
//! single-partition call for a partition led elsewhere is forwarded to its leader; a leader
//! that ran a transaction which changed data hands it to the replication before answering;
//! a replica runs what its leader ordered, with the leader's transaction id.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockstep_core::Value;

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

/// The cluster as clients should see it (`@Statistics TOPO`, `@SystemInformation`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    /// This node's host id.
    pub me: u32,
    pub hosts: Vec<Host>,
    /// By partition id.
    pub partitions: Vec<PartitionPlacement>,
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

    /// A replica ran entry `seq` of `partition` (handed over by `Engine::run_replicated`).
    fn applied(&self, partition: u32, seq: u64, hash: u64);

    /// Changes the schema everywhere (DDL must reach every node in the same order);
    /// `reply` answers once this node applied it.
    fn change_schema(&self, statements: Vec<String>, reply: Reply);

    fn topology(&self) -> Topology;
}

/// The hash replicas compare: of a transaction's answer (its tables and app status), or of
/// its error. Deterministic across processes of one build (SipHash with fixed keys).
pub fn results_hash(result: std::result::Result<&lockstep_procs::ProcOutput, &lockstep_core::Error>) -> u64 {
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

/// A leader's answer waits for two things: its own command log (as durable as the mode
/// promises) and every replica. `join` splits the client's reply in two halves, one for
/// each; the client is answered once both are in: with the log's answer if the replicas
/// ran it, or "outcome unknown" if they may not have. A failed log half (the transaction
/// was refused and rolled back) is the answer whatever the replicas say, and a replica
/// half dropped without an answer counts as one.
pub fn join(reply: Reply) -> (Reply, Committed) {
    let state = Arc::new(Mutex::new(Join { logged: None, replicated: None, reply: Some(reply) }));
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
}

fn finish(state: &Mutex<Join>, set: impl FnOnce(&mut Join)) {
    // Only plain fields are set under the lock: a poisoned one still holds whole values.
    let mut j = state.lock().unwrap_or_else(|e| e.into_inner());
    set(&mut j);
    if j.logged.is_none() || j.replicated.is_none() {
        return;
    }
    let (Some(outcome), Some(replicated), Some(reply)) = (j.logged.take(), j.replicated.take(), j.reply.take()) else { return };
    drop(j);
    reply(match replicated {
        Err(why) if outcome.is_success() => unknown(&why),
        _ => outcome,
    });
}

/// The answer for a transaction that ran here but may not have reached every replica.
fn unknown(why: &str) -> crate::outcome::Outcome {
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
