//! Channels between the engine's threads whose receiver sleeps as soon as it finds nothing:
//! a site's queue, and the links between the multi-partition coordinator and parked sites.
//!
//! crossbeam's blocking receive spins, then yields the core about eight times before it
//! sleeps. In a flood that rarely happens (the queue is seldom empty), but at a steady
//! moderate rate each call arrives alone, and every one of them paid for those
//! `sched_yield`s and the context switches they cause on a machine with few cores: a
//! quarter of a `sched_yield` per call at 100,000 Voter calls/s. Under contention a parked
//! multi-partition transaction's threads yielded to each other over and over. Here the
//! receiver sleeps at once, and a sender wakes it only when it sleeps.
//!
//! One thread receives at a time (the site, or the coordinator): the bell wakes the last
//! thread that went to sleep on it.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

use crossbeam_channel::{RecvError, SendError, TryRecvError, TrySendError};

/// A queue of at most `capacity` messages.
pub(crate) fn bounded<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    wrap(crossbeam_channel::bounded(capacity))
}

/// A queue without a bound of its own, for messages whose number something else bounds
/// (a parked site gets one fragment at a time).
pub(crate) fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    wrap(crossbeam_channel::unbounded())
}

fn wrap<T>((tx, rx): (crossbeam_channel::Sender<T>, crossbeam_channel::Receiver<T>)) -> (Sender<T>, Receiver<T>) {
    let bell = Arc::new(Bell::default());
    (Sender { tx: Some(tx), bell: bell.clone() }, Receiver { rx, bell })
}

/// Whether the receiver sleeps, and which thread it is.
#[derive(Default)]
struct Bell {
    sleeping: AtomicBool,
    sleeper: Mutex<Option<Thread>>,
}

impl Bell {
    /// Wakes the receiver if it sleeps. Called after a message is queued: with the fence
    /// here and the one in `Receiver::recv`, either the receiver sees the message before it
    /// sleeps, or this sees it sleeping.
    fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(sleeper) = self.sleeper.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                sleeper.unpark();
            }
        }
    }
}

/// A sender's end; cloned by everyone who sends.
pub(crate) struct Sender<T> {
    /// Always Some until dropped (taken first in `drop`, so the receiver sees the
    /// disconnection when the bell wakes it).
    tx: Option<crossbeam_channel::Sender<T>>,
    bell: Arc<Bell>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender { tx: self.tx.clone(), bell: self.bell.clone() }
    }
}

impl<T> Sender<T> {
    fn tx(&self) -> &crossbeam_channel::Sender<T> {
        self.tx.as_ref().expect("a sender is used only before it is dropped")
    }

    /// Queues `msg`, waiting for room if the queue is full.
    pub(crate) fn send(&self, msg: T) -> Result<(), SendError<T>> {
        self.tx().send(msg)?;
        self.bell.ring();
        Ok(())
    }

    /// Queues `msg` unless the queue is full.
    pub(crate) fn try_send(&self, msg: T) -> Result<(), TrySendError<T>> {
        self.tx().try_send(msg)?;
        self.bell.ring();
        Ok(())
    }

    /// Messages waiting.
    pub(crate) fn len(&self) -> usize {
        self.tx().len()
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        drop(self.tx.take());
        self.bell.ring();
    }
}

/// The receiving end.
pub(crate) struct Receiver<T> {
    rx: crossbeam_channel::Receiver<T>,
    bell: Arc<Bell>,
}

impl<T> Receiver<T> {
    pub(crate) fn try_recv(&self) -> Result<T, TryRecvError> {
        self.rx.try_recv()
    }

    /// The next message, sleeping until there is one; an error once every sender is gone.
    pub(crate) fn recv(&self) -> Result<T, RecvError> {
        match self.rx.try_recv() {
            Err(TryRecvError::Empty) => {}
            next => return next.map_err(|_| RecvError),
        }
        let bell = &self.bell;
        *bell.sleeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
        loop {
            bell.sleeping.store(true, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            let next = self.rx.try_recv();
            if !matches!(next, Err(TryRecvError::Empty)) {
                bell.sleeping.store(false, Ordering::Relaxed);
                return next.map_err(|_| RecvError);
            }
            // A wake-up that came before this returns at once; a spurious one loops.
            std::thread::park();
            bell.sleeping.store(false, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receives on a thread of its own until the senders are gone, sending back the count;
    /// a receiver that missed a wake-up would sleep for ever, so the test gives up after a
    /// minute.
    fn count_on_a_thread(rx: Receiver<u32>) -> impl FnOnce() -> Result<u32, crossbeam_channel::RecvTimeoutError> {
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let mut got = 0;
            while rx.recv().is_ok() {
                got += 1;
            }
            done_tx.send(got)
        });
        move || done_rx.recv_timeout(std::time::Duration::from_secs(60))
    }

    #[test]
    fn a_sleeping_receiver_wakes_for_each_message_and_sees_its_senders_go() {
        for (tx, rx) in [bounded(64), unbounded()] {
            let count = count_on_a_thread(rx);
            // Each message after a pause, so that the receiver sleeps before most of them.
            for i in 0..50 {
                std::thread::sleep(std::time::Duration::from_millis(1));
                tx.send(i).expect("the receiver is alive");
            }
            let second = tx.clone();
            second.try_send(50).expect("there is room");
            drop(second);
            drop(tx);
            assert_eq!(count(), Ok(51), "the receiver missed a wake-up");
        }
    }

    #[test]
    fn a_receiver_may_move_to_another_thread() {
        let (tx, rx) = unbounded::<u32>();
        let (back_tx, back_rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || {
            let first = rx.recv();
            back_tx.send((first, rx)).expect("the test waits");
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        tx.send(1).expect("the receiver is alive");
        let (first, rx) = back_rx.recv().expect("the first thread ends");
        assert_eq!(first, Ok(1));
        let count = count_on_a_thread(rx);
        std::thread::sleep(std::time::Duration::from_millis(5));
        tx.send(2).expect("the receiver is alive");
        drop(tx);
        assert_eq!(count(), Ok(1), "the second thread was not woken");
    }
}
