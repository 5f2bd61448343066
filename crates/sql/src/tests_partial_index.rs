//! Partial indexes (`CREATE INDEX … WHERE cond`): the index holds only the rows for which
//! `cond` is true, a unique one refuses duplicates only among them, every write keeps it
//! exact, and the planner reads it only when the query's WHERE implies `cond` (checked
//! through `@Explain`'s text, and by comparing each answer with a full scan's).

use std::sync::Arc;

use lockstep_core::{HashRing, Value};

use crate::testing::LocalSites;
use crate::tests_sql::{ctx, i, Db, NoFiles};
use crate::{apply_ddl, execute_mp, explain, prepare};

const DDL: &str = "
CREATE TABLE orders (id INTEGER NOT NULL, cust INTEGER, status VARCHAR(10), qty INTEGER, rush BOOLEAN, PRIMARY KEY (id));
CREATE INDEX open_by_cust ON orders (cust) WHERE status = 'open';
CREATE INDEX big_qty ON orders (qty) WHERE qty > 10;
CREATE INDEX rush_ids ON orders (id) WHERE rush;
CREATE INDEX known_cust ON orders (cust, id) WHERE cust IS NOT NULL AND 0 < qty;
";

fn ids(v: &[i64]) -> Vec<Vec<Value>> {
    v.iter().map(|&x| vec![i(x)]).collect()
}

fn db() -> Db {
    let mut db = Db::new(DDL);
    db.run(
        "INSERT INTO orders VALUES
            (1, 7, 'open', 5, true),
            (2, 7, 'shipped', 20, false),
            (3, 8, 'open', 15, NULL),
            (4, 7, 'open', NULL, true),
            (5, NULL, 'open', 12, false),
            (6, 9, NULL, 0, true)",
    );
    db
}

