//! Expression indexes: keys computed from the row (`FIELD(doc, 'k')`, `a + b`, `ABS(x)`,
//! `SUBSTRING(s, 1, 3)`), kept up to date by every write, enforcing UNIQUE, and used by the
//! planner when a query compares the same expression (checked through `@Explain`'s text, so
//! these tests fail if the planner stops using the index).

use std::sync::Arc;

use lockstep_core::{HashRing, Value};

use crate::testing::LocalSites;
use crate::tests_sql::{ctx, i, s, Db, NoFiles};
use crate::{apply_ddl, execute_mp, explain, prepare};

const DDL: &str = "
CREATE TABLE t (id INTEGER NOT NULL, a INTEGER, b INTEGER, x INTEGER, name VARCHAR(20), doc VARCHAR(200), PRIMARY KEY (id));
CREATE INDEX t_color ON t (FIELD(doc, 'color'));
CREATE INDEX t_sum ON t (a + b DESC);
CREATE INDEX t_abs ON t (ABS(x));
CREATE INDEX t_prefix_a ON t (SUBSTRING(name, 1, 3), a);
";

fn ids(v: &[i64]) -> Vec<Vec<Value>> {
    v.iter().map(|&x| vec![i(x)]).collect()
}

fn db() -> Db {
    let mut db = Db::new(DDL);
    db.run(
        "INSERT INTO t VALUES
            (1, 1, 2, -5, 'alpha', '{\"color\":\"red\"}'),
            (2, 4, 4, 3, 'alpine', '{\"color\":\"blue\"}'),
            (3, 2, 1, 0, 'beta', '{\"color\":\"red\"}'),
            (4, NULL, 1, NULL, NULL, NULL),
            (5, 10, -1, -7, 'alpha', '{\"size\":3}')",
    );
    db
}

