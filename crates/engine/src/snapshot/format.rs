//! The partition file format: a fixed header, then sections, each `u8 kind, u32 length,
//! u32 CRC32C of the body, body`:
//! - TABLE: table name, column count (u16), each column's VoltType code;
//! - ROWS: row count (u32), then each value in the wire codec's encoding for its column
//!   type (NULL as the type's sentinel);
//! - END: the number of tables and rows, so a file cut after a whole section is detected;
//! - EXPORT (only in a cluster's rejoin image, before END): one export target's numbering
//!   on the leader — its next sequence number — and a run of the rows its target has not
//!   acknowledged, as the leader's segment files hold them (JSON lines without their
//!   newline). A target's rows may span several sections, in order.

use lockstep_core::{DataType, Error, Result, Value};
use lockstep_wire::codec::{put_i16, put_i32, put_i64, put_i8, put_string, put_varbinary, Reader};
use lockstep_wire::scalar;

/// Identifies a partition snapshot file and its format version.
pub const MAGIC: &[u8; 8] = b"LKSNAP\x00\x01";
/// Magic, partition (u32), transaction id (i64).
pub const HEADER_BYTES: usize = 8 + 4 + 8;
/// Section kind, length, checksum.
pub const SECTION_HEADER_BYTES: usize = 9;
/// Largest section body a reader accepts.
pub const SECTION_SIZE_MAX_BYTES: usize = 64 * 1024 * 1024;
/// Most columns a table can have (VoltDB's limit).
pub const COLUMN_COUNT_MAX: usize = 1024;

pub const KIND_TABLE: u8 = 1;
pub const KIND_ROWS: u8 = 2;
pub const KIND_END: u8 = 3;
pub const KIND_EXPORT: u8 = 4;

/// What a partition file yields, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum SnapshotItem {
    /// The rows that follow, until the next table, belong to this table.
    Table {
        name: String,
        types: Vec<DataType>,
    },
    Rows(Vec<Vec<Value>>),
    /// Export rows of a rejoin image (`KIND_EXPORT`).
    Export(ExportChunk),
}

/// One EXPORT section: rows `lines` of export target `target`, whose next sequence number
/// on the leader was `next_seq` when the image was taken.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportChunk {
    pub target: String,
    pub next_seq: u64,
    pub lines: Vec<Vec<u8>>,
}

pub fn corrupt(what: impl std::fmt::Display) -> Error {
    Error::unexpected(format!("snapshot is corrupt: {what}"))
}

pub fn encode_header(partition: u32, txn_id: i64) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put_i32(&mut out, partition as i32);
    put_i64(&mut out, txn_id);
    out
}

/// (partition, transaction id) of a header.
pub fn decode_header(b: &[u8]) -> Result<(u32, i64)> {
    if b.len() != HEADER_BYTES || &b[..8] != MAGIC {
        return Err(corrupt("not a partition snapshot file (bad header)"));
    }
    let mut r = Reader::new(&b[8..]);
    Ok((r.i32("partition")? as u32, r.i64("transaction id")?))
}

/// Frames a section.
pub fn section(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SECTION_HEADER_BYTES + body.len());
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    out.extend_from_slice(body);
    out
}

/// (kind, length, checksum) of a section header.
pub fn decode_section_header(b: &[u8; SECTION_HEADER_BYTES]) -> Result<(u8, usize, u32)> {
    let kind = b[0];
    let len = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
    let crc = u32::from_be_bytes([b[5], b[6], b[7], b[8]]);
    if !(KIND_TABLE..=KIND_EXPORT).contains(&kind) {
        return Err(corrupt(format!("unknown section kind {kind}")));
    }
    if len > SECTION_SIZE_MAX_BYTES {
        return Err(corrupt(format!("section of {len} bytes is over {SECTION_SIZE_MAX_BYTES}")));
    }
    Ok((kind, len, crc))
}

pub fn encode_table(name: &str, types: &[DataType]) -> Result<Vec<u8>> {
    if types.len() > COLUMN_COUNT_MAX {
        return Err(Error::unexpected(format!("table {name} has {} columns", types.len())));
    }
    let mut out = Vec::new();
    put_string(&mut out, name);
    put_i16(&mut out, types.len() as i16);
    for t in types {
        put_i8(&mut out, t.wire_code());
    }
    Ok(out)
}

