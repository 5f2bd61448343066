//! Charging library work to the instruction budget.
//!
//! Lua's hooks never run inside a C function, so the budget (counted by the count hook)
//! and the time limit (a hook set by the watchdog) do not see work done inside one. Every
//! library function reachable from procedures whose work is not a small constant charges
//! it here, in VM instructions: the call fails with the budget error once the count passes
//! the budget, as a Lua loop would.
//!
//! The charge must stay deterministic (it is computed from argument and result sizes,
//! never from time or memory addresses) and below what the work really costs in time, at
//! the watchdog's bound of 5 instructions a nanosecond: then a call that finishes within
//! its time limit is still a call within its budget (see `watch.rs`).

/// Bytes copied or scanned that count as one VM instruction: moving 64 bytes takes a
/// nanosecond or more, about what an instruction takes.
pub(crate) const BYTES_PER_INSTRUCTION: u64 = 64;

/// The charge for copying or scanning `n` bytes.
pub(crate) fn units_for_bytes(n: u64) -> u64 {
    n / BYTES_PER_INSTRUCTION
}
