//! `MIGRATE FROM t [WHERE …]` and the `MIGRATING` predicate (see `ddl_migrate.rs` for the
//! companions of a migrating table).
//!
//! `MIGRATE FROM` is planned as the DELETE it resembles (same WHERE, ORDER BY … LIMIT and
//! routing), but instead of deleting it flags each matching row that is not migrating
//! already: its key goes into the flags table with the transaction's time, and the row
//! into the rows stream, which exports it. The rows leave the table later, when the
//! target has acknowledged them, through ordinary calls (the engine's `migrate.rs`).

use lockstep_core::{Catalog, Error, Result, TableId, Value};
use lockstep_storage::Partition;
use sqlparser::ast;

use crate::bind::{Binder, Source, Typed};
use crate::ddl_migrate::{migration, MIGRATE_FLAGS_PREFIX};
use crate::expr::Env;
use crate::plan_dml::DeletePlan;

/// What a `MIGRATE FROM` writes besides finding its rows.
#[derive(Clone, Debug)]
pub struct MigratePlan {
    pub flags: TableId,
    pub rows: TableId,
    /// The table's primary key columns, in the flags table's order.
    pub key: Vec<usize>,
    /// The table's column count (a stored row may carry computed index keys after them).
    pub width: usize,
}

/// `MIGRATE FROM …` as the `DELETE FROM …` it is planned as (same length, so positions in
/// error messages still point at the user's text); None for any other statement.
pub(crate) fn as_delete(sql: &str) -> Option<String> {
    let start = sql.len() - sql.trim_start().len();
    let word = sql.get(start..start + 7)?;
    let after = sql[start + 7..].chars().next()?;
    if !word.eq_ignore_ascii_case("MIGRATE") || !after.is_whitespace() {
        return None;
    }
    Some(format!("{}DELETE {}", &sql[..start], &sql[start + 7..]))
}

/// Turns the DELETE plan of a `MIGRATE FROM` into the migration's plan, or says why the
/// table cannot migrate.
pub(crate) fn plan(catalog: &Catalog, delete: &mut DeletePlan) -> Result<()> {
    let table = delete.level.source.table.clone();
    let Some(m) = migration(catalog, &table) else {
        return Err(Error::sql(format!(
            "MIGRATE FROM {0}: {0} is not declared MIGRATE TO TARGET; declare it with CREATE TABLE {0} MIGRATE TO TARGET <target> (…), or use DELETE",
            table.name
        )));
    };
    if table.partition_column.is_none() {
        return Err(Error::sql(format!(
            "MIGRATE FROM {0}: {0} is replicated; only partitioned tables migrate (PARTITION TABLE {0} ON COLUMN …)",
            table.name
        )));
    }
    delete.migrate = Some(MigratePlan { flags: m.flags.id, rows: m.rows.id, key: m.key.to_vec(), width: table.columns.len() });
    Ok(())
}

/// Where a migrating table's flags are, for statements that change its rows.
#[derive(Clone, Debug)]
pub struct Flags {
    pub table: TableId,
    pub key: Vec<usize>,
}

/// The flags of `table`, when it migrates.
pub(crate) fn flags_of(catalog: &Catalog, table: &lockstep_core::TableDef) -> Option<Flags> {
    migration(catalog, table).map(|m| Flags { table: m.flags.id, key: m.key.to_vec() })
}

/// An update (or an UPSERT that finds the row) cancels the row's migration (VoltDB's
/// rule): its flag goes, so the acknowledgement of the old values does not delete the new
/// ones. A deleted row's flag goes too, so that a row inserted later with the same key is
/// not taken for the migrating one.
pub(crate) fn unflag(f: &Flags, table: TableId, id: u32, part: &mut Partition) -> Result<()> {
    let key: Option<Vec<Value>> = part.table(table)?.get(id).map(|row| f.key.iter().map(|&c| row[c].clone()).collect());
    let Some(key) = key else { return Ok(()) };
    let flag = part.table(f.table)?.lookup_iter(0, &key).next();
    match flag {
        Some(flag) => part.delete(f.table, flag),
        None => Ok(()),
    }
}

/// Whether the row is flagged for migration already.
pub(crate) fn is_flagged(m: &MigratePlan, part: &Partition, row: &[Value]) -> Result<bool> {
    let key: Vec<Value> = m.key.iter().map(|&c| row[c].clone()).collect();
    Ok(part.table(m.flags)?.lookup_iter(0, &key).next().is_some())
}

/// Flags the rows (found as a DELETE finds them) and queues them to the target; the rows
/// flagged.
pub(crate) fn apply(m: &MigratePlan, table: TableId, rows: Vec<(u32, ())>, part: &mut Partition, env: &Env) -> Result<u64> {
    let mut n = 0;
    for (id, _) in rows {
        env.watch.tick()?;
        let Some(row) = part.table(table)?.get(id).map(|r| r[..m.width].to_vec()) else { continue };
        let mut flag: Vec<Value> = m.key.iter().map(|&c| row[c].clone()).collect();
        // The transaction's time: the same on every replica and in a replay.
        flag.push(Value::Int(env.now_micros));
        part.insert(m.flags, flag)?;
        part.insert(m.rows, row)?;
        n += 1;
    }
    Ok(n)
}

