//! The fuzzing entry point of the wire decoders: one function that feeds arbitrary bytes to
//! every public decoder and checks what must hold for any input. The fuzz targets in
//! `fuzz/` call it, and this crate's tests replay the inputs that once broke it (kept in
//! `fuzz/regressions/wire/`), so the fuzzer is not needed to keep them fixed.
//!
//! A decoder may return an error for any input; it must not panic, loop without consuming
//! input, or disagree with another decoder of the same bytes.

use bytes::{Bytes, BytesMut};

use crate::codec::Reader;
use crate::{
    decode_frame, decode_frame_with_limit, decode_invocation, decode_invocation_typed, decode_login_request, decode_login_response,
    decode_params, decode_response, decode_table, encode_invocation_typed, encode_response, response_handle, ResponseView,
};

/// Any fuzz input may use this much in one allocation (buffers of fixed size, catalogs).
pub const ALLOC_BASE_BYTES: usize = 1024 * 1024;
/// And this much more per byte of input (a decoded copy grows by doubling, a few times over).
pub const ALLOC_PER_INPUT_BYTE: usize = 16;

/// The largest single allocation an input of `input_len` bytes justifies, for the fuzz
/// targets and for the tests that replay their regressions: more means something reserved
/// what a length field claimed before its bytes were there.
pub fn allocation_limit_bytes(input_len: usize) -> usize {
    ALLOC_BASE_BYTES.saturating_add(input_len.saturating_mul(ALLOC_PER_INPUT_BYTE))
}

/// How many decoders the first input byte chooses among.
const DECODER_COUNT: u8 = 7;
/// The smaller frame limit tried beside the real one (a login frame's, for example).
const SMALL_FRAME_LIMIT_BYTES: usize = 64;

/// Decodes `data` with the decoder its first byte chooses, panicking only when an
/// invariant of the decoders breaks (a decoder's own panic propagates as well).
#[doc(hidden)]
pub fn decode_any(data: &[u8]) {
    let Some((&selector, payload)) = data.split_first() else {
        return;
    };
    match selector % DECODER_COUNT {
        0 => frames(payload),
        1 => login(payload),
        2 => invocation(payload),
        3 => params(payload),
        4 => tables(payload),
        5 => response(payload),
        _ => {
            let _ = response_handle(payload);
        }
    }
}

/// A byte stream cut into frames: each frame taken consumes its prefix and payload.
fn frames(payload: &[u8]) {
    for limit in [crate::FRAME_SIZE_MAX_BYTES, SMALL_FRAME_LIMIT_BYTES] {
        let mut buf = BytesMut::from(payload);
        loop {
            let before = buf.len();
            match decode_frame_with_limit(&mut buf, limit) {
                Ok(Some(frame)) => assert_eq!(before - buf.len(), 4 + frame.len(), "a frame consumed other than its bytes"),
                Ok(None) | Err(_) => break,
            }
        }
    }
    let mut buf = BytesMut::from(payload);
    while let Ok(Some(_)) = decode_frame(&mut buf) {}
}

fn login(payload: &[u8]) {
    let _ = decode_login_request(payload);
    let _ = decode_login_response(payload);
}

/// An invocation that decodes re-encodes (as the command log does with every call it logs)
/// and decodes to the same call.
fn invocation(payload: &[u8]) {
    let plain = decode_invocation(payload);
    let Ok((inv, codes)) = decode_invocation_typed(payload) else {
        assert!(plain.is_err(), "the typed and plain decoders disagree");
        return;
    };
    assert_eq!(plain.as_ref().map(|p| format!("{p:?}")).ok(), Some(format!("{inv:?}")), "the typed and plain decoders disagree");
    let mut out = Vec::new();
    if encode_invocation_typed(&inv, &codes, &mut out).is_err() {
        return;
    }
    let again = decode_invocation(&out[4..]).map(|i| format!("{i:?}"));
    assert_eq!(again.ok(), Some(format!("{inv:?}")), "an invocation changed through encode and decode");
}

fn params(payload: &[u8]) {
    let mut r = Reader::new(payload);
    let _ = decode_params(&mut r);
}

/// Tables back to back, as in a response: each one decoded consumes its bytes.
fn tables(payload: &[u8]) {
    let mut r = Reader::new(payload);
    while r.remaining() > 0 {
        let before = r.remaining();
        if decode_table(&mut r).is_err() {
            break;
        }
        assert!(r.remaining() < before, "a table decoded from no bytes");
    }
}

/// A response read whole and in place: where both succeed they agree, and every cell the
/// in-place view offers reads without a panic.
fn response(payload: &[u8]) {
    let whole = decode_response(payload);
    let Ok(view) = ResponseView::parse(Bytes::copy_from_slice(payload)) else {
        assert!(whole.is_err(), "a response decodes whole but its layout was refused");
        return;
    };
    read_every_cell(&view);
    // Debug text compares NaN floats as equal, which `PartialEq` does not.
    let in_place = view.to_response().map(|r| format!("{r:?}")).ok();
    assert_eq!(in_place, whole.as_ref().map(|r| format!("{r:?}")).ok(), "the whole and in-place decoders disagree");
    if let Ok(r) = whole {
        let mut out = Vec::new();
        encode_response(&r, &mut out);
        assert!(decode_response(&out[4..]).is_ok(), "a decoded response does not decode after re-encoding");
    }
}

fn read_every_cell(view: &ResponseView) {
    for t in (0..view.table_count()).filter_map(|i| view.table(i)) {
        let width = t.columns().len();
        for row in t.rows() {
            for c in 0..=width {
                let _ = row.value(c);
                let _ = row.int(c);
                let _ = row.str(c);
            }
            let _ = row.values();
        }
        let _ = t.row(t.row_count());
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use lockstep_core::{DataType, ResultTable, Value};

    use super::*;
    use crate::{encode_invocation, Invocation, Response};

    /// `fuzz/regressions/wire` of the repository: every input that once broke a decoder.
    fn regressions_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/wire")
    }

    #[test]
    fn every_fuzz_regression_input_decodes_without_a_panic() {
        let Ok(entries) = std::fs::read_dir(regressions_dir()) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            if std::panic::catch_unwind(|| decode_any(&data)).is_err() {
                panic!("fuzz regression {} fails again", path.display());
            }
        }
    }

    #[test]
    fn real_messages_pass_every_check() {
        let mut inv = Vec::new();
        encode_invocation(&Invocation::new("Vote", 9, vec![Value::Int(5), Value::from("NY"), Value::Null]), &mut inv).unwrap();
        let mut t = ResultTable::with_columns(&[("n", DataType::BigInt), ("s", DataType::Varchar)]);
        t.push(vec![Value::Int(1), Value::from("a")]);
        let mut resp = Vec::new();
        encode_response(&Response::success(3, vec![t]), &mut resp);
        for (selector, payload) in [(0u8, &inv[..]), (2, &inv[4..]), (5, &resp[4..]), (4, &resp[22..])] {
            let mut data = vec![selector];
            data.extend_from_slice(payload);
            decode_any(&data);
        }
    }
}
