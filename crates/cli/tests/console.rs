//! The web console's server side, through a real HTTP client against the real binary: the
//! page and its files (compiled in) with their types and security headers, the live
//! figures moving with calls (tables and snapshots included), the schema view's JSON, and
//! the login its data needs with users on. The page itself runs in a real browser in
//! `compat/console` (scripts/test.sh).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Server, TempDir};
use lockstep_client::HashScheme;
use serde_json::Value as J;

/// How long the table figures (read from the sites every few seconds) may take to appear.
const TABLE_FIGURES_WAIT: Duration = Duration::from_secs(30);

fn http_server(dir: &Path, extra: &[&str]) -> (Server, String) {
    let mut args = vec!["--sites", "2", "--command-log", "off", "--http", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = Server::start_with(dir, &args, "127.0.0.1:0");
    let base = format!("http://{}", server.http.clone().expect("the ready line names the HTTP port"));
    (server, base)
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder().http_status_as_error(false).build().into()
}

/// GET: (status, content type, body).
fn get(agent: &ureq::Agent, url: &str, authorization: Option<&str>) -> (u16, String, String) {
    let mut req = agent.get(url);
    if let Some(a) = authorization {
        req = req.header("Authorization", a);
    }
    let mut r = req.call().expect("the HTTP request failed");
    let content_type = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    (r.status().as_u16(), content_type, r.body_mut().read_to_string().expect("read the body"))
}

fn json(body: &str) -> J {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

fn adhoc(agent: &ureq::Agent, base: &str, sql: &str) {
    let params = serde_json::json!([sql]).to_string();
    let mut r = agent.post(format!("{base}/api/1.0/")).send_form([("Procedure", "@AdHoc"), ("Parameters", params.as_str())]).expect("POST");
    let answer = json(&r.body_mut().read_to_string().expect("body"));
    assert_eq!(answer["status"], 1, "{sql}: {answer}");
}

#[test]
fn the_page_and_its_files_are_served_from_the_binary_with_security_headers() {
    let dir = TempDir::new("console-files");
    let (_server, base) = http_server(&dir.0, &[]);
    let agent = agent();
    let mut r = agent.get(format!("{base}/")).call().expect("GET /");
    assert_eq!(r.status().as_u16(), 200);
    let csp = r.headers().get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert!(csp.contains("script-src 'self'"), "the page forbids inline and foreign scripts: {csp}");
    assert_eq!(r.headers().get("x-frame-options").and_then(|v| v.to_str().ok()), Some("DENY"));
    let page = r.body_mut().read_to_string().expect("body");
    assert!(page.contains("<title>Lockstep console</title>"));
    for (path, kind, marker) in [
        ("/console/console.js", "text/javascript", "/console/api/live"),
        ("/console/console.css", "text/css", ".chart"),
        ("/console/vendor/chart.js/chart.umd.min.js", "text/javascript", "Chart.js v4"),
        ("/console/vendor/chart.js/LICENSE.md", "text/plain", "MIT License"),
    ] {
        assert!(page.contains(path) || path.ends_with("LICENSE.md"), "the page loads {path}");
        let (status, content_type, body) = get(&agent, &format!("{base}{path}"), None);
        assert_eq!(status, 200, "{path}");
        assert!(content_type.starts_with(kind), "{path}: {content_type}");
        assert!(body.contains(marker), "{path} holds {marker}");
    }
    assert_eq!(get(&agent, &format!("{base}/console/nope"), None).0, 404);
    let posted = agent.post(format!("{base}/")).send("x").expect("POST /");
    assert_eq!(posted.status().as_u16(), 405, "the console's paths answer GET only");
}

#[test]
fn live_figures_count_calls_by_procedure_and_report_tables_snapshots_and_queues() {
    let dir = TempDir::new("console-live");
    let (_server, base) = http_server(&dir.0, &[]);
    let agent = agent();
    adhoc(&agent, &base, "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(10))");
    adhoc(&agent, &base, "PARTITION TABLE kv ON COLUMN k");
    let live = |agent: &ureq::Agent| json(&get(agent, &format!("{base}/console/api/live"), None).2);
    let before = live(&agent);
    assert_eq!(before["partitions"], 2);
    assert_eq!(before["queues"].as_array().map(Vec::len), Some(2), "one queue length per partition: {before}");
    assert_eq!(before["command_log"]["mode"], "off");
    for k in 0..20 {
        let params = format!("[{k}, \"v{k}\"]");
        let (status, _, body) = get(&agent, &format!("{base}/api/1.0/?Procedure=KV.insert&Parameters={}", urlencode(&params)), None);
        assert_eq!((status, json(&body)["status"].clone()), (200, J::from(1)), "{body}");
    }
    let after = live(&agent);
    let insert = after["procedures"].as_array().and_then(|p| p.iter().find(|p| p["name"] == "KV.insert")).cloned();
    let insert = insert.unwrap_or_else(|| panic!("KV.insert is counted: {after}"));
    assert_eq!(insert["calls"], 20);
    assert!(insert["latency_us"].as_u64().is_some_and(|us| us > 0), "{insert}");
    let counted = |l: &J| l["latency"]["counts"].as_array().map_or(0, |c| c.iter().filter_map(J::as_u64).sum::<u64>());
    assert!(counted(&after) >= counted(&before) + 20, "the latency histogram counts the calls: {after}");
    // Rows by table come from the sites in the background: a later read has them.
    let deadline = Instant::now() + TABLE_FIGURES_WAIT;
    loop {
        let l = live(&agent);
        let kv = l["tables"]["tables"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "KV")).cloned();
        if let Some(kv) = kv.filter(|kv| kv["rows"] == 20) {
            assert!(kv["bytes"].as_i64().is_some_and(|b| b > 0), "{kv}");
            break;
        }
        assert!(Instant::now() < deadline, "the table figures never showed KV's 20 rows: {l}");
        std::thread::sleep(Duration::from_millis(500));
    }
    // A snapshot taken shows up, read from its manifest.
    assert_eq!(live(&agent)["snapshots"]["complete"], 0);
    let (status, _, body) = get(&agent, &format!("{base}/api/1.0/?Procedure=@SnapshotSave"), None);
    assert_eq!((status, json(&body)["status"].clone()), (200, J::from(1)), "{body}");
    let deadline = Instant::now() + TABLE_FIGURES_WAIT;
    loop {
        let l = live(&agent);
        if l["snapshots"]["complete"] == 1 {
            assert!(l["snapshots"]["newest"]["bytes"].as_u64().is_some_and(|b| b > 0), "{l}");
            break;
        }
        assert!(Instant::now() < deadline, "the snapshot never showed: {l}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn urlencode(s: &str) -> String {
    s.bytes().map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") }).collect()
}

#[test]
fn the_schema_view_shows_partitioning_indexes_views_and_procedures() {
    let dir = TempDir::new("console-schema");
    let (_server, base) = http_server(&dir.0, &[]);
    let agent = agent();
    for sql in [
        "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(10), g INTEGER)",
        "PARTITION TABLE kv ON COLUMN k",
        "CREATE INDEX kv_g ON kv (g)",
        "CREATE TABLE codes (c INTEGER NOT NULL PRIMARY KEY)",
        "CREATE VIEW kv_by_g (g, n) AS SELECT g, COUNT(*) FROM kv GROUP BY g",
        "CREATE PROCEDURE GetKv PARTITION ON TABLE kv COLUMN k AS SELECT v FROM kv WHERE k = ?",
    ] {
        adhoc(&agent, &base, sql);
    }
    let schema = json(&get(&agent, &format!("{base}/console/api/schema"), None).2);
    let table = |name: &str| schema["tables"].as_array().and_then(|t| t.iter().find(|t| t["name"] == name)).cloned().unwrap_or(J::Null);
    let kv = table("KV");
    assert_eq!((kv["kind"].as_str(), kv["partition_column"].as_str(), kv["replicated"].as_bool()), (Some("table"), Some("K"), Some(false)));
    assert_eq!(kv["columns"][1], serde_json::json!({"name": "V", "type": "VARCHAR(10)", "nullable": true}));
    assert_eq!(kv["indexes"][1], serde_json::json!({"name": "KV_G", "columns": ["G"], "unique": false, "primary": false}));
    assert_eq!(table("CODES")["replicated"], true);
    assert_eq!((table("KV_BY_G")["kind"].as_str(), table("KV_BY_G")["source"].as_str()), (Some("view"), Some("KV")));
    let proc = schema["procedures"].as_array().and_then(|p| p.iter().find(|p| p["name"] == "GetKv")).cloned().unwrap_or(J::Null);
    assert_eq!(proc["sql"], "SELECT v FROM kv WHERE k = ?");
    assert_eq!(proc["partitioning"], serde_json::json!({"kind": "single-partition", "table": "KV", "column": "K", "parameter": 0}));
}

#[test]
fn with_users_the_console_data_needs_the_api_login_and_the_page_does_not() {
    let dir = TempDir::new("console-security");
    let config = dir.0.join("users.toml");
    let user = |name: &str, role: &str, pw: &str| {
        format!(
            "[[users]]\nname = \"{name}\"\nroles = [\"{role}\"]\npassword_sha256 = \"{}\"\npassword_sha1 = \"{}\"\n",
            HashScheme::Sha256.stored_hex(pw),
            HashScheme::Sha1.stored_hex(pw)
        )
    };
    // A server with users needs an administrator; the console is read here by a plain user.
    std::fs::write(&config, user("admin", "administrator", "admin-pw") + &user("ops", "user", "ops-pw")).expect("write config");
    let (_server, base) = http_server(&dir.0, &["--security", "on", "--config", config.to_str().expect("path")]);
    let agent = agent();
    assert_eq!(get(&agent, &format!("{base}/"), None).0, 200, "the page holds no data and needs no login");
    // "ops:ops-pw" and "ops:wrong" in base64.
    let (good, bad) = ("Basic b3BzOm9wcy1wdw==", "Basic b3BzOndyb25n");
    for path in ["/console/api/live", "/console/api/schema"] {
        let (status, _, body) = get(&agent, &format!("{base}{path}"), None);
        assert_eq!(status, 401, "{path} without a login: {body}");
        assert!(json(&body)["error"].as_str().is_some_and(|e| e.contains("failed to authenticate")), "{body}");
        assert_eq!(get(&agent, &format!("{base}{path}"), Some(bad)).0, 401, "{path} with a wrong password");
        let (status, _, body) = get(&agent, &format!("{base}{path}"), Some(good));
        assert_eq!(status, 200, "{path} with the login: {body}");
        json(&body);
    }
}
