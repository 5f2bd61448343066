//! Tests of the query forms that VoltDB applications and SQL users expect beyond single
//! SELECTs: trailing commas and DESC index columns, parenthesised joins, set operations,
//! subqueries, derived tables and plain views. Expected answers follow SQL's semantics (as
//! PostgreSQL 15 and SQLite give them), worked out by hand in the comments.

use lockstep_core::Value;

use crate::tests_sql::{company, dec, i, s, Db, N};
use crate::Route;

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

/// `company()`'s rows, for reading the expected answers below:
/// emp (id, name, dept, salary, bonus): (1 ann 10 100 1.5) (2 bob 10 200 NULL)
/// (3 cy 20 150 2.25) (4 di NULL 50 NULL) (5 ed 20 NULL 0.5);
/// dept (id, title): (10 eng) (20 ops) (30 hr).
#[test]
fn set_operations_treat_nulls_as_duplicates() {
    let mut db = company();
    let rows = |v: Vec<Value>| v.into_iter().map(|x| vec![x]).collect::<Vec<_>>();
    // emp.dept is {10, 10, 20, NULL, 20}; dept.id is {10, 20, 30}.
    assert_eq!(db.rows("SELECT dept FROM emp UNION SELECT id FROM dept ORDER BY 1"), rows(vec![N, i(10), i(20), i(30)]));
    assert_eq!(db.rows("SELECT dept FROM emp UNION ALL SELECT id FROM dept ORDER BY 1 DESC LIMIT 4"), ids(&[30, 20, 20, 20]));
    assert_eq!(db.rows("SELECT dept FROM emp INTERSECT SELECT id FROM dept ORDER BY 1"), ids(&[10, 20]));
    // Only the NULL is on the left alone: EXCEPT keeps it (NULL equals NULL here).
    assert_eq!(db.rows("SELECT dept FROM emp EXCEPT SELECT id FROM dept"), rows(vec![N]));
    assert_eq!(db.rows("SELECT id FROM dept EXCEPT SELECT dept FROM emp"), ids(&[30]));
    assert_eq!(db.rows("SELECT dept FROM emp INTERSECT SELECT NULL FROM dept"), rows(vec![N]));
    // ALL counts: 10 is twice on the left and once on the right.
    assert_eq!(db.rows("SELECT dept FROM emp INTERSECT ALL SELECT id FROM dept ORDER BY 1"), ids(&[10, 20]));
    assert_eq!(db.rows("SELECT dept FROM emp EXCEPT ALL SELECT id FROM dept ORDER BY 1"), rows(vec![N, i(10), i(20)]));
    assert_eq!(
        db.rows("SELECT dept FROM emp WHERE dept = 10 INTERSECT ALL SELECT dept FROM emp WHERE id IN (1, 2, 3) ORDER BY 1"),
        ids(&[10, 10])
    );
    // ORDER BY, LIMIT and OFFSET apply to the whole; the names are the left side's.
    let t = db.run("SELECT dept, salary FROM emp WHERE id < 3 UNION ALL SELECT id, NULL FROM dept ORDER BY 1, 2 LIMIT 3 OFFSET 1");
    assert_eq!(t.rows, vec![vec![i(10), i(100)], vec![i(10), i(200)], vec![i(20), N]]);
    assert_eq!(t.columns[0].name, "DEPT".into());
    assert_eq!(
        db.rows("SELECT name FROM emp WHERE id = 1 UNION SELECT title FROM dept ORDER BY name"),
        rows(vec![s("ann"), s("eng"), s("hr"), s("ops")])
    );
    // INTERSECT binds tighter than UNION; parentheses group.
    assert_eq!(db.rows("SELECT 1 FROM dept UNION SELECT 2 FROM dept INTERSECT SELECT 3 FROM dept"), ids(&[1]));
    assert_eq!(db.rows("(SELECT 1 FROM dept UNION SELECT 2 FROM dept) EXCEPT SELECT 1 FROM dept"), ids(&[2]));
    // Numbers of different types are one type in the answer: 1 and 1.0 are duplicates.
    assert_eq!(db.rows("SELECT bonus FROM emp WHERE id = 1 UNION SELECT 1.5 FROM dept"), rows(vec![dec("1.5")]));
    assert_eq!(db.rows("SELECT id FROM emp WHERE id = 1 UNION SELECT CAST(1 AS FLOAT) FROM dept"), rows(vec![Value::Float(1.0)]));
    assert!(db.err("SELECT id, name FROM emp UNION SELECT id FROM dept").contains("as many columns"));
    assert!(db.err("SELECT id FROM emp UNION SELECT title FROM dept").contains("column 1 of UNION is INTEGER on the left and VARCHAR"));
    assert!(db.err("SELECT id FROM emp UNION SELECT id FROM dept ORDER BY 3").contains("ORDER BY position 3"));
    // A grouped side leaves nothing behind for the next one.
    assert_eq!(
        db.rows("SELECT dept, COUNT(*) FROM emp WHERE dept > 10 GROUP BY dept UNION ALL SELECT id, 1 FROM dept WHERE id < 20 ORDER BY 1"),
        vec![vec![i(10), i(1)], vec![i(20), i(2)]]
    );
    // Parameters reach every side.
    let p = db.try_run("SELECT id FROM emp WHERE id = ? UNION SELECT id FROM dept WHERE id = ? ORDER BY 1", &[i(2), i(20)]).unwrap();
    assert_eq!(p.rows, ids(&[2, 20]));
}

