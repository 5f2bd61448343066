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
