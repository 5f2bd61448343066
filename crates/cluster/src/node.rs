//! `ClusterNode`: one node's part in the membership group. It listens on the node's
//! internal address, heartbeats every other node, runs the group's Raft (node 0 forms the
//! group), and keeps a `ClusterView` (the committed cluster state and this node's standing)
//! up to date on a watch channel. While this node leads the group, its failure detector
//! proposes `NodeDown` / `NodeUp` from what it hears (`detector.rs`).
//!
//! Above the membership, the node carries what a server needs between nodes: calls
//! forwarded to a partition's leader (`invoke`, answered by the `Service` the server sets),
//! proposals from any node (`propose_via_leader` sends them to the group's leader), and
//! every node's client address (learnt from the hellos).

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{EmptyNode, ServerState};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::{interval, sleep, sleep_until, timeout, Instant, MissedTickBehavior};

use crate::detector::{self, Heard, Lease, Standing, Timing};
use crate::message::{Hello, Request, Response, PROTOCOL_VERSION};
use crate::placement::{NodeId, PartitionId, Placement, PlacementError};
use crate::raft::{raft_config, MembershipRaft, NetworkFactory, RaftNodeId, RAFT_ELECTION_TIMEOUT_MIN_MS};
use crate::record;
use crate::replication;
use crate::state::{ClusterState, Command, Incarnation, Outcome};
use crate::store::{LogStore, StateMachine};
use crate::transport::{self, CallError, Faults, Handler, Started, Transport};

/// Partition messages from peers waiting to be taken; beyond this they are dropped (the
/// replication sends again what was not acknowledged).
pub const PARTITION_INBOX_MAX: usize = 65_536;

/// A replication message from a peer about one of this node's partitions.
#[derive(Debug)]
pub struct PartitionMessage {
    pub from: NodeId,
    pub partition: PartitionId,
    pub message: replication::Message<Vec<u8>>,
}

/// Sends replication messages to peers (from any thread, without waiting).
#[derive(Clone)]
pub struct Poster(Arc<Transport>);

impl Poster {
    /// Sends `message` to `to` one way, in order with the others posted to it. One that
    /// cannot be queued (the peer is unreachable, its queue is full) is dropped: the
    /// replication sends again what was not acknowledged.
    pub fn post(&self, to: NodeId, partition: PartitionId, message: replication::Message<Vec<u8>>) {
        let _ = self.0.post(to, Request::Partition { partition, message });
    }
}

/// How often each node pings every other node, by default: ten times per failure timeout.
pub const HEARTBEAT_INTERVAL_DEFAULT_MS: u64 = 50;
/// The failure timeout must span at least this many heartbeat intervals: the minority
/// timeout (70% of it) then spans seven, so one late heartbeat does not make a node think it
/// is cut off, and the three between a lease's end and the failure timeout cover a cut-off
/// node noticing its lease ended (`Timing::slack_ms`) and the detector's own granularity.
pub const HEARTBEATS_PER_FAILURE_TIMEOUT_MIN: u64 = 10;
/// How long a proposal to the group may take before it is given up.
pub const PROPOSE_TIMEOUT_MS: u64 = 2_000;
/// How long `propose_via_leader` keeps looking for the group's leader (an election takes
/// well under a second) before it gives up with `NotLeader`.
pub const FIND_LEADER_TIMEOUT_MS: u64 = 3_000;
/// The pause between two attempts to find the group's leader.
const FIND_LEADER_RETRY_MS: u64 = 50;
/// A node that starts stands for election only once it has heard a group leader, or this
/// long after it started: a leader may take up to its transport's reconnect backoff
/// (`transport::RECONNECT_BACKOFF_MAX_MS`) and openraft's retry (500 ms) to reach a node
/// that came back, and a node that stood before that (its election timeout is a few hundred
/// milliseconds) would raise the term and depose a healthy group leader.
pub const ELECTIONS_HELD_AFTER_START_MS: u64 = transport::RECONNECT_BACKOFF_MAX_MS + 1_000;
/// A pass of `watch_cluster` this much later than its heartbeat interval means the process
/// was paused (SIGSTOP, a stalled machine): what it last heard is old news, not silence.
pub const PAUSE_NOTICED_MS: u64 = 150;
/// Between two live nodes' turns to stand for election: longer than a vote takes on a
/// loaded machine (see `election_delay_ms`).
pub const ELECTION_STAND_STEP_MS: u64 = 100;

/// The answer to a call `ClusterNode::start_invoke` sent (see `ClusterNode::invoke`).
pub type InvokeAnswer = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Result<Vec<u8>, String>, CallError>> + Send>>;

/// Answers the calls other nodes forward to this one (the server provides it).
pub trait Service: Send + Sync + 'static {
    /// Runs `call` (the server's encoding of a call for `partition`, from node `from`) and
    /// gives its encoded answer to `answer`, once, from any thread.
    fn invoke(&self, from: NodeId, partition: PartitionId, call: Vec<u8>, answer: Box<dyn FnOnce(Vec<u8>) + Send>);
}
/// The file in the data directory that counts this node's starts.
const INCARNATION_FILE: &str = "incarnation";

