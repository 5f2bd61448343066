//! A connection's answers on their way to its socket.
//!
//! Whichever thread finishes a call (its site, or the command log's thread after the
//! fsync) encodes the answer straight into the connection's buffer. The answer's tables
//! are then freed on the thread that made them, and nothing crosses a channel; freeing
//! them on the front end's thread cost it a third of its time (mimalloc's cross-thread
//! frees). The writer swaps the whole buffer out for each socket write.
//!
//! The calls' window slots wait beside their bytes until those are written, so a client
//! that does not read its answers still stops being read once its window is full.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockstep_engine::Outcome;
use lockstep_wire::{encode_response, Response};
use tokio::sync::Notify;

use crate::clients::{InFlight, Slot};
use crate::push::PushSink;

/// How often a writer whose reader has stopped checks whether calls are still in flight.
const DRAIN_RECHECK: Duration = Duration::from_millis(50);
/// A write buffer grown past this by a large answer is not kept for the next write.
const BUFFER_KEEP_BYTES: usize = 1024 * 1024;

/// One answer to encode.
pub struct Answer {
    pub handle: i64,
    pub outcome: Outcome,
    /// From receipt to answer: VoltDB's cluster round trip.
    pub round_trip: Duration,
    /// The call's share of the window; `None` for a push.
    pub slot: Option<Slot>,
    /// `@Shutdown`: stop the server once this answer is on the wire.
    pub then_shutdown: bool,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    slots: Vec<Slot>,
    shutdown: bool,
    /// The reader has stopped: the writer ends once every call in flight is written.
    reading_done: bool,
    /// The writer has ended: answers are dropped.
    closed: bool,
}

#[derive(Default)]
pub struct Answers {
    pending: Mutex<Pending>,
    ready: Notify,
}

impl Answers {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Encodes `a` for the writer; false once the connection is gone.
    pub fn push(&self, a: Answer) -> bool {
        let mut p = self.lock();
        if p.closed {
            return false;
        }
        let wake = p.bytes.is_empty();
        let o = a.outcome;
        let r = Response {
            handle: a.handle,
            status: o.status,
            status_string: o.status_string,
            app_status: o.app_status,
            app_status_string: o.app_status_string,
            cluster_round_trip_ms: a.round_trip.as_millis().min(i32::MAX as u128) as i32,
            tables: o.tables,
        };
        encode_response(&r, &mut p.bytes);
        p.slots.extend(a.slot);
        p.shutdown |= a.then_shutdown;
        drop(p);
        if wake {
            self.ready.notify_one();
        }
        true
    }

    /// The reader has stopped; the writer ends after the answers still to come.
    pub fn reading_done(&self) {
        self.lock().reading_done = true;
        self.ready.notify_one();
    }

    /// Waits for answers and swaps them into `out` and `slots` (both empty); returns
    /// whether one asks the server to stop, or None when the writer is done.
    async fn take(&self, out: &mut Vec<u8>, slots: &mut Vec<Slot>, in_flight: &InFlight) -> Option<bool> {
        loop {
            let draining = {
                let mut p = self.lock();
                if !p.bytes.is_empty() {
                    std::mem::swap(&mut p.bytes, out);
                    std::mem::swap(&mut p.slots, slots);
                    return Some(std::mem::take(&mut p.shutdown));
                }
                // No answer is buffered, so no slot is: calls still in flight will answer.
                if p.reading_done && in_flight.calls_in_flight() == 0 {
                    return None;
                }
                p.reading_done
            };
            if draining {
                // A call the engine drops unanswered (at shutdown) frees its slot without a
                // wakeup: look again now and then.
                let _ = tokio::time::timeout(DRAIN_RECHECK, self.ready.notified()).await;
            } else {
                self.ready.notified().await;
            }
        }
    }

    fn close(&self) {
        let mut p = self.lock();
        p.closed = true;
        p.bytes = Vec::new();
        p.slots.clear();
    }
}

impl PushSink for Arc<Answers> {
    fn push(&self, handle: i64, outcome: Outcome) -> bool {
        Answers::push(self, Answer { handle, outcome, round_trip: Duration::ZERO, slot: None, then_shutdown: false })
    }
}

/// Writes answers as they come, everything buffered in one write. `stopping` is told
/// about an answered `@Shutdown` once it is on the wire.
pub async fn write_answers<W: tokio::io::AsyncWrite + Unpin>(
    mut writer: W,
    answers: Arc<Answers>,
    in_flight: Arc<InFlight>,
    stopping: impl Fn(),
) {
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::new();
    let mut slots = Vec::new();
    while let Some(shutdown) = answers.take(&mut out, &mut slots, &in_flight).await {
        let written = writer.write_all(&out).await.is_ok();
        // Written: the calls leave the window.
        slots.clear();
        out.clear();
        if out.capacity() > BUFFER_KEEP_BYTES {
            out = Vec::new();
        }
        if shutdown {
            let _ = writer.flush().await;
            stopping();
        }
        if !written {
            break;
        }
    }
    answers.close();
    let _ = writer.shutdown().await;
}
