//! The engine's side of a cluster, with engines in one process joined by hooks that
//! replicate in memory (every partition has a replica on every other engine). What the
//! engine must do: forward a call to its partition's leader, replicate a leader's changes
//! (with the leader's transaction ids) before answering, run schema changes everywhere,
//! run multi-partition transactions across the engines from one coordinator and replicate
//! each partition's share of them, and roll back what the replication refuses.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use lockstep_core::Value;
use lockstep_engine::cluster::{ClusterHooks, Committed, Host, MpRemote, MpRequest, PartitionPlacement, RemoteAnswer, SpRequest, Topology};
use lockstep_engine::{Call, Engine, EngineConfig, Outcome, Reply};

const PARTITIONS: u32 = 2;
/// How long a call on a parked partition is watched to see that it waits.
const PARKED_CHECK: Duration = Duration::from_millis(300);

/// The engines and what travels between them.
struct Net {
    engines: OnceLock<Vec<Arc<Engine>>>,
    /// By partition: the engine that leads it.
    leaders: Vec<u32>,
    /// What each leader waits for: the hash of each entry, and its answer's half.
    pending: Mutex<BTreeMap<(u32, u64), (u64, Committed)>>,
    next_seq: Mutex<BTreeMap<u32, u64>>,
    mismatches: Mutex<Vec<(u32, u64)>>,
    refuse: AtomicBool,
    /// Replicas' acknowledgements are held back (`held`) rather than passed on.
    hold_acks: AtomicBool,
    held: Mutex<Vec<Committed>>,
    /// Answers waiting for the entries appended before them (`after_appended`).
    barriers: Mutex<Vec<Committed>>,
    /// The topology says node 0 (the coordinator) was declared down.
    coordinator_down: AtomicBool,
    /// A `Begin` reaches its node but its answer is lost (the coordinator's wait gives up).
    lose_begin_answers: AtomicBool,
}

impl Net {
    fn engine(&self, n: u32) -> &Arc<Engine> {
        &self.engines.get().expect("engines started")[n as usize]
    }
    /// No replica's confirmation is outstanding or held back.
    fn all_confirmed(&self) -> bool {
        self.pending.lock().unwrap().is_empty() && self.held.lock().unwrap().is_empty()
    }
    fn nodes(&self) -> u32 {
        self.engines.get().map_or(0, |e| e.len() as u32)
    }
}

struct Hooks {
    net: Arc<Net>,
    me: u32,
}

impl ClusterHooks for Hooks {
    fn leads(&self, partition: u32) -> bool {
        self.net.leaders[partition as usize] == self.me
    }

    fn forward(&self, partition: u32, request: SpRequest, params: Vec<Value>, timeout: Option<Duration>, reply: Reply) {
        self.net.engine(self.net.leaders[partition as usize]).run_forwarded(partition, request, params, timeout, reply);
    }

    fn replicate(&self, partition: u32, entry: Vec<u8>, hash: u64, committed: Committed) -> Result<(), String> {
        if self.net.refuse.load(Ordering::SeqCst) {
            return Err("the partition is failing over".into());
        }
        let seq = {
            let mut next = self.net.next_seq.lock().unwrap();
            let s = next.entry(partition).or_insert(0);
            *s += 1;
            *s
        };
        self.net.pending.lock().unwrap().insert((partition, seq), (hash, committed));
        // Two engines: the replica is the other one.
        let follower = 1 - self.me;
        self.net.engine(follower).run_replicated(partition, seq, &entry).map_err(|e| e.message)
    }

    fn applied(&self, partition: u32, seq: u64, hash: u64) {
        let Some((leader_hash, committed)) = self.net.pending.lock().unwrap().remove(&(partition, seq)) else { return };
        if hash != leader_hash {
            self.net.mismatches.lock().unwrap().push((partition, seq));
        }
        if self.net.hold_acks.load(Ordering::SeqCst) {
            return self.net.held.lock().unwrap().push(committed);
        }
        committed(Ok(()));
        // The answers waiting for what was appended before them, once it is all confirmed
        // (under the barriers' lock, so none is queued after its last confirmation).
        let ready = {
            let mut barriers = self.net.barriers.lock().unwrap();
            if self.net.all_confirmed() {
                std::mem::take(&mut *barriers)
            } else {
                Vec::new()
            }
        };
        ready.into_iter().for_each(|done| done(Ok(())));
    }

