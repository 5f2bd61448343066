//! Behaviour tests of the runtime against a fake host that records every statement it runs.

use lockstep_core::{decimal, DataType, Error, ErrorKind, Result, ResultTable, Value};

use crate::{is_procedure_timeout, CallContext, LuaConfig, LuaRuntime, ProcOutput, StmtInfo, TimeLimit, TxnHost};

type Responder = Box<dyn FnMut(usize, &[Value]) -> Result<ResultTable>>;

/// Records calls; answers each statement with `respond`.
struct FakeHost {
    calls: Vec<(usize, Vec<Value>)>,
    batches: Vec<usize>,
    restarts: usize,
    respond: Responder,
}

impl FakeHost {
    fn new(respond: impl FnMut(usize, &[Value]) -> Result<ResultTable> + 'static) -> Self {
        FakeHost { calls: Vec::new(), batches: Vec::new(), restarts: 0, respond: Box::new(respond) }
    }
    fn modified() -> Self {
        Self::new(|_, _| Ok(ResultTable::modified(1)))
    }
}

impl TxnHost for FakeHost {
    fn execute(&mut self, stmt: usize, params: Vec<Value>) -> Result<ResultTable> {
        let out = (self.respond)(stmt, &params);
        self.calls.push((stmt, params));
        out
    }
    fn execute_batch(&mut self, calls: Vec<(usize, Vec<Value>)>) -> Result<Vec<ResultTable>> {
        self.batches.push(calls.len());
        calls.into_iter().map(|(s, p)| self.execute(s, p)).collect()
    }
    fn restart(&mut self) -> Result<()> {
        self.restarts += 1;
        self.calls.clear();
        Ok(())
    }
}

/// Plans statements by numbering them in order of `sql()` calls; a statement has one
/// parameter per `?`, all VARBINARY when the text contains `/*bin*/`; text containing
/// `bogus` fails to plan.
fn prepare_into(texts: &mut Vec<String>) -> impl FnMut(&str) -> Result<StmtInfo> + '_ {
    move |text: &str| {
        if text.contains("bogus") {
            return Err(Error::sql("unknown column BOGUS"));
        }
        let ty = text.contains("/*bin*/").then_some(DataType::Varbinary);
        texts.push(text.to_string());
        Ok(StmtInfo { id: texts.len() - 1, param_types: vec![ty; text.matches('?').count()] })
    }
}

fn runtime() -> LuaRuntime {
    LuaRuntime::new(LuaConfig::default()).unwrap()
}

fn load(rt: &mut LuaRuntime, name: &str, src: &str) -> Result<Vec<String>> {
    let mut texts = Vec::new();
    rt.load(name, &format!("procedures/{}.lua", name.to_lowercase()), src, &mut prepare_into(&mut texts))?;
    Ok(texts)
}

fn ctx(txn_id: i64) -> CallContext {
    CallContext { txn_id, timestamp_micros: 1_700_000_000_000_000, partition: Some(3), time_limit: None }
}

fn call(rt: &mut LuaRuntime, name: &str, params: &[Value], host: &mut FakeHost) -> Result<ProcOutput> {
    rt.call(name, params, &ctx(100), host)
}

/// Runs a body (given as the text after `return function(...)`) with no statements.
fn run(body: &str, params: &[Value]) -> Result<ProcOutput> {
    let mut rt = runtime();
    load(&mut rt, "P", &format!("return function(...)\n{body}\nend"))?;
    call(&mut rt, "P", params, &mut FakeHost::modified())
}

/// `f`'s result and how many statement calls it answered on the C fast paths.
fn counting_fast_calls<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let count = || crate::raw_stmt::FAST_CALLS.with(|c| c.get());
    let before = count();
    let out = f();
    (out, count() - before)
}

fn one(ty: DataType, v: Value) -> ResultTable {
    let mut t = ResultTable::with_columns(&[("", ty)]);
    t.push(vec![v]);
    t
}

const UPDATE_LOCATION: &str = r#"
local find   = sql [[SELECT s_id FROM subscriber WHERE sub_nbr = ?]]
local update = sql [[UPDATE subscriber SET vlr_location = ? WHERE s_id = ?]]
return function(location, sub_nbr)
  local row = find:first(sub_nbr)
  if not row then abort("no such subscriber") end
  return update:exec(location, row.s_id)
end
"#;

fn subscriber_host(found: bool) -> FakeHost {
    FakeHost::new(move |stmt, _| {
        Ok(match stmt {
            0 => {
                let mut t = ResultTable::with_columns(&[("S_ID", DataType::BigInt)]);
                if found {
                    t.push(vec![Value::Int(42)]);
                }
                t
            }
            _ => ResultTable::modified(1),
        })
    })
}

#[test]
fn first_and_exec_run_the_planned_statements_with_converted_parameters() {
    let mut rt = runtime();
    let texts = load(&mut rt, "UpdateLocation", UPDATE_LOCATION).unwrap();
    assert_eq!(texts.len(), 2);
    let mut host = subscriber_host(true);
    let out = call(&mut rt, "updatelocation", &[Value::from("LOC"), Value::Int(7)], &mut host).unwrap();
    assert_eq!(out.tables, vec![ResultTable::scalar("", 1)]);
    assert_eq!(out.app_status, -128);
    assert_eq!(out.app_status_string, None);
    assert_eq!(host.calls, vec![(0, vec![Value::Int(7)]), (1, vec![Value::from("LOC"), Value::Int(42)])]);
}

#[test]
fn abort_is_a_user_abort_with_exactly_the_message() {
    let mut rt = runtime();
    load(&mut rt, "UpdateLocation", UPDATE_LOCATION).unwrap();
    let mut host = subscriber_host(false);
    let err = call(&mut rt, "UpdateLocation", &[Value::from("LOC"), Value::Int(7)], &mut host).unwrap_err();
    assert_eq!(err, Error::user_abort("no such subscriber"));
    assert_eq!(host.calls.len(), 1);
    // pcall cannot swallow an abort.
    let err = run("pcall(abort, 'stop'); return 1", &[]).unwrap_err();
    assert_eq!(err, Error::user_abort("stop"));
}

fn people() -> ResultTable {
    let mut t = ResultTable::with_columns(&[("NAME", DataType::Varchar), ("AGE", DataType::Integer)]);
    t.push(vec![Value::from("ann"), Value::Int(31)]);
    t.push(vec![Value::from("bob"), Value::Null]);
    t
}

#[test]
fn query_results_index_iterate_and_return_unchanged() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Q",
        r#"
local q = sql "SELECT name, age FROM people"
return function(mode)
  local res = q:query()
  if mode == "return" then return res end
  local names = {}
  for row in res:rows() do names[#names + 1] = row.name end
  local cols = res:columns()
  return #res, res[1].name, res[1].age, res[2].age == nil, res[3] == nil,
         table.concat(names, ","), table.concat(cols, ",")
end
"#,
    )
    .unwrap();
    let mut host = FakeHost::new(|_, _| Ok(people()));
    let out = call(&mut rt, "Q", &[Value::from("return")], &mut host).unwrap();
    assert_eq!(out.tables, vec![people()]);
    let out = call(&mut rt, "Q", &[Value::from("inspect")], &mut host).unwrap();
    assert_eq!(
        out.tables,
        vec![
            ResultTable::scalar("", 2),
            one(DataType::Varchar, Value::from("ann")),
            ResultTable::scalar("", 31),
            one(DataType::TinyInt, Value::Int(1)),
            one(DataType::TinyInt, Value::Int(1)),
            one(DataType::Varchar, Value::from("ann,bob")),
            one(DataType::Varchar, Value::from("name,age")),
        ]
    );
}

#[test]
fn bind_and_batch_run_in_one_round_trip_in_order() {
    let mut rt = runtime();
    load(
        &mut rt,
        "B",
        r#"
local a = sql "SELECT ? AS x"
local b = sql "SELECT ?, ? AS y"
return function(as_array)
  if as_array then
    local rs = batch({ a:bind(1), b:bind("two", 2) })
    return rs
  end
  if as_array == false then
    return batch(a:bind(1))
  end
  local r1, r2 = batch(a:bind(1), b:bind("two", 2))
  return r2, r1
end
"#,
    )
    .unwrap();
    let mut host = FakeHost::new(|stmt, _| Ok(ResultTable::scalar(if stmt == 0 { "A" } else { "B" }, stmt as i64)));
    let out = call(&mut rt, "B", &[Value::Null], &mut host).unwrap();
    assert_eq!(out.tables, vec![ResultTable::scalar("B", 1), ResultTable::scalar("A", 0)]);
    assert_eq!(host.batches, vec![2]);
    assert_eq!(host.calls, vec![(0, vec![Value::Int(1)]), (1, vec![Value::from("two"), Value::Int(2)])]);
    let out = call(&mut rt, "B", &[Value::Bool(true)], &mut host).unwrap();
    assert_eq!(out.tables, vec![ResultTable::scalar("A", 0), ResultTable::scalar("B", 1)]);
    // One bound statement is a batch of one, not an array of its own parts.
    let out = call(&mut rt, "B", &[Value::Bool(false)], &mut host).unwrap();
    assert_eq!(out.tables, vec![ResultTable::scalar("A", 0)]);
    let err = run("return batch(1)", &[]).unwrap_err();
    assert!(err.message.contains("batch() item 1 is a integer"), "{}", err.message);
}

#[test]
fn bound_statements_check_at_bind_convert_at_batch_and_cannot_be_forged() {
    let mut rt = runtime();
    load(
        &mut rt,
        "K",
        r#"
local a = sql "SELECT ? AS x, ? AS y"
local b = sql "SELECT ? AS z"
return function(mode)
  if mode == "nil" then batch(a:bind(nil, 7), b:bind({1, 2})) return nil end
  if mode == "meta" then return getmetatable(a:bind(1, 2)) end
  if mode == "forge" then return batch(setmetatable({a, 1, 2}, {}), b:bind(1)) end
  if mode == "edit" then local t = a:bind(1, 2); t[2] = function() end; return batch(t, t) end
  if mode == "few" then return a:bind(1) end
  if mode == "ret" then return a:bind(1, 2) end
  return { b:bind(1) }
end
"#,
    )
    .unwrap();
    let mut host = FakeHost::new(|_, _| Ok(ResultTable::scalar("X", 1)));
    call(&mut rt, "K", &[Value::from("nil")], &mut host).unwrap();
    assert_eq!(host.calls, vec![(0, vec![Value::Null, Value::Int(7)]), (1, vec![Value::Array(vec![Value::Int(1), Value::Int(2)].into())])]);
    let meta = call(&mut rt, "K", &[Value::from("meta")], &mut host).unwrap();
    assert_eq!(meta.tables, vec![one(DataType::Varchar, Value::from("bound statement"))]);
    let forged = call(&mut rt, "K", &[Value::from("forge")], &mut host).unwrap_err();
    assert!(forged.message.contains("batch() item 1 is a table"), "{}", forged.message);
    let edited = call(&mut rt, "K", &[Value::from("edit")], &mut host).unwrap_err();
    assert!(edited.message.contains("parameter 1 is a function"), "{}", edited.message);
    let few = call(&mut rt, "K", &[Value::from("few")], &mut host).unwrap_err();
    assert!(few.message.contains("takes 2 parameters but was given 1"), "{}", few.message);
    for mode in ["ret", "array"] {
        let e = call(&mut rt, "K", &[Value::from(mode)], &mut host).unwrap_err();
        assert!(e.message.contains("returned a bound statement"), "{mode}: {}", e.message);
    }
    assert_eq!(host.batches, vec![2]);
}

