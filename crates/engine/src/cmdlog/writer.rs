//! `CommandLog`: the node's one logger thread, with group commit.
//!
//! Any thread appends a record body with an optional acknowledgement callback: the body is
//! framed straight into a shared staging buffer (no allocation or queue entry per record),
//! and only an append that finds the buffer empty wakes the logger thread. The thread
//! takes everything staged, writes it with one write, and then, by mode:
//! - `Sync`: one fdatasync for the whole batch, then the acknowledgements: a client is
//!   answered only once its record is on disk, and one sync serves many transactions.
//! - `Async`: acknowledgements at once; a sync every `flush_ms` bounds what a crash loses.
//! - `Off`: nothing is written; acknowledgements run at once on the caller's thread.
//!
//! When a write or sync fails (disk full, I/O error), the batch's acknowledgements get the
//! error, the log becomes "failed" and refuses new appends at once, and the thread probes
//! the disk every `retry_interval_ms`; once a probe succeeds it cuts any partly written
//! batch off the segment and accepts appends again.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use lockstep_core::{Error, Result};

use crate::cmdlog::frame::{put_frame, RECORD_SIZE_MAX_BYTES};
use crate::cmdlog::fs::{LogFile, LogFs, RealFs};
use crate::cmdlog::reader::repair_last_segment;
use crate::cmdlog::segment::{list_segments, segment_path, truncate_before, SEGMENT_SIZE_MAX_BYTES};

/// Records that may wait for the logger; appends block beyond this (backpressure).
pub const APPEND_QUEUE_MAX: usize = 16 * 1024;
/// Bytes that may wait for the logger; appends block beyond this, unless nothing waits (a
/// single record may be larger).
pub const STAGED_BYTES_MAX: usize = 4 * 1024 * 1024;
/// Messages to the logger thread (not records: those are staged) that may wait at once.
const CONTROL_QUEUE_MAX: usize = 1024;
/// Default wait between probes of a failed disk.
pub const RETRY_INTERVAL_MS_DEFAULT: u64 = 1000;
/// Bytes written (then deleted) to test that a failed disk accepts writes again.
const PROBE_BYTES: usize = 64 * 1024;
const PROBE_FILE: &str = "probe.tmp";
/// Zeros written ahead of the records in a segment. A sync that also carries new zeros
/// commits the file's new length (and writes these bytes): one in this many bytes of log.
const ZEROS_AHEAD_BYTES: u64 = 256 * 1024;

/// How durable an acknowledged transaction is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    Off,
    /// Acknowledge at once; sync every `flush_ms` milliseconds.
    Async {
        flush_ms: u64,
    },
    /// Acknowledge after the record is synced to disk.
    Sync,
}

impl Durability {
    fn name(self) -> &'static str {
        match self {
            Durability::Off => "off",
            Durability::Async { .. } => "async",
            Durability::Sync => "sync",
        }
    }
}

/// Called once with the record's sequence number when it is as durable as the mode
/// promises (sequence numbers are 0 in `Off` mode), or with the error that prevented it.
pub type Ack = Box<dyn FnOnce(Result<u64>) + Send>;

/// Tuning and test hooks.
pub struct LogOptions {
    pub segment_size_max_bytes: u64,
    pub queue_max: usize,
    pub retry_interval_ms: u64,
    pub fs: Arc<dyn LogFs>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_size_max_bytes: SEGMENT_SIZE_MAX_BYTES,
            queue_max: APPEND_QUEUE_MAX,
            retry_interval_ms: RETRY_INTERVAL_MS_DEFAULT,
            fs: Arc::new(RealFs),
        }
    }
}

/// Counters for `@Statistics COMMANDLOG`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogStats {
    pub mode: &'static str,
    /// Records written since open.
    pub records: u64,
    /// Bytes written since open, framing included.
    pub bytes: u64,
    pub syncs: u64,
    pub last_sync_latency_us: u64,
    /// Whether appends are refused because of a disk failure.
    pub failed: bool,
    /// Write or sync failures since open.
    pub failures: u64,
    /// Sequence number the next written record gets.
    pub next_seq: u64,
    /// Records queued and not yet written.
    pub queued: usize,
}

/// State shared by the appending threads and the logger thread.
#[derive(Default)]
struct Shared {
    failed: AtomicBool,
    records: AtomicU64,
    bytes: AtomicU64,
    syncs: AtomicU64,
    last_sync_latency_us: AtomicU64,
    failures: AtomicU64,
    next_seq: AtomicU64,
    /// Why the log failed, for the error appends get meanwhile.
    last_error: Mutex<String>,
    /// Records appended and not yet taken by the logger.
    staged: Mutex<Staged>,
    /// Signalled when the logger takes the staged records, for appenders waiting for room.
    room: Condvar,
}

