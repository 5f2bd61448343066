//! The file operations of the command log writer, behind a trait so that tests can make
//! writes and syncs fail (disk full, I/O error) or observe them.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// An open segment file, written only by appending.
pub trait LogFile: Send {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;
    /// fdatasync: the written bytes are on disk when this returns Ok.
    fn sync_data(&mut self) -> io::Result<()>;
    /// Cuts the file to `len` bytes (drops a partly written batch after a failure).
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

/// Opening files and syncing directories.
pub trait LogFs: Send + Sync {
    /// Opens `path` for appending, creating it if needed.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Makes the creation of files in `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real file system.
pub struct RealFs;

struct RealFile(File);

impl LogFile for RealFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
}

impl LogFs for RealFs {
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}
