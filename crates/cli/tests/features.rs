//! End-to-end tests of catalog features: streams and export files, procedure reloading,
//! `FROM CLASS` binding, Lua error locations, the configuration file, expression indexes
//! across a snapshot, a crash and the command log's replay.

mod common;

use std::time::{Duration, Instant};

use common::{adhoc, ok, scalar, Server, TempDir};
use lockstep_core::Value;

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

fn i(v: i64) -> Value {
    Value::Int(v)
}

fn lua_proc(header: &str, source: &str) -> String {
    format!("{header} FROM FILE 'inline.lua' SOURCE $lua${source}$lua$")
}

/// Reads every JSON line of the export files of `target`, waiting until `want` lines exist.
fn export_lines(data: &std::path::Path, target: &str, want: usize) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut lines = Vec::new();
        // export/<TARGET>/partition-N/<segment>.jsonl
        if let Ok(dir) = std::fs::read_dir(data.join("export").join(target)) {
            let parts: Vec<_> = dir.filter_map(|e| e.ok()).map(|e| e.path()).collect();
            let mut files: Vec<_> = parts
                .iter()
                .filter_map(|p| std::fs::read_dir(p).ok())
                .flat_map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "jsonl"))
                .collect();
            files.sort();
            for f in files {
                let text = std::fs::read_to_string(&f).unwrap_or_default();
                // A last line without its newline may still be being written: read it next time.
                let complete = text.split_inclusive('\n').filter(|l| l.ends_with('\n'));
                lines.extend(complete.map(|l| serde_json::from_str::<serde_json::Value>(l).expect("valid JSON line")));
            }
        }
        if lines.len() >= want || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_stream_rows_are_exported_and_rolled_back_ones_are_not() {
    let dir = TempDir::new("export");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(
        &client,
        "CREATE STREAM events PARTITION ON COLUMN account EXPORT TO TARGET ledger (account BIGINT NOT NULL, amount BIGINT NOT NULL, note VARCHAR(20))",
    )
    .await;
    adhoc(&client, "CREATE VIEW event_totals (account, n, total) AS SELECT account, COUNT(*), SUM(amount) FROM events GROUP BY account")
        .await;
    let proc = lua_proc(
        "CREATE PROCEDURE Spend PARTITION ON TABLE events COLUMN account",
        r#"local emit = sql [[INSERT INTO events VALUES (?, ?, ?)]]
           return function(account, amount, note)
             emit:exec(account, amount, note)
             if amount < 0 then abort("negative amount") end
             return 0
           end"#,
    );
    adhoc(&client, &proc).await;
    ok(&client, "Spend", vec![i(1), i(10), s("first")]).await;
    ok(&client, "Spend", vec![i(1), i(5), s("second")]).await;
    let r = client.call("Spend", vec![i(1), i(-3), s("refused")]).await.unwrap();
    assert_eq!(r.status, -1);
    ok(&client, "EVENTS.insert", vec![i(2), i(7), Value::Null]).await;

    let view = adhoc(&client, "SELECT account, n, total FROM event_totals ORDER BY account").await;
    assert_eq!(view.tables[0].rows, vec![vec![i(1), i(2), i(15)], vec![i(2), i(1), i(7)]]);
    let r = client.call("@AdHoc", vec![s("SELECT * FROM events")]).await.unwrap();
    assert_eq!(r.status, -2, "streams cannot be queried");

    let lines = export_lines(&server.data, "LEDGER", 3);
    assert_eq!(lines.len(), 3, "three committed rows, none from the aborted call: {lines:?}");
    let mut account1: Vec<_> = lines.iter().filter(|l| l["row"]["ACCOUNT"] == 1).collect();
    account1.sort_by_key(|l| l["seq"].as_u64());
    assert_eq!(account1.len(), 2);
    assert_eq!(account1[0]["row"]["NOTE"], "first");
    assert_eq!(account1[1]["row"]["NOTE"], "second");
    assert_eq!(account1[1]["seq"].as_u64().unwrap(), account1[0]["seq"].as_u64().unwrap() + 1);
    let account2 = lines.iter().find(|l| l["row"]["ACCOUNT"] == 2).expect("account 2 exported");
    assert_eq!(account2["row"]["NOTE"], serde_json::Value::Null);
    assert_eq!(account2["stream"], "EVENTS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_procedure_takes_effect_for_new_calls() {
    let dir = TempDir::new("replace");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, &lua_proc("CREATE PROCEDURE Answer", "return function() return 1 end")).await;
    assert_eq!(scalar(&ok(&client, "Answer", vec![]).await), i(1));
    let r = client.call("@AdHoc", vec![s(&lua_proc("CREATE PROCEDURE Answer", "return function() return 2 end"))]).await.unwrap();
    assert_eq!(r.status, -2, "CREATE without OR REPLACE must not overwrite");
    adhoc(&client, &lua_proc("CREATE OR REPLACE PROCEDURE Answer", "return function() return 42 end")).await;
    assert_eq!(scalar(&ok(&client, "Answer", vec![]).await), i(42));
    adhoc(&client, "DROP PROCEDURE Answer").await;
    assert_eq!(client.call("Answer", vec![]).await.unwrap().status, -3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_class_binds_the_lua_file_on_the_procedure_path() {
    let dir = TempDir::new("class");
    let procs = dir.0.join("procs");
    std::fs::create_dir_all(&procs).unwrap();
    std::fs::write(procs.join("Greet.lua"), "return function(name) return 'hello ' .. name end\n").unwrap();
    std::fs::write(procs.join("Broken.lua"), "return function(x)\n  local t = nil\n  return t.field\nend\n").unwrap();
    let procs_arg = procs.to_str().unwrap().to_string();
    let server = Server::start_with(&dir.0.join("data"), &["--procedures", &procs_arg], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE PROCEDURE FROM CLASS com.example.Greet").await;
    assert_eq!(scalar(&ok(&client, "Greet", vec![s("ann")]).await), s("hello ann"));
    adhoc(&client, "CREATE PROCEDURE FROM CLASS com.example.Broken").await;
    let r = client.call("Broken", vec![i(1)]).await.unwrap();
    assert_eq!(r.status, -3);
    let msg = r.status_string.unwrap_or_default();
    assert!(msg.contains("Broken") && msg.contains("Broken.lua:3"), "error should name procedure, file and line: {msg}");
    let r = client.call("@AdHoc", vec![s("CREATE PROCEDURE FROM CLASS com.example.Missing")]).await.unwrap();
    assert_eq!(r.status, -2);
    assert!(r.status_string.unwrap_or_default().contains("Missing.lua"));
    let r = client.call("@UpdateClasses", vec![Value::Bytes(vec![1, 2].into()), Value::Null]).await.unwrap();
    assert_eq!(r.status, -2);
    assert!(r.status_string.unwrap_or_default().contains("Lua"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_file_sets_sites_and_flags_override_it() {
    let dir = TempDir::new("config");
    let cfg = dir.0.join("lockstep.toml");
    std::fs::write(&cfg, "sites = 3\nlisten = \"127.0.0.1:1\"\n").unwrap();
    let cfg_arg = cfg.to_str().unwrap().to_string();
    // The flag's listen address wins over the file's.
    let server = Server::start_with(&dir.0.join("data"), &["--config", &cfg_arg], "127.0.0.1:0");
    let client = server.client().await;
    let r = ok(&client, "@Statistics", vec![s("PARTITIONCOUNT"), i(0)]).await;
    assert_eq!(scalar(&r), i(3));
    let topo = ok(&client, "@Statistics", vec![s("TOPO"), i(0)]).await;
    assert_eq!(topo.tables.len(), 2);
    assert_eq!(topo.tables[0].rows.len(), 4, "three partitions and the MP initiator");

    std::fs::write(&cfg, "sites = 2\nno_such_key = 1\n").unwrap();
    let out =
        std::process::Command::new(common::BIN).args(["server", "--config", &cfg_arg, "--data"]).arg(dir.0.join("data2")).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no_such_key"));
}

/// `values` and `exec` take a statement's rows one at a time on the site (no result table):
/// `values` gives the first row of many, `exec` counts a SELECT's rows and a write's changed
/// rows, and a statement still runs to its end, so an error in a later row fails the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_and_exec_see_what_a_whole_result_would_show() {
    let dir = TempDir::new("values-exec");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE t (k BIGINT NOT NULL, n BIGINT NOT NULL, d BIGINT, PRIMARY KEY (k, n))").await;
    adhoc(&client, "PARTITION TABLE t ON COLUMN k").await;
    for (n, d) in [(1, 4), (2, 0), (3, 5)] {
        adhoc(&client, &format!("INSERT INTO t VALUES (7, {n}, {d})")).await;
    }
    let proc = lua_proc(
        "CREATE PROCEDURE Probe PARTITION ON TABLE t COLUMN k",
        r##"local first = sql [[SELECT n, d FROM t WHERE k = ? ORDER BY n DESC]]
           local rows = sql [[SELECT n FROM t WHERE k = ?]]
           local bump = sql [[UPDATE t SET d = d + 1 WHERE k = ? AND n < ?]]
           local ratio = sql [[SELECT 20 / d FROM t WHERE k = ? ORDER BY n]]
           return function(k, mode)
             if mode == 1 then
               local n, d = first:values(k)
               return result_table({ "n", "d", "rows", "bumped", "none" },
                 { { n, d, rows:exec(k), bump:exec(k, 3), select("#", first:values(k + 1)) } })
             end
             return ratio:values(k)
           end"##,
    );
    adhoc(&client, &proc).await;
    // Row 2 divides by zero: the first row's value is not an answer.
    let r = client.call("Probe", vec![i(7), i(2)]).await.unwrap();
    assert_eq!(r.status, -2, "{:?}", r.status_string);
    assert!(r.status_string.unwrap_or_default().contains("division by zero"));
    let r = ok(&client, "Probe", vec![i(7), i(1)]).await;
    assert_eq!(r.tables[0].rows, vec![vec![i(3), i(5), i(3), i(2), i(0)]]);
    // Now every d is non-zero: the first of 20/5, 20/1, 20/5 comes back.
    let r = ok(&client, "Probe", vec![i(7), i(2)]).await;
    assert_eq!(scalar(&r), i(4));
}

/// The plan `@Explain` gives for `sql`.
async fn explain(client: &lockstep_client::Client, sql: &str) -> String {
    let r = ok(client, "@Explain", vec![s(sql)]).await;
    r.tables[0].rows[0][0].as_str().unwrap_or_default().to_string()
}

/// An expression index (and a unique one) survives a snapshot, a crash and the replay of
/// the log after the snapshot: the rows are found through it, the plan uses it, and the
/// unique one still refuses duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expression_indexes_survive_snapshot_crash_and_replay() {
    let dir = TempDir::new("exprindex");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE docs (id BIGINT NOT NULL PRIMARY KEY, body VARCHAR(200), email VARCHAR(40))").await;
    adhoc(&client, "PARTITION TABLE docs ON COLUMN id").await;
    adhoc(&client, "CREATE INDEX docs_kind ON docs (FIELD(body, 'kind'), id DESC)").await;
    adhoc(&client, "CREATE ASSUMEUNIQUE INDEX docs_email ON docs (LOWER(email))").await;
    adhoc(&client, "CREATE TABLE users (id INTEGER NOT NULL PRIMARY KEY, email VARCHAR(40))").await;
    adhoc(&client, "CREATE UNIQUE INDEX users_email ON users (LOWER(email))").await;
    adhoc(&client, "INSERT INTO users VALUES (1, 'Ann@X.org'), (2, 'bob@x.org')").await;
    let insert = |k: i64| format!("INSERT INTO docs VALUES ({k}, '{{\"kind\":\"k{}\"}}', 'User{k}@X.org')", k % 5);
    for k in 0..100 {
        adhoc(&client, &insert(k)).await;
    }
    let saved = ok(&client, "@SnapshotSave", vec![]).await;
    assert_eq!(saved.tables[0].rows[0][6], s("SUCCESS"));
    // After the snapshot: the log holds these.
    for k in 100..150 {
        adhoc(&client, &insert(k)).await;
    }
    adhoc(&client, "UPDATE docs SET body = '{\"kind\":\"moved\"}' WHERE id < 10").await;
    let count = "SELECT COUNT(*) FROM docs WHERE FIELD(body, 'kind') = 'k3'";
    let moved = "SELECT COUNT(*) FROM docs WHERE FIELD(body, 'kind') = 'moved'";
    assert_eq!(scalar(&adhoc(&client, count).await), i(28));
    assert_eq!(scalar(&adhoc(&client, moved).await), i(10));
    drop(server); // SIGKILL
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(scalar(&adhoc(&client, count).await), i(28));
    assert_eq!(scalar(&adhoc(&client, moved).await), i(10));
    let plan = explain(&client, count).await;
    assert!(plan.contains("using DOCS_KIND"), "{plan}");
    // JDBC's index metadata names an expression key by its text.
    let info = ok(&client, "@SystemCatalog", vec![s("INDEXINFO")]).await;
    let keys: Vec<String> = info.tables[0].rows.iter().filter(|r| r[5] == s("DOCS_KIND")).map(|r| r[8].to_string()).collect();
    assert_eq!(keys, vec!["FIELD(body, 'kind')".to_string(), "ID".to_string()]);
    let by_email = "SELECT id FROM docs WHERE LOWER(email) = 'user42@x.org'";
    assert!(explain(&client, by_email).await.contains("UNIQUE LOOKUP of DOCS using DOCS_EMAIL"));
    assert_eq!(scalar(&adhoc(&client, by_email).await), i(42));
    // The unique one on the replicated table still refuses a duplicate key.
    let dup = client.call("@AdHoc", vec![s("INSERT INTO users VALUES (99, 'ANN@x.org')")]).await.expect("call");
    let message = dup.status_string.unwrap_or_default();
    assert!(dup.status != 1 && message.contains("UNIQUE \"USERS_EMAIL\""), "{message}");
    adhoc(&client, "INSERT INTO users VALUES (99, 'cy@x.org')").await;
}

/// Geography values travel as wire types 26 and 27 both ways (as parameters of a default
/// procedure and in results), reach Lua as WKT text and come back from it, and survive a
/// snapshot, a crash and the replay of the log after it bit for bit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geography_travels_the_wire_lua_and_the_log() {
    use lockstep_core::geo::{parse_point, parse_polygon};
    let dir = TempDir::new("geo");
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE zones (id BIGINT NOT NULL PRIMARY KEY, at GEOGRAPHY_POINT, shape GEOGRAPHY(4096))").await;
    adhoc(&client, "PARTITION TABLE zones ON COLUMN id").await;
    let wkt = |id: i64| format!("POLYGON(({id} 0, {} 0, {} 1, {id} 1, {id} 0))", id + 1, id + 1);
    let point = |id: i64| Value::Point(parse_point(&format!("POINT({}.25 0.5)", id)).unwrap());
    let shape = |id: i64| Value::Geography(std::sync::Arc::new(parse_polygon(&wkt(id)).unwrap()));
    for id in 0..10 {
        ok(&client, "ZONES.insert", vec![i(id), point(id), shape(id)]).await;
    }
    let saved = ok(&client, "@SnapshotSave", vec![]).await;
    assert_eq!(saved.tables[0].rows[0][6], s("SUCCESS"));
    for id in 10..20 {
        ok(&client, "ZONES.insert", vec![i(id), point(id), shape(id)]).await;
    }
    ok(&client, "ZONES.insert", vec![i(99), Value::Null, Value::Null]).await;
    // A Lua procedure reads the polygon as WKT text and writes a point given as WKT.
    let body = "local get = sql [[SELECT shape FROM zones WHERE id = ?]] \
        local put = sql [[UPDATE zones SET at = ? WHERE id = ?]] \
        return function(id) local row = get:first(id) put:exec('POINT(-1.5 2.5)', id) return row.shape end";
    adhoc(&client, &lua_proc("CREATE PROCEDURE ShapeOf PARTITION ON TABLE zones COLUMN id", body)).await;
    assert_eq!(scalar(&ok(&client, "ShapeOf", vec![i(3)]).await), s("POLYGON ((3.0 0.0, 4.0 0.0, 4.0 1.0, 3.0 1.0, 3.0 0.0))"));
    let read = "SELECT id, at, shape FROM zones ORDER BY id";
    let before = adhoc(&client, read).await.tables[0].rows.clone();
    assert_eq!(before.len(), 21);
    assert_eq!(before[1], vec![i(1), point(1), shape(1)]);
    assert_eq!(before[3][1], Value::Point(parse_point("POINT(-1.5 2.5)").unwrap()));
    assert_eq!(before[20], vec![i(99), Value::Null, Value::Null]);
    let inside = "SELECT id FROM zones WHERE CONTAINS(shape, ?) ORDER BY id";
    let r = ok(&client, "@AdHoc", vec![s(inside), point(12)]).await;
    assert_eq!(r.tables[0].rows, vec![vec![i(12)]]);
    drop(server); // SIGKILL
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "sync"], "127.0.0.1:0");
    let client = server.client().await;
    assert_eq!(adhoc(&client, read).await.tables[0].rows, before);
}
