//! One partition's storage and its transactions: validated writes, view maintenance,
//! stream buffers and the undo log that makes every write reversible.
//!
//! Undo is always recorded, inside `begin`/`commit` or not; `commit` forgets it and
//! `rollback` replays it backwards. Each public write is atomic on its own: if it fails
//! half way (say a view's SUM overflows after the row went in), it undoes itself.

use lockstep_core::{Error, Result, TableId, TableKind, Value};

use crate::computed::with_computed;
use crate::id_map::IdMap;
use crate::snapshot::SnapshotScan;
use crate::table::Table;
use crate::validate::{check_row, fit};
use crate::view::{self, ViewChange};
use crate::RowId;

/// A committed stream row, to be delivered to the stream's export target.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportRow {
    pub stream: TableId,
    pub row: Vec<Value>,
}

/// How to reverse one change.
#[derive(Debug)]
enum Undo {
    /// Row `id` was inserted: delete it.
    Insert { table: TableId, id: RowId },
    /// Row `id` was deleted: put it back in its slot.
    Delete { table: TableId, id: RowId, row: Box<[Value]> },
    /// Row `id` was replaced: put the old values back.
    Update { table: TableId, id: RowId, row: Box<[Value]> },
    /// Some columns of row `id` were set in place (a view's counters, an UPDATE's SET
    /// columns): set them back.
    SetColumns { table: TableId, id: RowId, old: Vec<(usize, Value)> },
    /// A stream row was appended to the pending exports: drop it.
    Export,
}

/// The storage of one partition. Touched only by its site thread.
#[derive(Debug, Default)]
pub struct Partition {
    id: u32,
    pub(crate) tables: IdMap<Table>,
    /// Source table → its views, in view id order.
    pub(crate) views_of: IdMap<Vec<TableId>>,
    undo: Vec<Undo>,
    exports: Vec<ExportRow>,
    in_txn: bool,
    /// A snapshot scan in progress (see `snapshot.rs`).
    pub(crate) snapshot: Option<SnapshotScan>,
}

fn unknown(id: TableId) -> Error {
    Error::sql(format!("unknown table id {id} in this partition"))
}

impl Partition {
    pub fn new(id: u32) -> Self {
        Partition { id, ..Default::default() }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn table(&self, id: TableId) -> Result<&Table> {
        self.tables.get(&id).ok_or_else(|| unknown(id))
    }

    /// Tables, streams and views in table id order.
    pub fn tables(&self) -> impl Iterator<Item = &Table> {
        self.tables.values()
    }

    /// Whether `begin` was called and neither `commit` nor `rollback` yet.
    pub fn in_transaction(&self) -> bool {
        self.in_txn
    }

    /// Stream rows written and not yet committed or rolled back.
    pub fn pending_exports(&self) -> &[ExportRow] {
        &self.exports
    }

    fn table_mut(&mut self, id: TableId) -> Result<&mut Table> {
        self.tables.get_mut(&id).ok_or_else(|| unknown(id))
    }

    /// Fails unless `table` is a plain table: views change only through their source, and
    /// stream rows, once written, cannot be changed.
    pub(crate) fn check_writable(&self, table: TableId, verb: &str) -> Result<&Table> {
        let t = self.table(table)?;
        match t.def().kind {
            TableKind::Table => Ok(t),
            TableKind::View(_) => Err(Error::sql(format!("cannot {verb} view {}", t.name()))),
            TableKind::Stream { .. } => Err(Error::sql(format!("cannot {verb} stream {}", t.name()))),
        }
    }

    /// A table, or a view of a stream: the stream keeps no rows to count again, so a view
    /// row may be deleted (VoltDB allows it; the next event of the group starts it afresh).
    fn check_deletable(&self, table: TableId) -> Result<()> {
        if self.is_view_of_stream(table) {
            return Ok(());
        }
        self.check_writable(table, "delete from").map(|_| ())
    }

    /// Whether `table` is a view whose source is a stream: its rows cannot be rebuilt from
    /// the source (which keeps none), so snapshots keep them like a table's.
    pub(crate) fn is_view_of_stream(&self, table: TableId) -> bool {
        let Ok(t) = self.table(table) else { return false };
        match &t.def().kind {
            TableKind::View(v) => self.table(v.source).is_ok_and(|s| matches!(s.def().kind, TableKind::Stream { .. })),
            _ => false,
        }
    }

    /// Runs a write; on error, undoes whatever part of it was done.
    fn atomically<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        let savepoint = self.undo.len();
        let result = f(self);
        if result.is_err() {
            self.rollback_to(savepoint);
        }
        result
    }

