//! Behaviour tests of the partition API: constraints, undo, views, streams, schema changes,
//! and a property test checking every index against a full scan.

use std::ops::Bound;
use std::sync::Arc;

use lockstep_core::{
    Catalog, ColumnDef, DataType, ErrorKind, HashRing, IndexDef, TableDef, TableId, TableKind, Value, ViewAggregate, ViewDef, ViewKey,
};
use proptest::prelude::*;

use crate::{ExportRow, Partition, RowId, Table};

fn col(name: &str, ty: DataType, nullable: bool) -> ColumnDef {
    ColumnDef { name: name.into(), ty, size: 50, in_bytes: false, nullable, default: None }
}

fn index(name: &str, columns: &[usize], unique: bool, primary: bool) -> IndexDef {
    IndexDef { name: name.into(), columns: columns.to_vec(), unique, assume_unique: false, primary, exprs: vec![], predicate: None }
}

fn table_def(name: &str, columns: Vec<ColumnDef>, indexes: Vec<IndexDef>) -> TableDef {
    TableDef { id: 0, name: name.into(), columns, indexes, partition_column: None, kind: TableKind::Table }
}

fn view_def(name: &str, source: TableId, columns: Vec<ColumnDef>, group_by: Vec<usize>, aggs: Vec<ViewAggregate>) -> TableDef {
    let k = group_by.len();
    TableDef {
        id: 0,
        name: name.into(),
        columns,
        indexes: vec![index(&format!("PK_{name}"), &(0..k).collect::<Vec<_>>(), true, true)],
        partition_column: None,
        kind: TableKind::View(ViewDef {
            source,
            group_by: group_by.into_iter().map(ViewKey::Column).collect(),
            aggregates: aggs,
            filter: None,
        }),
    }
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

fn s(v: &str) -> Value {
    Value::from(v)
}

/// CONTESTANTS(ID INTEGER NOT NULL PK, NAME VARCHAR(50), CODE INTEGER UNIQUE, SCORE BIGINT)
/// with a non-unique index on SCORE.
fn contestants() -> TableDef {
    table_def(
        "CONTESTANTS",
        vec![
            col("ID", DataType::Integer, false),
            col("NAME", DataType::Varchar, true),
            col("CODE", DataType::Integer, true),
            col("SCORE", DataType::BigInt, true),
        ],
        vec![index("PK_CONTESTANTS", &[0], true, true), index("UQ_CODE", &[2], true, false), index("IX_SCORE", &[3], false, false)],
    )
}

fn setup(defs: Vec<TableDef>) -> (Catalog, Partition, Vec<TableId>) {
    let mut catalog = Catalog::default();
    let ids = defs.into_iter().map(|d| catalog.add_table(d).unwrap().id).collect();
    let mut p = Partition::new(0);
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    (catalog, p, ids)
}

fn rows(t: &Table) -> Vec<Vec<Value>> {
    t.scan().map(|(_, r)| r).collect()
}

fn lookup_rows(t: &Table, ix: usize, key: &[Value]) -> Vec<Vec<Value>> {
    t.lookup(ix, key).into_iter().map(|id| t.get(id).unwrap()).collect()
}

/// Every index holds exactly the scan's rows under their current keys, in key order, and
/// unique hashes hold every row without a NULL key (or every row, for a view's group).
fn assert_consistent(p: &Partition) {
    for t in p.tables() {
        // Computed keys and partial index flags stored after a row's columns are what the
        // expressions give now.
        let passes = |pred: &lockstep_core::RowExpr, r: &[Value]| pred.eval(r).unwrap() == Value::Bool(true);
        for (id, r) in t.scan() {
            let stored = t.get_full(id).unwrap();
            let flags = t.def().indexes.iter().filter_map(|ix| ix.predicate.as_ref()).map(|p| Value::Bool(passes(p, &r)));
            let fresh: Vec<Value> = t.def().computed().map(|e| e.expr.eval(&r).unwrap()).chain(flags).collect();
            let width = t.def().columns.len();
            if t.def().view().is_none() {
                assert_eq!(&stored[width..], &fresh[..], "computed keys of row {id} of {}", t.name());
            }
        }
        for (n, ix) in t.indexes().iter().enumerate() {
            let full = |id: RowId| t.get_full(id).unwrap();
            // A partial index holds the rows that pass its predicate, and only those.
            let predicate = t.def().indexes.get(n).and_then(|d| d.predicate.as_ref());
            let mut expected: Vec<(Vec<Value>, RowId)> = t
                .scan()
                .filter(|(_, r)| predicate.is_none_or(|p| passes(p, r)))
                .map(|(id, _)| (ix.columns.iter().map(|&c| full(id)[c].clone()).collect(), id))
                .collect();
            expected.sort();
            // A unique index builds its ordered set on first range use (from the rows, so
            // it is right by construction); once it exists it must be kept exact.
            if let Some(entries) = ix.entries() {
                assert_eq!(entries, expected, "index {n} of {}", t.name());
            }
            let is_view = t.def().view().is_some();
            let unique = t.def().indexes.get(n).is_none_or(|d| d.unique || d.primary || d.assume_unique);
            if unique {
                let with_key = expected.iter().filter(|(k, _)| is_view || !k.iter().any(Value::is_null)).count();
                if let Some(hashed) = ix.hashed_len() {
                    assert_eq!(hashed, with_key, "hash of index {n} of {}", t.name());
                }
                for (k, id) in expected.iter().filter(|(k, _)| is_view || !k.iter().any(Value::is_null)) {
                    assert_eq!(t.lookup(n, k), vec![*id]);
                }
            }
        }
    }
}

#[test]
fn insert_coerces_and_lookups_find_rows() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    let id = p.insert(t, vec![s("1"), s("Edwina"), i(10), i(5)]).unwrap();
    p.insert(t, vec![i(2), s("Kurt"), i(20), i(5)]).unwrap();
    p.insert(t, vec![i(3), Value::Null, Value::Null, i(1)]).unwrap();
    let table = p.table(t).unwrap();
    assert_eq!(table.len(), 3);
    assert_eq!(table.get(id).unwrap(), &[i(1), s("Edwina"), i(10), i(5)]);
    assert_eq!(lookup_rows(table, 0, &[i(2)]), vec![vec![i(2), s("Kurt"), i(20), i(5)]]);
    assert_eq!(lookup_rows(table, 1, &[i(10)]), vec![vec![i(1), s("Edwina"), i(10), i(5)]]);
    assert_eq!(table.lookup(2, &[i(5)]), vec![0, 1]);
    assert_eq!(table.lookup(0, &[i(9)]), Vec::<RowId>::new());
    assert!(p.table(99).is_err());
    assert_consistent(&p);
}

#[test]
fn constraint_violations_name_the_constraint_and_table() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    p.insert(t, vec![i(1), s("a"), i(10), Value::Null]).unwrap();
    let err = p.insert(t, vec![i(1), s("b"), i(11), Value::Null]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Constraint);
    assert_eq!(err.message, "Constraint violation: PRIMARY KEY \"PK_CONTESTANTS\" on CONTESTANTS: duplicate key (1)");
    let err = p.insert(t, vec![i(2), s("b"), i(10), Value::Null]).unwrap_err();
    assert_eq!(err.message, "Constraint violation: UNIQUE \"UQ_CODE\" on CONTESTANTS: duplicate key (10)");
    let err = p.insert(t, vec![Value::Null, s("b"), i(12), Value::Null]).unwrap_err();
    assert_eq!(err.message, "Constraint violation: column ID of CONTESTANTS is NOT NULL");
    let err = p.insert(t, vec![i(3), Value::from("x".repeat(51)), i(12), Value::Null]).unwrap_err();
    assert_eq!(err.message, "Value too long for column NAME of CONTESTANTS: 51 characters, limit 50");
    // An update to another row's key fails the same way; updating a row to itself is fine.
    let id2 = p.insert(t, vec![i(2), s("b"), i(20), Value::Null]).unwrap();
    let err = p.update(t, id2, vec![i(1), s("b"), i(20), Value::Null]).unwrap_err();
    assert_eq!(err.message, "Constraint violation: PRIMARY KEY \"PK_CONTESTANTS\" on CONTESTANTS: duplicate key (1)");
    p.update(t, id2, vec![i(2), s("c"), i(20), Value::Null]).unwrap();
    assert_eq!(rows(p.table(t).unwrap()), vec![vec![i(1), s("a"), i(10), Value::Null], vec![i(2), s("c"), i(20), Value::Null]]);
    assert_consistent(&p);
}

#[test]
fn unique_indexes_allow_several_nulls() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    for k in 1..=3 {
        p.insert(ids[0], vec![i(k), Value::Null, Value::Null, Value::Null]).unwrap();
    }
    assert_eq!(p.table(ids[0]).unwrap().lookup(1, &[Value::Null]), vec![0, 1, 2]);
    assert_consistent(&p);
}

