//! Limits on what one statement may cost: time (the query timeout, a `Deadline` checked
//! every few thousand rows) and memory (the bytes of the answer it builds, the rows and
//! bytes a multi-partition read gathers at the coordinator), all enforced while the work
//! runs, not after.

use std::cell::Cell;
use std::time::{Duration, Instant};

use lockstep_core::{Error, Result, Value};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Largest answer one statement may build, in bytes as encoded for the client (about):
/// VoltDB's protocol carries at most 50 MiB in one frame.
pub const RESULT_BYTES_MAX: usize = 50 * 1024 * 1024;
/// Most rows one multi-partition read may gather at the coordinator.
pub const GATHER_ROWS_MAX: usize = 10_000_000;
/// Most bytes (as `row_bytes` counts them) one multi-partition read may gather at the
/// coordinator.
pub const GATHER_BYTES_MAX: usize = 256 * 1024 * 1024;
/// Rows visited between two looks at the clock: reading it costs tens of nanoseconds, a
/// row a few; a statement touching fewer rows never reads it.
pub const DEADLINE_CHECK_ROWS: u32 = 4096;

/// The start of VoltDB's message for a statement stopped by the query timeout.
const TIMEOUT_MESSAGE_START: &str = "A SQL query was terminated after";

/// When a statement must stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    /// When the work began (the time reported when it is stopped is counted from here).
    pub started: Instant,
    /// When it must stop.
    pub at: Instant,
}

impl Deadline {
    /// A deadline `timeout` from now; None when that is too far to represent (no limit).
    pub fn after(timeout: Duration) -> Option<Deadline> {
        let started = Instant::now();
        started.checked_add(timeout).map(|at| Deadline { started, at })
    }

    /// The error to fail with when the deadline has passed at `now`, else None.
    fn passed(&self, now: Instant) -> Option<Error> {
        if now < self.at {
            return None;
        }
        let secs = now.saturating_duration_since(self.started).as_secs_f64();
        Some(Error::graceful(format!("{TIMEOUT_MESSAGE_START} {secs:.3} seconds because it exceeded the query timeout period.")))
    }
}

/// A deadline as data for another node: instants mean nothing on another machine, so it
/// travels as the time spent and the time left when it was written, and is read back
/// against the reader's clock (the time on the wire counts as neither).
pub(crate) mod deadline_serde {
    use super::*;

    /// Microseconds: (spent since `started`, left until `at`).
    type Wire = Option<(u64, u64)>;

    fn micros(d: Duration) -> u64 {
        u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
    }

    pub fn serialize<S: Serializer>(d: &Option<Deadline>, s: S) -> std::result::Result<S::Ok, S::Error> {
        let now = Instant::now();
        let wire: Wire = d.map(|d| (micros(now.saturating_duration_since(d.started)), micros(d.at.saturating_duration_since(now))));
        wire.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Deadline>, D::Error> {
        let now = Instant::now();
        Ok(Wire::deserialize(d)?.and_then(|(spent, left)| {
            let started = now.checked_sub(Duration::from_micros(spent)).unwrap_or(now);
            // A time left too far to represent is no limit, as `Deadline::after` has it.
            now.checked_add(Duration::from_micros(left)).map(|at| Deadline { started, at })
        }))
    }
}

/// Whether `e` is the query timeout's error.
pub fn is_query_timeout(e: &Error) -> bool {
    e.message.starts_with(TIMEOUT_MESSAGE_START)
}

/// The memory caps of one statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Bytes of the answer, and of the rows held to build it (rows waiting to be sorted,
    /// groups): see `RESULT_BYTES_MAX`.
    pub result_bytes_max: usize,
    /// Rows a multi-partition read may gather at the coordinator: see `GATHER_ROWS_MAX`.
    pub gather_rows_max: usize,
    /// Bytes a multi-partition read may gather at the coordinator: see `GATHER_BYTES_MAX`.
    pub gather_bytes_max: usize,
}

impl Limits {
    pub const DEFAULT: Limits =
        Limits { result_bytes_max: RESULT_BYTES_MAX, gather_rows_max: GATHER_ROWS_MAX, gather_bytes_max: GATHER_BYTES_MAX };
    /// No caps at all.
    pub const UNLIMITED: Limits = Limits { result_bytes_max: usize::MAX, gather_rows_max: usize::MAX, gather_bytes_max: usize::MAX };

