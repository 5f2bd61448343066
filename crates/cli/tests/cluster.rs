//! A cluster of real `lockstep server` processes on loopback: three nodes with k = 1 form,
//! share their schema, serve every partition through every node (forwarding calls to each
//! partition's leader), survive `kill -9` of a node without losing an acknowledged row, and
//! a node left without a majority refuses calls. Every wait is bounded; nothing asserts a
//! time.

mod common;

use std::future::Future;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{free_port_run, start_cluster};
use common::{Server, TempDir, BIN};
use lockstep_client::{Client, ClientConfig, Response};
use lockstep_core::Value;

/// Longest any step waits for the cluster to get somewhere.
const LIVENESS_LIMIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);
/// VoltDB's SERVER_UNAVAILABLE status.
const SERVER_UNAVAILABLE: i8 = -5;

fn i(v: i64) -> Value {
    Value::Int(v)
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

async fn connect(server: &Server) -> Client {
    Client::connect(&server.addr, ClientConfig::default()).await.expect("connect to a node")
}

/// Polls `f` until it gives Some, for at most `LIVENESS_LIMIT`.
async fn wait_for<T, F: Future<Output = Option<T>>>(what: &str, mut f: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + LIVENESS_LIMIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(POLL).await;
    }
}

async fn call(client: &Client, proc: &str, params: Vec<Value>) -> Response {
    client.call(proc, params).await.expect("the call got an answer")
}

async fn ok(client: &Client, proc: &str, params: Vec<Value>) -> Response {
    let r = call(client, proc, params).await;
    assert_eq!(r.status, 1, "{proc} failed: {:?}", r.status_string);
    r
}

/// The value of row `k` read through `client` (a single-partition call: forwarded to the
/// partition's leader unless this node leads it), or None if the call failed.
async fn read(client: &Client, k: i64) -> Option<Option<String>> {
    let r = call(client, "KV.select", vec![i(k)]).await;
    (r.status == 1).then(|| match r.tables[0].rows.first().map(|row| &row[1]) {
        Some(Value::Str(v)) => Some(v.to_string()),
        _ => None,
    })
}

/// `SELECT COUNT(*)` of `table` through `client` (a multi-partition read), or None if the
/// call failed.
async fn count(client: &Client, table: &str) -> Option<i64> {
    let r = call(client, "@AdHoc", vec![s(&format!("SELECT COUNT(*) FROM {table}"))]).await;
    match r.tables.first().and_then(|t| t.rows.first()).map(|row| &row[0]) {
        Some(Value::Int(n)) if r.status == 1 => Some(*n),
        _ => None,
    }
}