#[test]
fn rollback_restores_rows_indexes_and_row_ids() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    for k in 0..4 {
        p.insert(t, vec![i(k), s("n"), i(100 + k), i(k % 2)]).unwrap();
    }
    p.commit();
    let before = rows(p.table(t).unwrap());
    p.begin();
    p.delete(t, 1).unwrap();
    p.delete(t, 2).unwrap();
    // Reuses a freed slot, then the rollback must still put rows 1 and 2 back in place.
    let reused = p.insert(t, vec![i(9), s("new"), i(109), i(7)]).unwrap();
    assert_eq!(reused, 2);
    p.update(t, 0, vec![i(0), s("changed"), i(500), i(3)]).unwrap();
    p.update(t, 3, vec![i(1), s("takes 1"), i(103), i(1)]).unwrap();
    assert_consistent(&p);
    p.rollback();
    let table = p.table(t).unwrap();
    assert_eq!(rows(table), before);
    assert_eq!(table.get(1).unwrap(), &[i(1), s("n"), i(101), i(1)]);
    assert_eq!(table.get(2).unwrap(), &[i(2), s("n"), i(102), i(0)]);
    assert_eq!(table.lookup(0, &[i(9)]), Vec::<RowId>::new());
    assert_eq!(table.lookup(1, &[i(500)]), Vec::<RowId>::new());
    assert_eq!(table.lookup(2, &[i(1)]), vec![1, 3]);
    assert_consistent(&p);
}

#[test]
fn setting_columns_checks_and_stores_only_them_and_undo_restores_rows_and_indexes() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    for k in 0..3 {
        p.insert(t, vec![i(k), s("n"), i(100 + k), i(k)]).unwrap();
    }
    p.commit();
    let before = rows(p.table(t).unwrap());
    // NAME has no index: set in place, its text counted in the table's memory until undone.
    let long = "a name long enough to live on the heap";
    let memory = p.table(t).unwrap().memory_bytes();
    p.begin();
    p.update_columns(t, 1, vec![(1, s(long))]).unwrap();
    assert!(p.table(t).unwrap().memory_bytes() > memory);
    p.rollback();
    assert_eq!(p.table(t).unwrap().memory_bytes(), memory);
    assert_eq!(rows(p.table(t).unwrap()), before);
    p.begin();
    // SCORE's index moves the row's entry.
    p.update_columns(t, 1, vec![(1, s(long)), (3, i(7))]).unwrap();
    // A duplicate of the unique CODE, a NULL ID and a NAME over its 50 characters are
    // refused, and change nothing.
    let err = p.update_columns(t, 2, vec![(3, i(8)), (2, i(100))]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Constraint);
    assert!(p.update_columns(t, 2, vec![(0, Value::Null)]).is_err());
    assert!(p.update_columns(t, 0, vec![(3, i(9)), (1, s(&"x".repeat(51)))]).is_err());
    // A unique column that stays unique.
    p.update_columns(t, 2, vec![(2, i(555))]).unwrap();
    let table = p.table(t).unwrap();
    assert_eq!(rows(table), vec![before[0].clone(), vec![i(1), s(long), i(101), i(7)], vec![i(2), s("n"), i(555), i(2)]]);
    assert_eq!(lookup_rows(table, 2, &[i(7)]), vec![vec![i(1), s(long), i(101), i(7)]]);
    assert_eq!(table.lookup(1, &[i(555)]), vec![2]);
    assert_consistent(&p);
    p.rollback();
    assert_eq!(rows(p.table(t).unwrap()), before);
    assert_consistent(&p);
}

#[test]
fn savepoints_undo_only_the_statement() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    p.begin();
    p.insert(t, vec![i(1), s("a"), i(1), i(1)]).unwrap();
    let sp = p.savepoint();
    p.insert(t, vec![i(2), s("b"), i(2), i(2)]).unwrap();
    p.delete(t, 0).unwrap();
    p.rollback_to(sp);
    assert_eq!(rows(p.table(t).unwrap()), vec![vec![i(1), s("a"), i(1), i(1)]]);
    p.commit();
    assert_eq!(p.savepoint(), 0);
    p.rollback();
    assert_eq!(p.table(t).unwrap().len(), 1);
    assert_consistent(&p);
}

#[test]
fn a_failed_write_leaves_no_trace() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    p.insert(t, vec![i(1), s("a"), i(1), i(1)]).unwrap();
    let sp = p.savepoint();
    assert!(p.insert(t, vec![i(1), s("dup"), i(2), i(2)]).is_err());
    assert!(p.delete(t, 7).is_err());
    assert!(p.update(t, 7, vec![i(5), s("a"), i(5), i(5)]).is_err());
    assert_eq!(p.savepoint(), sp);
    assert_eq!(p.table(t).unwrap().len(), 1);
}

#[test]
fn upsert_inserts_or_replaces_by_primary_key() {
    let (_, mut p, ids) = setup(vec![contestants(), table_def("NOPK", vec![col("A", DataType::Integer, true)], vec![])]);
    let t = ids[0];
    p.upsert(t, vec![i(1), s("a"), i(1), i(1)]).unwrap();
    p.upsert(t, vec![i(1), s("b"), i(1), i(2)]).unwrap();
    p.upsert(t, vec![i(2), s("c"), i(2), i(2)]).unwrap();
    assert_eq!(rows(p.table(t).unwrap()), vec![vec![i(1), s("b"), i(1), i(2)], vec![i(2), s("c"), i(2), i(2)]]);
    let err = p.upsert(ids[1], vec![i(1)]).unwrap_err();
    assert_eq!(err.message, "UPSERT needs a primary key, and NOPK has none");
    assert_consistent(&p);
}

fn two_column_table() -> TableDef {
    table_def("T", vec![col("A", DataType::Integer, false), col("B", DataType::Integer, false)], vec![index("PK_T", &[0, 1], true, true)])
}

/// A single-column unique index answers point lookups from its hash: its ordered set is
/// built only by the first range, and from then on follows every write. A multi-column one
/// keeps its order from the start (prefix searches are its usual use).
#[test]
fn a_single_column_unique_index_builds_its_order_on_first_range() {
    let one = table_def(
        "ONE",
        vec![col("A", DataType::Integer, false), col("B", DataType::Integer, false)],
        vec![index("PK_ONE", &[0], true, true)],
    );
    let (_, mut p, ids) = setup(vec![one, two_column_table()]);
    let (t, two_col) = (ids[0], ids[1]);
    assert!(p.table(two_col).unwrap().indexes()[0].has_ordered());
    for a in (1..=3).rev() {
        p.insert(t, vec![i(a), i(a * 10)]).unwrap();
    }
    p.commit();
    p.begin();
    assert_eq!(lookup_rows(p.table(t).unwrap(), 0, &[i(2)]), vec![vec![i(2), i(20)]]);
    assert!(!p.table(t).unwrap().indexes()[0].has_ordered());
    let first = |p: &Partition| -> Vec<i64> {
        let table = p.table(t).unwrap();
        table.range(0, Bound::Unbounded, Bound::Unbounded, false).map(|id| table.get(id).unwrap()[0].as_i64().unwrap()).collect()
    };
    assert_eq!(first(&p), vec![1, 2, 3]);
    assert!(p.table(t).unwrap().indexes()[0].has_ordered());
    p.insert(t, vec![i(0), i(5)]).unwrap();
    let two = p.table(t).unwrap().lookup(0, &[i(2)])[0];
    p.delete(t, two).unwrap();
    assert_eq!(first(&p), vec![0, 1, 3]);
    p.rollback();
    assert_eq!(first(&p), vec![1, 2, 3]);
    assert_consistent(&p);
}

/// A unique index over two or three NOT NULL integer columns keeps no hash: its B-tree
/// answers point lookups and refuses duplicates, on insert, update, upsert and bulk load,
/// for keys within 32 bits and past them, and a deleted key may be inserted again.
#[test]
fn a_unique_index_of_integer_columns_checks_keys_in_its_b_tree() {
    let def = table_def(
        "F",
        vec![col("S", DataType::BigInt, false), col("T", DataType::TinyInt, false), col("V", DataType::Integer, true)],
        vec![index("PK_F", &[0, 1], true, true), index("UQ_VS", &[2, 0], true, false)],
    );
    let (_, mut p, ids) = setup(vec![def.clone()]);
    let t = ids[0];
    let hashes = |p: &Partition| p.table(t).unwrap().indexes().iter().map(|ix| ix.hashed_len()).collect::<Vec<_>>();
    assert_eq!(hashes(&p), vec![None, Some(0)], "no hash for the integer key, one for the nullable one");
    let big = 1i64 << 40;
    for (n, s_id) in [3, big, 5, -big].into_iter().enumerate() {
        for kind in 1..=3 {
            p.insert(t, vec![i(s_id), i(kind), i(n as i64 * 10 + kind)]).unwrap();
        }
    }
    for s_id in [3, big, 5, -big] {
        let err = p.insert(t, vec![i(s_id), i(2), Value::Null]).unwrap_err();
        assert_eq!(err.message, format!("Constraint violation: PRIMARY KEY \"PK_F\" on F: duplicate key ({s_id}, 2)"));
        assert_eq!(lookup_rows(p.table(t).unwrap(), 0, &[i(s_id), i(2)]).len(), 1, "{s_id}");
        assert_eq!(lookup_rows(p.table(t).unwrap(), 0, &[i(s_id)]).len(), 3, "prefix of {s_id}");
    }
    assert!(lookup_rows(p.table(t).unwrap(), 0, &[i(4), i(2)]).is_empty());
    // An update onto another row's key is refused; onto its own key, or a free one, not.
    let id = p.table(t).unwrap().lookup(0, &[i(big), i(1)])[0];
    let err = p.update(t, id, vec![i(big), i(2), Value::Null]).unwrap_err();
    assert!(err.message.contains("duplicate key"), "{}", err.message);
    p.update(t, id, vec![i(big), i(1), i(99)]).unwrap();
    p.update(t, id, vec![i(big), i(7), i(99)]).unwrap();
    assert_eq!(lookup_rows(p.table(t).unwrap(), 0, &[i(big), i(7)]), vec![vec![i(big), i(7), i(99)]]);
    // Deleted, the key is free again; an upsert replaces by it.
    p.delete(t, id).unwrap();
    p.insert(t, vec![i(big), i(7), Value::Null]).unwrap();
    p.upsert(t, vec![i(big), i(7), i(100)]).unwrap();
    assert_eq!(lookup_rows(p.table(t).unwrap(), 0, &[i(big), i(7)]), vec![vec![i(big), i(7), i(100)]]);
    p.commit();
    assert_consistent(&p);

    // A bulk load refuses a duplicate key, within 32 bits or past them.
    for s_id in [9, big] {
        let (_, mut bulk, ids) = setup(vec![def.clone()]);
        let rows = vec![vec![i(s_id), i(1), Value::Null], vec![i(1), i(1), Value::Null], vec![i(s_id), i(1), i(4)]];
        let err = bulk.load_rows([(ids[0], rows)].into_iter().collect()).unwrap_err();
        assert!(err.message.contains(&format!("duplicate key ({s_id}, 1)")), "{}", err.message);
    }
}

