//! Jepsen-style histories against the real server: concurrent clients run a register and a
//! bank workload while the server is killed (SIGKILL, then restarted on the same data
//! directory with a sync command log) and paused (SIGSTOP/SIGCONT) on a random schedule.
//! Every call is recorded with its invocation, its completion (ok, a definite failure, or an
//! unknown outcome) and their times, and the Go checker in `compat/history` (porcupine)
//! must find both histories linearizable. A short run by default; LOCKSTEP_LONG=1 runs
//! several long rounds. See compat/history/README.md.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{adhoc, ok, repo_root, Server, TempDir};
use lockstep_client::{status, Client, ClientConfig, ClientError, Response};
use lockstep_core::Value;
use serde_json::{json, Value as Json};
use tokio::sync::watch;

/// Partitions of the server: enough that most transfers cross partitions and some pairs of
/// accounts share one.
const SITES: u32 = 4;
/// How long a client waits for an answer before it records the call as of unknown outcome
/// (a paused server answers nobody).
const CALL_TIMEOUT_MS: u64 = 1_500;
/// How long connecting (and the client's routing calls) may take.
const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Pause between attempts to reach a server that is down.
const RECONNECT_PAUSE_MS: u64 = 50;
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
/// How long the checker may search before it calls a history inconclusive (a failure here).
const CHECK_TIMEOUT_S: u64 = 300;

const REGISTER_CLIENTS: usize = 5;
const REGISTER_KEYS: i64 = 6;
const BANK_CLIENTS: usize = 4;
const BANK_ACCOUNTS: i64 = 6;
const BANK_INITIAL_BALANCE: i64 = 100;
/// Transfers move 1..=this much: large enough that some are refused for lack of money.
const TRANSFER_AMOUNT_MAX: i64 = 60;
/// Each workload's history must hold at least this many successful calls for the run to
/// count (a server that never answered would otherwise pass).
const OK_CALLS_MIN: usize = 50;

/// The procedures' refusals (a definite failure that observed the data) start with this.
const REFUSED: &str = "refused:";

const SCHEMA: &[&str] = &[
    "CREATE TABLE reg (k BIGINT NOT NULL PRIMARY KEY, v BIGINT NOT NULL)",
    "PARTITION TABLE reg ON COLUMN k",
    "CREATE TABLE acct (id BIGINT NOT NULL PRIMARY KEY, bal BIGINT NOT NULL)",
    "PARTITION TABLE acct ON COLUMN id",
];

/// A missing register reads as -1, which no write stores: the checker reports it.
const REG_READ: &str = "local get = sql [[SELECT v FROM reg WHERE k = ?]]
return function(k)
  local v = get:values(k)
  if v == nil then return -1 end
  return v
end";

const REG_WRITE: &str = "local put = sql [[UPDATE reg SET v = ? WHERE k = ?]]
return function(k, v)
  if put:exec(v, k) ~= 1 then abort('no register ' .. k) end
end";

/// Compare-and-set: reads, then writes only when the register holds `from`.
const REG_CAS: &str = "local get = sql [[SELECT v FROM reg WHERE k = ?]]
local put = sql [[UPDATE reg SET v = ? WHERE k = ?]]
return function(k, from, to)
  local v = get:values(k)
  if v ~= from then abort('refused: register ' .. k .. ' holds ' .. tostring(v) .. ', not ' .. from) end
  put:exec(to, k)
end";

/// One transfer's body, run as a multi-partition procedure and, for two accounts of one
/// partition, as a single-partition one.
const TRANSFER: &str = "local get = sql [[SELECT bal FROM acct WHERE id = ?]]
local add = sql [[UPDATE acct SET bal = bal + ? WHERE id = ?]]
return function(from, to, amount)
  local have = get:values(from)
  if have == nil or get:values(to) == nil then abort('no such account here: ' .. from .. ' or ' .. to) end
  if have < amount then abort('refused: account ' .. from .. ' holds ' .. have .. ', less than ' .. amount) end
  add:exec(-amount, from)
  add:exec(amount, to)
end";

const READ_ALL: &str = "local all = sql [[SELECT id, bal FROM acct ORDER BY id]]
return function() return all:query() end";

