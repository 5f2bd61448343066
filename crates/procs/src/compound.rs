//! Compound procedures: Lua bodies that are not transactions but a chain of ordinary calls.
//!
//! A compound procedure's file declares itself with the top-level line `compound = true`.
//! Its body runs as a Lua coroutine: `call(name, ...)` and `calls({name, ...}, ...)` yield
//! the calls to the host (the engine), which issues them like a client's and resumes the
//! coroutine with their answers once all have come back. Many invocations are suspended at
//! once on one Lua state; none holds a partition while it waits. The host decides where
//! the calls run; this module only runs the Lua, bounded in calls, instructions and memory.

use std::collections::HashMap;
use std::rc::Rc;

use lockstep_core::{DataType, Error, ResultTable, Value};
use mlua::{Function, HookTriggers, Lua, MultiValue, Table, Thread, Value as LuaValue, VmState};

use crate::ProcOutput;
use mlua::prelude::LuaThreadStatus as ThreadStatus;

/// Calls one invocation of a compound procedure may issue in all (its `call`s and every
/// call of its `calls`): a body that loops issuing calls is stopped, not left to flood.
pub const COMPOUND_CALLS_MAX: usize = 64;
/// Instructions between two checks of the instruction budget.
const HOOK_INTERVAL_INSTRUCTIONS: u32 = 10_000;
/// The declaration line that makes a Lua procedure file compound.
pub const COMPOUND_DECLARATION: &str = "compound = true";

/// Whether a procedure's Lua source declares itself compound: a line, outside any
/// indentation, that reads exactly `compound = true` (read without running the file, so the
/// catalog can route the procedure when the DDL loads).
pub fn is_compound(source: &str) -> bool {
    source.lines().any(|l| l.trim_end() == COMPOUND_DECLARATION)
}

/// The API a compound body sees besides safe standard functions. `call` and `calls` yield
/// to the host; the host resumes with an array of answers, one per call, in order.
const PRELUDE: &str = r#"
local yield, pack = coroutine.yield, table.pack
local env, ABORT_MARK = ...
function env.call(name, ...)
  return yield({ pack(name, ...) })[1]
