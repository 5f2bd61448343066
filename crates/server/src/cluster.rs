//! A server as one node of a cluster: the `--internal`, `--hosts` and `--kfactor` settings
//! checked (`ClusterSettings`), and `ClusterGlue`, which joins the engine to the cluster
//! crate. The engine asks it (`ClusterHooks`) whether this node leads a partition, to
//! forward a call to the node that does, to replicate a leader's transaction, to change the
//! schema everywhere and what the cluster looks like; it answers calls other nodes forward
//! here (`Service`), hands the replicas' entries to the engine's sites (`Executor`), and
//! applies every committed schema change in order.
//!
//! Forwarded calls and their answers travel as postcard (`ForwardedCall`, `ForwardAnswer`);
//! an answer's outcome is in the VoltDB response encoding, which carries every status,
//! message and result table exactly as a client would get them.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use lockstep_cluster::node::{InvokeAnswer, Service};
use lockstep_cluster::replicas::{Executor, MemberChange, MemberNotice, Replicas, ReplicateError, TICK_DEFAULT_MS};
use lockstep_cluster::replication::Entry;
use lockstep_cluster::state::SchemaChange;
use lockstep_cluster::transport::{CallError, PEER_FORWARD_QUEUE_MAX};
use lockstep_cluster::{ClusterNode, ClusterView, Command, NodeId, PartitionId, Placement, ProposeError, Standing};
use lockstep_core::{Error, Value};
use lockstep_engine::cluster::{
    ClusterCounters, ClusterHooks, Committed, ErrorData, Host, MpRemote, MpRequest, PartitionPlacement, RemoteAnswer, SpRequest, Topology,
};
use lockstep_engine::outcome::APP_STATUS_UNSET;
use lockstep_engine::site::RejoinPoint;
use lockstep_engine::snapshot::FileEntry;
use lockstep_engine::{Engine, Outcome, Reply};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep, Instant};

use crate::config::ServerConfig;

/// How long a forwarded call keeps looking for its partition's leader (while the cluster
/// fails over: a dead leader is replaced within the failure timeout) before it is answered
/// "unavailable".
pub const FORWARD_FIND_LEADER_MS: u64 = 3_000;
/// The pause between two attempts to reach a partition's leader.
const FORWARD_RETRY_MS: u64 = 20;
/// How long a forwarded call without a timeout of its own may wait for its answer.
pub const FORWARD_CALL_TIMEOUT_DEFAULT_MS: u64 = 30_000;
/// Time beyond a call's own timeout for the answer to come back from the leader.
const FORWARD_MARGIN_MS: u64 = 2_000;
/// The largest encoded answer sent back to the node that forwarded a call; a larger one is
/// replaced by an error (the internal network's frames are bounded).
pub const FORWARD_ANSWER_BYTES_MAX: usize = lockstep_cluster::message::FRAME_MAX_BYTES - 64 * 1024;
/// The largest schema change (its statements' bytes) sent through the cluster: every
/// change stays in the cluster state for good.
pub const SCHEMA_CHANGE_BYTES_MAX: usize = 1024 * 1024;
/// Schema changes of this node waiting to be proposed; one more is refused.
const SCHEMA_PROPOSALS_MAX: usize = 64;
/// The file in the cluster's data directory that counts the schema changes applied here.
const SCHEMA_APPLIED_FILE: &str = "schema-applied";
/// How long the coordinating node waits for a node's answer to one step of a
/// multi-partition transaction (a fragment may run up to the query timeout).
const MP_STEP_TIMEOUT_MS: u64 = 60_000;
/// How often a step waiting for another node looks whether that node was declared down.
const MP_STEP_CHECK_MS: u64 = 50;
/// How often a node looks for partitions it holds a replica of but is not a member of
/// (after a restart), to rejoin them.
const REJOIN_CHECK_MS: u64 = 500;
/// How long a rejoining node waits for its leader to write the partition's image (it is
/// written between transactions, so a busy partition takes longer).
const REJOIN_SNAPSHOT_TIMEOUT_MS: u64 = 600_000;
/// Bytes of a partition's image in one message from its leader to a rejoining node.
const REJOIN_CHUNK_BYTES: usize = 4 * 1024 * 1024;
/// The largest partition image a rejoining node accepts (its size comes from the network;
/// an in-memory partition this large could not be loaded anyway).
const REJOIN_IMAGE_BYTES_MAX: u64 = 1 << 40;
/// How long one chunk of an image may take to arrive.
const REJOIN_CHUNK_TIMEOUT_MS: u64 = 30_000;
/// How long an export acknowledgement may take to reach a replica; one lost is sent again.
const EXPORT_ACKED_TIMEOUT_MS: u64 = 2_000;
/// Where a leader writes the images of its partitions for rejoining nodes, and where a
/// rejoining node keeps the images it receives, inside the cluster directory.
const REJOIN_OUT_DIR: &str = "rejoin-out";
const REJOIN_IN_DIR: &str = "rejoin-in";

/// Where a cluster node keeps its membership data, inside the server's data directory.
pub fn cluster_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cluster")
}

/// A node's place in a cluster, checked.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterSettings {
    pub node_id: NodeId,
    /// Every node's internal address, by node id.
    pub hosts: Vec<SocketAddr>,
    pub kfactor: u32,
    pub sites_per_node: u32,
    pub placement: Placement,
    /// Where to listen for the other nodes, if not on this node's address in `hosts`.
    pub listen: Option<SocketAddr>,
}

impl ClusterSettings {
    /// The cluster this server is a node of, or None for a single node (no `hosts`).
    /// `sites_per_node` is `--sites` (or its default).
    pub fn from_config(c: &ServerConfig, sites_per_node: u32) -> Result<Option<ClusterSettings>, String> {
        if c.hosts.is_empty() {
            if c.internal_listen.is_some() {
                return Err("--internal-listen needs a cluster: give --hosts and --internal too".into());
            }
            if c.internal.is_some() {
                return Err("--internal needs --hosts: list every node's internal address, this node's among them".into());
            }
            if c.kfactor.is_some_and(|k| k > 0) {
                return Err("--kfactor needs a cluster: give --hosts (every node's internal address) and --internal".into());
            }
            return Ok(None);
        }
        let Some(internal) = &c.internal else {
            return Err("--hosts needs --internal: this node's own internal address, as it appears in --hosts".into());
        };
        let hosts = c.hosts.iter().map(|h| resolve(h, "--hosts")).collect::<Result<Vec<_>, _>>()?;
        for (i, h) in hosts.iter().enumerate() {
            if let Some(j) = hosts[..i].iter().position(|o| o == h) {
                return Err(format!(
                    "--hosts names {h} twice (entries {} and {}): every node needs its own internal address",
                    j + 1,
                    i + 1
                ));
            }
        }
        let me = resolve(internal, "--internal")?;
        let Some(node_id) = hosts.iter().position(|h| *h == me) else {
            return Err(format!(
                "--internal {internal} is not in --hosts ({}): this node's address must be one of them",
                c.hosts.join(",")
            ));
        };
        let kfactor = c.kfactor.unwrap_or(0);
        let nodes = hosts.len() as u32;
        if kfactor >= nodes {
            return Err(format!(
                "--kfactor {kfactor} needs at least {} nodes (each partition has k + 1 copies on different nodes), and --hosts lists {nodes}",
                kfactor + 1
            ));
        }
        let placement = Placement::new(nodes, sites_per_node, kfactor).map_err(|e| format!("the cluster layout is impossible: {e}"))?;
        let listen = c.internal_listen.as_deref().map(|l| resolve(l, "--internal-listen")).transpose()?;
        Ok(Some(ClusterSettings { node_id: node_id as NodeId, hosts, kfactor, sites_per_node, placement, listen }))
    }