fn plan(db: &Db, sql: &str) -> String {
    explain(&prepare(&db.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")))
}

#[test]
fn equality_on_an_indexed_expression_uses_the_index() {
    let mut db = db();
    let q = "SELECT id FROM t WHERE FIELD(doc, 'color') = 'red' ORDER BY id";
    assert!(plan(&db, q).contains("using T_COLOR"), "{}", plan(&db, q));
    assert_eq!(db.rows(q), ids(&[1, 3]));
    // The mirrored comparison finds the same index.
    let q = "SELECT id FROM t WHERE 'blue' = FIELD(doc, 'color')";
    assert!(plan(&db, q).contains("using T_COLOR"), "{}", plan(&db, q));
    assert_eq!(db.rows(q), ids(&[2]));
    // A different expression does not.
    assert!(plan(&db, "SELECT id FROM t WHERE FIELD(doc, 'size') = '3'").contains("SEQUENTIAL SCAN"));
}

#[test]
fn ranges_and_order_by_read_the_expression_index() {
    let mut db = db();
    // a + b: 3, 8, 3, NULL, 9.
    let q = "SELECT id FROM t WHERE a + b > 3 ORDER BY id";
    assert!(plan(&db, q).contains("INDEX SCAN of T using T_SUM"), "{}", plan(&db, q));
    assert_eq!(db.rows(q), ids(&[2, 5]));
    let q = "SELECT id FROM t WHERE a + b >= 3 AND a + b < 9 ORDER BY a + b DESC, id";
    assert_eq!(db.rows(q), ids(&[2, 1, 3]));
    // ABS(x): 5, 3, 0, NULL, 7; the index order is the ORDER BY's.
    let q = "SELECT id FROM t WHERE ABS(x) >= 0 ORDER BY ABS(x)";
    let p = plan(&db, q);
    assert!(p.contains("using T_ABS") && p.contains("index order, no sort"), "{p}");
    assert_eq!(db.rows(q), ids(&[3, 2, 1, 5]));
    let q = "SELECT id FROM t ORDER BY ABS(x) DESC LIMIT 2";
    let p = plan(&db, q);
    assert!(p.contains("REVERSE SCAN of T using T_ABS") && p.contains("index order, no sort"), "{p}");
    assert_eq!(db.rows(q), ids(&[5, 1]));
}

#[test]
fn an_index_mixing_an_expression_and_a_column_serves_both() {
    let mut db = db();
    let q = "SELECT id FROM t WHERE SUBSTRING(name, 1, 3) = 'alp' AND a = 4";
    let p = plan(&db, q);
    assert!(p.contains("INDEX PREFIX LOOKUP of T using T_PREFIX_A (2 key columns)"), "{p}");
    assert_eq!(db.rows(q), ids(&[2]));
    let q = "SELECT id FROM t WHERE SUBSTRING(name, 1, 3) = 'alp' AND a > 1 ORDER BY id";
    assert!(plan(&db, q).contains("using T_PREFIX_A (1 equality columns, lower bound)"), "{}", plan(&db, q));
    assert_eq!(db.rows(q), ids(&[2, 5]));
}

#[test]
fn writes_keep_expression_keys_current() {
    let mut db = Db::new(&format!(
        "{DDL}; CREATE VIEW by_color (color, n) AS SELECT FIELD(doc, 'color'), COUNT(*) FROM t GROUP BY FIELD(doc, 'color');"
    ));
    db.run(
        "INSERT INTO t VALUES
            (1, 1, 2, -5, 'alpha', '{\"color\":\"red\"}'),
            (2, 4, 4, 3, 'alpine', '{\"color\":\"blue\"}'),
            (3, 2, 1, 0, 'beta', '{\"color\":\"red\"}'),
            (4, NULL, 1, NULL, NULL, NULL),
            (5, 10, -1, -7, 'alpha', '{\"size\":3}')",
    );
    let red = "SELECT id FROM t WHERE FIELD(doc, 'color') = 'red' ORDER BY id";
    db.run("UPDATE t SET doc = '{\"color\":\"green\"}' WHERE id = 1");
    assert_eq!(db.rows(red), ids(&[3]));
    assert_eq!(db.rows("SELECT id FROM t WHERE FIELD(doc, 'color') = 'green'"), ids(&[1]));
    db.run("UPDATE t SET a = 100 WHERE id = 3");
    assert_eq!(db.rows("SELECT id FROM t WHERE a + b = 101"), ids(&[3]));
    assert_eq!(db.rows("SELECT COUNT(*) FROM t WHERE a + b = 3"), ids(&[1]));
    db.run("DELETE FROM t WHERE FIELD(doc, 'color') = 'red'");
    assert_eq!(db.rows(red), ids(&[]));
    assert_eq!(db.rows("SELECT COUNT(*) FROM t"), ids(&[4]));
    db.run("UPSERT INTO t VALUES (2, 0, 0, 0, 'zed', '{\"color\":\"red\"}')");
    assert_eq!(db.rows(red), ids(&[2]));
    assert_eq!(db.rows("SELECT id FROM t WHERE SUBSTRING(name, 1, 3) = 'zed'"), ids(&[2]));
    // A view of the same table follows the same writes.
    assert_eq!(db.rows("SELECT n FROM by_color WHERE color = 'red'"), ids(&[1]));
    assert_eq!(db.rows("SELECT n FROM by_color WHERE color = 'green'"), ids(&[1]));
    // A key that cannot be computed refuses the row.
    let e = db.err("INSERT INTO t VALUES (9, 0, 0, 0, 'x', 'not json')");
    assert!(e.contains("not valid JSON") && e.contains("T_COLOR"), "{e}");
}

#[test]
fn a_unique_expression_index_refuses_duplicates_and_leaves_nothing_behind() {
    let mut db = Db::new(
        "CREATE TABLE u (id INTEGER NOT NULL PRIMARY KEY, email VARCHAR(40));
         CREATE UNIQUE INDEX u_email ON u (LOWER(email));",
    );
    db.run("INSERT INTO u VALUES (1, 'Ann@x.org'), (2, 'bob@x.org'), (3, NULL), (4, NULL)");
    let e = db.err("INSERT INTO u VALUES (5, 'ANN@X.ORG')");
    assert!(e.contains("UNIQUE \"U_EMAIL\"") && e.contains("duplicate key (ann@x.org)"), "{e}");
    let e = db.err("UPDATE u SET email = 'BOB@x.org' WHERE id = 1");
    assert!(e.contains("U_EMAIL"), "{e}");
    // The failed statements changed nothing, and the index still finds every row.
    assert_eq!(db.rows("SELECT id FROM u WHERE LOWER(email) = 'ann@x.org'"), ids(&[1]));
    assert_eq!(db.rows("SELECT id FROM u WHERE LOWER(email) = 'bob@x.org'"), ids(&[2]));
    assert!(plan(&db, "SELECT id FROM u WHERE LOWER(email) = 'bob@x.org'").contains("UNIQUE LOOKUP of U using U_EMAIL"));
    db.run("UPDATE u SET email = 'carl@x.org' WHERE id = 1");
    db.run("INSERT INTO u VALUES (5, 'ANN@X.ORG')");
    assert_eq!(db.rows("SELECT id FROM u WHERE LOWER(email) = 'ann@x.org'"), ids(&[5]));
}

#[test]
fn creating_and_dropping_indexes_over_rows_rebuilds_the_hidden_keys() {
    let mut db = db();
    let ddl = |db: &mut Db, sql: &str| {
        apply_ddl(&mut db.cat, sql, &NoFiles).map(|_| ()).and_then(|_| db.part.apply_schema(&db.cat, &HashRing::new(1)))
    };
    // Rows exist: the new index is built from them, and refused when they break it.
    let e = ddl(&mut db, "CREATE UNIQUE INDEX t_c ON t (FIELD(doc, 'color'))").unwrap_err();
    assert!(e.message.contains("duplicate key (red)"), "{}", e.message);
    db.cat = Db::new(DDL).cat;
    db.part.apply_schema(&db.cat, &HashRing::new(1)).unwrap();
    // Dropping the first expression index renumbers the others' hidden keys.
    ddl(&mut db, "DROP INDEX t_color").unwrap();
    ddl(&mut db, "ALTER TABLE t ADD COLUMN extra INTEGER DEFAULT 7").unwrap();
    ddl(&mut db, "CREATE INDEX t_mul ON t (x * extra)").unwrap();
    assert_eq!(db.rows("SELECT id FROM t WHERE a + b = 8"), ids(&[2]));
    assert_eq!(db.rows("SELECT id FROM t WHERE x * extra = -35"), ids(&[1]));
    assert!(plan(&db, "SELECT id FROM t WHERE x * extra = -35").contains("using T_MUL"));
    assert_eq!(db.rows("SELECT id FROM t WHERE ABS(x) = 7"), ids(&[5]));
    assert_eq!(db.rows("SELECT id, extra FROM t WHERE SUBSTRING(name, 1, 3) = 'bet'"), vec![vec![i(3), i(7)]]);
}

#[test]
fn keys_that_are_not_deterministic_or_not_of_the_row_are_refused() {
    let mut db = Db::new("CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, ts TIMESTAMP, v INTEGER); CREATE TABLE o (k INTEGER);");
    let refused = |db: &mut Db, sql: &str| apply_ddl(&mut db.cat, sql, &NoFiles).unwrap_err().message;
    let e = refused(&mut db, "CREATE INDEX i1 ON t (SINCE_EPOCH(SECOND, NOW) - SINCE_EPOCH(SECOND, ts))");
    assert!(e.contains("same answer for a row every time"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i2 ON t (COUNT(v))");
    assert!(e.contains("aggregate"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i3 ON t ((SELECT MAX(k) FROM o))");
    assert!(e.contains("subquery"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i4 ON t (v + o.k)");
    assert!(e.contains("o.k") || e.to_lowercase().contains("unknown"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i5 ON t (v + ?)");
    assert!(e.contains("same answer for a row every time"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i6 ON t (1 + 2)");
    assert!(e.contains("reads no column"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i7 ON t (v + 1, v + 1)");
    assert!(e.contains("appears twice"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i8 ON t (v + 1) WHERE ts < NOW");
    assert!(e.contains("WHERE of index I8 must give the same answer"), "{e}");
    let e = refused(&mut db, "CREATE INDEX i9 ON t (RANDOM())");
    assert!(e.to_lowercase().contains("random"), "{e}");
    // Nothing was added.
    assert!(db.cat.table("t").is_some_and(|t| t.indexes.len() == 1));
    db.run("INSERT INTO t VALUES (1, NULL, 2)");
}

#[test]
fn expression_indexes_answer_alike_across_partitions() {
    let ddl = "CREATE TABLE p (id INTEGER NOT NULL PRIMARY KEY, doc VARCHAR(100));
               PARTITION TABLE p ON COLUMN id;
               CREATE INDEX p_kind ON p (FIELD(doc, 'kind'));
               CREATE TABLE k (kind VARCHAR(10) NOT NULL PRIMARY KEY, label VARCHAR(10));";
    let one = Db::new(ddl);
    let mut sites = LocalSites::new(3, &one.cat).unwrap();
    let mut run = |sql: &str| {
        let p = Arc::new(prepare(&one.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
        execute_mp(&p, &[], &ctx(), &mut sites).unwrap_or_else(|e| panic!("{sql}: {e}")).rows
    };
    for id in 0..30 {
        let kind = ["a", "b", "c"][id % 3];
        run(&format!("INSERT INTO p VALUES ({id}, '{{\"kind\":\"{kind}\"}}')"));
    }
    run("INSERT INTO k VALUES ('a', 'first'), ('b', 'second')");
    assert_eq!(run("SELECT COUNT(*) FROM p WHERE FIELD(doc, 'kind') = 'b'"), ids(&[10]));
    // A join probing the expression index (at the coordinator, over gathered rows).
    let q = "SELECT k.label, COUNT(*) FROM k JOIN p ON FIELD(p.doc, 'kind') = k.kind GROUP BY k.label ORDER BY k.label";
    assert_eq!(run(q), vec![vec![s("first"), i(10)], vec![s("second"), i(10)]]);
    let q = "SELECT id FROM p WHERE FIELD(doc, 'kind') IN (SELECT kind FROM k WHERE label = 'first') ORDER BY id LIMIT 3";
    assert_eq!(run(q), ids(&[0, 3, 6]));
    // Ordered by the indexed expression across partitions (each partition reads its index
    // in order; the answer is merged), with a range on it.
    let q = "SELECT FIELD(doc, 'kind'), id FROM p WHERE FIELD(doc, 'kind') >= 'b' ORDER BY FIELD(doc, 'kind') DESC, id LIMIT 3";
    assert_eq!(run(q), vec![vec![s("c"), i(2)], vec![s("c"), i(5)], vec![s("c"), i(8)]]);
    let q = "SELECT id FROM p ORDER BY FIELD(doc, 'kind') DESC LIMIT 12";
    let got: Vec<i64> = run(q).iter().map(|r| r[0].as_i64().unwrap_or(-1)).collect();
    assert!(got[..10].iter().all(|id| id % 3 == 2) && got[10..].iter().all(|id| id % 3 == 1), "{got:?}");
}
