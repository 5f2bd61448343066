//! What the SQL conformance tests share: a Lockstep engine in this process that runs ad-hoc
//! SQL, SQLite (bundled) and PostgreSQL as peers, one text form for the values all three
//! return, and the sqllogictest `DB` adapters over them.
#![allow(dead_code)] // each test file uses a part

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use lockstep_core::Value;
use lockstep_engine::cmdlog::writer::Durability;
use lockstep_engine::{Call, Engine, EngineConfig};
use sqllogictest::{DBOutput, DefaultColumnType};

/// How long one statement may take before the test calls the engine stuck.
const ANSWER_WAIT_MS: u64 = 60_000;

/// The directory of the `.slt` files, at the repository's root.
pub fn slt_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/slt")
}

/// Every `.slt` file of the suite, in name order.
pub fn slt_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(slt_dir())
        .expect("tests/slt is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    files
}

/// A statement's error, as the sqllogictest runner wants it.
#[derive(Debug)]
pub struct SqlError(pub String);

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SqlError {}

/// Whether a statement returns rows (a query) rather than a count.
pub fn is_query(sql: &str) -> bool {
    let head = sql.trim_start().trim_start_matches('(').trim_start();
    let word: String = head.chars().take_while(|c| c.is_ascii_alphabetic()).collect::<String>().to_ascii_uppercase();
    matches!(word.as_str(), "SELECT" | "WITH" | "VALUES")
}

/// The one text form of a number: a fixed-point value loses its trailing zeros (`2.50` and
/// `2.500000000000` are both `2.5`, `3.00` is `3`), since each system pads to its own scale.
pub fn canonical_number(text: &str) -> String {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let looks_fixed = digits.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty() && !b.is_empty() && a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit())
    });
    if !looks_fixed {
        return text.to_string();
    }
    let trimmed = text.trim_end_matches('0').trim_end_matches('.');
    if trimmed == "-0" {
        "0".to_string()
    } else {
        trimmed.to_string()
    }
}

/// A text cell: sqllogictest's `(empty)` for the empty string, numbers in canonical form.
pub fn cell_text(text: &str) -> String {
    if text.is_empty() {
        "(empty)".to_string()
    } else {
        canonical_number(text)
    }
}

/// A float as all three systems print it: the shortest text that reads back the same.
pub fn float_text(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else {
        format!("{v}")
    }
}

/// A Lockstep value in the suite's text form.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::Null => "NULL".to_string(),
        Value::Float(f) => float_text(*f),
        other => cell_text(&other.to_string()),
    }
}

static ENGINE_SEQ: AtomicU32 = AtomicU32::new(0);

/// An engine in this process with `sites` partitions, its data in a fresh temporary
/// directory, without a command log (nothing here needs to survive).
pub struct Lockstep {
    pub engine: Arc<Engine>,
    dir: PathBuf,
}

impl Lockstep {
    pub fn start(sites: u32) -> Lockstep {
        let n = ENGINE_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lockstep-sqlcheck-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = EngineConfig::new(&dir);
        c.sites = sites;
        c.durability = Durability::Off;
        let engine = Engine::start(c).expect("the engine starts");
        Lockstep { engine, dir }
    }

    /// Runs one ad-hoc statement: its first table's rows, or its error message.
    pub fn sql(&self, text: &str) -> Result<Vec<Vec<Value>>, String> {
        let (tx, rx) = mpsc::channel();
        let call = Call { procedure: "@AdHoc".into(), params: vec![Value::Str(text.into())], ..Default::default() };
        self.engine.submit(call, Box::new(move |o| drop(tx.send(o))));
        let outcome =
            rx.recv_timeout(Duration::from_millis(ANSWER_WAIT_MS)).map_err(|_| format!("no answer in {ANSWER_WAIT_MS} ms: {text}"))?;
        if !outcome.is_success() {
            return Err(outcome.status_string.unwrap_or_else(|| format!("status {}", outcome.status)));
        }
        Ok(outcome.tables.into_iter().next().map(|t| t.rows).unwrap_or_default())
    }
}