/// Whether the node's catalog has table KV and procedure Put.
async fn has_schema(client: &Client) -> bool {
    let tables = call(client, "@SystemCatalog", vec![s("TABLES")]).await;
    let procs = call(client, "@SystemCatalog", vec![s("PROCEDURES")]).await;
    let named = |r: &Response, name: &str| r.tables.first().is_some_and(|t| t.rows.iter().any(|row| row.iter().any(|v| *v == s(name))));
    named(&tables, "KV") && named(&procs, "Put")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_node_k1_cluster_shares_its_schema_serves_every_partition_and_survives_a_kill() {
    let dir = TempDir::new("cluster");
    let mut nodes: Vec<Option<Server>> = start_cluster(&dir.0, 3, 1).into_iter().map(Some).collect();
    let mut clients = Vec::new();
    for n in nodes.iter().flatten() {
        clients.push(connect(n).await);
    }

    // DDL sent to one node reaches every node.
    ok(
        &clients[1],
        "@AdHoc",
        vec![s("CREATE TABLE kv (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k)); PARTITION TABLE kv ON COLUMN k; \
                CREATE TABLE copy (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k)); PARTITION TABLE copy ON COLUMN k;")],
    )
    .await;
    let put = "CREATE PROCEDURE Put PARTITION ON TABLE kv COLUMN k FROM FILE 'inline.lua' SOURCE $lua$\
               local up = sql [[UPSERT INTO kv VALUES (?, ?)]] return function(k, v) return up:exec(k, v) end$lua$";
    ok(&clients[2], "@AdHoc", vec![s(put)]).await;
    for c in &clients {
        wait_for("every node has the schema", move || async move { has_schema(c).await.then_some(()) }).await;
    }
    // DDL that every node refuses is refused to its caller, with the reason.
    let again = call(&clients[0], "@AdHoc", vec![s("CREATE TABLE kv (k BIGINT NOT NULL, PRIMARY KEY (k));")]).await;
    assert_ne!(again.status, 1, "a second CREATE TABLE kv was accepted");
    assert!(again.status_string.as_deref().is_some_and(|m| m.to_ascii_lowercase().contains("kv")), "{:?}", again.status_string);

    // Rows written through every node, by the default procedure, a Lua procedure and
    // ad-hoc SQL, are read back through every node: each partition's calls are forwarded
    // to its leader wherever they arrive.
    let mut written = Vec::new();
    for k in 0..30i64 {
        let c = &clients[k as usize % 3];
        let v = format!("v{k}");
        match k % 3 {
            0 => ok(c, "KV.insert", vec![i(k), s(&v)]).await,
            1 => ok(c, "Put", vec![i(k), s(&v)]).await,
            _ => ok(c, "@AdHoc", vec![s(&format!("INSERT INTO kv VALUES ({k}, '{v}')"))]).await,
        };
        written.push((k, v));
    }
    for c in &clients {
        for (k, v) in &written {
            assert_eq!(read(c, *k).await, Some(Some(v.clone())), "row {k}");
        }
    }
    // `@Statistics CLUSTER` counts them: calls that reached a node that does not lead their
    // partition were sent on, and run by the leaders for the others; each node holds two of
    // the three partitions.
    let (mut forwarded, mut run_for_others) = (0, 0);
    for c in &clients {
        let t = &ok(c, "@Statistics", vec![s("CLUSTER"), i(0)]).await.tables[0];
        let col = |name: &str| t.columns.iter().position(|c| &*c.name == name).unwrap_or_else(|| panic!("no column {name}"));
        let row = &t.rows[0];
        assert_eq!(row[col("PARTITIONS_HELD")], i(2));
        forwarded += row[col("FORWARDED_CALLS")].as_i64().unwrap_or(0);
        run_for_others += row[col("CALLS_RUN_FOR_OTHERS")].as_i64().unwrap_or(0);
    }
    assert!(forwarded > 0 && run_for_others > 0, "forwarded {forwarded}, run for others {run_for_others}");

    // Multi-partition transactions from any node: one node coordinates, each partition's
    // leader runs its fragments, and each partition's replicas get its share.
    for c in &clients {
        assert_eq!(count(c, "kv").await, Some(30));
    }
    let copied = ok(&clients[2], "@AdHoc", vec![s("INSERT INTO copy SELECT k, v FROM kv")]).await;
    assert_eq!(copied.tables[0].rows, vec![vec![i(30)]]);
    for c in &clients {
        assert_eq!(count(c, "copy").await, Some(30));
    }

    // kill -9 node 0 (the membership group's first leader, leading a partition): the others
    // take over its partitions, keep every acknowledged row, and take new writes.
    // (Dropping a `Server` kills its process with SIGKILL.)
    drop(nodes[0].take());
    drop(clients.remove(0));
    for (n, c) in clients.iter().enumerate() {
        for (k, v) in &written {
            let k = *k;
            let got = wait_for(&format!("node {} serves row {k}", n + 1), move || async move { read(c, k).await }).await;
            assert_eq!(got, Some(v.clone()), "row {k} after the kill");
        }
    }
    for k in 30..40i64 {
        let v = format!("after-{k}");
        let c = &clients[k as usize % 2];
        wait_for("a write after the kill commits", || {
            let params = vec![i(k), s(&v)];
            async move { (call(c, "Put", params).await.status == 1).then_some(()) }
        })
        .await;
        written.push((k, v));
    }
    for c in &clients {
        for (k, v) in &written {
            assert_eq!(read(c, *k).await, Some(Some(v.clone())), "row {k}");
        }
    }
    // Node 0 coordinated multi-partition transactions: the lowest live node takes over, and
    // the copied rows (replicated as shares) are all still there.
    for c in &clients {
        let counted = wait_for("a multi-partition read after the kill", move || async move { count(c, "copy").await }).await;
        assert_eq!(counted, 30);
        assert_eq!(count(c, "kv").await, Some(40));
    }

    // Node 2 paused: node 1 hears no majority and refuses calls, clearly (first, as its
    // lease runs out, as a node not admitted now; then, as the silence outlasts the failure
    // timeout, as one cut off from the majority). Resumed, the two serve again.
    let paused = nodes[2].as_ref().map(Server::pid).unwrap().to_string();
    let _ = Command::new("kill").args(["-STOP", &paused]).status();
    let lone = &clients[0];
    let refusal = wait_for("the lone node refuses calls", move || async move {
        let r = call(lone, "@Ping", vec![]).await;
        assert!(r.status == 1 || r.status == SERVER_UNAVAILABLE, "{:?}", r.status_string);
        (r.status_string.as_deref().is_some_and(|why| why.contains("cut off from the majority"))).then_some(r)
    })
    .await;
    assert_eq!(refusal.status, SERVER_UNAVAILABLE);
    let r = call(&clients[0], "KV.select", vec![i(1)]).await;
    assert_eq!(r.status, SERVER_UNAVAILABLE, "a data call in the minority: {:?}", r.status_string);
    let _ = Command::new("kill").args(["-CONT", &paused]).status();
    for c in &clients {
        let got = wait_for("the healed pair serves again", move || async move { read(c, 1).await }).await;
        assert_eq!(got, Some("v1".into()));
    }
}

/// A multi-partition call that reaches a node other than the coordinator is sent on to the
/// coordinator. If the coordinator is paused, the call is answered once the cluster
/// declares it down (its outcome unknown: it may have run), within about a second, not
/// after the forwarding limit (30 s for a call without a timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_partition_call_forwarded_to_a_coordinator_that_goes_silent_is_answered_once_it_is_declared_down() {
    let dir = TempDir::new("cluster-mp-forward");
    let nodes = tokio::task::spawn_blocking(move || (start_cluster(&dir.0, 3, 1), dir)).await.expect("start the cluster");
    let (nodes, _dir) = nodes;
    let via = connect(&nodes[1]).await;
    ok(&via, "@AdHoc", vec![s("CREATE TABLE kv (k BIGINT NOT NULL, v VARCHAR(32), PRIMARY KEY (k)); PARTITION TABLE kv ON COLUMN k;")])
        .await;
    wait_for("a multi-partition read through node 1", || async { count(&via, "kv").await }).await;
    // Node 0 coordinates (the lowest node that leads a partition).
    let paused = nodes[0].pid().to_string();
    let _ = Command::new("kill").args(["-STOP", &paused]).status();
    let answered = tokio::time::timeout(LIVENESS_LIMIT / 2, via.call("@AdHoc", vec![s("SELECT COUNT(*) FROM kv")])).await;
    let _ = Command::new("kill").args(["-CONT", &paused]).status();
    let r = answered.expect("the forwarded call waited for the forwarding limit").expect("an answer");
    assert_ne!(r.status, 1, "a paused coordinator answered");
    assert!(r.status_string.as_deref().is_some_and(|why| why.contains("declared down")), "{:?}", r.status_string);
}

