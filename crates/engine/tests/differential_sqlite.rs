//! Differential test: seeded random SELECTs over a small schema with NULLs — filters, inner
//! and LEFT joins, aggregates with GROUP BY / HAVING, IN / NOT IN / EXISTS / scalar
//! subqueries (correlated and not), derived tables and set operations — run on a Lockstep
//! engine in this process (3 partitions, two tables partitioned) and on SQLite (bundled),
//! their answers compared as multisets of rows, or as sequences where ORDER BY makes the
//! order total (then a LIMIT may follow). `cargo test` runs `QUERIES_SHORT` queries;
//! `LOCKSTEP_LONG=1` runs `QUERIES_LONG`; `LOCKSTEP_DIFF_SEED=n` picks another seed.
//!
//! What the generator leaves out, because the two dialects differ there by design (not by
//! a bug): `/` and `%` (integer division and remainder), `AVG` (an integer in VoltDB, a
//! float in SQLite), `LIKE` (case-insensitive in SQLite), comparisons between a number and
//! text (SQLite's type affinity converts), the empty string, scalar subqueries that can
//! return several rows (SQLite takes the first, SQL says error: they are all aggregates
//! here), `ANY` / `ALL` and `INTERSECT ALL` / `EXCEPT ALL` (SQLite has none), and
//! chains of set operations mixing INTERSECT with others (SQLite reads them left to right),
//! and subqueries of a grouping query that read a GROUP BY expression's columns (refused by
//! PostgreSQL and Lockstep, answered by SQLite).

mod sqlcheck;

use sqlcheck::{value_text, Lockstep, Sqlite};

/// Queries per run: the short run of every `cargo test`, and the long one.
const QUERIES_SHORT: usize = 400;
const QUERIES_LONG: usize = 20_000;
/// The default seed of the data and of the queries.
const SEED_DEFAULT: u64 = 0x5EED_2023;
/// Rows per table.
const ROWS_PER_TABLE: i64 = 12;
/// Mismatches listed in full when the test fails.
const MISMATCHES_SHOWN: usize = 15;

/// SplitMix64: deterministic, no OS randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn int(&mut self) -> i64 {
        self.below(9) as i64 - 3
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Ty {
    Int,
    Text,
}

/// The schema: table name and its columns (id is the primary key and never NULL).
const TABLES: [(&str, &[(&str, Ty)]); 3] = [
    ("t1", &[("id", Ty::Int), ("a", Ty::Int), ("b", Ty::Int), ("s", Ty::Text)]),
    ("t2", &[("id", Ty::Int), ("a", Ty::Int), ("c", Ty::Int), ("s", Ty::Text)]),
    ("t3", &[("id", Ty::Int), ("b", Ty::Int), ("c", Ty::Int)]),
];
const TEXTS: [&str; 4] = ["a", "b", "ab", "B"];

fn literal(rng: &mut Rng, ty: Ty) -> String {
    match ty {
        Ty::Int => {
            let v = rng.int();
            if v < 0 {
                format!("({v})")
            } else {
                v.to_string()
            }
        }
        Ty::Text => format!("'{}'", rng.pick(&TEXTS)),
    }
}

fn schema_and_data(seed: u64) -> Vec<String> {
    let mut rng = Rng(seed);
    let mut sql = Vec::new();
    for (name, cols) in TABLES {
        let defs: Vec<String> = cols
            .iter()
            .map(|(c, ty)| match (*c, ty) {
                ("id", _) => "id INTEGER NOT NULL PRIMARY KEY".to_string(),
                (c, Ty::Int) => format!("{c} INTEGER"),
                (c, Ty::Text) => format!("{c} VARCHAR(8)"),
            })
            .collect();
        sql.push(format!("CREATE TABLE {name} ({})", defs.join(", ")));
        let rows: Vec<String> = (1..=ROWS_PER_TABLE)
            .map(|id| {
                let vals: Vec<String> = cols
                    .iter()
                    .map(|(c, ty)| {
                        if *c == "id" {
                            id.to_string()
                        } else if rng.chance(20) {
                            "NULL".into()
                        } else {
                            literal(&mut rng, *ty)
                        }
                    })
                    .collect();
                format!("({})", vals.join(", "))
            })
            .collect();
        sql.push(format!("INSERT INTO {name} VALUES {}", rows.join(", ")));
    }
    sql
}