/// How to start a node.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// This node's index in `hosts`.
    pub node_id: NodeId,
    /// Every node's internal address, by node id (the `--hosts` list).
    pub hosts: Vec<SocketAddr>,
    /// Where to listen, if not on `hosts[node_id]` (say, 0.0.0.0 behind that address).
    pub listen: Option<SocketAddr>,
    pub kfactor: u32,
    pub sites_per_node: u32,
    /// Holds the group's log, vote, snapshot and this node's incarnation counter.
    pub data_dir: PathBuf,
    /// A node silent this long is declared down; a node that hears no majority for half of
    /// it stops serving.
    pub failure_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// Where this node's clients connect, told to the other nodes.
    pub client_address: Option<SocketAddr>,
}

impl ClusterConfig {
    /// A configuration with the default timings.
    pub fn new(node_id: NodeId, hosts: Vec<SocketAddr>, kfactor: u32, sites_per_node: u32, data_dir: PathBuf) -> ClusterConfig {
        ClusterConfig {
            node_id,
            hosts,
            listen: None,
            kfactor,
            sites_per_node,
            data_dir,
            failure_timeout: Duration::from_millis(detector::FAILURE_TIMEOUT_DEFAULT_MS),
            heartbeat_interval: Duration::from_millis(HEARTBEAT_INTERVAL_DEFAULT_MS),
            client_address: None,
        }
    }
}

impl ClusterConfig {
    /// Sets the failure timeout, and pings often enough for it: every tenth of it
    /// (`HEARTBEATS_PER_FAILURE_TIMEOUT_MIN`), never less often than by default.
    pub fn with_failure_timeout(mut self, failure_timeout: Duration) -> ClusterConfig {
        let every = failure_timeout / HEARTBEATS_PER_FAILURE_TIMEOUT_MIN as u32;
        self.failure_timeout = failure_timeout;
        self.heartbeat_interval = every.clamp(Duration::from_millis(1), Duration::from_millis(HEARTBEAT_INTERVAL_DEFAULT_MS));
        self
    }
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the cluster layout is impossible: {0}")]
    Placement(#[from] PlacementError),
    #[error("node id {id} is not in the host list, which has {hosts} nodes (ids 0 to {})", hosts.saturating_sub(1))]
    NodeId { id: NodeId, hosts: usize },
    #[error("the failure timeout ({failure_ms} ms) must be at least {} heartbeat intervals ({heartbeat_ms} ms each): raise the timeout or ping more often", HEARTBEATS_PER_FAILURE_TIMEOUT_MIN)]
    Timing { failure_ms: u64, heartbeat_ms: u64 },
    #[error(
        "the failure timeout ({failure_ms} ms) is below {} ms: a busy machine's stalls would get healthy nodes declared down",
        detector::FAILURE_TIMEOUT_MIN_MS
    )]
    FailureTimeout { failure_ms: u64 },
    #[error("the data directory {path}: {source}")]
    Disk { path: PathBuf, source: io::Error },
    #[error("cannot listen on the internal address {addr}: {source}")]
    Listen { addr: SocketAddr, source: io::Error },
    #[error("the membership group cannot start: {0}")]
    Raft(String),
}

/// Why a proposal was not applied.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
pub enum ProposeError {
    #[error("this node does not lead the membership group; node {leader:?} does")]
    NotLeader { leader: Option<NodeId> },
    #[error("the membership group did not commit the change within {PROPOSE_TIMEOUT_MS} ms (is a majority of nodes reachable?)")]
    Timeout,
    #[error("the membership group has stopped: {0}")]
    Stopped(String),
    /// A proposal sent to the group's leader got no answer: it may or may not be applied.
    #[error("the proposal was sent to node {leader}, which did not answer: it may or may not have been applied ({reason})")]
    Unknown { leader: NodeId, reason: String },
}

/// What this node knows of the cluster, as one consistent snapshot. It is recomputed on
/// every applied change, every heartbeat interval and the moment its lease runs out, so a
/// node stops serving as soon as its lease ends (give or take the time its task takes to
/// be run: `Timing::slack_ms`, a heartbeat interval, covers that).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    pub me: NodeId,
    /// The committed cluster state, as far as this node has applied it.
    pub state: ClusterState,
    pub standing: Standing,
    /// The membership group's leader as far as this node knows.
    pub group_leader: Option<NodeId>,
}

impl ClusterView {
    /// Whether this node may order `partition`'s transactions now: it serves, and the
    /// committed state says it leads the partition.
    pub fn leads(&self, partition: PartitionId) -> bool {
        self.standing == Standing::Serving && self.state.leader(partition) == Some(self.me)
    }
}

/// What a group leader grants in its answers to pings, while it may.
#[derive(Clone, Copy, Debug)]
struct Grant {
    epoch: u64,
    /// When a majority last acknowledged this node as leader, on this node's clock.
    quorum_acked_at_ms: u64,
}

