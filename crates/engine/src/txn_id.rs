//! Transaction ids that order transactions and carry their timestamp (VoltDB's unique ids):
//! 41 bits of milliseconds since 2020-01-01, 9 bits of counter, 14 bits of partition id.
//! The clock is read here, by the initiator, never inside a transaction: a procedure sees
//! only the time recorded in its id, so replaying the id replays the time.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// 2020-01-01T00:00:00Z in milliseconds since the Unix epoch.
const EPOCH_MS: i64 = 1_577_836_800_000;
const COUNTER_BITS: u32 = 9;
const PARTITION_BITS: u32 = 14;
const COUNTER_MAX: i64 = (1 << COUNTER_BITS) - 1;
/// How long the wall clock read for ids is extended by the monotonic clock before it is
/// read again: a site reads the monotonic clock for each call anyway, and the two drift
/// apart by far less than a millisecond in that time.
const WALL_CLOCK_REREAD: Duration = Duration::from_millis(200);

/// Makes strictly increasing ids for one partition (or for the MP coordinator, id 16383).
#[derive(Debug)]
pub struct TxnIdGenerator {
    partition: i64,
    last_ms: i64,
    counter: i64,
    /// The last id made.
    last_id: i64,
    /// The monotonic instant the wall clock was last read at, and its milliseconds then.
    anchor: Option<(Instant, i64)>,
}

impl TxnIdGenerator {
    pub fn new(partition: u32) -> Self {
        assert!(partition < (1 << PARTITION_BITS), "partition id out of range");
        TxnIdGenerator { partition: partition as i64, last_ms: 0, counter: 0, last_id: i64::MIN, anchor: None }
    }

    fn now_ms() -> i64 {
        let since_unix = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        (since_unix - EPOCH_MS).max(0)
    }

    /// The wall clock's milliseconds at monotonic instant `at`, from the last reading of
    /// the wall clock if it is recent.
    fn ms_at(&mut self, at: Instant) -> i64 {
        match self.anchor {
            Some((then, ms)) if at >= then && at - then < WALL_CLOCK_REREAD => ms + (at - then).as_millis() as i64,
            _ => {
                let ms = Self::now_ms();
                self.anchor = Some((at, ms));
                ms
            }
        }
    }

    /// The next id. If the clock stands still or goes back, time is borrowed from the
    /// future so ids keep growing.
    pub fn next_id(&mut self) -> i64 {
        self.next_id_at(Instant::now())
    }

    /// `next_id`, for a caller that has just read the monotonic clock (`now`).
    pub fn next_id_at(&mut self, now: Instant) -> i64 {
        let now = self.ms_at(now);
        if now > self.last_ms {
            self.last_ms = now;
            self.counter = 0;
        } else if self.counter < COUNTER_MAX {
            self.counter += 1;
        } else {
            self.last_ms += 1;
            self.counter = 0;
        }
        let id = (self.last_ms << (COUNTER_BITS + PARTITION_BITS)) | (self.counter << PARTITION_BITS) | self.partition;
        // Ids only grow: replay order and the command log's order rely on it.
        assert!(id > self.last_id, "transaction id {id} does not follow {}", self.last_id);
        self.last_id = id;
        id
    }
}

impl TxnIdGenerator {
    /// The greatest id made or passed so far (for a snapshot to say which transactions it
    /// holds; passing it to `advance_past` elsewhere keeps later ids above them all).
    pub fn high_water(&self) -> i64 {
        (self.last_ms << (COUNTER_BITS + PARTITION_BITS)) | (self.counter << PARTITION_BITS) | self.partition
    }

    /// Makes every later id greater than `txn_id` (after replaying logged transactions).
    pub fn advance_past(&mut self, txn_id: i64) {
        let ms = txn_id >> (COUNTER_BITS + PARTITION_BITS);
        let counter = (txn_id >> PARTITION_BITS) & COUNTER_MAX;
        if (ms, counter) > (self.last_ms, self.counter) {
            self.last_ms = ms;
            self.counter = counter;
        }
    }
}

/// The timestamp (µs since the Unix epoch) a transaction id carries.
pub fn timestamp_micros(txn_id: i64) -> i64 {
    ((txn_id >> (COUNTER_BITS + PARTITION_BITS)) + EPOCH_MS) * 1000
}

/// The partition a transaction id was made for.
pub fn partition_of(txn_id: i64) -> u32 {
    (txn_id & ((1 << PARTITION_BITS) - 1)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_increase_and_carry_partition_and_time() {
        let mut g = TxnIdGenerator::new(3);
        let mut last = 0;
        for _ in 0..5000 {
            let id = g.next_id();
            assert!(id > last);
            assert_eq!(partition_of(id), 3);
            last = id;
        }
        let now_us = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as i64;
        let ts = timestamp_micros(last);
        // Borrowing from the future is bounded by 5000 ids / 512 per ms ≈ 10 ms.
        assert!((ts - now_us).abs() < 60_000_000, "timestamp {ts} far from now {now_us}");
    }

    #[test]
    fn ids_made_close_together_take_their_time_from_the_monotonic_clock() {
        let mut g = TxnIdGenerator::new(1);
        let t0 = Instant::now();
        let a = g.next_id_at(t0);
        let b = g.next_id_at(t0 + Duration::from_millis(150));
        assert_eq!(timestamp_micros(b) - timestamp_micros(a), 150_000);
        // Past the re-read interval the wall clock is read again (here it is behind the
        // instant given): ids still grow.
        let c = g.next_id_at(t0 + Duration::from_secs(1));
        assert!(c > b);
    }
}
