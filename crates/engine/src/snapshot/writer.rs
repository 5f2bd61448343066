//! Writing a snapshot: `SnapshotBuilder` creates the directory and the catalog file and,
//! once every partition's `SnapshotWriter` has finished, syncs the directory and writes
//! the manifest (via a synced temporary file renamed into place), which completes it.
//!
//! A `SnapshotWriter` takes rows in small steps (`begin_table`, `write_rows`) so that a
//! site can write its image between transactions, and buffers them into checksummed
//! chunks of about `CHUNK_BYTES_TARGET`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use lockstep_core::{DataType, Error, Result, Value};

use crate::snapshot::format::{
    encode_end, encode_export, encode_header, encode_row, encode_table, section, ExportChunk, KIND_END, KIND_EXPORT, KIND_ROWS, KIND_TABLE,
};
use crate::snapshot::manifest::{FileEntry, Manifest, FORMAT_VERSION};
use crate::snapshot::reader::SnapshotInfo;
use crate::snapshot::{io_error, partition_file_name, CATALOG_FILE, MANIFEST_FILE};

/// A row chunk is written once its encoding reaches this size.
pub const CHUNK_BYTES_TARGET: usize = 1024 * 1024;

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("sync directory", dir, e))
}

/// Writes one partition's image.
pub struct SnapshotWriter {
    path: PathBuf,
    name: String,
    out: BufWriter<File>,
    /// Checksum and size of everything written so far (for the manifest).
    crc: u32,
    size: u64,
    /// Column types of the table being written.
    types: Option<Vec<DataType>>,
    chunk: Vec<u8>,
    chunk_rows: u32,
    tables: u64,
    rows: u64,
}

impl SnapshotWriter {
    /// Creates `partition-<p>.snap` in the snapshot directory `dir`.
    pub fn create(dir: &Path, partition: u32, txn_id: i64) -> Result<SnapshotWriter> {
        let name = partition_file_name(partition);
        let path = dir.join(&name);
        let file = OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| io_error("create", &path, e))?;
        let mut w = SnapshotWriter {
            path,
            name,
            out: BufWriter::new(file),
            crc: 0,
            size: 0,
            types: None,
            chunk: Vec::new(),
            chunk_rows: 0,
            tables: 0,
            rows: 0,
        };
        w.put(&encode_header(partition, txn_id))?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(|e| io_error("write", &self.path, e))?;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn flush_chunk(&mut self) -> Result<()> {
        if self.chunk_rows == 0 {
            return Ok(());
        }
        let mut body = Vec::with_capacity(4 + self.chunk.len());
        body.extend_from_slice(&self.chunk_rows.to_be_bytes());
        body.append(&mut self.chunk);
        self.chunk_rows = 0;
        self.put(&section(KIND_ROWS, &body))
    }

    /// Starts a table; the rows written next belong to it.
    pub fn begin_table(&mut self, name: &str, types: &[DataType]) -> Result<()> {
        self.flush_chunk()?;
        let body = encode_table(name, types)?;
        self.put(&section(KIND_TABLE, &body))?;
        self.types = Some(types.to_vec());
        self.tables += 1;
        Ok(())
    }

    /// Adds rows of the current table.
    pub fn write_rows(&mut self, rows: &[Vec<Value>]) -> Result<()> {
        let Some(types) = self.types.take() else {
            return Err(Error::unexpected("snapshot rows written before begin_table"));
        };
        let result = (|| {
            for row in rows {
                encode_row(&mut self.chunk, &types, row)?;
                self.chunk_rows += 1;
                self.rows += 1;
                if self.chunk.len() >= CHUNK_BYTES_TARGET {
                    self.flush_chunk()?;
                }
            }
            Ok(())
        })();
        self.types = Some(types);
        result
    }

    /// Adds export rows (a rejoin image's, `format::KIND_EXPORT`); the table rows come first.
    pub fn write_export(&mut self, chunk: &ExportChunk) -> Result<()> {
        self.flush_chunk()?;
        let body = encode_export(chunk)?;
        self.put(&section(KIND_EXPORT, &body))
    }

    /// Ends the file and syncs it; the summary goes to `SnapshotBuilder::complete`.
    pub fn finish(mut self) -> Result<FileEntry> {
        self.flush_chunk()?;
        let end = encode_end(self.tables, self.rows);
        self.put(&section(KIND_END, &end))?;
        let file = self.out.into_inner().map_err(|e| io_error("write", &self.path, e.into_error()))?;
        file.sync_all().map_err(|e| io_error("sync", &self.path, e))?;
        Ok(FileEntry { name: self.name, size: self.size, crc32c: self.crc })
    }
}

/// Creates a snapshot directory and completes it with its manifest.
pub struct SnapshotBuilder {
    dir: PathBuf,
    id: u64,
    txn_id: i64,
    partitions: u32,
    catalog: FileEntry,
}

