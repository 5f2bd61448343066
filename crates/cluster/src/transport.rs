//! The internal network: a TCP listener on the node's internal address, and one outgoing
//! connection to each other node, carrying the framed requests and responses of
//! `message.rs`.
//!
//! Every peer has its own task, queue and connection, so a dead or slow peer never holds up
//! the others: its queue is bounded (a full queue fails the call at once), connecting has a
//! timeout, every call has a timeout, and a peer that cannot be reached is retried with a
//! growing backoff while calls to it fail fast. Incoming connections are bounded in number
//! and in requests handled at once, and end after a long silence.
//!
//! A fault switch (`Faults`) cuts this node off from chosen peers: calls to them fail and
//! their requests are dropped unanswered, as in a network split. Tests use it; so can an
//! operator's fault-injection drill.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout, Instant};

use crate::message::{encode_frame, read_frame, FrameError, Hello, Request, RequestId, Response};
use crate::placement::{NodeId, NODES_MAX};

/// Calls waiting for one of a peer's connections (but replication's and forwarded
/// calls'); one more fails at once with `QueueFull`.
pub const PEER_QUEUE_MAX: usize = 256;
/// Calls forwarded to a peer (and proposals) waiting for its connection: room for the
/// windows of the clients that send through this node.
pub const PEER_FORWARD_QUEUE_MAX: usize = 4_096;
/// Replication messages waiting for a peer's replication connection: far more, as a busy
/// partition posts one per transaction.
pub const PEER_DATA_QUEUE_MAX: usize = 16_384;
/// Calls sent on one connection to a peer and not yet answered; more wait in the queue, in
/// order.
pub const PEER_IN_FLIGHT_MAX: usize = 256;
/// How long opening a connection (TCP and the hello) may take.
pub const CONNECT_TIMEOUT_MS: u64 = 500;
/// How long writing one frame may take before the connection is given up.
pub const WRITE_TIMEOUT_MS: u64 = 2_000;
/// The first wait before reconnecting to a peer that could not be reached; it doubles up to
/// `RECONNECT_BACKOFF_MAX_MS`.
pub const RECONNECT_BACKOFF_MIN_MS: u64 = 50;
pub const RECONNECT_BACKOFF_MAX_MS: u64 = 1_000;
/// Incoming connections open at once; more are closed as they arrive. Room for every
/// lane of every other node of the largest cluster, and for one set more (a restarted
/// node connects again before its old connections are closed).
pub const INBOUND_CONNECTIONS_MAX: usize = LANES * NODES_MAX as usize;
/// Requests of one incoming connection handled at once; more wait (unread) in the socket.
/// As many as a sender has in flight on one connection.
pub const INBOUND_IN_FLIGHT_MAX: usize = PEER_IN_FLIGHT_MAX;
/// An incoming connection silent this long is closed (its peer pings far more often).
pub const INBOUND_IDLE_TIMEOUT_MS: u64 = 30_000;
/// Bytes of frames gathered before a write to a peer (a frame larger goes out whole).
const WRITE_BUFFER_BYTES: usize = 64 * 1024;
/// How often answered-by-nobody entries are swept from a connection's table.
const SWEEP_INTERVAL_MS: u64 = 1_000;

/// Why a call got no response.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("node {0} is not in the cluster's host list")]
    UnknownPeer(NodeId),
    #[error("node {0} is cut off by the fault switch")]
    Blocked(NodeId),
    #[error("node {peer} cannot be reached: {reason}")]
    Unreachable { peer: NodeId, reason: String },
    #[error("too many calls are waiting for node {0}")]
    QueueFull(NodeId),
    #[error("node {peer} did not answer within {ms} ms")]
    Timeout { peer: NodeId, ms: u64 },
    #[error("the connection to node {peer} ended before it answered: {reason}")]
    Closed { peer: NodeId, reason: String },
    #[error("node {peer} refused this node: {reason}")]
    Refused { peer: NodeId, reason: String },
    #[error("the call cannot be sent: {0}")]
    Encode(String),
}

