//! DDL: VoltDB's CREATE / DROP / ALTER / PARTITION statements applied to the catalog.
//!
//! Parsed by hand over the lexer (VoltDB's dialect — ASSUMEUNIQUE, VARCHAR(n BYTES),
//! LIMIT PARTITION ROWS, PARTITION … — is not sqlparser's), except view queries and SQL
//! procedure bodies, which are ordinary SQL.

use lockstep_core::{Catalog, ColumnDef, DataType, Error, IndexDef, Permissions, Result, TableDef, TableKind};

use crate::ddl_parse::{column_def, skip_limit_partition_rows, table_constraint, Cursor, KeySpec, TABLE_COLUMNS_MAX};
use crate::{ddl_index, ddl_migrate, ddl_proc, ddl_task, ddl_ttl, ddl_view};

/// What DDL needs from its surroundings: Lua sources of procedures.
pub trait DdlEnv {
    /// (path for messages, Lua source) of `FROM FILE 'path'`.
    fn read_file(&self, path: &str) -> Result<(String, String)>;
    /// (path, source) of the Lua file bound to `FROM CLASS a.b.Name` (Name.lua on the procedure path).
    fn find_class(&self, class_name: &str) -> Result<(String, String)>;
}

/// The result of one DDL statement.
#[derive(Clone, Debug, PartialEq)]
pub struct DdlOutcome {
    /// e.g. "table VOTES created".
    pub message: String,
}

pub(crate) fn done(message: impl Into<String>) -> Result<DdlOutcome> {
    Ok(DdlOutcome { message: message.into() })
}

/// Applies one DDL statement to the catalog (the caller keeps a copy to roll back).
pub fn apply_ddl(catalog: &mut Catalog, sql: &str, env: &dyn DdlEnv) -> Result<DdlOutcome> {
    let mut c = Cursor::new(sql)?;
    let r = dispatch(catalog, &mut c, env);
    r.map_err(|e| {
        let head: String = sql.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        e.context(format!("in DDL statement '{head} …'"))
    })
}

fn dispatch(catalog: &mut Catalog, c: &mut Cursor, env: &dyn DdlEnv) -> Result<DdlOutcome> {
    let first = c.ident("a DDL statement")?;
    match first.as_str() {
        "CREATE" => {
            let or_replace = if c.eat_word("OR") {
                c.expect_word("REPLACE")?;
                true
            } else {
                false
            };
            let what = c.ident("what to create")?;
            match what.as_str() {
                "PROCEDURE" => ddl_proc::create_procedure(catalog, c, env, or_replace),
                _ if or_replace => Err(Error::sql(format!("CREATE OR REPLACE {what} is not supported"))),
                "TABLE" => create_table(catalog, c),
                "STREAM" => create_stream(catalog, c),
                "VIEW" => ddl_view::create_view(catalog, c),
                "INDEX" => ddl_index::create_index(catalog, c, false, false),
                "UNIQUE" | "ASSUMEUNIQUE" => {
                    c.expect_word("INDEX")?;
                    ddl_index::create_index(catalog, c, true, what == "ASSUMEUNIQUE")
                }
                "ROLE" => create_role(catalog, c),
                "TASK" => done(ddl_task::create_task(catalog, c)?),
                "FUNCTION" | "AGGREGATE" => Err(Error::sql(format!("CREATE {what} (Java user functions) is not supported"))),
                other => Err(Error::sql(format!("CREATE {other} is not supported"))),
            }
        }
        "DROP" => {
            let what = c.ident("what to drop")?;
            match what.as_str() {
                "TABLE" | "VIEW" | "STREAM" => drop_table(catalog, c, &what),
                "INDEX" => drop_index(catalog, c),
                "PROCEDURE" => ddl_proc::drop_procedure(catalog, c),
                "ROLE" => drop_role(catalog, c),
                "TASK" => done(ddl_task::drop_task(catalog, c)?),
                other => Err(Error::sql(format!("DROP {other} is not supported"))),
            }
        }
        "ALTER" => {
            if c.eat_word("TASK") {
                return done(ddl_task::alter_task(catalog, c)?);
            }
            c.expect_word("TABLE")?;
            alter_table(catalog, c)
        }
        "PARTITION" => {
            if c.eat_word("PROCEDURE") {
                return ddl_proc::partition_procedure(catalog, c);
            }
            c.expect_word("TABLE")?;
            partition_table(catalog, c)
        }
        "LOAD" | "REMOVE" => done(format!("{first} CLASSES ignored: Lockstep procedures are Lua, not Java classes")),
        "IMPORT" => done("IMPORT CLASS ignored: Lockstep procedures are Lua, not Java classes"),
        "DR" => done("DR TABLE ignored: Lockstep has no cross-datacenter replication"),
        "SET" => done("SET ignored: Lockstep has no cross-datacenter replication settings"),
        other => Err(Error::sql(format!("{other} is not a DDL statement Lockstep knows"))),
    }
}

