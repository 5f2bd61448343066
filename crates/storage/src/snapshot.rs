//! Consistent snapshot scans while transactions keep running, by copy-on-write.
//!
//! `begin_snapshot` only records, per table, how many slots exist: O(tables). The scan then
//! walks slots in order. A slot the scan has not reached yet keeps its contents from before
//! its first change (the pre-image, or "empty" if it was free at begin), so the scan sees
//! every row as it was at begin; slots created after begin are never visited. Pre-images
//! are dropped as the scan passes them, so memory stays bounded by what changed.

use std::collections::{BTreeMap, HashMap};

use lockstep_core::{Error, Result, TableId, TableKind, Value};

use crate::packed::PackedRow;
use crate::partition::Partition;
use crate::table::Table;
use crate::RowId;

/// Slots one `snapshot_chunk` call may visit per requested row, so a table full of free
/// slots still returns promptly instead of walking all of them in one step.
const SLOTS_VISITED_PER_ROW_MAX: usize = 4;

/// One table's scan state.
#[derive(Debug)]
pub(crate) struct CowScan {
    /// Slots that existed at begin; higher slots hold rows inserted later.
    begin_len: RowId,
    /// The next slot the scan returns; slots below it are done and need no pre-image.
    cursor: RowId,
    /// Contents at begin of slots changed since, not yet scanned (None: free at begin).
    before: HashMap<RowId, Option<PackedRow>>,
}

impl CowScan {
    /// Whether a change to slot `id` must first keep its contents.
    pub(crate) fn wants(&self, id: RowId) -> bool {
        id >= self.cursor && id < self.begin_len && !self.before.contains_key(&id)
    }

    pub(crate) fn keep(&mut self, id: RowId, before: Option<PackedRow>) {
        self.before.insert(id, before);
    }

    fn done(&self) -> bool {
        self.cursor >= self.begin_len
    }
}

/// The partition-wide state of a snapshot in progress.
#[derive(Debug, Default)]
pub(crate) struct SnapshotScan {
    /// Tables in the snapshot, in id order.
    tables: Vec<TableId>,
    /// Index into `tables` of the table being scanned.
    next: usize,
    /// Tables dropped or rebuilt by a schema change during the scan: the old storage is
    /// kept (no longer written) so the scan still returns its rows as of begin.
    pub(crate) detached: BTreeMap<TableId, Table>,
}

impl Table {
    /// Appends up to `max_rows` rows as of begin to `out`, visiting at most `max_slots`
    /// slots. Returns the slots visited.
    fn scan_chunk(&mut self, max_rows: usize, max_slots: usize, out: &mut Vec<Vec<Value>>) -> usize {
        let width = self.def().columns.len();
        let mut visited = 0;
        while out.len() < max_rows && visited < max_slots {
            let Some(cow) = self.cow.as_mut() else { break };
            if cow.done() {
                break;
            }
            let id = cow.cursor;
            cow.cursor += 1;
            visited += 1;
            let row = match cow.before.remove(&id) {
                Some(before) => before,
                None => self.slots().get(id as usize).cloned().flatten(),
            };
            if let Some(row) = row {
                let mut values = Vec::with_capacity(width);
                row.unpack_into(width, &mut values);
                out.push(values);
            }
        }
        visited
    }
}

impl Partition {
    /// Marks the current state as the snapshot's. Call between transactions; costs
    /// O(tables). Plain tables are included, and views of streams (whose source keeps no
    /// rows to rebuild them from); other views are rebuilt from their sources on restore,
    /// and streams hold no rows.
    pub fn begin_snapshot(&mut self) -> Result<()> {
        if self.snapshot.is_some() {
            return Err(Error::unexpected(format!("partition {}: a snapshot is already in progress", self.id())));
        }
        if self.in_transaction() {
            return Err(Error::unexpected(format!("partition {}: a snapshot must begin between transactions", self.id())));
        }
        let mut scan = SnapshotScan::default();
        let kept: std::collections::HashSet<TableId> = self
            .tables
            .iter()
            .filter(|(id, t)| matches!(t.def().kind, TableKind::Table) || self.is_view_of_stream(*id))
            .map(|(id, _)| id)
            .collect();
        for (id, t) in self.tables.iter_mut() {
            if !kept.contains(&id) {
                continue;
            }
            t.cow = Some(CowScan { begin_len: t.slots().len() as RowId, cursor: 0, before: HashMap::new() });
            scan.tables.push(id);
        }
        self.snapshot = Some(scan);
        Ok(())
    }

