//! The manifest: written last, it says the snapshot is complete and what it holds.

use std::path::Path;

use lockstep_core::{Error, Result};
use serde::{Deserialize, Serialize};

use crate::snapshot::{io_error, MANIFEST_FILE};

/// Format version of the manifest and the files it lists.
pub const FORMAT_VERSION: u32 = 1;
/// Largest manifest a reader accepts.
const MANIFEST_SIZE_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// One file of a snapshot, as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    pub name: String,
    pub size: u64,
    pub crc32c: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub id: u64,
    /// The last transaction whose effects the snapshot holds.
    pub txn_id: i64,
    pub partitions: u32,
    /// Milliseconds since the Unix epoch when the snapshot completed (for display only).
    pub created_unix_ms: u64,
    /// Every partition file and the catalog.
    pub files: Vec<FileEntry>,
}

impl Manifest {
    /// Reads and checks the manifest of the snapshot in `dir`.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST_FILE);
        let len = std::fs::metadata(&path).map_err(|e| io_error("read", &path, e))?.len();
        if len > MANIFEST_SIZE_MAX_BYTES {
            return Err(Error::unexpected(format!("{} is too large ({len} bytes)", path.display())));
        }
        let text = std::fs::read(&path).map_err(|e| io_error("read", &path, e))?;
        let m: Manifest =
            serde_json::from_slice(&text).map_err(|e| Error::unexpected(format!("{} is not a valid manifest: {e}", path.display())))?;
        if m.format != FORMAT_VERSION {
            return Err(Error::unexpected(format!("{} has format {}, this version reads {FORMAT_VERSION}", path.display(), m.format)));
        }
        Ok(m)
    }

    pub fn file(&self, name: &str) -> Option<&FileEntry> {
        self.files.iter().find(|f| f.name == name)
    }
}