fn plan(db: &Db, sql: &str) -> String {
    explain(&prepare(&db.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")))
}

/// The ids the filter keeps, through whatever plan the query gets, after checking that
/// they are the ids for which the filter is true when every row is read (the filter as a
/// column of a SELECT without WHERE, which reads no partial index).
fn same_as_scan(db: &mut Db, filter: &str) -> Vec<Vec<Value>> {
    let indexed = db.rows(&format!("SELECT id FROM orders WHERE {filter} ORDER BY id"));
    let every = db.rows(&format!("SELECT id, {filter} FROM orders ORDER BY id"));
    let scanned: Vec<Vec<Value>> = every.into_iter().filter(|r| r[1] == Value::Bool(true)).map(|r| vec![r[0].clone()]).collect();
    assert_eq!(indexed, scanned, "{filter}");
    indexed
}

#[test]
fn a_query_whose_where_implies_the_condition_reads_the_partial_index() {
    let mut db = db();
    let q = "SELECT id FROM orders WHERE status = 'open' AND cust = 7";
    assert!(plan(&db, q).contains("INDEX PREFIX LOOKUP of ORDERS using OPEN_BY_CUST"), "{}", plan(&db, q));
    assert_eq!(same_as_scan(&mut db, "status = 'open' AND cust = 7"), ids(&[1, 4]));
    // The mirrored comparison is the same condition.
    let q = "SELECT id FROM orders WHERE 'open' = status AND cust = 8";
    assert!(plan(&db, q).contains("using OPEN_BY_CUST"), "{}", plan(&db, q));
    assert_eq!(same_as_scan(&mut db, "'open' = status AND cust = 8"), ids(&[3]));
    // With nothing to look up, the partial index is still worth reading whole: it holds
    // only rows the WHERE may keep.
    let q = "SELECT id FROM orders WHERE status = 'open'";
    assert!(plan(&db, q).contains("INDEX SCAN of ORDERS using OPEN_BY_CUST"), "{}", plan(&db, q));
    assert_eq!(same_as_scan(&mut db, "status = 'open'"), ids(&[1, 3, 4, 5]));
    // A boolean column as the condition.
    let q = "SELECT id FROM orders WHERE rush AND id > 1";
    assert!(plan(&db, q).contains("using RUSH_IDS"), "{}", plan(&db, q));
    assert_eq!(same_as_scan(&mut db, "rush AND id > 1"), ids(&[4, 6]));
}

#[test]
fn simple_consequences_of_the_where_count_as_implying_the_condition() {
    let mut db = db();
    // qty = 15 and qty >= 20 both give qty > 10.
    for (filter, want) in [("qty = 15", vec![3]), ("qty >= 20", vec![2]), ("qty > 10 AND qty < 13", vec![5]), ("11 <= qty", vec![2, 3, 5])]
    {
        let q = format!("SELECT id FROM orders WHERE {filter}");
        assert!(plan(&db, &q).contains("using BIG_QTY"), "{filter}: {}", plan(&db, &q));
        assert_eq!(same_as_scan(&mut db, filter), ids(&want), "{filter}");
    }
    // cust = 7 gives cust IS NOT NULL; qty > 1 gives 0 < qty.
    let q = "SELECT id FROM orders WHERE cust = 7 AND qty > 1";
    assert!(plan(&db, q).contains("using KNOWN_CUST"), "{}", plan(&db, q));
    assert_eq!(same_as_scan(&mut db, "cust = 7 AND qty > 1"), ids(&[1, 2]));
}

#[test]
fn a_query_that_does_not_imply_the_condition_never_reads_the_partial_index() {
    let mut db = db();
    for filter in [
        "cust = 7",
        "status = 'shipped' AND cust = 7",
        "status = 'open' OR cust = 7",
        "qty > 9",
        "qty >= 10",
        "qty = 10",
        "qty > ?",
        "NOT rush",
        "cust = 7 AND qty >= 0",
    ] {
        let q = format!("SELECT id FROM orders WHERE {filter}");
        let p = plan(&db, &q);
        for ix in ["OPEN_BY_CUST", "BIG_QTY", "RUSH_IDS", "KNOWN_CUST"] {
            assert!(!p.contains(ix), "{filter}: {p}");
        }
    }
    assert_eq!(same_as_scan(&mut db, "cust = 7"), ids(&[1, 2, 4]));
    assert_eq!(same_as_scan(&mut db, "qty > 9"), ids(&[2, 3, 5]));
    assert_eq!(same_as_scan(&mut db, "qty = 10"), ids(&[]));
    // ORDER BY alone never reads a partial index for its order: it would lose rows.
    let p = plan(&db, "SELECT id FROM orders ORDER BY qty");
    assert!(!p.contains("BIG_QTY"), "{p}");
    assert_eq!(db.rows("SELECT COUNT(*) FROM (SELECT id FROM orders ORDER BY qty) AS d"), ids(&[6]));
    // …unless the WHERE implies the condition.
    let p = plan(&db, "SELECT id FROM orders WHERE qty > 12 ORDER BY qty");
    assert!(p.contains("using BIG_QTY") && p.contains("index order, no sort"), "{p}");
    assert_eq!(db.rows("SELECT id FROM orders WHERE qty > 12 ORDER BY qty"), ids(&[3, 2]));
}

#[test]
fn writes_move_rows_into_and_out_of_the_partial_index() {
    let mut db = db();
    let open7 = "status = 'open' AND cust = 7";
    // An UPDATE found through the partial index that moves its rows out of it.
    let out = "UPDATE orders SET status = 'held' WHERE status = 'open' AND cust = 7";
    assert!(plan(&db, out).contains("using OPEN_BY_CUST"), "{}", plan(&db, out));
    assert_eq!(db.rows(out), ids(&[2]));
    assert_eq!(same_as_scan(&mut db, open7), ids(&[]));
    db.run("UPDATE orders SET status = 'open' WHERE status = 'held'");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[1, 4]));
    db.run("UPDATE orders SET status = 'open' WHERE id = 2");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[1, 2, 4]));
    db.run("UPDATE orders SET status = 'shipped' WHERE id = 1");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[2, 4]));
    db.run("UPDATE orders SET status = NULL WHERE id = 4");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[2]));
    db.run("UPDATE orders SET cust = 7 WHERE id = 3");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[2, 3]));
    db.run("DELETE FROM orders WHERE status = 'open' AND cust = 7 AND qty > 16");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[3]));
    db.run("UPSERT INTO orders VALUES (9, 7, 'open', 1, false)");
    db.run("UPSERT INTO orders VALUES (3, 7, 'lost', 1, false)");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[9]));
    assert_eq!(same_as_scan(&mut db, "qty > 10"), ids(&[5]));
    // A statement that fails after changing rows leaves the index as it was: qty / 0.
    let e = db.err("UPDATE orders SET status = 'open', qty = qty / (id - 5)");
    assert!(e.to_lowercase().contains("zero"), "{e}");
    assert_eq!(same_as_scan(&mut db, open7), ids(&[9]));
    assert_eq!(same_as_scan(&mut db, "status = 'open'"), ids(&[5, 9]));
}

