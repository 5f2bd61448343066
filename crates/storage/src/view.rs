//! Materialized view maintenance: how one source row added or removed changes a view.
//!
//! The functions here only compute the change (reading the view and, for MIN/MAX after a
//! delete, the source); `Partition` applies it through its undo-recording paths, so a
//! rollback restores views exactly like tables.
//!
//! A source row counts only when it passes the view's filter (its WHERE), and its group is
//! the values of the view's group keys computed from it (`ViewKey`: a column or a
//! deterministic expression), so an update that makes a row start or stop passing, or
//! moves it to another group, is a delete of the old row and an insert of the new one.
//!
//! A view row is `[group-by values…, aggregates…, hidden…]`. The hidden values are a group
//! row count (unless the view has a COUNT(*) column that serves) and, for each SUM, the
//! number of non-NULL inputs, so that a SUM whose last non-NULL input is deleted becomes
//! NULL again.

use lockstep_core::{Error, Result, TableDef, Value, ViewAggregate, ViewDef, ViewKey};

use crate::table::Table;
use crate::RowId;

/// Where a view keeps its group count and per-SUM counts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ViewLayout {
    pub(crate) group_len: usize,
    /// Position in the view table's indexes of the index over the group-by columns.
    pub(crate) group_index: usize,
    pub(crate) hidden_len: usize,
    /// Position of the group's row count: the COUNT(*) column, or a hidden value.
    count_pos: usize,
    /// For each aggregate, where its non-NULL input count is kept (SUM only).
    nonnull_pos: Vec<Option<usize>>,
}

impl ViewLayout {
    pub(crate) fn new(def: &TableDef, view: &ViewDef) -> ViewLayout {
        let group_len = view.group_by.len();
        let width = def.columns.len();
        let mut hidden_len = 0;
        let count_pos = match view.aggregates.iter().position(|a| *a == ViewAggregate::CountStar) {
            Some(i) => group_len + i,
            None => {
                hidden_len += 1;
                width
            }
        };
        let nonnull_pos = view
            .aggregates
            .iter()
            .map(|a| {
                matches!(a, ViewAggregate::Sum(_)).then(|| {
                    hidden_len += 1;
                    width + hidden_len - 1
                })
            })
            .collect();
        ViewLayout { group_len, group_index: 0, hidden_len, count_pos, nonnull_pos }
    }
}

/// A view row as a snapshot keeps it (its columns), with the hidden counts a stored row
/// also holds. Only views of streams are loaded so: their source never removes a row, so
/// the counts are only ever compared with zero, and a group that has a row counts at
/// least one row, and a SUM that is not NULL at least one input.
pub(crate) fn with_hidden(layout: &ViewLayout, row: Box<[Value]>) -> Box<[Value]> {
    let width = row.len();
    let mut stored = row.into_vec();
    stored.resize(width + layout.hidden_len, Value::Int(0));
    if layout.count_pos >= width {
        stored[layout.count_pos] = Value::Int(1);
    }
    for (i, pos) in layout.nonnull_pos.iter().enumerate() {
        if let Some(pos) = pos {
            let non_null = stored.get(layout.group_len + i).is_some_and(|v| !matches!(v, Value::Null));
            stored[*pos] = Value::Int(i64::from(non_null));
        }
    }
    stored.into_boxed_slice()
}

/// What a source change does to the view.
#[derive(Debug, PartialEq)]
pub(crate) enum ViewChange {
    Insert(Box<[Value]>),
    /// New values for some columns of a group's row (its counters and aggregates: set in
    /// place, without copying the row).
    Update(RowId, Vec<(usize, Value)>),
    Delete(RowId),
}

/// A group's row being changed: reads see the changes made so far over the stored row.
struct Changing<'a> {
    stored: &'a [Value],
    changes: Vec<(usize, Value)>,
}

impl<'a> Changing<'a> {
    fn new(stored: &'a [Value]) -> Self {
        Changing { stored, changes: Vec::with_capacity(4) }
    }

    fn get(&self, pos: usize) -> &Value {
        match self.changes.iter().find(|(p, _)| *p == pos) {
            Some((_, v)) => v,
            None => &self.stored[pos],
        }
    }

    fn set(&mut self, pos: usize, v: Value) {
        match self.changes.iter_mut().find(|(p, _)| *p == pos) {
            Some(change) => change.1 = v,
            None => self.changes.push((pos, v)),
        }
    }
}

