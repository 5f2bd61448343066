//! The command log: every transaction's invocation, appended in execution order by one
//! logger thread with group commit, so that replay after a crash reproduces the state.
//!
//! - `record`: what is logged (SP call, ad-hoc SP, MP marker, MP call, snapshot taken).
//! - `frame`: length + CRC32C framing of one record.
//! - `segment`: segment file names, listing and `truncate_before`.
//! - `reader`: reads all segments in order; cuts (and reports) a torn tail.
//! - `fs`: the file operations the writer uses, a trait so tests can inject failures.
//! - `writer`: `CommandLog`, the logger thread: batching, fdatasync, failure and resume.

pub mod frame;
pub mod fs;
#[doc(hidden)]
pub mod fuzzing;
pub mod reader;
pub mod record;
pub mod segment;
pub mod writer;

pub use frame::RECORD_SIZE_MAX_BYTES;
pub use reader::{repair_last_segment, LogEntry, LogReader, TailRepair};
pub use record::Record;
pub use segment::{log_dir, truncate_before, SEGMENT_SIZE_MAX_BYTES};
pub use writer::{Ack, CommandLog, Durability, LogOptions, LogStats, APPEND_QUEUE_MAX};

#[cfg(test)]
pub(crate) mod testing;
