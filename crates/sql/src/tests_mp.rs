//! Multi-partition execution: the same statements over 3 partitions (`execute_mp` on
//! `LocalSites`) and over 1 partition holding every row must give the same answers.

use std::sync::Arc;

use lockstep_core::Value;

use crate::testing::LocalSites;
use crate::tests_sql::{ctx, i, s, Db};
use crate::{execute_mp, prepare, Route, SiteAccess};

const DDL: &str = "
CREATE TABLE acct (id BIGINT NOT NULL, owner VARCHAR(10) NOT NULL, bal INTEGER, PRIMARY KEY (id));
PARTITION TABLE acct ON COLUMN id;
CREATE INDEX acct_owner ON acct (owner);
CREATE TABLE txn (acct BIGINT NOT NULL, seq INTEGER NOT NULL, amt INTEGER, PRIMARY KEY (acct, seq));
PARTITION TABLE txn ON COLUMN acct;
CREATE TABLE kind (k INTEGER NOT NULL PRIMARY KEY, label VARCHAR(10));
CREATE VIEW by_owner (owner, n, total, lo, hi) AS SELECT owner, COUNT(*), SUM(bal), MIN(bal), MAX(bal) FROM acct GROUP BY owner;
CREATE VIEW by_acct (acct, n, total) AS SELECT acct, COUNT(*), SUM(amt) FROM txn GROUP BY acct;
";

struct Mp {
    cat: lockstep_core::Catalog,
    sites: LocalSites,
}

impl Mp {
    fn new() -> Mp {
        let one = Db::new(DDL);
        let sites = LocalSites::new(3, &one.cat).unwrap();
        Mp { cat: one.cat, sites }
    }
    fn run(&mut self, sql: &str, params: &[Value]) -> lockstep_core::Result<lockstep_core::ResultTable> {
        let p = Arc::new(prepare(&self.cat, sql)?);
        execute_mp(&p, params, &ctx(), &mut self.sites)
    }
}

