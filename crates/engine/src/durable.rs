//! What sites and the coordinator share for durability: the command log and the write
//! fence. When the log cannot write, transactions already run in memory may be missing
//! from it, so writes are refused (the fence) until a snapshot taken after the disk
//! recovered has captured the memory state again.
//!
//! In sync mode a client must never see data a crash could still lose: an answer that
//! logs nothing (a read, an abort) waits behind the writes logged before it, unless none
//! it could have seen is still waiting for its sync. A single-partition call sees only its
//! partition's writes and the multi-partition ones, so writes are counted by partition.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use lockstep_core::{Error, Result, ResultTable};

use crate::cmdlog::{CommandLog, Durability, Record};
use crate::outcome::{Outcome, Reply, APP_STATUS_UNSET};

/// VoltDB's RESPONSE_UNKNOWN: the transaction ran but could not be made durable.
pub const STATUS_RESPONSE_UNKNOWN: i8 = -7;
/// A thread's encoding buffer is given back to the allocator when a record grew it past
/// this, so one huge record does not pin its size.
const SCRATCH_KEPT_BYTES_MAX: usize = 1024 * 1024;

thread_local! {
    /// Where this thread encodes records before the log copies them into its staging
    /// buffer: reused, so logging a transaction allocates nothing for its bytes.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `f` on the encoded body of `record`; fails only when the record cannot be
/// encoded (then `f` does not run).
pub fn with_encoded<T>(record: &Record, f: impl FnOnce(&[u8]) -> T) -> Result<T> {
    // Taken out of the thread-local while in use, so a nested call gets a fresh buffer.
    let mut buf = SCRATCH.with(|s| s.take());
    buf.clear();
    let result = record.encode_into(&mut buf).map(|()| f(&buf));
    if buf.capacity() <= SCRATCH_KEPT_BYTES_MAX {
        SCRATCH.with(|s| s.set(buf));
    }
    result
}

/// Logged transactions that failed when replayed. A logged transaction succeeded when it
/// ran and execution is deterministic, so a failure means the log no longer reproduces
/// what it acknowledged: recovery stops rather than start without it.
#[derive(Default)]
pub struct ReplayErrors {
    count: AtomicU64,
    first: std::sync::Mutex<Option<String>>,
}

impl ReplayErrors {
    /// Records a failed replay; `what` names the transaction and the error.
    pub fn record(&self, what: String) {
        tracing::error!("a replayed transaction failed: {what}");
        if self.count.fetch_add(1, Ordering::SeqCst) == 0 {
            *self.first.lock().unwrap_or_else(|p| p.into_inner()) = Some(what);
        }
    }

    /// How many failed and the first one's description, if any failed.
    pub fn take(&self) -> Option<(u64, String)> {
        let count = self.count.swap(0, Ordering::SeqCst);
        let first = self.first.lock().unwrap_or_else(|p| p.into_inner()).take();
        (count > 0).then(|| (count, first.unwrap_or_default()))
    }
}

pub struct Durable {
    pub log: CommandLog,
    /// Failures seen while replaying the log at start-up.
    pub replay_errors: ReplayErrors,
    write_fence: AtomicBool,
    /// Records appended with an acknowledgement that has not run yet, by the partition whose
    /// data they changed; the last slot counts multi-partition records.
    unacknowledged: Box<[AtomicU64]>,
}

impl Durable {
    pub fn new(log: CommandLog, partitions: u32) -> Self {
        let unacknowledged = (0..=partitions).map(|_| AtomicU64::new(0)).collect();
        Durable { log, replay_errors: ReplayErrors::default(), write_fence: AtomicBool::new(false), unacknowledged }
    }

    /// The counter of `partition`'s records; None (or an unknown partition) is the
    /// multi-partition one, which every answer checks.
    fn unacknowledged_of(&self, partition: Option<u32>) -> &AtomicU64 {
        let multi = self.unacknowledged.len() - 1;
        &self.unacknowledged[partition.map_or(multi, |p| (p as usize).min(multi))]
    }

    /// Whether a write an answer for `partition` (None: every partition) could have seen
    /// is still waiting for its sync.
    fn may_see_unsynced(&self, partition: Option<u32>) -> bool {
        let pending = |c: &AtomicU64| c.load(Ordering::SeqCst) > 0;
        match partition {
            Some(_) => pending(self.unacknowledged_of(partition)) || pending(self.unacknowledged_of(None)),
            None => self.unacknowledged.iter().any(pending),
        }
    }

    /// Whether transactions are logged at all.
    pub fn logging(&self) -> bool {
        self.log.mode() != Durability::Off
    }

    /// Whether writes are refused because the log failed since the last good snapshot.
    pub fn fenced(&self) -> bool {
        self.write_fence.load(Ordering::SeqCst)
    }

    pub fn raise_fence(&self) {
        if !self.write_fence.swap(true, Ordering::SeqCst) {
            tracing::error!("the command log failed: writes are refused until the disk recovers and a snapshot is taken");
        }
    }

    pub fn lower_fence(&self) {
        if self.write_fence.swap(false, Ordering::SeqCst) {
            tracing::info!("the command log recovered and a snapshot captured memory: writes are accepted again");
        }
    }

    /// The error for a write refused by the fence.
    pub fn fence_error(&self) -> Error {
        Error::unavailable("the command log cannot write to disk: writes are refused until it recovers (reads still work)")
    }

    /// Appends a record without waiting; a failure raises the fence.
    pub fn append(&self, record: &Record) {
        if let Err(e) = with_encoded(record, |body| self.log.append(body, None)).and_then(|r| r) {
            tracing::error!("command log append failed: {e}");
            self.raise_fence();
        }
    }

    /// Appends an encoded record whose changes to `partition` (None: any) are already
    /// visible in memory; `ack` runs once it is durable (or with the error that kept it
    /// from being so). Until then, answers that log nothing and may see it wait behind it.
    /// `ack` is boxed once, here, with this `Durable` lent to it: a logged transaction
    /// allocates on its site and frees on the logger's thread, so each allocation saved
    /// counts twice.
    pub fn append_acked(self: &Arc<Self>, body: &[u8], partition: Option<u32>, ack: impl FnOnce(&Durable, Result<u64>) + Send + 'static) {
        self.unacknowledged_of(partition).fetch_add(1, Ordering::SeqCst);
        let me = self.clone();
        let _ = self.log.append(
            body,
            Some(Box::new(move |r| {
                let before = me.unacknowledged_of(partition).fetch_sub(1, Ordering::SeqCst);
                assert!(before > 0, "a log record was acknowledged twice");
                ack(&me, r)
            })),
        );
    }

    /// Appends the record of a committed transaction and answers the client once it is as
    /// durable as the mode promises. If it cannot be logged, the answer says the outcome is
    /// unknown (it ran in memory) and writes are fenced off.
    pub fn append_then_reply(self: &Arc<Self>, record: &Record, outcome: Outcome, reply: Reply) {
        // Held outside the closure, so a record that cannot be encoded is still answered.
        let mut answer = Some((outcome, reply));
        let appended = with_encoded(record, |body| {
            if let Some((outcome, reply)) = answer.take() {
                self.append_acked(body, record.partition(), move |me, r| match r {
                    Ok(_) => reply(outcome),
                    Err(e) => {
                        me.raise_fence();
                        reply(unknown(e))
                    }
                });
            }
        });
        if let (Err(e), Some((_, reply))) = (appended, answer) {
            reply(unknown(e));
        }
    }

    /// Whether the answer to a call on `partition` (None: multi-partition) that logged
    /// nothing must wait: in sync mode, while writes it may have seen are not yet on disk.
    pub fn must_wait(&self, partition: Option<u32>) -> bool {
        self.log.mode() == Durability::Sync && self.may_see_unsynced(partition)
    }

    /// Answers a call on `partition` (None: multi-partition) that logged nothing: at once,
    /// or once the writes it may have seen are durable (`must_wait`).
    pub fn reply_after_earlier_writes(&self, partition: Option<u32>, outcome: Outcome, reply: Reply) {
        if self.must_wait(partition) {
            // One answer: its own barrier, without a group's vector.
            self.log.barrier(Box::new(move |_| reply(outcome)));
        } else {
            reply(outcome)
        }
    }

    /// Sends `answers` once every record appended before this call is durable: one barrier
    /// for the lot. (A failed log has already answered those records "unknown", so the
    /// answers then go out as they are.)
    pub fn reply_when_appended_are_durable(&self, answers: Vec<(Outcome, Reply)>) {
        self.log.barrier(Box::new(move |_| {
            for (outcome, reply) in answers {
                reply(outcome)
            }
        }));
    }
}

/// The answer for a transaction that ran but could not be logged.
pub fn unknown(e: Error) -> Outcome {
    Outcome {
        status: STATUS_RESPONSE_UNKNOWN,
        status_string: Some(format!("the transaction ran but could not be made durable, so its outcome after a crash is unknown: {e}")),
        app_status: APP_STATUS_UNSET,
        app_status_string: None,
        tables: Vec::<ResultTable>::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crossbeam_channel::{unbounded, Receiver};

    use super::*;
    use crate::cmdlog::testing::{rec, wait_until, Faults, FaultyFs, TempDir};
    use crate::cmdlog::LogOptions;

    fn sync_log(dir: &TempDir) -> (Arc<Faults>, Arc<Durable>) {
        let faults = Arc::new(Faults::default());
        let options = LogOptions { fs: Arc::new(FaultyFs(faults.clone())), ..LogOptions::default() };
        let log = CommandLog::open_with(dir.path(), Durability::Sync, options).unwrap();
        (faults, Arc::new(Durable::new(log, 3)))
    }

    /// A reply that sends its call's name down `answers`.
    fn reply_as(name: &'static str, answers: &crossbeam_channel::Sender<&'static str>) -> Reply {
        let tx = answers.clone();
        Box::new(move |_| {
            let _ = tx.send(name);
        })
    }

    fn answered(rx: &Receiver<&'static str>) -> Vec<&'static str> {
        rx.try_iter().collect()
    }

    /// A write whose sync is held at the gate (it ran in memory, not yet on disk), then a
    /// read behind it.
    fn write_then_read_with_the_sync_held(faults: &Faults, durable: &Arc<Durable>, tx: &crossbeam_channel::Sender<&'static str>) {
        faults.close_gate();
        durable.append_then_reply(&rec(1), Outcome::tables(vec![]), reply_as("write", tx));
        wait_until("the write's sync", || faults.sync_waiting.load(Ordering::SeqCst));
        durable.reply_after_earlier_writes(rec(1).partition(), Outcome::tables(vec![]), reply_as("read", tx));
    }

    /// The next two answers, in the order they came.
    fn two_answers(rx: &Receiver<&'static str>) -> Vec<&'static str> {
        let mut got = Vec::new();
        wait_until("both answers", || {
            got.extend(answered(rx));
            got.len() == 2
        });
        got
    }

    #[test]
    fn in_sync_mode_a_read_is_answered_only_after_the_writes_before_it_are_on_disk() {
        let dir = TempDir::new("read-barrier");
        let (faults, durable) = sync_log(&dir);
        let (tx, rx) = unbounded();
        write_then_read_with_the_sync_held(&faults, &durable, &tx);
        // Neither may be answered while the write could still be lost.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(answered(&rx), Vec::<&str>::new());
        faults.open_gate();
        assert_eq!(two_answers(&rx), ["write", "read"]);

        // With nothing waiting for a sync, a read is answered at once, gate or no gate.
        faults.close_gate();
        durable.reply_after_earlier_writes(Some(1), Outcome::tables(vec![]), reply_as("read", &tx));
        assert_eq!(answered(&rx), ["read"]);
        faults.open_gate();
    }

    #[test]
    fn answers_handed_over_together_wait_for_one_barrier_and_go_in_order() {
        let dir = TempDir::new("read-barrier-group");
        let (faults, durable) = sync_log(&dir);
        let (tx, rx) = unbounded();
        faults.close_gate();
        durable.append_then_reply(&rec(1), Outcome::tables(vec![]), reply_as("write", &tx));
        wait_until("the write's sync", || faults.sync_waiting.load(Ordering::SeqCst));
        assert!(durable.must_wait(rec(1).partition()) && !durable.must_wait(Some(0)));
        let group = ["read a", "read b", "read c"].map(|name| (Outcome::tables(vec![]), reply_as(name, &tx)));
        durable.reply_when_appended_are_durable(group.into());
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(answered(&rx), Vec::<&str>::new());
        faults.open_gate();
        wait_until("the group", || rx.len() == 4);
        assert_eq!(answered(&rx), ["write", "read a", "read b", "read c"]);
        assert!(!durable.must_wait(rec(1).partition()));
    }

    #[test]
    fn a_read_waits_only_for_writes_it_could_have_seen() {
        let dir = TempDir::new("read-barrier-partitions");
        let (faults, durable) = sync_log(&dir);
        let (tx, rx) = unbounded();
        let read = |partition: Option<u32>, name: &'static str| {
            durable.reply_after_earlier_writes(partition, Outcome::tables(vec![]), reply_as(name, &tx));
        };
        // A write on partition 1, its sync held: partition 0 has nothing to wait for, but a
        // read of partition 1 and a multi-partition read do.
        write_then_read_with_the_sync_held(&faults, &durable, &tx);
        read(Some(0), "read 0");
        read(None, "read all");
        assert_eq!(answered(&rx), ["read 0"]);
        faults.open_gate();
        wait_until("the held answers", || rx.len() == 3);
        assert_eq!(answered(&rx), ["write", "read", "read all"]);

        // A multi-partition write, its sync held, holds reads of every partition.
        faults.close_gate();
        let mp = Record::Mp { txn_id: 9, procedure: "Move".into(), params: vec![] };
        durable.append_then_reply(&mp, Outcome::tables(vec![]), reply_as("mp write", &tx));
        wait_until("the write's sync", || faults.sync_waiting.load(Ordering::SeqCst));
        read(Some(0), "read 0");
        read(Some(2), "read 2");
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(answered(&rx), Vec::<&str>::new());
        faults.open_gate();
        wait_until("the held answers", || rx.len() == 3);
        assert_eq!(answered(&rx), ["mp write", "read 0", "read 2"]);
    }

    #[test]
    fn when_the_log_fails_a_waiting_read_is_still_answered() {
        let dir = TempDir::new("read-barrier-fail");
        let (faults, durable) = sync_log(&dir);
        let (tx, rx) = unbounded();
        faults.fail_syncs.store(true, Ordering::SeqCst);
        write_then_read_with_the_sync_held(&faults, &durable, &tx);
        faults.open_gate();
        assert_eq!(two_answers(&rx), ["write", "read"]);
        assert!(durable.fenced(), "a failed sync fences writes");
    }
}