/// Appended records waiting for the logger: framed, in order, with their acknowledgements.
#[derive(Default)]
struct Staged {
    buf: Vec<u8>,
    acks: Vec<Option<Ack>>,
    /// Appenders blocked until the logger takes these.
    waiting: usize,
}

impl Shared {
    fn staged(&self) -> MutexGuard<'_, Staged> {
        // Only buffer pushes and swaps happen under the lock: a poisoned one is still sound.
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn failed_error(&self) -> Error {
        let why = self.last_error.lock().map(|s| s.clone()).unwrap_or_default();
        Error::unavailable(format!(
            "the command log cannot write to disk ({why}); writes are refused until it can, \
             reads still work"
        ))
    }
}

enum Msg {
    /// Records were staged into an empty buffer.
    Appended,
    /// No record: acknowledged once everything appended before it is durable.
    Barrier(Ack),
    Flush(Sender<Result<()>>),
    Shutdown,
}

/// The node's command log. Share it (it is `Sync`) among sites and the MP coordinator.
pub struct CommandLog {
    mode: Durability,
    dir: PathBuf,
    /// Records that may be staged at once.
    queue_max: usize,
    tx: Option<Sender<Msg>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
}

impl CommandLog {
    /// Opens (creating if needed) the log in `dir` with default options.
    pub fn open(dir: &Path, mode: Durability) -> Result<CommandLog> {
        Self::open_with(dir, mode, LogOptions::default())
    }

    /// Opens the log in `dir`: a damaged tail of the newest segment is cut (and logged),
    /// and new records are appended after the last intact one.
    pub fn open_with(dir: &Path, mode: Durability, options: LogOptions) -> Result<CommandLog> {
        let shared = Arc::new(Shared::default());
        let mut log = CommandLog { mode, dir: dir.to_path_buf(), queue_max: options.queue_max.max(1), tx: None, thread: None, shared };
        if mode == Durability::Off {
            return Ok(log);
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::unexpected(format!("command log: cannot create {}: {e}", dir.display())))?;
        let (_, next_seq) = repair_last_segment(dir)?;
        log.shared.next_seq.store(next_seq, Ordering::SeqCst);
        let current_first_seq = list_segments(dir)?.last().map(|s| s.first_seq);
        // Wakeups, barriers, flushes and the shutdown: a few at a time.
        let (tx, rx) = bounded(CONTROL_QUEUE_MAX);
        let logger = Logger {
            dir: dir.to_path_buf(),
            mode,
            rx,
            shared: log.shared.clone(),
            fs: options.fs,
            segment_size_max_bytes: options.segment_size_max_bytes,
            retry_interval: Duration::from_millis(options.retry_interval_ms.max(1)),
            file: None,
            existing: current_first_seq.map(|first| segment_path(dir, first)),
            good_len: 0,
            written_len: 0,
            synced_len: 0,
            allocated_len: 0,
            next_seq,
            sync_due: None,
            spare_buf: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("command-log".into())
            .spawn(move || logger.run())
            .map_err(|e| Error::unexpected(format!("cannot start the command log thread: {e}")))?;
        log.tx = Some(tx);
        log.thread = Some(thread);
        Ok(log)
    }

    pub fn mode(&self) -> Durability {
        self.mode
    }

    /// "off", "async" or "sync".
    pub fn mode_name(&self) -> &'static str {
        self.mode.name()
    }

