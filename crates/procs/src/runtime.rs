//! `LuaRuntime`: one Lua state per site thread, holding the loaded procedures and running
//! one call at a time against the engine's `TxnHost`.

use std::rc::Rc;

use std::ffi::c_int;

use lockstep_core::{decimal, get_ignoring_case, Error, NameMap, Result, ResultTable, Value};
use mlua::chunk::ChunkMode;
use mlua::state::RawLua;
use mlua::{ffi, FromLuaMulti, Function, HookTriggers, Lua, LuaOptions, MultiValue, Value as LuaValue, VmState};

use crate::errors::{call_error, load_timeout_error, lua_message, timeout_error};
use crate::sandbox::{self, Sandbox};
use crate::shared::{Fatal, HostSlot, PrepareSlot, Shared};
use crate::watch::{self, Ended, Watch};
use crate::{output, raw_stmt, result_obj, CallContext, LuaConfig, ProcOutput, StmtInfo, TimeLimit, TxnHost};

/// Longest procedure name.
pub const PROC_NAME_MAX_BYTES: usize = 128;
/// Largest Lua source file a procedure may have.
pub const SOURCE_MAX_BYTES: usize = 1024 * 1024;
/// Most parameters a call may pass (VoltDB's limit is far lower in practice).
pub const CALL_PARAMS_MAX: usize = 1_024;
/// The budget hook runs every this many VM instructions: often enough that a runaway loop
/// stops within microseconds of its budget.
const HOOK_INTERVAL_INSTRUCTIONS: u64 = 10_000;

/// A loaded procedure. Its holder calls it through `LuaRuntime::call_proc` without a name
/// lookup; unloading or reloading the name does not change a handle already taken.
#[derive(Debug)]
pub struct Proc {
    /// The name as first loaded, for error messages.
    name: String,
    body: Function,
    /// How many parameters the body declares, when it takes exactly that many (not `...`):
    /// a call passing another number is refused, as VoltDB refuses it. Read once here.
    fixed_params: Option<usize>,
    /// The heap its module kept when it loaded.
    memory_bytes: usize,
}

/// Why a module failed to load.
enum Failed {
    /// It ran out of Lua memory (the limit decides the message).
    Memory,
    Other(Error),
}

impl Failed {
    fn from_lua(other: impl FnOnce(mlua::Error) -> Error, e: mlua::Error) -> Failed {
        match e {
            mlua::Error::MemoryError(_) => Failed::Memory,
            e => Failed::Other(other(e)),
        }
    }
}

/// A module that keeps (or needs while it loads) more heap than a procedure may.
fn module_too_big(name: &str, kept: Option<usize>, limit: usize) -> Error {
    let what = match kept {
        Some(n) => format!("keeps {n} bytes of Lua memory once loaded"),
        None => "needs more Lua memory than that while it loads".to_string(),
    };
    Error::graceful(format!(
        "procedure {name}: its module {what}; a procedure may keep {limit} bytes \
         (procedure_memory_limit_bytes): build large tables inside the body, or keep large data \
         in the database"
    ))
}

/// The Lua stored-procedure runtime of one thread. Not `Send`: create it on its thread.
pub struct LuaRuntime {
    lua: Lua,
    shared: Rc<Shared>,
    sandbox: Sandbox,
    /// Keyed by the ASCII-lower-cased name.
    procs: NameMap<Rc<Proc>>,
    config: LuaConfig,
    /// Stops calls: watched ones past their limit, any past its time limit (see `watch`).
    watch: Watch,
    /// How long a module's top level may run while it loads; `None`: no limit.
    load_time_limit: Option<std::time::Duration>,
    reruns: u64,
}

/// What a body returned: its tables, when `output::from_stack` could read them straight off
/// the stack, else the values for `output::tables`.
enum Returned {
    Tables(Vec<ResultTable>),
    Values(MultiValue),
}

impl FromLuaMulti for Returned {
    fn from_lua_multi(values: MultiValue, _: &Lua) -> mlua::Result<Self> {
        Ok(Returned::Values(values))
    }