/// An ordered set holds `IntEntry`s when its key columns are NOT NULL integers of a table,
/// and general entries otherwise (nullable or other columns, views).
#[test]
fn indexes_over_not_null_integers_hold_integer_entries() {
    let mut def = contestants();
    def.indexes.push(index("IX_ID_CODE", &[0, 2], false, false));
    def.indexes.push(index("IX_ID_NAME", &[0, 1], false, false));
    let (mut catalog, mut p, ids) = setup(vec![def, two_column_table()]);
    let view = view_def(
        "V",
        ids[0],
        vec![col("SCORE", DataType::BigInt, false), col("N", DataType::BigInt, false)],
        vec![3],
        vec![ViewAggregate::CountStar],
    );
    let v = catalog.add_table(view).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    p.insert(ids[0], vec![i(1), s("a"), i(1), i(1)]).unwrap();
    let t = p.table(ids[0]).unwrap();
    // The primary key builds its order on first range use, as integers.
    assert_eq!(t.range(0, Bound::Unbounded, Bound::Unbounded, false).count(), 1);
    let holds_ints = |t: &Table| t.indexes().iter().map(|ix| ix.holds_int_entries()).collect::<Vec<_>>();
    assert_eq!(holds_ints(t), vec![Some(true), None, Some(false), Some(false), Some(false)]);
    assert_eq!(holds_ints(p.table(ids[1]).unwrap()), vec![Some(true)]);
    let view = p.table(v).unwrap();
    assert_eq!(view.range(0, Bound::Unbounded, Bound::Unbounded, false).count(), 1);
    assert_eq!(view.indexes()[0].holds_int_entries(), Some(false), "a view's group index");
    assert_consistent(&p);
}

#[test]
fn ranges_use_key_prefixes_and_run_both_ways() {
    let (_, mut p, ids) = setup(vec![two_column_table()]);
    let t = ids[0];
    for a in 1..=3 {
        for b in 1..=3 {
            p.insert(t, vec![i(a), i(b)]).unwrap();
        }
    }
    let table = p.table(t).unwrap();
    let keys = |it: Box<dyn Iterator<Item = RowId> + '_>| -> Vec<(i64, i64)> {
        it.map(|id| {
            let r = table.get(id).unwrap();
            (r[0].as_i64().unwrap(), r[1].as_i64().unwrap())
        })
        .collect()
    };
    let two = [i(2)];
    assert_eq!(keys(table.range(0, Bound::Included(&two), Bound::Included(&two), false)), vec![(2, 1), (2, 2), (2, 3)]);
    assert_eq!(keys(table.range(0, Bound::Excluded(&two), Bound::Unbounded, false)), vec![(3, 1), (3, 2), (3, 3)]);
    assert_eq!(keys(table.range(0, Bound::Unbounded, Bound::Excluded(&two), true)), vec![(1, 3), (1, 2), (1, 1)]);
    let lo = [i(1), i(3)];
    let hi = [i(2), i(2)];
    assert_eq!(keys(table.range(0, Bound::Excluded(&lo), Bound::Included(&hi), false)), vec![(2, 1), (2, 2)]);
    // Inverted bounds give nothing rather than panicking.
    assert_eq!(keys(table.range(0, Bound::Included(&hi), Bound::Excluded(&lo), false)), vec![]);
    assert_eq!(keys(table.range(0, Bound::Excluded(&two), Bound::Excluded(&two), false)), vec![]);
    assert_eq!(lookup_rows(table, 0, &two).len(), 3);
    assert_eq!(table.lookup(0, &[i(2), i(3)]), vec![5]);
}

/// VOTES(PHONE BIGINT, STATE VARCHAR NOT NULL, CONTESTANT INTEGER, AMOUNT BIGINT) and the
/// view V(STATE, COUNT(*), SUM(AMOUNT), COUNT(AMOUNT), MIN(AMOUNT), MAX(AMOUNT)).
fn votes_with_view() -> (Catalog, Partition, TableId, TableId) {
    let votes = table_def(
        "VOTES",
        vec![
            col("PHONE", DataType::BigInt, false),
            col("STATE", DataType::Varchar, false),
            col("CONTESTANT", DataType::Integer, true),
            col("AMOUNT", DataType::BigInt, true),
        ],
        vec![index("PK_VOTES", &[0], true, true)],
    );
    let (mut catalog, mut p, ids) = setup(vec![votes]);
    let view = view_def(
        "V",
        ids[0],
        vec![
            col("STATE", DataType::Varchar, false),
            col("N", DataType::BigInt, false),
            col("TOTAL", DataType::BigInt, true),
            col("COUNTED", DataType::BigInt, false),
            col("LOW", DataType::BigInt, true),
            col("HIGH", DataType::BigInt, true),
        ],
        vec![1],
        vec![ViewAggregate::CountStar, ViewAggregate::Sum(3), ViewAggregate::Count(3), ViewAggregate::Min(3), ViewAggregate::Max(3)],
    );
    let vid = catalog.add_table(view).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    (catalog, p, ids[0], vid)
}

fn vote(phone: i64, state: &str, amount: Option<i64>) -> Vec<Value> {
    vec![i(phone), s(state), i(1), amount.map_or(Value::Null, i)]
}

fn group(p: &Partition, view: TableId, key: &str) -> Option<Vec<Value>> {
    let t = p.table(view).unwrap();
    t.lookup(0, &[s(key)]).first().map(|&id| t.get(id).unwrap())
}

/// A bulk load gives the same partition as inserting the rows one by one: rows, indexes
/// and views (same state hash), and it refuses a duplicate key naming the constraint.
#[test]
fn a_bulk_load_equals_row_by_row_inserts() {
    let rows: Vec<Vec<Value>> =
        (0..500).map(|n| vote(n * 7 % 501, ["MA", "NY", "CA"][n as usize % 3], (n % 4 != 0).then_some(n))).collect();
    let (_, mut by_insert, t, v) = votes_with_view();
    by_insert.begin();
    for r in &rows {
        by_insert.insert(t, r.clone()).unwrap();
    }
    by_insert.commit();
    let (_, mut bulk, t2, v2) = votes_with_view();
    bulk.load_rows([(t2, rows.clone())].into_iter().collect()).unwrap();
    assert_eq!(bulk.state_hash(), by_insert.state_hash());
    assert_eq!(group(&bulk, v2, "NY"), group(&by_insert, v, "NY"));
    assert_consistent(&bulk);
    // The loaded table then takes writes like any other.
    bulk.begin();
    bulk.insert(t2, vote(9_999, "MA", Some(1))).unwrap();
    bulk.rollback();
    assert_eq!(bulk.state_hash(), by_insert.state_hash());

    let (_, mut dup, t3, _) = votes_with_view();
    let twice = vec![vote(1, "MA", None), vote(2, "NY", None), vote(1, "CA", None)];
    let err = dup.load_rows([(t3, twice)].into_iter().collect()).unwrap_err();
    assert!(err.message.contains("PK_VOTES"), "{}", err.message);
    let (_, mut full, t4, _) = votes_with_view();
    full.load_rows([(t4, vec![vote(1, "MA", None)])].into_iter().collect()).unwrap();
    let again = full.load_rows([(t4, vec![vote(2, "MA", None)])].into_iter().collect()).unwrap_err();
    assert!(again.message.contains("not empty"), "{}", again.message);
}

