//! Network splits between the nodes of a three-node k = 1 cluster, through a fault proxy on
//! the internal network (clients reach every node directly). Node 1 is cut off from the
//! others: it hears no majority and refuses every call, clearly, while nodes 0 and 2 declare
//! it down, take its partitions over and go on writing. Healed, it serves no stale read
//! while it catches up, rejoins its partitions, and every row acknowledged on either side is
//! read through every node. Then a one-way cut (node 1 hears nothing from node 2, node 2
//! still hears node 1, the group hears both): the partitions they share must not stop,
//! and no row is lost. Every wait is bounded; nothing asserts a time.

mod common;

use std::time::{Duration, Instant};

use common::cluster::{start_cluster_on, wait_fully_replicated};
use common::proxy::FaultProxy;
use common::TempDir;
use lockstep_client::{Client, ClientConfig, Response};
use lockstep_core::Value;

const LIVENESS_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
const NODES: usize = 3;
const KFACTOR: u32 = 1;
/// VoltDB's SERVER_UNAVAILABLE status.
const SERVER_UNAVAILABLE: i8 = -5;
/// How long a one-way cut lasts: past the time a leader waits for a member that does not
/// answer (100 replication ticks of 20 ms) before it has the member dropped.
const ONE_WAY_CUT: Duration = Duration::from_millis(4_000);
/// The node cut off from the others.
const LONE: usize = 1;
/// How long reads through the healed node are checked for staleness.
const AFTER_HEAL_CHECK: Duration = Duration::from_millis(1_500);

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

async fn call(client: &Client, proc: &str, params: Vec<Value>) -> Option<Response> {
    client.call(proc, params).await.ok()
}

/// Writes row `k` through `client`, retrying through a failover, for at most the limit.
async fn put(client: &Client, k: i64) {
    let deadline = Instant::now() + LIVENESS_LIMIT;
    loop {
        let r = call(client, "KV.upsert", vec![Value::Int(k), s(&format!("v{k}"))]).await;
        if r.is_some_and(|r| r.status == 1) {
            return;
        }
        assert!(Instant::now() < deadline, "row {k} was never acknowledged");
        tokio::time::sleep(POLL).await;
    }
}

/// Reads every row in `keys` through `client` (retrying while the cluster settles).
async fn read_all(client: &Client, keys: &[i64], node: usize) {
    for &k in keys {
        let deadline = Instant::now() + LIVENESS_LIMIT;
        let got = loop {
            match call(client, "KV.select", vec![Value::Int(k)]).await {
                Some(r) if r.status == 1 => break r.tables[0].rows.first().map(|row| row[1].clone()),
                _ => {
                    assert!(Instant::now() < deadline, "row {k} was never served through node {node}");
                    tokio::time::sleep(POLL).await;
                }
            }
        };
        assert_eq!(got, Some(s(&format!("v{k}"))), "acknowledged row {k} through node {node}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_off_minority_refuses_calls_the_majority_goes_on_and_nothing_is_lost() {
    let dir = TempDir::new("cluster-split");
    let (proxy, addrs) = FaultProxy::start(NODES).await;
    let root = dir.0.clone();
    let nodes = tokio::task::spawn_blocking(move || start_cluster_on(&root, &addrs.hosts, Some(&addrs.listens), KFACTOR, "off"))
        .await
        .expect("start the cluster behind the proxy");
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(Client::connect(&n.addr, ClientConfig::default()).await.expect("connect"));
    }
    let ddl = "CREATE TABLE kv (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k)); PARTITION TABLE kv ON COLUMN k;";
    assert_eq!(call(&clients[0], "@AdHoc", vec![s(ddl)]).await.map(|r| r.status), Some(1));
    let mut written: Vec<i64> = Vec::new();
    for k in 0..100 {
        put(&clients[k as usize % NODES], k).await;
        written.push(k);
    }

    // Node 1 (a node that leads a partition, not the membership group's first leader) is cut
    // off: it says it is, and takes no call (never a stale read, never a write the majority
    // would not have).
    proxy.isolate(LONE);
    let lone = &clients[LONE];
    let deadline = Instant::now() + LIVENESS_LIMIT;
    loop {
        let r = call(lone, "@Ping", vec![]).await.expect("the cut-off node answers its clients");
        if r.status_string.as_deref().is_some_and(|why| why.contains("cut off from the majority")) {
            assert_eq!(r.status, SERVER_UNAVAILABLE);
            break;
        }
        assert!(Instant::now() < deadline, "node 1 never said it was cut off: {:?}", r.status_string);
        tokio::time::sleep(POLL).await;
    }
    for k in 0..10 {
        let r = call(lone, "KV.select", vec![Value::Int(k)]).await.expect("answered");
        assert_eq!(r.status, SERVER_UNAVAILABLE, "a read in the minority: {:?}", r.status_string);
        let w = call(lone, "KV.upsert", vec![Value::Int(1_000 + k), s("minority")]).await.expect("answered");
        assert_eq!(w.status, SERVER_UNAVAILABLE, "a write in the minority: {:?}", w.status_string);
    }
    // The majority goes on.
    for k in 100..200 {
        put(&clients[if k % 2 == 0 { 0 } else { 2 }], k).await;
        written.push(k);
    }

    // Healed: what node 1 held up during the split (its own heartbeats and the leader's
    // answers to them) arrives late, and must not make it serve again before it has caught
    // up with the group: through it, a row written during the split is read right or
    // refused, never missing.
    proxy.heal();
    let until = Instant::now() + AFTER_HEAL_CHECK;
    while Instant::now() < until {
        for k in 100..110 {
            let r = call(lone, "KV.select", vec![Value::Int(k)]).await.expect("answered");
            if r.status == 1 {
                assert_eq!(
                    r.tables[0].rows.first().map(|row| row[1].clone()),
                    Some(s(&format!("v{k}"))),
                    "a stale read of row {k} through node 1 just after the split healed"
                );
            }
        }
    }
    // Then node 1 rejoins its partitions, and every row is served through every node; the
    // writes refused in the minority never happened.
    wait_fully_replicated(&clients[0], KFACTOR, LIVENESS_LIMIT, "node 1 did not rejoin after the split healed").await;
    for (n, c) in clients.iter().enumerate() {
        read_all(c, &written, n).await;
        let r = call(c, "KV.select", vec![Value::Int(1_000)]).await.expect("answered");
        assert!(r.status == 1 && r.tables[0].rows.is_empty(), "a write refused in the minority is there: {:?}", r.tables);
    }

    // A one-way cut: node 1 hears nothing from node 2 while node 2 hears node 1, and the
    // group's leader hears both, so nobody is declared down. The leader of a partition they
    // share sees its member acknowledge nothing and has the group drop it from the
    // partition; writes go on through node 0, and once the cut heals the member rejoins and
    // no acknowledged row is lost.
    proxy.cut_one_way(2, 1);
    let until = Instant::now() + ONE_WAY_CUT;
    let mut k = 200;
    while Instant::now() < until {
        put(&clients[0], k).await;
        written.push(k);
        k += 1;
    }
    proxy.heal();
    wait_fully_replicated(&clients[0], KFACTOR, LIVENESS_LIMIT, "the cluster did not come back whole after the one-way cut").await;
    for (n, c) in clients.iter().enumerate() {
        read_all(c, &written, n).await;
    }
    drop(nodes);
}
