//! VoltTable serialization (§1.6), byte-exact: header, column types and names, rows.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;

use lockstep_core::prefetch::prefetch_values;
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
/// How far ahead of the row being encoded its successors' text and bytes are loaded, and how
/// much of each.
const PREFETCH_ROWS_AHEAD: usize = 2;
const PREFETCH_LINES_PER_VALUE: usize = 32;

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
    put_header(&t.columns, out);
    put_i32(out, t.rows.len() as i32);
    // Stored text and bytes are cold by the time an answer is encoded (a YCSB scan's rows are
    // 1 KB each, anywhere in memory): load them a few rows ahead of the copy.
    for row in t.rows.iter().take(PREFETCH_ROWS_AHEAD) {
        prefetch_values(row, PREFETCH_LINES_PER_VALUE);
    }
    for (i, row) in t.rows.iter().enumerate() {
        if let Some(ahead) = t.rows.get(i + PREFETCH_ROWS_AHEAD) {
            prefetch_values(ahead, PREFETCH_LINES_PER_VALUE);
        }
        debug_assert_eq!(row.len(), t.columns.len(), "row width differs from the schema");
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

// Table headers encoded recently on this thread, by the columns they describe, newest
// last. A statement's results share one set of columns, so the front end encodes each
// header once instead of per response (34 names for every TATP `GetSubscriberData`). An
// entry holds its columns, so their address cannot be reused by other columns meanwhile.
thread_local! {
    static ENCODED_HEADERS: RefCell<VecDeque<(Arc<[ResultColumn]>, Box<[u8]>)>> =
        RefCell::new(VecDeque::with_capacity(HEADER_CACHE_ENTRIES));
}

/// Appends the header of a table with `columns`, with its length.
fn put_header(columns: &Arc<[ResultColumn]>, out: &mut Vec<u8>) {
    ENCODED_HEADERS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, bytes)) = cache.iter().find(|(c, _)| Arc::ptr_eq(c, columns)) {
            out.extend_from_slice(bytes);
            return;
        }
        let start = out.len();
        encode_header(columns, out);
        if out.len() - start > HEADER_CACHED_BYTES_MAX {
            return;
        }
        if cache.len() == HEADER_CACHE_ENTRIES {
            cache.pop_front();
        }
        cache.push_back((columns.clone(), out[start..].into()));
    })
}

fn encode_header(columns: &[ResultColumn], out: &mut Vec<u8>) {
    let header_at = begin_len(out);
    put_i8(out, TABLE_STATUS);
    put_i16(out, columns.len() as i16);
    for c in columns {
        put_i8(out, column_code(c.ty));
    }
    for c in columns {
        put_string(out, &c.name);
    }
    patch_len(out, header_at);
}

/// Reads one serialized table, checking every length against the bytes it claims.
pub fn decode_table(r: &mut Reader) -> Result<ResultTable> {
    let total = r.i32("table length")?;
    if total < 0 || total as usize > r.remaining() {
        return Err(malformed(format!("table length {total} exceeds the {} bytes left", r.remaining())));
    }
    let end = r.position() + total as usize;
    let header_len = r.i32("table header length")?;
    // A table length under 4 leaves `end` behind the position here.
    if header_len < 0 || header_len as usize > end.saturating_sub(r.position()) {
        return Err(malformed(format!("table header length {header_len} does not fit its table")));
    }
    let header = r.bytes(header_len as usize, "table header")?;
    let columns = header_columns(header)?;
    // Status byte, column count, then one type code per column (checked by the parse).
    let codes = &header[3..3 + columns.len()];
    let nrows = r.i32("row count")?;
    if nrows < 0 {
        return Err(malformed(format!("negative row count {nrows}")));
    }
    // Each row has at least its 4-byte length, so the bytes left bound the row count.
    let mut rows = Vec::with_capacity((nrows as usize).min(r.remaining() / 4));
    for _ in 0..nrows {
        let row_len = r.i32("row length")?;
        let row_start = r.position();
        let mut row = Vec::with_capacity(columns.len());
        for (col, &code) in columns.iter().zip(codes) {
            row.push(scalar::read(r, code as i8, &col.name)?);
        }
        if row_len < 0 || r.position() - row_start != row_len as usize {
            return Err(malformed(format!("row length {row_len} does not match its content")));
        }
        rows.push(row);
    }
    if r.position() != end {
        return Err(malformed("table length does not match its content"));
    }
    Ok(ResultTable { columns, rows })
}

