//! Snapshots: a consistent image of every partition at one transaction boundary, on disk.
//!
//! A snapshot is a directory `<data>/snapshots/<id>/` holding `partition-<p>.snap` per
//! partition, `catalog.sql`, and `manifest.json`, written last, after every other file and
//! the directory are synced. A snapshot without a valid manifest, or whose files do not
//! match the sizes and checksums the manifest records, is ignored, so recovery falls back
//! to an older one.
//!
//! - `format`: the partition file's sections (table header, row chunks, end; and in a
//!   cluster's rejoin image, export rows), checksummed.
//! - `writer`: `SnapshotBuilder` (the directory, catalog and manifest) and `SnapshotWriter`
//!   (one partition file, written incrementally between transactions).
//! - `manifest`: the manifest's contents.
//! - `reader`: `SnapshotReader`, `list_snapshots`, `scan_snapshots` and `prune`.

pub mod format;
#[doc(hidden)]
pub mod fuzzing;
pub mod manifest;
pub mod reader;
pub mod writer;

use std::path::{Path, PathBuf};

pub use format::SnapshotItem;
pub use manifest::{FileEntry, Manifest};
pub use reader::{list_snapshots, next_snapshot_id, prune, scan_snapshots, PartitionReader, SnapshotInfo, SnapshotReader, SnapshotScan};
pub use writer::{SnapshotBuilder, SnapshotWriter};

/// The snapshots directory inside a data directory.
pub fn snapshots_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("snapshots")
}

/// The file name of partition `p`'s image.
pub fn partition_file_name(p: u32) -> String {
    format!("partition-{p}.snap")
}

/// The catalog's DDL text inside a snapshot.
pub const CATALOG_FILE: &str = "catalog.sql";
/// Written last: its presence marks the snapshot complete.
pub const MANIFEST_FILE: &str = "manifest.json";

fn io_error(what: &str, path: &Path, e: std::io::Error) -> lockstep_core::Error {
    lockstep_core::Error::unexpected(format!("snapshot: cannot {what} {}: {e}", path.display()))
}
