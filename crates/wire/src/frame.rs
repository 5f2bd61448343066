//! Message framing: every message is an int32 length followed by that many bytes.

use bytes::{Buf, BytesMut};
use lockstep_core::Result;

use crate::codec::{begin_len, malformed, patch_len};

/// Largest frame either side accepts (50 MiB), as the VoltDB client and server do.
pub const FRAME_SIZE_MAX_BYTES: usize = 52_428_800;

/// Takes one complete frame's payload off the front of `buf`: `Ok(None)` when more bytes are
/// needed, `Err` when the length prefix is < 1 or > `FRAME_SIZE_MAX_BYTES` (drop the connection).
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<BytesMut>> {
    decode_frame_with_limit(buf, FRAME_SIZE_MAX_BYTES)
}

/// `decode_frame` with a smaller limit (login frames, for example, are tiny).
pub fn decode_frame_with_limit(buf: &mut BytesMut, max_bytes: usize) -> Result<Option<BytesMut>> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if len < 1 || len as usize > max_bytes {
        return Err(malformed(format!("frame length {len} is outside 1..={max_bytes}")));
    }
    let len = len as usize;
    if buf.len() < 4 + len {
        // No reserve for the announced length: a peer could announce 50 MiB and send 4 bytes.
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len)))
}

/// Appends a frame (length prefix + payload) to `out`.
pub fn write_frame(payload: &[u8], out: &mut Vec<u8>) {
    let at = begin_len(out);
    out.extend_from_slice(payload);
    patch_len(out, at);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_come_out_whole_and_in_order() {
        let mut buf = BytesMut::from(&[0, 0, 0, 2, 0xa, 0xb, 0, 0, 0, 1][..]);
        assert_eq!(&decode_frame(&mut buf).unwrap().unwrap()[..], &[0xa, 0xb]);
        assert_eq!(decode_frame(&mut buf).unwrap(), None);
        buf.extend_from_slice(&[0xc, 0, 0]);
        assert_eq!(&decode_frame(&mut buf).unwrap().unwrap()[..], &[0xc]);
        assert_eq!(decode_frame(&mut buf).unwrap(), None);
        assert_eq!(&buf[..], &[0, 0]);
    }

    #[test]
    fn bad_lengths_are_errors() {
        for prefix in [[0u8, 0, 0, 0], [0xff, 0xff, 0xff, 0xff], [0x03, 0x20, 0x00, 0x01]] {
            let mut buf = BytesMut::from(&prefix[..]);
            assert!(decode_frame(&mut buf).is_err(), "{prefix:?}");
        }
        let mut buf = BytesMut::from(&[0x03u8, 0x20, 0x00, 0x00][..]);
        assert_eq!(decode_frame(&mut buf).unwrap(), None, "exactly the maximum is allowed");
    }

    #[test]
    fn write_frame_prefixes_the_length() {
        let mut out = Vec::new();
        write_frame(b"abc", &mut out);
        assert_eq!(out, vec![0, 0, 0, 3, b'a', b'b', b'c']);
    }
}
