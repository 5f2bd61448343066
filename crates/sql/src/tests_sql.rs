//! End-to-end SQL tests on one partition: DDL, prepare, execute, with exact expected rows.

use lockstep_core::{decimal, Catalog, HashRing, Result, ResultTable, Value};
use lockstep_storage::Partition;

use crate::{apply_ddl, execute, prepare, split_statements, DdlEnv, ExecCtx, Route};

pub struct NoFiles;

impl DdlEnv for NoFiles {
    fn read_file(&self, path: &str) -> Result<(String, String)> {
        Ok((path.to_string(), format!("-- {path}")))
    }
    fn find_class(&self, class_name: &str) -> Result<(String, String)> {
        let short = class_name.rsplit('.').next().unwrap_or(class_name);
        Ok((format!("procs/{short}.lua"), format!("-- {short}")))
    }
}

/// A catalog and one partition holding all rows.
pub struct Db {
    pub cat: Catalog,
    pub part: Partition,
    pub ctx: ExecCtx,
}

pub fn ctx() -> ExecCtx {
    // 2024-03-01 12:00:00 UTC
    ExecCtx::new(1, 1_709_294_400_000_000)
}

impl Db {
    pub fn new(ddl: &str) -> Db {
        let mut cat = Catalog::default();
        for s in split_statements(ddl).unwrap() {
            apply_ddl(&mut cat, &s, &NoFiles).unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        let mut part = Partition::new(0);
        part.apply_schema(&cat, &HashRing::new(1)).unwrap();
        Db { cat, part, ctx: ctx() }
    }

    pub fn try_run(&mut self, sql: &str, params: &[Value]) -> Result<ResultTable> {
        let p = prepare(&self.cat, sql)?;
        execute(&p, params, &self.ctx, &mut self.part)
    }

    pub fn run(&mut self, sql: &str) -> ResultTable {
        self.try_run(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub fn rows(&mut self, sql: &str) -> Vec<Vec<Value>> {
        self.run(sql).rows
    }

    pub fn err(&mut self, sql: &str) -> String {
        match self.try_run(sql, &[]) {
            Ok(t) => panic!("{sql} should fail but gave {:?}", t.rows),
            Err(e) => e.message,
        }
    }
}

pub fn i(v: i64) -> Value {
    Value::Int(v)
}
pub fn s(v: &str) -> Value {
    Value::Str(v.to_string().into())
}
pub fn dec(v: &str) -> Value {
    Value::Decimal(decimal::parse(v).unwrap().into())
}
pub const N: Value = Value::Null;

pub const SCHEMA: &str = "
CREATE TABLE emp (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(20) NOT NULL, dept INTEGER, salary BIGINT, bonus DECIMAL);
CREATE INDEX emp_dept ON emp (dept, salary);
CREATE TABLE dept (id INTEGER NOT NULL PRIMARY KEY, title VARCHAR(20));
";

pub fn company() -> Db {
    let mut db = Db::new(SCHEMA);
    db.run("INSERT INTO emp VALUES (1, 'ann', 10, 100, 1.5), (2, 'bob', 10, 200, NULL), (3, 'cy', 20, 150, 2.25), (4, 'di', NULL, 50, NULL), (5, 'ed', 20, NULL, 0.5)");
    db.run("INSERT INTO dept VALUES (10, 'eng'), (20, 'ops'), (30, 'hr')");
    db
}

#[test]
fn filters_follow_three_valued_logic() {
    let mut db = company();
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept = 10 ORDER BY id"), vec![vec![i(1)], vec![i(2)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept <> 10 ORDER BY id"), vec![vec![i(3)], vec![i(5)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE NOT (dept = 10) ORDER BY id"), vec![vec![i(3)], vec![i(5)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept IS NULL"), vec![vec![i(4)]]);
    assert_eq!(db.rows("SELECT COUNT(*) FROM emp WHERE dept IS NOT NULL"), vec![vec![i(4)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept = NULL"), Vec::<Vec<Value>>::new());
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept = 10 OR salary > 140 ORDER BY id"), vec![vec![i(1)], vec![i(2)], vec![i(3)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE salary BETWEEN 100 AND 150 ORDER BY id"), vec![vec![i(1)], vec![i(3)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE salary NOT BETWEEN 100 AND 150 ORDER BY id"), vec![vec![i(2)], vec![i(4)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE id IN (2, 4, 9) ORDER BY id"), vec![vec![i(2)], vec![i(4)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept NOT IN (10, NULL)"), Vec::<Vec<Value>>::new());
    assert_eq!(db.rows("SELECT id FROM emp WHERE name LIKE '_o%'"), vec![vec![i(2)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE name NOT LIKE '%n%' AND id != 3 ORDER BY id"), vec![vec![i(2)], vec![i(4)], vec![i(5)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE bonus > 1 ORDER BY id"), vec![vec![i(1)], vec![i(3)]]);
}

#[test]
fn aggregates_ignore_nulls_and_group() {
    let mut db = company();
    assert_eq!(
        db.rows("SELECT COUNT(*), COUNT(dept), COUNT(DISTINCT dept), SUM(salary), MIN(salary), MAX(name), AVG(salary) FROM emp"),
        vec![vec![i(5), i(4), i(2), i(500), i(50), s("ed"), i(125)]]
    );
    assert_eq!(
        db.rows("SELECT dept, COUNT(*) AS n, SUM(salary) FROM emp GROUP BY dept ORDER BY dept"),
        vec![vec![N, i(1), i(50)], vec![i(10), i(2), i(300)], vec![i(20), i(2), i(150)]]
    );
    assert_eq!(db.rows("SELECT dept FROM emp GROUP BY dept HAVING COUNT(*) > 1 ORDER BY 1 DESC"), vec![vec![i(20)], vec![i(10)]]);
    assert_eq!(db.rows("SELECT SUM(bonus), AVG(bonus) FROM emp"), vec![vec![dec("4.25"), dec("1.416666666666")]]);
    assert_eq!(db.rows("SELECT COUNT(*), SUM(salary), MAX(id) FROM emp WHERE id > 100"), vec![vec![i(0), N, N]]);
    assert_eq!(db.rows("SELECT dept, COUNT(*) FROM emp WHERE id > 100 GROUP BY dept"), Vec::<Vec<Value>>::new());
    assert_eq!(
        db.rows("SELECT dept + 1, MAX(salary) - MIN(salary) FROM emp WHERE dept IS NOT NULL GROUP BY dept + 1 ORDER BY 1"),
        vec![vec![i(11), i(100)], vec![i(21), i(0)]]
    );
    let t = db.run("SELECT dept, COUNT(*) AS n FROM emp GROUP BY dept");
    assert_eq!(t.columns[0].name, "DEPT".into());
    assert_eq!(t.columns[1].name, "N".into());
    assert!(db.err("SELECT name, COUNT(*) FROM emp GROUP BY dept").contains("GROUP BY"));
    assert!(db.err("SELECT id FROM emp WHERE COUNT(*) > 1").contains("WHERE"));
}

#[test]
fn joins_inner_left_and_comma() {
    let mut db = company();
    assert_eq!(
        db.rows("SELECT e.name, d.title FROM emp e JOIN dept d ON e.dept = d.id ORDER BY e.id"),
        vec![vec![s("ann"), s("eng")], vec![s("bob"), s("eng")], vec![s("cy"), s("ops")], vec![s("ed"), s("ops")]]
    );
    assert_eq!(
        db.rows("SELECT d.title, e.name FROM dept d LEFT JOIN emp e ON e.dept = d.id AND e.salary > 100 ORDER BY d.id, e.name"),
        vec![vec![s("eng"), s("bob")], vec![s("ops"), s("cy")], vec![s("hr"), N]]
    );
    assert_eq!(db.rows("SELECT d.title FROM dept d LEFT OUTER JOIN emp e ON e.dept = d.id WHERE e.id IS NULL"), vec![vec![s("hr")]]);
    assert_eq!(db.rows("SELECT COUNT(*) FROM emp, dept WHERE emp.dept = dept.id AND dept.title = 'eng'"), vec![vec![i(2)]]);
    assert_eq!(db.rows("SELECT COUNT(*) FROM emp, dept"), vec![vec![i(15)]]);
    let t = db.run("SELECT * FROM dept d JOIN emp e ON d.id = e.dept WHERE e.id = 3");
    assert_eq!(t.columns.iter().map(|c| c.name.as_ref()).collect::<Vec<_>>(), vec!["ID", "TITLE", "ID", "NAME", "DEPT", "SALARY", "BONUS"]);
    assert_eq!(t.rows, vec![vec![i(20), s("ops"), i(3), s("cy"), i(20), i(150), dec("2.25")]]);
    assert_eq!(
        db.rows("SELECT e.* FROM emp e, dept d WHERE e.dept = d.id AND d.id = 20 AND e.id = 5"),
        vec![vec![i(5), s("ed"), i(20), N, dec("0.5")]]
    );
    assert!(db.err("SELECT id FROM emp, dept").contains("ambiguous"));
    assert!(db.err("SELECT nope FROM emp").contains("unknown column NOPE"));
    assert!(db.err("SELECT x.id FROM emp").contains("unknown table or alias X"));
    assert!(db.err("SELECT * FROM nothere").contains("object not found: NOTHERE"));
}

#[test]
fn order_limit_offset_distinct() {
    let mut db = company();
    assert_eq!(db.rows("SELECT salary FROM emp ORDER BY salary"), vec![vec![N], vec![i(50)], vec![i(100)], vec![i(150)], vec![i(200)]]);
    assert_eq!(db.rows("SELECT salary FROM emp ORDER BY salary DESC LIMIT 2"), vec![vec![i(200)], vec![i(150)]]);
    assert_eq!(db.rows("SELECT id FROM emp ORDER BY id LIMIT 2 OFFSET 3"), vec![vec![i(4)], vec![i(5)]]);
    // Rows streamed in index order (no sort step): LIMIT 0, OFFSET alone, OFFSET past the
    // end, and a join, whose rows stream too.
    assert_eq!(db.rows("SELECT id FROM emp ORDER BY id LIMIT 0"), Vec::<Vec<Value>>::new());
    assert_eq!(db.rows("SELECT id FROM emp ORDER BY id OFFSET 4"), vec![vec![i(5)]]);
    assert_eq!(db.rows("SELECT id FROM emp ORDER BY id LIMIT 3 OFFSET 9"), Vec::<Vec<Value>>::new());
    assert_eq!(
        db.rows("SELECT e.id, d.title FROM emp e, dept d WHERE d.id = e.dept AND e.id >= 2 ORDER BY e.id LIMIT 2 OFFSET 1"),
        vec![vec![i(3), s("ops")], vec![i(5), s("ops")]]
    );
    assert_eq!(db.rows("SELECT id AS k FROM emp ORDER BY k DESC LIMIT 1"), vec![vec![i(5)]]);
    assert_eq!(db.rows("SELECT name FROM emp WHERE salary IS NOT NULL ORDER BY salary * -1 LIMIT 1"), vec![vec![s("bob")]]);
    assert_eq!(db.rows("SELECT DISTINCT dept FROM emp ORDER BY dept"), vec![vec![N], vec![i(10)], vec![i(20)]]);
    assert_eq!(db.rows("SELECT id FROM emp WHERE dept = 10 ORDER BY salary DESC"), vec![vec![i(2)], vec![i(1)]]);
    let p = prepare(&db.cat, "SELECT id FROM emp WHERE dept = ? ORDER BY salary DESC LIMIT ?").unwrap();
    assert!(crate::explain(&p).contains("REVERSE"), "{}", crate::explain(&p));
    assert_eq!(execute(&p, &[i(10), i(1)], &db.ctx, &mut db.part).unwrap().rows, vec![vec![i(2)]]);
    assert!(db.err("SELECT DISTINCT dept FROM emp ORDER BY salary").contains("DISTINCT"));
    assert!(db.err("SELECT id FROM emp ORDER BY 3").contains("position 3"));
}

#[test]
fn expressions_and_types() {
    let mut db = company();
    assert_eq!(db.rows("SELECT 7 / 2, -7 / 2, 7 % 3, 1 + 2 * 3, 7.0 / 2"), vec![vec![i(3), i(-3), i(1), i(7), dec("3.5")]]);
    assert!(db.err("SELECT 1 / 0").contains("division by zero"));
    assert!(db.err("SELECT 9223372036854775807 + 1").contains("overflow"));
    assert_eq!(db.rows("SELECT name || '!' FROM emp WHERE id = 1"), vec![vec![s("ann!")]]);
    assert_eq!(
        db.rows("SELECT CASE WHEN salary > 120 THEN 'hi' WHEN salary IS NULL THEN 'none' ELSE 'lo' END FROM emp ORDER BY id"),
        vec![vec![s("lo")], vec![s("hi")], vec![s("hi")], vec![s("lo")], vec![s("none")]]
    );
    assert_eq!(
        db.rows("SELECT CASE dept WHEN 10 THEN 'a' WHEN 20 THEN 'b' END FROM emp WHERE id IN (1, 4)ORDER BY id"),
        vec![vec![s("a")], vec![N]]
    );
    assert_eq!(
        db.rows("SELECT COALESCE(salary, -1), NULLIF(dept, 10) FROM emp WHERE id IN (2, 5) ORDER BY id"),
        vec![vec![i(200), N], vec![i(-1), i(20)]]
    );
    assert_eq!(
        db.rows("SELECT CAST(bonus AS INTEGER), CAST(id AS VARCHAR), CAST('12' AS BIGINT) FROM emp WHERE id = 3"),
        vec![vec![i(2), s("3"), i(12)]]
    );
    let t = db.run("SELECT salary + 1, salary * 1.5, bonus + 1, id, COUNT(*) FROM emp GROUP BY salary, bonus, id");
    let types: Vec<_> = t.columns.iter().map(|c| c.ty).collect();
    use lockstep_core::DataType::*;
    assert_eq!(types, vec![BigInt, Decimal, Decimal, Integer, BigInt]);
    assert_eq!(t.columns[0].name, "C1".into());
    assert_eq!(t.columns[3].name, "ID".into());
    assert!(db.err("SELECT name + 1 FROM emp").contains("arithmetic"));
    assert!(db.err("SELECT SUBSTRING(name) FROM emp").contains("takes"));
}

#[test]
fn string_and_math_functions() {
    let mut db = Db::new("CREATE TABLE t (a VARCHAR(40), f FLOAT, d DECIMAL);");
    db.run("INSERT INTO t VALUES ('  Hello World  ', 2.5, -1.235)");
    let r = db.rows(
        "SELECT UPPER(a), LOWER(TRIM(a)), LTRIM(a), RTRIM(a), CHAR_LENGTH(TRIM(a)), OCTET_LENGTH('é'), \
         SUBSTRING(TRIM(a), 7), SUBSTRING(TRIM(a) FROM 1 FOR 5), SUBSTRING(TRIM(a), 0, 3), \
         CONCAT('a', 'b', 'c'), REPLACE(TRIM(a), 'o', '0'), POSITION('World' IN a), LEFT(TRIM(a), 2), RIGHT(TRIM(a), 3), \
         TRIM(LEADING 'x' FROM 'xxaxx'), TRIM(TRAILING ' ' FROM 'b  ') FROM t",
    );
    assert_eq!(
        r,
        vec![vec![
            s("  HELLO WORLD  "),
            s("hello world"),
            s("Hello World  "),
            s("  Hello World"),
            i(11),
            i(2),
            s("World"),
            s("Hello"),
            s("He"),
            s("abc"),
            s("Hell0 W0rld"),
            i(9),
            s("He"),
            s("rld"),
            s("axx"),
            s("b"),
        ]]
    );
    let r = db.rows("SELECT ABS(d), CEILING(f), FLOOR(f), ROUND(d, 2), ROUND(f), MOD(7, 3), POWER(2, 10), SQRT(16), EXP(0), LN(1), CEILING(d), FLOOR(d) FROM t");
    let f = |x: f64| Value::Float(x);
    assert_eq!(
        r,
        vec![vec![dec("1.235"), f(3.0), f(2.0), dec("-1.24"), f(3.0), i(1), f(1024.0), f(4.0), f(1.0), f(0.0), dec("-1"), dec("-2")]]
    );
    assert_eq!(db.rows("SELECT UPPER(NULL), ABS(NULL), CONCAT('a', NULL) FROM t"), vec![vec![N, N, N]]);
    assert!(db.err("SELECT SQRT(-1) FROM t").contains("negative"));
}

#[test]
fn time_functions_use_the_transaction_clock() {
    let mut db = Db::new("CREATE TABLE ev (id INTEGER NOT NULL, ts TIMESTAMP DEFAULT NOW, PRIMARY KEY (id));");
    db.run("INSERT INTO ev (id) VALUES (1)");
    db.run("INSERT INTO ev VALUES (2, '2024-02-29 13:45:07.250')");
    let now = Value::Timestamp(ctx().timestamp_micros);
    assert_eq!(db.rows("SELECT ts FROM ev WHERE id = 1"), vec![vec![now.clone()]]);
    assert_eq!(db.rows("SELECT NOW, CURRENT_TIMESTAMP, NOW() FROM ev WHERE id = 1"), vec![vec![now.clone(), now.clone(), now]]);
    let r = db.rows(
        "SELECT EXTRACT(YEAR FROM ts), EXTRACT(MONTH FROM ts), DAY(ts), HOUR(ts), MINUTE(ts), SECOND(ts), DAYOFWEEK(ts), DAYOFYEAR(ts), WEEK(ts), QUARTER(ts), \
         DATEADD(MONTH, 1, ts), TRUNCATE(DAY, ts), SINCE_EPOCH(SECOND, ts), TO_TIMESTAMP(SECOND, 86400), FROM_UNIXTIME(60) FROM ev WHERE id = 2",
    );
    let ts = |t: &str| Value::Timestamp(lockstep_core::time::parse_timestamp(t).unwrap());
    assert_eq!(
        r,
        vec![vec![
            i(2024),
            i(2),
            i(29),
            i(13),
            i(45),
            dec("7.25"),
            i(5),
            i(60),
            i(9),
            i(1),
            ts("2024-03-29 13:45:07.25"),
            ts("2024-02-29"),
            i(1_709_214_307),
            ts("1970-01-02"),
            ts("1970-01-01 00:01:00"),
        ]]
    );
    assert_eq!(db.rows("SELECT id FROM ev WHERE ts < '2024-03-01' "), vec![vec![i(2)]]);
}

#[test]
fn dml_counts_defaults_and_constraints() {
    let mut db = Db::new("CREATE TABLE kv (k VARCHAR(8) NOT NULL, v INTEGER DEFAULT 7, w TINYINT, PRIMARY KEY (k));");
    assert_eq!(db.rows("INSERT INTO kv (k) VALUES ('a')"), vec![vec![i(1)]]);
    assert_eq!(db.run("INSERT INTO kv VALUES ('b', 1, 1), ('c', 2, 2)").columns[0].name, "modified_tuples".into());
    assert_eq!(db.rows("SELECT k, v, w FROM kv WHERE k = 'a'"), vec![vec![s("a"), i(7), N]]);
    let dup = db.try_run("INSERT INTO kv VALUES ('d', 1, 1), ('a', 1, 1)", &[]).unwrap_err();
    assert_eq!(dup.kind, lockstep_core::ErrorKind::Constraint, "{dup}");
    assert_eq!(db.rows("SELECT COUNT(*) FROM kv"), vec![vec![i(3)]], "failed statement must leave nothing behind");
    assert!(db.try_run("INSERT INTO kv VALUES ('toolongvalue', 1, 1)", &[]).is_err());
    assert!(db.err("INSERT INTO kv (v) VALUES (1)").contains("no default"));
    assert!(db.err("INSERT INTO kv VALUES ('z', 'x', 1)").contains("column V"));
    assert_eq!(db.rows("UPDATE kv SET v = v + 10 WHERE v < 5"), vec![vec![i(2)]]);
    assert_eq!(db.rows("SELECT v FROM kv ORDER BY k"), vec![vec![i(7)], vec![i(11)], vec![i(12)]]);
    assert!(db.try_run("UPDATE kv SET w = 200", &[]).is_err());
    assert_eq!(db.rows("SELECT w FROM kv ORDER BY k"), vec![vec![N], vec![i(1)], vec![i(2)]], "failed UPDATE is undone");
    assert_eq!(db.rows("UPSERT INTO kv (k, w) VALUES ('b', 9)"), vec![vec![i(1)]]);
    assert_eq!(db.rows("UPSERT INTO kv VALUES ('e', 5, 5)"), vec![vec![i(1)]]);
    assert_eq!(
        db.rows("SELECT k, v, w FROM kv WHERE k IN ('b', 'e') ORDER BY k"),
        vec![vec![s("b"), i(11), i(9)], vec![s("e"), i(5), i(5)]]
    );
    assert_eq!(db.rows("DELETE FROM kv WHERE k > 'b'"), vec![vec![i(2)]]);
    assert_eq!(db.rows("INSERT INTO kv SELECT k || 'x', v, w FROM kv"), vec![vec![i(2)]]);
    assert_eq!(db.rows("DELETE FROM kv"), vec![vec![i(4)]]);
    assert!(db.err("UPSERT INTO kv (v) VALUES (1)").contains("primary key"));
}

#[test]
fn parameters_are_typed_counted_and_coerced() {
    let mut db = company();
    let p = prepare(&db.cat, "SELECT name FROM emp WHERE id = ? AND salary > ?").unwrap();
    use lockstep_core::DataType::*;
    assert_eq!(p.param_types, vec![Some(Integer), Some(BigInt)]);
    assert_eq!(execute(&p, &[s("2"), i(0)], &db.ctx, &mut db.part).unwrap().rows, vec![vec![s("bob")]]);
    let e = execute(&p, &[i(1)], &db.ctx, &mut db.part).unwrap_err();
    assert!(e.message.contains("expects 2 parameters"), "{e}");
    let e = execute(&p, &[s("abc"), i(1)], &db.ctx, &mut db.part).unwrap_err();
    assert!(e.message.contains("parameter 1"), "{e}");
    let ins = prepare(&db.cat, "INSERT INTO dept VALUES (?, ?)").unwrap();
    assert_eq!(ins.param_types, vec![Some(Integer), Some(Varchar)]);
    assert_eq!(execute(&ins, &[i(40), s("ops2")], &db.ctx, &mut db.part).unwrap().rows, vec![vec![i(1)]]);
    let arr = prepare(&db.cat, "SELECT id FROM dept WHERE id IN ? ORDER BY id").unwrap();
    assert_eq!(
        execute(&arr, &[Value::Array(vec![i(10), i(40)].into())], &db.ctx, &mut db.part).unwrap().rows,
        vec![vec![i(10)], vec![i(40)]]
    );
}

#[test]
fn access_paths_are_chosen_from_indexes() {
    let db = company();
    let ex = |sql: &str| crate::explain(&prepare(&db.cat, sql).unwrap());
    assert!(ex("SELECT * FROM emp WHERE id = ?").contains("UNIQUE LOOKUP"));
    assert!(ex("SELECT * FROM emp WHERE dept = ?").contains("INDEX PREFIX LOOKUP"));
    assert!(ex("SELECT * FROM emp WHERE dept = 1 AND salary > 5")
        .contains("INDEX SCAN of EMP using EMP_DEPT (1 equality columns, lower bound)"));
    assert!(ex("SELECT * FROM emp WHERE name = 'x'").contains("SEQUENTIAL SCAN"));
    assert!(ex("SELECT * FROM emp ORDER BY id LIMIT 3").contains("index order"));
    // Each employee finds its department by the primary key: cheaper than each
    // department's employees by the non-unique index.
    let j = ex("SELECT * FROM dept d JOIN emp e ON e.dept = d.id");
    assert!(j.contains("NESTED LOOP JOIN: UNIQUE LOOKUP of D"), "{j}");
    let j = ex("SELECT * FROM dept d LEFT JOIN emp e ON e.dept = d.id");
    assert!(j.contains("NESTED LOOP JOIN: INDEX PREFIX LOOKUP of E"), "{j}");
}

/// Rows found through an index lookup skip re-checking the `column = ?` terms the lookup
/// used (the parameter has the column's type and the index compares exactly); every other
/// term is still checked, and the answers are those of a scan.
#[test]
fn lookups_skip_only_the_equalities_their_index_guarantees() {
    let mut db = Db::new(
        "CREATE TABLE kv (k VARCHAR(10) NOT NULL, ks VARBINARY(4) NOT NULL, f FLOAT NOT NULL, v BIGINT, PRIMARY KEY (k, ks));\n\
         CREATE TABLE fl (f FLOAT NOT NULL PRIMARY KEY, v BIGINT);",
    );
    db.run("INSERT INTO kv VALUES ('a', x'01', 1.0, 10), ('a', x'02', 2.0, 20), ('b', x'01', 3.0, 30)");
    db.run("INSERT INTO fl VALUES (0.0, 1), (2.5, 2)");
    let residual = |db: &Db, sql: &str| {
        let p = prepare(&db.cat, sql).unwrap();
        match &p.plan {
            crate::Plan::Select(s) => (s.levels[0].on.len(), s.levels[0].residual.len()),
            crate::Plan::Update(u) => (u.level.on.len(), u.level.residual.len()),
            _ => panic!("{sql}"),
        }
    };
    // Both key terms are parameters: both skipped; the term on v is kept.
    assert_eq!(residual(&db, "SELECT v FROM kv WHERE ks = ? AND k = ?"), (2, 0));
    assert_eq!(residual(&db, "SELECT v FROM kv WHERE ks = ? AND k = ? AND v > ?"), (3, 1));
    // A prefix lookup skips its one term; a constant key and a FLOAT key are re-checked.
    assert_eq!(residual(&db, "SELECT v FROM kv WHERE k = ? AND f > 1.5"), (2, 1));
    assert_eq!(residual(&db, "SELECT v FROM kv WHERE k = 'a' AND ks = ?"), (2, 1));
    assert_eq!(residual(&db, "SELECT v FROM fl WHERE f = ?"), (1, 1));
    assert_eq!(residual(&db, "UPDATE kv SET v = 0 WHERE k = ? AND ks = ? AND v = ?"), (3, 1));

    let query = |db: &mut Db, sql: &str, params: &[Value]| {
        let p = prepare(&db.cat, sql).unwrap();
        execute(&p, params, &db.ctx, &mut db.part).unwrap().rows
    };
    let bytes = |b: &[u8]| Value::Bytes(b.to_vec().into());
    let sql = "SELECT v FROM kv WHERE ks = ? AND k = ? AND v > ?";
    assert_eq!(query(&mut db, sql, &[bytes(&[2]), s("a"), i(5)]), vec![vec![i(20)]]);
    assert_eq!(query(&mut db, sql, &[bytes(&[2]), s("a"), i(25)]), Vec::<Vec<Value>>::new());
    assert_eq!(query(&mut db, sql, &[bytes(&[3]), s("a"), i(0)]), Vec::<Vec<Value>>::new());
    assert_eq!(query(&mut db, sql, &[N, s("a"), i(0)]), Vec::<Vec<Value>>::new());
    assert_eq!(query(&mut db, "SELECT v FROM kv WHERE k = ? ORDER BY v", &[s("a")]), vec![vec![i(10)], vec![i(20)]]);
    assert_eq!(query(&mut db, "SELECT v FROM fl WHERE f = ?", &[Value::Float(2.5)]), vec![vec![i(2)]]);
    // An UPDATE still checks its other term: only the row with v = 20 changes.
    let p = prepare(&db.cat, "UPDATE kv SET v = 0 WHERE k = ? AND v = ?").unwrap();
    assert_eq!(execute(&p, &[s("a"), i(20)], &db.ctx, &mut db.part).unwrap().rows, vec![vec![i(1)]]);
    assert_eq!(db.rows("SELECT v FROM kv ORDER BY v"), vec![vec![i(0)], vec![i(10)], vec![i(30)]]);
    // A join: the inner level's lookup key comes from the outer row, not a parameter, and
    // stays checked.
    assert_eq!(db.rows("SELECT a.v, b.v FROM kv a, kv b WHERE b.k = a.k AND b.ks = a.ks AND a.k = 'b'"), vec![vec![i(30), i(30)]]);
}

#[test]
fn routing_decisions() {
    let mut db = Db::new(
        "CREATE TABLE acct (id BIGINT NOT NULL, owner INTEGER NOT NULL, bal INTEGER, PRIMARY KEY (id));
         PARTITION TABLE acct ON COLUMN id;
         CREATE TABLE hist (acct BIGINT NOT NULL, amt INTEGER);
         PARTITION TABLE hist ON COLUMN acct;
         CREATE TABLE rates (cur VARCHAR(3) NOT NULL PRIMARY KEY, r FLOAT);",
    );
    let route = |sql: &str| {
        let p = prepare(&db.cat, sql).unwrap();
        (p.route, p.writes_replicated)
    };
    use lockstep_core::DataType::BigInt;
    let sp0 = Route::PartitionParam { param: 0, key_type: BigInt };
    assert_eq!(route("SELECT bal FROM acct WHERE id = ?"), (sp0.clone(), false));
    assert_eq!(route("SELECT bal FROM acct WHERE owner = ? AND id = ?"), (Route::PartitionParam { param: 1, key_type: BigInt }, false));
    assert_eq!(route("SELECT bal FROM acct WHERE id = 5"), (Route::PartitionConst(i(5)), false));
    assert_eq!(route("SELECT bal FROM acct WHERE owner = ?"), (Route::All, false));
    assert_eq!(route("SELECT bal FROM acct WHERE id = ? OR id = 3"), (Route::All, false));
    assert_eq!(route("SELECT * FROM acct a JOIN hist h ON h.acct = a.id WHERE a.id = ?"), (sp0.clone(), false));
    assert_eq!(route("SELECT * FROM acct a, hist h WHERE a.id = ? AND h.acct = ?"), (Route::All, false));
    assert_eq!(route("SELECT * FROM acct a, rates r WHERE a.id = ?"), (sp0.clone(), false));
    assert_eq!(route("SELECT * FROM rates"), (Route::AnyPartition, false));
    assert_eq!(route("INSERT INTO acct VALUES (?, ?, ?)"), (sp0.clone(), false));
    assert_eq!(route("INSERT INTO acct (owner, id) VALUES (1, 7)"), (Route::PartitionConst(i(7)), false));
    assert_eq!(route("INSERT INTO acct VALUES (1, 1, 1), (2, 1, 1)"), (Route::All, false));
    assert_eq!(route("UPDATE acct SET bal = bal + ? WHERE id = ?"), (Route::PartitionParam { param: 1, key_type: BigInt }, false));
    assert_eq!(route("DELETE FROM acct WHERE bal < 0"), (Route::All, false));
    assert_eq!(route("UPDATE rates SET r = 1"), (Route::All, true));
    assert_eq!(route("INSERT INTO rates VALUES ('EUR', 1.0)"), (Route::All, true));
    // Setting the partition column is allowed only to the value it has (VoltDB's
    // default T.update sets every column); moving a row is an error when it runs.
    assert!(prepare(&db.cat, "UPDATE acct SET id = 5").is_ok());
    db.run("INSERT INTO acct (id, owner, bal) VALUES (1, 1, 10)");
    assert_eq!(db.rows("UPDATE acct SET id = 1, bal = 11 WHERE id = 1"), vec![vec![i(1)]]);
    assert!(db.err("UPDATE acct SET id = 5 WHERE id = 1").contains("cannot change the partition column ID"));
    assert_eq!(db.rows("SELECT id, bal FROM acct"), vec![vec![i(1), i(11)]]);
    // Every SET expression reads the row as it was: a swap swaps, and a column set from
    // itself keeps its other columns.
    db.run("INSERT INTO acct (id, owner, bal) VALUES (2, 7, 3)");
    assert_eq!(db.rows("UPDATE acct SET owner = bal, bal = owner WHERE id = 2"), vec![vec![i(1)]]);
    assert_eq!(db.rows("UPDATE acct SET bal = bal * 10 WHERE id = 2"), vec![vec![i(1)]]);
    assert_eq!(db.rows("SELECT id, owner, bal FROM acct WHERE id = 2"), vec![vec![i(2), i(3), i(70)]]);
}

#[test]
fn views_stay_in_step_with_dml() {
    let mut db = Db::new(
        "CREATE TABLE votes (phone BIGINT NOT NULL, state VARCHAR(2) NOT NULL, cand INTEGER NOT NULL);
         CREATE VIEW v_state (state, cand, n, maxp) AS SELECT state, cand, COUNT(*), MAX(phone) FROM votes GROUP BY state, cand;",
    );
    db.run("INSERT INTO votes VALUES (1, 'MA', 1), (2, 'MA', 1), (3, 'NY', 2)");
    assert_eq!(
        db.rows("SELECT state, cand, n, maxp FROM v_state ORDER BY state"),
        vec![vec![s("MA"), i(1), i(2), i(2)], vec![s("NY"), i(2), i(1), i(3)]]
    );
    db.run("UPDATE votes SET state = 'NY' WHERE phone = 2");
    db.run("DELETE FROM votes WHERE phone = 3");
    assert_eq!(db.rows("SELECT state, n FROM v_state ORDER BY state"), vec![vec![s("MA"), i(1)], vec![s("NY"), i(1)]]);
    assert!(db.err("DELETE FROM v_state").contains("read-only"));
}

#[test]
fn delete_order_by_limit_deletes_the_first_rows_by_a_unique_key() {
    let mut db = Db::new(
        "CREATE TABLE urt (userid BIGINT NOT NULL, txn VARCHAR(10) NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (userid, txn));
         PARTITION TABLE urt ON COLUMN userid;
         CREATE TABLE free (a INTEGER, b INTEGER);",
    );
    db.run("INSERT INTO urt VALUES (1, 'x', 30), (1, 'y', 10), (1, 'z', 20), (1, 'w', 10), (2, 'a', 1)");
    // The charging demo's form: the user's oldest record (ties on time broken by the key).
    let oldest = "DELETE FROM urt WHERE userid = ? AND at < ? ORDER BY userid, at, txn LIMIT 1";
    assert_eq!(db.try_run(oldest, &[i(1), i(25)]).unwrap().first_value(), Some(&i(1)));
    assert_eq!(db.rows("SELECT txn FROM urt WHERE userid = 1 ORDER BY txn"), vec![vec![s("x")], vec![s("y")], vec![s("z")]]);
    assert_eq!(db.try_run(oldest, &[i(1), i(25)]).unwrap().first_value(), Some(&i(1)));
    assert_eq!(db.rows("SELECT txn FROM urt WHERE userid = 1 ORDER BY txn"), vec![vec![s("x")], vec![s("z")]]);
    // DESC, and a LIMIT larger than the rows.
    assert_eq!(db.rows("DELETE FROM urt WHERE userid = 1 ORDER BY txn DESC, userid LIMIT 1"), vec![vec![i(1)]]);
    assert_eq!(db.rows("SELECT txn FROM urt WHERE userid = 1"), vec![vec![s("x")]]);
    assert_eq!(db.rows("DELETE FROM urt WHERE userid = 1 ORDER BY userid, txn LIMIT 5"), vec![vec![i(1)]]);
    assert_eq!(db.rows("DELETE FROM urt WHERE userid = 2 ORDER BY userid, txn LIMIT 0"), vec![vec![i(0)]]);
    // Every column orders a table without a unique key.
    db.run("INSERT INTO free VALUES (1, 2), (1, 1), (0, 9)");
    assert_eq!(db.rows("DELETE FROM free ORDER BY a DESC, b LIMIT 1"), vec![vec![i(1)]]);
    assert_eq!(db.rows("SELECT a, b FROM free ORDER BY a, b"), vec![vec![i(0), i(9)], vec![i(1), i(2)]]);
    // Refused: an order that is not unique, LIMIT without ORDER BY, expressions.
    assert!(db.err("DELETE FROM urt WHERE userid = 2 ORDER BY at LIMIT 1").contains("every column of URT's primary key"));
    assert!(db.err("DELETE FROM free ORDER BY a LIMIT 1").contains("(or every column)"));
    assert!(db.err("DELETE FROM urt WHERE userid = 2 LIMIT 1").contains("needs an ORDER BY over a unique key of URT"));
    assert!(db.err("DELETE FROM urt ORDER BY userid + 1, txn LIMIT 1").contains("takes column names"));
    assert!(db.err("DELETE FROM urt ORDER BY userid, txn LIMIT -1").contains("non-negative"));
}

#[test]
fn a_view_of_a_stream_may_be_deleted_from() {
    let mut db = Db::new(
        "CREATE STREAM ev PARTITION ON COLUMN userid (userid BIGINT NOT NULL, amount BIGINT NOT NULL);
         CREATE VIEW bal AS SELECT userid, COUNT(*) AS n, SUM(amount) AS total FROM ev GROUP BY userid;
         CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY);
         CREATE VIEW tv AS SELECT id, COUNT(*) AS n FROM t GROUP BY id;",
    );
    db.run("INSERT INTO ev VALUES (1, 10)");
    db.run("INSERT INTO ev VALUES (1, 5)");
    db.run("INSERT INTO ev VALUES (2, 7)");
    // The charging demo's DelUser: the user's row of the stream's view goes.
    assert_eq!(db.rows("DELETE FROM bal WHERE userid = 1"), vec![vec![i(1)]]);
    assert_eq!(db.rows("SELECT userid, n, total FROM bal"), vec![vec![i(2), i(1), i(7)]]);
    // The next event of the group starts it afresh.
    db.run("INSERT INTO ev VALUES (1, 3)");
    assert_eq!(db.rows("SELECT n, total FROM bal WHERE userid = 1"), vec![vec![i(1), i(3)]]);
    // A view of a table is recounted from its rows, so it stays read-only; so does UPDATE.
    assert!(db.err("DELETE FROM tv").contains("read-only"));
    assert!(db.err("UPDATE bal SET total = 0").contains("read-only"));
}

#[test]
fn streams_accept_insert_only() {
    let mut db = Db::new("CREATE STREAM ev PARTITION ON COLUMN id EXPORT TO TARGET out (id INTEGER NOT NULL, msg VARCHAR(10));");
    assert_eq!(db.rows("INSERT INTO ev VALUES (1, 'x')"), vec![vec![i(1)]]);
    assert!(db.err("SELECT * FROM ev").contains("stream EV cannot be queried"));
    assert!(db.err("DELETE FROM ev").contains("INSERT only"));
}

#[test]
fn select_without_from_and_unsupported_forms() {
    let mut db = company();
    assert_eq!(db.rows("SELECT 1 + 1, 'x'"), vec![vec![i(2), s("x")]]);
    assert!(db.err("SELECT * FROM emp FOR UPDATE").contains("not supported"));
    assert!(db.err("SELECT * FROM emp e JOIN LATERAL (SELECT 1) x ON true").contains("not supported"));
    assert!(db.err("SELEC 1").contains("syntax error"));
    assert!(prepare(&db.cat, "CREATE TABLE x (a INT)").is_err());
}

/// Scans and index ranges visit rows in batches (see `each_prefetched`): every row must
/// still come once, in order, with a filter applied and a LIMIT stopping inside a batch.
#[test]
fn scans_and_ranges_over_many_batches_keep_order_filters_and_limits() {
    let mut db = Db::new("CREATE TABLE kv (k VARCHAR(8) NOT NULL, grp INTEGER NOT NULL, v VARBINARY(64), PRIMARY KEY (k, grp));");
    // Keys inserted out of order, so row ids and key order differ; some rows deleted.
    for n in (0..40).rev() {
        db.run(&format!("INSERT INTO kv VALUES ('k{n:02}', {}, x'{n:02x}')", n % 3));
    }
    db.run("DELETE FROM kv WHERE k IN ('k05', 'k17')");
    let keys = |rows: Vec<Vec<Value>>| -> Vec<String> { rows.into_iter().map(|r| r[0].to_string()).collect() };
    let want = |ns: &mut dyn Iterator<Item = i32>| -> Vec<String> { ns.map(|n| format!("k{n:02}")).collect() };
    assert_eq!(
        keys(db.rows("SELECT k FROM kv WHERE k >= 'k03' AND grp = 1 ORDER BY k LIMIT 9")),
        want(&mut (3..40).filter(|n| n % 3 == 1).take(9))
    );
    assert_eq!(
        keys(db.rows("SELECT k FROM kv WHERE k >= 'k03' ORDER BY k LIMIT 13")),
        want(&mut (3..40).filter(|&n| n != 5 && n != 17).take(13))
    );
    assert_eq!(
        keys(db.rows("SELECT k FROM kv WHERE k < 'k30' ORDER BY k DESC LIMIT 10")),
        want(&mut (0..30).rev().filter(|&n| n != 17).take(10))
    );
    let mut all = keys(db.rows("SELECT k FROM kv WHERE v <> x'07'"));
    all.sort();
    assert_eq!(all, want(&mut (0..40).filter(|&n| ![5, 7, 17].contains(&n))));
    let grp2 = (0..40).filter(|n| n % 3 == 2 && ![5, 17].contains(n)).count() as i64;
    assert_eq!(db.rows("SELECT COUNT(*) FROM kv WHERE grp = 2"), vec![vec![i(grp2)]]);
    assert_eq!(db.rows("SELECT k FROM kv LIMIT 11").len(), 11);
}

/// `execute_each` hands over exactly the rows `execute` returns, in order (point reads,
/// scans, LIMIT and OFFSET, sorted, grouped and DISTINCT results, parameters that need
/// converting), stops when told to, and counts what `exec` counts: rows of a SELECT, rows a
/// DML statement changed (whose `modified_tuples` row it also hands over).
#[test]
fn rows_handed_over_one_at_a_time_equal_the_result_table() {
    let mut db = Db::new(
        "CREATE TABLE t (id INTEGER NOT NULL, name VARCHAR(40), g TINYINT, PRIMARY KEY (id));
         CREATE INDEX t_g ON t (g);",
    );
    for n in 0..30 {
        db.run(&format!("INSERT INTO t VALUES ({n}, 'name number {n} is long enough', {})", n % 4));
    }
    let each = |db: &mut Db, sql: &str, params: &[Value], stop_after: usize| -> (Vec<Vec<Value>>, u64) {
        let p = prepare(&db.cat, sql).unwrap();
        let mut rows = Vec::new();
        let n = crate::execute_each(&p, params, &db.ctx, &mut db.part, &mut |r| {
            rows.push(r.to_vec());
            Ok(rows.len() < stop_after)
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
        (rows, n)
    };
    let reads: [(&str, Vec<Value>); 9] = [
        ("SELECT name, g FROM t WHERE id = ?", vec![i(7)]),
        ("SELECT name, g FROM t WHERE id = ?", vec![Value::from("8")]),
        ("SELECT name FROM t WHERE id = ?", vec![i(99)]),
        ("SELECT id, name FROM t WHERE g = ?", vec![i(2)]),
        ("SELECT id FROM t WHERE g = 1 ORDER BY id DESC LIMIT 3 OFFSET 2", vec![]),
        ("SELECT * FROM t LIMIT 4 OFFSET 5", vec![]),
        ("SELECT g, COUNT(*), MAX(id) FROM t GROUP BY g ORDER BY g", vec![]),
        ("SELECT DISTINCT g FROM t ORDER BY g", vec![]),
        ("SELECT id FROM t LIMIT 0", vec![]),
    ];
    for (sql, params) in &reads {
        let table = db.try_run(sql, params).unwrap();
        assert_eq!(each(&mut db, sql, params, usize::MAX), (table.rows.clone(), table.rows.len() as u64), "{sql}");
        let first: Vec<_> = table.rows.iter().take(1).cloned().collect();
        assert_eq!(each(&mut db, sql, params, 1), (first.clone(), first.len() as u64), "{sql}, first row");
    }
    assert_eq!(each(&mut db, "UPDATE t SET g = 9 WHERE g = ?", &[i(3)], usize::MAX), (vec![vec![i(7)]], 7));
    assert_eq!(each(&mut db, "DELETE FROM t WHERE id = ?", &[i(99)], usize::MAX), (vec![vec![i(0)]], 0));
    assert_eq!(each(&mut db, "INSERT INTO t VALUES (?, ?, ?)", &[i(100), Value::from("x"), i(1)], 0), (vec![vec![i(1)]], 1));
    assert_eq!(db.rows("SELECT COUNT(*) FROM t WHERE g = 9"), vec![vec![i(7)]]);
    // A failed write leaves nothing behind, as with `execute`.
    let p = prepare(&db.cat, "INSERT INTO t VALUES (?, ?, ?)").unwrap();
    assert!(crate::execute_each(&p, &[i(100), Value::from("dup"), i(1)], &db.ctx, &mut db.part, &mut |_| Ok(true)).is_err());
    assert_eq!(db.rows("SELECT name FROM t WHERE id = 100"), vec![vec![Value::from("x")]]);
}

/// Aggregates that add a value in place (COUNT, integer SUM and AVG, MIN and MAX kept)
/// answer as the general path does: NULLs skipped, overflow reported, DISTINCT counted once.
#[test]
fn aggregates_added_in_place_keep_sql_semantics() {
    let mut db = Db::new("CREATE TABLE a (id INTEGER NOT NULL PRIMARY KEY, x BIGINT, s VARCHAR(5));");
    db.run("INSERT INTO a VALUES (1, 5, 'b'), (2, NULL, NULL), (3, -2, 'a'), (4, 5, 'c'), (5, 9223372036854775807, 'b')");
    assert_eq!(
        db.rows("SELECT COUNT(x), MIN(x), MAX(x), MIN(s), MAX(s), COUNT(*) FROM a WHERE id < 5"),
        vec![vec![i(3), i(-2), i(5), s("a"), s("c"), i(4)]]
    );
    // 8 / 3 truncated, as VoltDB averages integers.
    assert_eq!(
        db.rows("SELECT SUM(x), AVG(x), COUNT(DISTINCT x), SUM(DISTINCT x) FROM a WHERE id < 5"),
        vec![vec![i(8), i(2), i(2), i(3)]]
    );
    assert_eq!(db.rows("SELECT MAX(x) FROM a"), vec![vec![i(i64::MAX)]]);
    assert!(db.err("SELECT SUM(x) FROM a").contains("overflow"));
    assert_eq!(db.rows("SELECT SUM(x), MIN(x), COUNT(x) FROM a WHERE x IS NULL"), vec![vec![N, N, i(0)]]);
}
