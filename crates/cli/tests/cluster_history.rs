//! Jepsen-style histories against a cluster of real `lockstep server` processes: three
//! nodes with k = 1, clients spread over every node (each node forwards a call to its
//! partition's leader), a register and a bank workload, and faults on a random seeded
//! schedule: short SIGSTOP pauses of any node (shorter than the failure timeout, so no node
//! is declared down); the loss of one node, by SIGKILL, by a pause long enough that the
//! cluster declares it down, or by a network split that cuts it off from the others (a
//! fault proxy sits between the nodes; clients reach every node directly); its return (a
//! killed node is started again, a split heals) and rejoin, until every partition has both
//! replicas again; then the loss of a node again. The Go checker in `compat/history` (porcupine) must find
//! both histories linearizable; after the faults every key and every balance is read
//! through every surviving node, and those reads are part of the checked histories, so an
//! acknowledged write that was lost is an anomaly. The workloads, clients and checker are
//! in `common/history.rs` (shared with `history.rs`). A short run by default;
//! LOCKSTEP_LONG=1 runs several long rounds; LOCKSTEP_HISTORY_SEED replays a schedule.
//!
//! What the schedule leaves out, and why:
//! - At most one node is out at a time: with k = 1 a second could leave a partition
//!   without a replica. A second loss waits until the first node has rejoined.
//!
//! Transfers between accounts of one partition run single-partition, others
//! multi-partition (prepared on every partition before any commits: docs/cluster.md).
//! Reads of every balance are multi-partition: the checker requires each to add up to the
//! starting total and to fit one order of the transfers.

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{fully_replicated, start_cluster_on, start_node};
use common::history::{
    bank_header, call_and_record, checker, count, load, long, note_fault, register_header, run_worker, seed, signal, summary, take,
    write_and_check, Bank, Call, Clock, Log, Outcome, Register, Rng, Shared, Workload, CONNECT_TIMEOUT_MS, OK_CALLS_MIN, REGISTER_KEYS,
};
use common::proxy::FaultProxy;
use common::{Server, TempDir};
use lockstep_client::{Client, ClientConfig};
use serde_json::Value as Json;
use tokio::sync::watch;

const NODES: usize = 3;
const KFACTOR: u32 = 1;
/// Quiet time between two faults, drawn at random in this range.
const FAULT_GAP_MIN_MS: u64 = 300;
const FAULT_GAP_MAX_MS: u64 = 1_500;
/// A short pause, drawn in this range, stays well under the cluster's failure timeout
/// (500 ms), with room for a loaded machine: the node is never declared down, its calls
/// wait or time out, and the others may lose their majority (and refuse calls) meanwhile.
const SHORT_PAUSE_MIN_MS: u64 = 100;
const SHORT_PAUSE_MAX_MS: u64 = 250;
/// A long pause, drawn in this range, outlasts the failure timeout: the cluster declares
/// the node down and its partitions fail over; resumed, it serves clients but holds no
/// replica.
const LONG_PAUSE_MIN_MS: u64 = 1_500;
const LONG_PAUSE_MAX_MS: u64 = 3_000;
/// One fault in this many is the loss of a node (while no node is out), or the return of
/// the node that is out.
const LOSS_ODDS: u64 = 4;
/// A lost node stays out at least this long (past the failure timeout, 500 ms, and a
/// failover) before it is brought back.
const LOSS_HOLD_MS: u64 = 3_000;
/// Losses per run, at most (each after the one before has rejoined).
const LOSSES_MAX: usize = 2;
/// How long a node that returned may take to be a replica of all its partitions again.
const REJOIN_LIMIT_MS: u64 = 60_000;
const REJOIN_POLL_MS: u64 = 100;
/// After the last fault the clients run this long without faults, so every history ends
/// with calls on the settled cluster (longer than a client's call timeout, so that a call
/// stuck in the last fault is not all a client did after it).
const QUIET_END_MS: u64 = 8_000;
/// Faults last this long in the short run, and in each round of the long one.
const SHORT_RUN_MS: u64 = 12_000;
const LONG_RUN_MS: u64 = 60_000;
const LONG_ROUNDS: usize = 5;
/// How long the final reads through a surviving node may keep failing (a node that just
/// resumed may still be catching up with the cluster).
const FINAL_READ_LIMIT_MS: u64 = 15_000;
const FINAL_READ_RETRY_MS: u64 = 100;
/// The final reads are recorded as clients numbered from here (node i is this + i).
const FINAL_CLIENT_BASE: usize = 10_000;

