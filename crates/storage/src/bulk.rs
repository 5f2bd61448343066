//! Bulk loading of committed rows into empty tables (a snapshot read at start-up): each row
//! is checked as an insert would check it, but indexes are built once for the whole table
//! and views populated once from it, instead of row by row with undo records.
//!
//! Rows go into their table's slots as they are read (`BulkLoad::add`), a chunk at a time,
//! so a large snapshot is never held twice in memory (once as read, once as stored); the
//! tables take their place in the partition, indexed, at `Partition::finish_load`.

use std::collections::BTreeMap;

use lockstep_core::{Error, Result, TableId, Value};

use crate::computed::with_computed;
use crate::partition::Partition;
use crate::table::{Table, TableLoad};
use crate::validate::check_row;
use crate::view::{self, ViewLayout};

/// Rows read so far for a load into empty tables, by table, checked and in their slots.
#[derive(Debug, Default)]
pub struct BulkLoad {
    tables: BTreeMap<TableId, Loading>,
}

/// One table's rows being loaded.
#[derive(Debug)]
struct Loading {
    /// Set for a view of a stream, which is loaded like a table (a snapshot keeps its rows).
    layout: Option<ViewLayout>,
    table: TableLoad,
}

impl BulkLoad {
    /// Checks `rows` of `table` and keeps them for `Partition::finish_load`. The table must
    /// be empty in `part`. On an error (a bad value) the caller gives up on the whole load.
    pub fn add(&mut self, part: &Partition, table: TableId, rows: impl IntoIterator<Item = Vec<Value>>) -> Result<()> {
        let loading = match self.tables.entry(table) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => v.insert(Loading::start(part, table)?),
        };
        for row in rows {
            let def = loading.table.def();
            let row = check_row(def, row)?;
            let row = match &loading.layout {
                Some(l) => view::with_hidden(l, row),
                None => with_computed(def, row)?,
            };
            loading.table.push(&row)?;
        }
        Ok(())
    }
}

impl Loading {
    /// Starts loading into `table` of `part`, which must be empty and writable.
    fn start(part: &Partition, table: TableId) -> Result<Loading> {
        if part.snapshot.is_some() {
            return Err(Error::unexpected("bulk load while a snapshot is being written"));
        }
        let layout = match part.is_view_of_stream(table) {
            true => part.table(table)?.view.clone(),
            false => None,
        };
        let t = if layout.is_some() { part.table(table)? } else { part.check_writable(table, "load into")? };
        if !t.is_empty() {
            return Err(Error::unexpected(format!("bulk load into {}, which is not empty", t.name())));
        }
        Ok(Loading { layout, table: TableLoad::new(t.def().clone()) })
    }
}

impl Partition {
    /// Loads `rows` into their tables, which must be empty, then repopulates the views of
    /// those tables. Runs outside transactions. On an error (a bad value, a duplicate key)
    /// nothing of the failing table is kept; the caller gives up on the whole load. For
    /// tests: the restore paths add rows as they read them (`BulkLoad::add`).
    #[cfg(test)]
    pub fn load_rows(&mut self, rows: BTreeMap<TableId, Vec<Vec<Value>>>) -> Result<()> {
        let mut load = BulkLoad::default();
        for (id, rows) in rows {
            load.add(self, id, rows)?;
        }
        self.finish_load(load)
    }

    /// Puts the tables of `load` in place, building their indexes (unique ones refuse a
    /// duplicate key as an insert would), then repopulates the views of those tables.
    pub fn finish_load(&mut self, load: BulkLoad) -> Result<()> {
        if self.snapshot.is_some() {
            return Err(Error::unexpected("bulk load while a snapshot is being written"));
        }
        let mut tables = Vec::with_capacity(load.tables.len());
        for (id, loading) in load.tables {
            // Empty when its load started; the partition may have changed since.
            if !self.table(id)?.is_empty() {
                return Err(Error::unexpected(format!("bulk load into {}, which is not empty", loading.table.def().name)));
            }
            tables.push((id, loading.table));
        }
        // In table order, as if built one after the other: the first table that fails
        // gives the error.
        for (id, table) in build_tables(tables, INDEX_BUILD_PARALLEL_ROWS_MIN) {
            self.tables.insert(id, table?);
            self.repopulate_views_of(id)?;
        }
        Ok(())
    }

    /// Rebuilds every view of `source` from the source's rows.
    fn repopulate_views_of(&mut self, source: TableId) -> Result<()> {
        for vid in self.views_of.get(&source).cloned().unwrap_or_default() {
            let old = self.table(vid)?;
            let Some(vdef) = old.def().view().cloned() else { continue };
            let mut vt = Table::new(old.def().clone());
            view::populate(&mut vt, &vdef, self.table(source)?)?;
            self.tables.insert(vid, vt);
        }
        Ok(())
    }
}

/// Most threads that build the indexes of one load's tables, the caller's included. Each
/// site loads its share of a snapshot on its own thread, one site per core; a site that
/// has read its rows before the others then lends its tables a core another site has left.
const INDEX_BUILD_THREADS: usize = 2;

/// Fewest rows a load must have for its tables to be built on more than one thread.
const INDEX_BUILD_PARALLEL_ROWS_MIN: usize = 100_000;

/// Builds each table's indexes, largest tables first across `INDEX_BUILD_THREADS` threads
/// when there are at least `parallel_rows_min` rows, and returns the tables in their given
/// order.
pub(crate) fn build_tables(tables: Vec<(TableId, TableLoad)>, parallel_rows_min: usize) -> Vec<(TableId, Result<Table>)> {
    let rows: usize = tables.iter().map(|(_, t)| t.len()).sum();
    if tables.len() < 2 || rows < parallel_rows_min {
        return tables.into_iter().map(|(id, t)| (id, t.finish())).collect();
    }
    let count = tables.len();
    let mut queue: Vec<(usize, TableId, TableLoad)> = tables.into_iter().enumerate().map(|(i, (id, t))| (i, id, t)).collect();
    // Popped from the end: the largest last.
    queue.sort_by_key(|(_, _, t)| t.len());
    let queue = std::sync::Mutex::new(queue);
    let work = || {
        let mut done = Vec::new();
        // A poisoned lock means a builder panicked: the scope below panics with it.
        loop {
            // Taken in a statement of its own, so the lock is not held while building.
            let next = match queue.lock() {
                Ok(mut q) => q.pop(),
                Err(_) => None,
            };
            let Some((i, id, t)) = next else { break };
            done.push((i, id, t.finish()));
        }
        done
    };
    let mut built = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..INDEX_BUILD_THREADS).map(|_| scope.spawn(work)).collect();
        let mut built = work();
        for helper in helpers {
            match helper.join() {
                Ok(done) => built.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        built
    });
    debug_assert_eq!(built.len(), count);
    built.sort_by_key(|(i, _, _)| *i);
    built.into_iter().map(|(_, id, t)| (id, t)).collect()
}
