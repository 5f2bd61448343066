//! Acknowledgement by `file` targets: a file target's destination is its segment files, so
//! a migrated row (`MIGRATE FROM`) is delivered once its line is in the file and the file
//! is on disk. The site's writer hands the lines it flushed to this thread (one per
//! writer, started when a file target first gets a migrated row); the thread fsyncs the
//! segment and only then notes the rows acknowledged (`ExportHub::note_acknowledged`), so
//! the migration deletes them from their table. The fsync runs here, not on the site, so a
//! partition never waits for the disk.
//!
//! A crash between the fsync and the deletion loses the note, not the row: it stays
//! flagged, and is migrated again after the restart (`migrate.rs`), a second line in the
//! file (at least once). A failed fsync notes nothing, for the same outcome.

use std::collections::HashSet;
use std::fs::File;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

use super::ExportHub;

/// Migrated rows a file target's writer holds before it hands them on without waiting for
/// the site to go idle (a busy site flushes only when idle): bounds its memory.
pub const FILE_ACK_ROWS_MAX: usize = 10_000;

/// Lines flushed to one segment, waiting for it to be on disk.
pub struct SyncJob {
    pub target: String,
    pub segment: u64,
    /// The segment (its own descriptor: the writer may close its copy meanwhile).
    pub file: File,
    /// The migrated rows' lines, as written.
    pub rows: Vec<serde_json::Value>,
}

/// The writer's side: starts the thread on the first job.
#[derive(Default)]
pub struct FileAcks {
    jobs: Option<Sender<SyncJob>>,
}

impl FileAcks {
    /// Hands `job` to the acknowledger of partition `partition`'s writer.
    pub fn send(&mut self, hub: &Arc<ExportHub>, partition: u32, job: SyncJob) {
        if self.jobs.is_none() {
            let (tx, rx) = channel();
            let hub = hub.clone();
            let started = std::thread::Builder::new().name(format!("export-fsync-{partition}")).spawn(move || run(&hub, partition, rx));
            match started {
                Ok(_) => self.jobs = Some(tx),
                Err(e) => {
                    tracing::error!("cannot start the file export acknowledger of partition {partition}: {e}; migrated rows stay flagged until a restart");
                    return;
                }
            }
        }
        if let Some(jobs) = &self.jobs {
            // The thread ends only when this sender is dropped: a send cannot fail while
            // it is held, and if it did, the rows would stay flagged (sent again later).
            let _ = jobs.send(job);
        }
    }
}

/// Until the writer goes: takes what is queued, fsyncs each segment once, notes the rows.
fn run(hub: &ExportHub, partition: u32, jobs: Receiver<SyncJob>) {
    while let Ok(first) = jobs.recv() {
        let batch: Vec<SyncJob> = std::iter::once(first).chain(jobs.try_iter()).collect();
        acknowledge(hub, partition, batch, |j| j.file.sync_data());
    }
}

/// Syncs the segments of `batch` (each once: every job's lines were flushed before it was
/// sent, so one fsync of a segment covers them all) and notes the rows of those synced.
fn acknowledge(hub: &ExportHub, partition: u32, batch: Vec<SyncJob>, sync: impl Fn(&SyncJob) -> std::io::Result<()>) {
    let mut synced: HashSet<(String, u64)> = HashSet::new();
    let mut failed: HashSet<(String, u64)> = HashSet::new();
    for job in &batch {
        let key = (job.target.clone(), job.segment);
        if synced.contains(&key) || failed.contains(&key) {
            continue;
        }
        match sync(job) {
            Ok(()) => synced.insert(key),
            Err(e) => {
                tracing::error!(
                    "cannot sync export segment {} of target {} partition {partition}: {e}; its migrated rows stay flagged and are migrated again after a restart",
                    job.segment,
                    job.target
                );
                failed.insert(key)
            }
        };
    }
    for job in batch.into_iter().filter(|j| synced.contains(&(j.target.clone(), j.segment))) {
        hub.note_acknowledged(partition, &job.rows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(dir: &std::path::Path, segment: u64, seqs: &[i64]) -> SyncJob {
        let file = File::create(dir.join(format!("{segment}.jsonl"))).unwrap();
        let rows =
            seqs.iter().map(|s| serde_json::json!({"seq": s, "txn_id": s, "stream": "T", "migrated": true, "row": {"ID": s}})).collect();
        SyncJob { target: "F".into(), segment, file, rows }
    }

    #[test]
    fn rows_are_noted_only_once_their_segment_is_synced() {
        let dir = std::env::temp_dir().join(format!("lockstep-file-ack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let hub = ExportHub::default();
        // Segment 2 cannot be synced: its rows are not noted; segment 1's are, with one
        // fsync for its two jobs.
        let syncs = std::sync::Mutex::new(0);
        let batch = vec![job(&dir, 1, &[1]), job(&dir, 2, &[3]), job(&dir, 1, &[2])];
        acknowledge(&hub, 0, batch, |j| {
            *syncs.lock().unwrap() += 1;
            if j.segment == 2 {
                return Err(std::io::Error::other("disk full"));
            }
            j.file.sync_data()
        });
        let noted: Vec<i64> = hub.take_acknowledged().iter().map(|a| a.txn_id).collect();
        assert_eq!(noted, [1, 2]);
        assert_eq!(*syncs.lock().unwrap(), 2, "segment 1 is synced once for both its jobs");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_thread_notes_what_it_synced() {
        let dir = std::env::temp_dir().join(format!("lockstep-file-ack-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let hub = Arc::new(ExportHub::default());
        let mut acks = FileAcks::default();
        acks.send(&hub, 3, job(&dir, 1, &[7, 8]));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut noted = Vec::new();
        while noted.len() < 2 {
            assert!(std::time::Instant::now() < deadline, "never noted");
            noted.extend(hub.take_acknowledged());
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(noted.iter().all(|a| a.partition == 3 && a.table == "T"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
