//! A plain-TCP connection's answers, written by the thread that gives them. A site encodes
//! its answers into the connection's outbox and, once its batch of answers is given
//! (`answer_batch`), writes the outbox to the socket itself: no hand-off to the front
//! end's thread and no wake-up of it per batch. Only a write that would block (a client
//! that reads slowly) hands the rest to the connection's writer task, which waits for the
//! socket and empties the outbox until it is idle again. Answers given outside a batch
//! (on the front end's thread, mostly) are written by the writer task too.
//!
//! The lock keeps the answers of two sites whole and in order on one connection; whoever
//! holds it and finds the writer task idle may write. TLS connections keep the channel to
//! their writer task (`connection.rs`): only that task can encrypt.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lockstep_engine::answer_batch::{self, Flush};
use lockstep_engine::Outcome;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use crate::clients::InFlight;
use crate::connection::{encode_answer, Answer};
use crate::push::PushSink;
use crate::Front;

/// An outbox emptied of more than this keeps no more of its buffer.
const KEPT_BUFFER_BYTES_MAX: usize = 1024 * 1024;

pub struct Outbox {
    state: Mutex<State>,
    /// The connection's socket (a second descriptor of it, non-blocking as the first).
    socket: TcpStream,
    window: Arc<InFlight>,
    /// Senders alive: none left (and the outbox empty) ends the writer task.
    senders: AtomicUsize,
    /// Wakes the writer task: a write would block, the last sender is gone, or an answer
    /// asks for the server to stop once it is written.
    wake_writer: Notify,
}

#[derive(Default)]
struct State {
    /// Encoded answers; `out[sent..]` is not written yet.
    out: Vec<u8>,
    sent: usize,
    /// The writer task is writing: answers are left in `out` for it.
    writer_owns: bool,
    /// `@Shutdown` was answered: the server stops once that answer is written.
    shutdown_after: bool,
    /// The connection is gone (closed, failed, or its client stopped reading): answers
    /// are dropped.
    closed: bool,
}

impl State {
    /// Everything in `out` is written: it starts again, keeping a buffer of moderate size.
    fn emptied(&mut self) {
        self.sent = 0;
        if self.out.capacity() > KEPT_BUFFER_BYTES_MAX {
            self.out = Vec::new();
        } else {
            self.out.clear();
        }
    }
}

impl Outbox {
    /// An outbox writing to `socket`, with its first sender.
    pub fn new(socket: TcpStream, window: Arc<InFlight>) -> (Arc<Outbox>, Sender) {
        let outbox = Arc::new(Outbox { state: Mutex::default(), socket, window, senders: AtomicUsize::new(1), wake_writer: Notify::new() });
        (outbox.clone(), Sender(outbox))
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Encodes `answer`, then writes it now or at the end of this thread's batch.
    fn send(self: &Arc<Self>, answer: Answer) -> bool {
        let mut s = self.lock();
        if s.closed {
            return false;
        }
        let shutdown = encode_answer(answer, &mut s.out, &self.window);
        s.shutdown_after |= shutdown;
        if s.writer_owns {
            return true;
        }
        drop(s);
        // Outside a batch (the front end's own answers, a cluster leader's replication
        // task, a coordinator) the writer task writes: it gathers into one write whatever
        // such threads give meanwhile, as the front end's thread runs it anyway.
        if !answer_batch::defer(self) || shutdown {
            self.wake_writer.notify_one();
        }
        true
    }
}

impl Flush for Outbox {
    /// Writes what the socket takes without waiting; the rest goes to the writer task.
    fn flush(&self) {
        let mut s = self.lock();
        if s.writer_owns || s.closed || s.sent == s.out.len() {
            return;
        }
        let sent = s.sent;
        // A failed write leaves the rest to the writer task: full or interrupted, it waits
        // for room; gone, it finds out too and ends the connection.
        if let Ok(n) = (&self.socket).write(&s.out[sent..]) {
            self.window.answers_written(n);
            if sent + n == s.out.len() {
                return s.emptied();
            }
            s.sent = sent + n;
        }
        s.writer_owns = true;
        drop(s);
        self.wake_writer.notify_one();
    }
}

impl Outbox {
    /// For the writer task: swaps the bytes not written yet into `buf` and takes over the
    /// writing; or, when everything is written, leaves the writing to the answering threads.
    fn take_unwritten(&self, buf: &mut Vec<u8>, front: &Front) -> Taken {
        let mut s = self.lock();
        if s.sent < s.out.len() {
            s.writer_owns = true;
            std::mem::swap(buf, &mut s.out);
            return Taken::From(std::mem::take(&mut s.sent));
        }
        s.writer_owns = false;
        s.emptied();
        if std::mem::take(&mut s.shutdown_after) {
            // The caller has its answer (if it is still there): now stop the server.
            front.shutdown.notify_one();
        }
        // Seen under the lock: a sender gives its last answer (and leaves it here if the
        // socket was full) before it is counted out.
        match self.senders.load(Ordering::SeqCst) {
            0 => Taken::AllDone,
            _ => Taken::Nothing,
        }
    }