#[test]
fn every_return_shape_becomes_the_documented_tables() {
    assert_eq!(run("return nil", &[]).unwrap().tables, vec![]);
    assert_eq!(run("", &[]).unwrap().tables, vec![]);
    assert_eq!(run("return 5", &[]).unwrap().tables, vec![ResultTable::scalar("", 5)]);
    assert_eq!(run("return 2.5", &[]).unwrap().tables, vec![one(DataType::Float, Value::Float(2.5))]);
    assert_eq!(run("return 'hi'", &[]).unwrap().tables, vec![one(DataType::Varchar, Value::from("hi"))]);
    assert_eq!(run("return false", &[]).unwrap().tables, vec![one(DataType::TinyInt, Value::Int(0))]);
    assert_eq!(run("return {1, 'a'}", &[]).unwrap().tables, vec![ResultTable::scalar("", 1), one(DataType::Varchar, Value::from("a"))]);
    assert_eq!(run("return {}", &[]).unwrap().tables, vec![]);

    let out = run(r#"return result_table({"name", "count", "ok", "f"}, {{"a", 1, true, nil}, {"b", 2.0, false, 1}})"#, &[]);
    let mut expected = ResultTable::with_columns(&[
        ("name", DataType::Varchar),
        ("count", DataType::BigInt),
        ("ok", DataType::TinyInt),
        ("f", DataType::BigInt),
    ]);
    expected.push(vec![Value::from("a"), Value::Int(1), Value::Int(1), Value::Null]);
    expected.push(vec![Value::from("b"), Value::Int(2), Value::Int(0), Value::Int(1)]);
    assert_eq!(out.unwrap().tables, vec![expected.clone()]);
    // The same result twice in an array comes back twice.
    let out = run(r#"local r = result_table({"name", "count", "ok", "f"}, {{"a", 1, true, nil}, {"b", 2, false, 1}}) return {r, r}"#, &[]);
    assert_eq!(out.unwrap().tables, vec![expected.clone(), expected]);

    // Several values come back in order; a result returned twice is copied.
    let r = r#"local r = result_table({"a"}, {{1}})"#;
    let a1 = {
        let mut t = ResultTable::with_columns(&[("a", DataType::BigInt)]);
        t.push(vec![Value::Int(1)]);
        t
    };
    assert_eq!(
        run(&format!("{r} return nil, 2.5, r, true"), &[]).unwrap().tables,
        vec![one(DataType::Float, Value::Float(2.5)), a1.clone(), one(DataType::TinyInt, Value::Int(1))]
    );
    assert_eq!(
        run(&format!("{r} return 7, r, 'x', r"), &[]).unwrap().tables,
        vec![ResultTable::scalar("", 7), a1.clone(), one(DataType::Varchar, Value::from("x")), a1]
    );

    for (body, what) in [
        ("return function() end", "returned a function"),
        ("return {a = 1}", "returned a table that is not an array"),
        ("return {{1}}", "returned an array containing a table"),
        ("return sql", "returned a function"),
    ] {
        let err = run(body, &[]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unexpected);
        assert!(err.message.starts_with(&format!("procedure P {what}")), "{body}: {}", err.message);
    }
    // Column sets are reused only when names and types both match.
    let tables = run(
        r#"return result_table({"a"}, {{1}}), result_table({"a"}, {{"x"}}), result_table({"b"}, {{2}}), result_table({"a"}, {{3}})"#,
        &[],
    )
    .unwrap()
    .tables;
    let shape = |t: &ResultTable| (t.columns[0].name.to_string(), t.columns[0].ty, t.rows[0][0].clone());
    assert_eq!(
        tables.iter().map(shape).collect::<Vec<_>>(),
        vec![
            ("a".to_string(), DataType::BigInt, Value::Int(1)),
            ("a".to_string(), DataType::Varchar, Value::from("x")),
            ("b".to_string(), DataType::BigInt, Value::Int(2)),
            ("a".to_string(), DataType::BigInt, Value::Int(3)),
        ]
    );
    assert!(std::sync::Arc::ptr_eq(&tables[0].columns, &tables[3].columns), "the same shape shares its columns");
    // A cell is converted as before unless it is already its column's value: "\N" is NULL.
    let t = run(r#"return result_table({"s"}, {{"x"}, {"\\N"}})"#, &[]).unwrap().tables;
    assert_eq!(t[0].rows, vec![vec![Value::from("x")], vec![Value::Null]]);

    let err = run(r#"return result_table({"n"}, {{1}, {"x"}})"#, &[]).unwrap_err();
    assert!(
        err.message.contains("procedures/p.lua:2: result_table() row 2 column 1: cannot convert VARCHAR 'x' to BIGINT"),
        "{}",
        err.message
    );
}

#[test]
fn app_status_is_reported_and_reset_between_calls() {
    let mut rt = runtime();
    load(&mut rt, "S", "return function(set) if set then set_app_status(7, 'seven') end end").unwrap();
    let mut host = FakeHost::modified();
    let out = call(&mut rt, "S", &[Value::Bool(true)], &mut host).unwrap();
    assert_eq!((out.app_status, out.app_status_string), (7, Some("seven".to_string())));
    let out = call(&mut rt, "S", &[Value::Null], &mut host).unwrap();
    assert_eq!((out.app_status, out.app_status_string), (-128, None));
    let err = run("set_app_status(200)", &[]).unwrap_err();
    assert!(
        err.message.contains("procedures/p.lua:2: set_app_status(code, [text]) takes an integer code from -128 to 127"),
        "{}",
        err.message
    );
}

#[test]
fn ctx_fields_and_random_are_deterministic_per_txn_id() {
    let mut rt = runtime();
    load(
        &mut rt,
        "C",
        "return function() return {ctx.txn_id, ctx.timestamp, ctx.partition or -1, ctx.random(1, 1000000), ctx.random(1, 1000000), ctx.random()} end",
    )
    .unwrap();
    let mut host = FakeHost::modified();
    let a = rt.call("C", &[], &ctx(100), &mut host).unwrap().tables;
    let b = rt.call("C", &[], &ctx(100), &mut host).unwrap().tables;
    let c =
        rt.call("C", &[], &CallContext { txn_id: 101, timestamp_micros: 5, partition: None, time_limit: None }, &mut host).unwrap().tables;
    assert_eq!(a, b);
    assert_eq!(a[0], ResultTable::scalar("", 100));
    assert_eq!(a[1], ResultTable::scalar("", 1_700_000_000_000_000));
    assert_eq!(a[2], ResultTable::scalar("", 3));
    assert_eq!(c[0], ResultTable::scalar("", 101));
    assert_eq!(c[1], ResultTable::scalar("", 5));
    assert_eq!(c[2], ResultTable::scalar("", -1));
    assert_ne!(a[3..], c[3..]);
    // The values are exactly splitmix64 seeded with the txn id.
    let mut s = crate::rng::seed(100);
    let r1 = crate::rng::next_in_range(&mut s, 1, 1_000_000);
    let r2 = crate::rng::next_in_range(&mut s, 1, 1_000_000);
    let f = crate::rng::next_f64(&mut s);
    assert_eq!(a[3..], [ResultTable::scalar("", r1), ResultTable::scalar("", r2), one(DataType::Float, Value::Float(f))]);
    // pairs() lists the running call's fields; the module itself loads with txn id 0.
    load(
        &mut rt,
        "P",
        "local at_load = ctx.txn_id\nreturn function()\n  local n, sum = 0, 0\n  for k, v in pairs(ctx) do\n    n = n + 1\n    if k ~= 'random' then sum = sum + v end\n  end\n  return {at_load, n, sum, ctx.nothing == nil}\nend",
    )
    .unwrap();
    let ctx = CallContext { txn_id: 7, timestamp_micros: 30, partition: Some(2), time_limit: None };
    let p = rt.call("P", &[], &ctx, &mut host).unwrap().tables;
    assert_eq!(p[0], ResultTable::scalar("", 0));
    assert_eq!(p[1], ResultTable::scalar("", 4));
    assert_eq!(p[2], ResultTable::scalar("", 39));
    assert_eq!(p[3], one(DataType::TinyInt, Value::Int(1)));
    let err = run("ctx.random(5, 1)", &[]).unwrap_err();
    assert!(err.message.contains("ctx.random() takes"), "{}", err.message);
}

#[test]
fn the_sandbox_forbids_io_os_debug_loading_and_gc_control() {
    for (code, needle) in [
        ("io.write('x')", "global 'io'"),
        ("os.time()", "global 'os'"),
        ("debug.getinfo(1)", "global 'debug'"),
        ("require('x')", "global 'require'"),
        ("dofile('x')", "global 'dofile'"),
        ("loadfile('x')", "global 'loadfile'"),
        ("collectgarbage('stop')", "global 'collectgarbage'"),
        ("string.dump(print)", "field 'dump'"),
        ("('').dump(print)", "field 'dump'"),
        ("rawset({}, 1, 1)", "global 'rawset'"),
        ("coroutine.create(print)", "global 'coroutine'"),
        ("package.loaded.x = 1", "global 'package'"),
        ("math.random(1, 2)", "math.random is not available in procedures: use ctx.random()"),
        ("math.randomseed(1)", "math.random is not available"),
        ("assert(load('\\27Lua'))", "attempt to load a binary chunk"),
        ("return getmetatable('').__index", "attempt to index a boolean value"),
    ] {
        let err = run(code, &[]).expect_err(code);
        assert_eq!(err.kind, ErrorKind::Unexpected, "{code}");
        assert!(err.message.contains(needle), "{code}: {}", err.message);
    }
    // What is allowed works, and print writes nothing anywhere.
    let out = run(
        "print('hello'); return load('return 1 + ...')(41) .. string.upper('x') .. math.floor(2.5) .. utf8.char(65) .. #table.pack(1, 2)",
        &[],
    );
    assert_eq!(out.unwrap().tables, vec![one(DataType::Varchar, Value::from("42X2A2"))]);
    // Chunks made by load() cannot write globals either.
    let err = run("load('y = 1')()", &[]).unwrap_err();
    assert!(err.message.contains("cannot set global 'y'"), "{}", err.message);
}

#[test]
fn globals_and_libraries_cannot_be_changed() {
    for (code, needle) in [
        ("x = 1", "procedures/p.lua:2: cannot set global 'x': procedures cannot create or change global variables"),
        ("abort = nil", "cannot set global 'abort'"),
        ("_G.x = 1", "cannot change _G.x: it is read-only"),
        ("string.upper = nil", "cannot change string.upper"),
        ("math.pi = 3", "cannot change math.pi"),
        ("ctx.txn_id = 3", "cannot change ctx.txn_id"),
        ("setmetatable(_ENV, {})", "cannot change a protected metatable"),
        ("setmetatable(string, {})", "cannot change a protected metatable"),
    ] {
        let err = run(code, &[]).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unexpected, "{code}");
        assert!(err.message.contains(needle), "{code}: {}", err.message);
    }
    // Module level too: the load fails.
    let mut rt = runtime();
    let err = load(&mut rt, "G", "counter = 0\nreturn function() end").unwrap_err();
    assert!(err.message.starts_with("procedure G: procedures/g.lua:1: cannot set global 'counter'"), "{}", err.message);
    assert!(!rt.has("G"));
    // Reading through the read-only views still works, pairs() included.
    let out = run("local n = 0 for k in pairs(math) do n = n + 1 end return n > 20 and #_G == 0 and _G.math == math", &[]);
    assert_eq!(out.unwrap().tables, vec![one(DataType::TinyInt, Value::Int(1))]);
}

#[test]
fn the_instruction_budget_stops_runaway_loops_even_under_pcall() {
    let config = LuaConfig { instruction_budget: 1_000_000, ..LuaConfig::default() };
    let mut rt = LuaRuntime::new(config).unwrap();
    let mut texts = Vec::new();
    rt.load(
        "Spin",
        "spin.lua",
        "return function(mode)\n if mode == 1 then while true do end end\n while true do pcall(function() while true do end end) end\nend",
        &mut prepare_into(&mut texts),
    )
    .unwrap();
    let mut host = FakeHost::modified();
    for mode in [1, 2] {
        let err = rt.call("Spin", &[Value::Int(mode)], &ctx(1), &mut host).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Graceful);
        assert!(err.message.starts_with("procedure Spin exceeded its instruction budget of 1000000 instructions"), "{}", err.message);
    }
    // A module chunk that never returns is stopped too, and the budget is per call.
    let err = rt.load("Hang", "hang.lua", "while true do end", &mut prepare_into(&mut texts)).unwrap_err();
    assert!(err.message.starts_with("procedure Hang exceeded its instruction budget"), "{}", err.message);
    rt.load(
        "Sum",
        "sum.lua",
        "return function() local s = 0 for i = 1, 10000 do s = s + i end return s end",
        &mut prepare_into(&mut texts),
    )
    .unwrap();
    for _ in 0..200 {
        assert_eq!(rt.call("Sum", &[], &ctx(1), &mut host).unwrap().tables, vec![ResultTable::scalar("", 50_005_000)]);
    }
}

/// A watched runtime whose calls may run 5 ms (a budget of 25 million instructions).
fn watched_runtime() -> LuaRuntime {
    let config = LuaConfig { instruction_budget: 25_000_000, restartable: true, ..LuaConfig::default() };
    LuaRuntime::new(config).unwrap()
}

#[test]
fn a_watched_call_that_runs_long_is_undone_and_run_again_counted() {
    let mut rt = watched_runtime();
    let texts = load(
        &mut rt,
        "Count",
        "local ins = sql [[INSERT INTO t VALUES (?)]]\n\
         return function(n)\n ins:exec(1)\n local x = 0\n for i = 1, n do x = x + 1 end\n ins:exec(2)\n return x\nend",
    )
    .unwrap();
    assert_eq!(texts.len(), 1);
    // Short calls run once each. The 5 ms limit is wall-clock time, so a busy machine that
    // pauses this thread past it may stop one of them too: then it runs once more, counted.
    let short_calls = |rt: &mut LuaRuntime, txn| {
        let reruns_before = rt.reruns();
        let mut restarts = 0;
        for _ in 0..5 {
            let mut host = FakeHost::modified();
            let out = rt.call("Count", &[Value::Int(10)], &ctx(txn), &mut host).unwrap();
            assert_eq!(out.tables, vec![ResultTable::scalar("", 10)]);
            assert_eq!(host.calls.len(), 2);
            restarts += host.restarts;
        }
        assert!(restarts <= 1, "short calls restarted {restarts} times in 5");
        assert_eq!(rt.reruns() - reruns_before, restarts as u64);
    };
    short_calls(&mut rt, 1);
    // 16 million instructions, under the budget, take far longer than 5 ms: the first run
    // is stopped and undone, and the counted run gives the answer.
    for round in 1..=2 {
        let mut host = FakeHost::modified();
        let reruns_before = rt.reruns();
        let out = rt.call("Count", &[Value::Int(8_000_000)], &ctx(2), &mut host).unwrap();
        assert_eq!(out.tables, vec![ResultTable::scalar("", 8_000_000)]);
        assert_eq!((host.restarts, rt.reruns() - reruns_before), (1, 1), "round {round}");
        assert_eq!(host.calls, vec![(0, vec![Value::Int(1)]), (0, vec![Value::Int(2)])]);
    }
    // Afterwards calls run watched again, once each.
    short_calls(&mut rt, 3);
}

#[test]
fn a_watched_runaway_loop_ends_with_the_counted_budget_error_even_under_pcall() {
    // On a thread of its own, so that a loop nothing stops fails the test instead of hanging it.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rt = watched_runtime();
        load(&mut rt, "Spin", "return function(mode)\n if mode == 1 then while true do end end\n while true do pcall(function() while true do end end) end\nend").unwrap();
        for mode in [1, 2] {
            let mut host = FakeHost::modified();
            let err = rt.call("Spin", &[Value::Int(mode)], &ctx(1), &mut host).unwrap_err();
            assert!(err.message.starts_with("procedure Spin exceeded its instruction budget of 25000000 instructions"), "{}", err.message);
            assert_eq!(host.restarts, 1);
        }
        // A module's top level is counted, since a load has nothing to restart.
        let err = load(&mut rt, "Hang", "while true do end").unwrap_err();
        assert!(err.message.starts_with("procedure Hang exceeded its instruction budget"), "{}", err.message);
        let _ = done.send(());
    });
    finished
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the runaway calls were not stopped (or the thread failed: see its panic above)");
}

