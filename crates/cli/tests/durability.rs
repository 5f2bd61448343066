//! Crash tests with the real binary: acknowledged transactions survive SIGKILL in sync
//! mode; snapshots, the command log's torn tail, damaged snapshots, deterministic replay.
//! A short version runs by default; LOCKSTEP_LONG=1 runs many more crash cycles.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{adhoc, ok, scalar, Server, TempDir};
use lockstep_client::Client;
use lockstep_core::Value;

fn i(v: i64) -> Value {
    Value::Int(v)
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn long() -> bool {
    std::env::var("LOCKSTEP_LONG").is_ok_and(|v| v == "1")
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v BIGINT NOT NULL)",
    "PARTITION TABLE kv ON COLUMN k",
    "CREATE TABLE seen (k BIGINT NOT NULL PRIMARY KEY)",
    "CREATE VIEW kv_total (v, n) AS SELECT v, COUNT(*) FROM kv GROUP BY v",
];

async fn load_schema(client: &Client) {
    for ddl in SCHEMA {
        adhoc(client, ddl).await;
    }
    // A procedure using the deterministic random: replay must reproduce its choices.
    let proc = "CREATE PROCEDURE PutRandom PARTITION ON TABLE kv COLUMN k FROM FILE 'r.lua' SOURCE $lua$ \
        local put = sql [[INSERT INTO kv (k, v) VALUES (?, ?)]] \
        return function(k) return put:exec(k, ctx.random(1, 1000000)) end $lua$";
    adhoc(client, proc).await;
}

/// Kills the server the hard way.
fn sigkill(server: Server) {
    let pid = server.pid().to_string();
    let _ = Command::new("kill").args(["-KILL", &pid]).stdout(Stdio::null()).status();
    drop(server);
}

