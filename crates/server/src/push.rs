//! Unsolicited answers to subscribed connections (voltdb-wire.md §1.8): when the catalog
//! changes, every connection that called `@Subscribe("TOPOLOGY")` gets a fresh
//! `@SystemCatalog PROCEDURES` answer with handle `Long.MAX_VALUE - 2`, so a
//! partition-aware client routes procedures created after it connected.

use std::sync::Mutex;

use lockstep_engine::{sysprocs, Engine, Outcome};
use tokio::sync::mpsc::UnboundedSender;

/// Handle of a pushed `@SystemCatalog PROCEDURES` answer.
pub const PROCEDURES_PUSH_HANDLE: i64 = i64::MAX - 2;
/// Subscribed connections at most (each connection subscribes at most once).
pub const SUBSCRIBERS_MAX: usize = 10_000;

/// Something a connection's writer sends: an answer to a call or a push.
pub trait PushSink: Send {
    /// False once the connection is gone.
    fn push(&self, handle: i64, outcome: Outcome) -> bool;
}

impl<T: From<(i64, Outcome)> + Send> PushSink for UnboundedSender<T> {
    fn push(&self, handle: i64, outcome: Outcome) -> bool {
        self.send(T::from((handle, outcome))).is_ok()
    }
}

struct State {
    /// Catalog version the subscribers were last told about.
    version: u64,
    sinks: Vec<(i64, Box<dyn PushSink>)>,
}

pub struct Subscribers {
    state: Mutex<State>,
}

impl Subscribers {
    pub fn new(version: u64) -> Self {
        Subscribers { state: Mutex::new(State { version, sinks: Vec::new() }) }
    }

    /// Registers connection `id`; false when the table of subscribers is full.
    pub fn add(&self, id: i64, sink: Box<dyn PushSink>) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.sinks.iter().any(|(i, _)| *i == id) {
            return true;
        }
        if s.sinks.len() >= SUBSCRIBERS_MAX {
            return false;
        }
        s.sinks.push((id, sink));
        true
    }

    pub fn remove(&self, id: i64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.sinks.retain(|(i, _)| *i != id);
    }

    /// Pushes the procedures to every subscriber if the catalog changed since the last push.
    /// Called before a DDL answer is queued, so a subscriber on the same connection learns of
    /// a new procedure before it learns that the DDL succeeded.
    pub fn catalog_may_have_changed(&self, engine: &Engine) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let version = engine.catalog().version;
        if version == s.version {
            return;
        }
        s.version = version;
        if s.sinks.is_empty() {
            return;
        }
        let outcome = Outcome::tables(vec![sysprocs::procedures_table(engine)]);
        s.sinks.retain(|(_, sink)| sink.push(PROCEDURES_PUSH_HANDLE, outcome.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Recorder(Arc<Mutex<Vec<i64>>>, bool);

    impl PushSink for Recorder {
        fn push(&self, handle: i64, _: Outcome) -> bool {
            self.0.lock().unwrap().push(handle);
            self.1
        }
    }

    fn engine() -> (Arc<Engine>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("lockstep-push-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = lockstep_engine::EngineConfig::new(&dir);
        c.sites = 1;
        (Engine::start(c).unwrap(), dir)
    }

    fn ddl(engine: &Engine, sql: &str) {
        let (tx, rx) = std::sync::mpsc::channel();
        engine.adhoc(sql, vec![], Box::new(move |o| tx.send(o).unwrap()));
        assert!(rx.recv().unwrap().is_success());
    }

    #[test]
    fn pushes_once_per_catalog_change_and_drops_closed_sinks() {
        let (engine, dir) = engine();
        let subs = Subscribers::new(engine.catalog().version);
        let seen = Arc::new(Mutex::new(Vec::new()));
        assert!(subs.add(1, Box::new(Recorder(seen.clone(), true))));
        assert!(subs.add(2, Box::new(Recorder(seen.clone(), false))));
        subs.catalog_may_have_changed(&engine);
        assert!(seen.lock().unwrap().is_empty(), "no change, no push");
        ddl(&engine, "CREATE TABLE t (k INTEGER NOT NULL, PRIMARY KEY (k))");
        subs.catalog_may_have_changed(&engine);
        assert_eq!(*seen.lock().unwrap(), vec![PROCEDURES_PUSH_HANDLE, PROCEDURES_PUSH_HANDLE]);
        subs.catalog_may_have_changed(&engine);
        assert_eq!(seen.lock().unwrap().len(), 2, "same version: nothing more");
        ddl(&engine, "CREATE TABLE u (k INTEGER NOT NULL, PRIMARY KEY (k))");
        subs.catalog_may_have_changed(&engine);
        // Sink 2 reported its connection gone after the first push and was dropped.
        assert_eq!(seen.lock().unwrap().len(), 3);
        engine.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }
}