    /// The cluster's partitions: every node runs a site for each (`--sites` is per node).
    pub fn partitions(&self) -> u32 {
        self.placement.partition_count()
    }

    /// What every node tells clients at login as the cluster's instance (VoltDB's start
    /// time and leader address): clients refuse to mix connections to different instances,
    /// so all nodes must give the same, made from what they all share: the host list, k and
    /// sites. Node 0's IPv4 address stands for the leader (127.0.0.1 if it has none).
    pub fn instance_id(&self) -> (i64, u32) {
        // FNV-1a over the layout: the same on every node and across restarts.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let layout = format!("{:?}/{}/{}", self.hosts, self.kfactor, self.sites_per_node);
        for b in layout.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let leader = match self.hosts.first().map(SocketAddr::ip) {
            Some(std::net::IpAddr::V4(v4)) => u32::from(v4),
            _ => u32::from(std::net::Ipv4Addr::LOCALHOST),
        };
        // Positive and below 2^41 ms, like a start time.
        ((h & ((1 << 41) - 1)) as i64, leader)
    }
}

/// A HOST:PORT as a socket address (the first a host name resolves to).
fn resolve(text: &str, flag: &str) -> Result<SocketAddr, String> {
    let mut addrs = text.to_socket_addrs().map_err(|e| format!("{flag}: {text} is not a HOST:PORT address: {e}"))?;
    addrs.next().ok_or_else(|| format!("{flag}: {text} resolves to no address"))
}

/// A single-partition call on its way to the partition's leader.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ForwardedCall {
    request: SpRequest,
    params: Vec<Value>,
    timeout_ms: Option<u64>,
}

/// What one node asks another to run.
#[derive(Debug, Serialize, Deserialize)]
enum Forwarded {
    /// A single-partition call, for the partition's leader.
    Sp(ForwardedCall),
    /// A multi-partition call, for the node that coordinates them.
    Mp { request: MpRequest, timeout_ms: Option<u64> },
    /// A step of a multi-partition transaction, from the coordinating node.
    MpStep(MpRemote),
    /// From a node rejoining the partition, in `incarnation`, to its leader: make me a
    /// learner and write the partition's image for me.
    RejoinBegin { joiner: NodeId, incarnation: u64 },
    /// From a rejoining node: the bytes of the image written for it, from `offset`.
    RejoinChunk { joiner: NodeId, offset: u64 },
    /// From the partition's leader: export target `target` acknowledged the partition's
    /// rows through `seq` (answered `Noted`).
    ExportAcked { target: String, seq: u64 },
}

/// The answer to a forwarded call.
#[derive(Debug, Serialize, Deserialize)]
enum ForwardAnswer {
    /// The call ran (or failed) there: the outcome in the VoltDB response encoding.
    Done(Vec<u8>),
    /// The node does not lead the partition (any more): nothing ran, try the new leader.
    NotLeader,
    /// What a node serving a multi-partition transaction answered one step.
    Step(RemoteAnswer),
    /// The image for a rejoining node is written: it holds the partition up to entry `seq`
    /// of `term`.
    RejoinReady { seq: u64, term: u64, file: FileEntry },
    /// Bytes of that image (none past its end).
    Chunk(Vec<u8>),
    /// A rejoin step refused, and why.
    Refused(String),
    /// A report taken (`Forwarded::ExportAcked`).
    Noted,
}

/// The outcome as a VoltDB response payload (no length prefix).
fn encode_outcome(o: Outcome) -> Vec<u8> {
    let r = lockstep_wire::Response {
        handle: 0,
        status: o.status,
        status_string: o.status_string,
        app_status: o.app_status,
        app_status_string: o.app_status_string,
        cluster_round_trip_ms: 0,
        tables: o.tables,
    };
    let mut out = Vec::new();
    lockstep_wire::encode_response(&r, &mut out);
    out.split_off(LENGTH_PREFIX_BYTES.min(out.len()))
}

/// Bytes of the length before a VoltDB frame's payload.
const LENGTH_PREFIX_BYTES: usize = 4;

fn decode_outcome(payload: &[u8]) -> Outcome {
    match lockstep_wire::decode_response(payload) {
        Ok(r) => Outcome {
            status: r.status,
            status_string: r.status_string,
            app_status: r.app_status,
            app_status_string: r.app_status_string,
            tables: r.tables,
        },
        Err(e) => Outcome::error(Error::unexpected(format!("the answer of the partition's leader cannot be read: {e}"))),
    }
}

fn encode_answer(answer: &ForwardAnswer) -> Vec<u8> {
    // An enum of bytes always encodes; an empty answer would be reported as unreadable.
    postcard::to_stdvec(answer).unwrap_or_default()
}

/// A call whose fate cannot be known: it may or may not have run (VoltDB's RESPONSE_UNKNOWN).
fn unknown(message: String) -> Outcome {
    Outcome {
        status: lockstep_wire::status::RESPONSE_UNKNOWN,
        status_string: Some(message),
        app_status: APP_STATUS_UNSET,
        app_status_string: None,
        tables: Vec::new(),
    }
}

/// How long a forwarded call's answer is waited for: its own timeout and a margin, or the
/// default.
fn forward_limit(timeout_ms: Option<u64>) -> Duration {
    Duration::from_millis(timeout_ms.map_or(FORWARD_CALL_TIMEOUT_DEFAULT_MS, |t| t + FORWARD_MARGIN_MS))
}

/// Whether a failed call certainly never reached the peer (so it can be sent again).
fn not_sent(e: &CallError) -> bool {
    matches!(e, CallError::Unreachable { .. } | CallError::Blocked(_) | CallError::QueueFull(_) | CallError::Refused { .. })
}

