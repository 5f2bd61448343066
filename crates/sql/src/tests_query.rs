//! Tests of the query forms that VoltDB applications and SQL users expect beyond single
//! SELECTs: trailing commas and DESC index columns, parenthesised joins, set operations,
//! subqueries, derived tables and plain views. Expected answers follow SQL's semantics (as
//! PostgreSQL 15 and SQLite give them), worked out by hand in the comments.

use lockstep_core::Value;

use crate::tests_sql::{company, i, s, Db};

fn ids(v: &[i64]) -> Vec<Vec<Value>> {
    v.iter().map(|&x| vec![i(x)]).collect()
}

#[test]
fn desc_index_columns_serve_both_orders() {
    let mut db = Db::new(
        "CREATE TABLE t (id INTEGER NOT NULL, v INTEGER, PRIMARY KEY (id),);
         CREATE INDEX t_v ON t (v DESC);",
    );
    db.run("INSERT INTO t VALUES (1, 30), (2, NULL), (3, 10), (4, 20)");
    // NULL sorts first ascending (VoltDB's order), last descending.
    assert_eq!(db.rows("SELECT id FROM t ORDER BY v DESC"), ids(&[1, 4, 3, 2]));
    assert_eq!(db.rows("SELECT id FROM t ORDER BY v"), ids(&[2, 3, 4, 1]));
    assert_eq!(db.rows("SELECT id FROM t WHERE v > 10 ORDER BY v DESC LIMIT 1"), ids(&[1]));
}

#[test]
fn parenthesised_joins_are_laid_out_in_line() {
    let mut db = company();
    // 5 employees × 3 departments.
    assert_eq!(db.rows("SELECT COUNT(*) FROM (emp CROSS JOIN dept)"), ids(&[15]));
    assert_eq!(
        db.rows("SELECT e.id, d.title FROM (emp e JOIN dept d ON e.dept = d.id) WHERE e.salary > 120 ORDER BY e.id"),
        vec![vec![i(2), s("eng")], vec![i(3), s("ops")]]
    );
    // The outer ON lands where both sides are joined.
    assert_eq!(
        db.rows("SELECT x.id, d.id FROM emp x JOIN (dept d) ON x.dept = d.id WHERE x.id < 3 ORDER BY x.id"),
        vec![vec![i(1), i(10)], vec![i(2), i(10)]]
    );
    assert_eq!(db.rows("SELECT COUNT(*) FROM dept d2 JOIN (emp e CROSS JOIN dept d) ON d2.id = d.id AND e.dept = d.id"), ids(&[4]));
    assert!(db.err("SELECT * FROM dept d LEFT JOIN (emp e JOIN dept d2 ON e.dept = d2.id) ON e.dept = d.id").contains("LEFT JOIN"));
}
