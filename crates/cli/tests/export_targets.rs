//! End-to-end tests of export targets: a stream exported to an HTTP receiver inside the test
//! that fails (503) for a while, then to the same receiver across a SIGKILL of the server,
//! and to a real PostgreSQL 15. Every committed row must arrive at least once, in order per
//! partition, and rows arrive twice only after the last position the exporter saved.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::export::Collector;
use common::{adhoc, Server, TempDir};
use lockstep_client::Client;
use lockstep_core::Value;

/// How long a test waits for rows to arrive before it fails.
const DEADLINE_S: u64 = 60;
const SITES: u32 = 2;
/// The outage test's backlog limit: about 20 rows.
const BACKLOG_LIMIT_BYTES: u64 = 2000;

/// Waits until every id in `0..n` has arrived at `rx`.
fn wait_for(rx: &Collector, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while rx.ids().len() < n as usize {
        assert!(Instant::now() < deadline, "only {} of {n} rows arrived", rx.ids().len());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(rx.ids(), (0..n).collect(), "rows that were never written arrived");
}

/// Sequence numbers `rx` received, per partition, in arrival order.
fn seqs(rx: &Collector) -> BTreeMap<i64, Vec<u64>> {
    let mut by_part: BTreeMap<i64, Vec<u64>> = BTreeMap::new();
    for r in rx.records() {
        by_part.entry(r["partition"].as_i64().expect("partition")).or_default().push(r["seq"].as_u64().expect("seq"));
    }
    by_part
}

fn write_config(dir: &Path, targets: &str) -> PathBuf {
    let path = dir.join("lockstep.toml");
    std::fs::write(&path, targets).expect("write config");
    path
}

fn start(data: &Path, config: &Path) -> Server {
    Server::start_with(data, &["--sites", &SITES.to_string(), "--config", config.to_str().expect("path")], "127.0.0.1:0")
}

/// The sum of a metric's samples on the `/metrics` page of a server started with `--http`.
fn metric_sum(server: &Server, name: &str) -> i64 {
    let url = format!("http://{}/metrics", server.http.clone().expect("the HTTP port is on"));
    let text = ureq::get(&url).call().expect("GET /metrics").body_mut().read_to_string().expect("read metrics");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<i64>().ok()))
        .sum()
}

async fn insert(client: &Client, from: i64, to: i64) {
    for id in from..to {
        adhoc(client, &format!("INSERT INTO ev VALUES ({id}, 'n{id}')")).await;
    }
}

const STREAM: &str = "CREATE STREAM ev PARTITION ON COLUMN id EXPORT TO TARGET hook (id BIGINT NOT NULL, note VARCHAR(20));";

