//! Lua's pattern functions (string.find, match, gmatch, gsub), metered (to come).
use mlua::ffi;

/// Whether `f` is the iterator `string.gmatch` returns (a C function with state).
pub(crate) fn is_gmatch_iterator(_f: Option<ffi::lua_CFunction>) -> bool {
    false
}
