//! The fuzz targets' bodies, one function per target, each run under an allocation limit
//! sized by its input. `targets/*.rs` hand them AFL++'s inputs; `make-seeds` writes their
//! seed corpora; `tests/replay.rs` runs every seed and regression through them without
//! the fuzzer.
//!
//! - `wire`: every VoltDB wire decoder (`lockstep_wire::fuzzing`);
//! - `sql`: the SQL front end against a catalog of the apps' tables (`sql.rs`);
//! - `cmdlog`: command log segment files read back (`lockstep_engine::cmdlog::fuzzing`);
//! - `snapshot`: snapshot directories read back (`lockstep_engine::snapshot::fuzzing`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

pub mod sql;

/// The largest single allocation allowed now (`lockstep_wire::fuzzing::allocation_limit_bytes`
/// of the input being run); unlimited outside a target's body.
static ALLOC_LIMIT_BYTES: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The system allocator, except that an allocation over the limit of the input being run
/// stops the process with a message: a decoder must not reserve what a length prefix
/// claims before the bytes are there. (The fuzzer sees the abort as a crash.)
pub struct LimitedAlloc;

#[global_allocator]
static ALLOCATOR: LimitedAlloc = LimitedAlloc;

impl LimitedAlloc {
    fn check(size: usize) {
        let limit = ALLOC_LIMIT_BYTES.load(Ordering::Relaxed);
        if size > limit {
            // Lifted first, so that the report itself may allocate.
            ALLOC_LIMIT_BYTES.store(usize::MAX, Ordering::Relaxed);
            panic!("an allocation of {size} bytes is over the limit of {limit} bytes for this input");
        }
    }
}

// SAFETY: every call is passed to `System` unchanged; `check` only reads a size.
unsafe impl GlobalAlloc for LimitedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::check(new_size);
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

/// Runs `body` with allocations limited by the size of `data`.
fn limited(data: &[u8], body: impl FnOnce(&[u8])) {
    ALLOC_LIMIT_BYTES.store(lockstep_wire::fuzzing::allocation_limit_bytes(data.len()), Ordering::Relaxed);
    body(data);
    ALLOC_LIMIT_BYTES.store(usize::MAX, Ordering::Relaxed);
}

/// The wire decoders; the first byte chooses which.
pub fn wire(data: &[u8]) {
    limited(data, lockstep_wire::fuzzing::decode_any);
}

/// The SQL front end; the first byte chooses the entry point (see `sql::run`).
pub fn sql(data: &[u8]) {
    // The catalog is built once, before any limit applies.
    sql::catalog();
    limited(data, sql::run);
}

/// The command log reader over segment files made from the input.
pub fn cmdlog(data: &[u8]) {
    limited(data, lockstep_engine::cmdlog::fuzzing::read_log_from_bytes);
}

/// The snapshot reader over a snapshot directory made from the input.
pub fn snapshot(data: &[u8]) {
    limited(data, lockstep_engine::snapshot::fuzzing::read_snapshot_from_bytes);
}

/// A target's body: it panics only when the code under test breaks.
pub type Body = fn(&[u8]);

/// The targets by name, for the replay test.
pub const TARGETS: [(&str, Body); 4] = [("wire", wire), ("sql", sql), ("cmdlog", cmdlog), ("snapshot", snapshot)];
