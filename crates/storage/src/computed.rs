//! The hidden values stored after a row's columns: expression index keys and partial index
//! flags, computed from the row's columns when the row is written, so an index holds them
//! like columns (see `lockstep_core::IndexDef`). Readers never see them: `Table::get` and
//! `scan` stop at the columns, and snapshots keep only the columns (the values are computed
//! again on load).
//!
//! A partial index's flag is `Value::Bool(true)` when the row satisfies the index's
//! predicate and `false` otherwise (NULL counts as false). The index reads the flag, never
//! the predicate: a row leaves the index exactly as it entered it, and an UPDATE that
//! changes the flag moves the row in or out like a change of key.

use lockstep_core::{Result, TableDef, Value};

/// `row` (the table's columns, validated) followed by its computed key values, then its
/// partial index flags. A table without either gets its row back as it is.
pub(crate) fn with_computed(def: &TableDef, row: Box<[Value]>) -> Result<Box<[Value]>> {
    let count = def.computed_width();
    if count == 0 {
        return Ok(row);
    }
    let width = def.columns.len();
    let mut stored = Vec::with_capacity(width + count);
    stored.extend(row.into_vec().into_iter().take(width));
    for ix in &def.indexes {
        for e in &ix.exprs {
            let v =
                e.expr.eval(&stored[..width]).map_err(|err| err.context(format!("computing key {} of index {}", e.expr.text, ix.name)))?;
            stored.push(v);
        }
    }
    for ix in &def.indexes {
        if let Some(p) = &ix.predicate {
            let v = p.eval(&stored[..width]).map_err(|err| err.context(format!("computing WHERE {} of index {}", p.text, ix.name)))?;
            stored.push(Value::Bool(matches!(v, Value::Bool(true))));
        }
    }
    Ok(stored.into_boxed_slice())
}

/// Whether a stored row belongs in an index whose flag (if partial) is at `flag`.
pub(crate) fn is_member(flag: Option<usize>, row: &[Value]) -> bool {
    flag.is_none_or(|f| matches!(row.get(f), Some(Value::Bool(true))))
}
