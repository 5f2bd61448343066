//! Invocation responses (§1.5): status, optional strings, round-trip time, result tables.

use lockstep_core::{Error, Result, ResultTable};

use crate::codec::{begin_len, malformed, patch_len, put_i16, put_i32, put_i64, put_i8, put_string, Reader};
use crate::table::{decode_table, encode_table};

/// Most result tables in one response (the int16 count's range).
pub const TABLE_COUNT_MAX: usize = 32767;
/// Longest status or app-status string we accept.
pub const STATUS_STRING_MAX_BYTES: usize = 1 << 20;

const FLAG_APP_STATUS_STRING: u8 = 0x80;
const FLAG_SERIALIZED_EXCEPTION: u8 = 0x40;
const FLAG_STATUS_STRING: u8 = 0x20;
const FLAG_HASHES: u8 = 0x10;

/// `ClientResponse` status codes.
pub mod status {
    pub const SUCCESS: i8 = 1;
    pub const USER_ABORT: i8 = -1;
    pub const GRACEFUL_FAILURE: i8 = -2;
    pub const UNEXPECTED_FAILURE: i8 = -3;
    pub const CONNECTION_LOST: i8 = -4;
    pub const SERVER_UNAVAILABLE: i8 = -5;
    pub const CONNECTION_TIMEOUT: i8 = -6;
    pub const RESPONSE_UNKNOWN: i8 = -7;
    /// The app status when the procedure set none.
    pub const APP_STATUS_UNSET: i8 = -128;
}

/// The answer to one invocation.
#[derive(Clone, Debug, PartialEq)]
pub struct Response {
    pub handle: i64,
    pub status: i8,
    pub status_string: Option<String>,
    pub app_status: i8,
    pub app_status_string: Option<String>,
    pub cluster_round_trip_ms: i32,
    pub tables: Vec<ResultTable>,
}

impl Response {
    /// A SUCCESS response carrying `tables`.
    pub fn success(handle: i64, tables: Vec<ResultTable>) -> Self {
        Response {
            handle,
            status: status::SUCCESS,
            status_string: None,
            app_status: status::APP_STATUS_UNSET,
            app_status_string: None,
            cluster_round_trip_ms: 0,
            tables,
        }
    }

    /// A failure response carrying the error's status and message.
    pub fn error(handle: i64, err: &Error) -> Self {
        Response { status: err.kind.status_code(), status_string: Some(err.message.clone()), ..Response::success(handle, Vec::new()) }
    }
}

/// Appends a whole response frame (length prefix included) and returns the frame's size, so
/// a server can batch many responses into one write and check them against the frame limit.
pub fn encode_response(r: &Response, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    let at = begin_len(out);
    put_i8(out, 0);
    put_i64(out, r.handle);
    let mut flags = 0u8;
    if r.status_string.is_some() {
        flags |= FLAG_STATUS_STRING;
    }
    if r.app_status_string.is_some() {
        flags |= FLAG_APP_STATUS_STRING;
    }
    put_i8(out, flags as i8);
    put_i8(out, r.status);
    if let Some(s) = &r.status_string {
        put_string(out, s);
    }
    put_i8(out, r.app_status);
    if let Some(s) = &r.app_status_string {
        put_string(out, s);
    }
    put_i32(out, r.cluster_round_trip_ms);
    debug_assert!(r.tables.len() <= TABLE_COUNT_MAX, "too many result tables");
    let tables = &r.tables[..r.tables.len().min(TABLE_COUNT_MAX)];
    put_i16(out, tables.len() as i16);
    for t in tables {
        encode_table(t, out);
    }
    patch_len(out, at);
    out.len() - start
}

fn bounded_string(r: &mut Reader, what: &str) -> Result<String> {
    let s = r.string(what)?.unwrap_or_default();
    if s.len() > STATUS_STRING_MAX_BYTES {
        return Err(malformed(format!("{what} longer than {STATUS_STRING_MAX_BYTES} bytes")));
    }
    Ok(s)
}

/// Decodes a response frame's payload.
pub fn decode_response(payload: &[u8]) -> Result<Response> {
    let (head, tables) = decode_with(payload, decode_table)?;
    let Head { handle, status, status_string, app_status, app_status_string, cluster_round_trip_ms, .. } = head;
    Ok(Response { handle, status, status_string, app_status, app_status_string, cluster_round_trip_ms, tables })
}

/// A response payload's head and its tables, each read by `table`, with nothing left over.
/// The tables are collected as they are read: no room is reserved from the untrusted count.
pub(crate) fn decode_with<T, C: FromIterator<T>>(payload: &[u8], mut table: impl FnMut(&mut Reader) -> Result<T>) -> Result<(Head, C)> {
    let mut r = Reader::new(payload);
    let head = decode_head(&mut r)?;
    let tables = (0..head.table_count).map(|_| table(&mut r)).collect::<Result<C>>()?;
    r.expect_end("the result tables")?;
    Ok((head, tables))
}

/// Everything of a response before its tables.
pub(crate) struct Head {
    pub(crate) handle: i64,
    pub(crate) status: i8,
    pub(crate) status_string: Option<String>,
    pub(crate) app_status: i8,
    pub(crate) app_status_string: Option<String>,
    pub(crate) cluster_round_trip_ms: i32,
    pub(crate) table_count: usize,
}

fn decode_head(r: &mut Reader) -> Result<Head> {
    let _version = r.i8("response version")?;
    let handle = r.i64("client handle")?;
    let flags = r.u8("response flags")?;
    if flags & (FLAG_SERIALIZED_EXCEPTION | FLAG_HASHES) != 0 {
        return Err(malformed(format!("response flags {flags:#04x} carry fields we do not support")));
    }
    let status = r.i8("status")?;
    let status_string = if flags & FLAG_STATUS_STRING != 0 { Some(bounded_string(r, "status string")?) } else { None };
    let app_status = r.i8("app status")?;
    let app_status_string = if flags & FLAG_APP_STATUS_STRING != 0 { Some(bounded_string(r, "app status string")?) } else { None };
    let cluster_round_trip_ms = r.i32("cluster round-trip time")?;
    let count = r.i16("table count")?;
    if count < 0 {
        return Err(malformed(format!("negative table count {count}")));
    }
    Ok(Head { handle, status, status_string, app_status, app_status_string, cluster_round_trip_ms, table_count: count as usize })
}

/// The client handle a response payload answers, read without decoding the rest.
pub fn response_handle(payload: &[u8]) -> Result<i64> {
    let mut r = Reader::new(payload);
    let _version = r.i8("response version")?;
    r.i64("client handle")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_responses_carry_status_and_message() {
        let r = Response::error(3, &Error::constraint("duplicate key"));
        let mut out = Vec::new();
        let n = encode_response(&r, &mut out);
        assert_eq!(n, out.len());
        let back = decode_response(&out[4..]).unwrap();
        assert_eq!(back.status, status::GRACEFUL_FAILURE);
        assert_eq!(back.status_string.as_deref(), Some("duplicate key"));
        assert_eq!(back, r);
    }

    #[test]
    fn unsupported_flags_are_refused() {
        let mut out = Vec::new();
        encode_response(&Response::success(1, vec![]), &mut out);
        out[4 + 9] = 0x40;
        assert!(decode_response(&out[4..]).is_err());
    }
}