/// Two register clients per node, one bank client per node.
const REGISTER_CLIENTS: usize = 2 * NODES;
const BANK_CLIENTS: usize = NODES;

/// How a node was lost.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Loss {
    Killed,
    DeclaredDown,
    /// Cut off from the other nodes by the proxy (both ways) until it is brought back; it
    /// keeps running and answering its clients (with refusals).
    Split,
}

/// Pauses the cluster's nodes and loses one of them on a random schedule, recording each
/// fault in both histories.
struct Nemesis {
    /// Node i's process; None while killed.
    nodes: Vec<Option<Server>>,
    /// Between the nodes (clients reach them directly): cuts them off from each other.
    proxy: FaultProxy,
    /// Each node's `--internal-listen` behind the proxy.
    listens: Vec<String>,
    /// Every node's internal address, and where their data directories are (to start a
    /// killed node again).
    hosts: Vec<String>,
    root: std::path::PathBuf,
    /// The client addresses of the nodes not killed, for the clients to connect to.
    addrs: watch::Sender<Vec<String>>,
    clock: Clock,
    logs: Vec<Log>,
    short_pauses: usize,
    /// The nodes lost, how, and when (on the histories' clock), in order.
    losses: Vec<(usize, Loss, i64)>,
    /// The node out now (lost, not rejoined yet).
    out: Option<usize>,
    rejoins: usize,
}

impl Nemesis {
    fn note(&self, f: &str, start: i64, detail: String) {
        note_fault(&self.logs, self.clock, f, start, detail);
    }