/// What the node's tasks share.
struct Shared {
    me: NodeId,
    incarnation: Incarnation,
    hello: Hello,
    timing: Timing,
    origin: Instant,
    heard: Mutex<Vec<Heard>>,
    /// The latest lease a group leader granted this node.
    lease: Mutex<Option<Lease>>,
    /// While this node leads the group: the epoch its answers to pings grant, and when a
    /// majority last acknowledged it (whether it may grant is decided at each answer).
    granting: Mutex<Option<Grant>>,
    /// Where partition messages from peers go (`ClusterNode::partition_messages`).
    partition_inbox: mpsc::Sender<PartitionMessage>,
    /// By node id: where its clients connect, as its hello said (this node's from its config).
    clients: Mutex<Vec<Option<SocketAddr>>>,
    /// What answers forwarded calls, once the server has set it.
    service: OnceLock<Arc<dyn Service>>,
    /// Whether this node has heard a group leader since it started (it stands for election
    /// only then, or `ELECTIONS_HELD_AFTER_START_MS` after its start).
    heard_group_leader: AtomicBool,
    /// When a group leader last reached this node (append-entries or a snapshot), or this
    /// node last stood for election, granted a vote, saw its vote change or noticed it had
    /// been paused, on its clock: its wait before standing counts from there.
    leader_contact_ms: AtomicU64,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    fn record(&self, from: NodeId, incarnation: Incarnation) {
        let now = self.now_ms();
        // Entries are plain values, never left half-written.
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = heard.get_mut(from as usize) {
            h.record(now, incarnation);
        }
    }

