//! The membership group, and the partitions' replication over it, end to end: three
//! in-process nodes, each on its own Tokio runtime,
//! talking over real loopback TCP. A node is stopped by dropping its runtime (its listener
//! and connections close as in a crash), split off by the transport's fault switch, and
//! restarted on its data directory. Every wait is bounded by a generous liveness limit; no
//! test asserts how long anything took.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use lockstep_cluster::node::Service;
use lockstep_cluster::replicas::{Executor, Replicas, ReplicateError, TICK_DEFAULT_MS};
use lockstep_cluster::replication::{AppendError, Entry};
use lockstep_cluster::state::SchemaChange;
use lockstep_cluster::{ClusterConfig, ClusterNode, ClusterView, Command, NodeId, PartitionId, Standing};
use tokio::runtime::Runtime;
use tokio::time::timeout;

/// Longest any test waits for the cluster to reach a state.
const LIVENESS_LIMIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);
const NODES: u32 = 3;
const SITES: u32 = 2;
const KFACTOR: u32 = 1;

static CLUSTERS: AtomicU64 = AtomicU64::new(0);

struct Running {
    rt: Runtime,
    node: ClusterNode,
}

struct Cluster {
    hosts: Vec<SocketAddr>,
    root: PathBuf,
    nodes: Vec<Option<Running>>,
}

fn runtime(id: NodeId) -> Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).thread_name(format!("node-{id}")).enable_all().build().unwrap()
}

/// The client address node `id` announces (nothing listens there: only its passing on is tested).
fn client_address(id: NodeId) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 20_000 + id as u16))
}

impl Cluster {
    /// Starts every node, each on a listener bound before any starts (so the host list is
    /// known without guessing free ports).
    fn start() -> Cluster {
        let listeners: Vec<std::net::TcpListener> = (0..NODES).map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap()).collect();
        let hosts = listeners.iter().map(|l| l.local_addr().unwrap()).collect();
        let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("lockstep-membership-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let mut cluster = Cluster { hosts, root, nodes: Vec::new() };
        for (id, l) in listeners.into_iter().enumerate() {
            let running = cluster.launch(id as NodeId, Some(l));
            cluster.nodes.push(Some(running));
        }
        cluster
    }

    fn launch(&self, id: NodeId, listener: Option<std::net::TcpListener>) -> Running {
        let rt = runtime(id);
        let mut config = ClusterConfig::new(id, self.hosts.clone(), KFACTOR, SITES, self.root.join(format!("node-{id}")));
        config.client_address = Some(client_address(id));
        let node = rt
            .block_on(async {
                match listener {
                    Some(l) => {
                        l.set_nonblocking(true).unwrap();
                        ClusterNode::start_on(config, tokio::net::TcpListener::from_std(l).unwrap()).await
                    }
                    None => ClusterNode::start(config).await,
                }
            })
            .unwrap();
        Running { rt, node }
    }

    fn node(&self, id: NodeId) -> &ClusterNode {
        &self.nodes[id as usize].as_ref().expect("node is running").node
    }

    fn view(&self, id: NodeId) -> ClusterView {
        self.node(id).view()
    }

