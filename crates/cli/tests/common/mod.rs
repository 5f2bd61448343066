//! Test harness: starts the real `lockstep` binary on a free port with a fresh data
//! directory, and helpers to drive it with the Rust client and the shell.
#![allow(dead_code)]

pub mod cluster;
pub mod export;
pub mod history;
pub mod proxy;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use lockstep_client::{Client, ClientConfig, Response};
use lockstep_core::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_lockstep");

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A fresh, empty directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = NEXT_DIR.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("lockstep-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running server process; killed on drop.
pub struct Server {
    child: Child,
    pub addr: String,
    /// The HTTP port's address, when it is on (only tests of it turn it on: every other
    /// server passes `--http off`, so parallel tests never compete for a port).
    pub http: Option<String>,
    pub data: PathBuf,
}

impl Server {
    /// Starts a server on 127.0.0.1 with an OS-chosen port and waits for its ready line.
    pub fn start(data: &Path, sites: u32) -> Server {
        Self::start_with(data, &["--sites", &sites.to_string()], "127.0.0.1:0")
    }

    /// Its log shows warnings and errors only (`LOCKSTEP_LOG=warn`), on the test's stderr:
    /// the info lines of every server the tests start would bury what went wrong.
    pub fn start_with(data: &Path, extra: &[&str], listen: &str) -> Server {
        let http_off: &[&str] = if extra.contains(&"--http") { &[] } else { &["--http", "off"] };
        let child = Command::new(BIN)
            .arg("server")
            .args(["--listen", listen, "--data"])
            .arg(data)
            .args(extra)
            .args(http_off)
            .args(if extra.contains(&"--pg") { &[][..] } else { &["--pg", "off"][..] })
            .env("LOCKSTEP_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lockstep server");
        Self::from_child(child, data)
    }

    /// Waits for the ready line of a server started by the caller (stdout piped).
    pub fn from_child(mut child: Child, data: &Path) -> Server {
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (addr, http) = loop {
            let line = lines.next().expect("server exited before it was ready").expect("read stdout");
            if line.contains("ready") {
                let after = |marker: &str| line.split(marker).nth(1).and_then(|a| a.split([',', ' ']).next()).map(str::to_string);
                break (after("listening on ").expect("address in ready line"), after("HTTP on "));
            }
        };
        // Keep draining stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Server { child, addr, http, data: data.to_path_buf() }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server (SIGTERM) and returns what it wrote on stderr (which the caller
    /// piped when starting it).
    pub fn stop_and_read_stderr(mut self) -> String {
        let mut err = self.child.stderr.take();
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let _ = self.child.wait();
        let mut text = String::new();
        if let Some(e) = err.as_mut() {
            use std::io::Read;
            let _ = e.read_to_string(&mut text);
        }
        text
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.addr, ClientConfig::default()).await.expect("connect")
    }

    /// Runs `lockstep sql --server ADDR <args>`.
    pub fn sql(&self, args: &[&str]) -> Output {
        Command::new(BIN).arg("sql").args(["--server", &self.addr]).args(args).output().expect("run lockstep sql")
    }

    /// Sends SIGTERM and waits for a clean exit.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        self.child.wait().expect("wait for server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The repository root (for apps/).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Calls and asserts success, with the server's message on failure.
pub async fn ok(client: &Client, proc: &str, params: Vec<Value>) -> Response {
    let r = client.call(proc, params).await.expect("call");
    assert_eq!(r.status, 1, "{proc} failed: {:?}", r.status_string);
    r
}

/// Runs one ad-hoc statement and asserts success.
pub async fn adhoc(client: &Client, sql: &str) -> Response {
    ok(client, "@AdHoc", vec![Value::Str(sql.into())]).await
}

/// The single value of a 1×1 result.
pub fn scalar(r: &Response) -> Value {
    r.tables[0].rows[0][0].clone()
}