    unsafe fn from_stack_multi(nvals: c_int, lua: &RawLua) -> mlua::Result<Self> {
        let l = lua.state();
        // `result_obj::shared` pushes one value; lua_checkstack does not raise.
        if ffi::lua_checkstack(l, 1) != 0 {
            if let Some(tables) = result_obj::shared(l).and_then(|shared| output::from_stack(l, nvals, shared)) {
                return Ok(Returned::Tables(tables));
            }
        }
        MultiValue::from_stack_multi(nvals, lua).map(Returned::Values)
    }
}

/// Calls `body` with `params` through the Lua C API. mlua's `Function::call` would make an
/// mlua value (a reference into its registry) of every argument and result, which costs
/// more than the SQL of a one-statement procedure (callgrind).
///
/// The closure runs under `lua_pcall` and the body's errors unwind it with `longjmp`, so it
/// owns nothing: it borrows the parameters and the texts of their DECIMAL values
/// (`decimals`, in the order they appear, array items included), and pushes with calls
/// that raise only on running out of memory, which the protected call reports as an mlua
/// error.
unsafe fn call_body(lua: &Lua, body: &Function, params: &[Value], decimals: &[String]) -> mlua::Result<Returned> {
    lua.exec_raw::<Returned>(body, |l| {
        let mut texts = decimals.iter();
        let mut push = |v: &Value| {
            let text = match v {
                Value::Decimal(_) => texts.next().map(String::as_str),
                _ => None,
            };
            raw_stmt::push_scalar(l, v, text);
        };
        // The body is at index 1; its arguments go after it, converted as `convert::to_lua`
        // converts them (an array's inner array is nil: they never nest in VoltDB).
        ffi::luaL_checkstack(l, params.len() as c_int + 1, std::ptr::null());
        for p in params {
            if let Value::Array(items) = p {
                ffi::lua_createtable(l, items.len().min(c_int::MAX as usize) as c_int, 0);
                for (j, item) in items.iter().enumerate() {
                    push(item);
                    ffi::lua_rawseti(l, -2, j as ffi::lua_Integer + 1);
                }
            } else {
                push(p);
            }
        }
        ffi::lua_call(l, params.len() as c_int, ffi::LUA_MULTRET);
    })
}

/// The state's main thread, on which mlua runs every call.
fn main_state(lua: &Lua) -> Result<*mut mlua::ffi::lua_State> {
    let mut state = std::ptr::null_mut();
    // SAFETY: the closure only reads the state pointer mlua hands it.
    unsafe { lua.exec_raw::<()>((), |l| state = l) }.map_err(internal)?;
    Ok(state)
}

/// Installs the hook that stops a call after `budget` VM instructions. It is checked every
/// `HOOK_INTERVAL_INSTRUCTIONS`, but while it is set every instruction stops in Lua's hook
/// dispatch: watched runtimes set it only for a call that has to be counted.
fn count_instructions(lua: &Lua, shared: &Rc<Shared>, budget: u64) -> mlua::Result<()> {
    let interval = HOOK_INTERVAL_INSTRUCTIONS.min(budget).max(1);
    let s = shared.clone();
    lua.set_hook(HookTriggers::new().every_nth_instruction(interval as u32), move |_, _| {
        let used = s.instructions.get().saturating_add(interval);
        s.instructions.set(used);
        if used > s.instruction_budget {
            s.set_fatal(Fatal::Budget);
            return Err(mlua::Error::RuntimeError("instruction budget exceeded".into()));
        }
        Ok(VmState::Continue)
    })
}

/// VoltDB's answer to a call with the wrong number of parameters (GRACEFUL_FAILURE, in its
/// words).
fn wrong_param_count(name: &str, expected: usize, received: usize) -> Error {
    Error::graceful(format!("PROCEDURE {name} EXPECTS {expected} PARAMS, BUT RECEIVED {received}"))
}

fn internal(e: mlua::Error) -> Error {
    Error::unexpected(format!("Lua runtime: {}", lua_message(&e)))
}