fn long() -> bool {
    std::env::var("LOCKSTEP_LONG").is_ok_and(|v| v == "1")
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

/// xorshift64*: the fault schedule and the calls, reproducible from the printed seed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// The seed: LOCKSTEP_HISTORY_SEED to replay a schedule, else the clock.
fn seed() -> u64 {
    if let Some(s) = std::env::var("LOCKSTEP_HISTORY_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.as_nanos() as u64 ^ u64::from(std::process::id())
}

/// One monotonic clock for every record of a run, in nanoseconds since its start.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn now(&self) -> i64 {
        i64::try_from(self.0.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }
}

/// A history being recorded: operation records as the checker reads them.
type Log = Arc<Mutex<Vec<Json>>>;

fn push(log: &Log, record: Json) {
    log.lock().unwrap_or_else(|e| e.into_inner()).push(record);
}

/// What the workers share.
struct Shared {
    clock: Clock,
    stop: AtomicBool,
    /// The live server's address; None while it is down.
    addr: watch::Receiver<Option<String>>,
    /// Answers the test did not expect in shape (a failure of the test, listed at the end).
    surprises: Mutex<Vec<String>>,
    /// Values for writes, unique across the run so a read names the write it saw.
    next_value: AtomicI64,
}

/// A call a workload makes: its procedure and parameters, and how the history names it.
struct Call {
    f: &'static str,
    proc_name: &'static str,
    params: Vec<Value>,
    input: Json,
}

/// How a call ended, as the checker classifies it.
enum Outcome {
    Ok(Json),
    /// A definite failure; `refused` when the procedure declined after reading the data.
    Fail {
        refused: bool,
        error: String,
    },
    /// Unknown: it may or may not have happened.
    Info(String),
}

trait Workload: Send {
    fn next(&mut self, rng: &mut Rng, client: &Client, shared: &Shared) -> Call;
    /// The output of a successful call, or why its answer has the wrong shape.
    fn output(&mut self, call: &Call, r: &Response) -> Result<Json, String>;
}

/// Keys read, written and compare-and-set; each call is single-partition.
struct Register {
    /// The last value any register client saw per key: what compare-and-sets expect, so
    /// that many of them succeed.
    seen: Arc<Mutex<HashMap<i64, i64>>>,
}

impl Register {
    fn saw(&self, key: i64, value: i64) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).insert(key, value);
    }
}

impl Workload for Register {
    fn next(&mut self, rng: &mut Rng, _client: &Client, shared: &Shared) -> Call {
        let k = rng.below(REGISTER_KEYS as u64) as i64;
        let fresh = shared.next_value.fetch_add(1, Ordering::Relaxed);
        match rng.below(10) {
            0..=3 => Call { f: "read", proc_name: "RegRead", params: vec![i(k)], input: json!({ "key": k }) },
            4..=6 => Call { f: "write", proc_name: "RegWrite", params: vec![i(k), i(fresh)], input: json!({ "key": k, "value": fresh }) },
            _ => {
                let from = self.seen.lock().unwrap_or_else(|e| e.into_inner()).get(&k).copied().unwrap_or(0);
                Call {
                    f: "cas",
                    proc_name: "RegCas",
                    params: vec![i(k), i(from), i(fresh)],
                    input: json!({ "key": k, "from": from, "to": fresh }),
                }
            }
        }
    }

    fn output(&mut self, call: &Call, r: &Response) -> Result<Json, String> {
        let key = call.params[0].as_i64().unwrap_or(-1);
        match call.f {
            "read" => {
                let v = r.tables.first().and_then(|t| t.rows.first()).and_then(|row| row.first()).and_then(Value::as_i64);
                let v = v.ok_or_else(|| format!("RegRead answered no integer: {:?}", r.tables))?;
                self.saw(key, v);
                Ok(json!({ "value": v }))
            }
            _ => {
                if let Some(v) = call.params.last().and_then(Value::as_i64) {
                    self.saw(key, v);
                }
                Ok(json!({}))
            }
        }
    }
}

/// Transfers between accounts (multi-partition, or single-partition when both accounts are
/// in one partition) and reads of every balance (multi-partition).
struct Bank;