/// A table loaded in chunks through `BulkLoad` (as a snapshot is read: chunks of several
/// tables interleaved, a table's rows arriving in several chunks) answers every lookup and
/// range of every index — single- and multi-column, unique and not, keys with NULLs —
/// exactly as the same rows inserted one by one, and its view and row bytes agree.
#[test]
fn a_table_loaded_in_chunks_answers_like_one_filled_by_inserts() {
    let people = table_def(
        "PEOPLE",
        vec![
            col("ID", DataType::BigInt, false),
            col("NAME", DataType::Varchar, true),
            col("CODE", DataType::Integer, true),
            col("SCORE", DataType::BigInt, true),
            col("RANK", DataType::BigInt, false),
        ],
        vec![
            index("PK_PEOPLE", &[0], true, true),
            index("UQ_NAME_CODE", &[1, 2], true, false),
            index("IX_SCORE_NAME", &[3, 1], false, false),
            index("UQ_CODE", &[2], true, false),
            // Integer keys (sorted as such in a bulk build), and one whose first NULL comes
            // after some integer keys.
            index("IX_RANK_ID", &[4, 0], false, false),
            index("UQ_ID_RANK", &[0, 4], true, false),
            index("IX_CODE_RANK_ID", &[2, 4, 0], false, false),
        ],
    );
    let build = || {
        let (mut catalog, mut p, ids) = setup(vec![people.clone(), contestants()]);
        let aggs = vec![ViewAggregate::CountStar, ViewAggregate::Sum(0)];
        let by_score = view_def(
            "BY_SCORE",
            ids[0],
            vec![col("SCORE", DataType::BigInt, true), col("N", DataType::BigInt, false), col("IDS", DataType::BigInt, true)],
            vec![3],
            aggs,
        );
        let view = catalog.add_table(by_score).unwrap().id;
        p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
        (p, ids[0], ids[1], view)
    };
    let person = |n: i64| {
        let name = if n % 7 == 0 { Value::Null } else { s(&format!("n{}", n % 50)) };
        let code = if n % 5 == 3 { Value::Null } else { i(n * 37 % 1_009) };
        let score = if n % 11 == 0 { Value::Null } else { i(n * 13 % 17) };
        vec![i(n * 104_729 % 1_000), name, code, score, i(n % 13 - 6)]
    };
    let all: Vec<Vec<Value>> = (0..600).map(person).collect();
    let others: Vec<Vec<Value>> = (0..40).map(|n| contestant(n, Some(&format!("c{n}")), n % 3)).collect();

    let (mut inserted, t, c, v) = build();
    inserted.begin();
    for r in &all {
        inserted.insert(t, r.clone()).unwrap();
    }
    for r in &others {
        inserted.insert(c, r.clone()).unwrap();
    }
    inserted.commit();
    let (mut loaded, t2, c2, v2) = build();
    let mut load = crate::BulkLoad::default();
    load.add(&loaded, t2, all[..250].to_vec()).unwrap();
    load.add(&loaded, c2, others[..10].to_vec()).unwrap();
    load.add(&loaded, t2, all[250..].to_vec()).unwrap();
    load.add(&loaded, c2, others[10..].to_vec()).unwrap();
    loaded.finish_load(load).unwrap();

    assert_consistent(&loaded);
    assert_eq!(loaded.state_hash(), inserted.state_hash());
    for (a, b, what) in [(t, t2, "table"), (c, c2, "other table"), (v, v2, "view")] {
        let (a, b) = (inserted.table(a).unwrap(), loaded.table(b).unwrap());
        assert_eq!(rows(b), rows(a), "{what}");
        assert_eq!(b.row_heap_bytes(), a.row_heap_bytes(), "{what}");
        for n in 0..a.def().indexes.len() {
            for reverse in [false, true] {
                let whole = |t: &Table| t.range(n, Bound::Unbounded, Bound::Unbounded, reverse).collect::<Vec<_>>();
                assert_eq!(whole(b), whole(a), "{what}: index {n}, reverse {reverse}");
            }
            for (_, r) in a.scan() {
                let key: Vec<Value> = a.def().indexes[n].columns.iter().map(|&col| r[col].clone()).collect();
                assert_eq!(b.lookup(n, &key), a.lookup(n, &key), "{what}: index {n}, key {key:?}");
                assert_eq!(b.lookup(n, &key[..1]), a.lookup(n, &key[..1]), "{what}: index {n}, prefix {key:?}");
                let (lo, hi) = (Bound::Excluded(&key[..1]), Bound::Included(&key[..]));
                let range = |t: &Table| t.range(n, lo, hi, false).collect::<Vec<_>>();
                assert_eq!(range(b), range(a), "{what}: index {n}, range from {key:?}");
            }
        }
    }

    // A bulk build keeps the entries inserts keep: integers for NOT NULL integer keys.
    let kinds = |t: &Table| t.indexes().iter().map(|ix| ix.holds_int_entries()).collect::<Vec<_>>();
    assert_eq!(kinds(loaded.table(t2).unwrap()), kinds(inserted.table(t).unwrap()));
    assert_eq!(kinds(loaded.table(t2).unwrap())[4..], [Some(true), Some(true), Some(false)]);

    // A duplicate key of a unique index that is not the first, across chunks, is refused
    // by name, as an insert would refuse it.
    let (mut dup, t3, _, _) = build();
    let mut load = crate::BulkLoad::default();
    load.add(&dup, t3, vec![vec![i(1), s("a"), i(5), i(0), i(0)]]).unwrap();
    load.add(&dup, t3, vec![vec![i(2), s("b"), i(6), i(0), i(0)], vec![i(3), s("a"), i(5), i(1), i(0)]]).unwrap();
    let err = dup.finish_load(load).unwrap_err();
    assert!(err.message.contains("UNIQUE \"UQ_NAME_CODE\"") && err.message.contains("duplicate key (a, 5)"), "{}", err.message);
    assert!(dup.table(t3).unwrap().is_empty(), "nothing of the refused table is kept");
}

/// Tables built on several threads come back in their given order, each as built alone,
/// and the first failing table in that order gives the error.
#[test]
fn tables_built_on_several_threads_are_those_built_one_by_one() {
    use crate::bulk::build_tables;
    use crate::table::TableLoad;
    let named = |k: usize| {
        let mut def = contestants();
        def.name = format!("C{k}");
        def.indexes.iter_mut().for_each(|ix| ix.name = format!("{}_{k}", ix.name));
        def
    };
    let (_, p, ids) = setup(vec![named(0), named(1), named(2)]);
    let load = |rows: &[Vec<Value>], t: TableId| {
        let mut l = TableLoad::new(p.table(t).unwrap().def().clone());
        for r in rows {
            l.push(r).unwrap();
        }
        (t, l)
    };
    let sizes = [300, 1_000, 20];
    let data: Vec<Vec<Vec<Value>>> =
        sizes.iter().map(|&n| (0..n).map(|k| contestant(k * 7 % n, Some(&format!("c{k}")), k % 9)).collect()).collect();
    let loads = || ids.iter().zip(&data).map(|(&t, rows)| load(rows, t)).collect::<Vec<_>>();
    let alone = build_tables(loads(), usize::MAX);
    let threaded = build_tables(loads(), 0);
    assert_eq!(threaded.len(), 3);
    for ((a_id, a), (b_id, b)) in alone.iter().zip(&threaded) {
        assert_eq!(a_id, b_id);
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap());
        assert_eq!(rows(b), rows(a));
        for n in 0..a.indexes().len() {
            assert_eq!(b.indexes()[n].entries(), a.indexes()[n].entries(), "index {n} of table {b_id}");
            assert_eq!(b.indexes()[n].hashed_len(), a.indexes()[n].hashed_len(), "index {n} of table {b_id}");
        }
    }
    // Duplicate keys in the second and third tables: the second's is reported.
    let mut dup = data.clone();
    dup[1].push(contestant(5, Some("again"), 0));
    dup[2].push(contestant(6, Some("again"), 0));
    let built = build_tables(ids.iter().zip(&dup).map(|(&t, rows)| load(rows, t)).collect(), 0);
    let first_error = built.into_iter().find_map(|(id, t)| t.err().map(|e| (id, e))).unwrap();
    assert_eq!(first_error.0, ids[1]);
    assert!(first_error.1.message.contains("duplicate key (5)"), "{}", first_error.1.message);
}

#[test]
fn views_follow_inserts_updates_and_deletes() {
    let (_, mut p, votes, v) = votes_with_view();
    let a = p.insert(votes, vote(1, "MA", Some(5))).unwrap();
    let b = p.insert(votes, vote(2, "MA", Some(9))).unwrap();
    p.insert(votes, vote(3, "MA", None)).unwrap();
    p.insert(votes, vote(4, "NY", Some(2))).unwrap();
    assert_eq!(group(&p, v, "MA").unwrap(), vec![s("MA"), i(3), i(14), i(2), i(5), i(9)]);
    // Deleting the current MAX recomputes it from the remaining rows.
    p.delete(votes, b).unwrap();
    assert_eq!(group(&p, v, "MA").unwrap(), vec![s("MA"), i(2), i(5), i(1), i(5), i(5)]);
    // Deleting the last non-NULL amount makes SUM, MIN and MAX NULL.
    p.delete(votes, a).unwrap();
    assert_eq!(group(&p, v, "MA").unwrap(), vec![s("MA"), i(1), Value::Null, i(0), Value::Null, Value::Null]);
    // An update moves the row between groups; the emptied group disappears.
    p.update(votes, 2, vote(3, "NY", Some(1))).unwrap();
    assert_eq!(group(&p, v, "MA"), None);
    assert_eq!(group(&p, v, "NY").unwrap(), vec![s("NY"), i(2), i(3), i(2), i(1), i(2)]);
    assert_eq!(p.table(v).unwrap().len(), 1);
    assert_consistent(&p);
}

