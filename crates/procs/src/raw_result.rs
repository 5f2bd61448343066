//! `result_table(names, rows)` as a C function that Lua calls directly.
//!
//! Charging's `ReportQuotaUsage` builds three small result tables on every call, and the
//! mlua callback spent about 7,000 instructions on each (callgrind): every name, row and cell
//! read through `Table::raw_get` makes a reference to its Lua value. Here the two tables
//! are read with the Lua C API, which makes none, and the result object is made as
//! `stmt:query` makes it (`result_obj`). Anything unusual (an argument that is not a table,
//! a bad name or cell, a cell of another type than its column's) goes to the Rust
//! `result_table`, which gives the usual errors.
//!
//! The rules of `raw_stmt.rs` hold here too: the parse calls no Lua function that can raise,
//! and the frames that raise own nothing.

use std::ffi::{c_int, CStr};

use lockstep_core::{DataType, ResultTable, Value};
use mlua::ffi;

use crate::freeze::open_at;
use crate::raw_stmt::{finish, Next};
use crate::result_obj::{self, Held};
use crate::shared::Fatal;
use crate::stmt::{built_columns, RESULT_COLUMNS_MAX};

/// Registry name of the Rust `result_table` (the slow path).
pub(crate) const SLOW: &str = "lockstep.result_table";
const SLOW_C: &CStr = c"lockstep.result_table";

/// A table read off the Lua stack. The names point into Lua strings held by the names
/// table, argument 1, which stays on the stack while they are used.
struct Parsed<'a> {
    names: Vec<&'a str>,
    types: Vec<DataType>,
    rows: Vec<Vec<Value>>,
}

/// `result_table(names, rows)`.
pub(crate) unsafe extern "C-unwind" fn result_table(l: *mut ffi::lua_State) -> c_int {
    let next = std::panic::catch_unwind(|| make(l)).unwrap_or(Next::Slow);
    finish(l, next, SLOW_C)
}

/// Parses the arguments and pushes the result object; never raises.
unsafe fn make(l: *mut ffi::lua_State) -> Next {
    let Some(shared) = result_obj::shared(l).filter(|s| s.in_call()) else {
        return Next::Slow;
    };
    let Some(parsed) = parse(l) else {
        return Next::Slow;
    };
    let mut table = ResultTable::new(built_columns(shared, &parsed.names, &parsed.types));
    table.rows = parsed.rows;
    let mut slot = Some(Held::new(table, shared));
    match result_obj::push_made(l, &mut slot) {
        ffi::LUA_OK => Next::Return(1),
        _ => {
            ffi::lua_pop(l, 1);
            shared.set_fatal(Fatal::Memory);
            Next::Raise
        }
    }
}

/// Reads `names` and `rows` (arguments 1 and 2), or None for anything the slow path must
/// look at. Never raises: it only reads, and pops what it pushes.
unsafe fn parse<'a>(l: *mut ffi::lua_State) -> Option<Parsed<'a>> {
    if ffi::lua_gettop(l) != 2 || ffi::lua_type(l, 1) != ffi::LUA_TTABLE || ffi::lua_type(l, 2) != ffi::LUA_TTABLE {
        return None;
    }
    // A frozen module-level table is read through its contents; another table with a
    // metatable goes to the slow path.
    if !open_at(l, 1) || !open_at(l, 2) {
        return None;
    }
    let ncols = ffi::lua_rawlen(l, 1);
    if ncols == 0 || ncols > RESULT_COLUMNS_MAX {
        return None;
    }
    let mut names = Vec::with_capacity(ncols);
    for i in 1..=ncols {
        let name = if ffi::lua_rawgeti(l, 1, i as ffi::lua_Integer) == ffi::LUA_TSTRING { text(l, -1) } else { None };
        ffi::lua_pop(l, 1);
        names.push(name?);
    }
    let nrows = ffi::lua_rawlen(l, 2);
    let mut rows = Vec::with_capacity(nrows);
    let mut types: Vec<Option<DataType>> = vec![None; ncols];
    for r in 1..=nrows {
        if ffi::lua_rawgeti(l, 2, r as ffi::lua_Integer) != ffi::LUA_TTABLE || !open_at(l, -1) {
            ffi::lua_pop(l, 1);
            return None;
        }
        let mut row = Vec::with_capacity(ncols);
        for (c, ty) in types.iter_mut().enumerate() {
            ffi::lua_rawgeti(l, -1, c as ffi::lua_Integer + 1);
            let cell = cell(l);
            ffi::lua_pop(l, 1);
            let (v, cell_ty) = cell?;
            // A cell of another type than its column's (the type of its first non-nil
            // cell) needs a conversion, and so does text that converts ("\N" is NULL):
            // the slow path does those.
            let converts = match (*ty, cell_ty) {
                (Some(t), Some(u)) => t != u || !v.coerces_to_itself(u),
                (None, Some(u)) => !v.coerces_to_itself(u),
                (_, None) => false,
            };
            if converts {
                ffi::lua_pop(l, 1);
                return None;
            }
            if ty.is_none() {
                *ty = cell_ty;
            }
            row.push(v);
        }
        ffi::lua_pop(l, 1);
        rows.push(row);
    }
    let types = types.into_iter().map(|t| t.unwrap_or(DataType::Varchar)).collect();
    Some(Parsed { names, types, rows })
}

/// The value on top of the stack as a cell with its type, as `convert::to_cell` makes it.
unsafe fn cell(l: *mut ffi::lua_State) -> Option<(Value, Option<DataType>)> {
    Some(match ffi::lua_type(l, -1) {
        ffi::LUA_TNIL => (Value::Null, None),
        ffi::LUA_TNUMBER if ffi::lua_isinteger(l, -1) != 0 => {
            (Value::Int(ffi::lua_tointegerx(l, -1, std::ptr::null_mut())), Some(DataType::BigInt))
        }
        ffi::LUA_TNUMBER => (Value::Float(ffi::lua_tonumberx(l, -1, std::ptr::null_mut())), Some(DataType::Float)),
        ffi::LUA_TBOOLEAN => (Value::Int((ffi::lua_toboolean(l, -1) != 0) as i64), Some(DataType::TinyInt)),
        ffi::LUA_TSTRING => (Value::Str(text(l, -1)?.into()), Some(DataType::Varchar)),
        _ => return None,
    })
}

/// The Lua string at `idx` as UTF-8 text. The slice lives as long as the string does.
unsafe fn text<'a>(l: *mut ffi::lua_State, idx: c_int) -> Option<&'a str> {
    let mut len = 0usize;
    // On a string (not a number) this neither converts nor allocates.
    let p = ffi::lua_tolstring(l, idx, &mut len);
    if p.is_null() {
        return None;
    }
    std::str::from_utf8(std::slice::from_raw_parts(p.cast::<u8>(), len)).ok()
}
