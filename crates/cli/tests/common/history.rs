//! Jepsen-style history recording shared by the fault tests (`history.rs` against one node,
//! `cluster_history.rs` against a cluster): the register and bank workloads, clients that
//! record every call's invocation and completion (ok, a definite failure, or an unknown
//! outcome) on one clock, and the Go checker in `compat/history` (porcupine) that decides
//! whether a history is linearizable. See compat/history/README.md.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use lockstep_client::{status, Client, ClientConfig, ClientError, Response};
use lockstep_core::Value;
use serde_json::{json, Value as Json};
use tokio::sync::watch;

use super::{adhoc, ok, repo_root};

/// How long a client waits for an answer before it records the call as of unknown outcome
/// (a paused server answers nobody). Well above a failover (about 1 s) and a loaded
/// machine's slow answers: every call of unknown outcome overlaps everything after it in
/// the checker's search, and the bank history (one object) cannot take many.
pub const CALL_TIMEOUT_MS: u64 = 4_000;
/// Pause of a client after a call of unknown outcome (it starts again as a new process),
/// so that a node that answers nobody does not pile them up.
pub const UNKNOWN_PAUSE_MS: u64 = 500;
/// How long connecting (and the client's routing calls) may take.
pub const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Pause between attempts to reach a server that is down.
pub const RECONNECT_PAUSE_MS: u64 = 50;
/// Pause after a call the server refused as unavailable (a cluster node out of the
/// majority, or not admitted yet): a client does not spin on refusals, which would fill
/// the history and take the CPU the nodes need to recover.
pub const UNAVAILABLE_PAUSE_MS: u64 = 10;
/// How long the checker may search before it calls a history inconclusive (a failure here).
pub const CHECK_TIMEOUT_S: u64 = 300;

pub const REGISTER_KEYS: i64 = 6;
pub const BANK_ACCOUNTS: i64 = 6;
pub const BANK_INITIAL_BALANCE: i64 = 100;
/// Transfers move 1..=this much: large enough that some are refused for lack of money.
pub const TRANSFER_AMOUNT_MAX: i64 = 60;
/// Each workload's history must hold at least this many successful calls for the run to
/// count (a server that never answered would otherwise pass).
pub const OK_CALLS_MIN: usize = 50;

/// The procedures' refusals (a definite failure that observed the data) start with this.
pub const REFUSED: &str = "refused:";

pub const SCHEMA: &[&str] = &[
    "CREATE TABLE reg (k BIGINT NOT NULL PRIMARY KEY, v BIGINT NOT NULL)",
    "PARTITION TABLE reg ON COLUMN k",
    "CREATE TABLE acct (id BIGINT NOT NULL PRIMARY KEY, bal BIGINT NOT NULL)",
    "PARTITION TABLE acct ON COLUMN id",
];

/// A missing register reads as -1, which no write stores: the checker reports it.
pub const REG_READ: &str = "local get = sql [[SELECT v FROM reg WHERE k = ?]]
return function(k)
  local v = get:values(k)
  if v == nil then return -1 end
  return v
end";

pub const REG_WRITE: &str = "local put = sql [[UPDATE reg SET v = ? WHERE k = ?]]
return function(k, v)
  if put:exec(v, k) ~= 1 then abort('no register ' .. k) end
end";

/// Compare-and-set: reads, then writes only when the register holds `from`.
pub const REG_CAS: &str = "local get = sql [[SELECT v FROM reg WHERE k = ?]]
local put = sql [[UPDATE reg SET v = ? WHERE k = ?]]
return function(k, from, to)
  local v = get:values(k)
  if v ~= from then abort('refused: register ' .. k .. ' holds ' .. tostring(v) .. ', not ' .. from) end
  put:exec(to, k)
end";

/// One transfer's body, run as a multi-partition procedure and, for two accounts of one
/// partition, as a single-partition one.
pub const TRANSFER: &str = "local get = sql [[SELECT bal FROM acct WHERE id = ?]]
local add = sql [[UPDATE acct SET bal = bal + ? WHERE id = ?]]
return function(from, to, amount)
  local have = get:values(from)
  if have == nil or get:values(to) == nil then abort('no such account here: ' .. from .. ' or ' .. to) end
  if have < amount then abort('refused: account ' .. from .. ' holds ' .. have .. ', less than ' .. amount) end
  add:exec(-amount, from)
  add:exec(amount, to)
