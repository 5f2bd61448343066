//! Unsolicited answers to subscribed connections: when the catalog changes, every
//! connection that called `@Subscribe("TOPOLOGY")` gets a fresh `@SystemCatalog
//! PROCEDURES` answer with handle `Long.MAX_VALUE - 2`, so a partition-aware client routes
//! procedures created after it connected; when the topology changes (a cluster's leaders
//! move), or a client connected since the last push, they get a fresh `@Statistics TOPO`
//! answer with handle `Long.MAX_VALUE - 1`. A VoltDB client maps partitions to the
//! connections it has when it reads that answer, so a client that opens one connection per
//! node learns where each leader is only from a TOPO answer read after its last login.

use std::sync::Mutex;

use lockstep_engine::{sysprocs, Engine, Outcome};
use tokio::sync::mpsc::UnboundedSender;

/// Handle of a pushed `@SystemCatalog PROCEDURES` answer.
pub const PROCEDURES_PUSH_HANDLE: i64 = i64::MAX - 2;
/// Handle of a pushed `@Statistics TOPO` answer.
pub const TOPOLOGY_PUSH_HANDLE: i64 = i64::MAX - 1;
/// How often the server looks whether the catalog or the topology changed.
pub const CHANGE_CHECK_MS: u64 = 1_000;
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
    /// The topology they were last told, and how many connections had been opened then.
    topology: Option<Vec<lockstep_core::ResultTable>>,
    logins: u64,
    sinks: Vec<(i64, Box<dyn PushSink>)>,
}

pub struct Subscribers {
    state: Mutex<State>,
}

impl Subscribers {
    pub fn new(version: u64) -> Self {
        Subscribers { state: Mutex::new(State { version, topology: None, logins: 0, sinks: Vec::new() }) }
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

    /// Pushes what changed since the last push (called every `CHANGE_CHECK_MS`): the
    /// procedures if the catalog changed (a cluster applies DDL sent to other nodes too),
    /// the topology if it changed or if connections were opened since (`logins` counts
    /// them).
    pub fn refresh(&self, engine: &Engine, logins: u64) {
        self.catalog_may_have_changed(engine);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let topology = sysprocs::topology(engine);
        if s.topology.as_ref() == Some(&topology) && s.logins == logins {
            return;
        }
        s.logins = logins;
        s.topology = Some(topology.clone());
        if s.sinks.is_empty() {
            return;
        }
        let outcome = Outcome::tables(topology);
        s.sinks.retain(|(_, sink)| sink.push(TOPOLOGY_PUSH_HANDLE, outcome.clone()));
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
        // The topology goes out the first time, then only when connections were opened.
        subs.refresh(&engine, 5);
        assert_eq!(seen.lock().unwrap().last(), Some(&TOPOLOGY_PUSH_HANDLE));
        subs.refresh(&engine, 5);
        assert_eq!(seen.lock().unwrap().len(), 4, "nothing changed: nothing pushed");
        subs.refresh(&engine, 6);
        assert_eq!(seen.lock().unwrap().len(), 5, "a connection was opened: pushed again");
        engine.shutdown();
        let _ = std::fs::remove_dir_all(dir);
    }
}
