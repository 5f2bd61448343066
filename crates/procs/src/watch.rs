//! Watched calls: a call runs without Lua's instruction-count hook and is timed instead.
//!
//! Lua 5.4 makes every VM instruction of a hooked state stop in `luaG_traceexec` to count
//! down the hook's interval, whatever that interval is: 5–15% of a procedure's time. A
//! watched call runs with no hook. A watchdog thread signals the call's thread once the
//! call has run past its watch limit, and the signal handler sets a hook that stops it at
//! its next instruction (Lua documents `lua_sethook` as safe in a signal handler; its own
//! `lua.c` stops a script on Ctrl-C this way).
//!
//! The outcome stays deterministic because the clock never decides it. The watch limit is
//! the time the instruction budget takes at 5 billion VM instructions a second, several times
//! what the interpreter reaches on any core, so a call that finishes within it ran fewer
//! instructions than its budget. A call that does not finish within it is reported as
//! overtime: its host undoes it and it runs again, counting instructions, and that run
//! decides the outcome.
//!
//! A call can also have a wall-clock time limit (`CallContext::time_limit`, the query
//! timeout of a client's call). The instruction count does not see everything a call
//! costs: one VM instruction can copy a long string, so a loop well within its budget can
//! run for minutes (`s = s .. "x"` a million times). The time limit stops such a call, in
//! its watched run or in the counted one, for good: the call fails and does not run again.
//! That outcome is decided by the clock, which is acceptable only because the call rolls
//! back and is not logged; a replayed transaction never has a time limit. The same
//! watchdog, signal and stop hook do it; a runtime that counts every call is registered
//! with the watchdog for this alone, and a run with no time limit there is not watched.
//!
//! No hook runs inside a C function, so library functions whose work can be long charge it
//! to the budget themselves and look at `stop_requested` as they go (`meter.rs`); the charge
//! stays below the work's time at the bound above, so the argument holds for them too.
//!
//! Why running a call again is safe: the second run starts from exactly the state the first
//! did. What the first run can have changed is (1) the database, which `TxnHost::restart`
//! undoes; (2) Lua values it made, which nothing outside the call can reach afterwards;
//! (3) its outputs in `Shared` (budget count, app status, `ctx.random`'s state), which every
//! run resets. It cannot have changed the procedure's module: once a module has loaded,
//! every table its body reaches is read-only and no function may assign to a module-level
//! variable (`freeze` in sandbox.lua), a module cannot keep a stateful iterator, a bound
//! statement or a result, and no code runs outside the call (finalizers are refused) or
//! sees when the collector ran (weak tables are refused). The same holds for a call
//! replayed from the command log after a crash.