#[test]
fn in_and_not_in_follow_sql_null_rules() {
    let mut db = company();
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept IN (SELECT id FROM dept WHERE title <> 'hr') ORDER BY id"), ids(&[1, 2, 3, 5]));
    // di's NULL dept is NOT IN nothing it can tell: unknown, so not kept.
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept NOT IN (SELECT id FROM dept WHERE title = 'hr') ORDER BY id"), ids(&[1, 2, 3, 5]));
    // A NULL in the set makes NOT IN unknown for every value not found.
    assert_eq!(db.rows("SELECT id FROM dept WHERE id NOT IN (SELECT dept FROM emp)"), ids(&[]));
    assert_eq!(db.rows("SELECT id FROM dept WHERE id NOT IN (SELECT dept FROM emp WHERE dept IS NOT NULL)"), ids(&[30]));
    // Over an empty set NOT IN is true and IN false, even for NULL.
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept NOT IN (SELECT id FROM dept WHERE id > 100) ORDER BY id"), ids(&[1, 2, 3, 4, 5]));
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept IN (SELECT id FROM dept WHERE id > 100)"), ids(&[]));
    assert_eq!(
        db.rows(
            "SELECT NULL IN (SELECT id FROM dept), NULL IN (SELECT id FROM dept WHERE id > 99), 10 IN (SELECT dept FROM emp), \
             30 IN (SELECT dept FROM emp), 30 NOT IN (SELECT dept FROM emp)"
        ),
        vec![vec![N, Value::Bool(false), Value::Bool(true), N, N]]
    );
    // Comparison across types (INTEGER against DECIMAL) compares values.
    assert_eq!(db.rows("SELECT id FROM emp WHERE id IN (SELECT bonus * 2 FROM emp) ORDER BY id"), ids(&[1, 3]));
    // Set operations as the subquery, and a parameter on the left.
    assert_eq!(
        db.try_run("SELECT ? IN (SELECT id FROM dept UNION SELECT dept FROM emp)", &[i(30)]).unwrap().rows,
        vec![vec![Value::Bool(true)]]
    );
    assert!(db.err("SELECT id FROM emp WHERE id IN (SELECT id, title FROM dept)").contains("one column"));
    assert!(db.err("SELECT id FROM emp WHERE name IN (SELECT id FROM dept)").contains("cannot compare"));
}

/// Salaries are {100, 200, 150, 50, NULL}.
#[test]
fn any_and_all_comparisons_follow_sql_null_rules() {
    let mut db = company();
    assert_eq!(db.rows("SELECT id FROM dept WHERE id * 10 > ALL (SELECT salary FROM emp WHERE salary IS NOT NULL)"), ids(&[30]));
    // 300 > NULL is unknown, so 300 > ALL is unknown.
    assert_eq!(db.rows("SELECT id FROM dept WHERE id * 10 > ALL (SELECT salary FROM emp)"), ids(&[]));
    assert_eq!(db.rows("SELECT id FROM dept WHERE id * 10 = ANY (SELECT salary FROM emp) ORDER BY id"), ids(&[10, 20]));
    assert_eq!(db.rows("SELECT id FROM dept WHERE NOT (id * 10 = ANY (SELECT salary FROM emp))"), ids(&[]));
    // Over no rows ALL is true and ANY false.
    assert_eq!(db.rows("SELECT id FROM dept WHERE id * 10 < ALL (SELECT salary FROM emp WHERE id > 99) ORDER BY id"), ids(&[10, 20, 30]));
    assert_eq!(db.rows("SELECT id FROM dept WHERE id = ANY (SELECT salary FROM emp WHERE id > 99)"), ids(&[]));
    assert_eq!(db.rows("SELECT id FROM dept WHERE id * 10 > SOME (SELECT salary FROM emp WHERE dept = 10) ORDER BY id"), ids(&[20, 30]));
    // <> ALL is NOT IN.
    assert_eq!(db.rows("SELECT id FROM dept WHERE id <> ALL (SELECT dept FROM emp)"), ids(&[]));
    assert_eq!(
        db.rows("SELECT id FROM dept d WHERE 150 <= ANY (SELECT salary FROM emp e WHERE e.dept = d.id) ORDER BY id"),
        ids(&[10, 20])
    );
    assert!(db.err("SELECT id FROM dept WHERE id > ALL (SELECT id, title FROM dept)").contains("one column"));
}

