//! Fragments as data: each multi-partition statement runs twice over twin copies of the
//! same data, once with the coordinator's own closures and once with closures rebuilt by
//! `fragment_fn` from specs that went through postcard (as they would to another node).
//! Answers, errors and every partition's rows must come out the same.

use std::sync::Arc;

use lockstep_core::{Catalog, ErrorKind, HashRing, Result, ResultTable, Value};

use crate::testing::LocalSites;
use crate::tests_sql::{ctx, i, s, Db};
use crate::{
    execute_mp, fragment_fn, prepare, ExecCtx, Fragment, FragmentSpec, Limits, PlanCache, SiteAccess, SiteFn, StatementRef,
    StatementResolver, Step, Target,
};

const DDL: &str = "
CREATE TABLE acct (id BIGINT NOT NULL, owner VARCHAR(10) NOT NULL, bal INTEGER, PRIMARY KEY (id));
PARTITION TABLE acct ON COLUMN id;
CREATE TABLE txn (acct BIGINT NOT NULL, seq INTEGER NOT NULL, amt INTEGER, PRIMARY KEY (acct, seq));
PARTITION TABLE txn ON COLUMN acct;
CREATE TABLE kind (k INTEGER NOT NULL PRIMARY KEY, label VARCHAR(10));
CREATE VIEW by_owner (owner, n, total) AS SELECT owner, COUNT(*), SUM(bal) FROM acct GROUP BY owner;
";

/// Partitions reached as if they were on another node: every fragment's spec is encoded
/// with postcard, decoded, and rebuilt into a closure by `fragment_fn`; the coordinator's
/// own closure is never called.
struct Remote {
    sites: LocalSites,
    cache: PlanCache,
    /// The kind of each step sent, in order.
    steps: Vec<&'static str>,
}

fn kind(step: &Step) -> &'static str {
    match step {
        Step::Execute => "execute",
        Step::Partials => "partials",
        Step::GatherLevel { .. } => "gather",
        Step::GatherQueryLevel { .. } => "gather table",
        Step::InsertRows(_) => "insert",
        Step::JoinedRows => "joined rows",
    }
}

impl SiteAccess for Remote {
    fn partition_count(&self) -> u32 {
        self.sites.partition_count()
    }
    fn ring(&self) -> &HashRing {
        self.sites.ring()
    }
    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>> {
        self.sites.run(target, f)
    }
    fn run_fragment(&mut self, target: Target, fragment: Fragment) -> Result<Vec<ResultTable>> {
        let bytes = postcard::to_stdvec(&*fragment.spec).unwrap_or_else(|e| panic!("encoding a spec: {e}"));
        let spec: FragmentSpec = postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("decoding a spec: {e}"));
        self.steps.push(kind(&spec.step));
        let f = fragment_fn(spec, &self.cache)?;
        self.sites.run(target, f)
    }
}

/// The same catalog over two sets of 3 partitions: `local` runs the coordinator's closures
/// (`SiteAccess::run_fragment`'s default), `remote` the rebuilt ones.
struct Twins {
    cat: Catalog,
    local: LocalSites,
    remote: Remote,
}

impl Twins {
    fn new() -> Twins {
        let cat = Db::new(DDL).cat;
        let local = LocalSites::new(3, &cat).unwrap_or_else(|e| panic!("{e}"));
        let sites = LocalSites::new(3, &cat).unwrap_or_else(|e| panic!("{e}"));
        let remote = Remote { sites, cache: PlanCache::new(Arc::new(cat.clone())), steps: Vec::new() };
        Twins { cat, local, remote }
    }

