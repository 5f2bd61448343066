//! What a procedure body returns, turned into the result tables the client receives.
//!
//! nil → none; integer → 1×1 BIGINT; float → 1×1 FLOAT; string → 1×1 VARCHAR; boolean →
//! 1×1 TINYINT (column name ""); a result object → that table; an array of those → several.

use std::ffi::c_int;

use lockstep_core::{DataType, Error, ResultTable, Value};
use mlua::{ffi, AnyUserData, MultiValue, Value as LuaValue};

use crate::result_obj::{self, Taken};
use crate::shared::Shared;

/// Most result tables one call may return.
pub(crate) const RETURN_TABLES_MAX: usize = 10_000;
/// Most values `from_stack` converts; a call returning more goes through `tables`.
const FROM_STACK_VALUES_MAX: c_int = 8;

/// The tables of the `nvals` values on top of the stack, when each is nil, a number, a
/// boolean or a result object returned once: what almost every call returns. None, leaving
/// everything as it was, for anything else, which `tables` then converts (with its errors).
/// Reads the stack without raising and without making mlua values, which cost more than a
/// point read.
pub(crate) unsafe fn from_stack(l: *mut ffi::lua_State, nvals: c_int, shared: &Shared) -> Option<Vec<ResultTable>> {
    // A call with a fatal error fails whatever it returned: its results keep their tables.
    if !(0..=FROM_STACK_VALUES_MAX).contains(&nvals) || shared.is_fatal() {
        return None;
    }
    let at = |i: c_int| i - nvals;
    // Check first: taking a result's table cannot be undone if a later value needs `tables`.
    for i in 0..nvals {
        match ffi::lua_type(l, at(i)) {
            ffi::LUA_TNIL | ffi::LUA_TNUMBER | ffi::LUA_TBOOLEAN => {}
            ffi::LUA_TUSERDATA => {
                let block = ffi::lua_touserdata(l, at(i));
                let again = (0..i).any(|j| ffi::lua_touserdata(l, at(j)) == block);
                if again || !result_obj::is_live(shared, block) {
                    return None;
                }
            }
            _ => return None,
        }
    }
    let mut tables = Vec::with_capacity(nvals as usize);
    for i in 0..nvals {
        let idx = at(i);
        match ffi::lua_type(l, idx) {
            ffi::LUA_TNUMBER if ffi::lua_isinteger(l, idx) != 0 => {
                tables.push(ResultTable::scalar("", ffi::lua_tointegerx(l, idx, std::ptr::null_mut())))
            }
            ffi::LUA_TNUMBER => tables.push(single(DataType::Float, Value::Float(ffi::lua_tonumberx(l, idx, std::ptr::null_mut())))),
            ffi::LUA_TBOOLEAN => tables.push(single(DataType::TinyInt, Value::Int((ffi::lua_toboolean(l, idx) != 0) as i64))),
            ffi::LUA_TUSERDATA => tables.push(result_obj::take_live(ffi::lua_touserdata(l, idx))?),
            _ => {}
        }
    }
    Some(tables)
}

/// Collects the tables, moving result objects out of Lua (no copy) unless one is returned
/// twice.
pub(crate) fn tables(procedure: &str, shared: &Shared, returned: MultiValue) -> Result<Vec<ResultTable>, Error> {
    let mut out = Collector { shared, procedure, tables: Vec::new(), taken: Vec::new() };
    for v in returned {
        match v {
            LuaValue::Table(t) if crate::stmt::is_bound(shared, &t) => {
                return Err(out.bad("a bound statement (run it with batch)"));
            }
            LuaValue::Table(t) => {
                let t = crate::freeze::readable(t);
                let len = t.raw_len();
                if len == 0 && t.clone().pairs::<LuaValue, LuaValue>().next().is_some() {
                    return Err(out.bad("a table that is not an array"));
                }
                if len > RETURN_TABLES_MAX {
                    return Err(out.bad(&format!("{len} tables; the limit is {RETURN_TABLES_MAX}")));
                }
                for i in 1..=len {
                    let item: LuaValue = t.raw_get(i).map_err(|e| out.bad(&e.to_string()))?;
                    if let LuaValue::Table(inner) = &item {
                        if crate::stmt::is_bound(shared, inner) {
                            return Err(out.bad("a bound statement (run it with batch)"));
                        }
                        return Err(out.bad("an array containing a table (arrays of arrays are not results; use result_table)"));
                    }
                    out.add(item)?;
                }
            }
            other => out.add(other)?,
        }
        if out.tables.len() > RETURN_TABLES_MAX {
            return Err(out.bad(&format!("more than {RETURN_TABLES_MAX} tables")));
        }
    }
    Ok(out.tables)
}

struct Collector<'a> {
    shared: &'a Shared,
    procedure: &'a str,
    tables: Vec<ResultTable>,
    /// Result objects already moved out: their address and their index in `tables`.
    taken: Vec<(*const std::ffi::c_void, usize)>,
}

impl Collector<'_> {
    fn bad(&self, what: &str) -> Error {
        Error::unexpected(format!(
            "procedure {} returned {what}; a procedure returns nil, a number, a string, a \
             boolean, a result, or an array of those",
            self.procedure
        ))
    }

    fn add(&mut self, v: LuaValue) -> Result<(), Error> {
        match v {
            LuaValue::Nil => {}
            LuaValue::Integer(i) => self.tables.push(ResultTable::scalar("", i)),
            LuaValue::Number(f) => self.tables.push(single(DataType::Float, Value::Float(f))),
            LuaValue::Boolean(b) => self.tables.push(single(DataType::TinyInt, Value::Int(b as i64))),
            LuaValue::String(s) => match s.to_str() {
                Ok(text) => self.tables.push(single(DataType::Varchar, Value::Str((&*text).into()))),
                Err(_) => return Err(self.bad("a string that is not valid UTF-8 text")),
            },
            LuaValue::UserData(ud) => self.add_result(ud)?,
            other => return Err(self.bad(&describe(&other))),
        }
        Ok(())
    }

    /// Moves the table out of a result object; a result returned twice is copied.
    fn add_result(&mut self, ud: AnyUserData) -> Result<(), Error> {
        let addr = ud.to_pointer();
        if let Some(&(_, i)) = self.taken.iter().find(|(a, _)| *a == addr) {
            let copy = self.tables[i].clone();
            self.tables.push(copy);
            return Ok(());
        }
        match result_obj::take(self.shared, &ud) {
            Taken::Table(table) => {
                self.taken.push((addr, self.tables.len()));
                self.tables.push(table);
                Ok(())
            }
            Taken::Gone => Err(self.bad("a result already returned by an earlier call")),
            Taken::NotAResult => Err(self.bad(&describe(&LuaValue::UserData(ud)))),
        }
    }
}

fn single(ty: DataType, v: Value) -> ResultTable {
    let mut t = ResultTable::with_columns(&[("", ty)]);
    t.push(vec![v]);
    t
}

fn describe(v: &LuaValue) -> String {
    match v {
        LuaValue::UserData(ud) if ud.is::<crate::stmt::StmtRef>() => "a statement (call :query, :first or :exec on it)".to_string(),
        LuaValue::UserData(ud) if ud.is::<crate::stmt::Bound>() => "a bound statement (run it with batch)".to_string(),
        other => format!("a {}", other.type_name()),
    }
}
