//! One table, stream or view of one partition: row slots, a free list and the indexes.
//!
//! This layer stores and indexes rows; it records no undo and knows nothing of views'
//! meaning. `Partition` calls it, recording how to reverse each change.

use std::ops::Bound;
use std::sync::Arc;

use lockstep_core::prefetch::prefetch_values;
use lockstep_core::{Error, IndexDef, Result, TableDef, TableKind, Value};
use smallvec::SmallVec;

use crate::index::{Index, IndexLoad, Lookup};
use crate::packed::PackedRow;
use crate::slots::{Slot, Slots};
use crate::snapshot::CowScan;
use crate::view::ViewLayout;
use crate::RowId;

/// Most rows one table can hold in one partition; `RowId::MAX` is reserved (stream inserts).
pub const TABLE_ROWS_MAX: usize = (RowId::MAX - 1) as usize;

/// One table, stream or view within one partition.
#[derive(Debug)]
pub struct Table {
    def: Arc<TableDef>,
    /// Slot `id` holds row `id`, packed. A row may carry hidden trailing values (a view's
    /// counts).
    slots: Slots,
    /// Free slots, reused last-freed first, so undo can put a deleted row back in its slot.
    free: Vec<RowId>,
    len: usize,
    /// `def.indexes` in order, then any internal index (a view's group index if the DDL
    /// layer did not declare one).
    indexes: Vec<Index>,
    pub(crate) view: Option<ViewLayout>,
    /// Heap bytes of the stored rows (packed bytes and shared values), kept up to date.
    row_heap_bytes: usize,
    /// Set while a snapshot scan of this table is in progress (see `snapshot.rs`).
    pub(crate) cow: Option<CowScan>,
}

/// What the allocator adds to each heap block (glibc malloc: a 16-byte header/rounding).
const ALLOC_OVERHEAD_BYTES: usize = 16;

/// Heap bytes of one stored row: its packed bytes, its shared values and their data, with
/// allocator overhead.
fn heap_bytes(row: &PackedRow) -> usize {
    let shared: usize = row.shared().iter().map(shared_heap_bytes).sum();
    row.heap_bytes() + ALLOC_OVERHEAD_BYTES + shared
}

/// Heap bytes a shared value holds outside the row.
fn shared_heap_bytes(v: &Value) -> usize {
    match v {
        // The bytes and the two reference counts before them (shared bytes are counted by
        // every row that holds them).
        Value::Bytes(b) => b.len() + 2 * std::mem::size_of::<usize>() + ALLOC_OVERHEAD_BYTES,
        _ => 0,
    }
}

/// Cache lines prefetched per value: the hardware prefetcher follows a sequential read
/// from there.
const PREFETCH_LINES: usize = 4;

/// The text of a key for error messages: `1, abc`.
pub(crate) fn describe_key(values: impl Iterator<Item = impl std::fmt::Display>) -> String {
    values.map(|v| v.to_string()).collect::<Vec<_>>().join(", ")
}

impl Table {
    /// Empty storage for `def`.
    pub(crate) fn new(def: Arc<TableDef>) -> Table {
        // A table's integer NOT NULL columns hold only integers (`validate`); a view's
        // columns are computed, and a key part past the columns is an expression's.
        let int_keys = |ix: &IndexDef| {
            matches!(def.kind, TableKind::Table)
                && ix.columns.iter().all(|&c| def.columns.get(c).is_some_and(|col| col.ty.is_integer() && !col.nullable))
        };
        let mut indexes: Vec<Index> =
            def.indexes.iter().enumerate().map(|(i, ix)| Index::new(ix, def.predicate_flag(i), int_keys(ix))).collect();
        let mut view = def.view().map(|v| ViewLayout::new(&def, v));
        if let Some(layout) = &mut view {
            // A view's group index must find NULL groups too, so it hashes NULL keys. Use
            // the declared index over the group-by columns, or add an internal one.
            let group: Box<[usize]> = (0..layout.group_len).collect();
            let pos = indexes.iter().position(|i| i.columns == group).unwrap_or(indexes.len());
            let index = Index::with_columns(group, true, false, false);
            if pos == indexes.len() {
                indexes.push(index);
            } else {
                indexes[pos] = index;
            }
            layout.group_index = pos;
        }
        Table { def, slots: Slots::default(), free: Vec::new(), len: 0, indexes, view, row_heap_bytes: 0, cow: None }
    }

    pub fn def(&self) -> &Arc<TableDef> {
        &self.def
    }

    /// Replaces the definition by an equal one (a catalog rebuilt from the same DDL).
    pub(crate) fn set_def(&mut self, def: Arc<TableDef>) {
        debug_assert!(*def == *self.def);
        self.def = def;
    }

