//! Tests of join planning: the order chosen by cost, hash joins, and their answers against
//! the plan in written order.

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