#[test]
fn exists_and_scalar_subqueries_in_where_select_and_having() {
    let mut db = company();
    assert_eq!(
        db.rows("SELECT id, (SELECT MAX(salary) FROM emp) FROM dept ORDER BY id"),
        vec![vec![i(10), i(200)], vec![i(20), i(200)], vec![i(30), i(200)]]
    );
    assert_eq!(db.rows("SELECT id FROM emp WHERE salary > (SELECT AVG(salary) FROM emp) ORDER BY id"), ids(&[2, 3]));
    assert_eq!(
        db.rows(
            "SELECT dept, COUNT(*) FROM emp GROUP BY dept HAVING COUNT(*) >= (SELECT COUNT(*) FROM dept WHERE id = 10) * 2 ORDER BY dept"
        ),
        vec![vec![i(10), i(2)], vec![i(20), i(2)]]
    );
    // No row is NULL; more than one is an error.
    assert_eq!(db.rows("SELECT (SELECT title FROM dept WHERE id = 99)"), vec![vec![N]]);
    assert!(db.err("SELECT (SELECT title FROM dept)").contains("returned 3 rows"));
    assert_eq!(db.rows("SELECT id FROM dept WHERE EXISTS (SELECT 1 FROM emp WHERE salary > 180)"), ids(&[10, 20, 30]));
    assert_eq!(db.rows("SELECT id FROM dept WHERE NOT EXISTS (SELECT 1 FROM emp WHERE salary > 180)"), ids(&[]));
    // The subquery's answer may be a key the index looks up.
    assert_eq!(db.rows("SELECT name FROM emp WHERE id = (SELECT MIN(id) + 1 FROM dept WHERE id > 15) - 19"), vec![vec![s("bob")]]);
    assert!(db.err("SELECT (SELECT id, title FROM dept WHERE id = 10)").contains("one column"));
    assert!(db.err("INSERT INTO dept VALUES ((SELECT MAX(id) FROM dept) + 1, 'x')").contains("use INSERT … SELECT"));
    // INSERT … SELECT reads everything before it writes.
    let n = db.run(
        "INSERT INTO dept SELECT id + 100, name FROM emp WHERE dept IN (SELECT id FROM dept WHERE title = 'ops') UNION SELECT 99, 'new'",
    );
    assert_eq!(n.rows, vec![vec![i(3)]]);
    assert_eq!(db.rows("SELECT id FROM dept WHERE id > 30 ORDER BY id"), ids(&[99, 103, 105]));
}

#[test]
fn correlated_subqueries_run_per_outer_row() {
    let mut db = company();
    assert_eq!(
        db.rows("SELECT id, (SELECT title FROM dept WHERE dept.id = emp.dept) FROM emp ORDER BY id"),
        vec![vec![i(1), s("eng")], vec![i(2), s("eng")], vec![i(3), s("ops")], vec![i(4), N], vec![i(5), s("ops")]]
    );
    assert_eq!(
        db.rows("SELECT id FROM dept d WHERE EXISTS (SELECT 1 FROM emp e WHERE e.dept = d.id AND e.salary > 120) ORDER BY id"),
        ids(&[10, 20])
    );
    assert_eq!(db.rows("SELECT id FROM dept d WHERE NOT EXISTS (SELECT 1 FROM emp e WHERE e.dept = d.id)"), ids(&[30]));
    // Each employee paid the most in their department (ed's NULL salary never is).
    assert_eq!(
        db.rows("SELECT id FROM emp e WHERE salary = (SELECT MAX(salary) FROM emp x WHERE x.dept = e.dept) ORDER BY id"),
        ids(&[2, 3])
    );
    assert_eq!(
        db.rows("SELECT title FROM dept d WHERE d.id IN (SELECT dept FROM emp WHERE salary >= d.id * 10) ORDER BY 1"),
        vec![vec![s("eng")]]
    );
    // A subquery inside a correlated one, reading only its own enclosing query.
    assert_eq!(
        db.rows(
            "SELECT id FROM dept d WHERE EXISTS (SELECT 1 FROM emp e WHERE e.dept = d.id AND e.salary IN (SELECT MAX(salary) FROM emp)) "
        ),
        ids(&[10])
    );
    // Each side of a set operation inside a correlated subquery runs again per row.
    assert_eq!(
        db.rows(
            "SELECT id FROM dept d WHERE EXISTS (SELECT 1 FROM emp e WHERE e.dept = d.id AND e.salary > 180 \
             UNION SELECT 1 FROM emp e WHERE e.dept = d.id AND e.bonus > 2) ORDER BY id"
        ),
        ids(&[10, 20])
    );
    // … also under an ORDER BY and LIMIT of the whole.
    assert_eq!(
        db.rows(
            "SELECT id, (SELECT salary FROM emp e WHERE e.dept = d.id AND salary IS NOT NULL \
             UNION SELECT 0 FROM emp e WHERE e.dept = d.id ORDER BY 1 DESC LIMIT 1) FROM dept d ORDER BY id"
        ),
        vec![vec![i(10), i(200)], vec![i(20), i(150)], vec![i(30), N]]
    );
    // A subquery in FROM cannot read the query around the subquery it is in.
    let e = db.err("SELECT (SELECT COUNT(*) FROM (SELECT name FROM emp WHERE dept = d.id) AS x) FROM dept d");
    assert!(e.contains("unknown"), "{e}");
    assert!(db
        .err("SELECT id FROM dept d WHERE EXISTS (SELECT 1 FROM emp e WHERE EXISTS (SELECT 1 FROM emp x WHERE x.id = d.id))")
        .contains("two or more levels out"));
    // Over a grouped query, a subquery reads its group keys.
    assert_eq!(
        db.rows("SELECT dept, (SELECT title FROM dept d WHERE d.id = emp.dept) FROM emp GROUP BY dept ORDER BY 1"),
        vec![vec![N, N], vec![i(10), s("eng")], vec![i(20), s("ops")]]
    );
    assert_eq!(
        db.rows("SELECT dept FROM emp GROUP BY dept HAVING COUNT(*) > (SELECT COUNT(*) FROM emp x WHERE x.dept = emp.dept AND x.salary >= 100) ORDER BY 1"),
        vec![vec![N], vec![i(20)]]
    );
    assert_eq!(
        db.rows("SELECT dept, COUNT(*) FROM emp GROUP BY dept ORDER BY (SELECT title FROM dept d WHERE d.id = emp.dept) DESC"),
        vec![vec![i(20), i(2)], vec![i(10), i(2)], vec![N, i(1)]]
    );
    assert!(db
        .err("SELECT dept, (SELECT COUNT(*) FROM dept WHERE dept.id = emp.id) FROM emp GROUP BY dept")
        .contains("only its GROUP BY columns"));
}