/// Joins one node's engine to the cluster; see the module header.
pub struct ClusterGlue {
    me: NodeId,
    node: ClusterNode,
    views: watch::Receiver<ClusterView>,
    replicas: Replicas,
    engine: Weak<Engine>,
    runtime: tokio::runtime::Handle,
    /// This node's schema changes not applied here yet, by id: their callers' replies.
    pending_schema: Mutex<HashMap<u64, Reply>>,
    next_schema_id: AtomicU64,
    /// This node's schema changes to propose, one at a time in the order they came: a
    /// client's DDL is applied in the order it sent it.
    schema_proposals: mpsc::Sender<SchemaChange>,
    /// Itself, for the tasks it starts.
    this: Weak<ClusterGlue>,
    /// The cluster's instance as logins report it (`ClusterSettings::instance_id`).
    instance: (i64, u32),
    /// The cluster directory (membership data, rejoin images).
    dir: PathBuf,
    /// Nodes rejoining partitions this node leads: (partition, node) → the incarnation
    /// that asked, named when the node is made a member.
    learners: Mutex<HashMap<(PartitionId, NodeId), u64>>,
    /// Calls sent on to other nodes, and run for them (`@Statistics CLUSTER`).
    forwarded: AtomicU64,
    forwarded_mp: AtomicU64,
    run_for_others: AtomicU64,
}

impl ClusterGlue {
    /// Joins `engine` (started with one site per partition of the cluster) to the running
    /// `node`: starts the replication of the partitions this node holds, answers the calls
    /// other nodes forward, applies schema changes, and sets itself as the engine's hooks.
    /// Call it on the runtime the node runs on.
    pub fn start(node: ClusterNode, engine: &Arc<Engine>, data_dir: &Path, instance: (i64, u32)) -> Result<Arc<ClusterGlue>, String> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| format!("the cluster needs a network runtime: {e}"))?;
        let executor = Arc::new(SiteExecutor { engine: Arc::downgrade(engine) });
        let replicas = Replicas::start(&node, executor, Duration::from_millis(TICK_DEFAULT_MS))
            .ok_or("the cluster node's replication was already started")?;
        let me = node.id();
        let views = node.subscribe();
        // The ids of this start's schema changes are above every earlier start's.
        let first_id = node.incarnation() << 32;
        let (schema_proposals, proposals) = mpsc::channel(SCHEMA_PROPOSALS_MAX);
        let glue = Arc::new_cyclic(|this| ClusterGlue {
            me,
            node,
            views,
            replicas,
            engine: Arc::downgrade(engine),
            runtime,
            pending_schema: Mutex::new(HashMap::new()),
            next_schema_id: AtomicU64::new(first_id),
            schema_proposals,
            this: this.clone(),
            instance,
            dir: cluster_dir(data_dir),
            learners: Mutex::new(HashMap::new()),
            forwarded: AtomicU64::new(0),
            forwarded_mp: AtomicU64::new(0),
            run_for_others: AtomicU64::new(0),
        });
        glue.node.set_service(Arc::new(ServiceLink(Arc::downgrade(&glue))));
        let applied_file = cluster_dir(data_dir).join(SCHEMA_APPLIED_FILE);
        // An engine that recovered no schema (a node whose data went with its last process)
        // applies every change again, whatever an earlier process counted.
        let applied = if engine.catalog().version == 0 { 0 } else { read_count(&applied_file)? };
        if let Some(notices) = glue.replicas.member_changes() {
            glue.runtime.spawn(change_members(Arc::downgrade(&glue), notices));
        }
        glue.runtime.spawn(rejoin_partitions(Arc::downgrade(&glue)));
        glue.runtime.spawn(propose_schema_changes(Arc::downgrade(&glue), proposals));
        glue.runtime.spawn(apply_schema_changes(Arc::downgrade(&glue), glue.node.subscribe(), applied_file, applied));
        engine.set_cluster(glue.clone());
        Ok(glue)
    }

    /// The cluster's instance (start time, leader address) that logins report.
    pub fn instance_id(&self) -> (i64, u32) {
        self.instance
    }

    pub fn node(&self) -> &ClusterNode {
        &self.node
    }

    pub fn view(&self) -> ClusterView {
        self.views.borrow().clone()
    }

    /// Why this node takes no calls now (it is not serving: cut off from the majority, or
    /// not admitted yet), or None while it serves.
    pub fn refusal(&self) -> Option<String> {
        // Every client call asks: the common answer costs one read of the view.
        let (standing, all) = {
            let view = self.views.borrow();
            (view.standing, view.state.node_count())
        };
        match standing {
            Standing::Serving => None,
            Standing::Minority => Some(format!(
                "node {} is cut off from the majority of the cluster (it hears {} of {all} nodes): it takes no calls until it is back with the majority; call a node of the majority",
                self.me,
                self.node.heard_count()
            )),
            Standing::Joining => Some(format!(
                "node {} is not admitted to the cluster now (it is joining, or lost touch with the cluster's leader): it takes no calls until it is; try again shortly or call another node",
                self.me
            )),
        }
    }

    fn schema_reply(&self, id: u64) -> Option<Reply> {
        // Whole entries are inserted and removed.
        self.pending_schema.lock().unwrap_or_else(|e| e.into_inner()).remove(&id)
    }

    /// Sends a call (`payload`; sent to a leader already if `sent`) to its partition's
    /// leader and answers `reply` with what it says, looking for a leader while it moves
    /// (`FORWARD_FIND_LEADER_MS`).
    async fn forward_call(
        self: Arc<Self>,
        partition: PartitionId,
        call: ForwardedCall,
        payload: Vec<u8>,
        mut sent: Option<(NodeId, InvokeAnswer)>,
        reply: Reply,
    ) {
        let give_up = Instant::now() + Duration::from_millis(FORWARD_FIND_LEADER_MS);
        let limit = forward_limit(call.timeout_ms);
        loop {
            // (A call sent already may run: it is answered by what its leader says.)
            if let Some(why) = self.refusal().filter(|_| sent.is_none()) {
                return reply(Outcome::error(Error::unavailable(why)));
            }
            // A call sent already is waited for where it went: sent again elsewhere, it
            // could run twice.
            let leader = match &sent {
                Some((to, _)) => Some(*to),
                None => self.views.borrow().state.leader(partition),
            };
            let waiting_for = match leader {
                None => {
                    return reply(Outcome::error(Error::unavailable(format!(
                        "partition {partition} has no live replica: the cluster cannot serve it until one of its nodes is back"
                    ))))
                }
                Some(l) if l == self.me => {
                    if self.leads(partition) {
                        let Some(engine) = self.engine.upgrade() else {
                            return reply(Outcome::error(Error::unavailable("the server is stopping")));
                        };
                        let timeout = call.timeout_ms.map(Duration::from_millis);
                        return engine.run_forwarded(partition, call.request, call.params, timeout, reply);
                    }
                    format!("this node is taking partition {partition} over")
                }
                Some(l) => match self.invoke_while_leading(l, partition, sent.take().map(|(_, a)| a), &payload, limit).await {
                    Ok(Ok(bytes)) => match postcard::from_bytes::<ForwardAnswer>(&bytes) {
                        Ok(ForwardAnswer::Done(outcome)) => return reply(decode_outcome(&outcome)),
                        Ok(ForwardAnswer::NotLeader) => format!("node {l} no longer leads partition {partition}"),
                        Ok(_) => return reply(unknown(format!("node {l} answered a call with another kind of answer"))),
                        Err(e) => return reply(unknown(format!("node {l} answered a call for partition {partition} unreadably: {e}"))),
                    },
                    Ok(Err(why)) => why,
                    Err(e) if not_sent(&e) => e.to_string(),
                    Err(e) => {
                        return reply(unknown(format!(
                            "the call was sent to node {l}, which leads partition {partition}, and got no answer ({e}): it may or may not have run"
                        )))
                    }
                },
            };
            if Instant::now() >= give_up {
                return reply(Outcome::error(Error::unavailable(format!(
                    "partition {partition}'s leader could not be reached within {FORWARD_FIND_LEADER_MS} ms ({waiting_for}); try again"
                ))));
            }
            sleep(Duration::from_millis(FORWARD_RETRY_MS)).await;
        }
    }

    /// `ClusterNode::invoke`, given up (as unanswered: it may have run) once `leader` no
    /// longer leads `partition` in this node's view (declared down, say) or this node is
    /// cut off: a paused or cut-off leader never answers, and its call must not wait for
    /// the whole call timeout while the partition's new leader serves. The call is `sent`
    /// already, or sent now.
    async fn invoke_while_leading(
        &self,
        leader: NodeId,
        partition: PartitionId,
        sent: Option<InvokeAnswer>,
        payload: &[u8],
        limit: Duration,
    ) -> Result<Result<Vec<u8>, String>, CallError> {
        let answer = match sent {
            Some(answer) => answer,
            None => self.node.start_invoke(leader, partition, payload.to_vec(), limit)?,
        };
        let gone = self.until_view(Duration::from_millis(FORWARD_RETRY_MS), |view| leader_lost(view, partition, leader));
        tokio::select! {
            r = answer => r,
            () = gone => Err(CallError::Closed {
                peer: leader,
                reason: format!("node {leader} no longer leads partition {partition} here (declared down, or this node cut off) while the call waited for its answer"),
            }),
        }
    }

    /// Returns once this node's view of the cluster satisfies `gone` (looked at every
    /// `every`): how a wait for another node's answer ends when that node is lost.
    async fn until_view(&self, every: Duration, gone: impl Fn(&ClusterView) -> bool) {
        loop {
            sleep(every).await;
            if gone(&self.views.borrow()) {
                return;
            }
        }
    }

    /// Answers `reply` with what the node that coordinates multi-partition calls says to
    /// the call `sent` to it. The wait ends once that node is declared down or this one is
    /// cut off (the call is then of unknown outcome), not after the whole forwarding limit:
    /// the cluster has a new coordinator within a second.
    async fn forward_mp_call(self: Arc<Self>, to: NodeId, sent: Result<InvokeAnswer, CallError>, reply: Reply) {
        let gone =
            self.until_view(Duration::from_millis(MP_STEP_CHECK_MS), |view| !view.state.is_alive(to) || view.standing != Standing::Serving);
        let answer = match sent {
            Ok(answer) => tokio::select! {
                r = answer => r,
                () = gone => Err(CallError::Closed {
                    peer: to,
                    reason: format!("node {to} was declared down, or this node cut off, while the call waited for its answer"),
                }),
            },
            Err(e) => Err(e),
        };
        let outcome = match answer {
            Ok(Ok(bytes)) => match postcard::from_bytes::<ForwardAnswer>(&bytes) {
                Ok(ForwardAnswer::Done(outcome)) => decode_outcome(&outcome),
                Ok(_) | Err(_) => unknown(format!("node {to} answered a multi-partition call unreadably")),
            },
            Ok(Err(why)) => Outcome::error(Error::unavailable(why)),
            Err(e) if not_sent(&e) => {
                Outcome::error(Error::unavailable(format!("the node that coordinates multi-partition calls cannot be reached ({e}); try again")))
            }
            Err(e) => unknown(format!("the call was sent to node {to}, which coordinates multi-partition calls, and got no answer ({e}): it may or may not have run")),
        };
        reply(outcome)
    }

    /// Proposes a schema change; its reply waits in `pending_schema` for this node's
    /// watcher, unless the proposal fails.
    async fn propose_schema(&self, change: SchemaChange) {
        let id = change.id;
        let failed = match self.node.propose_via_leader(Command::Schema(change)).await {
            Ok(lockstep_cluster::Outcome::Changed { .. }) => return,
            Ok(other) => Outcome::error(Error::unexpected(format!("the cluster did not take the schema change: {other:?}"))),
            Err(e @ (ProposeError::Timeout | ProposeError::Unknown { .. })) => {
                unknown(format!("the schema change may or may not be applied: {e}"))
            }
            Err(e) => Outcome::error(Error::unavailable(format!("the schema change was not applied: {e}"))),
        };
        if let Some(reply) = self.schema_reply(id) {
            reply(failed);
        }
    }
}