#[test]
fn rollback_restores_views() {
    let (_, mut p, votes, v) = votes_with_view();
    p.insert(votes, vote(1, "MA", Some(5))).unwrap();
    p.insert(votes, vote(2, "MA", Some(1))).unwrap();
    p.commit();
    let before = rows(p.table(v).unwrap());
    p.begin();
    p.insert(votes, vote(3, "NY", Some(7))).unwrap();
    p.delete(votes, 1).unwrap();
    p.update(votes, 0, vote(1, "CA", Some(8))).unwrap();
    assert_eq!(p.table(v).unwrap().len(), 2);
    p.rollback();
    assert_eq!(rows(p.table(v).unwrap()), before);
    assert_eq!(group(&p, v, "MA").unwrap(), vec![s("MA"), i(2), i(6), i(2), i(1), i(5)]);
    assert_consistent(&p);
}

#[test]
fn views_without_count_star_keep_a_hidden_count() {
    let (mut catalog, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    let view = view_def(
        "BY_SCORE",
        t,
        vec![col("SCORE", DataType::BigInt, true), col("MAXCODE", DataType::Integer, true)],
        vec![3],
        vec![ViewAggregate::Max(2)],
    );
    let v = catalog.add_table(view).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    p.insert(t, vec![i(1), s("a"), i(10), i(7)]).unwrap();
    p.insert(t, vec![i(2), s("b"), i(20), i(7)]).unwrap();
    p.insert(t, vec![i(3), s("c"), i(30), Value::Null]).unwrap();
    let vt = p.table(v).unwrap();
    // NULL group keys form one group; the hidden count is not visible.
    assert_eq!(rows(vt), vec![vec![i(7), i(20)], vec![Value::Null, i(30)]]);
    p.delete(t, 1).unwrap();
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![i(7), i(10)], vec![Value::Null, i(30)]]);
    p.delete(t, 0).unwrap();
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![Value::Null, i(30)]]);
    assert_consistent(&p);
}

/// A view without GROUP BY has one row, and its group index a key of no columns: that
/// index must stay exact as the row changes and goes.
#[test]
fn a_view_without_group_by_keeps_one_exact_row() {
    let (mut catalog, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    let view = view_def(
        "TOTALS",
        t,
        vec![col("N", DataType::BigInt, false), col("TOTAL", DataType::BigInt, true)],
        vec![],
        vec![ViewAggregate::CountStar, ViewAggregate::Sum(2)],
    );
    let v = catalog.add_table(view).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    p.insert(t, vec![i(1), s("a"), i(10), i(7)]).unwrap();
    p.insert(t, vec![i(2), s("b"), i(20), i(7)]).unwrap();
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![i(2), i(30)]]);
    assert_consistent(&p);
    p.update(t, 1, vec![i(2), s("b"), i(25), i(7)]).unwrap();
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![i(2), i(35)]]);
    assert_consistent(&p);
    p.delete(t, 0).unwrap();
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![i(1), i(25)]]);
    assert_consistent(&p);
    p.delete(t, 1).unwrap();
    assert_consistent(&p);
}

#[test]
fn a_new_view_is_populated_from_existing_rows() {
    let (mut catalog, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    for k in 0..5 {
        p.insert(t, vec![i(k), s("n"), i(k), i(k % 2)]).unwrap();
    }
    p.commit();
    let view = view_def(
        "PARITY",
        t,
        vec![col("SCORE", DataType::BigInt, true), col("N", DataType::BigInt, false), col("S", DataType::BigInt, true)],
        vec![3],
        vec![ViewAggregate::CountStar, ViewAggregate::Sum(2)],
    );
    let v = catalog.add_table(view).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![i(0), i(3), i(6)], vec![i(1), i(2), i(4)]]);
    assert_consistent(&p);
}

#[test]
fn a_sum_overflow_in_a_view_undoes_the_whole_write() {
    let (_, mut p, votes, v) = votes_with_view();
    p.insert(votes, vote(1, "MA", Some(i64::MAX))).unwrap();
    let sp = p.savepoint();
    let err = p.insert(votes, vote(2, "MA", Some(1))).unwrap_err();
    assert_eq!(err.message, "numeric overflow in column TOTAL of view V");
    assert_eq!(p.savepoint(), sp);
    assert_eq!(p.table(votes).unwrap().len(), 1);
    let max = i(i64::MAX);
    assert_eq!(group(&p, v, "MA").unwrap(), vec![s("MA"), i(1), max.clone(), i(1), max.clone(), max]);
    assert_consistent(&p);
}

#[test]
fn views_and_streams_reject_direct_writes() {
    let (mut catalog, mut p, votes, v) = votes_with_view();
    let st = catalog.add_table(stream_def()).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    p.insert(votes, vote(1, "MA", Some(1))).unwrap();
    let row = vec![s("MA"), i(1), i(1), i(1), i(1), i(1)];
    assert_eq!(p.insert(v, row.clone()).unwrap_err().message, "cannot insert into view V");
    assert_eq!(p.update(v, 0, row).unwrap_err().message, "cannot update view V");
    assert_eq!(p.delete(v, 0).unwrap_err().message, "cannot delete from view V");
    assert_eq!(p.delete(st, 0).unwrap_err().message, "cannot delete from stream EVENTS");
    assert_eq!(p.table(v).unwrap().len(), 1);
}

#[test]
fn storage_is_compact_and_can_move_to_its_site_thread() {
    fn is_send<T: Send>() {}
    is_send::<Partition>();
    // An index entry holds its first key value inline, the rest behind one thin pointer
    // (none allocated for a single-column key), plus the RowId.
    assert!(std::mem::size_of::<crate::key::Entry>() <= std::mem::size_of::<Value>() + 16);
    assert_eq!(std::mem::size_of::<Option<Box<[Value]>>>(), 16);
}

#[test]
fn an_equal_definition_keeps_the_storage() {
    let (catalog, mut p, ids) = setup(vec![contestants()]);
    p.insert(ids[0], vec![i(1), s("a"), i(1), i(1)]).unwrap();
    p.delete(ids[0], 0).unwrap();
    p.insert(ids[0], vec![i(2), s("b"), i(2), i(2)]).unwrap();
    p.insert(ids[0], vec![i(3), s("c"), i(3), i(3)]).unwrap();
    p.commit();
    // A catalog built again from the same DDL has equal definitions in new Arcs.
    let mut again = Catalog::default();
    for def in catalog.tables() {
        again.add_table(def.as_ref().clone()).unwrap();
    }
    p.apply_schema(&again, &HashRing::new(1)).unwrap();
    let t = p.table(ids[0]).unwrap();
    assert!(Arc::ptr_eq(t.def(), again.table_by_id(ids[0]).unwrap()));
    assert_eq!(t.scan().map(|(id, r)| (id, r[0].clone())).collect::<Vec<_>>(), vec![(0, i(2)), (1, i(3))]);
}

fn stream_def() -> TableDef {
    TableDef {
        id: 0,
        name: "EVENTS".into(),
        columns: vec![col("K", DataType::Integer, false), col("MSG", DataType::Varchar, true)],
        indexes: vec![],
        partition_column: None,
        kind: TableKind::Stream { target: Some("file".into()) },
    }
}

#[test]
fn stream_rows_are_exported_only_on_commit() {
    let (mut catalog, mut p, ids) = setup(vec![stream_def()]);
    let st = ids[0];
    let view = view_def(
        "EVENT_COUNTS",
        st,
        vec![col("K", DataType::Integer, false), col("N", DataType::BigInt, false)],
        vec![0],
        vec![ViewAggregate::CountStar],
    );
    let v = catalog.add_table(view).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    p.begin();
    assert_eq!(p.insert(st, vec![s("1"), s("a")]).unwrap(), RowId::MAX);
    p.insert(st, vec![i(1), s("b")]).unwrap();
    assert_eq!(p.table(st).unwrap().len(), 0);
    p.rollback();
    assert_eq!(p.table(v).unwrap().len(), 0);
    p.begin();
    p.insert(st, vec![i(2), s("c")]).unwrap();
    p.insert(st, vec![i(2), s("d")]).unwrap();
    assert!(p.insert(st, vec![Value::Null, s("e")]).is_err());
    let exported = p.commit();
    assert_eq!(exported, vec![ExportRow { stream: st, row: vec![i(2), s("c")] }, ExportRow { stream: st, row: vec![i(2), s("d")] }]);
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![i(2), i(2)]]);
    assert_eq!(p.commit(), vec![]);
}

