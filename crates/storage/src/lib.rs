//! The storage of one partition: tables, indexes, undo, materialized views and stream
//! buffers. A partition is touched only by its own site thread, so nothing here locks.
//!
//! - `table`: row slots (each a `packed` row, in fixed-size chunks: `slots`) with a free
//!   list, and the table's indexes.
//! - `index` / `key`: every index keeps a B-tree of (key, RowId) for order and ranges;
//!   unique indexes add a hash table of RowIds for O(1) point lookups and checks.
//! - `computed`: the hidden values of expression index keys, kept after a row's columns.
//! - `validate`: coercion, NOT NULL and length checks on written rows.
//! - `view`: how a source row changes a materialized view.
//! - `partition`: writes, transactions and the undo log; `schema`: `apply_schema`.
//! - `snapshot`: copy-on-write scans for consistent snapshots; `state_hash`: a hash of
//!   every row, to prove that replay is deterministic.

mod bulk;
mod computed;
mod id_map;
mod index;
mod key;
mod ordered;
mod packed;
mod partition;
mod row_hash;
mod schema;
mod slots;
mod snapshot;
mod state_hash;
mod table;
mod validate;
mod view;

pub use bulk::BulkLoad;
pub use index::Lookup;
pub use partition::{ExportRow, Partition};
pub use table::{Table, TABLE_ROWS_MAX};

/// A row's slot number within one table of one partition.
pub type RowId = u32;

#[cfg(test)]
mod tests;
