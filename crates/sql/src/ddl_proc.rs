//! CREATE / PARTITION / DROP PROCEDURE: SQL-statement procedures (checked by preparing
//! them now) and Lua procedures (from a file, inline SOURCE, or a VoltDB class name).

use lockstep_core::{Catalog, Error, Partitioning, ProcedureBody, ProcedureDef, Result};

use crate::ddl::{DdlEnv, DdlOutcome};
use crate::ddl_parse::Cursor;
use crate::lex::TokKind;
use crate::script::{is_ddl, split_statements};

/// Most parameters a procedure's partitioning may name (as an index).
const PROCEDURE_PARAMS_MAX: i64 = 1025;

/// `ON TABLE t COLUMN c [PARAMETER n]` → Single partitioning, checked against the catalog.
fn partition_clause(catalog: &Catalog, c: &mut Cursor, proc_name: &str) -> Result<Partitioning> {
    c.expect_word("ON")?;
    c.expect_word("TABLE")?;
    let tname = c.ident("a table name")?;
    c.expect_word("COLUMN")?;
    let cname = c.ident("a column name")?;
    let parameter = if c.eat_word("PARAMETER") {
        let n = c.integer("a parameter number")?;
        if !(0..PROCEDURE_PARAMS_MAX).contains(&n) {
            return Err(Error::sql(format!("PARAMETER {n} of procedure {proc_name} is out of range")));
        }
        n as usize
    } else {
        0
    };
    let t = catalog.table(&tname).ok_or_else(|| Error::sql(format!("procedure {proc_name} is partitioned on unknown table {tname}")))?;
    let col = t.column_index(&cname).ok_or_else(|| Error::sql(format!("procedure {proc_name}: table {} has no column {cname}", t.name)))?;
    if t.partition_column != Some(col) {
        return Err(Error::sql(format!(
            "procedure {proc_name} is partitioned on {}.{}, but {} is not partitioned on that column (add PARTITION TABLE {} ON COLUMN {} first)",
            t.name, t.columns[col].name, t.name, t.name, t.columns[col].name
        )));
    }
    Ok(Partitioning::Single { table: t.name.clone(), column: t.columns[col].name.clone(), parameter, key_type: t.columns[col].ty })
}

/// `ALLOW role, …`: the roles (which must exist) whose users may call the procedure even
/// without ALLPROC; added to `allow` in lower case, each once.
fn allow_clause(catalog: &Catalog, c: &mut Cursor, allow: &mut Vec<String>) -> Result<()> {
    loop {
        let role = c.ident("a role name")?.to_ascii_lowercase();
        if catalog.role_permissions(&role).is_none() {
            return Err(Error::sql(format!("ALLOW names role {role}, which does not exist: CREATE ROLE {role} first")));
        }
        if !allow.contains(&role) {
            allow.push(role);
        }
        if !c.eat_punct(",") {
            return Ok(());
        }
    }
}

/// The one statement of an `AS` body (`BEGIN … END` with a single statement is accepted).
fn sql_body(text: &str, proc_name: &str) -> Result<String> {
    let trimmed = text.trim();
    let head = trimmed.get(..5).unwrap_or("");
    if head.eq_ignore_ascii_case("BEGIN") && trimmed[5..].starts_with(|c: char| c.is_whitespace()) {
        let inner = trimmed[5..].trim_end();
        let inner = inner
            .strip_suffix("END")
            .or_else(|| inner.strip_suffix("end"))
            .ok_or_else(|| Error::sql(format!("procedure {proc_name}: BEGIN without END")))?;
        let stmts = split_statements(inner)?;
        if stmts.len() != 1 {
            return Err(Error::sql(format!(
                "procedure {proc_name} has {} statements; multi-statement SQL procedures are not supported (write it in Lua)",
                stmts.len()
            )));
        }
        return Ok(stmts[0].clone());
    }
    if trimmed.is_empty() {
        return Err(Error::sql(format!("procedure {proc_name} has no SQL after AS")));
    }
    Ok(trimmed.to_string())
}

/// A procedure runs on one partition chosen by a parameter (PARTITION ON) or on the one it
/// is sent to (DIRECTED): VoltDB refuses both at once, and so do we.
fn refuse_both(partitioning: &Partitioning, proc_name: &str) -> Result<()> {
    if matches!(partitioning, Partitioning::Multi) {
        return Ok(());
    }
    Err(Error::sql(format!(
        "procedure {proc_name}: PARTITION ON and DIRECTED exclude each other; give one (DIRECTED runs on the partition each call names)"
    )))
}

