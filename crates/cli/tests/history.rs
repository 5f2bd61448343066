//! Jepsen-style histories against the real server: concurrent clients run a register and a
//! bank workload while the server is killed (SIGKILL, then restarted on the same data
//! directory with a sync command log) and paused (SIGSTOP/SIGCONT) on a random schedule.
//! Every call is recorded with its invocation, its completion (ok, a definite failure, or an
//! unknown outcome) and their times, and the Go checker in `compat/history` (porcupine)
//! must find both histories linearizable. A short run by default; LOCKSTEP_LONG=1 runs
//! several long rounds. The workloads, clients and checker are in `common/history.rs`
//! (shared with `cluster_history.rs`). See compat/history/README.md.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::history::{
    bank_header, checker, count, load, long, note_fault, out_dir, register_header, run_worker, seed, signal, summary, take,
    write_and_check, Bank, Clock, Log, Register, Rng, Shared, OK_CALLS_MIN,
};
use common::{repo_root, Server, TempDir};
use serde_json::Value as Json;
use tokio::sync::watch;

/// Partitions of the server: enough that most transfers cross partitions and some pairs of
/// accounts share one.
const SITES: u32 = 4;
/// Quiet time between two faults, drawn at random in this range.
const FAULT_GAP_MIN_MS: u64 = 500;
const FAULT_GAP_MAX_MS: u64 = 2_500;
/// Length of a SIGSTOP pause, drawn at random in this range: some calls wait it out, some
/// time out.
const PAUSE_MIN_MS: u64 = 200;
const PAUSE_MAX_MS: u64 = 2_500;
/// After the last crash and recovery the clients run this long without faults, so every
/// history ends with reads of the recovered state.
const QUIET_END_MS: u64 = 1_500;
/// Faults last this long in the short run, and in each round of the long one.
const SHORT_RUN_MS: u64 = 15_000;
const LONG_RUN_MS: u64 = 60_000;
const LONG_ROUNDS: usize = 5;
/// Faults last this long against the server without a command log, which must be caught.
const FORGETFUL_RUN_MS: u64 = 2_000;

const REGISTER_CLIENTS: usize = 5;
const BANK_CLIENTS: usize = 4;

/// Starts the server on `data` with the given command-log mode (`sync` in every test but the
/// one proving a forgetful server is caught); it waits for the ready line, after recovery.
async fn start_server(data: PathBuf, command_log: &'static str) -> Server {
    let sites = SITES.to_string();
    tokio::task::spawn_blocking(move || Server::start_with(&data, &["--sites", &sites, "--command-log", command_log], "127.0.0.1:0"))
        .await
        .expect("the server did not start (see its log above)")
}

/// Kills and pauses the server on a random schedule, recording each fault in both
/// histories.
struct Nemesis {
    server: Option<Server>,
    data: PathBuf,
    command_log: &'static str,
    /// The server's client address, empty while it is down.
    addrs: watch::Sender<Vec<String>>,
    clock: Clock,
    logs: Vec<Log>,
    kills: usize,
    pauses: usize,
}

impl Nemesis {
    fn note(&self, f: &str, start: i64, detail: String) {
        note_fault(&self.logs, self.clock, f, start, detail);
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("the server is up between faults")
    }

    async fn run(&mut self, rng: &mut Rng, faults_for: Duration) {
        let end = Instant::now() + faults_for;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(rng.range(FAULT_GAP_MIN_MS, FAULT_GAP_MAX_MS))).await;
            // The first fault is a pause, the last a crash: every run has both.
            if self.pauses == 0 || rng.below(3) == 0 {
                self.pause(rng).await;
            } else {
                self.crash_and_restart().await;
            }
        }
        self.crash_and_restart().await;
        tokio::time::sleep(Duration::from_millis(QUIET_END_MS)).await;
    }

    async fn pause(&mut self, rng: &mut Rng) {
        let ms = rng.range(PAUSE_MIN_MS, PAUSE_MAX_MS);
        let start = self.clock.now();
        signal(self.server().pid(), libc::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        signal(self.server().pid(), libc::SIGCONT);
        self.pauses += 1;
        self.note("pause", start, format!("SIGSTOP for {ms} ms, then SIGCONT"));
    }

    async fn crash_and_restart(&mut self) {
        let start = self.clock.now();
        self.addrs.send_replace(Vec::new());
        if let Some(server) = self.server.take() {
            signal(server.pid(), libc::SIGKILL);
            drop(server); // reaps it
        }
        self.kills += 1;
        self.note("kill", start, "SIGKILL".into());
        let start = self.clock.now();
        let server = start_server(self.data.clone(), self.command_log).await;
        self.addrs.send_replace(vec![server.addr.clone()]);
        self.note("restart", start, format!("recovered, listening on {}", server.addr));
        self.server = Some(server);
    }
}

/// What one round recorded.
struct Round {
    register: Vec<Json>,
    bank: Vec<Json>,
    kills: usize,
    pauses: usize,
    surprises: Vec<String>,
}