    /// The nodes still running (killed ones excluded; a resumed one included).
    fn running(&self) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].is_some()).collect()
    }

    fn pid(&self, node: usize) -> u32 {
        self.nodes[node].as_ref().map(Server::pid).expect("only running nodes are faulted")
    }

    async fn run(&mut self, rng: &mut Rng, faults_for: Duration) {
        let end = Instant::now() + faults_for;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(rng.range(FAULT_GAP_MIN_MS, FAULT_GAP_MAX_MS))).await;
            // The first fault is a short pause; a run without a loss, a rejoin and a
            // second loss ends with them.
            let big = self.short_pauses > 0 && rng.below(LOSS_ODDS) == 0;
            if big && self.out.is_some() {
                self.bring_back().await;
            } else if big && self.losses.len() < LOSSES_MAX {
                self.lose_one(rng).await;
            } else {
                self.short_pause(rng).await;
            }
        }
        while self.losses.len() < LOSSES_MAX {
            if self.out.is_some() {
                self.bring_back().await;
            }
            self.lose_one(rng).await;
        }
        tokio::time::sleep(Duration::from_millis(QUIET_END_MS)).await;
    }

    /// Starts the node that is out again if it was killed (a paused one resumed already),
    /// and waits until every partition has all its replicas again: it rejoined.
    async fn bring_back(&mut self) {
        let Some(node) = self.out else { return };
        // The loss lasts long enough for the cluster to act on it (declare the node down,
        // fail its partitions over) before the node comes back.
        if let Some((_, _, lost_at)) = self.losses.last() {
            let held_ns = (self.clock.now() - lost_at).max(0) as u64;
            let hold = Duration::from_millis(LOSS_HOLD_MS).saturating_sub(Duration::from_nanos(held_ns));
            tokio::time::sleep(hold).await;
        }
        let start = self.clock.now();
        self.proxy.heal();
        if self.nodes[node].is_none() {
            let (root, hosts, listens) = (self.root.clone(), self.hosts.clone(), self.listens.clone());
            let server = tokio::task::spawn_blocking(move || start_node(&root, node, &hosts, Some(&listens), KFACTOR, "off"))
                .await
                .expect("restart a node");
            let addr = server.addr.clone();
            self.addrs.send_modify(|addrs| addrs.push(addr));
            self.nodes[node] = Some(server);
        }
        // Every running node must see it: the node that comes back may answer from a view
        // of before its loss for a moment.
        let deadline = Instant::now() + Duration::from_millis(REJOIN_LIMIT_MS);
        let addrs: Vec<String> = self.nodes.iter().flatten().map(|s| s.addr.clone()).collect();
        loop {
            let mut everywhere = true;
            for addr in &addrs {
                let client = Client::connect(addr, ClientConfig::default()).await.ok();
                everywhere &= match client {
                    Some(c) => fully_replicated(&c, KFACTOR).await,
                    None => false,
                };
            }
            if everywhere {
                break;
            }
            assert!(Instant::now() < deadline, "node {node} did not rejoin its partitions within {REJOIN_LIMIT_MS} ms");
            tokio::time::sleep(Duration::from_millis(REJOIN_POLL_MS)).await;
        }
        self.note("rejoin", start, format!("node {node}: started again (if killed) and rejoined every partition"));
        self.out = None;
        self.rejoins += 1;
    }

    async fn short_pause(&mut self, rng: &mut Rng) {
        let running = self.running();
        let node = running[rng.below(running.len() as u64) as usize];
        let ms = rng.range(SHORT_PAUSE_MIN_MS, SHORT_PAUSE_MAX_MS);
        self.pause(node, ms).await;
        self.short_pauses += 1;
    }

    async fn pause(&mut self, node: usize, ms: u64) {
        let start = self.clock.now();
        signal(self.pid(node), libc::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        signal(self.pid(node), libc::SIGCONT);
        self.note("pause", start, format!("node {node}: SIGSTOP for {ms} ms, then SIGCONT"));
    }

    /// Kills a node, pauses it past the failure timeout, or cuts it off from the others;
    /// either way it is out of its partitions until it rejoins.
    async fn lose_one(&mut self, rng: &mut Rng) {
        let node = rng.below(NODES as u64) as usize;
        let start = self.clock.now();
        let how = match rng.below(3) {
            0 => {
                let ms = rng.range(LONG_PAUSE_MIN_MS, LONG_PAUSE_MAX_MS);
                self.pause(node, ms).await;
                Loss::DeclaredDown
            }
            1 => {
                self.proxy.isolate(node);
                self.note("split", start, format!("node {node}: cut off from the other nodes, both ways"));
                Loss::Split
            }
            _ => self.kill(node, start),
        };
        self.losses.push((node, how, start));
        self.out = Some(node);
    }

    /// SIGKILL; its clients stop using it.
    fn kill(&mut self, node: usize, start: i64) -> Loss {
        let server = self.nodes[node].take().expect("no node is out before a loss");
        let addr = server.addr.clone();
        self.addrs.send_modify(|addrs| addrs.retain(|a| *a != addr));
        signal(server.pid(), libc::SIGKILL);
        drop(server); // reaps it
        self.note("kill", start, format!("node {node}: SIGKILL"));
        Loss::Killed
    }
}

/// What one round recorded.
struct Round {
    register: Vec<Json>,
    bank: Vec<Json>,
    short_pauses: usize,
    losses: Vec<(usize, Loss, i64)>,
    rejoins: usize,
    surprises: Vec<String>,
    /// Nodes through which the final reads did not all succeed in time, and why.
    unread: Vec<String>,
}

