//! VoltDB's TTL clauses: `CREATE TABLE … (…) USING TTL n [unit] ON COLUMN c [BATCH_SIZE n]
//! [MAX_FREQUENCY n]`, `ALTER TABLE t [ALTER] USING TTL …` and `ALTER TABLE t DROP TTL`.

use lockstep_core::{Catalog, DataType, Error, Result, TableDef, TableKind, TtlDef, TtlUnit};

use crate::ddl_parse::Cursor;

/// Rows deleted per partition per run when BATCH_SIZE is not given (VoltDB's default).
pub const TTL_BATCH_SIZE_DEFAULT: u32 = 1000;
/// Largest BATCH_SIZE: one run is one transaction on its partition, and must stay short.
pub const TTL_BATCH_SIZE_MAX: u32 = 100_000;
/// Runs per second per table when MAX_FREQUENCY is not given (VoltDB's default).
pub const TTL_MAX_FREQUENCY_DEFAULT: u32 = 1;
/// Largest MAX_FREQUENCY, runs per second (the TTL thread looks for due runs every 20 ms).
pub const TTL_MAX_FREQUENCY_MAX: u32 = 20;

/// Parses `TTL n [unit] ON COLUMN c [BATCH_SIZE n] [MAX_FREQUENCY n]` (after `USING`) and
/// checks it against `table`.
pub fn parse_ttl(c: &mut Cursor, table: &TableDef) -> Result<TtlDef> {
    c.expect_word("TTL")?;
    let amount = c.integer("the time to live (a whole number)")?;
    let unit = if c.eat_word("SECONDS") || c.eat_word("SECOND") {
        TtlUnit::Seconds
    } else if c.eat_word("MINUTES") || c.eat_word("MINUTE") {
        TtlUnit::Minutes
    } else if c.eat_word("HOURS") || c.eat_word("HOUR") {
        TtlUnit::Hours
    } else if c.eat_word("DAYS") || c.eat_word("DAY") {
        TtlUnit::Days
    } else {
        TtlUnit::Seconds
    };
    c.expect_word("ON")?;
    c.expect_word("COLUMN")?;
    let column = c.ident("the TTL column")?;
    let mut batch_size = TTL_BATCH_SIZE_DEFAULT;
    let mut max_frequency = TTL_MAX_FREQUENCY_DEFAULT;
    loop {
        if c.eat_word("BATCH_SIZE") {
            batch_size = bounded(c.integer("a BATCH_SIZE")?, TTL_BATCH_SIZE_MAX, "BATCH_SIZE")?;
        } else if c.eat_word("MAX_FREQUENCY") {
            max_frequency = bounded(c.integer("a MAX_FREQUENCY")?, TTL_MAX_FREQUENCY_MAX, "MAX_FREQUENCY")?;
        } else {
            break;
        }
    }
    if amount <= 0 {
        return Err(Error::sql(format!("the TTL of {} must be a positive number, not {amount}", table.name)));
    }
    if !matches!(table.kind, TableKind::Table) {
        return Err(Error::sql(format!("USING TTL works on tables; {} is not one", table.name)));
    }
    let i = table.column_index(&column).ok_or_else(|| Error::sql(format!("TTL column {column} is not a column of {}", table.name)))?;
    let col = &table.columns[i];
    if col.ty != DataType::Timestamp && !col.ty.is_integer() {
        return Err(Error::sql(format!(
            "TTL column {} of {} is {}: it must be a TIMESTAMP (or an integer of seconds since 1970)",
            col.name,
            table.name,
            col.ty.sql_name()
        )));
    }
    if col.nullable {
        return Err(Error::sql(format!(
            "TTL column {} of {} must be NOT NULL (a row without a time would never expire)",
            col.name, table.name
        )));
    }
    Ok(TtlDef { column: col.name.clone(), amount, unit, batch_size, max_frequency })
}

fn bounded(v: i64, max: u32, what: &str) -> Result<u32> {
    u32::try_from(v).ok().filter(|v| (1..=max).contains(v)).ok_or_else(|| Error::sql(format!("{what} must be 1 to {max}, not {v}")))
}

/// `ALTER TABLE t USING TTL …` (adds one), `ALTER TABLE t ALTER USING TTL …` (changes it),
/// `ALTER TABLE t DROP TTL`. The cursor is after the table name; None when the statement
/// is none of these.
pub fn alter_ttl(catalog: &mut Catalog, c: &mut Cursor, table: &TableDef) -> Result<Option<String>> {
    let existing = catalog.ttl(table.id).is_some();
    let change = if c.is_word("ALTER") && c.peek_at(1).is_some_and(|t| t.text.eq_ignore_ascii_case("USING")) {
        c.expect_word("ALTER")?;
        true
    } else if c.is_word("DROP") && c.peek_at(1).is_some_and(|t| t.text.eq_ignore_ascii_case("TTL")) {
        c.expect_word("DROP")?;
        c.expect_word("TTL")?;
        c.expect_end()?;
        if !existing {
            return Err(Error::sql(format!("{} has no TTL to drop", table.name)));
        }
        catalog.set_ttl(table.id, None);
        return Ok(Some(format!("TTL of {} dropped", table.name)));
    } else {
        false
    };
    if !c.eat_word("USING") {
        return Ok(None);
    }
    let ttl = parse_ttl(c, table)?;
    c.expect_end()?;
    match (change, existing) {
        (true, false) => return Err(Error::sql(format!("{} has no TTL to alter: use ALTER TABLE {} USING TTL …", table.name, table.name))),
        (false, true) => {
            return Err(Error::sql(format!(
                "{} already has a TTL: change it with ALTER TABLE {} ALTER USING TTL …, or drop it with ALTER TABLE {} DROP TTL",
                table.name, table.name, table.name
            )))
        }
        _ => {}
    }
    let message = format!("TTL of {} set to {} {} on column {}", table.name, ttl.amount, ttl.unit.sql_name(), ttl.column);
    catalog.set_ttl(table.id, Some(ttl));
    Ok(Some(message))
}
