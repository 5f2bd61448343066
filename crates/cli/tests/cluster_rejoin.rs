//! Rejoin and restart: a node of a three-node k = 1 cluster is killed, the survivors take
//! writes without it, and the node is started again on its old data directory while a
//! client keeps writing. It gets each of its partitions' image from the partition's leader,
//! catches up and becomes a member again (`@Statistics TOPO` lists it). Then the node it
//! shares partitions with is killed: the rejoined node alone must serve every row ever
//! acknowledged. And a whole cluster with its command logs on is killed at once and started
//! again: every acknowledged row, single- and multi-partition, is back. Every wait is
//! bounded; nothing asserts a time.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{free_addrs, start_cluster_on, start_node, wait_fully_replicated};
use common::TempDir;
use lockstep_client::{Client, ClientConfig, Response};
use lockstep_core::Value;

/// Longest any step waits for the cluster to get somewhere.
const LIVENESS_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
const NODES: usize = 3;
const KFACTOR: u32 = 1;
/// Rows written before the kill, and while the node is down.
const ROWS_PER_PHASE: i64 = 300;

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

async fn connect(addr: &str) -> Client {
    Client::connect(addr, ClientConfig::default()).await.expect("connect to a node")
}

async fn call(client: &Client, proc: &str, params: Vec<Value>) -> Option<Response> {
    client.call(proc, params).await.ok()
}

/// Writes row `k` through `client`; true once acknowledged.
async fn put(client: &Client, k: i64) -> bool {
    call(client, "KV.upsert", vec![Value::Int(k), s(&format!("v{k}"))]).await.is_some_and(|r| r.status == 1)
}