/// Peers this node is cut off from (in both directions, as far as this node is concerned).
#[derive(Debug, Default)]
pub struct Faults {
    blocked: Mutex<HashSet<NodeId>>,
}

impl Faults {
    pub fn block(&self, peer: NodeId) {
        self.lock().insert(peer);
    }

    pub fn unblock(&self, peer: NodeId) {
        self.lock().remove(&peer);
    }

    /// Unblocks every peer.
    pub fn heal(&self) {
        self.lock().clear();
    }

    pub fn is_blocked(&self, peer: NodeId) -> bool {
        self.lock().contains(&peer)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<NodeId>> {
        // A set of ids is never left half-changed.
        self.blocked.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Answers the requests that arrive on incoming connections.
pub trait Handler: Send + Sync + 'static {
    /// Whether to talk to a peer that says `hello`; `Err` says why not.
    fn check_hello(&self, hello: &Hello) -> Result<(), String>;
    /// The response to one request from `from` (who passed `check_hello`).
    fn handle(&self, from: NodeId, request: Request) -> impl Future<Output = Response> + Send;
    /// Starts a request that must start in the order it arrived (a call forwarded to this
    /// node: one client's calls to a partition run in the order it sent them), from the
    /// connection's read loop; `Later` gives back a request to `handle` on a task of its
    /// own (tasks run in any order).
    fn start_in_order(&self, from: NodeId, request: Request) -> Started {
        let _ = from;
        Started::Later(request)
    }
}

/// What `Handler::start_in_order` did with a request.
pub enum Started {
    /// Started; its response comes through the receiver.
    Now(oneshot::Receiver<Response>),
    /// Not a request to start in order: `handle` it.
    Later(Request),
}

/// Where the response to a queued call arrives.
pub type Answer = oneshot::Receiver<Result<Response, CallError>>;

/// A call queued for a peer's connection.
struct Outgoing {
    request: Request,
    /// None for a message sent one way (`post`): its response is read and dropped.
    reply: Option<oneshot::Sender<Result<Response, CallError>>>,
}

impl Outgoing {
    fn answer(self, result: Result<Response, CallError>) {
        if let Some(reply) = self.reply {
            let _ = reply.send(result);
        }
    }

    /// A caller that stopped waiting: the call need not be sent.
    fn abandoned(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| r.is_closed())
    }
}

/// The sending side: one task and queue per peer.
pub struct Transport {
    me: NodeId,
    /// By node id: the peer's queue for each lane (`lane`), each with its own connection.
    peers: Vec<Option<[mpsc::Sender<Outgoing>; LANES]>>,
    tasks: Vec<JoinHandle<()>>,
    faults: Arc<Faults>,
}

/// A peer's connections, one per kind of traffic, so that none waits behind another: a
/// request waits only behind requests of its own lane (a connection's requests are read
/// in order, a bounded number at a time).
const LANES: usize = 5;

/// Which connection a request travels on: heartbeats and Raft (never behind transactions);
/// replication (never behind calls that wait for a transaction); steps of multi-partition
/// transactions (never behind calls waiting for that transaction to end); forwarded calls;
/// proposals (never behind forwarded calls, which may wait for the membership change a
/// proposal makes: a member evicted, say).
fn lane(request: &Request) -> usize {
    match request {
        Request::Hello(_) | Request::Ping { .. } | Request::Append(_) | Request::Vote(_) | Request::Snapshot(_) => 0,
        Request::Partition { .. } => 1,
        Request::Invoke { step: true, .. } => 2,
        Request::Invoke { step: false, .. } => 3,
        Request::Propose(_) => 4,
    }
}

impl Transport {
    /// Starts a task per peer in `addrs` (by node id; this node's own entry is skipped). The
    /// tasks connect when the first call arrives and say `hello` on every connection.
    pub fn start(me: NodeId, addrs: &[SocketAddr], hello: Hello, faults: Arc<Faults>) -> Transport {
        let mut peers = Vec::with_capacity(addrs.len());
        let mut tasks = Vec::new();
        for (id, addr) in addrs.iter().enumerate() {
            let id = id as NodeId;
            if id == me {
                peers.push(None);
                continue;
            }
            let queues = [PEER_QUEUE_MAX, PEER_DATA_QUEUE_MAX, PEER_QUEUE_MAX, PEER_FORWARD_QUEUE_MAX, PEER_QUEUE_MAX].map(|size| {
                let (tx, rx) = mpsc::channel(size);
                tasks.push(tokio::spawn(run_peer(id, *addr, hello.clone(), rx)));
                tx
            });
            peers.push(Some(queues));
        }
        Transport { me, peers, tasks, faults }
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// Sends `request` to `peer` and waits at most `limit` for its response.
    pub async fn call(&self, peer: NodeId, request: Request, limit: Duration) -> Result<Response, CallError> {
        let answer = self.start_call(peer, request)?;
        Self::response(peer, answer, limit).await
    }

    /// Queues `request` for `peer` now (requests queued for one peer go in the order
    /// queued); `response` waits for its answer.
    pub fn start_call(&self, peer: NodeId, request: Request) -> Result<Answer, CallError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(peer, Outgoing { request, reply: Some(reply) })?;
        Ok(answer)
    }

