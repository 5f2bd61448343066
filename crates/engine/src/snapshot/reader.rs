//! Reading snapshots back: finding complete ones, verifying them, yielding their rows,
//! and pruning old ones.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};

use lockstep_core::{DataType, Result};

use crate::snapshot::format::{
    corrupt, decode_end, decode_export, decode_header, decode_section_header, decode_table, RowSection, HEADER_BYTES, KIND_END,
    KIND_EXPORT, KIND_ROWS, KIND_TABLE, SECTION_HEADER_BYTES,
};
use crate::snapshot::manifest::{FileEntry, Manifest};
use crate::snapshot::{format::SnapshotItem, io_error, partition_file_name, CATALOG_FILE};

/// Most of a section body reserved before its bytes are read (a row chunk is about
/// `CHUNK_BYTES_TARGET`; a longer body grows as it is read).
const BODY_PREALLOC_MAX_BYTES: usize = 256 * 1024;
/// Rows handed out at a time: their values (a few hundred KB at most) stay in cache until
/// they are stored.
const ROWS_PER_ITEM: usize = 256;

/// A complete snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub id: u64,
    pub txn_id: i64,
    pub partitions: u32,
    pub created_unix_ms: u64,
    pub total_bytes: u64,
    pub dir: PathBuf,
}

impl SnapshotInfo {
    pub(crate) fn new(m: &Manifest, dir: PathBuf) -> SnapshotInfo {
        SnapshotInfo {
            id: m.id,
            txn_id: m.txn_id,
            partitions: m.partitions,
            created_unix_ms: m.created_unix_ms,
            // Saturating: the sizes come from a file on disk, which may be damaged.
            total_bytes: m.files.iter().fold(0u64, |sum, f| sum.saturating_add(f.size)),
            dir,
        }
    }
}

/// What `scan_snapshots` found.
#[derive(Debug, Default)]
pub struct SnapshotScan {
    /// Complete, verified snapshots, newest (highest transaction id) first.
    pub complete: Vec<SnapshotInfo>,
    /// Directories that are not usable snapshots, with the reason.
    pub rejected: Vec<(PathBuf, String)>,
}

/// Streams a file, returning its size and CRC32C.
fn checksum_file(path: &Path) -> Result<(u64, u32)> {
    let mut f = File::open(path).map_err(|e| io_error("open", path, e))?;
    let mut buf = vec![0u8; 256 * 1024];
    let (mut size, mut crc) = (0u64, 0u32);
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => return Ok((size, crc)),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error("read", path, e)),
        };
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        size += n as u64;
    }
}

fn verify_file(dir: &Path, entry: &FileEntry) -> Result<()> {
    let path = dir.join(&entry.name);
    let (size, crc) = checksum_file(&path)?;
    if size != entry.size || crc != entry.crc32c {
        return Err(corrupt(format!(
            "{} has {size} bytes with checksum {crc:08x}; the manifest says {} bytes, {:08x}",
            path.display(),
            entry.size,
            entry.crc32c
        )));
    }
    Ok(())
}

/// Checks that a snapshot directory is complete and every file matches its manifest.
pub fn verify(dir: &Path) -> Result<SnapshotInfo> {
    let m = Manifest::read(dir)?;
    // One set of names, not a search of the list per partition: a damaged manifest may list
    // many files. Each file is listed once (and so read once to be checked).
    let mut names = HashSet::with_capacity(m.files.len());
    if let Some(twice) = m.files.iter().find(|f| !names.insert(f.name.as_str())) {
        return Err(corrupt(format!("the manifest of {} lists {} more than once", dir.display(), twice.name)));
    }
    for p in 0..m.partitions {
        if !names.contains(partition_file_name(p).as_str()) {
            return Err(corrupt(format!("the manifest lists no file for partition {p}")));
        }
    }
    if m.file(CATALOG_FILE).is_none() {
        return Err(corrupt("the manifest lists no catalog"));
    }
    for f in &m.files {
        verify_file(dir, f)?;
    }
    Ok(SnapshotInfo::new(&m, dir.to_path_buf()))
}