fn load(mp: &mut Mp, one: &mut Db) -> Vec<i64> {
    let mut counts = Vec::new();
    let mut both = |sql: &str, params: &[Value]| {
        let a = mp.run(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = one.try_run(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(a, b, "{sql}");
        counts.push(a.first_value().and_then(Value::as_i64).unwrap_or(-1));
    };
    for id in 0..30i64 {
        let owner = ["ann", "bob", "cy", "di"][(id % 4) as usize];
        let bal = if id % 7 == 0 { Value::Null } else { i(id * 10 - 100) };
        both("INSERT INTO acct VALUES (?, ?, ?)", &[i(id), s(owner), bal]);
        for seq in 0..(id % 3) {
            both("INSERT INTO txn VALUES (?, ?, ?)", &[i(id), i(seq), i(id + seq)]);
        }
    }
    both("INSERT INTO kind VALUES (1, 'one'), (2, 'two'), (3, 'three')", &[]);
    both("INSERT INTO acct VALUES (100, 'zed', 1), (101, 'zed', 2), (102, 'amy', 3)", &[]);
    both("UPDATE acct SET bal = bal + 1 WHERE owner = 'bob'", &[]);
    both("DELETE FROM acct WHERE bal > 150 AND bal < 170", &[]);
    both("UPDATE kind SET label = 'uno' WHERE k = 1", &[]);
    both("INSERT INTO txn SELECT id, 100, bal FROM acct WHERE owner = 'cy' AND bal IS NOT NULL", &[]);
    counts
}

#[test]
fn three_partitions_answer_like_one() {
    let mut mp = Mp::new();
    let mut one = Db::new(DDL);
    let counts = load(&mut mp, &mut one);
    assert_eq!(counts[counts.len() - 4..], [8, 2, 1, 5], "DML counts: update bob, delete, replicated update, insert-select");
    // Rows really are spread over the partitions.
    let spread: Vec<usize> = (0..3).map(|p| mp.sites.partitions[p].table(mp.cat.table("acct").unwrap().id).unwrap().len()).collect();
    assert!(spread.iter().all(|&n| n > 3), "{spread:?}");
    assert_eq!(spread.iter().sum::<usize>(), 31);
    let queries = [
        "SELECT * FROM acct ORDER BY id",
        "SELECT id, bal FROM acct WHERE owner = 'ann' ORDER BY bal DESC, id",
        "SELECT owner, COUNT(*), SUM(bal), MIN(bal), MAX(bal), AVG(bal), COUNT(DISTINCT bal) FROM acct GROUP BY owner ORDER BY owner",
        "SELECT * FROM by_owner ORDER BY owner",
        "SELECT owner, total FROM by_owner WHERE n > 7 ORDER BY total DESC",
        "SELECT * FROM by_acct ORDER BY acct",
        // by_acct groups by txn's partitioning column: each partition's rows are final,
        // and the aggregate over them is computed on each partition.
        "SELECT SUM(total), COUNT(*), MAX(n) FROM by_acct",
        "SELECT n, COUNT(*) FROM by_acct GROUP BY n ORDER BY n",
        "SELECT a.id, a.owner, t.seq, t.amt FROM acct a JOIN txn t ON t.acct = a.id ORDER BY a.id, t.seq",
        "SELECT a.id, COUNT(t.seq) FROM acct a LEFT JOIN txn t ON t.acct = a.id GROUP BY a.id ORDER BY a.id",
        "SELECT id FROM acct ORDER BY id DESC LIMIT 5",
        "SELECT id FROM acct ORDER BY id LIMIT 4 OFFSET 3",
        "SELECT DISTINCT owner FROM acct ORDER BY owner",
        "SELECT k.label, COUNT(*) FROM txn t, kind k WHERE t.seq = k.k GROUP BY k.label ORDER BY 1",
        "SELECT COUNT(*) FROM acct WHERE bal IS NULL",
        "SELECT id FROM acct WHERE id = 17",
        "SELECT * FROM kind ORDER BY k",
        "SELECT COUNT(*), SUM(amt) FROM txn",
        // Joins in another order than written, and by hash (no index on amt or bal).
        "SELECT a.id, k.label, t.seq FROM kind k, acct a, txn t WHERE t.acct = a.id AND t.seq + 1 = k.k ORDER BY a.id, k.label, t.seq",
        "SELECT a.id, t.acct FROM txn t JOIN acct a ON a.bal = t.amt ORDER BY 1, 2",
        "WITH RECURSIVE c(id, n) AS (SELECT id, 0 FROM acct WHERE id = 3 \
         UNION ALL SELECT a.id, c.n + 1 FROM acct a JOIN c ON a.id = c.id + 3 WHERE c.n < 5) SELECT id, n FROM c ORDER BY id",
    ];
    for q in queries {
        let a = mp.run(q, &[]).unwrap_or_else(|e| panic!("{q}: {e}"));
        let b = one.run(q);
        assert_eq!(a, b, "{q}");
        assert!(!a.rows.is_empty(), "{q} should return rows");
    }
    let p = prepare(&mp.cat, "SELECT owner FROM acct WHERE id = ?").unwrap();
    assert!(matches!(p.route, Route::PartitionParam { param: 0, .. }));
    assert_eq!(mp.run("SELECT owner FROM acct WHERE id = ?", &[i(13)]).unwrap().rows, vec![vec![s("bob")]]);
}

#[test]
fn mp_errors_are_clear() {
    let mut mp = Mp::new();
    mp.run("INSERT INTO acct VALUES (1, 'a', 1)", &[]).unwrap();
    let e = mp.run("INSERT INTO acct VALUES (2, 'b', 1), (1, 'c', 1)", &[]).unwrap_err();
    assert_eq!(e.kind, lockstep_core::ErrorKind::Constraint);
    assert_eq!(mp.sites.partition_count(), 3);
    assert!(mp.run("SELECT * FROM acct WHERE id = ?", &[]).unwrap_err().message.contains("expects 1 parameters"));
}

#[test]
fn delete_with_limit_runs_on_one_partition_only() {
    let mut mp = Mp::new();
    mp.run("INSERT INTO txn VALUES (1, 1, 10), (1, 2, 20), (2, 1, 30), (3, 1, 40)", &[]).unwrap();
    // Every partition would keep its own first row: refused, with the fix named.
    let e = mp.run("DELETE FROM txn ORDER BY acct, seq LIMIT 1", &[]).unwrap_err().message;
    assert!(e.contains("must run on one partition: add WHERE ACCT = ?"), "{e}");
    assert_eq!(mp.run("SELECT COUNT(*) FROM txn", &[]).unwrap().first_value(), Some(&i(4)));
    // Pinned to a partition by its key, it runs there.
    let p = Arc::new(prepare(&mp.cat, "DELETE FROM txn WHERE acct = ? ORDER BY acct, seq DESC LIMIT 1").unwrap());
    assert!(matches!(p.route, Route::PartitionParam { param: 0, .. }), "{:?}", p.route);
    // A replicated table is the same everywhere, so the same row goes on every partition.
    mp.run("INSERT INTO kind VALUES (1, 'one'), (2, 'two'), (3, 'three')", &[]).unwrap();
    assert_eq!(mp.run("DELETE FROM kind ORDER BY k DESC LIMIT 2", &[]).unwrap().first_value(), Some(&i(2)));
    assert_eq!(mp.run("SELECT k FROM kind", &[]).unwrap().first_value(), Some(&i(1)));
}

/// Tables for co-located joins: acct, txn and prof partitioned on keys of integer types of
/// several widths, tag on a VARCHAR key that holds the same numbers as text, rate on a
/// DECIMAL key holding them as decimals (equal to the integers, but hashed otherwise), kind
/// replicated, a view whose groups span partitions and one grouped by its source's
/// partition column.
const COLOCATED_DDL: &str = "
CREATE TABLE acct (id BIGINT NOT NULL, owner VARCHAR(10) NOT NULL, bal INTEGER, PRIMARY KEY (id));
PARTITION TABLE acct ON COLUMN id;
CREATE TABLE txn (acct BIGINT NOT NULL, seq INTEGER NOT NULL, amt INTEGER, PRIMARY KEY (acct, seq));
PARTITION TABLE txn ON COLUMN acct;
CREATE TABLE prof (id INTEGER NOT NULL PRIMARY KEY, note VARCHAR(10));
PARTITION TABLE prof ON COLUMN id;
CREATE TABLE tag (code VARCHAR(10) NOT NULL PRIMARY KEY, n INTEGER);
PARTITION TABLE tag ON COLUMN code;
CREATE TABLE rate (id DECIMAL NOT NULL PRIMARY KEY, r INTEGER);
PARTITION TABLE rate ON COLUMN id;
CREATE TABLE kind (k INTEGER NOT NULL PRIMARY KEY, label VARCHAR(10));
CREATE VIEW by_owner (owner, n, total) AS SELECT owner, COUNT(*), SUM(bal) FROM acct GROUP BY owner;
CREATE VIEW by_acct (acct, n, total) AS SELECT acct, COUNT(*), SUM(amt) FROM txn GROUP BY acct;
";

/// A `SiteAccess` that records the step of every fragment it runs.
struct Recording<'a> {
    sites: &'a mut LocalSites,
    steps: Vec<crate::Step>,
}

impl SiteAccess for Recording<'_> {
    fn partition_count(&self) -> u32 {
        self.sites.partition_count()
    }
    fn ring(&self) -> &lockstep_core::HashRing {
        self.sites.ring()
    }
    fn run(&mut self, target: crate::Target, f: crate::SiteFn) -> lockstep_core::Result<Vec<lockstep_core::ResultTable>> {
        self.sites.run(target, f)
    }
    fn run_fragment(&mut self, target: crate::Target, f: crate::Fragment) -> lockstep_core::Result<Vec<lockstep_core::ResultTable>> {
        self.steps.push(f.spec.step.clone());
        self.sites.run(target, f.local)
    }
}