/// `CREATE ROLE name [WITH permission, …]`: a role grants its users the permissions named.
fn create_role(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a role name")?;
    let mut permissions = Permissions::NONE;
    if c.eat_word("WITH") {
        loop {
            let word = c.ident("a permission")?;
            let p = Permissions::parse(&word).ok_or_else(|| {
                Error::sql(format!(
                    "unknown permission {word} in CREATE ROLE {name}: use ADMIN, SQL, SQLREAD, DEFAULTPROC, DEFAULTPROCREAD or ALLPROC"
                ))
            })?;
            permissions = permissions.union(p);
            if !c.eat_punct(",") {
                break;
            }
        }
    }
    c.expect_end()?;
    let role = catalog.add_role(&name, permissions)?;
    let names = permissions.names();
    let with = if names.is_empty() { " with no permissions".to_string() } else { format!(" with {}", names.join(", ")) };
    done(format!("role {} created{with}", role.name))
}

/// `DROP ROLE [IF EXISTS] name [IF EXISTS]`.
fn drop_role(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let mut if_exists = false;
    if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        if_exists = true;
    }
    let name = c.ident("a role name")?;
    if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        if_exists = true;
    }
    c.expect_end()?;
    if if_exists && catalog.role_permissions(&name).is_none() {
        return done(format!("role {} does not exist; nothing dropped", name.to_ascii_lowercase()));
    }
    let role = catalog.drop_role(&name)?;
    done(format!("role {} dropped", role.name))
}

/// `( column defs and constraints )`
fn table_body(c: &mut Cursor, table: &str) -> Result<(Vec<ColumnDef>, Vec<KeySpec>)> {
    c.expect_punct("(")?;
    let mut cols: Vec<ColumnDef> = Vec::new();
    let mut keys = Vec::new();
    loop {
        match table_constraint(c)? {
            Some(Some(k)) => keys.push(k),
            Some(None) => {}
            None => {
                let col = column_def(c, &mut keys)?;
                if cols.iter().any(|x| x.name.eq_ignore_ascii_case(&col.name)) {
                    return Err(Error::sql(format!("column {} is defined twice in {table}", col.name)));
                }
                cols.push(col);
                if cols.len() > TABLE_COLUMNS_MAX {
                    return Err(Error::sql(format!("{table} has more than {TABLE_COLUMNS_MAX} columns")));
                }
            }
        }
        if c.eat_punct(")") {
            break;
        }
        if !c.eat_punct(",") {
            return Err(c.error("expected ',' or ')' in the column list"));
        }
        // A comma right before the closing parenthesis, as VoltDB's own example schemas
        // have, ends the list as well.
        if c.eat_punct(")") {
            break;
        }
    }
    if cols.is_empty() {
        return Err(Error::sql(format!("{table} needs at least one column")));
    }
    Ok((cols, keys))
}

/// Builds index definitions from key constraints (primary key first).
fn key_indexes(table: &str, cols: &mut [ColumnDef], keys: &[KeySpec], existing: &[IndexDef]) -> Result<Vec<IndexDef>> {
    let mut out: Vec<IndexDef> = Vec::new();
    for k in keys {
        let mut positions = Vec::new();
        for n in &k.columns {
            let p = cols
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(n))
                .ok_or_else(|| Error::sql(format!("unknown column {n} in a key of {table}")))?;
            if positions.contains(&p) {
                return Err(Error::sql(format!("column {n} appears twice in a key of {table}")));
            }
            ddl_index::check_key_type(&cols[p].name, cols[p].ty)?;
            positions.push(p);
        }
        if k.primary {
            if out.iter().chain(existing).any(|i| i.primary) {
                return Err(Error::sql(format!("{table} has more than one PRIMARY KEY")));
            }
            for &p in &positions {
                cols[p].nullable = false;
            }
        }
        let name = match &k.name {
            Some(n) => n.clone(),
            None if k.primary => format!("PK_{table}"),
            None => {
                let names: Vec<&str> = positions.iter().map(|&p| cols[p].name.as_str()).collect();
                format!("{}_{table}_{}", if k.assume_unique { "AK" } else { "UK" }, names.join("_"))
            }
        };
        if out.iter().chain(existing).any(|i| i.name.eq_ignore_ascii_case(&name)) {
            return Err(Error::sql(format!("index name {name} is used twice in {table}")));
        }
        let def = IndexDef {
            name,
            columns: positions,
            unique: !k.assume_unique,
            assume_unique: k.assume_unique,
            primary: k.primary,
            exprs: vec![],
            predicate: None,
        };
        if k.primary {
            out.insert(0, def);
        } else {
            out.push(def);
        }
    }
    Ok(out)
}