/// A source in scope: its alias and its table's columns.
#[derive(Clone)]
struct Source {
    alias: String,
    table: usize,
}

/// What an expression may read: the query's own sources and, for a subquery, those of the
/// query right around it (Lockstep's rule, and a common one).
#[derive(Clone, Default)]
struct Scope {
    own: Vec<Source>,
    outer: Vec<Source>,
}

impl Scope {
    fn columns(&self, ty: Ty, with_outer: bool) -> Vec<String> {
        let outer = if with_outer { &self.outer[..] } else { &[] };
        self.own
            .iter()
            .chain(outer)
            .flat_map(|s| TABLES[s.table].1.iter().filter(move |(_, t)| *t == ty).map(move |(c, _)| format!("{}.{c}", s.alias)))
            .collect()
    }
}

struct Gen {
    rng: Rng,
    aliases: usize,
    /// How many subqueries deep the generator is writing.
    level: usize,
}

/// Subqueries nest at most this deep in the generated queries.
const SUBQUERY_LEVELS_MAX: usize = 2;

impl Gen {
    fn alias(&mut self) -> String {
        self.aliases += 1;
        format!("q{}", self.aliases)
    }

    fn column(&mut self, scope: &Scope, ty: Ty) -> String {
        let cols = scope.columns(ty, self.rng.chance(30));
        if cols.is_empty() {
            return literal(&mut self.rng, ty);
        }
        self.rng.pick(&cols).clone()
    }

    fn expr(&mut self, scope: &Scope, ty: Ty, depth: usize) -> String {
        if depth == 0 || self.rng.chance(45) {
            return if self.rng.chance(75) { self.column(scope, ty) } else { literal(&mut self.rng, ty) };
        }
        let d = depth - 1;
        match ty {
            Ty::Int => match self.rng.below(7) {
                0 => format!("({} + {})", self.expr(scope, ty, d), self.expr(scope, ty, d)),
                1 => format!("({} - {})", self.expr(scope, ty, d), self.expr(scope, ty, d)),
                2 => format!("({} * {})", self.expr(scope, ty, d), self.expr(scope, ty, d)),
                3 => format!("ABS({})", self.expr(scope, ty, d)),
                4 => format!("COALESCE({}, {})", self.expr(scope, ty, d), literal(&mut self.rng, ty)),
                5 => format!("NULLIF({}, {})", self.expr(scope, ty, d), literal(&mut self.rng, ty)),
                _ => format!(
                    "CASE WHEN {} THEN {} ELSE {} END",
                    self.pred(scope, d, false),
                    self.expr(scope, ty, d),
                    self.expr(scope, ty, d)
                ),
            },
            Ty::Text => match self.rng.below(4) {
                0 => format!("UPPER({})", self.expr(scope, ty, d)),
                1 => format!("COALESCE({}, {})", self.expr(scope, ty, d), literal(&mut self.rng, ty)),
                2 => format!("({} || {})", self.expr(scope, ty, d), self.expr(scope, ty, d)),
                _ => format!(
                    "CASE WHEN {} THEN {} ELSE {} END",
                    self.pred(scope, d, false),
                    self.expr(scope, ty, d),
                    self.expr(scope, ty, d)
                ),
            },
        }
    }