    /// Stages a record body (from `Record::encode`), blocking while too much is staged.
    /// `ack` is called exactly once: with the record's sequence number once it is as
    /// durable as the mode promises, or with the error that kept it from being logged
    /// (record too large, log failed or closed), in which case `append` returns that error
    /// too.
    pub fn append(&self, body: &[u8], ack: Option<Ack>) -> Result<()> {
        let refuse = |e: Error, ack: Option<Ack>| {
            if let Some(ack) = ack {
                ack(Err(e.clone()));
            }
            Err(e)
        };
        if body.is_empty() || body.len() > RECORD_SIZE_MAX_BYTES {
            let e = Error::graceful(format!("a command log record of {} bytes is outside 1..={RECORD_SIZE_MAX_BYTES}", body.len()));
            return refuse(e, ack);
        }
        let Some(tx) = &self.tx else {
            if let Some(ack) = ack {
                ack(Ok(0));
            }
            return Ok(());
        };
        if self.shared.failed.load(Ordering::SeqCst) {
            return refuse(self.shared.failed_error(), ack);
        }
        let mut staged = self.shared.staged();
        while !staged.acks.is_empty() && (staged.acks.len() >= self.queue_max || staged.buf.len() >= STAGED_BYTES_MAX) {
            staged.waiting += 1;
            staged = self.shared.room.wait(staged).unwrap_or_else(|p| p.into_inner());
            staged.waiting -= 1;
        }
        let wake = staged.acks.is_empty();
        put_frame(&mut staged.buf, body);
        staged.acks.push(ack);
        drop(staged);
        // Whoever stages into an empty buffer wakes the logger; later appends ride along
        // until it takes them.
        if wake && tx.send(Msg::Appended).is_err() {
            let orphaned = std::mem::take(&mut self.shared.staged().acks);
            for ack in orphaned.into_iter().flatten() {
                ack(Err(closed()));
            }
            return Err(closed());
        }
        Ok(())
    }

    /// Calls `ack` once every record appended before this call is as durable as the
    /// mode promises (at once in `Off` mode), or with the error that prevented it.
    pub fn barrier(&self, ack: Ack) {
        let Some(tx) = &self.tx else { return ack(Ok(0)) };
        if self.shared.failed.load(Ordering::SeqCst) {
            return ack(Err(self.shared.failed_error()));
        }
        if let Err(e) = tx.send(Msg::Barrier(ack)) {
            if let Msg::Barrier(ack) = e.0 {
                ack(Err(closed()));
            }
        }
    }

    /// Whether appends are refused because the disk failed.
    pub fn is_failed(&self) -> bool {
        self.shared.failed.load(Ordering::SeqCst)
    }

    /// Writes and syncs everything appended so far (for shutdown and snapshots).
    pub fn flush_and_sync(&self) -> Result<()> {
        let Some(tx) = &self.tx else { return Ok(()) };
        let (reply_tx, reply_rx) = bounded(1);
        tx.send(Msg::Flush(reply_tx)).map_err(|_| closed())?;
        reply_rx.recv().map_err(|_| closed())?
    }

    /// Deletes the segments whose records all precede `seq` (covered by a snapshot).
    pub fn truncate_before(&self, seq: u64) -> Result<usize> {
        if self.tx.is_none() {
            return Ok(0);
        }
        truncate_before(&self.dir, seq)
    }

    pub fn stats(&self) -> LogStats {
        let s = &self.shared;
        LogStats {
            mode: self.mode.name(),
            records: s.records.load(Ordering::Relaxed),
            bytes: s.bytes.load(Ordering::Relaxed),
            syncs: s.syncs.load(Ordering::Relaxed),
            last_sync_latency_us: s.last_sync_latency_us.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::SeqCst),
            failures: s.failures.load(Ordering::Relaxed),
            next_seq: s.next_seq.load(Ordering::SeqCst),
            queued: s.staged().acks.len(),
        }
    }
}

fn closed() -> Error {
    Error::unavailable("the command log is shut down")
}

impl Drop for CommandLog {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Msg::Shutdown);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The logger thread's state.
struct Logger {
    dir: PathBuf,
    mode: Durability,
    rx: Receiver<Msg>,
    shared: Arc<Shared>,
    fs: Arc<dyn LogFs>,
    segment_size_max_bytes: u64,
    retry_interval: Duration,
    /// The open segment.
    file: Option<Box<dyn LogFile>>,
    /// The newest segment found at open, appended to until it is full.
    existing: Option<PathBuf>,
    /// Bytes of the open segment to keep after a failure: synced ones in Sync mode (the
    /// rest were never acknowledged), written ones in Async mode (already acknowledged).
    good_len: u64,
    written_len: u64,
    synced_len: u64,
    /// Length of the open segment file: `written_len` plus zeros written ahead.
    allocated_len: u64,
    next_seq: u64,
    /// Async mode: when the written but unsynced data must be synced.
    sync_due: Option<Instant>,
    /// The last batch's buffer, emptied, for the next one (staging swaps it in).
    spare_buf: Vec<u8>,
}

/// Records taken off the queue for one write.
#[derive(Default)]
struct Batch {
    buf: Vec<u8>,
    acks: Vec<Option<Ack>>,
    /// Barriers met in the queue: acknowledged after the batch's records.
    barriers: Vec<Ack>,
}

