//! `stmt:first(...)`, `stmt:values(...)`, `stmt:exec(...)` and `stmt:query(...)` as C
//! functions that Lua calls directly.
//!
//! These run several times in every call of most procedures, and an mlua callback costs
//! more than the statement behind a point lookup: argument conversion into mlua values, a
//! userdata type check, a protected section, and a table built through mlua references.
//! Here the arguments are read straight off the Lua stack and the row is built with the
//! Lua C API. Anything unusual (a table argument, a wrong count, a string that is not
//! UTF-8, a call outside a procedure body) goes to the Rust methods kept in the registry,
//! which give the usual errors; so does a call on something that is not a statement.
//!
//! The rule that keeps this sound: a Lua error unwinds with `longjmp`, which must not cross
//! a Rust frame that owns anything. So `run` calls no Lua function that can raise (rows are
//! built by `push_row` or `push_values` under `lua_pcall`; values that need no Lua memory
//! are pushed directly, which cannot fail), and the frames that do raise
//! (`finish`) hold nothing that needs dropping.

use std::ffi::{c_char, c_int, c_void, CStr};

use lockstep_core::{decimal, DataType, ResultTable, Value};
use mlua::ffi;
use smallvec::SmallVec;

use crate::convert;
use crate::result_obj::{self, Held};
use crate::shared::Fatal;
use crate::stmt::Stmt;

/// Registry names of the Rust `first`, `values`, `exec` and `query`, the slow paths.
pub(crate) const FIRST_SLOW: &str = "lockstep.stmt.first";
pub(crate) const VALUES_SLOW: &str = "lockstep.stmt.values";
pub(crate) const EXEC_SLOW: &str = "lockstep.stmt.exec";
pub(crate) const QUERY_SLOW: &str = "lockstep.stmt.query";
const FIRST_SLOW_C: &CStr = c"lockstep.stmt.first";
const VALUES_SLOW_C: &CStr = c"lockstep.stmt.values";
const EXEC_SLOW_C: &CStr = c"lockstep.stmt.exec";
const QUERY_SLOW_C: &CStr = c"lockstep.stmt.query";

/// Column names paired with their lower-case keys (what row tables are keyed by).
pub(crate) type Keys = [(std::sync::Arc<str>, Box<[u8]>)];

/// What the C function does once `run` has returned (and dropped everything it owned).
pub(crate) enum Next {
    /// Return this many values, already pushed.
    Return(c_int),
    /// Hand the call to the Rust method.
    Slow,
    /// Raise a Lua error; the real error is recorded as the call's fatal error.
    Raise,
}

#[derive(Clone, Copy)]
enum Want {
    FirstRow,
    FirstValues,
    Count,
    Result,
}

/// `stmt:first(...)`: the first row as a table keyed by lower-case column name, or nil.
pub(crate) unsafe extern "C-unwind" fn first(l: *mut ffi::lua_State) -> c_int {
    let next = run_caught(l, Want::FirstRow);
    finish(l, next, FIRST_SLOW_C)
}

/// `stmt:values(...)`: the first row's values, one per column, or nothing.
pub(crate) unsafe extern "C-unwind" fn values(l: *mut ffi::lua_State) -> c_int {
    let next = run_caught(l, Want::FirstValues);
    finish(l, next, VALUES_SLOW_C)
}

/// `stmt:exec(...)`: the modified-tuples count of DML, the row count of anything else.
pub(crate) unsafe extern "C-unwind" fn exec(l: *mut ffi::lua_State) -> c_int {
    let next = run_caught(l, Want::Count);
    finish(l, next, EXEC_SLOW_C)
}

/// `stmt:query(...)`: the result object.
pub(crate) unsafe extern "C-unwind" fn query(l: *mut ffi::lua_State) -> c_int {
    let next = run_caught(l, Want::Result);
    finish(l, next, QUERY_SLOW_C)
}