/// Writes row `k` through `client`, retrying through a failover, for at most the limit.
async fn put_until_acknowledged(client: &Client, k: i64) {
    let deadline = Instant::now() + LIVENESS_LIMIT;
    while !put(client, k).await {
        assert!(Instant::now() < deadline, "row {k} was never acknowledged");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_rejoins_its_partitions_while_writes_go_on_and_then_serves_them_alone() {
    let dir = TempDir::new("cluster-rejoin");
    let hosts = free_addrs(NODES);
    let mut nodes: Vec<Option<common::Server>> = start_cluster_on(&dir.0, &hosts, None, KFACTOR, "off").into_iter().map(Some).collect();
    let addr = |nodes: &Vec<Option<common::Server>>, i: usize| nodes[i].as_ref().map(|n| n.addr.clone()).expect("node runs");
    let first = connect(&addr(&nodes, 0)).await;
    let ddl = "CREATE TABLE kv (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k)); PARTITION TABLE kv ON COLUMN k;";
    assert_eq!(call(&first, "@AdHoc", vec![s(ddl)]).await.map(|r| r.status), Some(1));
    let mut acknowledged: Vec<i64> = Vec::new();
    for k in 0..ROWS_PER_PHASE {
        put_until_acknowledged(&first, k).await;
        acknowledged.push(k);
    }

    // Node 1 dies (SIGKILL); the others take its partitions over and go on.
    drop(nodes[1].take());
    let survivors = [connect(&addr(&nodes, 0)).await, connect(&addr(&nodes, 2)).await];
    for k in ROWS_PER_PHASE..2 * ROWS_PER_PHASE {
        put_until_acknowledged(&survivors[k as usize % 2], k).await;
        acknowledged.push(k);
    }

    // A writer keeps going while node 1 comes back.
    let stop = Arc::new(AtomicBool::new(false));
    let during: Arc<Mutex<Vec<i64>>> = Arc::default();
    let writer = {
        let (stop, during, client) = (stop.clone(), during.clone(), connect(&addr(&nodes, 2)).await);
        tokio::spawn(async move {
            let mut k = 2 * ROWS_PER_PHASE;
            while !stop.load(Ordering::Relaxed) {
                if put(&client, k).await {
                    during.lock().unwrap().push(k);
                }
                k += 1;
            }
        })
    };
    let root = dir.0.clone();
    let hosts_again = hosts.clone();
    nodes[1] =
        Some(tokio::task::spawn_blocking(move || start_node(&root, 1, &hosts_again, None, KFACTOR, "off")).await.expect("restart node 1"));
    let rejoined = connect(&addr(&nodes, 1)).await;

    // Node 1 is a member of each of its partitions again.
    wait_fully_replicated(&survivors[0], KFACTOR, LIVENESS_LIMIT, "node 1 did not rejoin its partitions").await;
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("the writer");
    let during = std::mem::take(&mut *during.lock().unwrap());
    assert!(!during.is_empty(), "no write was acknowledged while node 1 rejoined");
    acknowledged.extend(during);

    // Node 0 dies: the partitions it shared with node 1 are node 1's alone now, from the
    // image it received and the entries it caught up with.
    drop(nodes[0].take());
    for client in [&rejoined, &survivors[1]] {
        for &k in &acknowledged {
            let deadline = Instant::now() + LIVENESS_LIMIT;
            let got = loop {
                match call(client, "KV.select", vec![Value::Int(k)]).await {
                    Some(r) if r.status == 1 => break r.tables[0].rows.first().map(|row| row[1].clone()),
                    _ => {
                        assert!(Instant::now() < deadline, "row {k} was never served after node 0 died");
                        tokio::time::sleep(POLL).await;
                    }
                }
            };
            assert_eq!(got, Some(s(&format!("v{k}"))), "acknowledged row {k} after node 1 rejoined and node 0 died");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_cluster_killed_at_once_comes_back_from_its_command_logs() {
    let dir = TempDir::new("cluster-restart");
    let hosts = free_addrs(NODES);
    let (root, h) = (dir.0.clone(), hosts.clone());
    let nodes = tokio::task::spawn_blocking(move || start_cluster_on(&root, &h, None, KFACTOR, "sync")).await.expect("start the cluster");
    let client = connect(&nodes[0].addr).await;
    let ddl = "CREATE TABLE kv (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k)); PARTITION TABLE kv ON COLUMN k; \
               CREATE TABLE copy (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k)); PARTITION TABLE copy ON COLUMN k;";
    assert_eq!(call(&client, "@AdHoc", vec![s(ddl)]).await.map(|r| r.status), Some(1));
    for k in 0..ROWS_PER_PHASE {
        put_until_acknowledged(&client, k).await;
    }
    // A multi-partition write: each partition's share is in its replicas' logs.
    let copied = call(&client, "@AdHoc", vec![s("INSERT INTO copy SELECT k, v FROM kv")]).await.expect("the copy was answered");
    assert_eq!(copied.status, 1, "{:?}", copied.status_string);
    for k in ROWS_PER_PHASE..2 * ROWS_PER_PHASE {
        put_until_acknowledged(&client, k).await;
    }
    drop(client);

    // Every node dies at once (SIGKILL), then all start again on their data directories.
    drop(nodes);
    let (root, h) = (dir.0.clone(), hosts.clone());
    let nodes = tokio::task::spawn_blocking(move || start_cluster_on(&root, &h, None, KFACTOR, "sync")).await.expect("restart the cluster");
    let client = connect(&nodes[0].addr).await;
    // Each partition is restored from the node that held it last, and the others rejoin it.
    wait_fully_replicated(&client, KFACTOR, LIVENESS_LIMIT, "the cluster did not come back whole").await;
    for n in &nodes {
        let c = connect(&n.addr).await;
        for k in 0..2 * ROWS_PER_PHASE {
            let r = call(&c, "KV.select", vec![Value::Int(k)]).await.expect("a read was answered");
            assert_eq!(r.status, 1, "{:?}", r.status_string);
            assert_eq!(r.tables[0].rows.first().map(|row| row[1].clone()), Some(s(&format!("v{k}"))), "row {k} after the restart");
        }
        let counted = call(&c, "@AdHoc", vec![s("SELECT COUNT(*) FROM copy")]).await.expect("a count was answered");
        assert_eq!(
            counted.tables.first().map(|t| t.rows[0][0].clone()),
            Some(Value::Int(ROWS_PER_PHASE)),
            "rows copied before the restart"
        );
    }
}
