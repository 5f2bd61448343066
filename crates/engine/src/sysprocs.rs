//! System procedures (`@AdHoc`, `@Statistics`, `@SystemCatalog` …): the ones VoltDB's client
//! calls on its own to learn the topology and route calls, and the ones tools use.

use lockstep_core::{hash::MP_PARTITION_ID, DataType, Error, ResultTable, Result, TableKind, Value};

use crate::engine::{Call, Engine};
use crate::outcome::{Outcome, Reply};
use crate::registry::ProcRoute;

/// Build string reported at login and by `@SystemInformation`.
pub const BUILD_STRING: &str = concat!("lockstep-", env!("CARGO_PKG_VERSION"));
/// Host id of this (single) node, as used in topology answers.
pub const HOST_ID: i32 = 0;

fn str_param(call: &Call, i: usize, what: &str) -> Result<String> {
    match call.params.get(i) {
        Some(Value::Str(s)) => Ok(s.clone()),
        Some(Value::Bytes(b)) => String::from_utf8(b.clone()).map_err(|_| Error::graceful(format!("{what} must be text"))),
        _ => Err(Error::graceful(format!("{} needs {what} as parameter {}", call.procedure, i + 1))),
    }
}

pub fn submit(engine: &Engine, call: Call, reply: Reply) {
    let name = call.procedure.to_ascii_lowercase();
    if name == "@adhoc" {
        let sql = match str_param(&call, 0, "the SQL text") {
            Ok(s) => s,
            Err(e) => return reply(Outcome::error(e)),
        };
        let params = call.params.into_iter().skip(1).collect();
        return engine.adhoc(&sql, params, reply);
    }
    let result = match name.as_str() {
        "@ping" => {
            let mut o = Outcome::tables(vec![ResultTable::with_columns(&[("STATUS", DataType::BigInt)])]);
            o.status_string = Some("SUCCESS".into());
            return reply(o);
        }
        "@statistics" => statistics(engine, &call),
        "@systemcatalog" => system_catalog(engine, &call),
        "@getpartitionkeys" => partition_keys(engine, &call),
        "@systeminformation" => system_information(engine, &call),
        "@explain" => explain(engine, &call),
        "@explainproc" => explain_proc(engine, &call),
        "@quiesce" => Ok(vec![ResultTable::scalar("STATUS", 0)]),
        "@updateclasses" | "@updateapplicationcatalog" => Err(Error::graceful(
            "Lockstep procedures are Lua, not Java classes: put Name.lua in the procedure directory and declare it with CREATE PROCEDURE … FROM CLASS a.b.Name (or FROM FILE 'path.lua')",
        )),
        _ => Err(Error::unexpected(format!("Procedure {} was not found", call.procedure))),
    };
    reply(match result {
        Ok(tables) => Outcome::tables(tables),
        Err(e) => Outcome::error(e),
    });
}

fn statistics(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let selector = str_param(call, 0, "a selector")?.to_ascii_uppercase();
    match selector.as_str() {
        "TOPO" => Ok(topology(engine)),
        "PARTITIONCOUNT" => {
            let mut t = ResultTable::with_columns(&[("PARTITION_COUNT", DataType::Integer)]);
            t.push(vec![Value::Int(engine.partition_count() as i64)]);
            Ok(vec![t])
        }
        other => Err(Error::graceful(format!("@Statistics selector {other} is not supported yet"))),
    }
}

/// `@Statistics TOPO`: one row per partition plus the MP initiator, and the hash ring.
pub fn topology(engine: &Engine) -> Vec<ResultTable> {
    let mut parts = ResultTable::with_columns(&[("Partition", DataType::Integer), ("Sites", DataType::Varchar), ("Leader", DataType::Varchar)]);
    let n = engine.partition_count();
    for p in 0..n {
        let site = format!("{HOST_ID}:{p}");
        parts.push(vec![Value::Int(p as i64), Value::Str(site.clone()), Value::Str(site)]);
    }
    let mp = format!("{HOST_ID}:{n}");
    parts.push(vec![Value::Int(MP_PARTITION_ID as i64), Value::Str(mp.clone()), Value::Str(mp)]);
    let mut hash = ResultTable::with_columns(&[("HASHTYPE", DataType::Varchar), ("HASHCONFIG", DataType::Varbinary)]);
    hash.push(vec![Value::Str("ELASTIC".into()), Value::Bytes(engine.shared().ring.config_bytes())]);
    vec![parts, hash]
}