#[test]
fn a_unique_partial_index_allows_duplicates_outside_its_condition() {
    let mut db = Db::new(
        "CREATE TABLE acct (id INTEGER NOT NULL PRIMARY KEY, email VARCHAR(40), active BOOLEAN);
         CREATE UNIQUE INDEX one_active_email ON acct (email) WHERE active;",
    );
    db.run("INSERT INTO acct VALUES (1, 'a@x', true), (2, 'a@x', false), (3, 'a@x', NULL), (4, 'b@x', true)");
    let e = db.err("INSERT INTO acct VALUES (5, 'a@x', true)");
    assert!(e.contains("UNIQUE \"ONE_ACTIVE_EMAIL\"") && e.contains("duplicate key (a@x)"), "{e}");
    let e = db.err("UPDATE acct SET active = true WHERE id = 2");
    assert!(e.contains("ONE_ACTIVE_EMAIL"), "{e}");
    db.run("UPDATE acct SET active = false WHERE id = 1");
    db.run("UPDATE acct SET active = true WHERE id = 2");
    let q = "SELECT id FROM acct WHERE active AND email = 'a@x'";
    assert!(plan(&db, q).contains("UNIQUE LOOKUP of ACCT using ONE_ACTIVE_EMAIL"), "{}", plan(&db, q));
    assert_eq!(db.rows(q), ids(&[2]));
    assert_eq!(db.rows("SELECT COUNT(*) FROM acct WHERE email = 'a@x'"), ids(&[3]));
    // Rows outside the condition never make a DELETE … ORDER BY unique.
    let e = db.err("DELETE FROM acct ORDER BY email LIMIT 1");
    assert!(e.contains("ORDER BY must name every column"), "{e}");
}

