//! End-to-end tests of TTL (`USING TTL`): expired rows are deleted in the background in
//! batches while others stay, ALTER and DROP change it, bad columns are refused, and it is
//! schema that survives a restart, where the command log's replay deletes the same rows.

mod common;

use std::time::{Duration, Instant};

use common::{adhoc, Server, TempDir};
use lockstep_client::Client;
use lockstep_core::Value;

/// 2000-01-01 and 2100-01-01, in µs: long expired, and not expiring while a test runs.
const OLD_MICROS: i64 = 946_684_800_000_000;
const NEW_MICROS: i64 = 4_102_444_800_000_000;
/// How long a test waits for the background deletion before it fails.
const DEADLINE_S: u64 = 30;

async fn count(client: &Client, sql: &str) -> i64 {
    adhoc(client, sql).await.tables[0].rows[0][0].as_i64().expect("a count")
}

async fn insert(client: &Client, table: &str, from: i64, n: i64, at: i64) {
    for id in from..from + n {
        let r = client.call(&format!("{table}.insert"), vec![Value::Int(id), Value::Timestamp(at)]).await.expect("insert");
        assert_eq!(r.status, 1, "{:?}", r.status_string);
    }
}

/// Polls `sql` (a count) until it is `want`; false when the deadline passes first.
async fn becomes(client: &Client, sql: &str, want: i64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while Instant::now() < deadline {
        if count(client, sql).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// `@Statistics TTL`'s (ROWS_DELETED, RUNS) for `table`.
async fn ttl_stats(client: &Client, table: &str) -> Option<(i64, i64)> {
    let r = client.call("@Statistics", vec![Value::from("TTL"), Value::Int(0)]).await.expect("statistics");
    assert_eq!(r.status, 1, "{:?}", r.status_string);
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).expect("column");
    t.rows
        .iter()
        .find(|row| row[col("TABLE_NAME")] == Value::from(table))
        .map(|row| (row[col("ROWS_DELETED")].as_i64().unwrap_or(-1), row[col("RUNS")].as_i64().unwrap_or(-1)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_rows_go_in_batches_and_the_rest_stay_through_a_restart() {
    let dir = TempDir::new("ttl");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE TABLE events (id BIGINT NOT NULL, at TIMESTAMP NOT NULL, PRIMARY KEY (id)) \
           USING TTL 1 HOURS ON COLUMN at BATCH_SIZE 3 MAX_FREQUENCY 10; \
         PARTITION TABLE events ON COLUMN id;",
    )
    .await;
    insert(&client, "events", 0, 30, OLD_MICROS).await;
    insert(&client, "events", 100, 20, NEW_MICROS).await;
    assert!(becomes(&client, "SELECT COUNT(*) FROM events WHERE at < NOW", 0).await, "expired rows were not deleted");
    assert_eq!(count(&client, "SELECT COUNT(*) FROM events").await, 20, "rows that have not expired stay");
    let (deleted, runs) = ttl_stats(&client, "EVENTS").await.expect("EVENTS in @Statistics TTL");
    assert_eq!(deleted, 30);
    // 30 rows over 2 partitions, at most 3 per partition per run: at least 5 runs.
    assert!(runs >= 5, "{runs} runs deleted 30 rows in batches of at most 3 per partition");

    // The deletions were logged calls: the replay after a restart deletes the same rows
    // and no others, and the TTL is still there for rows that expire later. Slowed down
    // first to a row per partition per second, so that rows the replay left would still
    // be there when counted, not deleted again by the restarted server's own runs.
    adhoc(&client, "ALTER TABLE events ALTER USING TTL 1 HOURS ON COLUMN at BATCH_SIZE 1 MAX_FREQUENCY 1").await;
    drop(client);
    assert!(server.stop().success());
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    assert_eq!(count(&client, "SELECT COUNT(*) FROM events").await, 20);
    insert(&client, "events", 200, 4, OLD_MICROS).await;
    assert!(becomes(&client, "SELECT COUNT(*) FROM events", 20).await, "the TTL did not survive the restart");
}

/// The calls of `procedure` counted by `@Statistics PROCEDURE`, over every partition.
async fn invocations(client: &Client, procedure: &str) -> i64 {
    let r = client.call("@Statistics", vec![Value::from("PROCEDURE"), Value::Int(0)]).await.expect("statistics");
    assert_eq!(r.status, 1, "{:?}", r.status_string);
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).expect("column");
    t.rows.iter().filter(|row| row[col("PROCEDURE")] == Value::from(procedure)).filter_map(|row| row[col("INVOCATIONS")].as_i64()).sum()
}

/// A large BATCH_SIZE is deleted in calls of at most 25 rows, each sent when the one
/// before it on its partition has answered, so no call holds its partition long; the round
/// still deletes the whole batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_is_deleted_in_short_calls() {
    let dir = TempDir::new("ttl-chunks");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE TABLE events (id BIGINT NOT NULL, at TIMESTAMP NOT NULL, PRIMARY KEY (id)); PARTITION TABLE events ON COLUMN id;",
    )
    .await;
    insert(&client, "events", 0, 3000, OLD_MICROS).await;
    adhoc(&client, "ALTER TABLE events USING TTL 1 HOURS ON COLUMN at BATCH_SIZE 100000 MAX_FREQUENCY 1").await;
    assert!(becomes(&client, "SELECT COUNT(*) FROM events", 0).await, "expired rows were not deleted");
    let calls = invocations(&client, "EVENTS.ttl_delete").await;
    let (deleted, runs) = ttl_stats(&client, "EVENTS").await.expect("EVENTS in @Statistics TTL");
    assert_eq!(deleted, 3000);
    // 3000 rows on 2 partitions at most 25 a call: at least 120 calls in the first run,
    // where one call per partition per run (a run a second) would have made 2.
    assert!(calls >= 120 && calls > 2 * runs + 2, "{calls} calls in {runs} runs");
}

