//! Executing INSERT / UPSERT, UPDATE and DELETE on one partition.
//!
//! Rows to change are collected first and changed after, so a statement never sees its
//! own writes (no Halloween problem).

use lockstep_core::{Error, Result, TableDef, Value};
use lockstep_storage::Partition;

use crate::access::key_value;
use crate::exec::{each_in_table, probe, run_select, PartitionSource};
use crate::expr::{sort_cmp, Env};
use crate::plan::Level;
use crate::plan_dml::{DeletePlan, InsertPlan, InsertSource, UpdatePlan};

/// The provided values of each row to insert, evaluated here (VALUES, or the SELECT run
/// on this partition).
pub fn source_rows(p: &InsertPlan, part: &Partition, env: &Env) -> Result<Vec<Vec<Value>>> {
    match &p.source {
        InsertSource::Values(rows) => {
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let mut vals = Vec::with_capacity(r.len());
                for e in r {
                    vals.push(e.eval_ref(&[], env)?.into_owned());
                }
                out.push(vals);
            }
            Ok(out)
        }
        InsertSource::Select(plan) => {
            let src = PartitionSource::new(part, &plan.levels)?;
            Ok(run_select(plan, &src, env, false)?.rows)
        }
    }
}

/// The full row for provided values: defaults first, then the given columns.
pub fn full_row(p: &InsertPlan, vals: Vec<Value>, env: &Env) -> Result<Vec<Value>> {
    // Every column given, in the table's order: the values are the row.
    let all_in_order = p.columns.len() == p.defaults.len() && p.columns.iter().enumerate().all(|(i, &c)| i == c);
    if all_in_order && vals.len() == p.columns.len() {
        return Ok(vals);
    }
    let mut row = Vec::with_capacity(p.defaults.len());
    for (c, d) in p.defaults.iter().enumerate() {
        row.push(if p.columns.contains(&c) { Value::Null } else { d.eval(&[], env)? });
    }
    for (v, &c) in vals.into_iter().zip(&p.columns) {
        row[c] = v;
    }
    Ok(row)
}

/// Inserts (or upserts) rows of provided values; returns how many rows changed.
pub fn insert_rows(p: &InsertPlan, rows: Vec<Vec<Value>>, part: &mut Partition, env: &Env) -> Result<u64> {
    let tid = p.table.id;
    let mut n = 0u64;
    for vals in rows {
        env.watch.tick()?;
        if p.upsert {
            upsert_row(p, vals, part, env)?;
        } else {
            let row = full_row(p, vals, env)?;
            part.insert(tid, row)?;
        }
        n += 1;
    }
    Ok(n)
}

/// VoltDB's UPSERT: update the listed columns of the row with the same primary key, or
/// insert a new row.
fn upsert_row(p: &InsertPlan, vals: Vec<Value>, part: &mut Partition, env: &Env) -> Result<()> {
    let t = &p.table;
    let (pk_index, pk) = t
        .indexes
        .iter()
        .enumerate()
        .find(|(_, i)| i.primary)
        .ok_or_else(|| Error::sql(format!("UPSERT needs a primary key, and {} has none", t.name)))?;
    let mut key = Vec::with_capacity(pk.columns.len());
    for &c in &pk.columns {
        let at = p.columns.iter().position(|&x| x == c).ok_or_else(|| Error::sql("UPSERT must give every primary key column"))?;
        match key_value(&vals[at], t.columns[c].ty) {
            Some(k) => key.push(k),
            None => return Err(Error::constraint(format!("primary key column {} of {} cannot be NULL", t.columns[c].name, t.name))),
        }
    }
    let existing = {
        let table = part.table(t.id)?;
        table.lookup(pk_index, &key).first().and_then(|&id| table.get(id).map(|r| (id, r)))
    };
    match existing {
        Some((id, mut row)) => {
            // An UPSERT that updates a row is an update: it cancels the row's migration.
            if let Some(f) = &p.migrate_flags {
                crate::migrate::unflag(f, t.id, id, part)?;
            }
            for (v, &c) in vals.into_iter().zip(&p.columns) {
                row[c] = v;
            }
            part.update(t.id, id, row)
        }
        None => {
            let row = full_row(p, vals, env)?;
            part.insert(t.id, row).map(|_| ())
        }
    }
}

pub fn run_insert(p: &InsertPlan, part: &mut Partition, env: &Env) -> Result<u64> {
    let rows = source_rows(p, part, env)?;
    insert_rows(p, rows, part, env)
}

/// (row id, `keep(row)`) of the rows a single-table statement selects.
fn matching_rows<T>(level: &Level, part: &Partition, env: &Env, mut keep: impl FnMut(&[Value]) -> Result<T>) -> Result<Vec<(u32, T)>> {
    let table = part.table(level.source.table.id)?;
    let pr = probe(level, &level.access, &[], env)?;
    let mut out = Vec::new();
    each_in_table(table, &pr, &mut |id, row| {
        env.watch.tick()?;
        for c in &level.residual {
            if !c.holds(row, env)? {
                return Ok(true);
            }
        }
        out.push((id, keep(row)?));
        Ok(true)
    })?;
    Ok(out)
}