pub fn create_procedure(catalog: &mut Catalog, c: &mut Cursor, env: &dyn DdlEnv, or_replace: bool) -> Result<DdlOutcome> {
    // VoltDB's `CREATE PROCEDURE [PARTITION … | DIRECTED] FROM CLASS a.b.Name` has no name of
    // its own. `DIRECTED FROM CLASS` is that form, not a procedure named DIRECTED (a class
    // procedure never has a name before FROM CLASS in VoltDB).
    let unnamed = c.is_word("FROM")
        || (c.is_word("PARTITION") && c.peek_at(1).is_some_and(|t| t.is_word("ON")))
        || (c.is_word("DIRECTED") && c.peek_at(1).is_some_and(|t| t.is_word("FROM")) && c.peek_at(2).is_some_and(|t| t.is_word("CLASS")));
    let mut name = if unnamed { String::new() } else { c.name_as_written("a procedure name")? };
    let mut partitioning = Partitioning::Multi;
    let mut allow = Vec::new();
    loop {
        if c.eat_word("ALLOW") {
            allow_clause(catalog, c, &mut allow)?;
        } else if c.eat_word("PARTITION") {
            let shown = if name.is_empty() { "(from class)".to_string() } else { name.clone() };
            refuse_both(&partitioning, &shown)?;
            partitioning = partition_clause(catalog, c, &shown)?;
        } else if c.eat_word("DIRECTED") {
            let shown = if name.is_empty() { "(from class)".to_string() } else { name.clone() };
            refuse_both(&partitioning, &shown)?;
            partitioning = Partitioning::Directed;
        } else {
            break;
        }
    }
    let (body, class_name) = if c.eat_word("AS") {
        if name.is_empty() {
            return Err(Error::sql("CREATE PROCEDURE … AS needs a procedure name"));
        }
        let sql = sql_body(c.rest(), &name)?;
        if is_ddl(&sql) {
            return Err(Error::sql(format!("procedure {name}: the body must be a query or DML, not DDL")));
        }
        crate::prepare(catalog, &sql).map_err(|e| e.context(format!("procedure {name}")))?;
        (ProcedureBody::Sql(sql), None)
    } else if c.eat_word("FROM") {
        if c.eat_word("CLASS") {
            let class = c.dotted("a class name")?;
            c.expect_end()?;
            if name.is_empty() {
                name = class.rsplit('.').next().unwrap_or(&class).to_string();
            }
            let (path, source) = env.find_class(&class).map_err(|e| e.context(format!("procedure {name}")))?;
            (ProcedureBody::Lua { path, source }, Some(class))
        } else if c.eat_word("FILE") {
            let path = c.string("a quoted file path")?;
            if name.is_empty() {
                return Err(Error::sql("CREATE PROCEDURE … FROM FILE needs a procedure name"));
            }
            let body = if c.eat_word("SOURCE") {
                match c.next() {
                    Some(t) if matches!(t.kind, TokKind::Dollar | TokKind::Str) => ProcedureBody::Lua { path, source: t.text },
                    _ => return Err(c.error("expected $tag$…$tag$ after SOURCE")),
                }
            } else {
                let (p, source) = env.read_file(&path).map_err(|e| e.context(format!("procedure {name}")))?;
                ProcedureBody::Lua { path: p, source }
            };
            c.expect_end()?;
            (body, None)
        } else {
            return Err(c.error("expected CLASS or FILE after FROM"));
        }
    } else {
        return Err(c.error("expected AS, FROM FILE or FROM CLASS"));
    };
    let existed = catalog.procedure(&name).is_some();
    if existed && !or_replace {
        return Err(Error::sql(format!(
            "procedure {name} already exists: use CREATE OR REPLACE PROCEDURE, or DROP PROCEDURE {name} first"
        )));
    }
    catalog.put_procedure(ProcedureDef { name: name.clone(), body, partitioning, class_name, allow });
    Ok(DdlOutcome { message: format!("procedure {name} {}", if existed { "replaced" } else { "created" }) })
}

pub fn partition_procedure(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a procedure name")?;
    let p = catalog
        .procedure(&name)
        .cloned()
        .ok_or_else(|| Error::sql(format!("procedure {name} does not exist; create it before PARTITION PROCEDURE")))?;
    let partitioning = partition_clause(catalog, c, &p.name)?;
    c.expect_end()?;
    let mut def = (*p).clone();
    if let (ProcedureBody::Sql(sql), Partitioning::Single { .. }) = (&def.body, &partitioning) {
        crate::prepare(catalog, sql).map_err(|e| e.context(format!("procedure {name}")))?;
    }
    def.partitioning = partitioning;
    catalog.put_procedure(def);
    Ok(DdlOutcome { message: format!("procedure {} partitioned", p.name) })
}

pub fn drop_procedure(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a procedure name")?;
    let if_exists = if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        true
    } else {
        false
    };
    c.expect_end()?;
    match catalog.drop_procedure(&name) {
        Ok(p) => Ok(DdlOutcome { message: format!("procedure {} dropped", p.name) }),
        Err(_) if if_exists => Ok(DdlOutcome { message: format!("procedure {name} does not exist; nothing dropped") }),
        Err(e) => Err(e),
    }
}