    /// No more answers are written: the ones still to come are dropped.
    fn close(&self) {
        let mut s = self.lock();
        s.closed = true;
        s.out = Vec::new();
        s.sent = 0;
    }
}

/// What the writer task found in the outbox.
enum Taken {
    /// Bytes to write, from this offset of the buffer taken.
    From(usize),
    /// Nothing: wait to be woken.
    Nothing,
    /// Nothing, and no sender is left: the connection is done.
    AllDone,
}

/// A handle that gives answers to one connection; the writer task ends once the last one
/// is dropped and everything given is written.
pub struct Sender(Arc<Outbox>);

impl Sender {
    pub fn send(&self, answer: Answer) -> bool {
        self.0.send(answer)
    }
}

impl Clone for Sender {
    fn clone(&self) -> Self {
        self.0.senders.fetch_add(1, Ordering::SeqCst);
        Sender(self.0.clone())
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.0.senders.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.wake_writer.notify_one();
        }
    }
}

impl PushSink for Sender {
    fn push(&self, handle: i64, outcome: Outcome) -> bool {
        self.send(Answer::from((handle, outcome)))
    }
}

/// The connection's writer task: writes whatever a thread could not write without waiting,
/// and stops the server after an `@Shutdown` answer is written. Returns why it stopped
/// early: a client whose unread answers make no progress for `client_timeout_s` is let go.
pub async fn write_answers(mut writer: impl AsyncWrite + Unpin, outbox: Arc<Outbox>, front: Arc<Front>) -> String {
    let hangup_timeout = Duration::from_secs(front.config.client_timeout_s);
    // The bytes taken from the outbox to write; `buf[sent..]` is not written yet.
    let mut buf = Vec::new();
    let reason = loop {
        let mut sent = match outbox.take_unwritten(&mut buf, &front) {
            Taken::From(sent) => sent,
            Taken::Nothing => {
                outbox.wake_writer.notified().await;
                continue;
            }
            Taken::AllDone => break String::new(),
        };
        let written = loop {
            if sent == buf.len() {
                break Ok(());
            }
            match tokio::time::timeout(hangup_timeout, writer.write(&buf[sent..])).await {
                Ok(Ok(0) | Err(_)) => break Err(String::new()),
                Ok(Ok(n)) => {
                    sent += n;
                    outbox.window.answers_written(n);
                }
                Err(_) => {
                    let unread = buf.len() - sent;
                    break Err(format!("the client left {unread} bytes of answers unread for {} s", hangup_timeout.as_secs()));
                }
            }
        };
        if let Err(reason) = written {
            break reason;
        }
        buf.clear();
    };
    outbox.close();
    if reason.is_empty() {
        let _ = writer.shutdown().await;
    } else {
        // The socket's other descriptor would keep it open for the calls still running.
        let _ = outbox.socket.shutdown(Shutdown::Both);
    }
    reason
}