    pub fn name(&self) -> &str {
        &self.def.name
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The row's visible values (the table's columns).
    pub fn get(&self, id: RowId) -> Option<Vec<Value>> {
        let mut row = Vec::new();
        self.get_into(id, &mut row).then_some(row)
    }

    /// Whether row `id` exists.
    pub fn contains(&self, id: RowId) -> bool {
        matches!(self.slots.get(id as usize), Some(Some(_)))
    }

    /// Puts the row's visible values in `row` (cleared first; a scan reuses one vector);
    /// false if there is no such row.
    pub fn get_into(&self, id: RowId, row: &mut Vec<Value>) -> bool {
        row.clear();
        match self.slots.get(id as usize) {
            Some(Some(packed)) => {
                packed.unpack_into(self.def.columns.len(), row);
                true
            }
            _ => false,
        }
    }

    /// Asks the CPU to start loading row `id`'s packed bytes, so that visiting a run of
    /// rows overlaps their cache misses instead of waiting for each in turn (see
    /// `prefetch_data`).
    pub fn prefetch_row(&self, id: RowId) {
        if let Some(Some(row)) = self.slots.get(id as usize) {
            row.prefetch();
        }
    }

    /// Asks the CPU to start loading the first bytes of row `id`'s byte arrays. Reads the
    /// row's slot, so call it after `prefetch_row` had time to bring it in.
    pub fn prefetch_data(&self, id: RowId) {
        if let Some(Some(row)) = self.slots.get(id as usize) {
            prefetch_values(row.shared(), PREFETCH_LINES);
        }
    }

    /// The row including hidden values (a view's row, a few values, is not allocated).
    pub(crate) fn get_full(&self, id: RowId) -> Option<SmallVec<[Value; 8]>> {
        Some(self.slots.get(id as usize)?.as_ref()?.values().collect())
    }

