//! Result tables: what a statement or a procedure returns (VoltDB's VoltTable).

use std::sync::Arc;

use crate::value::{DataType, Value};

/// A named, typed result column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResultColumn {
    /// Shared, not owned: every execution of a statement hands out its columns, and cloning
    /// an `Arc` costs no allocation.
    pub name: Arc<str>,
    pub ty: DataType,
}

/// Rows with a schema. Every row has one value per column.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultTable {
    /// Shared, like the names: a statement's plan holds its columns once, and each result
    /// takes a reference to them instead of a copy.
    pub columns: Arc<[ResultColumn]>,
    pub rows: Vec<Vec<Value>>,
}

impl ResultTable {
    pub fn new(columns: impl Into<Arc<[ResultColumn]>>) -> Self {
        ResultTable { columns: columns.into(), rows: Vec::new() }
    }

    /// A table from `(name, type)` pairs.
    pub fn with_columns(columns: &[(&str, DataType)]) -> Self {
        Self::new(columns.iter().map(|(n, t)| ResultColumn { name: (*n).into(), ty: *t }).collect::<Arc<[ResultColumn]>>())
    }

    /// The one-row, one-column BIGINT table VoltDB returns for a scalar (and for DML counts).
    /// The unnamed column of a procedure's returned integer is made once per thread: Voter
    /// returns one on every call.
    pub fn scalar(name: &str, v: i64) -> Self {
        thread_local! {
            static UNNAMED: Arc<[ResultColumn]> = Arc::new([ResultColumn { name: "".into(), ty: DataType::BigInt }]);
        }
        let columns = match name {
            "" => UNNAMED.with(Arc::clone),
            _ => Arc::new([ResultColumn { name: name.into(), ty: DataType::BigInt }]),
        };
        ResultTable { columns, rows: vec![vec![Value::Int(v)]] }
    }

    /// The `modified_tuples` table a DML statement returns (every write makes one, so its
    /// column is made once per thread).
    pub fn modified(count: u64) -> Self {
        thread_local! {
            static COLUMNS: Arc<[ResultColumn]> =
                Arc::new([ResultColumn { name: "modified_tuples".into(), ty: DataType::BigInt }]);
        }
        ResultTable { columns: COLUMNS.with(Arc::clone), rows: vec![vec![Value::Int(count as i64)]] }
    }

    pub fn push(&mut self, row: Vec<Value>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }

    /// The value in the first column of the first row, if any.
    pub fn first_value(&self) -> Option<&Value> {
        self.rows.first().and_then(|r| r.first())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_share_the_unnamed_column_and_keep_a_given_name() {
        let (a, b) = (ResultTable::scalar("", 1), ResultTable::scalar("", 2));
        assert!(Arc::ptr_eq(&a.columns, &b.columns));
        assert_eq!((a.columns[0].name.as_ref(), a.columns[0].ty), ("", DataType::BigInt));
        assert_eq!((a.first_value(), b.first_value()), (Some(&Value::Int(1)), Some(&Value::Int(2))));
        let named = ResultTable::scalar("N", 3);
        assert_eq!(named.columns[0].name.as_ref(), "N");
        let mut want = ResultTable::with_columns(&[("N", DataType::BigInt)]);
        want.push(vec![Value::Int(3)]);
        assert_eq!(named, want);
    }
}