pub(crate) fn index_name_taken(catalog: &Catalog, name: &str) -> Option<String> {
    catalog.tables().find(|t| t.indexes.iter().any(|i| i.name.eq_ignore_ascii_case(name))).map(|t| t.name.clone())
}

fn create_table(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a table name")?;
    if catalog.table(&name).is_some() {
        // VoltDB's wording: kits that create their schema match on it to tell that another
        // client created the table first.
        return Err(Error::sql(format!("object name already exists: {}", name.to_ascii_uppercase())));
    }
    let migrate_target = ddl_migrate::parse_migrate_target(c)?;
    let (mut cols, keys) = table_body(c, &name)?;
    if c.is_word("LIMIT") {
        skip_limit_partition_rows(c)?;
    }
    let indexes = key_indexes(&name, &mut cols, &keys, &[])?;
    for i in &indexes {
        if let Some(t) = index_name_taken(catalog, &i.name) {
            return Err(Error::sql(format!("index name {} is already used by table {t}", i.name)));
        }
    }
    let def = TableDef { id: 0, name: name.clone(), columns: cols, indexes, partition_column: None, kind: TableKind::Table };
    let ttl = if c.eat_word("USING") { Some(ddl_ttl::parse_ttl(c, &def)?) } else { None };
    c.expect_end()?;
    if migrate_target.is_some() {
        ddl_migrate::check_migrating_table(catalog, &def)?;
    }
    let def = catalog.add_table(def)?;
    if let Some(target) = migrate_target {
        ddl_migrate::create_companions(catalog, &def, &target)?;
    }
    if ttl.is_some() {
        catalog.set_ttl(def.id, ttl);
    }
    done(format!("table {name} created"))
}

fn create_stream(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a stream name")?;
    let mut pcol = None;
    let mut target = None;
    loop {
        if c.eat_word("PARTITION") {
            c.expect_word("ON")?;
            c.expect_word("COLUMN")?;
            pcol = Some(c.ident("a column name")?);
        } else if c.eat_word("EXPORT") {
            c.expect_word("TO")?;
            if !c.eat_word("TARGET") && !c.eat_word("TOPIC") {
                return Err(c.error("expected TARGET"));
            }
            target = Some(c.ident("an export target name")?);
        } else {
            break;
        }
    }
    let (cols, keys) = table_body(c, &name)?;
    c.expect_end()?;
    if !keys.is_empty() {
        return Err(Error::sql(format!("stream {name} cannot have a PRIMARY KEY or UNIQUE constraint")));
    }
    let partition_column = match pcol {
        Some(p) => {
            let i = cols
                .iter()
                .position(|x| x.name.eq_ignore_ascii_case(&p))
                .ok_or_else(|| Error::sql(format!("stream {name} has no column {p} to partition on")))?;
            if cols[i].nullable {
                return Err(Error::sql(format!("partition column {p} of stream {name} must be NOT NULL")));
            }
            Some(i)
        }
        None => None,
    };
    let def = TableDef { id: 0, name: name.clone(), columns: cols, indexes: vec![], partition_column, kind: TableKind::Stream { target } };
    catalog.add_table(def)?;
    done(format!("stream {name} created"))
}

/// A unique index on a partitioned table must contain the partition column.
pub(crate) fn check_unique_partitioning(t: &TableDef, ix: &IndexDef) -> Result<()> {
    if let Some(pc) = t.partition_column {
        if (ix.unique || ix.primary) && !ix.assume_unique && !ix.columns.contains(&pc) {
            return Err(Error::sql(format!(
                "unique index {} of {} must include the partition column {} (or be declared ASSUMEUNIQUE)",
                ix.name, t.name, t.columns[pc].name
            )));
        }
    }
    Ok(())
}