    fn pred(&mut self, scope: &Scope, depth: usize, subqueries: bool) -> String {
        let ty = if self.rng.chance(75) { Ty::Int } else { Ty::Text };
        let d = depth.saturating_sub(1);
        let kinds = if subqueries && self.level < SUBQUERY_LEVELS_MAX { 12 } else { 8 };
        match self.rng.below(kinds) {
            0 | 1 => {
                let op = self.rng.pick(&["=", "<>", "<", "<=", ">", ">="]);
                format!("{} {op} {}", self.expr(scope, ty, d), self.expr(scope, ty, d))
            }
            2 => format!("{} IS {}NULL", self.expr(scope, ty, d), if self.rng.chance(50) { "NOT " } else { "" }),
            3 if depth > 0 => format!("({} AND {})", self.pred(scope, d, subqueries), self.pred(scope, d, subqueries)),
            4 if depth > 0 => format!("({} OR {})", self.pred(scope, d, subqueries), self.pred(scope, d, subqueries)),
            5 if depth > 0 => format!("NOT ({})", self.pred(scope, d, subqueries)),
            6 => {
                let items: Vec<String> = (0..1 + self.rng.below(3))
                    .map(|_| if self.rng.chance(15) { "NULL".into() } else { literal(&mut self.rng, ty) })
                    .collect();
                let not = if self.rng.chance(40) { "NOT " } else { "" };
                format!("{} {not}IN ({})", self.expr(scope, ty, d), items.join(", "))
            }
            7 => {
                let not = if self.rng.chance(30) { "NOT " } else { "" };
                format!("{} {not}BETWEEN {} AND {}", self.expr(scope, ty, d), self.expr(scope, ty, 0), self.expr(scope, ty, 0))
            }
            8 | 11 => {
                let not = if self.rng.chance(40) { "NOT " } else { "" };
                let sub = self.subquery_column(scope, ty, false);
                format!("{} {not}IN ({sub})", self.expr(scope, ty, d))
            }
            9 => {
                let not = if self.rng.chance(40) { "NOT " } else { "" };
                let sub = self.subquery_column(scope, Ty::Int, false);
                format!("{not}EXISTS ({sub})")
            }
            10 => {
                let op = self.rng.pick(&["=", "<>", "<", ">="]);
                let sub = self.subquery_column(scope, Ty::Int, true);
                format!("{} {op} ({sub})", self.expr(scope, Ty::Int, d))
            }
            _ => format!("{} IS NULL", self.column(scope, ty)),
        }
    }

    /// `SELECT one column FROM a table [WHERE …]`, maybe correlated to `outer`'s own
    /// sources; `aggregate`: one row exactly (MAX, MIN, COUNT, SUM), for a scalar subquery.
    fn subquery_column(&mut self, outer: &Scope, ty: Ty, aggregate: bool) -> String {
        let source = Source { alias: self.alias(), table: self.rng.below(TABLES.len()) };
        let scope = Scope { own: vec![source.clone()], outer: outer.own.clone() };
        self.level += 1;
        let col = {
            let inner = Scope { own: vec![source.clone()], outer: Vec::new() };
            self.expr(&inner, ty, 1)
        };
        let functions: &[&str] = if ty == Ty::Int { &["MAX", "MIN", "COUNT", "SUM"] } else { &["MAX", "MIN"] };
        let select = if aggregate { format!("{}({col})", self.rng.pick(functions)) } else { col };
        let filter = if self.rng.chance(80) { format!(" WHERE {}", self.pred(&scope, 2, true)) } else { String::new() };
        self.level -= 1;
        format!("SELECT {select} FROM {} {}{filter}", TABLES[source.table].0, source.alias)
    }

    /// FROM with one to three tables: inner joins on an equality, cross joins filtered in
    /// WHERE, or a LEFT JOIN.
    fn from(&mut self) -> (String, Scope) {
        let n = 1 + self.rng.below(3);
        let mut scope = Scope::default();
        let mut text = String::new();
        for i in 0..n {
            let source = Source { alias: self.alias(), table: self.rng.below(TABLES.len()) };
            let name = format!("{} {}", TABLES[source.table].0, source.alias);
            if i == 0 {
                text = name;
            } else {
                let right = Scope { own: vec![source.clone()], outer: Vec::new() };
                let mut on = format!("{} = {}", self.column(&scope, Ty::Int), self.column(&right, Ty::Int));
                // A condition in ON beyond the equality: on a LEFT JOIN it decides which rows
                // match, not which rows are kept (a classic place for a planner to go wrong).
                if self.rng.chance(35) {
                    let both = Scope { own: scope.own.iter().cloned().chain([source.clone()]).collect(), outer: Vec::new() };
                    let with_subqueries = self.rng.chance(30);
                    on = format!("{on} AND {}", self.pred(&both, 1, with_subqueries));
                }
                text = match self.rng.below(3) {
                    0 => format!("{text} JOIN {name} ON {on}"),
                    1 => format!("{text} LEFT JOIN {name} ON {on}"),
                    _ => format!("{text} CROSS JOIN {name}"),
                };
            }
            scope.own.push(source);
        }
        (text, scope)
    }