    fn heard(&self) -> Vec<Heard> {
        self.heard.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records a lease granted at `at_ms` for `epoch`.
    fn renew_lease(&self, at_ms: u64, epoch: u64) {
        // Plain values, never left half-written (as with `heard`).
        let mut lease = self.lease.lock().unwrap_or_else(|e| e.into_inner());
        *lease = Some(Lease::renew(*lease, at_ms, epoch, &self.timing));
    }

    fn lease(&self) -> Option<Lease> {
        *self.lease.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A group leader reached this node now.
    fn group_leader_contact(&self) {
        self.heard_group_leader.store(true, Ordering::Release);
        self.leader_contact_ms.fetch_max(self.now_ms(), Ordering::AcqRel);
    }

    fn set_granting(&self, grant: Option<Grant>) {
        *self.granting.lock().unwrap_or_else(|e| e.into_inner()) = grant;
    }

    /// How long ago a majority acknowledged this node as the group's leader; `None` if it
    /// does not lead or has not been acknowledged yet.
    fn quorum_ack_age(&self) -> Option<u64> {
        let grant = *self.granting.lock().unwrap_or_else(|e| e.into_inner());
        grant.map(|g| self.now_ms().saturating_sub(g.quorum_acked_at_ms))
    }

    /// The epoch this node grants a lease for in an answer to a ping now, if it may: decided
    /// at the answer, not at the last pass of `watch_cluster`, so a grant never outlives the
    /// window by up to a heartbeat interval.
    fn granting(&self) -> Option<u64> {
        let grant = *self.granting.lock().unwrap_or_else(|e| e.into_inner());
        let grant = grant?;
        let age = self.now_ms().saturating_sub(grant.quorum_acked_at_ms);
        detector::may_grant(true, Some(age), &self.timing).then_some(grant.epoch)
    }

    fn clients(&self) -> std::sync::MutexGuard<'_, Vec<Option<SocketAddr>>> {
        // Plain values, never left half-written.
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Answers the other nodes' requests.
struct NodeHandler {
    shared: Arc<Shared>,
    raft: MembershipRaft,
}

impl Handler for NodeHandler {
    fn check_hello(&self, hello: &Hello) -> Result<(), String> {
        let mine = &self.shared.hello;
        if hello.protocol != mine.protocol {
            return Err(format!(
                "node {} speaks internal protocol {} and this node {}: run one version of Lockstep across the cluster",
                hello.from, hello.protocol, mine.protocol
            ));
        }
        if (hello.nodes, hello.sites_per_node, hello.kfactor) != (mine.nodes, mine.sites_per_node, mine.kfactor) {
            return Err(format!(
                "node {} was started with {} hosts, {} sites per host and k-factor {}, this node with {}, {} and {}: start every node with the same hosts, sites and k-factor",
                hello.from, hello.nodes, hello.sites_per_node, hello.kfactor, mine.nodes, mine.sites_per_node, mine.kfactor
            ));
        }
        if hello.from >= mine.nodes || hello.from == self.shared.me {
            return Err(format!("a peer says it is node {}, which is this node or not in the host list", hello.from));
        }
        if let (Some(slot), Some(client)) = (self.shared.clients().get_mut(hello.from as usize), hello.client) {
            *slot = Some(client);
        }
        Ok(())
    }

    async fn handle(&self, from: NodeId, request: Request) -> Response {
        match request {
            Request::Hello(_) => Response::Refused("hello was already said on this connection".into()),
            Request::Ping { incarnation } => {
                self.shared.record(from, incarnation);
                Response::Pong { incarnation: self.shared.incarnation, lease: self.shared.granting() }
            }
            Request::Append(rpc) => {
                self.shared.group_leader_contact();
                Response::Append(self.raft.append_entries(rpc).await)
            }
            Request::Vote(rpc) => {
                // openraft's followers refuse votes for its leader lease after hearing their
                // leader, but a leader votes at once; the detector counts on every voter
                // refusing (see `detector.rs`), so the leader refuses here for as long.
                if detector::refuses_vote(true, self.shared.quorum_ack_age(), &self.shared.timing) {
                    return Response::Refused(format!(
                        "node {} leads the membership group and a majority acknowledged it within {} ms: it does not vote",
                        self.shared.me, self.shared.timing.vote_lease_ms
                    ));
                }
                let answer = self.raft.vote(rpc).await;
                if answer.as_ref().is_ok_and(|r| r.vote_granted) {
                    // As openraft's timer did: a node that just voted waits for the
                    // candidate to win before it stands itself.
                    self.shared.leader_contact_ms.fetch_max(self.shared.now_ms(), Ordering::AcqRel);
                }
                Response::Vote(answer)
            }
            Request::Snapshot(rpc) => {
                self.shared.group_leader_contact();
                Response::Snapshot(self.raft.install_snapshot(rpc).await)
            }
            Request::Partition { partition, message } => {
                // A full inbox drops it: the sender's replication sends it again.
                let _ = self.shared.partition_inbox.try_send(PartitionMessage { from, partition, message });
                Response::Taken
            }
            Request::Invoke { .. } => match self.start_in_order(from, request) {
                Started::Now(started) => started.await.unwrap_or_else(|_| Response::Refused("the call was dropped unanswered".into())),
                Started::Later(other) => Response::Refused(format!("{} cannot be started here", other.kind())),
            },
            Request::Propose(command) => Response::Proposed(propose_here(&self.raft, command).await),
        }
    }

    /// A forwarded call is handed to the service as it arrives, so that calls forwarded in
    /// turn run in turn.
    fn start_in_order(&self, from: NodeId, request: Request) -> Started {
        let Request::Invoke { partition, call, .. } = request else { return Started::Later(request) };
        let (tx, rx) = oneshot::channel();
        let Some(service) = self.shared.service.get() else {
            let _ = tx.send(Response::Answer(Err(format!("node {} is still starting: it takes no calls yet", self.shared.me))));
            return Started::Now(rx);
        };
        service.invoke(
            from,
            partition,
            call,
            Box::new(move |answer| {
                let _ = tx.send(Response::Answer(Ok(answer)));
            }),
        );
        Started::Now(rx)
    }
}

/// One node's membership: see the module header.
pub struct ClusterNode {
    shared: Arc<Shared>,
    raft: MembershipRaft,
    transport: Arc<Transport>,
    view: watch::Receiver<ClusterView>,
    tasks: Vec<JoinHandle<()>>,
    local_addr: SocketAddr,
    partition_messages: Mutex<Option<mpsc::Receiver<PartitionMessage>>>,
}

impl ClusterNode {
    /// Starts the node, listening on `config.listen` or its own entry in `config.hosts`.
    pub async fn start(config: ClusterConfig) -> Result<ClusterNode, StartError> {
        let id = config.node_id as usize;
        let addr = config
            .listen
            .or_else(|| config.hosts.get(id).copied())
            .ok_or(StartError::NodeId { id: config.node_id, hosts: config.hosts.len() })?;
        let listener = TcpListener::bind(addr).await.map_err(|source| StartError::Listen { addr, source })?;
        ClusterNode::start_on(config, listener).await
    }

    /// Starts the node on a listener already bound (tests bind port 0 first).
    pub async fn start_on(config: ClusterConfig, listener: TcpListener) -> Result<ClusterNode, StartError> {
        let nodes = config.hosts.len() as u32;
        let me = config.node_id;
        if me >= nodes {
            return Err(StartError::NodeId { id: me, hosts: config.hosts.len() });
        }
        let placement = Placement::new(nodes, config.sites_per_node, config.kfactor)?;
        let heartbeat_ms = config.heartbeat_interval.as_millis() as u64;
        let timing = Timing::new(config.failure_timeout.as_millis() as u64, heartbeat_ms);
        if timing.failure_timeout_ms < detector::FAILURE_TIMEOUT_MIN_MS {
            return Err(StartError::FailureTimeout { failure_ms: timing.failure_timeout_ms });
        }
        if heartbeat_ms == 0 || timing.failure_timeout_ms < HEARTBEATS_PER_FAILURE_TIMEOUT_MIN * heartbeat_ms {
            return Err(StartError::Timing { failure_ms: timing.failure_timeout_ms, heartbeat_ms });
        }
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen { addr: config.hosts[me as usize], source })?;
        let disk = |source| StartError::Disk { path: config.data_dir.clone(), source };
        std::fs::create_dir_all(&config.data_dir).map_err(disk)?;
        let incarnation = next_incarnation(&config.data_dir).map_err(disk)?;
        let log = LogStore::open(&config.data_dir).map_err(disk)?;
        let (sm, applied) = StateMachine::open(&config.data_dir, placement.clone()).map_err(disk)?;

        let hello = Hello {
            protocol: PROTOCOL_VERSION,
            from: me,
            nodes,
            sites_per_node: placement.sites_per_node,
            kfactor: placement.kfactor,
            client: config.client_address,
        };
        let (partition_inbox, partition_messages) = mpsc::channel(PARTITION_INBOX_MAX);
        let shared = Arc::new(Shared {
            me,
            incarnation,
            hello: hello.clone(),
            timing,
            origin: Instant::now(),
            heard: Mutex::new(vec![Heard::default(); nodes as usize]),
            lease: Mutex::new(None),
            granting: Mutex::new(None),
            partition_inbox,
            clients: Mutex::new((0..nodes).map(|n| if n == me { config.client_address } else { None }).collect()),
            service: OnceLock::new(),
            heard_group_leader: AtomicBool::new(false),
            leader_contact_ms: AtomicU64::new(0),
        });
        let faults = Arc::new(Faults::default());
        let transport = Arc::new(Transport::start(me, &config.hosts, hello, faults.clone()));
        let raft_config = raft_config().map_err(StartError::Raft)?;
        let raft = MembershipRaft::new(RaftNodeId::from(me), raft_config, NetworkFactory::new(transport.clone()), log, sm)
            .await
            .map_err(|e| StartError::Raft(e.to_string()))?;
        // `watch_cluster` decides when this node stands for election (`should_stand`).
        raft.runtime_config().elect(false);

        let first_view = ClusterView { me, state: applied.borrow().clone(), standing: Standing::Minority, group_leader: None };
        let (view_tx, view) = watch::channel(first_view);
        let mut tasks = Vec::new();
        let handler = Arc::new(NodeHandler { shared: shared.clone(), raft: raft.clone() });
        tasks.push(tokio::spawn(transport::serve(listener, handler, faults)));
        for peer in (0..nodes).filter(|p| *p != me) {
            tasks.push(tokio::spawn(ping_peer(shared.clone(), transport.clone(), peer, config.heartbeat_interval)));
        }
        if me == 0 {
            tasks.push(tokio::spawn(form_group(shared.clone(), raft.clone(), config.heartbeat_interval)));
        }
        tasks.push(tokio::spawn(watch_cluster(shared.clone(), raft.clone(), applied, view_tx, config.heartbeat_interval)));
        tracing::info!(node = me, incarnation, %local_addr, "cluster node started");
        let partition_messages = Mutex::new(Some(partition_messages));
        Ok(ClusterNode { shared, raft, transport, view, tasks, local_addr, partition_messages })
    }

    pub fn id(&self) -> NodeId {
        self.shared.me
    }

    /// This start's number (1 on a fresh data directory, then one more per start).
    pub fn incarnation(&self) -> Incarnation {
        self.shared.incarnation
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What this node knows of the cluster now.
    pub fn view(&self) -> ClusterView {
        self.view.borrow().clone()
    }

    /// A receiver that sees every change of the view.
    pub fn subscribe(&self) -> watch::Receiver<ClusterView> {
        self.view.clone()
    }

    /// The replication messages peers send this node; there is one receiver, taken once.
    pub fn partition_messages(&self) -> Option<mpsc::Receiver<PartitionMessage>> {
        self.partition_messages.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// What sends replication messages to peers.
    pub fn poster(&self) -> Poster {
        Poster(self.transport.clone())
    }

    /// The switch that cuts this node off from chosen peers (fault injection).
    pub fn faults(&self) -> &Arc<Faults> {
        self.transport.faults()
    }

    /// Proposes a change to the group (only the group's leader can) and waits until it is
    /// committed and applied here. The failure detector proposes `NodeDown` / `NodeUp` by
    /// itself; this is for `SetLeader` (rebalancing) and for tests.
    pub async fn propose(&self, command: Command) -> Result<Outcome, ProposeError> {
        propose_here(&self.raft, command).await
    }

    /// Proposes a change from any node: here if this node leads the group, else sent to the
    /// node that does, looking for it for up to `FIND_LEADER_TIMEOUT_MS` while the group
    /// elects one. Only a proposal that was certainly not appended is tried again, so a
    /// change is never applied twice by this; one whose fate is unknown says so (`Timeout`,
    /// `Unknown`). Returns once the leader applied it (not necessarily this node yet).
    pub async fn propose_via_leader(&self, command: Command) -> Result<Outcome, ProposeError> {
        let deadline = Instant::now() + Duration::from_millis(FIND_LEADER_TIMEOUT_MS);
        let limit = Duration::from_millis(PROPOSE_TIMEOUT_MS + CONNECT_MARGIN_MS);
        loop {
            // Where to send it: the leader this node knows of, or none while the group elects.
            let leader = match propose_here(&self.raft, command.clone()).await {
                Err(ProposeError::NotLeader { leader: Some(l) }) if l != self.shared.me => Some(l),
                Err(ProposeError::NotLeader { .. }) => None,
                other => return other,
            };
            if let Some(leader) = leader {
                match self.transport.call(leader, Request::Propose(command.clone()), limit).await {
                    Ok(Response::Proposed(Err(ProposeError::NotLeader { .. }))) => {}
                    Ok(Response::Proposed(result)) => return result,
                    Ok(other) => return Err(ProposeError::Unknown { leader, reason: format!("it answered {}", response_kind(&other)) }),
                    // Not sent: the peer could not be reached, or this node is cut off from it.
                    Err(CallError::Unreachable { .. } | CallError::Blocked(_) | CallError::QueueFull(_) | CallError::Refused { .. }) => {}
                    Err(e) => return Err(ProposeError::Unknown { leader, reason: e.to_string() }),
                }
            }
            if Instant::now() >= deadline {
                return Err(ProposeError::NotLeader { leader: None });
            }
            sleep(Duration::from_millis(FIND_LEADER_RETRY_MS)).await;
        }
    }

    /// Sends a call to node `to` for its `Service` (see `Service::invoke`): Ok(Ok) carries the
    /// answer, Ok(Err) says the node took no call yet (nothing ran), Err says the call got no
    /// answer (it may or may not have run, unless the error says it was never sent).
    pub async fn invoke(
        &self,
        to: NodeId,
        partition: PartitionId,
        call: Vec<u8>,
        limit: Duration,
    ) -> Result<Result<Vec<u8>, String>, CallError> {
        self.start_invoke(to, partition, call, limit)?.await
    }

    /// `invoke`, with the call queued for node `to` before this returns: calls started in
    /// turn reach the node, and its service, in turn (a client's calls to a partition keep
    /// their order when forwarded). The future waits for the answer.
    pub fn start_invoke(&self, to: NodeId, partition: PartitionId, call: Vec<u8>, limit: Duration) -> Result<InvokeAnswer, CallError> {
        self.send_invoke(to, Request::Invoke { partition, call, step: false }, limit)
    }

    /// `invoke` for a step of a multi-partition transaction (see `Request::Invoke`).
    pub async fn invoke_step(&self, to: NodeId, call: Vec<u8>, limit: Duration) -> Result<Result<Vec<u8>, String>, CallError> {
        self.send_invoke(to, Request::Invoke { partition: 0, call, step: true }, limit)?.await
    }

    fn send_invoke(&self, to: NodeId, request: Request, limit: Duration) -> Result<InvokeAnswer, CallError> {
        let answer = self.transport.start_call(to, request)?;
        Ok(Box::pin(async move {
            match Transport::response(to, answer, limit).await? {
                Response::Answer(answer) => Ok(answer),
                other => Err(CallError::Closed { peer: to, reason: format!("answered a call with {}", response_kind(&other)) }),
            }
        }))
    }

    /// Sets what answers the calls other nodes forward here; the first one set stays.
    pub fn set_service(&self, service: Arc<dyn Service>) {
        let _ = self.shared.service.set(service);
    }

    /// Where each node's clients connect (by node id), as far as this node has heard.
    pub fn client_addresses(&self) -> Vec<Option<SocketAddr>> {
        self.shared.clients().clone()
    }

    /// How many nodes, this one included, this node heard from within the failure timeout.
    pub fn heard_count(&self) -> u32 {
        let now = self.shared.now_ms();
        let window = self.shared.timing.failure_timeout_ms;
        let peers = self
            .shared
            .heard()
            .iter()
            .enumerate()
            .filter(|(n, h)| *n as NodeId != self.shared.me && h.at_ms.is_some_and(|at| now.saturating_sub(at) <= window))
            .count();
        1 + peers as u32
    }

    /// Stops the node's tasks and its Raft.
    pub async fn shutdown(mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(error = %e, "the membership group's Raft did not stop cleanly");
        }
    }
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Time beyond the proposal's own timeout for a proposal sent to another node (connecting
/// and the round trip).
const CONNECT_MARGIN_MS: u64 = 1_000;

/// Proposes `command` to this node's Raft, which takes it only while it leads the group.
async fn propose_here(raft: &MembershipRaft, command: Command) -> Result<Outcome, ProposeError> {
    match timeout(Duration::from_millis(PROPOSE_TIMEOUT_MS), raft.client_write(command)).await {
        Err(_) => Err(ProposeError::Timeout),
        Ok(Ok(r)) => Ok(r.data),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
            Err(ProposeError::NotLeader { leader: f.leader_id.and_then(|l| NodeId::try_from(l).ok()) })
        }
        Ok(Err(e)) => Err(ProposeError::Stopped(e.to_string())),
    }
}

/// A response's name, for errors about an unexpected one.
fn response_kind(r: &Response) -> &'static str {
    match r {
        Response::Welcome => "welcome",
        Response::Refused(_) => "refused",
        Response::Pong { .. } => "pong",
        Response::Append(_) => "append-entries",
        Response::Vote(_) => "vote",
        Response::Snapshot(_) => "install-snapshot",
        Response::Taken => "taken",
        Response::Answer(_) => "answer",
        Response::Proposed(_) => "proposed",
    }
}

/// Reads, increments and durably stores this node's start counter.
fn next_incarnation(dir: &Path) -> io::Result<Incarnation> {
    let path = dir.join(INCARNATION_FILE);
    let previous = match record::read_whole(&path)? {
        None => 0,
        Some(bytes) => {
            let raw: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} does not hold a start counter: the data directory is damaged", path.display()),
                )
            })?;
            u64::from_le_bytes(raw)
        }
    };
    let next = previous + 1;
    record::write_whole(&path, &next.to_le_bytes())?;
    Ok(next)
}

