//! Rate limits for log lines that outside input can repeat at will (a client that connects
//! with garbage a thousand times a second must not fill the disk with warnings).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Lets through at most `per_window` events per window; counts the rest.
pub struct Throttle {
    per_window: u64,
    window_ms: u64,
    /// Start of the current window, in ms since the process's first look at the clock.
    window_start_ms: AtomicU64,
    /// Events seen in the current window.
    seen: AtomicU64,
    /// Events refused since the last one let through.
    suppressed: AtomicU64,
}

fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Throttle {
    /// At most `per_window` events every `window`.
    pub const fn new(per_window: u64, window: Duration) -> Throttle {
        Throttle {
            per_window,
            window_ms: window.as_millis() as u64,
            window_start_ms: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether to log this event: `Some(n)` with the number of events refused since the last
    /// one let through (to say in the line), or `None` to stay quiet.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(now_ms())
    }

    fn admit_at(&self, now_ms: u64) -> Option<u64> {
        let start = self.window_start_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(start) >= self.window_ms
            && self.window_start_ms.compare_exchange(start, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            self.seen.store(0, Ordering::Relaxed);
        }
        if self.seen.fetch_add(1, Ordering::Relaxed) < self.per_window {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_cut_to_the_window_and_the_next_line_counts_what_was_dropped() {
        let t = Throttle::new(3, Duration::from_secs(10));
        let first_window: Vec<Option<u64>> = (0..10).map(|_| t.admit_at(20_000)).collect();
        assert_eq!(first_window, [Some(0), Some(0), Some(0), None, None, None, None, None, None, None]);
        assert_eq!(t.admit_at(25_000), None, "still the same window");
        assert_eq!(t.admit_at(30_001), Some(8), "a new window: the first line says 8 were dropped");
        assert_eq!(t.admit_at(30_002), Some(0));
    }
}