    /// Validates and stores a row; see the crate documentation for the checks.
    pub fn insert(&mut self, table: TableId, row: Vec<Value>) -> Result<RowId> {
        self.atomically(|p| p.insert_inner(table, row))
    }

    /// Inserts, or replaces the row with the same primary key.
    pub fn upsert(&mut self, table: TableId, row: Vec<Value>) -> Result<()> {
        self.atomically(|p| {
            let t = p.check_writable(table, "upsert into")?;
            let def = t.def().clone();
            let Some(pk) = def.indexes.iter().position(|i| i.primary) else {
                return Err(Error::sql(format!("UPSERT needs a primary key, and {} has none", def.name)));
            };
            let row = check_row(&def, row)?;
            let key: Vec<Value> = def.indexes[pk].columns.iter().map(|&c| row[c].clone()).collect();
            let found = t.lookup_iter(pk, &key).next();
            match found {
                Some(id) => p.update_checked(table, id, row),
                None => p.insert_checked(table, row).map(|_| ()),
            }
        })
    }

    /// Replaces row `id` (same checks as insert; views maintained; undo recorded).
    pub fn update(&mut self, table: TableId, id: RowId, row: Vec<Value>) -> Result<()> {
        self.atomically(|p| {
            let t = p.check_writable(table, "update")?;
            let row = check_row(t.def(), row)?;
            p.update_checked(table, id, row)
        })
    }

    /// Sets columns of row `id` (`(column, value)` pairs; the checks of `update`, views
    /// maintained, undo recorded). Only the new values are checked and stored, and only the
    /// old ones kept for undo, unless the table has views or a unique index over a set
    /// column: then the whole new row goes through `update`'s path.
    pub fn update_columns(&mut self, table: TableId, id: RowId, mut sets: Vec<(usize, Value)>) -> Result<()> {
        self.atomically(|p| {
            let t = p.check_writable(table, "update")?;
            if !t.contains(id) {
                return Err(Error::sql(format!("row {id} of {} does not exist", t.name())));
            }
            if sets.iter().any(|&(c, _)| c >= t.def().columns.len()) {
                return Err(Error::unexpected(format!("an update of {} names a column it does not have", t.name())));
            }
            // Computed index keys and partial index flags are computed again from the
            // whole new row.
            let recompute = t.def().computed_width() > 0;
            if recompute || p.views_of.contains_key(&table) || sets.iter().any(|&(c, _)| t.unique_over(c)) {
                let mut row = t.get(id).unwrap_or_default();
                for (c, v) in sets {
                    row[c] = v;
                }
                let row = check_row(t.def(), row)?;
                return p.update_checked(table, id, row);
            }
            let def = t.def();
            for (c, v) in &mut sets {
                fit(&def.name, &def.columns[*c], v)?;
            }
            let old = p.table_mut(table)?.set_columns(id, sets);
            p.undo.push(Undo::SetColumns { table, id, old });
            Ok(())
        })
    }

    pub fn delete(&mut self, table: TableId, id: RowId) -> Result<()> {
        self.atomically(|p| {
            p.check_deletable(table)?;
            let Some(row) = p.table_mut(table)?.take_row(id) else {
                return Err(Error::sql(format!("row {id} of {} does not exist", p.table(table)?.name())));
            };
            // The undo entry goes first, so a failure in a view still restores the row.
            let for_views = p.views_of.contains_key(&table).then(|| row.clone());
            p.undo.push(Undo::Delete { table, id, row });
            if let Some(row) = for_views {
                p.after_delete(table, &row)?;
            }
            Ok(())
        })
    }

    /// Starts a transaction (an undo scope).
    pub fn begin(&mut self) {
        // Transactions never nest: whatever ran before has committed or rolled back.
        assert!(!self.in_txn, "a transaction began inside another");
        self.in_txn = true;
    }

    /// Forgets the undo log and returns the committed stream rows in order.
    pub fn commit(&mut self) -> Vec<ExportRow> {
        self.undo.clear();
        self.in_txn = false;
        std::mem::take(&mut self.exports)
    }

    /// Undoes everything since the last commit, including views and stream rows.
    pub fn rollback(&mut self) {
        self.rollback_to(0);
        self.in_txn = false;
        assert!(self.undo.is_empty(), "rollback left undo entries behind");
        debug_assert!(self.exports.is_empty(), "rollback left stream rows behind");
    }

    /// A point to roll back to, for statement-level atomicity.
    pub fn savepoint(&self) -> usize {
        self.undo.len()
    }

    /// Undoes every change made after `savepoint` was taken, newest first.
    pub fn rollback_to(&mut self, savepoint: usize) {
        while self.undo.len() > savepoint {
            let Some(entry) = self.undo.pop() else { break };
            self.reverse(entry);
        }
    }

