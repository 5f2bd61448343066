//! What the engine needs from a cluster. On a single node there is none (`EngineConfig::
//! cluster` is `None`) and everything runs here. In a cluster every node runs a site for
//! every partition, but only the partitions it holds a replica of ever get work: a
//! single-partition call for a partition led elsewhere is forwarded to its leader; a leader
//! that ran a transaction which changed data hands it to the replication before answering;
//! a replica runs what its leader ordered, with the leader's transaction id.

use std::net::SocketAddr;
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
