//! End-to-end tests of security: users written by `lockstep user add`, logins with SHA-256
//! and SHA-1 digests, each permission class allowed and refused, roles changed by DDL while
//! connected, roles and ALLOW lists kept across restarts, `FROM FILE` confined to the
//! procedure directory, and TLS on the client port.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{adhoc, ok, Server, TempDir, BIN};
use lockstep_client::{client_tls_config, Client, ClientConfig, ClientError, HashScheme, Response};
use lockstep_core::Value;

/// The status VoltDB gives a call the user lacks the permission for (UNEXPECTED_FAILURE).
const REFUSED: i8 = -3;

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

/// Runs `lockstep user add NAME --roles ROLES --password-stdin --config FILE`.
fn user_add(config: &Path, name: &str, roles: &str, password: &str) {
    let mut child = Command::new(BIN)
        .args(["user", "add", name, "--roles", roles, "--password-stdin", "--config"])
        .arg(config)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run lockstep user add");
    child.stdin.take().expect("stdin").write_all(format!("{password}\n").as_bytes()).expect("write password");
    let out = child.wait_with_output().expect("wait for lockstep user add");
    assert!(out.status.success(), "user add {name}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A config file with an administrator and users whose roles DDL creates later.
fn users_file(dir: &Path) -> PathBuf {
    let config = dir.join("lockstep.toml");
    std::fs::write(&config, "# written by the test\nsites = 2\n").expect("write config");
    user_add(&config, "admin", "administrator", "admin-pw");
    user_add(&config, "rita", "reader", "rita-pw");
    user_add(&config, "walt", "writer", "walt-pw");
    user_add(&config, "dora", "crud", "dora-pw");
    user_add(&config, "pete", "procs,viewer", "pete-pw");
    user_add(&config, "nina", "nothing", "nina-pw");
    config
}

fn secured(data: &Path, config: &Path, extra: &[&str]) -> Server {
    let config = config.to_str().expect("utf-8 path");
    let mut args = vec!["--security", "on", "--config", config];
    args.extend_from_slice(extra);
    Server::start_with(data, &args, "127.0.0.1:0")
}

async fn login(addr: &str, user: &str, password: &str, scheme: HashScheme) -> Result<Client, ClientError> {
    let config = ClientConfig { username: user.into(), password: password.into(), hash_scheme: scheme, ..ClientConfig::default() };
    Client::connect(addr, config).await
}

async fn as_user(server: &Server, user: &str, password: &str) -> Client {
    login(&server.addr, user, password, HashScheme::Sha256).await.unwrap_or_else(|e| panic!("login as {user}: {e}"))
}

async fn call(c: &Client, proc: &str, params: Vec<Value>) -> Response {
    c.call(proc, params).await.expect("call")
}

/// Asserts that the call was refused for `user` for lack of `permission`.
fn refused(r: Response, user: &str, permission: &str) {
    let m = r.status_string.clone().unwrap_or_default();
    assert_eq!(r.status, REFUSED, "expected a refusal, got status {}: {m}", r.status);
    assert!(m.contains(&format!("User {user}")) && m.contains(permission), "{m}");
}

fn allowed(r: Response, what: &str) {
    assert_eq!(r.status, 1, "{what}: {:?}", r.status_string);
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE kv (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(20))",
    "PARTITION TABLE kv ON COLUMN k",
    "CREATE ROLE reader WITH SQLREAD",
    "CREATE ROLE writer WITH ADHOC",
    "CREATE ROLE crud WITH DEFAULTPROC",
    "CREATE ROLE procs WITH ALLPROC",
    "CREATE ROLE viewer WITH DEFAULTPROCREAD",
    "CREATE PROCEDURE CountKv ALLOW reader AS SELECT COUNT(*) FROM kv",
    "CREATE PROCEDURE WipeKv AS DELETE FROM kv",
];

async fn load_schema(admin: &Client) {
    for stmt in SCHEMA {
        adhoc(admin, stmt).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logins_check_passwords_with_sha256_and_sha1() {
    let dir = TempDir::new("sec-login");
    let config = users_file(&dir.0);
    let server = secured(&dir.0.join("data"), &config, &[]);
    for scheme in [HashScheme::Sha256, HashScheme::Sha1] {
        let c = login(&server.addr, "admin", "admin-pw", scheme).await.expect("right password");
        ok(&c, "@Ping", vec![]).await;
        for (user, pw) in [("admin", "wrong"), ("ghost", "admin-pw"), ("Admin", "admin-pw"), ("admin", "")] {
            match login(&server.addr, user, pw, scheme).await {
                Err(ClientError::Login(m)) => assert!(m.contains("Authentication rejected"), "{m}"),
                Err(e) => panic!("{user}/{pw}: unexpected error {e}"),
                Ok(_) => panic!("{user}/{pw} ({scheme:?}) logged in"),
            }
        }
    }
    // On the wire: reply code -1 in the 6-byte failure answer, then the socket is closed.
    let mut raw = std::net::TcpStream::connect(&server.addr).expect("connect");
    let mut req = Vec::new();
    let digest = HashScheme::Sha256.hash(b"wrong");
    let login_req = lockstep_wire::LoginRequest {
        version: 1,
        scheme: HashScheme::Sha256,
        service: "database".into(),
        username: "admin".into(),
        digest,
    };
    lockstep_wire::encode_login_request(&login_req, &mut req);
    raw.write_all(&req).expect("send login");
    let mut reply = Vec::new();
    raw.read_to_end(&mut reply).expect("read until closed");
    assert_eq!(reply, vec![0, 0, 0, 2, 0, 0xff]);
    // The config file holds only digests of digests.
    let text = std::fs::read_to_string(&config).expect("read config");
    assert!(text.starts_with("# written by the test\n") && !text.contains("admin-pw"), "{text}");
    assert!(text.contains(&HashScheme::Sha256.stored_hex("admin-pw")) && text.contains(&HashScheme::Sha1.stored_hex("admin-pw")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn security_off_accepts_anyone_and_security_on_needs_an_administrator() {
    let dir = TempDir::new("sec-off");
    let server = Server::start(&dir.0.join("open"), 1);
    let c = login(&server.addr, "whoever", "whatever", HashScheme::Sha1).await.expect("security off: anyone logs in");
    adhoc(&c, "CREATE TABLE t (a INTEGER)").await;
    drop(server);
    let config = dir.0.join("plain.toml");
    user_add(&config, "u", "user", "pw");
    let out = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "off", "--pg", "off", "--security", "on", "--data"])
        .arg(dir.0.join("closed"))
        .arg("--config")
        .arg(&config)
        .output()
        .expect("run server");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no configured user has the ADMIN permission"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permission_class_is_allowed_or_refused() {
    let dir = TempDir::new("sec-perms");
    let config = users_file(&dir.0);
    let server = secured(&dir.0.join("data"), &config, &[]);
    let admin = as_user(&server, "admin", "admin-pw").await;
    load_schema(&admin).await;
    ok(&admin, "KV.insert", vec![Value::Int(1), s("one")]).await;
    let rita = as_user(&server, "rita", "rita-pw").await;
    let walt = as_user(&server, "walt", "walt-pw").await;
    let dora = as_user(&server, "dora", "dora-pw").await;
    let pete = as_user(&server, "pete", "pete-pw").await;
    let nina = as_user(&server, "nina", "nina-pw").await;

    // @AdHoc: SQLREAD reads, SQL (ADHOC) writes, ADMIN runs DDL.
    allowed(call(&rita, "@AdHoc", vec![s("SELECT COUNT(*) FROM kv")]).await, "rita reads");
    refused(call(&rita, "@AdHoc", vec![s("INSERT INTO kv VALUES (2, 'two')")]).await, "rita", "SQL permission");
    allowed(call(&walt, "@AdHoc", vec![s("INSERT INTO kv VALUES (2, 'two')")]).await, "walt writes");
    allowed(call(&walt, "@AdHoc", vec![s("SELECT v FROM kv WHERE k = 2")]).await, "SQL implies SQLREAD");
    refused(call(&walt, "@AdHoc", vec![s("CREATE TABLE x (a INTEGER)")]).await, "walt", "ADMIN");
    refused(call(&nina, "@AdHoc", vec![s("SELECT 1 FROM kv")]).await, "nina", "SQLREAD");
    // Default procedures: DEFAULTPROC, or DEFAULTPROCREAD for the read ones.
    allowed(call(&dora, "KV.insert", vec![Value::Int(3), s("three")]).await, "dora inserts");
    allowed(call(&dora, "KV.select", vec![Value::Int(3)]).await, "DEFAULTPROC implies DEFAULTPROCREAD");
    allowed(call(&walt, "KV.upsert", vec![Value::Int(4), s("four")]).await, "SQL implies DEFAULTPROC");
    allowed(call(&pete, "KV.select", vec![Value::Int(3)]).await, "pete reads by default procedure");
    refused(call(&pete, "KV.delete", vec![Value::Int(3)]).await, "pete", "DEFAULTPROC");
    refused(call(&rita, "KV.select", vec![Value::Int(3)]).await, "rita", "DEFAULTPROCREAD");
    // User procedures: ALLPROC, or a role the procedure ALLOWs.
    allowed(call(&rita, "CountKv", vec![]).await, "rita is allowed on CountKv");
    refused(call(&rita, "WipeKv", vec![]).await, "rita", "ALLPROC");
    refused(call(&dora, "CountKv", vec![]).await, "dora", "ALLPROC (or role reader)");
    allowed(call(&pete, "CountKv", vec![]).await, "ALLPROC");
    // System procedures: information for anyone, the rest for ADMIN only.
    for (proc, params) in [
        ("@Ping", vec![]),
        ("@SystemCatalog", vec![s("TABLES")]),
        ("@Statistics", vec![s("TOPO"), Value::Int(0)]),
        ("@Statistics", vec![s("LIVECLIENTS"), Value::Int(0)]),
        ("@SystemInformation", vec![s("OVERVIEW")]),
        ("@GetPartitionKeys", vec![s("INTEGER")]),
        ("@Explain", vec![s("SELECT * FROM kv")]),
        ("@Subscribe", vec![s("TOPOLOGY")]),
    ] {
        allowed(call(&nina, proc, params).await, proc);
    }
    for (proc, params) in [
        ("@Pause", vec![]),
        ("@Resume", vec![]),
        ("@SnapshotSave", vec![]),
        ("@SnapshotScan", vec![]),
        ("@SnapshotRestore", vec![s("1")]),
        ("@Quiesce", vec![]),
        ("@UpdateClasses", vec![Value::Null, Value::Null]),
        ("@StateHash", vec![]),
        ("@Promote", vec![]),
        ("@Shutdown", vec![]),
    ] {
        refused(call(&walt, proc, params).await, "walt", "ADMIN");
    }
    allowed(call(&admin, "@Pause", vec![]).await, "admin pauses");
    allowed(call(&admin, "@Resume", vec![]).await, "admin resumes");
    allowed(call(&walt, "@Ping", vec![]).await, "the server is still up after the refused @Shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_changed_by_ddl_apply_to_connected_users() {
    let dir = TempDir::new("sec-ddl");
    let config = users_file(&dir.0);
    let server = secured(&dir.0.join("data"), &config, &[]);
    let admin = as_user(&server, "admin", "admin-pw").await;
    // Rita's role does not exist yet: she logs in but may do nothing.
    let rita = as_user(&server, "rita", "rita-pw").await;
    adhoc(&admin, "CREATE TABLE t (a INTEGER)").await;
    refused(call(&rita, "@AdHoc", vec![s("SELECT COUNT(*) FROM t")]).await, "rita", "SQLREAD");
    adhoc(&admin, "CREATE ROLE reader WITH SQLREAD").await;
    allowed(call(&rita, "@AdHoc", vec![s("SELECT COUNT(*) FROM t")]).await, "role created");
    refused(call(&rita, "@AdHoc", vec![s("INSERT INTO t VALUES (1)")]).await, "rita", "SQL permission");
    adhoc(&admin, "DROP ROLE reader").await;
    adhoc(&admin, "CREATE ROLE reader WITH SQL").await;
    allowed(call(&rita, "@AdHoc", vec![s("INSERT INTO t VALUES (1)")]).await, "role recreated with SQL");
    adhoc(&admin, "DROP ROLE reader").await;
    refused(call(&rita, "@AdHoc", vec![s("SELECT COUNT(*) FROM t")]).await, "rita", "SQLREAD");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_and_allow_lists_survive_restarts() {
    for log in ["sync", "off"] {
        let dir = TempDir::new("sec-restart");
        let config = users_file(&dir.0);
        let data = dir.0.join("data");
        let server = secured(&data, &config, &["--command-log", log]);
        let admin = as_user(&server, "admin", "admin-pw").await;
        load_schema(&admin).await;
        drop(admin);
        assert!(server.stop().success());
        let server = secured(&data, &config, &["--command-log", log]);
        let rita = as_user(&server, "rita", "rita-pw").await;
        allowed(call(&rita, "CountKv", vec![]).await, "ALLOW reader kept");
        refused(call(&rita, "WipeKv", vec![]).await, "rita", "ALLPROC");
        allowed(call(&rita, "@AdHoc", vec![s("SELECT COUNT(*) FROM kv")]).await, "role reader kept");
        let dora = as_user(&server, "dora", "dora-pw").await;
        allowed(call(&dora, "KV.insert", vec![Value::Int(9), s("nine")]).await, "role crud kept");
        let admin = as_user(&server, "admin", "admin-pw").await;
        let r = call(&admin, "@AdHoc", vec![s("DROP ROLE reader")]).await;
        assert!(r.status_string.unwrap_or_default().contains("allowed on procedures CountKv"), "{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_file_reads_only_inside_the_procedure_directory() {
    let dir = TempDir::new("sec-file");
    let procs = dir.0.join("procs");
    std::fs::create_dir_all(&procs).expect("mkdir");
    std::fs::write(procs.join("Inside.lua"), "return function() return 7 end").expect("write");
    std::fs::write(dir.0.join("secret.lua"), "secret_token_123 = = =").expect("write");
    std::os::unix::fs::symlink(dir.0.join("secret.lua"), procs.join("Link.lua")).expect("symlink");
    let procs_arg = procs.to_str().expect("utf-8");
    let server = Server::start_with(&dir.0.join("data"), &["--procedures", procs_arg], "127.0.0.1:0");
    let c = server.client().await;
    adhoc(&c, "CREATE PROCEDURE Inside FROM FILE 'Inside.lua'").await;
    ok(&c, "Inside", vec![]).await;
    let secret = dir.0.join("secret.lua");
    for path in ["../secret.lua", secret.to_str().expect("utf-8"), "Link.lua", "/etc/shadow", "../../../../etc/passwd"] {
        let r = call(&c, "@AdHoc", vec![s(&format!("CREATE PROCEDURE Leak FROM FILE '{path}'"))]).await;
        let m = r.status_string.unwrap_or_default();
        assert_ne!(r.status, 1, "{path}");
        assert!(m.contains("outside the procedure directory"), "{path}: {m}");
        assert!(!m.contains("secret_token_123"), "{path}: {m}");
    }
    let r = call(&c, "@AdHoc", vec![s("CREATE PROCEDURE FROM CLASS x.y.Link")]).await;
    assert!(!r.status_string.unwrap_or_default().contains("secret_token_123"));
    assert_ne!(r.status, 1);
}

/// A self-signed certificate for 127.0.0.1 and localhost: (cert.pem, key.pem).
fn test_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()]).expect("certificate");
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, certified.cert.pem()).expect("write cert");
    std::fs::write(&key, certified.signing_key.serialize_pem()).expect("write key");
    (cert, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_clients_are_served_and_plain_ones_refused() {
    let dir = TempDir::new("sec-tls");
    let (cert, key) = test_certificate(&dir.0);
    let config = users_file(&dir.0);
    let (cert_arg, key_arg) = (cert.to_str().expect("utf-8"), key.to_str().expect("utf-8"));
    let server = secured(&dir.0.join("data"), &config, &["--tls-cert", cert_arg, "--tls-key", key_arg]);
    let tls = client_tls_config(Some(&cert)).expect("tls config");
    let with_tls = |user: &str, pw: &str| ClientConfig {
        username: user.into(),
        password: pw.into(),
        tls: Some(tls.clone()),
        ..ClientConfig::default()
    };
    // A plain client fails cleanly, and the server goes on serving.
    match login(&server.addr, "admin", "admin-pw", HashScheme::Sha256).await {
        Err(ClientError::Login(m)) => assert!(m.contains("requires TLS"), "{m}"),
        Err(e) => panic!("plain client: unexpected error {e}"),
        Ok(_) => panic!("a plain client logged in to a TLS port"),
    }
    let admin = Client::connect(&server.addr, with_tls("admin", "admin-pw")).await.expect("TLS login");
    load_schema(&admin).await;
    // Enough rows that answers span several TLS records.
    for k in 0..200 {
        ok(&admin, "KV.insert", vec![Value::Int(k), s(&format!("value {k}"))]).await;
    }
    let all = ok(&admin, "@AdHoc", vec![s("SELECT k, v FROM kv ORDER BY k")]).await;
    assert_eq!(all.tables[0].rows.len(), 200);
    match Client::connect(&server.addr, with_tls("admin", "bad")).await {
        Err(ClientError::Login(m)) => assert!(m.contains("Authentication rejected"), "{m}"),
        other => panic!("wrong password over TLS: {:?}", other.err()),
    }
    let rita = Client::connect(&server.addr, with_tls("rita", "rita-pw")).await.expect("TLS login");
    refused(call(&rita, "@Shutdown", vec![]).await, "rita", "ADMIN");
    // The shell over TLS.
    let out = Command::new(BIN)
        .args(["sql", "--server", &server.addr, "--user", "rita", "--tls-ca", cert_arg, "-c", "SELECT COUNT(*) FROM kv;"])
        .env("LOCKSTEP_PASSWORD", "rita-pw")
        .output()
        .expect("run lockstep sql");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("200"));
}

#[test]
fn user_list_and_remove_edit_the_config_file() {
    let dir = TempDir::new("sec-users");
    let config = dir.0.join("users.toml");
    user_add(&config, "ann", "administrator", "a");
    user_add(&config, "bob", "user,ops", "b");
    user_add(&config, "ann", "user", "c");
    let list = |c: &Path| {
        let out = Command::new(BIN).args(["user", "list", "--config"]).arg(c).output().expect("user list");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(list(&config), "ann\tuser\nbob\tuser,ops\n");
    let out = Command::new(BIN).args(["user", "remove", "ann", "--config"]).arg(&config).output().expect("user remove");
    assert!(out.status.success());
    assert_eq!(list(&config), "bob\tuser,ops\n");
    let out = Command::new(BIN).args(["user", "remove", "ann", "--config"]).arg(&config).output().expect("user remove");
    assert!(!out.status.success());
    let out = Command::new(BIN)
        .args(["user", "add", "x", "--roles", "user", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .output()
        .expect("user add");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--password-stdin"));
}