    /// The ids of all rows in RowId order (deterministic).
    pub fn ids(&self) -> impl Iterator<Item = RowId> + '_ {
        self.slots.iter().enumerate().filter(|(_, r)| r.is_some()).map(|(i, _)| i as RowId)
    }

    /// All rows in RowId order (deterministic), each unpacked.
    pub fn scan(&self) -> impl Iterator<Item = (RowId, Vec<Value>)> + '_ {
        let width = self.def.columns.len();
        self.slots.iter().enumerate().filter_map(move |(i, r)| {
            let mut row = Vec::new();
            r.as_ref()?.unpack_into(width, &mut row);
            Some((i as RowId, row))
        })
    }

    /// Rows whose key in index number `index` (position in def().indexes) equals `key`, or
    /// starts with it when `key` is shorter than the index. Values compare by `Value`'s
    /// total order, so a NULL in `key` matches NULL: callers wanting SQL's `= NULL` (never
    /// true) must not look NULL up. Unknown index numbers give no rows.
    pub fn lookup(&self, index: usize, key: &[Value]) -> Vec<RowId> {
        self.lookup_iter(index, key).collect()
    }

    /// As [`Table::lookup`], without collecting: the transaction path's point lookups then
    /// allocate nothing.
    pub fn lookup_iter(&self, index: usize, key: &[Value]) -> Lookup<'_> {
        match self.indexes.get(index) {
            Some(ix) if key.len() <= ix.columns.len() => ix.lookup(&self.slots, key),
            _ => Lookup::One(None),
        }
    }

    /// Rows of index `index` between two key prefixes, ascending or descending.
    pub fn range(&self, index: usize, lo: Bound<&[Value]>, hi: Bound<&[Value]>, reverse: bool) -> Box<dyn Iterator<Item = RowId> + '_> {
        match self.indexes.get(index) {
            Some(ix) => ix.range(&self.slots, lo, hi, reverse),
            None => Box::new(std::iter::empty()),
        }
    }

    /// Estimated bytes used by rows and indexes.
    pub fn memory_bytes(&self) -> usize {
        let slots = self.slots.capacity() * std::mem::size_of::<Slot>();
        let free = self.free.capacity() * std::mem::size_of::<RowId>();
        let indexes: usize = self.indexes.iter().map(Index::memory_bytes).sum();
        slots + free + self.row_heap_bytes + indexes
    }

    /// Heap bytes of the stored rows, as kept up to date (tests compare ways of filling).
    #[cfg(test)]
    pub(crate) fn row_heap_bytes(&self) -> usize {
        self.row_heap_bytes
    }

    pub(crate) fn indexes(&self) -> &[Index] {
        &self.indexes
    }

    /// Fails if `row` would duplicate the key of a row other than `except` in a unique index.
    pub(crate) fn check_unique(&self, row: &[Value], except: Option<RowId>) -> Result<()> {
        for (i, ix) in self.indexes.iter().enumerate() {
            if ix.conflict(&self.slots, row, except).is_none() {
                continue;
            }
            let (what, name) = match self.def.indexes.get(i) {
                Some(d) if d.primary => ("PRIMARY KEY", d.name.as_str()),
                Some(d) if d.assume_unique => ("ASSUMEUNIQUE", d.name.as_str()),
                Some(d) => ("UNIQUE", d.name.as_str()),
                None => ("UNIQUE", "GROUP BY"),
            };
            let key = describe_key(ix.columns.iter().map(|&c| &row[c]));
            return Err(Error::constraint(format!("Constraint violation: {what} \"{name}\" on {}: duplicate key ({key})", self.def.name)));
        }
        Ok(())
    }

    /// Stores a row (already validated and checked unique) in a free slot.
    pub(crate) fn push_row(&mut self, row: &[Value]) -> Result<RowId> {
        let id = match self.free.pop() {
            Some(id) => id,
            None if self.slots.len() >= TABLE_ROWS_MAX => {
                return Err(Error::sql(format!("table {} is full: {TABLE_ROWS_MAX} rows in this partition", self.def.name)))
            }
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as RowId
            }
        };
        self.fill(id, row);
        Ok(id)
    }

    /// Puts a row back in slot `id`, which must be the most recently freed (undo of a delete).
    pub(crate) fn restore_row(&mut self, id: RowId, row: &[Value]) {
        let top = self.free.pop();
        assert_eq!(top, Some(id), "undo restores row {id} of {} out of order", self.def.name);
        self.fill(id, row);
    }

    fn fill(&mut self, id: RowId, row: &[Value]) {
        debug_assert_eq!(row.len(), self.stored_width());
        self.preserve(id);
        for ix in &mut self.indexes {
            ix.insert(row, id);
        }
        let packed = PackedRow::pack(row);
        self.row_heap_bytes += heap_bytes(&packed);
        let slot = &mut self.slots[id as usize];
        debug_assert!(slot.is_none());
        *slot = Some(packed);
        self.len += 1;
    }

    /// Removes row `id` and frees its slot; None if there is no such row.
    pub(crate) fn take_row(&mut self, id: RowId) -> Option<Box<[Value]>> {
        if self.slots.get(id as usize)?.is_none() {
            return None;
        }
        self.preserve(id);
        let packed = self.slots.get_mut(id as usize)?.take()?;
        let row = packed.unpack();
        for ix in &mut self.indexes {
            ix.remove(&row, id);
        }
        self.row_heap_bytes -= heap_bytes(&packed);
        self.free.push(id);
        self.len -= 1;
        Some(row.into_boxed_slice())
    }

    /// Replaces row `id` (which must exist), returning the old values.
    pub(crate) fn replace_row(&mut self, id: RowId, row: &[Value]) -> Box<[Value]> {
        debug_assert_eq!(row.len(), self.stored_width());
        self.preserve(id);
        let slot = &mut self.slots[id as usize];
        let old_packed = match slot.take() {
            Some(old) => old,
            None => panic!("replace of empty row slot {id} of {}", self.def.name),
        };
        let old = old_packed.unpack();
        // An index whose columns keep their values needs no change (view counters, most
        // UPDATEs): its entries still describe the row.
        for ix in &mut self.indexes {
            if ix.key_differs(&old, row) {
                ix.remove(&old, id);
                ix.insert(row, id);
            }
        }
        let packed = PackedRow::pack(row);
        self.row_heap_bytes = self.row_heap_bytes - heap_bytes(&old_packed) + heap_bytes(&packed);
        self.slots[id as usize] = Some(packed);
        old.into_boxed_slice()
    }

    /// Whether a unique index includes column `c` (a change to it needs a uniqueness check).
    pub(crate) fn unique_over(&self, c: usize) -> bool {
        self.indexes.iter().any(|ix| ix.is_unique() && ix.columns.contains(&c))
    }

    /// Sets some columns of row `id` (which must exist) in place, in order, returning the
    /// old values in the order that, set again, undoes the change. Only when an index
    /// covers a changed column is the whole row replaced, to move its index entries.
    pub(crate) fn set_columns(&mut self, id: RowId, mut changes: Vec<(usize, Value)>) -> Vec<(usize, Value)> {
        // Computed keys would go stale: `Partition::update_columns` replaces such rows whole.
        debug_assert!(self.def.computed_width() == 0, "columns of {} set in place under computed values", self.def.name);
        let indexed = |c: usize| self.indexes.iter().any(|ix| ix.columns.contains(&c));
        if changes.iter().any(|&(c, _)| indexed(c)) {
            let Some(mut row) = self.get_full(id) else { panic!("update of empty row slot {id} of {}", self.def.name) };
            for (c, v) in &mut changes {
                std::mem::swap(&mut row[*c], v);
            }
            self.replace_row(id, &row);
        } else {
            self.preserve(id);
            let Some(packed) = self.slots.get_mut(id as usize).and_then(Option::as_mut) else {
                panic!("update of empty row slot {id} of {}", self.def.name)
            };
            // Most changes fit where the old value was (a counter, a flag); the rest, and
            // any after them, are made by packing the row again.
            let mut in_place = 0;
            for (c, v) in &mut changes {
                let Some(old) = packed.set_in_place(*c, v) else { break };
                *v = old;
                in_place += 1;
            }
            if in_place < changes.len() {
                let mut row = packed.unpack();
                for (c, v) in &mut changes[in_place..] {
                    std::mem::swap(&mut row[*c], v);
                }
                let repacked = PackedRow::pack(&row);
                self.row_heap_bytes = self.row_heap_bytes - heap_bytes(packed) + heap_bytes(&repacked);
                *packed = repacked;
            }
        }
        // A column set twice holds its first old value in the earlier entry: undo goes
        // newest first.
        changes.reverse();
        changes
    }

    /// Before slot `id` changes, keeps its contents for a snapshot scan in progress that
    /// has not reached it yet (copy-on-write: only changed slots are ever copied).
    fn preserve(&mut self, id: RowId) {
        if let Some(cow) = &mut self.cow {
            if cow.wants(id) {
                let before = self.slots.get(id as usize).cloned().flatten();
                cow.keep(id, before);
            }
        }
    }

    /// The slots, for a snapshot scan.
    pub(crate) fn slots(&self) -> &Slots {
        &self.slots
    }

    /// Values a stored row has: the columns plus a view's hidden counts or the table's
    /// computed index keys and partial index flags (`computed.rs`).
    pub(crate) fn stored_width(&self) -> usize {
        self.def.columns.len() + self.view.as_ref().map_or(0, |v| v.hidden_len) + self.def.computed_width()
    }

    /// Builds storage for `def` from rows to keep in these slots (None: a free slot),
    /// checking unique indexes. Rows must already have the stored width of `def`.
    pub(crate) fn from_slots(def: Arc<TableDef>, slots: Vec<Option<Box<[Value]>>>) -> Result<Table> {
        let mut load = TableLoad::new(def);
        for row in slots {
            match row {
                Some(row) => load.push(&row)?,
                None => load.table.slots.push(None),
            }
        }
        let table = &mut load.table;
        table.free = table.slots.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i as RowId).collect();
        table.free.reverse();
        load.finish()
    }

    /// The error for row `id`, whose key a unique index being built already held: the
    /// insert-time message, which names the index and the key.
    fn duplicate(&self, id: RowId) -> Error {
        let row = self.get_full(id).unwrap_or_default();
        match self.check_unique(&row, Some(id)) {
            Err(e) => e,
            Ok(()) => Error::unexpected(format!("duplicate key in row {id} of {}", self.def.name)),
        }
    }
}