/// Pings one peer every `every`, recording its answers. One task per peer, so a peer that
/// does not answer delays only its own pings.
async fn ping_peer(shared: Arc<Shared>, transport: Arc<Transport>, peer: NodeId, every: Duration) {
    let mut tick = interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let limit = Duration::from_millis(shared.timing.minority_timeout_ms);
    loop {
        tick.tick().await;
        let ping = Request::Ping { incarnation: shared.incarnation };
        // A lease counts from the moment the ping left: however late the answer comes.
        let sent = shared.now_ms();
        if let Ok(Response::Pong { incarnation, lease }) = transport.call(peer, ping, limit).await {
            shared.record(peer, incarnation);
            if let Some(epoch) = lease {
                shared.renew_lease(sent, epoch);
            }
        }
    }
}

/// This node's wait beyond the vote lease before it stands for election: the live nodes
/// (heard within the vote lease) stand in node order, one `ELECTION_STAND_STEP_MS` apart,
/// so the first of them stands the earliest possible and a second one does not raise the
/// term while the first one's votes are on their way (with ids spread over a fixed range,
/// two survivors stood 33 ms apart, and a slow vote let the second depose the first).
fn election_delay_ms(shared: &Shared, now_ms: u64) -> u64 {
    let heard = shared.heard();
    let ahead = heard
        .iter()
        .take(shared.me as usize)
        .filter(|h| h.at_ms.is_some_and(|at| now_ms.saturating_sub(at) <= shared.timing.vote_lease_ms))
        .count();
    RAFT_ELECTION_TIMEOUT_MIN_MS + ELECTION_STAND_STEP_MS * ahead as u64
}

