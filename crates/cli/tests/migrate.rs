//! End-to-end tests of `MIGRATE TO TARGET`: rows migrated to an HTTP receiver inside the
//! test leave their table only once the receiver has taken them (it refuses for a while
//! first; `@Statistics EXPORT` counts them as migrating meanwhile), an update, an upsert or
//! a delete before that is handled, TTL migrates expired rows, and a SIGKILL mid-migration
//! loses no row: each is in the table or at the receiver (or both). Rows migrated to a
//! `file` target leave once their target's files hold them, and a SIGKILL loses none either.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::export::Collector;
use common::{adhoc, scalar, Server, TempDir};
use lockstep_client::Client;
use lockstep_core::Value;

/// How long a test waits for something to happen before it fails.
const DEADLINE_S: u64 = 60;
const SITES: u32 = 2;

fn start(dir: &Path, data: &Path, url: &str) -> Server {
    start_with_target(dir, data, &format!("type = \"http\"\nurl = \"{url}\""))
}

/// A server whose target `archive` is its own export files.
fn start_file(dir: &Path, data: &Path) -> Server {
    start_with_target(dir, data, "type = \"file\"")
}

fn start_with_target(dir: &Path, data: &Path, target: &str) -> Server {
    let config: PathBuf = dir.join("lockstep.toml");
    std::fs::write(&config, format!("[[export.targets]]\nname = \"archive\"\n{target}\n")).expect("write config");
    Server::start_with(data, &["--sites", &SITES.to_string(), "--config", config.to_str().expect("path")], "127.0.0.1:0")
}

/// The ids of the migrated rows in the file target's segments (complete lines only).
fn file_ids(data: &Path) -> BTreeSet<i64> {
    let mut ids = BTreeSet::new();
    let Ok(partitions) = std::fs::read_dir(data.join("export").join("ARCHIVE")) else { return ids };
    for partition in partitions.map_while(Result::ok) {
        let Ok(segments) = std::fs::read_dir(partition.path()) else { continue };
        for segment in segments.map_while(Result::ok).filter(|s| s.path().extension().is_some_and(|e| e == "jsonl")) {
            let text = std::fs::read_to_string(segment.path()).unwrap_or_default();
            let lines = text.split_inclusive('\n').filter(|l| l.ends_with('\n'));
            let records = lines.filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
            ids.extend(records.filter(|r| r["migrated"] == true).filter_map(|r| r["row"]["ID"].as_i64()));
        }
    }
    ids
}

/// The sum of `@Statistics EXPORT`'s TUPLE_MIGRATING over the partitions of target ARCHIVE.
async fn migrating_in_statistics(client: &Client) -> i64 {
    let r = client.call("@Statistics", vec![Value::from("EXPORT"), Value::Int(0)]).await.expect("statistics");
    let t = &r.tables[0];
    let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).expect("column");
    let (target, migrating) = (col("TARGET"), col("TUPLE_MIGRATING"));
    t.rows.iter().filter(|row| row[target].as_str() == Some("ARCHIVE")).filter_map(|row| row[migrating].as_i64()).sum()
}

const EVENTS: &str = "CREATE TABLE events MIGRATE TO TARGET archive (id BIGINT NOT NULL, note VARCHAR(20), PRIMARY KEY (id));";

async fn schema(client: &Client) {
    adhoc(client, EVENTS).await;
    adhoc(client, "PARTITION TABLE events ON COLUMN id").await;
}

async fn insert(client: &Client, from: i64, to: i64) {
    for id in from..to {
        adhoc(client, &format!("INSERT INTO events VALUES ({id}, 'n{id}')")).await;
    }
}

/// The ids of rows a query over `events` returns.
async fn ids(client: &Client, sql: &str) -> BTreeSet<i64> {
    let r = adhoc(client, sql).await;
    r.tables[0].rows.iter().filter_map(|row| row[0].as_i64()).collect()
}

async fn count(client: &Client, sql: &str) -> i64 {
    scalar(&adhoc(client, sql).await).as_i64().unwrap_or(-1)
}

