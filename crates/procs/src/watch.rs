//! Watched calls: a call runs without Lua's instruction-count hook and is timed instead.
//!
//! Lua 5.4 makes every VM instruction of a hooked state stop in `luaG_traceexec` to count
//! down the hook's interval, whatever that interval is: 5–15% of a procedure's time. A
//! watched call runs with no hook. A watchdog thread signals the call's thread once the
//! call has run past its time limit, and the signal handler sets a hook that stops it at
//! its next instruction (Lua documents `lua_sethook` as safe in a signal handler; its own
//! `lua.c` stops a script on Ctrl-C this way).
//!
//! The outcome stays deterministic because the clock never decides it. The limit is the
//! time the instruction budget takes at 5 billion VM instructions a second, several times
//! what the interpreter reaches on any core, so a call that finishes within it ran fewer
//! instructions than its budget. A call that does not finish within it is reported as
//! overtime: its host undoes it and it runs again, counting instructions, and that run
//! decides the outcome.
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
    /// Set by the signal handler when it stopped the call in `RUNNING`.
    static STOPPED: Cell<bool> = const { Cell::new(false) };
}

/// What the watchdog knows of one watched thread.
struct Watched {
    thread: libc::pthread_t,
    limit_nanos: u64,
    /// When the call in progress started, in nanoseconds since `epoch()`; 0 between calls.
    started: AtomicU64,
    /// False once the runtime is gone. The watchdog holds the lock while it signals, so it
    /// never signals a thread that has ended.
    alive: Mutex<bool>,
}

/// A runtime's registration with the watchdog. Create and drop it on the thread that runs
/// the calls.
pub(crate) struct Watch {
    lua: *mut ffi::lua_State,
    watched: Arc<Watched>,
}

impl Watch {
    /// Watches the calls this thread makes on `lua` (the state's main thread).
    pub(crate) fn new(lua: *mut ffi::lua_State, limit: Duration) -> Watch {
        install_signal_handler();
        // SAFETY: pthread_self has no preconditions.
        let thread = unsafe { libc::pthread_self() };
        let limit_nanos = u64::try_from(limit.as_nanos()).unwrap_or(u64::MAX);
        let watched = Arc::new(Watched { thread, limit_nanos, started: AtomicU64::new(0), alive: Mutex::new(true) });
        let mut list = watchdog().lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(&watched));
        Watch { lua, watched }
    }

    /// Runs `call`; true with its result when it ran past the limit, and so must be undone
    /// and run again with instructions counted.
    pub(crate) fn run<R>(&self, call: impl FnOnce() -> R) -> (R, bool) {
        let start = Instant::now();
        self.watched.started.store(nanos_since_epoch(start).max(1), Ordering::Relaxed);
        RUNNING.set(self.lua);
        // The handler runs on this thread: only the compiler could reorder these stores.
        compiler_fence(Ordering::SeqCst);
        let result = call();
        compiler_fence(Ordering::SeqCst);
        RUNNING.set(ptr::null_mut());
        self.watched.started.store(0, Ordering::Relaxed);
        let stopped = STOPPED.replace(false);
        if stopped {
            // SAFETY: the state is alive and no call is running on it.
            unsafe { ffi::lua_sethook(self.lua, None, 0, 0) };
        }
        (result, stopped || start.elapsed().as_nanos() > u128::from(self.watched.limit_nanos))
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
        let started = w.started.load(Ordering::Relaxed);
        if started == 0 || now.saturating_sub(started) <= w.limit_nanos {
            continue;
        }
        let alive = w.alive.lock().unwrap_or_else(|e| e.into_inner());
        if *alive {
            // SAFETY: the thread is alive while `alive` is true and we hold its lock. A
            // signal that arrives after the call ended finds no call running and does nothing.
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
    if !lua.is_null() {
        STOPPED.set(true);
        // SAFETY: RUNNING is set only while a call runs on this live state; see above.
        unsafe { ffi::lua_sethook(lua, Some(stop), ffi::LUA_MASKCOUNT, 1) };
    }
}

/// The error a stopped call unwinds with.
pub(crate) const STOP_MESSAGE: &std::ffi::CStr = c"the call ran past its time limit and will run again, counted";

/// Whether the watchdog has stopped the call running on this thread: long library work
/// (pattern matching) looks, since no hook runs inside a C function.
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
