//! Export in a cluster: three nodes with k = 1 export a stream to an HTTP target served by
//! the test, which keeps every row it gets. Only each partition's leader delivers: while no
//! node fails every row arrives exactly once, and the other replicas pass over the rows the
//! leader's target acknowledged (their backlog empties without sending anything). Then the
//! leader of a partition is killed in the middle of a load: every acknowledged row still
//! arrives, numbered the same whichever replica sent it, in order per partition, and the
//! only rows that arrive twice are re-sends after the position the new leader had heard.
//! A node that was down and rejoined numbers rows as its leader does (its image carries the
//! leader's numbering and unacknowledged rows): its buffer drains by the leader's reports,
//! and once it leads, it delivers every row under the number the old leader gave it.
//! Every wait is bounded; nothing asserts a time.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use common::cluster::{free_addrs, members, start_cluster_with, start_node_with, wait_fully_replicated};
use common::export::Collector;
use common::{adhoc, TempDir};
use lockstep_client::{Client, ClientConfig};
use lockstep_core::Value;

/// Longest any step waits for rows or the cluster to get somewhere.
const LIVENESS_LIMIT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(100);
const NODES: usize = 3;
const KFACTOR: u32 = 1;
/// Rows written while every node runs, then during the load the kill falls in.
const HEALTHY_ROWS: i64 = 200;
const LOAD_ROWS: i64 = 400;
/// Rows written while a node is down, after it rejoined, and once it leads.
const WHILE_DOWN_ROWS: i64 = 200;
const REJOINED_ROWS: i64 = 100;
const LEADING_ROWS: i64 = 200;

const STREAM: &str = "CREATE STREAM ev PARTITION ON COLUMN id EXPORT TO TARGET hook (id BIGINT NOT NULL, note VARCHAR(20));";

async fn connect(addr: &str) -> Client {
    Client::connect(addr, ClientConfig::default()).await.expect("connect to a node")
}

/// Each partition's leader (host id), from `@Statistics TOPO`; none while the node cannot
/// answer it (during a failover).
async fn leaders(client: &Client) -> Vec<Option<usize>> {
    let r = client.call("@Statistics", vec![Value::from("TOPO"), Value::Int(0)]).await.expect("TOPO");
    let Some(t) = r.tables.first().filter(|_| r.status == 1) else { return Vec::new() };
    // The last row is the multi-partition coordinator's.
    t.rows
        .split_last()
        .map_or(&[][..], |(_, partitions)| partitions)
        .iter()
        .map(|row| match &row[2] {
            Value::Str(l) => l.split(':').next().and_then(|h| h.parse().ok()),
            _ => None,
        })
        .collect()
}

/// `@Statistics EXPORT` of target HOOK on one node: (partition, rows written, delivered,
/// pending) per partition.
async fn export_lanes(client: &Client) -> Vec<(i64, i64, i64, i64)> {
    let r = client.call("@Statistics", vec![Value::from("EXPORT"), Value::Int(0)]).await.expect("statistics");
    assert_eq!(r.status, 1, "{:?}", r.status_string);
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).expect("column");
    t.rows
        .iter()
        .filter(|row| row[col("TARGET")] == Value::from("HOOK"))
        .map(|row| {
            let n = |c: &str| row[col(c)].as_i64().unwrap_or(-1);
            (n("PARTITION_ID"), n("TUPLE_COUNT"), n("TUPLE_DELIVERED"), n("TUPLE_PENDING"))
        })
        .collect()
}

