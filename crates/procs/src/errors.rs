//! Turning Lua failures into Lockstep errors that name the procedure, the file and the line.

use std::time::Duration;

use lockstep_core::Error;
use mlua::Lua;

use crate::shared::Fatal;
use crate::PROCEDURE_TIMEOUT_MESSAGE_START;

/// How many wrapped causes of an mlua error we unwrap before giving up (they nest one level
/// per Rust callback between the error and the caller, so a handful is plenty).
const ERROR_CAUSE_DEPTH_MAX: usize = 16;

/// How many C functions `caller_location` looks past (`raw_stmt`'s `first` calling its slow
/// path is one).
const C_FRAMES_SKIPPED_MAX: usize = 2;

/// "path:line" of the Lua code that called the running Rust callback, directly or through
/// a C function (a statement's `first` hands unusual calls to its Rust method).
pub(crate) fn caller_location(lua: &Lua) -> Option<String> {
    (1..=1 + C_FRAMES_SKIPPED_MAX).find_map(|level| {
        lua.inspect_stack(level, |d| {
            let line = d.current_line()?;
            let src = d.source().short_src?.into_owned();
            Some(format!("{src}:{line}"))
        })
        .flatten()
    })
}

/// A Lua error raised from a Rust callback, prefixed with the caller's location the way
/// Lua's own `error(msg)` would be.
pub(crate) fn located(lua: &Lua, message: impl std::fmt::Display) -> mlua::Error {
    match caller_location(lua) {
        Some(at) => mlua::Error::RuntimeError(format!("{at}: {message}")),
        None => mlua::Error::RuntimeError(message.to_string()),
    }
}

/// A host or planner error, with the Lua location added in front of its message.
pub(crate) fn located_host_error(lua: &Lua, err: Error) -> Error {
    match caller_location(lua) {
        Some(at) => err.context(at),
        None => err,
    }
}

/// The text of an mlua error without mlua's wrappers and stack traceback.
pub(crate) fn lua_message(err: &mlua::Error) -> String {
    let mut err = err;
    for _ in 0..ERROR_CAUSE_DEPTH_MAX {
        match err {
            mlua::Error::CallbackError { cause, .. } => err = cause,
            mlua::Error::WithContext { cause, .. } => err = cause,
            _ => break,
        }
    }
    let text = match err {
        mlua::Error::RuntimeError(m) | mlua::Error::MemoryError(m) => m.clone(),
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        other => other.to_string(),
    };
    match text.find("\nstack traceback:") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The error a failed call or load reports: the fatal error if one was recorded, else the
/// Lua error itself as UNEXPECTED, always naming the procedure.
pub(crate) fn call_error(
    procedure: &str,
    fatal: Option<Fatal>,
    err: &mlua::Error,
    instruction_budget: u64,
    memory_limit_bytes: usize,
) -> Error {
    match fatal {
        Some(Fatal::Abort(message)) => Error::user_abort(message),
        Some(Fatal::Host(e)) => e.context(format_args!("procedure {procedure}")),
        Some(Fatal::Budget) => Error::graceful(format!(
            "procedure {procedure} exceeded its instruction budget of {instruction_budget} \
             instructions (an endless loop, or a pattern or library call doing too much work?)"
        )),
        Some(Fatal::Memory) => memory_error(procedure, memory_limit_bytes),
        None if matches!(err, mlua::Error::MemoryError(_)) => memory_error(procedure, memory_limit_bytes),
        None => Error::unexpected(format!("procedure {procedure}: {}", lua_message(err))),
    }
}

/// The error of a call stopped by its time limit, `after` it began; `timeout` is the limit.
/// It starts with VoltDB's words for its query timeout (a graceful failure: the call rolls
/// back).
pub(crate) fn timeout_error(procedure: &str, after: Duration, timeout: Duration) -> Error {
    Error::graceful(format!(
        "{PROCEDURE_TIMEOUT_MESSAGE_START} {:.3} seconds because it exceeded the query timeout period. Procedure \
         {procedure} may run {:.3} s per call: make it do less work per call (a string grown piece by piece is \
         copied every time: gather the pieces in a table and table.concat them), or raise the query timeout.",
        after.as_secs_f64(),
        timeout.as_secs_f64()
    ))
}

/// The error of a module load stopped by its time limit.
pub(crate) fn load_timeout_error(procedure: &str, after: Duration, timeout: Duration) -> Error {
    Error::graceful(format!(
        "procedure {procedure}: its module's top level was stopped after {:.3} seconds while loading; a module may \
         run {:.3} s when it loads. Do the work inside the body (once per call), or keep large data in the database.",
        after.as_secs_f64(),
        timeout.as_secs_f64()
    ))
}

fn memory_error(procedure: &str, memory_limit_bytes: usize) -> Error {
    Error::graceful(format!(
        "procedure {procedure} ran out of Lua memory (the limit is {memory_limit_bytes} bytes \
         for all procedures of a site)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::arc_with_non_send_sync)] // mlua's own error type holds the Arc
    fn messages_lose_wrappers_and_tracebacks() {
        let inner = mlua::Error::RuntimeError("p.lua:3: boom\nstack traceback:\n  [C]: in ?".into());
        let wrapped = mlua::Error::CallbackError { traceback: "tb".into(), cause: std::sync::Arc::new(inner) };
        assert_eq!(lua_message(&wrapped), "p.lua:3: boom");
    }

    #[test]
    fn fatal_errors_win_over_the_lua_error() {
        let err = mlua::Error::RuntimeError("x".into());
        let e = call_error("Vote", Some(Fatal::Abort("no".into())), &err, 10, 0);
        assert_eq!(e, Error::user_abort("no"));
        let e = call_error("Vote", Some(Fatal::Host(Error::constraint("p.lua:2: dup"))), &err, 10, 0);
        assert_eq!(e, Error::constraint("procedure Vote: p.lua:2: dup"));
        let e = call_error("Vote", None, &err, 10, 0);
        assert_eq!(e, Error::unexpected("procedure Vote: x"));
    }
}