/// UPDATE and DELETE read everything, subqueries included, before they change a row.
#[test]
fn update_and_delete_with_subqueries() {
    let mut db = company();
    // Ed's NULL salary becomes the highest salary there was: 200.
    assert_eq!(db.rows("UPDATE emp SET salary = (SELECT MAX(salary) FROM emp) WHERE salary IS NULL"), ids(&[1]));
    assert_eq!(db.rows("SELECT salary FROM emp WHERE id = 5"), ids(&[200]));
    // Each bonus becomes the head count of the employee's department (0 for di's NULL).
    assert_eq!(db.rows("UPDATE emp SET bonus = (SELECT COUNT(*) FROM emp x WHERE x.dept = emp.dept)"), ids(&[5]));
    assert_eq!(
        db.rows("SELECT id, bonus FROM emp ORDER BY id"),
        vec![vec![i(1), dec("2")], vec![i(2), dec("2")], vec![i(3), dec("2")], vec![i(4), dec("0")], vec![i(5), dec("2")]]
    );
    // Only hr has nobody paid over 180 (ed, in ops, is paid 200 now).
    assert_eq!(db.rows("DELETE FROM dept WHERE NOT EXISTS (SELECT 1 FROM emp WHERE emp.dept = dept.id AND salary > 180)"), ids(&[1]));
    assert_eq!(db.rows("SELECT id FROM dept ORDER BY id"), ids(&[10, 20]));
    assert_eq!(db.rows("DELETE FROM emp WHERE dept NOT IN (SELECT id FROM dept) OR dept IS NULL"), ids(&[1]));
    assert_eq!(db.rows("SELECT COUNT(*) FROM emp"), ids(&[4]));
}

/// `WITH` (not recursive): each name is a query planned where it is read, seeing the
/// names defined before it.
#[test]
fn common_table_expressions() {
    let mut db = company();
    assert_eq!(
        db.rows("WITH d AS (SELECT dept, COUNT(*) AS n FROM emp GROUP BY dept) SELECT title, n FROM dept JOIN d ON d.dept = dept.id ORDER BY title"),
        vec![vec![s("eng"), i(2)], vec![s("ops"), i(2)]]
    );
    assert_eq!(
        db.rows("WITH a AS (SELECT id FROM dept WHERE id > 10), b (x) AS (SELECT id * 2 FROM a) SELECT x FROM b ORDER BY x"),
        ids(&[40, 60])
    );
    assert_eq!(
        db.rows(
            "WITH s AS (SELECT salary FROM emp WHERE salary IS NOT NULL) SELECT (SELECT MAX(salary) FROM s) - (SELECT MIN(salary) FROM s)"
        ),
        ids(&[150])
    );
    // A name hides a table of the same name.
    assert_eq!(db.rows("WITH dept AS (SELECT 1 AS id) SELECT COUNT(*) FROM dept"), ids(&[1]));
    assert_eq!(
        db.rows("SELECT id FROM dept WHERE id IN (WITH e AS (SELECT dept FROM emp) SELECT dept FROM e) ORDER BY id"),
        ids(&[10, 20])
    );
    assert_eq!(
        db.rows("WITH a AS (SELECT id FROM dept) SELECT id FROM a WHERE id < 20 UNION SELECT id FROM a WHERE id > 20 ORDER BY 1"),
        ids(&[10, 30])
    );
    // Out of its query the name is gone; a query does not see itself.
    assert!(db.err("SELECT (WITH z AS (SELECT 1 AS k) SELECT k FROM z) FROM z").contains("object not found: Z"));
    let e = db.err("WITH x AS (SELECT * FROM x) SELECT * FROM x");
    assert!(e.contains("object not found: X") && e.contains("in WITH X"), "{e}");
    // Only WITH RECURSIVE lets a query read its own name.
    assert_eq!(db.rows("WITH RECURSIVE r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r"), ids(&[1, 2, 3]));
    let e = db.err("WITH r (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 3) SELECT n FROM r");
    assert!(e.contains("object not found: R"), "{e}");
}

