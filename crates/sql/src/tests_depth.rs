//! Deeply nested SQL text at every entry point that hands text to sqlparser (@AdHoc's and
//! @Explain's `prepare`, CREATE PROCEDURE … AS and CREATE VIEW through `apply_ddl`), run on
//! threads with the 2 MiB stack the engine's threads have: too deep is an error, never a
//! stack overflow; exactly as deep as allowed works end to end; large flat inputs still work.

use lockstep_core::{Catalog, Value};

use crate::expr::EXPR_DEPTH_MAX;
use crate::lex::tokenize;
use crate::nesting::nesting_depth;
use crate::tests_sql::{i, s, Db, NoFiles};
use crate::{apply_ddl, explain, prepare, split_statements};

/// The stack of a tokio worker and of the engine's plain threads.
const ENGINE_STACK_BYTES: usize = 2 * 1024 * 1024;
/// Terms of the chains that overflowed the stack before (66 KB of `+1`).
const HUGE_CHAIN_TERMS: usize = 33_000;

const SCHEMA: &str = "CREATE TABLE t (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(10));";

/// Runs `f` on a thread with the engine's stack; a stack overflow would abort the test
/// process, so getting an answer back is the proof.
fn on_engine_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let handle = std::thread::Builder::new().stack_size(ENGINE_STACK_BYTES).spawn(f).unwrap_or_else(|e| panic!("spawn: {e}"));
    handle.join().unwrap_or_else(|_| panic!("the thread panicked"))
}

/// Statements nesting `n` levels deep, in each way an expression can nest: (name, SELECT).
fn nested_selects(n: usize) -> Vec<(&'static str, String)> {
    let r = |s: &str, k: usize| s.repeat(k);
    vec![
        ("+ chain", format!("SELECT 1{}", r("+1", n - 1))),
        ("AND chain", format!("SELECT TRUE{}", r(" AND TRUE", n - 1))),
        ("OR chain", format!("SELECT FALSE{}", r(" OR FALSE", n - 1))),
        ("|| chain", format!("SELECT 'a'{}", r(" || 'a'", n - 1))),
        ("WHERE AND chain", format!("SELECT id FROM t WHERE id > 0{}", r(" AND TRUE", n - 2))),
        ("parentheses", format!("SELECT {}1{}", r("(", n - 1), r(")", n - 1))),
        ("nested calls", format!("SELECT {}1{}", r("ABS(", n - 1), r(")", n - 1))),
        ("nested CASE", format!("SELECT {}1{}", r("CASE WHEN 1=1 THEN ", n - 2), r(" END", n - 2))),
        ("NOT chain", format!("SELECT {}TRUE", r("NOT ", n - 1))),
        ("aggregate argument", format!("SELECT SUM(1{}) FROM t", r("+1", n - 2))),
        // Each `1+(` is two levels; an even depth needs one more `+1` outside.
        ("right-nested +", format!("SELECT {}1{}{}", r("1+(", (n - 1) / 2), r(")", (n - 1) / 2), r("+1", 1 - n % 2))),
    ]
}

/// Every entry point's answer to `sql`: (entry point, error message if any).
fn through_every_entry_point(sql: &str) -> Vec<(&'static str, Option<String>)> {
    let mut db = Db::new(SCHEMA);
    let mut out = Vec::new();
    let prepared = prepare(&db.cat, sql);
    out.push(("prepare (@AdHoc)", prepared.as_ref().err().map(|e| e.message.clone())));
    let explained = prepared.as_ref().map(explain);
    out.push(("explain (@Explain)", explained.as_ref().err().map(|e| e.message.clone())));
    if let Ok(p) = &prepared {
        let run = crate::execute(p, &[], &db.ctx, &mut db.part);
        out.push(("execute", run.err().map(|e| e.message)));
    }
    let mut cat: Catalog = db.cat.clone();
    let proc = apply_ddl(&mut cat, &format!("CREATE PROCEDURE p AS {sql}"), &NoFiles);
    out.push(("CREATE PROCEDURE", proc.err().map(|e| e.message)));
    let view = apply_ddl(&mut cat, &format!("CREATE VIEW v AS {sql}"), &NoFiles);
    out.push(("CREATE VIEW", view.err().map(|e| e.message)));
    out
}

fn refused_for_depth(message: &Option<String>) -> bool {
    message.as_ref().is_some_and(|m| m.contains("nests expressions") && m.contains(&format!("the limit is {EXPR_DEPTH_MAX}")))
}

#[test]
fn huge_chains_and_deep_nesting_are_refused_not_crashed() {
    let answers = on_engine_stack(|| {
        let mut all = Vec::new();
        for (what, sql) in nested_selects(HUGE_CHAIN_TERMS) {
            all.push((what, through_every_entry_point(&sql)));
        }
        all
    });
    for (what, results) in answers {
        for (entry, message) in results {
            assert!(refused_for_depth(&message), "{what} through {entry}: {message:?}");
        }
    }
}

#[test]
fn one_level_past_the_limit_is_refused() {
    let answers = on_engine_stack(|| {
        nested_selects(EXPR_DEPTH_MAX + 1).into_iter().map(|(w, s)| (w, prepare(&Db::new(SCHEMA).cat, &s).err())).collect::<Vec<_>>()
    });
    for (what, err) in answers {
        let message = err.map(|e| e.message);
        assert!(refused_for_depth(&message), "{what}: {message:?}");
        assert!(message.is_some_and(|m| m.contains(&format!("{} deep", EXPR_DEPTH_MAX + 1))), "{what}");
    }
}