/// Reads every register and every balance through `addr` until each read succeeds (for
/// at most `FINAL_READ_LIMIT_MS`), recording every attempt; the reason if some never did.
async fn final_reads(node: usize, addr: &str, shared: &Shared, register_log: &Log, bank_log: &Log) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(FINAL_READ_LIMIT_MS);
    let mut calls: Vec<(Call, Box<dyn Workload>, &Log)> = (0..REGISTER_KEYS)
        .map(|k| (Register::read(k), Box::new(Register { seen: Default::default() }) as Box<dyn Workload>, register_log))
        .collect();
    calls.push((Bank::read(), Box::new(Bank { multi_partition_transfers: true }), bank_log));
    let mut process = FINAL_CLIENT_BASE + node;
    let mut client: Option<Client> = None;
    let mut last = String::new();
    for (call, mut w, log) in calls {
        loop {
            if Instant::now() > deadline {
                return Err(format!("node {node} ({addr}): {} {:?} never succeeded; last: {last}", call.proc_name, call.input));
            }
            if client.is_none() {
                let connecting = Client::connect(addr, ClientConfig::default());
                match tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connecting).await {
                    Ok(Ok(c)) => client = Some(c),
                    Ok(Err(e)) => last = format!("connecting: {e}"),
                    Err(_) => last = "connecting timed out".into(),
                }
            }
            if let Some(c) = &client {
                let (outcome, reconnect) = call_and_record(c, &call, w.as_mut(), shared, log, process).await;
                match outcome {
                    Outcome::Ok(_) => break,
                    Outcome::Fail { error, .. } => last = error,
                    Outcome::Info(error) => {
                        last = error;
                        process += NODES;
                    }
                }
                if reconnect {
                    client = None;
                }
            }
            tokio::time::sleep(Duration::from_millis(FINAL_READ_RETRY_MS)).await;
        }
    }
    Ok(())
}

/// Runs both workloads against a fresh cluster with faults for `faults_for`, then the
/// final reads through every surviving node.
async fn run_round(seed: u64, faults_for: Duration) -> Round {
    let dir = TempDir::new("cluster-history");
    let (proxy, addrs) = FaultProxy::start(NODES).await;
    let (root, hosts, listens) = (dir.0.clone(), addrs.hosts, addrs.listens);
    let started = (root.clone(), hosts.clone(), listens.clone());
    let nodes = tokio::task::spawn_blocking(move || start_cluster_on(&started.0, &started.1, Some(&started.2), KFACTOR, "off"))
        .await
        .expect("the cluster did not form");
    load(&nodes[0].client().await).await;
    let (addrs_tx, addrs_rx) = watch::channel(nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>());
    let clock = Clock(Instant::now());
    let shared = Shared::new(clock, addrs_rx);
    let (register_log, bank_log): (Log, Log) = Default::default();
    let mut workers = Vec::new();
    let seen = Arc::new(Mutex::new(HashMap::new()));
    for slot in 0..REGISTER_CLIENTS {
        let w = Box::new(Register { seen: seen.clone() });
        workers.push(tokio::spawn(run_worker(slot, REGISTER_CLIENTS, seed, w, shared.clone(), register_log.clone())));
    }
    for slot in 0..BANK_CLIENTS {
        let w = Box::new(Bank { multi_partition_transfers: true });
        workers.push(tokio::spawn(run_worker(slot, BANK_CLIENTS, seed ^ 0xb4e5, w, shared.clone(), bank_log.clone())));
    }
    let mut nemesis = Nemesis {
        nodes: nodes.into_iter().map(Some).collect(),
        proxy,
        listens,
        hosts,
        root,
        addrs: addrs_tx,
        clock,
        logs: vec![register_log.clone(), bank_log.clone()],
        short_pauses: 0,
        losses: Vec::new(),
        out: None,
        rejoins: 0,
    };
    nemesis.run(&mut Rng::new(seed ^ 0x4e4d), faults_for).await;
    // A node split off last is healed, so that the final reads can go through it too.
    nemesis.proxy.heal();
    shared.stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("a worker panicked");
    }
    let mut unread = Vec::new();
    for node in nemesis.running() {
        let addr = nemesis.nodes[node].as_ref().map(|s| s.addr.clone()).unwrap_or_default();
        if let Err(why) = final_reads(node, &addr, &shared, &register_log, &bank_log).await {
            unread.push(why);
        }
    }
    drop(nemesis.nodes);
    Round {
        register: take(&register_log),
        bank: take(&bank_log),
        short_pauses: nemesis.short_pauses,
        losses: nemesis.losses,
        rejoins: nemesis.rejoins,
        surprises: shared.take_surprises(),
        unread,
    }
}

