//! The SQL front end under fuzzing: script splitting, `prepare` and `explain` against a
//! catalog of the apps' tables, scripts of DDL and statements run against a copy of it, and
//! statements run on two small partitions.
//!
//! Input layout: one selector byte, then SQL text (UTF-8, at most `SQL_INPUT_MAX_BYTES`).

use std::sync::{Arc, OnceLock};

use lockstep_core::{Catalog, DataType, Result, Value};
use lockstep_sql::testing::LocalSites;
use lockstep_sql::{apply_ddl, execute_mp, explain, is_ddl, prepare, split_statements, DdlEnv, ExecCtx};

/// Longer inputs are skipped: deeply nested expressions overflow the stack until the SQL
/// layer limits nesting (issue #21); this keeps the fuzzer on everything else meanwhile.
pub const SQL_INPUT_MAX_BYTES: usize = 4096;
/// Partitions the statements run on.
const PARTITIONS: u32 = 2;

/// The apps' schemas, each applied statement by statement (a statement another app's
/// schema already covers fails and is skipped).
const APP_DDL: [&str; 4] = [
    include_str!("../../apps/voter/ddl.sql"),
    include_str!("../../apps/tatp/ddl.sql"),
    include_str!("../../apps/ycsb/ddl.sql"),
    include_str!("../../apps/charging/ddl.sql"),
];

/// Rows put into the partitions before a statement runs, so that it has some to read.
const SEED_ROWS: [&str; 4] = [
    "INSERT INTO contestants VALUES (1, 'Edwina Burnam')",
    "INSERT INTO contestants VALUES (2, 'Tabatha Gehling')",
    "INSERT INTO votes VALUES (5551234567, 'MA', 1)",
    "INSERT INTO votes VALUES (5559876543, 'NY', 2)",
];

/// Procedures' Lua sources are not read: the SQL layer only keeps them.
struct NoFiles;

impl DdlEnv for NoFiles {
    fn read_file(&self, path: &str) -> Result<(String, String)> {
        Ok((path.to_string(), "-- fuzzing".to_string()))
    }
    fn find_class(&self, class_name: &str) -> Result<(String, String)> {
        Ok((format!("{class_name}.lua"), "-- fuzzing".to_string()))
    }
}

/// The catalog every input runs against, built on first use.
pub fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        let mut cat = Catalog::default();
        for ddl in APP_DDL {
            for stmt in split_statements(ddl).unwrap_or_default() {
                let _ = apply_ddl(&mut cat, &stmt, &NoFiles);
            }
        }
        cat
    })
}

/// Runs the entry point the first byte chooses on the text after it.
pub fn run(data: &[u8]) {
    let Some((&selector, text)) = data.split_first() else {
        return;
    };
    if text.len() > SQL_INPUT_MAX_BYTES {
        return;
    }
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let statements = || split_statements(text).unwrap_or_else(|_| vec![text.to_string()]);
    match selector % 4 {
        0 => {
            let _ = split_statements(text);
        }
        1 => {
            for s in statements() {
                if let Ok(p) = prepare(catalog(), &s) {
                    let _ = explain(&p);
                }
            }
        }
        2 => schema_and_statements(&statements()),
        _ => execute(&statements()),
    }
}

/// A script of DDL and statements against a copy of the catalog: each DDL statement
/// changes the copy (and the partitions' schema, rows kept), each other statement is
/// planned, explained and run on the partitions as the schema stands.
fn schema_and_statements(statements: &[String]) {
    let ctx = ExecCtx::new(1, 1_709_294_400_000_000);
    let mut cat = catalog().clone();
    let mut sites: Option<LocalSites> = None;
    for s in statements {
        if is_ddl(s) {
            if apply_ddl(&mut cat, s, &NoFiles).is_ok() {
                if let Some(sites) = sites.as_mut() {
                    let _ = sites.apply_schema(&cat);
                }
            }
            continue;
        }
        let Ok(p) = prepare(&cat, s) else {
            continue;
        };
        let _ = explain(&p);
        if sites.is_none() {
            sites = LocalSites::new(PARTITIONS, &cat).ok();
        }
        if let Some(sites) = sites.as_mut() {
            let params: Vec<Value> = p.param_types.iter().map(|t| parameter(*t)).collect();
            let _ = execute_mp(&Arc::new(p), &params, &ctx, sites);
        }
    }
}

/// Runs each statement on fresh partitions holding `SEED_ROWS`, with a parameter of a
/// fitting type for each `?`.
fn execute(statements: &[String]) {
    let ctx = ExecCtx::new(1, 1_709_294_400_000_000);
    let Ok(mut sites) = LocalSites::new(PARTITIONS, catalog()) else {
        return;
    };
    for s in SEED_ROWS {
        if let Ok(p) = prepare(catalog(), s) {
            let _ = execute_mp(&Arc::new(p), &[], &ctx, &mut sites);
        }
    }
    for s in statements {
        let Ok(p) = prepare(catalog(), s) else {
            continue;
        };
        let params: Vec<Value> = p.param_types.iter().map(|t| parameter(*t)).collect();
        let _ = execute_mp(&Arc::new(p), &params, &ctx, &mut sites);
    }
}

/// A plain value of type `ty`, or an integer when the type is unknown.
fn parameter(ty: Option<DataType>) -> Value {
    let one = Value::Int(1);
    match ty {
        Some(t) => one.coerce_to(t).or_else(|_| Value::from("1").coerce_to(t)).unwrap_or(Value::Null),
        None => one,
    }
}