#[test]
fn the_memory_limit_stops_a_procedure_that_grows_without_end() {
    let config = LuaConfig { memory_limit_bytes: 16 * 1024 * 1024, ..LuaConfig::default() };
    let mut rt = LuaRuntime::new(config).unwrap();
    let mut texts = Vec::new();
    rt.load("Grow", "grow.lua", "return function(catch)\n local t = {}\n local function grow() for i = 1, 1e8 do t[i] = tostring(i) end end\n if catch then pcall(grow) return 1 end\n grow()\nend", &mut prepare_into(&mut texts)).unwrap();
    let mut host = FakeHost::modified();
    for catch in [false, true] {
        let err = rt.call("Grow", &[Value::Bool(catch)], &ctx(1), &mut host).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Graceful);
        assert!(err.message.starts_with("procedure Grow ran out of Lua memory (the limit is 16777216 bytes"), "{}", err.message);
    }
    // The runtime keeps working afterwards.
    rt.load("Ok", "ok.lua", "return function() return 1 end", &mut prepare_into(&mut texts)).unwrap();
    assert_eq!(rt.call("Ok", &[], &ctx(1), &mut host).unwrap().tables, vec![ResultTable::scalar("", 1)]);
}

/// Rows are built under the heap limit (`raw_stmt::first`) or with it lifted (the Rust
/// paths, see `Shared::lift_heap_limit`): a procedure that keeps them still stops at the
/// limit, and the limit is back afterwards.
#[test]
fn the_memory_limit_holds_for_results_kept_by_the_procedure() {
    let config = LuaConfig { memory_limit_bytes: 16 * 1024 * 1024, ..LuaConfig::default() };
    let mut rt = LuaRuntime::new(config).unwrap();
    let mut texts = Vec::new();
    let src = "local q = sql [[SELECT name FROM people]]\n\
               return function()\n local kept = {}\n\
               for i = 1, 1e7 do kept[i] = q:first() end\nend";
    rt.load("Keep", "keep.lua", src, &mut prepare_into(&mut texts)).unwrap();
    let wide = ResultTable {
        columns: vec![lockstep_core::ResultColumn { name: "NAME".into(), ty: DataType::Varchar }].into(),
        rows: vec![vec![Value::from("x".repeat(1000).as_str())]],
    };
    let mut host = FakeHost::new(move |_, _| Ok(wide.clone()));
    for _ in 0..2 {
        let err = rt.call("Keep", &[], &ctx(1), &mut host).unwrap_err();
        assert!(err.message.starts_with("procedure Keep ran out of Lua memory (the limit is 16777216 bytes"), "{}", err.message);
    }
}