    fn after_appended(&self, _partition: u32, done: Committed) {
        let now = {
            let mut barriers = self.net.barriers.lock().unwrap();
            match self.net.all_confirmed() {
                true => Some(done),
                false => {
                    barriers.push(done);
                    None
                }
            }
        };
        if let Some(done) = now {
            done(Ok(()));
        }
    }

    fn change_schema(&self, statements: Vec<String>, reply: Reply) {
        for n in (0..self.net.nodes()).filter(|n| *n != self.me) {
            let (tx, rx) = mpsc::channel();
            self.net.engine(n).apply_schema(statements.clone(), Box::new(move |o| tx.send(o).unwrap()));
            assert!(rx.recv().unwrap().is_success());
        }
        self.net.engine(self.me).apply_schema(statements, reply);
    }

    fn topology(&self) -> Topology {
        let partitions =
            self.net.leaders.iter().map(|l| PartitionPlacement { leader: Some(*l), replicas: (0..self.net.nodes()).collect() }).collect();
        let down = self.net.coordinator_down.load(Ordering::SeqCst);
        let hosts = (0..self.net.nodes()).map(|id| Host { id, client_address: None, alive: id != 0 || !down }).collect();
        Topology { me: self.me, hosts, partitions }
    }

    fn mp_coordinator(&self) -> Option<u32> {
        Some(0)
    }

    fn forward_mp(&self, to: u32, request: MpRequest, timeout: Option<Duration>, reply: Reply) {
        self.net.engine(to).run_forwarded_mp(request, timeout, reply);
    }

