//! Reading the command log back: every record of every segment, in order, with its
//! sequence number.
//!
//! A crash can leave the newest segment with a torn or corrupt tail. `LogReader::open`
//! finds it, cuts the file back to the last intact record (so the writer appends after
//! it) and reports what was dropped. Damage in an older segment is different: it holds
//! committed history, so reading stops with an error instead of silently skipping it.

use std::fmt;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use lockstep_core::{Error, Result};

use crate::cmdlog::frame::{read_frame, Frame};
use crate::cmdlog::record::Record;
use crate::cmdlog::segment::{list_segments, Segment, SEGMENT_FILE_MAX_BYTES};

/// One record read back, with its position in the whole log.
#[derive(Clone, Debug, PartialEq)]
pub struct LogEntry {
    pub seq: u64,
    pub record: Record,
}

/// What cutting a damaged tail dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailRepair {
    pub file: PathBuf,
    /// Where the damage starts; the file now ends here.
    pub offset: u64,
    pub bytes_dropped: u64,
    /// Intact records found after the damage and dropped with it (a torn write leaves
    /// none; more means real corruption in the middle of the segment).
    pub intact_records_dropped: u64,
    /// Intact records kept before the damage, in this segment.
    pub records_kept: u64,
    pub reason: String,
}

impl fmt::Display for TailRepair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "command log {}: {} at byte {}; cut the file there, dropping {} bytes ({} intact \
             records after the damage); {} records before it kept",
            self.file.display(),
            self.reason,
            self.offset,
            self.bytes_dropped,
            self.intact_records_dropped,
            self.records_kept
        )
    }
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::unexpected(format!("command log: cannot {what} {}: {e}", path.display()))
}

/// Reads a whole segment file, refusing files too large to be one.
fn read_segment(path: &Path) -> Result<Vec<u8>> {
    let len = std::fs::metadata(path).map_err(|e| io_error("read", path, e))?.len();
    if len > SEGMENT_FILE_MAX_BYTES {
        return Err(Error::unexpected(format!(
            "command log: {} is {len} bytes, more than a segment can be ({SEGMENT_FILE_MAX_BYTES})",
            path.display()
        )));
    }
    std::fs::read(path).map_err(|e| io_error("read", path, e))
}

/// Where a segment's intact records end, and the damage after them if any.
struct Scan {
    records: u64,
    good_len: usize,
    damage: Option<(String, u64)>,
}

fn scan(buf: &[u8]) -> Scan {
    let mut at = 0;
    let mut records = 0;
    loop {
        match read_frame(buf, at) {
            Frame::Record { end, .. } => {
                at = end;
                records += 1;
            }
            Frame::End => return Scan { records, good_len: at, damage: None },
            Frame::Bad { reason, claimed_end } => {
                let intact_after = claimed_end.map_or(0, |end| count_intact(buf, end));
                return Scan { records, good_len: at, damage: Some((reason, intact_after)) };
            }
        }
    }
}

/// Intact frames from `at` up to the first damaged one.
fn count_intact(buf: &[u8], mut at: usize) -> u64 {
    let mut n = 0;
    while let Frame::Record { end, .. } = read_frame(buf, at) {
        at = end;
        n += 1;
    }
    n
}

/// Cuts a damaged tail off the newest segment in `dir`, returning what was dropped (None
/// if the log is intact), and the sequence number the next record will get.
pub fn repair_last_segment(dir: &Path) -> Result<(Option<TailRepair>, u64)> {
    let segments = list_segments(dir)?;
    let Some(last) = segments.last() else {
        return Ok((None, 0));
    };
    let buf = read_segment(&last.path)?;
    let s = scan(&buf);
    let next_seq = last.first_seq + s.records;
    if s.good_len == buf.len() {
        return Ok((None, next_seq));
    }
    // The writer appends where the file ends, so it is cut to its records: after damage,
    // or after the zeros the writer laid down ahead of them (no damage: nothing to report).
    let file = OpenOptions::new().write(true).open(&last.path).map_err(|e| io_error("open", &last.path, e))?;
    file.set_len(s.good_len as u64).and_then(|_| file.sync_all()).map_err(|e| io_error("cut the unused tail of", &last.path, e))?;
    let Some((reason, intact_after)) = s.damage else {
        return Ok((None, next_seq));
    };
    let repair = TailRepair {
        file: last.path.clone(),
        offset: s.good_len as u64,
        bytes_dropped: (buf.len() - s.good_len) as u64,
        intact_records_dropped: intact_after,
        records_kept: s.records,
        reason,
    };
    tracing::warn!("{repair}");
    Ok((Some(repair), next_seq))
}