    /// Whether a snapshot scan is in progress.
    pub fn snapshot_in_progress(&self) -> bool {
        self.snapshot.is_some()
    }

    /// The next rows of the snapshot, as they were at `begin_snapshot`, at most `max_rows`
    /// of them, grouped by table in table id order; a table's rows may span several chunks,
    /// and every table appears at least once (an empty table with no rows). None when the
    /// scan is complete or no snapshot is in progress.
    pub fn snapshot_chunk(&mut self, max_rows: usize) -> Option<Vec<(TableId, Vec<Vec<Value>>)>> {
        let max_rows = max_rows.max(1);
        let mut slots_left = max_rows.saturating_mul(SLOTS_VISITED_PER_ROW_MAX);
        let mut rows_left = max_rows;
        let mut scan = self.snapshot.take()?;
        let mut out: Vec<(TableId, Vec<Vec<Value>>)> = Vec::new();
        while scan.next < scan.tables.len() && rows_left > 0 && slots_left > 0 {
            let id = scan.tables[scan.next];
            let table = match scan.detached.get_mut(&id) {
                Some(t) => Some(t),
                None => self.tables.get_mut(&id),
            };
            let mut rows = Vec::new();
            let finished = match table {
                // A table that vanished without being detached cannot happen (apply_schema
                // detaches), but skipping it is the safe reading.
                None => true,
                Some(t) => {
                    slots_left -= t.scan_chunk(rows_left, slots_left, &mut rows);
                    let finished = t.cow.as_ref().is_none_or(CowScan::done);
                    if finished {
                        t.cow = None;
                    }
                    finished
                }
            };
            rows_left -= rows.len();
            out.push((id, rows));
            if finished {
                scan.detached.remove(&id);
                scan.next += 1;
            }
        }
        let nothing_left = out.is_empty();
        self.snapshot = Some(scan);
        (!nothing_left).then_some(out)
    }

    /// Ends the snapshot (complete or abandoned), dropping every kept pre-image.
    pub fn end_snapshot(&mut self) {
        self.snapshot = None;
        for t in self.tables.values_mut() {
            t.cow = None;
        }
    }