/// What a multi-partition read asked of the partitions.
#[derive(Debug, PartialEq)]
enum Ran {
    /// One round: each partition aggregated the join.
    Partials,
    /// One round: each partition ran the join and answered its rows.
    JoinedRows,
    /// Each source's rows were gathered and joined at the coordinator.
    Gathered,
}

impl Mp {
    fn colocated() -> (Mp, Db) {
        let one = Db::new(COLOCATED_DDL);
        let sites = LocalSites::new(3, &one.cat).unwrap();
        let mut mp = Mp { cat: one.cat.clone(), sites };
        let mut one = Db::new(COLOCATED_DDL);
        for id in 0..40i64 {
            let owner = ["ann", "bob", "cy", "di", "ed"][(id % 5) as usize];
            let bal = if id % 6 == 0 { Value::Null } else { i((id * 37) % 23 - 5) };
            let mut both = |sql: &str, params: &[Value]| {
                mp.run(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"));
                one.try_run(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"));
            };
            both("INSERT INTO acct VALUES (?, ?, ?)", &[i(id), s(owner), bal]);
            for seq in 0..(id % 4) {
                both("INSERT INTO txn VALUES (?, ?, ?)", &[i(id), i(seq), i((id * 7 + seq) % 19)]);
            }
            if id % 3 != 1 {
                both("INSERT INTO prof VALUES (?, ?)", &[i(id), s(["x", "y"][(id % 2) as usize])]);
            }
            both("INSERT INTO tag VALUES (?, ?)", &[s(&id.to_string()), i(id)]);
            both("INSERT INTO rate VALUES (?, ?)", &[i(id), i(id % 7)]);
        }
        // A txn row whose account does not exist, and one on a key no acct holds.
        mp.run("INSERT INTO txn VALUES (99, 0, 5), (98, 1, 6)", &[]).unwrap();
        one.run("INSERT INTO txn VALUES (99, 0, 5), (98, 1, 6)");
        mp.run("INSERT INTO kind VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three')", &[]).unwrap();
        one.run("INSERT INTO kind VALUES (0, 'zero'), (1, 'one'), (2, 'two'), (3, 'three')");
        (mp, one)
    }

    /// Runs `sql` across the partitions: its answer, and how it used them.
    fn run_recorded(&mut self, sql: &str, params: &[Value]) -> (lockstep_core::ResultTable, Ran) {
        let p = Arc::new(prepare(&self.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
        assert_eq!(p.route, Route::All, "{sql}");
        let mut rec = Recording { sites: &mut self.sites, steps: Vec::new() };
        let t = execute_mp(&p, params, &ctx(), &mut rec).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let ran = match rec.steps.as_slice() {
            [crate::Step::Partials] => Ran::Partials,
            [crate::Step::JoinedRows] => Ran::JoinedRows,
            steps if steps.iter().all(|s| matches!(s, crate::Step::GatherLevel { .. })) => Ran::Gathered,
            steps => panic!("{sql}: unexpected steps {steps:?}"),
        };
        (t, ran)
    }
}

/// Joins on partition columns run on each partition (one round of fragments) and answer
/// as one partition holding every row does; joins that are not co-located still gather,
/// and answer right too (they would not, run on each partition: their rows meet across
/// partitions).
#[test]
fn colocated_joins_run_on_each_partition_and_answer_like_one() {
    let (mut mp, mut one) = Mp::colocated();
    let spread: Vec<usize> = (0..3).map(|p| mp.sites.partitions[p].table(mp.cat.table("txn").unwrap().id).unwrap().len()).collect();
    assert!(spread.iter().all(|&n| n > 5), "{spread:?}");
    let cases: &[(&str, &[Value], Ran)] = &[
        ("SELECT COUNT(*), SUM(t.amt) FROM acct a JOIN txn t ON t.acct = a.id", &[], Ran::Partials),
        ("SELECT COUNT(*), MAX(t.amt) FROM acct a, txn t WHERE a.id = t.acct AND t.amt > ?", &[i(4)], Ran::Partials),
        // BIGINT and INTEGER keys hash alike; the third table is tied through the second.
        (
            "SELECT a.owner, COUNT(*), MIN(t.amt), MAX(p.note), AVG(a.bal) FROM acct a JOIN txn t ON t.acct = a.id \
             JOIN prof p ON p.id = t.acct GROUP BY a.owner ORDER BY a.owner",
            &[],
            Ran::Partials,
        ),
        (
            "SELECT a.owner, SUM(t.amt) FROM acct a JOIN txn t ON t.acct = a.id GROUP BY a.owner HAVING COUNT(*) > 10 ORDER BY 1",
            &[],
            Ran::Partials,
        ),
        ("SELECT a.id, COUNT(t.seq) FROM acct a LEFT JOIN txn t ON t.acct = a.id GROUP BY a.id ORDER BY a.id", &[], Ran::Partials),
        // A replicated table joins in: every partition holds it whole.
        ("SELECT k.label, COUNT(*) FROM txn t JOIN acct a ON a.id = t.acct JOIN kind k ON k.k = t.seq GROUP BY k.label ORDER BY 1", &[], Ran::Partials),
        (
            "SELECT a.id, t.seq, k.label FROM acct a JOIN txn t ON t.acct = a.id JOIN kind k ON k.k = t.seq ORDER BY a.id, t.seq",
            &[],
            Ran::JoinedRows,
        ),
        ("SELECT a.id, p.note FROM acct a LEFT JOIN prof p ON p.id = a.id ORDER BY a.id DESC LIMIT 7 OFFSET 3", &[], Ran::JoinedRows),
        ("SELECT a.id, p.note FROM acct a LEFT JOIN prof p ON p.id = a.id ORDER BY a.id LIMIT ? OFFSET ?", &[i(4), i(30)], Ran::JoinedRows),
        ("SELECT DISTINCT a.owner FROM acct a JOIN txn t ON t.acct = a.id ORDER BY a.owner", &[], Ran::JoinedRows),
        ("SELECT DISTINCT p.note, a.owner FROM acct a JOIN prof p ON p.id = a.id ORDER BY 2, 1 LIMIT 6", &[], Ran::JoinedRows),
        // Sorted by a column that is not output (a hidden sort key travels with each row).
        ("SELECT a.id FROM acct a JOIN prof p ON p.id = a.id WHERE a.bal IS NOT NULL ORDER BY a.bal DESC, a.id LIMIT 5", &[], Ran::JoinedRows),
        ("SELECT a.id, t.seq, p.note FROM acct a LEFT JOIN txn t ON t.acct = a.id LEFT JOIN prof p ON p.id = t.acct ORDER BY a.id, t.seq", &[], Ran::JoinedRows),
        ("SELECT a.id FROM acct a LEFT JOIN txn t ON t.acct = a.id WHERE t.seq IS NULL ORDER BY a.id", &[], Ran::JoinedRows),
        // A partitioned table LEFT JOIN a replicated one (on any terms).
        ("SELECT a.id, k.label FROM acct a LEFT JOIN kind k ON k.k = a.id - 10 WHERE a.id < 16 ORDER BY a.id", &[], Ran::JoinedRows),
        // A view grouped by its source's partition column holds final rows on each partition.
        ("SELECT a.owner, v.n, v.total FROM by_acct v JOIN acct a ON a.id = v.acct ORDER BY v.acct", &[], Ran::JoinedRows),
        // Not co-located: each is gathered and joined here.
        ("SELECT a.id, t.acct, t.seq FROM acct a JOIN txn t ON t.seq = a.id ORDER BY 1, 2, 3", &[], Ran::Gathered),
        ("SELECT k.k, a.id FROM kind k LEFT JOIN acct a ON a.id = k.k ORDER BY 1, 2", &[], Ran::Gathered),
        ("SELECT g.code, a.id FROM tag g JOIN acct a ON CAST(g.code AS BIGINT) = a.id ORDER BY 2", &[], Ran::Gathered),
        ("SELECT a.id, r.r FROM acct a JOIN rate r ON r.id = a.id ORDER BY 1", &[], Ran::Gathered),
        ("SELECT SUM(r.r) FROM acct a JOIN rate r ON r.id = a.id", &[], Ran::Gathered),
        ("SELECT COUNT(*) FROM acct a JOIN txn t ON t.acct = a.id OR t.seq = a.id", &[], Ran::Gathered),
        ("SELECT COUNT(*) FROM acct a CROSS JOIN prof p", &[], Ran::Gathered),
        ("SELECT a.id, t.acct, t.seq FROM acct a LEFT JOIN txn t ON t.amt = a.bal ORDER BY 1, 2, 3", &[], Ran::Gathered),
        // acct and prof meet on a non-key: the key equality in the LEFT JOIN's ON ties nothing.
        (
            "SELECT COUNT(*), COUNT(t.seq) FROM acct a JOIN prof p ON p.note = a.owner LEFT JOIN txn t ON t.acct = a.id AND p.id = a.id",
            &[],
            Ran::Gathered,
        ),
        ("SELECT COUNT(*) FROM acct a JOIN prof p ON p.note < a.owner", &[], Ran::Gathered),
        // A DISTINCT aggregate's values would have to travel whole.
        ("SELECT COUNT(DISTINCT a.owner) FROM acct a JOIN txn t ON t.acct = a.id", &[], Ran::Gathered),
        ("SELECT v.owner, a.id FROM by_owner v JOIN acct a ON a.owner = v.owner AND a.id = v.n ORDER BY 2", &[], Ran::Gathered),
    ];
    for (sql, params, want) in cases {
        let (got, ran) = mp.run_recorded(sql, params);
        let expected = one.try_run(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(got, expected, "{sql}");
        assert!(!got.rows.is_empty(), "{sql} should return rows");
        assert_eq!(ran, *want, "{sql}");
    }
    // Without ORDER BY the rows come in another order, but they are the same rows.
    let sql = "SELECT t.acct, t.seq, a.owner FROM txn t JOIN acct a ON a.id = t.acct WHERE a.bal > 0";
    let (mut got, ran) = mp.run_recorded(sql, &[]);
    let mut expected = one.run(sql);
    got.rows.sort_by(|x, y| crate::expr::sort_cmp(&x[0], &y[0]).then(crate::expr::sort_cmp(&x[1], &y[1])));
    expected.rows.sort_by(|x, y| crate::expr::sort_cmp(&x[0], &y[0]).then(crate::expr::sort_cmp(&x[1], &y[1])));
    assert_eq!((got, ran), (expected, Ran::JoinedRows));
    // LIMIT without ORDER BY: some LIMIT rows of the join.
    let (got, ran) = mp.run_recorded("SELECT t.acct FROM txn t JOIN acct a ON a.id = t.acct LIMIT 4", &[]);
    assert_eq!((got.rows.len(), ran), (4, Ran::JoinedRows));
}

/// @Explain says when the join runs on each partition.
#[test]
fn explain_names_a_colocated_join() {
    let (mp, _) = Mp::colocated();
    let ex = |sql: &str| crate::explain(&prepare(&mp.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
    let line = "CO-LOCATED JOIN: joined on partition columns, so each partition runs the join on its own rows";
    let agg = ex("SELECT COUNT(*) FROM acct a JOIN txn t ON t.acct = a.id");
    assert!(agg.contains(line) && agg.contains("merges its partial groups"), "{agg}");
    let rows = ex("SELECT a.id FROM acct a JOIN txn t ON t.acct = a.id");
    assert!(rows.contains(line) && rows.contains("merges its rows"), "{rows}");
    for sql in [
        "SELECT a.id FROM acct a JOIN txn t ON t.seq = a.id",
        "SELECT COUNT(DISTINCT a.owner) FROM acct a JOIN txn t ON t.acct = a.id",
        "SELECT COUNT(*) FROM acct",
        "SELECT a.id FROM acct a JOIN txn t ON t.acct = a.id WHERE a.id = 3",
    ] {
        assert!(!ex(sql).contains("CO-LOCATED"), "{sql}: {}", ex(sql));
    }
}