fn system_catalog(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let selector = str_param(call, 0, "a selector")?.to_ascii_uppercase();
    let view = engine.shared().view();
    match selector.as_str() {
        "PROCEDURES" => {
            let cols: Vec<(&str, DataType)> = [
                "PROCEDURE_CAT", "PROCEDURE_SCHEM", "PROCEDURE_NAME", "RESERVED1", "RESERVED2", "RESERVED3", "REMARKS",
            ]
            .iter()
            .map(|c| (*c, DataType::Varchar))
            .chain([("PROCEDURE_TYPE", DataType::SmallInt), ("SPECIFIC_NAME", DataType::Varchar)])
            .collect();
            let mut t = ResultTable::with_columns(&cols);
            let mut infos: Vec<_> = view.procs.values().collect();
            infos.sort_by(|a, b| a.name.cmp(&b.name));
            for p in infos {
                let remarks = match &p.route {
                    ProcRoute::Single { param, key_type } => format!(
                        r#"{{"readOnly":{},"singlePartition":true,"partitionParameter":{param},"partitionParameterType":{}}}"#,
                        p.read_only,
                        key_type.wire_code()
                    ),
                    ProcRoute::Directed => {
                        format!(r#"{{"readOnly":{},"singlePartition":true,"partitionParameter":-1,"partitionParameterType":-1}}"#, p.read_only)
                    }
                    _ => format!(r#"{{"readOnly":{},"singlePartition":false}}"#, p.read_only),
                };
                let s = |v: &str| Value::Str(v.to_string());
                t.push(vec![Value::Null, Value::Null, s(&p.name), Value::Null, Value::Null, Value::Null, s(&remarks), Value::Int(1), s(&p.name)]);
            }
            Ok(vec![t])
        }
        "TABLES" => {
            let mut t = ResultTable::with_columns(&[
                ("TABLE_CAT", DataType::Varchar),
                ("TABLE_SCHEM", DataType::Varchar),
                ("TABLE_NAME", DataType::Varchar),
                ("TABLE_TYPE", DataType::Varchar),
                ("REMARKS", DataType::Varchar),
            ]);
            for def in view.catalog.tables() {
                let (kind, remarks) = match (&def.kind, def.partition_column) {
                    (TableKind::View(_), _) => ("VIEW", None),
                    (TableKind::Stream { .. }, _) => ("STREAM", None),
                    (TableKind::Table, Some(c)) => ("TABLE", Some(format!(r#"{{"partitionColumn":"{}"}}"#, def.columns[c].name))),
                    (TableKind::Table, None) => ("TABLE", None),
                };
                t.push(vec![Value::Null, Value::Null, Value::Str(def.name.clone()), Value::Str(kind.into()), remarks.map(Value::Str).unwrap_or(Value::Null)]);
            }
            Ok(vec![t])
        }
        "COLUMNS" => {
            let mut t = ResultTable::with_columns(&[
                ("TABLE_NAME", DataType::Varchar),
                ("COLUMN_NAME", DataType::Varchar),
                ("TYPE_NAME", DataType::Varchar),
                ("COLUMN_SIZE", DataType::Integer),
                ("IS_NULLABLE", DataType::Varchar),
                ("ORDINAL_POSITION", DataType::Integer),
            ]);
            for def in view.catalog.tables() {
                for (i, c) in def.columns.iter().enumerate() {
                    t.push(vec![
                        Value::Str(def.name.clone()),
                        Value::Str(c.name.clone()),
                        Value::Str(c.ty.sql_name().into()),
                        Value::Int(c.size as i64),
                        Value::Str(if c.nullable { "YES" } else { "NO" }.into()),
                        Value::Int(i as i64 + 1),
                    ]);
                }
            }
            Ok(vec![t])
        }
        other => Err(Error::graceful(format!("@SystemCatalog selector {other} is not supported yet"))),
    }
}

fn partition_keys(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let kind = str_param(call, 0, "a key type (INTEGER, STRING or VARBINARY)")?.to_ascii_uppercase();
    let keys = engine.shared().ring.partition_keys();
    let key_type = match kind.as_str() {
        "INTEGER" => DataType::Integer,
        "STRING" | "VARCHAR" => DataType::Varchar,
        "VARBINARY" => DataType::Varbinary,
        other => return Err(Error::graceful(format!("Type {other} is not a supported partition key type (INTEGER, STRING, VARCHAR or VARBINARY)"))),
    };
    let mut t = ResultTable::with_columns(&[("PARTITION_ID", DataType::Integer), ("PARTITION_KEY", key_type)]);
    for (p, k) in keys {
        let key = match key_type {
            DataType::Integer => Value::Int(k),
            DataType::Varchar => Value::Str(k.to_string()),
            _ => Value::Bytes((k as i32).to_be_bytes().to_vec()),
        };
        t.push(vec![Value::Int(p as i64), key]);
    }
    Ok(vec![t])
}

fn system_information(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let selector = match call.params.first() {
        None => "OVERVIEW".to_string(),
        Some(_) => str_param(call, 0, "a selector")?.to_ascii_uppercase(),
    };
    let shared = engine.shared();
    match selector.as_str() {
        "OVERVIEW" => {
            let mut t = ResultTable::with_columns(&[("HOST_ID", DataType::Integer), ("KEY", DataType::Varchar), ("VALUE", DataType::Varchar)]);
            let addr = shared.client_address();
            let ip = addr.map(|a| a.ip().to_string()).unwrap_or_else(|| "127.0.0.1".into());
            let port = addr.map(|a| a.port().to_string()).unwrap_or_default();
            let rows = [
                ("IPADDRESS", ip.clone()),
                ("CLIENTINTERFACE", ip.clone()),
                ("CLIENTPORT", port.clone()),
                // Admin calls are accepted on the client port.
                ("ADMININTERFACE", ip),
                ("ADMINPORT", port),
                ("HOSTNAME", "localhost".to_string()),
                ("BUILDSTRING", BUILD_STRING.to_string()),
                ("VERSION", env!("CARGO_PKG_VERSION").to_string()),
                ("CLUSTERSTATE", "RUNNING".to_string()),
                ("STARTTIME", shared.started_ms.to_string()),
                ("FULLCLUSTERSIZE", "1".to_string()),
                ("SITESPERHOST", engine.partition_count().to_string()),
                ("VOLTDBROOT", shared.config.data_dir.display().to_string()),
            ];
            for (k, v) in rows {
                t.push(vec![Value::Int(HOST_ID as i64), Value::Str(k.into()), Value::Str(v)]);
            }
            Ok(vec![t])
        }
        "DEPLOYMENT" => {
            let mut t = ResultTable::with_columns(&[("PROPERTY", DataType::Varchar), ("VALUE", DataType::Varchar)]);
            for (k, v) in [("kfactor", "0".to_string()), ("sitesperhost", engine.partition_count().to_string()), ("hostcount", "1".to_string())] {
                t.push(vec![Value::Str(k.into()), Value::Str(v)]);
            }
            Ok(vec![t])
        }
        other => Err(Error::graceful(format!("@SystemInformation selector {other} is not supported"))),
    }
}

fn explain(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let sql = str_param(call, 0, "the SQL text")?;
    let catalog = engine.catalog();
    let mut t = ResultTable::with_columns(&[("EXECUTION_PLAN", DataType::Varchar)]);
    for s in lockstep_sql::split_statements(&sql)? {
        let p = lockstep_sql::prepare(&catalog, &s)?;
        t.push(vec![Value::Str(lockstep_sql::explain(&p))]);
    }
    Ok(vec![t])
}

fn explain_proc(engine: &Engine, call: &Call) -> Result<Vec<ResultTable>> {
    let name = str_param(call, 0, "a procedure name")?;
    let catalog = engine.catalog();
    let def = catalog.procedure(&name).ok_or_else(|| Error::graceful(format!("Procedure {name} was not found")))?;
    let mut t = ResultTable::with_columns(&[("STATEMENT_NAME", DataType::Varchar), ("SQL_STATEMENT", DataType::Varchar), ("EXECUTION_PLAN", DataType::Varchar)]);
    if let lockstep_core::ProcedureBody::Sql(sql) = &def.body {
        let p = lockstep_sql::prepare(&catalog, sql)?;
        t.push(vec![Value::Str("sql".into()), Value::Str(sql.clone()), Value::Str(lockstep_sql::explain(&p))]);
    }
    Ok(vec![t])
}
