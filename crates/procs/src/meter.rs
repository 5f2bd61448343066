//! Charging library work to the instruction budget.
//!
//! Lua's hooks never run inside a C function, so neither the budget (counted by the count
//! hook) nor the time limit (a hook the watchdog sets) sees work done inside one: a
//! pathological pattern ran 11.5 s in one `string.find`. Every library function reachable
//! from procedures whose work is not a small constant charges it here, in VM instructions,
//! and fails with the budget error once the call's count passes its budget, as a Lua loop
//! would. Work that can take long in one go (pattern matching) also checks, every few
//! thousand steps, whether the watchdog has stopped the call.
//!
//! A charge is computed from argument and result sizes, never from time or addresses, so
//! it is the same in every run of a call. It stays below what the work costs in time at
//! the watchdog's bound of 5 instructions a nanosecond (`watch.rs`), so a call that finishes
//! within its time limit is still within its budget.

use std::ffi::c_int;

use mlua::ffi;

use crate::shared::{Fatal, Shared};

/// Bytes copied or scanned that count as one VM instruction: moving 64 bytes takes a
/// nanosecond or more, about what an instruction takes.
pub(crate) const BYTES_PER_INSTRUCTION: u64 = 64;
/// Bytes decoded as UTF-8 that count as one VM instruction (decoding goes a byte at a time).
pub(crate) const UTF8_BYTES_PER_INSTRUCTION: u64 = 16;
/// Steps a long-running function takes between two looks at the budget and the watchdog.
const STEPS_PER_CHECK: u64 = 4096;

/// The charge for copying or scanning `n` bytes.
pub(crate) fn units_for_bytes(n: u64) -> u64 {
    n / BYTES_PER_INSTRUCTION
}

/// Why metered work stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The call's instruction budget ran out.
    Budget,
    /// The watchdog stopped the call (it runs again, counted).
    Time,
}

/// Counts the steps of one long-running library call, charging them in batches.
pub(crate) struct Meter<'a> {
    shared: &'a Shared,
    uncharged: u64,
}

impl<'a> Meter<'a> {
    pub(crate) fn new(shared: &'a Shared) -> Self {
        Meter { shared, uncharged: 0 }
    }

    /// Counts `units` more; every `STEPS_PER_CHECK` charges them and looks at the watchdog.
    #[inline]
    pub(crate) fn add(&mut self, units: u64) -> Result<(), Stop> {
        self.uncharged = self.uncharged.saturating_add(units);
        if self.uncharged >= STEPS_PER_CHECK {
            return self.settle();
        }
        Ok(())
    }

    /// Charges what is counted; fails once the budget is spent or the call was stopped.
    pub(crate) fn settle(&mut self) -> Result<(), Stop> {
        let units = std::mem::take(&mut self.uncharged);
        if !self.shared.charge(units) {
            return Err(Stop::Budget);
        }
        if crate::watch::stop_requested() {
            return Err(Stop::Time);
        }
        Ok(())
    }
}

/// The runtime's `Shared` behind a metered C function's first upvalue (a light pointer set
/// when the function was made: see `libs::install`). The runtime owns it while any Lua code
/// runs.
pub(crate) unsafe fn shared_of<'a>(l: *mut ffi::lua_State) -> &'a Shared {
    &*ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)).cast_const().cast::<Shared>()
}

/// Charges `units` to the running call from a metered C function; raises the budget error
/// when they do not fit. The caller must own nothing (this may not return).
pub(crate) unsafe fn charge(l: *mut ffi::lua_State, units: u64) {
    let shared = shared_of(l);
    if !shared.charge(units) {
        raise(l, shared, Stop::Budget);
    }
}

/// Raises the error of `stop` (recording the budget as the call's fatal error, which no
/// `pcall` catches). The caller must own nothing.
pub(crate) unsafe fn raise(l: *mut ffi::lua_State, shared: &Shared, stop: Stop) -> ! {
    match stop {
        Stop::Budget => {
            shared.set_fatal(Fatal::Budget);
            ffi::lua_pushstring(l, c"instruction budget exceeded".as_ptr());
        }
        Stop::Time => {
            ffi::lua_pushstring(l, crate::watch::STOP_MESSAGE.as_ptr());
        }
    }
    ffi::lua_error(l);
}

/// How many values a C function returned, as a charge (one instruction each).
pub(crate) fn units_for_values(n: c_int) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
