//! Row validation: coercion to column types, NOT NULL and length limits.

use lockstep_core::{ColumnDef, Error, Result, TableDef, Value};

/// Converts one value for column `col` of table `table` and checks NOT NULL and length.
pub(crate) fn check_value(table: &str, col: &ColumnDef, mut v: Value) -> Result<Value> {
    fit(table, col, &mut v)?;
    Ok(v)
}

/// Converts `v` in place for column `col` and checks NOT NULL and length. Inlined into
/// `check_row`'s loop: a snapshot load checks tens of millions of values.
#[inline]
pub(crate) fn fit(table: &str, col: &ColumnDef, v: &mut Value) -> Result<()> {
    // Most values already have the column's representation: no conversion, no move.
    if !v.coerces_to_itself(col.ty) {
        *v = std::mem::replace(v, Value::Null).coerce_to(col.ty).map_err(|e| e.context(format!("column {} of {table}", col.name)))?;
    }
    match v {
        Value::Null if !col.nullable => Err(Error::constraint(format!("Constraint violation: column {} of {table} is NOT NULL", col.name))),
        Value::Str(s) => check_length(table, col, s.as_bytes(), Some(s)),
        Value::Bytes(b) => check_length(table, col, b, None),
        Value::Geography(g) if col.size > 0 && g.wire_len() > col.size as usize => Err(Error::constraint(format!(
            "Value too long for column {} of {table}: the polygon takes {} bytes, limit {} (declare GEOGRAPHY(n) with a larger n)",
            col.name,
            g.wire_len(),
            col.size
        ))),
        _ => Ok(()),
    }
}

/// VARCHAR limits count characters unless declared in bytes; VARBINARY counts bytes. A
/// size of 0 means the column has no declared limit.
fn check_length(table: &str, col: &ColumnDef, bytes: &[u8], text: Option<&str>) -> Result<()> {
    let limit = col.size as usize;
    // A string never has more characters than bytes, so the byte length is a fast pass.
    if limit == 0 || bytes.len() <= limit {
        return Ok(());
    }
    let (len, unit) = match text {
        Some(s) if !col.in_bytes => (s.chars().count(), "characters"),
        _ => (bytes.len(), "bytes"),
    };
    if len <= limit {
        return Ok(());
    }
    Err(Error::constraint(format!("Value too long for column {} of {table}: {len} {unit}, limit {limit}", col.name)))
}

/// Validates a whole row for `def`, returning it in storage form.
pub(crate) fn check_row(def: &TableDef, row: Vec<Value>) -> Result<Box<[Value]>> {
    if row.len() != def.columns.len() {
        return Err(Error::sql(format!("{} has {} columns but {} values were given", def.name, def.columns.len(), row.len())));
    }
    // In place: a row of many columns (TATP's subscriber has 34) is not moved value by
    // value into a new allocation.
    let mut row = row;
    for (v, col) in row.iter_mut().zip(&def.columns) {
        fit(&def.name, col, v)?;
    }
    Ok(row.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::{DataType, TableKind};

    fn col(name: &str, ty: DataType, size: u32, nullable: bool) -> ColumnDef {
        ColumnDef { name: name.into(), ty, size, in_bytes: false, nullable, default: None }
    }

    fn def() -> TableDef {
        TableDef {
            id: 0,
            name: "T".into(),
            columns: vec![
                col("ID", DataType::Integer, 0, false),
                col("NAME", DataType::Varchar, 3, true),
                col("B", DataType::Varbinary, 2, true),
            ],
            indexes: vec![],
            partition_column: None,
            kind: TableKind::Table,
        }
    }

    #[test]
    fn coerces_values_to_column_types() {
        let row = check_row(&def(), vec![Value::from("7"), Value::Int(12), Value::from("0aff")]).unwrap();
        assert_eq!(&*row, &[Value::Int(7), Value::from("12"), Value::Bytes(vec![10, 255].into())]);
    }

    #[test]
    fn length_counts_characters_for_varchar_and_bytes_for_varbinary() {
        // Three characters, six bytes: fits a VARCHAR(3).
        assert!(check_row(&def(), vec![Value::Int(1), Value::from("ééé"), Value::Null]).is_ok());
        let err = check_row(&def(), vec![Value::Int(1), Value::from("abcd"), Value::Null]).unwrap_err();
        assert_eq!(err.message, "Value too long for column NAME of T: 4 characters, limit 3");
        let err = check_row(&def(), vec![Value::Int(1), Value::Null, Value::Bytes(vec![1, 2, 3].into())]).unwrap_err();
        assert_eq!(err.message, "Value too long for column B of T: 3 bytes, limit 2");
        let mut d = def();
        d.columns[1].in_bytes = true;
        let err = check_row(&d, vec![Value::Int(1), Value::from("éé"), Value::Null]).unwrap_err();
        assert_eq!(err.message, "Value too long for column NAME of T: 4 bytes, limit 3");
    }

    #[test]
    fn rejects_null_in_not_null_column_and_out_of_range_integers() {
        let err = check_row(&def(), vec![Value::Null, Value::Null, Value::Null]).unwrap_err();
        assert_eq!(err.message, "Constraint violation: column ID of T is NOT NULL");
        assert_eq!(err.kind, lockstep_core::ErrorKind::Constraint);
        let err = check_row(&def(), vec![Value::Int(1 << 40), Value::Null, Value::Null]).unwrap_err();
        assert_eq!(err.message, "column ID of T: value 1099511627776 is out of range for INTEGER");
    }

    #[test]
    fn rejects_wrong_arity() {
        let err = check_row(&def(), vec![Value::Int(1)]).unwrap_err();
        assert_eq!(err.message, "T has 3 columns but 1 values were given");
    }
}