    fn mp_remote(&self, node: u32, message: MpRemote) -> RemoteAnswer {
        let lost = matches!(message, MpRemote::Begin { .. }) && self.net.lose_begin_answers.load(Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.net.engine(node).mp_participant(self.me, message, Box::new(move |a| drop(tx.send(a))));
        if lost {
            return Err(lockstep_engine::cluster::ErrorData { status: -5, message: "the answer was lost".into() });
        }
        rx.recv_timeout(Duration::from_secs(30)).expect("a participant's answer")
    }
}

/// Two engines; partition p is led by `leaders[p]` and replicated on the other.
fn cluster(name: &str, leaders: Vec<u32>) -> (Arc<Net>, Vec<std::path::PathBuf>) {
    let net = Arc::new(Net {
        engines: OnceLock::new(),
        leaders,
        pending: Mutex::default(),
        next_seq: Mutex::default(),
        mismatches: Mutex::default(),
        refuse: AtomicBool::new(false),
        hold_acks: AtomicBool::new(false),
        held: Mutex::default(),
        barriers: Mutex::default(),
        coordinator_down: AtomicBool::new(false),
        lose_begin_answers: AtomicBool::new(false),
    });
    let mut engines = Vec::new();
    let mut dirs = Vec::new();
    for n in 0..2 {
        let dir = std::env::temp_dir().join(format!("lockstep-cluster-hooks-{name}-{n}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut c = EngineConfig::new(&dir);
        c.sites = PARTITIONS;
        engines.push(Engine::start(c).unwrap());
        dirs.push(dir);
    }
    let _ = net.engines.set(engines);
    for n in 0..2 {
        net.engine(n).set_cluster(Arc::new(Hooks { net: net.clone(), me: n }));
    }
    (net, dirs)
}

fn stop(net: &Net, dirs: Vec<std::path::PathBuf>) {
    for n in 0..net.nodes() {
        net.engine(n).shutdown();
    }
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Sends `engine` a step as node 0 (the coordinator) would; its answer, if one comes
/// within `wait`.
fn ask(engine: &Engine, message: MpRemote, wait: Duration) -> Result<RemoteAnswer, mpsc::RecvTimeoutError> {
    let (tx, rx) = mpsc::channel();
    engine.mp_participant(0, message, Box::new(move |a| drop(tx.send(a))));
    rx.recv_timeout(wait)
}

/// Submits a write of a key of partition 1 to `engine`; its answer comes on the receiver.
fn write_to_partition_1(engine: &Engine) -> mpsc::Receiver<Outcome> {
    let ring = lockstep_core::HashRing::new(PARTITIONS);
    let key = (0..1_000i64).find(|k| ring.partition_for(&Value::Int(*k)) == 1).expect("a key of partition 1");
    let (tx, answered) = mpsc::channel();
    let call = Call { procedure: "KV.insert".into(), params: vec![Value::Int(key), Value::Str("after".into())], ..Default::default() };
    engine.submit(call, Box::new(move |o| drop(tx.send(o))));
    answered
}

fn call(engine: &Engine, procedure: &str, params: Vec<Value>) -> Outcome {
    let (tx, rx) = mpsc::channel();
    engine.submit(Call { procedure: procedure.into(), params, ..Default::default() }, Box::new(move |o| tx.send(o).unwrap()));
    rx.recv_timeout(Duration::from_secs(30)).expect("an answer")
}

fn sql(engine: &Engine, text: &str) -> Outcome {
    let o = call(engine, "@AdHoc", vec![Value::Str(text.into())]);
    assert!(o.is_success(), "{text}: {:?}", o.status_string);
    o
}

fn state_hashes(engine: &Engine) -> Vec<Value> {
    call(engine, "@StateHash", vec![]).tables[0].rows.iter().map(|r| r[1].clone()).collect()
}

fn schema(engine: &Engine) {
    for ddl in [
        "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(20))",
        "PARTITION TABLE kv ON COLUMN k",
        "CREATE TABLE copy (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(20))",
        "PARTITION TABLE copy ON COLUMN k",
        "CREATE PROCEDURE CountAll AS SELECT COUNT(*) FROM kv",
    ] {
        sql(engine, ddl);
    }
}

#[test]
fn a_follower_forwards_and_a_leader_replicates_before_it_answers() {
    let (net, dirs) = cluster("sp", vec![0; PARTITIONS as usize]);
    let (a, b) = (net.engine(0).clone(), net.engine(1).clone());
    // DDL sent to either node reaches both.
    schema(&b);
    assert!(a.catalog().tables().any(|t| t.name.eq_ignore_ascii_case("kv")));

    // Writes through the leader and through the follower (forwarded), each answered only
    // once the follower ran it: nothing is left pending.
    for k in 0..200i64 {
        let node = if k % 2 == 0 { &a } else { &b };
        let o = call(node, "KV.insert", vec![Value::Int(k), Value::Str(format!("v{k}").into())]);
        assert!(o.is_success(), "insert {k}: {:?}", o.status_string);
        assert!(net.pending.lock().unwrap().is_empty(), "insert {k} was answered before its replica ran it");
    }
    // A single-partition ad-hoc write replicates too; a read is answered by the leader.
    sql(&b, "UPDATE kv SET v = 'changed' WHERE k = 7");
    let read = sql(&b, "SELECT v FROM kv WHERE k = 7");
    assert_eq!(read.tables[0].rows, vec![vec![Value::Str("changed".into())]]);

    // Both nodes hold the same rows, and every replica's results matched the leader's.
    assert_eq!(state_hashes(&a), state_hashes(&b));
    assert!(net.mismatches.lock().unwrap().is_empty(), "{:?}", net.mismatches.lock().unwrap());

    // A write the replication refuses is rolled back and answered as refused.
    net.refuse.store(true, Ordering::SeqCst);
    let refused = call(&a, "KV.insert", vec![Value::Int(1_000), Value::Str("x".into())]);
    assert!(!refused.is_success());
    assert!(refused.status_string.unwrap_or_default().contains("failing over"));
    net.refuse.store(false, Ordering::SeqCst);
    assert!(call(&a, "KV.insert", vec![Value::Int(1_000), Value::Str("x".into())]).is_success(), "the refused row stayed");
    assert_eq!(state_hashes(&a), state_hashes(&b));
    stop(&net, dirs);
}

/// What a leader answers may show a write it committed but its replicas have not confirmed:
/// such an answer (a read, a refusal) waits for them too, and is withheld if the write may
/// be lost, as it would be by a failover before the replicas have it.
#[test]
fn an_answer_that_changed_nothing_waits_for_the_writes_it_may_show_to_be_replicated() {
    let (net, dirs) = cluster("barrier", vec![0; PARTITIONS as usize]);
    let a = net.engine(0).clone();
    schema(&a);
    let submit = |procedure: &str, params: Vec<Value>| {
        let (tx, rx) = mpsc::channel();
        a.submit(Call { procedure: procedure.into(), params, ..Default::default() }, Box::new(move |o| tx.send(o).unwrap()));
        rx
    };
    let read = |k: i64| submit("@AdHoc", vec![Value::Str(format!("SELECT v FROM kv WHERE k = {k}").into())]);
    // With every write confirmed, a read is answered at once.
    assert!(call(&a, "KV.insert", vec![Value::Int(1), Value::Str("one".into())]).is_success());
    let o = read(1).recv_timeout(Duration::from_secs(30)).expect("a read with nothing unconfirmed is answered");
    assert_eq!(o.tables[0].rows, vec![vec![Value::Str("one".into())]]);

    for (fate, k) in [(Ok(()), 2i64), (Err("the leader was deposed".to_string()), 3)] {
        net.hold_acks.store(true, Ordering::SeqCst);
        let write = submit("KV.insert", vec![Value::Int(k), Value::Str("new".into())]);
        let shown = read(k);
        // A duplicate key: refused and rolled back, and the refusal shows the row too.
        let refusal = submit("KV.insert", vec![Value::Int(k), Value::Str("again".into())]);
        for (what, rx) in [("write", &write), ("read", &shown), ("refusal", &refusal)] {
            assert!(rx.recv_timeout(PARKED_CHECK).is_err(), "the {what} was answered before the replicas confirmed the write");
        }
        net.hold_acks.store(false, Ordering::SeqCst);
        let held: Vec<Committed> = std::mem::take(&mut *net.held.lock().unwrap());
        assert_eq!(held.len(), 1, "one write waits for its replica");
        let barriers: Vec<Committed> = std::mem::take(&mut *net.barriers.lock().unwrap());
        assert_eq!(barriers.len(), 2, "the read and the refusal wait behind it");
        for done in held.into_iter().chain(barriers) {
            done(fate.clone());
        }
        let [write, shown, refusal] = [write, shown, refusal].map(|rx| rx.recv_timeout(Duration::from_secs(30)).expect("answered"));
        match fate {
            Ok(()) => {
                assert!(write.is_success(), "{:?}", write.status_string);
                assert_eq!(shown.tables[0].rows, vec![vec![Value::Str("new".into())]]);
                assert!(!refusal.is_success() && !refusal.status_string.unwrap_or_default().contains("withheld"));
            }
            Err(_) => {
                assert_eq!(write.status, lockstep_engine::durable::STATUS_RESPONSE_UNKNOWN, "{:?}", write.status_string);
                for o in [shown, refusal] {
                    assert!(!o.is_success() && o.tables.is_empty(), "an answer showed a write that may be lost");
                    assert!(o.status_string.as_deref().unwrap_or_default().contains("withheld"), "{:?}", o.status_string);
                }
            }
        }
    }
    stop(&net, dirs);
}

#[test]
fn multi_partition_transactions_span_the_nodes_and_reach_every_replica() {
    // Partition 0 is led by node 0 (the coordinator), partition 1 by node 1.
    let (net, dirs) = cluster("mp", vec![0, 1]);
    let (a, b) = (net.engine(0).clone(), net.engine(1).clone());
    schema(&a);
    for k in 0..100i64 {
        let node = if k % 3 == 0 { &a } else { &b };
        assert!(call(node, "KV.insert", vec![Value::Int(k), Value::Str(format!("v{k}").into())]).is_success());
    }
    // Reads that gather from both nodes, asked of either (node 1 forwards to node 0).
    for node in [&a, &b] {
        let count = sql(node, "SELECT COUNT(*) FROM kv");
        assert_eq!(count.tables[0].rows, vec![vec![Value::Int(100)]]);
        let proc_count = call(node, "CountAll", vec![]);
        assert_eq!(proc_count.tables[0].rows, vec![vec![Value::Int(100)]], "{:?}", proc_count.status_string);
        let joined = sql(node, "SELECT COUNT(*) FROM kv a, kv b WHERE a.k = b.k AND a.k < 10");
        assert_eq!(joined.tables[0].rows, vec![vec![Value::Int(10)]]);
    }
    // Writes everywhere: an UPDATE on every partition, and rows moved between partitions.
    sql(&b, "UPDATE kv SET v = 'all'");
    let copied = sql(&b, "INSERT INTO copy SELECT k, v FROM kv WHERE k >= 50");
    assert_eq!(copied.tables[0].rows, vec![vec![Value::Int(50)]]);
    let everywhere = sql(&a, "SELECT COUNT(*) FROM copy WHERE v = 'all'");
    assert_eq!(everywhere.tables[0].rows, vec![vec![Value::Int(50)]]);
    // A failing transaction changes nothing anywhere.
    let dup = call(&a, "@AdHoc", vec![Value::Str("INSERT INTO copy SELECT k, v FROM kv".into())]);
    assert!(!dup.is_success(), "copying rows that are there already must fail");

    // Each partition's replica ran the leader's share: both nodes hold the same rows. (The
    // outcome of the last one may still be on its way: a commit is answered once prepared.)
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !net.pending.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "a replica never confirmed an entry");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(net.mismatches.lock().unwrap().is_empty(), "{:?}", net.mismatches.lock().unwrap());
    assert_eq!(state_hashes(&a), state_hashes(&b));
    stop(&net, dirs);
}

/// A coordinator that dies in a multi-partition transaction leaves the partitions it parked
/// on other nodes parked: once the cluster declares it down, a session not yet prepared
/// lets them go at once (the coordinator cannot have committed without it), rather than
/// after `REMOTE_SESSION_IDLE`.
#[test]
fn a_session_not_prepared_when_its_coordinator_is_declared_down_lets_its_partitions_go() {
    // Partition 1 is led by node 1, which node 0 (the coordinator) parks and then dies.
    let (net, dirs) = cluster("mp-down", vec![0, 1]);
    let b = net.engine(1).clone();
    schema(&b);
    assert!(ask(&b, MpRemote::Begin { txn_id: 1 << 40 }, Duration::from_secs(30)).expect("an answer to Begin").is_ok());
    // A key of partition 1, led by node 1: its write waits behind the parked transaction.
    let answered = write_to_partition_1(&b);
    assert!(answered.recv_timeout(PARKED_CHECK).is_err(), "the write ran while its partition was parked");
    // Declared down: the write runs long before the session's idle limit.
    net.coordinator_down.store(true, Ordering::SeqCst);
    let o = answered.recv_timeout(lockstep_engine::mp_cluster::REMOTE_SESSION_IDLE / 2).expect("the partition was let go");
    assert!(o.is_success(), "{:?}", o.status_string);
    stop(&net, dirs);
}

/// A `Begin` that comes late (its coordinator gave up on it) starts a session nobody
/// drives, with this node's partitions parked. The coordinator's next `Begin` ends it,
/// rolled back, instead of waiting behind it until `REMOTE_SESSION_IDLE`.
#[test]
fn a_session_not_prepared_ends_when_another_transaction_begins() {
    let (net, dirs) = cluster("mp-superseded", vec![0, 1]);
    let b = net.engine(1).clone();
    schema(&b);
    // Node 0 stays silent: its settling of undecided transactions (when the cluster
    // changes) would end the first session too.
    net.engine(0).shutdown();
    let step = |message: MpRemote, wait: Duration| ask(&b, message, wait);
    let wait = lockstep_engine::mp_cluster::REMOTE_SESSION_IDLE / 2;
    assert!(step(MpRemote::Begin { txn_id: 1 << 40 }, wait).expect("an answer to the first Begin").is_ok());
    let second = step(MpRemote::Begin { txn_id: (1 << 40) + 1 }, wait);
    assert!(second.expect("the second Begin waited for the first session's idle limit").is_ok());
    let ended = step(MpRemote::End { txn_id: 1 << 40, commit: true }, wait).expect("an answer to the first End");
    assert!(ended.is_err_and(|e| e.message.contains("not serving")), "the first session was still served");
    assert!(step(MpRemote::End { txn_id: (1 << 40) + 1, commit: false }, wait).expect("an answer to End").is_ok());
    stop(&net, dirs);
}

/// A `Begin` whose answer the coordinator never got (a pause, a cut) may still have started
/// a session on its node, parking the partitions there. Nothing else may come after it
/// (no other multi-partition call): the coordinator's next idle tick looks for undecided
/// transactions, finds the session and ends it, long before its idle limit.
#[test]
fn a_session_whose_begin_went_unanswered_is_ended_by_the_coordinator() {
    // Partition 1 is led by node 1, which node 0 (the coordinator) parks.
    let (net, dirs) = cluster("mp-lost-begin", vec![0, 1]);
    let (a, b) = (net.engine(0).clone(), net.engine(1).clone());
    schema(&a);
    // Both coordinator threads have served a transaction: neither is busy starting up.
    assert!(call(&a, "CountAll", vec![]).is_success());
    let in_doubt = || ask(&b, MpRemote::InDoubt, Duration::from_secs(30)).expect("an in-doubt report").expect("a report");
    let nothing_open = in_doubt();
    net.lose_begin_answers.store(true, Ordering::SeqCst);
    assert!(!call(&a, "CountAll", vec![]).is_success(), "the transaction ran though its Begin went unanswered");
    net.lose_begin_answers.store(false, Ordering::SeqCst);
    // The session started on node 1 (asking fences it; it still parks the partition).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while in_doubt() == nothing_open {
        assert!(std::time::Instant::now() < deadline, "no session started for the lost Begin");
        std::thread::sleep(Duration::from_millis(5));
    }
    let o =
        write_to_partition_1(&b).recv_timeout(lockstep_engine::mp_cluster::REMOTE_SESSION_IDLE / 2).expect("the partition stayed parked");
    assert!(o.is_success(), "{:?}", o.status_string);
    stop(&net, dirs);
}

#[test]
fn a_step_of_a_transaction_the_node_does_not_serve_is_answered_at_once() {
    let (net, dirs) = cluster("stray", vec![0, 1]);
    let answer =
        ask(net.engine(1), MpRemote::End { txn_id: 42, commit: true }, Duration::from_secs(5)).expect("answered at once, not queued");
    assert!(answer.is_err_and(|e| e.message.contains("not serving")));
    stop(&net, dirs);
}

/// A partition whose leader prepared a share and went down: its new leader holds the share,
/// refuses the partition's calls until the outcome comes, says what it holds to the node
/// coordinating next (`InDoubt`), and applies the outcome it is given (`Resolve`) on every
/// replica. A held share also shows in every later report until then, and an outcome
/// given twice changes nothing.
#[test]
fn a_share_held_undecided_is_reported_refuses_calls_and_applies_its_outcome() {
    use lockstep_engine::cluster::TableData;
    // Partition 1 is led by node 1: it gets the share as its predecessor replicated it.
    let (net, dirs) = cluster("held", vec![0, 1]);
    let b = net.engine(1).clone();
    schema(&b);
    let keys = keys_of(1, 2);
    let txn_id = 1 << 41;
    hold_share(&net, 1, txn_id, keys[0]);

    let refused = call(&b, "KV.insert", vec![Value::Int(keys[1]), Value::Str("new".into())]);
    assert!(refused.status_string.as_deref().unwrap_or("").contains("waits for the outcome"), "{:?}", refused.status_string);

    let ask = |message: MpRemote| ask(&b, message, Duration::from_secs(30)).expect("an answer");
    let report = |t: TableData| match &t.rows[0][0] {
        Value::Bytes(b) => format!("{:?}", b.as_ref()),
        other => panic!("a report is one byte string, not {other:?}"),
    };
    let held = report(ask(MpRemote::InDoubt).unwrap());
    assert!(!held.is_empty());
    assert_eq!(report(ask(MpRemote::InDoubt).unwrap()), held, "a second report says the same");

    assert!(ask(MpRemote::Resolve { txn_id, partition: 1, commit: true }).is_ok());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !net.pending.lock().unwrap().is_empty() {
        assert!(std::time::Instant::now() < deadline, "the outcome never reached the replica");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(ask(MpRemote::Resolve { txn_id, partition: 1, commit: true }).is_ok(), "an outcome given twice");
    assert!(ask(MpRemote::Resolve { txn_id, partition: 1, commit: false }).is_err(), "the opposite outcome of a committed share");
    assert_ne!(report(ask(MpRemote::InDoubt).unwrap()), held, "still held after its outcome");
    let row = sql(&b, &format!("SELECT v FROM kv WHERE k = {}", keys[0]));
    assert_eq!(row.tables[0].rows, vec![vec![Value::Str("held".into())]], "the committed share's row");
    assert!(call(&b, "KV.insert", vec![Value::Int(keys[1]), Value::Str("new".into())]).is_success());
    assert!(net.mismatches.lock().unwrap().is_empty(), "{:?}", net.mismatches.lock().unwrap());
    assert_eq!(state_hashes(&net.engine(0).clone()), state_hashes(&b), "the replica ran the share as the new leader did");
    stop(&net, dirs);
}

/// `count` keys of `partition`.
fn keys_of(partition: u32, count: usize) -> Vec<i64> {
    let ring = lockstep_core::HashRing::new(PARTITIONS);
    (0..1_000i64).filter(|k| ring.partition_for(&Value::Int(*k)) == partition).take(count).collect()
}

/// Every replica of `partition` holds a prepared share of `txn_id` (it inserts `key`), as
/// when the leader that prepared it went down: its sites wait for the share's outcome.
fn hold_share(net: &Net, partition: u32, txn_id: i64, key: i64) {
    use lockstep_engine::cluster::ReplicatedEntry;
    use lockstep_sql::{ExecCtx, FragmentSpec, StatementRef, Step};
    let spec = FragmentSpec {
        catalog_version: net.engine(0).catalog().version,
        statement: StatementRef::Sql(format!("INSERT INTO kv VALUES ({key}, 'held')").into()),
        params: vec![],
        ctx: ExecCtx::new(txn_id, 0),
        step: Step::Execute,
    };
    let entry = ReplicatedEntry::MpPart { txn_id, participants: vec![0, 1], specs: vec![spec] }.encode().unwrap();
    // Both replicas hold it as entry 1 (the new leader's outcome is entry 2).
    for n in 0..net.nodes() {
        net.engine(n).run_replicated(partition, 1, &entry).unwrap();
    }
    net.next_seq.lock().unwrap().insert(partition, 1);
}

/// A schema change parks every site, and a site holding a share parks only once it has
/// the share's outcome. On the coordinating node that outcome is decided by the very
/// thread that applies the change: it settles the share first instead of waiting on it
/// for good.
#[test]
fn a_schema_change_on_the_coordinator_settles_a_share_held_there_first() {
    // Partition 0 is led by node 0, the coordinator.
    let (net, dirs) = cluster("held-ddl", vec![0, 1]);
    let a = net.engine(0).clone();
    schema(&a);
    // The coordinator has looked for undecided transactions since the cluster last changed.
    assert!(call(&a, "CountAll", vec![]).is_success());
    let key = keys_of(0, 1)[0];
    hold_share(&net, 0, 1 << 41, key);
    let refused = call(&a, "KV.insert", vec![Value::Int(key), Value::Str("new".into())]);
    assert!(refused.status_string.as_deref().unwrap_or("").contains("waits for the outcome"), "{:?}", refused.status_string);
    // Every node applies an agreed change, as the cluster's log hands it over.
    let (tx, rx) = mpsc::channel();
    a.apply_schema(vec!["CREATE TABLE extra (k BIGINT NOT NULL PRIMARY KEY)".into()], Box::new(move |o| drop(tx.send(o))));
    let o = rx.recv_timeout(Duration::from_secs(20)).expect("the schema change waited on the held share");
    assert!(o.is_success(), "{:?}", o.status_string);
    assert!(sql(&a, "SELECT COUNT(*) FROM extra").is_success());
    // Only partition 0 prepared: the share was rolled back, and the partition takes calls.
    assert!(sql(&a, &format!("SELECT v FROM kv WHERE k = {key}")).tables[0].rows.is_empty());
    assert!(call(&a, "KV.insert", vec![Value::Int(key), Value::Str("after".into())]).is_success());
    stop(&net, dirs);
}