    /// One query and whether its answer's order is fixed (compare as a sequence).
    fn query(&mut self) -> (String, bool) {
        match self.rng.below(10) {
            0..=3 => self.plain(),
            4..=6 => self.grouped(),
            7 | 8 => self.set_operation(),
            _ => self.derived(),
        }
    }

    fn filter(&mut self, scope: &Scope) -> String {
        if self.rng.chance(60) {
            format!(" WHERE {}", self.pred(scope, 2, true))
        } else {
            String::new()
        }
    }

    fn plain(&mut self) -> (String, bool) {
        let (from, scope) = self.from();
        let filter = self.filter(&scope);
        let mut items: Vec<String> = (0..1 + self.rng.below(3))
            .map(|_| {
                let ty = if self.rng.chance(70) { Ty::Int } else { Ty::Text };
                self.expr(&scope, ty, 2)
            })
            .collect();
        if self.rng.chance(15) {
            items.push(format!("({})", self.subquery_column(&scope, Ty::Int, true)));
        }
        // Ordered by every source's primary key (LEFT JOIN's may be NULL: still one row
        // each), so the order is total and a LIMIT picks the same rows in both.
        if self.rng.chance(40) {
            let keys: Vec<String> = scope.own.iter().map(|s| format!("{}.id", s.alias)).collect();
            let dir = if self.rng.chance(50) { " DESC" } else { "" };
            let mut order: Vec<String> = keys.iter().map(|k| format!("{k}{dir}")).collect();
            // Now and then an expression sorts first (NULLs first ascending and last
            // descending in both), the keys after it still making the order total.
            if self.rng.chance(40) {
                let lead = self.expr(&Scope { own: scope.own.clone(), outer: Vec::new() }, Ty::Int, 1);
                let lead_dir = if self.rng.chance(50) { " DESC" } else { "" };
                // A bare number there would be a position in the select list.
                if lead.contains('.') {
                    order.insert(0, format!("{lead}{lead_dir}"));
                }
            }
            let limit = 1 + self.rng.below(8);
            let offset = if self.rng.chance(30) { format!(" OFFSET {}", self.rng.below(4)) } else { String::new() };
            let mut all = keys;
            all.extend(items);
            return (format!("SELECT {} FROM {from}{filter} ORDER BY {} LIMIT {limit}{offset}", all.join(", "), order.join(", ")), true);
        }
        let distinct = if self.rng.chance(20) { "DISTINCT " } else { "" };
        (format!("SELECT {distinct}{} FROM {from}{filter}", items.join(", ")), false)
    }

    /// An aggregate over `scope`; `ty`: over a number or over text (COUNTs are numbers).
    fn aggregate(&mut self, scope: &Scope, ty: Ty) -> String {
        let e = self.expr(scope, ty, 1);
        match (self.rng.below(6), ty) {
            (0, _) => "COUNT(*)".into(),
            (1, _) => format!("COUNT({e})"),
            (2, Ty::Int) => format!("SUM({}{e})", if self.rng.chance(25) { "DISTINCT " } else { "" }),
            (3, _) => format!("MIN({e})"),
            (4, _) => format!("MAX({e})"),
            _ => format!("COUNT(DISTINCT {e})"),
        }
    }