/// An empty table being filled in bulk: rows go into their slots and what each index needs
/// of them is gathered as they arrive (`IndexLoad`), then `finish` builds the indexes.
#[derive(Debug)]
pub(crate) struct TableLoad {
    table: Table,
    loads: Vec<IndexLoad>,
}

impl TableLoad {
    pub(crate) fn new(def: Arc<TableDef>) -> TableLoad {
        let table = Table::new(def);
        let loads = table.indexes.iter().map(|_| IndexLoad::default()).collect();
        TableLoad { table, loads }
    }

    pub(crate) fn def(&self) -> &Arc<TableDef> {
        &self.table.def
    }

    /// Rows pushed so far.
    pub(crate) fn len(&self) -> usize {
        self.table.len
    }

    /// Appends a row (already validated, with the table's stored width) in the next slot.
    pub(crate) fn push(&mut self, row: &[Value]) -> Result<()> {
        let t = &mut self.table;
        debug_assert_eq!(row.len(), t.stored_width());
        if t.slots.len() >= TABLE_ROWS_MAX {
            return Err(Error::sql(format!("table {} is full: {TABLE_ROWS_MAX} rows in this partition", t.def.name)));
        }
        let id = t.slots.len() as RowId;
        for (ix, load) in t.indexes.iter().zip(&mut self.loads) {
            ix.gather(load, row, id);
        }
        let packed = PackedRow::pack(row);
        t.row_heap_bytes += heap_bytes(&packed);
        t.slots.push(Some(packed));
        t.len += 1;
        Ok(())
    }

    /// The table with its indexes built; a unique index refuses a duplicate key with the
    /// message an insert would give.
    pub(crate) fn finish(self) -> Result<Table> {
        let mut table = self.table;
        for (i, load) in self.loads.into_iter().enumerate() {
            if let Err(id) = table.indexes[i].build_gathered(load, &table.slots) {
                return Err(table.duplicate(id));
            }
        }
        Ok(table)
    }
}
