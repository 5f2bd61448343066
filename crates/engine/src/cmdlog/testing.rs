//! Test helpers for the command log: a temporary directory and a file system whose
//! writes and syncs can be made to fail, counted, or held at a gate.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::cmdlog::fs::{LogFile, LogFs, RealFs};
use crate::cmdlog::reader::{LogEntry, LogReader};
use crate::cmdlog::record::Record;

/// A directory removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("lockstep-durability-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the faulty file system shares with the test.
#[derive(Default)]
pub struct Faults {
    /// Writes fail (after writing half the buffer, like a disk filling up mid-write).
    pub fail_writes: AtomicBool,
    /// Syncs fail (the data was written but may not be on disk).
    pub fail_syncs: AtomicBool,
    pub syncs: AtomicU64,
    pub written_bytes: AtomicU64,
    /// Bytes written when the last successful sync began.
    pub synced_bytes: AtomicU64,
    /// While true, syncs wait (after announcing themselves in `sync_waiting`).
    gate_closed: Mutex<bool>,
    gate: Condvar,
    pub sync_waiting: AtomicBool,
}

impl Faults {
    pub fn close_gate(&self) {
        *self.gate_closed.lock().unwrap() = true;
    }

    pub fn open_gate(&self) {
        *self.gate_closed.lock().unwrap() = false;
        self.gate.notify_all();
    }

    fn wait_gate(&self) {
        let mut closed = self.gate_closed.lock().unwrap();
        while *closed {
            self.sync_waiting.store(true, Ordering::SeqCst);
            closed = self.gate.wait(closed).unwrap();
        }
    }
}

/// Real files, with the faults and counters of `Faults`.
pub struct FaultyFs(pub Arc<Faults>);

struct FaultyFile {
    inner: Box<dyn LogFile>,
    faults: Arc<Faults>,
}

impl LogFile for FaultyFile {
    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        if self.faults.fail_writes.load(Ordering::SeqCst) {
            self.inner.write_all_at(&buf[..buf.len() / 2], offset)?;
            return Err(io::Error::new(io::ErrorKind::StorageFull, "injected: no space left"));
        }
        self.inner.write_all_at(buf, offset)?;
        self.faults.written_bytes.fetch_add(buf.len() as u64, Ordering::SeqCst);
        Ok(())
    }

    /// Fails like a write; the zeros are not counted as written record bytes.
    fn extend_with_zeros(&mut self, from: u64, to: u64) -> io::Result<()> {
        if self.faults.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::new(io::ErrorKind::StorageFull, "injected: no space left"));
        }
        self.inner.extend_with_zeros(from, to)
    }

    fn sync_data(&mut self) -> io::Result<()> {
        self.faults.wait_gate();
        if self.faults.fail_syncs.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected: sync failed"));
        }
        let written = self.faults.written_bytes.load(Ordering::SeqCst);
        self.inner.sync_data()?;
        self.faults.syncs.fetch_add(1, Ordering::SeqCst);
        self.faults.synced_bytes.store(written, Ordering::SeqCst);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
}

impl LogFs for FaultyFs {
    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let inner = RealFs.open(path)?;
        Ok(Box::new(FaultyFile { inner, faults: self.0.clone() }))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        RealFs.sync_dir(dir)
    }
}

/// A small distinct record.
pub fn rec(i: i64) -> Record {
    Record::Sp {
        txn_id: i,
        partition: (i % 3) as u32,
        procedure: "Vote".into(),
        params: vec![lockstep_core::Value::Int(i), lockstep_core::Value::from("x")],
    }
}

/// Every record of the log in `dir`, failing the test on an error.
pub fn read_all(dir: &Path) -> Vec<LogEntry> {
    LogReader::open(dir).unwrap().map(|e| e.unwrap()).collect()
}

/// Waits (boundedly) for a condition another thread makes true.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..10_000 {
        if cond() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("gave up waiting for {what}");
}

/// The system allocator, noting the largest single allocation each thread makes, so that
/// tests can check that a reader reserves no more than the bytes it was given justify.
pub struct LargestAlloc;

thread_local! {
    // Const-initialized and without a destructor: safe to touch from inside the allocator.
    static LARGEST_ALLOC_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[global_allocator]
static ALLOCATOR: LargestAlloc = LargestAlloc;

impl LargestAlloc {
    fn note(size: usize) {
        let _ = LARGEST_ALLOC_BYTES.try_with(|l| l.set(l.get().max(size)));
    }
}

// SAFETY: every call is passed to `System` unchanged; `note` only records a size.
unsafe impl std::alloc::GlobalAlloc for LargestAlloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::note(layout.size());
        std::alloc::System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        Self::note(layout.size());
        std::alloc::System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        Self::note(new_size);
        std::alloc::System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
}

/// Runs `read` on every input kept in `fuzz/regressions/<target>` of the repository (a
/// target whose fuzzing has found nothing yet has no directory) and checks that none panics
/// or allocates more at once than the fuzzer allows.
pub fn replay_fuzz_regressions(target: &str, read: impl Fn(&[u8]) + std::panic::RefUnwindSafe) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let (outcome, largest) = largest_allocation(|| std::panic::catch_unwind(|| read(&data)));
        assert!(outcome.is_ok(), "fuzz regression {} fails again", path.display());
        let limit = lockstep_wire::fuzzing::allocation_limit_bytes(data.len());
        assert!(largest <= limit, "fuzz regression {}: {largest} bytes allocated at once, over {limit}", path.display());
    }
}

/// What `f` returns, and the largest single allocation it made on this thread.
pub fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST_ALLOC_BYTES.with(|l| l.set(0));
    let out = f();
    (out, LARGEST_ALLOC_BYTES.with(|l| l.get()))
}
