//! VoltDB's `CREATE TABLE t MIGRATE TO TARGET x (…)`: rows leave the table through export
//! target `x`, and are deleted only once the target has acknowledged them.
//!
//! A migrating table gets two companions, kept in the catalog as ordinary objects so that
//! snapshots, the command log, replicas and `PARTITION TABLE` treat them like any other:
//! - the *flags* table `LOCKSTEP_MIGRATE_FLAGS_<t>` (the table's primary key columns and
//!   `MIGRATE_TXN`, the time of the transaction that flagged the row, in µs): a row of `t`
//!   is migrating exactly when its key is there. `MIGRATING` in a WHERE clause reads it.
//! - the *rows* stream `LOCKSTEP_MIGRATE_ROWS_<t>` (the table's columns, exported to `x`):
//!   `MIGRATE FROM t` writes each flagged row into it, so the export machinery queues it.
//!
//! Both are partitioned like the table (`PARTITION TABLE` moves them along) and dropped
//! with it.

use lockstep_core::{Catalog, ColumnDef, DataType, Error, IndexDef, Result, TableDef, TableKind};

use crate::ddl_parse::Cursor;

/// Name prefix of a migrating table's flags table.
pub const MIGRATE_FLAGS_PREFIX: &str = "LOCKSTEP_MIGRATE_FLAGS_";
/// Name prefix of a migrating table's rows stream.
pub const MIGRATE_ROWS_PREFIX: &str = "LOCKSTEP_MIGRATE_ROWS_";
/// The flags table's column holding when the row was flagged (µs since 1970).
pub const MIGRATE_TXN_COLUMN: &str = "MIGRATE_TXN";

/// The flags table's name for table `table`.
pub fn flags_name(table: &str) -> String {
    format!("{MIGRATE_FLAGS_PREFIX}{}", table.to_ascii_uppercase())
}

/// The rows stream's name for table `table`.
pub fn rows_name(table: &str) -> String {
    format!("{MIGRATE_ROWS_PREFIX}{}", table.to_ascii_uppercase())
}

/// The table a rows stream migrates, by the stream's name.
pub fn table_of_rows_stream(stream: &str) -> Option<&str> {
    stream.strip_prefix(MIGRATE_ROWS_PREFIX)
}

/// What a migrating table is made of.
#[derive(Clone, Debug)]
pub struct Migration<'a> {
    pub table: &'a TableDef,
    pub flags: &'a TableDef,
    pub rows: &'a TableDef,
    /// The export target the rows go to.
    pub target: &'a str,
    /// The table's primary key columns (the flags table's first columns, in this order).
    pub key: &'a [usize],
}

/// The migration of `table`, when it was declared `MIGRATE TO TARGET`.
pub fn migration<'a>(catalog: &'a Catalog, table: &'a TableDef) -> Option<Migration<'a>> {
    let flags = catalog.table(&flags_name(&table.name))?;
    let rows = catalog.table(&rows_name(&table.name))?;
    let TableKind::Stream { target: Some(target) } = &rows.kind else { return None };
    let key = table.primary_key()?.columns.as_slice();
    Some(Migration { table, flags, rows, target, key })
}

/// Every table declared `MIGRATE TO TARGET`, with its migration.
pub fn migrations(catalog: &Catalog) -> impl Iterator<Item = Migration<'_>> {
    catalog.tables().filter_map(move |t| migration(catalog, t))
}

/// Parses `MIGRATE TO TARGET name` (the cursor on MIGRATE); None when it is not there.
pub fn parse_migrate_target(c: &mut Cursor) -> Result<Option<String>> {
    if !c.eat_word("MIGRATE") {
        return Ok(None);
    }
    c.expect_word("TO")?;
    c.expect_word("TARGET")?;
    Ok(Some(c.ident("an export target name")?.to_ascii_uppercase()))
}

