//! Engine configuration: how many sites, where data lives, procedure limits, durability.

use std::path::PathBuf;

use crate::cmdlog::Durability;
use crate::memory::MemoryLimit;

/// Default instructions a Lua procedure may run per call before it is stopped.
pub const LUA_INSTRUCTION_BUDGET_DEFAULT: u64 = 100_000_000;
/// VoltDB's default command log flush interval in asynchronous mode.
pub const FLUSH_MS_DEFAULT: u64 = 200;
/// Complete snapshots kept on disk by default.
pub const SNAPSHOTS_KEEP_DEFAULT: usize = 2;

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
    /// The command log: off, async (flush every N ms) or sync (answer after fdatasync).
    pub durability: Durability,
    /// Take a snapshot this often (seconds); None for only on demand.
    pub snapshot_interval_s: Option<u64>,
    /// Complete snapshots to keep; older ones are deleted.
    pub snapshots_keep: usize,
    /// Above this much resident memory writes are refused (see `memory.rs`).
    pub memory_limit: MemoryLimit,
    /// Hands memory the allocator holds freed back to the system; sites call it when they
    /// idle while memory is over the limit, and once they have loaded a snapshot (the
    /// binary sets it for its allocator).
    pub release_memory: Option<fn()>,
    /// How long a query may run before it is stopped (None: no limit); a call may ask for
    /// less. Replay of the command log never has one.
    pub query_timeout: Option<std::time::Duration>,
    /// Export targets (`[[export.targets]]`) and the counters of delivery.
    pub export: std::sync::Arc<crate::export::ExportHub>,
}

/// VoltDB's default query timeout.
pub const QUERY_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(10);

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
            durability: Durability::Sync,
            snapshot_interval_s: None,
            snapshots_keep: SNAPSHOTS_KEEP_DEFAULT,
            memory_limit: MemoryLimit::default(),
            release_memory: None,
            query_timeout: Some(QUERY_TIMEOUT_DEFAULT),
            export: Default::default(),
        }
    }
}