/// Whether an identifier is the `MIGRATING` predicate rather than a column of that name.
pub(crate) fn is_migrating_word(id: &ast::Ident, scope: &[Source]) -> bool {
    id.quote_style.is_none()
        && id.value.eq_ignore_ascii_case("MIGRATING")
        && !scope.iter().any(|s| s.table.column_index(&id.value).is_some())
}

impl Binder<'_> {
    /// `MIGRATING`: true for a row of the (one) migrating table in scope that is flagged,
    /// bound as `EXISTS` over the flags table with the row's key.
    pub(crate) fn bind_migrating(&mut self, scope: &[Source]) -> Result<Typed> {
        let catalog = self.catalog.ok_or_else(|| Error::sql("MIGRATING needs a table declared MIGRATE TO TARGET"))?;
        let found: Vec<(&Source, String)> = scope
            .iter()
            .filter_map(|s| {
                let m = migration(catalog, &s.table)?;
                let terms: Vec<String> =
                    m.key.iter().map(|&c| format!("LOCKSTEP_FLAGS.{0} = {1}.{0}", s.table.columns[c].name, s.name)).collect();
                Some((s, terms.join(" AND ")))
            })
            .collect();
        let [(source, terms)] = found.as_slice() else {
            return Err(Error::sql(if found.is_empty() {
                "MIGRATING tests rows of a table declared MIGRATE TO TARGET, and none is read here".to_string()
            } else {
                "MIGRATING is ambiguous: more than one table declared MIGRATE TO TARGET is read here".to_string()
            }));
        };
        let text = format!(
            "SELECT 1 WHERE EXISTS (SELECT 1 FROM {MIGRATE_FLAGS_PREFIX}{} AS LOCKSTEP_FLAGS WHERE {terms})",
            source.table.name.to_ascii_uppercase()
        );
        let expr = exists_expr(&text)?;
        self.bind(&expr, scope)
    }
}

