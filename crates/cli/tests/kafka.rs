//! End-to-end tests against a real Apache Kafka broker (compat/kafka/broker.sh: Kafka 4.x in
//! KRaft mode from Maven Central's jars, started and stopped here). The export test writes a
//! stream exported to Kafka while the broker is stopped and restarted and while the server
//! is SIGKILLed, and reads the topic back with Kafka's own console consumer: every committed
//! row arrives, in order per partition, repeated only after the position the exporter had
//! saved. The import test produces messages with Kafka's console producer and loads them
//! with `lockstep load kafka`, killed once midway and run again: no row is lost.
//! They need a JDK and Maven, so `cargo test` skips them; compat/kafka/run.sh runs them.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{adhoc, Server, TempDir, BIN};
use lockstep_client::Client;
use lockstep_core::Value;

/// How long a test waits for rows to arrive (or be loaded) before it fails.
const DEADLINE_S: u64 = 90;
const SITES: u32 = 2;
/// The console consumer stops after this long without a new message.
const CONSUMER_IDLE_MS: u64 = 4000;

fn broker_script() -> PathBuf {
    common::repo_root().join("compat/kafka/broker.sh")
}

/// A Kafka broker in a directory of its own; stopped on drop.
struct Broker {
    dir: PathBuf,
}

impl Broker {
    fn run(cmd: &str, dir: &Path) {
        let out = Command::new("bash").arg(broker_script()).arg(cmd).arg(dir).output().expect("bash runs");
        assert!(
            out.status.success(),
            "broker.sh {cmd} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn start(dir: &Path) -> Broker {
        Self::run("start", dir);
        Broker { dir: dir.to_path_buf() }
    }

    fn address(&self) -> String {
        let port = std::fs::read_to_string(self.dir.join("port")).expect("broker port");
        format!("127.0.0.1:{}", port.trim())
    }

    fn stop(&self) {
        Self::run("stop", &self.dir);
    }

    fn restart(&self) {
        Self::run("restart", &self.dir);
    }

    /// Runs a Kafka tool class against this broker, `input` on its standard input.
    fn tool(&self, class: &str, args: &[&str], input: &[u8]) -> String {
        let mut child = Command::new("bash")
            .arg(broker_script())
            .args(["tool", self.dir.to_str().expect("path"), class])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run a Kafka tool");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input).expect("write to the tool");
        drop(stdin);
        let out = child.wait_with_output().expect("tool output");
        assert!(out.status.success(), "{class} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every message of `topic` as (Kafka partition, key, value), in offset order within
    /// each partition, read with Kafka's console consumer.
    fn consume(&self, topic: &str) -> Vec<(i64, String, serde_json::Value)> {
        let idle = CONSUMER_IDLE_MS.to_string();
        let text = self.tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &[
                "--topic",
                topic,
                "--from-beginning",
                "--timeout-ms",
                &idle,
                "--property",
                "print.partition=true",
                "--property",
                "print.key=true",
            ],
            b"",
        );
        text.lines()
            .filter_map(|l| {
                let mut f = l.splitn(3, '\t');
                let partition = f.next()?.strip_prefix("Partition:")?.parse().ok()?;
                let key = f.next()?.to_string();
                let value = serde_json::from_str(f.next()?).ok()?;
                Some((partition, key, value))
            })
            .collect()
    }

    fn produce(&self, topic: &str, lines: &str) {
        self.tool("org.apache.kafka.tools.ConsoleProducer", &["--topic", topic], lines.as_bytes());
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = Command::new("bash").arg(broker_script()).arg("stop").arg(&self.dir).status();
    }
}

const STREAM: &str = "CREATE STREAM ev PARTITION ON COLUMN id EXPORT TO TARGET hook (id BIGINT NOT NULL, note VARCHAR(20));";

async fn insert(client: &Client, from: i64, to: i64) {
    for id in from..to {
        adhoc(client, &format!("INSERT INTO ev VALUES ({id}, 'n{id}')")).await;
    }
}

/// `@Statistics EXPORT` rows of target HOOK: (ACTIVE, TUPLE_DELIVERED, TUPLE_PENDING, LAST_ERROR).
async fn export_stats(client: &Client) -> Vec<(String, i64, i64, String)> {
    let r = client.call("@Statistics", vec![Value::from("EXPORT"), Value::Int(0)]).await.expect("statistics");
    assert_eq!(r.status, 1, "{:?}", r.status_string);
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).expect("column");
    t.rows
        .iter()
        .filter(|row| row[col("TARGET")] == Value::from("HOOK"))
        .map(|row| {
            let s = |c: &str| if let Value::Str(s) = &row[col(c)] { s.to_string() } else { String::new() };
            assert_eq!(s("TARGET_TYPE"), "kafka");
            (
                s("ACTIVE"),
                row[col("TUPLE_DELIVERED")].as_i64().unwrap_or(-1),
                row[col("TUPLE_PENDING")].as_i64().unwrap_or(-1),
                s("LAST_ERROR"),
            )
        })
        .collect()
}

/// The sum of a metric's samples on `/metrics`.
fn metric_sum(server: &Server, name: &str) -> i64 {
    let url = format!("http://{}/metrics", server.http.clone().expect("the HTTP port is on"));
    let text = ureq::get(&url).call().expect("GET /metrics").body_mut().read_to_string().expect("read metrics");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<i64>().ok()))
        .sum()
}