    /// Runs `sql` both ways; the answers (or errors) and the partitions must agree. Returns
    /// the answer and the kinds of step the statement sent.
    fn both(&mut self, sql: &str, params: &[Value], ctx: &ExecCtx) -> (Result<ResultTable>, Vec<&'static str>) {
        let p = Arc::new(prepare(&self.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
        self.remote.steps.clear();
        let here = execute_mp(&p, params, ctx, &mut self.local);
        let there = execute_mp(&p, params, ctx, &mut self.remote);
        assert_eq!(here, there, "{sql}");
        assert_eq!(self.contents(Side::Local), self.contents(Side::Remote), "partitions after {sql}");
        (here, std::mem::take(&mut self.remote.steps))
    }

    /// `both`, which must succeed and send only steps of `kind`.
    fn ok(&mut self, sql: &str, params: &[Value], kind: &str) -> ResultTable {
        let (r, steps) = self.both(sql, params, &ctx());
        assert!(!steps.is_empty() && steps.iter().all(|k| *k == kind), "{sql} sent {steps:?}, not {kind}");
        r.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `both`, which must fail the same way both times, sending steps of `kind`.
    fn fails(&mut self, sql: &str, params: &[Value], ctx: &ExecCtx, kind: &str) -> lockstep_core::Error {
        let (r, steps) = self.both(sql, params, ctx);
        assert!(steps.contains(&kind), "{sql} sent {steps:?}, not {kind}");
        match r {
            Ok(t) => panic!("{sql} should fail but gave {} rows", t.rows.len()),
            Err(e) => e,
        }
    }

    /// Every row of every table, partition by partition, in slot order.
    fn contents(&self, side: Side) -> Vec<Vec<Vec<Value>>> {
        let parts = match side {
            Side::Local => &self.local.partitions,
            Side::Remote => &self.remote.sites.partitions,
        };
        let mut out = Vec::new();
        for part in parts {
            for def in self.cat.tables() {
                let t = part.table(def.id).unwrap_or_else(|e| panic!("{e}"));
                out.push(t.scan().map(|(_, r)| r).collect());
            }
        }
        out
    }

    /// 30 accounts, some transactions, the replicated kinds: loaded both ways.
    fn loaded() -> Twins {
        let mut t = Twins::new();
        let rows: Vec<String> = (0..30).map(|id| format!("({id}, '{}', {})", ["ann", "bob", "cy"][id % 3], id * 10)).collect();
        t.ok(&format!("INSERT INTO acct VALUES {}", rows.join(", ")), &[], "insert");
        let txns: Vec<String> = (0..30).flat_map(|a| (0..(a % 3)).map(move |q| format!("({a}, {q}, {})", a + q))).collect();
        t.ok(&format!("INSERT INTO txn VALUES {}", txns.join(", ")), &[], "insert");
        t.ok("INSERT INTO kind VALUES (0, 'zero'), (1, 'one'), (2, 'two')", &[], "insert");
        t
    }
}

#[derive(Clone, Copy)]
enum Side {
    Local,
    Remote,
}

fn with_limits(limits: Limits) -> ExecCtx {
    ExecCtx { limits, ..ctx() }
}

#[test]
fn execute_steps_answer_alike_rebuilt() {
    let mut t = Twins::loaded();
    assert_eq!(t.ok("SELECT owner, bal FROM acct WHERE id = ?", &[i(13)], "execute").rows, vec![vec![s("bob"), i(130)]]);
    // A parameter converted to the statement's type (text to BIGINT) travels converted.
    assert_eq!(t.ok("SELECT owner FROM acct WHERE id = ?", &[s("14")], "execute").rows, vec![vec![s("cy")]]);
    assert_eq!(t.ok("SELECT label FROM kind WHERE k = 1", &[], "execute").rows, vec![vec![s("one")]]);
    assert_eq!(t.ok("UPDATE acct SET bal = bal + ? WHERE owner = ?", &[i(1), s("ann")], "execute"), ResultTable::modified(10));
    assert_eq!(t.ok("DELETE FROM acct WHERE bal > 250", &[], "execute"), ResultTable::modified(4));
    assert_eq!(t.ok("UPDATE kind SET label = 'uno' WHERE k = 1", &[], "execute"), ResultTable::modified(1));
    // Failures: a constraint on some partitions (rolled back on each), and an error.
    let e = t.fails("UPDATE acct SET owner = NULL WHERE id > 20", &[], &ctx(), "execute");
    assert_eq!(e.kind, ErrorKind::Constraint, "{}", e.message);
    t.fails("UPDATE acct SET bal = bal / (id - id)", &[], &ctx(), "execute");
}

#[test]
fn partial_aggregate_steps_answer_alike_rebuilt() {
    let mut t = Twins::loaded();
    let r = t.ok("SELECT owner, COUNT(*), SUM(bal), MIN(bal), AVG(bal) FROM acct GROUP BY owner ORDER BY owner", &[], "partials");
    assert_eq!(r.rows[0], vec![s("ann"), i(10), i(1350), i(0), i(135)]);
    assert_eq!(t.ok("SELECT COUNT(*), SUM(amt) FROM txn WHERE amt > ?", &[i(10)], "partials").rows, vec![vec![i(20), i(410)]]);
    // Groups past the gather cap: the same error both ways.
    let capped = with_limits(Limits { gather_rows_max: 20, ..Limits::DEFAULT });
    let e = t.fails("SELECT id, COUNT(*) FROM acct GROUP BY id", &[], &capped, "partials");
    assert!(e.message.contains("more than 20 rows"), "{}", e.message);
}

#[test]
fn gather_steps_answer_alike_rebuilt() {
    let mut t = Twins::loaded();
    // Joined on a column that is not the partition key (amounts are acct + seq): the
    // partitions cannot join on their own.
    let joined = "SELECT a.id, a.owner, x.seq, x.amt FROM acct a JOIN txn x ON x.amt = a.id WHERE a.bal > ? ORDER BY a.id, x.seq";
    let r = t.ok(joined, &[i(200)], "gather");
    assert_eq!(r.rows.len(), 9);
    assert_eq!(
        t.ok("SELECT id FROM acct ORDER BY bal DESC LIMIT 3 OFFSET 1", &[], "gather").rows,
        vec![vec![i(28)], vec![i(27)], vec![i(26)]]
    );
    assert_eq!(t.ok("SELECT * FROM by_owner ORDER BY owner", &[], "gather").rows[1], vec![s("bob"), i(10), i(1450)]);
    // Every partition would keep the kind without a transaction: gathered.
    let r = t.ok("SELECT k.label, x.seq FROM kind k LEFT JOIN txn x ON x.acct = k.k ORDER BY 1, 2", &[], "gather");
    assert_eq!(r.rows, vec![vec![s("one"), i(0)], vec![s("two"), i(0)], vec![s("two"), i(1)], vec![s("zero"), Value::Null]]);
    // The cap counts across a statement's sources: 30 accounts fit under 40 rows, the 30
    // transactions gathered next do not, so the error comes from the second step, which
    // must count on from the first.
    let capped = with_limits(Limits { gather_rows_max: 40, ..Limits::DEFAULT });
    assert_eq!(t.both("SELECT COUNT(*) FROM acct a, kind k", &[], &capped).0.map(|r| r.rows), Ok(vec![vec![i(90)]]));
    let e = t.fails("SELECT a.id, x.seq FROM acct a JOIN txn x ON x.amt = a.id ORDER BY 1, 2", &[], &capped, "gather");
    assert!(e.message.contains("more than 40 rows"), "{}", e.message);
}

/// Joins on partition columns run whole on each partition, which answers its partial
/// groups or its rows (with hidden sort keys, cut to its first LIMIT + OFFSET).
#[test]
fn colocated_join_steps_answer_alike_rebuilt() {
    let mut t = Twins::loaded();
    let joined = "SELECT a.id, a.owner, x.seq, x.amt FROM acct a JOIN txn x ON x.acct = a.id WHERE a.bal > ? ORDER BY a.id, x.seq";
    let r = t.ok(joined, &[i(200)], "joined rows");
    assert_eq!(r.rows.len(), 9);
    assert_eq!(r.rows[0], vec![i(22), s("bob"), i(0), i(22)]);
    let top = "SELECT x.acct FROM acct a LEFT JOIN txn x ON x.acct = a.id ORDER BY a.bal DESC, x.seq LIMIT ? OFFSET 1";
    assert_eq!(t.ok(top, &[i(3)], "joined rows").rows, vec![vec![i(29)], vec![i(28)], vec![Value::Null]]);
    let r = t.ok("SELECT k.label, COUNT(*) FROM txn x, kind k WHERE x.seq = k.k GROUP BY k.label ORDER BY 1", &[], "partials");
    assert_eq!(r.rows, vec![vec![s("one"), i(10)], vec![s("zero"), i(20)]]);
    let r = t.ok("SELECT a.owner, SUM(x.amt) FROM acct a JOIN txn x ON x.acct = a.id GROUP BY a.owner ORDER BY 1", &[], "partials");
    assert_eq!(r.rows, vec![vec![s("bob"), i(145)], vec![s("cy"), i(320)]]);
    // The rows the partitions answer count against the gather cap.
    let capped = with_limits(Limits { gather_rows_max: 25, ..Limits::DEFAULT });
    let e = t.fails("SELECT a.id, x.seq FROM acct a JOIN txn x ON x.acct = a.id ORDER BY 1, 2", &[], &capped, "joined rows");
    assert!(e.message.contains("more than 25 rows"), "{}", e.message);
}

/// Statements with subqueries or set operations gather whole tables and run at the
/// coordinator; one whose every SELECT is pinned to one key runs there whole.
#[test]
fn table_gathering_steps_answer_alike_rebuilt() {
    let mut t = Twins::loaded();
    let col = |v: Vec<Value>| v.into_iter().map(|x| vec![x]).collect::<Vec<_>>();
    assert_eq!(
        t.ok("SELECT owner FROM acct WHERE id < 3 UNION SELECT label FROM kind ORDER BY 1", &[], "gather table").rows,
        col(vec![s("ann"), s("bob"), s("cy"), s("one"), s("two"), s("zero")])
    );
    // Accounts with a transaction of seq 1: those with id % 3 = 2, ten of them.
    let exists = "SELECT COUNT(*) FROM acct a WHERE EXISTS (SELECT 1 FROM txn x WHERE x.acct = a.id AND x.seq = 1)";
    assert_eq!(t.ok(exists, &[], "gather table").rows, col(vec![i(10)]));
    // Amounts are acct + seq: only account 29 has one over 28.
    assert_eq!(
        t.ok("SELECT id FROM acct WHERE id IN (SELECT acct FROM txn WHERE amt > ?) ORDER BY id", &[i(28)], "gather table").rows,
        col(vec![i(29)])
    );
    // A view of a partitioned table is merged across partitions before the subquery reads it.
    assert_eq!(
        t.ok("SELECT o.owner, o.n FROM by_owner o WHERE o.n = (SELECT MAX(n) FROM by_owner) ORDER BY 1", &[], "gather table").rows,
        vec![vec![s("ann"), i(10)], vec![s("bob"), i(10)], vec![s("cy"), i(10)]]
    );
    assert_eq!(
        t.ok("SELECT bal FROM acct WHERE id = 13 UNION ALL SELECT amt FROM txn WHERE acct = 13", &[], "execute").rows,
        col(vec![i(130), i(13)])
    );
}

#[test]
fn insert_steps_answer_alike_rebuilt() {
    let mut t = Twins::loaded();
    assert_eq!(t.ok("INSERT INTO acct VALUES (?, ?, ?)", &[i(100), s("dee"), Value::Null], "execute"), ResultTable::modified(1));
    assert_eq!(
        t.ok("INSERT INTO acct (id, owner) VALUES (101, 'eve'), (102, 'eve'), (103, 'fay')", &[], "insert"),
        ResultTable::modified(3)
    );
    assert_eq!(t.ok("UPSERT INTO acct (id, owner, bal) VALUES (101, 'eve', 5), (104, 'gus', 6)", &[], "insert"), ResultTable::modified(2));
    // INSERT … SELECT gathers first, then sends rows.
    let (r, steps) = t.both("INSERT INTO txn SELECT id, 7, bal FROM acct WHERE owner = 'cy'", &[], &ctx());
    assert_eq!(r, Ok(ResultTable::modified(10)));
    assert_eq!(steps.first(), Some(&"gather"));
    assert!(steps[1..].iter().all(|k| *k == "insert") && steps.len() > 1, "{steps:?}");
    // A replicated table gets the same rows on every partition.
    assert_eq!(t.ok("INSERT INTO kind VALUES (5, 'five'), (6, 'six')", &[], "insert"), ResultTable::modified(2));
    // A duplicate key on one partition fails the statement; nothing is left on any.
    let e = t.fails("INSERT INTO acct VALUES (200, 'hal', 1), (201, 'hal', 2), (13, 'dup', 3)", &[], &ctx(), "insert");
    assert_eq!(e.kind, ErrorKind::Constraint, "{}", e.message);
    let e = t.fails("INSERT INTO acct VALUES (300, 'ida', 1), (301, NULL, 1)", &[], &ctx(), "insert");
    assert_eq!(e.kind, ErrorKind::Constraint, "{}", e.message);
    assert_eq!(t.ok("SELECT COUNT(*) FROM acct WHERE id >= 200", &[], "partials").rows, vec![vec![i(0)]]);
}

/// A spec naming a procedure's statement is resolved through the statements registered
/// for it, whatever the case of the name.
#[test]
fn a_procedure_statement_is_found_by_name_and_index() {
    let t = Twins::loaded();
    let mut cache = PlanCache::new(Arc::new(t.cat.clone()));
    let mut read = prepare(&t.cat, "SELECT COUNT(*) FROM acct").unwrap_or_else(|e| panic!("{e}"));
    read.statement = StatementRef::Procedure { name: "Counts".into(), index: 1 };
    let other = Arc::new(prepare(&t.cat, "SELECT 1 FROM kind").unwrap_or_else(|e| panic!("{e}")));
    cache.add_procedure("Counts", vec![other, Arc::new(read)]);
    let mut twins = t;
    twins.remote.cache = cache;
    let mut p = prepare(&twins.cat, "SELECT COUNT(*) FROM acct").unwrap_or_else(|e| panic!("{e}"));
    p.statement = StatementRef::Procedure { name: "COUNTS".into(), index: 1 };
    let p = Arc::new(p);
    let here = execute_mp(&p, &[], &ctx(), &mut twins.local);
    let there = execute_mp(&p, &[], &ctx(), &mut twins.remote);
    assert_eq!(here, there);
    assert_eq!(here.map(|r| r.rows), Ok(vec![vec![i(30)]]));
    let missing = StatementRef::Procedure { name: "Counts".into(), index: 2 };
    assert!(twins.remote.cache.resolve(twins.cat.version, &missing).is_err());
}

/// What another node sends is checked against the plan before any closure exists: another
/// catalog version, a wrong parameter count, a source or row shape the plan lacks.
#[test]
fn specs_that_do_not_fit_the_plan_are_refused() {
    let t = Twins::loaded();
    let cache = PlanCache::new(Arc::new(t.cat.clone()));
    let spec = |sql: &str, params: Vec<Value>, step: Step| FragmentSpec {
        catalog_version: t.cat.version,
        statement: StatementRef::Sql(sql.into()),
        params,
        ctx: ctx(),
        step,
    };
    let refused = |spec: FragmentSpec| match fragment_fn(spec, &cache) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.message,
    };
    let join = "SELECT a.id FROM acct a JOIN txn x ON x.acct = a.id";
    let mut stale = spec(join, vec![], Step::Execute);
    stale.catalog_version += 1;
    assert!(refused(stale).contains("catalog version"));
    assert!(refused(spec("SELECT * FROM acct WHERE id = ?", vec![], Step::Execute)).contains("expects 1 parameters"));
    assert!(refused(spec(join, vec![], Step::GatherLevel { level: 2, rows_before: 0, bytes_before: 0 })).contains("source 2"));
    assert!(refused(spec(join, vec![], Step::Partials)).contains("partial"));
    let apart = "SELECT a.id FROM acct a JOIN txn x ON x.seq = a.id";
    assert!(refused(spec(apart, vec![], Step::JoinedRows)).contains("a join on partition columns"));
    assert!(refused(spec("SELECT COUNT(*) FROM acct a JOIN txn x ON x.acct = a.id", vec![], Step::JoinedRows)).contains("a join on"));
    let ins = "INSERT INTO kind VALUES (?, ?)";
    assert!(refused(spec(ins, vec![i(1), s("x")], Step::InsertRows(vec![vec![i(9)]]))).contains("2 values"));
    assert!(refused(spec(join, vec![], Step::InsertRows(vec![]))).contains("an insert"));
    // The same specs, well formed, are accepted.
    assert!(fragment_fn(spec(join, vec![], Step::GatherLevel { level: 1, rows_before: 0, bytes_before: 0 }), &cache).is_ok());
    assert!(fragment_fn(spec(join, vec![], Step::JoinedRows), &cache).is_ok());
    assert!(fragment_fn(spec(ins, vec![i(1), s("x")], Step::InsertRows(vec![vec![i(9), s("nine")]])), &cache).is_ok());
}

/// A deadline crosses to another node as time spent and time left, read back against the
/// reader's clock: an hour left stays about an hour, a passed one stays passed, none stays
/// none.
#[test]
fn a_deadline_travels_as_time_spent_and_left() {
    use std::time::{Duration, Instant};
    let hour = Duration::from_secs(3600);
    let round_trip = |deadline: Option<crate::Deadline>| -> Option<crate::Deadline> {
        let ctx = ExecCtx { deadline, ..ctx() };
        let bytes = postcard::to_stdvec(&ctx).unwrap_or_else(|e| panic!("{e}"));
        let back: ExecCtx = postcard::from_bytes(&bytes).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((back.txn_id, back.timestamp_micros, back.limits), (ctx.txn_id, ctx.timestamp_micros, ctx.limits));
        back.deadline
    };
    let later = round_trip(crate::Deadline::after(hour)).unwrap_or_else(|| panic!("an hour's deadline was lost"));
    let left = later.at.saturating_duration_since(Instant::now());
    assert!(left > hour - Duration::from_secs(60) && left <= hour, "{left:?} left");
    let now = Instant::now();
    let passed = crate::Deadline { started: now.checked_sub(Duration::from_secs(1)).unwrap_or(now), at: now };
    let back = round_trip(Some(passed)).unwrap_or_else(|| panic!("a passed deadline was lost"));
    assert!(back.at <= Instant::now());
    assert!(back.at.saturating_duration_since(back.started) >= Duration::from_secs(1));
    assert_eq!(round_trip(None), None);
}
