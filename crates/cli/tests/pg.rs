//! The PostgreSQL port (`--pg`) of a real `lockstep server`, driven by a real PostgreSQL
//! driver (tokio-postgres), by the protocol's text formats spoken directly, and by `psql`
//! when it is installed: simple and extended queries, every Lockstep type both ways, NULLs,
//! SQLSTATEs, procedures, `SET`/`SHOW` and `BEGIN` blocks.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::cluster::free_addrs;
use common::{Server, TempDir};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

/// Longest a raw-protocol read waits for the server.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
CREATE TABLE t (
  id INTEGER NOT NULL PRIMARY KEY, ti TINYINT, si SMALLINT, bi BIGINT, f FLOAT, d DECIMAL,
  v VARCHAR(40), b VARBINARY(16), ts TIMESTAMP, ok BOOLEAN
);
PARTITION TABLE t ON COLUMN id;
CREATE PROCEDURE NameOf PARTITION ON TABLE t COLUMN id AS SELECT v FROM t WHERE id = ?;
";

/// A server with the PostgreSQL port on a free address; that address.
fn start(dir: &TempDir) -> (Server, String) {
    let pg = free_addrs(1).remove(0);
    let server = Server::start_with(&dir.0, &["--sites", "2", "--command-log", "off", "--pg", &pg], "127.0.0.1:0");
    (server, pg)
}

async fn connect(pg: &str) -> Client {
    let (host, port) = pg.rsplit_once(':').expect("host:port");
    let config = format!("host={host} port={port} user=tester dbname=lockstep connect_timeout=10");
    let (client, connection) = tokio_postgres::connect(&config, NoTls).await.expect("connect to the PostgreSQL port");
    tokio::spawn(connection);
    client
}

/// The rows of a simple query, each as its text values.
async fn simple_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    let messages = client.simple_query(sql).await.expect(sql);
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
            _ => None,
        })
        .collect()
}

fn sqlstate(e: &tokio_postgres::Error) -> SqlState {
    e.code().cloned().unwrap_or_else(|| panic!("no SQLSTATE in {e}"))
}

/// A NUMERIC read in binary, decoded here independently of the server's encoder into the
/// text PostgreSQL would print.
struct Numeric(String);