/// `@Statistics EXPORT` rows of target `hook` (kept upper case, as the catalog names it):
/// (ACTIVE, TUPLE_PENDING, LAST_ERROR, OVER_BACKLOG_LIMIT) each.
async fn export_stats(client: &Client) -> Vec<(String, i64, String, i64)> {
    let r = client.call("@Statistics", vec![Value::from("EXPORT"), Value::Int(0)]).await.expect("statistics");
    assert_eq!(r.status, 1, "{:?}", r.status_string);
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).expect("column");
    t.rows
        .iter()
        .filter(|row| row[col("TARGET")] == Value::from("HOOK"))
        .map(|row| {
            let s = |c: &str| if let Value::Str(s) = &row[col(c)] { s.to_string() } else { String::new() };
            (
                s("ACTIVE"),
                row[col("TUPLE_PENDING")].as_i64().unwrap_or(-1),
                s("LAST_ERROR"),
                row[col("OVER_BACKLOG_LIMIT")].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

/// Each partition's sequence numbers, as received, go 1, 2, 3 … with none missing.
fn assert_in_order_exactly(seqs: &BTreeMap<i64, Vec<u64>>) {
    for (p, s) in seqs {
        let want: Vec<u64> = (1..=s.len() as u64).collect();
        assert_eq!(s, &want, "partition {p} received rows out of order or with gaps");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_written_during_an_outage_arrive_after_it_in_order() {
    let dir = TempDir::new("export-http");
    let (rx, url) = Collector::start();
    // A small backlog limit: the outage passes it, and no row is lost for it.
    let config = write_config(
        &dir.0,
        &format!("[[export.targets]]\nname = \"hook\"\ntype = \"http\"\nurl = \"{url}\"\nmax_backlog_bytes = {BACKLOG_LIMIT_BYTES}\n"),
    );
    let server = start(&dir.0.join("data"), &config);
    let client = server.client().await;
    adhoc(&client, STREAM).await;
    insert(&client, 0, 50).await;
    tokio::task::block_in_place(|| wait_for(&rx, 50));

    rx.failing.store(true, Ordering::Relaxed);
    insert(&client, 50, 150).await;
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while rx.refused.load(Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "the exporter never tried during the outage");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Transactions go on while the target is down; the backlog and the error are visible.
    insert(&client, 150, 160).await;
    let stats = export_stats(&client).await;
    assert!(
        stats.iter().any(|(active, pending, err, over)| active == "FALSE" && *pending > 20 && err.contains("503") && *over == 1),
        "{stats:?}"
    );

    rx.failing.store(false, Ordering::Relaxed);
    tokio::task::block_in_place(|| wait_for(&rx, 160));
    assert_in_order_exactly(&seqs(&rx));
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while !export_stats(&client).await.iter().all(|(active, pending, _, over)| active == "TRUE" && *pending == 0 && *over == 0) {
        assert!(Instant::now() < deadline, "the backlog never drained: {:?}", export_stats(&client).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_export_resends_only_after_the_acknowledged_position() {
    let dir = TempDir::new("export-kill");
    let data = dir.0.join("data");
    let (rx, url) = Collector::start();
    let config = write_config(&dir.0, &format!("[[export.targets]]\nname = \"hook\"\ntype = \"http\"\nurl = \"{url}\"\n"));
    // Slow answers keep a batch in flight when the server is killed.
    rx.delay_ms.store(200, Ordering::Relaxed);
    let server = start(&data, &config);
    let client = server.client().await;
    adhoc(&client, STREAM).await;
    insert(&client, 0, 100).await;
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while rx.records().is_empty() {
        assert!(Instant::now() < deadline, "nothing arrived before the kill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    insert(&client, 100, 200).await;
    drop(client);
    drop(server); // SIGKILL
    let acked = common::export::acknowledged_seqs(&data, "HOOK", SITES);
    let before: Vec<serde_json::Value> = rx.records();
    assert!(before.len() < 200, "the kill came after everything was delivered: the test proves nothing");

    rx.delay_ms.store(0, Ordering::Relaxed);
    let server = start(&data, &config);
    let client = server.client().await;
    insert(&client, 200, 220).await;
    tokio::task::block_in_place(|| wait_for(&rx, 220));

    // In order per partition, and every row that came twice lies after the position saved
    // when the server died.
    for (p, seqs) in seqs(&rx) {
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for s in &seqs {
            *seen.entry(*s).or_default() += 1;
        }
        let max = *seqs.iter().max().expect("rows");
        assert_eq!(seen.len() as u64, max, "partition {p}: a sequence number is missing");
        for (s, n) in seen {
            assert!(n == 1 || s > acked[&p], "partition {p}: row {s} arrived {n} times but was acknowledged (position {})", acked[&p]);
        }
        let mut sorted = seqs.clone();
        sorted.dedup();
        assert!(sorted.windows(2).all(|w| w[0] < w[1] || w[1] > acked[&p]), "partition {p} out of order: {seqs:?}");
    }
    // Replay of the command log wrote no row a second time into the files.
    let ids: Vec<i64> = rx.records().iter().filter_map(|r| r["row"]["ID"].as_i64()).collect();
    let distinct_seqs: usize = seqs(&rx).values().map(|s| s.iter().collect::<std::collections::BTreeSet<_>>().len()).sum();
    assert_eq!(distinct_seqs, 220, "rows were numbered twice: {} records for 220 rows ({} ids)", distinct_seqs, ids.len());
    drop(before);
}

fn peers_script() -> PathBuf {
    common::repo_root().join("scripts/peers.sh")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_inserted_into_a_postgresql_table() {
    let dir = TempDir::new("export-pg");
    let pg_dir = dir.0.join("pg");
    let port = 24_000 + (std::process::id() % 4000) as u16;
    let out = std::process::Command::new("bash")
        .arg(peers_script())
        .args(["start", "postgres", pg_dir.to_str().expect("path"), &port.to_string()])
        .env("PEER_MEMORY_MB", "256")
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "cannot start PostgreSQL 15: {} (install it with: scripts/peers.sh install)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    struct StopPg(PathBuf);
    impl Drop for StopPg {
        fn drop(&mut self) {
            let _ =
                std::process::Command::new("bash").arg(peers_script()).args(["stop", "postgres", self.0.to_str().unwrap_or("")]).status();
        }
    }
    let _stop = StopPg(pg_dir.clone());
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let (pg, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect to PostgreSQL");
    tokio::spawn(conn);
    pg.batch_execute("CREATE TABLE events (id BIGINT NOT NULL, note TEXT)").await.expect("create table");

    let config =
        write_config(&dir.0, &format!("[[export.targets]]\nname = \"hook\"\ntype = \"postgresql\"\nurl = \"{url}\"\ntable = \"events\"\n"));
    // The HTTP port is on here, for the export metrics.
    let args = ["--sites", &SITES.to_string(), "--config", config.to_str().expect("path"), "--http", "127.0.0.1:0"];
    let server = Server::start_with(&dir.0.join("data"), &args, "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, STREAM).await;
    insert(&client, 0, 120).await;
    adhoc(&client, "INSERT INTO ev VALUES (120, 'it''s')").await;
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    loop {
        let n: i64 = pg.query_one("SELECT count(DISTINCT id) FROM events", &[]).await.expect("count").get(0);
        if n == 121 {
            break;
        }
        assert!(Instant::now() < deadline, "only {n} of 121 rows reached PostgreSQL");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let row = pg.query_one("SELECT note FROM events WHERE id = 120", &[]).await.expect("row");
    assert_eq!(row.get::<_, String>(0), "it's");
    let sum: i64 = pg.query_one("SELECT sum(id)::BIGINT FROM events", &[]).await.expect("sum").get(0);
    assert_eq!(sum, (0..=120).sum::<i64>(), "a row went to PostgreSQL twice without a restart");
    // The counters move just after PostgreSQL committed: wait for them.
    let server_ref = &server;
    let figures = || {
        tokio::task::block_in_place(|| {
            (metric_sum(server_ref, "lockstep_export_delivered_rows_total"), metric_sum(server_ref, "lockstep_export_backlog_rows"))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while figures() != (121, 0) {
        assert!(Instant::now() < deadline, "metrics (delivered, backlog) are {:?}, not (121, 0)", figures());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