impl ClusterHooks for ClusterGlue {
    fn leads(&self, partition: u32) -> bool {
        self.views.borrow().leads(partition) && self.replicas.accepts(partition)
    }

    fn forward(&self, partition: u32, request: SpRequest, params: Vec<Value>, timeout: Option<Duration>, reply: Reply) {
        let Some(this) = self.this.upgrade() else {
            return reply(Outcome::error(Error::unavailable("the server is stopping")));
        };
        let call = ForwardedCall { request, params, timeout_ms: timeout.map(|t| t.as_millis() as u64) };
        self.forwarded.fetch_add(1, Ordering::Relaxed);
        let payload = match postcard::to_stdvec(&Forwarded::Sp(call.clone())) {
            Ok(p) => p,
            Err(e) => return reply(Outcome::error(Error::graceful(format!("the call cannot be sent to its partition's leader: {e}")))),
        };
        // Sent here, in the order calls arrive, not from the task (tasks run in any order):
        // a client's calls to one partition then run in the order it sent them.
        let leader = self.views.borrow().state.leader(partition).filter(|l| *l != self.me);
        let sent = match leader {
            Some(l) if self.refusal().is_none() => match self.node.start_invoke(l, partition, payload.clone(), forward_limit(call.timeout_ms)) {
                Ok(answer) => Some((l, answer)),
                // Not retried later, behind calls sent after it: refused, as an overloaded
                // site refuses.
                Err(CallError::QueueFull(_)) => {
                    return reply(Outcome::error(Error::unavailable(format!(
                        "node {} has {PEER_FORWARD_QUEUE_MAX} calls waiting for node {l}, which leads partition {partition}: the call was not run; send fewer at once, or send them to node {l}",
                        self.me
                    ))))
                }
                // The task tries again, as when the leader moves.
                Err(_) => None,
            },
            _ => None,
        };
        self.runtime.spawn(this.forward_call(partition, call, payload, sent, reply));
    }

    fn replicate(&self, partition: u32, record: Vec<u8>, hash: u64, committed: Committed) -> Result<(), String> {
        let done = Box::new(move |result: Result<(), ReplicateError>| committed(result.map_err(|e| e.to_string())));
        self.replicas.append(partition, record, hash, done).map_err(|e| e.to_string())
    }

