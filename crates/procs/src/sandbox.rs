//! The Lua sandbox: which library functions procedures get, read-only libraries, one
//! environment per procedure whose global writes fail, and the Rust-side built-ins
//! (`abort`, `set_app_status`, `ctx.random`). The Lua half is in sandbox.lua.

use std::rc::Rc;

use mlua::{Function, Lua, LuaString, StdLib, Table, Value as LuaValue};

use crate::errors::located;
use crate::rng;
use crate::shared::{Fatal, Shared};

/// The message Lua 5.4 gives a memory error, which is all `pcall` sees of one.
const LUA_MEMORY_ERROR_TEXT: &str = "not enough memory";
/// Longest `set_app_status` string.
pub(crate) const APP_STATUS_STRING_MAX_BYTES: usize = 64 * 1024;

/// The libraries loaded into the state at all (the base library always is); the sandbox
/// then exposes only the safe parts of them.
pub(crate) fn libs() -> StdLib {
    StdLib::STRING | StdLib::TABLE | StdLib::MATH | StdLib::UTF8
}

/// What the runtime keeps of the sandbox.
pub(crate) struct Sandbox {
    /// Makes a fresh, empty procedure environment.
    new_env: Function,
    /// Makes what a loaded body can reach read-only (see sandbox.lua).
    freeze: Function,
}

impl Sandbox {
    pub(crate) fn build(lua: &Lua, shared: &Rc<Shared>) -> mlua::Result<Sandbox> {
        let s = shared.clone();
        let is_fatal = lua.create_function(move |_, err: LuaValue| {
            if s.is_fatal() {
                return Ok(true);
            }
            // A memory error inside pcall reaches us only as this text.
            if let LuaValue::String(text) = &err {
                if text.as_bytes().as_ref() == LUA_MEMORY_ERROR_TEXT.as_bytes() {
                    s.set_fatal(Fatal::Memory);
                    return Ok(true);
                }
            }
            Ok(false)
        })?;
        let s = shared.clone();
        let random = lua.create_function(move |lua, (lo, hi): (LuaValue, LuaValue)| ctx_random(lua, &s, lo, hi))?;
        let s = shared.clone();
        let field = lua.create_function(move |_, key: LuaString| {
            let call = s.call.get();
            Ok(match key.as_bytes().as_ref() {
                b"txn_id" => Some(call.txn_id),
                b"timestamp" => Some(call.timestamp_micros),
                b"partition" => call.partition.map(i64::from),
                _ => None,
            })
        })?;
        // The libraries' long-running functions charge the budget (see libs.rs): installed
        // before the sandbox copies the libraries.
        crate::libs::install(lua, shared)?;
        let raw = crate::freeze::helpers(lua, shared)?;
        let (base, new_env, freeze): (Table, Function, Function) =
            lua.load(include_str!("sandbox.lua")).set_name("=sandbox").call((is_fatal, random, field, raw))?;

        let s = shared.clone();
        base.raw_set(
            "abort",
            lua.create_function(move |_, msg: LuaValue| -> mlua::Result<()> {
                let text = match msg {
                    LuaValue::String(s) => s.to_string_lossy(),
                    LuaValue::Integer(i) => i.to_string(),
                    LuaValue::Number(f) => f.to_string(),
                    LuaValue::Nil => "the procedure aborted".to_string(),
                    other => format!("the procedure aborted with a {}", other.type_name()),
                };
                s.set_fatal(Fatal::Abort(text));
                Err(mlua::Error::RuntimeError("abort".into()))
            })?,
        )?;
        let s = shared.clone();
        base.raw_set(
            "set_app_status",
            lua.create_function(move |lua, (code, text): (LuaValue, LuaValue)| set_app_status(lua, &s, code, text))?,
        )?;
        crate::stmt::register(lua, &base, shared)?;
        Ok(Sandbox { new_env, freeze })
    }

    /// A fresh environment for one procedure: reads fall through to the base, writes fail.
    pub(crate) fn new_env(&self) -> mlua::Result<Table> {
        self.new_env.call(())
    }

    /// Freezes the module state `body` reaches: its tables become read-only, and a function
    /// assigning to a module-level variable is an error.
    pub(crate) fn freeze(&self, body: &Function) -> mlua::Result<()> {
        self.freeze.call(body)
    }
}

fn set_app_status(lua: &Lua, shared: &Shared, code: LuaValue, text: LuaValue) -> mlua::Result<()> {
    let code = match code {
        LuaValue::Integer(i) => i8::try_from(i).ok(),
        LuaValue::Number(f) if f.fract() == 0.0 && (-128.0..=127.0).contains(&f) => Some(f as i8),
        _ => None,
    };
    let Some(code) = code else {
        return Err(located(lua, "set_app_status(code, [text]) takes an integer code from -128 to 127"));
    };
    let text = match text {
        LuaValue::Nil => None,
        LuaValue::String(s) => {
            if s.as_bytes().len() > APP_STATUS_STRING_MAX_BYTES {
                return Err(located(lua, format_args!("set_app_status text is longer than {APP_STATUS_STRING_MAX_BYTES} bytes")));
            }
            Some(s.to_str().map_err(|_| located(lua, "set_app_status text is not valid UTF-8"))?.to_string())
        }
        other => return Err(located(lua, format_args!("set_app_status text must be a string, not a {}", other.type_name()))),
    };
    shared.app_status.set(code);
    shared.app_status_string.replace(text);
    Ok(())
}

/// `ctx.random()` → float in [0, 1); `ctx.random(n)` → integer in [1, n];
/// `ctx.random(m, n)` → integer in [m, n].
fn ctx_random(lua: &Lua, shared: &Shared, lo: LuaValue, hi: LuaValue) -> mlua::Result<LuaValue> {
    let mut state = shared.rng_state.get();
    let out = match (lo, hi) {
        (LuaValue::Nil, LuaValue::Nil) => LuaValue::Number(rng::next_f64(&mut state)),
        (LuaValue::Integer(n), LuaValue::Nil) if n >= 1 => LuaValue::Integer(rng::next_in_range(&mut state, 1, n)),
        (LuaValue::Integer(m), LuaValue::Integer(n)) if m <= n => LuaValue::Integer(rng::next_in_range(&mut state, m, n)),
        _ => return Err(located(lua, "ctx.random() takes no arguments, an integer n >= 1, or integers m <= n")),
    };
    shared.rng_state.set(state);
    Ok(out)
}