/// The generated deletion names columns quoted: a key and a TTL column whose names must be
/// quoted (a space) work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn columns_whose_names_need_quotes_expire() {
    let dir = TempDir::new("ttl-reserved");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE TABLE reserved (\"ORDER ID\" BIGINT NOT NULL, \"EXPIRES AT\" TIMESTAMP NOT NULL, PRIMARY KEY (\"ORDER ID\")) \
         USING TTL 1 DAYS ON COLUMN \"EXPIRES AT\" MAX_FREQUENCY 10; PARTITION TABLE reserved ON COLUMN \"ORDER ID\";",
    )
    .await;
    insert(&client, "reserved", 0, 10, OLD_MICROS).await;
    assert!(becomes(&client, "SELECT COUNT(*) FROM reserved", 0).await, "expired rows were not deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_and_drop_ttl_change_what_is_deleted() {
    let dir = TempDir::new("ttl-alter");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE TABLE kv (id BIGINT NOT NULL, at TIMESTAMP NOT NULL, PRIMARY KEY (id)) USING TTL 1 DAYS ON COLUMN at MAX_FREQUENCY 10; \
         PARTITION TABLE kv ON COLUMN id; \
         CREATE TABLE plain (id BIGINT NOT NULL, at TIMESTAMP NOT NULL);",
    )
    .await;
    adhoc(&client, "ALTER TABLE kv DROP TTL").await;
    insert(&client, "kv", 0, 10, OLD_MICROS).await;
    // A few of the (10 per second) runs the TTL would have made: nothing may go.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count(&client, "SELECT COUNT(*) FROM kv").await, 10, "a dropped TTL deleted rows");
    assert_eq!(ttl_stats(&client, "KV").await, None, "a dropped TTL is not in @Statistics TTL");

    adhoc(&client, "ALTER TABLE kv USING TTL 1 DAYS ON COLUMN at MAX_FREQUENCY 10").await;
    assert!(becomes(&client, "SELECT COUNT(*) FROM kv", 0).await);

    // ALTER … ALTER USING TTL moves the cutoff: under ten years, rows a year old (which a
    // day's TTL would delete) stay and rows from 2000 go.
    adhoc(&client, "ALTER TABLE kv ALTER USING TTL 3650 DAYS ON COLUMN at MAX_FREQUENCY 10").await;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as i64;
    insert(&client, "kv", 50, 3, now - 365 * 86_400_000_000).await;
    insert(&client, "kv", 60, 2, OLD_MICROS).await;
    assert!(becomes(&client, "SELECT COUNT(*) FROM kv WHERE id >= 60", 0).await);
    assert_eq!(count(&client, "SELECT COUNT(*) FROM kv WHERE id BETWEEN 50 AND 52").await, 3);

    // A replicated table without a primary key: its TTL runs as one multi-partition call.
    adhoc(&client, "ALTER TABLE plain USING TTL 1 SECONDS ON COLUMN at MAX_FREQUENCY 10").await;
    adhoc(&client, "INSERT INTO plain VALUES (1, '2000-01-01 00:00:00')").await;
    adhoc(&client, "INSERT INTO plain VALUES (2, '2100-01-01 00:00:00')").await;
    assert!(becomes(&client, "SELECT COUNT(*) FROM plain", 1).await);
    assert_eq!(count(&client, "SELECT id FROM plain").await, 2);

    for (sql, says) in [
        ("CREATE TABLE bad1 (id BIGINT NOT NULL, v VARCHAR(10) NOT NULL) USING TTL 5 MINUTES ON COLUMN v", "must be a TIMESTAMP"),
        ("CREATE TABLE bad2 (id BIGINT NOT NULL, at TIMESTAMP) USING TTL 5 MINUTES ON COLUMN at", "must be NOT NULL"),
        ("ALTER TABLE plain DROP TTL", ""),
        ("ALTER TABLE plain DROP TTL", "has no TTL"),
    ] {
        let r = client.call("@AdHoc", vec![Value::from(sql)]).await.expect("call");
        if says.is_empty() {
            assert_eq!(r.status, 1, "{sql}: {:?}", r.status_string);
        } else {
            assert_ne!(r.status, 1, "{sql} should fail");
            assert!(r.status_string.as_deref().unwrap_or("").contains(says), "{sql}: {:?}", r.status_string);
        }
    }
}
