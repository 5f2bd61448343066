//! Answers given together leave their I/O until the last of them is given. A site that
//! answers 16 calls of one connection then writes that connection's socket once, not 16
//! times. A batch lives on one thread, for the span of [`batch`]; for an answer given
//! outside any batch, [`defer`] says no, and the answer's own I/O decides when to write
//! (a connection's outbox leaves it to the connection's writer task). The batch also
//! reads the clock once for all its answers.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Instant;

/// What an answer leaves to the end of its batch: say, writing a connection's encoded
/// answers to its socket.
pub trait Flush: Send + Sync {
    fn flush(&self);
}

thread_local! {
    /// Some while a batch is open on this thread: what to flush when it closes.
    static OPEN: RefCell<Option<Vec<Arc<dyn Flush>>>> = const { RefCell::new(None) };
    /// The last batch's list, emptied, so that a batch allocates nothing.
    static SPARE: RefCell<Vec<Arc<dyn Flush>>> = const { RefCell::new(Vec::new()) };
    /// When the batch open on this thread began.
    static OPENED_AT: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The time an answer is ready: when the batch open on this thread began (its answers
/// were all ready then), or the clock's reading outside a batch.
pub fn now() -> Instant {
    OPENED_AT.get().unwrap_or_else(Instant::now)
}

/// Runs `f` with a batch open on this thread, then flushes what the answers given in it
/// deferred (once each, in the order first deferred). Inside a batch already, it only runs `f`.
pub fn batch<T>(f: impl FnOnce() -> T) -> T {
    let opened = OPEN.with_borrow_mut(|open| {
        if open.is_some() {
            return false;
        }
        *open = Some(SPARE.take());
        true
    });
    if !opened {
        return f();
    }
    OPENED_AT.set(Some(Instant::now()));
    // Flushed even if `f` panics: a deferred write is an answer someone waits for.
    let _close = Close;
    f()
}

struct Close;

impl Drop for Close {
    fn drop(&mut self) {
        OPENED_AT.set(None);
        let Some(mut deferred) = OPEN.with_borrow_mut(Option::take) else { return };
        for item in deferred.drain(..) {
            item.flush();
        }
        SPARE.set(deferred);
    }
}

/// Leaves `item`'s flush to the end of the batch open on this thread; false (nothing
/// deferred: the caller writes as it sees fit) when no batch is open.
pub fn defer<F: Flush + 'static>(item: &Arc<F>) -> bool {
    OPEN.with_borrow_mut(|open| {
        let Some(deferred) = open else { return false };
        // Answers to one connection usually come in a row: it is listed once for them.
        // One listed twice is only flushed a second time with nothing left to write.
        let listed = deferred.last().is_some_and(|last| std::ptr::addr_eq(Arc::as_ptr(last), Arc::as_ptr(item)));
        if !listed {
            deferred.push(item.clone());
        }
        true
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl Flush for Counted {
        fn flush(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_batch_flushes_what_was_deferred_once_when_it_closes() {
        let (a, b) = (Arc::new(Counted::default()), Arc::new(Counted::default()));
        assert!(!defer(&a), "outside a batch nothing is deferred");
        let before = Instant::now();
        batch(|| {
            // One reading serves the batch, taken when it opened.
            let at = now();
            assert!(at >= before && now() == at);
            assert!(defer(&a) && defer(&a) && defer(&b));
            // A nested batch does not close the outer one.
            batch(|| assert!(defer(&b)));
            assert_eq!(a.0.load(Ordering::SeqCst) + b.0.load(Ordering::SeqCst), 0, "flushed before the batch closed");
        });
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 1, "b was deferred twice in a row: flushed once");
        assert!(!defer(&a), "the batch is closed");
    }

    #[test]
    fn a_batch_that_panics_still_flushes() {
        let a = Arc::new(Counted::default());
        let a2 = a.clone();
        let r = std::panic::catch_unwind(move || {
            batch(|| {
                defer(&a2);
                panic!("a reply panicked");
            })
        });
        assert!(r.is_err());
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert!(!defer(&a), "the batch is closed");
    }
}
