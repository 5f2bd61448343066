//! What a careless user or a hostile client does to a real server: a second server on the
//! same data directory or port, too many connections, frames that never finish, clients
//! that never read, floods of bad connections, memory running out, a stop while a query
//! runs. Each test fails on a server without the guard it names.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{adhoc, scalar, Server, TempDir, BIN};
use lockstep_client::{Client, ClientConfig};
use lockstep_core::Value;
use lockstep_wire::{encode_invocation, encode_login_request, HashScheme, Invocation, LoginRequest};

/// Every file under `dir` with its size: what a second server must not change.
fn files(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let len = std::fs::metadata(&path).unwrap().len();
                out.insert(path, len);
            }
        }
    }
    out
}

/// Runs `lockstep server` to its end (it must stop by itself); its status and stderr.
fn run_to_end(args: &[&str]) -> (std::process::ExitStatus, String) {
    let out =
        Command::new(BIN).arg("server").args(args).args(["--http", "off"]).stdout(Stdio::null()).output().expect("run lockstep server");
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

async fn count(client: &Client, table: &str) -> Value {
    scalar(&adhoc(client, &format!("SELECT COUNT(*) FROM {table}")).await)
}

#[tokio::test]
async fn a_second_server_on_a_live_data_directory_stops_and_changes_nothing() {
    let dir = TempDir::new("second-server");
    let first = Server::start(&dir.0, 2);
    let client = first.client().await;
    adhoc(&client, "CREATE TABLE t (k BIGINT NOT NULL PRIMARY KEY)").await;
    adhoc(&client, "PARTITION TABLE t ON COLUMN k").await;
    for k in 0..10 {
        adhoc(&client, &format!("INSERT INTO t VALUES ({k})")).await;
    }
    let before = files(&dir.0);

    let data = dir.0.to_str().unwrap();
    let (status, stderr) = run_to_end(&["--listen", "127.0.0.1:0", "--pg", "off", "--data", data, "--sites", "2"]);
    assert!(!status.success(), "the second server must not run");
    assert!(stderr.contains("is in use by another Lockstep process"), "{stderr}");
    assert!(stderr.contains(&format!("pid {}", first.pid())), "names the owner: {stderr}");
    assert_eq!(files(&dir.0), before, "the second server read or wrote the directory");

    // The first one never noticed, and everything it acknowledged is still there.
    adhoc(&client, "INSERT INTO t VALUES (10)").await;
    drop(client);
    assert!(first.stop().success());
    let again = Server::start(&dir.0, 2);
    assert_eq!(count(&again.client().await, "t").await, Value::Int(11));
}

#[tokio::test]
async fn a_server_whose_port_is_taken_does_not_touch_its_data_directory() {
    let dir = TempDir::new("busy-port");
    let first = Server::start(&dir.0, 1);
    let fresh = dir.0.join("never-created");
    let (status, stderr) = run_to_end(&["--listen", &first.addr, "--data", fresh.to_str().unwrap()]);
    assert!(!status.success());
    assert!(stderr.contains("cannot listen on"), "{stderr}");
    assert!(!fresh.exists(), "the data directory was created before the port was bound");
}

#[tokio::test]
async fn connections_over_the_limit_are_told_so_and_room_comes_back() {
    let dir = TempDir::new("max-connections");
    let server = Server::start_with(&dir.0, &["--sites", "1", "--max-connections", "2"], "127.0.0.1:0");
    let a = server.client().await;
    let b = server.client().await;
    // (Bounded: an old server let such a connection wait in its backlog for ever.)
    let third = tokio::time::timeout(Duration::from_secs(30), Client::connect(&server.addr, ClientConfig::default())).await;
    let refused = third.expect("a third connection must be answered").err().expect("a third connection must be refused");
    assert!(refused.to_string().contains("too many connections"), "{refused}");
    // Both still work, and closing one makes room for a new one.
    assert_eq!(a.call("@Ping", vec![]).await.expect("ping").status, 1);
    assert_eq!(b.call("@Ping", vec![]).await.expect("ping").status, 1);
    drop(a);
    let mut room = None;
    for _ in 0..100 {
        if let Ok(c) = Client::connect(&server.addr, ClientConfig::default()).await {
            room = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = room.expect("a closed connection frees its place");
    assert_eq!(c.call("@Ping", vec![]).await.expect("ping").status, 1);
}

/// A logged-in socket spoken to by hand.
fn raw_login(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    // SHA-256 of the empty password.
    let digest = (0..32)
        .map(|i| u8::from_str_radix(&"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut out = Vec::new();
    let login = LoginRequest { version: 1, scheme: HashScheme::Sha256, service: "database".into(), username: String::new(), digest };
    encode_login_request(&login, &mut out);
    s.write_all(&out).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    assert_eq!(body[1], 0, "login succeeded");
    s
}

/// Reads until the server closes the socket; false if it is still open after `wait`.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let end = Instant::now() + wait;
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < end {
        s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return true,
        }
    }
    false
}

/// A server whose client time limits are a second, from its config file.
fn impatient_server(dir: &TempDir) -> Server {
    let config = dir.0.join("impatient.toml");
    std::fs::write(&config, "client_timeout_s = 1\n").unwrap();
    let data = dir.0.join("data");
    Server::start_with(&data, &["--sites", "1", "--idle-timeout", "1", "--config", config.to_str().unwrap()], "127.0.0.1:0")
}

#[tokio::test]
async fn a_trickled_frame_and_a_silent_connection_are_closed() {
    let dir = TempDir::new("slow-frames");
    let server = impatient_server(&dir);
    let mut trickle = raw_login(&server.addr);
    let mut silent = raw_login(&server.addr);
    // Half a frame header, then nothing more.
    trickle.write_all(&[0, 0]).unwrap();
    assert!(closed_within(&mut trickle, Duration::from_secs(30)), "a frame that never completes must not hold the connection");
    assert!(closed_within(&mut silent, Duration::from_secs(30)), "an idle connection must be closed after --idle-timeout");
    // The server itself is fine.
    let client = server.client().await;
    assert_eq!(client.call("@Ping", vec![]).await.expect("ping").status, 1);
}

#[tokio::test]
async fn a_client_that_never_reads_its_answers_is_let_go() {
    let dir = TempDir::new("never-reads");
    let server = impatient_server(&dir);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE blob (k INTEGER NOT NULL PRIMARY KEY, v VARCHAR(60000))").await;
    let big = "x".repeat(50_000);
    for k in 0..8 {
        client.call("BLOB.insert", vec![Value::Int(k), Value::Str(big.as_str().into())]).await.expect("insert");
    }
    drop(client);
    // 400 calls of 400 KB answers each, and not a byte read back.
    let mut greedy = raw_login(&server.addr);
    let mut out = Vec::new();
    for handle in 0..400 {
        encode_invocation(&Invocation::new("@AdHoc", handle, vec![Value::Str("SELECT * FROM blob".into())]), &mut out).unwrap();
    }
    greedy.write_all(&out).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert!(closed_within(&mut greedy, Duration::from_secs(60)), "a client that does not read its answers must be let go");
    let other = server.client().await;
    assert_eq!(other.call("@Ping", vec![]).await.expect("ping").status, 1);
}

/// The sites write answers to the socket themselves until it is full, then the
/// connection's writer task takes over: a client that reads late must still get every
/// answer whole, from both sites, interleaved only between answers.
#[tokio::test]
async fn a_client_that_reads_late_gets_every_answer_whole() {
    let dir = TempDir::new("reads-late");
    let server = Server::start(&dir.0.join("data"), 2);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE blob (k INTEGER NOT NULL PRIMARY KEY, v VARCHAR(60000)); PARTITION TABLE blob ON COLUMN k").await;
    let value = |k: i64| char::from(b'a' + k as u8).to_string().repeat(40_000 + k as usize);
    for k in 0..16 {
        client.call("BLOB.insert", vec![Value::Int(k), Value::Str(value(k).as_str().into())]).await.expect("insert");
    }
    drop(client);
    // 600 lookups spread over both partitions: 24 MB of answers, far more than the
    // socket's buffers hold, sent before a byte is read.
    let mut late = raw_login(&server.addr);
    let mut out = Vec::new();
    for handle in 0..600 {
        encode_invocation(&Invocation::new("BLOB.select", handle, vec![Value::Int(handle % 16)]), &mut out).unwrap();
    }
    late.write_all(&out).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    late.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut seen = vec![false; 600];
    for _ in 0..600 {
        let mut len = [0u8; 4];
        late.read_exact(&mut len).expect("an answer's length");
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        late.read_exact(&mut body).expect("an answer's body");
        let answer = lockstep_wire::decode_response(&body).expect("a whole answer");
        assert_eq!(answer.status, 1, "{:?}", answer.status_string);
        let handle = answer.handle;
        assert!((0..600).contains(&handle) && !seen[handle as usize], "handle {handle} unknown or answered twice");
        seen[handle as usize] = true;
        let row = &answer.tables[0].rows[0];
        assert_eq!(row[1], Value::Str(value(handle % 16).as_str().into()), "answer {handle} holds another call's row");
    }
}

#[test]
fn log_lines_are_plain_text_and_bad_connections_cannot_flood_them() {
    let dir = TempDir::new("log-flood");
    let child = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "off", "--pg", "off", "--sites", "1", "--data"])
        .arg(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = Server::from_child(child, &dir.0);
    for _ in 0..100 {
        // A negative frame length: malformed from the first byte.
        let mut s = TcpStream::connect(&server.addr).unwrap();
        let _ = s.write_all(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
        let _ = closed_within(&mut s, Duration::from_secs(10));
    }
    let stderr = server.stop_and_read_stderr();
    assert!(!stderr.contains('\u{1b}'), "colour codes in a log that is not a terminal: {stderr}");
    let lines = stderr.lines().filter(|l| l.contains("closing connection")).count();
    assert!((1..=20).contains(&lines), "100 bad connections gave {lines} log lines:\n{stderr}");
}

/// Resident memory of a process, from /proc.
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches("kB").trim().parse().unwrap();
    kib * 1024
}

#[tokio::test]
async fn writes_stop_above_the_memory_limit_while_reads_and_deletes_go_on() {
    let dir = TempDir::new("memory-limit");
    let probe = Server::start(&dir.0.join("probe"), 1);
    let idle = resident_bytes(probe.pid());
    drop(probe);
    let limit_mib = (idle >> 20) + 96;
    let limit = format!("{limit_mib}m");
    let server =
        Server::start_with(&dir.0.join("data"), &["--sites", "1", "--memory-limit", &limit, "--command-log", "off"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE blob (k INTEGER NOT NULL PRIMARY KEY, v VARCHAR(1048576))").await;
    let big = "y".repeat(512 * 1024);
    let mut refused = None;
    for k in 0..1000 {
        let r = client.call("BLOB.insert", vec![Value::Int(k), Value::Str(big.as_str().into())]).await.expect("call");
        if r.status != 1 {
            refused = r.status_string;
            break;
        }
        if k % 32 == 31 {
            // The monitor samples memory a few times a second.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    let refused = refused.expect("writes past the memory limit must be refused");
    assert!(refused.contains("over its limit") && refused.contains("--memory-limit"), "{refused}");
    // Reads go on, and a DELETE is allowed: it is how memory is given back.
    assert!(matches!(count(&client, "blob").await, Value::Int(n) if n > 0));
    adhoc(&client, "DELETE FROM blob").await;
    let mut accepted = false;
    for _ in 0..600 {
        let r = client.call("BLOB.insert", vec![Value::Int(1), Value::Str("small".into())]).await.expect("call");
        if r.status == 1 {
            accepted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(accepted, "writes must be accepted again once memory is back under the limit");
}

#[tokio::test]
async fn a_stop_ends_the_process_while_a_partition_is_busy() {
    let dir = TempDir::new("busy-stop");
    let child = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "off", "--pg", "off", "--sites", "1", "--query-timeout-ms", "0", "--data"])
        .arg(&dir.0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = Server::from_child(child, &dir.0);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE t (k INTEGER NOT NULL PRIMARY KEY)").await;
    for k in 0..400 {
        client.call("T.insert", vec![Value::Int(k)]).await.expect("insert");
    }
    // Billions of rows to count, with no query timeout: the partition is busy for minutes.
    let busy = tokio::spawn(async move { client.call("@AdHoc", vec![Value::Str("SELECT COUNT(*) FROM t a, t b, t c, t d".into())]).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopping = std::thread::spawn(move || server.stop_and_read_stderr());
    let mut stopped = false;
    for _ in 0..600 {
        if stopping.is_finished() {
            stopped = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(stopped, "SIGTERM must end the process even while a partition is busy");
    let stderr = stopping.join().unwrap();
    assert!(stderr.contains("did not finish within"), "{stderr}");
    busy.abort();
}

/// Reads one whole answer off a raw socket.
fn read_response(s: &mut TcpStream) -> lockstep_wire::Response {
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    lockstep_wire::decode_response(&body).unwrap()
}

/// A replicated table of `rows` rows: four copies of it cross-joined are billions of rows.
async fn cross_join_table(client: &Client, rows: i64) {
    adhoc(client, "CREATE TABLE t (k INTEGER NOT NULL PRIMARY KEY)").await;
    for k in 0..rows {
        client.call("T.insert", vec![Value::Int(k)]).await.expect("insert");
    }
}

const ENDLESS: &str = "SELECT COUNT(*) FROM t a, t b, t c, t d";

#[tokio::test]
async fn a_query_stops_at_the_query_timeout_and_its_partition_serves_again() {
    let dir = TempDir::new("query-timeout");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--query-timeout-ms", "500"], "127.0.0.1:0");
    let client = server.client().await;
    cross_join_table(&client, 300).await;
    let r = client.call("@AdHoc", vec![Value::Str(ENDLESS.into())]).await.expect("call");
    assert_ne!(r.status, 1, "billions of rows cannot be counted in half a second");
    let msg = r.status_string.unwrap_or_default();
    assert!(msg.contains("A SQL query was terminated after") && msg.contains("exceeded the query timeout period"), "{msg}");
    // The partition it held serves at once afterwards.
    assert_eq!(count(&client, "t").await, Value::Int(300));
}

#[tokio::test]
async fn a_call_can_ask_for_a_shorter_timeout_than_the_servers() {
    let dir = TempDir::new("call-timeout");
    // The server's own limit is far away (10 minutes); the call asks for 300 ms.
    let server = Server::start_with(&dir.0, &["--sites", "1", "--query-timeout-ms", "600000"], "127.0.0.1:0");
    let client = server.client().await;
    cross_join_table(&client, 300).await;
    let mut raw = raw_login(&server.addr);
    let mut inv = Invocation::new("@AdHoc", 7, vec![Value::Str(ENDLESS.into())]);
    inv.timeout_ms = Some(300);
    let mut out = Vec::new();
    encode_invocation(&inv, &mut out).unwrap();
    raw.write_all(&out).unwrap();
    let r = read_response(&mut raw);
    assert_eq!(r.handle, 7);
    let msg = r.status_string.unwrap_or_default();
    assert!(msg.contains("exceeded the query timeout period"), "{msg}");
}

#[tokio::test]
async fn partitions_serve_single_partition_calls_while_a_multi_partition_read_finishes_its_join() {
    let dir = TempDir::new("early-release");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--query-timeout-ms", "0"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE p (k INTEGER NOT NULL PRIMARY KEY, v INTEGER NOT NULL)").await;
    adhoc(&client, "PARTITION TABLE p ON COLUMN k").await;
    for k in 0..3000 {
        client.call("P.insert", vec![Value::Int(k), Value::Int(k % 97)]).await.expect("insert");
    }
    // Both partitions hand over their rows at once; the join of 9 million pairs then runs
    // on the coordinator, which no longer needs them.
    let long = server.client().await;
    let join = tokio::spawn(async move {
        long.call("@AdHoc", vec![Value::Str("SELECT COUNT(*) FROM p a, p b WHERE a.k < b.k AND a.v = b.v + 1".into())]).await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    for k in [1, 2, 3, 4] {
        let r = client.call("P.select", vec![Value::Int(k)]).await.expect("select");
        assert_eq!(r.status, 1);
    }
    assert!(!join.is_finished(), "the join ended before the single-partition calls: the test proves nothing; make it larger");
    let joined = join.await.unwrap().expect("join");
    assert_eq!(joined.status, 1, "{:?}", joined.status_string);
}

/// `CREATE PROCEDURE` of an inline Lua source, partitioned on `table`'s column `k`.
fn lua_procedure(name: &str, table: &str, source: &str) -> String {
    format!("CREATE PROCEDURE {name} PARTITION ON TABLE {table} COLUMN k FROM FILE '{name}.lua' SOURCE $lua${source}$lua$")
}

async fn failure(client: &Client, proc: &str, params: Vec<Value>) -> String {
    let r = client.call(proc, params).await.expect("call");
    assert_ne!(r.status, 1, "{proc} must fail");
    r.status_string.unwrap_or_default()
}

#[tokio::test]
async fn procedures_cannot_keep_state_between_calls_and_replay_equals_what_was_acknowledged() {
    let dir = TempDir::new("module-state");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE c (k BIGINT NOT NULL PRIMARY KEY, n BIGINT NOT NULL)").await;
    adhoc(&client, "PARTITION TABLE c ON COLUMN k").await;
    // A counter kept in a module-level variable is refused when the module loads...
    let r = client
        .call("@AdHoc", vec![Value::Str(lua_procedure("Tally", "c", "local n = 0 return function(k) n = n + 1 return n end").into())])
        .await
        .expect("call");
    let msg = r.status_string.unwrap_or_default();
    assert!(r.status != 1 && msg.contains("assigns to 'n'"), "{msg}");
    // ...and one kept in a module-level table fails when it is written.
    let cache = "local seen = {} return function(k) seen[k] = true return 1 end";
    adhoc(&client, &lua_procedure("Remember", "c", cache)).await;
    let msg = failure(&client, "Remember", vec![Value::Int(1)]).await;
    assert!(msg.contains("of a module-level table"), "{msg}");
    // State kept where it belongs, in a table, with a loop long enough that the watchdog
    // stops the first run and the call runs again, counted: no effect happens twice.
    let bump = "local get = sql [[SELECT n FROM c WHERE k = ?]] \
        local put = sql [[UPSERT INTO c VALUES (?, ?)]] \
        return function(k) local n = (get:values(k) or 0) + 1 put:exec(k, n) \
        local x = 0 for i = 1, 3000000 do x = x + i end return n end";
    adhoc(&client, &lua_procedure("Bump", "c", bump)).await;
    for expected in 1..=12 {
        let r = common::ok(&client, "Bump", vec![Value::Int(7)]).await;
        assert_eq!(scalar(&r), Value::Int(expected), "each call adds exactly one");
    }
    let before = common::ok(&client, "@StateHash", vec![]).await.tables[0].rows.clone();
    drop(client);
    let pid = server.pid().to_string();
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    drop(server);
    let again = Server::start_with(&dir.0, &["--sites", "2"], "127.0.0.1:0");
    let client = again.client().await;
    assert_eq!(scalar(&adhoc(&client, "SELECT n FROM c WHERE k = 7").await), Value::Int(12));
    assert_eq!(common::ok(&client, "@StateHash", vec![]).await.tables[0].rows, before, "replay must rebuild the acknowledged state");
}

#[tokio::test]
async fn procedures_that_would_hang_or_misuse_a_partition_are_stopped_and_it_keeps_serving() {
    let dir = TempDir::new("bad-procedures");
    // The instruction budget must stop them, whatever the clock says: on a busy machine
    // the budget of a backtracking pattern took longer than the default 10 s query
    // timeout, which then stopped it first.
    let server = Server::start_with(&dir.0, &["--sites", "1", "--query-timeout-ms", "120000"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE v (k BIGINT NOT NULL PRIMARY KEY, a BIGINT, b BIGINT)").await;
    adhoc(&client, "PARTITION TABLE v ON COLUMN k").await;
    let finalizer = "return function(k) setmetatable({}, {__gc = function() while true do end end}) return 1 end";
    adhoc(&client, &lua_procedure("Finalize", "v", finalizer)).await;
    let msg = failure(&client, "Finalize", vec![Value::Int(1)]).await;
    assert!(msg.contains("__gc"), "{msg}");
    let pattern = "return function(k) return string.find(string.rep('a', 3000), '(.-)(.-)(.-)(.-)b') end";
    adhoc(&client, &lua_procedure("Backtrack", "v", pattern)).await;
    let msg = failure(&client, "Backtrack", vec![Value::Int(1)]).await;
    assert!(msg.contains("exceeded its instruction budget"), "{msg}");
    // VoltDB refuses a call whose parameter count does not match, and so do we.
    let store = "local put = sql [[INSERT INTO v VALUES (?, ?, ?)]] return function(k, a, b) return put:exec(k, a, b) end";
    adhoc(&client, &lua_procedure("Store", "v", store)).await;
    let msg = failure(&client, "Store", vec![Value::Int(1), Value::Int(2)]).await;
    assert!(msg.contains("PROCEDURE Store EXPECTS 3 PARAMS, BUT RECEIVED 2"), "{msg}");
    assert_eq!(count(&client, "v").await, Value::Int(0), "the refused call stored nothing");
    common::ok(&client, "Store", vec![Value::Int(1), Value::Int(2), Value::Int(3)]).await;
    assert_eq!(count(&client, "v").await, Value::Int(1));
    // What each module keeps is visible.
    let memory = common::ok(&client, "@Statistics", vec![Value::Str("PROCEDUREMEMORY".into()), Value::Int(0)]).await;
    let names: Vec<String> = memory.tables[0].rows.iter().map(|r| r[5].to_string()).collect();
    assert!(names.iter().any(|n| n.eq_ignore_ascii_case("Store")), "{names:?}");
}

#[tokio::test]
async fn one_statement_cannot_stop_the_server() {
    let dir = TempDir::new("deep-sql");
    let server = Server::start(&dir.0, 1);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE t (k INTEGER NOT NULL PRIMARY KEY)").await;
    let chain = |op: &str| format!("1{}", format!(" {op} 1").repeat(33_000));
    let statements = [
        format!("SELECT {} FROM t", chain("+")),
        format!("SELECT k FROM t WHERE {}", chain("AND")),
        format!("SELECT k FROM t WHERE k = 1{}", " OR k = 1".repeat(33_000)),
        format!("SELECT 'a'{} FROM t", " || 'a'".repeat(33_000)),
        format!("SELECT {}1{} FROM t", "(".repeat(20_000), ")".repeat(20_000)),
    ];
    for sql in &statements {
        for (proc, params) in [
            ("@AdHoc", vec![Value::Str(sql.as_str().into())]),
            ("@Explain", vec![Value::Str(sql.as_str().into())]),
            ("@AdHoc", vec![Value::Str(format!("CREATE PROCEDURE Deep AS {sql}").into())]),
            (
                "@AdHoc",
                vec![Value::Str(format!("CREATE VIEW deep (k, n) AS SELECT k, COUNT(*) FROM t WHERE {} GROUP BY k", chain("+")).into())],
            ),
        ] {
            let r = client.call(proc, params).await.expect("the server must answer, not die");
            assert_ne!(r.status, 1, "{proc} of a {}-byte statement", sql.len());
        }
    }
    assert_eq!(client.call("@Ping", vec![]).await.expect("ping").status, 1);
}

/// A Lua procedure whose loop is cheap in instructions but not in time (each append copies
/// the whole string: two million of them copy two terabytes, minutes of work) is stopped at
/// the query timeout, rolls back, and its partition serves the next call at once.
#[tokio::test]
async fn a_procedure_stops_at_the_query_timeout_and_its_partition_serves_again() {
    let dir = TempDir::new("proc-timeout");
    let server = Server::start_with(&dir.0, &["--sites", "1", "--query-timeout-ms", "1000"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE t (k INTEGER NOT NULL PRIMARY KEY)").await;
    adhoc(&client, "PARTITION TABLE t ON COLUMN k").await;
    adhoc(
        &client,
        "CREATE PROCEDURE Grow PARTITION ON TABLE t COLUMN k PARAMETER 0 FROM FILE 'grow.lua' SOURCE $lua$\
         local ins = sql [[INSERT INTO t VALUES (?)]]\n\
         return function(k, n)\n  ins:exec(k)\n  local s = ''\n  for i = 1, n do s = s .. 'x' end\n  return #s\nend$lua$",
    )
    .await;
    let r = client.call("Grow", vec![Value::Int(1), Value::Int(2_000_000)]).await.expect("call");
    assert_ne!(r.status, 1, "two terabytes cannot be copied in a second");
    let msg = r.status_string.unwrap_or_default();
    assert!(msg.starts_with("A procedure call was terminated after") && msg.contains("exceeded the query timeout period"), "{msg}");
    // Its insert rolled back, and the partition serves at once.
    assert_eq!(count(&client, "t").await, Value::Int(0));
    let r = client.call("Grow", vec![Value::Int(2), Value::Int(1000)]).await.expect("call");
    assert_eq!((r.status, scalar(&r)), (1, Value::Int(1000)), "{:?}", r.status_string);
    assert_eq!(count(&client, "t").await, Value::Int(1));
}

#[test]
fn half_sent_large_frames_hold_no_more_than_the_servers_budget() {
    let dir = TempDir::new("half-frames");
    let server = Server::start(&dir.0, 1);
    let before = resident_bytes(server.pid());
    // Twenty clients each announce a 49 MiB frame and send 20 MiB of it: 400 MiB if the
    // server read them all. Only a 256 MiB budget of large frames is read at once; the
    // others wait unread in their sockets.
    let frame_len: u32 = 49 << 20;
    let senders: Vec<_> = (0..20)
        .map(|_| {
            let addr = server.addr.clone();
            std::thread::spawn(move || {
                let mut s = raw_login(&addr);
                s.set_write_timeout(Some(Duration::from_secs(3))).unwrap();
                let _ = s.write_all(&frame_len.to_be_bytes());
                let chunk = vec![7u8; 1 << 20];
                for _ in 0..20 {
                    if s.write_all(&chunk).is_err() {
                        break;
                    }
                }
                s
            })
        })
        .collect();
    let sockets: Vec<TcpStream> = senders.into_iter().map(|t| t.join().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let grown = resident_bytes(server.pid()).saturating_sub(before);
    assert!(grown < 200 << 20, "half-sent frames grew the server by {} MiB", grown >> 20);
    let mut ping = raw_login(&server.addr);
    let mut out = Vec::new();
    encode_invocation(&Invocation::new("@Ping", 1, vec![]), &mut out).unwrap();
    ping.write_all(&out).unwrap();
    assert_eq!(read_response(&mut ping).status, 1, "the server answers others meanwhile");
    drop(sockets);
}