    fn grouped(&mut self) -> (String, bool) {
        let (from, scope) = self.from();
        let filter = self.filter(&scope);
        let own = Scope { own: scope.own.clone(), outer: Vec::new() };
        // Each key with its type, and whether it is a plain column.
        let typed_keys: Vec<(String, Ty, bool)> = (0..self.rng.below(3))
            .map(|_| {
                let ty = if self.rng.chance(70) { Ty::Int } else { Ty::Text };
                let column = self.column(&own, ty);
                // Now and then a key is an expression over a column.
                match (self.rng.below(5), ty) {
                    (0, Ty::Int) => (format!("ABS({column})"), ty, false),
                    (1, Ty::Int) => (format!("({column} + 1)"), ty, false),
                    (0 | 1, Ty::Text) => (format!("COALESCE({column}, 'a')"), ty, false),
                    _ => (column, ty, true),
                }
            })
            .collect();
        let keys: Vec<String> = typed_keys.iter().map(|(k, _, _)| k.clone()).collect();
        let aggs: Vec<String> = (0..1 + self.rng.below(3))
            .map(|_| {
                let ty = if self.rng.chance(80) { Ty::Int } else { Ty::Text };
                self.aggregate(&scope, ty)
            })
            .collect();
        let mut items = keys.clone();
        items.extend(aggs);
        // A subquery in the select list of a grouping query may read the group's keys:
        // plain columns only. One that reads a key expression (`GROUP BY ABS(a)` then
        // `(SELECT … WHERE x = ABS(a))`) is refused by Lockstep and PostgreSQL alike
        // ("subquery uses ungrouped column"); only SQLite answers it.
        let plain: Vec<(String, Ty)> =
            typed_keys.iter().filter(|(k, _, p)| *p && k.contains('.')).map(|(k, t, _)| (k.clone(), *t)).collect();
        if !plain.is_empty() && self.rng.chance(20) {
            let (key, key_ty) = self.rng.pick(&plain).clone();
            let t = self.rng.below(TABLES.len());
            let a = self.alias();
            if let Some((col, _)) = TABLES[t].1.iter().find(|(c, ty)| *ty == key_ty && *c != "id") {
                items.push(format!("(SELECT COUNT(*) FROM {} {a} WHERE {a}.{col} = {key})", TABLES[t].0));
            }
        }
        let mut sql = format!("SELECT {} FROM {from}{filter}", items.join(", "));
        if !keys.is_empty() {
            sql += &format!(" GROUP BY {}", keys.join(", "));
            if self.rng.chance(50) {
                let op = self.rng.pick(&["=", "<>", "<", ">"]);
                // A number compared with a number: MIN/MAX of text are left out here.
                let agg = self.aggregate(&scope, Ty::Int);
                let rhs = if self.rng.chance(30) {
                    format!("({})", self.subquery_column(&Scope::default(), Ty::Int, true))
                } else {
                    literal(&mut self.rng, Ty::Int)
                };
                sql += &format!(" HAVING {agg} {op} {rhs}");
            }
            // Group keys are distinct, so ordering by all of them is total.
            if self.rng.chance(40) {
                let order: Vec<String> = (1..=keys.len()).map(|i| i.to_string()).collect();
                let limit = 1 + self.rng.below(5);
                return (format!("{sql} ORDER BY {} LIMIT {limit}", order.join(", ")), true);
            }
        }
        (sql, false)
    }

    /// One SELECT of one number, its column named `c`.
    fn arm(&mut self) -> String {
        let (from, scope) = self.from();
        let filter = self.filter(&scope);
        format!("SELECT {} AS c FROM {from}{filter}", self.expr(&scope, Ty::Int, 2))
    }

    fn set_operation(&mut self) -> (String, bool) {
        let op = *self.rng.pick(&["UNION", "UNION ALL", "INTERSECT", "EXCEPT"]);
        let mut sql = format!("{} {op} {}", self.arm(), self.arm());
        // A chain of the same operation reads the same in both (left to right).
        if self.rng.chance(25) {
            sql = format!("{sql} {op} {}", self.arm());
        }
        if self.rng.chance(40) {
            let dir = if self.rng.chance(50) { " DESC" } else { "" };
            return (format!("{sql} ORDER BY 1{dir} LIMIT {}", 1 + self.rng.below(6)), true);
        }
        (sql, false)
    }

