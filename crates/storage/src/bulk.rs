//! Bulk loading of committed rows into empty tables (a snapshot read at start-up): each row
//! is checked as an insert would check it, but indexes are built once for the whole table
//! and views populated once from it, instead of row by row with undo records.

use std::collections::BTreeMap;

use lockstep_core::{Error, Result, TableId, Value};

use crate::computed::with_computed;
use crate::partition::Partition;
use crate::table::Table;
use crate::validate::check_row;
use crate::view;

impl Partition {
    /// Loads `rows` into their tables, which must be empty, then repopulates the views of
    /// those tables. Runs outside transactions. On an error (a bad value, a duplicate key)
    /// nothing of the failing table is kept; the caller gives up on the whole load.
    pub fn load_rows(&mut self, rows: BTreeMap<TableId, Vec<Vec<Value>>>) -> Result<()> {
        if self.snapshot.is_some() {
            return Err(Error::unexpected("bulk load while a snapshot is being written"));
        }
        for (id, rows) in rows {
            // A view of a stream is loaded like a table (a snapshot keeps its rows).
            let layout = match self.is_view_of_stream(id) {
                true => self.table(id)?.view.clone(),
                false => None,
            };
            let t = if layout.is_some() { self.table(id)? } else { self.check_writable(id, "load into")? };
            if !t.is_empty() {
                return Err(Error::unexpected(format!("bulk load into {}, which is not empty", t.name())));
            }
            let def = t.def().clone();
            let slots = rows
                .into_iter()
                .map(|r| {
                    let row = check_row(&def, r)?;
                    Ok(Some(match &layout {
                        Some(l) => view::with_hidden(l, row),
                        None => with_computed(&def, row)?,
                    }))
                })
                .collect::<Result<Vec<_>>>()?;
            let table = Table::from_slots(def, slots)?;
            self.tables.insert(id, table);
            self.repopulate_views_of(id)?;
        }
        Ok(())
    }

    /// Rebuilds every view of `source` from the source's rows.
    fn repopulate_views_of(&mut self, source: TableId) -> Result<()> {
        for vid in self.views_of.get(&source).cloned().unwrap_or_default() {
            let old = self.table(vid)?;
            let Some(vdef) = old.def().view().cloned() else { continue };
            let mut vt = Table::new(old.def().clone());
            view::populate(&mut vt, &vdef, self.table(source)?)?;
            self.tables.insert(vid, vt);
        }
        Ok(())
    }
}