impl<'a> FromSql<'a> for Numeric {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let word = |i: usize| i16::from_be_bytes([raw[2 * i], raw[2 * i + 1]]);
        let (ndigits, weight, sign, dscale) = (word(0) as usize, word(1) as i32, word(2) as u16, word(3) as usize);
        let digits: Vec<i16> = (0..ndigits).map(|i| word(4 + i)).collect();
        let group = |k: i32| if k >= 0 && (k as usize) < digits.len() { digits[k as usize] } else { 0 };
        let mut int = String::new();
        for k in 0..=weight.max(0) {
            let g = group(k - (weight.max(0) - weight));
            int.push_str(&if int.is_empty() { g.to_string() } else { format!("{g:04}") });
        }
        let mut frac = String::new();
        let mut k = weight + 1;
        while frac.len() < dscale {
            frac.push_str(&format!("{:04}", group(k)));
            k += 1;
        }
        frac.truncate(dscale);
        Ok(Numeric(format!("{}{int}.{frac}", if sign == 0x4000 { "-" } else { "" })))
    }
    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_type_round_trips_through_a_real_driver_in_binary_and_in_text() {
    let dir = TempDir::new("pg-types");
    let (_server, pg) = start(&dir);
    let client = connect(&pg).await;
    client.batch_execute(SCHEMA).await.expect("schema");
    // Binary parameters of every type, through a named prepared statement used twice.
    let insert = client.prepare("INSERT INTO t VALUES ($1, $2, $3, $4, $5, 12345.678, $6, $7, $8, $9)").await.expect("prepare");
    assert_eq!(
        insert.params(),
        [Type::INT4, Type::INT2, Type::INT2, Type::INT8, Type::FLOAT8, Type::VARCHAR, Type::BYTEA, Type::TIMESTAMP, Type::BOOL]
    );
    let ts = SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
    let n = client
        .execute(&insert, &[&1i32, &-7i16, &300i16, &(1i64 << 40), &-0.25f64, &"héllo", &vec![0u8, 0xff, 0x10], &ts, &true])
        .await
        .expect("insert row 1");
    assert_eq!(n, 1);
    let nulls: [&(dyn tokio_postgres::types::ToSql + Sync); 9] = [
        &2i32,
        &None::<i16>,
        &None::<i16>,
        &None::<i64>,
        &None::<f64>,
        &None::<&str>,
        &None::<Vec<u8>>,
        &None::<SystemTime>,
        &None::<bool>,
    ];
    client.execute(&insert, &nulls).await.expect("insert row 2 with NULLs");
    // Binary results of every type.
    let rows = client.query("SELECT id, ti, si, bi, f, d, v, b, ts, ok FROM t WHERE id = $1", &[&1i32]).await.expect("select");
    let r = &rows[0];
    assert_eq!((r.get::<_, i32>(0), r.get::<_, i16>(1), r.get::<_, i16>(2), r.get::<_, i64>(3)), (1, -7, 300, 1 << 40));
    assert_eq!(r.get::<_, f64>(4), -0.25);
    assert_eq!(r.get::<_, Numeric>(5).0, "12345.678000000000");
    assert_eq!(r.get::<_, String>(6), "héllo");
    assert_eq!(r.get::<_, Vec<u8>>(7), [0, 0xff, 0x10]);
    assert_eq!(r.get::<_, SystemTime>(8), ts);
    assert!(r.get::<_, bool>(9));
    let r = &client.query("SELECT id, ti, si, bi, f, d, v, b, ts, ok FROM t WHERE id = 2", &[]).await.expect("select NULLs")[0];
    assert_eq!((r.get::<_, Option<i16>>(1), r.get::<_, Option<i64>>(3), r.get::<_, Option<f64>>(4)), (None, None, None));
    assert_eq!((r.get::<_, Option<String>>(6), r.get::<_, Option<Vec<u8>>>(7)), (None, None));
    assert_eq!((r.get::<_, Option<SystemTime>>(8), r.get::<_, Option<bool>>(9)), (None, None));
    // The same values in text, through the simple protocol.
    let text = simple_rows(&client, "SELECT id, ti, si, bi, f, d, v, b, ts, ok FROM t ORDER BY id").await;
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        text[0],
        [
            s("1"),
            s("-7"),
            s("300"),
            s("1099511627776"),
            s("-0.25"),
            s("12345.678000000000"),
            s("héllo"),
            s("\\x00ff10"),
            s("2023-11-14 22:13:20.123456"),
            s("t")
        ]
    );
    // The DECIMAL is a literal of the statement, the rest parameters.
    assert_eq!(text[1], [s("2"), None, None, None, None, s("12345.678000000000"), None, None, None, None]);
    let r = &client.query("SELECT d FROM t WHERE id = 2 AND v IS NULL", &[]).await.expect("select")[0];
    assert_eq!(r.get::<_, Option<Numeric>>(0).map(|n| n.0).as_deref(), Some("12345.678000000000"));
    client.execute("UPDATE t SET d = NULL, v = NULL WHERE id = $1", &[&2i32]).await.expect("update to NULL");
    let r = &client.query("SELECT d FROM t WHERE id = 2", &[]).await.expect("select")[0];
    assert_eq!(r.get::<_, Option<Numeric>>(0).map(|n| n.0), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_parameters_and_results_of_the_extended_protocol() {
    let dir = TempDir::new("pg-text");
    let (_server, pg) = start(&dir);
    connect(&pg).await.batch_execute(SCHEMA).await.expect("schema");
    let mut raw = Raw::connect(&pg);
    let params: [Option<&str>; 10] = [
        Some("5"),
        Some("-3"),
        Some("12"),
        Some("-9000000000"),
        Some("1.5"),
        Some("-0.5"),
        Some("it's"),
        Some("\\x0a0b"),
        Some("2024-02-29 12:00:00.5"),
        Some("false"),
    ];
    let (tag, rows) = raw.extended("INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)", &params);
    assert_eq!((tag.as_str(), rows.len()), ("INSERT 0 1", 0));
    let (tag, rows) = raw.extended("SELECT id, ti, si, bi, f, d, v, b, ts, ok FROM t WHERE id = $1", &[Some("5")]);
    assert_eq!(tag, "SELECT 1");
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        rows[0],
        [
            s("5"),
            s("-3"),
            s("12"),
            s("-9000000000"),
            s("1.5"),
            s("-0.500000000000"),
            s("it's"),
            s("\\x0a0b"),
            s("2024-02-29 12:00:00.500000"),
            s("f")
        ]
    );
    let (_, rows) = raw.extended("SELECT v FROM t WHERE id = $1 OR v = $2", &[None, Some("it's")]);
    assert_eq!(rows, [[s("it's")]]);
    // After an error the server skips the rest until Sync: one error, then ready again.
    let kinds: Vec<u8> = raw.pipeline_kinds("SELECT nope FROM t WHERE id = $1", &[Some("5")]);
    assert_eq!(kinds, [b'E'], "{:?}", String::from_utf8_lossy(&kinds));
    let kinds: Vec<u8> = raw.pipeline_kinds("SELECT v FROM t WHERE id = $1", &[Some("x")]);
    assert_eq!(kinds, [b'1', b'2', b'E'], "a bad parameter fails the Execute: {:?}", String::from_utf8_lossy(&kinds));
    let (tag, _) = raw.extended("SELECT v FROM t WHERE id = $1", &[Some("5")]);
    assert_eq!(tag, "SELECT 1");
    // A message longer than the limit is refused from its header, and the connection closed.
    let mut big = Raw::connect(&pg);
    big.stream.write_all(&[b'Q', 0x7f, 0xff, 0xff, 0xff]).expect("a header claiming 2 GiB");
    let (kind, body) = big.read();
    assert_eq!(kind, b'E');
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("54000") && text.contains("over the limit"), "{text}");
    let mut rest = Vec::new();
    assert!(big.stream.read_to_end(&mut rest).is_ok(), "the server closes the connection");
    // A statement without rows is described by NoData, parameters or not (JDBC reads an
    // empty row description as a result set).
    assert_eq!(raw.describe_kinds("INSERT INTO t (id) VALUES ($1)"), [b'1', b't', b'n']);
    assert_eq!(raw.describe_kinds("SELECT v FROM t WHERE id = $1"), [b'1', b't', b'T']);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_their_sqlstate() {
    let dir = TempDir::new("pg-errors");
    let (_server, pg) = start(&dir);
    let client = connect(&pg).await;
    client.batch_execute(SCHEMA).await.expect("schema");
    let e = client.query("SELECT * FROM nope", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::UNDEFINED_TABLE, "{e:?}");
    let e = client.simple_query("SELEKT 1").await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::SYNTAX_ERROR, "{e:?}");
    client.execute("INSERT INTO t (id) VALUES (1)", &[]).await.expect("insert");
    let e = client.execute("INSERT INTO t (id) VALUES (1)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::UNIQUE_VIOLATION, "{e:?}");
    let e = client.simple_query("CALL NoSuchProcedure(1)").await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::UNDEFINED_FUNCTION, "{e:?}");
    // The connection goes on after errors.
    assert_eq!(simple_rows(&client, "SELECT COUNT(*) FROM t").await, [[Some("1".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn procedures_run_by_call_and_select_and_several_statements_share_a_query() {
    let dir = TempDir::new("pg-procs");
    let (_server, pg) = start(&dir);
    let client = connect(&pg).await;
    client.batch_execute(SCHEMA).await.expect("schema");
    // Several statements in one simple query: each answered, in order.
    let messages = client.simple_query("INSERT INTO t (id, v) VALUES (1, 'a'); CALL T.insert(2, NULL, NULL, NULL, NULL, NULL, 'b', NULL, NULL, NULL); SELECT COUNT(*) FROM t").await.expect("three statements");
    let completions: Vec<u64> =
        messages.iter().filter_map(|m| if let SimpleQueryMessage::CommandComplete(n) = m { Some(*n) } else { None }).collect();
    assert_eq!(completions.len(), 3, "{messages:?}");
    assert_eq!(simple_rows(&client, "SELECT COUNT(*) FROM t").await, [[Some("2".to_string())]]);
    // A SQL procedure: its parameter type and columns are described, so a driver binds and reads them.
    let rows = client.query("CALL NameOf($1)", &[&2i32]).await.expect("CALL with a parameter");
    assert_eq!(rows[0].get::<_, String>(0), "b");
    let rows = client.query("SELECT * FROM NameOf($1)", &[&1i32]).await.expect("SELECT * FROM procedure");
    assert_eq!(rows[0].get::<_, String>(0), "a");
    assert_eq!(simple_rows(&client, "CALL NameOf(1)").await, [[Some("a".to_string())]]);
    // A Lua procedure's parameters have no declared types: a value sent for one the client
    // left untyped is read as a literal would be; one the client typed as text stays text.
    client
        .batch_execute(
            "CREATE TABLE kinds (k VARCHAR(16));
             CREATE PROCEDURE Kind FROM FILE 'kind.lua' SOURCE $lua$
               local record = sql [[INSERT INTO kinds VALUES (?)]]
               return function(a) record:exec(math.type(a) or type(a)) return 0 end
             $lua$",
        )
        .await
        .expect("a Lua procedure");
    client.execute("CALL Kind($1)", &[&"42"]).await.expect("untyped: a literal");
    client.execute("CALL Kind($1)", &[&"2.5e0"]).await.expect("untyped: a literal");
    let typed = client.prepare_typed("CALL Kind($1)", &[Type::TEXT]).await.expect("typed as text");
    client.execute(&typed, &[&"42"]).await.expect("typed: text");
    client.simple_query("CALL Kind(7)").await.expect("a literal in the text");
    let kinds = simple_rows(&client, "SELECT k FROM kinds ORDER BY k").await;
    let s = |v: &str| vec![Some(v.to_string())];
    assert_eq!(kinds, [s("float"), s("integer"), s("integer"), s("string")], "float 2.5, integers 42 and 7, string '42'");
    // A statement after a failed one in the same query does not run.
    assert!(client.simple_query("INSERT INTO t (id) VALUES (1); INSERT INTO t (id) VALUES (3)").await.is_err());
    assert_eq!(simple_rows(&client, "SELECT COUNT(*) FROM t WHERE id = 3").await, [[Some("0".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_transaction_blocks_follow_the_documented_rules() {
    let dir = TempDir::new("pg-session");
    let (_server, pg) = start(&dir);
    let mut client = connect(&pg).await;
    client.batch_execute(SCHEMA).await.expect("schema");
    assert_eq!(simple_rows(&client, "SHOW server_version").await, [[Some("15.0".to_string())]]);
    client.batch_execute("SET application_name = 'pg test'; SET extra_float_digits = 3").await.expect("SET");
    assert_eq!(simple_rows(&client, "SHOW application_name").await, [[Some("pg test".to_string())]]);
    let e = client.simple_query("SHOW no_such_setting").await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::UNDEFINED_OBJECT);
    // A block with one change commits it.
    let tx = client.transaction().await.expect("BEGIN");
    tx.execute("INSERT INTO t (id) VALUES (1)", &[]).await.expect("the block's one change");
    tx.query("SELECT * FROM t", &[]).await.expect("reads are fine in a block");
    tx.commit().await.expect("COMMIT");
    // A second change in one block is refused, and the block must then be rolled back.
    let tx = client.transaction().await.expect("BEGIN");
    tx.execute("INSERT INTO t (id) VALUES (2)", &[]).await.expect("first change");
    let e = tx.execute("INSERT INTO t (id) VALUES (3)", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::FEATURE_NOT_SUPPORTED, "{e:?}");
    let e = tx.query("SELECT 1 FROM t", &[]).await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::IN_FAILED_SQL_TRANSACTION, "{e:?}");
    tx.rollback().await.expect("ROLLBACK ends the failed block");
    let ids = simple_rows(&client, "SELECT id FROM t ORDER BY id").await;
    // Row 2 committed when it ran (as the NOTICE at BEGIN says); row 3 never ran.
    assert_eq!(ids, [[Some("1".to_string())], [Some("2".to_string())]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_security_on_the_password_is_checked_and_the_user_s_permissions_apply() {
    let dir = TempDir::new("pg-security");
    let (_server, pg) = start_secured(&dir);
    let (host, port) = pg.rsplit_once(':').expect("host:port");
    let as_user =
        |user: &str, password: &str| format!("host={host} port={port} user={user} password={password} dbname=lockstep connect_timeout=10");
    // admin and nina log in by SCRAM-SHA-256 (tokio-postgres speaks it), old by its password.
    for (user, password) in [("admin", "admin-pw"), ("old", "old-pw")] {
        let e = tokio_postgres::connect(&as_user(user, "wrong"), NoTls).await.err().expect("a wrong password is refused");
        assert_eq!(sqlstate(&e), SqlState::INVALID_PASSWORD, "{e:?}");
        let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
        assert_eq!(message, format!("Password authentication failed for user \"{user}\""), "{e:?}");
        let (client, connection) = tokio_postgres::connect(&as_user(user, password), NoTls).await.expect("the right password logs in");
        tokio::spawn(connection);
        assert_eq!(simple_rows(&client, "SELECT 1 AS one").await, [[Some("1".to_string())]], "{user}");
    }
    let e = tokio_postgres::connect(&as_user("nobody", "x"), NoTls).await.err().expect("an unknown user is refused");
    assert_eq!(sqlstate(&e), SqlState::INVALID_PASSWORD, "{e:?}");
    let (admin, connection) = tokio_postgres::connect(&as_user("admin", "admin-pw"), NoTls).await.expect("the right password logs in");
    tokio::spawn(connection);
    admin.batch_execute(SCHEMA).await.expect("the administrator changes the schema");
    let (nina, connection) = tokio_postgres::connect(&as_user("nina", "nina-pw"), NoTls).await.expect("nina logs in");
    tokio::spawn(connection);
    let e = nina.simple_query("SELECT COUNT(*) FROM t").await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::INSUFFICIENT_PRIVILEGE, "{e:?}");
}

/// A server with security on and the PostgreSQL port on a free address; that address.
/// Users admin (administrator) and nina (no role) were added by `lockstep user add`, so
/// they have SCRAM verifiers; old's entry has its verifier taken out, as one written before
/// verifiers existed.
fn start_secured(dir: &TempDir) -> (Server, String) {
    let config = dir.0.join("lockstep.toml");
    std::fs::write(&config, "sites = 2\n").expect("write config");
    for (user, roles, password) in [("admin", "administrator", "admin-pw"), ("nina", "nothing", "nina-pw"), ("old", "user", "old-pw")] {
        let mut child = Command::new(common::BIN)
            .args(["user", "add", user, "--roles", roles, "--password-stdin", "--config"])
            .arg(&config)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("run lockstep user add");
        child.stdin.take().expect("stdin").write_all(format!("{password}\n").as_bytes()).expect("password");
        assert!(child.wait().expect("user add").success());
    }
    let text = std::fs::read_to_string(&config).expect("read config");
    assert_eq!(text.matches("\nscram = \"SCRAM-SHA-256$4096:").count(), 3, "every user added has a verifier:\n{text}");
    let (before_old, old) = text.split_at(text.find("name = \"old\"").expect("old's entry"));
    let old: String = old.lines().filter(|l| !l.starts_with("scram = ")).map(|l| format!("{l}\n")).collect();
    std::fs::write(&config, format!("{before_old}{old}")).expect("write config");
    let pg = free_addrs(1).remove(0);
    let data = dir.0.join("data");
    // Its stderr is kept (warnings only) for the tests that read the log.
    let child = Command::new(common::BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "off", "--security", "on", "--pg", &pg, "--data"])
        .arg(&data)
        .arg("--config")
        .arg(&config)
        .env("LOCKSTEP_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lockstep server");
    (Server::from_child(child, &data), pg)
}

/// The first thing the server asks of a client logging in as `user`: the authentication
/// request's code and the rest of its body.
fn authentication_asked(pg: &str, user: &str) -> (i32, Vec<u8>) {
    let mut raw = Raw::start(pg, user);
    let (kind, body) = raw.read();
    assert_eq!(kind, b'R', "an authentication request, not: {}", String::from_utf8_lossy(&body));
    (i32::from_be_bytes([body[0], body[1], body[2], body[3]]), body[4..].to_vec())
}

#[test]
fn users_with_a_verifier_are_asked_for_scram_and_the_others_for_their_password() {
    let dir = TempDir::new("pg-scram-asked");
    let (server, pg) = start_secured(&dir);
    const SASL: i32 = 10;
    const CLEARTEXT_PASSWORD: i32 = 3;
    assert_eq!(authentication_asked(&pg, "admin"), (SASL, b"SCRAM-SHA-256\0\0".to_vec()));
    // A name that is no user is asked the same, so the answer does not tell it apart.
    assert_eq!(authentication_asked(&pg, "nobody"), (SASL, b"SCRAM-SHA-256\0\0".to_vec()));
    assert_eq!(authentication_asked(&pg, "old"), (CLEARTEXT_PASSWORD, Vec::new()));
    assert_eq!(authentication_asked(&pg, "old"), (CLEARTEXT_PASSWORD, Vec::new()));
    let log = server.stop_and_read_stderr();
    assert_eq!(log.matches("user old has no SCRAM verifier").count(), 1, "warned once, suggesting `lockstep user add`:\n{log}");
    assert!(log.contains("`lockstep user add old"), "{log}");
    assert!(!log.contains("user admin has no"), "{log}");
}

/// `psql` logs in by SCRAM-SHA-256 with the right password, is refused with a wrong one,
/// and logs in by password as a user without a verifier. Skipped, saying so, where psql is
/// not installed.
#[test]
fn psql_logs_in_with_scram() {
    if Command::new("psql").arg("--version").output().is_err() {
        eprintln!("psql_logs_in_with_scram: skipped, psql is not installed (apt-get install postgresql-client)");
        return;
    }
    let dir = TempDir::new("pg-scram-psql");
    let (_server, pg) = start_secured(&dir);
    let (host, port) = pg.rsplit_once(':').expect("host:port");
    let psql = |user: &str, password: &str| {
        let out = Command::new("psql")
            .args(["-h", host, "-p", port, "-U", user, "-d", "lockstep", "-X", "-t", "-A", "-c", "SELECT 41 + 1"])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .output()
            .expect("run psql");
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (user, password) in [("admin", "admin-pw"), ("old", "old-pw")] {
        let (ok, stdout, stderr) = psql(user, password);
        assert!(ok && stdout.trim() == "42", "{user}: {stdout}{stderr}");
        let (ok, _, stderr) = psql(user, "wrong");
        assert!(!ok && stderr.contains(&format!("Password authentication failed for user \"{user}\"")), "{user}: {stderr}");
    }
}

#[test]
fn a_taken_postgresql_port_stops_the_start_with_an_error_naming_the_flag() {
    let dir = TempDir::new("pg-taken");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("hold a port");
    let addr = taken.local_addr().expect("address").to_string();
    let out = Command::new(common::BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--pg", &addr, "--data"])
        .arg(&dir.0)
        .output()
        .expect("run lockstep server");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("cannot listen for PostgreSQL clients on {addr}")) && stderr.contains("--pg off"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_stdin_loads_text_and_csv_rows() {
    use futures::SinkExt;
    let dir = TempDir::new("pg-copy");
    let (_server, pg) = start(&dir);
    let client = connect(&pg).await;
    client.batch_execute(SCHEMA).await.expect("schema");
    // Text format, every type, the rows cut across messages, 2,500 rows in all (several batches).
    let sink = client.copy_in("COPY t FROM STDIN").await.expect("COPY starts");
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"1\t-1\t2\t3\t0.5\t1.25\ttab\\there\t\\\\x0aff\t2024-01-02 03:04:05\tt\n2\t\\N\t\\N\t"))
        .await
        .expect("data");
    let mut more = String::from("\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\n");
    for id in 3..=2_500 {
        more.push_str(&format!("{id}\t\\N\t\\N\t\\N\t\\N\t\\N\trow {id}\t\\N\t\\N\tf\n"));
    }
    sink.send(bytes::Bytes::from(more)).await.expect("data");
    assert_eq!(sink.finish().await.expect("COPY ends"), 2_500);
    let text = simple_rows(&client, "SELECT id, ti, si, bi, f, d, v, b, ts, ok FROM t WHERE id <= 2 ORDER BY id").await;
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        text[0],
        [
            s("1"),
            s("-1"),
            s("2"),
            s("3"),
            s("0.5"),
            s("1.250000000000"),
            s("tab\there"),
            s("\\x0aff"),
            s("2024-01-02 03:04:05.000000"),
            s("t")
        ]
    );
    assert_eq!(text[1], [s("2"), None, None, None, None, None, None, None, None, None]);
    assert_eq!(simple_rows(&client, "SELECT COUNT(*) FROM t").await, [[s("2500")]]);
    // CSV with a header and a column list; a duplicate key stops the COPY with its SQLSTATE.
    let sink = client.copy_in("COPY t (v, id) FROM STDIN WITH (FORMAT csv, HEADER)").await.expect("COPY csv");
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"v,id\n\"a, \"\"quoted\"\"\",3001\n,3002\n")).await.expect("data");
    assert_eq!(sink.finish().await.expect("COPY csv ends"), 2);
    assert_eq!(simple_rows(&client, "SELECT v FROM t WHERE id >= 3001 ORDER BY id").await, [[s("a, \"quoted\"")], [None]]);
    let sink = client.copy_in("COPY t (id) FROM STDIN").await.expect("COPY");
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"4000\n1\n4001\n")).await.expect("data");
    let e = sink.finish().await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::UNIQUE_VIOLATION, "{e:?}");
    // Its rows follow the query string, so COPY must end it.
    let e = client.simple_query("COPY t FROM STDIN; SELECT 1 FROM t").await.unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::FEATURE_NOT_SUPPORTED, "{e:?}");
    // A bad row is reported with its line; the connection goes on.
    let sink = client.copy_in("COPY t FROM STDIN").await.expect("COPY");
    futures::pin_mut!(sink);
    sink.send(bytes::Bytes::from_static(b"5000\tonly two columns\n")).await.expect("data");
    let e = sink.finish().await.unwrap_err();
    assert!(format!("{e:?}").contains("line 1"), "{e:?}");
    assert_eq!(simple_rows(&client, "SELECT COUNT(*) FROM t WHERE id = 5000").await, [[s("0")]]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_ends_the_wait_for_a_long_query() {
    let dir = TempDir::new("pg-cancel");
    let pg = free_addrs(1).remove(0);
    // The canceled query runs on in the server until the query timeout stops it.
    let _server =
        Server::start_with(&dir.0, &["--sites", "1", "--command-log", "off", "--query-timeout-ms", "3000", "--pg", &pg], "127.0.0.1:0");
    let client = connect(&pg).await;
    client.batch_execute("CREATE TABLE r (id INTEGER NOT NULL PRIMARY KEY)").await.expect("schema");
    let rows: String = (0..1_000).map(|i| format!("{i}\n")).collect();
    let sink = client.copy_in("COPY r FROM STDIN").await.expect("COPY");
    futures::pin_mut!(sink);
    futures::SinkExt::send(&mut sink, bytes::Bytes::from(rows)).await.expect("rows");
    sink.finish().await.expect("COPY ends");
    let token = client.cancel_token();
    // A billion-row join: it cannot end before the cancel arrives.
    let long = tokio::spawn(async move { client.simple_query("SELECT COUNT(*) FROM r a, r b, r c").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.expect("send the cancel request");
    let e = long.await.expect("the query task").unwrap_err();
    assert_eq!(sqlstate(&e), SqlState::QUERY_CANCELED, "{e:?}");
    assert!(format!("{e:?}").contains("runs on"), "the error says the statement goes on: {e:?}");
}

/// `psql` (Debian's postgresql-client) against the port: DDL, DML, a query, CALL and an
/// error's SQLSTATE. Skipped, saying so, where psql is not installed.
#[test]
fn psql_runs_a_script() {
    if Command::new("psql").arg("--version").output().is_err() {
        eprintln!("psql_runs_a_script: skipped, psql is not installed (apt-get install postgresql-client)");
        return;
    }
    let dir = TempDir::new("pg-psql");
    let (_server, pg) = start(&dir);
    let (host, port) = pg.rsplit_once(':').expect("host:port");
    let script = dir.0.join("script.sql");
    let csv = dir.0.join("rows.csv");
    std::fs::write(&csv, "10,ten\n11,\"eleven, quoted\"\n12,\n").expect("write the CSV file");
    let csv = csv.display();
    std::fs::write(
        &script,
        format!(
            "{SCHEMA}
INSERT INTO t (id, v, d) VALUES (1, 'one', 2.5);
INSERT INTO t (id, v) VALUES (2, 'two');
UPDATE t SET v = 'uno' WHERE id = 1;
SELECT id, v, d FROM t ORDER BY id;
CALL NameOf(2);
\\copy t (id, v) from '{csv}' with (format csv)
SELECT COUNT(*) AS loaded FROM t WHERE id >= 10;
INSERT INTO t (id) VALUES (1);
DELETE FROM t WHERE id = 2;
\\dt
\\d t
\\df
"
        ),
    )
    .expect("write the script");
    let out = Command::new("psql")
        .args(["-h", host, "-p", port, "-U", "tester", "-d", "lockstep", "-X", "-v", "VERBOSITY=verbose", "-f"])
        .arg(&script)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("run psql");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "CREATE TABLE",
        "PARTITION",
        "CREATE PROCEDURE",
        "INSERT 0 1",
        "UPDATE 1",
        " 1 | uno | 2.500000000000",
        " 2 | two |",
        "(2 rows)",
        " two",
        "COPY 3",
        " LOADED",
        "      3",
        "DELETE 1",
        // \dt, \d t and \df, from Lockstep's catalog.
        " public | T    | table | lockstep",
        "Table \"public.T\"",
        " ID     | integer       |           | not null | ",
        " V      | varchar(40)   |           |          | ",
        " TS     | timestamp     |           |          | ",
        " public | NameOf |",
        "| integer             | proc",
    ] {
        assert!(stdout.contains(expected), "psql printed no {expected:?}:\n{stdout}\n{stderr}");
    }
    assert!(stderr.contains("ERROR:  23505"), "psql showed no unique violation:\n{stderr}");
}

/// `pgbench` with a custom script that calls the Voter example's Lua `Vote` procedure, in
/// the simple, extended and prepared modes, several clients each: no transaction fails and
/// every vote is counted. Skipped, saying so, where pgbench is not installed.
#[test]
fn pgbench_calls_a_procedure_in_every_query_mode() {
    if Command::new("pgbench").arg("--version").output().is_err() || Command::new("psql").arg("--version").output().is_err() {
        eprintln!(
            "pgbench_calls_a_procedure_in_every_query_mode: skipped, pgbench or psql is not installed (apt-get install postgresql-client)"
        );
        return;
    }
    let dir = TempDir::new("pg-pgbench");
    let voter = common::repo_root().join("apps/voter");
    let pg = free_addrs(1).remove(0);
    let voter_dir = voter.to_str().expect("utf-8 path");
    let _server = Server::start_with(
        &dir.0.join("data"),
        &["--sites", "2", "--command-log", "off", "--procedures", voter_dir, "--pg", &pg],
        "127.0.0.1:0",
    );
    let (host, port) = pg.rsplit_once(':').expect("host:port");
    let psql = |args: &[&str]| {
        let out = Command::new("psql")
            .args(["-h", host, "-p", port, "-U", "bench", "-d", "lockstep", "-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .args(args)
            .current_dir(&voter)
            .output()
            .expect("run psql");
        assert!(out.status.success(), "psql {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    psql(&["-f", "ddl.sql"]);
    psql(&["-c", "CALL Initialize(6, 'Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,Alana Bregman,Jessie Eichman')"]);
    let script = dir.0.join("vote.sql");
    std::fs::write(
        &script,
        "\\set phone random(2000000000, 9999999999)\n\\set contestant random(1, 6)\nCALL Vote(:phone, :contestant, 1000);\n",
    )
    .expect("write the script");
    let (clients, per_client) = (4, 250);
    for mode in ["simple", "extended", "prepared"] {
        let out = Command::new("pgbench")
            .args([
                "-h",
                host,
                "-p",
                port,
                "-U",
                "bench",
                "-n",
                "-M",
                mode,
                "-c",
                &clients.to_string(),
                "-j",
                "2",
                "-t",
                &per_client.to_string(),
                "-f",
            ])
            .arg(&script)
            .arg("lockstep")
            .output()
            .expect("run pgbench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "pgbench -M {mode}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(
            stdout.contains(&format!("number of transactions actually processed: {}", clients * per_client)),
            "pgbench -M {mode}: {stdout}"
        );
        assert!(stdout.contains("number of failed transactions: 0 "), "pgbench -M {mode}: {stdout}");
    }
    let count = psql(&["-t", "-A", "-c", "SELECT COUNT(*) FROM votes"]);
    assert_eq!(count.trim(), (3 * clients * per_client).to_string(), "every vote counted");
}

/// Just enough of the protocol, spoken by hand, to run an extended query with text
/// parameters and text results (tokio-postgres always asks for binary).
struct Raw {
    stream: TcpStream,
}

impl Raw {
    fn connect(pg: &str) -> Raw {
        let mut raw = Raw::start(pg, "tester");
        raw.until_ready();
        raw
    }

    /// Connected, with the start-up message sent and nothing read.
    fn start(pg: &str, user: &str) -> Raw {
        let stream = TcpStream::connect(pg).expect("connect");
        stream.set_read_timeout(Some(READ_TIMEOUT)).expect("timeout");
        let mut raw = Raw { stream };
        let mut body = 196_608i32.to_be_bytes().to_vec();
        body.extend(format!("user\0{user}\0database\0lockstep\0\0").as_bytes());
        let mut startup = ((body.len() + 4) as i32).to_be_bytes().to_vec();
        startup.extend(body);
        raw.stream.write_all(&startup).expect("startup");
        raw
    }

    fn send(&mut self, kind: u8, body: &[u8]) {
        let mut m = vec![kind];
        m.extend(((body.len() + 4) as i32).to_be_bytes());
        m.extend(body);
        self.stream.write_all(&m).expect("send");
    }

    fn read(&mut self) -> (u8, Vec<u8>) {
        let mut head = [0u8; 5];
        self.stream.read_exact(&mut head).expect("read a message");
        let len = i32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize - 4;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).expect("read a message body");
        (head[0], body)
    }

    fn until_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut seen = Vec::new();
        loop {
            let m = self.read();
            if m.0 == b'Z' {
                return seen;
            }
            assert_ne!(m.0, b'E', "error: {}", String::from_utf8_lossy(&m.1));
            seen.push(m);
        }
    }

    /// Parse, Bind (all text), Execute, Sync: the command tag and the rows as text.
    fn extended(&mut self, sql: &str, params: &[Option<&str>]) -> (String, Vec<Vec<Option<String>>>) {
        self.send_pipeline(sql, params);
        let mut tag = String::new();
        let mut rows = Vec::new();
        for (kind, body) in self.until_ready() {
            match kind {
                b'C' => tag = String::from_utf8_lossy(&body[..body.len() - 1]).into_owned(),
                b'D' => rows.push(data_row(&body)),
                _ => {}
            }
        }
        (tag, rows)
    }

    /// The same pipeline; the kinds of the messages answered before ReadyForQuery, errors
    /// included.
    fn pipeline_kinds(&mut self, sql: &str, params: &[Option<&str>]) -> Vec<u8> {
        self.send_pipeline(sql, params);
        let mut kinds = Vec::new();
        loop {
            match self.read().0 {
                b'Z' => return kinds,
                k => kinds.push(k),
            }
        }
    }

    /// Parse and Describe of a statement, then Sync: the kinds of the messages answered.
    fn describe_kinds(&mut self, sql: &str) -> Vec<u8> {
        let mut parse = b"\0".to_vec();
        parse.extend(sql.as_bytes());
        parse.extend(b"\0\0\0");
        self.send(b'P', &parse);
        self.send(b'D', b"S\0");
        self.send(b'S', b"");
        self.until_ready().into_iter().map(|(kind, _)| kind).collect()
    }

    fn send_pipeline(&mut self, sql: &str, params: &[Option<&str>]) {
        let mut parse = b"\0".to_vec();
        parse.extend(sql.as_bytes());
        parse.extend(b"\0\0\0");
        self.send(b'P', &parse);
        let mut bind = b"\0\0".to_vec();
        bind.extend(1i16.to_be_bytes());
        bind.extend(0i16.to_be_bytes());
        bind.extend((params.len() as i16).to_be_bytes());
        for p in params {
            match p {
                Some(v) => {
                    bind.extend((v.len() as i32).to_be_bytes());
                    bind.extend(v.as_bytes());
                }
                None => bind.extend((-1i32).to_be_bytes()),
            }
        }
        bind.extend(1i16.to_be_bytes());
        bind.extend(0i16.to_be_bytes());
        self.send(b'B', &bind);
        self.send(b'E', b"\0\0\0\0\0");
        self.send(b'S', b"");
    }
}

fn data_row(body: &[u8]) -> Vec<Option<String>> {
    let n = i16::from_be_bytes([body[0], body[1]]) as usize;
    let mut at = 2;
    (0..n)
        .map(|_| {
            let len = i32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
            at += 4;
            (len >= 0).then(|| {
                let v = String::from_utf8_lossy(&body[at..at + len as usize]).into_owned();
                at += len as usize;
                v
            })
        })
        .collect()
}

/// Geography columns are text on the PostgreSQL port: WKT out (in both formats), and WKT
/// in, as a literal or as a parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geography_is_wkt_text_on_the_postgresql_port() {
    let dir = TempDir::new("pg-geo");
    let (_server, pg) = start(&dir);
    let client = connect(&pg).await;
    client.batch_execute("CREATE TABLE g (id INTEGER NOT NULL PRIMARY KEY, p GEOGRAPHY_POINT, a GEOGRAPHY)").await.expect("schema");
    client
        .batch_execute("INSERT INTO g VALUES (1, POINTFROMTEXT('POINT(-71.5 42.25)'), 'POLYGON((0 0, 1 0, 1 1, 0 0))')")
        .await
        .expect("insert");
    let insert = client.prepare("INSERT INTO g VALUES ($1, $2, NULL)").await.expect("prepare");
    assert_eq!(insert.params()[1], Type::TEXT);
    client.execute(&insert, &[&2i32, &"POINT(3 4)"]).await.expect("a point given as WKT");
    assert_eq!(
        simple_rows(&client, "SELECT p, a FROM g ORDER BY id").await,
        vec![
            vec![Some("POINT (-71.5 42.25)".to_string()), Some("POLYGON ((0.0 0.0, 1.0 0.0, 1.0 1.0, 0.0 0.0))".to_string())],
            vec![Some("POINT (3.0 4.0)".to_string()), None],
        ]
    );
    // The extended protocol (tokio-postgres asks for binary results): text all the same.
    let rows = client.query("SELECT p FROM g WHERE id = $1", &[&1i32]).await.expect("query");
    assert_eq!(rows[0].columns()[0].type_(), &Type::TEXT);
    assert_eq!(rows[0].get::<_, String>(0), "POINT (-71.5 42.25)");
}