use std::cell::Cell;
use std::ptr;
use std::sync::atomic::{compiler_fence, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use mlua::ffi;

use crate::TimeLimit;

/// The most VM instructions per nanosecond any core runs (see the module comment).
const INSTRUCTIONS_PER_NANOSECOND_MAX: u64 = 5;
/// Budgets whose limit would be shorter are counted on every call: with a shorter limit,
/// ordinary calls that spend their time in SQL would often run twice.
const LIMIT_MIN: Duration = Duration::from_millis(5);
/// How often the watchdog looks at the calls in progress.
const TICK: Duration = Duration::from_millis(5);

/// The time limit of a watched call with `instruction_budget`, or `None` when calls with
/// that budget must be counted.
pub(crate) fn limit_for(instruction_budget: u64) -> Option<Duration> {
    let limit = Duration::from_nanos(instruction_budget / INSTRUCTIONS_PER_NANOSECOND_MAX);
    (limit >= LIMIT_MIN).then_some(limit)
}

thread_local! {
    /// The Lua state of the watched call this thread is running, or null. Read by the
    /// signal handler: constant-initialised and without destructor, so reading it there
    /// needs no allocation or lock.
    static RUNNING: Cell<*mut ffi::lua_State> = const { Cell::new(ptr::null_mut()) };
    /// When the run in `RUNNING` is to be stopped. The handler stops it only once this has
    /// passed: a signal the watchdog sent for an earlier run that arrives late does nothing.
    static STOP_AT: Cell<Option<Instant>> = const { Cell::new(None) };
    /// Set by the signal handler when it stopped the call in `RUNNING`.
    static STOPPED: Cell<bool> = const { Cell::new(false) };
}

/// What the watchdog knows of one runtime's thread.
struct Watched {
    thread: libc::pthread_t,
    /// When the run in progress is to be stopped, in nanoseconds since `epoch()`; 0 between
    /// runs and for a run nothing stops.
    stop_at: AtomicU64,
    /// False once the runtime is gone. The watchdog holds the lock while it signals, so it
    /// never signals a thread that has ended.
    alive: Mutex<bool>,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// By itself: its result is the call's.
    Finished,
    /// A watched run went past its limit within the call's time limit: undo it and run it
    /// again, counted.
    Overtime,
    /// The call went past its time limit, this long after it began: it fails.
    TimedOut(Duration),
}

/// A runtime's registration with the watchdog. Create and drop it on the thread that runs
/// the calls.
pub(crate) struct Watch {
    lua: *mut ffi::lua_State,
    watched: Arc<Watched>,
    /// How long a watched run may take; `None` when the runtime counts every call.
    rerun_limit: Option<Duration>,
}

impl Watch {
    /// Watches the calls this thread makes on `lua` (the state's main thread): run watched
    /// with `rerun_limit` (see `limit_for`), or counted when it is `None`; either way stopped
    /// at their time limit.
    pub(crate) fn new(lua: *mut ffi::lua_State, rerun_limit: Option<Duration>) -> Watch {
        install_signal_handler();
        // SAFETY: pthread_self has no preconditions.
        let thread = unsafe { libc::pthread_self() };
        let watched = Arc::new(Watched { thread, stop_at: AtomicU64::new(0), alive: Mutex::new(true) });
        let mut list = watchdog().lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&watched));
        Watch { lua, watched, rerun_limit }
    }

    /// Whether calls run watched (else every call is counted).
    pub(crate) fn watches(&self) -> bool {
        self.rerun_limit.is_some()
    }

    /// Runs `call` watched, with no hook: `Overtime` when it ran past the rerun limit,
    /// `TimedOut` when it also ran past `time_limit`. Reads the clock once at the end, and
    /// at the start only without a time limit (the limit's start is the transaction's,
    /// read by its site a moment before).
    pub(crate) fn watched<R>(&self, time_limit: Option<TimeLimit>, call: impl FnOnce() -> R) -> (R, Ended) {
        let rerun_limit = self.rerun_limit.unwrap_or(Duration::ZERO);
        let start = time_limit.map_or_else(Instant::now, |t| t.started);
        let rerun_at = start.checked_add(rerun_limit);
        let stop_at = match (rerun_at, time_limit) {
            (Some(r), Some(t)) => Some(r.min(t.at)),
            (r, t) => r.or(t.map(|t| t.at)),
        };
        let (result, stopped) = self.run(stop_at, call);
        let elapsed = start.elapsed();
        if !stopped && elapsed <= rerun_limit {
            return (result, Ended::Finished);
        }
        // Running it again is pointless once its time is up.
        let now = start + elapsed;
        match time_limit {
            Some(t) if now >= t.at => (result, Ended::TimedOut(now.saturating_duration_since(t.started))),
            _ => (result, Ended::Overtime),
        }
    }

    /// Runs `call` counted (the caller sets the count hook): it ends by itself, or is
    /// stopped for good at `time_limit`. Without a time limit nothing is added to the call.
    pub(crate) fn counted<R>(&self, time_limit: Option<TimeLimit>, call: impl FnOnce() -> R) -> (R, Ended) {
        let Some(limit) = time_limit else {
            return (call(), Ended::Finished);
        };
        let (result, stopped) = self.run(Some(limit.at), call);
        if stopped {
            return (result, Ended::TimedOut(limit.started.elapsed()));
        }
        (result, Ended::Finished)
    }

    /// Runs `call` and stops it once the watchdog finds it running past `stop_at`; true
    /// with its result when it was stopped (its hook is then removed).
    fn run<R>(&self, stop_at: Option<Instant>, call: impl FnOnce() -> R) -> (R, bool) {
        let stop_nanos = stop_at.map_or(0, |at| nanos_since_epoch(at).max(1));
        self.watched.stop_at.store(stop_nanos, Ordering::Relaxed);
        STOP_AT.set(stop_at);
        RUNNING.set(self.lua);
        // The handler runs on this thread: only the compiler could reorder these stores.
        compiler_fence(Ordering::SeqCst);
        let result = call();
        compiler_fence(Ordering::SeqCst);
        RUNNING.set(ptr::null_mut());
        self.watched.stop_at.store(0, Ordering::Relaxed);
        let stopped = STOPPED.replace(false);
        if stopped {
            // SAFETY: the state is alive and no call is running on it.
            unsafe { ffi::lua_sethook(self.lua, None, 0, 0) };
        }
        (result, stopped)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        *self.watched.alive.lock().unwrap_or_else(|e| e.into_inner()) = false;
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn nanos_since_epoch(t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch()).as_nanos()).unwrap_or(u64::MAX)
}

