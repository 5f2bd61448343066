//! End-to-end tests: the real server binary, driven over TCP by the Rust client and the shell.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{adhoc, ok, repo_root, scalar, Server, TempDir};
use lockstep_core::{HashRing, Value};

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

/// DDL for an inline Lua procedure, as the shell would send it.
fn lua_proc(header: &str, source: &str) -> String {
    format!("{header} FROM FILE 'inline.lua' SOURCE $lua${source}$lua$")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_answers_ping_and_stops_cleanly() {
    let dir = TempDir::new("ping");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    let r = ok(&client, "@Ping", vec![]).await;
    assert_eq!(r.status_string.as_deref(), Some("SUCCESS"));
    let r = client.call("NoSuchProc", vec![]).await.unwrap();
    assert_eq!(r.status, -3);
    assert_eq!(r.status_string.as_deref(), Some("Procedure NoSuchProc was not found"));
    drop(client);
    assert!(server.stop().success(), "server did not exit cleanly on SIGTERM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn voter_app_loads_from_ddl_file_and_counts_votes() {
    let dir = TempDir::new("voter");
    let server = Server::start(&dir.0, 2);
    let ddl = repo_root().join("apps/voter/ddl.sql");
    let out = server.sql(&["-f", ddl.to_str().unwrap()]);
    assert!(out.status.success(), "loading voter failed: {}", String::from_utf8_lossy(&out.stderr));

    let client = server.client().await;
    let names = "Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,Alana Bregman,Jessie Eichman";
    assert_eq!(scalar(&ok(&client, "Initialize", vec![i(6), s(names)]).await), i(6));
    // A second Initialize changes nothing and reports the existing count.
    assert_eq!(scalar(&ok(&client, "Initialize", vec![i(6), s(names)]).await), i(6));

    let vote = |phone: i64, who: i64| {
        let client = &client;
        async move { scalar(&ok(client, "Vote", vec![i(phone), i(who), i(2)]).await) }
    };
    assert_eq!(vote(6175550100, 3).await, i(0));
    assert_eq!(vote(6175550100, 3).await, i(0));
    assert_eq!(vote(6175550100, 3).await, i(2), "third vote of one phone is over the limit");
    assert_eq!(vote(2125550199, 999).await, i(1), "unknown contestant");
    assert_eq!(vote(2125550199, 1).await, i(0));
    assert_eq!(vote(9995550000, 1).await, i(0), "unknown area code still counts (state XX)");

    let count = adhoc(&client, "SELECT COUNT(*) FROM votes").await;
    assert_eq!(scalar(&count), i(4));
    let states = adhoc(&client, "SELECT state, COUNT(*) FROM votes GROUP BY state ORDER BY state").await;
    let rows: Vec<(String, i64)> = states.tables[0].rows.iter().map(|r| (r[0].to_string(), r[1].as_i64().unwrap())).collect();
    assert_eq!(rows, vec![("MA".into(), 2), ("NY".into(), 1), ("XX".into(), 1)]);

    let results = ok(&client, "Results", vec![]).await;
    let t = &results.tables[0];
    let got: Vec<(String, i64, i64)> = t.rows.iter().map(|r| (r[0].to_string(), r[1].as_i64().unwrap(), r[2].as_i64().unwrap())).collect();
    assert_eq!(got, vec![("Edwina Burnam".into(), 1, 2), ("Kelly Clauss".into(), 3, 2)]);
    assert_eq!(t.columns.iter().map(|c| c.name.as_ref()).collect::<Vec<_>>(), ["CONTESTANT_NAME", "CONTESTANT_NUMBER", "TOTAL_VOTES"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_survives_a_restart() {
    let dir = TempDir::new("restart");
    {
        let server = Server::start(&dir.0, 2);
        let client = server.client().await;
        adhoc(&client, "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(20))").await;
        adhoc(&client, "PARTITION TABLE kv ON COLUMN k").await;
        let proc = lua_proc(
            "CREATE PROCEDURE Put PARTITION ON TABLE kv COLUMN k",
            "local up = sql [[UPSERT INTO kv VALUES (?, ?)]] return function(k, v) return up:exec(k, v) end",
        );
        adhoc(&client, &proc).await;
        assert_eq!(scalar(&ok(&client, "Put", vec![i(1), s("one")]).await), i(1));
        assert!(server.stop().success());
    }
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    // Schema and procedure are back; data durability is the command log's job (not yet).
    assert_eq!(scalar(&ok(&client, "Put", vec![i(2), s("two")]).await), i(1));
    let r = adhoc(&client, "SELECT v FROM kv WHERE k = 2").await;
    assert_eq!(scalar(&r), s("two"));
    assert_eq!(scalar(&ok(&client, "KV.select", vec![i(2)]).await), i(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_procedure_leaves_no_trace_in_tables_or_views() {
    let dir = TempDir::new("rollback");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE acct (id INTEGER NOT NULL PRIMARY KEY, owner VARCHAR(10) NOT NULL, bal BIGINT NOT NULL)").await;
    adhoc(&client, "PARTITION TABLE acct ON COLUMN id").await;
    adhoc(&client, "CREATE VIEW by_owner (owner, n, total) AS SELECT owner, COUNT(*), SUM(bal) FROM acct GROUP BY owner").await;
    let proc = lua_proc(
        "CREATE PROCEDURE Open PARTITION ON TABLE acct COLUMN id",
        r#"local ins = sql [[INSERT INTO acct VALUES (?, ?, ?)]]
           return function(id, owner, bal, fail)
             ins:exec(id, owner, bal)
             if fail == 1 then abort("refused: " .. owner) end
             if fail == 2 then ins:exec(id, owner, bal) end
             return 1
           end"#,
    );
    adhoc(&client, &proc).await;
    ok(&client, "Open", vec![i(7), s("ann"), i(100), i(0)]).await;

    let r = client.call("Open", vec![i(8), s("bob"), i(50), i(1)]).await.unwrap();
    assert_eq!((r.status, r.status_string.as_deref()), (-1, Some("refused: bob")));
    let r = client.call("Open", vec![i(9), s("ann"), i(50), i(2)]).await.unwrap();
    assert_eq!(r.status, -2, "duplicate key is a graceful failure");
    let msg = r.status_string.unwrap_or_default();
    assert!(msg.contains("PK_ACCT") && msg.contains("ACCT"), "message should name the constraint: {msg}");

    let rows = adhoc(&client, "SELECT id FROM acct ORDER BY id").await;
    assert_eq!(rows.tables[0].rows, vec![vec![i(7)]]);
    let view = adhoc(&client, "SELECT owner, n, total FROM by_owner ORDER BY owner").await;
    assert_eq!(view.tables[0].rows, vec![vec![s("ann"), i(1), i(100)]]);

    let r = client.call("@AdHoc", vec![s("INSERT INTO acct VALUES (10, NULL, 1)")]).await.unwrap();
    assert_eq!(r.status, -2);
    assert!(r.status_string.unwrap_or_default().contains("OWNER"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_partition_calls_land_on_the_partition_the_client_hash_names() {
    let dir = TempDir::new("routing");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE item (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR(10))").await;
    adhoc(&client, "PARTITION TABLE item ON COLUMN id").await;
    let proc = lua_proc(
        "CREATE PROCEDURE Here DIRECTED",
        "local all = sql [[SELECT id FROM item ORDER BY id]] return function() return all:query() end",
    );
    adhoc(&client, &proc).await;
    for id in 0..40 {
        ok(&client, "ITEM.insert", vec![i(id), s("x")]).await;
    }
    let ring = HashRing::new(2);
    let per_partition = client.call_all_partitions("Here", vec![]).await.expect("call all partitions");
    assert_eq!(per_partition.len(), 2);
    let mut seen = 0;
    for (p, r) in per_partition.iter().enumerate() {
        assert_eq!(r.status, 1, "{:?}", r.status_string);
        for row in &r.tables[0].rows {
            assert_eq!(ring.partition_for(&row[0]), p as u32, "row {} on the wrong partition", row[0]);
            seen += 1;
        }
    }
    assert_eq!(seen, 40);
    // A directed procedure called without a destination is refused with advice.
    let r = client.call("Here", vec![]).await.unwrap();
    assert_eq!(r.status, -2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_partition_reads_never_see_half_a_transaction() {
    let dir = TempDir::new("consistent");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE ledger (id BIGINT NOT NULL, amount BIGINT NOT NULL)").await;
    adhoc(&client, "PARTITION TABLE ledger ON COLUMN id").await;
    // Each call writes +n then -n in two statements: the total is zero between transactions.
    let proc = lua_proc(
        "CREATE PROCEDURE Pair PARTITION ON TABLE ledger COLUMN id",
        "local ins = sql [[INSERT INTO ledger VALUES (?, ?)]] return function(id, n) ins:exec(id, n) ins:exec(id, -n) return 0 end",
    );
    adhoc(&client, &proc).await;
    let writer = {
        let client = server.client().await;
        tokio::spawn(async move {
            let mut pending = Vec::new();
            for k in 0..2000i64 {
                pending.push(client.call("Pair", vec![i(k), i(k + 1)]));
                if pending.len() == 100 {
                    for r in futures_join(std::mem::take(&mut pending)).await {
                        assert_eq!(r.unwrap().status, 1);
                    }
                }
            }
            for r in futures_join(pending).await {
                assert_eq!(r.unwrap().status, 1);
            }
        })
    };
    let mut reads = 0;
    while !writer.is_finished() || reads < 5 {
        let r = adhoc(&client, "SELECT COALESCE(SUM(amount), 0), COUNT(*) FROM ledger").await;
        assert_eq!(r.tables[0].rows[0][0], i(0), "a read saw half a transaction");
        assert_eq!(r.tables[0].rows[0][1].as_i64().unwrap() % 2, 0);
        reads += 1;
    }
    writer.await.unwrap();
    let r = adhoc(&client, "SELECT COUNT(*) FROM ledger").await;
    assert_eq!(scalar(&r), i(4000));
}

/// Awaits a batch of call futures in order.
async fn futures_join<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(fs.len());
    let handles: Vec<_> = fs.into_iter().map(Box::pin).collect();
    for h in handles {
        out.push(h.await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_frame_closes_only_that_connection() {
    let dir = TempDir::new("malformed");
    let server = Server::start(&dir.0, 1);
    let client = server.client().await;
    let mut raw = TcpStream::connect(&server.addr).unwrap();
    // A frame length far above the 50 MiB limit.
    raw.write_all(&[0x7f, 0xff, 0xff, 0xff, 1, 2, 3]).unwrap();
    let mut buf = [0u8; 16];
    raw.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let n = raw.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the server should close the connection");
    ok(&client, "@Ping", vec![]).await;
    let other = server.client().await;
    ok(&other, "@Ping", vec![]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_procedure_is_stopped_and_rolled_back() {
    let dir = TempDir::new("runaway");
    let server = Server::start(&dir.0, 1);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE t (id INTEGER NOT NULL)").await;
    let proc = lua_proc(
        "CREATE PROCEDURE Spin",
        "local ins = sql [[INSERT INTO t VALUES (1)]] return function() ins:exec() while true do end end",
    );
    adhoc(&client, &proc).await;
    let r = client.call("Spin", vec![]).await.unwrap();
    assert_ne!(r.status, 1);
    assert!(r.status_string.unwrap_or_default().contains("instruction budget"));
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM t").await), i(0));
    ok(&client, "@Ping", vec![]).await;

    // On a site, calls run timed rather than counted; one that runs past its time limit is
    // undone and runs again counted, so it still inserts once, and a runaway still fails.
    adhoc(&client, "CREATE TABLE tp (id INTEGER NOT NULL)").await;
    adhoc(&client, "PARTITION TABLE tp ON COLUMN id").await;
    let proc = lua_proc(
        "CREATE PROCEDURE Slow PARTITION ON TABLE tp COLUMN id PARAMETER 0",
        "local ins = sql [[INSERT INTO tp VALUES (?)]] \
         return function(id, n) ins:exec(id) local x = 0 for i = 1, n do x = x + 1 end return x end",
    );
    adhoc(&client, &proc).await;
    // 80 million instructions: under the budget, and longer than the time limit.
    let r = client.call("Slow", vec![i(7), i(40_000_000)]).await.unwrap();
    assert_eq!(r.status, 1, "{:?}", r.status_string);
    assert_eq!(scalar(&r), i(40_000_000));
    let r = client.call("Slow", vec![i(7), i(60_000_000)]).await.unwrap();
    assert!(r.status_string.unwrap_or_default().contains("instruction budget"));
    assert_eq!(scalar(&adhoc(&client, "SELECT COUNT(*) FROM tp").await), i(1));
}

#[test]
fn shell_prints_csv_and_fails_with_the_servers_message() {
    let dir = TempDir::new("shell");
    let server = Server::start(&dir.0, 2);
    let out = server.sql(&[
        "--format",
        "csv",
        "-c",
        "CREATE TABLE p (id INTEGER NOT NULL, name VARCHAR(20))",
        "-c",
        "INSERT INTO p VALUES (1, 'a,b'), (2, NULL)",
        "-c",
        "SELECT id, name FROM p ORDER BY id",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap().replace("\r\n", "\n");
    assert!(text.ends_with("ID,NAME\n1,\"a,b\"\n2,\n"), "unexpected CSV output:\n{text}");

    let out = server.sql(&["-c", "SELECT nope FROM p"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.to_uppercase().contains("NOPE"), "stderr should carry the server's message: {err}");

    let out = server.sql(&["-c", "exec P.insert 3 'c'"]);
    assert!(out.status.success(), "every table has an insert procedure: {}", String::from_utf8_lossy(&out.stderr));
    let out = server.sql(&["-c", "exec P.select 3"]);
    assert!(!out.status.success(), "P has no primary key, so no P.select procedure");
}

/// `lockstep sql … | head`: when the reader goes away, the shell ends quietly with
/// success, as a Unix tool does, not with a panic.
#[test]
fn the_shell_ends_quietly_when_its_reader_goes_away() {
    let dir = TempDir::new("shell-pipe");
    let server = Server::start(&dir.0, 2);
    let mut child = std::process::Command::new(common::BIN)
        .args(["sql", "--server", &server.addr, "-c", "exec @Statistics TOPO 0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the shell");
    // The reader is gone before the shell writes anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("the shell ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "the shell panicked on a closed pipe: {stderr}");
    assert!(out.status.success(), "exit {:?}: {stderr}", out.status);
}

/// `THP_enabled` of a running process, from /proc (Linux).
fn thp_enabled(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc status");
    let line = status.lines().find(|l| l.starts_with("THP_enabled:")).expect("THP_enabled line in /proc status");
    line["THP_enabled:".len()..].trim().to_string()
}

/// The server turns transparent huge pages off (their first-touch zeroing stalls a growing
/// table's transactions for milliseconds) unless MIMALLOC_ALLOW_THP asks for them.
#[test]
fn the_server_runs_without_transparent_huge_pages_unless_asked() {
    let dir = TempDir::new("thp-off");
    let server = Server::start(&dir.0, 1);
    assert_eq!(thp_enabled(server.pid()), "0");
    server.stop();

    let dir = TempDir::new("thp-on");
    let child = std::process::Command::new(common::BIN)
        .args(["server", "--sites", "1", "--listen", "127.0.0.1:0", "--http", "off", "--pg", "off", "--data"])
        .arg(&dir.0)
        .env("MIMALLOC_ALLOW_THP", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start lockstep server");
    let server = Server::from_child(child, &dir.0);
    assert_eq!(thp_enabled(server.pid()), "1");
    server.stop();
}

/// `lockstep bench` over the network reads its answers in place (`ResponseView`): every
/// workload shape (Voter's counts, TATP's rows and every-partition calls, YCSB's scans,
/// charging's four tables) must still pass its end-of-run check. The report carries the
/// server's CPU per transaction (its process read from /proc) and the load generator's.
#[test]
fn the_benchmark_passes_its_checks_over_the_network() {
    let dir = TempDir::new("bench");
    let server = Server::start(&dir.0, 2);
    let pid = server.pid().to_string();
    for (workload, scale) in
        [("voter", "10"), ("tatp", "2000"), ("charging", "500"), ("bank", "500"), ("ycsb-e", "2000"), ("ycsb-a", "2000")]
    {
        let report = dir.0.join(format!("{workload}.json"));
        let warmup = if workload == "voter" { "1" } else { "0" };
        let out = std::process::Command::new(common::BIN)
            .args(["bench", workload, "--server", &server.addr, "--duration", "1", "--window", "64", "--scale", scale])
            .args(["--warmup", warmup, "--server-pid", &pid, "--report"])
            .arg(&report)
            .output()
            .expect("run lockstep bench");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{workload}: {stdout}\n{stderr}");
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(report["check"]["passed"], true, "{workload}: {}", report["check"]);
        assert!(report["txns"].as_u64().unwrap() > 0, "{workload}: no transactions");
        let errors: u64 = report["transactions"].as_object().unwrap().values().map(|t| t["errors"].as_u64().unwrap()).sum();
        assert_eq!(errors, 0, "{workload}: {}", report["transactions"]);
        for cpu in ["server_cpu_us_per_txn", "client_cpu_us_per_txn"] {
            assert!(report[cpu].as_f64().is_some_and(|us| us > 0.0), "{workload}: {cpu} = {}", report[cpu]);
        }
        assert!(stdout.contains("server CPU "), "{workload}: {stdout}");
    }
}
