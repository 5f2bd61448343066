//! End-to-end tests of `lockstep load csv` against a real server: good rows go in, every
//! malformed or refused line is reported with its line number and reason, and the options
//! (quoting, escapes, NULL string, header, skip, limits) do what they say.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{adhoc, scalar, Server, TempDir, BIN};
use lockstep_client::Client;
use lockstep_core::Value;

/// Runs `lockstep load csv --server ADDR <args>`.
fn load(server: &Server, args: &[&str]) -> Output {
    Command::new(BIN).args(["load", "csv", "--server", &server.addr]).args(args).output().expect("run lockstep load csv")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the CSV file");
    path.display().to_string()
}

async fn count(client: &Client, table: &str) -> i64 {
    let r = adhoc(client, &format!("SELECT COUNT(*) FROM {table}")).await;
    scalar(&r).as_i64().expect("a count")
}

async fn rows(client: &Client, sql: &str) -> Vec<Vec<Value>> {
    adhoc(client, sql).await.tables[0].rows.clone()
}

const ACCOUNTS: &str = "CREATE TABLE accounts (id INTEGER NOT NULL, name VARCHAR(20), balance FLOAT, PRIMARY KEY (id)); \
                        PARTITION TABLE accounts ON COLUMN id;";

/// The reject lines, each split into `[FILE:LINE, REASON, ROW]`.
fn reject_lines(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).expect("the rejects file");
    text.lines().map(|l| l.splitn(3, '\t').map(String::from).collect()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_are_rejected_with_their_numbers_and_good_ones_all_go_in() {
    let dir = TempDir::new("load-bad");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, ACCOUNTS).await;
    let csv = write(
        &dir.0,
        "accounts.csv",
        "1,alpha,1.5\n\
         2,\"beta, quoted\",2\n\
         3,gamma,not-a-number\n\
         4,too,many,fields\n\
         5,\"unterminated,3\n\
         6,zeta,6\n\
         1,duplicate,7\n\
         \n\
         7,,\\N\n\
         8,eta,8",
    );
    let rejects = dir.0.join("rejects.txt");
    let out = load(&server, &["--table", "accounts", "--rejects", rejects.to_str().unwrap(), &csv]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "rows were rejected: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("9 rows read, 5 inserted, 4 rejected"), "{stdout}");

    assert_eq!(count(&client, "accounts").await, 5);
    let got = rows(&client, "SELECT id, name, balance FROM accounts ORDER BY id").await;
    assert_eq!(got[0], vec![Value::Int(1), Value::from("alpha"), Value::Float(1.5)], "the first row, not its duplicate, stays");
    assert_eq!(got[1][1], Value::from("beta, quoted"));
    assert_eq!(got[3], vec![Value::Int(7), Value::from(""), Value::Null]);
    assert_eq!(got[4][0], Value::Int(8), "a last line without its newline is loaded");

    let mut lines = reject_lines(&rejects);
    lines.sort();
    let at = |n: usize| lines[n][0].rsplit(':').next().unwrap().to_string();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!((at(0).as_str(), lines[0][2].as_str()), ("3", "3,gamma,not-a-number"));
    assert!(lines[0][1].contains("column BALANCE") && lines[0][1].contains("not a valid FLOAT"), "{:?}", lines[0]);
    assert_eq!(at(1), "4");
    assert!(lines[1][1].contains("4 fields, expected 3"), "{:?}", lines[1]);
    assert_eq!(at(2), "5");
    assert!(lines[2][1].contains("unterminated quote"), "{:?}", lines[2]);
    assert_eq!(at(3), "7");
    assert!(lines[3][1].contains("the server refused the row") && lines[3][1].to_lowercase().contains("constraint"), "{:?}", lines[3]);
    assert!(lines.iter().all(|l| l[0].starts_with(&csv)), "{lines:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_file_exits_zero_and_options_shape_the_fields() {
    let dir = TempDir::new("load-options");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, ACCOUNTS).await;
    // Two lines of preamble (--skip 2), then a header naming the columns in another
    // order; '|' separates, ' quotes, \ escapes inside quotes, and "nil" is NULL.
    let csv = write(
        &dir.0,
        "piped.csv",
        "exported by a test\n\
         second preamble line\n\
         balance|ID\n\
         2.5|1\n\
         nil|2\n",
    );
    let out = load(&server, &["--table", "ACCOUNTS", "--separator", "|", "--nullstring", "nil", "--skip", "2", "--header", &csv]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let got = rows(&client, "SELECT id, name, balance FROM accounts ORDER BY id").await;
    assert_eq!(got, vec![vec![Value::Int(1), Value::Null, Value::Float(2.5)], vec![Value::Int(2), Value::Null, Value::Null]]);

    let quoted = write(&dir.0, "quoted.csv", "10;'it''s';1\n11;'back\\'slash; here';2\n12;nil;3\n");
    let out = load(&server, &["--table", "accounts", "--separator", ";", "--quotechar", "'", "--nullstring", "nil", &quoted]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let got = rows(&client, "SELECT name FROM accounts WHERE id >= 10 ORDER BY id").await;
    assert_eq!(got, vec![vec![Value::from("it's")], vec![Value::from("back'slash; here")], vec![Value::Null]]);

    // --limit stops after that many rows; the files after it are not read.
    let more = write(&dir.0, "more.csv", "20,a,1\n21,b,2\n22,c,3\n");
    let out = load(&server, &["--table", "accounts", "--limit", "2", &more, &quoted]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 rows read, 2 inserted, 0 rejected"));
    assert_eq!(count(&client, "accounts").await, 7);

    // A header that names no such column stops the load before anything is sent.
    let wrong = write(&dir.0, "wrong.csv", "id,colour\n30,red\n");
    let out = load(&server, &["--table", "accounts", "--header", &wrong]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("COLOUR") || String::from_utf8_lossy(&out.stderr).contains("colour"));
    assert_eq!(count(&client, "accounts").await, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maxerrors_stops_the_load_and_the_reportdir_gets_the_rejects() {
    let dir = TempDir::new("load-maxerrors");
    let server = Server::start(&dir.0, 2);
    let client = server.client().await;
    adhoc(&client, ACCOUNTS).await;
    let csv = write(&dir.0, "bad.csv", "1,a,1\nx,b,2\ny,c,3\nz,d,4\n5,e,5\n");
    let report = dir.0.join("report");
    let out = load(&server, &["--table", "accounts", "--maxerrors", "2", "--reportdir", report.to_str().unwrap(), &csv]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stopped after 2 rejected rows"), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = reject_lines(&report.join("ACCOUNTS_rejects.txt"));
    assert_eq!(lines.iter().map(|l| l[2].as_str()).collect::<Vec<_>>(), ["x,b,2", "y,c,3"]);
    assert_eq!(count(&client, "accounts").await, 1, "reading stopped at the second bad line");

    // Through a procedure instead of the table's insert.
    adhoc(
        &client,
        "CREATE PROCEDURE AddAccount PARTITION ON TABLE accounts COLUMN id PARAMETER 0 AS INSERT INTO accounts (id, name) VALUES (?, ?)",
    )
    .await;
    let by_proc = write(&dir.0, "proc.csv", "40,forty\n41,forty-one\nbad,x\n");
    let out = load(&server, &["--procedure", "AddAccount", &by_proc]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad,x"), "the rejects go to stderr without --rejects");
    assert_eq!(count(&client, "accounts").await, 3);
}
