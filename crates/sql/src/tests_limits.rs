//! What a statement may spend: the query timeout (`ExecCtx::deadline`), the cap on the
//! answer it builds and on what a multi-partition read gathers (`ExecCtx::limits`), and
//! aggregates that stream their input instead of holding it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockstep_core::{Catalog, HashRing, Result, ResultTable, Value};

use crate::exec::{run_select, Probe, RowSource};
use crate::expr::Env;
use crate::testing::LocalSites;
use crate::tests_sql::{ctx, i, Db};
use crate::{execute, execute_mp, is_query_timeout, prepare, Deadline, ExecCtx, Limits, Plan, SiteAccess, SiteFn, Target};

const DDL: &str = "
CREATE TABLE a (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(20));
CREATE TABLE b (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(20));
CREATE TABLE c (id BIGINT NOT NULL PRIMARY KEY);
CREATE TABLE acct (id BIGINT NOT NULL PRIMARY KEY, owner VARCHAR(10) NOT NULL, bal INTEGER);
PARTITION TABLE acct ON COLUMN id;
";

/// Rows each way of the cross join: millions of joined rows, far more than a short
/// deadline allows, and few enough to finish without one.
const CROSS_ROWS: i64 = 2_000;
/// Rows of the table scanned past a deadline: more than one check interval.
const SCAN_ROWS: i64 = 10_000;

fn load(db: &mut Db, table: &str, n: i64) {
    let p = prepare(&db.cat, &format!("INSERT INTO {table} VALUES (?, ?)")).unwrap_or_else(|e| panic!("{e}"));
    for k in 0..n {
        execute(&p, &[i(k), Value::from(format!("name {k:05}").as_str())], &db.ctx, &mut db.part).unwrap_or_else(|e| panic!("{e}"));
    }
}

fn with_deadline(deadline: Deadline) -> ExecCtx {
    ExecCtx { deadline: Some(deadline), ..ctx() }
}

/// A deadline that passed a second ago.
fn passed() -> Deadline {
    let now = Instant::now();
    Deadline { started: now.checked_sub(Duration::from_secs(1)).unwrap_or(now), at: now }
}

/// The error of `r`; a table would be too long to print, so a success shows its size.
fn failure(r: Result<ResultTable>, what: &str) -> lockstep_core::Error {
    match r {
        Ok(t) => panic!("{what} should fail but gave {} rows", t.rows.len()),
        Err(e) => e,
    }
}

fn with_limits(limits: Limits) -> ExecCtx {
    ExecCtx { limits, ..ctx() }
}

/// Each run of a correlated subquery reads fewer rows than a check interval, and so does
/// the query around it: the deadline must still stop them (each run looks at the clock).
#[test]
fn correlated_subqueries_past_their_deadline_fail() {
    let mut db = Db::new(DDL);
    load(&mut db, "a", 100);
    let sql = "SELECT COUNT(*) FROM a x WHERE (SELECT COUNT(*) FROM a y WHERE y.id <= x.id) > 0";
    assert_eq!(db.rows(sql), vec![vec![i(100)]]);
    db.ctx = with_deadline(passed());
    let e = failure(db.try_run(sql, &[]), "a passed deadline must stop the subqueries");
    assert!(is_query_timeout(&e), "{}", e.message);
}

/// The answers of subqueries kept for the whole statement count together against the cap
/// on what one answer may hold.
#[test]
fn kept_subquery_answers_count_against_the_answer_cap() {
    let mut db = Db::new(DDL);
    load(&mut db, "a", 1_000);
    db.run("INSERT INTO b VALUES (5000, 'x')");
    // One set of 1,000 integers is counted as 12,000 bytes: one fits under the cap, two do not.
    db.ctx = with_limits(Limits { result_bytes_max: 18_000, ..Limits::DEFAULT });
    assert_eq!(db.rows("SELECT COUNT(*) FROM b WHERE id IN (SELECT id FROM a)"), vec![vec![i(0)]]);
    let two = "SELECT COUNT(*) FROM b WHERE id IN (SELECT id FROM a) OR id IN (SELECT id + 1 FROM a)";
    let e = failure(db.try_run(two, &[]), "two sets over the cap");
    assert!(e.message.contains("larger than"), "{}", e.message);
}