/// The source column an aggregate reads, if any.
fn input_column(agg: ViewAggregate) -> Option<usize> {
    match agg {
        ViewAggregate::CountStar => None,
        ViewAggregate::Count(c) | ViewAggregate::Sum(c) | ViewAggregate::Min(c) | ViewAggregate::Max(c) => Some(c),
    }
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// The input of aggregate `i` from a source row, converted to the view column's type.
fn input(view_table: &Table, vdef: &ViewDef, i: usize, src: &[Value]) -> Result<Value> {
    let Some(c) = input_column(vdef.aggregates[i]) else {
        return Ok(Value::Null);
    };
    let col = &view_table.def().columns[vdef.group_by.len() + i];
    match vdef.aggregates[i] {
        // COUNT only needs to know NULL or not.
        ViewAggregate::Count(_) => Ok(src[c].clone()),
        _ if src[c].is_null() => Ok(Value::Null),
        _ => src[c].coerce_to(col.ty).map_err(|e| e.context(format!("column {} of view {}", col.name, view_table.name()))),
    }
}

/// `a + b` or `a - b` for a SUM column.
fn add(a: &Value, b: &Value, subtract: bool, view: &Table, col: usize) -> Result<Value> {
    let overflow = || Error::sql(format!("numeric overflow in column {} of view {}", view.def().columns[col].name, view.name()));
    Ok(match (a, b) {
        (Value::Int(x), Value::Int(y)) => Value::Int(if subtract { x.checked_sub(*y) } else { x.checked_add(*y) }.ok_or_else(overflow)?),
        (Value::Decimal(x), Value::Decimal(y)) => {
            Value::Decimal(if subtract { x.get().checked_sub(y.get()) } else { x.get().checked_add(y.get()) }.ok_or_else(overflow)?.into())
        }
        (Value::Float(x), Value::Float(y)) => Value::Float(if subtract { x - y } else { x + y }),
        _ => {
            return Err(Error::sql(format!(
                "cannot sum {} in column {} of view {}",
                b.describe(),
                view.def().columns[col].name,
                view.name()
            )))
        }
    })
}

/// The group's key values, with room for the rest of a view row (`width` values).
fn group_key(vdef: &ViewDef, src: &[Value], width: usize) -> Result<Vec<Value>> {
    let mut key = Vec::with_capacity(width.max(vdef.group_by.len()));
    for k in &vdef.group_by {
        key.push(k.eval(src)?);
    }
    Ok(key)
}

fn find_group(view_table: &Table, layout: &ViewLayout, key: &[Value]) -> Option<RowId> {
    view_table.lookup_iter(layout.group_index, key).next()
}

fn layout(view_table: &Table) -> Result<&ViewLayout> {
    view_table.view.as_ref().ok_or_else(|| Error::unexpected(format!("{} is not a view", view_table.name())))
}

/// The change to the view when `src` is added to its source (none when the view's filter
/// leaves it out).
pub(crate) fn on_insert(view_table: &Table, vdef: &ViewDef, src: &[Value]) -> Result<Option<ViewChange>> {
    if !vdef.counts(src)? {
        return Ok(None);
    }
    let layout = layout(view_table)?;
    let key = group_key(vdef, src, view_table.stored_width())?;
    let k = layout.group_len;
    let Some(id) = find_group(view_table, layout, &key) else {
        let mut row = key;
        row.resize(view_table.stored_width(), Value::Null);
        row[layout.count_pos] = Value::Int(1);
        for (i, agg) in vdef.aggregates.iter().enumerate() {
            let v = input(view_table, vdef, i, src)?;
            if let Some(p) = layout.nonnull_pos[i] {
                row[p] = Value::Int(!v.is_null() as i64);
            }
            row[k + i] = match agg {
                ViewAggregate::CountStar => Value::Int(1),
                ViewAggregate::Count(_) => Value::Int(!v.is_null() as i64),
                _ => v,
            };
        }
        return Ok(Some(ViewChange::Insert(row.into_boxed_slice())));
    };
    let stored = view_table.get_full(id).unwrap_or_default();
    let mut row = Changing::new(&stored);
    if layout.count_pos >= k + vdef.aggregates.len() {
        row.set(layout.count_pos, Value::Int(int(row.get(layout.count_pos)) + 1));
    }
    for (i, agg) in vdef.aggregates.iter().enumerate() {
        let v = input(view_table, vdef, i, src)?;
        let cur = row.get(k + i);
        let new = match agg {
            ViewAggregate::CountStar => Value::Int(int(cur) + 1),
            ViewAggregate::Count(_) => Value::Int(int(cur) + !v.is_null() as i64),
            _ if v.is_null() => continue,
            ViewAggregate::Sum(_) => {
                let sum = if cur.is_null() { v } else { add(cur, &v, false, view_table, k + i)? };
                if let Some(p) = layout.nonnull_pos[i] {
                    row.set(p, Value::Int(int(row.get(p)) + 1));
                }
                sum
            }
            ViewAggregate::Min(_) if cur.is_null() || v < *cur => v,
            ViewAggregate::Max(_) if cur.is_null() || v > *cur => v,
            _ => continue,
        };
        row.set(k + i, new);
    }
    Ok(Some(ViewChange::Update(id, row.changes)))
}

/// The change to the view when `src` is removed from `source` (which no longer holds it);
/// none when the view's filter left it out.
pub(crate) fn on_delete(view_table: &Table, vdef: &ViewDef, src: &[Value], source: &Table) -> Result<Option<ViewChange>> {
    if !vdef.counts(src)? {
        return Ok(None);
    }
    let layout = layout(view_table)?;
    let key = group_key(vdef, src, 0)?;
    let k = layout.group_len;
    let Some(id) = find_group(view_table, layout, &key) else {
        return Err(Error::unexpected(format!("view {} has no group for a deleted row", view_table.name())));
    };
    let stored = view_table.get_full(id).unwrap_or_default();
    let mut row = Changing::new(&stored);
    let count = int(row.get(layout.count_pos)) - 1;
    if count <= 0 {
        return Ok(Some(ViewChange::Delete(id)));
    }
    row.set(layout.count_pos, Value::Int(count));
    let mut recompute = Vec::new();
    for (i, agg) in vdef.aggregates.iter().enumerate() {
        let v = input(view_table, vdef, i, src)?;
        let cur = row.get(k + i);
        let new = match agg {
            ViewAggregate::CountStar => continue,
            ViewAggregate::Count(_) => Value::Int(int(cur) - !v.is_null() as i64),
            _ if v.is_null() => continue,
            ViewAggregate::Sum(_) => {
                let p = layout.nonnull_pos[i].unwrap_or(layout.count_pos);
                let left = int(row.get(p)) - 1;
                row.set(p, Value::Int(left));
                if left <= 0 {
                    Value::Null
                } else {
                    add(row.get(k + i), &v, true, view_table, k + i)?
                }
            }
            ViewAggregate::Min(_) | ViewAggregate::Max(_) if v == *cur => {
                recompute.push(i);
                continue;
            }
            _ => continue,
        };
        row.set(k + i, new);
    }
    if !recompute.is_empty() {
        recompute_extremes(view_table, vdef, &key, source, &recompute, &mut row)?;
    }
    Ok(Some(ViewChange::Update(id, row.changes)))
}

/// Recomputes the MIN/MAX aggregates `which` of group `key` from the source rows.
fn recompute_extremes(
    view_table: &Table,
    vdef: &ViewDef,
    key: &[Value],
    source: &Table,
    which: &[usize],
    row: &mut Changing,
) -> Result<()> {
    let k = vdef.group_by.len();
    for &i in which {
        row.set(k + i, Value::Null);
    }
    let mut visit = |src: &[Value]| -> Result<()> {
        if !vdef.counts(src)? {
            return Ok(());
        }
        for &i in which {
            let v = input(view_table, vdef, i, src)?;
            let cur = row.get(k + i);
            let better = match vdef.aggregates[i] {
                ViewAggregate::Min(_) => cur.is_null() || v < *cur,
                _ => cur.is_null() || v > *cur,
            };
            if !v.is_null() && better {
                row.set(k + i, v);
            }
        }
        Ok(())
    };
    // When every group key is a column, an index whose leading columns are those columns
    // finds the group's rows directly (not a partial one, which may lack some of them);
    // otherwise scan the source.
    let columns: Option<Vec<usize>> = vdef.group_by.iter().map(ViewKey::column).collect();
    let group_index = columns.as_ref().and_then(|group| {
        source
            .indexes()
            .iter()
            .position(|ix| k > 0 && !ix.is_partial() && ix.columns.len() >= k && ix.columns[..k].iter().all(|c| group.contains(c)))
    });
    match (group_index, &columns) {
        (Some(pos), Some(group)) => {
            let index_columns = &source.indexes()[pos].columns[..k];
            let probe: Vec<Value> =
                index_columns.iter().map(|c| group.iter().position(|g| g == c).map_or(Value::Null, |j| key[j].clone())).collect();
            for id in source.lookup(pos, &probe) {
                if let Some(src) = source.get(id) {
                    visit(&src)?;
                }
            }
        }
        _ => {
            for (_, src) in source.scan() {
                if group_key(vdef, &src, 0)? == key {
                    visit(&src)?;
                }
            }
        }
    }
    Ok(())
}

/// Adds every row of `source` to the view table `vt`, outside transactions (a view built
/// or rebuilt from its source's rows).
pub(crate) fn populate(vt: &mut Table, vdef: &ViewDef, source: &Table) -> Result<()> {
    for (_, row) in source.scan() {
        if let Some(change) = on_insert(vt, vdef, &row)? {
            apply_unrecorded(vt, change)?;
        }
    }
    Ok(())
}

/// Applies a change directly, without undo (populating a view outside transactions).
fn apply_unrecorded(view_table: &mut Table, change: ViewChange) -> Result<()> {
    match change {
        ViewChange::Insert(row) => view_table.push_row(&row).map(|_| ()),
        ViewChange::Update(id, changes) => {
            view_table.set_columns(id, changes);
            Ok(())
        }
        ViewChange::Delete(id) => {
            view_table.take_row(id);
            Ok(())
        }
    }
}