#[test]
fn errors_name_the_procedure_the_file_and_the_line() {
    let mut rt = runtime();
    load(&mut rt, "Vote", "local ins = sql 'INSERT INTO votes VALUES (?)'\nreturn function(t)\n  if t then return ins:exec(1) end\n  local x = nil\n  return x.field\nend").unwrap();
    let mut host = FakeHost::new(|_, _| Err(Error::constraint("duplicate key in VOTES")));
    let err = call(&mut rt, "Vote", &[Value::Null], &mut host).unwrap_err();
    assert_eq!(err, Error::unexpected("procedure Vote: procedures/vote.lua:5: attempt to index a nil value (local 'x')"));
    // A failed statement keeps its kind, gets the location, and pcall cannot hide it.
    let err = call(&mut rt, "Vote", &[Value::Bool(true)], &mut host).unwrap_err();
    assert_eq!(err, Error::constraint("procedure Vote: procedures/vote.lua:3: duplicate key in VOTES"));
    // Planning errors abort the load with the same prefix.
    let err = load(&mut rt, "Bad", "local ok = sql 'SELECT 1'\nlocal q = sql 'SELECT bogus FROM t'\nreturn function() end").unwrap_err();
    assert_eq!(err, Error::sql("procedure Bad: procedures/bad.lua:2: unknown column BOGUS"));
    // Syntax errors name the file and line.
    let err = load(&mut rt, "Syn", "return function(\n  x +\nend").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Graceful);
    assert_eq!(err.message, "procedure Syn: procedures/syn.lua:2: ')' expected near '+'");
    // error() with a message keeps its location too.
    let err = run("error('boom')", &[]).unwrap_err();
    assert_eq!(err, Error::unexpected("procedure P: procedures/p.lua:2: boom"));
    // A chunk that does not return the body is refused.
    let err = load(&mut rt, "NoBody", "local x = 1").unwrap_err();
    assert!(err.message.contains("must end with `return function(...) ... end`"), "{}", err.message);
    let err = rt.call("Missing", &[], &ctx(1), &mut host).unwrap_err();
    assert_eq!(err, Error::unexpected("procedure Missing is not loaded"));
}

#[test]
fn sql_only_at_load_time_and_statements_only_in_the_body() {
    let err = run("return sql('SELECT 1')", &[]).unwrap_err();
    assert!(err.message.contains("procedures/p.lua:2: sql() can only be called while the module loads"), "{}", err.message);
    let mut rt = runtime();
    let err = load(&mut rt, "Early", "local q = sql 'SELECT 1'\nq:exec()\nreturn function() end").unwrap_err();
    assert!(
        err.message.contains("procedure Early: procedures/early.lua:2: statements run only inside the procedure body"),
        "{}",
        err.message
    );
}

#[test]
fn parameters_convert_both_ways() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Conv",
        r#"
local put = sql "INSERT INTO t VALUES (?, ?, ?, ?, ?)"
local bin = sql "INSERT INTO b VALUES (?) /*bin*/"
return function(d, b, ts, n, arr, missing)
  put:exec(d, ts, n == nil, arr, 1.5)
  bin:exec(b)
  return {type(d), d, #b, math.type(ts), #arr, arr[2], missing == nil}
end
"#,
    )
    .unwrap();
    let dec = decimal::parse("12.345").unwrap();
    let mut host = FakeHost::modified();
    let params = [
        Value::Decimal(dec.into()),
        Value::Bytes(vec![0, 1, 255].into()),
        Value::Timestamp(77),
        Value::Null,
        Value::Array(vec![Value::Int(5), Value::Int(6)].into()),
        Value::Null,
    ];
    let out = call(&mut rt, "Conv", &params, &mut host).unwrap();
    assert_eq!(
        out.tables,
        vec![
            one(DataType::Varchar, Value::from("string")),
            one(DataType::Varchar, Value::Str(decimal::format(dec).into())),
            ResultTable::scalar("", 3),
            one(DataType::Varchar, Value::from("integer")),
            ResultTable::scalar("", 2),
            ResultTable::scalar("", 6),
            one(DataType::TinyInt, Value::Int(1)),
        ]
    );
    let put = vec![
        Value::Str(decimal::format(dec).into()),
        Value::Int(77),
        Value::Bool(true),
        Value::Array(vec![Value::Int(5), Value::Int(6)].into()),
        Value::Float(1.5),
    ];
    assert_eq!(host.calls, vec![(0, put), (1, vec![Value::Bytes(vec![0, 1, 255].into())])]);

    // Raw bytes into a text parameter, a function, the wrong count: clear errors.
    for (args, needle) in [
        ("'\\255'", "parameter 1 is a string that is not valid UTF-8 text"),
        ("print", "parameter 1 is a function"),
        ("{{1}}", "parameter 1 is an array of arrays"),
        ("1, 2", "takes 1 parameters but was given 2"),
    ] {
        let mut rt = runtime();
        load(&mut rt, "E", &format!("local q = sql 'SELECT ?'\nreturn function()\n  return q:exec({args})\nend")).unwrap();
        let err = call(&mut rt, "E", &[], &mut FakeHost::modified()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unexpected);
        assert!(err.message.starts_with("procedure E: procedures/e.lua:3: "), "{}", err.message);
        assert!(err.message.contains(needle), "{args}: {}", err.message);
    }
}

#[test]
fn decimal_parameters_reach_lua_as_text_in_arrays_too() {
    let d = |text| Value::Decimal(decimal::parse(text).unwrap().into());
    let params = [Value::Array(vec![d("1.5"), Value::Int(2), d("-3.25")].into()), d("4"), Value::Array(vec![].into())];
    let out = run("local a, x, e = ...; return {a[1], a[2], a[3], x, #e}", &params).unwrap();
    let text = |v: &Value| match v {
        Value::Decimal(n) => one(DataType::Varchar, Value::Str(decimal::format(n.get()).into())),
        _ => unreachable!(),
    };
    let Value::Array(items) = &params[0] else { unreachable!() };
    assert_eq!(
        out.tables,
        vec![text(&items[0]), ResultTable::scalar("", 2), text(&items[2]), text(&params[1]), ResultTable::scalar("", 0)]
    );
}

#[test]
fn a_call_with_the_wrong_number_of_parameters_is_refused_as_voltdb_refuses_it() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Vote",
        "local ins = sql 'INSERT INTO votes VALUES (?, ?, ?)'\nreturn function(phone, contestant, max_votes)\n  return ins:exec(phone, contestant, max_votes)\nend",
    )
    .unwrap();
    let mut host = FakeHost::modified();
    for n in [0, 2, 4] {
        let params = vec![Value::Int(1); n];
        let err = call(&mut rt, "vote", &params, &mut host).unwrap_err();
        assert_eq!(err, Error::graceful(format!("PROCEDURE Vote EXPECTS 3 PARAMS, BUT RECEIVED {n}")));
    }
    assert!(host.calls.is_empty(), "a refused call ran: {:?}", host.calls);
    assert_eq!(
        call(&mut rt, "Vote", &[Value::Int(1), Value::Int(2), Value::Null], &mut host).unwrap().tables,
        vec![ResultTable::scalar("", 1)]
    );
}

/// A body declared with `...` takes any number of arguments.
#[test]
fn missing_and_extra_arguments_follow_lua_rules() {
    let out = run("local a, b = ...; return {a, b == nil, select('#', ...)}", &[Value::Int(1)]).unwrap();
    assert_eq!(out.tables, vec![ResultTable::scalar("", 1), one(DataType::TinyInt, Value::Int(1)), ResultTable::scalar("", 1)]);
}

#[test]
fn reload_replaces_the_procedure_and_names_ignore_case() {
    let mut rt = runtime();
    load(&mut rt, "Version", "return function() return 1 end").unwrap();
    let mut host = FakeHost::modified();
    assert_eq!(call(&mut rt, "VERSION", &[], &mut host).unwrap().tables, vec![ResultTable::scalar("", 1)]);
    load(&mut rt, "version", "return function() return 2 end").unwrap();
    assert_eq!(call(&mut rt, "Version", &[], &mut host).unwrap().tables, vec![ResultTable::scalar("", 2)]);
    // A failed reload keeps the old version.
    assert!(load(&mut rt, "Version", "return function(").is_err());
    assert_eq!(call(&mut rt, "Version", &[], &mut host).unwrap().tables, vec![ResultTable::scalar("", 2)]);
    assert!(rt.has("vErSiOn"));
    rt.unload("VERSION");
    assert!(!rt.has("Version"));
}

#[test]
fn procedures_do_not_share_environments() {
    let mut rt = runtime();
    load(&mut rt, "A", "local secret = 'a'\nreturn function() return rawget(_ENV, 'secret') == nil and secret end").unwrap();
    load(&mut rt, "B", "return function() return secret == nil end").unwrap();
    let mut host = FakeHost::modified();
    assert_eq!(call(&mut rt, "A", &[], &mut host).unwrap().tables, vec![one(DataType::Varchar, Value::from("a"))]);
    assert_eq!(call(&mut rt, "B", &[], &mut host).unwrap().tables, vec![one(DataType::TinyInt, Value::Int(1))]);
}

/// `first` and `exec` are C functions for plain scalar arguments and hand anything else to
/// their Rust methods (`raw_stmt.rs`): both paths must give the same rows and counts.
/// A result with a column of every type: a first row of one value each (DECIMAL `dec`),
/// then a row of 2s.
fn every_type_table(dec: i128) -> ResultTable {
    let mut t = ResultTable::with_columns(&[
        ("I", DataType::BigInt),
        ("F", DataType::Float),
        ("D", DataType::Decimal),
        ("S", DataType::Varchar),
        ("B", DataType::Varbinary),
        ("T", DataType::Timestamp),
        ("Yes", DataType::Boolean),
        ("GONE", DataType::Varchar),
    ]);
    t.push(vec![
        Value::Int(1),
        Value::Float(0.5),
        Value::Decimal(dec.into()),
        Value::from("text"),
        Value::Bytes(vec![0, 255, 7].into()),
        Value::Timestamp(99),
        Value::Bool(true),
        Value::Null,
    ]);
    t.push(vec![Value::Int(2); 8]);
    t
}

#[test]
fn first_and_exec_answer_the_same_on_their_fast_and_slow_paths() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Both",
        r#"
