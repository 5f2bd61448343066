//! The Rust half of freezing a loaded module (the Lua half is `freeze` in sandbox.lua): the
//! privileged helpers the sandbox uses to walk and rewrite what a module keeps, and how
//! Rust code that reads Lua tables finds the contents of a frozen one.
//!
//! A frozen module-level table is an empty proxy whose metatable holds, under a private
//! light-userdata key, the table with the contents. Lua code reads through the proxy's
//! metamethods; Rust code that reads tables raw (parameters, returned arrays,
//! `result_table`, `batch`) asks [`readable`] or [`open_at`] first.

use std::ffi::{c_int, c_void};
use std::rc::Rc;

use mlua::{ffi, LightUserData, Lua, LuaString, Table};

use crate::bytecode;
use crate::shared::{Fatal, Shared};

/// Its address is the private key (one static serves every Lua state).
static FROZEN_KEY: u8 = 0;

fn frozen_key() -> *mut c_void {
    std::ptr::addr_of!(FROZEN_KEY).cast_mut().cast()
}

/// The table holding `t`'s contents: `t` itself unless it is a frozen proxy.
pub(crate) fn readable(t: Table) -> Table {
    match t.metatable().and_then(|mt| mt.raw_get::<Option<Table>>(LightUserData(frozen_key())).ok().flatten()) {
        Some(real) => real,
        None => t,
    }
}

/// Makes the table at `idx` readable raw: a frozen proxy is replaced in its stack slot by
/// the table holding its contents. False when it has another metatable, which raw reads
/// would not honour. Never raises.
pub(crate) unsafe fn open_at(l: *mut ffi::lua_State, idx: c_int) -> bool {
    let idx = ffi::lua_absindex(l, idx);
    if ffi::lua_getmetatable(l, idx) == 0 {
        return true;
    }
    if ffi::lua_rawgetp(l, -1, frozen_key()) == ffi::LUA_TTABLE {
        ffi::lua_replace(l, idx);
        ffi::lua_pop(l, 1);
        return true;
    }
    ffi::lua_pop(l, 2);
    false
}

/// The table of privileged helpers sandbox.lua receives as `raw`.
pub(crate) fn helpers(lua: &Lua, shared: &Rc<Shared>) -> mlua::Result<Table> {
    let raw = lua.create_table()?;
    // SAFETY: C functions that raise only through luaL_check* while owning nothing.
    unsafe {
        raw.raw_set("upvalue", lua.create_c_function(upvalue)?)?;
        raw.raw_set("set_upvalue", lua.create_c_function(set_upvalue)?)?;
        raw.raw_set("function_kind", lua.create_c_function(function_kind)?)?;
        raw.raw_set("getmetatable", lua.create_c_function(raw_getmetatable)?)?;
        raw.raw_set("setmetatable", lua.create_c_function(raw_setmetatable)?)?;
    }
    raw.raw_set("frozen_key", LightUserData(frozen_key()))?;
    raw.raw_set(
        "upvalue_write",
        lua.create_function(|_, dump: LuaString| match bytecode::first_upvalue_write(&dump.as_bytes()) {
            Ok(Some(w)) => Ok((Some(w.at), Some(w.name))),
            Ok(None) => Ok((None, None)),
            Err(e) => Err(mlua::Error::RuntimeError(format!("cannot read a compiled function: {e}"))),
        })?,
    )?;
    let s = shared.clone();
    raw.raw_set(
        "charge_bytes",
        lua.create_function(move |_, n: i64| {
            if s.charge(crate::meter::units_for_bytes(n.max(0) as u64)) {
                return Ok(());
            }
            s.set_fatal(Fatal::Budget);
            Err(mlua::Error::RuntimeError("instruction budget exceeded".into()))
        })?,
    )?;
    Ok(raw)
}

/// `upvalue(f, i)`: the name and value of upvalue `i` of `f`, or nothing past the last.
unsafe extern "C-unwind" fn upvalue(l: *mut ffi::lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TFUNCTION);
    let i = ffi::luaL_checkinteger(l, 2);
    let Ok(i) = c_int::try_from(i) else {
        return 0;
    };
    let name = ffi::lua_getupvalue(l, 1, i);
    if name.is_null() {
        return 0;
    }
    ffi::lua_pushstring(l, name);
    ffi::lua_insert(l, -2);
    2
}

/// `set_upvalue(f, i, v)`: sets upvalue `i` of `f` (shared with every closure sharing it).
unsafe extern "C-unwind" fn set_upvalue(l: *mut ffi::lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TFUNCTION);
    let i = ffi::luaL_checkinteger(l, 2);
    ffi::lua_settop(l, 3);
    if let Ok(i) = c_int::try_from(i) {
        ffi::lua_setupvalue(l, 1, i);
    }
    0
}

/// `function_kind(f)`: "lua", "c", or "iterator" for a `string.gmatch` iterator (a C
/// function whose state changes as it is called).
unsafe extern "C-unwind" fn function_kind(l: *mut ffi::lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TFUNCTION);
    let kind = if ffi::lua_iscfunction(l, 1) == 0 {
        c"lua"
    } else if crate::pattern::is_gmatch_iterator(ffi::lua_tocfunction(l, 1)) {
        c"iterator"
    } else {
        c"c"
    };
    ffi::lua_pushstring(l, kind.as_ptr());
    1
}

/// `getmetatable(v)`, ignoring `__metatable`.
unsafe extern "C-unwind" fn raw_getmetatable(l: *mut ffi::lua_State) -> c_int {
    if ffi::lua_getmetatable(l, 1) == 0 {
        ffi::lua_pushnil(l);
    }
    1
}

/// `setmetatable(t, mt)`, ignoring `__metatable`. The sandbox never passes a `__gc` field.
unsafe extern "C-unwind" fn raw_setmetatable(l: *mut ffi::lua_State) -> c_int {
    ffi::luaL_checktype(l, 1, ffi::LUA_TTABLE);
    ffi::lua_settop(l, 2);
    ffi::lua_setmetatable(l, 1);
    0
}