/// Waits until every id in `ids` has arrived.
async fn wait_for_ids(rx: &Collector, ids: &BTreeSet<i64>) {
    let deadline = Instant::now() + LIVENESS_LIMIT;
    loop {
        let got = rx.ids();
        if ids.is_subset(&got) {
            return;
        }
        assert!(Instant::now() < deadline, "{} acknowledged rows never arrived", ids.difference(&got).count());
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until no node holds a row of HOOK it has not delivered or passed over.
async fn wait_until_drained(clients: &[&Client]) {
    let deadline = Instant::now() + LIVENESS_LIMIT;
    for c in clients {
        loop {
            let lanes = export_lanes(c).await;
            if lanes.iter().all(|l| l.3 == 0) {
                break;
            }
            assert!(Instant::now() < deadline, "a replica never passed over the rows its leader delivered: {lanes:?}");
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Inserts `from..to` through `client`, each row again until it is acknowledged (the
/// node may not have the stream yet, or its partition may be failing over); returns them.
/// A call that failed in a failover may have run too: its row can arrive under two numbers.
async fn load(client: &Client, from: i64, to: i64) -> BTreeSet<i64> {
    for id in from..to {
        let sql = format!("INSERT INTO ev VALUES ({id}, 'n{id}')");
        let deadline = Instant::now() + LIVENESS_LIMIT;
        while !client.call("@AdHoc", vec![Value::from(sql.as_str())]).await.is_ok_and(|r| r.status == 1) {
            assert!(Instant::now() < deadline, "row {id} was never acknowledged");
            tokio::time::sleep(POLL).await;
        }
    }
    (from..to).collect()
}

/// A cluster exporting to a collector: its nodes, their internal addresses and the
/// configuration file's path (to start a node again).
struct Exporting {
    rx: std::sync::Arc<Collector>,
    nodes: Vec<Option<common::Server>>,
    hosts: Vec<String>,
    config: String,
}

/// Starts the cluster with target HOOK and makes the stream; returns it and a client of
/// each node.
async fn start_exporting(dir: &TempDir) -> (Exporting, Vec<Client>) {
    let (rx, url) = Collector::start();
    let config = dir.0.join("lockstep.toml");
    std::fs::write(&config, format!("[[export.targets]]\nname = \"hook\"\ntype = \"http\"\nurl = \"{url}\"\n")).expect("write config");
    let (root, hosts, config) = (dir.0.clone(), free_addrs(NODES), config.to_str().expect("path").to_string());
    let (h, c) = (hosts.clone(), config.clone());
    let nodes: Vec<Option<common::Server>> =
        tokio::task::spawn_blocking(move || start_cluster_with(&root, &h, None, KFACTOR, "off", &["--config", &c]))
            .await
            .expect("start the cluster")
            .into_iter()
            .map(Some)
            .collect();
    let mut clients = Vec::new();
    for n in &nodes {
        clients.push(connect(&n.as_ref().expect("node runs").addr).await);
    }
    adhoc(&clients[0], STREAM).await;
    (Exporting { rx, nodes, hosts, config }, clients)
}

/// Checks what arrived, per partition: one row per sequence number whichever node sent
/// it, none missing, and in order but for re-sends that start again after the position
/// the partition's replicas had heard (`heard`). Returns the rows that arrived per partition.
fn check_numbering(rx: &Collector, heard: &BTreeMap<i64, u64>) -> BTreeMap<i64, Vec<(u64, i64)>> {
    let by_partition = rx.by_partition();
    for (p, rows) in &by_partition {
        let mut row_of: HashMap<u64, i64> = HashMap::new();
        for (seq, id) in rows {
            let first = *row_of.entry(*seq).or_insert(*id);
            assert_eq!(first, *id, "partition {p}: sequence number {seq} came with rows {first} and {id}");
        }
        let max = rows.iter().map(|r| r.0).max().unwrap_or(0);
        assert_eq!(row_of.len() as u64, max, "partition {p}: a sequence number is missing");
        let heard = heard.get(p).copied().unwrap_or(0);
        for w in rows.windows(2) {
            let (a, b) = (w[0].0, w[1].0);
            if b != a + 1 {
                assert!(b <= a && b > heard, "partition {p}: {b} after {a} (the replicas had heard {heard}): {rows:?}");
            }
        }
    }
    by_partition
}

/// The highest sequence number that arrived, per partition.
fn highest_seqs(rx: &Collector) -> BTreeMap<i64, u64> {
    rx.by_partition().iter().map(|(p, rows)| (*p, rows.iter().map(|r| r.0).max().unwrap_or(0))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_leaders_deliver_and_a_failover_resends_only_after_the_position_it_heard() {
    let dir = TempDir::new("cluster-export");
    let (Exporting { rx, mut nodes, .. }, mut clients) = start_exporting(&dir).await;
    let leaders = leaders(&clients[0]).await;
    let victim = leaders[0].expect("partition 0 has a leader");
    let writer = (victim + 1) % NODES;

    // Healthy: every row exactly once, and every replica passes over what its leader's target
    // acknowledged, sending nothing.
    let mut acked = load(&clients[writer], 0, HEALTHY_ROWS).await;
    wait_for_ids(&rx, &acked).await;
    wait_until_drained(&clients.iter().collect::<Vec<_>>()).await;
    let mut delivered: HashMap<i64, i64> = HashMap::new();
    for c in &clients {
        for (p, _, d, _) in export_lanes(c).await {
            *delivered.entry(p).or_default() += d;
        }
    }
    let healthy = rx.by_partition();
    for (p, rows) in &healthy {
        let seqs: Vec<u64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(seqs, (1..=rows.len() as u64).collect::<Vec<_>>(), "partition {p}: not each row once, in order");
        assert_eq!(delivered.get(p).copied(), Some(rows.len() as i64), "partition {p}: the nodes together delivered other than once");
    }
    // What each partition's replicas had passed over when the failure came.
    let heard: BTreeMap<i64, u64> = healthy.iter().map(|(p, rows)| (*p, rows.iter().map(|r| r.0).max().unwrap_or(0))).collect();

    // The leader of partition 0 is killed in the middle of a load.
    let load_client = clients.remove(writer);
    let loading = tokio::spawn(async move { (load(&load_client, HEALTHY_ROWS, HEALTHY_ROWS + LOAD_ROWS).await, load_client) });
    let deadline = Instant::now() + LIVENESS_LIMIT;
    while rx.ids().len() < (HEALTHY_ROWS + LOAD_ROWS / 4) as usize {
        assert!(Instant::now() < deadline, "the load never got going");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!loading.is_finished(), "the load ended before the kill: the test would prove nothing");
    drop(nodes[victim].take()); // SIGKILL
    let (during, _load_client) = loading.await.expect("the load");
    acked.extend(during);
    wait_for_ids(&rx, &acked).await;
    let written: BTreeSet<i64> = (0..HEALTHY_ROWS + LOAD_ROWS).collect();
    assert!(rx.ids().is_subset(&written), "rows that were never written arrived");

    // One number, one row, whichever replica numbered it; none missing; in order but for
    // re-sends after the position the replicas had heard.
    for (p, rows) in &check_numbering(&rx, &heard) {
        if leaders[*p as usize] != Some(victim) {
            let distinct: BTreeSet<u64> = rows.iter().map(|r| r.0).collect();
            assert_eq!(distinct.len(), rows.len(), "partition {p} kept its leader, yet rows arrived twice");
        }
    }
    drop(nodes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejoined_node_numbers_rows_like_its_leader_and_delivers_them_alike_once_it_leads() {
    let dir = TempDir::new("cluster-export-rejoin");
    let (Exporting { rx, mut nodes, hosts, config }, mut clients) = start_exporting(&dir).await;
    const P: usize = 0;
    let leader = leaders(&clients[0]).await[P].expect("partition 0 has a leader");
    let placed = members(&clients[0]).await.expect("members");
    let down = placed[P].iter().filter_map(|h| h.parse::<usize>().ok()).find(|h| *h != leader).expect("partition 0 has a replica");
    let writer = (0..NODES).find(|n| *n != leader && *n != down).expect("a third node");
    let mut acked = load(&clients[writer], 0, HEALTHY_ROWS).await;
    wait_for_ids(&rx, &acked).await;
    wait_until_drained(&clients.iter().collect::<Vec<_>>()).await;

    // The replica is down while rows go on being numbered and delivered without it.
    drop(nodes[down].take());
    acked.extend(load(&clients[writer], HEALTHY_ROWS, HEALTHY_ROWS + WHILE_DOWN_ROWS).await);
    wait_for_ids(&rx, &acked).await;
    let (root, h, c) = (dir.0.clone(), hosts.clone(), config.clone());
    nodes[down] = Some(
        tokio::task::spawn_blocking(move || start_node_with(&root, down, &h, None, KFACTOR, "off", &["--config", &c]))
            .await
            .expect("restart the node"),
    );
    clients[down] = connect(&nodes[down].as_ref().expect("node runs").addr).await;
    wait_fully_replicated(&clients[writer], KFACTOR, LIVENESS_LIMIT, "the node did not rejoin its partitions").await;

    // Rows after the rejoin: the rejoined node passes over what the leader delivered, so
    // its buffer drains like the others' (its old files do not keep it from doing so).
    let from = HEALTHY_ROWS + WHILE_DOWN_ROWS;
    acked.extend(load(&clients[writer], from, from + REJOINED_ROWS).await);
    wait_for_ids(&rx, &acked).await;
    wait_until_drained(&clients.iter().collect::<Vec<_>>()).await;
    let heard = highest_seqs(&rx);
    let delivered_before: i64 = export_lanes(&clients[down]).await.iter().filter(|l| l.0 == P as i64).map(|l| l.2).sum();

    // The old leader dies: the rejoined node leads partition 0 and delivers from its files.
    let now_leading = leaders(&clients[writer]).await[P].expect("partition 0 has a leader");
    assert_ne!(now_leading, down, "the rejoined node leads already: killing the leader would prove nothing");
    drop(nodes[now_leading].take());
    let survivors: Vec<usize> = (0..NODES).filter(|n| *n != now_leading).collect();
    let deadline = Instant::now() + LIVENESS_LIMIT;
    while leaders(&clients[down]).await.get(P).copied().flatten() != Some(down) {
        assert!(Instant::now() < deadline, "the rejoined node never took partition 0 over");
        tokio::time::sleep(POLL).await;
    }
    let from = from + REJOINED_ROWS;
    acked.extend(load(&clients[down], from, from + LEADING_ROWS).await);
    wait_for_ids(&rx, &acked).await;
    let written: BTreeSet<i64> = (0..from + LEADING_ROWS).collect();
    assert!(rx.ids().is_subset(&written), "rows that were never written arrived");
    let by_partition = check_numbering(&rx, &heard);
    let delivered_after: i64 = export_lanes(&clients[down]).await.iter().filter(|l| l.0 == P as i64).map(|l| l.2).sum();
    assert!(delivered_after > delivered_before, "the rejoined node delivered nothing of partition 0 once it led it");
    assert!(by_partition[&(P as i64)].iter().any(|r| r.0 > heard[&(P as i64)]), "no row of partition 0 was numbered after the rejoin");
    let survivor_clients: Vec<&Client> = survivors.iter().map(|n| &clients[*n]).collect();
    wait_until_drained(&survivor_clients).await;
    drop(nodes);
}
