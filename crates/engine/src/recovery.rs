//! Recovery at start-up: pick the newest complete snapshot (older ones when the newest is
//! damaged), then replay the command log after it. Each site gets its logged transactions
//! in log order, and a multi-partition transaction's MpBegin where the site's marker was;
//! the coordinator runs the logged multi-partition transactions themselves. Because
//! execution is deterministic, this rebuilds exactly the state before the crash.

use std::iter::Peekable;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use lockstep_core::{Error, Result};

use crate::cmdlog::{LogReader, Record};
use crate::engine::Engine;
use crate::mp::MpWork;
use crate::site::{SiteMsg, SpWork};
use crate::snapshot::{self, SnapshotInfo};

/// Records between two progress lines of a long replay.
const PROGRESS_EVERY_RECORDS: u64 = 200_000;

/// The newest complete, verified snapshot; damaged or incomplete ones are reported.
pub fn newest_snapshot(data_dir: &Path) -> Result<Option<SnapshotInfo>> {
    let scan = snapshot::scan_snapshots(&snapshot::snapshots_dir(data_dir))?;
    for (dir, why) in &scan.rejected {
        tracing::warn!("skipping snapshot {}: {why}", dir.display());
    }
    if let Some(s) = scan.complete.first() {
        tracing::info!(id = s.id, txn_id = s.txn_id, "recovering from snapshot {}", s.dir.display());
    }
    Ok(scan.complete.into_iter().next())
}

/// The command log, its damaged tail (if any) cut and reported.
pub fn open_log(dir: &Path) -> Result<LogReader> {
    let reader = LogReader::open(dir)?;
    if let Some(r) = reader.repair() {
        tracing::warn!(
            file = %r.file.display(),
            offset = r.offset,
            bytes_dropped = r.bytes_dropped,
            records_dropped = r.intact_records_dropped,
            records_kept = r.records_kept,
            "command log tail was damaged and has been cut: {}",
            r.reason
        );
        eprintln!(
            "recovery: the command log's tail in {} was damaged at byte {} ({}); cut {} bytes ({} intact records after the damage); kept {} records",
            r.file.display(),
            r.offset,
            r.reason,
            r.bytes_dropped,
            r.intact_records_dropped,
            r.records_kept
        );
    }
    Ok(reader)
}

/// Moves `log` past snapshot `base`'s `SnapshotTaken` record: the records before it are in
/// the snapshot. Returns false when the log is empty (a new log: the snapshot is where it
/// starts). Refuses, before anything has started, when the log holds records but not that
/// one: which of them the snapshot holds is then unknown, and starting could drop
/// acknowledged transactions.
pub fn skip_to_snapshot(log: &mut LogReader, base: &SnapshotInfo) -> Result<bool> {
    let started = Instant::now();
    let mut skipped = 0u64;
    // Only `SnapshotTaken` records are decoded: the others are before the snapshot, which
    // holds their effects, and a long log would take most of a restart to decode.
    loop {
        let (entry, passed) = log.skip_to(Record::is_snapshot_taken)?;
        skipped += passed;
        let Some(entry) = entry else { break };
        if matches!(entry.record, Record::SnapshotTaken { snapshot_id, .. } if snapshot_id == base.id) {
            tracing::info!(skipped, ms = started.elapsed().as_millis() as u64, "command log: records before the snapshot passed over");
            return Ok(true);
        }
        skipped += 1;
    }
    if skipped == 0 {
        return Ok(false);
    }
    let snapshots = base.dir.parent().unwrap_or(&base.dir);
    let data_dir = snapshots.parent().unwrap_or(snapshots);
    Err(Error::graceful(format!(
        "the newest snapshot ({}) is not recorded in the command log ({skipped} records in {}), so which logged \
         transactions it already holds is unknown and starting could lose acknowledged ones. The server did not start \
         and changed nothing. If the snapshot was copied in, or taken with the command log off, move it out of {} to \
         recover from the log; to start from the snapshot alone and discard the log, move {} aside.",
        base.dir.display(),
        crate::cmdlog::log_dir(data_dir).display(),
        snapshots.display(),
        crate::cmdlog::log_dir(data_dir).display(),
    )))
}

