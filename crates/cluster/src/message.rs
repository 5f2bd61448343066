//! The messages nodes send each other over the internal network, and their framing.
//!
//! Every connection is one-way for requests: the node that opened it sends requests, each
//! with an id, and the other answers each with a response carrying the same id, in any
//! order. The first request on a connection is a `Hello`, so a node from another cluster (or
//! started with another layout) is turned away before anything else is read. The hello also
//! says where the caller's clients connect, so every node can tell clients where every other
//! node is. Calls forwarded to a partition's leader (`Invoke`), proposals forwarded to the
//! group's leader (`Propose`) and transactions sent to replicas (`Partition`) share the
//! same connections.
//!
//! A frame is `[length of the body: u32 BE][body]`, the body being `(request id, message)`
//! in postcard's encoding; a length above `FRAME_MAX_BYTES` ends the connection.

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};

use std::net::SocketAddr;

use crate::node::ProposeError;
use crate::placement::{NodeId, PartitionId};
use crate::raft::{RaftNodeId, TypeConfig};
use crate::replication;
use crate::state::{Command, Incarnation, Outcome};

/// Largest frame body either side sends or accepts. Raft batches are bounded well below it
/// (`raft::APPEND_ENTRIES_MAX`, `raft::SNAPSHOT_CHUNK_BYTES`).
pub const FRAME_MAX_BYTES: usize = 8 * 1024 * 1024;
/// Bytes of the length before each frame body.
pub const FRAME_HEADER_BYTES: usize = 4;
/// The internal protocol's version; a peer speaking another is turned away.
pub const PROTOCOL_VERSION: u32 = 3;

/// A request's id, unique on its connection.
pub type RequestId = u64;

/// Who is calling, and the layout it was started with: nodes of one cluster must agree on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    pub from: NodeId,
    pub nodes: u32,
    pub sites_per_node: u32,
    pub kfactor: u32,
    /// Where the caller's clients connect (its VoltDB-protocol port), if it has one.
    pub client: Option<SocketAddr>,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    /// The first request on every connection; answered `Welcome` or `Refused`.
    Hello(Hello),
    /// A heartbeat, carrying the caller's incarnation; answered `Pong`.
    Ping {
        incarnation: Incarnation,
    },
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<RaftNodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// One partition's replication (`replication.rs`); the payload is the engine's encoding
    /// of a transaction. Sent one way: answered `Taken` whatever became of it.
    Partition {
        partition: PartitionId,
        message: replication::Message<Vec<u8>>,
    },
    /// A call forwarded to the node leading `partition`; `call` is the server's encoding of
    /// it. Answered `Answer`. A `step` (of a multi-partition transaction, from the node
    /// coordinating it) travels on a connection of its own: it must never wait behind calls
    /// that wait for that transaction to end.
    Invoke {
        partition: PartitionId,
        call: Vec<u8>,
        step: bool,
    },
    /// A change for the group, sent to the node believed to lead it; answered `Proposed`.
    Propose(Command),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    Welcome,
    /// The callee will not talk to the caller, and says why.
    Refused(String),
    /// The callee's incarnation and, from the group's leader while it may grant leases, the
    /// epoch the group is at (`detector::Lease`). The caller dates the lease from when it
    /// *sent* its ping, so an answer delayed in the network (held through a split, then
    /// delivered) grants nothing fresh.
    Pong {
        incarnation: Incarnation,
        lease: Option<u64>,
    },
    Append(Result<AppendEntriesResponse<RaftNodeId>, RaftError<RaftNodeId>>),
    Vote(Result<VoteResponse<RaftNodeId>, RaftError<RaftNodeId>>),
    Snapshot(Result<InstallSnapshotResponse<RaftNodeId>, RaftError<RaftNodeId, InstallSnapshotError>>),
    Taken,
    /// The answer to `Invoke` in the server's encoding, or why no service took the call
    /// (the node is still starting): nothing of it ran.
    Answer(Result<Vec<u8>, String>),
    Proposed(Result<Outcome, ProposeError>),
}

impl Request {
    /// A short name for logs and errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Hello(_) => "hello",
            Request::Ping { .. } => "ping",
            Request::Append(_) => "append-entries",
            Request::Vote(_) => "vote",
            Request::Snapshot(_) => "install-snapshot",
            Request::Partition { .. } => "partition",
            Request::Invoke { .. } => "invoke",
            Request::Propose(_) => "propose",
        }
    }
}

/// Why a frame could not be sent or read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {0} bytes is over the internal network's limit of {FRAME_MAX_BYTES} bytes")]
    TooLarge(usize),
    #[error("a frame cannot be encoded: {0}")]
    Encode(postcard::Error),
    #[error("a frame from a peer cannot be decoded: {0}")]
    Decode(postcard::Error),
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
}

/// The bytes of one frame: header and body.
pub fn encode_frame<T: Serialize>(id: RequestId, message: &T) -> Result<Vec<u8>, FrameError> {
    let body = postcard::to_stdvec(&(id, message)).map_err(FrameError::Encode)?;
    if body.len() > FRAME_MAX_BYTES {
        return Err(FrameError::TooLarge(body.len()));
    }
    let mut out = Vec::with_capacity(FRAME_HEADER_BYTES + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Reads one frame. The length is checked before the body is read, so a peer cannot make
/// this node allocate more than `FRAME_MAX_BYTES`.
pub async fn read_frame<T: DeserializeOwned, R: AsyncRead + Unpin>(reader: &mut R) -> Result<(RequestId, T), FrameError> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    reader.read_exact(&mut header).await?;
    let len = u32::from_be_bytes(header) as usize;
    if len > FRAME_MAX_BYTES {
        return Err(FrameError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await?;
    postcard::from_bytes(&body).map_err(FrameError::Decode)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().build().unwrap()
    }

    #[test]
    fn frames_round_trip_and_oversized_lengths_are_refused_before_reading() {
        runtime().block_on(async {
            let hello = Hello {
                protocol: PROTOCOL_VERSION,
                from: 2,
                nodes: 3,
                sites_per_node: 2,
                kfactor: 1,
                client: Some(SocketAddr::from(([127, 0, 0, 1], 21212))),
            };
            let mut bytes = encode_frame(7, &Request::Hello(hello.clone())).unwrap();
            bytes.extend(encode_frame(8, &Response::Pong { incarnation: 4, lease: None }).unwrap());
            let mut r = &bytes[..];
            let (id, req): (RequestId, Request) = read_frame(&mut r).await.unwrap();
            assert_eq!(id, 7);
            assert!(matches!(req, Request::Hello(h) if h == hello));
            let (id, resp): (RequestId, Response) = read_frame(&mut r).await.unwrap();
            assert_eq!(id, 8);
            assert!(matches!(resp, Response::Pong { incarnation: 4, .. }));

            let huge = ((FRAME_MAX_BYTES + 1) as u32).to_be_bytes();
            let err = read_frame::<Request, _>(&mut &huge[..]).await.unwrap_err();
            assert!(matches!(err, FrameError::TooLarge(_)), "{err}");

            let garbage = [0, 0, 0, 2, 0xff, 0xff];
            assert!(matches!(read_frame::<Request, _>(&mut &garbage[..]).await, Err(FrameError::Decode(_))));
            let short = [0, 0, 0, 9, 1];
            assert!(matches!(read_frame::<Request, _>(&mut &short[..]).await, Err(FrameError::Io(_))));
        });
    }
}
