//! Segment files: `<data>/cmdlog/segment-<first-seq>.log`, where first-seq is the sequence
//! number (position in the whole log, from 0) of the segment's first record.

use std::path::{Path, PathBuf};

use lockstep_core::{Error, Result};

/// Default size at which the writer starts a new segment.
pub const SEGMENT_SIZE_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Largest segment file a reader accepts (the writer may overshoot the rotation size by
/// one batch, itself bounded); anything bigger is not a segment we wrote.
pub const SEGMENT_FILE_MAX_BYTES: u64 = 1024 * 1024 * 1024;

const PREFIX: &str = "segment-";
const SUFFIX: &str = ".log";

/// The command log directory inside a data directory.
pub fn log_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cmdlog")
}

/// A segment file and the sequence number of its first record.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Segment {
    pub first_seq: u64,
    pub path: PathBuf,
}

/// The path of the segment whose first record is `first_seq`. Zero-padded so that names
/// sort in log order.
pub fn segment_path(dir: &Path, first_seq: u64) -> PathBuf {
    dir.join(format!("{PREFIX}{first_seq:020}{SUFFIX}"))
}

fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?.parse().ok()
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::unexpected(format!("command log: cannot {what} {}: {e}", path.display()))
}

/// The segments in `dir`, in log order; none if the directory does not exist yet.
pub fn list_segments(dir: &Path) -> Result<Vec<Segment>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list", dir, e))?;
        let name = entry.file_name();
        if let Some(first_seq) = name.to_str().and_then(parse_name) {
            out.push(Segment { first_seq, path: entry.path() });
        }
    }
    out.sort();
    Ok(out)
}

/// Deletes every segment whose records all come before `seq` (those a snapshot taken at
/// `seq` covers). The newest segment is never deleted: the writer may be appending to it.
/// Returns how many segments were deleted.
pub fn truncate_before(dir: &Path, seq: u64) -> Result<usize> {
    let segments = list_segments(dir)?;
    let mut deleted = 0;
    for pair in segments.windows(2) {
        // A segment ends where the next begins.
        if pair[1].first_seq > seq {
            break;
        }
        std::fs::remove_file(&pair[0].path).map_err(|e| io_error("delete", &pair[0].path, e))?;
        deleted += 1;
    }
    if deleted > 0 {
        sync_dir(dir)?;
    }
    Ok(deleted)
}

/// Makes file creations and deletions in `dir` durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("sync directory", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdlog::testing::TempDir;

    #[test]
    fn segments_list_in_order_and_truncate_keeps_what_is_needed() {
        let dir = TempDir::new("segments");
        for seq in [0u64, 10, 25, 100] {
            std::fs::write(segment_path(dir.path(), seq), b"").unwrap();
        }
        std::fs::write(dir.path().join("probe.tmp"), b"").unwrap();
        let firsts = |d: &Path| -> Vec<u64> { list_segments(d).unwrap().iter().map(|s| s.first_seq).collect() };
        assert_eq!(firsts(dir.path()), vec![0, 10, 25, 100]);
        assert_eq!(truncate_before(dir.path(), 9).unwrap(), 0);
        // seq 25 is the first record of the third segment: the first two are covered.
        assert_eq!(truncate_before(dir.path(), 25).unwrap(), 2);
        assert_eq!(firsts(dir.path()), vec![25, 100]);
        assert_eq!(truncate_before(dir.path(), 1_000).unwrap(), 1);
        assert_eq!(firsts(dir.path()), vec![100], "the newest segment stays");
        assert_eq!(list_segments(&dir.path().join("missing")).unwrap(), vec![]);
    }
}