pub fn run_update(p: &UpdatePlan, part: &mut Partition, env: &Env) -> Result<u64> {
    let changes = update_changes(p, part, env)?;
    apply_update(p, changes, part, env)
}

/// The changes an UPDATE makes: (row id, the new values of the set columns). Everything it
/// reads, it reads here, before anything changes.
pub fn update_changes(p: &UpdatePlan, part: &Partition, env: &Env) -> Result<Vec<(u32, Vec<(usize, Value)>)>> {
    let table = &p.level.source.table;
    matching_rows(&p.level, part, env, |old| {
        // Every SET expression sees the old row; only the set columns change, so only
        // they are carried (TATP's subscriber row has 34 columns, UPDATE_LOCATION sets one).
        let mut sets = Vec::with_capacity(p.sets.len());
        for (c, e) in &p.sets {
            let v = e.eval(old, env)?;
            check_partition_column_kept(table, *c, &old[*c], &v)?;
            sets.push((*c, v));
        }
        Ok(sets)
    })
}

pub fn apply_update(p: &UpdatePlan, changes: Vec<(u32, Vec<(usize, Value)>)>, part: &mut Partition, env: &Env) -> Result<u64> {
    let n = changes.len() as u64;
    for (id, sets) in changes {
        env.watch.tick()?;
        if let Some(f) = &p.migrate_flags {
            crate::migrate::unflag(f, p.level.source.table.id, id, part)?;
        }
        part.update_columns(p.level.source.table.id, id, sets)?;
    }
    Ok(n)
}

/// A row cannot move to another partition by an UPDATE: column `c` may not change from
/// `old` to `new` if it is the partition column.
fn check_partition_column_kept(table: &TableDef, c: usize, old: &Value, new: &Value) -> Result<()> {
    if table.partition_column != Some(c) {
        return Ok(());
    }
    let col = &table.columns[c];
    if new.coerce_to(col.ty)? != *old {
        return Err(Error::sql(format!(
            "cannot change the partition column {} of {}: delete the row and insert it again",
            col.name, table.name
        )));
    }
    Ok(())
}

pub fn run_delete(p: &DeletePlan, part: &mut Partition, env: &Env) -> Result<u64> {
    let rows = delete_rows(p, part, env)?;
    apply_delete(p, rows, part, env)
}

/// The rows a DELETE removes, all found before any is. With ORDER BY … LIMIT n, the first
/// n matching rows in that order (the order names a unique key, so ties cannot occur).
pub fn delete_rows(p: &DeletePlan, part: &Partition, env: &Env) -> Result<Vec<(u32, ())>> {
    // MIGRATE FROM passes over rows that are migrating already.
    let flagged = |row: &[Value]| p.migrate.as_ref().map_or(Ok(false), |m| crate::migrate::is_flagged(m, part, row));
    if p.order.is_empty() {
        if p.migrate.is_some() {
            let rows = matching_rows(&p.level, part, env, flagged)?;
            return Ok(rows.into_iter().filter(|(_, f)| !f).map(|(id, _)| (id, ())).collect());
        }
        return matching_rows(&p.level, part, env, |_| Ok(()));
    }
    let limit = crate::exec::count_of(&p.limit, env, "LIMIT")?;
    let mut rows = matching_rows(&p.level, part, env, |row| {
        if flagged(row)? {
            return Ok(None);
        }
        Ok(Some(p.order.iter().map(|(c, _)| row[*c].clone()).collect::<Vec<_>>()))
    })?;
    let mut rows: Vec<(u32, Vec<Value>)> = rows.drain(..).filter_map(|(id, k)| k.map(|k| (id, k))).collect();
    rows.sort_by(|(_, a), (_, b)| {
        p.order
            .iter()
            .zip(a.iter().zip(b))
            .map(|((_, desc), (x, y))| if *desc { sort_cmp(y, x) } else { sort_cmp(x, y) })
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    rows.truncate(limit.unwrap_or(rows.len()));
    Ok(rows.into_iter().map(|(id, _)| (id, ())).collect())
}

pub fn apply_delete(p: &DeletePlan, rows: Vec<(u32, ())>, part: &mut Partition, env: &Env) -> Result<u64> {
    let tid = p.level.source.table.id;
    if let Some(m) = &p.migrate {
        return crate::migrate::apply(m, tid, rows, part, env);
    }
    let n = rows.len() as u64;
    for (id, _) in rows {
        env.watch.tick()?;
        // A migrating row's flag goes with it: a new row with its key is not migrating.
        if let Some(f) = &p.migrate_flags {
            crate::migrate::unflag(f, tid, id, part)?;
        }
        part.delete(tid, id)?;
    }
    Ok(n)
}