    /// The response to a request `start_call` queued for `peer`, waited for at most `limit`.
    pub async fn response(peer: NodeId, answer: Answer, limit: Duration) -> Result<Response, CallError> {
        match timeout(limit, answer).await {
            Err(_) => Err(CallError::Timeout { peer, ms: limit.as_millis() as u64 }),
            Ok(Err(_)) => Err(CallError::Closed { peer, reason: "the connection task ended".into() }),
            Ok(Ok(result)) => result,
        }
    }
}

impl Transport {
    /// Queues `request` for `peer` without waiting for (or reading) its response. Messages
    /// posted to one peer are sent in the order posted; one may be lost if the connection
    /// breaks, so the caller must be able to send it again.
    pub fn post(&self, peer: NodeId, request: Request) -> Result<(), CallError> {
        self.enqueue(peer, Outgoing { request, reply: None })
    }

    fn enqueue(&self, peer: NodeId, outgoing: Outgoing) -> Result<(), CallError> {
        let queues = self.peers.get(peer as usize).and_then(|p| p.as_ref()).ok_or(CallError::UnknownPeer(peer))?;
        let queue = &queues[lane(&outgoing.request)];
        if self.faults.is_blocked(peer) {
            return Err(CallError::Blocked(peer));
        }
        queue.try_send(outgoing).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => CallError::QueueFull(peer),
            mpsc::error::TrySendError::Closed(_) => CallError::Closed { peer, reason: "the transport is shut down".into() },
        })
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One peer's task: connect, send the queued calls, reconnect with backoff when the
/// connection fails, and fail calls at once while the peer cannot be reached.
async fn run_peer(peer: NodeId, addr: SocketAddr, hello: Hello, mut queue: mpsc::Receiver<Outgoing>) {
    let mut backoff = RECONNECT_BACKOFF_MIN_MS;
    // Connect only once there is something to send.
    let mut first = match queue.recv().await {
        Some(o) => Some(o),
        None => return,
    };
    loop {
        match connect(peer, addr, &hello).await {
            Ok(stream) => {
                backoff = RECONNECT_BACKOFF_MIN_MS;
                match serve_connection(peer, stream, first.take(), &mut queue).await {
                    Ended::QueueClosed => return,
                    Ended::Broken(reason) => tracing::debug!(peer, %reason, "internal connection lost; reconnecting"),
                }
            }
            Err(e) => {
                tracing::debug!(peer, error = %e, backoff_ms = backoff, "cannot reach peer");
                if let Some(o) = first.take() {
                    o.answer(Err(e.clone()));
                }
                if !fail_calls_for(Duration::from_millis(backoff), &e, &mut queue).await {
                    return;
                }
                backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX_MS);
            }
        }
        if first.is_none() {
            match queue.recv().await {
                Some(o) => first = Some(o),
                None => return,
            }
        }
    }
}