pub fn decode_table(body: &[u8]) -> Result<SnapshotItem> {
    let mut r = Reader::new(body);
    let name = r.required_string("table name")?;
    let n = r.i16("column count")?;
    // A catalog table has at least one column; rows of none would take no bytes to claim.
    if n < 1 || n as usize > COLUMN_COUNT_MAX {
        return Err(corrupt(format!("table {name} has {n} columns")));
    }
    let mut types = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let code = r.i8("column type")?;
        types.push(DataType::from_wire_code(code).ok_or_else(|| corrupt(format!("column type code {code}")))?);
    }
    r.expect_end("table section")?;
    Ok(SnapshotItem::Table { name, types })
}

/// Appends one row's values, encoded by column type.
pub fn encode_row(out: &mut Vec<u8>, types: &[DataType], row: &[Value]) -> Result<()> {
    if row.len() != types.len() {
        return Err(Error::unexpected(format!("snapshot row has {} values for {} columns", row.len(), types.len())));
    }
    for (v, t) in row.iter().zip(types) {
        if !scalar::write(out, t.wire_code(), v) {
            return Err(Error::unexpected(format!("snapshot cannot store {} in a {t} column", v.describe())));
        }
    }
    Ok(())
}

/// A ROWS section being decoded a few rows at a time (`take`): a restart stores each
/// handful of rows while its values are still in cache, instead of first decoding a whole
/// section into values ten times its size.
#[derive(Debug)]
pub struct RowSection {
    body: Vec<u8>,
    /// Where the next row begins in `body`.
    at: usize,
    /// Rows not yet taken.
    left: usize,
    codes: Vec<i8>,
}

impl RowSection {
    /// Checks the section's row count against its bytes before anything is reserved.
    pub fn new(body: Vec<u8>, types: &[DataType]) -> Result<RowSection> {
        let mut r = Reader::new(&body);
        let n = r.i32("row count")? as u32 as usize;
        // Every row takes at least the smallest encoding of each of its values (and at least a
        // byte), so the bytes left bound the count before anything is reserved or looped over.
        let row_bytes_min = types.iter().map(|&t| encoded_bytes_min(t)).sum::<usize>().max(1);
        if n > r.remaining() / row_bytes_min {
            return Err(corrupt(format!("a row section claims {n} rows but holds {} bytes", body.len())));
        }
        let at = r.position();
        // Looked up once, not per value: a restart decodes tens of millions of values.
        let codes = types.iter().map(|t| t.wire_code()).collect();
        Ok(RowSection { body, at, left: n, codes })
    }

    /// Rows not yet taken.
    pub fn left(&self) -> usize {
        self.left
    }

    /// Decodes the next `max` rows (fewer at the section's end, which is then checked to
    /// hold nothing more).
    pub fn take(&mut self, max: usize) -> Result<Vec<Vec<Value>>> {
        let mut r = Reader::new(&self.body[self.at..]);
        let n = max.min(self.left);
        let mut rows = Vec::with_capacity(n);
        for _ in 0..n {
            let mut row = Vec::with_capacity(self.codes.len());
            for &code in &self.codes {
                row.push(scalar::read(&mut r, code, "value")?);
            }
            rows.push(row);
        }
        self.left -= n;
        if self.left == 0 {
            r.expect_end("row section")?;
        }
        self.at += r.position();
        Ok(rows)
    }
}

/// A whole ROWS section's rows.
#[cfg(test)]
pub fn decode_rows(body: &[u8], types: &[DataType]) -> Result<Vec<Vec<Value>>> {
    let mut section = RowSection::new(body.to_vec(), types)?;
    section.take(usize::MAX)
}

/// The fewest bytes a value of type `t` takes (a NULL takes as many as any other value).
fn encoded_bytes_min(t: DataType) -> usize {
    match t {
        DataType::TinyInt | DataType::Boolean => 1,
        DataType::SmallInt => 2,
        DataType::Integer | DataType::Varchar | DataType::Varbinary | DataType::Geography => 4,
        DataType::BigInt | DataType::Float | DataType::Timestamp => 8,
        DataType::Decimal | DataType::GeographyPoint => 16,
    }
}