    pub(crate) fn result_too_big(&self) -> Error {
        Error::graceful(format!(
            "the query's result would be larger than {}, the most one answer may hold: add a LIMIT or a filter, or select fewer columns",
            describe_bytes(self.result_bytes_max)
        ))
    }

    pub(crate) fn gather_too_big(&self, rows: usize, bytes: usize) -> Option<Error> {
        let what = if rows > self.gather_rows_max {
            format!("more than {} rows", self.gather_rows_max)
        } else if bytes > self.gather_bytes_max {
            format!("more than {}", describe_bytes(self.gather_bytes_max))
        } else {
            return None;
        };
        Some(Error::graceful(format!(
            "the multi-partition query would gather {what} from the partitions, its limit: add a filter on the partition column, or an aggregate"
        )))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// `n` bytes for a message, with MiB when it is a whole number of them.
fn describe_bytes(n: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB ({n} bytes)", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

/// About the bytes a value takes in a VoltTable row (integers counted at 8).
pub fn value_bytes(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 1,
        Value::Int(_) | Value::Float(_) | Value::Timestamp(_) => 8,
        Value::Decimal(_) => 16,
        Value::Str(s) => 4 + s.len(),
        Value::Bytes(b) => 4 + b.len(),
        Value::Array(a) => 2 + a.iter().map(value_bytes).sum::<usize>(),
        Value::Point(_) => 16,
        Value::Geography(g) => 4 + g.wire_len(),
    }
}

/// About the bytes a row takes in a VoltTable (its length, then its values).
pub fn row_bytes(row: &[Value]) -> usize {
    4 + row.iter().map(value_bytes).sum::<usize>()
}

/// One statement's watch on its deadline: `tick` once per row; every
/// `DEADLINE_CHECK_ROWS` ticks it reads the clock. Not shared between threads (each
/// partition of a multi-partition read keeps its own).
#[derive(Debug)]
pub struct Watch {
    deadline: Option<Deadline>,
    /// Ticks left before the next look at the clock.
    left: Cell<u32>,
}

impl Watch {
    pub fn new(deadline: Option<Deadline>) -> Watch {
        Watch { deadline, left: Cell::new(DEADLINE_CHECK_ROWS) }
    }

    /// A watch on the same deadline, for one run of a subquery: it looks at the clock on its
    /// first row, so a correlated subquery run once per row of a large query, each run too
    /// short to reach a check of its own, still looks once per run.
    pub fn child(&self) -> Watch {
        Watch { deadline: self.deadline, left: Cell::new(0) }
    }

    /// Counts one row; fails once in a while if the deadline has passed.
    #[inline]
    pub fn tick(&self) -> Result<()> {
        let n = self.left.get();
        if n > 0 {
            self.left.set(n - 1);
            return Ok(());
        }
        self.check()
    }

    /// Looks at the clock now (before and after a long step such as a sort).
    #[cold]
    pub fn check(&self) -> Result<()> {
        self.left.set(DEADLINE_CHECK_ROWS);
        match self.deadline.and_then(|d| d.passed(Instant::now())) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_passed_deadline_is_noticed_within_the_check_interval() {
        let w = Watch::new(Some(Deadline { started: Instant::now(), at: Instant::now() }));
        let mut ticks = 0u32;
        let err = loop {
            ticks += 1;
            if let Err(e) = w.tick() {
                break e;
            }
            assert!(ticks <= DEADLINE_CHECK_ROWS + 1, "never noticed");
        };
        assert!(is_query_timeout(&err), "{}", err.message);
        assert!(err.message.ends_with("seconds because it exceeded the query timeout period."));
        let none = Watch::new(None);
        for _ in 0..3 * DEADLINE_CHECK_ROWS {
            assert!(none.tick().is_ok());
        }
        assert!(Deadline::after(Duration::MAX).is_none());
    }

    #[test]
    fn caps_name_themselves() {
        let l = Limits { result_bytes_max: 50 * 1024 * 1024, gather_rows_max: 10, gather_bytes_max: 1000 };
        assert!(l.result_too_big().message.contains("50 MiB"));
        assert!(l.gather_too_big(10, 1000).is_none());
        assert!(l.gather_too_big(11, 0).is_some_and(|e| e.message.contains("more than 10 rows")));
        assert!(l.gather_too_big(0, 1001).is_some_and(|e| e.message.contains("1000 bytes")));
        assert_eq!(row_bytes(&[Value::Int(1), Value::from("abc")]), 4 + 8 + 7);
    }
}