    fn after_appended(&self, partition: u32, done: Committed) {
        self.replicas
            .after_appended(partition, Box::new(move |result: Result<(), ReplicateError>| done(result.map_err(|e| e.to_string()))));
    }

    fn applied(&self, partition: u32, seq: u64, hash: u64) {
        self.replicas.applied(partition, seq, hash);
    }

    fn add_learner(&self, partition: u32, joiner: u32) -> Result<(u64, u64), String> {
        self.replicas.add_learner(partition, joiner).map_err(|e| e.to_string())
    }

    fn learn(&self, partition: u32, term: u64, seq: u64) -> Result<(), String> {
        self.replicas.learn(partition, term, seq)
    }

    fn change_schema(&self, statements: Vec<String>, reply: Reply) {
        let bytes: usize = statements.iter().map(String::len).sum();
        if bytes > SCHEMA_CHANGE_BYTES_MAX {
            return reply(Outcome::error(Error::graceful(format!(
                "a schema change of {bytes} bytes is over the cluster's limit of {SCHEMA_CHANGE_BYTES_MAX} bytes: send the DDL in smaller calls"
            ))));
        }
        let id = self.next_schema_id.fetch_add(1, Ordering::Relaxed);
        self.pending_schema.lock().unwrap_or_else(|e| e.into_inner()).insert(id, reply);
        let change = SchemaChange { statements, origin: self.me, id };
        if let Err(e) = self.schema_proposals.try_send(change) {
            let why = match e {
                mpsc::error::TrySendError::Full(_) => {
                    format!(
                        "{SCHEMA_PROPOSALS_MAX} schema changes wait to be proposed on node {}: the change was not applied; try again",
                        self.me
                    )
                }
                mpsc::error::TrySendError::Closed(_) => "the server is stopping".to_string(),
            };
            if let Some(reply) = self.schema_reply(id) {
                reply(Outcome::error(Error::unavailable(why)));
            }
        }
    }

    /// The lowest live node that leads a partition: every node that applied the same
    /// cluster state names the same one. A node back after being declared down leads
    /// nothing (it is not a member of its partitions until it rejoins), so coordination
    /// does not move back to it while its view may still lag.
    fn mp_coordinator(&self) -> Option<u32> {
        let view = self.views.borrow();
        let state = &view.state;
        state.live_nodes().into_iter().find(|n| !state.led_by(*n).is_empty())
    }

    fn forward_mp(&self, to: u32, request: MpRequest, timeout: Option<Duration>, reply: Reply) {
        let Some(this) = self.this.upgrade() else {
            return reply(Outcome::error(Error::unavailable("the server is stopping")));
        };
        self.forwarded_mp.fetch_add(1, Ordering::Relaxed);
        let timeout_ms = timeout.map(|t| t.as_millis() as u64);
        let payload = match postcard::to_stdvec(&Forwarded::Mp { request, timeout_ms }) {
            Ok(p) => p,
            Err(e) => return reply(Outcome::error(Error::graceful(format!("the call cannot be sent to the coordinating node: {e}")))),
        };
        // Sent here, in the order calls arrive (see `forward`).
        let sent = self.node.start_invoke(to, 0, payload, forward_limit(timeout_ms));
        self.runtime.spawn(this.forward_mp_call(to, sent, reply));
    }

    /// Called on the coordinator's thread, which is not one of the runtime's: it waits.
    fn mp_remote(&self, node: u32, message: MpRemote) -> RemoteAnswer {
        let failed = |message: String| Err(ErrorData { status: lockstep_wire::status::SERVER_UNAVAILABLE, message });
        let payload = match postcard::to_stdvec(&Forwarded::MpStep(message)) {
            Ok(p) => p,
            Err(e) => return failed(format!("a transaction step cannot be encoded: {e}")),
        };
        let limit = Duration::from_millis(MP_STEP_TIMEOUT_MS);
        // The step is given up as soon as its node is declared down or this node is cut off
        // from the majority: the coordinator's partitions stay parked while it waits.
        let gone = self
            .until_view(Duration::from_millis(MP_STEP_CHECK_MS), |view| !view.state.is_alive(node) || view.standing != Standing::Serving);
        let answered = self.runtime.block_on(async {
            tokio::select! {
                r = self.node.invoke_step(node, payload, limit) => Some(r),
                () = gone => None,
            }
        });
        match answered {
            None => failed(format!(
                "node {node} was declared down, or this node cut off from the majority, while a transaction step waited for it"
            )),
            Some(Ok(Ok(bytes))) => match postcard::from_bytes::<ForwardAnswer>(&bytes) {
                Ok(ForwardAnswer::Step(answer)) => answer,
                _ => failed(format!("node {node} answered a transaction step unreadably")),
            },
            Some(Ok(Err(why))) => failed(why),
            Some(Err(e)) => failed(format!("node {node} did not answer a transaction step: {e}")),
        }
    }

    fn topology(&self) -> Topology {
        let clients = self.node.client_addresses();
        let view = self.views.borrow();
        let state = &view.state;
        let hosts = (0..state.node_count())
            .map(|n| Host { id: n, client_address: clients.get(n as usize).copied().flatten(), alive: state.is_alive(n) })
            .collect();
        let partitions = (0..state.placement().partition_count())
            .map(|p| PartitionPlacement { leader: state.leader(p), replicas: state.members(p).to_vec() })
            .collect();
        Topology { me: self.me, hosts, partitions }
    }

    fn serving(&self) -> bool {
        self.refusal().is_none()
    }

    fn replication_marks(&self, partition: u32) -> Option<(u64, u64)> {
        self.replicas.marks(partition)
    }

    /// Sent to every other live node placed to hold the partition (a rejoining one too).
    fn export_acked(&self, partition: u32, target: &str, seq: u64) {
        let others: Vec<NodeId> = {
            let view = self.views.borrow();
            let (state, me) = (&view.state, self.me);
            let placed = state.placement().partitions.get(partition as usize).map(|r| r.nodes.clone()).unwrap_or_default();
            placed.into_iter().filter(|n| *n != me && state.is_alive(*n)).collect()
        };
        let Ok(call) = postcard::to_stdvec(&Forwarded::ExportAcked { target: target.to_string(), seq }) else { return };
        let Some(this) = self.this.upgrade() else { return };
        self.runtime.spawn(async move {
            let limit = Duration::from_millis(EXPORT_ACKED_TIMEOUT_MS);
            for node in others {
                // Lost: the next report (or a failover's resend) covers it.
                let _ = this.node.invoke(node, partition, call.clone(), limit).await;
            }
        });
    }

    fn counters(&self) -> ClusterCounters {
        ClusterCounters {
            forwarded: self.forwarded.load(Ordering::Relaxed),
            forwarded_mp: self.forwarded_mp.load(Ordering::Relaxed),
            run_for_others: self.run_for_others.load(Ordering::Relaxed),
        }
    }
}

/// Answers calls forwarded from other nodes (without keeping the glue alive).
struct ServiceLink(Weak<ClusterGlue>);

