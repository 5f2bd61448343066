//! The resource monitor: watches the process's resident memory and, above the limit, has
//! writes refused with a clear error while reads go on (VoltDB pauses the database the same
//! way). Writes are accepted again once memory falls a little below the limit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use lockstep_core::{Error, Result};

/// How often resident memory is read.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(200);
/// Writes resume below this share of the limit (in thousandths), so they do not flap.
const RESUME_PER_MILLE: u64 = 950;
/// The default limit, as a share of the machine's memory (VoltDB's default is 80%).
pub const MEMORY_LIMIT_PERCENT_DEFAULT: u64 = 80;

/// `--memory-limit` as given on the command line or in the config file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    Off,
    Bytes(u64),
    /// A share of the machine's memory (or of the cgroup's limit, if lower).
    Percent(u64),
}

impl Default for MemoryLimit {
    fn default() -> Self {
        MemoryLimit::Percent(MEMORY_LIMIT_PERCENT_DEFAULT)
    }
}

impl MemoryLimit {
    /// Parses "off", "80%", or bytes with an optional k, m, g or t (powers of 1024).
    pub fn parse(text: &str) -> Result<MemoryLimit> {
        let t = text.trim().to_ascii_lowercase();
        let bad = || {
            Error::graceful(format!(
                "--memory-limit must be \"off\", a percentage such as 80%, or a size such as 4g or 512m; not \"{text}\""
            ))
        };
        if t == "off" {
            return Ok(MemoryLimit::Off);
        }
        if let Some(p) = t.strip_suffix('%') {
            let p: u64 = p.trim().parse().map_err(|_| bad())?;
            return if (1..=100).contains(&p) { Ok(MemoryLimit::Percent(p)) } else { Err(bad()) };
        }
        let (digits, shift) = match t.char_indices().last() {
            Some((i, 'k')) => (&t[..i], 10),
            Some((i, 'm')) => (&t[..i], 20),
            Some((i, 'g')) => (&t[..i], 30),
            Some((i, 't')) => (&t[..i], 40),
            _ => (t.as_str(), 0),
        };
        let n: u64 = digits.trim().parse().map_err(|_| bad())?;
        n.checked_mul(1u64 << shift).filter(|b| *b > 0).map(MemoryLimit::Bytes).ok_or_else(bad)
    }

    /// The limit in bytes on this machine; None when off or when the machine's memory
    /// cannot be read.
    pub fn bytes(self) -> Option<u64> {
        match self {
            MemoryLimit::Off => None,
            MemoryLimit::Bytes(b) => Some(b),
            MemoryLimit::Percent(p) => machine_memory_bytes().map(|m| m / 100 * p),
        }
    }
}

/// What the monitor knows, shared with whoever checks writes.
pub struct MemoryGuard {
    limit_bytes: Option<u64>,
    resident_bytes: AtomicU64,
    over: AtomicBool,
}

impl MemoryGuard {
    /// Starts watching (a thread that ends with the guard). While memory is over the limit,
    /// sites hand the memory their allocator holds freed back to the system when they idle.
    pub fn start(limit: MemoryLimit) -> Arc<MemoryGuard> {
        let limit_bytes = limit.bytes();
        let guard = Arc::new(MemoryGuard { limit_bytes, resident_bytes: AtomicU64::new(0), over: AtomicBool::new(false) });
        if let Some(limit) = limit_bytes {
            tracing::info!(limit_mib = limit >> 20, "writes are refused above {} MiB of memory (--memory-limit)", limit >> 20);
            let weak = Arc::downgrade(&guard);
            let spawned = std::thread::Builder::new().name("memory-monitor".into()).spawn(move || watch(weak, limit));
            if let Err(e) = spawned {
                tracing::error!("cannot start the memory monitor ({e}): --memory-limit is not enforced");
            }
        }
        guard
    }