impl Batch {
    /// Runs every acknowledgement: record `i` gets `result(i)`, barriers `barrier`.
    /// The answers they give go out in one batch (`answer_batch`).
    fn acknowledge(self, mut result: impl FnMut(usize) -> Result<u64>, barrier: Result<u64>) {
        crate::answer_batch::batch(|| {
            for (i, ack) in self.acks.into_iter().enumerate() {
                let r = result(i);
                if let Some(ack) = ack {
                    ack(r);
                }
            }
            for ack in self.barriers {
                ack(barrier.clone());
            }
        });
    }
}

impl Logger {
    fn run(mut self) {
        loop {
            let msg = match self.wait_time() {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(t) => self.rx.recv_timeout(t),
            };
            match msg {
                Ok(first) => match self.take_batch(first) {
                    Some(Msg::Shutdown) => break,
                    Some(Msg::Flush(reply)) => self.flush(reply),
                    _ => {}
                },
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => self.tick(),
            }
        }
        // Shutdown: make everything written durable.
        let _ = self.sync_if_dirty();
    }

    /// How long to wait for a message: until the next async sync or failure probe.
    fn wait_time(&self) -> Option<Duration> {
        if self.shared.failed.load(Ordering::SeqCst) {
            return Some(self.retry_interval);
        }
        self.sync_due.map(|due| due.saturating_duration_since(Instant::now()))
    }

    fn tick(&mut self) {
        if self.shared.failed.load(Ordering::SeqCst) {
            self.probe();
        } else if self.sync_due.is_some_and(|due| due <= Instant::now()) {
            if let Err(e) = self.sync_if_dirty() {
                self.mark_failed(&e);
            }
        }
    }

    /// Takes the staged records, and the messages queued behind `first` (up to the batch
    /// size), writes the records, and returns a control message met on the way. Before each
    /// message the staged records are taken again: whatever was appended before a barrier or
    /// a flush was staged before it was sent, so it is in this batch.
    fn take_batch(&mut self, first: Msg) -> Option<Msg> {
        let mut batch = Batch { buf: std::mem::take(&mut self.spare_buf), ..Batch::default() };
        let mut next = Some(first);
        let mut control = None;
        while let Some(msg) = next.take() {
            self.take_staged(&mut batch);
            match msg {
                Msg::Appended => {}
                Msg::Barrier(ack) => batch.barriers.push(ack),
                other => {
                    control = Some(other);
                    break;
                }
            }
            if batch.buf.len() < STAGED_BYTES_MAX {
                next = self.rx.try_recv().ok();
            }
        }
        let mut buf = self.commit(batch);
        // Kept for the next batch, unless one huge record grew it.
        if buf.capacity() <= 2 * STAGED_BYTES_MAX {
            buf.clear();
            self.spare_buf = buf;
        }
        control
    }

    /// Moves the staged records into `batch` (swapping buffers when the batch is empty, so
    /// nothing is copied) and lets blocked appenders go on.
    fn take_staged(&mut self, batch: &mut Batch) {
        let mut staged = self.shared.staged();
        if batch.acks.is_empty() {
            std::mem::swap(&mut batch.buf, &mut staged.buf);
            std::mem::swap(&mut batch.acks, &mut staged.acks);
        } else {
            batch.buf.extend_from_slice(&staged.buf);
            batch.acks.append(&mut staged.acks);
            staged.buf.clear();
        }
        if staged.waiting > 0 {
            self.shared.room.notify_all();
        }
    }

    /// Writes a batch and acknowledges it as the mode requires; gives back its buffer.
    fn commit(&mut self, mut batch: Batch) -> Vec<u8> {
        let buf = std::mem::take(&mut batch.buf);
        self.commit_records(&buf, batch);
        buf
    }