/// Whether this node should stand for election now: it does not lead the group, a leader
/// reached it since it started (or it started long ago), and no leader has reached it for
/// the vote lease plus its election delay (the vote lease first: until then the others
/// refuse to vote anyway). openraft's own election timer is off (`raft.runtime_config()
/// .elect(false)`): it stands as soon as its timer runs out, even when the timer ran out
/// because the whole process was paused, and the term it raises deposes a healthy leader.
fn should_stand(shared: &Shared, leading: bool, now_ms: u64) -> bool {
    let heard = shared.heard_group_leader.load(Ordering::Acquire) || now_ms >= ELECTIONS_HELD_AFTER_START_MS;
    let silent = now_ms.saturating_sub(shared.leader_contact_ms.load(Ordering::Acquire));
    !leading && heard && silent > shared.timing.vote_lease_ms + election_delay_ms(shared, now_ms)
}

/// Node 0 forms the group: once it hears from a majority, it initializes the group with
/// every node as a voter. Only node 0 does, so two nodes never form two groups; if the group
/// already exists (node 0 restarted), openraft refuses and this ends.
async fn form_group(shared: Arc<Shared>, raft: MembershipRaft, every: Duration) {
    let nodes = shared.hello.nodes;
    loop {
        match raft.is_initialized().await {
            Ok(true) | Err(_) => return,
            Ok(false) => {}
        }
        if detector::hears_majority(shared.me, nodes, &shared.heard(), shared.now_ms(), shared.timing.failure_timeout_ms) {
            let members: BTreeMap<RaftNodeId, EmptyNode> = (0..nodes).map(|n| (RaftNodeId::from(n), EmptyNode {})).collect();
            match raft.initialize(members).await {
                Ok(()) | Err(RaftError::APIError(InitializeError::NotAllowed(_))) => return,
                Err(e) => tracing::warn!(error = %e, "cannot form the membership group yet"),
            }
        }
        sleep(every).await;
    }
}