impl LuaRuntime {
    /// A runtime with the sandbox set up and no procedures.
    pub fn new(config: LuaConfig) -> Result<Self> {
        let lua = Lua::new_with(sandbox::libs(), LuaOptions::default()).map_err(internal)?;
        // Procedures make short-lived garbage (rows, bound calls, results) on every call:
        // the generational collector handles that far more cheaply than the incremental one.
        lua.gc_set_mode(mlua::state::GcMode::Generational(mlua::state::GcGenParams::default()));
        let shared = Rc::new(Shared::new(config.instruction_budget, config.memory_limit_bytes));
        let sandbox = Sandbox::build(&lua, &shared).map_err(internal)?;
        let rerun_limit = watch::limit_for(config.instruction_budget).filter(|_| config.restartable);
        let watch = Watch::new(main_state(&lua)?, rerun_limit);
        if !watch.watches() {
            count_instructions(&lua, &shared, config.instruction_budget).map_err(internal)?;
        }
        shared.apply_heap_limit(&lua, None).map_err(internal)?;
        Ok(LuaRuntime { lua, shared, sandbox, procs: NameMap::default(), config, watch, load_time_limit: None, reruns: 0 })
    }

    /// Limits how long a module's top level may run while it loads (`None`: no limit, the
    /// default). Set it for loads a client's DDL causes; leave it unset for the loads that
    /// rebuild a catalog at start-up or in recovery, which must not fail on a slow machine.
    pub fn set_load_time_limit(&mut self, limit: Option<std::time::Duration>) {
        self.load_time_limit = limit;
    }

    /// Loads (or replaces) procedure `name` from Lua source; `path` names the file in error
    /// messages. Runs the module chunk once: each `sql [[...]]` calls `prepare`. The chunk
    /// must return the body function, and what the body can reach is then frozen (see
    /// `freeze` in sandbox.lua). On error the previous version (if any) stays loaded.
    /// Returns the procedure, for `call_proc`.
    ///
    /// What the module keeps is measured (after a full collection): more than
    /// `procedure_memory_limit_bytes` fails the load, and while the module runs the heap
    /// limit is lowered to that much above what was in use.
    pub fn load(&mut self, name: &str, path: &str, source: &str, prepare: &mut dyn FnMut(&str) -> Result<StmtInfo>) -> Result<Rc<Proc>> {
        if name.is_empty() || name.len() > PROC_NAME_MAX_BYTES {
            return Err(Error::graceful(format!("procedure name '{name}' must be 1 to {PROC_NAME_MAX_BYTES} bytes long")));
        }
        if source.len() > SOURCE_MAX_BYTES {
            return Err(Error::graceful(format!("procedure {name}: {path} is {} bytes; the limit is {SOURCE_MAX_BYTES}", source.len())));
        }
        let limit = self.config.procedure_memory_limit_bytes;
        let before = self.settled_memory()?;
        let cap = (limit > 0).then(|| before.saturating_add(limit));
        // Whether the lowered limit, not the site's, is the one a memory error ran into.
        let capped = cap.is_some_and(|c| self.config.memory_limit_bytes == 0 || c < self.config.memory_limit_bytes);
        self.shared.apply_heap_limit(&self.lua, cap).map_err(internal)?;
        let loaded = self.run_module(name, path, source, prepare);
        self.shared.apply_heap_limit(&self.lua, None).map_err(internal)?;
        let body = match loaded {
            Ok(body) => body,
            Err(Failed::Memory) if capped => return Err(module_too_big(name, None, limit)),
            Err(Failed::Memory) => return Err(self.error(name, Some(Fatal::Memory), &mlua::Error::RuntimeError(String::new()))),
            Err(Failed::Other(e)) => return Err(e),
        };
        let kept = self.settled_memory()?.saturating_sub(before);
        if limit > 0 && kept > limit {
            return Err(module_too_big(name, Some(kept), limit));
        }
        let info = body.info();
        let fixed_params = (!info.is_vararg).then_some(usize::from(info.num_params));
        let proc = Rc::new(Proc { name: name.to_string(), body, fixed_params, memory_bytes: kept });
        self.procs.insert(name.to_ascii_lowercase(), proc.clone());
        Ok(proc)
    }