/// The watched threads, scanned by the watchdog thread (started with the first watch).
fn watchdog() -> &'static Mutex<Vec<Weak<Watched>>> {
    static WATCHED: OnceLock<Mutex<Vec<Weak<Watched>>>> = OnceLock::new();
    WATCHED.get_or_init(|| {
        epoch();
        let spawned = std::thread::Builder::new().name("lua-watchdog".into()).spawn(|| loop {
            std::thread::sleep(TICK);
            signal_overtime_calls(&watchdog().lock().unwrap_or_else(|e| e.into_inner()));
        });
        if let Err(e) = spawned {
            // Without a watchdog a runaway call is never stopped: nothing can run safely.
            panic!("cannot start the Lua watchdog thread: {e}");
        }
        Mutex::new(Vec::new())
    })
}

fn signal_overtime_calls(list: &[Weak<Watched>]) {
    let now = nanos_since_epoch(Instant::now());
    for w in list.iter().filter_map(Weak::upgrade) {
        let stop_at = w.stop_at.load(Ordering::Relaxed);
        if stop_at == 0 || now <= stop_at {
            continue;
        }
        let alive = w.alive.lock().unwrap_or_else(|e| e.into_inner());
        if *alive {
            // SAFETY: the thread is alive while `alive` is true and we hold its lock. A
            // signal that arrives after the run ended finds no run, or a later run whose
            // time has not come, and does nothing.
            unsafe { libc::pthread_kill(w.thread, overtime_signal()) };
        }
    }
}
fn install_signal_handler() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid; the handler only touches constant-initialised
        // thread-locals and calls lua_sethook, which Lua allows in a signal handler.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_overtime_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(overtime_signal(), &action, ptr::null_mut()) != 0 {
                panic!("cannot install the Lua watchdog's signal handler: {}", std::io::Error::last_os_error());
            }
        }
    });
}

/// A real-time signal nothing else in the process uses (glibc keeps the ones below
/// SIGRTMIN for itself).
fn overtime_signal() -> libc::c_int {
    libc::SIGRTMIN() + 3
}

extern "C" fn on_overtime_signal(_: libc::c_int) {
    let lua = RUNNING.get();
    // Reading the monotonic clock (clock_gettime) is async-signal-safe.
    let due = STOP_AT.get().is_some_and(|at| Instant::now() >= at);
    if !lua.is_null() && due {
        STOPPED.set(true);
        // SAFETY: RUNNING is set only while a call runs on this live state; see above.
        unsafe { ffi::lua_sethook(lua, Some(stop), ffi::LUA_MASKCOUNT, 1) };
    }
}

/// The error a stopped call unwinds with (the runtime reports what the stop means: a run
/// again, or the time limit's error).
pub(crate) const STOP_MESSAGE: &std::ffi::CStr = c"the call was stopped: it ran past its time limit";

/// Whether the watchdog has stopped the call running on this thread, to run it again or for
/// good: long library work (pattern matching) looks, since no hook runs inside a C function.
pub(crate) fn stop_requested() -> bool {
    STOPPED.get()
}

/// Raises an error at every instruction, so that no `pcall` keeps the call going.
unsafe extern "C-unwind" fn stop(lua: *mut ffi::lua_State, _: *mut ffi::lua_Debug) {
    // SAFETY: a count hook may raise an error.
    unsafe {
        ffi::lua_pushstring(lua, STOP_MESSAGE.as_ptr());
        ffi::lua_error(lua);
    }
}