/// Iterates the records of every segment in order. Yields an error (and then stops) when
/// a segment other than the newest is damaged or a segment is missing.
pub struct LogReader {
    segments: Vec<Segment>,
    /// Index of the next segment to load.
    next_segment: usize,
    /// The segment being read: its bytes, path and read position.
    current: Option<(Vec<u8>, PathBuf, usize)>,
    next_seq: u64,
    repair: Option<TailRepair>,
    stopped: bool,
}

impl LogReader {
    /// Opens the log in `dir` (repairing a damaged tail first; see `repair`).
    pub fn open(dir: &Path) -> Result<LogReader> {
        let (repair, _) = repair_last_segment(dir)?;
        let segments = list_segments(dir)?;
        let next_seq = segments.first().map_or(0, |s| s.first_seq);
        Ok(LogReader { segments, next_segment: 0, current: None, next_seq, repair, stopped: false })
    }

    /// What opening cut from the newest segment, if it was damaged.
    pub fn repair(&self) -> Option<&TailRepair> {
        self.repair.as_ref()
    }

    /// The sequence number of the next record (after iteration: the end of the log).
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn load_next_segment(&mut self) -> Result<bool> {
        let Some(seg) = self.segments.get(self.next_segment) else {
            return Ok(false);
        };
        if seg.first_seq != self.next_seq {
            return Err(Error::unexpected(format!(
                "command log: {} starts at record {} but the log so far ends at record {}: a \
                 segment is missing or was renamed; recovery cannot continue safely",
                seg.path.display(),
                seg.first_seq,
                self.next_seq
            )));
        }
        self.next_segment += 1;
        let buf = read_segment(&seg.path)?;
        self.current = Some((buf, seg.path.clone(), 0));
        Ok(true)
    }

    /// Reads on to the next record whose body `wanted` accepts (a look at its bytes, such
    /// as its kind), passing over the others without decoding them: finding where a
    /// snapshot starts in a long log then costs a checksum per record, not a decode.
    /// Returns that record (None at the end of the log) and how many were passed over.
    pub fn skip_to(&mut self, wanted: impl Fn(&[u8]) -> bool) -> Result<(Option<LogEntry>, u64)> {
        let mut skipped = 0;
        if self.stopped {
            return Ok((None, 0));
        }
        let found = self.next_entry(&mut |body| {
            let skip = !wanted(body);
            skipped += u64::from(skip);
            skip
        });
        if !matches!(found, Ok(Some(_))) {
            self.stopped = true;
        }
        Ok((found?, skipped))
    }

    /// The next record, passing over those `skip` says to without decoding them.
    fn next_entry(&mut self, skip: &mut dyn FnMut(&[u8]) -> bool) -> Result<Option<LogEntry>> {
        loop {
            let Some((buf, path, at)) = self.current.as_mut() else {
                if !self.load_next_segment()? {
                    return Ok(None);
                }
                continue;
            };
            match read_frame(buf, *at) {
                Frame::Record { body, end } if skip(body) => {
                    *at = end;
                    self.next_seq += 1;
                }
                Frame::Record { body, end } => {
                    let record =
                        Record::decode(body).map_err(|e| e.context(format!("command log {} record at byte {}", path.display(), *at)))?;
                    *at = end;
                    let seq = self.next_seq;
                    self.next_seq += 1;
                    return Ok(Some(LogEntry { seq, record }));
                }
                Frame::End => self.current = None,
                Frame::Bad { reason, .. } => {
                    return Err(Error::unexpected(format!(
                        "command log {} is damaged at byte {} ({reason}), and it is not the \
                         newest segment: committed transactions after that point cannot be \
                         replayed. Restore the file from a backup, or move it and every later \
                         segment aside to recover without them",
                        path.display(),
                        *at
                    )));
                }
            }
        }
    }
}