/// Fails every call that arrives during `wait`; false if the queue closed.
async fn fail_calls_for(wait: Duration, error: &CallError, queue: &mut mpsc::Receiver<Outgoing>) -> bool {
    let until = Instant::now() + wait;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(until) => return true,
            next = queue.recv() => match next {
                Some(o) => o.answer(Err(error.clone())),
                None => return false,
            },
        }
    }
}

/// Opens a connection and says hello.
async fn connect(peer: NodeId, addr: SocketAddr, hello: &Hello) -> Result<TcpStream, CallError> {
    let unreachable = |reason: String| CallError::Unreachable { peer, reason };
    let attempt = async {
        let mut stream = TcpStream::connect(addr).await.map_err(|e| unreachable(format!("{addr}: {e}")))?;
        stream.set_nodelay(true).map_err(|e| unreachable(e.to_string()))?;
        let frame = encode_frame(0, &Request::Hello(hello.clone())).map_err(|e| CallError::Encode(e.to_string()))?;
        stream.write_all(&frame).await.map_err(|e| unreachable(e.to_string()))?;
        match read_frame::<Response, _>(&mut stream).await.map_err(|e| unreachable(e.to_string()))? {
            (_, Response::Welcome) => Ok(stream),
            (_, Response::Refused(reason)) => Err(CallError::Refused { peer, reason }),
            (_, other) => Err(unreachable(format!("answered hello with {other:?}"))),
        }
    };
    match timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), attempt).await {
        Ok(result) => result,
        Err(_) => Err(unreachable(format!("{addr}: no connection within {CONNECT_TIMEOUT_MS} ms"))),
    }
}

enum Ended {
    QueueClosed,
    Broken(String),
}

/// Calls sent and not answered, by id: where each answer goes, and the call's place among
/// the connection's `PEER_IN_FLIGHT_MAX` (freed with the entry).
type Pending = Arc<Mutex<HashMap<RequestId, Waiting>>>;
type Waiting = (oneshot::Sender<Result<Response, CallError>>, OwnedSemaphorePermit);

fn lock_pending(p: &Pending) -> std::sync::MutexGuard<'_, HashMap<RequestId, Waiting>> {
    // Entries are inserted and removed whole.
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends queued calls on one connection until it breaks; a reader task matches responses
/// to calls by id.
async fn serve_connection(peer: NodeId, stream: TcpStream, first: Option<Outgoing>, queue: &mut mpsc::Receiver<Outgoing>) -> Ended {
    let (reader, writer) = stream.into_split();
    // Frames queued back to back go out in one write; the buffer is flushed whenever the
    // queue runs dry.
    let mut writer = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    let pending: Pending = Arc::default();
    let mut reader_task = tokio::spawn(read_responses(reader, pending.clone()));
    let mut next_id: RequestId = 1;
    let mut sweep = tokio::time::interval(Duration::from_millis(SWEEP_INTERVAL_MS));
    let mut first = first;
    let in_flight = Arc::new(Semaphore::new(PEER_IN_FLIGHT_MAX));
    let ended = loop {
        // A call is taken from the queue only when it may be sent: the ones behind it wait
        // there, in order, rather than fail. What was written goes out before the wait, or
        // the answers that end it would never come.
        let permit = match in_flight.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if let Err(e) = timed_write(writer.flush()).await {
                    break Ended::Broken(e);
                }
                tokio::select! {
                    permit = in_flight.clone().acquire_owned() => match permit {
                        Ok(p) => p,
                        Err(_) => break Ended::QueueClosed,
                    },
                    done = &mut reader_task => {
                        break Ended::Broken(match done { Ok(reason) => reason, Err(e) => e.to_string() });
                    }
                }
            }
        };
        let outgoing = match first.take() {
            Some(o) => o,
            None => tokio::select! {
                next = queue.recv() => match next {
                    Some(o) => o,
                    None => break Ended::QueueClosed,
                },
                done = &mut reader_task => {
                    break Ended::Broken(match done { Ok(reason) => reason, Err(e) => e.to_string() });
                }
                _ = sweep.tick() => {
                    // Calls whose callers stopped waiting will never be collected otherwise.
                    lock_pending(&pending).retain(|_, (reply, _)| !reply.is_closed());
                    continue;
                }
            },
        };
        if outgoing.abandoned() {
            continue;
        }
        if let Err(e) = send_call(&mut writer, &pending, next_id, outgoing, permit).await {
            break Ended::Broken(e);
        }
        if queue.is_empty() {
            if let Err(e) = timed_write(writer.flush()).await {
                break Ended::Broken(e);
            }
        }
        next_id += 1;
    };
    reader_task.abort();
    let reason = match &ended {
        Ended::QueueClosed => "the transport is shut down".to_string(),
        Ended::Broken(r) => r.clone(),
    };
    for (_, (reply, _)) in lock_pending(&pending).drain() {
        let _ = reply.send(Err(CallError::Closed { peer, reason: reason.clone() }));
    }
    ended
}