    /// A query over a derived table (a SELECT or a set operation, its column `c`).
    fn derived(&mut self) -> (String, bool) {
        let inner = if self.rng.chance(50) { self.set_operation().0 } else { self.arm() };
        let d = self.alias();
        let sql = match self.rng.below(4) {
            0 => format!("SELECT COUNT(*), COUNT({d}.c), SUM({d}.c), MIN({d}.c), MAX({d}.c) FROM ({inner}) {d}"),
            3 => {
                let t = self.rng.below(TABLES.len());
                let a = self.alias();
                format!("SELECT {a}.id, {d}.c FROM {} {a} JOIN ({inner}) {d} ON {d}.c = {a}.id", TABLES[t].0)
            }
            1 => format!("SELECT {d}.c, COUNT(*) FROM ({inner}) {d} GROUP BY {d}.c"),
            _ => format!("SELECT {d}.c FROM ({inner}) {d} WHERE {d}.c > {}", literal(&mut self.rng, Ty::Int)),
        };
        (sql, false)
    }
}

/// The answer of one system: rows of text cells, or an error.
type Answer = Result<Vec<Vec<String>>, String>;

fn lockstep_answer(db: &Lockstep, sql: &str) -> Answer {
    db.sql(sql).map(|rows| rows.iter().map(|r| r.iter().map(value_text).collect()).collect())
}

/// Compares two answers: as sequences when the order is fixed, else as sorted multisets.
fn same(mut a: Vec<Vec<String>>, mut b: Vec<Vec<String>>, ordered: bool) -> bool {
    if !ordered {
        a.sort();
        b.sort();
    }
    a == b
}

#[test]
fn random_queries_agree_with_sqlite() {
    let long = std::env::var("LOCKSTEP_LONG").is_ok_and(|v| v == "1");
    let count = if long { QUERIES_LONG } else { QUERIES_SHORT };
    let seed = std::env::var("LOCKSTEP_DIFF_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(SEED_DEFAULT);

    let lockstep = Lockstep::start(3);
    let sqlite = Sqlite::open();
    for sql in schema_and_data(seed) {
        lockstep.sql(&sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        sqlite.conn.execute(&sql, []).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    for table in ["t1", "t3"] {
        lockstep.sql(&format!("PARTITION TABLE {table} ON COLUMN id")).expect("partitioned");
    }

    let (mut agree, mut peer_errors, mut with_rows) = (0, 0, 0);
    let mut refused = Vec::new();
    let mut mismatches = Vec::new();
    for i in 0..count {
        // Each query has its own generator, so query i can be found again by its number.
        let mut g = Gen { rng: Rng(seed ^ (i as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)), aliases: 0, level: 0 };
        let (sql, ordered) = g.query();
        let theirs = sqlite.rows(&sql);
        let ours = lockstep_answer(&lockstep, &sql);
        if std::env::var("LOCKSTEP_DIFF_SHOW").is_ok() {
            println!("#{i} {sql}\n  -> {ours:?}");
        }
        match (ours, theirs) {
            // SQLite refusing it means the generator wrote something outside the common
            // ground (counted, not compared).
            (_, Err(_)) => peer_errors += 1,
            (Err(e), Ok(_)) => refused.push(format!(
                "#{i}: {sql}
    Lockstep refused it: {e}"
            )),
            (Ok(a), Ok(b)) if same(a.clone(), b.clone(), ordered) => {
                agree += 1;
                with_rows += usize::from(!a.is_empty());
            }
            (Ok(a), Ok(b)) => mismatches.push(format!(
                "#{i}: {sql}
    Lockstep: {a:?}
    SQLite:   {b:?}"
            )),
        }
    }
    let compared = count - peer_errors;
    println!(
        "differential (seed {seed}): {count} queries, {compared} compared, {agree} agree ({:.1}%; {with_rows} of them with rows), {} differ, {} refused by Lockstep, {peer_errors} refused by SQLite",
        100.0 * agree as f64 / compared.max(1) as f64,
        mismatches.len(),
        refused.len()
    );
    for m in mismatches.iter().chain(&refused).take(MISMATCHES_SHOWN) {
        println!("{m}");
    }
    assert!(compared * 10 >= count * 9, "SQLite refused {peer_errors} of {count} queries: the generator strays from the common ground");
    assert!(
        mismatches.is_empty() && refused.is_empty(),
        "{} queries differ and {} were refused: see above",
        mismatches.len(),
        refused.len()
    );
}