local q = sql "SELECT * FROM t WHERE k IN ?"
return function()
  local fast, slow = q:first(7), q:first({7})
  local same = 0
  for _, k in ipairs({"i", "f", "d", "s", "b", "t", "yes", "gone"}) do
    if fast[k] == slow[k] then same = same + 1 end
  end
  local ok, err = pcall(q.first, 5, 7)
  return {same, fast.d, math.type(fast.f), #fast.b, fast.gone == nil, q.exec(q, 7), q:exec({7}), ok, tostring(err):find("userdata") ~= nil}
end
"#,
    )
    .unwrap();
    let dec = decimal::parse("-3.25").unwrap();
    let mut host = FakeHost::new(move |_, _| Ok(every_type_table(dec)));
    let (out, fast) = counting_fast_calls(|| call(&mut rt, "Both", &[], &mut host).unwrap());
    // `q:first(7)` and `q.exec(q, 7)` took the fast path; the array calls and the call on
    // a number did not.
    assert_eq!(fast, 2);
    assert_eq!(
        out.tables,
        vec![
            ResultTable::scalar("", 8),
            one(DataType::Varchar, Value::Str(decimal::format(dec).into())),
            one(DataType::Varchar, Value::from("float")),
            ResultTable::scalar("", 3),
            one(DataType::TinyInt, Value::Int(1)),
            ResultTable::scalar("", 2),
            ResultTable::scalar("", 2),
            one(DataType::TinyInt, Value::Int(0)),
            one(DataType::TinyInt, Value::Int(1)),
        ]
    );
    let array = Value::Array(vec![Value::Int(7)].into());
    assert_eq!(
        host.calls.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(),
        vec![vec![Value::Int(7)], vec![array.clone()], vec![Value::Int(7)], vec![array]]
    );
    // The methods table is shared by every statement of the site: a procedure can neither
    // reach it nor write through a statement.
    load(
        &mut rt,
        "Tamper",
        "local q = sql 'SELECT 1'\nreturn function()\n  return {getmetatable(q) == false, pcall(function() q.first = print end)}\nend",
    )
    .unwrap();
    let out = call(&mut rt, "Tamper", &[], &mut FakeHost::modified()).unwrap();
    assert_eq!(
        out.tables,
        vec![
            one(DataType::TinyInt, Value::Int(1)),
            one(DataType::TinyInt, Value::Int(0)),
            one(DataType::Varchar, Value::from("procedures/tamper.lua:3: attempt to index a statement value (upvalue 'q')")),
        ]
    );
}

/// A result object lives as Lua keeps it during the call, is freed by the garbage
/// collector, and cannot be kept across calls: module-level state is read-only.
#[test]
fn query_results_live_until_collected_or_returned() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Keep",
        r#"
local q = sql "SELECT * FROM t WHERE k IN ?"
return function(mode)
  local kept = q:query(7)
  if mode == "use" then return {kept[1].i, #kept, kept:columns()[1], kept[0] == nil, kept.nothing == nil} end
  if mode == "return" then return kept, kept end
  if mode == "paths" then return q:query(7), q:query({7}), (pcall(q.query, 5, 7)) end
  for i = 1, 20000 do local r = q:query(7) end
end
"#,
    )
    .unwrap();
    let dec = decimal::parse("-3.25").unwrap();
    let mut host = FakeHost::new(move |_, _| Ok(every_type_table(dec)));
    let live = || crate::result_obj::HELD_COUNT.with(|n| n.get());
    let before = live();
    let mode = |m: &str| [Value::from(m)];
    let used = call(&mut rt, "Keep", &mode("use"), &mut host).unwrap().tables;
    assert_eq!(
        used,
        vec![
            ResultTable::scalar("", 1),
            ResultTable::scalar("", 2),
            one(DataType::Varchar, Value::from("i")),
            one(DataType::TinyInt, Value::Int(1)),
            one(DataType::TinyInt, Value::Int(1)),
        ]
    );
    // Returned twice, it is copied.
    assert_eq!(call(&mut rt, "Keep", &mode("return"), &mut host).unwrap().tables, vec![every_type_table(dec), every_type_table(dec)]);

    // The fast path (scalar arguments) and the slow one (an array) make equal results; a
    // call on something that is not a statement fails.
    let (paths, fast) = counting_fast_calls(|| call(&mut rt, "Keep", &mode("paths"), &mut host).unwrap().tables);
    assert_eq!(fast, 2);
    assert_eq!(paths[..3], [every_type_table(dec), every_type_table(dec), one(DataType::TinyInt, Value::Int(0))]);

    // Twenty thousand results made and dropped: the collector frees them as it goes, and
    // closing the Lua state frees the rest.
    call(&mut rt, "Keep", &mode("churn"), &mut host).unwrap();
    assert!(live() - before < 10_000, "{} results still alive", live() - before);

    // A module cannot keep a result for a later call, in a variable or in a table.
    let err = load(&mut rt, "InVariable", "local q = sql 'SELECT 1'\nlocal kept\nreturn function()\n  kept = q:query()\nend").unwrap_err();
    assert!(err.message.contains("procedures/invariable.lua:4: assigns to 'kept'"), "{}", err.message);
    load(&mut rt, "InTable", "local q = sql 'SELECT 1'\nlocal box = {}\nreturn function()\n  box[1] = q:query()\nend").unwrap();
    let err = call(&mut rt, "InTable", &[], &mut host).unwrap_err();
    assert!(err.message.contains("procedures/intable.lua:4: cannot change field '1' of a module-level table"), "{}", err.message);
    drop(rt);
    assert_eq!(live(), before);
}

#[test]
fn values_of_numbers_booleans_and_nulls_are_pushed_like_any_others() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Scalars",
        r##"
local q = sql "SELECT * FROM t WHERE k IN ?"
return function()
  local fast, slow = table.pack(q:values(7)), table.pack(q:values({7}))
  local same = fast.n == slow.n
  for i = 1, fast.n do
    same = same and fast[i] == slow[i] and math.type(fast[i]) == math.type(slow[i])
  end
  return {fast.n, same, fast[1], fast[2], fast[3], fast[4] == nil, fast[5]}
end
"##,
    )
    .unwrap();
    let mut host = FakeHost::new(|_, _| {
        let mut t = ResultTable::with_columns(&[
            ("I", DataType::BigInt),
            ("F", DataType::Float),
            ("B", DataType::Boolean),
            ("N", DataType::Integer),
            ("T", DataType::Timestamp),
        ]);
        t.push(vec![Value::Int(-3), Value::Float(2.5), Value::Bool(true), Value::Null, Value::Timestamp(99)]);
        Ok(t)
    });
    let (out, fast) = counting_fast_calls(|| call(&mut rt, "Scalars", &[], &mut host).unwrap());
    assert_eq!(fast, 1);
    assert_eq!(
        out.tables,
        vec![
            ResultTable::scalar("", 5),
            one(DataType::TinyInt, Value::Int(1)),
            ResultTable::scalar("", -3),
            one(DataType::Float, Value::Float(2.5)),
            one(DataType::TinyInt, Value::Int(1)),
            one(DataType::TinyInt, Value::Int(1)),
            ResultTable::scalar("", 99),
        ]
    );
}

#[test]
fn values_gives_the_first_rows_values_the_same_on_its_fast_and_slow_paths() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Values",
        r##"
local q = sql "SELECT * FROM t WHERE k IN ?"
return function()
  local fast, slow = table.pack(q:values(7)), table.pack(q:values({7}))
  local same = 0
  for i = 1, 8 do
    if fast[i] == slow[i] then same = same + 1 end
  end
  local ok = pcall(q.values, 5, 7)
  return {fast.n, slow.n, same, fast[3], math.type(fast[2]), fast[8] == nil, select("#", q:values(0)), select("#", q:values({0})), ok}
end
"##,
    )
    .unwrap();
    let dec = decimal::parse("12.5").unwrap();
    let mut host = FakeHost::new(move |_, params| {
        let mut t = every_type_table(dec);
        let zero = matches!(params.first(), Some(Value::Int(0)))
            || matches!(params.first(), Some(Value::Array(a)) if a.first() == Some(&Value::Int(0)));
        if zero {
            t.rows.clear();
        }
        Ok(t)
    });
    let (out, fast) = counting_fast_calls(|| call(&mut rt, "Values", &[], &mut host).unwrap());
    // `q:values(7)` and `q:values(0)` took the fast path; the array calls and the call on a
    // number did not.
    assert_eq!(fast, 2);
    assert_eq!(
        out.tables,
        vec![
            ResultTable::scalar("", 8),
            ResultTable::scalar("", 8),
            ResultTable::scalar("", 8),
            one(DataType::Varchar, Value::Str(decimal::format(dec).into())),
            one(DataType::Varchar, Value::from("float")),
            one(DataType::TinyInt, Value::Int(1)),
            ResultTable::scalar("", 0),
            ResultTable::scalar("", 0),
            one(DataType::TinyInt, Value::Int(0)),
        ]
    );
}