    fn commit_records(&mut self, buf: &[u8], batch: Batch) {
        if self.shared.failed.load(Ordering::SeqCst) {
            // Queued before the failure was seen: refused like later appends.
            let err = self.shared.failed_error();
            return batch.acknowledge(|_| Err(err.clone()), Err(err.clone()));
        }
        if buf.is_empty() {
            // Only barriers: everything before them was synced with its own batch.
            return batch.acknowledge(|_| Ok(0), Ok(self.next_seq));
        }
        if let Err(e) = self.write(buf) {
            return self.fail(e, batch);
        }
        let first = self.next_seq;
        let n = batch.acks.len() as u64;
        self.next_seq += n;
        self.shared.next_seq.store(self.next_seq, Ordering::SeqCst);
        self.shared.records.fetch_add(n, Ordering::Relaxed);
        self.shared.bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        match self.mode {
            Durability::Sync => {
                if let Err(e) = self.sync_if_dirty() {
                    // Not durable: the records are cut off again before writing resumes.
                    self.next_seq = first;
                    self.shared.next_seq.store(first, Ordering::SeqCst);
                    return self.fail(e, batch);
                }
            }
            Durability::Async { flush_ms } => {
                self.good_len = self.written_len;
                if self.sync_due.is_none() {
                    self.sync_due = Some(Instant::now() + Duration::from_millis(flush_ms));
                }
            }
            Durability::Off => {}
        }
        batch.acknowledge(|i| Ok(first + i as u64), Ok(self.next_seq));
    }

    /// Writes to the open segment, first starting a new one if it is full, into zeros
    /// written ahead (`ZEROS_AHEAD_BYTES`), so that most syncs change no file metadata.
    fn write(&mut self, buf: &[u8]) -> Result<()> {
        if self.file.is_some() && self.written_len >= self.segment_size_max_bytes {
            // The old segment must be durable before records follow in a new one. Its zeros
            // are cut off; if a crash undoes the cut, they read as the end of the segment.
            self.sync_if_dirty()?;
            if let Some(file) = self.file.as_mut() {
                let _ = file.set_len(self.written_len);
            }
            self.file = None;
        }
        if self.file.is_none() {
            self.open_segment()?;
        }
        let Some(file) = self.file.as_mut() else {
            return Err(Error::unexpected("command log: no open segment"));
        };
        let end = self.written_len + buf.len() as u64;
        if end > self.allocated_len {
            let to = end + ZEROS_AHEAD_BYTES;
            if let Err(e) = file.extend_with_zeros(self.allocated_len, to) {
                return Err(io_failure("extend", &self.dir, e));
            }
            self.allocated_len = to;
        }
        if let Err(e) = file.write_all_at(buf, self.written_len) {
            return Err(io_failure("write to", &self.dir, e));
        }
        self.written_len = end;
        Ok(())
    }

    /// Opens the segment to append to: the newest existing one if not full, else a new
    /// one named after the next record.
    fn open_segment(&mut self) -> Result<()> {
        let fresh = segment_path(&self.dir, self.next_seq);
        let path = match self.existing.take() {
            Some(p) => {
                let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
                if len < self.segment_size_max_bytes {
                    p
                } else {
                    fresh
                }
            }
            None => fresh,
        };
        let file = self.fs.open(&path).map_err(|e| io_failure("open", &path, e))?;
        self.fs.sync_dir(&self.dir).map_err(|e| io_failure("sync directory", &self.dir, e))?;
        let len = std::fs::metadata(&path).map(|m| m.len()).map_err(|e| io_failure("stat", &path, e))?;
        // The newest segment's zeros were cut when the log was opened (`repair_last_segment`).
        self.good_len = len;
        self.written_len = len;
        self.synced_len = len;
        self.allocated_len = len;
        self.file = Some(file);
        Ok(())
    }

    /// fdatasync of the open segment if anything was written since the last one.
    fn sync_if_dirty(&mut self) -> Result<()> {
        self.sync_due = None;
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        if self.written_len == self.synced_len {
            return Ok(());
        }
        let start = Instant::now();
        file.sync_data().map_err(|e| io_failure("sync", &self.dir, e))?;
        self.synced_len = self.written_len;
        self.good_len = self.written_len;
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        let us = start.elapsed().as_micros().min(u64::MAX as u128) as u64;
        self.shared.last_sync_latency_us.store(us, Ordering::Relaxed);
        Ok(())
    }

    fn flush(&mut self, reply: Sender<Result<()>>) {
        if self.shared.failed.load(Ordering::SeqCst) {
            let _ = reply.send(Err(self.shared.failed_error()));
            return;
        }
        let result = self.sync_if_dirty();
        if let Err(e) = &result {
            self.mark_failed(e);
        }
        let _ = reply.send(result.map_err(|_| self.shared.failed_error()));
    }

    fn mark_failed(&mut self, e: &Error) {
        if let Ok(mut why) = self.shared.last_error.lock() {
            *why = e.message.clone();
        }
        self.shared.failures.fetch_add(1, Ordering::Relaxed);
        self.shared.failed.store(true, Ordering::SeqCst);
        tracing::error!("{}", self.shared.failed_error());
    }

