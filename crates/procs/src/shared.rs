//! State shared between the runtime and the Rust callbacks it gives Lua: the host of the
//! call in progress, the fatal error that ends it, the budget counter and the call's outputs.
//!
//! Everything lives on the runtime's one thread, so plain `Cell`/`RefCell` suffice.

use std::cell::{Cell, RefCell};
use std::ptr::NonNull;
use std::rc::Rc;

use lockstep_core::{Error, Result};
use mlua::Lua;

use crate::{CallContext, StmtInfo, TxnHost, APP_STATUS_UNSET};

/// Addresses of result objects' blocks (see `result_obj`). Shared by the objects themselves,
/// which may outlive `Shared` while the Lua state closes.
pub(crate) type LiveResults = RefCell<std::collections::HashSet<usize, foldhash::fast::FixedState>>;

/// Restores the heap limit lifted by [`Shared::lift_heap_limit`] when dropped.
pub(crate) struct HeapLimitLift<'a> {
    lua: &'a Lua,
    /// The limit in force before the lift (a module load sets a lower one for a while).
    limit: usize,
}

impl<'a> HeapLimitLift<'a> {
    /// Lifts the limit in force (when `limited`: a limit is configured) until the guard drops.
    pub(crate) fn new(lua: &'a Lua, limited: bool) -> Self {
        let limit = if limited { lua.set_memory_limit(0).unwrap_or(0) } else { 0 };
        HeapLimitLift { lua, limit }
    }
}

impl Drop for HeapLimitLift<'_> {
    fn drop(&mut self) {
        if self.limit > 0 {
            let _ = self.lua.set_memory_limit(self.limit);
        }
    }
}

/// The statement planner handed to `load`, borrowed for `'a`.
pub(crate) type PrepareRef<'a> = dyn FnMut(&str) -> Result<StmtInfo> + 'a;
/// The planner with its lifetime erased (see [`PrepareSlot`]).
pub(crate) type PrepareFn = PrepareRef<'static>;

/// An error that ends the call however the procedure tries to catch it (`pcall` re-raises it).
#[derive(Clone, Debug)]
pub(crate) enum Fatal {
    /// `abort(msg)`: USER_ABORT with exactly the user's message.
    Abort(String),
    /// The host or the planner failed; the message already carries the Lua location.
    Host(Error),
    /// The instruction budget ran out.
    Budget,
    /// The Lua heap hit its limit.
    Memory,
}

/// Per-runtime state the callbacks reach through an `Rc`.
pub(crate) struct Shared {
    host: Cell<Option<NonNull<dyn TxnHost + 'static>>>,
    prepare: Cell<Option<NonNull<PrepareFn>>>,
    fatal: RefCell<Option<Fatal>>,
    /// Instructions counted so far by the hook in this call (in steps of the hook interval).
    pub(crate) instructions: Cell<u64>,
    pub(crate) instruction_budget: u64,
    pub(crate) app_status: Cell<i8>,
    pub(crate) app_status_string: RefCell<Option<String>>,
    /// splitmix64 state of `ctx.random`, seeded from the txn id.
    pub(crate) rng_state: Cell<u64>,
    /// The running call's context, read by `ctx.txn_id`, `ctx.timestamp` and `ctx.partition`.
    pub(crate) call: Cell<CallContext>,
    /// The metatable marking bound statements (set once by `stmt::register`).
    pub(crate) bound_meta: std::cell::OnceCell<mlua::Table>,
    /// The Lua heap limit (0: none), lifted while Rust callbacks run (see [`Shared::lift_heap_limit`]).
    memory_limit_bytes: usize,
    /// Columns `result_table` built recently, newest last: a procedure builds the same
    /// few shapes on every call, and a hit shares them instead of making every name again.
    pub(crate) built_columns: RefCell<std::collections::VecDeque<std::sync::Arc<[lockstep_core::ResultColumn]>>>,
    /// The addresses of the result objects that still hold their table (see `result_obj`):
    /// what tells a result object from another userdata when a procedure returns it.
    pub(crate) results: Rc<LiveResults>,
}

impl Shared {
    pub(crate) fn new(instruction_budget: u64, memory_limit_bytes: usize) -> Self {
        Shared {
            memory_limit_bytes,
            host: Cell::new(None),
            prepare: Cell::new(None),
            fatal: RefCell::new(None),
            instructions: Cell::new(0),
            instruction_budget,
            app_status: Cell::new(APP_STATUS_UNSET),
            app_status_string: RefCell::new(None),
            rng_state: Cell::new(0),
            call: Cell::new(CallContext::default()),
            bound_meta: std::cell::OnceCell::new(),
            built_columns: RefCell::default(),
            results: Rc::default(),
        }
    }

    /// Sets the Lua heap limit: the configured one, or the lower of it and `below` (while a
    /// module loads). A lift restores whatever limit is in force by itself.
    pub(crate) fn apply_heap_limit(&self, lua: &Lua, below: Option<usize>) -> mlua::Result<()> {
        let limit = match (self.memory_limit_bytes, below) {
            (configured, None) => configured,
            (0, Some(b)) => b,
            (configured, Some(b)) => configured.min(b),
        };
        lua.set_memory_limit(limit)?;
        Ok(())
    }