/// An EXPORT section's body: the target, its next sequence number, then each line with
/// its length.
pub fn encode_export(chunk: &ExportChunk) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    put_string(&mut out, &chunk.target);
    put_i64(&mut out, chunk.next_seq as i64);
    put_i32(&mut out, chunk.lines.len() as i32);
    for line in &chunk.lines {
        put_varbinary(&mut out, line);
    }
    if out.len() > SECTION_SIZE_MAX_BYTES {
        return Err(Error::unexpected(format!(
            "export rows of target {} take {} bytes, over a section's {SECTION_SIZE_MAX_BYTES}",
            chunk.target,
            out.len()
        )));
    }
    Ok(out)
}

pub fn decode_export(body: &[u8]) -> Result<ExportChunk> {
    let mut r = Reader::new(body);
    let target = r.required_string("export target")?;
    let next_seq = r.i64("next sequence number")?;
    let next_seq = u64::try_from(next_seq).map_err(|_| corrupt(format!("export target {target}: next sequence number {next_seq}")))?;
    let n = r.i32("line count")? as u32 as usize;
    // Each line takes at least its 4-byte length: the bytes left bound the count.
    if n > r.remaining() / 4 {
        return Err(corrupt(format!("an export section claims {n} rows but holds {} bytes", body.len())));
    }
    let mut lines = Vec::with_capacity(n);
    for _ in 0..n {
        let line = r.varbinary("export row")?.ok_or_else(|| corrupt(format!("export target {target}: a NULL row")))?;
        lines.push(line.to_vec());
    }
    r.expect_end("export section")?;
    Ok(ExportChunk { target, next_seq, lines })
}

pub fn encode_end(tables: u64, rows: u64) -> Vec<u8> {
    let mut out = Vec::new();
    put_i64(&mut out, tables as i64);
    put_i64(&mut out, rows as i64);
    out
}

pub fn decode_end(body: &[u8]) -> Result<(u64, u64)> {
    let mut r = Reader::new(body);
    let out = (r.i64("table count")? as u64, r.i64("row count")? as u64);
    r.expect_end("end section")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdlog::testing::largest_allocation;

    /// Found while writing the snapshot fuzz target: a table of no columns let a row count
    /// of billions loop without reading a byte, growing a vector of empty rows.
    #[test]
    fn a_table_without_columns_is_refused() {
        let body = encode_table("T", &[]).unwrap();
        assert!(decode_table(&body).unwrap_err().message.contains("table T has 0 columns"));
        let (rows, largest) = largest_allocation(|| decode_rows(&[0xff, 0xff, 0xff, 0xff], &[]));
        assert!(rows.unwrap_err().message.contains("claims 4294967295 rows but holds 4 bytes"));
        assert!(largest < 1024, "{largest} bytes reserved");
    }

    #[test]
    fn an_export_section_round_trips_and_its_line_count_is_bounded_by_its_bytes() {
        let chunk = ExportChunk { target: "HOOK".into(), next_seq: 42, lines: vec![b"{\"seq\":40}".to_vec(), b"{\"seq\":41}".to_vec()] };
        let mut body = encode_export(&chunk).unwrap();
        assert_eq!(decode_export(&body).unwrap(), chunk);
        // The count sits after the target (4 + 4 bytes) and the sequence number (8).
        body[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
        let (r, largest) = largest_allocation(|| decode_export(&body));
        assert!(r.unwrap_err().message.contains("claims 4294967295 rows"));
        assert!(largest < 1024, "{largest} bytes reserved");
    }

    #[test]
    fn a_row_count_is_bounded_by_the_bytes_its_rows_need() {
        let types = [DataType::BigInt, DataType::Varchar];
        let mut body = 3u32.to_be_bytes().to_vec();
        for i in 0..3 {
            encode_row(&mut body, &types, &[Value::Int(i), Value::Null]).unwrap();
        }
        assert_eq!(decode_rows(&body, &types).unwrap().len(), 3);
        // 12 bytes per row at least: 36 bytes hold 3 rows, not 4, and nothing is reserved
        // for the rows claimed.
        body[3] = 4;
        let (rows, largest) = largest_allocation(|| decode_rows(&body, &types));
        assert!(rows.unwrap_err().message.contains("claims 4 rows but holds 40 bytes"));
        assert!(largest < 1024, "{largest} bytes reserved");
        body[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        let (rows, largest) = largest_allocation(|| decode_rows(&body, &types));
        assert!(rows.is_err());
        assert!(largest < 1024, "{largest} bytes reserved");
    }
}