impl Workload for Bank {
    fn next(&mut self, rng: &mut Rng, client: &Client, _shared: &Shared) -> Call {
        if rng.below(10) < 3 {
            return Call { f: "read", proc_name: "ReadAll", params: vec![], input: json!({}) };
        }
        let from = rng.below(BANK_ACCOUNTS as u64) as i64;
        let to = (from + 1 + rng.below(BANK_ACCOUNTS as u64 - 1) as i64) % BANK_ACCOUNTS;
        let amount = rng.range(1, TRANSFER_AMOUNT_MAX as u64) as i64;
        let pf = client.partition_for_call("TransferSP", &[i(from)]);
        let pt = client.partition_for_call("TransferSP", &[i(to)]);
        let proc_name = if pf.is_some() && pf == pt { "TransferSP" } else { "TransferMP" };
        Call {
            f: "transfer",
            proc_name,
            params: vec![i(from), i(to), i(amount)],
            input: json!({ "from": from, "to": to, "amount": amount }),
        }
    }

    fn output(&mut self, call: &Call, r: &Response) -> Result<Json, String> {
        if call.f != "read" {
            return Ok(json!({}));
        }
        let table = r.tables.first().ok_or("ReadAll answered no table")?;
        let mut balances = Vec::with_capacity(table.rows.len());
        for (n, row) in table.rows.iter().enumerate() {
            match (row.first().and_then(Value::as_i64), row.get(1).and_then(Value::as_i64)) {
                (Some(id), Some(bal)) if id == n as i64 => balances.push(bal),
                _ => return Err(format!("ReadAll row {n} is not (account {n}, balance): {row:?}")),
            }
        }
        Ok(json!({ "balances": balances }))
    }
}

/// Classifies an answer; the flag says the connection is gone and must be opened again.
fn classify(result: Result<Response, ClientError>, call: &Call, w: &mut dyn Workload, shared: &Shared) -> (Outcome, bool) {
    match result {
        Ok(r) if r.status == status::SUCCESS => match w.output(call, &r) {
            Ok(out) => (Outcome::Ok(out), false),
            Err(e) => {
                shared.surprises.lock().unwrap_or_else(|e| e.into_inner()).push(e.clone());
                (Outcome::Info(e), false)
            }
        },
        Ok(r) => {
            let error = format!("status {}: {}", r.status, r.status_string.unwrap_or_default());
            match r.status {
                status::USER_ABORT | status::GRACEFUL_FAILURE | status::UNEXPECTED_FAILURE | status::SERVER_UNAVAILABLE => {
                    let refused = r.status == status::USER_ABORT && error.contains(REFUSED);
                    (Outcome::Fail { refused, error }, false)
                }
                // RESPONSE_UNKNOWN and the connection statuses: it may have happened.
                _ => (Outcome::Info(error), false),
            }
        }
        // Never sent: it cannot have happened.
        Err(e @ ClientError::InvalidCall(_)) => (Outcome::Fail { refused: false, error: e.to_string() }, false),
        Err(e @ ClientError::Timeout(_)) => (Outcome::Info(e.to_string()), false),
        Err(e) => (Outcome::Info(e.to_string()), true),
    }
}

fn record(client: usize, call: &Call, start: i64, end: i64, outcome: &Outcome) -> Json {
    let mut r = json!({ "client": client, "f": call.f, "proc": call.proc_name, "input": call.input, "call": start });
    match outcome {
        Outcome::Ok(out) => {
            r["type"] = json!("ok");
            r["output"] = out.clone();
            r["return"] = json!(end);
        }
        Outcome::Fail { refused, error } => {
            r["type"] = json!("fail");
            if *refused {
                r["output"] = json!({ "refused": true });
            }
            r["return"] = json!(end);
            r["error"] = json!(error);
        }
        Outcome::Info(error) => {
            r["type"] = json!("info");
            r["error"] = json!(error);
        }
    }
    r
}

/// Connects to the live server, waiting while it is down; None once the run stops.
async fn connect(shared: &Shared) -> Option<Client> {
    while !shared.stop.load(Ordering::Relaxed) {
        let addr = shared.addr.borrow().clone();
        if let Some(addr) = addr {
            let attempt = Client::connect(&addr, ClientConfig::default());
            if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), attempt).await {
                return Some(c);
            }
        }
        tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)).await;
    }
    None
}