#[test]
fn result_table_answers_the_same_on_its_fast_and_slow_paths() {
    let mut rt = runtime();
    // A third argument sends the call down the slow path, which ignores it.
    load(
        &mut rt,
        "Built",
        r#"
local names = {"i", "f", "b", "s", "none"}
local rows = {{1, 0.5, true, "text", nil}, {nil, 2.5, false, "é", nil}, {3, nil, nil, nil, nil}}
return function()
  return result_table(names, rows), result_table(names, rows, nil), result_table({"x"}, {}), result_table({"x"}, {}, nil)
end
"#,
    )
    .unwrap();
    let (out, fast) = counting_fast_calls(|| call(&mut rt, "Built", &[], &mut FakeHost::modified()).unwrap());
    assert_eq!(fast, 2);
    let t = &out.tables;
    assert_eq!(t[0], t[1]);
    assert_eq!(t[2], t[3]);
    assert!(std::sync::Arc::ptr_eq(&t[0].columns, &t[1].columns), "both paths share the kept columns");
    let types: Vec<DataType> = t[0].columns.iter().map(|c| c.ty).collect();
    assert_eq!(types, [DataType::BigInt, DataType::Float, DataType::TinyInt, DataType::Varchar, DataType::Varchar]);
    assert_eq!(t[0].rows[1], vec![Value::Null, Value::Float(2.5), Value::Int(0), Value::from("é"), Value::Null]);
    assert!(t[2].rows.is_empty());
    // What the fast path leaves to the slow one still fails the same way, with the line.
    for (code, needle) in [
        (r#"result_table({"n"}, {{1}, {"x"}})"#, "procedures/p.lua:2: result_table() row 2 column 1: cannot convert VARCHAR 'x' to BIGINT"),
        (r#"result_table({"n"}, {{{}}})"#, "procedures/p.lua:2: result_table() row 1 column 1 is a table"),
        (r#"result_table({1}, {})"#, "procedures/p.lua:2: result_table() column name 1 is not a string"),
        (r#"result_table("n", {})"#, "procedures/p.lua:2: result_table(names, rows) takes an array"),
    ] {
        let err = run(&format!("return {code}"), &[]).unwrap_err();
        assert!(err.message.contains(needle), "{code}: {}", err.message);
    }
}

/// Runs `f` on a thread of its own and fails the test if it has not finished within two
/// minutes: what it checks would otherwise hang the test run.
fn finishes(what: &str, f: impl FnOnce() + Send + 'static) {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = done.send(());
    });
    if finished.recv_timeout(std::time::Duration::from_secs(120)).is_err() {
        panic!("{what} did not finish (or its thread failed: see its panic above)");
    }
}

#[test]
fn finalizers_and_weak_tables_are_refused_and_the_runtime_keeps_working() {
    finishes("the finalizer checks", || {
        let mut rt = runtime();
        let looping = "function() while true do end end";
        for (code, needle) in [
            (format!("setmetatable({{}}, {{__gc = {looping}}})"), "a metatable with __gc (a finalizer) is not allowed"),
            ("setmetatable({}, {__gc = false})".to_string(), "__gc"),
            ("setmetatable({}, {__mode = 'k'})".to_string(), "weak tables (__mode) are not allowed"),
        ] {
            let err = run(&code, &[]).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Unexpected, "{code}");
            assert!(err.message.contains("procedures/p.lua:2: setmetatable: "), "{code}: {}", err.message);
            assert!(err.message.contains(needle), "{code}: {}", err.message);
        }
        // At module level too.
        let err = load(&mut rt, "Gc", &format!("local t = setmetatable({{}}, {{__gc = {looping}}})\nreturn function() end")).unwrap_err();
        assert!(err.message.contains("procedures/gc.lua:1: setmetatable: a metatable with __gc"), "{}", err.message);
        // A __gc added after setmetatable marks nothing (Lua 5.4 marks objects for
        // finalization in setmetatable only): collecting the table runs no finalizer.
        load(
            &mut rt,
            "Late",
            &format!("return function()\n  local mt = {{}}\n  local t = setmetatable({{}}, mt)\n  mt.__gc = {looping}\n  return 1\nend"),
        )
        .unwrap();
        let mut host = FakeHost::modified();
        assert_eq!(call(&mut rt, "Late", &[], &mut host).unwrap().tables, vec![ResultTable::scalar("", 1)]);
        rt.lua().gc_collect().unwrap();
        rt.lua().gc_collect().unwrap();
        // A module-level metatable that gained a __gc after its first use is refused later.
        load(
            &mut rt,
            "Class",
            &format!("local mt = {{}}\nlocal first = setmetatable({{}}, mt)\nmt.__gc = {looping}\nreturn function()\n  local t = setmetatable({{}}, mt)\n  return t\nend"),
        )
        .unwrap();
        let err = call(&mut rt, "Class", &[], &mut host).unwrap_err();
        assert!(err.message.contains("procedures/class.lua:5: setmetatable: a metatable with __gc"), "{}", err.message);
        // The runtime keeps working.
        load(&mut rt, "Ok", "return function() return 7 end").unwrap();
        assert_eq!(call(&mut rt, "Ok", &[], &mut host).unwrap().tables, vec![ResultTable::scalar("", 7)]);
    });
}

/// Lua reads `__mode` from a metatable at every collection, so adding it after
/// setmetatable would still make a weak table, whose contents depend on when the collector
/// ran. The metatable a call sets is copied: later fields do not reach the object.
#[test]
fn a_mode_added_after_setmetatable_makes_no_weak_table() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Late",
        r#"
return function()
  local mt = {}
  local t = setmetatable({}, mt)
  mt.__mode = "k"
  t[{}] = true
  for i = 1, 200000 do local garbage = {i} end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  mt.__mode = nil
  mt.__index = function() return "late" end
  local u = setmetatable({}, mt)
  return n, getmetatable(t) == mt, t.x == nil, u.x
end
"#,
    )
    .unwrap();
    let out = call(&mut rt, "Late", &[], &mut FakeHost::modified());
    let yes = one(DataType::TinyInt, Value::Int(1));
    assert_eq!(out.unwrap().tables, vec![ResultTable::scalar("", 1), yes.clone(), yes, one(DataType::Varchar, Value::from("late"))]);
}

/// `__close` handlers run with hooks on: the budget stops one that loops, counted or watched.
#[test]
fn a_looping_close_handler_is_stopped_by_the_budget() {
    finishes("the __close checks", || {
        let src = "return function()\n  local x <close> = setmetatable({}, {__close = function() while true do end end})\n  return 1\nend";
        let config = LuaConfig { instruction_budget: 1_000_000, ..LuaConfig::default() };
        for mut rt in [LuaRuntime::new(config).unwrap(), watched_runtime()] {
            load(&mut rt, "Close", src).unwrap();
            let err = call(&mut rt, "Close", &[], &mut FakeHost::modified()).unwrap_err();
            assert!(err.message.starts_with("procedure Close exceeded its instruction budget"), "{}", err.message);
        }
    });
}

#[test]
fn module_level_variables_cannot_be_assigned_by_the_body() {
    let mut rt = runtime();
    for (name, src, at) in [
        ("Counter", "local n = 0\nreturn function()\n  n = n + 1\n  return n\nend", "procedures/counter.lua:3: assigns to 'n'"),
        (
            "Helper",
            "local last\nlocal function remember(x)\n  last = x\nend\nreturn function(x)\n  remember(x)\n  return last\nend",
            "procedures/helper.lua:3: assigns to 'last'",
        ),
        ("Env", "return function()\n  _ENV = {}\nend", "procedures/env.lua:2: assigns to '_ENV'"),
        (
            "Loaded",
            "local bump = load('local n = 0 return function() n = n + 1 return n end', '=bump')()\nreturn function() return bump() end",
            "bump:1: assigns to 'n'",
        ),
    ] {
        let err = load(&mut rt, name, src).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unexpected, "{name}");
        assert!(err.message.starts_with(&format!("procedure {name}: {at}, a variable of the module's top level")), "{}", err.message);
        assert!(err.message.contains("keep changing state in the database"), "{}", err.message);
        assert!(!rt.has(name));
    }
    // Variables of the body, and of functions the body or a helper calls, are per call.
    load(
        &mut rt,
        "PerCall",
        "local BASE = 10\nlocal function count_to(n)\n  local c = 0\n  for _ = 1, n do c = c + 1 end\n  return c\nend\n\
         return function(n)\n  local total = BASE\n  local add = function(x) total = total + x end\n  add(count_to(n))\n  return total\nend",
    )
    .unwrap();
    let mut host = FakeHost::modified();
    for _ in 0..3 {
        assert_eq!(call(&mut rt, "PerCall", &[Value::Int(5)], &mut host).unwrap().tables, vec![ResultTable::scalar("", 15)]);
    }
}

#[test]
fn module_level_tables_are_read_only_after_the_load_and_read_as_before() {
    let mut rt = runtime();
    let mut host = FakeHost::modified();
    for (name, src, needle) in [
        (
            "Tally",
            "local state = {n = 0}\nreturn function()\n  state.n = state.n + 1\n  return state.n\nend",
            "procedures/tally.lua:3: cannot change field 'n'",
        ),
        ("Cache", "local cache = {}\nreturn function(k)\n  cache[k] = 1\nend", "procedures/cache.lua:3: cannot change field 'x'"),
        ("Deep", "local t = {inner = {1, 2}}\nreturn function()\n  t.inner[1] = 5\nend", "procedures/deep.lua:3: cannot change field '1'"),
        ("Insert", "local list = {}\nreturn function()\n  table.insert(list, 1)\nend", "cannot change field '1'"),
        ("Meta", "local t = {}\nreturn function()\n  setmetatable(t, {})\nend", "cannot change a protected metatable"),
    ] {
        load(&mut rt, name, src).unwrap();
        let err = call(&mut rt, name, &[Value::from("x")][..usize::from(name == "Cache")], &mut host).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Unexpected, "{name}");
        assert!(err.message.contains(needle), "{name}: {}", err.message);
        if name != "Meta" {
            assert!(err.message.contains("module-level state is read-only once the module has loaded"), "{}", err.message);
        }
    }
    // Reads see what the module built: indexing, #, pairs, ipairs, next, the raw functions,
    // the table library, tables as keys, and identities.
    load(
        &mut rt,
        "Reads",
        r##"
local KEY = {}
local LIST = {10, 20, 30}
local NAMES = {a = 1, b = 2, [KEY] = "by table"}
local NESTED = {list = LIST}
return function()
  local sum, n = 0, 0
  for _, v in ipairs(LIST) do sum = sum + v end
  for k, v in pairs(NAMES) do n = n + 1 end
  local m = 0
  for k in next, NAMES do m = m + 1 end
  return {#LIST, sum, n, m, NAMES[KEY], NESTED.list == LIST, rawget(LIST, 2), rawlen(LIST),
          table.concat(LIST, ","), select("#", table.unpack(LIST)), next({}) == nil, next(LIST) ~= nil,
          type(LIST), getmetatable(LIST) == false}
end
"##,
    )
    .unwrap();
    let out = call(&mut rt, "Reads", &[], &mut host).unwrap().tables;
    let ints = |v: i64| ResultTable::scalar("", v);
    let yes = || one(DataType::TinyInt, Value::Int(1));
    assert_eq!(
        out,
        vec![
            ints(3),
            ints(60),
            ints(3),
            ints(3),
            one(DataType::Varchar, Value::from("by table")),
            yes(),
            ints(20),
            ints(3),
            one(DataType::Varchar, Value::from("10,20,30")),
            ints(3),
            yes(),
            yes(),
            one(DataType::Varchar, Value::from("table")),
            yes(),
        ]
    );
    // Rust reads module-level tables too: as an array parameter, as returned values, and
    // in result_table (whose fast path still takes them).
    let texts = load(
        &mut rt,
        "Rust",
        r#"
local q = sql "SELECT * FROM t WHERE k IN ?"
local IDS = {7, 8}
local NAMES = {"a"}
local ROWS = {{1}, {2}}
local CODES = {4, 5}
return function(mode)
  if mode == "param" then return q:exec(IDS) end
  if mode == "codes" then return CODES end
  return result_table(NAMES, ROWS)
end
"#,
    )
    .unwrap();
    assert_eq!(texts.len(), 1);
    call(&mut rt, "Rust", &[Value::from("param")], &mut host).unwrap();
    assert_eq!(host.calls.last().unwrap().1, vec![Value::Array(vec![Value::Int(7), Value::Int(8)].into())]);
    assert_eq!(call(&mut rt, "Rust", &[Value::from("codes")], &mut host).unwrap().tables, vec![ints(4), ints(5)]);
    let (out, fast) = counting_fast_calls(|| call(&mut rt, "Rust", &[Value::from("rows")], &mut host).unwrap().tables);
    assert_eq!(fast, 1);
    let mut expected = ResultTable::with_columns(&[("a", DataType::BigInt)]);
    expected.push(vec![Value::Int(1)]);
    expected.push(vec![Value::Int(2)]);
    assert_eq!(out, vec![expected]);
}