/// Every snapshot directory under `root`, verified (each file read once).
pub fn scan_snapshots(root: &Path) -> Result<SnapshotScan> {
    let mut out = SnapshotScan::default();
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_error("list", root, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list", root, e))?;
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        match verify(&dir) {
            Ok(info) => out.complete.push(info),
            Err(e) => {
                tracing::warn!("skipping snapshot {}: {}", dir.display(), e.message);
                out.rejected.push((dir, e.message));
            }
        }
    }
    out.complete.sort_by_key(|s| std::cmp::Reverse((s.txn_id, s.id)));
    out.rejected.sort();
    Ok(out)
}

/// Complete, verified snapshots under `root`, newest first.
pub fn list_snapshots(root: &Path) -> Result<Vec<SnapshotInfo>> {
    Ok(scan_snapshots(root)?.complete)
}

/// The id for the next snapshot under `root`: past every snapshot directory there,
/// complete or not, so its directory is new. Reads names only: verifying every file of
/// every snapshot again would add a serial read of all of them to each start.
pub fn next_snapshot_id(root: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(root) else { return 1 };
    entries.filter_map(|e| dir_id(&e.ok()?.path())).max().map_or(1, |id| id.saturating_add(1))
}

/// The snapshot id a directory name stands for.
fn dir_id(dir: &Path) -> Option<u64> {
    dir.file_name()?.to_str()?.parse().ok()
}

/// Keeps the `keep` newest complete snapshots and deletes older ones, and incomplete or
/// corrupt directories older than the newest complete one (a newer incomplete one may be
/// being written). Returns how many directories were deleted.
pub fn prune(root: &Path, keep: usize) -> Result<usize> {
    let scan = scan_snapshots(root)?;
    let newest_id = scan.complete.iter().map(|s| s.id).max();
    let mut doomed: Vec<PathBuf> = scan.complete.iter().skip(keep).map(|s| s.dir.clone()).collect();
    for (dir, _) in &scan.rejected {
        if matches!((dir_id(dir), newest_id), (Some(d), Some(n)) if d < n) {
            doomed.push(dir.clone());
        }
    }
    for dir in &doomed {
        std::fs::remove_dir_all(dir).map_err(|e| io_error("delete", dir, e))?;
    }
    Ok(doomed.len())
}

/// A complete snapshot, opened for restore.
#[derive(Debug)]
pub struct SnapshotReader {
    dir: PathBuf,
    manifest: Manifest,
}

impl SnapshotReader {
    /// Opens the snapshot in `dir`, reading its manifest (files are verified as read).
    pub fn open(dir: &Path) -> Result<SnapshotReader> {
        let manifest = Manifest::read(dir)?;
        Ok(SnapshotReader { dir: dir.to_path_buf(), manifest })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The catalog's DDL text, verified against the manifest.
    pub fn catalog_text(&self) -> Result<String> {
        let entry = self.entry(CATALOG_FILE)?;
        let path = self.dir.join(CATALOG_FILE);
        let bytes = std::fs::read(&path).map_err(|e| io_error("read", &path, e))?;
        if bytes.len() as u64 != entry.size || crc32c::crc32c(&bytes) != entry.crc32c {
            return Err(corrupt(format!("{} does not match the manifest", path.display())));
        }
        String::from_utf8(bytes).map_err(|_| corrupt(format!("{} is not UTF-8", path.display())))
    }

    fn entry(&self, name: &str) -> Result<&FileEntry> {
        self.manifest.file(name).ok_or_else(|| corrupt(format!("the manifest of {} lists no {name}", self.dir.display())))
    }

    /// Partition `p`'s image.
    pub fn partition(&self, p: u32) -> Result<PartitionReader> {
        let entry = self.entry(&partition_file_name(p))?.clone();
        let path = self.dir.join(&entry.name);
        let r = PartitionReader::open(path, entry, p)?;
        if r.txn_id != self.manifest.txn_id {
            return Err(corrupt(format!("{} is for partition {} at transaction {}", r.path.display(), r.partition, r.txn_id)));
        }
        Ok(r)
    }
}

impl PartitionReader {
    /// Partition `p`'s image in the file at `path`, whose size and checksum `entry` gives
    /// (a snapshot's manifest, or the node that wrote it).
    pub fn open(path: PathBuf, entry: FileEntry, p: u32) -> Result<PartitionReader> {
        let file = File::open(&path).map_err(|e| io_error("open", &path, e))?;
        let mut r = PartitionReader {
            path,
            input: BufReader::new(file),
            entry,
            crc: 0,
            size: 0,
            types: None,
            section: None,
            tables: 0,
            rows: 0,
            done: false,
            partition: 0,
            txn_id: 0,
        };
        let mut header = [0u8; HEADER_BYTES];
        r.read_exact(&mut header)?;
        let (partition, txn_id) = decode_header(&header)?;
        if partition != p {
            return Err(corrupt(format!("{} is for partition {partition}, not {p}", r.path.display())));
        }
        r.partition = partition;
        r.txn_id = txn_id;
        Ok(r)
    }
}

/// Yields a partition file's tables and rows, checking every checksum; the whole file's
/// size and checksum are compared with the manifest at its end.
#[derive(Debug)]
pub struct PartitionReader {
    path: PathBuf,
    input: BufReader<File>,
    entry: FileEntry,
    crc: u32,
    size: u64,
    types: Option<Vec<DataType>>,
    /// The ROWS section whose rows are being handed out.
    section: Option<RowSection>,
    tables: u64,
    rows: u64,
    done: bool,
    partition: u32,
    txn_id: i64,
}

impl PartitionReader {
    pub fn partition(&self) -> u32 {
        self.partition
    }