    /// Keeps `old`, replaced or dropped by a schema change, if a snapshot still needs it.
    pub(crate) fn detach_for_snapshot(&mut self, id: TableId, old: Table) {
        if let (Some(scan), true) = (self.snapshot.as_mut(), old.cow.is_some()) {
            scan.detached.insert(id, old);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use lockstep_core::{Catalog, ColumnDef, DataType, HashRing, IndexDef, TableDef};
    use proptest::prelude::*;

    use super::*;

    fn col(name: &str, ty: DataType) -> ColumnDef {
        ColumnDef { name: name.into(), ty, size: 0, in_bytes: false, nullable: true, default: None }
    }

    /// KV(K BIGINT PRIMARY KEY, V VARCHAR) named `name`.
    fn kv(name: &str) -> TableDef {
        TableDef {
            id: 0,
            name: name.into(),
            columns: vec![col("K", DataType::BigInt), col("V", DataType::Varchar)],
            indexes: vec![IndexDef {
                name: format!("PK_{name}"),
                columns: vec![0],
                unique: true,
                assume_unique: false,
                primary: true,
                exprs: vec![],
                predicate: None,
            }],
            partition_column: None,
            kind: TableKind::Table,
        }
    }

    fn setup(names: &[&str]) -> (Catalog, Partition, Vec<TableId>) {
        let mut catalog = Catalog::default();
        let ids = names.iter().map(|n| catalog.add_table(kv(n)).unwrap().id).collect();
        let mut p = Partition::new(0);
        p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
        (catalog, p, ids)
    }

    fn row(k: i64, v: &str) -> Vec<Value> {
        vec![Value::Int(k), Value::from(v)]
    }

    /// Every table's rows, sorted, by table id.
    fn contents(p: &Partition) -> BTreeMap<TableId, Vec<Vec<Value>>> {
        p.tables()
            .map(|t| {
                let mut rows: Vec<Vec<Value>> = t.scan().map(|(_, r)| r).collect();
                rows.sort();
                (t.def().id, rows)
            })
            .collect()
    }

    /// Drains the snapshot, running `between` after every chunk.
    fn drain(p: &mut Partition, max_rows: usize, mut between: impl FnMut(&mut Partition)) -> BTreeMap<TableId, Vec<Vec<Value>>> {
        let mut out: BTreeMap<TableId, Vec<Vec<Value>>> = BTreeMap::new();
        while let Some(chunk) = p.snapshot_chunk(max_rows) {
            let n: usize = chunk.iter().map(|(_, r)| r.len()).sum();
            assert!(n <= max_rows, "chunk of {n} rows for a limit of {max_rows}");
            for (id, rows) in chunk {
                out.entry(id).or_default().extend(rows);
            }
            between(p);
        }
        p.end_snapshot();
        for rows in out.values_mut() {
            rows.sort();
        }
        out
    }

    fn find(p: &Partition, t: TableId, k: i64) -> Option<RowId> {
        p.table(t).unwrap().lookup(0, &[Value::Int(k)]).first().copied()
    }

    #[test]
    fn snapshot_sees_the_state_at_begin_despite_later_writes() {
        let (_, mut p, ids) = setup(&["A", "B"]);
        let (a, b) = (ids[0], ids[1]);
        for k in 0..10 {
            p.insert(a, row(k, "a")).unwrap();
            p.insert(b, row(k, "b")).unwrap();
        }
        // A free slot at begin, refilled later, must not appear.
        p.delete(a, find(&p, a, 9).unwrap()).unwrap();
        let expected = contents(&p);
        p.begin_snapshot().unwrap();
        let mut step = 0;
        let got = drain(&mut p, 3, |p| {
            step += 1;
            let id = find(p, a, step).unwrap_or_else(|| find(p, b, step).unwrap());
            p.update(a, find(p, a, step).unwrap_or(id), row(step, "changed")).unwrap();
            if let Some(id) = find(p, b, 9 - step) {
                p.delete(b, id).unwrap();
            }
            p.insert(a, row(100 + step, "new")).unwrap();
            p.insert(b, row(200 + step, "new")).unwrap();
        });
        assert_eq!(got, expected);
        assert!(step >= 7, "the snapshot took {step} steps");
        assert!(!p.snapshot_in_progress());
        assert_eq!(p.snapshot_chunk(3), None);
    }

    #[test]
    fn rolled_back_writes_and_reused_slots_are_invisible() {
        let (_, mut p, ids) = setup(&["A"]);
        let a = ids[0];
        for k in 0..4 {
            p.insert(a, row(k, "x")).unwrap();
        }
        p.commit();
        let expected = contents(&p);
        p.begin_snapshot().unwrap();
        p.begin();
        p.delete(a, find(&p, a, 2).unwrap()).unwrap();
        // Reuses slot 2: a row inserted after begin in a slot that existed at begin.
        p.insert(a, row(50, "reuse")).unwrap();
        p.update(a, find(&p, a, 3).unwrap(), row(3, "y")).unwrap();
        p.rollback();
        p.delete(a, find(&p, a, 1).unwrap()).unwrap();
        p.insert(a, row(60, "reuse")).unwrap();
        assert_eq!(drain(&mut p, 100, |_| {}), expected);
    }

    #[test]
    fn begin_twice_or_inside_a_transaction_is_refused() {
        let (_, mut p, _) = setup(&["A"]);
        p.begin();
        assert!(p.begin_snapshot().unwrap_err().message.contains("between transactions"));
        p.commit();
        p.begin_snapshot().unwrap();
        assert!(p.begin_snapshot().unwrap_err().message.contains("already in progress"));
        p.end_snapshot();
        p.begin_snapshot().unwrap();
    }

    #[test]
    fn dropped_and_altered_tables_still_yield_their_rows_at_begin() {
        let (mut catalog, mut p, ids) = setup(&["A", "B"]);
        for k in 0..5 {
            p.insert(ids[0], row(k, "a")).unwrap();
            p.insert(ids[1], row(k, "b")).unwrap();
        }
        let expected = contents(&p);
        p.begin_snapshot().unwrap();
        let first = p.snapshot_chunk(2).unwrap();
        assert_eq!(first, vec![(ids[0], vec![row(0, "a"), row(1, "a")])]);
        catalog.drop_table("A").unwrap();
        let mut b = (**catalog.table("B").unwrap()).clone();
        b.columns.push(col("EXTRA", DataType::Integer));
        catalog.replace_table(b).unwrap();
        p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
        let mut got = drain(&mut p, 2, |_| {});
        got.entry(ids[0]).or_default().extend(first[0].1.clone());
        got.get_mut(&ids[0]).unwrap().sort();
        assert_eq!(got, expected);
    }

    #[test]
    fn empty_tables_appear_once_with_no_rows() {
        let (_, mut p, ids) = setup(&["A", "B"]);
        p.insert(ids[1], row(1, "b")).unwrap();
        p.begin_snapshot().unwrap();
        assert_eq!(p.snapshot_chunk(10), Some(vec![(ids[0], vec![]), (ids[1], vec![row(1, "b")])]));
        assert_eq!(p.snapshot_chunk(10), None);
    }

    #[test]
    fn state_hash_ignores_slot_order_and_sees_every_change() {
        let (_, mut p, ids) = setup(&["A"]);
        let (_, mut q, _) = setup(&["A"]);
        for k in 0..5 {
            p.insert(ids[0], row(k, "v")).unwrap();
        }
        for k in (0..5).rev() {
            q.insert(ids[0], row(k, "v")).unwrap();
        }
        assert_eq!(p.state_hash(), q.state_hash());
        q.update(ids[0], find(&q, ids[0], 3).unwrap(), row(3, "w")).unwrap();
        assert_ne!(p.state_hash(), q.state_hash());
        q.update(ids[0], find(&q, ids[0], 3).unwrap(), row(3, "v")).unwrap();
        assert_eq!(p.state_hash(), q.state_hash());
        q.delete(ids[0], find(&q, ids[0], 4).unwrap()).unwrap();
        assert_ne!(p.state_hash(), q.state_hash());
        let (_, empty, _) = setup(&["A"]);
        let (_, other, _) = setup(&["B"]);
        assert_ne!(empty.state_hash(), other.state_hash(), "table names count");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(i64),
        Update(i64, u8),
        Delete(i64),
        Chunk(usize),
        RolledBack(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..40i64).prop_map(Op::Insert),
            (0..40i64, any::<u8>()).prop_map(|(k, v)| Op::Update(k, v)),
            (0..40i64).prop_map(Op::Delete),
            (1..6usize).prop_map(Op::Chunk),
            (0..40i64).prop_map(Op::RolledBack),
        ]
    }

    /// Applies one committed (or, for `RolledBack`, rolled back) transaction.
    fn apply(p: &mut Partition, t: TableId, op: &Op) {
        p.begin();
        match op {
            Op::Insert(k) => {
                let _ = p.insert(t, row(*k, "i"));
            }
            Op::Update(k, v) => {
                if let Some(id) = find(p, t, *k) {
                    p.update(t, id, row(*k, &v.to_string())).unwrap();
                }
            }
            Op::Delete(k) => {
                if let Some(id) = find(p, t, *k) {
                    p.delete(t, id).unwrap();
                }
            }
            Op::RolledBack(k) => {
                if let Some(id) = find(p, t, *k) {
                    p.delete(t, id).unwrap();
                }
                let _ = p.insert(t, row(*k + 1000, "r"));
                p.rollback();
                return;
            }
            Op::Chunk(_) => {}
        }
        p.commit();
    }

    proptest! {
        #[test]
        fn snapshot_equals_the_state_at_begin(
            before in proptest::collection::vec(op(), 0..60),
            during in proptest::collection::vec(op(), 0..120),
        ) {
            let (_, mut p, ids) = setup(&["A", "B"]);
            for (n, o) in before.iter().enumerate() {
                apply(&mut p, ids[n % 2], o);
            }
            let expected = contents(&p);
            p.begin_snapshot().unwrap();
            let mut got: BTreeMap<TableId, Vec<Vec<Value>>> = BTreeMap::new();
            let mut take = |p: &mut Partition, n: usize| {
                if let Some(chunk) = p.snapshot_chunk(n) {
                    for (id, rows) in chunk {
                        got.entry(id).or_default().extend(rows);
                    }
                }
            };
            for (n, o) in during.iter().enumerate() {
                match o {
                    Op::Chunk(rows) => take(&mut p, *rows),
                    o => apply(&mut p, ids[n % 2], o),
                }
            }
            while p.snapshot_in_progress() {
                let Some(chunk) = p.snapshot_chunk(7) else { break };
                for (id, rows) in chunk {
                    got.entry(id).or_default().extend(rows);
                }
            }
            p.end_snapshot();
            for rows in got.values_mut() {
                rows.sort();
            }
            prop_assert_eq!(got, expected);
        }
    }
}
