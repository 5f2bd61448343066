//! Engine configuration: how many sites, where data lives, procedure limits.

use std::path::PathBuf;

/// Default instructions a Lua procedure may run per call before it is stopped.
pub const LUA_INSTRUCTION_BUDGET_DEFAULT: u64 = 100_000_000;
/// Default memory a Lua state may use.
pub const LUA_MEMORY_LIMIT_BYTES_DEFAULT: usize = 256 * 1024 * 1024;

#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Number of partition sites (one thread each).
    pub sites: u32,
    /// Catalog, export files and (later) logs and snapshots live here.
    pub data_dir: PathBuf,
    /// Where `FROM CLASS a.b.Name` finds `Name.lua`, and relative `FROM FILE` paths resolve.
    pub procedure_dir: PathBuf,
    pub lua_instruction_budget: u64,
    pub lua_memory_limit_bytes: usize,
}

impl EngineConfig {
    /// Defaults for a data directory: one site per core, procedures under `<data>/procedures`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        let data_dir = data_dir.into();
        let cores = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
        EngineConfig {
            sites: cores,
            procedure_dir: data_dir.join("procedures"),
            data_dir,
            lua_instruction_budget: LUA_INSTRUCTION_BUDGET_DEFAULT,
            lua_memory_limit_bytes: LUA_MEMORY_LIMIT_BYTES_DEFAULT,
        }
    }
}
