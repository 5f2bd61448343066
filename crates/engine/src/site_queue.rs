//! A site's queue: many senders, one site thread, which sleeps as soon as it is empty.
//!
//! crossbeam's blocking receive spins, then yields the core about eight times before it
//! sleeps. In a flood that never happens (the queue is never empty), but at a steady
//! moderate rate each call arrives alone, and every one of them paid for those
//! `sched_yield`s and the context switches they cause on a machine with few cores: a
//! quarter of a `sched_yield` per call at 100,000 Voter calls/s. Here the site sleeps at
//! once, and a sender wakes it only when it sleeps.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;

use crossbeam_channel::{Receiver, RecvError, SendError, Sender, TryRecvError, TrySendError};

use crate::site::SiteMsg;

/// A bounded queue of `capacity` messages for one site.
pub(crate) fn site_queue(capacity: usize) -> (SiteSender, SiteReceiver) {
    let (tx, rx) = crossbeam_channel::bounded(capacity);
    let bell = Arc::new(Bell::default());
    (SiteSender { tx: Some(tx), bell: bell.clone() }, SiteReceiver { rx, bell })
}

/// Whether the site sleeps, and the thread to wake.
#[derive(Default)]
struct Bell {
    sleeping: AtomicBool,
    site: OnceLock<Thread>,
}

impl Bell {
    /// Wakes the site if it sleeps. Called after a message is queued: with the fence here
    /// and the one in `SiteReceiver::recv`, either the site sees the message before it
    /// sleeps, or this sees it sleeping.
    fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(site) = self.site.get() {
                site.unpark();
            }
        }
    }
}

/// A sender's end; cloned by everyone who hands the site work.
#[derive(Clone)]
pub(crate) struct SiteSender {
    /// Some until dropped (taken first in `drop`, so the site sees the disconnection when
    /// the bell wakes it).
    tx: Option<Sender<SiteMsg>>,
    bell: Arc<Bell>,
}

impl SiteSender {
    /// Queues `msg`, waiting for room if the queue is full.
    pub(crate) fn send(&self, msg: SiteMsg) -> Result<(), SendError<SiteMsg>> {
        let Some(tx) = &self.tx else { return Err(SendError(msg)) };
        tx.send(msg)?;
        self.bell.ring();
        Ok(())
    }

    /// Queues `msg` unless the queue is full.
    pub(crate) fn try_send(&self, msg: SiteMsg) -> Result<(), TrySendError<SiteMsg>> {
        let Some(tx) = &self.tx else { return Err(TrySendError::Disconnected(msg)) };
        tx.try_send(msg)?;
        self.bell.ring();
        Ok(())
    }

    /// Messages waiting.
    pub(crate) fn len(&self) -> usize {
        self.tx.as_ref().map_or(0, Sender::len)
    }
}

impl Drop for SiteSender {
    fn drop(&mut self) {
        drop(self.tx.take());
        self.bell.ring();
    }
}

/// The site's end.
pub(crate) struct SiteReceiver {
    rx: Receiver<SiteMsg>,
    bell: Arc<Bell>,
}

impl SiteReceiver {
    pub(crate) fn try_recv(&self) -> Result<SiteMsg, TryRecvError> {
        self.rx.try_recv()
    }

    /// The next message, sleeping until there is one; an error once every sender is gone.
    /// Called only from the site's own thread.
    pub(crate) fn recv(&self) -> Result<SiteMsg, RecvError> {
        let bell = &self.bell;
        bell.site.get_or_init(std::thread::current);
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

    #[test]
    fn a_sleeping_site_wakes_for_each_message_and_sees_its_senders_go() {
        let (tx, rx) = site_queue(64);
        let site = std::thread::spawn(move || {
            let mut got = 0;
            while rx.recv().is_ok() {
                got += 1;
            }
            got
        });
        // Each message after a pause, so that the site sleeps before most of them.
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            tx.send(SiteMsg::Shutdown).expect("the site is alive");
        }
        let second = tx.clone();
        second.try_send(SiteMsg::Shutdown).expect("there is room");
        drop(second);
        drop(tx);
        // A site that missed a wake-up would sleep for ever: give up after a minute.
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        std::thread::spawn(move || done_tx.send(site.join().expect("the site thread ends")));
        assert_eq!(done_rx.recv_timeout(std::time::Duration::from_secs(60)), Ok(51), "the site missed a wake-up");
    }
}