    fn reverse(&mut self, entry: Undo) {
        // The undo log only names tables that exist: apply_schema clears it.
        fn table(p: &mut Partition, id: TableId) -> &mut Table {
            match p.tables.get_mut(&id) {
                Some(t) => t,
                None => panic!("undo names table {id}, which is gone"),
            }
        }
        match entry {
            Undo::Insert { table: t, id } => {
                table(self, t).take_row(id);
            }
            Undo::Delete { table: t, id, row } => table(self, t).restore_row(id, &row),
            Undo::Update { table: t, id, row } => {
                table(self, t).replace_row(id, &row);
            }
            Undo::SetColumns { table: t, id, old } => {
                table(self, t).set_columns(id, old);
            }
            Undo::Export => {
                self.exports.pop();
            }
        }
    }

    fn insert_inner(&mut self, table: TableId, row: Vec<Value>) -> Result<RowId> {
        let t = self.table(table)?;
        let row = check_row(t.def(), row)?;
        match &t.def().kind {
            TableKind::Table => self.insert_checked(table, row),
            TableKind::View(_) => Err(Error::sql(format!("cannot insert into view {}", t.name()))),
            TableKind::Stream { .. } => {
                self.after_insert(table, &row)?;
                self.exports.push(ExportRow { stream: table, row: row.into_vec() });
                self.undo.push(Undo::Export);
                Ok(RowId::MAX)
            }
        }
    }

    /// Stores a validated row in a table, then maintains its views.
    fn insert_checked(&mut self, table: TableId, row: Box<[Value]>) -> Result<RowId> {
        let row = with_computed(self.table(table)?.def(), row)?;
        let t = self.table_mut(table)?;
        t.check_unique(&row, None)?;
        let id = t.push_row(&row)?;
        self.undo.push(Undo::Insert { table, id });
        if self.views_of.contains_key(&table) {
            self.after_insert(table, &row)?;
        }
        Ok(id)
    }

    fn update_checked(&mut self, table: TableId, id: RowId, row: Box<[Value]>) -> Result<()> {
        let row = with_computed(self.table(table)?.def(), row)?;
        let t = self.table_mut(table)?;
        if !t.contains(id) {
            return Err(Error::sql(format!("row {id} of {} does not exist", t.name())));
        }
        t.check_unique(&row, Some(id))?;
        let old = self.table_mut(table)?.replace_row(id, &row);
        // The undo entry goes first, so a failure in a view still restores the row.
        let old_for_views = self.views_of.contains_key(&table).then(|| old.clone());
        self.undo.push(Undo::Update { table, id, row: old });
        if let Some(old) = old_for_views {
            self.after_delete(table, &old)?;
            self.after_insert(table, &row)?;
        }
        Ok(())
    }

    /// The `n`th view of `source`, if any (indexing avoids copying the list per write).
    fn nth_view(&self, source: TableId, n: usize) -> Option<TableId> {
        self.views_of.get(&source)?.get(n).copied()
    }

    fn after_insert(&mut self, source: TableId, row: &[Value]) -> Result<()> {
        let mut n = 0;
        while let Some(v) = self.nth_view(source, n) {
            n += 1;
            let vt = self.table(v)?;
            let Some(vdef) = vt.def().view() else {
                continue;
            };
            if let Some(change) = view::on_insert(vt, vdef, row)? {
                self.apply_view_change(v, change)?;
            }
        }
        Ok(())
    }

    fn after_delete(&mut self, source: TableId, row: &[Value]) -> Result<()> {
        let mut n = 0;
        while let Some(v) = self.nth_view(source, n) {
            n += 1;
            let vt = self.table(v)?;
            let Some(vdef) = vt.def().view() else {
                continue;
            };
            if let Some(change) = view::on_delete(vt, vdef, row, self.table(source)?)? {
                self.apply_view_change(v, change)?;
            }
        }
        Ok(())
    }

    fn apply_view_change(&mut self, view: TableId, change: ViewChange) -> Result<()> {
        let t = self.table_mut(view)?;
        let undo = match change {
            ViewChange::Insert(row) => Undo::Insert { table: view, id: t.push_row(&row)? },
            ViewChange::Update(id, changes) => Undo::SetColumns { table: view, id, old: t.set_columns(id, changes) },
            ViewChange::Delete(id) => match t.take_row(id) {
                Some(row) => Undo::Delete { table: view, id, row },
                None => return Err(Error::unexpected(format!("view {} lost group row {id}", t.name()))),
            },
        };
        self.undo.push(undo);
        Ok(())
    }

    /// Clears the undo log; used when the schema changes (which runs outside transactions).
    pub(crate) fn forget_undo(&mut self) {
        self.undo.clear();
    }
}