/// Replays `log` (already past its base snapshot, see `skip_to_snapshot`) and returns how
/// many transactions ran, once every site and the coordinator have run them. Stops when a
/// logged transaction fails again: the log would then not reproduce what it acknowledged.
pub fn replay(engine: &Arc<Engine>, mut log: Peekable<LogReader>, base: Option<&SnapshotInfo>) -> Result<u64> {
    let shared = engine.shared().clone();
    let started = Instant::now();
    let sites = engine.partition_count();
    let changed_sites = |written: u32| {
        Error::graceful(format!(
            "the command log was written with --sites {written} but the server now has {sites}: restart with --sites {written}, take a snapshot (lockstep snapshot save), then change --sites"
        ))
    };
    // Logged transactions only replay on the partitioning they ran on.
    if let Some(b) = base.filter(|b| b.partitions != sites) {
        if log.peek().is_some() {
            return Err(changed_sites(b.partitions));
        }
    }
    let check = |p: u32| -> Result<u32> {
        if p >= sites {
            return Err(Error::unexpected(format!(
                "the command log names partition {p} but the server has {sites}: restart with the --sites it was written with, take a snapshot, then change it"
            )));
        }
        Ok(p)
    };
    let mut count = 0u64;
    // Markers whose transaction record has not been seen (yet): txn id → partitions.
    let mut open_markers: std::collections::HashMap<i64, Vec<u32>> = std::collections::HashMap::new();
    for entry in log {
        let entry = entry?;
        match entry.record {
            Record::Sp { txn_id, partition, procedure, params } => {
                shared.send_site(check(partition)?, SiteMsg::Replay { work: SpWork::Proc(procedure), params, txn_id });
            }
            Record::AdHocSp { txn_id, partition, sql, params } => {
                shared.send_site(check(partition)?, SiteMsg::Replay { work: SpWork::Sql(sql), params, txn_id });
            }
            Record::MpMarker { partition, mp_txn_id } => {
                open_markers.entry(mp_txn_id).or_default().push(check(partition)?);
                shared.send_site(partition, SiteMsg::MpBegin { txn_id: mp_txn_id, log_marker: false });
            }
            Record::Mp { txn_id, procedure, params } => {
                // Every site marked a logged multi-partition transaction.
                if let Some(marked) = open_markers.remove(&txn_id) {
                    if marked.len() as u32 != sites {
                        return Err(changed_sites(marked.len() as u32));
                    }
                }
                shared.send_mp(MpWork::Replay { txn_id, procedure, params })
            }
            Record::MpShare { txn_id, partition, participants, specs } => {
                let specs = postcard::from_bytes(&specs)
                    .map_err(|e| Error::unexpected(format!("a logged share of transaction {txn_id} cannot be decoded: {e}")))?;
                shared.send_site(check(partition)?, SiteMsg::ReplicatedMp { txn_id, seq: None, participants, specs });
            }
            Record::MpDecide { txn_id, partition, commit } => {
                shared.send_site(check(partition)?, SiteMsg::ReplicatedDecide { txn_id, seq: None, commit });
            }
            Record::SnapshotTaken { .. } => continue,
        }
        count += 1;
        if count.is_multiple_of(PROGRESS_EVERY_RECORDS) {
            eprintln!("recovery: {count} transactions queued for replay ({:.1} s)", started.elapsed().as_secs_f64());
        }
    }
    // A crash between the markers and the record: that transaction never happened.
    let orphans: Vec<u32> = open_markers.into_values().flatten().collect();
    if !orphans.is_empty() {
        tracing::info!(sites = orphans.len(), "releasing sites parked for a multi-partition transaction the log does not hold");
        shared.send_mp(MpWork::ReleaseParked(orphans));
    }
    // Wait until everything queued has run: the coordinator, then every site.
    let (tx, rx) = crossbeam_channel::bounded(1);
    shared.send_mp(MpWork::ReplayDone(tx));
    rx.recv().map_err(|_| Error::unexpected("the coordinator stopped during recovery"))?;
    for p in 0..sites {
        let (tx, rx) = crossbeam_channel::bounded(1);
        shared.send_site(
            p,
            SiteMsg::Inspect(Box::new(move |_| {
                let _ = tx.send(());
            })),
        );
        rx.recv().map_err(|_| Error::unexpected(format!("partition {p} stopped during recovery")))?;
    }
    if let Some((failed, first)) = shared.durable.replay_errors.take() {
        return Err(Error::unexpected(format!(
            "recovery stopped: {failed} logged transaction(s) failed when replayed (the first: {first}). The log no longer \
             reproduces the state it acknowledged, so the server did not start. Keep the data directory as it is; to start \
             from the newest snapshot alone, discarding the transactions logged after it, move {} aside.",
            crate::cmdlog::log_dir(&shared.config.data_dir).display()
        )));
    }
    if count > 0 {
        let secs = started.elapsed().as_secs_f64();
        eprintln!("recovery: replayed {count} transactions in {secs:.2} s ({:.0} per second)", count as f64 / secs.max(1e-9));
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use lockstep_core::Value;

    use crate::cmdlog::testing::TempDir;
    use crate::cmdlog::{log_dir, CommandLog, Durability, Record};
    use crate::{Engine, EngineConfig, Outcome};

    fn config(dir: &Path) -> EngineConfig {
        let mut config = EngineConfig::new(dir);
        config.sites = 2;
        config.durability = Durability::Sync;
        config
    }

    fn start(dir: &Path) -> lockstep_core::Result<Arc<Engine>> {
        Engine::start(config(dir))
    }

    fn adhoc(engine: &Engine, sql: &str) -> Outcome {
        let (tx, rx) = crossbeam_channel::bounded(1);
        engine.adhoc(sql, vec![], Box::new(move |o| tx.send(o).unwrap()));
        rx.recv().unwrap()
    }

    fn ok(engine: &Engine, sql: &str) {
        let o = adhoc(engine, sql);
        assert!(o.is_success(), "{sql}: {:?}", o.status_string);
    }

    fn count(engine: &Engine) -> Value {
        adhoc(engine, "SELECT COUNT(*) FROM t").tables[0].rows[0][0].clone()
    }

    /// A table with `rows` rows, logged and not yet in any snapshot.
    fn with_rows(dir: &Path, rows: i64) {
        let engine = start(dir).unwrap();
        ok(&engine, "CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY)");
        ok(&engine, "PARTITION TABLE t ON COLUMN k");
        for k in 0..rows {
            ok(&engine, &format!("INSERT INTO t VALUES ({k})"));
        }
        engine.shutdown();
    }

    fn snapshot(engine: &Engine) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        engine.snapshot(Box::new(move |o| tx.send(o).unwrap()));
        assert!(rx.recv().unwrap().is_success());
    }

    fn append(dir: &Path, record: &Record) {
        let log = CommandLog::open(&log_dir(dir), Durability::Sync).unwrap();
        crate::durable::with_encoded(record, |body| log.append(body, None)).unwrap().unwrap();
        log.flush_and_sync().unwrap();
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }

    /// Calls of `counted_release` by the engines of `each_loading_site_releases_...`.
    static RELEASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn counted_release() {
        RELEASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    #[test]
    fn each_site_that_loads_a_snapshot_hands_its_load_buffers_back() {
        let dir = TempDir::new("release-after-load");
        with_rows(dir.path(), 20);
        let engine = start(dir.path()).unwrap();
        snapshot(&engine);
        engine.shutdown();
        let mut config = config(dir.path());
        config.release_memory = Some(counted_release);
        let engine = Engine::start(config).unwrap();
        assert_eq!(count(&engine), Value::Int(20));
        // Only this test's engine has the counting hook, and its sites do not idle over a
        // memory limit: the calls are the loads'.
        assert_eq!(RELEASES.load(std::sync::atomic::Ordering::SeqCst), 2, "one call per site");
        engine.shutdown();
    }

    #[test]
    fn a_logged_transaction_that_fails_on_replay_stops_recovery() {
        let dir = TempDir::new("replay-fails");
        with_rows(dir.path(), 5);
        // A record that cannot run again: its table does not exist.
        let sql = "INSERT INTO missing VALUES (1)".to_string();
        append(dir.path(), &Record::AdHocSp { txn_id: i64::MAX / 2, partition: 0, sql, params: vec![] });
        let refused = start(dir.path()).err().expect("recovery must not start past a transaction it cannot replay");
        assert!(refused.message.contains("recovery stopped: 1 logged transaction(s) failed"), "{}", refused.message);
        assert!(refused.message.to_lowercase().contains("missing"), "names what failed: {}", refused.message);
    }

    #[test]
    fn a_snapshot_the_log_does_not_know_is_refused_and_nothing_is_lost() {
        let (ours, theirs) = (TempDir::new("foreign-ours"), TempDir::new("foreign-theirs"));
        with_rows(ours.path(), 7);
        // Another directory's snapshot, newer than anything here, copied in.
        let other = start(theirs.path()).unwrap();
        ok(&other, "CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY)");
        ok(&other, "INSERT INTO t VALUES (1)");
        snapshot(&other);
        other.shutdown();
        let foreign = crate::snapshot::list_snapshots(&crate::snapshot::snapshots_dir(theirs.path())).unwrap().remove(0);
        let copied = crate::snapshot::snapshots_dir(ours.path()).join(foreign.dir.file_name().unwrap());
        copy_dir(&foreign.dir, &copied);

        let refused = start(ours.path()).err().expect("a snapshot that is not in the log must stop recovery");
        assert!(refused.message.contains("is not recorded in the command log"), "{}", refused.message);
        // Moved out, as the message says: the log brings every row back.
        std::fs::remove_dir_all(&copied).unwrap();
        let engine = start(ours.path()).unwrap();
        assert_eq!(count(&engine), Value::Int(7));
        engine.shutdown();
    }

    #[test]
    fn a_multi_partition_write_that_fails_leaves_nothing_to_replay() {
        let dir = TempDir::new("mp-fails");
        let engine = start(dir.path()).unwrap();
        ok(&engine, "CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY)");
        let body = "local put = sql [[INSERT INTO t VALUES (?)]] \
            return function(k, fail) put:exec(k) if fail == 1 then abort('no') end return 1 end";
        ok(&engine, &format!("CREATE PROCEDURE Everywhere FROM FILE 'e.lua' SOURCE $lua${body}$lua$"));
        let call = |k: i64, fail: i64| {
            let (tx, rx) = crossbeam_channel::bounded(1);
            let params = vec![Value::Int(k), Value::Int(fail)];
            engine.submit(
                crate::Call { procedure: "Everywhere".into(), params, ..Default::default() },
                Box::new(move |o| tx.send(o).unwrap()),
            );
            rx.recv().unwrap()
        };
        assert!(call(1, 0).is_success());
        assert!(!call(2, 1).is_success(), "the abort fails the call");
        assert!(call(3, 0).is_success());
        engine.shutdown();
        // The aborted write was never logged: the replay has nothing to fail on.
        let engine = start(dir.path()).expect("a failed multi-partition call must not stop recovery");
        let keys = adhoc(&engine, "SELECT k FROM t ORDER BY k").tables[0].rows.clone();
        assert_eq!(keys, vec![vec![Value::Int(1)], vec![Value::Int(3)]]);
        engine.shutdown();
    }

    #[test]
    fn a_snapshot_with_a_new_empty_log_becomes_the_logs_base() {
        let dir = TempDir::new("new-log");
        with_rows(dir.path(), 3);
        let engine = start(dir.path()).unwrap();
        snapshot(&engine);
        engine.shutdown();
        // The log is thrown away (a user moved it aside): the snapshot alone is the start...
        std::fs::remove_dir_all(log_dir(dir.path())).unwrap();
        let engine = start(dir.path()).unwrap();
        assert_eq!(count(&engine), Value::Int(3));
        ok(&engine, "INSERT INTO t VALUES (100)");
        engine.shutdown();
        // ...and the new log knows it, so the next start replays what came after.
        let engine = start(dir.path()).unwrap();
        assert_eq!(count(&engine), Value::Int(4));
        engine.shutdown();
    }
}