/// `run`, with a panic (a bug in the engine, say) turned into the call's error: unwinding
/// must not pass through Lua's C frames.
unsafe fn run_caught(l: *mut ffi::lua_State, want: Want) -> Next {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(l, want))) {
        Ok(next) => next,
        Err(panic) => {
            if let Some(stmt) = stmt_of(l) {
                stmt.shared.set_fatal(Fatal::Host(lockstep_core::Error::from_panic(&*panic)));
            }
            Next::Raise
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Calls answered without the Rust methods (tests check the fast path is taken).
    pub(crate) static FAST_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Acts on `next`. Owns nothing, since `lua_call` and `lua_error` may not return.
pub(crate) unsafe fn finish(l: *mut ffi::lua_State, next: Next, slow: &CStr) -> c_int {
    match next {
        Next::Return(n) => {
            #[cfg(test)]
            FAST_CALLS.with(|c| c.set(c.get() + 1));
            n
        }
        Next::Slow => {
            let nargs = ffi::lua_gettop(l);
            ffi::lua_getfield(l, ffi::LUA_REGISTRYINDEX, slow.as_ptr());
            ffi::lua_insert(l, 1);
            ffi::lua_call(l, nargs, ffi::LUA_MULTRET);
            ffi::lua_gettop(l)
        }
        Next::Raise => {
            // The sandbox's pcall re-raises fatal errors, and the runtime reports the fatal
            // error, so the error value itself carries nothing (and a nil needs no memory).
            ffi::lua_pushnil(l);
            ffi::lua_error(l)
        }
    }
}

/// Runs the statement for a C function; never raises a Lua error.
unsafe fn run(l: *mut ffi::lua_State, want: Want) -> Next {
    let Some(stmt) = stmt_of(l) else {
        return Next::Slow;
    };
    let nargs = ffi::lua_gettop(l) - 1;
    if nargs < 0 || nargs as usize != stmt.param_types.len() {
        return Next::Slow;
    }
    let mut params: Row = SmallVec::with_capacity(nargs as usize);
    for (i, ty) in stmt.param_types.iter().enumerate() {
        match arg(l, i as c_int + 2, *ty) {
            Some(v) => params.push(v),
            None => return Next::Slow,
        }
    }
    // `exec` and `values` take the rows one at a time, so no result table is built.
    match want {
        Want::Count => match ran(l, stmt, stmt.shared.with_host(|h| h.execute_each(stmt.id, &params, &mut |_| Ok(true)))) {
            Ok(n) => {
                ffi::lua_pushinteger(l, n);
                Next::Return(1)
            }
            Err(next) => next,
        },
        Want::FirstValues => {
            // The statement runs to its end, as with a table: an error in a later row
            // (a division by zero, say) still fails the call.
            // Filled in place: a row of inline values is too large to move about cheaply.
            let (mut first, mut found) = (Row::new(), false);
            let each = stmt.shared.with_host(|h| {
                h.execute_each(stmt.id, &params, &mut |row| {
                    if !found {
                        found = true;
                        first.extend(row.iter().cloned());
                    }
                    Ok(true)
                })
            });
            if let Err(next) = ran(l, stmt, each) {
                return next;
            }
            if !found {
                return Next::Return(0);
            }
            match push_scalars(l, &first) {
                Some(n) => Next::Return(n),
                None => build(l, stmt, push_values, &first, &[], ffi::LUA_MULTRET),
            }
        }
        // `first` and `query` keep a table (its columns name the row's keys).
        Want::FirstRow | Want::Result => {
            let table = match ran(l, stmt, stmt.shared.with_host(|h| h.execute(stmt.id, params.into_vec()))) {
                Ok(t) => t,
                Err(next) => return next,
            };
            match want {
                Want::FirstRow => push_first_row(l, stmt, &table),
                _ => {
                    let mut slot = Some(Held::new(table, &stmt.shared));
                    match result_obj::push_made(l, &mut slot) {
                        ffi::LUA_OK => Next::Return(1),
                        status => failed_push(l, stmt, status),
                    }
                }
            }
        }
    }
}

/// What the host gave back, or what `run` does instead: raise a failed statement's error
/// (with the calling line) as the call's fatal error, or take the slow path outside a
/// procedure body, where the Rust method gives the error.
unsafe fn ran<T>(l: *mut ffi::lua_State, stmt: &Stmt, r: Option<lockstep_core::Result<T>>) -> Result<T, Next> {
    match r {
        Some(Ok(t)) => Ok(t),
        Some(Err(e)) => {
            let e = match location(l) {
                Some(at) => e.context(at),
                None => e,
            };
            stmt.shared.set_fatal(Fatal::Host(e));
            Err(Next::Raise)
        }
        None => Err(Next::Slow),
    }
}

/// Parameters, or a row's values: on the stack for up to 8.
type Row = SmallVec<[Value; 8]>;

/// The statement behind argument 1, if it is a statement userdata (`sql` sets its user
/// value to a table holding a light pointer to the `Stmt`; nothing else has one). The
/// userdata owns the `Stmt` through an `Rc` and stays alive on the stack during the call.
unsafe fn stmt_of<'a>(l: *mut ffi::lua_State) -> Option<&'a Stmt> {
    if ffi::lua_type(l, 1) != ffi::LUA_TUSERDATA {
        return None;
    }
    let top = ffi::lua_gettop(l);
    let mut found: *const Stmt = std::ptr::null();
    if ffi::lua_getiuservalue(l, 1, 1) == ffi::LUA_TTABLE && ffi::lua_rawgeti(l, -1, 1) == ffi::LUA_TLIGHTUSERDATA {
        found = ffi::lua_touserdata(l, -1).cast_const().cast();
    }
    ffi::lua_settop(l, top);
    found.as_ref()
}

/// Argument `idx` as a parameter of type `ty`, when it is a plain scalar that converts
/// without error (see `convert::to_param`, which the slow path uses).
unsafe fn arg(l: *mut ffi::lua_State, idx: c_int, ty: Option<DataType>) -> Option<Value> {
    Some(match ffi::lua_type(l, idx) {
        ffi::LUA_TNIL => Value::Null,
        ffi::LUA_TBOOLEAN => Value::Bool(ffi::lua_toboolean(l, idx) != 0),
        ffi::LUA_TNUMBER if ffi::lua_isinteger(l, idx) != 0 => Value::Int(ffi::lua_tointegerx(l, idx, std::ptr::null_mut())),
        ffi::LUA_TNUMBER => Value::Float(ffi::lua_tonumberx(l, idx, std::ptr::null_mut())),
        ffi::LUA_TSTRING => {
            let mut len = 0usize;
            // On a string (not a number) this neither converts nor allocates.
            let p = ffi::lua_tolstring(l, idx, &mut len);
            if p.is_null() {
                return None;
            }
            convert::string_param(std::slice::from_raw_parts(p.cast::<u8>(), len), ty)?
        }
        _ => return None,
    })
}

/// "path:line" of the Lua code calling the C function, as `errors::caller_location` gives
/// it for Rust callbacks. Allocates nothing in Lua.
unsafe fn location(l: *mut ffi::lua_State) -> Option<String> {
    let mut ar: ffi::lua_Debug = std::mem::zeroed();
    if ffi::lua_getstack(l, 1, &mut ar) == 0 || ffi::lua_getinfo(l, c"Sl".as_ptr(), &mut ar) == 0 {
        return None;
    }
    if ar.currentline < 0 {
        return None;
    }
    let src = CStr::from_ptr(ar.short_src.as_ptr()).to_string_lossy();
    Some(format!("{src}:{}", ar.currentline))
}

/// What `push_row` and `push_values` read, through a light pointer.
struct RowJob<'a> {
    /// Lower-case column names (`push_row` only).
    keys: &'a Keys,
    row: &'a [Value],
    /// DECIMAL cells as text, by column (empty when the row has none).
    decimals: Vec<Option<String>>,
}

/// Pushes the first row of `table` as a table (or nil).
unsafe fn push_first_row(l: *mut ffi::lua_State, stmt: &Stmt, table: &ResultTable) -> Next {
    let Some(row) = table.rows.first() else {
        ffi::lua_pushnil(l);
        return Next::Return(1);
    };
    let keys = stmt.keys_for(&table.columns);
    build(l, stmt, push_row, row, &keys, 1)
}

/// Pushes `row` with `push` (see `push_protected`); running out of Lua memory becomes the
/// call's fatal error. `nresults` as `lua_pcall` takes it.
unsafe fn build(
    l: *mut ffi::lua_State,
    stmt: &Stmt,
    push: unsafe extern "C-unwind" fn(*mut ffi::lua_State) -> c_int,
    row: &[Value],
    keys: &Keys,
    nresults: c_int,
) -> Next {
    match push_protected(l, push, row, keys, nresults) {
        Ok(n) => Next::Return(n),
        Err(status) => failed_push(l, stmt, status),
    }
}

/// After a push under `lua_pcall` failed with `status`: pops the error and records it as the
/// call's fatal error (running out of memory, usually).
unsafe fn failed_push(l: *mut ffi::lua_State, stmt: &Stmt, status: c_int) -> Next {
    ffi::lua_pop(l, 1);
    stmt.shared.set_fatal(if status == ffi::LUA_ERRMEM {
        Fatal::Memory
    } else {
        Fatal::Host(lockstep_core::Error::unexpected("building a row failed"))
    });
    Next::Raise
}

/// Runs `push` (`push_row` or `push_values`) on `row` under `lua_pcall`: the number of values
/// pushed, or the failed status with the error object on top of the stack.
pub(crate) unsafe fn push_protected(
    l: *mut ffi::lua_State,
    push: unsafe extern "C-unwind" fn(*mut ffi::lua_State) -> c_int,
    row: &[Value],
    keys: &Keys,
    nresults: c_int,
) -> Result<c_int, c_int> {
    // Values that reach Lua as text (DECIMAL, and geography as WKT) are formatted here,
    // outside the protected call, which may not own anything.
    let decimals = if row.iter().any(|v| matches!(v, Value::Decimal(_) | Value::Point(_) | Value::Geography(_))) {
        row.iter()
            .map(|v| match v {
                Value::Decimal(d) => Some(decimal::format(d.get())),
                Value::Point(_) | Value::Geography(_) => Some(v.to_string()),
                _ => None,
            })
            .collect()
    } else {
        Vec::new()
    };
    let job = RowJob { keys, row, decimals };
    let base = ffi::lua_gettop(l);
    ffi::lua_pushcfunction(l, push);
    ffi::lua_pushlightuserdata(l, (&job as *const RowJob).cast_mut().cast::<c_void>());
    match ffi::lua_pcall(l, 1, nresults, 0) {
        ffi::LUA_OK => Ok(ffi::lua_gettop(l) - base),
        status => Err(status),
    }
}

/// Builds the row table of the `RowJob` its light-userdata argument points to. Runs under
/// `lua_pcall` and owns nothing: an allocation failure may `longjmp` out of it.
pub(crate) unsafe extern "C-unwind" fn push_row(l: *mut ffi::lua_State) -> c_int {
    let job = &*ffi::lua_touserdata(l, 1).cast_const().cast::<RowJob>();
    ffi::lua_createtable(l, 0, job.keys.len().min(c_int::MAX as usize) as c_int);
    for (i, ((_, key), v)) in job.keys.iter().zip(job.row).enumerate() {
        ffi::lua_pushlstring(l, key.as_ptr().cast::<c_char>(), key.len());
        push_value(l, job, i, v);
        ffi::lua_rawset(l, -3);
    }
    1
}

/// Pushes the values of the `RowJob` its light-userdata argument points to, as `push_row`
/// does (and under the same rules).
unsafe extern "C-unwind" fn push_values(l: *mut ffi::lua_State) -> c_int {
    let job = &*ffi::lua_touserdata(l, 1).cast_const().cast::<RowJob>();
    let n = job.row.len().min(c_int::MAX as usize - 1) as c_int;
    // Raises a memory error (caught by the pcall) when the stack cannot grow.
    ffi::luaL_checkstack(l, n + 1, std::ptr::null());
    for (i, v) in job.row.iter().enumerate() {
        push_value(l, job, i, v);
    }
    n
}

/// Pushes a row's values straight onto the stack when none needs Lua memory (numbers,
/// booleans, NULLs) and the stack has room: nothing can then fail, so no protected call is
/// needed. None (nothing pushed) otherwise.
unsafe fn push_scalars(l: *mut ffi::lua_State, row: &[Value]) -> Option<c_int> {
    let scalar = |v: &Value| matches!(v, Value::Null | Value::Int(_) | Value::Timestamp(_) | Value::Float(_) | Value::Bool(_));
    let n = c_int::try_from(row.len()).ok()?;
    // lua_checkstack reports a stack that cannot grow; it does not raise.
    if !row.iter().all(scalar) || ffi::lua_checkstack(l, n) == 0 {
        return None;
    }
    for v in row {
        push_scalar(l, v, None);
    }
    Some(n)
}

/// Pushes cell `i` of the job's row, converted as `convert::to_lua` does.
unsafe fn push_value(l: *mut ffi::lua_State, job: &RowJob, i: usize, v: &Value) {
    let text = match v {
        Value::Decimal(_) | Value::Point(_) | Value::Geography(_) => job.decimals.get(i).and_then(Option::as_deref),
        _ => None,
    };
    push_scalar(l, v, text);
}

/// Pushes a value as `convert::scalar_to_lua` converts it (an array is nil), a DECIMAL or a
/// geography value as `decimal_text`, its text (nil when not given). Raises only on running out of memory.
pub(crate) unsafe fn push_scalar(l: *mut ffi::lua_State, v: &Value, decimal_text: Option<&str>) {
    match v {
        Value::Null | Value::Array(_) => ffi::lua_pushnil(l),
        Value::Int(n) | Value::Timestamp(n) => ffi::lua_pushinteger(l, *n),
        Value::Float(f) => ffi::lua_pushnumber(l, *f),
        Value::Bool(b) => ffi::lua_pushboolean(l, *b as c_int),
        Value::Str(s) => push_bytes(l, s.as_bytes()),
        Value::Bytes(b) => push_bytes(l, b),
        Value::Decimal(_) | Value::Point(_) | Value::Geography(_) => match decimal_text {
            Some(text) => push_bytes(l, text.as_bytes()),
            None => ffi::lua_pushnil(l),
        },
    }
}

unsafe fn push_bytes(l: *mut ffi::lua_State, b: &[u8]) {
    ffi::lua_pushlstring(l, b.as_ptr().cast::<c_char>(), b.len());
}