#[test]
fn derived_tables_in_from() {
    let mut db = company();
    assert_eq!(
        db.rows("SELECT d.n, d.s FROM (SELECT dept AS n, SUM(salary) AS s FROM emp GROUP BY dept) AS d WHERE d.s > 100 ORDER BY 1"),
        vec![vec![i(10), i(300)], vec![i(20), i(150)]]
    );
    assert_eq!(
        db.rows("SELECT t.title, x.c FROM dept t JOIN (SELECT dept, COUNT(*) AS c FROM emp GROUP BY dept) x ON x.dept = t.id ORDER BY 1"),
        vec![vec![s("eng"), i(2)], vec![s("ops"), i(2)]]
    );
    assert_eq!(
        db.rows("SELECT a, b FROM (SELECT id, title FROM dept WHERE id > 10) AS d (a, b) ORDER BY a DESC"),
        vec![vec![i(30), s("hr")], vec![i(20), s("ops")]]
    );
    assert_eq!(db.rows("SELECT COUNT(*) FROM (SELECT dept FROM emp UNION SELECT id FROM dept) u"), ids(&[4]));
    assert!(db.err("SELECT * FROM (SELECT id FROM dept)").contains("needs a name"));
    assert!(db.err("SELECT * FROM dept d, (SELECT id FROM emp WHERE emp.dept = d.id) x").contains("unknown"));
}

#[test]
fn subquery_routing_follows_every_select() {
    let mut db = Db::new(
        "CREATE TABLE p (id INTEGER NOT NULL, v INTEGER, PRIMARY KEY (id)); PARTITION TABLE p ON COLUMN id;
         CREATE TABLE q (id INTEGER NOT NULL, w INTEGER, PRIMARY KEY (id)); PARTITION TABLE q ON COLUMN id;
         CREATE TABLE r (k INTEGER NOT NULL PRIMARY KEY);",
    );
    let route = |db: &mut Db, sql: &str| crate::prepare(&db.cat, sql).unwrap().route;
    assert_eq!(route(&mut db, "SELECT k FROM r UNION SELECT k FROM r"), Route::AnyPartition);
    assert_eq!(route(&mut db, "SELECT v FROM p WHERE id = 5 UNION SELECT w FROM q WHERE id = 5"), Route::PartitionConst(i(5)));
    assert_eq!(route(&mut db, "SELECT v FROM p WHERE id = 5 UNION SELECT w FROM q WHERE id = 6"), Route::All);
    assert_eq!(route(&mut db, "SELECT v FROM p WHERE id = 5 UNION SELECT w FROM q"), Route::All);
    assert_eq!(route(&mut db, "SELECT k FROM r WHERE k IN (SELECT v FROM p WHERE id = 7)"), Route::PartitionConst(i(7)));
    assert_eq!(route(&mut db, "SELECT k FROM r WHERE k IN (SELECT v FROM p)"), Route::All);
    assert_eq!(route(&mut db, "SELECT v FROM p WHERE id = 7 AND v IN (SELECT w FROM q)"), Route::All);
    assert_eq!(route(&mut db, "SELECT x.v FROM (SELECT v FROM p WHERE id = 3) x"), Route::PartitionConst(i(3)));
    // UPDATE and DELETE run their subqueries where they run: on replicated tables, or
    // pinned to the statement's own partition.
    assert_eq!(route(&mut db, "DELETE FROM p WHERE v IN (SELECT k FROM r)"), Route::All);
    assert_eq!(route(&mut db, "DELETE FROM p WHERE id = 5 AND v IN (SELECT w FROM q WHERE id = 5)"), Route::PartitionConst(i(5)));
    assert_eq!(route(&mut db, "UPDATE r SET k = k + 0 WHERE k IN (SELECT k FROM r)"), Route::All);
    for refused in [
        "DELETE FROM p WHERE v IN (SELECT w FROM q)",
        "DELETE FROM p WHERE id = 5 AND v IN (SELECT w FROM q WHERE id = 6)",
        "DELETE FROM r WHERE k IN (SELECT v FROM p WHERE id = 1)",
    ] {
        assert!(db.err(refused).contains("same partition key"), "{refused}");
    }
}