impl Drop for Lockstep {
    fn drop(&mut self) {
        self.engine.shutdown();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl sqllogictest::DB for Lockstep {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        let rows = self.sql(sql).map_err(SqlError)?;
        if !is_query(sql) {
            let count = rows.first().and_then(|r| r.first()).and_then(|v| if let Value::Int(n) = v { Some(*n as u64) } else { None });
            return Ok(DBOutput::StatementComplete(count.unwrap_or(0)));
        }
        let width = rows.first().map_or(0, |r| r.len());
        let rows = rows.iter().map(|r| r.iter().map(value_text).collect()).collect();
        Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; width], rows })
    }

    fn engine_name(&self) -> &str {
        "lockstep"
    }
}

/// SQLite in memory (the `rusqlite` crate's bundled build).
pub struct Sqlite {
    pub conn: rusqlite::Connection,
}

impl Sqlite {
    pub fn open() -> Sqlite {
        Sqlite { conn: rusqlite::Connection::open_in_memory().expect("SQLite opens in memory") }
    }

    /// Runs one statement: its rows as text cells, or its error message.
    pub fn rows(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        let mut stmt = self.conn.prepare(sql).map_err(|e| e.to_string())?;
        let width = stmt.column_count();
        let mut rows = stmt.query([]).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| e.to_string())? {
            let mut cells = Vec::with_capacity(width);
            for i in 0..width {
                let v = row.get_ref(i).map_err(|e| e.to_string())?;
                cells.push(match v {
                    rusqlite::types::ValueRef::Null => "NULL".to_string(),
                    rusqlite::types::ValueRef::Integer(n) => n.to_string(),
                    rusqlite::types::ValueRef::Real(f) => float_text(f),
                    rusqlite::types::ValueRef::Text(t) => cell_text(&String::from_utf8_lossy(t)),
                    rusqlite::types::ValueRef::Blob(b) => b.iter().map(|x| format!("{x:02X}")).collect(),
                });
            }
            out.push(cells);
        }
        Ok(out)
    }
}

impl sqllogictest::DB for Sqlite {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        if !is_query(sql) {
            let n = self.conn.execute(sql, []).map_err(|e| SqlError(e.to_string()))?;
            return Ok(DBOutput::StatementComplete(n as u64));
        }
        let rows = self.rows(sql).map_err(SqlError)?;
        let width = rows.first().map_or(0, |r| r.len());
        Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; width], rows })
    }

    fn engine_name(&self) -> &str {
        "sqlite"
    }
}

/// PostgreSQL through tokio-postgres on a runtime of its own, in a schema of its own that
/// is dropped first, so each file starts from nothing.
pub struct Postgres {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl Postgres {
    pub fn connect(url: &str, schema: &str) -> Result<Postgres, String> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        let client = runtime.block_on(async {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
            tokio::spawn(async move { drop(conn.await) });
            Ok::<_, String>(client)
        })?;
        let pg = Postgres { runtime, client };
        pg.batch(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path TO {schema}"))?;
        Ok(pg)
    }

    fn batch(&self, sql: &str) -> Result<Vec<tokio_postgres::SimpleQueryMessage>, String> {
        self.runtime
            .block_on(self.client.simple_query(sql))
            .map_err(|e| e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string()))
    }
}

impl sqllogictest::DB for Postgres {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SqlError> {
        use tokio_postgres::SimpleQueryMessage;
        let messages = self.batch(sql).map_err(SqlError)?;
        let mut rows = Vec::new();
        let mut count = 0;
        for m in messages {
            match m {
                SimpleQueryMessage::Row(r) => {
                    rows.push((0..r.len()).map(|i| r.get(i).map_or_else(|| "NULL".to_string(), cell_text)).collect::<Vec<_>>())
                }
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        if !is_query(sql) {
            return Ok(DBOutput::StatementComplete(count));
        }
        let width = rows.first().map_or(0, |r: &Vec<String>| r.len());
        Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; width], rows })
    }

    fn engine_name(&self) -> &str {
        "postgresql"
    }
}