/// Classes kept by the module keep working: methods, metamethods, objects made per call
/// (which may change) and objects made at load (which may not).
#[test]
fn module_level_classes_and_objects_keep_working() {
    let mut rt = runtime();
    load(
        &mut rt,
        "Points",
        r#"
local Point = {}
Point.__index = Point
Point.__add = function(a, b) return Point.new(a.x + b.x, a.y + b.y) end
Point.__tostring = function(p) return "(" .. p.x .. "," .. p.y .. ")" end
function Point.new(x, y) return setmetatable({x = x, y = y}, Point) end
function Point:sum() return self.x + self.y end
local ORIGIN = Point.new(0, 0)
local Memo = setmetatable({}, {__index = function(t, k) return k * 2 end})
return function(a, b)
  local p = Point.new(a, b)
  p.x = p.x + 1
  local q = p + ORIGIN
  local changed = pcall(function() ORIGIN.x = 5 end)
  local grew = pcall(function() Point.extra = 1 end)
  return {p:sum(), ORIGIN:sum(), tostring(q), tostring(ORIGIN), getmetatable(p) == Point,
          getmetatable(ORIGIN) == Point, changed, grew, Memo[21]}
end
"#,
    )
    .unwrap();
    let out = call(&mut rt, "Points", &[Value::Int(1), Value::Int(2)], &mut FakeHost::modified()).unwrap().tables;
    let yes = one(DataType::TinyInt, Value::Int(1));
    let no = one(DataType::TinyInt, Value::Int(0));
    assert_eq!(
        out,
        vec![
            ResultTable::scalar("", 4),
            ResultTable::scalar("", 0),
            one(DataType::Varchar, Value::from("(2,2)")),
            one(DataType::Varchar, Value::from("(0,0)")),
            yes.clone(),
            yes,
            no.clone(),
            no,
            ResultTable::scalar("", 42),
        ]
    );
}

/// A call that runs past its watch limit runs again; since it can change nothing but the
/// database (which the host undoes), the second run sees what the first did.
#[test]
fn a_call_run_again_never_shows_a_doubled_effect() {
    let mut rt = watched_runtime();
    load(
        &mut rt,
        "Work",
        "local ins = sql [[INSERT INTO t VALUES (?)]]\nlocal LIMIT = {n = 3}\n\
         return function(spin)\n  local seen = {}\n  for i = 1, LIMIT.n do seen[#seen + 1] = ins:exec(i) end\n  \
         local x = 0\n  for i = 1, spin do x = x + 1 end\n  return #seen\nend",
    )
    .unwrap();
    load(
        &mut rt,
        "Tally",
        "local state = {n = 0}\nreturn function(spin)\n  for i = 1, spin do end\n  state.n = state.n + 1\n  return state.n\nend",
    )
    .unwrap();
    for round in 0..3 {
        // 8 million loop turns take far longer than the 5 ms limit: the first run stops and
        // the call runs again, counted.
        let mut host = FakeHost::modified();
        let reruns = rt.reruns();
        let out = rt.call("Work", &[Value::Int(8_000_000)], &ctx(round), &mut host).unwrap();
        assert_eq!(out.tables, vec![ResultTable::scalar("", 3)], "round {round}");
        assert_eq!((host.restarts, rt.reruns() - reruns), (1, 1));
        assert_eq!(host.calls.len(), 3);
        // The counter procedure fails the same way in both runs, every time.
        let err = rt.call("Tally", &[Value::Int(8_000_000)], &ctx(round), &mut host).unwrap_err();
        assert!(err.message.contains("procedures/tally.lua:4: cannot change field 'n' of a module-level table"), "{}", err.message);
    }
}

/// Every procedure of the kits under apps/ loads, and Voter's behave.
#[test]
fn the_kit_procedures_still_load_and_run() {
    let apps = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../apps");
    let mut loaded = 0;
    let mut rt = runtime();
    for app in std::fs::read_dir(&apps).unwrap() {
        let dir = app.unwrap().path().join("procedures");
        let Ok(files) = std::fs::read_dir(&dir) else { continue };
        for file in files {
            let path = file.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("lua") {
                continue;
            }
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            let src = std::fs::read_to_string(&path).unwrap();
            if crate::is_compound(&src) {
                // Not a transaction: the compound runtime loads it and runs it to its first call.
                let mut compound = crate::CompoundRuntime::new(16 * 1024 * 1024, 1_000_000).unwrap();
                let (_, step) = compound.start(&name, &path.display().to_string(), &src, &[Value::Str("01".into()), Value::Int(1)]);
                assert!(matches!(step, crate::Step::Calls(_)), "{name}: {step:?}");
                loaded += 1;
                continue;
            }
            let mut texts = Vec::new();
            rt.load(&name, &path.display().to_string(), &src, &mut prepare_into(&mut texts)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
            loaded += 1;
        }
    }
    assert!(loaded >= 28, "only {loaded} kit procedures found under {}", apps.display());
    // Initialize reads its module-level area codes and splits the names with gmatch.
    let mut host = FakeHost::new(|stmt, _| {
        Ok(if stmt == 0 {
            let mut t = ResultTable::with_columns(&[("N", DataType::BigInt)]);
            t.push(vec![Value::Int(0)]);
            t
        } else {
            ResultTable::modified(1)
        })
    });
    let out = call(&mut rt, "Initialize", &[Value::Int(2), Value::from("Edwina,Jessie,Ryan")], &mut host).unwrap();
    assert_eq!(out.tables, vec![ResultTable::scalar("", 2)]);
    assert_eq!(host.calls.len(), 1 + 2 + 289);
    assert_eq!(host.calls[1], (1, vec![Value::from("Edwina"), Value::Int(1)]));
    assert_eq!(host.calls[3], (2, vec![Value::Int(201), Value::from("NJ")]));
}

/// One procedure cannot take the heap its site's other procedures share: its module may keep
/// only so much, and no call can keep anything.
#[test]
fn one_procedure_cannot_keep_the_heap_of_its_site() {
    const LIMIT: usize = 4 * 1024 * 1024;
    let config = LuaConfig { memory_limit_bytes: 64 * 1024 * 1024, procedure_memory_limit_bytes: LIMIT, ..LuaConfig::default() };
    let mut rt = LuaRuntime::new(config).unwrap();
    let mut host = FakeHost::modified();
    load(&mut rt, "Small", "local t = {}\nfor i = 1, 1000 do t[i] = i end\nreturn function() return #t end").unwrap();
    // A module building a large table is stopped while it loads, with a clear message.
    let err = load(&mut rt, "Big", "local big = {}\nfor i = 1, 2e6 do big[i] = i end\nreturn function() return #big end").unwrap_err();
    assert_eq!(err.kind, ErrorKind::Graceful);
    assert_eq!(
        err.message,
        format!(
            "procedure Big: its module needs more Lua memory than that while it loads; a procedure may keep {LIMIT} bytes \
             (procedure_memory_limit_bytes): build large tables inside the body, or keep large data in the database"
        )
    );
    assert!(!rt.has("Big"));
    // A body that tries to keep what it builds across calls fails at the first write.
    load(&mut rt, "Grow", "local kept = {}\nreturn function(n)\n  for i = 1, n do kept[i] = string.rep('x', 1000) end\nend").unwrap();
    let err = call(&mut rt, "Grow", &[Value::Int(200_000)], &mut host).unwrap_err();
    assert!(err.message.contains("procedures/grow.lua:3: cannot change field '1' of a module-level table"), "{}", err.message);
    // The others keep working, and what each module keeps is reported.
    assert_eq!(call(&mut rt, "Small", &[], &mut host).unwrap().tables, vec![ResultTable::scalar("", 1000)]);
    let memory = rt.procedure_memory();
    assert_eq!(memory.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["Grow", "Small"]);
    let small = memory[1].1;
    assert!((16_000..LIMIT).contains(&small), "Small keeps {small} bytes");
    // With no per-procedure limit the same module loads, and its size is reported.
    let config = LuaConfig { procedure_memory_limit_bytes: 0, ..config };
    let mut rt = LuaRuntime::new(config).unwrap();
    load(&mut rt, "Big", "local big = {}\nfor i = 1, 2e6 do big[i] = i end\nreturn function() return #big end").unwrap();
    assert!(rt.procedure_memory()[0].1 > 2_000_000 * 16, "{:?}", rt.procedure_memory());
}

/// Work inside library functions, where no hook runs, counts against the budget: a
/// pathological pattern ends with the budget error like a Lua loop, counted or watched,
/// and pcall cannot catch it.
#[test]
fn a_pathological_pattern_ends_with_the_budget_error() {
    finishes("the pattern checks", || {
        let src = "return function(catch)\n  local s = string.rep('a', 3000)\n  if catch then return pcall(string.find, s, '(.-)(.-)(.-)(.-)x') end\n  return s:find('(.-)(.-)(.-)(.-)x')\nend";
        let counted = LuaRuntime::new(LuaConfig { instruction_budget: 10_000_000, ..LuaConfig::default() }).unwrap();
        for (mut rt, budget, restarts) in [(counted, 10_000_000, 0), (watched_runtime(), 25_000_000, 1)] {
            load(&mut rt, "Slow", src).unwrap();
            for catch in [false, true] {
                let mut host = FakeHost::modified();
                let err = rt.call("Slow", &[Value::Bool(catch)], &ctx(1), &mut host).unwrap_err();
                assert_eq!(err.kind, ErrorKind::Graceful);
                assert!(
                    err.message.starts_with(&format!("procedure Slow exceeded its instruction budget of {budget} instructions")),
                    "{}",
                    err.message
                );
                assert_eq!(host.restarts, restarts, "catch {catch}");
            }
            load(&mut rt, "Fine", "return function() return ('key = value'):match('(%w+)%s*=%s*(%w+)') end").unwrap();
            let out = rt.call("Fine", &[], &ctx(2), &mut FakeHost::modified()).unwrap();
            assert_eq!(out.tables, vec![one(DataType::Varchar, Value::from("key")), one(DataType::Varchar, Value::from("value"))]);
        }
    });
}

/// Library calls whose loops an argument, a length or a metamethod makes huge end with the
/// budget error instead of spinning outside the hooks.
#[test]
fn library_loops_outside_the_hooks_are_charged() {
    finishes("the library checks", || {
        let mut rt = LuaRuntime::new(LuaConfig { instruction_budget: 10_000_000, ..LuaConfig::default() }).unwrap();
        for (name, body) in [
            ("Rep", "return #string.rep('', math.maxinteger)"),
            // 80 entries whose border (#t) is 2^40 + 1.
            ("Sparse", "local t = {true, true}\n  for i = 2, 40 do t[(1 << i) + 1] = true t[1 << i] = true end\n  table.insert(t, 1, 'x')"),
            ("Remove", "local t = setmetatable({}, {__len = function() return math.maxinteger end})\n  table.remove(t, 1)"),
            ("Concat", "return table.concat(setmetatable({}, {__index = table.concat}), '', 1, math.maxinteger)"),
            ("Move", "table.move({}, 1, math.maxinteger, 2)"),
            ("Sort", "local t = setmetatable({}, {__len = function() return 2^31 - 2 end, __index = rawlen, __newindex = rawequal})\n  table.sort(t)"),
            ("Format", "local s = string.rep('x', 1e6)\n  for i = 1, 1e9 do local f = string.format('%s', s) end"),
            ("Utf8", "local s = 'a' .. string.rep('\\x80', 1e6)\n  local step = utf8.codes(s)\n  for i = 1, 1e9 do step(s, 1) end"),
            ("Plain", "local s = string.rep('a', 1e6)\n  for i = 1, 1e9 do s:find(string.rep('a', 1000) .. 'b', 1, true) end"),
            ("Load", "local s = string.rep(' ', 1e6)\n  for i = 1, 1e9 do load(s) end"),
        ] {
            load(&mut rt, name, &format!("return function()\n  {body}\nend")).unwrap();
            let err = call(&mut rt, name, &[], &mut FakeHost::modified()).expect_err(name);
            assert!(err.message.starts_with(&format!("procedure {name} exceeded its instruction budget")), "{name}: {}", err.message);
        }
    });
}

/// table.sort chooses its pivots from the data, never the clock: equal elements end in the
/// same order in every run. McIlroy's adversary (a comparator that decides values as it is
/// asked) drives the sort into the badly split partitions where Lua's own sort draws a new
/// pivot from the clock, after which the comparisons asked, and so the result, would vary.
#[test]
fn sorting_is_deterministic() {
    let src = r#"
return function()
  local n = 1500
  local val, gas, solid, candidate = {}, 1500, 0, nil
  local ids = {}
  for i = 1, n do ids[i] = i val[i] = gas end
  table.sort(ids, function(x, y)
    if val[x] == gas and val[y] == gas then
      solid = solid + 1
      if x == candidate then val[x] = solid else val[y] = solid end
    end
    if val[x] == gas then candidate = x elseif val[y] == gas then candidate = y end
    return val[x] < val[y]
  end)
  return table.concat(ids, ",")
end
"#;
    let sorted = || {
        let mut rt = runtime();
        load(&mut rt, "Sort", src).unwrap();
        call(&mut rt, "Sort", &[], &mut FakeHost::modified()).unwrap().tables
    };
    let first = sorted();
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(sorted(), first);
    }
}