#[test]
fn apply_schema_adds_columns_with_defaults_and_drops_tables() {
    let (mut catalog, mut p, ids) = setup(vec![contestants(), two_column_table()]);
    let t = ids[0];
    p.insert(t, vec![i(1), s("a"), i(1), i(1)]).unwrap();
    p.commit();
    let mut def = contestants();
    def.id = t;
    let mut extra = col("BONUS", DataType::Integer, false);
    extra.default = Some(i(3));
    def.columns.push(extra);
    def.columns.push(col("NOTE", DataType::Varchar, true));
    catalog.replace_table(def.clone()).unwrap();
    catalog.drop_table("T").unwrap();
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    assert_eq!(rows(p.table(t).unwrap()), vec![vec![i(1), s("a"), i(1), i(1), i(3), Value::Null]]);
    assert!(p.table(ids[1]).is_err());
    // A NOT NULL column without a default cannot be added to a table with rows.
    def.columns.push(col("REQUIRED", DataType::Integer, false));
    catalog.replace_table(def).unwrap();
    let err = p.apply_schema(&catalog, &HashRing::new(1)).unwrap_err();
    assert_eq!(err.message, "cannot add NOT NULL column REQUIRED without a default to CONTESTANTS: it has rows");
    assert_eq!(p.table(t).unwrap().def().columns.len(), 6);
    assert_consistent(&p);
}

#[test]
fn apply_schema_builds_and_drops_indexes() {
    let (mut catalog, mut p, ids) = setup(vec![contestants()]);
    let t = ids[0];
    p.insert(t, vec![i(1), s("a"), i(1), i(7)]).unwrap();
    p.insert(t, vec![i(2), s("a"), i(2), i(7)]).unwrap();
    p.commit();
    let mut def = contestants();
    def.id = t;
    def.indexes.push(index("UQ_NAME", &[1], true, false));
    catalog.replace_table(def.clone()).unwrap();
    let err = p.apply_schema(&catalog, &HashRing::new(1)).unwrap_err();
    assert_eq!(err.message, "Constraint violation: UNIQUE \"UQ_NAME\" on CONTESTANTS: duplicate key (a)");
    // The old storage is untouched.
    assert_eq!(p.table(t).unwrap().def().indexes.len(), 3);
    assert_eq!(p.table(t).unwrap().len(), 2);
    // A non-unique index on NAME is built; the SCORE index is dropped.
    def.indexes.pop();
    def.indexes.remove(2);
    def.indexes.push(index("IX_NAME", &[1], false, false));
    catalog.replace_table(def).unwrap();
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    let table = p.table(t).unwrap();
    assert_eq!(table.lookup(2, &[s("a")]), vec![0, 1]);
    assert_eq!(table.indexes().len(), 3);
    assert_consistent(&p);
}

#[test]
fn partitioning_a_table_keeps_only_this_partitions_rows() {
    let ring = HashRing::new(2);
    let mut catalog = Catalog::default();
    let t = catalog.add_table(contestants()).unwrap().id;
    let mut parts = [Partition::new(0), Partition::new(1)];
    for p in &mut parts {
        p.apply_schema(&catalog, &ring).unwrap();
        for k in 0..20 {
            p.insert(t, vec![i(k), s("n"), i(k), i(0)]).unwrap();
        }
        p.commit();
    }
    let mut def = contestants();
    def.id = t;
    def.partition_column = Some(0);
    catalog.replace_table(def).unwrap();
    let mut total = 0;
    for p in &mut parts {
        p.apply_schema(&catalog, &ring).unwrap();
        let table = p.table(t).unwrap();
        for (_, r) in table.scan() {
            assert_eq!(ring.partition_for(&r[0]), p.id());
        }
        total += table.len();
        // Freed slots are reused.
        let id = p.insert(t, vec![i(100 + p.id() as i64), s("x"), i(100), i(0)]).unwrap();
        assert!((id as usize) < 20);
        assert_consistent(p);
    }
    assert_eq!(total, 20);
}

#[test]
fn memory_estimate_grows_with_rows() {
    let (_, mut p, ids) = setup(vec![contestants()]);
    let empty = p.table(ids[0]).unwrap().memory_bytes();
    for k in 0..100 {
        p.insert(ids[0], vec![i(k), s("name"), i(k), i(k)]).unwrap();
    }
    let full = p.table(ids[0]).unwrap().memory_bytes();
    // At least the row arrays themselves: 100 rows × 4 values.
    assert!(full >= empty + 100 * 4 * std::mem::size_of::<Value>(), "{empty} → {full}");
}

#[derive(Clone, Debug)]
enum Op {
    Insert(i64, i64, Option<i64>),
    Update(usize, i64, i64, Option<i64>),
    Delete(usize),
    Savepoint,
    RollbackToSavepoint,
    Commit,
    Rollback,
    /// A full range over the primary key: builds its ordered set at a random moment.
    RangePk,
}

fn op() -> impl Strategy<Value = Op> {
    let small = 0i64..8;
    let amount = proptest::option::of(0i64..5);
    prop_oneof![
        4 => (small.clone(), small.clone(), amount.clone()).prop_map(|(a, b, c)| Op::Insert(a, b, c)),
        3 => (any::<usize>(), small.clone(), small.clone(), amount).prop_map(|(r, a, b, c)| Op::Update(r, a, b, c)),
        3 => any::<usize>().prop_map(Op::Delete),
        1 => Just(Op::Savepoint),
        1 => Just(Op::RollbackToSavepoint),
        1 => Just(Op::Commit),
        1 => Just(Op::Rollback),
        1 => Just(Op::RangePk),
    ]
}

/// A savepoint with the table's and the view's rows when it was taken.
type Saved = (usize, Vec<Vec<Value>>, Vec<Vec<Value>>);

/// A reference model: the committed and current row sets, compared by sorted contents.
fn sorted_rows(t: &Table) -> Vec<Vec<Value>> {
    let mut r = rows(t);
    r.sort();
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn indexes_and_views_agree_with_a_scan_after_random_writes(ops in proptest::collection::vec(op(), 1..60)) {
        // T(A PK, B, C nullable) with a unique index on B among the rows where C > 2 (a
        // partial index, placed where a view's MIN/MAX recount would find it first if it
        // took partial indexes), a unique index on (B, C) and a view by B, with an index on
        // its SUM (whose changes must move index entries; the other aggregates change in
        // place).
        let def = table_def(
            "R",
            vec![col("A", DataType::Integer, false), col("B", DataType::Integer, false), col("C", DataType::Integer, true)],
            vec![
                index("PK_R", &[0], true, true),
                partial(index("UQ_B_WHERE_C", &[1], true, false), 2, 2),
                index("UQ_BC", &[1, 2], true, false),
                index("IX_C", &[2], false, false),
                // Keys of NOT NULL integers: B-trees of `IntEntry`s.
                index("IX_B", &[1], false, false),
                index("IX_BA", &[1, 0], false, false),
            ],
        );
        let (mut catalog, mut p, ids) = setup(vec![def]);
        let t = ids[0];
        let view = view_def(
            "RV",
            t,
            vec![col("B", DataType::Integer, false), col("N", DataType::BigInt, false), col("S", DataType::BigInt, true), col("LO", DataType::Integer, true), col("HI", DataType::Integer, true)],
            vec![1],
            vec![ViewAggregate::CountStar, ViewAggregate::Sum(2), ViewAggregate::Min(2), ViewAggregate::Max(2)],
        );
        let mut indexed_view = view.clone();
        indexed_view.indexes.push(index("IX_RV_S", &[2], false, false));
        let v = catalog.add_table(indexed_view).unwrap().id;
        p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
        p.begin();
        let mut committed = (sorted_rows(p.table(t).unwrap()), sorted_rows(p.table(v).unwrap()));
        let mut saved: Option<Saved> = None;
        let pick = |p: &Partition, n: usize| -> Option<RowId> {
            let ids: Vec<RowId> = p.table(t).unwrap().ids().collect();
            (!ids.is_empty()).then(|| ids[n % ids.len()])
        };
        let val = |c: Option<i64>| c.map_or(Value::Null, i);
        for op in ops {
            match op {
                Op::Insert(a, b, c) => { let _ = p.insert(t, vec![i(a), i(b), val(c)]); }
                Op::Update(n, a, b, c) => {
                    if let Some(id) = pick(&p, n) { let _ = p.update(t, id, vec![i(a), i(b), val(c)]); }
                }
                Op::Delete(n) => { if let Some(id) = pick(&p, n) { p.delete(t, id).unwrap(); } }
                Op::Savepoint => {
                    saved = Some((p.savepoint(), sorted_rows(p.table(t).unwrap()), sorted_rows(p.table(v).unwrap())));
                }
                Op::RollbackToSavepoint => {
                    if let Some((sp, rows_t, rows_v)) = saved.take() {
                        p.rollback_to(sp);
                        prop_assert_eq!(sorted_rows(p.table(t).unwrap()), rows_t);
                        prop_assert_eq!(sorted_rows(p.table(v).unwrap()), rows_v);
                    }
                }
                Op::Commit => {
                    p.commit();
                    p.begin();
                    saved = None;
                    committed = (sorted_rows(p.table(t).unwrap()), sorted_rows(p.table(v).unwrap()));
                }
                Op::Rollback => {
                    p.rollback();
                    p.begin();
                    saved = None;
                    prop_assert_eq!(&sorted_rows(p.table(t).unwrap()), &committed.0);
                    prop_assert_eq!(&sorted_rows(p.table(v).unwrap()), &committed.1);
                }
                Op::RangePk => {
                    let table = p.table(t).unwrap();
                    let by_range: Vec<Vec<Value>> = table
                        .range(0, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false)
                        .map(|id| table.get(id).unwrap())
                        .collect();
                    prop_assert_eq!(by_range, sorted_rows(table));
                }
            }
            assert_consistent(&p);
            // The view equals the view recomputed from scratch.
            let mut fresh = Partition::new(0);
            let mut cat2 = Catalog::default();
            let mut src = p.table(t).unwrap().def().as_ref().clone();
            src.id = 0;
            let t2 = cat2.add_table(src).unwrap().id;
            let mut vdef = view.clone();
            vdef.kind = TableKind::View(ViewDef { source: t2, group_by: vec![ViewKey::Column(1)], aggregates: vdef.view().unwrap().aggregates.clone(), filter: None });
            let v2 = cat2.add_table(vdef).unwrap().id;
            fresh.apply_schema(&cat2, &HashRing::new(1)).unwrap();
            for (_, r) in p.table(t).unwrap().scan() {
                fresh.insert(t2, r.to_vec()).unwrap();
            }
            prop_assert_eq!(sorted_rows(p.table(v).unwrap()), sorted_rows(fresh.table(v2).unwrap()));
        }
    }
}

