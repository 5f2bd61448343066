//! Hints that start cache misses early, so that several overlap instead of each being
//! waited for in turn.

use crate::Value;

const LINE_BYTES: usize = 64;

/// Asks the CPU to start loading the first `max_lines` cache lines of the `len` bytes at
/// `p`.
pub fn prefetch_lines(p: *const u8, len: usize, max_lines: usize) {
    for off in (0..len.min(max_lines * LINE_BYTES)).step_by(LINE_BYTES) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch is only a hint; it never faults, even for an invalid address,
        // and `wrapping_add` computes the address without dereferencing it.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (p, off);
    }
}

/// Asks the CPU to start loading the first `max_lines` cache lines of each text and byte
/// array in `row` (shorter text is inside the value and needs none).
pub fn prefetch_values(row: &[Value], max_lines: usize) {
    for v in row {
        match v {
            Value::Str(s) if s.is_heap_allocated() => prefetch_lines(s.as_ptr(), s.len(), max_lines),
            Value::Bytes(b) => prefetch_lines(b.as_ptr(), b.len(), max_lines),
            _ => {}
        }
    }
}
