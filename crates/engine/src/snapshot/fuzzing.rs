//! The fuzzing entry point of the snapshot reader: arbitrary bytes become a snapshot
//! directory (a partition file, its manifest, a catalog), which the real reader verifies,
//! opens and reads to the end. The fuzz target in `fuzz/` calls it, and this crate's tests
//! replay the inputs that once broke it (kept in `fuzz/regressions/snapshot/`).
//!
//! Input layout: one flags byte, then
//! - with `FLAG_MANIFEST_FROM_INPUT`: a u16 length, that many bytes of manifest, then the
//!   partition file;
//! - without it: the partition file, and the manifest is written to match it (its size,
//!   checksum and transaction id), so the fuzzer reaches the sections behind the manifest.
//!
//! `FLAG_FIX_CHECKSUMS` writes the true CRC32C into every section whose length fits, so
//! the fuzzer reaches the table and row decoders behind the checksums.

use std::path::Path;

use crate::cmdlog::fuzzing::ScratchDir;
use crate::snapshot::format::{HEADER_BYTES, SECTION_HEADER_BYTES, SECTION_SIZE_MAX_BYTES};
use crate::snapshot::manifest::{FileEntry, Manifest, FORMAT_VERSION};
use crate::snapshot::reader::{prune, scan_snapshots, SnapshotReader};
use crate::snapshot::{partition_file_name, CATALOG_FILE, MANIFEST_FILE};

pub const FLAG_FIX_CHECKSUMS: u8 = 1;
pub const FLAG_MANIFEST_FROM_INPUT: u8 = 2;
/// The catalog every fuzzed snapshot holds.
const CATALOG_TEXT: &str = "CREATE TABLE T (A INTEGER NOT NULL);\n";
/// The snapshot id (and directory name) of the fuzzed snapshot.
const SNAPSHOT_ID: u64 = 1;
/// Partitions read from one input (a fuzzed manifest may claim billions).
const PARTITIONS_READ_MAX: u32 = 3;

/// Writes `data` as a snapshot and reads it back, panicking only when an invariant of the
/// reader breaks.
#[doc(hidden)]
pub fn read_snapshot_from_bytes(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let (manifest, mut file) = if flags & FLAG_MANIFEST_FROM_INPUT != 0 {
        let Some((len, rest)) = rest.split_first_chunk::<2>() else {
            return;
        };
        let len = (u16::from_be_bytes(*len) as usize).min(rest.len());
        (Some(rest[..len].to_vec()), rest[len..].to_vec())
    } else {
        (None, rest.to_vec())
    };
    if flags & FLAG_FIX_CHECKSUMS != 0 {
        fix_checksums(&mut file);
    }
    let Ok(root) = ScratchDir::new("snapshot") else {
        return;
    };
    let dir = root.path().join(SNAPSHOT_ID.to_string());
    let manifest = manifest.unwrap_or_else(|| matching_manifest(&file));
    let written = std::fs::create_dir(&dir)
        .and_then(|_| std::fs::write(dir.join(partition_file_name(0)), &file))
        .and_then(|_| std::fs::write(dir.join(CATALOG_FILE), CATALOG_TEXT))
        .and_then(|_| std::fs::write(dir.join(MANIFEST_FILE), &manifest));
    if written.is_err() {
        return;
    }
    let _ = scan_snapshots(root.path());
    read_partitions(&dir);
    let _ = prune(root.path(), 1);
}

/// Reads every partition the manifest lists (up to a few) to its end or first error.
fn read_partitions(dir: &Path) {
    let Ok(reader) = SnapshotReader::open(dir) else {
        return;
    };
    let _ = reader.catalog_text();
    for p in 0..reader.manifest().partitions.min(PARTITIONS_READ_MAX) {
        let Ok(mut pr) = reader.partition(p) else {
            continue;
        };
        let file_bytes = std::fs::metadata(dir.join(partition_file_name(p))).map_or(0, |m| m.len() as usize);
        let mut items = 0usize;
        while let Ok(Some(_)) = pr.next_item() {
            items += 1;
            // Every item is a section of at least its header: more is a loop that reads nothing.
            assert!(items <= file_bytes / SECTION_HEADER_BYTES, "more sections than the file can hold");
        }
    }
}

/// The manifest a writer would have made for `file` as partition 0 and the fixed catalog.
fn matching_manifest(file: &[u8]) -> Vec<u8> {
    let txn_id = file.get(12..HEADER_BYTES).map_or(0, |b| i64::from_be_bytes(b.try_into().unwrap_or_default()));
    let entry = |name: String, bytes: &[u8]| FileEntry { name, size: bytes.len() as u64, crc32c: crc32c::crc32c(bytes) };
    let m = Manifest {
        format: FORMAT_VERSION,
        id: SNAPSHOT_ID,
        txn_id,
        partitions: 1,
        created_unix_ms: 0,
        files: vec![entry(partition_file_name(0), file), entry(CATALOG_FILE.to_string(), CATALOG_TEXT.as_bytes())],
    };
    serde_json::to_vec(&m).unwrap_or_default()
}

/// Writes the true checksum into every section, after the file header, whose length is
/// plausible and whose bytes are all there.
fn fix_checksums(file: &mut [u8]) {
    let mut at = HEADER_BYTES;
    while at + SECTION_HEADER_BYTES <= file.len() {
        let len = u32::from_be_bytes([file[at + 1], file[at + 2], file[at + 3], file[at + 4]]) as usize;
        let start = at + SECTION_HEADER_BYTES;
        if len > SECTION_SIZE_MAX_BYTES || file.len() - start < len {
            return;
        }
        let crc = crc32c::crc32c(&file[start..start + len]);
        file[at + 5..start].copy_from_slice(&crc.to_be_bytes());
        at = start + len;
    }
}

#[cfg(test)]
mod tests {
    use lockstep_core::{DataType, Value};

    use super::*;
    use crate::cmdlog::testing::{replay_fuzz_regressions, TempDir};
    use crate::snapshot::writer::SnapshotBuilder;

    #[test]
    fn every_fuzz_regression_input_reads_without_a_panic_or_a_large_allocation() {
        replay_fuzz_regressions("snapshot", read_snapshot_from_bytes);
    }

    #[test]
    fn a_real_partition_file_keeps_its_checksums_and_gets_its_manifest() {
        let root = TempDir::new("fuzz-snap");
        let b = SnapshotBuilder::create(root.path(), 1, 77, 1, CATALOG_TEXT).unwrap();
        let mut w = b.partition_writer(0).unwrap();
        w.begin_table("T", &[DataType::Integer]).unwrap();
        w.write_rows(&[vec![Value::Int(5)]]).unwrap();
        let entry = w.finish().unwrap();
        let file = std::fs::read(root.path().join("1").join(partition_file_name(0))).unwrap();
        let mut fixed = file.clone();
        fix_checksums(&mut fixed);
        assert_eq!(fixed, file);
        let m: Manifest = serde_json::from_slice(&matching_manifest(&file)).unwrap();
        assert_eq!((m.txn_id, m.files[0].clone()), (77, entry));
        let mut data = vec![FLAG_FIX_CHECKSUMS];
        data.extend_from_slice(&file);
        read_snapshot_from_bytes(&data);
    }
}