/// Writes one call; Err (with the reason) if the connection is broken.
async fn send_call(
    writer: &mut BufWriter<OwnedWriteHalf>,
    pending: &Pending,
    id: RequestId,
    outgoing: Outgoing,
    permit: OwnedSemaphorePermit,
) -> Result<(), String> {
    let frame = match encode_frame(id, &outgoing.request) {
        Ok(f) => f,
        Err(e) => {
            outgoing.answer(Err(CallError::Encode(e.to_string())));
            return Ok(());
        }
    };
    if let Some(reply) = outgoing.reply {
        lock_pending(pending).insert(id, (reply, permit));
    }
    timed_write(writer.write_all(&frame)).await
}

/// A write (or flush) that must finish within `WRITE_TIMEOUT_MS`; Err says why it did not.
async fn timed_write(write: impl Future<Output = std::io::Result<()>>) -> Result<(), String> {
    match timeout(Duration::from_millis(WRITE_TIMEOUT_MS), write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("a write took over {WRITE_TIMEOUT_MS} ms")),
    }
}

/// Reads responses until the connection breaks; returns why it did.
async fn read_responses(mut reader: OwnedReadHalf, pending: Pending) -> String {
    loop {
        match read_frame::<Response, _>(&mut reader).await {
            Ok((id, response)) => {
                if let Some((reply, _)) = lock_pending(&pending).remove(&id) {
                    let _ = reply.send(Ok(response));
                }
            }
            Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return "the peer closed the connection".into(),
            Err(e) => return e.to_string(),
        }
    }
}

/// Accepts incoming connections until the task is aborted.
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, faults: Arc<Faults>) {
    let slots = Arc::new(Semaphore::new(INBOUND_CONNECTIONS_MAX));
    loop {
        let (stream, from) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "cannot accept an internal connection");
                sleep(Duration::from_millis(RECONNECT_BACKOFF_MIN_MS)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%from, "too many internal connections ({INBOUND_CONNECTIONS_MAX}); closing a new one");
            continue;
        };
        let handler = handler.clone();
        let faults = faults.clone();
        tokio::spawn(async move {
            if let Err(reason) = serve_inbound(stream, handler, faults).await {
                tracing::debug!(%from, %reason, "internal connection ended");
            }
            drop(slot);
        });
    }
}