impl Service for ServiceLink {
    fn invoke(&self, from: NodeId, partition: PartitionId, call: Vec<u8>, answer: Box<dyn FnOnce(Vec<u8>) + Send>) {
        let done = |o: Outcome| encode_answer(&ForwardAnswer::Done(encode_outcome(o)));
        let Some((glue, engine)) = self.0.upgrade().and_then(|g| g.engine.upgrade().map(|e| (g, e))) else {
            return answer(done(Outcome::error(Error::unavailable("the server is stopping"))));
        };
        let call = match postcard::from_bytes(&call) {
            Ok(Forwarded::Sp(c)) => c,
            Ok(Forwarded::Mp { request, timeout_ms }) => {
                glue.run_for_others.fetch_add(1, Ordering::Relaxed);
                let reply: Reply = Box::new(move |outcome| answer(done(outcome)));
                return engine.run_forwarded_mp(request, timeout_ms.map(Duration::from_millis), reply);
            }
            Ok(Forwarded::MpStep(step)) => {
                return engine.mp_participant(from, step, Box::new(move |a| answer(encode_answer(&ForwardAnswer::Step(a)))));
            }
            Ok(Forwarded::RejoinBegin { joiner, incarnation }) => {
                return glue.begin_rejoin(&engine, partition, joiner, incarnation, answer)
            }
            Ok(Forwarded::ExportAcked { target, seq }) => {
                let hub = &engine.shared().config.export;
                // Targets and partitions are configured alike on every node; another name or
                // a partition past the last is not made a lane.
                if hub.target(&target).is_some() && partition < engine.shared().ring.partitions() {
                    hub.lane(&target, partition).leader_acked(seq);
                }
                return answer(encode_answer(&ForwardAnswer::Noted));
            }
            Ok(Forwarded::RejoinChunk { joiner, offset }) => {
                let file = glue.rejoin_out_dir(partition, joiner).join(lockstep_engine::snapshot::partition_file_name(partition));
                glue.runtime.spawn_blocking(move || answer(encode_answer(&read_chunk(&file, offset))));
                return;
            }
            Err(e) => {
                return answer(done(Outcome::error(Error::unexpected(format!("node {from} forwarded a call that cannot be read: {e}")))))
            }
        };
        if !glue.leads(partition) {
            return answer(encode_answer(&ForwardAnswer::NotLeader));
        }
        glue.run_for_others.fetch_add(1, Ordering::Relaxed);
        let timeout = call.timeout_ms.map(Duration::from_millis);
        let reply: Reply = Box::new(move |outcome| {
            let mut encoded = encode_outcome(outcome);
            if encoded.len() > FORWARD_ANSWER_BYTES_MAX {
                encoded = encode_outcome(Outcome::error(Error::graceful(format!(
                    "the answer is {} bytes, more than the {FORWARD_ANSWER_BYTES_MAX} bytes a node sends another: call the node that leads the partition, or ask for fewer rows",
                    encoded.len()
                ))));
            }
            answer(encode_answer(&ForwardAnswer::Done(encoded)));
        });
        engine.run_forwarded(partition, call.request, call.params, timeout, reply);
    }
}

/// Reads the chunk of a rejoin image at `offset`; the file goes once its end was read.
fn read_chunk(file: &Path, offset: u64) -> ForwardAnswer {
    use std::io::{Read, Seek, SeekFrom};
    let read = || -> std::io::Result<(Vec<u8>, bool)> {
        let mut f = std::fs::File::open(file)?;
        let size = f.metadata()?.len();
        f.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::with_capacity(REJOIN_CHUNK_BYTES.min(size.saturating_sub(offset) as usize));
        f.take(REJOIN_CHUNK_BYTES as u64).read_to_end(&mut bytes)?;
        Ok((bytes, offset + REJOIN_CHUNK_BYTES as u64 >= size))
    };
    match read() {
        Ok((bytes, last)) => {
            if last {
                let _ = std::fs::remove_file(file);
            }
            ForwardAnswer::Chunk(bytes)
        }
        Err(e) => ForwardAnswer::Refused(format!("cannot read the partition's image {}: {e}", file.display())),
    }
}

impl ClusterGlue {
    fn rejoin_out_dir(&self, partition: PartitionId, joiner: NodeId) -> PathBuf {
        self.dir.join(REJOIN_OUT_DIR).join(format!("{partition}-{joiner}"))
    }

    /// On a partition's leader: makes `joiner` a learner and has the partition's site write
    /// its image; answers once written.
    fn begin_rejoin(
        &self,
        engine: &Engine,
        partition: PartitionId,
        joiner: NodeId,
        incarnation: u64,
        answer: Box<dyn FnOnce(Vec<u8>) + Send>,
    ) {
        if !self.leads(partition) {
            return answer(encode_answer(&ForwardAnswer::NotLeader));
        }
        let dir = self.rejoin_out_dir(partition, joiner);
        let fresh = std::fs::remove_dir_all(&dir).or_else(|e| if e.kind() == std::io::ErrorKind::NotFound { Ok(()) } else { Err(e) });
        if let Err(e) = fresh.and_then(|()| std::fs::create_dir_all(&dir)) {
            return answer(encode_answer(&ForwardAnswer::Refused(format!("cannot make {}: {e}", dir.display()))));
        }
        self.learners.lock().unwrap_or_else(|e| e.into_inner()).insert((partition, joiner), incarnation);
        tracing::info!(partition, joiner, "node {joiner} rejoins partition {partition}: writing its image");
        engine.rejoin_snapshot(
            partition,
            joiner,
            dir,
            Box::new(move |result: lockstep_core::Result<RejoinPoint>| {
                answer(encode_answer(&match result {
                    Ok(p) => ForwardAnswer::RejoinReady { seq: p.seq, term: p.term, file: p.file },
                    Err(e) => ForwardAnswer::Refused(e.message),
                }))
            }),
        );
    }

    /// Asks `leader` to send `what` about `partition` and reads its answer. The wait ends
    /// early once `leader` no longer leads the partition here (declared down, or this node
    /// cut off): the next look for partitions to rejoin asks the new leader.
    async fn ask_for_rejoin(&self, leader: NodeId, partition: PartitionId, what: Forwarded, limit: u64) -> Result<ForwardAnswer, String> {
        let payload = postcard::to_stdvec(&what).map_err(|e| e.to_string())?;
        let gone = self.until_view(Duration::from_millis(REJOIN_CHECK_MS), |view| leader_lost(view, partition, leader));
        let answer = tokio::select! {
            r = self.node.invoke(leader, partition, payload, Duration::from_millis(limit)) => r,
            () = gone => return Err(format!("node {leader} no longer leads partition {partition} here (declared down, or this node cut off)")),
        };
        match answer {
            Ok(Ok(bytes)) => match postcard::from_bytes::<ForwardAnswer>(&bytes) {
                Ok(ForwardAnswer::Refused(why)) => Err(format!("node {leader} refused: {why}")),
                Ok(ForwardAnswer::NotLeader) => Err(format!("node {leader} no longer leads partition {partition}")),
                Ok(a) => Ok(a),
                Err(e) => Err(format!("node {leader} answered unreadably: {e}")),
            },
            Ok(Err(why)) => Err(why),
            Err(e) => Err(e.to_string()),
        }
    }