    pub fn txn_id(&self) -> i64 {
        self.txn_id
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            ErrorKind::UnexpectedEof => corrupt(format!("{} ends early", self.path.display())),
            _ => io_error("read", &self.path, e),
        })?;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        self.size += buf.len() as u64;
        Ok(())
    }

    /// A section body of `len` bytes. A length past the end of the file the manifest
    /// describes is refused at once; otherwise the body grows as its bytes arrive, so a
    /// damaged length field reserves no more memory than the file holds.
    fn read_body(&mut self, len: usize) -> Result<Vec<u8>> {
        let left = self.entry.size.saturating_sub(self.size);
        if len as u64 > left {
            return Err(corrupt(format!(
                "{}: a section of {len} bytes at byte {} runs past the file's end ({left} bytes left of the {} the manifest records)",
                self.path.display(),
                self.size,
                self.entry.size
            )));
        }
        let mut body = Vec::with_capacity(len.min(BODY_PREALLOC_MAX_BYTES));
        (&mut self.input).take(len as u64).read_to_end(&mut body).map_err(|e| io_error("read", &self.path, e))?;
        if body.len() < len {
            return Err(corrupt(format!("{} ends early", self.path.display())));
        }
        self.crc = crc32c::crc32c_append(self.crc, &body);
        self.size += len as u64;
        Ok(body)
    }

    /// The next table header or chunk of rows; None after the end section.
    pub fn next_item(&mut self) -> Result<Option<SnapshotItem>> {
        loop {
            if let Some(section) = &mut self.section {
                let rows = section.take(ROWS_PER_ITEM)?;
                if section.left() == 0 {
                    self.section = None;
                }
                if !rows.is_empty() {
                    return Ok(Some(SnapshotItem::Rows(rows)));
                }
            }
            if self.done {
                return Ok(None);
            }
            let mut h = [0u8; SECTION_HEADER_BYTES];
            self.read_exact(&mut h)?;
            let (kind, len, crc) = decode_section_header(&h)?;
            let body = self.read_body(len)?;
            if crc32c::crc32c(&body) != crc {
                return Err(corrupt(format!("{}: checksum mismatch in the section ending at byte {}", self.path.display(), self.size)));
            }
            match kind {
                KIND_TABLE => {
                    let item = decode_table(&body)?;
                    if let SnapshotItem::Table { types, .. } = &item {
                        self.types = Some(types.clone());
                    }
                    self.tables += 1;
                    return Ok(Some(item));
                }
                KIND_ROWS => {
                    let Some(types) = &self.types else {
                        return Err(corrupt(format!("{}: rows before any table", self.path.display())));
                    };
                    let section = RowSection::new(body, types)?;
                    self.rows += section.left() as u64;
                    self.section = Some(section);
                }
                KIND_EXPORT => return Ok(Some(SnapshotItem::Export(decode_export(&body)?))),
                KIND_END => self.finish(&body)?,
                _ => return Err(corrupt(format!("unknown section kind {kind}"))),
            }
        }
    }

    /// Checks the end section's counts, that nothing follows, and the whole-file checksum.
    fn finish(&mut self, body: &[u8]) -> Result<()> {
        let (tables, rows) = decode_end(body)?;
        if (tables, rows) != (self.tables, self.rows) {
            return Err(corrupt(format!(
                "{} says {tables} tables and {rows} rows but holds {} and {}",
                self.path.display(),
                self.tables,
                self.rows
            )));
        }
        let mut extra = [0u8; 1];
        if self.input.read(&mut extra).map_err(|e| io_error("read", &self.path, e))? != 0 {
            return Err(corrupt(format!("{} has bytes after its end", self.path.display())));
        }
        if (self.size, self.crc) != (self.entry.size, self.entry.crc32c) {
            return Err(corrupt(format!("{} does not match the manifest", self.path.display())));
        }
        self.done = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use lockstep_core::{decimal, Value};

    use super::*;
    use crate::cmdlog::testing::{largest_allocation, TempDir};
    use crate::snapshot::format::SECTION_SIZE_MAX_BYTES;
    use crate::snapshot::writer::SnapshotBuilder;

    const TYPES: [DataType; 8] = [
        DataType::BigInt,
        DataType::Varchar,
        DataType::Float,
        DataType::Decimal,
        DataType::Timestamp,
        DataType::Boolean,
        DataType::Varbinary,
        DataType::TinyInt,
    ];

    fn row(i: i64) -> Vec<Value> {
        if i % 7 == 3 {
            let mut r = vec![Value::Int(i)];
            r.extend(std::iter::repeat_n(Value::Null, TYPES.len() - 1));
            return r;
        }
        vec![
            Value::Int(i),
            Value::Str(format!("row {i} {}", "x".repeat(400)).into()),
            Value::Float(i as f64 / 4.0),
            Value::Decimal((decimal::from_i64(i) + 5).into()),
            Value::Timestamp(i * 1_000_003),
            Value::Bool(i % 2 == 0),
            Value::Bytes(vec![i as u8; 3].into()),
            Value::Int(i % 100),
        ]
    }

    /// Writes snapshot `id` at `txn_id`: partition p holds table T with `rows[p]` rows
    /// (in two `write_rows` calls) and an empty table E.
    fn write_snapshot(root: &Path, id: u64, txn_id: i64, rows: &[i64]) -> SnapshotInfo {
        let b = SnapshotBuilder::create(root, id, txn_id, rows.len() as u32, "CREATE TABLE T (...);").unwrap();
        let mut files = Vec::new();
        for (p, &n) in rows.iter().enumerate() {
            let mut w = b.partition_writer(p as u32).unwrap();
            w.begin_table("T", &TYPES).unwrap();
            let all: Vec<Vec<Value>> = (0..n).map(row).collect();
            let (a, c) = all.split_at(all.len() / 2);
            w.write_rows(a).unwrap();
            w.write_rows(c).unwrap();
            w.begin_table("E", &[DataType::Integer]).unwrap();
            files.push(w.finish().unwrap());
        }
        b.complete(files).unwrap()
    }

    type Tables = BTreeMap<String, Vec<Vec<Value>>>;

    /// Tables and their rows in a partition image, and how many row chunks it had.
    fn read_partition(r: &SnapshotReader, p: u32) -> Result<(Tables, usize)> {
        let mut pr = r.partition(p)?;
        let mut tables: BTreeMap<String, Vec<Vec<Value>>> = BTreeMap::new();
        let mut current = String::new();
        let mut chunks = 0;
        while let Some(item) = pr.next_item()? {
            match item {
                SnapshotItem::Table { name, types } => {
                    assert_eq!(types.len(), if name == "T" { TYPES.len() } else { 1 });
                    tables.insert(name.clone(), Vec::new());
                    current = name;
                }
                SnapshotItem::Rows(rows) => {
                    chunks += 1;
                    assert!(rows.len() <= ROWS_PER_ITEM, "{} rows handed out at once", rows.len());
                    tables.get_mut(&current).unwrap().extend(rows);
                }
                SnapshotItem::Export(c) => panic!("a snapshot with export rows of {}", c.target),
            }
        }
        Ok((tables, chunks))
    }

    #[test]
    fn a_snapshot_round_trips_every_type_in_checksummed_chunks() {
        let root = TempDir::new("snap-roundtrip");
        let info = write_snapshot(root.path(), 7, 42, &[10, 3000]);
        assert_eq!((info.id, info.txn_id, info.partitions), (7, 42, 2));
        assert_eq!(list_snapshots(root.path()).unwrap(), vec![info.clone()]);
        let r = SnapshotReader::open(&info.dir).unwrap();
        assert_eq!(r.catalog_text().unwrap(), "CREATE TABLE T (...);");
        for (p, n) in [(0u32, 10i64), (1, 3000)] {
            let (tables, chunks) = read_partition(&r, p).unwrap();
            let expected: Tables = [("E".to_string(), vec![]), ("T".to_string(), (0..n).map(row).collect())].into();
            assert_eq!(tables, expected, "partition {p}");
            // 3000 rows of ~470 bytes fill two 1 MiB sections, handed out 256 rows at a
            // time: 12 items at least (13 when the first section's rows are not a multiple).
            let least = if p == 0 { 1 } else { 3000usize.div_ceil(ROWS_PER_ITEM) };
            assert!((least..=least + 1).contains(&chunks), "partition {p}: {chunks} chunks");
        }
        assert!(r.partition(2).unwrap_err().message.contains("lists no partition-2.snap"));
    }

    #[test]
    fn incomplete_and_corrupt_snapshots_are_skipped_for_older_ones() {
        let root = TempDir::new("snap-skip");
        let good = write_snapshot(root.path(), 1, 10, &[5]);
        let corrupt_one = write_snapshot(root.path(), 2, 20, &[5]);
        let file = corrupt_one.dir.join("partition-0.snap");
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[60] ^= 0x10;
        std::fs::write(&file, &bytes).unwrap();
        // Crashed before the manifest: files written, no manifest.
        let b = SnapshotBuilder::create(root.path(), 3, 30, 1, "").unwrap();
        b.partition_writer(0).unwrap().finish().unwrap();

        let scan = scan_snapshots(root.path()).unwrap();
        assert_eq!(scan.complete, vec![good]);
        assert_eq!(scan.rejected.len(), 2);
        assert!(scan.rejected[0].1.contains(&format!("the manifest says {} bytes", bytes.len())), "{:?}", scan.rejected);
        assert!(scan.rejected[1].1.contains("manifest.json"), "{:?}", scan.rejected);
        // Reading the corrupt one directly fails on its checksum too.
        let r = SnapshotReader::open(&corrupt_one.dir).unwrap();
        assert!(read_partition(&r, 0).unwrap_err().message.contains("checksum mismatch"));
    }

    /// Found by the fuzzer (fuzz/regressions/snapshot/section-length-reserved-before-read):
    /// a section's length field was allocated whole (up to 64 MiB) before its bytes were read.
    #[test]
    fn a_section_longer_than_the_file_is_refused_without_reserving_it() {
        let root = TempDir::new("snap-long-section");
        let info = write_snapshot(root.path(), 1, 10, &[5]);
        let file = info.dir.join(partition_file_name(0));
        let mut bytes = std::fs::read(&file).unwrap();
        // The first section's length field, just after the file header and the kind byte.
        bytes[HEADER_BYTES + 1..HEADER_BYTES + 5].copy_from_slice(&(SECTION_SIZE_MAX_BYTES as u32).to_be_bytes());
        std::fs::write(&file, &bytes).unwrap();
        let r = SnapshotReader::open(&info.dir).unwrap();
        let mut pr = r.partition(0).unwrap();
        let (item, largest) = largest_allocation(|| pr.next_item());
        assert!(item.unwrap_err().message.contains("runs past the file's end"));
        assert!(largest < BODY_PREALLOC_MAX_BYTES, "{largest} bytes reserved");
    }

    #[test]
    fn a_file_shorter_than_its_manifest_says_ends_early_without_reserving_the_rest() {
        let root = TempDir::new("snap-short-file");
        let info = write_snapshot(root.path(), 1, 10, &[3000]);
        let file = info.dir.join(partition_file_name(0));
        let bytes = std::fs::read(&file).unwrap();
        let table_section =
            SECTION_HEADER_BYTES + u32::from_be_bytes(bytes[HEADER_BYTES + 1..HEADER_BYTES + 5].try_into().unwrap()) as usize;
        std::fs::write(&file, &bytes[..HEADER_BYTES + table_section + SECTION_HEADER_BYTES + 100]).unwrap();
        let r = SnapshotReader::open(&info.dir).unwrap();
        let mut pr = r.partition(0).unwrap();
        assert!(matches!(pr.next_item(), Ok(Some(SnapshotItem::Table { .. }))));
        // The first row chunk is about 1 MiB; 100 bytes of it are there.
        let (rows, largest) = largest_allocation(|| pr.next_item());
        assert!(rows.unwrap_err().message.contains("ends early"));
        assert!(largest <= BODY_PREALLOC_MAX_BYTES, "{largest} bytes reserved");
    }

    #[test]
    fn a_manifest_listing_a_file_twice_is_refused() {
        let root = TempDir::new("snap-twice");
        let info = write_snapshot(root.path(), 1, 10, &[2]);
        let mut m = Manifest::read(&info.dir).unwrap();
        m.files.push(m.files[0].clone());
        std::fs::write(info.dir.join(crate::snapshot::MANIFEST_FILE), serde_json::to_vec(&m).unwrap()).unwrap();
        assert!(verify(&info.dir).unwrap_err().message.contains("lists partition-0.snap more than once"));
    }

    #[test]
    fn the_total_size_of_a_damaged_manifest_saturates() {
        let file = |name: &str| FileEntry { name: name.into(), size: u64::MAX, crc32c: 0 };
        let m = Manifest { format: 1, id: 1, txn_id: 1, partitions: 1, created_unix_ms: 0, files: vec![file("a"), file("b")] };
        assert_eq!(SnapshotInfo::new(&m, PathBuf::from("x")).total_bytes, u64::MAX);
    }

    #[test]
    fn prune_keeps_the_newest_and_snapshots_still_being_written() {
        let root = TempDir::new("snap-prune");
        SnapshotBuilder::create(root.path(), 0, 5, 1, "").unwrap(); // abandoned, old
        for id in 1..=4u64 {
            write_snapshot(root.path(), id, id as i64 * 10, &[2]);
        }
        SnapshotBuilder::create(root.path(), 9, 90, 1, "").unwrap(); // in progress
        assert_eq!(prune(root.path(), 2).unwrap(), 3);
        let ids: Vec<u64> = list_snapshots(root.path()).unwrap().iter().map(|s| s.id).collect();
        assert_eq!(ids, vec![4, 3]);
        assert!(root.path().join("9").exists());
        assert!(!root.path().join("0").exists());
        assert_eq!(prune(root.path(), 2).unwrap(), 0);
    }

    #[test]
    fn writer_mistakes_are_errors() {
        let root = TempDir::new("snap-errors");
        let b = SnapshotBuilder::create(root.path(), 1, 1, 1, "").unwrap();
        let mut w = b.partition_writer(0).unwrap();
        assert!(w.write_rows(&[vec![Value::Int(1)]]).unwrap_err().message.contains("before begin_table"));
        w.begin_table("T", &[DataType::TinyInt]).unwrap();
        let err = w.write_rows(&[vec![Value::Int(1000)]]).unwrap_err();
        assert!(err.message.contains("cannot store BIGINT 1000 in a TINYINT column"), "{err}");
        assert!(b.partition_writer(1).is_err());
        assert!(b.complete(vec![]).unwrap_err().message.contains("partition 0 was not written"));
        assert!(SnapshotBuilder::create(root.path(), 1, 1, 1, "").is_err(), "ids are not reused");
    }
}