    /// Marks the log failed (before the acknowledgements run, so that a caller told of
    /// the failure finds later appends refused) and fails the batch.
    fn fail(&mut self, e: Error, batch: Batch) {
        self.mark_failed(&e);
        let err = self.shared.failed_error();
        batch.acknowledge(|_| Err(err.clone()), Err(err.clone()));
    }

    /// While failed: tests the disk with a probe file; if it takes writes again, cuts the
    /// open segment back to its last good byte and resumes.
    fn probe(&mut self) {
        let path = self.dir.join(PROBE_FILE);
        let probe = || -> std::io::Result<()> {
            let mut f = self.fs.open(&path)?;
            f.set_len(0)?;
            f.write_all_at(&[0u8; PROBE_BYTES], 0)?;
            f.sync_data()
        };
        let ok = probe().is_ok();
        let _ = std::fs::remove_file(&path);
        if !ok {
            return;
        }
        if let Some(file) = self.file.as_mut() {
            if file.set_len(self.good_len).and_then(|_| file.sync_data()).is_err() {
                return;
            }
            self.written_len = self.good_len;
            self.synced_len = self.good_len;
            self.allocated_len = self.good_len;
        }
        self.shared.failed.store(false, Ordering::SeqCst);
        tracing::info!("the command log can write to disk again; writes are accepted");
    }
}