impl Iterator for LogReader {
    type Item = Result<LogEntry>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.stopped {
            return None;
        }
        let item = self.next_entry(&mut |_| false).transpose();
        if !matches!(item, Some(Ok(_))) {
            self.stopped = true;
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdlog::frame::put_frame;
    use crate::cmdlog::segment::{segment_path, truncate_before};
    use crate::cmdlog::testing::{read_all, rec, TempDir};
    use crate::cmdlog::writer::{CommandLog, Durability, LogOptions};

    /// Frames of records `range`, and the offset where each frame ends.
    fn frames(range: std::ops::Range<i64>) -> (Vec<u8>, Vec<usize>) {
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        for i in range {
            put_frame(&mut buf, &rec(i).encode().unwrap());
            ends.push(buf.len());
        }
        (buf, ends)
    }

    fn append_sync(log: &CommandLog, i: i64) -> u64 {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let ack: crate::cmdlog::Ack = Box::new(move |r| {
            let _ = tx.send(r);
        });
        log.append(&rec(i).encode().unwrap(), Some(ack)).unwrap();
        rx.recv().unwrap().unwrap()
    }

    #[test]
    fn a_torn_tail_is_cut_at_every_truncation_point_and_appending_resumes() {
        let (buf, ends) = frames(0..3);
        for cut in 0..=buf.len() {
            let dir = TempDir::new("torn");
            let path = segment_path(dir.path(), 0);
            std::fs::write(&path, &buf[..cut]).unwrap();
            let whole = ends.iter().filter(|&&e| e <= cut).count();
            let boundary = if whole == 0 { 0 } else { ends[whole - 1] };
            let reader = LogReader::open(dir.path()).unwrap();
            match reader.repair() {
                // Torn bytes that are all zeros (the top of a length) read as the end.
                None => assert!(buf[boundary..cut].iter().all(|&b| b == 0), "cut {cut} not reported"),
                Some(r) => {
                    assert_eq!((r.offset, r.bytes_dropped), (boundary as u64, (cut - boundary) as u64));
                    assert_eq!((r.records_kept, r.intact_records_dropped), (whole as u64, 0));
                    assert_eq!(r.file, path);
                }
            }
            let got: Vec<LogEntry> = reader.map(|e| e.unwrap()).collect();
            let expected: Vec<LogEntry> = (0..whole).map(|i| LogEntry { seq: i as u64, record: rec(i as i64) }).collect();
            assert_eq!(got, expected, "cut at {cut}");
            assert_eq!(std::fs::metadata(&path).unwrap().len(), boundary as u64);
            // New records follow the last intact one, in the same file.
            let log = CommandLog::open(dir.path(), Durability::Sync).unwrap();
            assert_eq!(append_sync(&log, 99), whole as u64);
            drop(log);
            let after = read_all(dir.path());
            assert_eq!(after.len(), whole + 1);
            assert_eq!(after[whole], LogEntry { seq: whole as u64, record: rec(99) });
        }
    }

    #[test]
    fn corruption_in_the_middle_of_the_last_segment_is_cut_and_counted() {
        let (mut buf, ends) = frames(0..5);
        buf[ends[1] + 12] ^= 0x40; // inside record 2's body
        let dir = TempDir::new("crc");
        std::fs::write(segment_path(dir.path(), 0), &buf).unwrap();
        let reader = LogReader::open(dir.path()).unwrap();
        let repair = reader.repair().cloned().unwrap();
        assert_eq!(repair.reason, "checksum mismatch");
        assert_eq!(repair.offset, ends[1] as u64);
        assert_eq!(repair.bytes_dropped, (buf.len() - ends[1]) as u64);
        assert_eq!((repair.records_kept, repair.intact_records_dropped), (2, 2));
        assert!(repair.to_string().contains("2 intact records after the damage"));
        let seqs: Vec<u64> = reader.map(|e| e.unwrap().seq).collect();
        assert_eq!(seqs, vec![0, 1]);
    }

    #[test]
    fn damage_in_an_older_segment_is_an_error_not_a_skip() {
        let dir = TempDir::new("older");
        let (mut first, ends) = frames(0..3);
        first[ends[0] + 9] ^= 1;
        std::fs::write(segment_path(dir.path(), 0), &first).unwrap();
        std::fs::write(segment_path(dir.path(), 3), frames(3..5).0).unwrap();
        let mut reader = LogReader::open(dir.path()).unwrap();
        assert!(reader.repair().is_none());
        assert_eq!(reader.next().unwrap().unwrap().seq, 0);
        let err = reader.next().unwrap().unwrap_err();
        let at = format!("is damaged at byte {} (checksum mismatch)", ends[0]);
        assert!(err.message.contains(&at), "{err}");
        assert!(err.message.contains("not the newest segment"));
        assert!(reader.next().is_none());
    }

    /// Finding a snapshot's place passes over the records before it without decoding them
    /// (one that would not decode is no obstacle), counts them and keeps the numbering;
    /// checksums are still checked, and reading goes on normally after it.
    #[test]
    fn skip_to_passes_over_records_undecoded_and_keeps_their_numbers() {
        let dir = TempDir::new("skip");
        let taken = Record::SnapshotTaken { txn_id: 9, snapshot_id: 4 };
        let (mut first, _) = frames(0..3);
        // Intact on disk (its checksum holds) but not a record this version can decode.
        put_frame(&mut first, &[1, 0xff]);
        put_frame(&mut first, &taken.encode().unwrap());
        std::fs::write(segment_path(dir.path(), 0), &first).unwrap();
        std::fs::write(segment_path(dir.path(), 5), frames(5..7).0).unwrap();
        let mut reader = LogReader::open(dir.path()).unwrap();
        let (found, skipped) = reader.skip_to(Record::is_snapshot_taken).unwrap();
        assert_eq!(found, Some(LogEntry { seq: 4, record: taken }));
        assert_eq!(skipped, 4);
        assert_eq!(reader.next().unwrap().unwrap(), LogEntry { seq: 5, record: rec(5) });
        assert_eq!(reader.skip_to(Record::is_snapshot_taken).unwrap(), (None, 1));
        assert_eq!(reader.next_seq(), 7);
        assert!(reader.next().is_none());

        // A damaged older segment stops the skip as it stops reading.
        let damaged = TempDir::new("skip-damaged");
        let (mut older, ends) = frames(0..3);
        older[ends[0] + 9] ^= 1;
        std::fs::write(segment_path(damaged.path(), 0), &older).unwrap();
        std::fs::write(segment_path(damaged.path(), 3), frames(3..4).0).unwrap();
        let err = LogReader::open(damaged.path()).unwrap().skip_to(Record::is_snapshot_taken).unwrap_err();
        assert!(err.message.contains("checksum mismatch"), "{err}");
    }

    #[test]
    fn a_missing_segment_is_an_error() {
        let dir = TempDir::new("missing");
        std::fs::write(segment_path(dir.path(), 0), frames(0..2).0).unwrap();
        std::fs::write(segment_path(dir.path(), 5), frames(5..6).0).unwrap();
        let results: Vec<Result<LogEntry>> = LogReader::open(dir.path()).unwrap().collect();
        assert_eq!(results.len(), 3);
        let err = results[2].as_ref().unwrap_err();
        assert!(err.message.contains("starts at record 5 but the log so far ends at record 2"));
    }

    #[test]
    fn segments_rotate_and_truncate_before_drops_covered_ones() {
        let dir = TempDir::new("rotate");
        let options = LogOptions { segment_size_max_bytes: 100, ..LogOptions::default() };
        let log = CommandLog::open_with(dir.path(), Durability::Sync, options).unwrap();
        for i in 0..20 {
            assert_eq!(append_sync(&log, i), i as u64);
        }
        let segs = list_segments(dir.path()).unwrap();
        // Each record frame is 46 bytes: a segment takes 3 before it reaches 100 bytes.
        let firsts: Vec<u64> = segs.iter().map(|s| s.first_seq).collect();
        assert_eq!(firsts, vec![0, 3, 6, 9, 12, 15, 18]);
        let all = read_all(dir.path());
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), (0..20).collect::<Vec<u64>>());
        assert_eq!(all[7].record, rec(7));
        assert_eq!(log.truncate_before(7).unwrap(), 2);
        let left = read_all(dir.path());
        assert_eq!(left.first().map(|e| e.seq), Some(6));
        assert_eq!(left.len(), 14);
        assert_eq!(truncate_before(dir.path(), 20).unwrap(), 4);
        assert_eq!(append_sync(&log, 20), 20);
        drop(log);
        let left = read_all(dir.path());
        assert_eq!(left.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![18, 19, 20]);
    }
}