    /// On a node that holds a replica of `partition` but is not a member: gets the
    /// partition's image from its leader, loads it, and learns the entries after it. The
    /// leader has the cluster state make this node a member once it caught up.
    async fn rejoin(&self, partition: PartitionId, leader: NodeId) -> Result<u64, String> {
        let begin = Forwarded::RejoinBegin { joiner: self.me, incarnation: self.node.incarnation() };
        let (seq, term, entry) = match self.ask_for_rejoin(leader, partition, begin, REJOIN_SNAPSHOT_TIMEOUT_MS).await? {
            ForwardAnswer::RejoinReady { seq, term, file } => (seq, term, file),
            _ => return Err(format!("node {leader} answered a rejoin with something else")),
        };
        tracing::info!(
            partition,
            leader,
            seq,
            bytes = entry.size,
            "rejoining partition {partition}: receiving its image from node {leader}"
        );
        if entry.size > REJOIN_IMAGE_BYTES_MAX {
            return Err(format!(
                "node {leader}'s image of partition {partition} is {} bytes, over the limit of {REJOIN_IMAGE_BYTES_MAX}",
                entry.size
            ));
        }
        let dir = self.dir.join(REJOIN_IN_DIR);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let path = dir.join(lockstep_engine::snapshot::partition_file_name(partition));
        let mut out = std::fs::File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let mut offset = 0;
        while offset < entry.size {
            let chunk = Forwarded::RejoinChunk { joiner: self.me, offset };
            let ForwardAnswer::Chunk(bytes) = self.ask_for_rejoin(leader, partition, chunk, REJOIN_CHUNK_TIMEOUT_MS).await? else {
                return Err(format!("node {leader} answered for a chunk with something else"));
            };
            if bytes.is_empty() {
                return Err(format!("node {leader}'s image of partition {partition} ended at byte {offset} of {}", entry.size));
            }
            offset += bytes.len() as u64;
            if offset > entry.size {
                return Err(format!("node {leader} sent more than the {} bytes of its image of partition {partition}", entry.size));
            }
            out = tokio::task::spawn_blocking(move || std::io::Write::write_all(&mut out, &bytes).map(|()| out))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        }
        drop(out);
        let engine = self.engine.upgrade().ok_or("the server is stopping")?;
        // Until the load replaces them with the image's export rows, the export files of the
        // partition here number rows from this node's old history: they must not be passed
        // over by the leader's numbers. The load clears this for each target the image
        // carries (docs/cluster.md, export).
        for lane in engine.shared().config.export.lanes().iter().filter(|l| l.partition == partition) {
            lane.rejoined.store(true, Ordering::Relaxed);
        }
        let (done, loaded) = oneshot::channel();
        engine.rejoin_load(partition, path.clone(), entry, term, seq, Box::new(move |r| drop(done.send(r))));
        drop(engine);
        let rows = loaded.await.map_err(|_| "the partition's site stopped".to_string())?.map_err(|e| e.message)?;
        let _ = std::fs::remove_file(&path);
        Ok(rows)
    }
}

/// Whether `leader` no longer leads `partition` in `view`, or this node was cut off.
fn leader_lost(view: &ClusterView, partition: PartitionId, leader: NodeId) -> bool {
    view.state.leader(partition) != Some(leader) || view.standing != Standing::Serving
}

/// Rejoins, one at a time, the partitions this node holds a replica of but is not a member
/// of (every one, after a restart), from their leaders; restores from its command log those
/// with no member left whose last member it was.
async fn rejoin_partitions(glue: Weak<ClusterGlue>) {
    loop {
        sleep(Duration::from_millis(REJOIN_CHECK_MS)).await;
        let Some(g) = glue.upgrade() else { return };
        let view = g.view();
        if view.standing != Standing::Serving {
            continue;
        }
        let state = &view.state;
        let outside = |p: &PartitionId| !state.members(*p).contains(&g.me) && !g.replicas.learning(*p);
        let mine = state.placement().partitions_of(g.me);
        // A partition nobody holds any more, whose last member this node was: its command
        // log has every committed transaction of it (the whole cluster went down).
        let logged = g.engine.upgrade().is_some_and(|e| e.shared().durable.logging());
        if let Some(partition) =
            mine.iter().copied().find(|p| logged && state.members(*p).is_empty() && state.last_member(*p) == Some(g.me))
        {
            let command = Command::Restore { partition, node: g.me, incarnation: g.node.incarnation() };
            match g.node.propose_via_leader(command).await {
                Ok(lockstep_cluster::Outcome::Changed { .. }) => {
                    tracing::info!(partition, "partition {partition} had no member left: it is served again from this node's command log")
                }
                Ok(other) => tracing::warn!(partition, "partition {partition} was not restored from this node: {other:?}"),
                Err(e) => tracing::warn!(partition, "restoring partition {partition} failed, trying again: {e}"),
            }
            continue;
        }
        let todo = mine.into_iter().filter(outside).find_map(|p| Some((p, state.leader(p).filter(|l| *l != g.me)?)));
        let Some((partition, leader)) = todo else { continue };
        match g.rejoin(partition, leader).await {
            Ok(rows) => {
                tracing::info!(partition, rows, "loaded partition {partition}'s image ({rows} rows); catching up with node {leader}")
            }
            Err(e) => tracing::warn!(partition, "rejoining partition {partition} failed, trying again: {e}"),
        }
    }
}

/// On a leader: has the cluster state make each learner that caught up a member, and drop
/// each member that acknowledges nothing though the group hears it.
async fn change_members(glue: Weak<ClusterGlue>, mut notices: tokio::sync::mpsc::Receiver<MemberNotice>) {
    while let Some((partition, node, term, change)) = notices.recv().await {
        let Some(g) = glue.upgrade() else { return };
        let member = g.view().state.members(partition).contains(&node);
        let command = match change {
            MemberChange::CaughtUp if !member => {
                let Some(incarnation) = g.learners.lock().unwrap_or_else(|e| e.into_inner()).get(&(partition, node)).copied() else {
                    continue;
                };
                Command::Rejoined { partition, node, incarnation, term }
            }
            MemberChange::Unresponsive if member => {
                tracing::warn!(
                    partition,
                    node,
                    "node {node} acknowledges none of partition {partition}'s transactions though the cluster hears it (a one-way cut between it and this node?): dropping it from the partition's replicas; it rejoins when it can"
                );
                Command::Evict { partition, node, term }
            }
            _ => continue,
        };
        match g.node.propose_via_leader(command).await {
            Ok(lockstep_cluster::Outcome::Changed { .. }) if change == MemberChange::CaughtUp => {
                tracing::info!(partition, node, "node {node} caught up and is a member of partition {partition} again")
            }
            Ok(lockstep_cluster::Outcome::Changed { .. }) => {
                tracing::info!(partition, node, "node {node} left partition {partition}'s replicas")
            }
            Ok(other) => tracing::info!(partition, node, "the members of partition {partition} did not change for node {node}: {other:?}"),
            Err(e) => tracing::warn!(partition, node, "the members of partition {partition} could not be changed for node {node} now: {e}"),
        }
    }
}

