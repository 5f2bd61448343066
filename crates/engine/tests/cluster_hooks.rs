//! The engine's side of a cluster, with two engines in one process joined by hooks that
//! replicate in memory: A leads every partition, B follows. What the engine must do:
//! forward a follower's calls to the leader, replicate a leader's changes (with the
//! leader's transaction ids) before answering, run schema changes on both, refuse
//! multi-partition work, and roll back a transaction the replication refuses.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use lockstep_core::Value;
use lockstep_engine::cluster::{ClusterHooks, Committed, SpRequest, Topology};
use lockstep_engine::{Call, Engine, EngineConfig, Outcome, Reply};

/// What the leader waits for: the hash of each entry, and its client's half of the answer.
type Pending = Mutex<BTreeMap<(u32, u64), (u64, Committed)>>;

#[derive(Default)]
struct Link {
    leader: OnceLock<Arc<Engine>>,
    follower: OnceLock<Arc<Engine>>,
    pending: Pending,
    next_seq: Mutex<BTreeMap<u32, u64>>,
    mismatches: Mutex<Vec<(u32, u64)>>,
    refuse: AtomicBool,
}

struct Hooks {
    link: Arc<Link>,
    leads: bool,
}

impl ClusterHooks for Hooks {
    fn leads(&self, _partition: u32) -> bool {
        self.leads
    }

    fn forward(&self, partition: u32, request: SpRequest, params: Vec<Value>, timeout: Option<Duration>, reply: Reply) {
        self.link.leader.get().unwrap().run_forwarded(partition, request, params, timeout, reply);
    }

    fn replicate(&self, partition: u32, record: Vec<u8>, hash: u64, committed: Committed) -> Result<(), String> {
        if self.link.refuse.load(Ordering::SeqCst) {
            return Err("the partition is failing over".into());
        }
        let seq = {
            let mut next = self.link.next_seq.lock().unwrap();
            let s = next.entry(partition).or_insert(0);
            *s += 1;
            *s
        };
        self.link.pending.lock().unwrap().insert((partition, seq), (hash, committed));
        self.link.follower.get().unwrap().run_replicated(partition, seq, &record).map_err(|e| e.message)
    }

    fn applied(&self, partition: u32, seq: u64, hash: u64) {
        let Some((leader_hash, committed)) = self.link.pending.lock().unwrap().remove(&(partition, seq)) else { return };
        if hash != leader_hash {
            self.link.mismatches.lock().unwrap().push((partition, seq));
        }
        committed(Ok(()));
    }

    fn change_schema(&self, statements: Vec<String>, reply: Reply) {
        let (tx, rx) = mpsc::channel();
        self.link.follower.get().unwrap().apply_schema(statements.clone(), Box::new(move |o| tx.send(o).unwrap()));
        assert!(rx.recv().unwrap().is_success());
        self.link.leader.get().unwrap().apply_schema(statements, reply);
    }

    fn topology(&self) -> Topology {
        Topology { me: if self.leads { 0 } else { 1 }, ..Default::default() }
    }
}

fn start(name: &str) -> (Arc<Engine>, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("lockstep-cluster-hooks-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut c = EngineConfig::new(&dir);
    c.sites = 2;
    (Engine::start(c).unwrap(), dir)
}

fn call(engine: &Engine, procedure: &str, params: Vec<Value>) -> Outcome {
    let (tx, rx) = mpsc::channel();
    engine.submit(Call { procedure: procedure.into(), params, ..Default::default() }, Box::new(move |o| tx.send(o).unwrap()));
    rx.recv_timeout(Duration::from_secs(30)).expect("an answer")
}

fn sql(engine: &Engine, text: &str) -> Outcome {
    call(engine, "@AdHoc", vec![Value::Str(text.into())])
}

fn state_hashes(engine: &Engine) -> Vec<Value> {
    call(engine, "@StateHash", vec![]).tables[0].rows.iter().map(|r| r[1].clone()).collect()
}

#[test]
fn a_follower_forwards_and_a_leader_replicates_before_it_answers() {
    let (a, dir_a) = start("a");
    let (b, dir_b) = start("b");
    let link = Arc::new(Link::default());
    let _ = link.leader.set(a.clone());
    let _ = link.follower.set(b.clone());
    a.set_cluster(Arc::new(Hooks { link: link.clone(), leads: true }));
    b.set_cluster(Arc::new(Hooks { link: link.clone(), leads: false }));

    // DDL sent to either node reaches both.
    for ddl in ["CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(20))", "PARTITION TABLE kv ON COLUMN k"] {
        let o = sql(&b, ddl);
        assert!(o.is_success(), "{ddl}: {:?}", o.status_string);
    }
    assert!(b.catalog().tables().any(|t| t.name.eq_ignore_ascii_case("kv")));

    // Writes through the leader and through the follower (forwarded), each answered only
    // once the follower ran it: nothing is left pending.
    for k in 0..200i64 {
        let node = if k % 2 == 0 { &a } else { &b };
        let o = call(node, "KV.insert", vec![Value::Int(k), Value::Str(format!("v{k}").into())]);
        assert!(o.is_success(), "insert {k}: {:?}", o.status_string);
        assert!(link.pending.lock().unwrap().is_empty(), "insert {k} was answered before its replica ran it");
    }
    // A single-partition ad-hoc write replicates too; a read is answered by the leader.
    assert!(sql(&b, "UPDATE kv SET v = 'changed' WHERE k = 7").is_success());
    let read = sql(&b, "SELECT v FROM kv WHERE k = 7");
    assert_eq!(read.tables[0].rows, vec![vec![Value::Str("changed".into())]]);

    // Both nodes hold the same rows, and every replica's results matched the leader's.
    assert_eq!(state_hashes(&a), state_hashes(&b));
    assert!(link.mismatches.lock().unwrap().is_empty(), "{:?}", link.mismatches.lock().unwrap());

    // A write the replication refuses is rolled back and answered as refused.
    link.refuse.store(true, Ordering::SeqCst);
    let refused = call(&a, "KV.insert", vec![Value::Int(1_000), Value::Str("x".into())]);
    assert!(!refused.is_success());
    assert!(refused.status_string.unwrap_or_default().contains("failing over"));
    link.refuse.store(false, Ordering::SeqCst);
    assert!(call(&a, "KV.insert", vec![Value::Int(1_000), Value::Str("x".into())]).is_success(), "the refused row stayed");
    assert_eq!(state_hashes(&a), state_hashes(&b));

    // Multi-partition work is refused, clearly, rather than run on one node's share.
    let mp = sql(&a, "SELECT COUNT(*) FROM kv");
    assert!(!mp.is_success());
    assert!(mp.status_string.unwrap_or_default().contains("multi-partition"));

    a.shutdown();
    b.shutdown();
    let _ = std::fs::remove_dir_all(dir_a);
    let _ = std::fs::remove_dir_all(dir_b);
}