async fn wait_until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while !f().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Inserts ids from `from` on until `stop` is set or a call fails (the server was killed);
/// returns the ids the server acknowledged and the one in flight when it failed, if any.
async fn write_until_stopped(client: Client, from: i64, stop: Arc<AtomicBool>) -> (Vec<i64>, Option<i64>) {
    let mut acked = Vec::new();
    let mut id = from;
    while !stop.load(Ordering::Relaxed) {
        match client.call("@AdHoc", vec![Value::from(format!("INSERT INTO ev VALUES ({id}, 'n{id}')").as_str())]).await {
            Ok(r) if r.status == 1 => acked.push(id),
            _ => return (acked, Some(id)),
        }
        id += 1;
    }
    (acked, None)
}

/// These tests need a JDK and Kafka's jars: `compat/kafka/run.sh` installs them and runs
/// the tests with LOCKSTEP_KAFKA=1 (scripts/test.sh calls it); without it they return at
/// once, saying so.
fn kafka_tests_on() -> bool {
    let on = std::env::var("LOCKSTEP_KAFKA").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("Kafka tests not run here: compat/kafka/run.sh runs them against a real broker");
    }
    on
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_to_kafka_survives_a_broker_outage_and_a_server_kill() {
    if !kafka_tests_on() {
        return;
    }
    let dir = TempDir::new("kafka-export");
    let data = dir.0.join("data");
    let broker = Broker::start(&dir.0.join("kafka"));
    let config = dir.0.join("lockstep.toml");
    std::fs::write(
        &config,
        format!(
            "[[export.targets]]\nname = \"hook\"\ntype = \"kafka\"\nbrokers = \"{}\"\ntopic = \"ev\"\nkey_column = \"id\"\nbatch_size = 20\nlinger_ms = 5\n",
            broker.address()
        ),
    )
    .expect("write config");
    let args = ["--sites", &SITES.to_string(), "--config", config.to_str().expect("path"), "--http", "127.0.0.1:0"];
    let server = Server::start_with(&data, &args, "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, STREAM).await;
    insert(&client, 0, 100).await;
    wait_until("the first 100 rows are delivered", || async { export_stats(&client).await.iter().map(|s| s.1).sum::<i64>() == 100 }).await;

    // The broker stops: transactions go on, the rows wait on disk, the backlog is visible.
    broker.stop();
    insert(&client, 100, 200).await;
    wait_until("the exporters see the outage", || async {
        let stats = export_stats(&client).await;
        stats.iter().all(|(active, _, _, err)| active == "FALSE" && err.contains("Kafka")) && stats.iter().map(|s| s.2).sum::<i64>() == 100
    })
    .await;
    let backlog = tokio::task::block_in_place(|| metric_sum(&server, "lockstep_export_backlog_rows"));
    assert_eq!(backlog, 100, "the rows written during the outage are the backlog in /metrics");

    // It comes back while rows are written, and the server is SIGKILLed mid-export.
    broker.restart();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(write_until_stopped(server.client().await, 200, stop.clone()));
    wait_until("the writer's rows are being delivered", || async { export_stats(&client).await.iter().map(|s| s.1).sum::<i64>() > 250 })
        .await;
    drop(client);
    drop(server); // SIGKILL
    let acked_at_kill = common::export::acknowledged_seqs(&data, "HOOK", SITES);
    let (mut committed, in_doubt) = writer.await.expect("writer");
    assert!(committed.len() > 10, "the writer wrote while the exporter delivered");

    let server = Server::start_with(&data, &args, "127.0.0.1:0");
    let client = server.client().await;
    insert(&client, 10_000, 10_020).await;
    committed.extend(0..200);
    committed.extend(10_000..10_020);
    let committed: BTreeSet<i64> = committed.into_iter().collect();
    let mut possible = committed.clone();
    possible.extend(in_doubt);

    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    let messages = loop {
        let m = tokio::task::block_in_place(|| broker.consume("ev"));
        let ids: BTreeSet<i64> = m.iter().filter_map(|(_, _, v)| v["row"]["ID"].as_i64()).collect();
        if committed.is_subset(&ids) {
            assert!(ids.is_subset(&possible), "rows that were never written arrived: {:?}", ids.difference(&possible).collect::<Vec<_>>());
            break m;
        }
        assert!(Instant::now() < deadline, "{} of {} committed rows reached Kafka", committed.intersection(&ids).count(), committed.len());
    };

    // One Lockstep partition per Kafka partition (the exporter made the topic with as many);
    // the key is the key column's value.
    let mut seqs: BTreeMap<i64, Vec<u64>> = BTreeMap::new();
    for (kafka_partition, key, v) in &messages {
        let partition = v["partition"].as_i64().expect("partition");
        assert_eq!(
            *kafka_partition,
            partition % i64::from(SITES),
            "Lockstep partition {partition} went to Kafka partition {kafka_partition}"
        );
        assert_eq!(key, &v["row"]["ID"].to_string(), "the message key is the key column");
        seqs.entry(partition).or_default().push(v["seq"].as_u64().expect("seq"));
    }
    // In order per partition: every sequence number, none missing; a repeat only after
    // the position saved when the server was killed, resent in order from there.
    for (p, s) in &seqs {
        let acked = acked_at_kill[p];
        let mut seen: HashMap<u64, usize> = HashMap::new();
        for q in s {
            *seen.entry(*q).or_default() += 1;
        }
        let max = *s.iter().max().expect("rows");
        assert_eq!(seen.len() as u64, max, "partition {p}: a sequence number is missing");
        for (q, n) in &seen {
            assert!(*n == 1 || *q > acked, "partition {p}: row {q} arrived {n} times but was acknowledged (position {acked})");
        }
        let first_time: Vec<u64> = {
            let mut once = BTreeSet::new();
            s.iter().copied().filter(|q| once.insert(*q)).collect()
        };
        assert_eq!(first_time, (1..=max).collect::<Vec<_>>(), "partition {p} arrived out of order");
        // A resend starts right after the acknowledged position.
        for w in s.windows(2).filter(|w| w[1] <= w[0]) {
            assert!(w[1] > acked, "partition {p}: resent from {} although {acked} was acknowledged", w[1]);
        }
    }
    wait_until("the backlog drains after the restart", || async {
        export_stats(&client).await.iter().all(|(active, _, pending, _)| active == "TRUE" && *pending == 0)
    })
    .await;
}

/// Runs `lockstep load kafka`; returns its exit status and standard output.
fn load_kafka(server: &Server, broker: &Broker, extra: &[&str]) -> (std::process::ExitStatus, String) {
    let out = Command::new(BIN)
        .args(["load", "kafka", "--server", &server.addr, "--brokers", &broker.address(), "--topic", "imp", "--table", "imp"])
        .args(extra)
        .output()
        .expect("run lockstep load kafka");
    (out.status, String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// (rows, distinct ids) of table IMP.
async fn imp_counts(client: &Client) -> (i64, i64) {
    let r = adhoc(client, "SELECT count(*), count(DISTINCT id) FROM imp").await;
    let row = &r.tables[0].rows[0];
    (row[0].as_i64().expect("count"), row[1].as_i64().expect("count"))
}

fn messages(from: i64, to: i64) -> String {
    (from..to).map(|i| format!("{{\"id\": {i}, \"note\": \"m{i}\"}}\n")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_kafka_loads_every_message_and_resumes_after_a_kill() {
    if !kafka_tests_on() {
        return;
    }
    const FIRST: i64 = 2000;
    const ALL: i64 = 12_000;
    const COMMIT_ROWS: i64 = 1000;
    let dir = TempDir::new("kafka-import");
    let broker = Broker::start(&dir.0.join("kafka"));
    let server = Server::start(&dir.0.join("data"), SITES);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE imp (id BIGINT NOT NULL, note VARCHAR(40));").await;
    adhoc(&client, "PARTITION TABLE imp ON COLUMN id;").await;
    tokio::task::block_in_place(|| {
        broker.tool("org.apache.kafka.tools.TopicCommand", &["--create", "--topic", "imp", "--partitions", "3"], b"");
        broker.produce("imp", &messages(0, FIRST));
    });
    let (status, out) = tokio::task::block_in_place(|| load_kafka(&server, &broker, &[]));
    assert!(status.success(), "{out}");
    assert!(out.contains(&format!("{FIRST} messages read, {FIRST} inserted, 0 rejected")), "{out}");
    assert_eq!(imp_counts(&client).await, (FIRST, FIRST));

    // More messages, one bad one among them; the loader is killed midway (one call in
    // flight at a time keeps it slow enough to catch).
    tokio::task::block_in_place(|| broker.produce("imp", &(messages(FIRST, ALL) + "{\"id\": \"not a number\"}\n")));
    let (rejects, rejects_again) = (dir.0.join("rejects-1.txt"), dir.0.join("rejects-2.txt"));
    let mut child = Command::new(BIN)
        .args(["load", "kafka", "--server", &server.addr, "--brokers", &broker.address(), "--topic", "imp", "--table", "imp"])
        .args(["--batch", "1", "--rejects", rejects.to_str().expect("path")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the loader");
    wait_until("the loader is midway", || async { imp_counts(&client).await.0 > FIRST + COMMIT_ROWS }).await;
    child.kill().expect("SIGKILL the loader");
    let _ = child.wait();
    let at_kill = imp_counts(&client).await.0;
    assert!(at_kill < ALL, "the loader finished before it was killed: the test proves nothing");

    let (status, out) = tokio::task::block_in_place(|| load_kafka(&server, &broker, &["--rejects", rejects_again.to_str().expect("path")]));
    assert!(status.code() == Some(0) || status.code() == Some(1), "{out}");
    let (rows, distinct) = imp_counts(&client).await;
    assert_eq!(distinct, ALL, "a message was lost");
    // Loaded again only after the last saved position: at most one unsaved chunk.
    assert!(rows - ALL <= COMMIT_ROWS, "{} rows loaded twice", rows - ALL);
    // The bad message is reported by whichever run read it.
    let rejected = std::fs::read_to_string(&rejects).unwrap_or_default() + &std::fs::read_to_string(&rejects_again).unwrap_or_default();
    assert!(rejected.lines().any(|l| l.starts_with("imp:") && l.contains("not a valid BIGINT")), "{rejected}");
    // Nothing is loaded twice by a run that starts after a complete one.
    let (status, out) = tokio::task::block_in_place(|| load_kafka(&server, &broker, &[]));
    assert!(status.success() && out.contains("0 messages read"), "{out}");
    assert_eq!(imp_counts(&client).await, (rows, distinct));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_consumes_the_topics_its_configuration_names() {
    if !kafka_tests_on() {
        return;
    }
    const FIRST: i64 = 500;
    const ALL: i64 = 800;
    let dir = TempDir::new("kafka-server-import");
    let broker = Broker::start(&dir.0.join("kafka"));
    tokio::task::block_in_place(|| {
        broker.tool("org.apache.kafka.tools.TopicCommand", &["--create", "--topic", "orders", "--partitions", "2"], b"");
        broker.produce("orders", &(0..FIRST).map(|i| format!("{i},o{i}\n")).collect::<String>());
    });
    let config = dir.0.join("lockstep.toml");
    std::fs::write(
        &config,
        format!("[[import.kafka]]\nbrokers = \"{}\"\ntopic = \"orders\"\ntable = \"orders\"\nformat = \"csv\"\n", broker.address()),
    )
    .expect("write config");
    let server = Server::start_with(
        &dir.0.join("data"),
        &["--sites", &SITES.to_string(), "--config", config.to_str().expect("path")],
        "127.0.0.1:0",
    );
    let client = server.client().await;
    // The table comes after the server: the import waits for it (and retries).
    adhoc(&client, "CREATE TABLE orders (id BIGINT NOT NULL, note VARCHAR(20));").await;
    adhoc(&client, "PARTITION TABLE orders ON COLUMN id;").await;
    let count = || async {
        let r = adhoc(&client, "SELECT count(*), count(DISTINCT id) FROM orders").await;
        (r.tables[0].rows[0][0].as_i64().unwrap_or(-1), r.tables[0].rows[0][1].as_i64().unwrap_or(-1))
    };
    wait_until("the messages already in the topic are loaded", || async { count().await == (FIRST, FIRST) }).await;
    // It goes on consuming what comes later.
    tokio::task::block_in_place(|| broker.produce("orders", &(FIRST..ALL).map(|i| format!("{i},o{i}\n")).collect::<String>()));
    wait_until("the later messages are loaded", || async { count().await == (ALL, ALL) }).await;
    let r = adhoc(&client, "SELECT next_offset FROM lockstep_kafka_offsets WHERE consumer = 'lockstep-server' AND topic = 'orders'").await;
    let saved: i64 = r.tables[0].rows.iter().filter_map(|row| row[0].as_i64()).sum();
    assert_eq!(saved, ALL, "the saved positions cover every message");
}