#[test]
fn nesting_limits_answer_with_errors_and_explain_names_subqueries() {
    let mut db = company();
    // Eight levels of subqueries are allowed, nine are not.
    let nested = |n: usize| {
        let mut q = "SELECT MAX(id) FROM dept".to_string();
        for _ in 0..n {
            q = format!("SELECT MAX(id) FROM dept WHERE id <= ({q})");
        }
        q
    };
    assert_eq!(db.rows(&nested(8)), ids(&[30]));
    assert!(db.err(&nested(9)).contains("nested more than 8 deep"));
    let chain = |n: usize| vec!["SELECT id FROM dept"; n].join(" UNION ");
    assert_eq!(db.rows(&format!("{} ORDER BY 1", chain(64))), ids(&[10, 20, 30]));
    assert!(db.err(&chain(200)).contains("at most 64"));
    let p = crate::prepare(&db.cat, "SELECT id FROM dept d WHERE EXISTS (SELECT 1 FROM emp e WHERE e.dept = d.id) UNION SELECT 5").unwrap();
    let text = crate::explain(&p);
    assert!(text.contains("SCAN of subquery 3"), "{text}");
    assert!(text.contains("SUBQUERY 0 (runs for each row of the query around it)"), "{text}");
    assert!(text.contains("SUBQUERY 3 (runs once): subquery 1 UNION subquery 2"), "{text}");
    // Binding that looks for aggregates first keeps no second copy of a subquery.
    let p = crate::prepare(&db.cat, "SELECT COUNT(*) + (SELECT MAX(id) FROM dept), (SELECT MIN(id) FROM dept) FROM emp").unwrap();
    assert_eq!(p.subqueries.len(), 2);
    let p = crate::prepare(&db.cat, "SELECT (SELECT MAX(id) FROM dept) FROM emp").unwrap();
    assert_eq!(p.subqueries.len(), 1);
    // The correlated subquery looks the outer row's key up in an index.
    assert!(text.contains("INDEX PREFIX LOOKUP of E using EMP_DEPT"), "{text}");
}

/// Views are expanded at plan time: they hold no rows, and see every change to their
/// tables at once.
#[test]
fn plain_views_expand_where_they_are_read() {
    let mut db = company();
    for ddl in [
        "CREATE VIEW paid AS SELECT id, name, dept, salary FROM emp WHERE salary IS NOT NULL",
        "CREATE VIEW rich (who, amount) AS SELECT name, salary FROM paid WHERE salary > 120",
    ] {
        crate::apply_ddl(&mut db.cat, ddl, &crate::tests_sql::NoFiles).unwrap_or_else(|e| panic!("{ddl}: {e}"));
    }
    assert!(db.cat.table("paid").is_none(), "a plain view is not a table");
    assert_eq!(db.rows("SELECT id FROM paid ORDER BY id"), ids(&[1, 2, 3, 4]));
    let t = db.run("SELECT * FROM rich ORDER BY amount DESC");
    assert_eq!(t.rows, vec![vec![s("bob"), i(200)], vec![s("cy"), i(150)]]);
    assert_eq!(t.columns[0].name, "WHO".into());
    assert_eq!(
        db.rows("SELECT p.name, d.title FROM paid p LEFT JOIN dept d ON d.id = p.dept ORDER BY p.id"),
        vec![vec![s("ann"), s("eng")], vec![s("bob"), s("eng")], vec![s("cy"), s("ops")], vec![s("di"), N]]
    );
    assert_eq!(
        db.rows("SELECT dept, SUM(salary) FROM paid GROUP BY dept ORDER BY dept"),
        vec![vec![N, i(50)], vec![i(10), i(300)], vec![i(20), i(150)]]
    );
    assert_eq!(db.rows("SELECT COUNT(*) FROM paid WHERE dept NOT IN (SELECT id FROM dept WHERE title = 'hr')"), ids(&[3]));
    db.run("UPDATE emp SET salary = 300 WHERE id = 5");
    assert_eq!(db.rows("SELECT who FROM rich WHERE amount = 300"), vec![vec![s("ed")]]);
    // A view over `*` whose table gains a column no longer matches its column names.
    crate::apply_ddl(&mut db.cat, "CREATE VIEW everyone AS SELECT * FROM dept", &crate::tests_sql::NoFiles).unwrap();
    assert_eq!(db.rows("SELECT COUNT(*) FROM everyone"), ids(&[3]));
    crate::apply_ddl(&mut db.cat, "ALTER TABLE dept ADD COLUMN floor INTEGER", &crate::tests_sql::NoFiles).unwrap();
    assert!(db.err("SELECT * FROM everyone").contains("drop it and create it again"));
}

/// Procedures read rows one at a time (`execute_each`): a statement with subqueries hands
/// over the same rows as a whole result, and stops when asked.
#[test]
fn rows_of_subquery_statements_handed_over_one_at_a_time() {
    let mut db = company();
    let sql = "SELECT id FROM emp e WHERE EXISTS (SELECT 1 FROM dept d WHERE d.id = e.dept) UNION SELECT 99 ORDER BY 1";
    let whole = db.rows(sql);
    assert_eq!(whole, ids(&[1, 2, 3, 5, 99]));
    let p = crate::prepare(&db.cat, sql).unwrap();
    let mut got = Vec::new();
    let n = crate::execute_each(&p, &[], &db.ctx, &mut db.part, &mut |r| {
        got.push(r.to_vec());
        Ok(got.len() < 3)
    })
    .unwrap();
    assert_eq!((n, got), (3, whole[..3].to_vec()));
}

