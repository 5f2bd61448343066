//! The live connections and their in-flight windows, for `@Statistics LIVECLIENTS`
//! (answered by the front end: the engine does not know connections).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lockstep_core::{DataType, ResultTable, Value};
use lockstep_engine::sysprocs;
use tokio::sync::Notify;

/// One connection's in-flight window: the calls and request KiB it may have started and
/// not yet answered. Only the connection's reader takes slots, so taking needs no
/// compare-and-swap; answers give them back from whichever thread finishes the call.
pub struct InFlight {
    calls: AtomicUsize,
    kib: AtomicUsize,
    calls_max: usize,
    kib_max: usize,
    /// Answer bytes encoded and not yet taken by the client: while over the limit, no
    /// more calls are read, so a client that does not read cannot make the server hold more.
    answer_bytes: AtomicUsize,
    answer_bytes_max: usize,
    /// Set while the reader waits for room; whoever gives a slot back then wakes it.
    reader_waiting: AtomicBool,
    room: Notify,
}

/// A call's share of its connection's window, given back when dropped.
pub struct Slot {
    window: Arc<InFlight>,
    kib: usize,
    /// The share of the server-wide budget for large requests that the call's frame took.
    _large_request: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Slot {
    /// Keeps `permit` until the call is answered.
    pub fn hold(&mut self, permit: Option<tokio::sync::OwnedSemaphorePermit>) {
        self._large_request = permit;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.window.calls.fetch_sub(1, Ordering::SeqCst);
        self.window.kib.fetch_sub(self.kib, Ordering::SeqCst);
        self.window.wake_reader();
    }
}

impl InFlight {
    pub fn new(calls_max: usize, kib_max: usize, answer_bytes_max: usize) -> Arc<InFlight> {
        Arc::new(InFlight {
            calls: AtomicUsize::new(0),
            kib: AtomicUsize::new(0),
            calls_max: calls_max.max(1),
            kib_max: kib_max.max(1),
            answer_bytes: AtomicUsize::new(0),
            answer_bytes_max: answer_bytes_max.max(1),
            reader_waiting: AtomicBool::new(false),
            room: Notify::new(),
        })
    }

    /// Waits until one more call of `kib` KiB fits, then takes its slot. A call bigger than
    /// the whole window waits for an empty one. Only one task (the reader) may call this.
    pub async fn take(self: &Arc<Self>, kib: usize) -> Slot {
        let kib = kib.min(self.kib_max);
        while !self.fits(kib) {
            // Announce the wait, then look again: a slot given back in between is seen
            // either by that look or by the wakeup (Notify keeps a wakeup that finds no
            // waiter for the next `notified`; a stale one only costs a second look).
            self.reader_waiting.store(true, Ordering::SeqCst);
            if self.fits(kib) {
                break;
            }
            self.room.notified().await;
        }
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.kib.fetch_add(kib, Ordering::SeqCst);
        Slot { window: self.clone(), kib, _large_request: None }
    }

    fn fits(&self, kib: usize) -> bool {
        self.calls.load(Ordering::SeqCst) < self.calls_max
            && self.kib.load(Ordering::SeqCst) + kib <= self.kib_max
            && self.answer_bytes.load(Ordering::SeqCst) < self.answer_bytes_max
    }

    fn wake_reader(&self) {
        if self.reader_waiting.swap(false, Ordering::SeqCst) {
            self.room.notify_one();
        }
    }

    /// The writer encoded `n` bytes of answers for the client.
    pub fn answers_encoded(&self, n: usize) {
        self.answer_bytes.fetch_add(n, Ordering::SeqCst);
    }

    /// The client took `n` bytes of answers off the socket's buffer.
    pub fn answers_written(&self, n: usize) {
        self.answer_bytes.fetch_sub(n, Ordering::SeqCst);
        self.wake_reader();
    }

    fn answer_bytes_pending(&self) -> usize {
        self.answer_bytes.load(Ordering::Relaxed)
    }

    fn calls_in_flight(&self) -> usize {
        self.calls.load(Ordering::Relaxed)
    }

    fn kib_in_flight(&self) -> usize {
        self.kib.load(Ordering::Relaxed)
    }
}

/// A connection as LIVECLIENTS shows it.
pub struct Window {
    pub peer: SocketAddr,
    pub in_flight: Arc<InFlight>,
}

#[derive(Default)]
pub struct LiveClients {
    windows: Mutex<BTreeMap<i64, Window>>,
}

impl LiveClients {
    pub fn add(&self, id: i64, w: Window) {
        self.windows.lock().unwrap_or_else(|p| p.into_inner()).insert(id, w);
    }