#[test]
fn a_cross_join_past_its_deadline_fails_with_voltdbs_message_and_changes_nothing() {
    let mut db = Db::new(DDL);
    load(&mut db, "a", CROSS_ROWS);
    load(&mut db, "b", CROSS_ROWS);
    let count = "SELECT COUNT(*) FROM a, b WHERE a.name <> b.name OR a.id = b.id";
    let short = Deadline::after(Duration::from_millis(20)).unwrap_or_else(passed);
    db.ctx = with_deadline(short);
    let e = failure(db.try_run(count, &[]), "a short deadline must stop millions of rows");
    assert!(is_query_timeout(&e), "{}", e.message);
    let secs = e.message.strip_prefix("A SQL query was terminated after ").and_then(|m| m.split(' ').next()).unwrap_or("");
    assert!(secs.len() >= 5 && secs.as_bytes()[secs.len() - 4] == b'.', "X.XXX seconds in {}", e.message);
    assert!(e.message.ends_with(" seconds because it exceeded the query timeout period."), "{}", e.message);
    assert_eq!(e.kind, lockstep_core::ErrorKind::Graceful);
    // DML over the same join rolls back what it did before the deadline.
    db.ctx = with_deadline(Deadline::after(Duration::from_millis(20)).unwrap_or_else(passed));
    let e = failure(db.try_run("INSERT INTO c SELECT a.id * 10000 + b.id FROM a, b", &[]), "stopped");
    assert!(is_query_timeout(&e), "{}", e.message);
    db.ctx = ctx();
    assert_eq!(db.rows("SELECT COUNT(*) FROM c"), vec![vec![i(0)]]);
    // Without a deadline (a replay of the log) the same query runs to the end.
    assert_eq!(db.rows(count), vec![vec![i(CROSS_ROWS * CROSS_ROWS)]]);
}

#[test]
fn a_passed_deadline_stops_a_scan_but_not_a_point_read() {
    let mut db = Db::new(DDL);
    load(&mut db, "a", SCAN_ROWS);
    db.ctx = with_deadline(passed());
    for sql in ["SELECT * FROM a", "SELECT name FROM a ORDER BY name DESC", "SELECT name, COUNT(*) FROM a GROUP BY name", "DELETE FROM a"] {
        let e = failure(db.try_run(sql, &[]), sql);
        assert!(is_query_timeout(&e), "{sql}: {}", e.message);
    }
    // A point read never gets to look at the clock.
    assert_eq!(db.rows("SELECT id FROM a WHERE id = 7"), vec![vec![i(7)]]);
    db.ctx = ctx();
    assert_eq!(db.rows("SELECT COUNT(*) FROM a"), vec![vec![i(SCAN_ROWS)]]);
}

/// Multi-partition work over `LocalSites`, counting the rows the partitions hand over.
struct Counting {
    sites: LocalSites,
    rows_handed_over: usize,
}

impl SiteAccess for Counting {
    fn partition_count(&self) -> u32 {
        self.sites.partition_count()
    }
    fn ring(&self) -> &HashRing {
        self.sites.ring()
    }
    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
        let r = self.sites.run(target, f)?;
        self.rows_handed_over += r.iter().map(|t| t.rows.len()).sum::<usize>();
        Ok(r)
    }
}

/// Three partitions and one partition holding the same `n` accounts.
fn accounts(n: i64) -> (Catalog, Counting, Db) {
    let mut one = Db::new(DDL);
    let mut sites = Counting { sites: LocalSites::new(3, &one.cat).unwrap_or_else(|e| panic!("{e}")), rows_handed_over: 0 };
    let p = Arc::new(prepare(&one.cat, "INSERT INTO acct VALUES (?, ?, ?)").unwrap_or_else(|e| panic!("{e}")));
    for k in 0..n {
        let bal = if k % 11 == 0 { Value::Null } else { i(k * 7 % 1000 - 300) };
        let row = [i(k), Value::from(["ann", "bob", "cy", "di", "ed"][(k % 5) as usize]), bal];
        execute_mp(&p, &row, &ctx(), &mut sites).unwrap_or_else(|e| panic!("{e}"));
        execute(&p, &row, &one.ctx, &mut one.part).unwrap_or_else(|e| panic!("{e}"));
    }
    (one.cat.clone(), sites, one)
}

fn run_mp(cat: &Catalog, sites: &mut Counting, sql: &str, ctx: &ExecCtx) -> Result<ResultTable> {
    let p = Arc::new(prepare(cat, sql)?);
    execute_mp(&p, &[], ctx, sites)
}

#[test]
fn a_passed_deadline_stops_a_multi_partition_read() {
    let (cat, mut sites, _) = accounts(3 * SCAN_ROWS);
    let e = failure(run_mp(&cat, &mut sites, "SELECT * FROM acct", &with_deadline(passed())), "past its deadline");
    assert!(is_query_timeout(&e), "{}", e.message);
    let e = failure(run_mp(&cat, &mut sites, "SELECT owner, COUNT(*) FROM acct GROUP BY owner", &with_deadline(passed())), "past");
    assert!(is_query_timeout(&e), "{}", e.message);
}