/// Waits until `ready` holds, polling.
async fn wait_until<F: std::future::Future<Output = bool>>(what: &str, mut ready: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(DEADLINE_S);
    while !ready().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrated_rows_leave_only_once_the_target_has_them() {
    let dir = TempDir::new("migrate-ack");
    let (rx, url) = Collector::start();
    rx.failing.store(true, Ordering::Relaxed);
    let server = start(&dir.0, &dir.0.join("data"), &url);
    let client = server.client().await;
    schema(&client).await;
    adhoc(&client, "CREATE TABLE plain (id BIGINT NOT NULL, PRIMARY KEY (id))").await;
    insert(&client, 0, 40).await;

    let r = client.call("@AdHoc", vec![Value::from("MIGRATE FROM plain WHERE id = 1")]).await.expect("call");
    assert_ne!(r.status, 1);
    assert!(r.status_string.as_deref().unwrap_or("").contains("not declared MIGRATE TO TARGET"), "{:?}", r.status_string);

    // Across partitions (multi-partition), then one row by key (single-partition).
    assert_eq!(count(&client, "MIGRATE FROM events WHERE id < 20").await, 20);
    assert_eq!(count(&client, "MIGRATE FROM events WHERE id = 30").await, 1);
    assert_eq!(count(&client, "MIGRATE FROM events WHERE id < 20 OR id = 30").await, 0, "migrating rows are not migrated twice");
    wait_until("the target refused a batch", || async { rx.refused.load(Ordering::Relaxed) > 0 }).await;
    // Refused: nothing leaves the table; the rows are visibly migrating.
    assert_eq!(count(&client, "SELECT COUNT(*) FROM events").await, 40);
    assert_eq!(count(&client, "SELECT COUNT(*) FROM events WHERE MIGRATING").await, 21);
    assert_eq!(migrating_in_statistics(&client).await, 21, "@Statistics EXPORT counts the rows migrating");
    // Before the acknowledgement: an updated or upserted row stays (unflagged), a deleted
    // one is gone, and a row inserted again with its key is not migrating.
    adhoc(&client, "UPDATE events SET note = 'kept' WHERE id = 5").await;
    adhoc(&client, "UPSERT INTO events VALUES (7, 'upserted')").await;
    adhoc(&client, "DELETE FROM events WHERE id = 6").await;
    adhoc(&client, "INSERT INTO events VALUES (6, 'again')").await;
    assert_eq!(count(&client, "SELECT COUNT(*) FROM events WHERE MIGRATING").await, 18);

    rx.failing.store(false, Ordering::Relaxed);
    let migrated: BTreeSet<i64> = (0..20).chain([30]).collect();
    wait_until("every migrated row arrived", || async { migrated.is_subset(&rx.ids()) }).await;
    wait_until("the acknowledged rows left", || async { count(&client, "SELECT COUNT(*) FROM events").await == 22 }).await;
    let left = ids(&client, "SELECT id FROM events ORDER BY id").await;
    let want: BTreeSet<i64> = (20..40).filter(|i| *i != 30).chain([5, 6, 7]).collect();
    assert_eq!(left, want);
    assert_eq!(count(&client, "SELECT COUNT(*) FROM events WHERE MIGRATING").await, 0);
    assert_eq!(migrating_in_statistics(&client).await, 0);
    assert_eq!(rx.ids(), migrated, "rows that were not migrated arrived");
    assert!(rx.records().iter().all(|r| r["stream"] == "EVENTS" && r["migrated"] == true), "{:?}", rx.records().first());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_on_a_migrating_table_migrates_expired_rows() {
    let dir = TempDir::new("migrate-ttl");
    let (rx, url) = Collector::start();
    let server = start(&dir.0, &dir.0.join("data"), &url);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE TABLE events MIGRATE TO TARGET archive (id BIGINT NOT NULL, at TIMESTAMP NOT NULL, PRIMARY KEY (id)) USING TTL 1 HOURS ON COLUMN at",
    )
    .await;
    adhoc(&client, "PARTITION TABLE events ON COLUMN id").await;
    for id in 0..30 {
        // Even ids expired a day ago; odd ids are fresh.
        let at = if id % 2 == 0 { "DATEADD(DAY, -1, NOW)" } else { "NOW" };
        adhoc(&client, &format!("INSERT INTO events VALUES ({id}, {at})")).await;
    }
    wait_until("the expired rows left", || async { count(&client, "SELECT COUNT(*) FROM events").await == 15 }).await;
    let expired: BTreeSet<i64> = (0..30).filter(|i| i % 2 == 0).collect();
    assert_eq!(rx.ids(), expired, "exactly the expired rows went to the target");
    assert_eq!(ids(&client, "SELECT id FROM events").await, (0..30).filter(|i| i % 2 == 1).collect());
}

/// Attempts at killing the server while migrated rows are still leaving: on a busy
/// machine the last ones may all have left before the kill lands.
const KILL_ATTEMPTS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_migration_loses_no_row() {
    for attempt in 0..KILL_ATTEMPTS {
        let dir = TempDir::new(&format!("migrate-kill-{attempt}"));
        let data = dir.0.join("data");
        let (rx, url) = Collector::start();
        // Each partition's first batch is answered, so some rows leave the table; the
        // batches after it are held long enough that the kill lands while they wait.
        rx.delay_ms.store(150, Ordering::Relaxed);
        rx.early_requests.store(SITES as u64, Ordering::Relaxed);
        rx.late_delay_ms.store(5_000, Ordering::Relaxed);
        let server = start(&dir.0, &data, &url);
        let client = server.client().await;
        schema(&client).await;
        insert(&client, 0, 300).await;
        for from in (0..300).step_by(10) {
            adhoc(&client, &format!("MIGRATE FROM events WHERE id >= {from} AND id < {}", from + 10)).await;
        }
        wait_until("some rows left", || async { count(&client, "SELECT COUNT(*) FROM events").await < 300 }).await;
        drop(client);
        drop(server); // SIGKILL
        if rx.ids().len() == 300 {
            // The kill came after everything was delivered: this attempt proves nothing.
            continue;
        }

        let server = start(&dir.0, &data, &url);
        let client = server.client().await;
        // Right after the restart: a row gone from the table is one the target has.
        let in_table = ids(&client, "SELECT id FROM events").await;
        let arrived = rx.ids();
        let lost: Vec<i64> = (0..300).filter(|i| !in_table.contains(i) && !arrived.contains(i)).collect();
        assert!(lost.is_empty(), "rows deleted without reaching the target: {lost:?}");
        rx.delay_ms.store(0, Ordering::Relaxed);
        rx.late_delay_ms.store(0, Ordering::Relaxed);
        // The rest leaves eventually: every row arrives at least once, and the table empties.
        wait_until("every row arrived", || async { rx.ids().len() == 300 }).await;
        wait_until("the table emptied", || async { count(&client, "SELECT COUNT(*) FROM events").await == 0 }).await;
        assert_eq!(rx.ids(), (0..300).collect());
        return;
    }
    panic!("in {KILL_ATTEMPTS} attempts the kill always came after everything was delivered: the test proved nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_migrated_to_a_file_target_leave_once_its_files_hold_them() {
    let dir = TempDir::new("migrate-file");
    let data = dir.0.join("data");
    let server = start_file(&dir.0, &data);
    let client = server.client().await;
    schema(&client).await;
    insert(&client, 0, 40).await;
    assert_eq!(count(&client, "MIGRATE FROM events WHERE id < 20").await, 20);
    wait_until("the migrated rows left", || async { count(&client, "SELECT COUNT(*) FROM events").await == 20 }).await;
    assert_eq!(ids(&client, "SELECT id FROM events").await, (20..40).collect());
    assert_eq!(file_ids(&data), (0..20).collect(), "the files hold exactly the migrated rows");
    assert_eq!(count(&client, "SELECT COUNT(*) FROM events WHERE MIGRATING").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_mid_migration_to_a_file_target_loses_no_row() {
    for attempt in 0..KILL_ATTEMPTS {
        let dir = TempDir::new(&format!("migrate-file-kill-{attempt}"));
        let data = dir.0.join("data");
        let server = start_file(&dir.0, &data);
        let client = server.client().await;
        schema(&client).await;
        insert(&client, 0, 300).await;
        for from in (0..300).step_by(10) {
            adhoc(&client, &format!("MIGRATE FROM events WHERE id >= {from} AND id < {}", from + 10)).await;
        }
        drop(client);
        drop(server); // SIGKILL, while the last migrations are being acknowledged and deleted

        let server = start_file(&dir.0, &data);
        let client = server.client().await;
        // Right after the restart: a row gone from the table is one the files hold.
        let in_table = ids(&client, "SELECT id FROM events").await;
        let in_files = file_ids(&data);
        let lost: Vec<i64> = (0..300).filter(|i| !in_table.contains(i) && !in_files.contains(i)).collect();
        assert!(lost.is_empty(), "rows deleted without reaching the files: {lost:?}");
        if in_table.is_empty() {
            // The kill came after every row left: this attempt proves nothing.
            continue;
        }
        // The rest leaves too (flagged rows whose acknowledgement the kill lost are
        // migrated again), and every row is in the files.
        wait_until("the table emptied", || async { count(&client, "SELECT COUNT(*) FROM events").await == 0 }).await;
        assert_eq!(file_ids(&data), (0..300).collect());
        return;
    }
    panic!("in {KILL_ATTEMPTS} attempts the kill always came after every row left: the test proved nothing");
}