/// Successful calls of `f` (any procedure when None) invoked after `after` (ns).
fn ok_after(ops: &[Json], f: Option<&str>, after: i64) -> usize {
    count(ops, |op| op["type"] == "ok" && f.is_none_or(|f| op["f"] == f) && op["call"].as_i64().is_some_and(|t| t > after))
}

/// What the run lacked of a meaningful history (empty when it had it all): a short pause,
/// two lost nodes with a rejoin between, enough successful calls, writes and transfers that
/// committed after the last loss, final reads through every running node, and no answer of
/// an unexpected shape.
fn shortfalls(r: &Round) -> Vec<String> {
    let mut missing = Vec::new();
    if !r.surprises.is_empty() {
        missing.push(format!("answers of an unexpected shape: {:?}", r.surprises));
    }
    missing.extend(r.unread.iter().map(|why| format!("the final reads failed through a surviving node: {why}")));
    if r.short_pauses == 0 {
        missing.push("the schedule injected no short pause".into());
    }
    for (name, ops) in [("register", &r.register), ("bank", &r.bank)] {
        let ok_calls = count(ops, |op| op["type"] == "ok");
        if ok_calls < OK_CALLS_MIN {
            missing.push(format!("{name}: only {ok_calls} calls succeeded"));
        }
    }
    if r.losses.len() < LOSSES_MAX || r.rejoins == 0 {
        missing.push(format!("the schedule lost {} nodes and saw {} rejoins", r.losses.len(), r.rejoins));
    }
    if let Some((_, _, lost_at)) = r.losses.last() {
        if ok_after(&r.register, Some("write"), *lost_at) == 0 {
            missing.push("no register write committed after the last loss".into());
        }
        if ok_after(&r.bank, Some("transfer"), *lost_at) == 0 {
            missing.push("no transfer committed after the last loss".into());
        }
    }
    if ok_after(&r.bank, Some("transfer"), 0) > 0 && count(&r.bank, |op| op["proc"] == "TransferMP" && op["type"] == "ok") == 0 {
        missing.push("no multi-partition transfer succeeded".into());
    }
    missing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_histories_under_pauses_losses_and_rejoins_are_linearizable() {
    checker();
    let (rounds, ms) = if long() { (LONG_ROUNDS, LONG_RUN_MS) } else { (1, SHORT_RUN_MS) };
    let first = seed();
    for round in 0..rounds {
        let seed = first.wrapping_add(round as u64);
        println!("cluster history round {round}: seed {seed} (LOCKSTEP_HISTORY_SEED={seed} replays the schedule)");
        let r = run_round(seed, Duration::from_millis(ms)).await;
        println!(
            "  {} short pauses, lost {:?}, {} rejoins; {}; {}",
            r.short_pauses,
            r.losses.iter().map(|(node, how, at)| (node, how, format!("at t={:.3}ms", *at as f64 / 1e6))).collect::<Vec<_>>(),
            r.rejoins,
            summary("register", &r.register),
            summary("bank", &r.bank)
        );
        // The histories are checked (and kept, if anything failed) before the run's other
        // failures are reported: an anomaly matters most.
        let mut failures = shortfalls(&r);
        let keep = !failures.is_empty();
        for (name, header, ops) in [("register", register_header(), r.register), ("bank", bank_header(), r.bank)] {
            let (code, text) = write_and_check(&format!("cluster-{name}-{round}.jsonl"), header, ops, keep);
            println!("{text}");
            if code != 0 {
                failures.push(format!("the {name} history is not linearizable or could not be checked (exit {code}):\n{text}"));
            }
        }
        assert!(failures.is_empty(), "round {round}, seed {seed}:\n{}", failures.join("\n"));
    }
}
