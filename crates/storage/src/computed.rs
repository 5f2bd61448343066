//! The hidden values of expression index keys: computed from a row's columns when the row
//! is written and stored after them, so an index holds them like columns (see
//! `lockstep_core::IndexDef`). Readers never see them: `Table::get` and `scan` stop at the
//! columns, and snapshots keep only the columns (the keys are computed again on load).

use lockstep_core::{Result, TableDef, Value};

/// `row` (the table's columns, validated) followed by its computed key values. A table
/// without expression keys gets its row back as it is.
pub(crate) fn with_computed(def: &TableDef, row: Box<[Value]>) -> Result<Box<[Value]>> {
    let count = def.computed().count();
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
    Ok(stored.into_boxed_slice())
}