/// Refuses a migrating table the rows cannot be matched back to (no primary key), and
/// names that would collide with the companions.
pub fn check_migrating_table(catalog: &Catalog, def: &TableDef) -> Result<()> {
    let Some(pk) = def.primary_key() else {
        return Err(Error::sql(format!(
            "{} is declared MIGRATE TO TARGET but has no PRIMARY KEY: a migrated row is deleted by its key once the target has it; add a PRIMARY KEY",
            def.name
        )));
    };
    if !pk.exprs.is_empty() {
        return Err(Error::sql(format!("the PRIMARY KEY of migrating table {} must be plain columns", def.name)));
    }
    for name in [flags_name(&def.name), rows_name(&def.name)] {
        if catalog.table(&name).is_some() {
            return Err(Error::sql(format!("object name already exists: {name}")));
        }
    }
    Ok(())
}

/// Adds the flags table and the rows stream of `table` (just created) for `target`.
pub fn create_companions(catalog: &mut Catalog, table: &TableDef, target: &str) -> Result<()> {
    let Some(pk) = table.primary_key() else {
        return Err(Error::unexpected(format!("migrating table {} lost its primary key", table.name)));
    };
    let mut columns: Vec<ColumnDef> =
        pk.columns.iter().map(|&c| ColumnDef { nullable: false, default: None, ..table.columns[c].clone() }).collect();
    columns.push(ColumnDef {
        name: MIGRATE_TXN_COLUMN.into(),
        ty: DataType::BigInt,
        size: 0,
        in_bytes: false,
        nullable: false,
        default: None,
    });
    let flags_name = flags_name(&table.name);
    let flags = TableDef {
        id: 0,
        name: flags_name.clone(),
        indexes: vec![IndexDef {
            name: format!("PK_{flags_name}"),
            columns: (0..pk.columns.len()).collect(),
            unique: true,
            assume_unique: false,
            primary: true,
            exprs: vec![],
            predicate: None,
        }],
        columns,
        partition_column: None,
        kind: TableKind::Table,
    };
    let rows = TableDef {
        id: 0,
        name: rows_name(&table.name),
        columns: table.columns.iter().map(|c| ColumnDef { default: None, ..c.clone() }).collect(),
        indexes: vec![],
        partition_column: None,
        kind: TableKind::Stream { target: Some(target.to_string()) },
    };
    catalog.add_table(flags)?;
    catalog.add_table(rows)?;
    Ok(())
}

/// After `table` was partitioned: its companions follow, on the same column.
pub fn partition_companions(catalog: &mut Catalog, table: &TableDef) -> Result<()> {
    let Some(pc) = table.partition_column else { return Ok(()) };
    let column = &table.columns[pc].name;
    for name in [flags_name(&table.name), rows_name(&table.name)] {
        let Some(companion) = catalog.table(&name).cloned() else { continue };
        let mut def = (*companion).clone();
        def.partition_column = def.column_index(column);
        if def.partition_column.is_none() {
            return Err(Error::sql(format!(
                "migrating table {} must be partitioned on a column of its primary key, not {column}",
                table.name
            )));
        }
        catalog.replace_table(def)?;
    }
    Ok(())
}

/// Drops the companions of `table` (being dropped); the names dropped.
pub fn drop_companions(catalog: &mut Catalog, table: &str) -> Result<Vec<String>> {
    let mut dropped = Vec::new();
    for name in [flags_name(table), rows_name(table)] {
        if catalog.table(&name).is_some() {
            catalog.drop_table(&name)?;
            dropped.push(name);
        }
    }
    Ok(dropped)
}

/// Refuses to change a migrating table's companions by hand: they belong to the table.
pub fn check_not_companion(name: &str, verb: &str) -> Result<()> {
    let upper = name.to_ascii_uppercase();
    if upper.starts_with(MIGRATE_FLAGS_PREFIX) || upper.starts_with(MIGRATE_ROWS_PREFIX) {
        return Err(Error::sql(format!("cannot {verb} {name}: it belongs to a table declared MIGRATE TO TARGET and changes with it")));
    }
    Ok(())
}