/// The same queries over 3 partitions (emp partitioned, dept replicated) answer as over
/// one partition holding every row.
#[test]
fn multi_partition_answers_equal_single_partition_ones() {
    let ddl = format!("{}\nPARTITION TABLE emp ON COLUMN id;", crate::tests_sql::SCHEMA);
    let mut one = Db::new(&ddl);
    let mut sites = crate::testing::LocalSites::new(3, &one.cat).unwrap();
    let mp = |db: &Db, sites: &mut crate::testing::LocalSites, sql: &str| {
        let p = std::sync::Arc::new(crate::prepare(&db.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
        crate::execute_mp(&p, &[], &db.ctx, sites)
    };
    for sql in [
        "INSERT INTO emp VALUES (1, 'ann', 10, 100, 1.5), (2, 'bob', 10, 200, NULL), (3, 'cy', 20, 150, 2.25), (4, 'di', NULL, 50, NULL), (5, 'ed', 20, NULL, 0.5)",
        "INSERT INTO dept VALUES (10, 'eng'), (20, 'ops'), (30, 'hr')",
    ] {
        one.run(sql);
        mp(&one, &mut sites, sql).unwrap();
    }
    let queries = [
        "SELECT dept FROM emp UNION SELECT id FROM dept ORDER BY 1",
        "SELECT dept FROM emp EXCEPT ALL SELECT id FROM dept ORDER BY 1",
        "SELECT dept FROM emp INTERSECT SELECT id FROM dept ORDER BY 1 LIMIT 1",
        "SELECT id FROM dept WHERE id NOT IN (SELECT dept FROM emp)",
        "SELECT id FROM emp WHERE dept NOT IN (SELECT id FROM dept WHERE title = 'hr') ORDER BY id",
        "SELECT id, (SELECT title FROM dept WHERE dept.id = emp.dept) FROM emp ORDER BY id",
        "SELECT id FROM dept d WHERE NOT EXISTS (SELECT 1 FROM emp e WHERE e.dept = d.id)",
        "SELECT id FROM emp e WHERE salary = (SELECT MAX(salary) FROM emp x WHERE x.dept = e.dept) ORDER BY id",
        "SELECT d.n, d.s FROM (SELECT dept AS n, SUM(salary) AS s FROM emp GROUP BY dept) AS d ORDER BY 1",
        "SELECT COUNT(*) FROM emp WHERE salary > (SELECT AVG(salary) FROM emp)",
        "SELECT dept, (SELECT title FROM dept d WHERE d.id = emp.dept) FROM emp GROUP BY dept ORDER BY 1",
        "WITH d AS (SELECT dept, COUNT(*) AS n FROM emp GROUP BY dept) SELECT title, n FROM dept JOIN d ON d.dept = dept.id ORDER BY title",
        // Each partition changes its rows, reading its copy of dept.
        "UPDATE emp SET bonus = (SELECT COUNT(*) FROM dept WHERE dept.id = emp.dept)",
        "SELECT id, bonus FROM emp ORDER BY id",
        "SELECT id FROM dept d WHERE EXISTS (SELECT 1 FROM emp e WHERE e.dept = d.id AND e.salary > 180 \
         UNION SELECT 1 FROM emp e WHERE e.dept = d.id AND e.bonus > 2) ORDER BY id",
        "SELECT id, (SELECT salary FROM emp e WHERE e.dept = d.id AND salary IS NOT NULL \
         UNION SELECT 0 FROM emp e WHERE e.dept = d.id ORDER BY 1 DESC LIMIT 1) FROM dept d ORDER BY id",
        "SELECT name FROM emp WHERE id = 3 UNION ALL SELECT title FROM dept WHERE id IN (SELECT dept FROM emp WHERE id = 3)",
        // Rows gathered from every partition, inserted where their keys belong.
        "INSERT INTO emp (id, name, dept) SELECT id + 10, title, id FROM dept WHERE id NOT IN (SELECT dept FROM emp WHERE dept IS NOT NULL)",
        "SELECT id, name, dept FROM emp WHERE id > 10",
    ];
    for sql in queries {
        let want = one.run(sql);
        let got = mp(&one, &mut sites, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(got, want, "{sql}");
    }
    // Each source is filtered where it is read: one dept row and one emp row cross, not
    // the 3 + 7 rows of the whole tables (the gather cap would refuse those).
    let mut capped = one.ctx;
    capped.limits.gather_rows_max = 2;
    let sql = "SELECT title FROM dept WHERE id = 10 AND id IN (SELECT dept FROM emp WHERE salary > 180)";
    let p = std::sync::Arc::new(crate::prepare(&one.cat, sql).unwrap());
    assert_eq!(crate::execute_mp(&p, &[], &capped, &mut sites).unwrap().rows, vec![vec![s("eng")]]);
    let p = std::sync::Arc::new(crate::prepare(&one.cat, "SELECT title FROM dept WHERE id IN (SELECT dept FROM emp)").unwrap());
    assert!(crate::execute_mp(&p, &[], &capped, &mut sites).unwrap_err().message.contains("more than 2 rows"));
    // One is pinned to emp's partition of id 3; the others run everywhere.
    let pinned = queries.iter().find(|q| q.contains("WHERE id = 3 UNION ALL")).unwrap();
    assert_eq!(crate::prepare(&one.cat, pinned).unwrap().route, Route::PartitionConst(i(3)));
    assert_eq!(crate::prepare(&one.cat, queries[0]).unwrap().route, Route::All);
}

#[test]
fn with_recursive_counts_a_series() {
    let mut db = company();
    assert_eq!(
        db.rows("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 5) SELECT n FROM t ORDER BY n"),
        ids(&[1, 2, 3, 4, 5])
    );
    // 1 + 2 + … + 1000, over 999 iterations.
    assert_eq!(
        db.rows("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 1000) SELECT SUM(n), COUNT(*) FROM t"),
        vec![vec![i(500_500), i(1000)]]
    );
    // Read twice, and joined with a table.
    assert_eq!(
        db.rows(
            "WITH RECURSIVE t(n) AS (SELECT 10 UNION ALL SELECT n + 10 FROM t WHERE n < 30)
             SELECT d.title FROM t JOIN dept d ON d.id = t.n WHERE t.n IN (SELECT n FROM t WHERE n > 10) ORDER BY 1"
        ),
        vec![vec![s("hr")], vec![s("ops")]]
    );
}

/// A parent/child table walked from the root: each level of the tree is one iteration.
#[test]
fn with_recursive_walks_a_tree() {
    let mut db = crate::tests_sql::Db::new("CREATE TABLE node (id INTEGER NOT NULL PRIMARY KEY, parent INTEGER, name VARCHAR(10));");
    db.run("INSERT INTO node VALUES (1, NULL, 'root'), (2, 1, 'a'), (3, 1, 'b'), (4, 2, 'a1'), (5, 4, 'a11'), (6, 3, 'b1'), (7, NULL, 'other')");
    let sql = "WITH RECURSIVE sub(id, name, depth) AS (
                 SELECT id, name, 0 FROM node WHERE id = 2
                 UNION ALL
                 SELECT n.id, n.name, s.depth + 1 FROM node n JOIN sub s ON n.parent = s.id)
               SELECT name, depth FROM sub ORDER BY depth, name";
    assert_eq!(db.rows(sql), vec![vec![s("a"), i(0)], vec![s("a1"), i(1)], vec![s("a11"), i(2)]]);
    // The path from a leaf up to its root.
    let up = "WITH RECURSIVE up(id, parent) AS (
                SELECT id, parent FROM node WHERE id = 6
                UNION SELECT n.id, n.parent FROM node n, up WHERE n.id = up.parent)
              SELECT id FROM up ORDER BY id";
    assert_eq!(db.rows(up), ids(&[1, 3, 6]));
    let ex = crate::explain(&crate::prepare(&db.cat, up).unwrap());
    assert!(ex.contains("WITH RECURSIVE UP"), "{ex}");
}

/// UNION keeps each row once, so a walk around a cycle stops; UNION ALL keeps every row
/// found, so the same walk would go round until the bound.
#[test]
fn with_recursive_union_removes_duplicates_and_union_all_keeps_them() {
    let mut db = crate::tests_sql::Db::new("CREATE TABLE edge (a INTEGER NOT NULL, b INTEGER NOT NULL);");
    db.run("INSERT INTO edge VALUES (1, 2), (2, 3), (3, 1), (1, 3)");
    let reach = |kind: &str| {
        format!("WITH RECURSIVE r(n) AS (SELECT 1 UNION {kind} SELECT e.b FROM edge e, r WHERE e.a = r.n) SELECT n FROM r ORDER BY n")
    };
    assert_eq!(db.rows(&reach("")), ids(&[1, 2, 3]));
    // With ALL and two steps: (1, 0); then 2 and 3 from 1; then 3 from 2 and 1 from 3.
    assert_eq!(
        db.rows(
            "WITH RECURSIVE r(n, k) AS (SELECT 1, 0 UNION ALL SELECT e.b, r.k + 1 FROM edge e, r WHERE e.a = r.n AND r.k < 2)
             SELECT n, COUNT(*) FROM r GROUP BY n ORDER BY n"
        ),
        vec![vec![i(1), i(2)], vec![i(2), i(1)], vec![i(3), i(2)]]
    );
    // Two edges leave node 1: the rows double every few steps, to the bound on rows.
    let err = db.err(&reach("ALL"));
    assert!(err.contains("WITH RECURSIVE R") && err.contains("more than 1000000 rows"), "{err}");
    // A series that never stops runs to the bound on iterations.
    let err = db.err("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT COUNT(*) FROM t");
    assert!(err.contains("WITH RECURSIVE T") && err.contains("after 100000 iterations"), "{err}");
}

#[test]
fn with_recursive_refuses_what_it_cannot_run() {
    let mut db = company();
    let err = db.err("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT 'x' FROM t) SELECT n FROM t");
    assert!(err.contains("BIGINT in the base and VARCHAR"), "{err}");
    let err = db.err("WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n, n FROM t) SELECT n FROM t");
    assert!(err.contains("as many"), "{err}");
    // Not recursive after all: a plain WITH, or a plain UNION.
    assert_eq!(db.rows("WITH RECURSIVE t(n) AS (SELECT 1 UNION SELECT 2) SELECT n FROM t ORDER BY n"), ids(&[1, 2]));
    assert_eq!(db.rows("WITH RECURSIVE t AS (SELECT id FROM dept) SELECT COUNT(*) FROM t"), ids(&[3]));
}