end
function env.calls(...)
  local specs = pack(...)
  local out = {}
  for i = 1, specs.n do
    local s = specs[i]
    if type(s) ~= "table" or type(s[1]) ~= "string" then
      error("calls: argument " .. i .. " must be a table {procedure name, parameters...}", 2)
    end
    out[i] = pack(table.unpack(s, 1, #s))
  end
  return yield(out)
end
function env.abort(message, app_status)
  error(ABORT_MARK .. math.tointeger(app_status or -128) .. ":" .. tostring(message), 0)
end
"#;

/// How `abort`'s error message starts: then the app status, ':' and the message.
const ABORT_MARK: &str = "\u{1}compound abort:";

/// Standard functions a compound body may use (no I/O, no loading code, no OS).
const SAFE_GLOBALS: &[&str] = &[
    "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawlen", "rawset", "select", "tonumber", "tostring",
    "type", "xpcall", "string", "table", "math", "utf8",
];

/// The answer to one call a compound body issued, as the host received it.
#[derive(Clone, Debug, Default)]
pub struct CallAnswer {
    /// VoltDB's status: 1 is success.
    pub status: i8,
    pub message: Option<String>,
    pub app_status: i8,
    pub tables: Vec<ResultTable>,
}

/// A call a compound body wants issued.
#[derive(Clone, Debug, PartialEq)]
pub struct IssuedCall {
    pub procedure: String,
    pub params: Vec<Value>,
}

/// Why a compound invocation failed: the error, and the app status the body set with
/// `abort` (or [`crate::APP_STATUS_UNSET`]).
#[derive(Clone, Debug)]
pub struct Failure {
    pub error: Error,
    pub app_status: i8,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure { error, app_status: crate::APP_STATUS_UNSET }
    }
}

/// What an invocation does next.
#[derive(Debug)]
pub enum Step {
    /// It waits for these calls' answers (give them to `resume`, in this order).
    Calls(Vec<IssuedCall>),
    /// It has finished.
    Done(Result<ProcOutput, Failure>),
}

/// The compound procedures of one thread and their suspended invocations.
pub struct CompoundRuntime {
    lua: Lua,
    /// name (lower case) → (the source it was loaded from, its body).
    bodies: HashMap<String, (Rc<str>, Function)>,
    running: HashMap<u64, Running>,
    next_id: u64,
    instruction_budget: u64,
}

struct Running {
    thread: Thread,
    name: String,
    /// Calls issued so far.
    calls: usize,
}

impl CompoundRuntime {
    /// A runtime whose Lua heap holds at most `memory_limit_bytes` (all invocations
    /// together) and whose invocations each run at most `instruction_budget` instructions
    /// between two waits.
    pub fn new(memory_limit_bytes: usize, instruction_budget: u64) -> Result<Self, Error> {
        let lua = Lua::new();
        lua.set_memory_limit(memory_limit_bytes).map_err(internal)?;
        Ok(CompoundRuntime { lua, bodies: HashMap::new(), running: HashMap::new(), next_id: 1, instruction_budget })
    }

    /// Invocations suspended, waiting for answers.
    pub fn in_flight(&self) -> usize {
        self.running.len()
    }

    /// Starts an invocation of procedure `name` (body `source`, from `path` for messages);
    /// returns its id and its first step.
    pub fn start(&mut self, name: &str, path: &str, source: &str, params: &[Value]) -> (u64, Step) {
        let id = self.next_id;
        self.next_id += 1;
        let step = match self.body(name, path, source).and_then(|f| self.lua.create_thread(f).map_err(internal)) {
            Ok(thread) => {
                self.running.insert(id, Running { thread, name: name.to_string(), calls: 0 });
                let args: Result<Vec<LuaValue>, Error> =
                    params.iter().map(|v| crate::convert::to_lua(&self.lua, v).map_err(internal)).collect();
                match args {
                    Ok(args) => self.run(id, MultiValue::from_iter(args)),
                    Err(e) => self.finish(id, Err(e.into())),
                }
            }
            Err(e) => Step::Done(Err(e.into())),
        };
        (id, step)
    }

    /// Resumes invocation `id` with the answers to the calls of its last step.
    pub fn resume(&mut self, id: u64, answers: Vec<CallAnswer>) -> Step {
        let list = match self.answers_to_lua(answers) {
            Ok(t) => t,
            Err(e) => return self.finish(id, Err(e.into())),
        };
        self.run(id, MultiValue::from_iter([LuaValue::Table(list)]))
    }

    /// Ends invocation `id` without resuming it (its time ran out, or the server stops).
    pub fn abandon(&mut self, id: u64) {
        self.running.remove(&id);
    }

    fn body(&mut self, name: &str, path: &str, source: &str) -> Result<Function, Error> {
        let key = name.to_ascii_lowercase();
        if let Some((loaded, f)) = self.bodies.get(&key) {
            if **loaded == *source {
                return Ok(f.clone());
            }
        }
        let f = self.load(name, path, source)?;
        self.bodies.insert(key, (Rc::from(source), f.clone()));
        Ok(f)
    }

    /// Runs the file's top level in a fresh environment; it must return the body function.
    fn load(&self, name: &str, path: &str, source: &str) -> Result<Function, Error> {
        let context = |e: mlua::Error| Error::graceful(format!("compound procedure {name} ({path}): {}", message_of(&e)));
        let env = self.lua.create_table().map_err(internal)?;
        let globals = self.lua.globals();
        for g in SAFE_GLOBALS {
            env.raw_set(*g, globals.raw_get::<LuaValue>(*g).map_err(internal)?).map_err(internal)?;
        }
        self.lua.load(PRELUDE).set_name("compound prelude").call::<()>((env.clone(), ABORT_MARK)).map_err(internal)?;
        let top = self.lua.load(source).set_name(format!("@{path}")).set_environment(env).into_function().map_err(context)?;
        match top.call::<LuaValue>(()).map_err(context)? {
            LuaValue::Function(f) => Ok(f),
            other => Err(Error::graceful(format!(
                "compound procedure {name} ({path}) must return its body function, not a {}",
                other.type_name()
            ))),
        }
    }

    /// Runs invocation `id` until it yields calls or finishes.
    fn run(&mut self, id: u64, args: MultiValue) -> Step {
        let Some(running) = self.running.get(&id) else {
            return Step::Done(Err(Error::unexpected(format!("compound invocation {id} is not running")).into()));
        };
        let thread = running.thread.clone();
        let budget = self.instruction_budget;
        let used = std::cell::Cell::new(0u64);
        let hooked = thread.set_hook(HookTriggers::new().every_nth_instruction(HOOK_INTERVAL_INSTRUCTIONS), move |_, _| {
            used.set(used.get() + u64::from(HOOK_INTERVAL_INSTRUCTIONS));
            if used.get() > budget {
                return Err(mlua::Error::RuntimeError(format!(
                    "the compound procedure ran more than {budget} instructions without waiting for a call"
                )));
            }
            Ok(VmState::Continue)
        });
        if let Err(e) = hooked {
            return self.finish(id, Err(internal(e).into()));
        }
        let result = thread.resume::<MultiValue>(args);
        match (result, thread.status()) {
            (Ok(values), ThreadStatus::Resumable) => match self.issued(id, values) {
                Ok(calls) => Step::Calls(calls),
                Err(e) => self.finish(id, Err(e.into())),
            },
            (Ok(values), _) => {
                let out = output(&running_name(&self.running, id), values);
                self.finish(id, out.map_err(Failure::from))
            }
            (Err(e), _) => {
                let failure = self.failure(id, &e);
                self.finish(id, Err(failure))
            }
        }
    }

    fn finish(&mut self, id: u64, result: Result<ProcOutput, Failure>) -> Step {
        self.running.remove(&id);
        Step::Done(result)
    }

    /// The calls a yield asked for, counted against `COMPOUND_CALLS_MAX`.
    fn issued(&mut self, id: u64, values: MultiValue) -> Result<Vec<IssuedCall>, Error> {
        let Some(LuaValue::Table(list)) = values.into_iter().next() else {
            return Err(Error::graceful("a compound procedure may only yield through call or calls"));
        };
        let mut calls = Vec::new();
        for spec in list.sequence_values::<Table>() {
            let spec = spec.map_err(internal)?;
            let n: usize = spec.raw_get("n").map_err(internal)?;
            let procedure: String = spec
                .raw_get::<mlua::LuaString>(1)
                .map_err(|_| Error::graceful("call: the first argument must be the procedure's name"))?
                .to_str()
                .map_err(internal)?
                .to_string();
            let mut params = Vec::with_capacity(n.saturating_sub(1));
            for i in 2..=n {
                let v: LuaValue = spec.raw_get(i).map_err(internal)?;
                params.push(crate::convert::to_param(&v, None, i - 1).map_err(|m| Error::graceful(format!("call {procedure}: {m}")))?);
            }
            calls.push(IssuedCall { procedure, params });
        }
        let running = self.running.get_mut(&id).ok_or_else(|| Error::unexpected("the compound invocation vanished"))?;
        running.calls += calls.len();
        if running.calls > COMPOUND_CALLS_MAX {
            return Err(Error::graceful(format!(
                "compound procedure {} issued more than {COMPOUND_CALLS_MAX} calls in one invocation; split the work",
                running.name
            )));
        }
        if calls.is_empty() {
            return Err(Error::graceful(format!("compound procedure {}: calls was given no call", running.name)));
        }
        Ok(calls)
    }

    /// The failure a Lua error stands for: an `abort` carries its message and app status.
    fn failure(&self, id: u64, e: &mlua::Error) -> Failure {
        let message = message_of(e);
        if let Some((status, text)) = message.strip_prefix(ABORT_MARK).and_then(|m| m.split_once(':')) {
            let app_status = status.parse::<i64>().ok().and_then(|s| i8::try_from(s).ok()).unwrap_or(crate::APP_STATUS_UNSET);
            return Failure { error: Error::graceful(text), app_status };
        }
        let name = running_name(&self.running, id);
        Error::graceful(format!("compound procedure {name} failed: {message}")).into()
    }

    /// The answers as Lua sees them: `{status=, message=, app_status=, tables={...}}`, each
    /// table an array of rows keyed by lower-case column name.
    fn answers_to_lua(&self, answers: Vec<CallAnswer>) -> Result<Table, Error> {
        let lua = &self.lua;
        let list = lua.create_table_with_capacity(answers.len(), 0).map_err(internal)?;
        for (i, a) in answers.into_iter().enumerate() {
            let t = lua.create_table().map_err(internal)?;
            t.raw_set("status", a.status).map_err(internal)?;
            t.raw_set("ok", a.status == 1).map_err(internal)?;
            t.raw_set("message", a.message).map_err(internal)?;
            t.raw_set("app_status", a.app_status).map_err(internal)?;
            let tables = lua.create_table_with_capacity(a.tables.len(), 0).map_err(internal)?;
            for (j, rt) in a.tables.iter().enumerate() {
                tables.raw_set(j + 1, self.rows_to_lua(rt)?).map_err(internal)?;
            }
            t.raw_set("tables", tables).map_err(internal)?;
            list.raw_set(i + 1, t).map_err(internal)?;
        }
        Ok(list)
    }

    fn rows_to_lua(&self, rt: &ResultTable) -> Result<Table, Error> {
        let lua = &self.lua;
        let names: Vec<String> = rt.columns.iter().map(|c| c.name.to_ascii_lowercase()).collect();
        let rows = lua.create_table_with_capacity(rt.rows.len(), 0).map_err(internal)?;
        for (i, row) in rt.rows.iter().enumerate() {
            let r = lua.create_table_with_capacity(row.len(), row.len()).map_err(internal)?;
            for (k, v) in row.iter().enumerate() {
                let v = crate::convert::to_lua(lua, v).map_err(internal)?;
                r.raw_set(k + 1, v.clone()).map_err(internal)?;
                if let Some(n) = names.get(k).filter(|n| !n.is_empty()) {
                    r.raw_set(n.as_str(), v).map_err(internal)?;
                }
            }
            rows.raw_set(i + 1, r).map_err(internal)?;
        }
        Ok(rows)
    }
}

fn running_name(running: &HashMap<u64, Running>, id: u64) -> String {
    running.get(&id).map(|r| r.name.clone()).unwrap_or_default()
}

/// What a body returned: nil → no table, an integer → one BIGINT (as a Java `long`), a
/// float, a boolean or a string → one value; nothing else.
fn output(name: &str, values: MultiValue) -> Result<ProcOutput, Error> {
    let mut tables = Vec::new();
    for v in values {
        let single = |ty: DataType, v: Value| {
            let mut t = ResultTable::new(vec![lockstep_core::ResultColumn { name: "".into(), ty }]);
            t.rows.push(vec![v]);
            t
        };
        match v {
            LuaValue::Nil => {}
            LuaValue::Integer(i) => tables.push(ResultTable::scalar("", i)),
            LuaValue::Number(f) => tables.push(single(DataType::Float, Value::Float(f))),
            LuaValue::Boolean(b) => tables.push(single(DataType::TinyInt, Value::Int(b as i64))),
            LuaValue::String(s) => tables.push(single(DataType::Varchar, Value::Str((&*s.to_string_lossy()).into()))),
            other => {
                return Err(Error::graceful(format!(
                    "compound procedure {name} returned a {}; it returns nil, a number, a boolean or a string",
                    other.type_name()
                )))
            }
        }
    }
    Ok(ProcOutput { tables, app_status: crate::APP_STATUS_UNSET, app_status_string: None })
}

fn message_of(e: &mlua::Error) -> String {
    match e {
        // Lua's traceback is for debugging the runtime, not for the caller.
        mlua::Error::RuntimeError(m) => m.split("\nstack traceback:").next().unwrap_or_default().to_string(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::CallbackError { cause, .. } => message_of(cause),
        mlua::Error::MemoryError(_) => "the Lua memory limit was reached".into(),
        other => other.to_string(),
    }
}

fn internal(e: mlua::Error) -> Error {
    Error::unexpected(format!("compound Lua runtime: {}", message_of(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::ResultColumn;

    const MEMORY_BYTES: usize = 16 * 1024 * 1024;

    fn runtime() -> CompoundRuntime {
        CompoundRuntime::new(MEMORY_BYTES, 1_000_000).unwrap()
    }

    fn start(rt: &mut CompoundRuntime, source: &str, params: &[Value]) -> (u64, Step) {
        rt.start("P", "P.lua", source, params)
    }

    fn calls(step: Step) -> Vec<IssuedCall> {
        match step {
            Step::Calls(c) => c,
            Step::Done(r) => panic!("expected calls, got {r:?}"),
        }
    }

    fn done(step: Step) -> Result<ProcOutput, Failure> {
        match step {
            Step::Done(r) => r,
            Step::Calls(c) => panic!("expected the end, got calls {c:?}"),
        }
    }

    fn s_id_table(s_id: i64) -> ResultTable {
        let mut t = ResultTable::new(vec![ResultColumn { name: "S_ID".into(), ty: DataType::BigInt }]);
        t.rows.push(vec![Value::Int(s_id)]);
        t
    }

    fn ok(tables: Vec<ResultTable>) -> CallAnswer {
        CallAnswer { status: 1, message: None, app_status: crate::APP_STATUS_UNSET, tables }
    }

    const CHAIN: &str = "compound = true
return function(nbr, loc)
  local found = call('MAP.select', nbr)
  if not found.ok then abort('lookup failed: ' .. found.message, 7) end
  local row = found.tables[1][1]
  if not row then return -1 end
  local updated = call('UpdateLocation', row.s_id, loc)
  return updated.tables[1][1][1] == 1 and 0 or -2
end";

    #[test]
    fn a_chain_of_calls_runs_as_answers_arrive() {
        let mut rt = runtime();
        let (id, step) = start(&mut rt, CHAIN, &[Value::Str("555".into()), Value::Int(9)]);
        assert_eq!(calls(step), vec![IssuedCall { procedure: "MAP.select".into(), params: vec![Value::Str("555".into())] }]);
        assert_eq!(rt.in_flight(), 1);
        let step = rt.resume(id, vec![ok(vec![s_id_table(42)])]);
        assert_eq!(calls(step), vec![IssuedCall { procedure: "UpdateLocation".into(), params: vec![Value::Int(42), Value::Int(9)] }]);
        let out = done(rt.resume(id, vec![ok(vec![ResultTable::scalar("", 1)])])).unwrap();
        assert_eq!(out.tables, vec![ResultTable::scalar("", 0)]);
        assert_eq!(rt.in_flight(), 0);
    }

    #[test]
    fn invocations_interleave_on_one_state() {
        let mut rt = runtime();
        let (a, _) = start(&mut rt, CHAIN, &[Value::Str("1".into()), Value::Int(1)]);
        let (b, _) = start(&mut rt, CHAIN, &[Value::Str("2".into()), Value::Int(2)]);
        assert_eq!(rt.in_flight(), 2);
        // b's lookup misses; a's goes on.
        let mut empty = s_id_table(0);
        empty.rows.clear();
        assert_eq!(done(rt.resume(b, vec![ok(vec![empty])])).unwrap().tables, vec![ResultTable::scalar("", -1)]);
        let step = rt.resume(a, vec![ok(vec![s_id_table(7)])]);
        assert_eq!(calls(step)[0].params, vec![Value::Int(7), Value::Int(1)]);
    }

    #[test]
    fn an_inner_failure_is_seen_and_can_abort_with_an_app_status() {
        let mut rt = runtime();
        let (id, _) = start(&mut rt, CHAIN, &[Value::Str("1".into()), Value::Int(1)]);
        let failed = CallAnswer { status: -2, message: Some("no such row".into()), app_status: -128, tables: vec![] };
        let failure = done(rt.resume(id, vec![failed])).unwrap_err();
        assert_eq!(failure.error.message, "lookup failed: no such row");
        assert_eq!(failure.app_status, 7);
        assert_eq!(rt.in_flight(), 0);
    }

    #[test]
    fn calls_issues_several_at_once_and_answers_in_order() {
        let mut rt = runtime();
        let src = "compound = true
return function()
  local a = calls({'A', 1}, {'B', 'x', nil, 3})
  return a[1].tables[1][1][1] * 10 + a[2].tables[1][1][1]
end";
        let (id, step) = start(&mut rt, src, &[]);
        let issued = calls(step);
        assert_eq!(issued.len(), 2);
        assert_eq!(issued[1].params, vec![Value::Str("x".into()), Value::Null, Value::Int(3)]);
        let out = done(rt.resume(id, vec![ok(vec![ResultTable::scalar("", 4)]), ok(vec![ResultTable::scalar("", 2)])])).unwrap();
        assert_eq!(out.tables, vec![ResultTable::scalar("", 42)]);
    }

    #[test]
    fn too_many_calls_are_refused() {
        let mut rt = runtime();
        let src = "compound = true
return function() while true do call('A') end end";
        let (id, mut step) = start(&mut rt, src, &[]);
        for _ in 0..COMPOUND_CALLS_MAX {
            calls(step);
            step = rt.resume(id, vec![ok(vec![])]);
        }
        let failure = done(step).unwrap_err();
        assert!(failure.error.message.contains(&format!("more than {COMPOUND_CALLS_MAX} calls")), "{}", failure.error.message);
    }

    #[test]
    fn a_loop_without_calls_is_stopped_by_the_instruction_budget() {
        let mut rt = runtime();
        let (_, step) = start(&mut rt, "compound = true\nreturn function() while true do end end", &[]);
        let failure = done(step).unwrap_err();
        assert!(failure.error.message.contains("instructions"), "{}", failure.error.message);
    }

    #[test]
    fn the_memory_limit_stops_a_greedy_body() {
        let mut rt = runtime();
        let src = "compound = true\nreturn function() local t = {} for i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end end";
        let mut rt_big = CompoundRuntime::new(MEMORY_BYTES, u64::MAX).unwrap();
        let (_, step) = start(&mut rt_big, src, &[]);
        let failure = done(step).unwrap_err();
        assert!(failure.error.message.contains("memory limit"), "{}", failure.error.message);
        // The runtime still works afterwards.
        let (_, step) = start(&mut rt, "compound = true\nreturn function() return 1 end", &[]);
        assert_eq!(done(step).unwrap().tables, vec![ResultTable::scalar("", 1)]);
    }

    #[test]
    fn the_sandbox_has_no_io_or_code_loading() {
        let mut rt = runtime();
        let (_, step) = start(&mut rt, "compound = true\nreturn function() return io == nil and load == nil and os == nil end", &[]);
        assert_eq!(done(step).unwrap().tables[0].rows, vec![vec![Value::Int(1)]]);
    }

    #[test]
    fn a_file_declares_itself_compound() {
        assert!(is_compound("-- x\ncompound = true\nreturn function() end"));
        assert!(!is_compound("-- compound = true\nreturn function() end"));
        assert!(!is_compound("local compound = true"));
    }
}