    /// Stops a node as a crash would: its runtime goes, with its listener and connections.
    fn stop(&mut self, id: NodeId) {
        if let Some(Running { rt, node }) = self.nodes[id as usize].take() {
            drop(node);
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }

    fn restart(&mut self, id: NodeId) {
        let running = self.launch(id, None);
        self.nodes[id as usize] = Some(running);
    }

    fn running(&self) -> Vec<NodeId> {
        (0..NODES).filter(|n| self.nodes[*n as usize].is_some()).collect()
    }

    /// Cuts `lone` off from every other node, both ways.
    fn split_off(&self, lone: NodeId) {
        for other in self.running().into_iter().filter(|n| *n != lone) {
            self.node(lone).faults().block(other);
            self.node(other).faults().block(lone);
        }
    }

    fn heal(&self) {
        for n in self.running() {
            self.node(n).faults().heal();
        }
    }

    /// Whether the given nodes all serve, with one and the same state.
    fn agree(&self, nodes: &[NodeId]) -> bool {
        let views: Vec<ClusterView> = nodes.iter().map(|n| self.view(*n)).collect();
        views.iter().all(|v| v.standing == Standing::Serving && v.state == views[0].state)
    }

    /// Waits until every node serves with one state in which all are alive.
    fn formed(&self) -> ClusterView {
        let all: Vec<NodeId> = (0..NODES).collect();
        wait_until("the cluster forms", || self.agree(&all) && (0..NODES).all(|n| self.view(0).state.is_alive(n)));
        self.view(0)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in 0..self.nodes.len() {
            self.stop(id as NodeId);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIVENESS_LIMIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {LIVENESS_LIMIT:?}");
        std::thread::sleep(POLL);
    }
}

/// Partitions that some serving node claims to lead, with who claims them.
fn serving_leaders(cluster: &Cluster, partition: u32) -> Vec<NodeId> {
    cluster.running().into_iter().filter(|n| cluster.view(*n).leads(partition)).collect()
}

#[test]
fn three_nodes_form_a_cluster_and_agree_on_one_state() {
    let cluster = Cluster::start();
    let view = cluster.formed();
    let state = &view.state;
    assert_eq!(state.placement().partition_count(), NODES * SITES / (KFACTOR + 1));
    for n in 0..NODES {
        assert_eq!(state.incarnation(n), 1, "node {n}'s first start is recorded");
    }
    for p in 0..state.placement().partition_count() {
        assert_eq!(serving_leaders(&cluster, p).len(), 1, "partition {p} has exactly one serving leader");
    }
    let leader = view.group_leader;
    assert!(leader.is_some());
    wait_until("every node knows the group leader", || (0..NODES).all(|n| cluster.view(n).group_leader.is_some()));
}

#[test]
fn a_stopped_node_is_declared_down_and_its_partitions_get_live_leaders() {
    let mut cluster = Cluster::start();
    let before = cluster.formed();
    // Stopping the group's leader also makes the survivors elect a new one first.
    let victim = before.group_leader.expect("a formed group has a leader");
    let led = before.state.led_by(victim);
    assert!(!led.is_empty(), "every node leads a partition in this layout");
    cluster.stop(victim);

    let survivors: Vec<NodeId> = (0..NODES).filter(|n| *n != victim).collect();
    wait_until("the survivors commit NodeDown", || cluster.agree(&survivors) && !cluster.view(survivors[0]).state.is_alive(victim));
    let after = cluster.view(survivors[0]).state;
    assert!(after.epoch() > before.state.epoch());
    for p in led {
        let leader = after.leader(p).expect("the partition has a live replica");
        assert_ne!(leader, victim);
        assert!(after.is_alive(leader));
        assert!(after.placement().partitions[p as usize].nodes.contains(&leader));
        assert_eq!(serving_leaders(&cluster, p), vec![leader]);
    }
}

#[test]
fn a_split_puts_the_lone_node_in_the_minority_and_healing_brings_it_back() {
    let cluster = Cluster::start();
    let before = cluster.formed();
    let lone = before.group_leader.expect("a formed group has a leader");
    let majority: Vec<NodeId> = (0..NODES).filter(|n| *n != lone).collect();
    cluster.split_off(lone);

    wait_until("the lone node sees it is in the minority", || cluster.view(lone).standing == Standing::Minority);
    wait_until("the majority carries on without it", || cluster.agree(&majority) && !cluster.view(majority[0]).state.is_alive(lone));
    assert_eq!(cluster.view(lone).standing, Standing::Minority, "still cut off");
    for p in 0..before.state.placement().partition_count() {
        let leaders = serving_leaders(&cluster, p);
        assert_eq!(leaders.len(), 1, "partition {p}: serving leaders {leaders:?}");
        assert_ne!(leaders[0], lone);
    }
    let down_epoch = cluster.view(majority[0]).state.epoch();

    cluster.heal();
    let all: Vec<NodeId> = (0..NODES).collect();
    wait_until("the lone node is back up", || cluster.agree(&all) && cluster.view(lone).state.is_alive(lone));
    let healed = cluster.view(lone).state;
    assert!(healed.epoch() > down_epoch);
    assert!(healed.led_by(lone).is_empty(), "a node back up is a replica until a rebalance");
}

#[test]
fn a_restarted_node_rejoins_with_its_id_and_a_new_incarnation() {
    let mut cluster = Cluster::start();
    cluster.formed();
    // Node 0 formed the group; started again, it must join the group, not form another.
    let restarted: NodeId = 0;
    cluster.stop(restarted);
    let others = [1, 2];
    wait_until("the others see it down", || cluster.agree(&others) && !cluster.view(1).state.is_alive(restarted));

    cluster.restart(restarted);
    assert_eq!(cluster.node(restarted).id(), restarted);
    assert_eq!(cluster.node(restarted).incarnation(), 2, "the start counter survived on disk");
    let all: Vec<NodeId> = (0..NODES).collect();
    wait_until("it rejoins", || cluster.agree(&all) && cluster.view(1).state.incarnation(restarted) == 2);
    let state = cluster.view(restarted).state;
    assert!(state.is_alive(restarted));
    assert!(state.led_by(restarted).is_empty(), "it holds no data yet, so it leads nothing");
}

/// A follower that was down long enough for the group's leader to retry it slowly must not
/// stand for election when it comes back (it would raise the term and depose a healthy
/// leader): the group's leader stays the same throughout, on every node that knows one.
#[test]
fn a_restarted_follower_does_not_depose_the_group_leader() {
    let mut cluster = Cluster::start();
    cluster.formed();
    let leader = cluster.view(0).group_leader.expect("a formed group has a leader");
    let follower = (leader + 1) % NODES;
    cluster.stop(follower);
    // Long enough for the leader's reconnect backoff to grow past the follower's election
    // timeout (see `ELECTIONS_HELD_AFTER_START_MS`).
    std::thread::sleep(Duration::from_millis(2_000));
    cluster.restart(follower);
    let watched = Instant::now() + Duration::from_millis(3_000);
    while Instant::now() < watched {
        for n in cluster.running() {
            let seen = cluster.view(n).group_leader;
            assert!(seen.is_none() || seen == Some(leader), "node {n} sees node {seen:?} lead the group, not node {leader}");
        }
        assert_eq!(cluster.view(leader).group_leader, Some(leader), "the group's leader was deposed");
        std::thread::sleep(Duration::from_millis(5));
    }
    let all: Vec<NodeId> = (0..NODES).collect();
    wait_until("it is admitted again", || cluster.agree(&all) && cluster.view(leader).state.incarnation(follower) == 2);
}

#[test]
fn a_node_restarted_at_once_gives_up_its_leaderships() {
    let mut cluster = Cluster::start();
    let before = cluster.formed();
    let restarted: NodeId = 2;
    assert!(!before.state.led_by(restarted).is_empty());
    // Back before the failure timeout, most likely: then the group never saw it down, and
    // only its new incarnation tells that its partitions are gone. Either way it must not
    // lead what it led.
    cluster.stop(restarted);
    cluster.restart(restarted);
    let all: Vec<NodeId> = (0..NODES).collect();
    wait_until("it is admitted again", || cluster.agree(&all) && cluster.view(0).state.incarnation(restarted) == 2);
    let state = cluster.view(restarted).state;
    assert!(state.led_by(restarted).is_empty());
    for p in before.state.led_by(restarted) {
        assert_eq!(serving_leaders(&cluster, p).len(), 1, "partition {p} has one serving leader");
    }
}

#[test]
fn a_single_node_cluster_forms_and_serves_alone() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hosts = vec![listener.local_addr().unwrap()];
    let n = CLUSTERS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("lockstep-membership-single-{}-{n}", std::process::id()));
    let rt = runtime(0);
    let node = rt
        .block_on(async {
            listener.set_nonblocking(true).unwrap();
            ClusterNode::start_on(ClusterConfig::new(0, hosts, 0, 2, dir.clone()), tokio::net::TcpListener::from_std(listener).unwrap())
                .await
        })
        .unwrap();
    wait_until("the lone node serves", || node.view().standing == Standing::Serving);
    let view = node.view();
    assert!(view.leads(0) && view.leads(1));
    drop(node);
    rt.shutdown_timeout(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failure_timeout_sets_the_pings_and_one_too_short_is_refused() {
    let dir = std::env::temp_dir().join(format!("lockstep-membership-timeout-{}", std::process::id()));
    let hosts = vec!["127.0.0.1:1".parse().unwrap()];
    let config = ClusterConfig::new(0, hosts, 0, 2, dir.clone()).with_failure_timeout(Duration::from_millis(300));
    assert_eq!((config.failure_timeout, config.heartbeat_interval), (Duration::from_millis(300), Duration::from_millis(30)));
    let slow = config.clone().with_failure_timeout(Duration::from_secs(5));
    assert_eq!(
        slow.heartbeat_interval,
        Duration::from_millis(lockstep_cluster::node::HEARTBEAT_INTERVAL_DEFAULT_MS),
        "never pings less often"
    );
    let rt = runtime(0);
    let started = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        ClusterNode::start_on(config.with_failure_timeout(Duration::from_millis(50)), listener).await
    });
    let Err(e) = started else { panic!("a 50 ms failure timeout was accepted") };
    assert!(e.to_string().contains("below 100 ms"), "{e}");
    rt.shutdown_timeout(Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}

/// One node's copy of every partition it holds: the payloads it ran, in order, and a hash
/// chain over them (the "results" replicas compare).
#[derive(Default)]
struct Store {
    runs: Mutex<BTreeMap<PartitionId, (Vec<Vec<u8>>, u64)>>,
}

impl Store {
    fn run(&self, partition: PartitionId, payload: Vec<u8>) -> u64 {
        let mut runs = self.runs.lock().unwrap();
        let (ran, hash) = runs.entry(partition).or_default();
        *hash = payload.iter().fold(hash.rotate_left(5), |h, b| h.wrapping_mul(31) ^ u64::from(*b));
        ran.push(payload);
        *hash
    }