    /// Compiles and runs the module chunk, then freezes what its body reaches: the body.
    fn run_module(
        &mut self,
        name: &str,
        path: &str,
        source: &str,
        prepare: &mut dyn FnMut(&str) -> Result<StmtInfo>,
    ) -> Result<Function, Failed> {
        let env = self.sandbox.new_env().map_err(|e| Failed::from_lua(internal, e))?;
        let chunk = self
            .lua
            .load(source)
            .set_name(format!("@{path}"))
            .set_environment(env)
            .set_mode(ChunkMode::Text)
            .into_function()
            .map_err(|e| Failed::from_lua(|e| Error::graceful(format!("procedure {name}: {}", lua_message(&e))), e))?;

        self.shared.reset(CallContext::default());
        let shared = self.shared.clone();
        let slot = PrepareSlot::set(&shared, prepare);
        let time_limit = self.load_time_limit.and_then(TimeLimit::after);
        // A module's top level is always counted: loads are rare and have no host to restart.
        // Freezing is part of the load: what the body reaches becomes read-only.
        let (returned, ended) = self
            .counted(|rt| {
                rt.watch.counted(time_limit, || {
                    let returned = chunk.call::<LuaValue>(())?;
                    if let LuaValue::Function(body) = &returned {
                        rt.sandbox.freeze(body)?;
                    }
                    Ok::<_, mlua::Error>(returned)
                })
            })
            .map_err(Failed::Other)?;
        drop(slot);
        let fatal = self.shared.take_fatal();
        if let (Ended::TimedOut(after), Some(limit)) = (ended, time_limit) {
            self.after_stop().map_err(Failed::Other)?;
            return Err(Failed::Other(load_timeout_error(name, after, limit.timeout())));
        }
        match (returned, fatal) {
            (Ok(LuaValue::Function(body)), None) => Ok(body),
            (Ok(other), None) => Err(Failed::Other(Error::graceful(format!(
                "procedure {name}: {path} must end with `return function(...) ... end` (the \
                 body), but it returned a {}",
                other.type_name()
            )))),
            (_, Some(Fatal::Memory)) | (Err(mlua::Error::MemoryError(_)), None) => Err(Failed::Memory),
            (Ok(_), Some(fatal)) => Err(Failed::Other(self.error(name, Some(fatal), &mlua::Error::RuntimeError(String::new())))),
            (Err(e), fatal) => Err(Failed::Other(self.error(name, fatal, &e))),
        }
    }

    /// The heap in use after a full collection. (Objects with finalizers, result objects
    /// here, are freed by the next one: the figure may include a few of those.) A load
    /// costs two collections, one on each side; a rebuild loads every procedure again.
    fn settled_memory(&self) -> Result<usize> {
        self.lua.gc_collect().map_err(internal)?;
        Ok(self.lua.used_memory())
    }

    /// The heap each loaded procedure's module keeps, by name (as loaded), measured when it
    /// loaded; sorted by name.
    pub fn procedure_memory(&self) -> Vec<(String, usize)> {
        let mut all: Vec<(String, usize)> = self.procs.values().map(|p| (p.name.clone(), p.memory_bytes)).collect();
        all.sort();
        all
    }

    /// Forgets procedure `name` (no-op when it is not loaded).
    pub fn unload(&mut self, name: &str) {
        self.procs.remove(&name.to_ascii_lowercase());
    }

    /// Whether procedure `name` is loaded (names are case-insensitive).
    pub fn has(&self, name: &str) -> bool {
        get_ignoring_case(&self.procs, name).is_some()
    }

    /// Calls the body of `name` with the parameters, inside the caller's transaction.
    pub fn call(&mut self, name: &str, params: &[Value], ctx: &CallContext, host: &mut dyn TxnHost) -> Result<ProcOutput> {
        let Some(proc) = get_ignoring_case(&self.procs, name).cloned() else {
            return Err(Error::unexpected(format!("procedure {name} is not loaded")));
        };
        self.call_proc(&proc, params, ctx, host)
    }

    /// Calls a procedure `load` returned, inside the caller's transaction. In a watched
    /// runtime a call that runs past its watch limit is undone by `host.restart` and runs
    /// again with its instructions counted; that run's outcome is the call's. A call that
    /// runs past `ctx.time_limit`, in either run, fails with the query timeout's error.
    pub fn call_proc(&mut self, proc: &Proc, params: &[Value], ctx: &CallContext, host: &mut dyn TxnHost) -> Result<ProcOutput> {
        if params.len() > CALL_PARAMS_MAX {
            return Err(Error::graceful(format!("procedure {}: {} parameters; the limit is {CALL_PARAMS_MAX}", proc.name, params.len())));
        }
        if let Some(expected) = proc.fixed_params {
            if params.len() != expected {
                return Err(wrong_param_count(&proc.name, expected, params.len()));
            }
        }
        if let Some(done) = self.attempt(proc, params, ctx, host, self.watch.watches()) {
            return done;
        }
        // Only a watched call comes back unfinished: undo it and run it counted.
        self.reruns += 1;
        host.restart()?;
        self.counted(|rt| rt.attempt(proc, params, ctx, host, false))?
            .ok_or_else(|| Error::unexpected("a counted call came back unfinished"))?
    }