#[test]
fn conditions_that_storage_could_not_compute_the_same_way_are_refused() {
    let mut db = Db::new(
        "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, ts TIMESTAMP, v INTEGER); CREATE TABLE o (k INTEGER);
         CREATE VIEW tv (v, n) AS SELECT v, COUNT(*) FROM t GROUP BY v;",
    );
    let refused = |db: &mut Db, sql: &str| apply_ddl(&mut db.cat, sql, &NoFiles).unwrap_err().message;
    let e = refused(&mut db, "CREATE INDEX i1 ON t (v) WHERE ts < NOW");
    assert!(e.contains("WHERE of index I1 must give the same answer"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i2 ON t (v) WHERE v > ?");
    assert!(e.contains("same answer for a row every time"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i3 ON t (v) WHERE v IN (SELECT k FROM o)");
    assert!(e.contains("subquery"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i4 ON t (v) WHERE COUNT(v) > 1");
    assert!(e.contains("aggregate"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i5 ON t (v) WHERE v + 1");
    assert!(e.contains("must be a condition"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i6 ON t (v) WHERE o.k > 1");
    assert!(e.to_lowercase().contains("o.k") || e.to_lowercase().contains("unknown"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i7 ON t (v) WHERE");
    assert!(e.contains("expected WHERE followed by a condition"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i8 ON t (v) WHERE v > 1 ORDER BY v");
    assert!(e.contains("expected WHERE followed by a condition"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i9 ON tv (v) WHERE n > 1");
    assert!(e.contains("cannot be partial"), "{e}");
    assert!(db.cat.table("t").is_some_and(|t| t.indexes.len() == 1), "nothing was added");
    db.run("INSERT INTO t VALUES (1, NULL, 2)");
}

#[test]
fn schema_changes_keep_partial_indexes_right() {
    let mut db = db();
    let ddl = |db: &mut Db, sql: &str| {
        apply_ddl(&mut db.cat, sql, &NoFiles).map(|_| ()).and_then(|_| db.part.apply_schema(&db.cat, &HashRing::new(1)))
    };
    // A unique partial index over existing rows is checked against the passing rows only.
    let e = ddl(&mut db, "CREATE UNIQUE INDEX one_open ON orders (cust) WHERE status = 'open'").unwrap_err();
    assert!(e.message.contains("duplicate key (7)"), "{}", e.message);
    db.cat = Db::new(DDL).cat;
    db.part.apply_schema(&db.cat, &HashRing::new(1)).unwrap();
    ddl(&mut db, "CREATE UNIQUE INDEX one_shipped ON orders (cust) WHERE status = 'shipped'").unwrap();
    // Adding a column moves the hidden flags along; the new column may be in a new one.
    ddl(&mut db, "ALTER TABLE orders ADD COLUMN note VARCHAR(10) DEFAULT 'x'").unwrap();
    ddl(&mut db, "CREATE INDEX noted ON orders (id) WHERE note <> 'x'").unwrap();
    db.run("UPDATE orders SET note = 'y' WHERE id IN (2, 5)");
    assert!(plan(&db, "SELECT id FROM orders WHERE note <> 'x'").contains("using NOTED"));
    assert_eq!(same_as_scan(&mut db, "note <> 'x'"), ids(&[2, 5]));
    assert_eq!(same_as_scan(&mut db, "status = 'open' AND cust = 7"), ids(&[1, 4]));
    // Dropping one partial index renumbers the others' flags.
    ddl(&mut db, "DROP INDEX open_by_cust").unwrap();
    assert_eq!(same_as_scan(&mut db, "qty > 10"), ids(&[2, 3, 5]));
    assert_eq!(same_as_scan(&mut db, "rush"), ids(&[1, 4, 6]));
    assert_eq!(same_as_scan(&mut db, "note <> 'x'"), ids(&[2, 5]));
    assert!(db.err("INSERT INTO orders VALUES (10, 7, 'shipped', 1, false, 'z')").contains("ONE_SHIPPED"));
}

#[test]
fn partial_indexes_answer_alike_across_partitions() {
    let ddl = "CREATE TABLE p (id INTEGER NOT NULL PRIMARY KEY, grp INTEGER, hot BOOLEAN);
               PARTITION TABLE p ON COLUMN id;
               CREATE INDEX p_hot ON p (grp) WHERE hot;
               CREATE TABLE g (grp INTEGER NOT NULL PRIMARY KEY, label VARCHAR(10));";
    let one = Db::new(ddl);
    let q = "SELECT COUNT(*) FROM p WHERE hot AND grp = 1";
    assert!(plan(&one, q).contains("INDEX PREFIX LOOKUP of P using P_HOT"), "{}", plan(&one, q));
    let mut sites = LocalSites::new(3, &one.cat).unwrap();
    let mut run = |sql: &str| {
        let p = Arc::new(prepare(&one.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
        execute_mp(&p, &[], &ctx(), &mut sites).unwrap_or_else(|e| panic!("{sql}: {e}")).rows
    };
    for id in 0..30 {
        run(&format!("INSERT INTO p VALUES ({id}, {}, {})", id % 3, id % 2 == 0));
    }
    run("INSERT INTO g VALUES (0, 'zero'), (1, 'one')");
    assert_eq!(run("SELECT COUNT(*) FROM p WHERE hot AND grp = 1"), ids(&[5]));
    assert_eq!(run("SELECT COUNT(*) FROM p WHERE grp = 1"), ids(&[10]));
    let q = "SELECT g.label, COUNT(*) FROM g JOIN p ON p.grp = g.grp WHERE p.hot GROUP BY g.label ORDER BY g.label";
    assert!(plan(&one, q).contains("using P_HOT"), "{}", plan(&one, q));
    assert_eq!(run(q), vec![vec![crate::tests_sql::s("one"), i(5)], vec![crate::tests_sql::s("zero"), i(5)]]);
    let q = "SELECT g.label, COUNT(*) FROM g JOIN p ON p.grp = g.grp GROUP BY g.label ORDER BY g.label";
    assert!(!plan(&one, q).contains("P_HOT"), "{}", plan(&one, q));
    assert_eq!(run(q), vec![vec![crate::tests_sql::s("one"), i(10)], vec![crate::tests_sql::s("zero"), i(10)]]);
    assert_eq!(run("SELECT id FROM p WHERE hot AND grp = 2 ORDER BY id LIMIT 3"), ids(&[2, 8, 14]));
}

#[test]
fn views_and_ttl_statements_over_a_table_with_a_partial_index_see_every_row() {
    let mut db = Db::new(
        "CREATE TABLE ev (id INTEGER NOT NULL PRIMARY KEY, kind INTEGER, ts TIMESTAMP, v INTEGER);
         CREATE INDEX hot_kind ON ev (kind, v) WHERE v > 100;
         CREATE INDEX hot_ts ON ev (ts) WHERE v > 100;
         CREATE VIEW by_kind (kind, n, lo, hi) AS SELECT kind, COUNT(*), MIN(v), MAX(v) FROM ev GROUP BY kind;",
    );
    db.run(
        "INSERT INTO ev VALUES (1, 1, '2024-01-01 00:00:00', 5), (2, 1, '2024-01-02 00:00:00', 500),
            (3, 1, '2024-01-03 00:00:00', 7), (4, 2, '2024-01-04 00:00:00', 200)",
    );
    // Deleting a group's extreme makes the view recount it from the source's rows: every
    // row of the group, not only those the partial index on (kind, v) holds.
    db.run("DELETE FROM ev WHERE id = 2");
    assert_eq!(db.rows("SELECT n, lo, hi FROM by_kind WHERE kind = 1"), vec![vec![i(2), i(5), i(7)]]);
    db.run("DELETE FROM ev WHERE id = 1");
    assert_eq!(db.rows("SELECT n, lo, hi FROM by_kind WHERE kind = 1"), vec![vec![i(1), i(7), i(7)]]);
    // The statements TTL runs (crates/engine/src/ttl.rs) read the oldest rows in order of
    // the TTL column and delete up to a cutoff: the partial index on ts lacks rows, so
    // neither may read it.
    let oldest = "SELECT ts AS t FROM ev WHERE ts < '2024-02-01 00:00:00' ORDER BY ts LIMIT 10";
    assert!(!plan(&db, oldest).contains("HOT_TS"), "{}", plan(&db, oldest));
    assert_eq!(db.rows(oldest).len(), 2);
    db.run("DELETE FROM ev WHERE ts <= '2024-02-01 00:00:00'");
    assert_eq!(db.rows("SELECT COUNT(*) FROM ev"), ids(&[0]));
    assert!(db.rows("SELECT kind FROM by_kind").is_empty());
}