end";

pub const READ_ALL: &str = "local all = sql [[SELECT id, bal FROM acct ORDER BY id]]
return function() return all:query() end";

pub fn long() -> bool {
    std::env::var("LOCKSTEP_LONG").is_ok_and(|v| v == "1")
}

pub fn i(v: i64) -> Value {
    Value::Int(v)
}

/// xorshift64*: the fault schedule and the calls, reproducible from the printed seed.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
}

/// The seed: LOCKSTEP_HISTORY_SEED to replay a schedule, else the clock.
pub fn seed() -> u64 {
    if let Some(s) = std::env::var("LOCKSTEP_HISTORY_SEED").ok().and_then(|s| s.parse().ok()) {
        return s;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    now.as_nanos() as u64 ^ u64::from(std::process::id())
}

/// One monotonic clock for every record of a run, in nanoseconds since its start.
#[derive(Clone, Copy)]
pub struct Clock(pub Instant);

impl Clock {
    pub fn now(&self) -> i64 {
        i64::try_from(self.0.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }
}

/// A history being recorded: operation records as the checker reads them.
pub type Log = Arc<Mutex<Vec<Json>>>;

pub fn push(log: &Log, record: Json) {
    log.lock().unwrap_or_else(|e| e.into_inner()).push(record);
}

/// Takes what a history recorded.
pub fn take(log: &Log) -> Vec<Json> {
    std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Records an injected fault in every history (not checked; shown in explanations).
pub fn note_fault(logs: &[Log], clock: Clock, f: &str, start: i64, detail: String) {
    let r = json!({ "client": 0, "f": f, "type": "nemesis", "call": start, "return": clock.now(), "error": detail });
    for log in logs {
        push(log, r.clone());
    }
}

/// What the workers share.
pub struct Shared {
    pub clock: Clock,
    pub stop: AtomicBool,
    /// The client addresses of the servers a client may connect to now (none while the only
    /// server is down); a client picks one by its slot and moves on when it loses it.
    pub addrs: watch::Receiver<Vec<String>>,
    /// Answers the test did not expect in shape (a failure of the test, listed at the end).
    pub surprises: Mutex<Vec<String>>,
    /// Values for writes, unique across the run so a read names the write it saw.
    pub next_value: AtomicI64,
}

impl Shared {
    pub fn new(clock: Clock, addrs: watch::Receiver<Vec<String>>) -> Arc<Shared> {
        Arc::new(Shared { clock, stop: AtomicBool::new(false), addrs, surprises: Mutex::new(Vec::new()), next_value: AtomicI64::new(1) })
    }

    pub fn take_surprises(&self) -> Vec<String> {
        std::mem::take(&mut *self.surprises.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A call a workload makes: its procedure and parameters, and how the history names it.
pub struct Call {
    pub f: &'static str,
    pub proc_name: &'static str,
    pub params: Vec<Value>,
    pub input: Json,
}

/// How a call ended, as the checker classifies it.
pub enum Outcome {
    Ok(Json),
    /// A definite failure; `refused` when the procedure declined after reading the data.
    Fail {
        refused: bool,
        /// The server said it takes no calls now (SERVER_UNAVAILABLE).
        unavailable: bool,
        error: String,
    },
    /// Unknown: it may or may not have happened.
    Info(String),
}

pub trait Workload: Send {
    fn next(&mut self, rng: &mut Rng, client: &Client, shared: &Shared) -> Call;
    /// The output of a successful call, or why its answer has the wrong shape.
    fn output(&mut self, call: &Call, r: &Response) -> Result<Json, String>;
}

/// Keys read, written and compare-and-set; each call is single-partition.
pub struct Register {
    /// The last value any register client saw per key: what compare-and-sets expect, so
    /// that many of them succeed.
    pub seen: Arc<Mutex<HashMap<i64, i64>>>,
}

impl Register {
    pub fn read(k: i64) -> Call {
        Call { f: "read", proc_name: "RegRead", params: vec![i(k)], input: json!({ "key": k }) }
    }

    fn saw(&self, key: i64, value: i64) {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).insert(key, value);
    }
}

impl Workload for Register {
    fn next(&mut self, rng: &mut Rng, _client: &Client, shared: &Shared) -> Call {
        let k = rng.below(REGISTER_KEYS as u64) as i64;
        let fresh = shared.next_value.fetch_add(1, Ordering::Relaxed);
        match rng.below(10) {
            0..=3 => Register::read(k),
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
                let v = read_value(r)?;
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

/// The value a successful RegRead answered.
pub fn read_value(r: &Response) -> Result<i64, String> {
    let v = r.tables.first().and_then(|t| t.rows.first()).and_then(|row| row.first()).and_then(Value::as_i64);
    v.ok_or_else(|| format!("RegRead answered no integer: {:?}", r.tables))
}

/// Transfers between accounts and reads of every balance (multi-partition). A transfer
/// between two accounts of one partition runs single-partition; others run
/// multi-partition when `multi_partition_transfers`, and are replaced by a read otherwise.
pub struct Bank {
    pub multi_partition_transfers: bool,
}

impl Bank {
    pub fn read() -> Call {
        Call { f: "read", proc_name: "ReadAll", params: vec![], input: json!({}) }
    }
}

impl Workload for Bank {
    fn next(&mut self, rng: &mut Rng, client: &Client, _shared: &Shared) -> Call {
        if rng.below(10) < 3 {
            return Bank::read();
        }
        let from = rng.below(BANK_ACCOUNTS as u64) as i64;
        let partition = |a: i64| client.partition_for_call("TransferSP", &[i(a)]);
        let others = (1..BANK_ACCOUNTS).map(|d| (from + d) % BANK_ACCOUNTS);
        let to = if self.multi_partition_transfers {
            Some((from + 1 + rng.below(BANK_ACCOUNTS as u64 - 1) as i64) % BANK_ACCOUNTS)
        } else {
            // Only partners of the same partition; a random one of them.
            let partners: Vec<i64> = others.filter(|&t| partition(from).is_some() && partition(t) == partition(from)).collect();
            (!partners.is_empty()).then(|| partners[rng.below(partners.len() as u64) as usize])
        };
        let Some(to) = to else { return Bank::read() };
        let amount = rng.range(1, TRANSFER_AMOUNT_MAX as u64) as i64;
        let (pf, pt) = (partition(from), partition(to));
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
pub fn classify(result: Result<Response, ClientError>, call: &Call, w: &mut dyn Workload, shared: &Shared) -> (Outcome, bool) {
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
                    let unavailable = r.status == status::SERVER_UNAVAILABLE;
                    (Outcome::Fail { refused, unavailable, error }, false)
                }
                // RESPONSE_UNKNOWN and the connection statuses: it may have happened.
                _ => (Outcome::Info(error), false),
            }
        }
        // Never sent: it cannot have happened.
        Err(e @ ClientError::InvalidCall(_)) => (Outcome::Fail { refused: false, unavailable: false, error: e.to_string() }, false),
        Err(e @ ClientError::Timeout(_)) => (Outcome::Info(e.to_string()), false),
        Err(e) => (Outcome::Info(e.to_string()), true),
    }
}

pub fn record(client: usize, call: &Call, start: i64, end: i64, outcome: &Outcome) -> Json {
    let mut r = json!({ "client": client, "f": call.f, "proc": call.proc_name, "input": call.input, "call": start });
    match outcome {
        Outcome::Ok(out) => {
            r["type"] = json!("ok");
            r["output"] = out.clone();
            r["return"] = json!(end);
        }
        Outcome::Fail { refused, error, .. } => {
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

/// Connects to a live server, the `attempt`-th after the slot's own, waiting while none is
/// up; None once the run stops.
async fn connect(shared: &Shared, slot: usize, attempt: &mut usize) -> Option<Client> {
    while !shared.stop.load(Ordering::Relaxed) {
        let addrs = shared.addrs.borrow().clone();
        if !addrs.is_empty() {
            let addr = &addrs[(slot + *attempt) % addrs.len()];
            let connecting = Client::connect(addr, ClientConfig::default());
            if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connecting).await {
                return Some(c);
            }
            *attempt += 1;
        }
        tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)).await;
    }
    None
}

/// One client: calls one at a time until the run stops. After a call of unknown outcome it
/// goes on as a new process (that call may still be pending), as Jepsen does. It connects
/// to the server of its slot, and to the next one when it loses its connection.
pub async fn run_worker(slot: usize, clients: usize, seed: u64, mut w: Box<dyn Workload>, shared: Arc<Shared>, log: Log) {
    let mut rng = Rng::new(seed ^ (slot as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut process = slot;
    let mut attempt = 0;
    let mut conn: Option<Client> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let client = match conn.clone() {
            Some(c) => c,
            None => match connect(&shared, slot, &mut attempt).await {
                Some(c) => {
                    conn = Some(c.clone());
                    c
                }
                None => break,
            },
        };
        let call = w.next(&mut rng, &client, &shared);
        let (outcome, reconnect) = call_and_record(&client, &call, w.as_mut(), &shared, &log, process).await;
        match outcome {
            Outcome::Info(_) => {
                process += clients;
                tokio::time::sleep(Duration::from_millis(UNKNOWN_PAUSE_MS)).await;
            }
            Outcome::Fail { unavailable: true, .. } => tokio::time::sleep(Duration::from_millis(UNAVAILABLE_PAUSE_MS)).await,
            _ => {}
        }
        if reconnect {
            conn = None;
            attempt += 1;
        }
    }
}

/// Makes one call and records it in `log` as client `process`: how it ended, and whether
/// the connection is gone.
pub async fn call_and_record(
    client: &Client,
    call: &Call,
    w: &mut dyn Workload,
    shared: &Shared,
    log: &Log,
    process: usize,
) -> (Outcome, bool) {
    let start = shared.clock.now();
    let result = client.call_with_timeout(call.proc_name, call.params.clone(), Duration::from_millis(CALL_TIMEOUT_MS)).await;
    let end = shared.clock.now();
    let (outcome, reconnect) = classify(result, call, w, shared);
    push(log, record(process, call, start, end, &outcome));
    (outcome, reconnect)
}

/// Sends `sig` to a process the test started.
pub fn signal(pid: u32, sig: i32) {
    let pid = i32::try_from(pid).expect("pid fits an i32");
    // SAFETY: kill(2) on our own child's pid, with a valid signal number.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "signal {sig} to process {pid} failed");
}

/// Creates the tables and procedures and loads the initial state.
pub async fn load(client: &Client) {
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

/// Where histories and visualizations are kept, so a failure can be studied.
pub fn out_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("history");
    std::fs::create_dir_all(&dir).expect("create the history directory");
    dir
}

/// Writes a history: its header, then one operation a line, in invocation order.
pub fn write_history(path: &Path, header: Json, mut ops: Vec<Json>) {
    ops.sort_by_key(|op| op["call"].as_i64().unwrap_or(0));
    let mut text = header.to_string();
    for op in ops {
        text.push('\n');
        text.push_str(&op.to_string());
    }
    text.push('\n');
    std::fs::write(path, text).expect("write the history");
}

/// The register history's header.
pub fn register_header() -> Json {
    json!({ "workload": "register", "initial": { "value": 0 } })
}

/// The bank history's header.
pub fn bank_header() -> Json {
    json!({ "workload": "bank", "initial": { "balances": vec![BANK_INITIAL_BALANCE; BANK_ACCOUNTS as usize] } })
}

/// Builds the checker once per test process (Go fetches porcupine on the first build).
pub fn checker() -> &'static Path {
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
pub fn check(history: &Path) -> (i32, String) {
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

/// Writes a history to `<out_dir>/<file>` and checks it: the checker's exit status and what
/// it printed. A history that passes is deleted (it can be tens of megabytes) unless `keep`
/// or LOCKSTEP_HISTORY_KEEP=1; one that fails is kept for study.
pub fn write_and_check(file: &str, header: Json, ops: Vec<Json>, keep: bool) -> (i32, String) {
    let path = out_dir().join(file);
    write_history(&path, header, ops);
    let (code, text) = check(&path);
    if code == 0 && !keep && !std::env::var("LOCKSTEP_HISTORY_KEEP").is_ok_and(|v| v == "1") {
        let _ = std::fs::remove_file(&path);
    }
    (code, text)
}

pub fn count(ops: &[Json], pred: impl Fn(&Json) -> bool) -> usize {
    ops.iter().filter(|op| pred(op)).count()
}

pub fn summary(name: &str, ops: &[Json]) -> String {
    let of = |t: &str| count(ops, |op| op["type"] == t);
    format!("{name}: {} ok, {} failed, {} unknown", of("ok"), of("fail"), of("info"))
}