/// One client: calls one at a time until the run stops. After a call of unknown outcome it
/// goes on as a new process (that call may still be pending), as Jepsen does.
async fn run_worker(slot: usize, clients: usize, seed: u64, mut w: Box<dyn Workload>, shared: Arc<Shared>, log: Log) {
    let mut rng = Rng::new(seed ^ (slot as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut process = slot;
    let mut conn: Option<Client> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let client = match conn.clone() {
            Some(c) => c,
            None => match connect(&shared).await {
                Some(c) => {
                    conn = Some(c.clone());
                    c
                }
                None => break,
            },
        };
        let call = w.next(&mut rng, &client, &shared);
        let start = shared.clock.now();
        let result = client.call_with_timeout(call.proc_name, call.params.clone(), Duration::from_millis(CALL_TIMEOUT_MS)).await;
        let end = shared.clock.now();
        let (outcome, reconnect) = classify(result, &call, w.as_mut(), &shared);
        push(&log, record(process, &call, start, end, &outcome));
        if matches!(outcome, Outcome::Info(_)) {
            process += clients;
        }
        if reconnect {
            conn = None;
        }
    }
}

/// Starts the server on `data` with the given command-log mode (`sync` in every test but the
/// one proving a forgetful server is caught); it waits for the ready line, after recovery.
async fn start_server(data: PathBuf, command_log: &'static str) -> Server {
    let sites = SITES.to_string();
    tokio::task::spawn_blocking(move || Server::start_with(&data, &["--sites", &sites, "--command-log", command_log], "127.0.0.1:0"))
        .await
        .expect("the server did not start (see its log above)")
}

fn signal(server: &Server, sig: i32) {
    let pid = i32::try_from(server.pid()).expect("pid fits an i32");
    // SAFETY: kill(2) on our own child's pid, with a valid signal number.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "signal {sig} to the server failed");
}

/// Kills and pauses the server on a random schedule, recording each fault in both
/// histories.
struct Nemesis {
    server: Option<Server>,
    data: PathBuf,
    command_log: &'static str,
    addr: watch::Sender<Option<String>>,
    clock: Clock,
    logs: Vec<Log>,
    kills: usize,
    pauses: usize,
}

impl Nemesis {
    fn note(&self, f: &str, start: i64, detail: String) {
        let r = json!({ "client": 0, "f": f, "type": "nemesis", "call": start, "return": self.clock.now(), "error": detail });
        for log in &self.logs {
            push(log, r.clone());
        }
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
        signal(self.server(), libc::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        signal(self.server(), libc::SIGCONT);
        self.pauses += 1;
        self.note("pause", start, format!("SIGSTOP for {ms} ms, then SIGCONT"));
    }

    async fn crash_and_restart(&mut self) {
        let start = self.clock.now();
        self.addr.send_replace(None);
        if let Some(server) = self.server.take() {
            signal(&server, libc::SIGKILL);
            drop(server); // reaps it
        }
        self.kills += 1;
        self.note("kill", start, "SIGKILL".into());
        let start = self.clock.now();
        let server = start_server(self.data.clone(), self.command_log).await;
        self.addr.send_replace(Some(server.addr.clone()));
        self.note("restart", start, format!("recovered, listening on {}", server.addr));
        self.server = Some(server);
    }
}

/// Creates the tables and procedures and loads the initial state.
async fn load(client: &Client) {
    for ddl in SCHEMA {
        adhoc(client, ddl).await;
    }
    let procs = [
        ("RegRead", "PARTITION ON TABLE reg COLUMN k", REG_READ),
        ("RegWrite", "PARTITION ON TABLE reg COLUMN k", REG_WRITE),
        ("RegCas", "PARTITION ON TABLE reg COLUMN k", REG_CAS),
        ("TransferSP", "PARTITION ON TABLE acct COLUMN id", TRANSFER),
        ("TransferMP", "", TRANSFER),
        ("ReadAll", "", READ_ALL),
    ];
    for (name, partition, source) in procs {
        adhoc(client, &format!("CREATE PROCEDURE {name} {partition} FROM FILE '{name}.lua' SOURCE $lua${source}$lua$")).await;
    }
    for k in 0..REGISTER_KEYS {
        ok(client, "REG.insert", vec![i(k), i(0)]).await;
    }
    for a in 0..BANK_ACCOUNTS {
        ok(client, "ACCT.insert", vec![i(a), i(BANK_INITIAL_BALANCE)]).await;
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
    let (addr_tx, addr_rx) = watch::channel(Some(server.addr.clone()));
    let clock = Clock(Instant::now());
    let shared = Arc::new(Shared {
        clock,
        stop: AtomicBool::new(false),
        addr: addr_rx,
        surprises: Mutex::new(Vec::new()),
        next_value: AtomicI64::new(1),
    });
    let (register_log, bank_log): (Log, Log) = Default::default();
    let mut workers = Vec::new();
    let seen = Arc::new(Mutex::new(HashMap::new()));
    for slot in 0..REGISTER_CLIENTS {
        let w = Box::new(Register { seen: seen.clone() });
        workers.push(tokio::spawn(run_worker(slot, REGISTER_CLIENTS, seed, w, shared.clone(), register_log.clone())));
    }
    for slot in 0..BANK_CLIENTS {
        workers.push(tokio::spawn(run_worker(slot, BANK_CLIENTS, seed ^ 0xb4e5, Box::new(Bank), shared.clone(), bank_log.clone())));
    }
    let mut nemesis = Nemesis {
        server: Some(server),
        data: dir.0.clone(),
        command_log,
        addr: addr_tx,
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
    let take = |log: &Log| std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
    let surprises = std::mem::take(&mut *shared.surprises.lock().unwrap_or_else(|e| e.into_inner()));
    Round { register: take(&register_log), bank: take(&bank_log), kills: nemesis.kills, pauses: nemesis.pauses, surprises }
}

/// Where histories and visualizations are kept, so a failure can be studied.
fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("history");
    std::fs::create_dir_all(&dir).expect("create the history directory");
    dir
}

/// Writes a history: its header, then one operation a line, in invocation order.
fn write_history(path: &Path, header: Json, mut ops: Vec<Json>) {
    ops.sort_by_key(|op| op["call"].as_i64().unwrap_or(0));
    let mut text = header.to_string();
    for op in ops {
        text.push('\n');
        text.push_str(&op.to_string());
    }
    text.push('\n');
    std::fs::write(path, text).expect("write the history");
}

/// Builds the checker once per test process (Go fetches porcupine on the first build).
fn checker() -> &'static Path {
    static CHECKER: OnceLock<PathBuf> = OnceLock::new();
    CHECKER.get_or_init(|| {
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("history-check");
        let src = repo_root().join("compat/history");
        let out = Command::new("go").args(["build", "-buildvcs=false", "-o"]).arg(&bin).arg(".").current_dir(&src).output();
        match out {
            Ok(o) if o.status.success() => bin,
            Ok(o) => panic!("building the history checker in {} failed:\n{}", src.display(), String::from_utf8_lossy(&o.stderr)),
            Err(e) => panic!("the history checker needs Go (1.21 or later) on PATH: {e}; scripts/test.sh fetches its module"),
        }
    })
}

/// Runs the checker; its exit status and what it printed.
fn check(history: &Path) -> (i32, String) {
    let html = history.with_extension("html");
    let _ = std::fs::remove_file(&html);
    let out = Command::new(checker())
        .arg("-timeout")
        .arg(format!("{CHECK_TIMEOUT_S}s"))
        .arg("-html")
        .arg(&html)
        .arg(history)
        .output()
        .expect("run the history checker");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn count(ops: &[Json], pred: impl Fn(&Json) -> bool) -> usize {
    ops.iter().filter(|op| pred(op)).count()
}

fn summary(name: &str, ops: &[Json]) -> String {
    let of = |t: &str| count(ops, |op| op["type"] == t);
    format!("{name}: {} ok, {} failed, {} unknown", of("ok"), of("fail"), of("info"))
}

/// Writes a round's two histories as `<name>-<tag>.jsonl` and checks them: each
/// workload's name, the checker's exit status and what it printed. A history that passes is
/// deleted (it can be tens of megabytes); one that fails is kept for study.
fn check_round(tag: &str, r: Round) -> Vec<(&'static str, i32, String)> {
    let dir = out_dir();
    let balances = vec![BANK_INITIAL_BALANCE; BANK_ACCOUNTS as usize];
    let histories = [
        ("register", json!({ "workload": "register", "initial": { "value": 0 } }), r.register),
        ("bank", json!({ "workload": "bank", "initial": { "balances": balances } }), r.bank),
    ];
    let mut results = Vec::new();
    for (name, header, ops) in histories {
        let path = dir.join(format!("{name}-{tag}.jsonl"));
        write_history(&path, header, ops);
        let (code, text) = check(&path);
        if code == 0 {
            let _ = std::fs::remove_file(&path);
        }
        results.push((name, code, text));
    }
    results
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
