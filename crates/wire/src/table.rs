//! VoltTable serialization (§1.6), byte-exact: header, column types and names, rows.

use lockstep_core::{DataType, Result, ResultColumn, ResultTable};

use crate::codec::{begin_len, malformed, patch_len, put_i16, put_i32, put_i8, put_string, Reader};
use crate::scalar;
use crate::types;

/// Most columns in a table (VoltDB's limit).
pub const COLUMN_COUNT_MAX: usize = 1024;
/// Longest column name we accept.
pub const COLUMN_NAME_MAX_BYTES: usize = 1024;
/// The informational status byte every table carries.
const TABLE_STATUS: i8 = -128;

/// The type a column is sent as: BOOLEAN goes as TINYINT, which the client can read.
fn column_code(ty: DataType) -> i8 {
    match ty {
        DataType::Boolean => types::TINYINT,
        t => t.wire_code(),
    }
}

/// Appends one serialized table, starting with its int32 total length.
///
/// A cell that does not fit its column type is a bug in the layer that built the table; in
/// release builds it is sent as NULL rather than corrupting the stream.
pub fn encode_table(t: &ResultTable, out: &mut Vec<u8>) {
    debug_assert!(t.columns.len() <= i16::MAX as usize);
    let total_at = begin_len(out);
    let header_at = begin_len(out);
    put_i8(out, TABLE_STATUS);
    put_i16(out, t.columns.len() as i16);
    for c in t.columns.iter() {
        put_i8(out, column_code(c.ty));
    }
    for c in t.columns.iter() {
        put_string(out, &c.name);
    }
    patch_len(out, header_at);
    put_i32(out, t.rows.len() as i32);
    for row in &t.rows {
        debug_assert_eq!(
            row.len(),
            t.columns.len(),
            "row width differs from the schema"
        );
        let row_at = begin_len(out);
        for (c, v) in t.columns.iter().zip(row) {
            let code = column_code(c.ty);
            if !scalar::write(out, code, v) {
                debug_assert!(false, "value {v:?} does not fit column {} {}", c.name, c.ty);
                scalar::write(out, code, &lockstep_core::Value::Null);
            }
        }
        patch_len(out, row_at);
    }
    patch_len(out, total_at);
}

/// Reads one serialized table, checking every length against the bytes it claims.
pub fn decode_table(r: &mut Reader) -> Result<ResultTable> {
    let total = r.i32("table length")?;
    if total < 0 || total as usize > r.remaining() {
        return Err(malformed(format!(
            "table length {total} exceeds the {} bytes left",
            r.remaining()
        )));
    }
    let end = r.position() + total as usize;
    let header_len = r.i32("table header length")?;
    let header_start = r.position();
    let _status = r.i8("table status")?;
    let ncols = r.i16("column count")?;
    if ncols < 0 || ncols as usize > COLUMN_COUNT_MAX {
        return Err(malformed(format!(
            "column count {ncols} is outside 0..={COLUMN_COUNT_MAX}"
        )));
    }
    let ncols = ncols as usize;
    let codes = r.bytes(ncols, "column types")?.to_vec();
    let mut columns = Vec::with_capacity(ncols);
    for &code in &codes {
        let ty = DataType::from_wire_code(code as i8).ok_or_else(|| {
            malformed(format!(
                "column type {} is not supported",
                types::name(code as i8)
            ))
        })?;
        let name = r.required_str("column name")?;
        if name.len() > COLUMN_NAME_MAX_BYTES {
            return Err(malformed("column name too long"));
        }
        columns.push(ResultColumn { name: name.into(), ty });
    }
    if header_len < 0 || r.position() - header_start != header_len as usize {
        return Err(malformed(format!(
            "table header length {header_len} does not match its content"
        )));
    }
    let nrows = r.i32("row count")?;
    if nrows < 0 {
        return Err(malformed(format!("negative row count {nrows}")));
    }
    // Each row has at least its 4-byte length, so the bytes left bound the row count.
    let mut rows = Vec::with_capacity((nrows as usize).min(r.remaining() / 4));
    for _ in 0..nrows {
        let row_len = r.i32("row length")?;
        let row_start = r.position();
        let mut row = Vec::with_capacity(ncols);
        for (col, &code) in columns.iter().zip(&codes) {
            row.push(scalar::read(r, code as i8, &col.name)?);
        }
        if row_len < 0 || r.position() - row_start != row_len as usize {
            return Err(malformed(format!(
                "row length {row_len} does not match its content"
            )));
        }
        rows.push(row);
    }
    if r.position() != end {
        return Err(malformed("table length does not match its content"));
    }
    Ok(ResultTable { columns: columns.into(), rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::Value;

    #[test]
    fn booleans_go_as_tinyint() {
        let mut t = ResultTable::with_columns(&[("B", DataType::Boolean)]);
        t.push(vec![Value::Bool(true)]);
        t.push(vec![Value::Null]);
        let mut out = Vec::new();
        encode_table(&t, &mut out);
        let back = decode_table(&mut Reader::new(&out)).unwrap();
        assert_eq!(back.columns[0].ty, DataType::TinyInt);
        assert_eq!(back.rows, vec![vec![Value::Int(1)], vec![Value::Null]]);
    }

    #[test]
    fn lying_lengths_are_errors() {
        let mut t = ResultTable::with_columns(&[("A", DataType::Integer)]);
        t.push(vec![Value::Int(3)]);
        let mut out = Vec::new();
        encode_table(&t, &mut out);
        let row_len_at = out.len() - 8;
        out[row_len_at + 3] = 5;
        assert!(decode_table(&mut Reader::new(&out))
            .unwrap_err()
            .message
            .contains("row length 5"));
        out[3] += 1;
        assert!(decode_table(&mut Reader::new(&out)).is_err());
    }
}
