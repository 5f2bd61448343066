//! Responses read in place. A `ResponseView` checks the layout of its tables when it is made
//! (every length against the bytes it claims) and decodes a cell only when asked, as
//! VoltDB's own client reads a `VoltTable`. A caller that looks at a row count or at one
//! column pays for no other cell: no value made, copied or freed.

use std::sync::Arc;

use bytes::Bytes;
use lockstep_core::{Result, ResultColumn, ResultTable, Value};
use smallvec::SmallVec;

use crate::codec::{malformed, Reader};
use crate::response::{decode_with, Head, Response};
use crate::scalar;
use crate::table::header_columns;
use crate::types;

/// A response whose tables stay in the bytes they came in.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseView {
    pub handle: i64,
    pub status: i8,
    pub status_string: Option<String>,
    pub app_status: i8,
    pub app_status_string: Option<String>,
    pub cluster_round_trip_ms: i32,
    payload: Bytes,
    /// Most answers hold one or two tables: kept inline, they cost no allocation.
    tables: SmallVec<[Shape; 2]>,
}

/// Where one table's rows lie in the payload.
#[derive(Clone, Debug, PartialEq)]
struct Shape {
    columns: Arc<[ResultColumn]>,
    /// Offset of the first row's length prefix.
    rows_at: usize,
    rows: usize,
}

impl ResponseView {
    /// Reads a response payload (a frame without its length prefix), checking the layout of
    /// its tables but none of their cells.
    pub fn parse(payload: Bytes) -> Result<ResponseView> {
        let (head, tables) = decode_with(&payload, table_shape)?;
        let Head { handle, status, status_string, app_status, app_status_string, cluster_round_trip_ms, .. } = head;
        Ok(ResponseView { handle, status, status_string, app_status, app_status_string, cluster_round_trip_ms, payload, tables })
    }

    pub fn table_count(&self) -> usize {
        self.tables.len()
    }

    /// Table `i` (from 0).
    pub fn table(&self, i: usize) -> Option<TableView<'_>> {
        self.tables.get(i).map(|shape| TableView { payload: &self.payload, shape })
    }

    /// Every table decoded: the response `decode_response` would have made.
    pub fn to_response(&self) -> Result<Response> {
        let tables = (0..self.tables.len()).filter_map(|i| self.table(i)).map(|t| t.to_table()).collect::<Result<Vec<_>>>()?;
        Ok(Response {
            handle: self.handle,
            status: self.status,
            status_string: self.status_string.clone(),
            app_status: self.app_status,
            app_status_string: self.app_status_string.clone(),
            cluster_round_trip_ms: self.cluster_round_trip_ms,
            tables,
        })
    }
}

/// Checks one table's lengths (as `decode_table` does) without decoding a cell.
fn table_shape(r: &mut Reader) -> Result<Shape> {
    let total = r.i32("table length")?;
    if total < 0 || total as usize > r.remaining() {
        return Err(malformed(format!("table length {total} exceeds the {} bytes left", r.remaining())));
    }
    let end = r.position() + total as usize;
    let header_len = r.i32("table header length")?;
    if header_len < 0 || header_len as usize > end.saturating_sub(r.position()) {
        return Err(malformed(format!("table header length {header_len} does not fit its table")));
    }
    let columns = header_columns(r.bytes(header_len as usize, "table header")?)?;
    let rows = r.i32("row count")?;
    if rows < 0 {
        return Err(malformed(format!("negative row count {rows}")));
    }
    let rows_at = r.position();
    for _ in 0..rows {
        let len = r.i32("row length")?;
        if len < 0 || len as usize > end.saturating_sub(r.position()) {
            return Err(malformed(format!("row length {len} does not fit its table")));
        }
        r.bytes(len as usize, "row")?;
    }
    if r.position() != end {
        return Err(malformed("table length does not match its content"));
    }
    Ok(Shape { columns, rows_at, rows: rows as usize })
}

/// One table of a `ResponseView`.
#[derive(Clone, Copy)]
pub struct TableView<'a> {
    payload: &'a [u8],
    shape: &'a Shape,
}