/// Keeps the view up to date (on every applied change, Raft metrics change and heartbeat
/// tick) and, while this node leads the group, proposes what the failure detector decides.
async fn watch_cluster(
    shared: Arc<Shared>,
    raft: MembershipRaft,
    mut applied: watch::Receiver<ClusterState>,
    view: watch::Sender<ClusterView>,
    every: Duration,
) {
    let mut tick = interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut metrics = raft.metrics();
    let proposing = Arc::new(AtomicBool::new(false));
    // When this node last took office as the group's leader (see `detector::decide`).
    let mut leading_since: Option<u64> = None;
    // When a majority last acknowledged this node as leader, on this node's clock: taken
    // when openraft reports it, so a report that grows old is not mistaken for a fresh one.
    let mut quorum_acked_at: Option<u64> = None;
    let mut last_pass = shared.now_ms();
    // The vote openraft last reported: when it changes (a new term, a deposed leader), the
    // wait before this node stands starts again, as openraft's own timer did.
    let mut last_vote = None;
    let every_ms = every.as_millis() as u64;
    loop {
        // Whether openraft reported new metrics since the last pass.
        let mut reported = false;
        // A lease that runs out between two ticks is noticed when it does, not at the tick.
        let lease_end = shared.lease().map(|l| l.at_ms + shared.timing.minority_timeout_ms + 1).filter(|end| *end > shared.now_ms());
        let lease_end_at = shared.origin + Duration::from_millis(lease_end.unwrap_or(0));
        tokio::select! {
            _ = tick.tick() => {}
            _ = sleep_until(lease_end_at), if lease_end.is_some() => {}
            changed = applied.changed() => if changed.is_err() { return },
            changed = metrics.changed() => match changed {
                Ok(()) => reported = true,
                Err(_) => return,
            },
        }
        let state = applied.borrow_and_update().clone();
        let now = shared.now_ms();
        if now.saturating_sub(last_pass) > every_ms + PAUSE_NOTICED_MS {
            // Paused: what this node heard is old news, not the others' silence. Give the
            // group's leader time to reach it before it stands, and, if it leads, its
            // peers time to be heard again before it declares any of them down (on a
            // loaded machine all the nodes stall together, and declared each other down).
            shared.leader_contact_ms.fetch_max(now, Ordering::AcqRel);
            leading_since = leading_since.map(|since| since.max(now));
        }
        last_pass = now;
        reported |= metrics.has_changed().unwrap_or(false);
        let (group_leader, leading, voter) = {
            let m = metrics.borrow_and_update();
            let voter = m.membership_config.membership().voter_ids().any(|v| v == RaftNodeId::from(shared.me));
            if last_vote.as_ref() != Some(&m.vote) {
                last_vote = Some(m.vote);
                shared.leader_contact_ms.fetch_max(now, Ordering::AcqRel);
            }
            let leader = m.current_leader.and_then(|l| NodeId::try_from(l).ok());
            let leading = m.state == ServerState::Leader && leader == Some(shared.me);
            if !leading {
                quorum_acked_at = None;
            } else if reported {
                quorum_acked_at = m.millis_since_quorum_ack.map(|age| now.saturating_sub(age)).or(quorum_acked_at);
            }
            (leader, leading, voter)
        };
        if voter && should_stand(&shared, leading, now) {
            shared.leader_contact_ms.fetch_max(now, Ordering::AcqRel);
            tracing::info!(node = shared.me, "no membership group leader reached this node lately: it stands for election");
            let raft = raft.clone();
            tokio::spawn(async move {
                if let Err(e) = raft.trigger().elect().await {
                    tracing::warn!(error = %e, "cannot stand for election");
                }
            });
        }
        let heard = shared.heard();
        let quorum_ack_age = quorum_acked_at.map(|at| now.saturating_sub(at));
        if let (true, Some(acked_at)) = (detector::may_grant(leading, quorum_ack_age, &shared.timing), quorum_acked_at) {
            // The leader's own lease dates from the majority's last acknowledgement.
            shared.renew_lease(acked_at, state.epoch());
        }
        let grant = quorum_acked_at.filter(|_| leading).map(|at| Grant { epoch: state.epoch(), quorum_acked_at_ms: at });
        shared.set_granting(grant);
        let standing = detector::standing(&state, shared.me, shared.incarnation, &heard, shared.lease(), now, &shared.timing);
        leading_since = if leading { leading_since.or(Some(shared.timing.office_start(now))) } else { None };
        if let (Some(since), false) = (leading_since, proposing.load(Ordering::Acquire)) {
            let commands = detector::decide(&state, shared.me, shared.incarnation, &heard, now, since, &shared.timing);
            if !commands.is_empty() {
                proposing.store(true, Ordering::Release);
                tokio::spawn(propose_all(raft.clone(), commands, proposing.clone()));
            }
        }
        let next = ClusterView { me: shared.me, state, standing, group_leader };
        view.send_if_modified(|v| {
            if v.standing != next.standing {
                let lease_age_ms = shared.lease().map(|l| now.saturating_sub(l.at_ms));
                tracing::info!(node = shared.me, from = ?v.standing, to = ?next.standing, ?lease_age_ms, group_leader = ?next.group_leader, "standing changed");
            }
            let changed = *v != next;
            if changed {
                *v = next;
            }
            changed
        });
    }
}

/// Proposes the detector's commands in order, each waited for, then lets it decide again.
async fn propose_all(raft: MembershipRaft, commands: Vec<Command>, proposing: Arc<AtomicBool>) {
    for command in commands {
        tracing::info!(?command, "proposing a membership change");
        match timeout(Duration::from_millis(PROPOSE_TIMEOUT_MS), raft.client_write(command.clone())).await {
            Ok(Ok(r)) => tracing::info!(?command, outcome = ?r.data, "membership change applied"),
            Ok(Err(e)) => {
                tracing::warn!(?command, error = %e, "membership change not applied");
                break;
            }
            Err(_) => {
                tracing::warn!(?command, "membership change not committed within {PROPOSE_TIMEOUT_MS} ms");
                break;
            }
        }
    }
    proposing.store(false, Ordering::Release);
}