fn drop_index(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("an index name")?;
    let if_exists = if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        true
    } else {
        false
    };
    c.expect_end()?;
    let Some(t) = catalog.tables().find(|t| t.indexes.iter().any(|i| i.name.eq_ignore_ascii_case(&name))).cloned() else {
        if if_exists {
            return done(format!("index {name} does not exist; nothing dropped"));
        }
        return Err(Error::sql(format!("index {name} does not exist")));
    };
    let mut def = (*t).clone();
    let pos = def.indexes.iter().position(|i| i.name.eq_ignore_ascii_case(&name)).unwrap_or(0);
    if def.indexes[pos].primary {
        return Err(Error::sql(format!("{name} is the primary key of {}; it cannot be dropped", t.name)));
    }
    def.indexes.remove(pos);
    catalog.replace_table(def)?;
    done(format!("index {name} dropped"))
}

fn drop_table(catalog: &mut Catalog, c: &mut Cursor, what: &str) -> Result<DdlOutcome> {
    let mut if_exists = false;
    if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        if_exists = true;
    }
    let name = c.ident("a name")?;
    if c.eat_word("IF") {
        c.expect_word("EXISTS")?;
        if_exists = true;
    }
    let cascade = c.eat_word("CASCADE");
    c.expect_end()?;
    if let Some(v) = catalog.plain_view(&name).cloned() {
        if what != "VIEW" {
            return Err(Error::sql(format!("{} is a view; use DROP VIEW", v.name)));
        }
        let plain = plain_dependents(catalog, std::slice::from_ref(&v.name));
        refuse_dependents(&v.name, &plain, what, cascade)?;
        for d in plain.iter().chain(std::iter::once(&v.name)) {
            catalog.drop_plain_view(d)?;
        }
        let extra = if plain.is_empty() { String::new() } else { format!(" (with views {})", plain.join(", ")) };
        return done(format!("view {}{extra} dropped", v.name));
    }
    let Some(t) = catalog.table(&name).cloned() else {
        if if_exists {
            return done(format!("{} {name} does not exist; nothing dropped", what.to_lowercase()));
        }
        return Err(Error::sql(format!("object not found: {name}")));
    };
    let kind = match t.kind {
        TableKind::Table => "TABLE",
        TableKind::View(_) => "VIEW",
        TableKind::Stream { .. } => "STREAM",
    };
    if kind != what {
        return Err(Error::sql(format!("{} is a {}; use DROP {kind}", t.name, kind.to_lowercase())));
    }
    ddl_migrate::check_not_companion(&t.name, "drop")?;
    let views: Vec<String> = catalog.views_of(t.id).map(|v| v.name.clone()).collect();
    if !views.is_empty() && !cascade {
        return Err(Error::sql(format!(
            "{} has views ({}): drop them first or use DROP {what} {} CASCADE",
            t.name,
            views.join(", "),
            t.name
        )));
    }
    let mut dropped: Vec<String> = views.clone();
    dropped.push(t.name.clone());
    let plain = plain_dependents(catalog, &dropped);
    refuse_dependents(&t.name, &plain, what, cascade)?;
    for v in &plain {
        catalog.drop_plain_view(v)?;
    }
    for v in &views {
        catalog.drop_table(v)?;
    }
    catalog.drop_table(&t.name)?;
    ddl_migrate::drop_companions(catalog, &t.name)?;
    let all: Vec<String> = views.iter().chain(&plain).cloned().collect();
    let extra = if all.is_empty() { String::new() } else { format!(" (with views {})", all.join(", ")) };
    done(format!("{} {} dropped{extra}", what.to_lowercase(), t.name))
}

/// The plain views that read any of `names`, directly or through other plain views.
fn plain_dependents(catalog: &Catalog, names: &[String]) -> Vec<String> {
    let mut gone: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    let mut out = Vec::new();
    loop {
        let next: Vec<String> = catalog
            .plain_views()
            .filter(|v| !out.contains(&v.name) && !names.contains(&v.name) && v.reads.iter().any(|r| gone.contains(r)))
            .map(|v| v.name.clone())
            .collect();
        if next.is_empty() {
            return out;
        }
        gone.extend(next.iter().map(|n| n.to_ascii_lowercase()));
        out.extend(next);
    }
}

fn refuse_dependents(name: &str, plain: &[String], what: &str, cascade: bool) -> Result<()> {
    if plain.is_empty() || cascade {
        return Ok(());
    }
    Err(Error::sql(format!("views read {name} ({}): drop them first or use DROP {what} {name} CASCADE", plain.join(", "))))
}