/// `AMOUNT > 0` over a VOTES row, as the sql crate would compile a view's WHERE.
#[derive(Debug)]
struct AmountPositive;

impl lockstep_core::RowFn for AmountPositive {
    fn eval(&self, row: &[Value]) -> lockstep_core::Result<Value> {
        Ok(match &row[3] {
            Value::Int(a) => Value::Bool(*a > 0),
            _ => Value::Null,
        })
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// `SUBSTRING(STATE, 1, 1)` over a VOTES row: an expression group key.
#[derive(Debug)]
struct StateInitial;

impl lockstep_core::RowFn for StateInitial {
    fn eval(&self, row: &[Value]) -> lockstep_core::Result<Value> {
        Ok(match &row[1] {
            Value::Null => Value::Null,
            v => Value::from(&v.to_string()[..1]),
        })
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// VOTES with rows already in it, and then `V(INITIAL, N, TOTAL, HIGH)` grouping by the
/// state's initial over the votes with a positive amount.
fn votes_with_filtered_view() -> (Partition, TableId, TableId) {
    let (mut catalog, mut p, votes, _) = votes_with_view();
    p.insert(votes, vote(100, "MA", Some(4))).unwrap();
    p.insert(votes, vote(101, "MI", Some(-4))).unwrap();
    p.insert(votes, vote(102, "NY", None)).unwrap();
    p.commit();
    let mut view = view_def(
        "F",
        votes,
        vec![
            col("INITIAL", DataType::Varchar, true),
            col("N", DataType::BigInt, false),
            col("TOTAL", DataType::BigInt, true),
            col("HIGH", DataType::BigInt, true),
        ],
        vec![],
        vec![ViewAggregate::CountStar, ViewAggregate::Sum(3), ViewAggregate::Max(3)],
    );
    view.indexes = vec![index("PK_F", &[0], true, true)];
    view.kind = TableKind::View(ViewDef {
        source: votes,
        group_by: vec![ViewKey::Expr(lockstep_core::RowExpr { text: "SUBSTRING(STATE, 1, 1)".into(), eval: Arc::new(StateInitial) })],
        aggregates: vec![ViewAggregate::CountStar, ViewAggregate::Sum(3), ViewAggregate::Max(3)],
        filter: Some(lockstep_core::RowExpr { text: "AMOUNT > 0".into(), eval: Arc::new(AmountPositive) }),
    });
    let v = catalog.add_table(view).unwrap().id;
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    (p, votes, v)
}

/// A view with a WHERE counts only the source rows that pass it — when populated, and on
/// insert, on an update that makes a row start or stop passing, and on delete — and its
/// group keys are computed from each row.
#[test]
fn a_filtered_view_counts_only_passing_rows_under_computed_keys() {
    let (mut p, votes, v) = votes_with_filtered_view();
    // Populated from the rows already there: only MA's 4 passes.
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![s("M"), i(1), i(4), i(4)]]);
    let a = p.insert(votes, vote(1, "MO", Some(6))).unwrap();
    p.insert(votes, vote(2, "MA", Some(0))).unwrap();
    assert_eq!(group(&p, v, "M").unwrap(), vec![s("M"), i(2), i(10), i(6)]);
    // An update that makes a row stop passing takes it out (and MAX is recomputed from the
    // passing rows only: MI's -4 and MA's 0 stay out).
    p.update(votes, a, vote(1, "MO", Some(-1))).unwrap();
    assert_eq!(group(&p, v, "M").unwrap(), vec![s("M"), i(1), i(4), i(4)]);
    // One that makes a row start passing puts it in, under its computed key.
    p.update(votes, a, vote(1, "NE", Some(3))).unwrap();
    assert_eq!(group(&p, v, "N").unwrap(), vec![s("N"), i(1), i(3), i(3)]);
    // Deleting a row that never passed changes nothing; deleting one that did removes it.
    let unfiltered = p.table(votes).unwrap().lookup(0, &[i(101)])[0];
    p.delete(votes, unfiltered).unwrap();
    p.delete(votes, a).unwrap();
    assert_eq!(group(&p, v, "N"), None);
    assert_eq!(rows(p.table(v).unwrap()), vec![vec![s("M"), i(1), i(4), i(4)]]);
    assert_consistent(&p);
}

/// A bulk load (what a snapshot restore does) rebuilds a filtered view from its source
/// through the filter and the computed keys: the same view as row-by-row inserts.
#[test]
fn a_bulk_load_rebuilds_a_filtered_view_through_its_filter() {
    let (by_insert, votes, v) = votes_with_filtered_view();
    let source = rows(by_insert.table(votes).unwrap());
    let (mut loaded, votes2, v2) = votes_with_filtered_view();
    let ids: Vec<RowId> = loaded.table(votes2).unwrap().ids().collect();
    for id in ids {
        loaded.delete(votes2, id).unwrap();
    }
    loaded.commit();
    assert!(loaded.table(v2).unwrap().is_empty());
    loaded.load_rows([(votes2, source)].into_iter().collect()).unwrap();
    assert_eq!(rows(loaded.table(v2).unwrap()), rows(by_insert.table(v).unwrap()));
    assert_eq!(rows(loaded.table(v2).unwrap()), vec![vec![s("M"), i(1), i(4), i(4)]]);
}

/// `SUBSTRING(NAME, 1, 1)` over a CONTESTANTS row, as the sql crate would compile an index
/// key expression; NULL for a NULL name.
#[derive(Debug)]
struct NameInitial;

impl lockstep_core::RowFn for NameInitial {
    fn eval(&self, row: &[Value]) -> lockstep_core::Result<Value> {
        Ok(match &row[1] {
            Value::Str(n) => Value::from(n.chars().next().map(String::from).unwrap_or_default().as_str()),
            _ => Value::Null,
        })
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// CONTESTANTS with a unique index on the initial of NAME (number 3) and a non-unique one
/// on (initial, SCORE) (number 4): two hidden keys after the columns.
fn contestants_with_initials() -> (Catalog, Partition, TableId) {
    let mut def = contestants();
    let initial = || lockstep_core::IndexExpr {
        part: 0,
        expr: lockstep_core::RowExpr { text: "SUBSTRING(NAME, 1, 1)".into(), eval: Arc::new(NameInitial) },
        ty: DataType::Varchar,
    };
    let mut unique = index("UQ_INITIAL", &[usize::MAX], true, false);
    unique.exprs = vec![initial()];
    let mut pair = index("IX_INITIAL_SCORE", &[usize::MAX, 3], false, false);
    pair.exprs = vec![initial()];
    def.indexes.extend([unique, pair]);
    let (catalog, p, ids) = setup(vec![def]);
    (catalog, p, ids[0])
}

fn contestant(id: i64, name: Option<&str>, score: i64) -> Vec<Value> {
    vec![i(id), name.map_or(Value::Null, s), i(id * 10), i(score)]
}

/// Expression keys are computed on insert and update, checked for uniqueness, restored by
/// rollback and never shown to readers.
#[test]
fn expression_keys_follow_writes_and_rollbacks() {
    let (_, mut p, t) = contestants_with_initials();
    assert_eq!(p.table(t).unwrap().def().indexes[3].columns, vec![4]);
    assert_eq!(p.table(t).unwrap().def().indexes[4].columns, vec![5, 3]);
    let ann = p.insert(t, contestant(1, Some("Ann"), 5)).unwrap();
    p.insert(t, contestant(2, Some("Bob"), 7)).unwrap();
    p.insert(t, contestant(3, None, 7)).unwrap();
    p.insert(t, contestant(4, None, 8)).unwrap();
    p.commit();
    let e = p.insert(t, contestant(5, Some("Abe"), 1)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Constraint);
    assert!(e.message.contains("UNIQUE \"UQ_INITIAL\"") && e.message.contains("duplicate key (A)"), "{}", e.message);
    assert_eq!(p.table(t).unwrap().get(ann).unwrap().len(), 4, "readers see the columns only");
    assert_eq!(lookup_rows(p.table(t).unwrap(), 3, &[s("B")]), vec![contestant(2, Some("Bob"), 7)]);
    // An update moves the row's keys; one that would duplicate a key is refused whole.
    p.begin();
    p.update(t, ann, contestant(1, Some("Cy"), 5)).unwrap();
    assert_eq!(lookup_rows(p.table(t).unwrap(), 3, &[s("C")]), vec![contestant(1, Some("Cy"), 5)]);
    assert!(p.update_columns(t, ann, vec![(1, s("Bea"))]).is_err());
    p.update_columns(t, ann, vec![(1, s("Dee")), (3, i(9))]).unwrap();
    assert_eq!(lookup_rows(p.table(t).unwrap(), 4, &[s("D"), i(9)]).len(), 1);
    assert_consistent(&p);
    p.rollback();
    assert_eq!(lookup_rows(p.table(t).unwrap(), 3, &[s("A")]), vec![contestant(1, Some("Ann"), 5)]);
    assert!(lookup_rows(p.table(t).unwrap(), 3, &[s("D")]).is_empty());
    p.delete(t, ann).unwrap();
    assert!(lookup_rows(p.table(t).unwrap(), 3, &[s("A")]).is_empty());
    assert_consistent(&p);
}

/// A snapshot keeps the columns only; a bulk load (a restore) computes the keys again.
#[test]
fn a_bulk_load_computes_expression_keys_again() {
    let (catalog, mut p, t) = contestants_with_initials();
    for (id, name) in [(1, "Ann"), (2, "Bob"), (3, "Cy")] {
        p.insert(t, contestant(id, Some(name), id)).unwrap();
    }
    p.commit();
    p.begin_snapshot().unwrap();
    let mut saved = std::collections::BTreeMap::new();
    while let Some(chunk) = p.snapshot_chunk(2) {
        for (id, rows) in chunk {
            saved.entry(id).or_insert_with(Vec::new).extend(rows);
        }
    }
    p.end_snapshot();
    assert!(saved[&t].iter().all(|r| r.len() == 4), "snapshot rows are the columns only");
    let mut loaded = Partition::new(0);
    loaded.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    loaded.load_rows(saved).unwrap();
    assert_eq!(lookup_rows(loaded.table(t).unwrap(), 4, &[s("C")]), vec![contestant(3, Some("Cy"), 3)]);
    assert_consistent(&loaded);
}

/// `row[column] > bound` over a row, as the sql crate would compile a partial index's
/// predicate: NULL when the column is NULL.
#[derive(Debug)]
struct Above {
    column: usize,
    bound: i64,
}

impl lockstep_core::RowFn for Above {
    fn eval(&self, row: &[Value]) -> lockstep_core::Result<Value> {
        Ok(match &row[self.column] {
            Value::Int(v) => Value::Bool(*v > self.bound),
            _ => Value::Null,
        })
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// `ix` made partial: it holds the rows whose `column` is above `bound`.
fn partial(mut ix: IndexDef, column: usize, bound: i64) -> IndexDef {
    let text = format!("column {column} > {bound}");
    ix.predicate = Some(lockstep_core::RowExpr { text, eval: Arc::new(Above { column, bound }) });
    ix
}

/// CONTESTANTS with a unique index on CODE among the rows whose SCORE is above 5 (number
/// 3) and a non-unique one on NAME among the same rows (number 4).
fn contestants_with_partial_indexes() -> (Catalog, Partition, TableId) {
    let mut def = contestants();
    def.indexes.push(partial(index("UQ_CODE_HIGH", &[2], true, false), 3, 5));
    def.indexes.push(partial(index("IX_NAME_HIGH", &[1], false, false), 3, 5));
    let (catalog, p, ids) = setup(vec![def]);
    (catalog, p, ids[0])
}

fn scored(id: i64, code: i64, score: Option<i64>) -> Vec<Value> {
    vec![i(id), s("n"), i(code), score.map_or(Value::Null, i)]
}

/// A partial index holds only the rows that pass its predicate (NULL does not); a unique one
/// refuses duplicates only among them; updates move rows in and out; rollback restores it.
#[test]
fn a_partial_index_holds_the_passing_rows_only() {
    let (_, mut p, t) = contestants_with_partial_indexes();
    let high = p.insert(t, scored(1, 10, Some(9))).unwrap();
    let low = p.insert(t, scored(2, 20, Some(1))).unwrap();
    p.insert(t, scored(3, 30, None)).unwrap();
    p.commit();
    assert_eq!(p.table(t).unwrap().get(high).unwrap().len(), 4, "readers see the columns only");
    let table = p.table(t).unwrap();
    assert_eq!(table.lookup(3, &[i(10)]), vec![high]);
    assert!(table.lookup(3, &[i(20)]).is_empty(), "a row below the predicate is not indexed");
    assert!(table.lookup(3, &[i(30)]).is_empty(), "NULL counts as false");
    let all: Vec<RowId> = table.range(4, Bound::Unbounded, Bound::Unbounded, false).collect();
    assert_eq!(all, vec![high]);
    assert_consistent(&p);

    // Moving the low row up into the index makes its code count; out again, it stops.
    p.begin();
    p.update_columns(t, low, vec![(3, i(6))]).unwrap();
    assert_eq!(p.table(t).unwrap().lookup(3, &[i(20)]), vec![low]);
    p.update_columns(t, high, vec![(3, i(5))]).unwrap();
    assert!(p.table(t).unwrap().lookup(3, &[i(10)]).is_empty());
    assert_consistent(&p);
    p.rollback();
    assert_eq!(p.table(t).unwrap().lookup(3, &[i(10)]), vec![high]);
    assert!(p.table(t).unwrap().lookup(3, &[i(20)]).is_empty());
    assert_consistent(&p);
}

/// Uniqueness of a partial unique index holds among the rows that pass its predicate only,
/// for inserts and for updates that bring a row in.
#[test]
fn a_partial_unique_index_allows_duplicates_outside_its_predicate() {
    let mut def = contestants();
    // Without the table's own UNIQUE on CODE, only the partial one constrains it.
    def.indexes.retain(|ix| ix.name != "UQ_CODE");
    def.indexes.push(partial(index("UQ_CODE_HIGH", &[2], true, false), 3, 5));
    let (_, mut p, ids) = setup(vec![def]);
    let t = ids[0];
    p.insert(t, scored(1, 7, Some(9))).unwrap();
    p.insert(t, scored(2, 7, Some(1))).unwrap();
    p.insert(t, scored(3, 7, None)).unwrap();
    let e = p.insert(t, scored(4, 7, Some(6))).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Constraint);
    assert!(e.message.contains("UNIQUE \"UQ_CODE_HIGH\"") && e.message.contains("duplicate key (7)"), "{}", e.message);
    let low = p.table(t).unwrap().lookup(0, &[i(2)])[0];
    assert_eq!(p.update_columns(t, low, vec![(3, i(8))]).unwrap_err().kind, ErrorKind::Constraint);
    p.update_columns(t, low, vec![(2, i(8)), (3, i(8))]).unwrap();
    assert_eq!(p.table(t).unwrap().lookup(1, &[i(8)]), vec![low]);
    assert_consistent(&p);
}

/// A bulk load (a restore) and a schema change (a column added) compute the flags again.
#[test]
fn a_bulk_load_and_a_rebuild_compute_partial_flags_again() {
    let (mut catalog, mut p, t) = contestants_with_partial_indexes();
    for (id, score) in [(1, 9), (2, 1), (3, 7)] {
        p.insert(t, scored(id, id * 10, Some(score))).unwrap();
    }
    p.commit();
    p.begin_snapshot().unwrap();
    let mut saved = std::collections::BTreeMap::new();
    while let Some(chunk) = p.snapshot_chunk(2) {
        for (id, rows) in chunk {
            saved.entry(id).or_insert_with(Vec::new).extend(rows);
        }
    }
    p.end_snapshot();
    assert!(saved[&t].iter().all(|r| r.len() == 4), "snapshot rows are the columns only");
    let mut loaded = Partition::new(0);
    loaded.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    loaded.load_rows(saved).unwrap();
    let ids = |p: &Partition| -> Vec<Value> {
        let table = p.table(t).unwrap();
        table.range(3, Bound::Unbounded, Bound::Unbounded, false).map(|id| table.get(id).unwrap()[0].clone()).collect()
    };
    assert_eq!(ids(&loaded), vec![i(1), i(3)]);
    assert_consistent(&loaded);
    // A new column goes before the hidden values: they are computed again after it.
    let mut def = p.table(t).unwrap().def().as_ref().clone();
    def.columns.push(col("EXTRA", DataType::Integer, true));
    catalog.replace_table(def).unwrap();
    p.apply_schema(&catalog, &HashRing::new(1)).unwrap();
    assert_eq!(p.table(t).unwrap().def().predicate_flag(3), Some(5));
    assert_eq!(ids(&p), vec![i(1), i(3)]);
    assert_consistent(&p);
}