/// One incoming connection: the hello, then requests answered concurrently (bounded).
async fn serve_inbound<H: Handler>(stream: TcpStream, handler: Arc<H>, faults: Arc<Faults>) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    let idle = Duration::from_millis(INBOUND_IDLE_TIMEOUT_MS);
    let (id, first) = timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), read_frame::<Request, _>(&mut reader))
        .await
        .map_err(|_| "no hello in time".to_string())?
        .map_err(|e| e.to_string())?;
    let from = match first {
        Request::Hello(hello) => match handler.check_hello(&hello) {
            Ok(()) => hello.from,
            Err(reason) => {
                tracing::warn!(peer = hello.from, %reason, "refusing an internal connection");
                let frame = encode_frame(id, &Response::Refused(reason.clone())).map_err(|e| e.to_string())?;
                let _ = writer.write_all(&frame).await;
                return Err(reason);
            }
        },
        other => return Err(format!("the first request was {}, not hello", other.kind())),
    };
    let frame = encode_frame(id, &Response::Welcome).map_err(|e| e.to_string())?;
    writer.write_all(&frame).await.map_err(|e| e.to_string())?;

    let (answers, mut to_write) = mpsc::channel::<(RequestId, Response)>(INBOUND_IN_FLIGHT_MAX);
    let write_task = tokio::spawn(async move {
        while let Some((id, response)) = to_write.recv().await {
            let frame = match encode_frame(id, &response) {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot send a response to a peer");
                    continue;
                }
            };
            match timeout(Duration::from_millis(WRITE_TIMEOUT_MS), writer.write_all(&frame)).await {
                Ok(Ok(())) => {}
                _ => return,
            }
        }
    });
    let in_flight = Arc::new(Semaphore::new(INBOUND_IN_FLIGHT_MAX));
    let result = loop {
        let (id, request) = match timeout(idle, read_frame::<Request, _>(&mut reader)).await {
            Err(_) => break Err(format!("silent for {INBOUND_IDLE_TIMEOUT_MS} ms")),
            Ok(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(()),
            Ok(Err(e)) => break Err(e.to_string()),
            Ok(Ok(r)) => r,
        };
        if faults.is_blocked(from) {
            continue;
        }
        if matches!(request, Request::Partition { .. }) {
            // One way: taken here, in the order sent, and not answered.
            let _ = handler.handle(from, request).await;
            continue;
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else { break Ok(()) };
        let answers = answers.clone();
        // Started here, in the order read, when the handler wants it; answered on a task.
        let started = handler.start_in_order(from, request);
        let handler = handler.clone();
        tokio::spawn(async move {
            let response = match started {
                Started::Now(answer) => answer.await.unwrap_or_else(|_| Response::Refused("the request was dropped unanswered".into())),
                Started::Later(request) => handler.handle(from, request).await,
            };
            let _ = answers.send((id, response)).await;
            drop(permit);
        });
        if write_task.is_finished() {
            break Err("cannot write to the peer".into());
        }
    };
    write_task.abort();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::PROTOCOL_VERSION;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn hello(from: NodeId) -> Hello {
        Hello { protocol: PROTOCOL_VERSION, from, nodes: 3, sites_per_node: 2, kfactor: 1, client: None }
    }

    /// Answers pings with the number of pings seen; a ping with incarnation 99 is never answered.
    struct Echo {
        seen: AtomicUsize,
    }

    impl Handler for Echo {
        fn check_hello(&self, hello: &Hello) -> Result<(), String> {
            if hello.nodes == 3 {
                Ok(())
            } else {
                Err(format!("this cluster has 3 nodes, not {}", hello.nodes))
            }
        }

        async fn handle(&self, _from: NodeId, request: Request) -> Response {
            let n = self.seen.fetch_add(1, Ordering::Relaxed) as u64;
            match request {
                Request::Ping { incarnation: 99, .. } => std::future::pending().await,
                _ => Response::Pong { incarnation: n, lease: None },
            }
        }
    }

    async fn listen() -> (TcpListener, SocketAddr) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        (l, a)
    }

    /// An address nothing listens on.
    async fn dead_addr() -> SocketAddr {
        let (l, a) = listen().await;
        drop(l);
        a
    }

    #[tokio::test]
    async fn calls_reach_a_live_peer_while_a_dead_one_fails_fast() {
        let (listener, live) = listen().await;
        let server = tokio::spawn(serve(listener, Arc::new(Echo { seen: AtomicUsize::new(0) }), Arc::default()));
        let dead = dead_addr().await;
        let t = Transport::start(0, &[dead, live, dead], hello(0), Arc::default());
        let limit = Duration::from_secs(5);
        for i in 0..3 {
            let r = t.call(1, Request::Ping { incarnation: 1 }, limit).await.unwrap();
            assert!(matches!(r, Response::Pong { incarnation, .. } if incarnation == i));
            let e = t.call(2, Request::Ping { incarnation: 1 }, limit).await.unwrap_err();
            assert!(matches!(e, CallError::Unreachable { peer: 2, .. }), "{e}");
        }
        assert_eq!(t.call(0, Request::Ping { incarnation: 1 }, limit).await.unwrap_err(), CallError::UnknownPeer(0));
        server.abort();
    }

    /// Starts each call as it is read (noting the order) and answers it a little later.
    #[derive(Default)]
    struct Ordered {
        started: std::sync::Mutex<Vec<Vec<u8>>>,
    }

    impl Handler for Ordered {
        fn check_hello(&self, _hello: &Hello) -> Result<(), String> {
            Ok(())
        }

        async fn handle(&self, _from: NodeId, _request: Request) -> Response {
            Response::Refused("only calls are taken here".into())
        }

        fn start_in_order(&self, _from: NodeId, request: Request) -> Started {
            let Request::Invoke { call, .. } = request else { return Started::Later(request) };
            self.started.lock().unwrap().push(call.clone());
            let (tx, rx) = oneshot::channel();
            tokio::spawn(async move {
                sleep(Duration::from_millis(2)).await;
                let _ = tx.send(Response::Answer(Ok(call)));
            });
            Started::Now(rx)
        }
    }

    /// More calls than a connection has in flight wait in its queue and are all answered,
    /// and the peer starts them in the order they were queued.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_beyond_those_in_flight_wait_and_start_in_order() {
        let (listener, addr) = listen().await;
        let handler = Arc::new(Ordered::default());
        let server = tokio::spawn(serve(listener, handler.clone(), Arc::default()));
        let t = Transport::start(0, &[addr, addr], hello(0), Arc::default());
        let calls: Vec<Vec<u8>> = (0..PEER_IN_FLIGHT_MAX as u32 * 4).map(|i| i.to_be_bytes().to_vec()).collect();
        let mut answers = Vec::new();
        for call in &calls {
            answers.push(t.start_call(1, Request::Invoke { partition: 0, call: call.clone(), step: false }).expect("queued"));
        }
        for (call, answer) in calls.iter().zip(answers) {
            let r = Transport::response(1, answer, Duration::from_secs(20)).await;
            assert!(matches!(&r, Ok(Response::Answer(Ok(c))) if c == call), "{r:?}");
        }
        assert_eq!(*handler.started.lock().unwrap(), calls, "calls started out of turn");
        server.abort();
    }

    /// Never answers a call (keeps where its answer would go); answers anything else at once.
    #[derive(Default)]
    struct Stuck {
        held: std::sync::Mutex<Vec<oneshot::Sender<Response>>>,
    }

    impl Handler for Stuck {
        fn check_hello(&self, _hello: &Hello) -> Result<(), String> {
            Ok(())
        }

        async fn handle(&self, _from: NodeId, _request: Request) -> Response {
            Response::Taken
        }

        fn start_in_order(&self, _from: NodeId, request: Request) -> Started {
            match request {
                Request::Invoke { .. } => {
                    let (tx, rx) = oneshot::channel();
                    self.held.lock().unwrap().push(tx);
                    Started::Now(rx)
                }
                other => Started::Later(other),
            }
        }
    }

    /// Forwarded calls may wait for a membership change that a proposal makes: a proposal
    /// must not wait behind them (the cluster once stalled so).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_proposal_does_not_wait_behind_calls_that_are_not_answered() {
        let (listener, addr) = listen().await;
        let server = tokio::spawn(serve(listener, Arc::new(Stuck::default()), Arc::default()));
        let t = Transport::start(0, &[addr, addr], hello(0), Arc::default());
        let stuck: Vec<Answer> = (0..PEER_IN_FLIGHT_MAX * 2)
            .map(|_| t.start_call(1, Request::Invoke { partition: 0, call: Vec::new(), step: false }).expect("queued"))
            .collect();
        let proposal = Request::Propose(crate::state::Command::NodeDown(2));
        let r = t.call(1, proposal, Duration::from_secs(10)).await;
        assert!(matches!(r, Ok(Response::Taken)), "{r:?}");
        drop(stuck);
        server.abort();
    }

    #[tokio::test]
    async fn an_unanswered_call_times_out_without_blocking_the_next() {
        let (listener, addr) = listen().await;
        let server = tokio::spawn(serve(listener, Arc::new(Echo { seen: AtomicUsize::new(0) }), Arc::default()));
        let t = Arc::new(Transport::start(0, &[addr, addr], hello(0), Arc::default()));
        let stuck = {
            let t = t.clone();
            tokio::spawn(async move { t.call(1, Request::Ping { incarnation: 99 }, Duration::from_millis(300)).await })
        };
        let r = t.call(1, Request::Ping { incarnation: 1 }, Duration::from_secs(5)).await;
        assert!(matches!(r, Ok(Response::Pong { .. })), "{r:?}");
        assert!(matches!(stuck.await.unwrap(), Err(CallError::Timeout { peer: 1, .. })));
        server.abort();
    }

    #[tokio::test]
    async fn a_peer_of_another_layout_is_refused_with_the_reason() {
        let (listener, addr) = listen().await;
        let server = tokio::spawn(serve(listener, Arc::new(Echo { seen: AtomicUsize::new(0) }), Arc::default()));
        let mut other = hello(0);
        other.nodes = 5;
        let t = Transport::start(0, &[addr, addr], other, Arc::default());
        let e = t.call(1, Request::Ping { incarnation: 1 }, Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(&e, CallError::Refused { peer: 1, reason } if reason.contains("not 5")), "{e}");
        server.abort();
    }

    #[tokio::test]
    async fn the_fault_switch_cuts_both_directions_and_heals() {
        let (listener, addr) = listen().await;
        let server_faults = Arc::new(Faults::default());
        let server = tokio::spawn(serve(listener, Arc::new(Echo { seen: AtomicUsize::new(0) }), server_faults.clone()));
        let faults = Arc::new(Faults::default());
        let t = Transport::start(0, &[addr, addr], hello(0), faults.clone());
        let short = Duration::from_millis(300);
        faults.block(1);
        assert_eq!(t.call(1, Request::Ping { incarnation: 1 }, short).await.unwrap_err(), CallError::Blocked(1));
        faults.heal();
        server_faults.block(0);
        assert!(matches!(t.call(1, Request::Ping { incarnation: 1 }, short).await, Err(CallError::Timeout { .. })));
        server_faults.unblock(0);
        assert!(t.call(1, Request::Ping { incarnation: 1 }, Duration::from_secs(5)).await.is_ok());
        server.abort();
    }

    #[tokio::test]
    async fn a_peer_that_comes_up_later_is_reached_after_backoff() {
        let addr = dead_addr().await;
        let t = Transport::start(0, &[addr, addr], hello(0), Arc::default());
        assert!(t.call(1, Request::Ping { incarnation: 1 }, Duration::from_secs(5)).await.is_err());
        let listener = TcpListener::bind(addr).await.unwrap();
        let server = tokio::spawn(serve(listener, Arc::new(Echo { seen: AtomicUsize::new(0) }), Arc::default()));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if t.call(1, Request::Ping { incarnation: 1 }, Duration::from_secs(5)).await.is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "never reconnected");
            sleep(Duration::from_millis(20)).await;
        }
        server.abort();
    }
}