/// The WHERE expression of the generated `SELECT 1 WHERE EXISTS (…)`.
fn exists_expr(text: &str) -> Result<ast::Expr> {
    let mut stmts = crate::nesting::parse_statements(text, "")?;
    let Some(ast::Statement::Query(q)) = stmts.pop() else {
        return Err(Error::unexpected("MIGRATING: the generated test did not parse as a query"));
    };
    match *q.body {
        ast::SetExpr::Select(s) => s.selection.ok_or_else(|| Error::unexpected("MIGRATING: the generated test has no WHERE")),
        _ => Err(Error::unexpected("MIGRATING: the generated test is not a SELECT")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests_sql::{i, s, Db};

    const EVENTS: &str = "
        CREATE TABLE events MIGRATE TO TARGET archive (id INTEGER NOT NULL, kind VARCHAR(8) NOT NULL, PRIMARY KEY (id));
        PARTITION TABLE events ON COLUMN id;
        CREATE TABLE plain (id INTEGER NOT NULL, PRIMARY KEY (id));
        PARTITION TABLE plain ON COLUMN id;";

    fn events() -> Db {
        let mut db = Db::new(EVENTS);
        db.run("INSERT INTO events VALUES (1, 'a'), (2, 'b'), (3, 'a'), (4, 'c')");
        db
    }

    #[test]
    fn migrate_from_flags_matching_rows_once_and_queues_them() {
        let mut db = events();
        assert_eq!(db.rows("MIGRATE FROM events WHERE kind = 'a'"), vec![vec![i(2)]]);
        // Already migrating: not flagged nor queued again.
        assert_eq!(db.rows("MIGRATE FROM events WHERE id <= 3"), vec![vec![i(1)]]);
        assert_eq!(db.rows("SELECT id FROM events WHERE MIGRATING ORDER BY id"), vec![vec![i(1)], vec![i(2)], vec![i(3)]]);
        assert_eq!(db.rows("SELECT id, kind FROM events WHERE NOT MIGRATING"), vec![vec![i(4), s("c")]]);
        // The rows stay in the table until the target acknowledges them.
        assert_eq!(db.rows("SELECT COUNT(*) FROM events"), vec![vec![i(4)]]);
        let flags = db.rows("SELECT id, migrate_txn FROM lockstep_migrate_flags_events ORDER BY id");
        assert_eq!(
            flags,
            vec![vec![i(1), i(db.ctx.timestamp_micros)], vec![i(2), i(db.ctx.timestamp_micros)], vec![i(3), i(db.ctx.timestamp_micros)]]
        );
        let queued: Vec<Vec<Value>> = db.part.pending_exports().iter().map(|r| r.row.clone()).collect();
        assert_eq!(queued, vec![vec![i(1), s("a")], vec![i(3), s("a")], vec![i(2), s("b")]]);
    }

    /// Generated SQL names the key columns quoted: a key named with a reserved word works.
    #[test]
    fn a_key_named_with_a_reserved_word_migrates() {
        let mut db = Db::new(
            "CREATE TABLE orders MIGRATE TO TARGET archive (\"ORDER\" BIGINT NOT NULL, kind VARCHAR(8), PRIMARY KEY (\"ORDER\"));
             PARTITION TABLE orders ON COLUMN \"ORDER\";",
        );
        db.run("INSERT INTO orders VALUES (1, 'a'), (2, 'b')");
        assert_eq!(db.rows("MIGRATE FROM orders WHERE kind = 'a'"), vec![vec![i(1)]]);
        assert_eq!(db.rows("SELECT kind FROM orders WHERE MIGRATING"), vec![vec![s("a")]]);
    }

    #[test]
    fn an_update_cancels_the_migration() {
        let mut db = events();
        db.run("MIGRATE FROM events WHERE id <= 2");
        db.run("UPDATE events SET kind = 'z' WHERE id = 1");
        assert_eq!(db.rows("SELECT id FROM events WHERE MIGRATING"), vec![vec![i(2)]]);
        assert_eq!(db.rows("SELECT id FROM lockstep_migrate_flags_events"), vec![vec![i(2)]]);
    }

    #[test]
    fn an_upsert_over_a_migrating_row_cancels_its_migration() {
        let mut db = events();
        db.run("MIGRATE FROM events WHERE id <= 2");
        // Updates row 1 (its migration is cancelled); inserts row 9 (nothing to cancel).
        db.run("UPSERT INTO events VALUES (1, 'z'), (9, 'n')");
        assert_eq!(db.rows("SELECT id FROM events WHERE MIGRATING"), vec![vec![i(2)]]);
        assert_eq!(db.rows("SELECT id FROM lockstep_migrate_flags_events"), vec![vec![i(2)]]);
        assert_eq!(db.rows("SELECT kind FROM events WHERE id = 1"), vec![vec![s("z")]]);
    }

    #[test]
    fn a_deleted_migrating_row_leaves_no_flag_for_a_new_row_with_its_key() {
        let mut db = events();
        db.run("MIGRATE FROM events WHERE id <= 2");
        db.run("DELETE FROM events WHERE id = 1");
        assert_eq!(db.rows("SELECT id FROM lockstep_migrate_flags_events"), vec![vec![i(2)]]);
        // The old row's acknowledgement must not delete the new one: it is not migrating.
        db.run("INSERT INTO events VALUES (1, 'new')");
        assert_eq!(db.rows("SELECT id FROM events WHERE MIGRATING"), vec![vec![i(2)]]);
    }

    #[test]
    fn migrate_with_order_and_limit_skips_migrating_rows() {
        let mut db = events();
        db.run("MIGRATE FROM events WHERE id = 1");
        assert_eq!(db.rows("MIGRATE FROM events WHERE id < 10 ORDER BY id LIMIT 2"), vec![vec![i(2)]]);
        assert_eq!(db.rows("SELECT id FROM events WHERE NOT MIGRATING"), vec![vec![i(4)]]);
    }

    #[test]
    fn migrate_is_refused_where_it_cannot_work() {
        let mut db = events();
        let e = db.err("MIGRATE FROM plain WHERE id = 1");
        assert!(e.contains("not declared MIGRATE TO TARGET"), "{e}");
        let e = db.err("SELECT id FROM plain WHERE MIGRATING");
        assert!(e.contains("MIGRATING tests rows of a table declared MIGRATE TO TARGET"), "{e}");
        let mut cat = Catalog::default();
        let e =
            crate::apply_ddl(&mut cat, "CREATE TABLE k MIGRATE TO TARGET t (id INTEGER NOT NULL)", &crate::tests_sql::NoFiles).unwrap_err();
        assert!(e.message.contains("has no PRIMARY KEY"), "{e}");
        let e = db.err("DELETE FROM lockstep_migrate_rows_events");
        assert!(!e.is_empty());
    }

    #[test]
    fn companions_follow_partitioning_and_drop() {
        let mut db = events();
        let flags = db.cat.table("LOCKSTEP_MIGRATE_FLAGS_EVENTS").unwrap();
        let rows = db.cat.table("LOCKSTEP_MIGRATE_ROWS_EVENTS").unwrap();
        assert_eq!((flags.partition_column, rows.partition_column), (Some(0), Some(0)));
        assert!(matches!(&rows.kind, lockstep_core::TableKind::Stream { target: Some(t) } if t == "ARCHIVE"));
        crate::apply_ddl(&mut db.cat, "DROP TABLE events", &crate::tests_sql::NoFiles).unwrap();
        assert!(db.cat.table("LOCKSTEP_MIGRATE_FLAGS_EVENTS").is_none() && db.cat.table("LOCKSTEP_MIGRATE_ROWS_EVENTS").is_none());
    }

    #[test]
    fn migrate_from_reads_as_delete_from() {
        assert_eq!(as_delete("  migrate FROM t WHERE a = 1").as_deref(), Some("  DELETE  FROM t WHERE a = 1"));
        assert_eq!(as_delete("MIGRATE\nFROM t").as_deref(), Some("DELETE \nFROM t"));
        assert!(as_delete("MIGRATING").is_none());
        assert!(as_delete("DELETE FROM t").is_none());
        assert!(as_delete("MIGRATE").is_none());
    }
}
