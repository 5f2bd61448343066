//! The openraft wiring of the membership group: its type configuration, its Raft timings,
//! and the network client that carries openraft's RPCs over the internal `Transport`.

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{Config, EmptyNode, RaftNetwork, RaftNetworkFactory, SnapshotPolicy};

use crate::message::{Request, Response};
use crate::placement::NodeId;
use crate::state::{Command, Outcome};
use crate::transport::{CallError, Transport};

/// openraft's node id (our `NodeId` widened: openraft's test suite wants `From<u64>`).
pub type RaftNodeId = u64;

openraft::declare_raft_types!(
    /// The membership group's types: commands in, outcomes out, snapshots in memory.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = RaftNodeId,
        Node = EmptyNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The group's running Raft instance.
pub type MembershipRaft = openraft::Raft<TypeConfig>;

/// How often the group's leader sends Raft heartbeats.
pub const RAFT_HEARTBEAT_MS: u64 = 40;
/// A follower that hears no leader for the maximum (openraft's *leader lease*, during which
/// it also refuses to vote for anyone else) plus a random time in this range (fixed per
/// start) starts an election: 300–400 ms after the leader's last heartbeat. The detector
/// counts on that refusal (`detector::Timing::vote_lease_ms`): a new group leader's
/// predecessor last had a majority at least the maximum before the election, so the new
/// leader waits only what remains of the leases the predecessor granted, not a whole
/// failure timeout. The sum stays under the failure timeout (500 ms by default), so a dead
/// group leader is replaced before its failure is due to be declared.
pub const RAFT_ELECTION_TIMEOUT_MIN_MS: u64 = 100;
pub const RAFT_ELECTION_TIMEOUT_MAX_MS: u64 = 200;
/// Log entries sent in one append-entries message.
pub const APPEND_ENTRIES_MAX: u64 = 64;
/// Bytes of snapshot sent in one install-snapshot message (the cluster state is far smaller).
pub const SNAPSHOT_CHUNK_BYTES: u64 = 1024 * 1024;
/// A snapshot is built after this many entries since the last one; the log is then purged
/// up to it, keeping `LOG_KEPT_AFTER_SNAPSHOT` entries for followers slightly behind.
pub const SNAPSHOT_EVERY_ENTRIES: u64 = 1_000;
pub const LOG_KEPT_AFTER_SNAPSHOT: u64 = 100;
/// Longest any one Raft RPC may wait for its answer, whatever openraft asks for.
pub const RAFT_RPC_TIMEOUT_MAX_MS: u64 = 5_000;

/// The group's Raft configuration; `Err` says which setting openraft refused.
pub fn raft_config() -> Result<Arc<Config>, String> {
    let config = Config {
        cluster_name: "lockstep-membership".into(),
        heartbeat_interval: RAFT_HEARTBEAT_MS,
        election_timeout_min: RAFT_ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: RAFT_ELECTION_TIMEOUT_MAX_MS,
        max_payload_entries: APPEND_ENTRIES_MAX,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY_ENTRIES),
        max_in_snapshot_log_to_keep: LOG_KEPT_AFTER_SNAPSHOT,
        ..Config::default()
    };
    Ok(Arc::new(config.validate().map_err(|e| e.to_string())?))
}

/// Makes a `PeerClient` per peer for openraft.
pub struct NetworkFactory {
    transport: Arc<Transport>,
}

impl NetworkFactory {
    pub fn new(transport: Arc<Transport>) -> NetworkFactory {
        NetworkFactory { transport }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: RaftNodeId, _node: &EmptyNode) -> PeerClient {
        PeerClient { transport: self.transport.clone(), target }
    }
}

/// openraft's RPCs to one peer.
pub struct PeerClient {
    transport: Arc<Transport>,
    target: RaftNodeId,
}

type RpcResult<T, E = openraft::error::Infallible> = Result<T, RPCError<RaftNodeId, EmptyNode, RaftError<RaftNodeId, E>>>;

impl PeerClient {
    async fn call(&self, request: Request, option: &RPCOption) -> Result<Response, CallError> {
        let limit = option.hard_ttl().min(Duration::from_millis(RAFT_RPC_TIMEOUT_MAX_MS));
        let Ok(peer) = NodeId::try_from(self.target) else {
            return Err(CallError::UnknownPeer(NodeId::MAX));
        };
        self.transport.call(peer, request, limit).await
    }

    /// A failed call in openraft's terms: an unreachable peer makes openraft back off.
    fn failed<E: std::error::Error>(&self, e: CallError) -> RPCError<RaftNodeId, EmptyNode, RaftError<RaftNodeId, E>> {
        match e {
            CallError::Blocked(_) | CallError::Unreachable { .. } | CallError::Refused { .. } | CallError::UnknownPeer(_) => {
                RPCError::Unreachable(Unreachable::new(&e))
            }
            _ => RPCError::Network(NetworkError::new(&e)),
        }
    }

    fn unexpected<E: std::error::Error>(&self, r: Response) -> RPCError<RaftNodeId, EmptyNode, RaftError<RaftNodeId, E>> {
        let e = CallError::Closed { peer: self.target as NodeId, reason: format!("unexpected answer {r:?}") };
        RPCError::Network(NetworkError::new(&e))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<RaftNodeId>> {
        match self.call(Request::Append(rpc), &option).await {
            Ok(Response::Append(Ok(r))) => Ok(r),
            Ok(Response::Append(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(other) => Err(self.unexpected(other)),
            Err(e) => Err(self.failed(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<RaftNodeId>, InstallSnapshotError> {
        match self.call(Request::Snapshot(rpc), &option).await {
            Ok(Response::Snapshot(Ok(r))) => Ok(r),
            Ok(Response::Snapshot(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(other) => Err(self.unexpected(other)),
            Err(e) => Err(self.failed(e)),
        }
    }

    async fn vote(&mut self, rpc: VoteRequest<RaftNodeId>, option: RPCOption) -> RpcResult<VoteResponse<RaftNodeId>> {
        match self.call(Request::Vote(rpc), &option).await {
            Ok(Response::Vote(Ok(r))) => Ok(r),
            Ok(Response::Vote(Err(e))) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            Ok(other) => Err(self.unexpected(other)),
            Err(e) => Err(self.failed(e)),
        }
    }
}
