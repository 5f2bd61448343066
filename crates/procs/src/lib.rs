//! Lockstep's stored-procedure runtime: Lua 5.4 procedures in a sandbox, run against a host
//! that executes their planned SQL statements. It knows neither SQL nor storage.
//!
//! See README.md for the Lua API procedures see. The engine implements [`TxnHost`] and owns
//! one [`LuaRuntime`] per site thread.

mod bytecode;
mod compound;
mod convert;
mod errors;
mod freeze;
mod libs;
mod meter;
mod output;
mod pattern;
mod raw_result;
mod raw_stmt;
mod result_obj;
mod rng;
mod runtime;
mod sandbox;
mod shared;
mod stmt;
mod watch;

#[cfg(test)]
mod differential;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use lockstep_core::{DataType, Result, ResultTable, Value};

pub use compound::{is_compound, CallAnswer, CompoundRuntime, Failure, IssuedCall, Step, COMPOUND_CALLS_MAX, COMPOUND_DECLARATION};
pub use runtime::{LuaRuntime, Proc as LuaProc};
pub use stmt::{each_row_of, modified_count};

/// What `prepare` tells the runtime about a statement it planned at load time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StmtInfo {
    /// The engine's handle for the planned statement, passed back to [`TxnHost::execute`].
    pub id: usize,
    /// One entry per `?` parameter; `None` when the planner could not infer its type.
    pub param_types: Vec<Option<DataType>>,
}

/// Implemented by the engine for the duration of one call: runs the procedure's statements
/// inside the caller's transaction.
pub trait TxnHost {
    /// Runs one planned statement with its parameters.
    fn execute(&mut self, stmt: usize, params: Vec<Value>) -> Result<ResultTable>;
    /// Runs one planned statement and hands the rows `execute` would return to `row`, one
    /// at a time (false stops); returns what `exec` returns ([`modified_count`]). A host
    /// that can run a statement without building its result table does so here: this is
    /// how `stmt:values()` and `stmt:exec()` run.
    fn execute_each(&mut self, stmt: usize, params: &[Value], row: &mut dyn FnMut(&[Value]) -> Result<bool>) -> Result<i64> {
        each_row_of(&self.execute(stmt, params.to_vec())?, row)
    }
    /// Runs several statements as one batch (one round trip in an MP transaction).
    fn execute_batch(&mut self, calls: Vec<(usize, Vec<Value>)>) -> Result<Vec<ResultTable>>;
    /// Undoes everything the call did so far, so that it can run again from the start.
    /// Called only by a runtime whose config is `restartable`.
    fn restart(&mut self) -> Result<()>;
}

/// The transaction facts a procedure sees as `ctx`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallContext {
    pub txn_id: i64,
    /// The transaction's timestamp in microseconds since the Unix epoch (never the clock).
    pub timestamp_micros: i64,
    /// The partition the call runs on; `None` for a multi-partition call.
    pub partition: Option<u32>,
    /// When the call must have finished (the query timeout of a client's call); past it
    /// the call stops for good and fails. `None`, no limit: a transaction replayed from
    /// the command log completed once and must complete again, however slow the machine.
    pub time_limit: Option<TimeLimit>,
}

/// A wall-clock limit on a call: the clock stops it, so its failure is not deterministic,
/// which is acceptable for a call that rolls back and is not logged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeLimit {
    /// When the call (or its transaction) began; the time a stopped call reports is counted
    /// from here.
    pub started: Instant,
    /// When it must stop.
    pub at: Instant,
}

impl TimeLimit {
    /// A limit `timeout` from now; `None` when that is too far to represent (no limit).
    pub fn after(timeout: Duration) -> Option<TimeLimit> {
        let started = Instant::now();
        started.checked_add(timeout).map(|at| TimeLimit { started, at })
    }

    /// How long the call may run in all.
    pub fn timeout(&self) -> Duration {
        self.at.saturating_duration_since(self.started)
    }
}

/// The start of the error a call stopped by its time limit fails with (VoltDB's words for
/// its query timeout).
pub const PROCEDURE_TIMEOUT_MESSAGE_START: &str = "A procedure call was terminated after";

/// Whether `e` is the error of a call stopped by its time limit.
pub fn is_procedure_timeout(e: &lockstep_core::Error) -> bool {
    e.message.starts_with(PROCEDURE_TIMEOUT_MESSAGE_START)
}

/// How long a module's top level may run while it loads for a live DDL statement
/// ([`LuaRuntime::set_load_time_limit`]): generous, since a load happens once per DDL, but
/// bounded, so that one `CREATE PROCEDURE` cannot hold the coordinator for minutes.
pub const MODULE_LOAD_TIME_LIMIT_MS: u64 = 10_000;

/// VoltDB's "no application status set" value.
pub const APP_STATUS_UNSET: i8 = -128;

/// What a successful call returns to the client.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcOutput {
    pub tables: Vec<ResultTable>,
    /// Set by `set_app_status`; [`APP_STATUS_UNSET`] otherwise.
    pub app_status: i8,
    pub app_status_string: Option<String>,
}

impl Default for ProcOutput {
    fn default() -> Self {
        ProcOutput { tables: Vec::new(), app_status: APP_STATUS_UNSET, app_status_string: None }
    }
}

/// Limits applied to every procedure of one runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LuaConfig {
    /// VM instructions one call (or one module load) may execute before it is stopped.
    pub instruction_budget: u64,
    /// Heap the whole Lua state may use, for all procedures together; 0 means no limit.
    pub memory_limit_bytes: usize,
    /// The host can undo a call (`TxnHost::restart`). Calls then run watched: timed, not
    /// counted, and run again counted only when they run too long (see `watch.rs`).
    pub restartable: bool,
    /// Heap one procedure's module may keep once loaded (its constants, statements and
    /// functions, measured after a full collection), so that one procedure cannot take the
    /// heap its site's other procedures share; 0 means no limit.
    pub procedure_memory_limit_bytes: usize,
}

/// Default per-call instruction budget: roughly a second of pure Lua on a modern core.
pub const INSTRUCTION_BUDGET_DEFAULT: u64 = 100_000_000;
/// Default heap limit of one runtime (all loaded procedures and their garbage).
pub const MEMORY_LIMIT_DEFAULT_BYTES: usize = 256 * 1024 * 1024;
/// Default heap one procedure's module may keep: an eighth of the default heap limit, room
/// for large constant tables.
pub const PROCEDURE_MEMORY_LIMIT_DEFAULT_BYTES: usize = 32 * 1024 * 1024;

impl Default for LuaConfig {
    fn default() -> Self {
        LuaConfig {
            instruction_budget: INSTRUCTION_BUDGET_DEFAULT,
            memory_limit_bytes: MEMORY_LIMIT_DEFAULT_BYTES,
            restartable: false,
            procedure_memory_limit_bytes: PROCEDURE_MEMORY_LIMIT_DEFAULT_BYTES,
        }
    }
}
