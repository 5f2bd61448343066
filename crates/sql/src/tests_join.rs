//! Tests of join planning: the order chosen by cost, hash joins, and their answers against
//! the plan in written order.

use std::sync::Arc;

use lockstep_core::Value;

use crate::tests_sql::Db;

/// Seven tables of `rows` rows each, `tK (id, a, b)`, with no index on the join columns:
/// `a` and `b` are permutations of the ids, so each equality joins one row to one row.
fn seven_tables(rows: i64) -> Db {
    let mut ddl = String::new();
    for k in 1..=7 {
        ddl.push_str(&format!("CREATE TABLE t{k} (id INTEGER NOT NULL PRIMARY KEY, a INTEGER, b INTEGER);\n"));
    }
    let mut db = Db::new(&ddl);
    for k in 1..=7i64 {
        let mut values = Vec::new();
        for id in 0..rows {
            values.push(format!("({id}, {}, {})", (id * 7 + k) % rows, (id * 11 + k) % rows));
        }
        for chunk in values.chunks(500) {
            db.run(&format!("INSERT INTO t{k} VALUES {}", chunk.join(", ")));
        }
    }
    db
}

const CHAIN: &str = "SELECT COUNT(*), SUM(t1.id) FROM t1, t2, t3, t4, t5, t6, t7 \
     WHERE t1.a = t2.a AND t2.b = t3.b AND t3.a = t4.a AND t4.b = t5.b AND t5.a = t6.a AND t6.b = t7.b";

/// The 7-table equality join of issue 23 completes; `--nocapture` prints how long it took.
#[test]
fn seven_table_equality_join_completes() {
    let mut db = seven_tables(2000);
    let start = std::time::Instant::now();
    let rows = db.rows(CHAIN);
    println!("7-table chain join over 2,000 rows each: {:?}", start.elapsed());
    assert_eq!(rows, vec![vec![Value::Int(2000), Value::Int(1999 * 2000 / 2)]]);
}

/// A small deterministic generator (xorshift), so a failing case can be run again.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len() as u64) as usize]
    }
}

/// Five tables with few distinct keys (so duplicates), NULLs in every key column, one
/// BIGINT key against INTEGER ones, indexes on some join columns and not others.
const DIFF_DDL: &str = "
CREATE TABLE a (id INTEGER NOT NULL PRIMARY KEY, k INTEGER, v INTEGER, s VARCHAR(4));
CREATE TABLE b (id INTEGER NOT NULL PRIMARY KEY, k INTEGER, v INTEGER, s VARCHAR(4));
CREATE INDEX b_k ON b (k);
CREATE TABLE c (id INTEGER NOT NULL PRIMARY KEY, k BIGINT, v INTEGER, s VARCHAR(4));
CREATE TABLE d (id INTEGER NOT NULL PRIMARY KEY, k INTEGER, v INTEGER, s VARCHAR(4));
CREATE INDEX d_kv ON d (k, v);
CREATE TABLE e (id INTEGER NOT NULL PRIMARY KEY, k INTEGER, v INTEGER, s VARCHAR(4));
";

fn diff_db(g: &mut Gen) -> Db {
    let mut db = Db::new(DIFF_DDL);
    for t in ["a", "b", "c", "d", "e"] {
        let n = 4 + g.below(9);
        for id in 0..n {
            let val = |g: &mut Gen| if g.below(5) == 0 { "NULL".to_string() } else { g.below(4).to_string() };
            let (k, v) = (val(g), val(g));
            let s = match g.below(4) {
                0 => "NULL",
                1 => "'x'",
                2 => "'y'",
                _ => "'z'",
            };
            db.run(&format!("INSERT INTO {t} VALUES ({id}, {k}, {v}, {s})"));
        }
    }
    db
}