#[test]
fn flags_that_cannot_form_a_cluster_are_refused_with_the_reason() {
    let dir = TempDir::new("cluster-flags");
    let hosts = "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3";
    let refused = |extra: &[&str]| {
        let out = Command::new(BIN)
            .arg("server")
            .arg("--data")
            .arg(&dir.0)
            .args(["--listen", "127.0.0.1:0", "--http", "off"])
            .args(extra)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{extra:?} was accepted");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    assert!(refused(&["--internal", "127.0.0.1:9", "--hosts", hosts]).contains("is not in --hosts"));
    assert!(refused(&["--internal", "127.0.0.1:1", "--hosts", hosts, "--kfactor", "3"]).contains("needs at least 4 nodes"));
    assert!(refused(&["--internal", "127.0.0.1:1", "--hosts", "127.0.0.1:1,127.0.0.1:1"]).contains("twice"));
    assert!(refused(&["--hosts", hosts]).contains("--hosts needs --internal"));
    assert!(refused(&["--internal", "127.0.0.1:1", "--hosts", hosts, "--kfactor", "1", "--sites", "1"]).contains("divides by k + 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_script_starts_a_ready_cluster_and_stops_it() {
    let dir = TempDir::new("cluster-script");
    let script = common::repo_root().join("scripts/cluster.sh");
    let clients = free_port_run(2);
    let internal = free_port_run(2);
    let run = |args: &[&str]| {
        Command::new("bash")
            .arg(&script)
            .args(args)
            .current_dir(&dir.0)
            .env("LOCKSTEP_BIN", BIN)
            .env("LOCKSTEP_CLUSTER_CLIENT_PORT", clients.to_string())
            .env("LOCKSTEP_CLUSTER_INTERNAL_PORT", internal.to_string())
            .env("LOCKSTEP_CLUSTER_HTTP_PORT", "off")
            .env("LOCKSTEP_CLUSTER_WAIT_S", LIVENESS_LIMIT.as_secs().to_string())
            .env("LOCKSTEP_LOG", "error,openraft=off")
            .output()
            .expect("run scripts/cluster.sh")
    };
    let started = run(&["start", "2", "--kfactor", "1"]);
    let out = String::from_utf8_lossy(&started.stdout).to_string();
    assert!(started.status.success(), "{out}{}", String::from_utf8_lossy(&started.stderr));
    assert_eq!(out.lines().filter(|l| l.contains("ready: node")).count(), 2, "{out}");
    let pids: Vec<String> =
        (0..2).map(|i| std::fs::read_to_string(dir.0.join(format!("lockstep-cluster/node-{i}/pid"))).unwrap().trim().to_string()).collect();

    let client = Client::connect(&format!("127.0.0.1:{}", clients + 1), ClientConfig::default()).await.expect("connect to node 1");
    ok(&client, "@AdHoc", vec![s("CREATE TABLE t (a INTEGER NOT NULL, PRIMARY KEY (a)); PARTITION TABLE t ON COLUMN a;")]).await;
    ok(&client, "T.insert", vec![i(5)]).await;
    drop(client);

    assert!(run(&["stop"]).status.success());
    for pid in pids {
        let alive = Command::new("kill").args(["-0", &pid]).stderr(Stdio::null()).status().unwrap().success();
        assert!(!alive, "node process {pid} still runs after stop");
    }
}

/// Sends `calls` through `client` with up to `window` in flight (taking answers in turn as the
/// window fills) and gives the failure messages.
async fn pipelined(client: &Client, calls: impl Iterator<Item = (&'static str, Vec<Value>)>, window: usize) -> Vec<String> {
    type Answer = tokio::task::JoinHandle<Result<Response, lockstep_client::ClientError>>;
    let mut sent: std::collections::VecDeque<Answer> = std::collections::VecDeque::with_capacity(window);
    let mut refused = Vec::new();
    let mut take = |r: Response| {
        if r.status != 1 {
            refused.push(r.status_string.unwrap_or_default());
        }
    };
    for (procedure, params) in calls {
        if sent.len() == window {
            let first = sent.pop_front().expect("a call in flight");
            take(first.await.expect("the answer's task").expect("an answer"));
        }
        let call = client.start_call(procedure, params).await.expect("the call was sent");
        sent.push_back(tokio::spawn(call.wait()));
    }
    for answer in sent {
        take(answer.await.expect("the answer's task").expect("an answer"));
    }
    refused
}

/// The count `column` of `@Statistics CLUSTER` on the node `client` is connected to.
async fn cluster_count(client: &Client, column: &str) -> i64 {
    let stats = ok(client, "@Statistics", vec![s("CLUSTER"), i(0)]).await;
    let t = &stats.tables[0];
    let at = t.columns.iter().position(|c| &*c.name == column).unwrap_or_else(|| panic!("no column {column}"));
    t.rows[0][at].as_i64().unwrap_or(0)
}

/// A client's calls to one partition run in the order it sent them, also when they reach a
/// node that does not lead the partition and are forwarded: one connection to one node,
/// many calls in flight, each one numbered, and procedures that refuse a number out of
/// turn. So do its multi-partition calls, forwarded to the node that coordinates them,
/// and its schema changes.
/// (Forwarded calls were once sent and taken on separate tasks, which the runtime may
/// run in any order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_calls_run_in_order_when_forwarded() {
    const KEYS: i64 = 6;
    const CALLS_PER_KEY: i64 = 4_000;
    const MP_CALLS: i64 = 600;
    let dir = TempDir::new("cluster-order");
    let nodes = start_cluster(&dir.0, 3, 1);
    let setup = connect(&nodes[0]).await;
    let ddl = "CREATE TABLE seq (k BIGINT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (k)); PARTITION TABLE seq ON COLUMN k; \
               CREATE TABLE tick (id BIGINT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (id));";
    ok(&setup, "@AdHoc", vec![s(ddl)]).await;
    let next = "CREATE PROCEDURE NextInTurn PARTITION ON TABLE seq COLUMN k FROM FILE 'inline.lua' SOURCE $lua$\
                local get = sql [[SELECT n FROM seq WHERE k = ?]] local up = sql [[UPSERT INTO seq VALUES (?, ?)]] \
                return function(k, n) local last = get:values(k) or 0 \
                if n <= last then abort('key ' .. k .. ': number ' .. n .. ' came after ' .. last) end up:exec(k, n) return n end$lua$";
    ok(&setup, "@AdHoc", vec![s(next)]).await;
    // The replicated table's writes are multi-partition.
    let tick = "CREATE PROCEDURE TickInTurn FROM FILE 'inline.lua' SOURCE $lua$\
                local get = sql [[SELECT n FROM tick WHERE id = 0]] local up = sql [[UPSERT INTO tick VALUES (0, ?)]] \
                return function(n) local last = get:values() or 0 \
                if n <= last then abort('tick ' .. n .. ' came after ' .. last) end up:exec(n) return n end$lua$";
    ok(&setup, "@AdHoc", vec![s(tick)]).await;
    // Every node has the procedures before the calls start (DDL reaches each on its own).
    for (probe, n) in (-3..0).zip(&nodes) {
        let c = connect(n).await;
        wait_for("every node has the procedures", || {
            let c = &c;
            async move { (call(c, "NextInTurn", vec![i(probe), i(1)]).await.status == 1).then_some(()) }
        })
        .await;
        wait_for("every node has the procedures", || {
            let c = &c;
            async move {
                (call(c, "@SystemCatalog", vec![s("PROCEDURES")]).await.tables[0].rows.iter().any(|r| r[2] == s("TickInTurn")))
                    .then_some(())
            }
        })
        .await;
    }
    // One node, one connection: the keys of the partitions it does not lead are forwarded,
    // and so are the multi-partition calls (node 0 coordinates them).
    let config = ClientConfig { max_in_flight: 1_000, ..ClientConfig::default() };
    let client = Client::connect(&nodes[1].addr, config).await.expect("connect");
    let single = (1..=CALLS_PER_KEY).flat_map(|n| (0..KEYS).map(move |k| ("NextInTurn", vec![i(k), i(n)])));
    let refused = pipelined(&client, single, 900).await;
    assert!(refused.is_empty(), "{} calls ran out of turn, first: {:?}", refused.len(), refused.first());
    assert!(cluster_count(&client, "FORWARDED_CALLS").await > 0, "no call was forwarded: the test did not test forwarding");
    let multi = (1..=MP_CALLS).map(|n| ("TickInTurn", vec![i(n)]));
    // A hundred in flight: with all 600 sent at once, the last waited behind every other,
    // past its 10 s query timeout, on a busy machine.
    let refused = pipelined(&client, multi, 100).await;
    assert!(refused.is_empty(), "{} multi-partition calls ran out of turn, first: {:?}", refused.len(), refused.first());
    assert!(cluster_count(&client, "FORWARDED_MP_CALLS").await > 0, "no multi-partition call was forwarded");
    // So do its schema changes, which go through the cluster: each index needs its table.
    let ddl =
        (0..20).flat_map(|t| [format!("CREATE TABLE d{t} (k BIGINT NOT NULL, v BIGINT)"), format!("CREATE INDEX d{t}_v ON d{t} (v)")]);
    let refused = pipelined(&client, ddl.map(|sql| ("@AdHoc", vec![s(&sql)])), 900).await;
    assert!(refused.is_empty(), "{} schema changes failed, first: {:?}", refused.len(), refused.first());
}
