//! The fuzzing entry point of the command log reader: arbitrary bytes become segment files
//! in a fresh directory, which the real `LogReader` opens (cutting a damaged tail) and
//! reads. The fuzz target in `fuzz/` calls it, and this crate's tests replay the inputs
//! that once broke it (kept in `fuzz/regressions/cmdlog/`).
//!
//! Input layout: one flags byte, then the segments' bytes separated by `SEGMENT_SEPARATOR`.
//! - `FLAG_FIX_CHECKSUMS`: frames whose length fits get their true CRC32C written in, so
//!   the fuzzer reaches the record decoder behind the checksum;
//! - `FLAG_CONTIGUOUS_NAMES`: each segment is named after the records before it, as the
//!   writer names them; otherwise segment `i` is named `i`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cmdlog::frame::{read_frame, Frame, FRAME_HEADER_BYTES, RECORD_SIZE_MAX_BYTES};
use crate::cmdlog::reader::LogReader;
use crate::cmdlog::record::Record;
use crate::cmdlog::segment::segment_path;

pub const FLAG_FIX_CHECKSUMS: u8 = 1;
pub const FLAG_CONTIGUOUS_NAMES: u8 = 2;
/// Splits the input into segment files.
pub const SEGMENT_SEPARATOR: &[u8] = b"\xfe\xfeSEGMENT\xfe\xfe";
/// Most segment files made from one input.
const SEGMENTS_MAX: usize = 4;

/// A directory of its own for one fuzz input, removed when dropped (also when the input
/// panics, so a crash leaves nothing behind but the input).
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new(tag: &str) -> std::io::Result<ScratchDir> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("lockstep-fuzz-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(ScratchDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `data` as a command log and reads it back, panicking only when an invariant of
/// the reader breaks.
#[doc(hidden)]
pub fn read_log_from_bytes(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(dir) = ScratchDir::new("cmdlog") else {
        return;
    };
    let mut segments: Vec<Vec<u8>> = split(rest, SEGMENT_SEPARATOR).take(SEGMENTS_MAX).map(<[u8]>::to_vec).collect();
    let mut first_seq = 0u64;
    for (i, seg) in segments.iter_mut().enumerate() {
        if flags & FLAG_FIX_CHECKSUMS != 0 {
            fix_checksums(seg);
        }
        let name = if flags & FLAG_CONTIGUOUS_NAMES != 0 { first_seq } else { i as u64 };
        first_seq += count_records(seg);
        if std::fs::write(segment_path(dir.path(), name), &seg).is_err() {
            return;
        }
    }
    let Some(first) = read_all(dir.path(), data.len()) else {
        return;
    };
    // The damage was cut on the first open: a second one finds none and reads the same.
    let mut reader = match LogReader::open(dir.path()) {
        Ok(r) => r,
        Err(e) => panic!("a log that opened once no longer opens: {e}"),
    };
    assert!(reader.repair().is_none(), "a second open cut the log again: {:?}", reader.repair());
    let second: Vec<String> = reader.by_ref().map(|e| format!("{e:?}")).collect();
    assert_eq!(first, second, "the log reads differently after its tail was cut");
}

/// Every entry of the log in `dir` as text, or None if it does not open. Checks that each
/// entry consumed input and that every record read encodes back to itself.
fn read_all(dir: &Path, input_bytes: usize) -> Option<Vec<String>> {
    let reader = LogReader::open(dir).ok()?;
    let mut out = Vec::new();
    for entry in reader {
        assert!(out.len() <= input_bytes / (FRAME_HEADER_BYTES + 1), "more records than the bytes can hold");
        if let Ok(e) = &entry {
            if let Ok(body) = e.record.encode() {
                let again = Record::decode(&body).map(|r| format!("{r:?}"));
                assert_eq!(again.ok(), Some(format!("{:?}", e.record)), "a record changed through encode and decode");
            }
        }
        out.push(format!("{entry:?}"));
    }
    Some(out)
}

fn split<'a>(data: &'a [u8], sep: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(sep.len()).position(|w| w == sep) {
            Some(at) => {
                rest = Some(&r[at + sep.len()..]);
                Some(&r[..at])
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Writes the true checksum into every frame, from the start, whose length is plausible
/// and whose bytes are all there.
fn fix_checksums(seg: &mut [u8]) {
    let mut at = 0;
    while at + FRAME_HEADER_BYTES <= seg.len() {
        let len = u32::from_be_bytes([seg[at], seg[at + 1], seg[at + 2], seg[at + 3]]) as usize;
        let start = at + FRAME_HEADER_BYTES;
        if len == 0 || len > RECORD_SIZE_MAX_BYTES || seg.len() - start < len {
            return;
        }
        let crc = crc32c::crc32c(&seg[start..start + len]);
        seg[at + 4..start].copy_from_slice(&crc.to_be_bytes());
        at = start + len;
    }
}

/// Intact records at the start of a segment, as the reader will count them.
fn count_records(seg: &[u8]) -> u64 {
    let (mut at, mut n) = (0, 0);
    while let Frame::Record { end, .. } = read_frame(seg, at) {
        at = end;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmdlog::frame::put_frame;
    use crate::cmdlog::testing::{rec, replay_fuzz_regressions};

    #[test]
    fn every_fuzz_regression_input_reads_without_a_panic_or_a_large_allocation() {
        replay_fuzz_regressions("cmdlog", read_log_from_bytes);
    }

    #[test]
    fn checksums_are_fixed_and_segments_named_in_sequence() {
        let mut seg = Vec::new();
        put_frame(&mut seg, &rec(1).encode().unwrap());
        put_frame(&mut seg, &rec(2).encode().unwrap());
        let mut broken = seg.clone();
        broken[4] ^= 0xff;
        fix_checksums(&mut broken);
        assert_eq!(broken, seg);
        assert_eq!(count_records(&seg), 2);
        let mut data = vec![FLAG_FIX_CHECKSUMS | FLAG_CONTIGUOUS_NAMES];
        data.extend_from_slice(&seg);
        data.extend_from_slice(SEGMENT_SEPARATOR);
        data.extend_from_slice(&seg[..seg.len() - 3]);
        read_log_from_bytes(&data);
        let parts: Vec<&[u8]> = split(&data[1..], SEGMENT_SEPARATOR).collect();
        assert_eq!(parts, vec![&seg[..], &seg[..seg.len() - 3]]);
    }
}