#[test]
fn aggregates_over_every_partition_hand_over_groups_not_rows() {
    let (cat, mut sites, mut one) = accounts(3_000);
    let queries = [
        ("SELECT COUNT(*) FROM acct", 3),
        ("SELECT COUNT(*), SUM(bal), MIN(bal), MAX(bal), AVG(bal), COUNT(bal) FROM acct", 3),
        ("SELECT COUNT(*), AVG(bal) FROM acct WHERE bal > 100", 3),
        ("SELECT owner, COUNT(*), SUM(bal), MIN(bal), MAX(bal), AVG(bal) FROM acct GROUP BY owner ORDER BY owner", 15),
        ("SELECT owner, SUM(bal) FROM acct WHERE id < 1000 GROUP BY owner HAVING SUM(bal) > 0 ORDER BY 2 DESC LIMIT 2", 15),
        ("SELECT MAX(id) FROM acct WHERE owner = 'nobody'", 3),
    ];
    for (sql, most) in queries {
        sites.rows_handed_over = 0;
        let got = run_mp(&cat, &mut sites, sql, &ctx()).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(sites.rows_handed_over <= most, "{sql}: the partitions handed over {} rows", sites.rows_handed_over);
        assert_eq!(got, one.run(sql), "{sql}");
    }
    // On one partition, COUNT(*) holds no row: it works under a cap smaller than one row
    // of every 10 the table has.
    let sql = "SELECT COUNT(*), SUM(bal), MAX(owner) FROM acct";
    let want = one.rows(sql);
    assert_eq!(want[0][0], i(3_000));
    one.ctx = with_limits(Limits { result_bytes_max: 200, ..Limits::DEFAULT });
    assert_eq!(one.rows(sql), want);
}

/// A row source of `rows` rows of (id, name), counting the rows it was asked for.
struct Endless {
    rows: i64,
    visited: std::cell::Cell<i64>,
}

impl RowSource for Endless {
    /// Its rows are made as they are visited: none can be found again by id.
    fn row(&self, _j: usize, _id: u32) -> Option<std::borrow::Cow<'_, [Value]>> {
        None
    }

    fn each(&self, _j: usize, _probe: &Probe, f: &mut dyn FnMut(u32, &[Value]) -> Result<bool>) -> Result<bool> {
        for k in 0..self.rows {
            self.visited.set(self.visited.get() + 1);
            if !f(k as u32, &[i(k), Value::from("0123456789")])? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[test]
fn an_answer_past_its_cap_fails_while_it_is_built() {
    const CAP_BYTES: usize = 10_000;
    let db = Db::new(DDL);
    let capped = with_limits(Limits { result_bytes_max: CAP_BYTES, ..Limits::DEFAULT });
    let cases = [
        "SELECT * FROM a",
        "SELECT name, id FROM a ORDER BY name",
        "SELECT DISTINCT name FROM a",
        "SELECT id, COUNT(*) FROM a GROUP BY id",
    ];
    for sql in cases {
        let p = prepare(&db.cat, sql).unwrap_or_else(|e| panic!("{e}"));
        let Plan::Select(plan) = &p.plan else { panic!("{sql} is a SELECT") };
        let src = Endless { rows: 1_000_000, visited: 0.into() };
        let e = failure(run_select(plan, &src, &Env::new(&[], &capped), false), sql);
        assert!(e.message.contains(&format!("{CAP_BYTES} bytes")), "{sql}: {}", e.message);
        // A row is over 20 bytes: the cap was met within the first thousand rows.
        assert!(src.visited.get() <= 1_000, "{sql}: read {} rows before failing", src.visited.get());
    }
    // Top-N and LIMIT answers fit, whatever they read.
    let mut db = Db::new(DDL);
    load(&mut db, "a", SCAN_ROWS);
    let top = "SELECT id, name FROM a ORDER BY name DESC LIMIT 5 OFFSET 2";
    let want = db.rows(top);
    db.ctx = capped;
    assert_eq!(db.rows(top), want);
    assert_eq!(want[0], vec![i(SCAN_ROWS - 3), Value::from(format!("name {:05}", SCAN_ROWS - 3).as_str())]);
    assert_eq!(db.rows("SELECT id FROM a LIMIT 3").len(), 3);
    let e = failure(db.try_run("SELECT * FROM a", &[]), "too big");
    assert!(e.message.contains("LIMIT"), "{}", e.message);
}

#[test]
fn multi_partition_reads_hold_their_gather_and_answer_caps() {
    let (cat, mut sites, _) = accounts(3_000);
    let rows_cap = with_limits(Limits { gather_rows_max: 100, ..Limits::DEFAULT });
    let e = failure(run_mp(&cat, &mut sites, "SELECT * FROM acct ORDER BY id", &rows_cap), "too many rows");
    assert!(e.message.contains("more than 100 rows"), "{}", e.message);
    let bytes_cap = with_limits(Limits { gather_bytes_max: 5_000, ..Limits::DEFAULT });
    let e = failure(run_mp(&cat, &mut sites, "SELECT * FROM acct WHERE bal > 0", &bytes_cap), "too many bytes");
    assert!(e.message.contains("5000 bytes"), "{}", e.message);
    let answer_cap = with_limits(Limits { result_bytes_max: 5_000, ..Limits::DEFAULT });
    let e = failure(run_mp(&cat, &mut sites, "SELECT * FROM acct", &answer_cap), "answer too big");
    assert!(e.message.contains("5000 bytes") && e.message.contains("answer"), "{}", e.message);
    // Under the caps, the same reads work.
    assert_eq!(run_mp(&cat, &mut sites, "SELECT COUNT(*) FROM acct WHERE id < 50", &rows_cap).map(|t| t.rows), Ok(vec![vec![i(50)]]));
    assert_eq!(run_mp(&cat, &mut sites, "SELECT id FROM acct WHERE id < 20", &bytes_cap).map(|t| t.rows.len()), Ok(20));
}