/// A random join of 2 to 5 of the tables: inner, LEFT and comma joins, equalities between
/// any columns (some across types), filters on constants, WHERE terms that read a LEFT
/// JOIN's padded columns.
fn random_join(g: &mut Gen) -> String {
    let tables = ["a", "b", "c", "d", "e"];
    let n = 2 + g.below(4) as usize;
    let cols = ["k", "v", "s", "id"];
    let eq = |g: &mut Gen, x: usize, y: usize| {
        let c = g.pick(&["k", "k", "v", "id"]);
        let d = g.pick(&["k", "k", "v"]);
        format!("t{x}.{c} = t{y}.{d}")
    };
    let mut from = format!("{} t0", tables[g.below(5) as usize]);
    let mut wheres = Vec::new();
    for x in 1..n {
        let t = tables[g.below(5) as usize];
        let y = g.below(x as u64) as usize;
        let mut on = eq(g, x, y);
        if g.below(3) == 0 {
            let z = g.below(x as u64) as usize;
            on = format!("{on} AND {}", eq(g, x, z));
        }
        if g.below(4) == 0 {
            on = format!("{on} AND t{x}.v > {}", g.below(3));
        }
        match g.below(4) {
            0 => {
                from.push_str(&format!(", {t} t{x}"));
                wheres.push(on);
            }
            1 => from.push_str(&format!(" LEFT JOIN {t} t{x} ON {on}")),
            2 if g.below(2) == 0 => from.push_str(&format!(" CROSS JOIN {t} t{x}")),
            _ => from.push_str(&format!(" JOIN {t} t{x} ON {on}")),
        }
    }
    for _ in 0..g.below(3) {
        let (x, y) = (g.below(n as u64) as usize, g.below(n as u64) as usize);
        wheres.push(match g.below(4) {
            0 => format!("t{x}.{} IS NULL", g.pick(&cols)),
            1 => format!("t{x}.s = 'x'"),
            _ => eq(g, x, y),
        });
    }
    let wh = if wheres.is_empty() { String::new() } else { format!(" WHERE {}", wheres.join(" AND ")) };
    format!("SELECT * FROM {from}{wh}")
}

fn sorted(mut rows: Vec<Vec<Value>>) -> Vec<Vec<Value>> {
    rows.sort();
    rows
}

/// The same random joins, planned in written order with nested loops and as the planner
/// chooses, give the same multiset of rows.
#[test]
fn chosen_join_plans_answer_as_written_order_does() {
    let mut g = Gen(0x2545_f491_4f6c_dd1d);
    let (mut reordered, mut hashed, mut cases) = (0, 0, 0);
    for _ in 0..12 {
        let mut db = diff_db(&mut g);
        for _ in 0..40 {
            let sql = random_join(&mut g);
            let written = crate::prepare_joining(&db.cat, &sql, true).unwrap_or_else(|e| panic!("{sql}: {e}"));
            let chosen = crate::prepare_joining(&db.cat, &sql, false).unwrap_or_else(|e| panic!("{sql}: {e}"));
            let run =
                |db: &mut Db, p: &crate::Prepared| crate::execute(p, &[], &db.ctx, &mut db.part).unwrap_or_else(|e| panic!("{sql}: {e}"));
            let (want, got) = (run(&mut db, &written).rows, run(&mut db, &chosen).rows);
            assert_eq!(sorted(got), sorted(want), "{sql}\n{}", crate::explain::explain(&chosen));
            if let crate::Plan::Select(s) = &chosen.plan {
                reordered += usize::from(s.levels.iter().enumerate().any(|(j, l)| l.written != j));
                hashed += usize::from(s.levels.iter().any(|l| !l.hash.is_empty()));
            }
            cases += 1;
        }
    }
    // The comparison is worth something only if many plans differ from the written ones.
    eprintln!("{reordered} reordered, {hashed} hashed of {cases}");
    assert!(reordered > cases / 10 && hashed > cases / 4, "{reordered} reordered, {hashed} hashed of {cases}");
}