fn io_failure(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::unavailable(format!("cannot {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::cmdlog::frame::framed_len;
    use crate::cmdlog::testing::{read_all, rec, wait_until, Faults, FaultyFs, TempDir};

    fn faulty(retry_interval_ms: u64) -> (Arc<Faults>, LogOptions) {
        let faults = Arc::new(Faults::default());
        let options = LogOptions { fs: Arc::new(FaultyFs(faults.clone())), retry_interval_ms, ..LogOptions::default() };
        (faults, options)
    }

    /// Appends record `i` and waits for its acknowledgement.
    fn append_wait(log: &CommandLog, i: i64) -> Result<u64> {
        let (tx, rx) = bounded(1);
        log.append(
            &rec(i).encode().unwrap(),
            Some(Box::new(move |r| {
                let _ = tx.send(r);
            })),
        )?;
        rx.recv().unwrap()
    }

    #[test]
    fn sync_mode_acks_after_the_sync_and_commits_many_records_per_sync() {
        let dir = TempDir::new("group");
        let (faults, options) = faulty(10);
        let log = CommandLog::open_with(dir.path(), Durability::Sync, options).unwrap();
        // (seq, whether the record's bytes were synced when its ack ran), in ack order.
        let acks: Arc<Mutex<Vec<(u64, bool)>>> = Arc::default();
        let mut end = 0u64;
        let mut append = |i: i64| {
            let body = rec(i).encode().unwrap();
            end += framed_len(&body) as u64;
            let (acks, faults, end) = (acks.clone(), faults.clone(), end);
            log.append(
                &body,
                Some(Box::new(move |r| {
                    let synced = faults.synced_bytes.load(Ordering::SeqCst) >= end;
                    acks.lock().unwrap().push((r.unwrap(), synced));
                })),
            )
            .unwrap();
        };
        // The first record's sync is held at the gate while 999 more queue up behind it.
        faults.close_gate();
        append(0);
        wait_until("the first sync", || faults.sync_waiting.load(Ordering::SeqCst));
        for i in 1..1000 {
            append(i);
        }
        assert!(acks.lock().unwrap().is_empty(), "acknowledged before the sync");
        faults.open_gate();
        log.flush_and_sync().unwrap();
        let acks = acks.lock().unwrap().clone();
        assert_eq!(acks, (0..1000).map(|s| (s, true)).collect::<Vec<_>>());
        assert_eq!(faults.syncs.load(Ordering::SeqCst), 2, "one sync per batch");
        let stats = log.stats();
        assert_eq!((stats.records, stats.syncs, stats.next_seq, stats.failed), (1000, 2, 1000, false));
        assert_eq!(stats.bytes, end);
        drop(log);
        assert_eq!(read_all(dir.path()).len(), 1000);
    }

    #[test]
    fn writers_block_on_a_full_stage_and_a_barrier_follows_the_records_before_it() {
        let dir = TempDir::new("stage");
        let (faults, mut options) = faulty(10);
        options.queue_max = 8;
        let log = Arc::new(CommandLog::open_with(dir.path(), Durability::Sync, options).unwrap());
        // The first batch's sync is held: four writers fill the stage to its 8 records and
        // then wait for room.
        faults.close_gate();
        let writers: Vec<_> = (0..4i64)
            .map(|t| {
                let log = log.clone();
                std::thread::spawn(move || {
                    let acked = Arc::new(AtomicU64::new(0));
                    for k in 0..100 {
                        let acked = acked.clone();
                        let ack: Ack = Box::new(move |r| {
                            r.unwrap();
                            acked.fetch_add(1, Ordering::SeqCst);
                        });
                        log.append(&rec(t * 1000 + k).encode().unwrap(), Some(ack)).unwrap();
                    }
                    // Acknowledged only once this writer's 100 records are.
                    let (tx, rx) = bounded(1);
                    let seen = acked.clone();
                    log.barrier(Box::new(move |r| {
                        let _ = tx.send((r.is_ok(), seen.load(Ordering::SeqCst)));
                    }));
                    rx.recv().unwrap()
                })
            })
            .collect();
        wait_until("a full stage", || log.stats().queued == 8);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(log.stats().queued, 8, "no more than the stage holds");
        assert_eq!(faults.syncs.load(Ordering::SeqCst), 0);
        faults.open_gate();
        for w in writers {
            assert_eq!(w.join().unwrap(), (true, 100));
        }
        drop(log);
        // Every record is there once, each writer's in the order it appended them.
        let ids: Vec<i64> = read_all(dir.path())
            .into_iter()
            .map(|e| match e.record {
                Record::Sp { txn_id, .. } => txn_id,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(ids.len(), 400);
        for t in 0..4 {
            let mine: Vec<i64> = ids.iter().copied().filter(|i| i / 1000 == t).collect();
            assert_eq!(mine, (0..100).map(|k| t * 1000 + k).collect::<Vec<_>>());
        }
    }

    #[test]
    fn async_mode_acks_at_once_and_syncs_on_its_timer_or_on_flush() {
        let dir = TempDir::new("async");
        let (faults, options) = faulty(10);
        let log = CommandLog::open_with(dir.path(), Durability::Async { flush_ms: 3_600_000 }, options).unwrap();
        for i in 0..10 {
            assert_eq!(append_wait(&log, i).unwrap(), i as u64);
        }
        assert_eq!(faults.syncs.load(Ordering::SeqCst), 0, "no sync before the window ends");
        log.flush_and_sync().unwrap();
        assert_eq!(faults.syncs.load(Ordering::SeqCst), 1);
        log.flush_and_sync().unwrap();
        assert_eq!(faults.syncs.load(Ordering::SeqCst), 1, "nothing new to sync");
        drop(log);

        let (faults, options) = faulty(10);
        let log = CommandLog::open_with(dir.path(), Durability::Async { flush_ms: 1 }, options).unwrap();
        assert_eq!(append_wait(&log, 10).unwrap(), 10);
        wait_until("the timed sync", || faults.syncs.load(Ordering::SeqCst) == 1);
        drop(log);
        assert_eq!(read_all(dir.path()).len(), 11);
    }

    #[test]
    fn off_mode_writes_nothing_and_acks_at_once() {
        let dir = TempDir::new("off");
        let log = CommandLog::open(&dir.path().join("cmdlog"), Durability::Off).unwrap();
        let called = Arc::new(AtomicBool::new(false));
        let c = called.clone();
        log.append(
            &rec(1).encode().unwrap(),
            Some(Box::new(move |r| {
                assert_eq!(r, Ok(0));
                c.store(true, Ordering::SeqCst);
            })),
        )
        .unwrap();
        assert!(called.load(Ordering::SeqCst));
        log.flush_and_sync().unwrap();
        assert!(!dir.path().join("cmdlog").exists());
        assert_eq!(log.stats().mode, "off");
    }

    #[test]
    fn a_failing_write_fails_acks_refuses_appends_and_resumes_when_the_disk_recovers() {
        let dir = TempDir::new("fault");
        let (faults, options) = faulty(2);
        let log = CommandLog::open_with(dir.path(), Durability::Sync, options).unwrap();
        assert_eq!(append_wait(&log, 0), Ok(0));

        faults.fail_writes.store(true, Ordering::SeqCst);
        let err = append_wait(&log, 1).unwrap_err();
        assert!(err.message.contains("injected: no space left"), "{err}");
        let refused = log.append(&rec(2).encode().unwrap(), None).unwrap_err();
        assert!(refused.message.contains("writes are refused until it can"), "{refused}");
        assert_eq!(refused.kind, lockstep_core::ErrorKind::Unavailable);
        assert!(log.stats().failed);
        assert!(log.flush_and_sync().is_err());

        faults.fail_writes.store(false, Ordering::SeqCst);
        wait_until("recovery", || !log.stats().failed);
        // The half-written record 1 was cut off: record 3 takes its place.
        assert_eq!(append_wait(&log, 3), Ok(1));

        faults.fail_syncs.store(true, Ordering::SeqCst);
        assert!(append_wait(&log, 4).is_err(), "written but not synced: not acknowledged");
        faults.fail_syncs.store(false, Ordering::SeqCst);
        wait_until("recovery", || !log.stats().failed);
        assert_eq!(append_wait(&log, 5), Ok(2));
        assert_eq!(log.stats().failures, 2);
        drop(log);

        let records: Vec<(u64, Record)> = read_all(dir.path()).into_iter().map(|e| (e.seq, e.record)).collect();
        assert_eq!(records, vec![(0, rec(0)), (1, rec(3)), (2, rec(5))]);
    }

    #[test]
    fn reopening_continues_the_sequence_and_oversized_records_are_refused() {
        let dir = TempDir::new("reopen");
        let log = CommandLog::open(dir.path(), Durability::Sync).unwrap();
        assert_eq!(append_wait(&log, 0), Ok(0));
        assert_eq!(append_wait(&log, 1), Ok(1));
        let big = vec![0u8; RECORD_SIZE_MAX_BYTES + 1];
        assert!(log.append(&big, None).unwrap_err().message.contains("outside 1..="));
        drop(log);
        let log = CommandLog::open(dir.path(), Durability::Sync).unwrap();
        assert_eq!(log.stats().next_seq, 2);
        assert_eq!(append_wait(&log, 2), Ok(2));
        drop(log);
        assert_eq!(read_all(dir.path()).iter().map(|e| e.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn records_are_written_into_zeros_laid_ahead_which_read_as_the_end_and_are_cut() {
        let dir = TempDir::new("ahead");
        let options = LogOptions { segment_size_max_bytes: 2 * ZEROS_AHEAD_BYTES, ..LogOptions::default() };
        let log = CommandLog::open_with(dir.path(), Durability::Sync, options).unwrap();
        let mut records_bytes = 0u64;
        for i in 0..3 {
            records_bytes += framed_len(&rec(i).encode().unwrap()) as u64;
            assert_eq!(append_wait(&log, i), Ok(i as u64));
        }
        drop(log);
        // As a crash leaves it: the records, then zeros.
        let first = segment_path(dir.path(), 0);
        let bytes = std::fs::read(&first).unwrap();
        assert!(bytes.len() as u64 > records_bytes + ZEROS_AHEAD_BYTES / 2, "{} bytes", bytes.len());
        assert!(bytes[records_bytes as usize..].iter().all(|&b| b == 0));
        assert_eq!(read_all(dir.path()).len(), 3, "zeros after the records are not records");

        // Reopening cuts the zeros without reporting damage, and appends after the records.
        assert_eq!(repair_last_segment(dir.path()).unwrap(), (None, 3));
        assert_eq!(std::fs::metadata(&first).unwrap().len(), records_bytes);
        let options = LogOptions { segment_size_max_bytes: 2 * ZEROS_AHEAD_BYTES, ..LogOptions::default() };
        let log = CommandLog::open_with(dir.path(), Durability::Sync, options).unwrap();
        // Enough records to fill the segment past its size: the next one starts a new
        // segment, and the full one is cut back to its records.
        let big = |i: i64| Record::Sp {
            txn_id: i,
            partition: 0,
            procedure: "Vote".into(),
            params: vec![lockstep_core::Value::Bytes(vec![7; 100_000].into())],
        };
        let mut i = 3;
        while list_segments(dir.path()).unwrap().len() < 2 {
            let (tx, rx) = bounded(1);
            log.append(
                &big(i).encode().unwrap(),
                Some(Box::new(move |r| {
                    let _ = tx.send(r);
                })),
            )
            .unwrap();
            assert_eq!(rx.recv().unwrap(), Ok(i as u64));
            i += 1;
        }
        drop(log);
        let bytes = std::fs::read(&first).unwrap();
        assert_ne!(bytes.last(), Some(&0), "the full segment ends with its last record");
        let all = read_all(dir.path());
        assert_eq!(all.len() as i64, i);
        assert_eq!(all.last().map(|e| e.record.clone()), Some(big(i - 1)));
    }

    use crate::cmdlog::record::Record;
}