    /// A guard that never refuses (tests, embedded use).
    pub fn off() -> Arc<MemoryGuard> {
        Arc::new(MemoryGuard { limit_bytes: None, resident_bytes: AtomicU64::new(0), over: AtomicBool::new(false) })
    }

    /// Whether writes are refused now.
    pub fn refuses_writes(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }

    /// The error a refused write gets.
    pub fn error(&self) -> Error {
        let mib = |b: u64| b >> 20;
        Error::unavailable(format!(
            "the server is using {} MiB of memory, over its limit of {} MiB (--memory-limit): writes are refused until \
             memory falls below it; reads, DELETE and DROP still work",
            mib(self.resident_bytes.load(Ordering::Relaxed)),
            mib(self.limit_bytes.unwrap_or(0))
        ))
    }

    /// Resident memory at the last sample, and the limit (for statistics).
    pub fn figures(&self) -> (u64, Option<u64>) {
        (self.resident_bytes.load(Ordering::Relaxed), self.limit_bytes)
    }

    /// Takes one sample and updates the state; true when it changed.
    fn update(&self, resident: u64, limit: u64) -> bool {
        self.resident_bytes.store(resident, Ordering::Relaxed);
        let was_over = self.over.load(Ordering::Relaxed);
        let now_over = if was_over { resident >= limit / 1000 * RESUME_PER_MILLE } else { resident > limit };
        self.over.store(now_over, Ordering::Relaxed);
        was_over != now_over
    }
}

fn watch(guard: Weak<MemoryGuard>, limit: u64) {
    while let Some(g) = guard.upgrade() {
        let Some(resident) = resident_bytes() else {
            tracing::error!("cannot read this process's memory use: --memory-limit is not enforced");
            return;
        };
        if g.update(resident, limit) {
            if g.refuses_writes() {
                tracing::warn!(resident_mib = resident >> 20, limit_mib = limit >> 20, "memory over the limit: refusing writes");
            } else {
                tracing::info!(resident_mib = resident >> 20, limit_mib = limit >> 20, "memory below the limit again: accepting writes");
            }
        }
        drop(g);
        std::thread::sleep(SAMPLE_INTERVAL);
    }
}

/// This process's resident memory, from /proc.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// The machine's memory, or the cgroup's limit when that is lower.
fn machine_memory_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    let total = kib * 1024;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok().and_then(|s| s.trim().parse::<u64>().ok());
    Some(cgroup.map_or(total, |c| c.min(total)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_as_sizes_percentages_or_off() {
        assert_eq!(MemoryLimit::parse("off").unwrap(), MemoryLimit::Off);
        assert_eq!(MemoryLimit::parse("75%").unwrap(), MemoryLimit::Percent(75));
        assert_eq!(MemoryLimit::parse("512m").unwrap(), MemoryLimit::Bytes(512 << 20));
        assert_eq!(MemoryLimit::parse("4G").unwrap(), MemoryLimit::Bytes(4 << 30));
        assert_eq!(MemoryLimit::parse("1000").unwrap(), MemoryLimit::Bytes(1000));
        for bad in ["", "0", "0%", "101%", "lots", "12q", "99999999999t"] {
            assert!(MemoryLimit::parse(bad).is_err(), "{bad:?} must be refused");
        }
        assert!(MemoryLimit::Percent(50).bytes().is_some_and(|b| b > 0), "the machine's memory is readable here");
    }

    #[test]
    fn writes_stop_above_the_limit_and_resume_only_clearly_below_it() {
        let g = MemoryGuard::off();
        let limit = 1000 << 20;
        assert!(!g.update(900 << 20, limit));
        assert!(!g.refuses_writes());
        assert!(g.update(1001 << 20, limit), "crossing the limit changes the state");
        assert!(g.refuses_writes());
        assert!(!g.update(990 << 20, limit), "just under the limit is not enough to resume");
        assert!(g.refuses_writes());
        assert!(g.update(900 << 20, limit));
        assert!(!g.refuses_writes());
        assert!(resident_bytes().is_some_and(|b| b > 0));
    }
}