impl<'a> TableView<'a> {
    pub fn columns(&self) -> &'a [ResultColumn] {
        &self.shape.columns
    }

    pub fn row_count(&self) -> usize {
        self.shape.rows
    }

    /// The rows in order.
    pub fn rows(&self) -> impl Iterator<Item = RowView<'a>> + 'a {
        let (payload, columns) = (self.payload, self.columns());
        let mut at = self.shape.rows_at;
        (0..self.shape.rows).map(move |_| {
            // `table_shape` checked that every row lies within the payload.
            let len = i32::from_be_bytes([payload[at], payload[at + 1], payload[at + 2], payload[at + 3]]) as usize;
            let bytes = &payload[at + 4..at + 4 + len];
            at += 4 + len;
            RowView { bytes, columns }
        })
    }

    /// Row `i` (from 0); it walks the rows before it.
    pub fn row(&self, i: usize) -> Option<RowView<'a>> {
        self.rows().nth(i)
    }

    /// The whole table decoded.
    pub fn to_table(&self) -> Result<ResultTable> {
        let rows = self.rows().map(|r| r.values()).collect::<Result<Vec<_>>>()?;
        Ok(ResultTable { columns: self.shape.columns.clone(), rows })
    }
}

/// One row of a `TableView`: its cells are decoded when asked.
#[derive(Clone, Copy)]
pub struct RowView<'a> {
    bytes: &'a [u8],
    columns: &'a [ResultColumn],
}

impl<'a> RowView<'a> {
    /// A reader at the start of cell `col`, and its column.
    fn at(&self, col: usize) -> Result<(Reader<'a>, &'a ResultColumn)> {
        let column = self.columns.get(col).ok_or_else(|| malformed(format!("no column {col} in a row of {}", self.columns.len())))?;
        let mut r = Reader::new(self.bytes);
        for c in &self.columns[..col] {
            skip(&mut r, c.ty.wire_code(), &c.name)?;
        }
        Ok((r, column))
    }

    /// Cell `col` (from 0).
    pub fn value(&self, col: usize) -> Result<Value> {
        let (mut r, c) = self.at(col)?;
        scalar::read(&mut r, c.ty.wire_code(), &c.name)
    }

    /// Cell `col` as an integer, when it is an integer or a timestamp column: None for
    /// NULL. Reads no other type.
    pub fn int(&self, col: usize) -> Result<Option<i64>> {
        let (mut r, c) = self.at(col)?;
        match c.ty.wire_code() {
            types::TINYINT => r.i8(&c.name).map(|v| (v != i8::MIN).then_some(v as i64)),
            types::SMALLINT => r.i16(&c.name).map(|v| (v != i16::MIN).then_some(v as i64)),
            types::INTEGER => r.i32(&c.name).map(|v| (v != i32::MIN).then_some(v as i64)),
            types::BIGINT | types::TIMESTAMP => r.i64(&c.name).map(|v| (v != i64::MIN).then_some(v)),
            _ => Err(malformed(format!("column {} is {}, not an integer", c.name, c.ty))),
        }
    }

    /// Cell `col` as text borrowed from the response, when it is a string column: None for
    /// NULL.
    pub fn str(&self, col: usize) -> Result<Option<&'a str>> {
        let (mut r, c) = self.at(col)?;
        if c.ty.wire_code() != types::STRING {
            return Err(malformed(format!("column {} is {}, not text", c.name, c.ty)));
        }
        r.str(&c.name)
    }

    /// Every cell, checked against the row's length as `decode_table` checks it.
    pub fn values(&self) -> Result<Vec<Value>> {
        let mut r = Reader::new(self.bytes);
        let row = self.columns.iter().map(|c| scalar::read(&mut r, c.ty.wire_code(), &c.name)).collect::<Result<Vec<_>>>()?;
        r.expect_end("a row")?;
        Ok(row)
    }
}

