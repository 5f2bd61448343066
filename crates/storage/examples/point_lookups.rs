//! Point lookups on a two-column integer primary key, as TATP's ACCESS_INFO takes them:
//! loads SUBSCRIBERS × about 2.5 rows (keys `(s_id BIGINT, ai_type TINYINT)`) into one
//! partition in bulk, then times 2,000,000 lookups of random keys, three rounds.
//!
//!   cargo run --release -p lockstep-storage --example point_lookups -- 500000
use std::time::Instant;

use lockstep_core::{Catalog, ColumnDef, DataType, HashRing, IndexDef, TableDef, TableKind, Value};
use lockstep_storage::{BulkLoad, Partition};

fn main() {
    let subscribers: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(500_000).max(1);
    let col = |name: &str, ty| ColumnDef { name: name.into(), ty, size: 0, in_bytes: false, nullable: false, default: None };
    let primary = IndexDef {
        name: "PK".into(),
        columns: vec![0, 1],
        unique: true,
        assume_unique: false,
        primary: true,
        exprs: vec![],
        predicate: None,
    };
    let def = TableDef {
        id: 0,
        name: "ACCESS_INFO".into(),
        columns: vec![col("S_ID", DataType::BigInt), col("AI_TYPE", DataType::TinyInt), col("DATA1", DataType::Integer)],
        indexes: vec![primary],
        partition_column: None,
        kind: TableKind::Table,
    };
    let mut catalog = Catalog::default();
    let table = catalog.add_table(def).expect("a valid table").id;
    let mut part = Partition::new(0);
    part.apply_schema(&catalog, &HashRing::new(1)).expect("a valid schema");

    // xorshift: the same keys every run.
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut random = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut rows = Vec::new();
    for s in 0..subscribers as i64 {
        for kind in 1..=4 {
            if random() % 8 < 5 {
                rows.push(vec![Value::Int(s), Value::Int(kind), Value::Int(s)]);
            }
        }
    }
    let count = rows.len();
    let mut load = BulkLoad::default();
    load.add(&part, table, rows).expect("rows of the table's types");
    part.finish_load(load).expect("unique keys");
    let table = part.table(table).expect("the table");
    const LOOKUPS: u32 = 2_000_000;
    for round in 1..=3 {
        let (start, mut found) = (Instant::now(), 0);
        for _ in 0..LOOKUPS {
            let r = random();
            let key = [Value::Int((r % subscribers) as i64), Value::Int(((r >> 32) % 4 + 1) as i64)];
            found += table.lookup_iter(0, &key).count();
        }
        let each = start.elapsed().as_nanos() as f64 / f64::from(LOOKUPS);
        println!("round {round}: {count} rows, {LOOKUPS} lookups ({found} found), {each:.0} ns a lookup");
    }
}
