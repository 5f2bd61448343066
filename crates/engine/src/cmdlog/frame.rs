//! Framing of one record on disk: u32 body length, u32 CRC32C of the body, the body.
//!
//! The checksum lets recovery tell a record that reached the disk whole from a torn write
//! (a crash mid-write) or a corrupted sector.

/// Bytes before a record's body: its length and its checksum.
pub const FRAME_HEADER_BYTES: usize = 8;
/// Largest record body; a longer length field means a corrupt or torn frame.
pub const RECORD_SIZE_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Appends `body` framed.
pub fn put_frame(out: &mut Vec<u8>, body: &[u8]) {
    debug_assert!(!body.is_empty() && body.len() <= RECORD_SIZE_MAX_BYTES);
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32c::crc32c(body).to_be_bytes());
    out.extend_from_slice(body);
}

/// Bytes `body` takes once framed.
pub fn framed_len(body: &[u8]) -> usize {
    FRAME_HEADER_BYTES + body.len()
}

/// What lies at an offset of a segment.
#[derive(Debug, PartialEq)]
pub enum Frame<'a> {
    /// A whole, intact record: its body and the offset just after it.
    Record { body: &'a [u8], end: usize },
    /// The records end here: the buffer does, or only zeros follow (a segment is written
    /// into zeros laid down ahead of its records).
    End,
    /// Not an intact record; the reason, and where the frame claims to end if its length
    /// field was plausible and the bytes are all there (so later frames can be examined).
    Bad { reason: String, claimed_end: Option<usize> },
}

fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_be_bytes(b)
}

/// Reads the frame starting at `at`.
pub fn read_frame(buf: &[u8], at: usize) -> Frame<'_> {
    let left = buf.len().saturating_sub(at);
    // No record has a zero length, so a zero tail cannot hide one (a torn write leaves
    // nonzero bytes of its frame, which is damage as before).
    if buf[at.min(buf.len())..].iter().all(|&b| b == 0) {
        return Frame::End;
    }
    if left < FRAME_HEADER_BYTES {
        return Frame::Bad { reason: format!("a frame header is cut short ({left} of {FRAME_HEADER_BYTES} bytes)"), claimed_end: None };
    }
    let len = u32_at(buf, at) as usize;
    let crc = u32_at(buf, at + 4);
    if len == 0 || len > RECORD_SIZE_MAX_BYTES {
        return Frame::Bad { reason: format!("bad record length {len} (limit {RECORD_SIZE_MAX_BYTES} bytes)"), claimed_end: None };
    }
    let start = at + FRAME_HEADER_BYTES;
    if left - FRAME_HEADER_BYTES < len {
        return Frame::Bad {
            reason: format!("a record of {len} bytes is cut short ({} bytes present)", left - FRAME_HEADER_BYTES),
            claimed_end: None,
        };
    }
    let body = &buf[start..start + len];
    let end = start + len;
    if crc32c::crc32c(body) != crc {
        return Frame::Bad { reason: "checksum mismatch".into(), claimed_end: Some(end) };
    }
    Frame::Record { body, end }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_report_damage() {
        let mut buf = Vec::new();
        put_frame(&mut buf, b"hello");
        put_frame(&mut buf, b"world!");
        assert_eq!(buf.len(), framed_len(b"hello") + framed_len(b"world!"));
        assert_eq!(read_frame(&buf, 0), Frame::Record { body: b"hello", end: 13 });
        assert_eq!(read_frame(&buf, 13), Frame::Record { body: b"world!", end: 27 });
        assert_eq!(read_frame(&buf, 27), Frame::End);
        let bad = |b: &[u8], at| match read_frame(b, at) {
            Frame::Bad { reason, claimed_end } => (reason, claimed_end),
            other => panic!("expected a bad frame, got {other:?}"),
        };
        assert_eq!(bad(&buf[..20], 13), ("a frame header is cut short (7 of 8 bytes)".into(), None));
        assert_eq!(bad(&buf[..25], 13), ("a record of 6 bytes is cut short (4 bytes present)".into(), None));
        let mut flipped = buf.clone();
        flipped[10] ^= 1;
        assert_eq!(bad(&flipped, 0), ("checksum mismatch".into(), Some(13)));
        // Zeros after the records are the end (written ahead); zeros before more bytes are
        // damage.
        let mut ahead = buf.clone();
        ahead.extend_from_slice(&[0u8; 100]);
        assert_eq!(read_frame(&ahead, 27), Frame::End);
        assert_eq!(read_frame(&[0u8; 5], 0), Frame::End);
        ahead.push(1);
        assert_eq!(bad(&ahead, 27).0, format!("bad record length 0 (limit {RECORD_SIZE_MAX_BYTES} bytes)"));
    }
}