/// Moves past one cell of wire type `code`.
fn skip(r: &mut Reader, code: i8, what: &str) -> Result<()> {
    let fixed = match code {
        types::TINYINT | types::BOOLEAN => 1,
        types::SMALLINT => 2,
        types::INTEGER => 4,
        types::BIGINT | types::FLOAT | types::TIMESTAMP => 8,
        types::DECIMAL => 16,
        types::STRING | types::VARBINARY => return r.varbinary(what).map(drop),
        other => return Err(malformed(format!("{what} has unsupported type {}", types::name(other)))),
    };
    r.bytes(fixed, what).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{decode_response, encode_response};
    use lockstep_core::DataType;

    fn every_type() -> ResultTable {
        let mut t = ResultTable::with_columns(&[
            ("t", DataType::TinyInt),
            ("s", DataType::SmallInt),
            ("i", DataType::Integer),
            ("b", DataType::BigInt),
            ("f", DataType::Float),
            ("txt", DataType::Varchar),
            ("ts", DataType::Timestamp),
            ("d", DataType::Decimal),
            ("bin", DataType::Varbinary),
            ("last", DataType::Varchar),
        ]);
        t.push(vec![
            Value::Int(1),
            Value::Int(-2),
            Value::Int(3),
            Value::Int(4),
            Value::Float(0.5),
            Value::from("hello"),
            Value::Timestamp(77),
            Value::Decimal(lockstep_core::Dec::new(1_234_000_000_000)),
            Value::Bytes(vec![9, 8].into()),
            Value::from("end"),
        ]);
        t.push(vec![Value::Null; 10]);
        t
    }

    fn payload(r: &Response) -> Bytes {
        let mut out = Vec::new();
        encode_response(r, &mut out);
        Bytes::from(out).slice(4..)
    }

    #[test]
    fn cells_read_in_place_equal_the_decoded_response() {
        let mut one = ResultTable::with_columns(&[("n", DataType::BigInt)]);
        one.push(vec![Value::Int(5)]);
        let mut r = Response::success(42, vec![every_type(), ResultTable::with_columns(&[("e", DataType::Varchar)]), one]);
        r.app_status = 7;
        r.status_string = Some("fine".into());
        let bytes = payload(&r);
        let view = ResponseView::parse(bytes.clone()).unwrap();
        assert_eq!(view.to_response().unwrap(), decode_response(&bytes).unwrap());
        assert_eq!((view.handle, view.app_status, view.status_string.as_deref()), (42, 7, Some("fine")));
        assert_eq!(view.table_count(), 3);
        let t = view.table(0).unwrap();
        assert_eq!(t.row_count(), 2);
        let expected = every_type();
        for (row, want) in t.rows().zip(&expected.rows) {
            for (c, v) in want.iter().enumerate() {
                assert_eq!(&row.value(c).unwrap(), v, "column {c}");
            }
        }
        let first = t.row(0).unwrap();
        assert_eq!(first.str(9).unwrap(), Some("end"));
        assert_eq!(t.row(1).unwrap().str(5).unwrap(), None);
        assert!(first.str(3).is_err(), "a BIGINT is not text");
        let ints: Vec<_> = [0, 1, 2, 3, 6].iter().map(|&c| first.int(c).unwrap()).collect();
        assert_eq!(ints, vec![Some(1), Some(-2), Some(3), Some(4), Some(77)]);
        assert_eq!(t.row(1).unwrap().int(3).unwrap(), None);
        assert!(first.int(4).is_err() && first.int(5).is_err(), "a FLOAT or a VARCHAR is not an integer");
        assert!(first.value(10).is_err());
        assert!(t.row(2).is_none());
        assert_eq!(view.table(1).unwrap().row_count(), 0);
        assert_eq!(view.table(2).unwrap().row(0).unwrap().value(0).unwrap(), Value::Int(5));
        assert!(view.table(3).is_none());
    }

    #[test]
    fn a_truncated_or_padded_layout_is_refused_when_parsed() {
        let bytes = payload(&Response::success(1, vec![every_type()]));
        for cut in [1, 5, 20, bytes.len() - 1] {
            assert!(ResponseView::parse(bytes.slice(..bytes.len() - cut)).is_err(), "cut {cut}");
        }
        let mut padded = bytes.to_vec();
        padded.push(0);
        assert!(ResponseView::parse(Bytes::from(padded)).is_err());
    }

    #[test]
    fn a_bad_cell_is_an_error_when_read_not_a_panic() {
        let mut t = ResultTable::with_columns(&[("s", DataType::Varchar), ("n", DataType::BigInt)]);
        t.push(vec![Value::from("ab"), Value::Int(1)]);
        let bytes = payload(&Response::success(1, vec![t]));
        // Inflate the string's length past its row: the layout still holds, the cell not.
        let at = bytes.windows(6).position(|w| w == [0, 0, 0, 2, b'a', b'b']).unwrap();
        let mut bad = bytes.to_vec();
        bad[at + 3] = 200;
        let view = ResponseView::parse(Bytes::from(bad)).unwrap();
        let row = view.table(0).unwrap().row(0).unwrap();
        assert!(row.value(0).is_err());
        assert!(row.value(1).is_err());
        assert!(row.values().is_err());
        assert!(view.to_response().is_err());
    }
}