    pub fn remove(&self, id: i64) {
        self.windows.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.windows.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// VoltDB's LIVECLIENTS layout: one row per connection.
    pub fn table(&self) -> ResultTable {
        use DataType::{BigInt as B, Integer as I, TinyInt as T, Varchar as V};
        let mut t = ResultTable::with_columns(&[
            ("TIMESTAMP", B),
            ("HOST_ID", I),
            ("HOSTNAME", V),
            ("CONNECTION_ID", B),
            ("CLIENT_HOSTNAME", V),
            ("ADMIN", T),
            ("OUTSTANDING_REQUEST_BYTES", B),
            // VoltDB counts answers waiting; we count their bytes.
            ("OUTSTANDING_RESPONSE_MESSAGES", B),
            ("OUTSTANDING_TRANSACTIONS", B),
        ]);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        let host = sysprocs::hostname();
        for (id, w) in self.windows.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            t.push(vec![
                Value::Int(now),
                Value::Int(sysprocs::HOST_ID as i64),
                Value::from(host.as_str()),
                Value::Int(*id),
                Value::Str(w.peer.to_string().into()),
                Value::Int(0),
                Value::Int(w.in_flight.kib_in_flight() as i64 * 1024),
                Value::Int(w.in_flight.answer_bytes_pending() as i64),
                Value::Int(w.in_flight.calls_in_flight() as i64),
            ]);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rows_show_what_each_window_holds() {
        let live = LiveClients::default();
        let in_flight = InFlight::new(10, 100, 1000);
        let _held = (in_flight.take(2).await, in_flight.take(3).await, in_flight.take(0).await);
        live.add(7, Window { peer: "127.0.0.1:9".parse().unwrap(), in_flight });
        let t = live.table();
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.rows[0][3], Value::Int(7));
        assert_eq!(t.rows[0][6], Value::Int(5 * 1024));
        assert_eq!(t.rows[0][8], Value::Int(3));
        live.remove(7);
        assert!(live.table().rows.is_empty());
    }

    /// Polls `take` once: whether it got a slot without waiting.
    fn take_now(w: &Arc<InFlight>, kib: usize) -> Option<Slot> {
        use std::future::Future;
        let mut f = Box::pin(w.take(kib));
        match f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(s) => Some(s),
            std::task::Poll::Pending => None,
        }
    }

    #[tokio::test]
    async fn unread_answers_stop_the_reader_until_the_client_takes_them() {
        let w = InFlight::new(100, 100, 1000);
        w.answers_encoded(999);
        let first = take_now(&w, 1).expect("999 bytes waiting is under the 1000-byte limit");
        w.answers_encoded(1);
        assert!(take_now(&w, 1).is_none(), "1000 bytes of unread answers stop new calls");
        w.answers_written(500);
        assert!(take_now(&w, 1).is_some(), "the client read some: calls are taken again");
        drop(first);
    }

    #[tokio::test]
    async fn a_full_window_makes_the_reader_wait_until_an_answer_frees_a_slot() {
        let w = InFlight::new(2, 10, 1000);
        let a = take_now(&w, 4).expect("room for the first call");
        let b = take_now(&w, 4).expect("room for the second call");
        assert!(take_now(&w, 1).is_none(), "a third call exceeds the 2-call window");
        drop(a);
        let c = take_now(&w, 6).expect("a freed call slot and 6 KiB fit again");
        assert!(take_now(&w, 0).is_none());
        drop((b, c));
        // A call bigger than the whole window waits only for an empty one.
        let big = take_now(&w, 1000).expect("an empty window takes a call of any size");
        assert_eq!(w.kib_in_flight(), 10);
        assert!(take_now(&w, 1).is_none(), "a full 10 KiB leaves no room for 1 more");
        // A waiting reader is woken by the answer that frees a slot on another thread.
        let waiter = tokio::spawn({
            let w = w.clone();
            async move { w.take(1).await.kib }
        });
        tokio::task::yield_now().await;
        std::thread::spawn(move || drop(big)).join().unwrap();
        // (The timeout only turns a lost wakeup into a failure instead of a hang.)
        let woken = tokio::time::timeout(std::time::Duration::from_secs(30), waiter).await;
        assert_eq!(woken.expect("the reader was never woken").unwrap(), 1);
        assert_eq!((w.calls_in_flight(), w.kib_in_flight()), (0, 0));
    }
}
