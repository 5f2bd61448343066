//! CRC32C-checked records on disk, for the membership group's log, vote, snapshot and the
//! node's incarnation counter.
//!
//! A record is `[payload length: u32 LE][crc32c of the payload: u32 LE][payload]`. A file
//! that is appended to (the log) may end in a torn record after a crash: reading stops at the
//! first record that is short or fails its check, and says how many bytes it left out. A
//! file written whole (vote, snapshot, incarnation) is replaced atomically (written aside,
//! synced, renamed, directory synced), so it is either the old one or the new one; a bad one
//! is an error, never silently ignored.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Bytes before each record's payload.
pub const RECORD_HEADER_BYTES: usize = 8;
/// Largest payload one record may carry; a length above it is corruption.
pub const RECORD_PAYLOAD_MAX_BYTES: usize = 64 * 1024 * 1024;

/// Appends one record holding `payload` to `out`.
pub fn encode(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// The records at the start of `bytes`, up to the first one that is short or corrupt, and
/// the length of that good prefix.
pub fn decode_all(bytes: &[u8]) -> (Vec<&[u8]>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while let Some((payload, next)) = decode_one(bytes, at) {
        records.push(payload);
        at = next;
    }
    (records, at)
}

fn decode_one(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let header = bytes.get(at..at.checked_add(RECORD_HEADER_BYTES)?)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    if len > RECORD_PAYLOAD_MAX_BYTES {
        return None;
    }
    let start = at + RECORD_HEADER_BYTES;
    let payload = bytes.get(start..start.checked_add(len)?)?;
    (crc32c::crc32c(payload) == crc).then_some((payload, start + len))
}

/// Replaces `path` with one record holding `payload`, atomically and durably.
pub fn write_whole(path: &Path, payload: &[u8]) -> io::Result<()> {
    let mut bytes = Vec::with_capacity(payload.len() + RECORD_HEADER_BYTES);
    encode(payload, &mut bytes);
    write_file_atomically(path, &bytes)
}

/// Replaces `path` with `bytes`: written to a side file, synced, renamed over, and the
/// directory synced so the rename survives a crash.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let aside = path.with_extension("tmp");
    {
        let mut f = File::create(&aside)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&aside, path)?;
    sync_dir(path)
}

/// Syncs the directory holding `path`, so a file created or renamed in it stays.
pub fn sync_dir(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

/// The payload of a file written by `write_whole`, or `None` if there is no such file.
pub fn read_whole(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match decode_one(&bytes, 0) {
        Some((payload, end)) if end == bytes.len() => Ok(Some(payload.to_vec())),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is damaged (its check failed): restore it from a backup or remove the node's data directory to rejoin it empty",
                path.display()
            ),
        )),
    }
}

/// Opens `path` for appending, creating it (and making its creation durable) if needed.
pub fn open_append(path: &Path) -> io::Result<File> {
    let existed = path.exists();
    let f = OpenOptions::new().create(true).append(true).open(path)?;
    if !existed {
        sync_dir(path)?;
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_and_a_torn_or_flipped_tail_is_cut() {
        let mut bytes = Vec::new();
        encode(b"one", &mut bytes);
        encode(b"", &mut bytes);
        encode(b"three", &mut bytes);
        let (records, good) = decode_all(&bytes);
        assert_eq!(records, vec![&b"one"[..], b"", b"three"]);
        assert_eq!(good, bytes.len());

        let torn = &bytes[..bytes.len() - 2];
        let (records, good) = decode_all(torn);
        assert_eq!(records.len(), 2);
        assert_eq!(good, 2 * RECORD_HEADER_BYTES + 3);

        let mut flipped = bytes.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert_eq!(decode_all(&flipped).0.len(), 2);

        let mut huge = Vec::new();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        huge.extend_from_slice(&[0; 4]);
        assert_eq!(decode_all(&huge), (vec![], 0));
    }

    #[test]
    fn a_whole_file_round_trips_and_damage_is_an_error() {
        let dir = std::env::temp_dir().join(format!("lockstep-record-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("vote");
        assert_eq!(read_whole(&path).unwrap(), None);
        write_whole(&path, b"hello").unwrap();
        assert_eq!(read_whole(&path).unwrap(), Some(b"hello".to_vec()));
        let mut bytes = fs::read(&path).unwrap();
        bytes[RECORD_HEADER_BYTES] ^= 0x20;
        fs::write(&path, &bytes).unwrap();
        let err = read_whole(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("damaged"));
        fs::remove_dir_all(&dir).unwrap();
    }
}