#[test]
fn statements_exactly_at_the_limit_work_end_to_end() {
    let answers = on_engine_stack(|| {
        let mut all = Vec::new();
        for (what, sql) in nested_selects(EXPR_DEPTH_MAX) {
            let depth = nesting_depth(&tokenize(&sql).unwrap_or_default());
            let mut db = Db::new(SCHEMA);
            db.run("INSERT INTO t VALUES (1, 'x')");
            let rows = db.try_run(&sql, &[]).map(|t| t.rows).map_err(|e| e.message);
            let plan = prepare(&db.cat, &sql).map(|p| explain(&p)).map_err(|e| e.message);
            let mut cat = db.cat.clone();
            let proc = apply_ddl(&mut cat, &format!("CREATE PROCEDURE p AS {sql}"), &NoFiles).map_err(|e| e.message);
            let view = apply_ddl(&mut cat, &format!("CREATE VIEW v AS {sql}"), &NoFiles).map_err(|e| e.message);
            all.push((what, depth, rows, plan, proc, view));
        }
        all
    });
    let n = EXPR_DEPTH_MAX as i64;
    for (what, depth, rows, plan, proc, view) in answers {
        assert_eq!(depth, EXPR_DEPTH_MAX, "{what} is not exactly at the limit");
        let rows = rows.unwrap_or_else(|e| panic!("{what}: {e}"));
        let want = match what {
            "+ chain" => i(n),
            "AND chain" => Value::Bool(true),
            "NOT chain" => Value::Bool((n - 1) % 2 == 0),
            "OR chain" => Value::Bool(false),
            "|| chain" => s(&"a".repeat(EXPR_DEPTH_MAX)),
            "WHERE AND chain" => i(1),
            "right-nested +" => i(n / 2 + 1),
            "aggregate argument" => i(n - 1),
            _ => i(1),
        };
        assert_eq!(rows, vec![vec![want]], "{what}");
        assert!(plan.is_ok_and(|p| p.contains("PROJECTION")), "{what}");
        assert!(proc.is_ok(), "{what}: {proc:?}");
        // A query that does not group is a plain view, planned (so checked) when created
        // (one that aggregates is a materialized view, which takes plain columns only).
        if what != "aggregate argument" {
            assert!(view.is_ok(), "{what}: {view:?}");
        }
    }
}

#[test]
fn large_flat_statements_still_work() {
    let mut db = Db::new(SCHEMA);
    let rows: Vec<String> = (0..5_000).map(|k| format!("({k}, 'n{k}')")).collect();
    db.run(&format!("INSERT INTO t VALUES {}", rows.join(", ")));
    let items: Vec<String> = (0..10_000).map(|k| (k * 2).to_string()).collect();
    let r = db.rows(&format!("SELECT COUNT(*) FROM t WHERE id IN ({})", items.join(",")));
    assert_eq!(r, vec![vec![i(2_500)]]);
    let whens: Vec<String> = (0..2_000).map(|k| format!("WHEN {k} THEN 'w{k}'")).collect();
    let r = db.rows(&format!("SELECT CASE id {} END FROM t WHERE id = 1999", whens.join(" ")));
    assert_eq!(r, vec![vec![s("w1999")]]);
}

#[test]
fn scripts_of_megabytes_split_into_their_statements() {
    let script = "INSERT INTO t VALUES (1, 'a;b'); -- ;\n".repeat(60_000);
    assert!(script.len() > 2_000_000);
    let parts = split_statements(&script).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(parts.len(), 60_000);
    let depth = nesting_depth(&tokenize(&script).unwrap_or_default());
    assert_eq!(depth, 2);
}

#[test]
fn nested_between_keeps_its_operand_once() {
    let mut db = Db::new(SCHEMA);
    db.run("INSERT INTO t VALUES (1, 'a'), (2, NULL), (3, 'c'), (4, 'd')");
    // Each level used to copy the tested expression twice: 2^60 nodes.
    let levels = 60;
    let sql = format!("SELECT id FROM t WHERE {}id = 2{} ORDER BY id", "(".repeat(levels), ") BETWEEN FALSE AND TRUE".repeat(levels));
    assert_eq!(db.rows(&sql), vec![vec![i(1)], vec![i(2)], vec![i(3)], vec![i(4)]]);
    // An expression kept once answers as `x >= lo AND x <= hi` would, NULLs included.
    for (x, want) in [("id + 0", vec![2, 3]), ("CHAR_LENGTH(name) + 1", vec![1, 3, 4])] {
        let got: Vec<Value> = db.rows(&format!("SELECT id FROM t WHERE {x} BETWEEN 2 AND 3 ORDER BY id")).into_iter().flatten().collect();
        let want_plain: Vec<Value> =
            db.rows(&format!("SELECT id FROM t WHERE {x} >= 2 AND {x} <= 3 ORDER BY id")).into_iter().flatten().collect();
        assert_eq!(got, want_plain, "{x}");
        if x == "id + 0" {
            assert_eq!(got, want.iter().map(|&k| i(k)).collect::<Vec<_>>());
        }
        let not: Vec<Value> =
            db.rows(&format!("SELECT id FROM t WHERE {x} NOT BETWEEN 2 AND 3 ORDER BY id")).into_iter().flatten().collect();
        let not_plain: Vec<Value> =
            db.rows(&format!("SELECT id FROM t WHERE NOT ({x} >= 2 AND {x} <= 3) ORDER BY id")).into_iter().flatten().collect();
        assert_eq!(not, not_plain, "NOT BETWEEN over {x}");
    }
}