    /// Runs `f` with the instruction budget counted by the hook, which a watched runtime
    /// sets only for this (a runtime that is not watched always has it).
    fn counted<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> Result<R> {
        if !self.watch.watches() {
            return Ok(f(self));
        }
        count_instructions(&self.lua, &self.shared, self.config.instruction_budget).map_err(internal)?;
        let r = f(self);
        self.lua.remove_hook();
        Ok(r)
    }

    /// Once the watchdog stopped a counted run: a runtime that counts every call gets its
    /// count hook back (the stop replaced it); a watched one removes it after the run anyway.
    fn after_stop(&self) -> Result<()> {
        if self.watch.watches() {
            return Ok(());
        }
        count_instructions(&self.lua, &self.shared, self.config.instruction_budget).map_err(internal)
    }

    /// Calls once, `watched` or counted; `None` when a watched run went past its limit
    /// (within the call's time limit) and must run again, counted.
    fn attempt(
        &mut self,
        proc: &Proc,
        params: &[Value],
        ctx: &CallContext,
        host: &mut dyn TxnHost,
        watched: bool,
    ) -> Option<Result<ProcOutput>> {
        self.shared.reset(*ctx);
        // DECIMAL values reach Lua as text, made here: nothing may be owned while Lua code
        // runs (see `call_body`).
        let decimals: Vec<String> = params
            .iter()
            .flat_map(|p| match p {
                Value::Array(items) => items,
                scalar => std::slice::from_ref(scalar),
            })
            .filter_map(|v| match v {
                Value::Decimal(d) => Some(decimal::format(d.get())),
                _ => None,
            })
            .collect();
        let slot = HostSlot::set(&self.shared, host);
        let lua = &self.lua;
        // SAFETY: `call_body`'s closure owns nothing and only borrows what outlives the call.
        let call = || unsafe { call_body(lua, &proc.body, params, &decimals) };
        let (returned, ended) = match watched {
            true => self.watch.watched(ctx.time_limit, call),
            false => self.watch.counted(ctx.time_limit, call),
        };
        drop(slot);
        let fatal = self.shared.take_fatal();
        match (ended, ctx.time_limit) {
            (Ended::Finished, _) => {}
            (Ended::Overtime, _) => return None,
            (Ended::TimedOut(after), limit) => {
                let timeout = limit.map(|l| l.timeout()).unwrap_or_default();
                return Some(self.after_stop().and(Err(timeout_error(&proc.name, after, timeout))));
            }
        }
        let output = |tables| ProcOutput {
            tables,
            app_status: self.shared.app_status.get(),
            app_status_string: self.shared.app_status_string.take(),
        };
        Some(match (returned, fatal) {
            (Ok(Returned::Tables(tables)), None) => Ok(output(tables)),
            (Ok(Returned::Values(values)), None) => {
                let _lift = self.shared.lift_heap_limit(&self.lua);
                output::tables(&proc.name, &self.shared, values).map(output)
            }
            (Ok(_), Some(fatal)) => Err(self.error(&proc.name, Some(fatal), &mlua::Error::RuntimeError(String::new()))),
            (Err(e), fatal) => Err(self.error(&proc.name, fatal, &e)),
        })
    }

    /// How many calls ran past their time limit and ran again counted.
    pub fn reruns(&self) -> u64 {
        self.reruns
    }

    /// The Lua state (tests force garbage collections through it).
    #[cfg(test)]
    pub(crate) fn lua(&self) -> &Lua {
        &self.lua
    }

    fn error(&self, procedure: &str, fatal: Option<Fatal>, err: &mlua::Error) -> Error {
        call_error(procedure, fatal, err, self.config.instruction_budget, self.config.memory_limit_bytes)
    }
}
