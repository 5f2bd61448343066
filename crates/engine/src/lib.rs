//! The engine: partition sites (one thread each, serial execution, no locks), the
//! multi-partition coordinator, routing of calls, system procedures, the catalog store and
//! export of stream rows.

pub mod answer_batch;
pub mod auth;
pub mod cluster;
pub mod cmdlog;
pub mod compound;
pub mod config;
pub mod datadir;
pub mod ddl;
pub mod durable;
pub mod engine;
pub mod export;
pub mod memory;
pub mod migrate;
pub mod mp;
pub mod mp_cluster;
pub mod mp_ledger;
mod mp_read;
pub mod name_cache;
pub mod outcome;
pub mod recovery;
pub mod registry;
pub mod site;
mod site_queue;
pub mod snapshot;
pub mod stats;
pub mod store;
pub mod sysproc_table;
pub mod sysprocs;
pub mod tasks;
pub mod ttl;
pub mod txn_id;

pub use auth::Principal;
pub use config::EngineConfig;
pub use engine::{Call, Engine};
pub use outcome::{Outcome, Reply};
