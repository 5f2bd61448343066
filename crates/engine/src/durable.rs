//! What sites and the coordinator share for durability: the command log and the write
//! fence. When the log cannot write, transactions already run in memory may be missing
//! from it, so writes are refused (the fence) until a snapshot taken after the disk
//! recovered has captured the memory state again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lockstep_core::{Error, ResultTable};

use crate::cmdlog::{CommandLog, Durability, Record};
use crate::outcome::{Outcome, Reply, APP_STATUS_UNSET};

/// VoltDB's RESPONSE_UNKNOWN: the transaction ran but could not be made durable.
pub const STATUS_RESPONSE_UNKNOWN: i8 = -7;

pub struct Durable {
    pub log: CommandLog,
    write_fence: AtomicBool,
}

impl Durable {
    pub fn new(log: CommandLog) -> Self {
        Durable { log, write_fence: AtomicBool::new(false) }
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
        Error::unavailable(
            "the command log cannot write to disk: writes are refused until it recovers (reads still work)",
        )
    }

    /// Appends a record without waiting; a failure raises the fence.
    pub fn append(&self, record: &Record) {
        if let Err(e) = record.encode().and_then(|body| self.log.append(body, None)) {
            tracing::error!("command log append failed: {e}");
            self.raise_fence();
        }
    }

    /// Appends the record of a committed transaction and answers the client once it is as
    /// durable as the mode promises. If it cannot be logged, the answer says the outcome is
    /// unknown (it ran in memory) and writes are fenced off.
    pub fn append_then_reply(self: &Arc<Self>, record: &Record, outcome: Outcome, reply: Reply) {
        let body = match record.encode() {
            Ok(b) => b,
            Err(e) => return reply(unknown(e)),
        };
        let me = self.clone();
        let ack = Box::new(move |r: lockstep_core::Result<u64>| match r {
            Ok(_) => reply(outcome),
            Err(e) => {
                me.raise_fence();
                reply(unknown(e))
            }
        });
        let _ = self.log.append(body, Some(ack));
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