impl SnapshotBuilder {
    /// Creates `<root>/<id>/` (which must not exist) and writes the catalog's DDL text.
    pub fn create(root: &Path, id: u64, txn_id: i64, partitions: u32, catalog_text: &str) -> Result<Self> {
        std::fs::create_dir_all(root).map_err(|e| io_error("create", root, e))?;
        let dir = root.join(id.to_string());
        std::fs::create_dir(&dir).map_err(|e| io_error("create", &dir, e))?;
        sync_dir(root)?;
        let path = dir.join(CATALOG_FILE);
        let bytes = catalog_text.as_bytes();
        let mut f = File::create(&path).map_err(|e| io_error("create", &path, e))?;
        f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| io_error("write", &path, e))?;
        let catalog = FileEntry { name: CATALOG_FILE.into(), size: bytes.len() as u64, crc32c: crc32c::crc32c(bytes) };
        Ok(SnapshotBuilder { dir, id, txn_id, partitions, catalog })
    }

    /// The snapshot's directory, for `SnapshotWriter::create`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A writer for partition `p`.
    pub fn partition_writer(&self, p: u32) -> Result<SnapshotWriter> {
        if p >= self.partitions {
            return Err(Error::unexpected(format!("snapshot has no partition {p}")));
        }
        SnapshotWriter::create(&self.dir, p, self.txn_id)
    }

    /// Writes the manifest, given every partition's finished file: the snapshot is
    /// complete once this returns Ok.
    pub fn complete(self, files: Vec<FileEntry>) -> Result<SnapshotInfo> {
        let mut all = Vec::with_capacity(files.len() + 1);
        for p in 0..self.partitions {
            let name = partition_file_name(p);
            let Some(f) = files.iter().find(|f| f.name == name) else {
                return Err(Error::unexpected(format!("snapshot {}: partition {p} was not written", self.id)));
            };
            all.push(f.clone());
        }
        all.push(self.catalog);
        let created_unix_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let manifest =
            Manifest { format: FORMAT_VERSION, id: self.id, txn_id: self.txn_id, partitions: self.partitions, created_unix_ms, files: all };
        let text =
            serde_json::to_vec_pretty(&manifest).map_err(|e| Error::unexpected(format!("cannot encode the snapshot manifest: {e}")))?;
        // Every file's contents and name must be on disk before the manifest says so.
        sync_dir(&self.dir)?;
        let tmp = self.dir.join(format!("{MANIFEST_FILE}.tmp"));
        let mut f = File::create(&tmp).map_err(|e| io_error("create", &tmp, e))?;
        f.write_all(&text).and_then(|_| f.sync_all()).map_err(|e| io_error("write", &tmp, e))?;
        let path = self.dir.join(MANIFEST_FILE);
        std::fs::rename(&tmp, &path).map_err(|e| io_error("rename", &tmp, e))?;
        sync_dir(&self.dir)?;
        Ok(SnapshotInfo::new(&manifest, self.dir))
    }
}

#[cfg(test)]
mod tests {
    use lockstep_core::{Catalog, ColumnDef, HashRing, IndexDef, TableDef, TableKind};
    use lockstep_storage::Partition;

    use super::*;
    use crate::cmdlog::testing::TempDir;
    use crate::snapshot::format::SnapshotItem;
    use crate::snapshot::reader::SnapshotReader;

    fn catalog() -> Catalog {
        let col = |name: &str, ty| ColumnDef { name: name.into(), ty, size: 0, in_bytes: false, nullable: true, default: None };
        let mut c = Catalog::default();
        for name in ["ACCOUNTS", "EVENTS"] {
            c.add_table(TableDef {
                id: 0,
                name: name.into(),
                columns: vec![col("ID", DataType::BigInt), col("NOTE", DataType::Varchar)],
                indexes: vec![IndexDef {
                    name: format!("PK_{name}"),
                    columns: vec![0],
                    unique: true,
                    assume_unique: false,
                    primary: true,
                    exprs: vec![],
                    predicate: None,
                }],
                partition_column: None,
                kind: TableKind::Table,
            })
            .unwrap();
        }
        c
    }

    fn partition(c: &Catalog) -> Partition {
        let mut p = Partition::new(0);
        p.apply_schema(c, &HashRing::new(1)).unwrap();
        p
    }

    #[test]
    fn a_partition_snapshot_taken_during_writes_restores_the_state_at_begin() {
        let c = catalog();
        let mut live = partition(&c);
        let ids: Vec<_> = c.tables().map(|t| t.id).collect();
        for k in 0..500 {
            for &t in &ids {
                live.insert(t, vec![Value::Int(k), Value::Str(format!("v{k}").into())]).unwrap();
            }
        }
        live.commit();
        let expected = live.state_hash();

        let root = TempDir::new("snap-e2e");
        let b = SnapshotBuilder::create(root.path(), 1, 77, 1, "ddl").unwrap();
        let mut w = b.partition_writer(0).unwrap();
        live.begin_snapshot().unwrap();
        let mut current = None;
        let mut k = 0;
        while let Some(chunk) = live.snapshot_chunk(64) {
            for (t, rows) in chunk {
                if current != Some(t) {
                    let def = live.table(t).unwrap().def().clone();
                    let types: Vec<DataType> = def.columns.iter().map(|c| c.ty).collect();
                    w.begin_table(&def.name, &types).unwrap();
                    current = Some(t);
                }
                w.write_rows(&rows).unwrap();
            }
            // A transaction between two steps of the snapshot.
            let t = ids[k % 2];
            let id = live.table(t).unwrap().lookup(0, &[Value::Int(k as i64)])[0];
            live.delete(t, id).unwrap();
            live.insert(t, vec![Value::Int(10_000 + k as i64), Value::Null]).unwrap();
            live.commit();
            k += 1;
        }
        live.end_snapshot();
        assert!(k > 10, "the snapshot was written in {k} steps");
        assert_ne!(live.state_hash(), expected);
        b.complete(vec![w.finish().unwrap()]).unwrap();

        let mut restored = partition(&c);
        let r = SnapshotReader::open(&root.path().join("1")).unwrap();
        let mut pr = r.partition(0).unwrap();
        let mut table = None;
        while let Some(item) = pr.next_item().unwrap() {
            match item {
                SnapshotItem::Table { name, .. } => table = c.table(&name).map(|d| d.id),
                SnapshotItem::Rows(rows) => {
                    for row in rows {
                        restored.insert(table.unwrap(), row).unwrap();
                    }
                }
                SnapshotItem::Export(c) => panic!("a snapshot with export rows of {}", c.target),
            }
        }
        assert_eq!(restored.state_hash(), expected);
    }
}