/// Table headers decoded recently on this thread, newest last. A client gets the same few
/// headers over and over (one per statement it runs), so their columns are made once and
/// shared, instead of a name allocated per column per response. Keyed by the exact bytes.
const HEADER_CACHE_ENTRIES: usize = 32;
/// Longer headers are parsed every time, so the cache stays small.
const HEADER_CACHED_BYTES_MAX: usize = 4096;

thread_local! {
    static HEADERS: RefCell<VecDeque<(Box<[u8]>, Arc<[ResultColumn]>)>> =
        RefCell::new(VecDeque::with_capacity(HEADER_CACHE_ENTRIES));
}

/// The columns a table header describes.
pub(crate) fn header_columns(header: &[u8]) -> Result<Arc<[ResultColumn]>> {
    HEADERS.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, columns)) = cache.iter().find(|(h, _)| **h == *header) {
            return Ok(columns.clone());
        }
        let columns = parse_header(header)?;
        if header.len() > HEADER_CACHED_BYTES_MAX {
            return Ok(columns);
        }
        if cache.len() == HEADER_CACHE_ENTRIES {
            cache.pop_front();
        }
        cache.push_back((header.into(), columns.clone()));
        Ok(columns)
    })
}

/// Status byte, column count, column type codes, then column names: all of `header`.
fn parse_header(header: &[u8]) -> Result<Arc<[ResultColumn]>> {
    let mut r = Reader::new(header);
    let _status = r.i8("table status")?;
    let ncols = r.i16("column count")?;
    if ncols < 0 || ncols as usize > COLUMN_COUNT_MAX {
        return Err(malformed(format!("column count {ncols} is outside 0..={COLUMN_COUNT_MAX}")));
    }
    let ncols = ncols as usize;
    let codes = r.bytes(ncols, "column types")?;
    let mut columns = Vec::with_capacity(ncols);
    for &code in codes {
        let ty = DataType::from_wire_code(code as i8)
            .ok_or_else(|| malformed(format!("column type {} is not supported", types::name(code as i8))))?;
        let name = r.required_str("column name")?;
        if name.len() > COLUMN_NAME_MAX_BYTES {
            return Err(malformed("column name too long"));
        }
        columns.push(ResultColumn { name: name.into(), ty });
    }
    if r.remaining() != 0 {
        return Err(malformed(format!("table header length {} does not match its content", header.len())));
    }
    Ok(columns.into())
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
    fn rows_of_long_text_and_bytes_come_back_whole_and_in_order() {
        // More rows than the encoder looks ahead, with values spanning many cache lines.
        let mut t = ResultTable::with_columns(&[("V", DataType::Varbinary), ("K", DataType::Varchar)]);
        let rows: Vec<Vec<Value>> =
            (0..5u8).map(|i| vec![Value::Bytes(vec![i; 3000].into()), Value::from("key-".repeat(20 + i as usize).as_str())]).collect();
        for row in &rows {
            t.push(row.clone());
        }
        let mut out = Vec::new();
        encode_table(&t, &mut out);
        assert_eq!(decode_table(&mut Reader::new(&out)).unwrap().rows, rows);
    }

    #[test]
    fn lying_lengths_are_errors() {
        let mut t = ResultTable::with_columns(&[("A", DataType::Integer)]);
        t.push(vec![Value::Int(3)]);
        let mut out = Vec::new();
        encode_table(&t, &mut out);
        let row_len_at = out.len() - 8;
        out[row_len_at + 3] = 5;
        assert!(decode_table(&mut Reader::new(&out)).unwrap_err().message.contains("row length 5"));
        out[3] += 1;
        assert!(decode_table(&mut Reader::new(&out)).is_err());

        // A table too short for its own header length.
        let mut short = Vec::new();
        short.extend_from_slice(&0i32.to_be_bytes());
        short.extend_from_slice(&0i32.to_be_bytes());
        assert!(decode_table(&mut Reader::new(&short)).is_err());

        // A header length that takes in the row count, or stops inside a name.
        for delta in [4i32, -1] {
            let mut out = Vec::new();
            encode_table(&t, &mut out);
            let header_len = i32::from_be_bytes([out[4], out[5], out[6], out[7]]) + delta;
            out[4..8].copy_from_slice(&header_len.to_be_bytes());
            let e = decode_table(&mut Reader::new(&out)).unwrap_err().message;
            assert!(e.contains("table header length") || e.contains("column name"), "{e}");
        }
    }

    #[test]
    fn a_repeated_header_shares_its_columns_and_another_gets_its_own() {
        let table = |second: &str, v: i64| {
            let mut t = ResultTable::with_columns(&[("ID", DataType::BigInt), (second, DataType::Varchar)]);
            t.push(vec![Value::Int(v), Value::from(second)]);
            let mut out = Vec::new();
            encode_table(&t, &mut out);
            decode_table(&mut Reader::new(&out)).unwrap()
        };
        let (a1, a2, b) = (table("NAME", 1), table("NAME", 2), table("NOTE", 3));
        assert!(Arc::ptr_eq(&a1.columns, &a2.columns), "the second decode reuses the first's columns");
        assert_eq!(a2.rows, vec![vec![Value::Int(2), Value::from("NAME")]]);
        assert!(!Arc::ptr_eq(&a1.columns, &b.columns));
        assert_eq!((&*b.columns[1].name, b.columns[1].ty), ("NOTE", DataType::Varchar));
        assert_eq!(b.rows, vec![vec![Value::Int(3), Value::from("NOTE")]]);
    }

    #[test]
    fn a_header_encoded_from_the_cache_is_the_header_encoded_afresh() {
        let encode = |t: &ResultTable| {
            let mut out = Vec::new();
            encode_table(t, &mut out);
            out
        };
        let shared = ResultTable::with_columns(&[("ID", DataType::BigInt), ("NAME", DataType::Varchar)]);
        let mut first = ResultTable::new(shared.columns.clone());
        first.push(vec![Value::Int(1), Value::from("a")]);
        let mut again = ResultTable::new(shared.columns.clone());
        again.push(vec![Value::Int(1), Value::from("a")]);
        // Equal columns in another allocation: encoded afresh, to the same bytes.
        let mut fresh = ResultTable::with_columns(&[("ID", DataType::BigInt), ("NAME", DataType::Varchar)]);
        fresh.push(vec![Value::Int(1), Value::from("a")]);
        assert_eq!(encode(&first), encode(&fresh));
        assert_eq!(encode(&again), encode(&fresh));
        // Other columns never take a kept header, even many tables later.
        for i in 0..2 * HEADER_CACHE_ENTRIES {
            let name = format!("C{i}");
            let mut t = ResultTable::with_columns(&[(name.as_str(), DataType::Integer)]);
            t.push(vec![Value::Int(i as i64)]);
            let back = decode_table(&mut Reader::new(&encode(&t))).unwrap();
            assert_eq!((&*back.columns[0].name, back.columns[0].ty), (name.as_str(), DataType::Integer));
            assert_eq!(back.rows, t.rows);
        }
        assert_eq!(decode_table(&mut Reader::new(&encode(&again))).unwrap(), again);
    }
}
