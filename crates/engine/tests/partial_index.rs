//! Partial indexes (`CREATE INDEX … WHERE`) through the engine: a procedure that fails
//! after moving rows in and out of one leaves it as it was; the index, its condition and
//! its uniqueness survive a snapshot and the replay of the command log after it; the plan
//! uses it only when the WHERE implies its condition; `@SystemCatalog INDEXINFO` shows the
//! condition.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lockstep_core::Value;
use lockstep_engine::cmdlog::writer::Durability;
use lockstep_engine::{Call, Engine, EngineConfig, Outcome};

/// How long one call may take before the test calls the engine stuck.
const ANSWER_WAIT_MS: u64 = 60_000;

/// A fresh data directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("lockstep-partial-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn start(dir: &Path) -> Arc<Engine> {
    let mut config = EngineConfig::new(dir);
    config.sites = 2;
    config.durability = Durability::Sync;
    Engine::start(config).expect("the engine starts")
}

fn call(engine: &Engine, procedure: &str, params: Vec<Value>) -> Outcome {
    let (tx, rx) = std::sync::mpsc::channel();
    engine.submit(Call { procedure: procedure.into(), params, ..Default::default() }, Box::new(move |o| drop(tx.send(o))));
    rx.recv_timeout(Duration::from_millis(ANSWER_WAIT_MS)).expect("an answer")
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

/// The rows of an ad-hoc statement that must succeed.
fn rows(engine: &Engine, sql: &str) -> Vec<Vec<Value>> {
    let o = call(engine, "@AdHoc", vec![s(sql)]);
    assert!(o.is_success(), "{sql}: {:?}", o.status_string);
    o.tables.into_iter().next().map(|t| t.rows).unwrap_or_default()
}

fn ids(engine: &Engine, sql: &str) -> Vec<i64> {
    rows(engine, sql).iter().map(|r| r[0].as_i64().unwrap_or(-1)).collect()
}

fn explain(engine: &Engine, sql: &str) -> String {
    let o = call(engine, "@Explain", vec![s(sql)]);
    assert!(o.is_success(), "{sql}: {:?}", o.status_string);
    o.tables[0].rows[0][0].as_str().unwrap_or_default().to_string()
}

const OPEN_7: &str = "SELECT id FROM orders WHERE status = 'open' AND cust = 7 ORDER BY id";

/// The orders table, its partial indexes, rows (some in a snapshot, some only in the log),
/// and a procedure that fails after moving rows in and out of the index.
fn build(engine: &Engine) {
    for ddl in [
        "CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, cust INTEGER, status VARCHAR(10))",
        "PARTITION TABLE orders ON COLUMN id",
        "CREATE INDEX open_by_cust ON orders (cust) WHERE status = 'open'",
        "CREATE TABLE accts (id INTEGER NOT NULL PRIMARY KEY, email VARCHAR(20), active BOOLEAN)",
        "CREATE UNIQUE INDEX one_active ON accts (email) WHERE active",
    ] {
        rows(engine, ddl);
    }
    // Multi-partition, so that both rows it changes are reachable wherever they are; it
    // reads the index after the changes, so the test knows they happened.
    let body = "local open = sql [[UPDATE orders SET status = 'open' WHERE id = ?]] \
        local close = sql [[UPDATE orders SET status = 'shut' WHERE id = ?]] \
        local count = sql [[SELECT COUNT(*) FROM orders WHERE status = 'open' AND cust = 7]] \
        return function(id) open:exec(id) close:exec(id - 1) abort('changed my mind after ' .. count:values()) end";
    rows(engine, &format!("CREATE PROCEDURE Flip FROM FILE 'f.lua' SOURCE $lua${body}$lua$"));
    for id in 0..40 {
        let status = if id % 2 == 0 { "open" } else { "shut" };
        rows(engine, &format!("INSERT INTO orders VALUES ({id}, {}, '{status}')", id % 4 + 6));
    }
    rows(engine, "INSERT INTO accts VALUES (1, 'a@x', true), (2, 'a@x', false)");
}

#[test]
fn a_failed_procedure_leaves_the_partial_index_as_it_was() {
    let dir = TempDir::new("rollback");
    let engine = start(&dir.0);
    build(&engine);
    // cust 7 holds ids 1, 5, 9, …: all shut. 5 would come in, 4 (cust 6, open) go out.
    assert!(ids(&engine, OPEN_7).is_empty());
    let o = call(&engine, "Flip", vec![Value::Int(5)]);
    assert!(!o.is_success() && o.status_string.as_deref().unwrap_or_default().contains("changed my mind after 1"), "{:?}", o.status_string);
    assert!(ids(&engine, OPEN_7).is_empty());
    assert_eq!(
        ids(&engine, "SELECT id FROM orders WHERE status = 'open' AND cust = 6 ORDER BY id"),
        (0..40).step_by(4).collect::<Vec<_>>()
    );
    engine.shutdown();
}

#[test]
fn partial_indexes_survive_a_snapshot_and_the_log_replay() {
    let dir = TempDir::new("restart");
    let engine = start(&dir.0);
    build(&engine);
    let (tx, rx) = std::sync::mpsc::channel();
    engine.snapshot(Box::new(move |o| drop(tx.send(o))));
    assert!(rx.recv_timeout(Duration::from_millis(ANSWER_WAIT_MS)).expect("snapshot").is_success());
    // After the snapshot: only the log holds these.
    rows(&engine, "UPDATE orders SET status = 'open' WHERE id IN (1, 5)");
    rows(&engine, "UPDATE orders SET status = 'shut' WHERE id = 8");
    rows(&engine, "INSERT INTO orders VALUES (41, 7, 'open')");
    let open7 = ids(&engine, OPEN_7);
    assert_eq!(open7, vec![1, 5, 41]);
    engine.shutdown();

    let engine = start(&dir.0);
    assert_eq!(ids(&engine, OPEN_7), open7);
    assert!(explain(&engine, OPEN_7).contains("using OPEN_BY_CUST"), "{}", explain(&engine, OPEN_7));
    let unimplied = "SELECT id FROM orders WHERE cust = 7 ORDER BY id";
    assert!(!explain(&engine, unimplied).contains("OPEN_BY_CUST"), "{}", explain(&engine, unimplied));
    assert_eq!(ids(&engine, unimplied).len(), 11);
    assert_eq!(
        ids(&engine, "SELECT id FROM orders WHERE status = 'open' AND cust = 6 ORDER BY id"),
        vec![0, 4, 12, 16, 20, 24, 28, 32, 36]
    );
    // The unique one still counts only the active rows.
    let dup = call(&engine, "@AdHoc", vec![s("INSERT INTO accts VALUES (3, 'a@x', true)")]);
    assert!(!dup.is_success() && dup.status_string.as_deref().unwrap_or_default().contains("ONE_ACTIVE"), "{:?}", dup.status_string);
    rows(&engine, "INSERT INTO accts VALUES (3, 'a@x', false)");
    // The catalog shows the condition.
    let info = call(&engine, "@SystemCatalog", vec![s("INDEXINFO")]);
    let filter = info.tables[0].rows.iter().find(|r| r[5] == s("OPEN_BY_CUST")).map(|r| r[12].clone());
    assert_eq!(filter, Some(s("status = 'open'")));
    engine.shutdown();
}
