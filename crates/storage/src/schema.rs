//! Making a partition's storage match the catalog: new, dropped and altered tables,
//! repartitioning, and (re)populating views.
//!
//! Every new or changed table is built aside first; the partition is only changed once
//! everything built, so a failed change (a duplicate key for a new unique index, a NOT NULL
//! column added to a table with rows) leaves the old storage untouched.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use lockstep_core::{Catalog, Error, HashRing, Result, TableDef, TableId, TableKind, Value, ViewAggregate};

use crate::computed::with_computed;
use crate::partition::Partition;
use crate::table::Table;
use crate::validate::check_value;
use crate::view;

impl Partition {
    /// Makes storage match the catalog. Runs outside transactions: it clears the undo log.
    pub fn apply_schema(&mut self, catalog: &Catalog, ring: &HashRing) -> Result<()> {
        let mut built: BTreeMap<TableId, Table> = BTreeMap::new();
        // Definitions equal to the stored one but not the same Arc: only the Arc is swapped.
        let mut same = Vec::new();
        for def in catalog.tables() {
            check_def(catalog, def)?;
            let table = match self.tables.get(&def.id) {
                None => Table::new(def.clone()),
                Some(old) if Arc::ptr_eq(old.def(), def) => continue,
                Some(old) if **old.def() == **def => {
                    same.push(def.clone());
                    continue;
                }
                Some(old) => rebuild(old, def, ring, self.id())?,
            };
            built.insert(def.id, table);
        }
        // A view is (re)populated when it or its source was (re)built.
        let mut views_of: BTreeMap<TableId, Vec<TableId>> = BTreeMap::new();
        let mut to_populate = BTreeSet::new();
        for def in catalog.tables() {
            if let Some(v) = def.view() {
                views_of.entry(v.source).or_default().push(def.id);
                if built.contains_key(&def.id) || built.contains_key(&v.source) {
                    to_populate.insert(def.id);
                }
            }
        }
        for vid in to_populate {
            let Some(mut vt) = built.remove(&vid).or_else(|| self.tables.get(&vid).map(|t| Table::new(t.def().clone()))) else {
                continue;
            };
            if !vt.is_empty() {
                vt = Table::new(vt.def().clone());
            }
            let Some(vdef) = vt.def().view().cloned() else {
                continue;
            };
            let source = built.get(&vdef.source).or_else(|| self.tables.get(&vdef.source));
            if let Some(source) = source {
                view::populate(&mut vt, &vdef, source)?;
            }
            built.insert(vid, vt);
        }
        // Everything built: now change the partition.
        // A snapshot in progress keeps the old storage of dropped and rebuilt tables.
        let dropped: Vec<TableId> = self.tables.keys().filter(|id| catalog.table_by_id(*id).is_none()).collect();
        for id in dropped {
            if let Some(old) = self.tables.remove(&id) {
                self.detach_for_snapshot(id, old);
            }
        }
        for (id, table) in built {
            if let Some(old) = self.tables.insert(id, table) {
                self.detach_for_snapshot(id, old);
            }
        }
        for def in same {
            if let Some(t) = self.tables.get_mut(&def.id) {
                t.set_def(def);
            }
        }
        for v in views_of.values_mut() {
            v.sort_unstable();
        }
        self.views_of = views_of.into_iter().collect();
        self.forget_undo();
        Ok(())
    }
}

/// Rejects definitions storage cannot hold (the DDL layer should never produce them).
fn check_def(catalog: &Catalog, def: &TableDef) -> Result<()> {
    let width = def.columns.len();
    let bad = |what: String| Err(Error::sql(format!("invalid definition of {}: {what}", def.name)));
    let computed = def.computed().count();
    if computed > 0 && !matches!(def.kind, TableKind::Table) {
        return bad("only a table's indexes may have expression keys".into());
    }
    if def.computed_width() > computed && !matches!(def.kind, TableKind::Table) {
        return bad("only a table's indexes may be partial".into());
    }
    for ix in &def.indexes {
        if let Some(c) = ix.columns.iter().find(|&&c| c >= width + computed) {
            return bad(format!("index {} names column {c}", ix.name));
        }
    }
    if def.partition_column.is_some_and(|c| c >= width) {
        return bad("partition column out of range".into());
    }
    let Some(v) = def.view() else { return Ok(()) };
    let Some(source) = catalog.table_by_id(v.source) else {
        return bad(format!("source table {} does not exist", v.source));
    };
    if source.view().is_some() {
        return bad("a view cannot be defined on another view".into());
    }
    if width != v.group_by.len() + v.aggregates.len() {
        return bad(format!("{width} columns for {} GROUP BY columns and {} aggregates", v.group_by.len(), v.aggregates.len()));
    }
    let src_width = source.columns.len();
    let inputs = v.aggregates.iter().filter_map(|a| match a {
        ViewAggregate::CountStar => None,
        ViewAggregate::Count(c) | ViewAggregate::Sum(c) | ViewAggregate::Min(c) | ViewAggregate::Max(c) => Some(c),
    });
    if v.group_by.iter().filter_map(|k| k.column()).chain(inputs.copied()).any(|c| c >= src_width) {
        return bad("a view column names a source column out of range".into());
    }
    Ok(())
}

/// Storage for a changed definition of an existing table, built from its rows.
fn rebuild(old: &Table, def: &Arc<TableDef>, ring: &HashRing, partition: u32) -> Result<Table> {
    // Streams store nothing; views are repopulated from their source afterwards.
    if !matches!(def.kind, TableKind::Table) || old.is_empty() {
        return Ok(Table::new(def.clone()));
    }
    let old_def = old.def();
    // Columns are matched by name, so ADD, DROP and type changes all come out right.
    let sources: Vec<Option<usize>> = def.columns.iter().map(|c| old_def.column_index(&c.name)).collect();
    for (col, src) in def.columns.iter().zip(&sources) {
        if src.is_none() && col.default.is_none() && !col.nullable {
            return Err(Error::sql(format!("cannot add NOT NULL column {} without a default to {}: it has rows", col.name, def.name)));
        }
    }
    // Rows are filtered when the table becomes partitioned (or on another column).
    let filter = def.partition_column.filter(|&c| match old_def.partition_column {
        None => true,
        Some(o) => !old_def.columns[o].name.eq_ignore_ascii_case(&def.columns[c].name),
    });
    let mut slots = Vec::with_capacity(old.scan().size_hint().0);
    for (id, row) in old.scan() {
        slots.resize_with(id as usize, || None);
        let mut new = Vec::with_capacity(def.columns.len());
        for (col, src) in def.columns.iter().zip(&sources) {
            let v = match src {
                Some(s) => row[*s].clone(),
                None => col.default.clone().unwrap_or(Value::Null),
            };
            new.push(check_value(&def.name, col, v)?);
        }
        let keep = filter.is_none_or(|c| ring.partition_for(&new[c]) == partition);
        slots.push(if keep { Some(with_computed(def, new.into_boxed_slice())?) } else { None });
    }
    Table::from_slots(def.clone(), slots)
}
