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
pub fn open_log(dir: &Path) -> Result<Peekable<LogReader>> {
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
    Ok(reader.peekable())
}

/// Replays the log after snapshot `base` (the whole log without one). Returns how many
/// transactions were replayed, once every site and the coordinator have run them.
pub fn replay(engine: &Arc<Engine>, mut log: Peekable<LogReader>, base: Option<&SnapshotInfo>) -> Result<u64> {
    let shared = engine.shared().clone();
    let started = Instant::now();
    // Records up to the snapshot's are already in it.
    if let Some(id) = base.map(|b| b.id) {
        let mut found = false;
        for entry in log.by_ref() {
            if matches!(entry?.record, Record::SnapshotTaken { snapshot_id, .. } if snapshot_id == id) {
                found = true;
                break;
            }
        }
        if !found {
            tracing::warn!("the command log has no record of snapshot {id}: nothing after it is replayed");
        }
    }
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
    if count > 0 {
        let secs = started.elapsed().as_secs_f64();
        eprintln!("recovery: replayed {count} transactions in {secs:.2} s ({:.0} per second)", count as f64 / secs.max(1e-9));
    }
    Ok(count)
}