/// Runs both workloads against a fresh server with faults for `faults_for`.
async fn run_round(seed: u64, faults_for: Duration, command_log: &'static str) -> Round {
    let dir = TempDir::new("history");
    let server = start_server(dir.0.clone(), command_log).await;
    load(&server.client().await).await;
    let (addrs_tx, addrs_rx) = watch::channel(vec![server.addr.clone()]);
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
        workers.push(tokio::spawn(run_worker(
            slot,
            BANK_CLIENTS,
            seed ^ 0xb4e5,
            Box::new(Bank { multi_partition_transfers: true }),
            shared.clone(),
            bank_log.clone(),
        )));
    }
    let mut nemesis = Nemesis {
        server: Some(server),
        data: dir.0.clone(),
        command_log,
        addrs: addrs_tx,
        clock,
        logs: vec![register_log.clone(), bank_log.clone()],
        kills: 0,
        pauses: 0,
    };
    nemesis.run(&mut Rng::new(seed ^ 0x4e4d), faults_for).await;
    shared.stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("a worker panicked");
    }
    drop(nemesis.server.take());
    let surprises = shared.take_surprises();
    Round { register: take(&register_log), bank: take(&bank_log), kills: nemesis.kills, pauses: nemesis.pauses, surprises }
}

/// Writes a round's two histories as `<name>-<tag>.jsonl` and checks them: each
/// workload's name, the checker's exit status and what it printed. A history that passes is
/// deleted (it can be tens of megabytes); one that fails is kept for study.
fn check_round(tag: &str, r: Round) -> Vec<(&'static str, i32, String)> {
    let histories = [("register", register_header(), r.register), ("bank", bank_header(), r.bank)];
    histories
        .into_iter()
        .map(|(name, header, ops)| {
            let (code, text) = write_and_check(&format!("{name}-{tag}.jsonl"), header, ops, false);
            (name, code, text)
        })
        .collect()
}

/// The run did what a meaningful history needs: faults of both kinds, enough successful
/// calls, both kinds of transfer, and no answer of an unexpected shape.
fn assert_round_exercised(r: &Round) {
    assert!(r.surprises.is_empty(), "answers of an unexpected shape: {:?}", r.surprises);
    assert!(r.kills >= 1 && r.pauses >= 1, "the schedule injected no crash or no pause");
    for (name, ops) in [("register", &r.register), ("bank", &r.bank)] {
        let ok_calls = count(ops, |op| op["type"] == "ok");
        assert!(ok_calls >= OK_CALLS_MIN, "{name}: only {ok_calls} calls succeeded");
    }
    let transfers_ok = |p: &str| count(&r.bank, |op| op["type"] == "ok" && op["proc"] == p);
    assert!(transfers_ok("TransferMP") > 0 && transfers_ok("TransferSP") > 0, "both kinds of transfer must have run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_under_crashes_and_pauses_are_linearizable() {
    checker();
    let (rounds, ms) = if long() { (LONG_ROUNDS, LONG_RUN_MS) } else { (1, SHORT_RUN_MS) };
    let first = seed();
    for round in 0..rounds {
        let seed = first.wrapping_add(round as u64);
        println!("history round {round}: seed {seed} (LOCKSTEP_HISTORY_SEED={seed} replays the schedule)");
        let r = run_round(seed, Duration::from_millis(ms), "sync").await;
        println!("  {} kills, {} pauses; {}; {}", r.kills, r.pauses, summary("register", &r.register), summary("bank", &r.bank));
        assert_round_exercised(&r);
        let results = check_round(&round.to_string(), r);
        let mut failures = Vec::new();
        for (name, code, text) in results {
            println!("{text}");
            if code != 0 {
                failures.push(format!("the {name} history is not linearizable or could not be checked (exit {code}):\n{text}"));
            }
        }
        assert!(failures.is_empty(), "round {round}, seed {seed}:\n{}", failures.join("\n"));
    }
}

/// The driver and the checker together catch a server that loses acknowledged writes: the
/// same workloads against a server without a command log, whose crash forgets everything,
/// must be reported as anomalies in both histories.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_forgets_acknowledged_writes_is_caught() {
    checker();
    let seed = seed();
    let r = run_round(seed, Duration::from_millis(FORGETFUL_RUN_MS), "off").await;
    assert!(r.kills >= 1, "the schedule injected no crash");
    for (name, code, text) in check_round("forgetful", r) {
        assert_eq!(code, 1, "the {name} history of a server without a command log (seed {seed}) should show lost writes:\n{text}");
        assert!(text.contains("is not linearizable"), "{name}: no explanation:\n{text}");
        for ext in ["jsonl", "html"] {
            let _ = std::fs::remove_file(out_dir().join(format!("{name}-forgetful.{ext}")));
        }
    }
}

/// The checker is not a rubber stamp: each hand-made history in compat/history/testdata
/// named bad_* (a read of a value never written, a lost acknowledged write, a failed write
/// seen, money not conserved, a stale read, ...) is reported as an anomaly, and each ok_*
/// one passes.
#[test]
fn the_checker_reports_hand_made_anomalies() {
    let testdata = repo_root().join("compat/history/testdata");
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(&testdata).expect("compat/history/testdata").filter_map(|e| e.ok()).map(|e| e.path()).collect();
    files.sort();
    let name = |p: &PathBuf| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    assert!(files.iter().filter(|p| name(p).starts_with("bad_")).count() >= 5, "the bad histories are missing");
    for path in &files {
        let out = Command::new(checker()).arg(path).output().expect("run the history checker");
        let text = String::from_utf8_lossy(&out.stdout);
        let want = if name(path).starts_with("bad_") { 1 } else { 0 };
        assert_eq!(out.status.code(), Some(want), "{}:\n{text}", path.display());
        if want == 1 {
            assert!(text.contains("anomaly 1:"), "{}: no explanation:\n{text}", path.display());
        }
    }
}
