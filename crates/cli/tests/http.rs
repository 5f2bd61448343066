//! The HTTP port of a real server, through a real HTTP client (ureq): VoltDB's JSON API
//! compared value by value with what the wire protocol (the Rust client) answers for the
//! same calls — user procedures, ad-hoc SQL, every column type and NULL, system procedures,
//! errors, users and permissions, JSONP, GET and POST, keep-alive, the body limit — and
//! `/metrics`, parsed and seen to move. With Debian's `prometheus` installed, a real
//! Prometheus scrapes the server and its query API answers a non-zero call rate.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{adhoc, Server, TempDir, BIN};
use lockstep_client::{Client, ClientConfig, HashScheme, Response};
use lockstep_core::{DataType, Value};
use serde_json::Value as J;

/// A server with its HTTP port on a free port.
fn http_server(dir: &Path, extra: &[&str]) -> (Server, String) {
    let mut args = vec!["--sites", "2", "--command-log", "off", "--http", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = Server::start_with(dir, &args, "127.0.0.1:0");
    let base = format!("http://{}", server.http.clone().expect("the ready line names the HTTP port"));
    (server, base)
}

/// One HTTP client: a keep-alive pool, and 4xx/5xx answers read like any other.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// An answer: the HTTP status and the body.
fn read(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> (u16, String) {
    let mut r = r.expect("the HTTP request failed");
    let status = r.status().as_u16();
    (status, r.body_mut().read_to_string().expect("read the body"))
}

/// GET /api/1.0/ with these fields in the query string.
fn get(agent: &ureq::Agent, base: &str, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let mut req = agent.get(format!("{base}{path}"));
    for (k, v) in fields {
        req = req.query(*k, *v);
    }
    read(req.call())
}

/// POST with the fields form-encoded in the body.
fn post(agent: &ureq::Agent, base: &str, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
    read(agent.post(format!("{base}{path}")).send_form(fields.iter().copied()))
}

fn json(body: &str) -> J {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// A wire answer in the JSON API's v1 layout, built from the client's decoded values, so a
/// JSON answer can be compared with it whole.
fn wire_as_json(r: &Response) -> J {
    let tables: Vec<J> = r
        .tables
        .iter()
        .map(|t| {
            let schema: Vec<J> = t
                .columns
                .iter()
                .map(|c| {
                    let code = if c.ty == DataType::Boolean { DataType::TinyInt.wire_code() } else { c.ty.wire_code() };
                    serde_json::json!({"name": &*c.name, "type": code})
                })
                .collect();
            let data: Vec<J> = t.rows.iter().map(|row| J::Array(row.iter().map(cell).collect())).collect();
            serde_json::json!({"status": -128, "schema": schema, "data": data})
        })
        .collect();
    serde_json::json!({
        "status": r.status,
        "appstatus": r.app_status,
        "statusstring": r.status_string,
        "appstatusstring": r.app_status_string,
        "results": tables,
    })
}

/// A wire value as VoltDB's JSON shows it.
fn cell(v: &Value) -> J {
    match v {
        Value::Null => J::Null,
        Value::Int(i) | Value::Timestamp(i) => J::from(*i),
        Value::Bool(b) => J::from(i64::from(*b)),
        Value::Float(f) => J::from(*f),
        Value::Decimal(d) => J::from(lockstep_server::json::java_decimal(d.get())),
        Value::Str(s) => J::from(s.as_str()),
        Value::Bytes(b) => J::from(b.iter().map(|x| format!("{x:02X}")).collect::<String>()),
        Value::Array(a) => J::Array(a.iter().map(cell).collect()),
        Value::Point(_) | Value::Geography(_) => J::from(v.to_string()),
    }
}

/// Numbers compare by value (the JSON API writes 3.0 as 3, as VoltDB's does).
fn same(a: &J, b: &J) -> bool {
    match (a, b) {
        (J::Number(x), J::Number(y)) => x.as_f64() == y.as_f64() && (x.as_i64() == y.as_i64() || x.is_f64() || y.is_f64()),
        (J::Array(x), J::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q)),
        (J::Object(x), J::Object(y)) => x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w))),
        _ => a == b,
    }
}

