//! The data directory's owner: one process at a time may read or write a data directory.
//!
//! A second server started on a live directory used to replay the first one's log and write
//! a snapshot into it, and the next restart then dropped acknowledged transactions. The
//! lock is taken before anything in the directory is read, and the kernel releases it when
//! the process ends however it ends (SIGKILL included), so a crash never leaves it stale.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use lockstep_core::{Error, Result};

/// The lock file inside the data directory; it also says which process holds it.
pub const LOCK_FILE_NAME: &str = "lockstep.lock";
/// Bytes of the holder's note read back for an error message.
const HOLDER_NOTE_MAX_BYTES: u64 = 512;

/// Held for as long as this process owns the directory.
pub struct DataDirLock {
    file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Creates the directory if needed and takes its lock, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<DataDirLock> {
        std::fs::create_dir_all(dir).map_err(|e| Error::unexpected(format!("cannot create data directory {}: {e}", dir.display())))?;
        let path = dir.join(LOCK_FILE_NAME);
        let io = |what: &str, e: std::io::Error| Error::unexpected(format!("cannot {what} {}: {e}", path.display()));
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(|e| io("open", e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = holder_note(&mut file);
                return Err(Error::graceful(format!(
                    "the data directory {} is in use by another Lockstep process ({holder}): stop that process first, \
                     or start this one with another --data directory. Nothing in the directory was read or changed.",
                    dir.display()
                )));
            }
            Err(TryLockError::Error(e)) => return Err(io("lock", e)),
        }
        let note = format!("pid {}\n", std::process::id());
        file.set_len(0).map_err(|e| io("write", e))?;
        file.seek(SeekFrom::Start(0)).and_then(|_| file.write_all(note.as_bytes())).map_err(|e| io("write", e))?;
        Ok(DataDirLock { file, path })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDirLock {
    fn drop(&mut self) {
        // Closing the file releases the lock as well; unlocking first makes the release
        // immediate even if another handle to the same open file lingers.
        let _ = self.file.unlock();
    }
}

/// What the holder wrote into the lock file ("pid N"), for the error message.
fn holder_note(file: &mut File) -> String {
    let mut text = String::new();
    let read = file.seek(SeekFrom::Start(0)).is_ok() && file.take(HOLDER_NOTE_MAX_BYTES).read_to_string(&mut text).is_ok();
    let text = text.trim();
    if read && !text.is_empty() {
        text.to_string()
    } else {
        "process unknown".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("lockstep-datadir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = DataDirLock::acquire(&dir).expect("first lock");
        let refused = DataDirLock::acquire(&dir).err().expect("a second lock on a held directory must fail");
        assert!(refused.message.contains("in use by another Lockstep process"), "{}", refused.message);
        assert!(refused.message.contains(&format!("pid {}", std::process::id())), "names the holder: {}", refused.message);
        drop(first);
        let again = DataDirLock::acquire(&dir).expect("the lock is free once its holder is gone");
        assert!(again.path().ends_with(LOCK_FILE_NAME));
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