/// Hands the entries a partition's leader ordered to this node's site for the partition.
struct SiteExecutor {
    engine: Weak<Engine>,
}

impl Executor for SiteExecutor {
    fn run(&self, partition: PartitionId, entry: Entry<Vec<u8>>) -> Option<u64> {
        let engine = self.engine.upgrade()?;
        if let Err(e) = engine.run_replicated(partition, entry.seq, &entry.payload) {
            // The leader waits for this entry: the partition stalls until this replica is
            // removed (its node is stopped or declared down).
            tracing::error!(partition, seq = entry.seq, error = %e, "a replicated transaction cannot be run here");
        }
        // The site reports the hash through `ClusterHooks::applied` once it ran the entry.
        None
    }
}

/// Proposes this node's schema changes one at a time, in the order they came, until the
/// glue is gone.
async fn propose_schema_changes(glue: Weak<ClusterGlue>, mut proposals: mpsc::Receiver<SchemaChange>) {
    while let Some(change) = proposals.recv().await {
        let Some(glue) = glue.upgrade() else { return };
        glue.propose_schema(change).await;
    }
}

/// Applies every committed schema change this node has not applied yet, one at a time in
/// commit order, and answers the calls of this node's own changes with their outcome here.
async fn apply_schema_changes(glue: Weak<ClusterGlue>, mut views: watch::Receiver<ClusterView>, file: PathBuf, mut applied: u64) {
    loop {
        let changes = views.borrow_and_update().state.schema_changes().to_vec();
        for change in changes.into_iter().skip(applied as usize) {
            let Some(g) = glue.upgrade() else { return };
            let Some(engine) = g.engine.upgrade() else { return };
            let caller = if change.origin == g.me { g.schema_reply(change.id) } else { None };
            let (done, applied_here) = oneshot::channel();
            let count = change.statements.len();
            engine.apply_schema(
                change.statements,
                Box::new(move |outcome: Outcome| {
                    if !outcome.is_success() {
                        // Every node holds the same schema before the change, so every node
                        // refuses it alike: the caller hears why.
                        tracing::info!(statements = count, error = ?outcome.status_string, "a schema change was refused here as on every node");
                    }
                    if let Some(reply) = caller {
                        reply(outcome);
                    }
                    let _ = done.send(());
                }),
            );
            drop((g, engine));
            if applied_here.await.is_err() {
                tracing::error!("the engine dropped a schema change without applying it");
                return;
            }
            applied += 1;
            if let Err(e) = write_count(&file, applied) {
                tracing::error!(error = %e, path = %file.display(), "cannot record the schema changes applied here");
            }
        }
        if views.changed().await.is_err() {
            return;
        }
    }
}

/// The count stored in `path`, or 0 if there is none yet.
fn read_count(path: &Path) -> Result<u64, String> {
    match std::fs::read(path) {
        Ok(bytes) => {
            let raw: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
                format!(
                    "{} does not hold a count of schema changes: the data directory is damaged (remove the file to apply them all again)",
                    path.display()
                )
            })?;
            Ok(u64::from_le_bytes(raw))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Stores `count` in `path` atomically (a new file renamed over the old one, then synced).
fn write_count(path: &Path, count: u64) -> std::io::Result<()> {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, count.to_le_bytes())?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::ResultTable;

    fn config(internal: Option<&str>, hosts: &[&str], k: Option<u32>) -> ServerConfig {
        ServerConfig {
            internal: internal.map(str::to_string),
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            kfactor: k,
            ..ServerConfig::default()
        }
    }

    const HOSTS: [&str; 3] = ["127.0.0.1:3021", "127.0.0.1:3022", "127.0.0.1:3023"];

    #[test]
    fn settings_find_the_node_id_and_the_partitions() {
        let s = ClusterSettings::from_config(&config(Some("127.0.0.1:3022"), &HOSTS, Some(1)), 2).unwrap().unwrap();
        assert_eq!((s.node_id, s.kfactor, s.partitions()), (1, 1, 3));
        assert_eq!(ClusterSettings::from_config(&config(None, &[], None), 4).unwrap(), None, "no hosts: a single node");
    }

    #[test]
    fn settings_refuse_what_cannot_form_a_cluster_and_say_why() {
        let err = |internal: Option<&str>, hosts: &[&str], k: Option<u32>, sites: u32| {
            ClusterSettings::from_config(&config(internal, hosts, k), sites).unwrap_err()
        };
        assert!(err(Some("127.0.0.1:3029"), &HOSTS, None, 2).contains("is not in --hosts"));
        assert!(err(None, &HOSTS, None, 2).contains("--hosts needs --internal"));
        assert!(err(Some("127.0.0.1:3021"), &[], None, 2).contains("--internal needs --hosts"));
        assert!(err(None, &[], Some(1), 2).contains("--kfactor needs a cluster"));
        assert!(err(Some("127.0.0.1:3021"), &HOSTS, Some(3), 2).contains("needs at least 4 nodes"));
        assert!(err(Some("127.0.0.1:3021"), &["127.0.0.1:3021", "127.0.0.1:3022", "127.0.0.1:3021"], None, 2).contains("twice"));
        assert!(err(Some("127.0.0.1:3021"), &HOSTS, Some(1), 1).contains("divides by k + 1"));
        assert!(err(Some("127.0.0.1:3021"), &["not an address", "127.0.0.1:3021"], None, 2).contains("HOST:PORT"));
    }

    #[test]
    fn outcomes_survive_the_trip_between_nodes() {
        let mut table = ResultTable::with_columns(&[("A", lockstep_core::DataType::BigInt), ("B", lockstep_core::DataType::Varchar)]);
        table.rows.push(vec![Value::Int(7), Value::from("seven")]);
        table.rows.push(vec![Value::Null, Value::Null]);
        let ok = Outcome { app_status: 3, app_status_string: Some("fine".into()), ..Outcome::tables(vec![table]) };
        assert_eq!(decode_outcome(&encode_outcome(ok.clone())), ok);
        let failed = Outcome::error(Error::constraint("duplicate key"));
        assert_eq!(decode_outcome(&encode_outcome(failed.clone())), failed);
        assert!(!decode_outcome(b"\x00garbage").is_success());
    }

    #[test]
    fn the_applied_count_is_kept_across_starts() {
        let dir = std::env::temp_dir().join(format!("lockstep-schema-count-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(SCHEMA_APPLIED_FILE);
        assert_eq!(read_count(&file).unwrap(), 0);
        write_count(&file, 5).unwrap();
        assert_eq!(read_count(&file).unwrap(), 5);
        std::fs::write(&file, b"bad").unwrap();
        assert!(read_count(&file).unwrap_err().contains("damaged"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