#[test]
fn a_module_cannot_keep_a_gmatch_iterator() {
    let mut rt = runtime();
    let err = load(&mut rt, "Words", "local words = string.gmatch('a b c', '%a+')\nreturn function() return words() end").unwrap_err();
    assert!(err.message.starts_with("procedure Words: the module keeps a string.gmatch iterator"), "{}", err.message);
    // Made inside the body, it is per call.
    load(
        &mut rt,
        "Words",
        "local TEXT = 'a b c'\nreturn function()\n  local n = 0\n  for w in TEXT:gmatch('%a+') do n = n + 1 end\n  return n\nend",
    )
    .unwrap();
    assert_eq!(call(&mut rt, "Words", &[], &mut FakeHost::modified()).unwrap().tables, vec![ResultTable::scalar("", 3)]);
}

/// The naive way to build a string: `n` appends copy n²/2 bytes, work the instruction count
/// does not see (one instruction per append).
const GROW: &str = "return function(n, catch)\n  local function grow()\n    local s = ''\n    for i = 1, n do s = s .. 'x' end\n    \
                    return #s\n  end\n  if catch then local ok, e = pcall(grow) return 0 end\n  return grow()\nend";
/// Appends that copy half a terabyte: a minute or more of work, far within the default budget.
const GROW_FOREVER: i64 = 1_000_000;
/// Appends that take about a second (in a debug build here), past the limits used below.
const GROW_SLOW: i64 = 120_000;

/// A call context whose time limit is `ms` from now.
fn ctx_within(ms: u64) -> CallContext {
    CallContext { time_limit: TimeLimit::after(std::time::Duration::from_millis(ms)), ..ctx(1) }
}

fn assert_timed_out(err: &Error, procedure: &str, timeout: &str) {
    assert_eq!(err.kind, ErrorKind::Graceful, "{}", err.message);
    assert!(is_procedure_timeout(err), "{}", err.message);
    assert!(err.message.contains("because it exceeded the query timeout period."), "{}", err.message);
    assert!(err.message.contains(&format!("Procedure {procedure} may run {timeout} s per call")), "{}", err.message);
}

/// A call past its time limit fails with the query timeout's error, for good: when its
/// watched run reaches the limit first, when the counted run it reran in does, and in a
/// runtime that counts every call; `pcall` cannot keep it going. The runtime keeps working,
/// with its budget, afterwards.
#[test]
fn a_call_past_its_time_limit_fails_and_does_not_run_again() {
    finishes("the time limit checks", || {
        // Its watch limit, 200 s, is far past the time limit: the watched run meets the latter.
        let watched_long = LuaConfig { instruction_budget: 1_000_000_000_000, restartable: true, ..LuaConfig::default() };
        // The default budget's watch limit is 20 ms: the call runs again counted, and the time
        // limit stops that run (a limit long enough that no pause of this thread reaches it first).
        let rerun = LuaConfig { restartable: true, ..LuaConfig::default() };
        let counted = LuaConfig::default();
        for (what, config, limit_ms, restarts) in
            [("watched", watched_long, 200, 0), ("rerun", rerun, 2000, 1), ("counted", counted, 200, 0)]
        {
            let mut rt = LuaRuntime::new(config).unwrap();
            load(&mut rt, "Grow", GROW).unwrap();
            load(&mut rt, "Spin", "return function() while true do end end").unwrap();
            for catch in [false, true] {
                let mut host = FakeHost::modified();
                let params = [Value::Int(GROW_FOREVER), Value::Bool(catch)];
                let err = rt.call("Grow", &params, &ctx_within(limit_ms), &mut host).unwrap_err();
                assert_timed_out(&err, "Grow", &format!("{:.3}", limit_ms as f64 / 1000.0));
                assert_eq!(host.restarts, restarts, "{what}, catch {catch}");
            }
            // Short calls still run once each, and the budget still stops a runaway loop (the
            // first runtime's budget would take hours).
            let mut host = FakeHost::modified();
            let out = rt.call("Grow", &[Value::Int(10), Value::Bool(false)], &ctx_within(60_000), &mut host).unwrap();
            assert_eq!((out.tables, host.restarts), (vec![ResultTable::scalar("", 10)], 0), "{what}");
            if what == "watched" {
                continue;
            }
            let err = rt.call("Spin", &[], &ctx(2), &mut FakeHost::modified()).unwrap_err();
            assert!(err.message.starts_with("procedure Spin exceeded its instruction budget"), "{what}: {}", err.message);
        }
    });
}

/// Without a time limit (a transaction replayed from the log) the same work completes: the
/// watched run stops at its watch limit and the counted run goes on to the end.
#[test]
fn without_a_time_limit_slow_work_completes() {
    finishes("the slow call", || {
        let mut rt = LuaRuntime::new(LuaConfig { restartable: true, ..LuaConfig::default() }).unwrap();
        load(&mut rt, "Grow", GROW).unwrap();
        let mut host = FakeHost::modified();
        let out = rt.call("Grow", &[Value::Int(GROW_SLOW), Value::Bool(false)], &ctx(1), &mut host).unwrap();
        assert_eq!(out.tables, vec![ResultTable::scalar("", GROW_SLOW)]);
        assert_eq!((host.restarts, rt.reruns()), (1, 1));
    });
}

/// Library work, where no hook runs, stops at the time limit too: a pathological pattern
/// that its (huge) budget would let run for hours.
#[test]
fn library_work_stops_at_the_time_limit() {
    finishes("the pattern", || {
        let src = "return function(catch)\n  local s = string.rep('a', 3000)\n  if catch then return pcall(string.find, s, '(.-)(.-)(.-)(.-)x') end\n  return s:find('(.-)(.-)(.-)(.-)x')\nend";
        for restartable in [false, true] {
            let config = LuaConfig { instruction_budget: 1_000_000_000_000, restartable, ..LuaConfig::default() };
            let mut rt = LuaRuntime::new(config).unwrap();
            load(&mut rt, "Slow", src).unwrap();
            for catch in [false, true] {
                let mut host = FakeHost::modified();
                let err = rt.call("Slow", &[Value::Bool(catch)], &ctx_within(200), &mut host).unwrap_err();
                assert_timed_out(&err, "Slow", "0.200");
                assert_eq!(host.restarts, 0);
            }
        }
    });
}

/// A module load with a time limit (a client's DDL) stops there; without one (a catalog
/// rebuilt at start-up) the same slow top level loads.
#[test]
fn a_module_load_stops_at_its_time_limit() {
    finishes("the slow loads", || {
        for restartable in [false, true] {
            let mut rt = LuaRuntime::new(LuaConfig { restartable, ..LuaConfig::default() }).unwrap();
            let slow = |n: i64| format!("local s = ''\nfor i = 1, {n} do s = s .. 'x' end\nlocal N = #s\nreturn function() return N end");
            rt.set_load_time_limit(Some(std::time::Duration::from_millis(200)));
            let err = load(&mut rt, "Big", &slow(GROW_FOREVER)).unwrap_err();
            assert_eq!(err.kind, ErrorKind::Graceful);
            assert!(err.message.starts_with("procedure Big: its module's top level was stopped after"), "{}", err.message);
            assert!(err.message.contains("a module may run 0.200 s when it loads"), "{}", err.message);
            assert!(!rt.has("Big"));
            // Without the limit, the budget still holds for loads after it.
            rt.set_load_time_limit(None);
            let err = load(&mut rt, "Hang", "while true do end").unwrap_err();
            assert!(err.message.starts_with("procedure Hang exceeded its instruction budget"), "{}", err.message);
            load(&mut rt, "Big", &slow(GROW_SLOW)).unwrap();
            let out = rt.call("Big", &[], &ctx(1), &mut FakeHost::modified()).unwrap();
            assert_eq!(out.tables, vec![ResultTable::scalar("", GROW_SLOW)]);
        }
    });
}