fn alter_table(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a table name")?;
    let t = catalog.table(&name).cloned().ok_or_else(|| Error::sql(format!("object not found: {name}")))?;
    if !matches!(t.kind, TableKind::Table) {
        return Err(Error::sql(format!("ALTER TABLE works on tables; {name} is not one")));
    }
    if let Some(message) = ddl_ttl::alter_ttl(catalog, c, &t)? {
        return done(message);
    }
    ddl_migrate::check_not_companion(&t.name, "alter")?;
    if ddl_migrate::migration(catalog, &t).is_some() {
        return Err(Error::sql(format!(
            "{name} is declared MIGRATE TO TARGET: its columns and keys cannot be altered yet; drop and create it again"
        )));
    }
    let mut def = (*t).clone();
    if c.eat_word("ADD") {
        if let Some(k) = table_constraint(c)? {
            c.expect_end()?;
            let Some(k) = k else {
                return done(format!("LIMIT PARTITION ROWS ignored for {}", t.name));
            };
            let mut cols = def.columns.clone();
            let new = key_indexes(&t.name, &mut cols, &[k], &def.indexes)?;
            for ix in &new {
                if let Some(other) = index_name_taken(catalog, &ix.name) {
                    return Err(Error::sql(format!("index name {} is already used by table {other}", ix.name)));
                }
                check_unique_partitioning(&def, ix)?;
            }
            def.columns = cols;
            let names: Vec<String> = new.iter().map(|i| i.name.clone()).collect();
            for ix in new {
                if ix.primary {
                    def.indexes.insert(0, ix);
                } else {
                    def.indexes.push(ix);
                }
            }
            catalog.replace_table(def)?;
            return done(format!("constraint {} added to {}", names.join(", "), t.name));
        }
        c.eat_word("COLUMN");
        let mut keys = Vec::new();
        let col = column_def(c, &mut keys)?;
        if c.is_word("BEFORE") {
            return Err(Error::sql("ALTER TABLE … ADD COLUMN … BEFORE is not supported; new columns go last"));
        }
        c.expect_end()?;
        if def.column_index(&col.name).is_some() {
            return Err(Error::sql(format!("{} already has a column {}", t.name, col.name)));
        }
        if def.columns.len() >= TABLE_COLUMNS_MAX {
            return Err(Error::sql(format!("{} already has {TABLE_COLUMNS_MAX} columns", t.name)));
        }
        let cname = col.name.clone();
        def.columns.push(col);
        let mut cols = def.columns.clone();
        let new = key_indexes(&t.name, &mut cols, &keys, &def.indexes)?;
        def.columns = cols;
        for ix in new {
            check_unique_partitioning(&def, &ix)?;
            def.indexes.push(ix);
        }
        catalog.replace_table(def)?;
        return done(format!("column {cname} added to {}", t.name));
    }
    Err(c.error("ALTER TABLE supports ADD [COLUMN], ADD constraint, [ALTER] USING TTL and DROP TTL; unexpected text"))
}

fn partition_table(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a table name")?;
    c.expect_word("ON")?;
    c.expect_word("COLUMN")?;
    let col = c.ident("a column name")?;
    c.expect_end()?;
    let t = catalog.table(&name).cloned().ok_or_else(|| Error::sql(format!("object not found: {name}")))?;
    if !matches!(t.kind, TableKind::Table) {
        return Err(Error::sql(format!("{name} is not a table; only tables are partitioned with PARTITION TABLE")));
    }
    let pc = t.column_index(&col).ok_or_else(|| Error::sql(format!("table {} has no column {col}", t.name)))?;
    if matches!(t.columns[pc].ty, DataType::GeographyPoint | DataType::Geography) {
        return Err(Error::sql(format!(
            "{} is a {} column: a table cannot be partitioned on a geography column",
            t.columns[pc].name, t.columns[pc].ty
        )));
    }
    if t.columns[pc].nullable {
        return Err(Error::sql(format!(
            "partition column {} of {} must be NOT NULL: declare it NOT NULL in CREATE TABLE",
            t.columns[pc].name, t.name
        )));
    }
    let mut def = (*t).clone();
    def.partition_column = Some(pc);
    for ix in &def.indexes {
        check_unique_partitioning(&def, ix)?;
    }
    let views: Vec<_> = catalog.views_of(t.id).cloned().collect();
    let def = catalog.replace_table(def)?;
    ddl_migrate::partition_companions(catalog, &def)?;
    // Views follow their source: partitioned by the source column's place among their keys.
    for v in views {
        let mut vd = (*v).clone();
        vd.partition_column = vd.view().and_then(|vw| vw.group_by.iter().position(|g| g.column() == Some(pc)));
        catalog.replace_table(vd)?;
    }
    done(format!("table {} partitioned on column {}", t.name, t.columns[pc].name))
}