/// Runs `procedure(params)` over the wire and over HTTP (GET and POST, parameters as the
/// JSON text given) and asserts the three answers are the same; returns the JSON answer.
async fn both(client: &Client, agent: &ureq::Agent, base: &str, procedure: &str, params: Vec<Value>, json_params: &str) -> J {
    let wire = wire_as_json(&client.call(procedure, params).await.expect("wire call"));
    let fields = [("Procedure", procedure), ("Parameters", json_params)];
    let mut answers = Vec::new();
    for (status, body) in [get(agent, base, "/api/1.0/", &fields), post(agent, base, "/api/1.0/", &fields)] {
        assert_eq!(status, 200, "{procedure} {json_params}: {body}");
        answers.push(json(&body));
    }
    for a in &answers {
        assert!(same(a, &wire), "{procedure} {json_params}:\n http {a}\n wire {wire}");
    }
    answers.remove(0)
}

const TYPES_DDL: &str = "CREATE TABLE typed (id INTEGER NOT NULL PRIMARY KEY, ti TINYINT, si SMALLINT, bi BIGINT, \
     f FLOAT, d DECIMAL, s VARCHAR(40), b VARBINARY(16), ts TIMESTAMP)";

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_answers_match_the_wire_for_every_type_procedure_and_error() {
    let dir = TempDir::new("http-api");
    let (server, base) = http_server(&dir.0, &[]);
    let client = server.client().await;
    let agent = agent();
    adhoc(&client, TYPES_DDL).await;
    adhoc(&client, "PARTITION TABLE typed ON COLUMN id").await;
    // The default insert procedure, called over HTTP with JSON strings where the columns
    // are numbers, hex for the bytes and a date for the timestamp: VoltDB's conversions.
    let (status, body) = post(
        &agent,
        &base,
        "/api/1.0/",
        &[
            ("Procedure", "TYPED.insert"),
            ("Parameters", r#"["1", 2, "3", "4", "1.5", "2.25", "text \"quoted\" é", "0AFF", "2024-01-02 03:04:05.000006"]"#),
        ],
    );
    assert_eq!((status, json(&body)["status"].clone()), (200, J::from(1)), "{body}");
    // A row of NULLs, and one with extremes, over the wire.
    adhoc(&client, "INSERT INTO typed VALUES (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)").await;
    adhoc(&client, "INSERT INTO typed VALUES (3, -127, 32767, -9223372036854775807, 0.1, 0, '', '', 0)").await;
    adhoc(&client, "INSERT INTO typed VALUES (4, 0, 0, 0, -2.5e300, 0.0000001, 'x', '00', -1)").await;

    let all =
        both(&client, &agent, &base, "@AdHoc", vec![s("SELECT * FROM typed ORDER BY id")], r#"["SELECT * FROM typed ORDER BY id"]"#).await;
    let rows = all["results"][0]["data"].as_array().expect("rows");
    assert_eq!(rows.len(), 4);
    // The forms VoltDB gives, spelled out once: decimals as Java strings, bytes as upper-case
    // hex, timestamps as microseconds.
    assert_eq!(rows[0][5], J::from("2.250000000000"));
    assert_eq!(rows[0][7], J::from("0AFF"));
    assert_eq!(rows[0][8], J::from(1_704_164_645_000_006i64));
    assert_eq!(rows[0][6], J::from("text \"quoted\" é"));
    assert!(rows[1].as_array().expect("row").iter().skip(1).all(J::is_null), "{}", rows[1]);
    assert_eq!((rows[2][5].clone(), rows[3][5].clone()), (J::from("0E-12"), J::from("1.00000E-7")));
    let types: Vec<i64> =
        all["results"][0]["schema"].as_array().expect("schema").iter().map(|c| c["type"].as_i64().expect("type")).collect();
    assert_eq!(types, [5, 3, 4, 6, 8, 22, 9, 25, 11]);

    // A Lua procedure with parameters (numbers as strings, an array), an abort with an
    // app status, a SQL procedure, a system procedure.
    let lua = "CREATE PROCEDURE Pick PARTITION ON TABLE typed COLUMN id FROM FILE 'p.lua' SOURCE $lua$\
               local q = sql [[SELECT id, s, d FROM typed WHERE id = ?]] \
               return function(id, tags) \
                 if id == 99 then abort('id 99 is refused') end \
                 set_app_status(7, 'picked') \
                 return q:query(id), #tags end $lua$";
    adhoc(&client, lua).await;
    let tags = Value::Array(vec![s("a"), s("b")].into());
    let picked = both(&client, &agent, &base, "Pick", vec![Value::Int(1), tags.clone()], r#"[1, ["a", "b"]]"#).await;
    assert_eq!((picked["appstatus"].clone(), picked["appstatusstring"].clone()), (J::from(7), J::from("picked")), "{picked}");
    let refused = both(&client, &agent, &base, "Pick", vec![Value::Int(99), tags], r#"[99, ["a","b"]]"#).await;
    assert_eq!(refused["status"], J::from(-1), "{refused}");
    adhoc(&client, "CREATE PROCEDURE CountAbove AS SELECT COUNT(*) FROM typed WHERE id > ?").await;
    both(&client, &agent, &base, "CountAbove", vec![Value::Int(1)], "[1]").await;
    both(&client, &agent, &base, "@Statistics", vec![s("PARTITIONCOUNT"), Value::Int(0)], r#"["PARTITIONCOUNT", 0]"#).await;
    both(&client, &agent, &base, "@SystemCatalog", vec![s("PRIMARYKEYS")], r#"["PRIMARYKEYS"]"#).await;
    // Errors the engine answers: the same on both.
    let unknown = both(&client, &agent, &base, "NoSuchProc", vec![], "[]").await;
    assert_eq!(unknown["status"], J::from(-3));
    both(&client, &agent, &base, "CountAbove", vec![], "[]").await;
    both(&client, &agent, &base, "CountAbove", vec![s("abc")], r#"["abc"]"#).await;
    both(&client, &agent, &base, "@AdHoc", vec![s("SELEKT 1")], r#"["SELEKT 1"]"#).await;
    both(&client, &agent, &base, "TYPED.insert", vec![Value::Int(1)], "[1]").await;

    // /api/2.0/: the same rows, as objects by column name.
    let (status, body) =
        get(&agent, &base, "/api/2.0/", &[("Procedure", "@AdHoc"), ("Parameters", r#"["SELECT id, s FROM typed WHERE id = 1"]"#)]);
    assert_eq!(status, 200);
    assert_eq!(json(&body)["results"], serde_json::json!({"0": [{"ID": 1, "S": "text \"quoted\" é"}]}));
    drop(server);
}

#[test]
fn requests_the_api_refuses_are_answered_as_voltdb_answers_them() {
    let dir = TempDir::new("http-refusals");
    let (server, base) = http_server(&dir.0, &[]);
    let agent = agent();
    let refusal = |(status, body): (u16, String), http: u16, says: &str| {
        assert_eq!(status, http, "{body}");
        let j = json(&body);
        assert_eq!(j["status"], J::from(-3), "{body}");
        assert!(j["statusstring"].as_str().is_some_and(|s| s.contains(says)), "{says:?} not in {body}");
    };
    refusal(get(&agent, &base, "/api/1.0/", &[("Parameters", "[1]")]), 400, "Procedure parameter is missing");
    for bad in ["[1", "{\"a\":1}", "[true]", "[[[1]]]"] {
        refusal(
            get(&agent, &base, "/api/1.0/", &[("Procedure", "@Ping"), ("Parameters", bad)]),
            400,
            "failed to parse invocation parameters",
        );
    }
    refusal(get(&agent, &base, "/api/1.0/", &[("Procedure", "@Ping"), ("Querytimeout", "-1")]), 400, "invalid query timeout");
    // JSONP: the answer wrapped in the callback; a name that is not one is refused.
    let (status, body) = get(&agent, &base, "/api/1.0/", &[("Procedure", "@Ping"), ("jsonp", "cb_1")]);
    assert_eq!(status, 200);
    let inner = body.strip_prefix("cb_1( ").and_then(|b| b.strip_suffix(" )")).unwrap_or_else(|| panic!("not wrapped: {body}"));
    assert_eq!(json(inner)["status"], J::from(1));
    refusal(get(&agent, &base, "/api/1.0/", &[("Procedure", "@Ping"), ("jsonp", "alert(1)")]), 400, "Invalid jsonp callback function name");
    // Bodies: empty, and over the limit, both as VoltDB answers them (HTTP 200).
    refusal(read(agent.post(format!("{base}/api/1.0/")).send("")), 200, "Received POST with no parameters");
    let big = format!("Procedure=@Ping&Parameters=[\"{}\"]", "x".repeat(lockstep_server::http::REQUEST_BODY_MAX_BYTES));
    refusal(
        read(agent.post(format!("{base}/api/1.0/")).header("Content-Type", "application/x-www-form-urlencoded").send(big.as_str())),
        200,
        "Query string too large",
    );
    // The same body sent in chunks (no length declared) is counted as it arrives.
    let mut chunked = std::io::Cursor::new(big.clone().into_bytes());
    refusal(read(agent.post(format!("{base}/api/1.0/")).send(ureq::SendBody::from_reader(&mut chunked))), 200, "Query string too large");
    // Just under the limit is taken.
    let fits = format!("Procedure=@Ping&Parameters=[\"{}\"]", "x".repeat(lockstep_server::http::REQUEST_BODY_MAX_BYTES - 100));
    let (status, body) = read(agent.post(format!("{base}/api/1.0/")).send(fits.as_str()));
    assert_eq!((status, json(&body)["status"].clone()), (200, J::from(1)), "{}", &body[..body.len().min(300)]);
    // Anything but the API, the metrics and the console is not there.
    for path in ["/api/3.0/", "/index.html", "/console/nope"] {
        assert_eq!(get(&agent, &base, path, &[]).0, 404, "{path}");
    }
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_log_in_over_http_with_the_same_passwords_and_permissions() {
    let dir = TempDir::new("http-security");
    let config = dir.0.join("users.toml");
    let user = |name: &str, role: &str, pw: &str| {
        format!(
            "[[users]]\nname = \"{name}\"\nroles = [\"{role}\"]\npassword_sha256 = \"{}\"\npassword_sha1 = \"{}\"\n",
            HashScheme::Sha256.stored_hex(pw),
            HashScheme::Sha1.stored_hex(pw)
        )
    };
    std::fs::write(&config, user("admin", "administrator", "admin-pw") + &user("rita", "reader", "rita-pw")).expect("write config");
    let (server, base) = http_server(&dir.0, &["--security", "on", "--config", config.to_str().expect("path")]);
    let admin = Client::connect(&server.addr, ClientConfig { username: "admin".into(), password: "admin-pw".into(), ..Default::default() })
        .await
        .expect("admin logs in");
    adhoc(&admin, "CREATE ROLE reader WITH SQLREAD").await;
    adhoc(&admin, "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(10))").await;
    let rita = Client::connect(&server.addr, ClientConfig { username: "rita".into(), password: "rita-pw".into(), ..Default::default() })
        .await
        .expect("rita logs in");
    let agent = agent();
    let call = |fields: &[(&str, &str)]| get(&agent, &base, "/api/1.0/", fields);
    let select = [("Procedure", "@AdHoc"), ("Parameters", r#"["SELECT COUNT(*) FROM kv"]"#)];
    // No user, a wrong password, an unknown user, a malformed hash: 401 and VoltDB's words.
    for creds in [
        vec![],
        vec![("User", "rita"), ("Password", "wrong")],
        vec![("User", "bob"), ("Password", "rita-pw")],
        vec![("User", "rita"), ("Hashedpassword", "abc")],
    ] {
        let fields: Vec<(&str, &str)> = select.iter().copied().chain(creds.iter().copied()).collect();
        let (status, body) = call(&fields);
        assert_eq!(status, 401, "{creds:?}: {body}");
        assert_eq!(json(&body)["status"], J::from(-3));
    }
    // The password, its SHA-1 or SHA-256 hex, and Basic authentication all log in.
    let sha1: String = HashScheme::Sha1.hash(b"rita-pw").iter().map(|b| format!("{b:02x}")).collect();
    let sha256: String = HashScheme::Sha256.hash(b"rita-pw").iter().map(|b| format!("{b:02X}")).collect();
    for creds in [
        [("User", "rita"), ("Password", "rita-pw")],
        [("User", "rita"), ("Hashedpassword", &sha1)],
        [("User", "rita"), ("Hashedpassword", &sha256)],
    ] {
        let fields: Vec<(&str, &str)> = select.iter().copied().chain(creds).collect();
        let (status, body) = call(&fields);
        assert_eq!((status, json(&body)["status"].clone()), (200, J::from(1)), "{body}");
    }
    let basic =
        read(agent.get(format!("{base}/api/1.0/")).query("Procedure", "@Ping").header("Authorization", "Basic cml0YTpyaXRhLXB3").call());
    assert_eq!((basic.0, json(&basic.1)["status"].clone()), (200, J::from(1)), "{}", basic.1);
    // What rita may not do over the wire she may not do over HTTP, with the same answer.
    let insert = r#"["INSERT INTO kv VALUES (1, 'a')"]"#;
    let wire = wire_as_json(&rita.call("@AdHoc", vec![s("INSERT INTO kv VALUES (1, 'a')")]).await.expect("call"));
    let (status, body) = call(&[("Procedure", "@AdHoc"), ("Parameters", insert), ("User", "rita"), ("Password", "rita-pw")]);
    assert_eq!(status, 200);
    assert_ne!(wire["status"], J::from(1), "the reader was allowed to write: {wire}");
    assert!(same(&json(&body), &wire), "http {body}\nwire {wire}");
    let shutdown = call(&[("Procedure", "@Shutdown"), ("User", "rita"), ("Password", "rita-pw")]);
    assert_ne!(json(&shutdown.1)["status"], J::from(1), "a reader stopped the server over HTTP");
    // The administrator may: the answer arrives, then the server stops.
    let stopped = call(&[("Procedure", "@Shutdown"), ("User", "admin"), ("Password", "admin-pw")]);
    assert_eq!((stopped.0, json(&stopped.1)["status"].clone()), (200, J::from(1)), "{}", stopped.1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&server.addr).is_ok() {
        assert!(Instant::now() < deadline, "the server still listens 10 s after @Shutdown over HTTP");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
}

/// The figures of a `/metrics` page by series (name and labels as written).
fn scrape(agent: &ureq::Agent, base: &str) -> HashMap<String, f64> {
    let mut r = agent.get(format!("{base}/metrics")).call().expect("scrape");
    let content_type = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    let text = r.body_mut().read_to_string().expect("read metrics");
    let mut out = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("malformed line {line:?}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("malformed value in {line:?}"));
        assert!(out.insert(series.to_string(), value).is_none(), "{series} appears twice");
    }
    // Every family is declared before its samples, with HELP and TYPE.
    for name in ["lockstep_procedure_calls_total", "lockstep_call_latency_seconds", "lockstep_partition_queue_depth"] {
        assert!(text.contains(&format!("# TYPE {name} ")), "{name} has no TYPE line");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_calls_and_many_requests_share_one_connection() {
    let dir = TempDir::new("http-metrics");
    let (server, base) = http_server(&dir.0, &[]);
    let client = server.client().await;
    adhoc(&client, "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(10))").await;
    adhoc(&client, "PARTITION TABLE kv ON COLUMN k").await;
    let agent = agent();
    let before = scrape(&agent, &base);
    const CALLS: i64 = 300;
    for k in 0..CALLS {
        let params = format!("[{k}, \"v{k}\"]");
        let (status, body) = get(&agent, &base, "/api/1.0/", &[("Procedure", "KV.insert"), ("Parameters", &params)]);
        assert_eq!((status, json(&body)["status"].clone()), (200, J::from(1)), "{body}");
    }
    // An abort (a duplicate key) and a call over the wire count as well.
    let dup = get(&agent, &base, "/api/1.0/", &[("Procedure", "KV.insert"), ("Parameters", "[0, \"again\"]")]);
    assert_eq!(json(&dup.1)["status"], J::from(-2), "{}", dup.1);
    lockstep_client::Client::call(&client, "KV.insert", vec![Value::Int(CALLS), s("wire")]).await.expect("wire insert");
    // A system procedure the front end answers itself counts as well.
    let stats = get(&agent, &base, "/api/1.0/", &[("Procedure", "@Statistics"), ("Parameters", r#"["LIVECLIENTS", 0]"#)]);
    assert_eq!(json(&stats.1)["status"], J::from(1), "{}", stats.1);
    let after = scrape(&agent, &base);
    let delta = |series: &str| after.get(series).copied().unwrap_or(0.0) - before.get(series).copied().unwrap_or(0.0);
    assert_eq!(delta("lockstep_procedure_calls_total{procedure=\"KV.insert\"}"), (CALLS + 2) as f64);
    assert_eq!(delta("lockstep_procedure_aborts_total{procedure=\"KV.insert\"}"), 1.0);
    assert_eq!(delta("lockstep_procedure_calls_total{procedure=\"@Statistics\"}"), 1.0);
    assert_eq!(delta("lockstep_call_latency_seconds_count"), (CALLS + 2) as f64);
    assert_eq!(delta("lockstep_call_latency_seconds_bucket{le=\"+Inf\"}"), (CALLS + 2) as f64);
    assert!(delta("lockstep_call_latency_seconds_sum") > 0.0);
    assert_eq!(after.get("lockstep_table_rows{table=\"KV\"}").copied(), Some((CALLS + 1) as f64));
    assert!(after.get("lockstep_table_memory_bytes{table=\"KV\"}").is_some_and(|b| *b > 0.0), "KV takes no memory");
    assert_eq!(after.get("lockstep_connections_open").copied(), Some(1.0), "the wire client is connected");
    assert!(after.contains_key("lockstep_partition_queue_depth{partition=\"1\"}"));
    // The inserts ran on the partitions' threads, and the process used CPU doing it.
    let busy: f64 = (0..2).map(|p| delta(&format!("lockstep_partition_busy_seconds_total{{partition=\"{p}\"}}"))).sum();
    assert!(busy > 0.0, "no partition counted busy time for {CALLS} inserts");
    assert!(delta("process_cpu_seconds_total") >= 0.0 && after.get("process_cpu_seconds_total").is_some_and(|s| *s > 0.0));
    assert!(after.get("lockstep_memory_resident_bytes").is_some_and(|b| *b > 0.0));
    // Keep-alive: 300 requests and two scrapes, on the agent's one connection.
    assert!(delta("lockstep_http_requests_total") >= (CALLS + 2) as f64);
    assert!(
        delta("lockstep_http_connections_total") <= 1.0,
        "requests did not share a connection: {}",
        delta("lockstep_http_connections_total")
    );
    drop(server);
}

#[test]
fn an_http_port_in_use_stops_the_server_with_the_flag_named() {
    let dir = TempDir::new("http-busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("address").to_string();
    let fresh = dir.0.join("never-created");
    let out = std::process::Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", &addr, "--data"])
        .arg(&fresh)
        .output()
        .expect("run lockstep server");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("cannot listen on {addr} for the HTTP port (--http)")), "{stderr}");
    assert!(stderr.contains("--http off"), "{stderr}");
    assert!(!fresh.exists(), "the data directory was created before the ports were bound");
}

/// A real Prometheus (Debian's package; skipped where it is not installed) scrapes the
/// server every second, and its query API answers a non-zero rate of calls.
#[test]
fn prometheus_scrapes_the_server_and_sees_the_call_rate() {
    let Some(prometheus) = which("prometheus") else {
        eprintln!("prometheus is not installed: skipped (scripts/test.sh installs it)");
        return;
    };
    let dir = TempDir::new("http-prometheus");
    let (server, base) = http_server(&dir.0, &[]);
    let target = server.http.clone().expect("HTTP port");
    let config = dir.0.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: lockstep\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .expect("write the Prometheus config");
    let web = free_addr();
    let mut child = std::process::Command::new(prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.0.join("tsdb").display()))
        .arg(format!("--web.listen-address={web}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start prometheus");
    let agent = agent();
    let deadline = Instant::now() + Duration::from_secs(60);
    let query = "sum(rate(lockstep_procedure_calls_total[10s]))";
    let mut last = String::new();
    let mut k = 0;
    let rate = loop {
        assert!(Instant::now() < deadline, "no non-zero rate from Prometheus within 60 s; last answer: {last}");
        // Keep calls coming so the rate has something to measure.
        for _ in 0..50 {
            let _ = get(&agent, &base, "/api/1.0/", &[("Procedure", "@Ping")]);
            k += 1;
        }
        std::thread::sleep(Duration::from_millis(500));
        let Ok(r) = agent.get(format!("http://{web}/api/v1/query")).query("query", query).call() else { continue };
        let (_, body) = read(Ok(r));
        last = body.clone();
        let Ok(j) = serde_json::from_str::<J>(&body) else { continue };
        let value = j["data"]["result"][0]["value"][1].as_str().and_then(|v| v.parse::<f64>().ok());
        if let Some(v) = value.filter(|v| *v > 0.0) {
            break v;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(rate > 0.0 && rate.is_finite(), "rate {rate} after {k} calls");
    drop(server);
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe");
    l.local_addr().expect("probe address").to_string()
}