    /// Lifts the Lua heap limit until the guard drops. Rust code that builds Lua values holds
    /// it: while a limit is set, mlua wraps every table, string and userdata it creates in a
    /// protected call, which costs more than the work itself. What such code allocates is
    /// bounded by the rows it converts, and the limit is back before Lua code runs again, so
    /// a procedure over it still fails at its next allocation.
    pub(crate) fn lift_heap_limit<'a>(&self, lua: &'a Lua) -> HeapLimitLift<'a> {
        HeapLimitLift::new(lua, self.memory_limit_bytes > 0)
    }

    /// Resets everything a call or a load may have left behind, for a call in `call` (a
    /// module load runs in the default context: txn id 0).
    pub(crate) fn reset(&self, call: CallContext) {
        self.fatal.replace(None);
        self.instructions.set(0);
        self.app_status.set(APP_STATUS_UNSET);
        self.app_status_string.replace(None);
        self.rng_state.set(crate::rng::seed(call.txn_id));
        self.call.set(call);
    }

    /// Records the error that ends the call; the first one wins (later ones are its echoes).
    pub(crate) fn set_fatal(&self, fatal: Fatal) {
        let mut slot = self.fatal.borrow_mut();
        if slot.is_none() {
            *slot = Some(fatal);
        }
    }

    /// Adds `units` (VM instructions, or work counted as such: see `meter`) to the call's
    /// count; false once the count is past the budget.
    pub(crate) fn charge(&self, units: u64) -> bool {
        let used = self.instructions.get().saturating_add(units);
        self.instructions.set(used);
        used <= self.instruction_budget
    }

    /// Whether a call is running (a host is lent), rather than a module loading.
    pub(crate) fn in_call(&self) -> bool {
        self.host.get().is_some()
    }

    pub(crate) fn is_fatal(&self) -> bool {
        self.fatal.borrow().is_some()
    }

    pub(crate) fn take_fatal(&self) -> Option<Fatal> {
        self.fatal.borrow_mut().take()
    }

    /// Runs `f` with the host of the call in progress, or returns None outside a call.
    pub(crate) fn with_host<R>(&self, f: impl FnOnce(&mut dyn TxnHost) -> R) -> Option<R> {
        let ptr = self.host.get()?;
        // SAFETY: the pointer was made from a `&mut dyn TxnHost` that `LuaRuntime::call` holds
        // exclusively for the whole time the pointer is set (HostSlot clears it on every exit
        // path, panics included). Lua runs on this thread only, and the host never calls back
        // into Lua, so no other reference to the host is live while `f` runs.
        Some(f(unsafe { &mut *ptr.as_ptr() }))
    }

    /// Runs `f` with the planner of the load in progress, or returns None outside a load.
    pub(crate) fn with_prepare<R>(&self, f: impl FnOnce(&mut PrepareFn) -> R) -> Option<R> {
        let ptr = self.prepare.get()?;
        // SAFETY: as for `with_host`: `LuaRuntime::load` holds the `&mut` for the whole time
        // the pointer is set and PrepareSlot clears it on exit; the planner never runs Lua.
        Some(f(unsafe { &mut *ptr.as_ptr() }))
    }
}

/// Makes the host reachable from callbacks for the lifetime of the slot, without allocating.
pub(crate) struct HostSlot<'a> {
    shared: &'a Shared,
}

impl<'a> HostSlot<'a> {
    pub(crate) fn set(shared: &'a Shared, host: &'a mut dyn TxnHost) -> Self {
        let ptr: NonNull<dyn TxnHost + 'a> = NonNull::from(host);
        // SAFETY: only the lifetime is erased. The slot borrows `host` for 'a and clears the
        // pointer when dropped, so the pointer is never used after the borrow ends.
        let ptr: NonNull<dyn TxnHost + 'static> = unsafe { std::mem::transmute(ptr) };
        shared.host.set(Some(ptr));
        HostSlot { shared }
    }
}

impl Drop for HostSlot<'_> {
    fn drop(&mut self) {
        self.shared.host.set(None);
    }
}

/// Makes the planner reachable from `sql()` while a module chunk runs.
pub(crate) struct PrepareSlot<'a> {
    shared: &'a Shared,
}

impl<'a> PrepareSlot<'a> {
    pub(crate) fn set(shared: &'a Shared, prepare: &'a mut PrepareRef<'a>) -> Self {
        let ptr: NonNull<PrepareRef<'a>> = NonNull::from(prepare);
        // SAFETY: lifetime erasure only; cleared on drop, as for HostSlot.
        let ptr: NonNull<PrepareFn> = unsafe { std::mem::transmute(ptr) };
        shared.prepare.set(Some(ptr));
        PrepareSlot { shared }
    }
}

impl Drop for PrepareSlot<'_> {
    fn drop(&mut self) {
        self.shared.prepare.set(None);
    }
}