/// Writes keys from `start` on, single-partition and (every 10th) multi-partition, until
/// the connection breaks; returns the keys whose writes were acknowledged.
async fn write_until_killed(client: Arc<Client>, start: i64, acked: Arc<Mutex<BTreeSet<i64>>>) {
    let mut tasks = Vec::new();
    for w in 0..16i64 {
        let client = client.clone();
        let acked = acked.clone();
        tasks.push(tokio::spawn(async move {
            let mut k = start + w;
            loop {
                let r = if k % 10 == 0 { client.call("SEEN.insert", vec![i(k)]).await } else { client.call("PutRandom", vec![i(k)]).await };
                match r {
                    Ok(r) if r.status == 1 => {
                        acked.lock().unwrap().insert(k);
                    }
                    _ => return,
                }
                k += 16;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn present_keys(client: &Client) -> BTreeSet<i64> {
    let mut keys = BTreeSet::new();
    for q in ["SELECT k FROM kv", "SELECT k FROM seen"] {
        let r = adhoc(client, q).await;
        keys.extend(r.tables[0].rows.iter().map(|row| row[0].as_i64().unwrap()));
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_transactions_survive_sigkill_in_sync_mode() {
    let dir = TempDir::new("crash");
    let cycles = if long() { 25 } else { 3 };
    let acked = Arc::new(Mutex::new(BTreeSet::new()));
    let mut seed = 0x9e3779b97f4a7c15u64;
    for cycle in 0..cycles {
        let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
        let client = Arc::new(server.client().await);
        if cycle == 0 {
            load_schema(&client).await;
        }
        // Everything acknowledged so far is there after the crash and restart.
        let present = present_keys(&client).await;
        let expected = acked.lock().unwrap().clone();
        let missing: Vec<_> = expected.difference(&present).take(10).collect();
        assert!(missing.is_empty(), "cycle {cycle}: acknowledged keys lost: {missing:?} (of {})", expected.len());
        let writer = tokio::spawn(write_until_killed(client.clone(), cycle as i64 * 1_000_000, acked.clone()));
        // The kill comes at a random time after the load is under way: a slow disk (each
        // multi-partition write waits for its sync) must not leave a cycle with nothing done.
        let under_way = expected.len() + 20;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while acked.lock().unwrap().len() < under_way && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(150 + seed % 600)).await;
        sigkill(server);
        let _ = writer.await;
    }
    let server = Server::start_with(&dir.0, &["--sites", "2"], "127.0.0.1:0");
    let client = server.client().await;
    let present = present_keys(&client).await;
    let expected = acked.lock().unwrap().clone();
    assert!(expected.len() > 50, "the load should have written something ({})", expected.len());
    assert!(expected.is_subset(&present), "acknowledged keys lost after the last crash");
    // The view was rebuilt or replayed in step with its table.
    let total = adhoc(&client, "SELECT COALESCE(SUM(n), 0) FROM kv_total").await;
    let rows = adhoc(&client, "SELECT COUNT(*) FROM kv").await;
    assert_eq!(scalar(&total), scalar(&rows));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_rebuilds_exactly_the_same_state() {
    let dir = TempDir::new("determinism");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    load_schema(&client).await;
    for k in 0..300 {
        ok(&client, "PutRandom", vec![i(k)]).await;
        if k % 50 == 0 {
            ok(&client, "SEEN.insert", vec![i(k)]).await;
            adhoc(&client, &format!("UPDATE kv SET v = v + 1 WHERE k < {k}")).await;
        }
    }
    adhoc(&client, "ALTER TABLE kv ADD COLUMN note VARCHAR(10)").await;
    adhoc(&client, "UPDATE kv SET note = 'x' WHERE k >= 150").await;
    let before = ok(&client, "@StateHash", vec![]).await.tables[0].rows.clone();
    sigkill(server);
    // Replay the same log twice, from two copies of the data directory.
    let copy = TempDir::new("determinism-copy");
    let status = Command::new("cp").arg("-a").arg(dir.0.join(".")).arg(&copy.0).status().unwrap();
    assert!(status.success());
    for data in [&dir.0, &copy.0] {
        let server = Server::start_with(data, &["--sites", "2"], "127.0.0.1:0");
        let client = server.client().await;
        let after = ok(&client, "@StateHash", vec![]).await.tables[0].rows.clone();
        assert_eq!(after, before, "replay did not rebuild the same state");
        let r = adhoc(&client, "SELECT COUNT(*) FROM kv WHERE note = 'x'").await;
        assert_eq!(scalar(&r), i(150));
        sigkill(server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_taken_listed_and_recovered_with_the_log_after_them() {
    let dir = TempDir::new("snapshot");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    load_schema(&client).await;
    for k in 0..500 {
        ok(&client, "KV.insert", vec![i(k), i(k % 7)]).await;
    }
    let saved = ok(&client, "@SnapshotSave", vec![]).await;
    assert_eq!(saved.tables[0].rows[0][6], s("SUCCESS"));
    for k in 500..800 {
        ok(&client, "KV.insert", vec![i(k), i(k % 7)]).await;
    }
    let scan = ok(&client, "@SnapshotScan", vec![]).await;
    assert!(scan.tables[0].rows.iter().any(|r| r[6] == s("SUCCESS")), "the snapshot is listed");
    let before = ok(&client, "@StateHash", vec![]).await.tables[0].rows.clone();
    sigkill(server);
    // The log after the snapshot only replays on the partitioning it ran on.
    let out = Command::new(common::BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "off", "--pg", "off", "--sites", "3", "--data"])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sites 2"), "{}", String::from_utf8_lossy(&out.stderr));
    let server = Server::start_with(&dir.0, &["--sites", "2"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM kv").await), i(800));
    assert_eq!(ok(&client, "@StateHash", vec![]).await.tables[0].rows, before);
    let view = adhoc(&client, "SELECT SUM(n) FROM kv_total").await;
    assert_eq!(scalar(&view), i(800));
    // That start replayed the log and took a snapshot: now the partition count may change,
    // the snapshot's rows being spread by their hash.
    sigkill(server);
    let server = Server::start_with(&dir.0, &["--sites", "3"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM kv").await), i(800));
    let view = adhoc(&client, "SELECT SUM(n) FROM kv_total").await;
    assert_eq!(scalar(&view), i(800));
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM kv WHERE k = 799").await), i(1));
    drop(server);
}

/// The newest segment file of the command log.
fn last_segment(data: &std::path::Path) -> std::path::PathBuf {
    let mut segs: Vec<_> = std::fs::read_dir(data.join("cmdlog")).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).collect();
    segs.sort();
    segs.pop().expect("a command log segment")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_log_tail_is_cut_and_reported_and_a_damaged_snapshot_skipped() {
    let dir = TempDir::new("torn");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    load_schema(&client).await;
    for k in 0..100 {
        ok(&client, "KV.insert", vec![i(k), i(1)]).await;
    }
    ok(&client, "@SnapshotSave", vec![]).await;
    for k in 100..200 {
        ok(&client, "KV.insert", vec![i(k), i(1)]).await;
    }
    let newest = ok(&client, "@SnapshotSave", vec![]).await.tables[0].rows[0][0].to_string();
    for k in 200..300 {
        ok(&client, "KV.insert", vec![i(k), i(1)]).await;
    }
    sigkill(server);
    // A torn write at the end of the log: half a record header.
    use std::io::Write;
    let seg = last_segment(&dir.0);
    std::fs::OpenOptions::new().append(true).open(&seg).unwrap().write_all(&[0, 0, 1, 0, 0xde, 0xad]).unwrap();
    // And the newest snapshot's partition file damaged in the middle.
    let part = std::path::Path::new(&newest).join("partition-0.snap");
    let mut bytes = std::fs::read(&part).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&part, bytes).unwrap();

    let out = Command::new(common::BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "off", "--pg", "off", "--sites", "2", "--data"])
        .arg(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = Server::from_child(out, &dir.0);
    let client = server.client().await;
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM kv").await), i(300), "the older snapshot plus the log rebuild everything");
    let log = server.stop_and_read_stderr();
    assert!(log.contains("damaged") && log.contains(&seg.display().to_string()), "the cut tail is reported with its file: {log}");
    assert!(log.contains("skipping snapshot"), "the damaged snapshot is reported: {log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_mode_keeps_what_was_acknowledged_before_the_flush_window() {
    let dir = TempDir::new("async");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "async", "--flush-ms", "50"], "127.0.0.1:0");
    let client = server.client().await;
    load_schema(&client).await;
    for k in 0..200 {
        ok(&client, "KV.insert", vec![i(k), i(1)]).await;
    }
    // Past the flush window everything acknowledged is on disk.
    tokio::time::sleep(Duration::from_millis(400)).await;
    sigkill(server);
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "async"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM kv").await), i(200));
}

/// A small filesystem for the data directory, so the disk can really fill up.
struct SmallDisk(std::path::PathBuf);

impl SmallDisk {
    fn mount(tag: &str, size: &str) -> SmallDisk {
        let dir = std::env::temp_dir().join(format!("lockstep-disk-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(&dir).output().unwrap();
        assert!(out.status.success(), "this test mounts a small tmpfs (it needs root): {}", String::from_utf8_lossy(&out.stderr));
        SmallDisk(dir)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_writes_keeps_reads_and_recovers_when_space_returns() {
    let disk = SmallDisk::mount("full", "6m");
    let filler = disk.0.join("filler");
    std::fs::write(&filler, vec![7u8; 3 * 1024 * 1024]).unwrap();
    let data = disk.0.join("data");
    let server = Server::start_with(&data, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE blob (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(20000 BYTES) NOT NULL)").await;
    adhoc(&client, "PARTITION TABLE blob ON COLUMN k").await;
    let big = "x".repeat(16_000);
    let mut acked = Vec::new();
    let mut refused = None;
    for k in 0..2000i64 {
        let r = client.call("BLOB.insert", vec![i(k), s(&big)]).await.unwrap();
        if r.status == 1 {
            acked.push(k);
        } else {
            refused = Some((r.status, r.status_string.unwrap_or_default()));
            break;
        }
    }
    let (status, msg) = refused.expect("the disk should fill up");
    assert!(status == -7 || status == -5, "a write that cannot be logged is not acknowledged: {status} {msg}");
    // While the disk is full, writes are refused with a clear error and reads still work.
    let r = client.call("BLOB.insert", vec![i(1_000_000), s("y")]).await.unwrap();
    assert_eq!(r.status, -5, "{:?}", r.status_string);
    assert!(r.status_string.unwrap_or_default().contains("command log"));
    let n = scalar(&adhoc(&client, "SELECT COUNT(*) FROM blob WHERE k < 1000000").await).as_i64().unwrap();
    assert!(n >= acked.len() as i64);
    // Space returns: writes resume once the log works and a snapshot has captured memory.
    std::fs::remove_file(&filler).unwrap();
    let mut resumed = false;
    for _ in 0..100 {
        let r = client.call("BLOB.insert", vec![i(2_000_000), s("z")]).await.unwrap();
        if r.status == 1 {
            resumed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(resumed, "writes should resume after the disk has space again");
    acked.push(2_000_000);
    sigkill(server);
    let server = Server::start_with(&data, &["--sites", "2"], "127.0.0.1:0");
    let client = server.client().await;
    for k in &acked {
        let r = adhoc(&client, &format!("SELECT COUNT(*) FROM blob WHERE k = {k}")).await;
        assert_eq!(scalar(&r), i(1), "acknowledged key {k} lost");
    }
    drop(server);
    drop(disk);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_restore_brings_back_the_data_of_a_snapshot() {
    let dir = TempDir::new("restore");
    let server = Server::start_with(&dir.0, &["--sites", "2"], "127.0.0.1:0");
    let client = server.client().await;
    load_schema(&client).await;
    for k in 0..100 {
        ok(&client, "KV.insert", vec![i(k), i(k % 3)]).await;
    }
    let saved = ok(&client, "@SnapshotSave", vec![]).await;
    let nonce = saved.tables[0].rows[0][1].to_string();
    let at_snapshot = ok(&client, "@StateHash", vec![]).await.tables[0].rows.clone();
    adhoc(&client, "DELETE FROM kv WHERE k < 50").await;
    for k in 100..120 {
        ok(&client, "KV.insert", vec![i(k), i(9)]).await;
    }
    let r = client.call("@SnapshotRestore", vec![s("no-such")]).await.unwrap();
    assert_eq!(r.status, -2);
    let restored = ok(&client, "@SnapshotRestore", vec![s(&nonce)]).await;
    assert_eq!(restored.tables[0].rows[0][1], i(100));
    assert_eq!(ok(&client, "@StateHash", vec![]).await.tables[0].rows, at_snapshot);
    let view = adhoc(&client, "SELECT v, n FROM kv_total ORDER BY v").await;
    assert_eq!(view.tables[0].rows, vec![vec![i(0), i(34)], vec![i(1), i(33)], vec![i(2), i(33)]]);
    // The restore is durable like any transaction.
    sigkill(server);
    let server = Server::start_with(&dir.0, &["--sites", "2"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(ok(&client, "@StateHash", vec![]).await.tables[0].rows, at_snapshot);
}

/// A view of a stream cannot be rebuilt from its source (a stream keeps no rows), so a
/// snapshot keeps its rows: after a snapshot, more events and a SIGKILL, the restart has
/// every event's sum, and the view goes on counting (and may be deleted from) as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_view_of_a_stream_keeps_its_rows_through_a_snapshot_and_a_restart() {
    let dir = TempDir::new("stream-view");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE STREAM ev PARTITION ON COLUMN u (u BIGINT NOT NULL, amt BIGINT)").await;
    adhoc(&client, "CREATE VIEW ev_total (u, n, total) AS SELECT u, COUNT(*), SUM(amt) FROM ev GROUP BY u").await;
    let event = |k: i64| format!("INSERT INTO ev VALUES ({}, {})", k % 5, if k % 10 == 3 { "NULL".to_string() } else { k.to_string() });
    for k in 0..100 {
        adhoc(&client, &event(k)).await;
    }
    assert_eq!(ok(&client, "@SnapshotSave", vec![]).await.tables[0].rows[0][6], s("SUCCESS"));
    for k in 100..150 {
        adhoc(&client, &event(k)).await;
    }
    let totals = "SELECT u, n, total FROM ev_total ORDER BY u";
    let before = adhoc(&client, totals).await.tables[0].rows.clone();
    sigkill(server);
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(adhoc(&client, totals).await.tables[0].rows, before, "the view after the restart");
    // It goes on counting from what it held, and a group deleted starts afresh.
    adhoc(&client, &event(150)).await;
    adhoc(&client, "DELETE FROM ev_total WHERE u = 1").await;
    adhoc(&client, &event(151)).await;
    let rows = adhoc(&client, totals).await.tables[0].rows.clone();
    assert_eq!(rows[0][1], i(31), "group 0 counted one more event");
    assert_eq!(rows[1], vec![i(1), i(1), i(151)], "the deleted group starts again from the next event");
    drop(server);
}

/// A composite integer primary key keeps no hash (its B-tree answers lookups and refuses
/// duplicates) and keeps keys within 32 bits apart from keys past them. Both kinds come
/// back from a snapshot and a SIGKILL: found by their whole key and by prefix, in order
/// across the two kinds, and still refusing a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_integer_keys_of_both_widths_survive_a_snapshot_and_a_restart() {
    let dir = TempDir::new("intkeys");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE lines (k BIGINT NOT NULL, n INTEGER NOT NULL, v BIGINT, PRIMARY KEY (k, n))").await;
    adhoc(&client, "PARTITION TABLE lines ON COLUMN k").await;
    let big = 1i64 << 40;
    let keys = [-big, -7, 0, 5, big, big + 1];
    for &k in &keys {
        for n in [3, 1, 2] {
            ok(&client, "LINES.insert", vec![i(k), i(n), i(k ^ n)]).await;
        }
    }
    ok(&client, "@SnapshotSave", vec![]).await;
    // Written after the snapshot: replayed from the log onto the restored B-tree.
    ok(&client, "LINES.insert", vec![i(big), i(9), i(0)]).await;
    ok(&client, "LINES.insert", vec![i(5), i(9), i(0)]).await;
    let before = ok(&client, "@StateHash", vec![]).await.tables[0].rows.clone();
    sigkill(server);

    let server = Server::start_with(&dir.0, &["--sites", "2"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(ok(&client, "@StateHash", vec![]).await.tables[0].rows, before);
    for &k in &keys {
        let one = adhoc(&client, &format!("SELECT v FROM lines WHERE k = {k} AND n = 2")).await;
        assert_eq!(scalar(&one), i(k ^ 2), "key ({k}, 2)");
        let prefix = adhoc(&client, &format!("SELECT n FROM lines WHERE k = {k} ORDER BY n")).await;
        let extra = if k == big || k == 5 { vec![vec![i(9)]] } else { vec![] };
        assert_eq!(prefix.tables[0].rows, [vec![vec![i(1)], vec![i(2)], vec![i(3)]], extra].concat(), "prefix {k}");
        let dup = client.call("LINES.insert", vec![i(k), i(1), i(0)]).await.unwrap();
        assert_ne!(dup.status, 1, "a duplicate of ({k}, 1) was accepted");
        let why = dup.status_string.unwrap_or_default();
        assert!(why.contains("duplicate key"), "{why}");
    }
    let across = adhoc(&client, &format!("SELECT k FROM lines WHERE k >= -7 AND k <= {big} AND n = 1 ORDER BY k, n")).await;
    assert_eq!(across.tables[0].rows, vec![vec![i(-7)], vec![i(0)], vec![i(5)], vec![i(big)]]);
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM lines").await), i(20));
}