    fn ran(&self, partition: PartitionId) -> Vec<Vec<u8>> {
        self.runs.lock().unwrap().get(&partition).map(|(r, _)| r.clone()).unwrap_or_default()
    }
}

impl Executor for Store {
    fn run(&self, partition: PartitionId, entry: Entry<Vec<u8>>) -> Option<u64> {
        Some(Store::run(self, partition, entry.payload))
    }
}

/// Runs `payload` on `partition`'s leader as a transaction would (run, then append; undo
/// when refused) and waits for it to commit; retries while leadership moves.
fn replicate(cluster: &Cluster, replicas: &[Option<(Replicas, Arc<Store>)>], partition: PartitionId, payload: Vec<u8>) {
    replicate_then(cluster, replicas, partition, payload, None);
}

/// `replicate`, and right after the append, `barrier` is registered with `after_appended`
/// on the leader; it is told whether the append had committed by the time it was called.
type Barrier = Box<dyn FnOnce(bool, Result<(), ReplicateError>) + Send>;

fn replicate_then(
    cluster: &Cluster,
    replicas: &[Option<(Replicas, Arc<Store>)>],
    partition: PartitionId,
    payload: Vec<u8>,
    mut barrier: Option<Barrier>,
) {
    wait_until("a transaction commits", || {
        for n in cluster.running() {
            let Some((r, store)) = &replicas[n as usize] else { continue };
            if !r.partitions().contains(&partition) || !cluster.view(n).leads(partition) {
                continue;
            }
            let committed = {
                // The run and the append happen under the store's lock, so an entry handed
                // out meanwhile cannot slip between them.
                let mut runs = store.runs.lock().unwrap();
                let (ran, hash) = runs.entry(partition).or_default();
                let before = *hash;
                let next = payload.iter().fold(hash.rotate_left(5), |h, b| h.wrapping_mul(31) ^ u64::from(*b));
                let (reply, rx) = tokio::sync::oneshot::channel();
                let committed = Arc::new(AtomicBool::new(false));
                let seen = committed.clone();
                let answer = Box::new(move |result| {
                    committed.store(true, Ordering::SeqCst);
                    drop(reply.send(result))
                });
                match r.append(partition, payload.clone(), next, answer) {
                    Ok(()) => {
                        if let Some(b) = barrier.take() {
                            r.after_appended(partition, Box::new(move |result| b(seen.load(Ordering::SeqCst), result)));
                        }
                        ran.push(payload.clone());
                        *hash = next;
                        rx
                    }
                    Err(_) => {
                        *hash = before;
                        continue;
                    }
                }
            };
            let answer = cluster.nodes[n as usize].as_ref().unwrap().rt.block_on(async { timeout(LIVENESS_LIMIT, committed).await });
            match answer {
                Ok(Ok(Ok(()))) => return true,
                other => panic!("an append to partition {partition} on node {n} did not commit: {other:?}"),
            }
        }
        false
    });
}

fn start_replicas(cluster: &Cluster, n: NodeId) -> Option<(Replicas, Arc<Store>)> {
    let running = cluster.nodes[n as usize].as_ref()?;
    let store = Arc::new(Store::default());
    let _entered = running.rt.enter();
    let r = Replicas::start(&running.node, store.clone(), Duration::from_millis(TICK_DEFAULT_MS))?;
    Some((r, store))
}

#[test]
fn replicas_run_every_committed_transaction_in_order_and_keep_them_when_a_leader_dies() {
    let mut cluster = Cluster::start();
    let view = cluster.formed();
    let mut replicas: Vec<Option<(Replicas, Arc<Store>)>> = (0..NODES).map(|n| start_replicas(&cluster, n)).collect();
    let partitions = view.state.placement().partition_count();
    let mut written: Vec<Vec<Vec<u8>>> = vec![Vec::new(); partitions as usize];
    let write = |cluster: &Cluster, replicas: &[Option<(Replicas, Arc<Store>)>], written: &mut Vec<Vec<Vec<u8>>>, round: u32| {
        for p in 0..partitions {
            for i in 0..20u32 {
                let payload = format!("p{p}-r{round}-{i}").into_bytes();
                replicate(cluster, replicas, p, payload.clone());
                written[p as usize].push(payload);
            }
        }
    };
    write(&cluster, &replicas, &mut written, 0);

    // A follower refuses appends: only the leader orders.
    let p0 = &view.state.placement().partitions[0];
    let follower = *p0.nodes.iter().find(|n| view.state.leader(0) != Some(**n)).unwrap();
    let (r, _) = replicas[follower as usize].as_ref().unwrap();
    assert_eq!(r.append(0, b"x".to_vec(), 0, Box::new(|_| {})).err(), Some(ReplicateError::Refused(AppendError::NotLeader)));

    // An answer that wrote nothing waits on the leader for what was appended before it:
    // at once when all of it committed, after the append otherwise; a follower refuses.
    let (r, _) = replicas[view.state.leader(0).unwrap() as usize].as_ref().unwrap();
    let (tx, barriers) = std::sync::mpsc::channel();
    let at_once = tx.clone();
    r.after_appended(0, Box::new(move |result| at_once.send((true, result)).unwrap()));
    assert_eq!(barriers.try_recv().ok(), Some((true, Ok(()))), "nothing was waiting");
    let payload = b"before-a-read".to_vec();
    replicate_then(&cluster, &replicas, 0, payload.clone(), Some(Box::new(move |committed, result| tx.send((committed, result)).unwrap())));
    written[0].push(payload);
    assert_eq!(barriers.recv_timeout(LIVENESS_LIMIT).ok(), Some((true, Ok(()))), "the barrier was passed before the append committed");
    let (r, _) = replicas[follower as usize].as_ref().unwrap();
    let (tx, refused) = std::sync::mpsc::channel();
    r.after_appended(0, Box::new(move |result| tx.send(result).unwrap()));
    assert_eq!(refused.try_recv().ok(), Some(Err(ReplicateError::Refused(AppendError::NotLeader))));

    // The leader of partition 0 dies; its partitions' other replicas take over with
    // everything committed, and new work commits.
    let victim = view.state.leader(0).unwrap();
    replicas[victim as usize] = None;
    cluster.stop(victim);
    let survivors: Vec<NodeId> = (0..NODES).filter(|n| *n != victim).collect();
    wait_until("the survivors commit NodeDown", || cluster.agree(&survivors) && !cluster.view(survivors[0]).state.is_alive(victim));
    write(&cluster, &replicas, &mut written, 1);

    let state = cluster.view(survivors[0]).state;
    for p in 0..partitions {
        for &m in state.members(p) {
            let (r, store) = replicas[m as usize].as_ref().unwrap();
            wait_until("a member runs everything", || r.applied_seq(p) == Some(written[p as usize].len() as u64));
            assert_eq!(store.ran(p), written[p as usize], "partition {p} on node {m}");
        }
    }
}

/// Answers a forwarded call with its own node id, the caller and the call reversed.
struct Mirror(NodeId);

impl Service for Mirror {
    fn invoke(&self, from: NodeId, partition: PartitionId, mut call: Vec<u8>, answer: Box<dyn FnOnce(Vec<u8>) + Send>) {
        call.reverse();
        call.extend([self.0 as u8, from as u8, partition as u8]);
        answer(call);
    }
}

#[test]
fn any_node_proposes_through_the_leader_forwards_calls_and_knows_every_client_address() {
    let cluster = Cluster::start();
    let view = cluster.formed();
    let leader = view.group_leader.unwrap();
    let follower = (0..NODES).find(|n| *n != leader).unwrap();

    // A follower's proposal reaches the group's leader and every node applies it.
    let change = SchemaChange { statements: vec!["CREATE TABLE t (a INTEGER);".into()], origin: follower, id: 1 };
    let running = cluster.nodes[follower as usize].as_ref().unwrap();
    let outcome = running.rt.block_on(running.node.propose_via_leader(Command::Schema(change.clone())));
    assert!(matches!(outcome, Ok(lockstep_cluster::Outcome::Changed { .. })), "{outcome:?}");
    for n in 0..NODES {
        wait_until("every node applies the schema change", || cluster.view(n).state.schema_changes() == std::slice::from_ref(&change));
    }

    // A node without a service says so; with one, the call is answered by it.
    let other = (0..NODES).find(|n| *n != follower).unwrap();
    let call = |to: NodeId| running.rt.block_on(running.node.invoke(to, 2, vec![1, 2, 3], LIVENESS_LIMIT));
    assert!(matches!(call(other), Ok(Err(_))), "a node with no service takes no call");
    cluster.node(other).set_service(Arc::new(Mirror(other)));
    assert_eq!(call(other), Ok(Ok(vec![3, 2, 1, other as u8, follower as u8, 2])));

    for n in 0..NODES {
        wait_until("every node knows every client address", || {
            cluster.node(n).client_addresses() == (0..NODES).map(|i| Some(client_address(i))).collect::<Vec<_>>()
        });
        assert_eq!(cluster.node(n).heard_count(), NODES);
    }
}