/// @Explain shows the order chosen and the kind of each join: a unique lookup by a
/// constant is read first, the unindexed table after it joins by hash, and a join on an
/// indexed column stays a nested loop over index lookups.
#[test]
fn explain_shows_the_chosen_order_and_hash_joins() {
    let db = Db::new(
        "CREATE TABLE big (id INTEGER NOT NULL PRIMARY KEY, k INTEGER, v INTEGER);
         CREATE TABLE small (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
         CREATE TABLE ix (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
         CREATE INDEX ix_k ON ix (k);",
    );
    let ex = |sql: &str| crate::explain(&crate::prepare(&db.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
    let plan = ex("SELECT * FROM big b, small s WHERE s.id = 5 AND b.k = s.k");
    assert!(plan.contains("JOIN ORDER: S, B (written: B, S)"), "{plan}");
    assert!(plan.contains("UNIQUE LOOKUP of S"), "{plan}");
    assert!(plan.contains("HASH JOIN on 1 column: SEQUENTIAL SCAN of B"), "{plan}");
    let plan = ex("SELECT * FROM small s JOIN ix ON ix.k = s.k LEFT JOIN big b ON b.k = ix.k AND b.v = s.id");
    assert!(!plan.contains("JOIN ORDER"), "{plan}");
    assert!(plan.contains("NESTED LOOP JOIN: INDEX PREFIX LOOKUP of IX"), "{plan}");
    assert!(plan.contains("LEFT HASH JOIN on 2 columns: SEQUENTIAL SCAN of B"), "{plan}");
    // A cross product waits until the tables joined by equalities are read.
    let plan = ex("SELECT * FROM big b, small s, ix WHERE ix.k = b.k");
    assert!(plan.contains("JOIN ORDER: B, IX, S (written: B, S, IX)"), "{plan}");
}

/// Hash joins follow SQL's equality: NULL keys match nothing (not even NULL), duplicate
/// keys match every copy, and a LEFT JOIN pads the rows with no match.
#[test]
fn hash_joins_skip_null_keys_and_keep_duplicates() {
    let mut db = Db::new(
        "CREATE TABLE l (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
         CREATE TABLE r (id INTEGER NOT NULL PRIMARY KEY, k BIGINT);",
    );
    db.run("INSERT INTO l VALUES (1, 1), (2, NULL), (3, 2), (4, 3)");
    db.run("INSERT INTO r VALUES (10, 1), (11, 1), (12, NULL), (13, 2)");
    let sql = "SELECT l.id, r.id FROM l LEFT JOIN r ON r.k = l.k ORDER BY 1, 2";
    assert!(crate::explain(&crate::prepare(&db.cat, sql).unwrap()).contains("LEFT HASH JOIN"));
    let (i, n) = (Value::Int, Value::Null);
    let want = vec![vec![i(1), i(10)], vec![i(1), i(11)], vec![i(2), n.clone()], vec![i(3), i(13)], vec![i(4), n]];
    assert_eq!(db.rows(sql), want);
    assert_eq!(db.rows("SELECT COUNT(*) FROM l, r WHERE l.k = r.k"), vec![vec![i(3)]]);
}

/// A hash table past its byte cap is dropped and the level joined by nested loop: the
/// answer is the same.
#[test]
fn a_hash_table_past_its_cap_falls_back_to_nested_loops() {
    let mut g = Gen(7);
    let mut db = diff_db(&mut g);
    let sql = "SELECT * FROM a JOIN c ON c.k = a.k LEFT JOIN e ON e.v = c.v";
    let want = sorted(db.rows(sql));
    assert!(crate::explain(&crate::prepare(&db.cat, sql).unwrap()).contains("HASH JOIN"));
    crate::exec_join::TEST_BUILD_BYTES_MAX.with(|c| c.set(0));
    let got = sorted(db.rows(sql));
    crate::exec_join::TEST_BUILD_BYTES_MAX.with(|c| c.set(crate::exec_join::HASH_JOIN_BUILD_BYTES_MAX));
    assert!(!want.is_empty());
    assert_eq!(got, want);
}

/// A SELECT may join `JOIN_SOURCES_MAX` tables (64), not one more.
#[test]
fn sixty_four_tables_join_and_sixty_five_are_refused() {
    let max = crate::plan::JOIN_SOURCES_MAX;
    let ddl: String = (0..=max).map(|k| format!("CREATE TABLE j{k} (id INTEGER NOT NULL PRIMARY KEY, v INTEGER);\n")).collect();
    let mut db = Db::new(&ddl);
    for k in 0..=max {
        db.run(&format!("INSERT INTO j{k} VALUES (1, 10), (2, 20), (3, NULL)"));
    }
    let query = |n: usize| {
        let from: Vec<String> = (0..n).map(|k| format!("j{k}")).collect();
        let chain: Vec<String> = (1..n).map(|k| format!("j{k}.v = j{}.v", k - 1)).collect();
        format!("SELECT COUNT(*), SUM(j{}.id) FROM {} WHERE {}", n - 1, from.join(", "), chain.join(" AND "))
    };
    assert_eq!(db.rows(&query(max)), vec![vec![Value::Int(2), Value::Int(3)]]);
    let err = db.err(&query(max + 1));
    assert!(err.contains("at most 64 tables"), "{err}");
}

/// The levels of `sql` in written order (nothing reordered yet) and their sources.
fn written_levels(db: &Db, sql: &str) -> (Vec<crate::plan::Level>, Vec<crate::bind::Source>) {
    let p = crate::prepare_joining(&db.cat, sql, true).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let crate::Plan::Select(s) = p.plan else { panic!("{sql} is no SELECT") };
    let sources = s.levels.iter().map(|l| l.source.clone()).collect();
    (s.levels, sources)
}

fn names(levels: &[crate::plan::Level]) -> Vec<&str> {
    levels.iter().map(|l| l.source.name.as_str()).collect()
}

fn select_of(p: &crate::Prepared) -> &crate::plan::SelectPlan {
    match &p.plan {
        crate::Plan::Select(s) => s,
        _ => panic!("{} is no SELECT", p.sql),
    }
}

/// Greedy ordering takes the cheapest first step, the 10-row T1, and must then look up
/// T2's 100,000 rows by a non-unique key for each of them; dynamic programming starts from
/// T3 (50 rows), finds T2 by its primary key and T1 by hash: far cheaper in all.
#[test]
fn dynamic_programming_finds_the_order_greedy_misses() {
    let db = Db::new(
        "CREATE TABLE t1 (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
         CREATE TABLE t2 (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
         CREATE INDEX t2_k ON t2 (k);
         CREATE TABLE t3 (id INTEGER NOT NULL PRIMARY KEY, t2 INTEGER);",
    );
    let sql = "SELECT * FROM t1, t2, t3 WHERE t1.k = t2.k AND t2.id = t3.t2";
    let counts = crate::join_order::RowCounts(vec![Some(10.0), Some(100_000.0), Some(50.0)]);
    let plan = |dp_max: usize| {
        let (mut levels, sources) = written_levels(&db, sql);
        let e = crate::join_order::arrange_with(&mut levels, &sources, &counts, dp_max).expect("a join is arranged");
        (names(&levels).join(", "), e)
    };
    let (greedy, g) = plan(0);
    let (dynamic, d) = plan(crate::join_order::DP_SOURCES_MAX);
    assert_eq!(greedy, "T1, T2, T3");
    assert_eq!(dynamic, "T3, T2, T1");
    assert!(g.greedy && !d.greedy);
    assert!(d.cost * 10.0 < g.cost, "dynamic {} against greedy {}", d.cost, g.cost);
}

/// `n` tables `c0 … c(n-1)` of a few rows joined in a chain, written backwards.
fn chain_of(n: usize) -> (Db, String) {
    let ddl: String = (0..n).map(|k| format!("CREATE TABLE c{k} (id INTEGER NOT NULL PRIMARY KEY, v INTEGER);\n")).collect();
    let mut db = Db::new(&ddl);
    for k in 0..n {
        db.run(&format!("INSERT INTO c{k} VALUES (1, 10), (2, 20), (3, {})", 30 + k));
    }
    let from: Vec<String> = (0..n).rev().map(|k| format!("c{k}")).collect();
    let chain: Vec<String> = (1..n).map(|k| format!("c{k}.v = c{}.v", k - 1)).collect();
    (db, format!("SELECT COUNT(*) FROM {} WHERE {}", from.join(", "), chain.join(" AND ")))
}

/// Up to `DP_SOURCES_MAX` inner-joined sources are ordered by dynamic programming, one
/// more greedily; both plans answer alike. A 64-table join is planned (greedily) and run.
#[test]
fn joins_past_the_dynamic_programming_size_are_ordered_greedily() {
    let max = crate::join_order::DP_SOURCES_MAX;
    for (n, how) in [(max, "by dynamic programming"), (max + 1, "by greedy"), (64, "by greedy")] {
        let (mut db, sql) = chain_of(n);
        let p = crate::prepare(&db.cat, &sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let plan = crate::explain(&p);
        assert!(plan.contains(how), "{n} tables: {plan}");
        let counted = crate::join_order::for_partition(select_of(&p), &db.part).expect("a join has plans by row counts");
        assert!(counted.joins.estimate.as_ref().is_some_and(|e| e.greedy == (n > max)), "{n} tables");
        assert_eq!(db.rows(&sql), vec![vec![Value::Int(2)]], "{n} tables");
    }
}

const SIZES_DDL: &str = "CREATE TABLE big (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
     CREATE TABLE small (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);";
const SIZES_JOIN: &str = "SELECT b.id, s.id FROM big b, small s WHERE b.k = s.k";

fn add_rows(db: &mut Db, table: &str, from: i64, to: i64) {
    let values: Vec<String> = (from..to).map(|id| format!("({id}, {})", id % 7)).collect();
    for chunk in values.chunks(500) {
        db.run(&format!("INSERT INTO {table} VALUES {}", chunk.join(", ")));
    }
}

/// Row counts choose the order at run time: without them BIG and SMALL look alike and
/// stay in written order; with 300 rows against 3, SMALL is read first and BIG joined to
/// it by hash; once SMALL has grown past BIG the order turns again. Counts in one bucket
/// share one plan; the answers are those of the written order.
#[test]
fn row_counts_choose_the_order_small_table_first() {
    let mut db = Db::new(SIZES_DDL);
    let p = crate::prepare(&db.cat, SIZES_JOIN).unwrap();
    let ex = crate::explain(&p);
    assert!(!ex.contains("JOIN ORDER"), "{ex}");
    assert!(ex.contains("from assumed row counts"), "{ex}");
    let written = crate::prepare_joining(&db.cat, SIZES_JOIN, true).unwrap();
    let order = |db: &Db| {
        let v = crate::join_order::for_partition(select_of(&p), &db.part).expect("plans by row counts");
        (names(&v.levels).join(", "), v)
    };
    let check_answers = |db: &mut Db| {
        let want = sorted(crate::execute(&written, &[], &db.ctx, &mut db.part).unwrap().rows);
        assert_eq!(sorted(db.rows(SIZES_JOIN)), want);
        assert!(!want.is_empty());
    };
    add_rows(&mut db, "big", 0, 300);
    add_rows(&mut db, "small", 0, 3);
    let (first, plan) = order(&db);
    assert_eq!(first, "S, B");
    assert!(!plan.levels[1].hash.is_empty(), "B joins by hash");
    let shown = crate::explain(&crate::Prepared { plan: crate::Plan::Select((*plan).clone()), ..p.clone() });
    assert!(shown.contains("JOIN ORDER: S, B (written: B, S)") && shown.contains("row counts B < 1024, S < 4"), "{shown}");
    check_answers(&mut db);
    // 260 rows: the same bucket as 300, the same plan.
    db.run("DELETE FROM big WHERE id >= 260");
    assert!(Arc::ptr_eq(&order(&db).1, &plan), "one plan per bucket");
    add_rows(&mut db, "small", 3, 5000);
    assert_eq!(order(&db).0, "B, S");
    check_answers(&mut db);
}

/// Replicas pick the same plan: a plan cache that ran the statement at other row counts
/// first (so holds other plans, past its cap too) and one that never did return the same
/// rows in the same order, with no ORDER BY, from partitions holding the same rows.
#[test]
fn replicas_with_the_same_rows_choose_the_same_order() {
    let load = |db: &mut Db| {
        add_rows(db, "big", 0, 200);
        add_rows(db, "small", 0, 40);
    };
    let (mut a, mut b) = (Db::new(SIZES_DDL), Db::new(SIZES_DDL));
    load(&mut a);
    load(&mut b);
    let fresh = crate::prepare(&a.cat, SIZES_JOIN).unwrap();
    let seasoned = crate::prepare(&b.cat, SIZES_JOIN).unwrap();
    // 20 other pairs of counts, more than the plans it keeps.
    for small in [1, 4, 16, 64, 256] {
        for big in [1, 4, 16, 64] {
            let mut other = Db::new(SIZES_DDL);
            add_rows(&mut other, "small", 0, small);
            add_rows(&mut other, "big", 0, big);
            crate::execute(&seasoned, &[], &other.ctx, &mut other.part).unwrap();
        }
    }
    assert!(select_of(&seasoned).joins.by_row_counts.as_ref().is_some_and(|c| c.plans_kept() <= crate::join_order::ROW_COUNT_PLANS_MAX));
    let rows_a = crate::execute(&fresh, &[], &a.ctx, &mut a.part).unwrap().rows;
    let rows_b = crate::execute(&seasoned, &[], &b.ctx, &mut b.part).unwrap().rows;
    assert_eq!(rows_a.len(), 1144);
    assert!(rows_a == rows_b, "the same rows in the same order");
    let plan_a = crate::join_order::for_partition(select_of(&fresh), &a.part).unwrap();
    let plan_b = crate::join_order::for_partition(select_of(&seasoned), &b.part).unwrap();
    assert_eq!(format!("{:?}", plan_a.levels), format!("{:?}", plan_b.levels));
    assert_eq!(names(&plan_a.levels), ["S", "B"]);
}

/// A multi-partition join chooses its order from the rows it gathered (the 10 of MID
/// first, though written last: without counts the tables look alike) and answers as one
/// partition does.
#[test]
fn gathered_rows_choose_the_order_of_a_multi_partition_join() {
    use crate::testing::LocalSites;
    let ddl = "CREATE TABLE big (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
               PARTITION TABLE big ON COLUMN id;
               CREATE TABLE mid (id INTEGER NOT NULL PRIMARY KEY, k INTEGER);
               PARTITION TABLE mid ON COLUMN id;";
    let mut one = Db::new(ddl);
    let mut sites = LocalSites::new(3, &one.cat).unwrap();
    let mut both = |sql: &str| {
        let p = Arc::new(crate::prepare(&one.cat, sql).unwrap_or_else(|e| panic!("{sql}: {e}")));
        let a = crate::execute_mp(&p, &[], &crate::tests_sql::ctx(), &mut sites).unwrap_or_else(|e| panic!("{sql}: {e}"));
        let b = one.try_run(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(sorted(a.rows) == sorted(b.rows), "{sql}: the answers differ");
        p
    };
    for id in 0..600 {
        both(&format!("INSERT INTO big VALUES ({id}, {})", id % 50));
        if id < 10 {
            both(&format!("INSERT INTO mid VALUES ({id}, {})", id % 50));
        }
    }
    let p = both("SELECT m.id, b.id FROM big b JOIN mid m ON b.k = m.k");
    let s = select_of(&p);
    assert_eq!(names(&s.levels), ["B", "M"]);
    assert_eq!(s.joins.by_row_counts.as_ref().map(|c| c.plans_kept()), Some(1), "the run planned for its counts");
    let gathered = |j: usize| Some(if s.levels[j].source.name == "B" { 600 } else { 10 });
    let v = crate::join_order::for_row_counts(s, &gathered).unwrap();
    assert_eq!(names(&v.levels), ["M", "B"]);
    assert_eq!(s.joins.by_row_counts.as_ref().map(|c| c.plans_kept()), Some(1), "the same counts, the same plan");
}
