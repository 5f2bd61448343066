//! `scripts/demo.sh`, run as a user runs it (with the debug binary, a free port and a
//! scratch data directory): it says what it did in sentences, prints a shell command that
//! works, holds the terminal until Ctrl-C and then exits 0; a second demo on the same data
//! directory says that its server did not start and exits 1; a restarted demo keeps the votes.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use common::{repo_root, TempDir, BIN};

/// A port nothing listens on just now (the OS picks it; it is free once the probe closes).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind a probe").local_addr().expect("probe address").port()
}

/// Starts the demo in a process group of its own, as a terminal runs a foreground job.
fn start_demo(listen: &str, data: &Path) -> Child {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/demo.sh"))
        .env("LOCKSTEP_BIN", BIN)
        .env("LOCKSTEP_DEMO_LISTEN", listen)
        .env("LOCKSTEP_DEMO_DATA", data)
        .env("LOCKSTEP_DEMO_HTTP", "off")
        .env("LOCKSTEP_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.spawn().expect("start scripts/demo.sh")
}

/// The demo's stdout lines up to and including the first that contains `last`.
fn lines_until(out: &mut BufReader<ChildStdout>, last: &str) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        let n = out.read_line(&mut line).expect("read the demo's output");
        assert!(n > 0, "the demo ended before printing {last:?}; it printed:\n{}", lines.join("\n"));
        let line = line.trim_end().to_string();
        let done = line.contains(last);
        lines.push(line);
        if done {
            return lines;
        }
    }
}

/// Sends `signal` to the demo's whole process group, as Ctrl-C in a terminal does.
fn signal_group(demo: &Child, signal: i32) {
    let group = demo.id() as i32;
    // SAFETY: kill(2) with a negative pid signals that process group; no memory is shared.
    let rc = unsafe { libc::kill(-group, signal) };
    assert_eq!(rc, 0, "cannot signal the demo: {}", std::io::Error::last_os_error());
}

#[test]
fn the_demo_explains_itself_holds_the_terminal_and_stops_cleanly_on_ctrl_c() {
    let data = TempDir::new("demo");
    let data_dir = data.0.join("lockstep-data");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut demo = start_demo(&listen, &data_dir);
    let mut out = BufReader::new(demo.stdout.take().expect("stdout"));
    let lines = lines_until(&mut out, "open the SQL shell with:");
    let text = lines.join("\n");
    for expected in [
        "Loading apps/voter/ddl.sql: tables, views and the Vote, Initialize and Results procedures.",
        "The contest has 6 contestants.",
        "Vote from 5551234567 for contestant 1: counted.",
        "Vote from 3125550123 for contestant 2: counted.",
        "Results, most votes first:",
        "│ Tabatha Gehling ┆ 2                 ┆ 3           │",
        "This terminal now holds the server: press Ctrl-C to stop it.",
    ] {
        assert!(lines.iter().any(|l| l == expected), "the demo did not print {expected:?}; it printed:\n{text}");
    }
    // The shell command it prints works as printed.
    let shell = lines.last().and_then(|l| l.split("open the SQL shell with: ").nth(1)).expect("a shell command").to_string();
    assert_eq!(shell, format!("{BIN} sql --server {listen}"));
    let count =
        Command::new("bash").arg("-c").arg(format!("{shell} --format csv -c 'SELECT COUNT(*) FROM votes'")).output().expect("run it");
    assert_eq!(String::from_utf8_lossy(&count.stdout).lines().last(), Some("5"), "{count:?}");

    // A second demo on the same data directory (another port) says its server did not start.
    let mut second = start_demo(&format!("127.0.0.1:{}", free_port()), &data_dir);
    let second_out = second.wait_with_output_or_kill();
    assert_eq!(second_out.0.code(), Some(1), "a second demo must fail: {}", second_out.1);
    assert!(second_out.1.contains("The server did not start"), "{}", second_out.1);
    assert!(second_out.1.contains("is in use by another Lockstep process"), "{}", second_out.1);

    // Ctrl-C: the server stops cleanly and the demo exits 0, having printed nothing more.
    signal_group(&demo, libc::SIGINT);
    let status = demo.wait().expect("wait for the demo");
    assert_eq!(status.code(), Some(0), "a clean Ctrl-C stop must exit 0");
    let rest: Vec<String> = out.lines().map(|l| l.expect("read")).collect();
    assert_eq!(rest, ["lockstep stopped"]);

    // Run again: the schema is kept (not loaded twice) and so are the votes: each phone
    // now casts its second and last vote.
    let mut again = start_demo(&listen, &data_dir);
    let mut out = BufReader::new(again.stdout.take().expect("stdout"));
    let lines = lines_until(&mut out, "open the SQL shell with:");
    assert!(!lines.iter().any(|l| l.starts_with("Loading")), "the schema was loaded again:\n{}", lines.join("\n"));
    assert!(lines.iter().any(|l| l == "Vote from 5551234567 for contestant 1: counted."));
    assert!(lines.iter().any(|l| l == "│ Tabatha Gehling ┆ 2                 ┆ 6           │"), "{}", lines.join("\n"));
    // SIGTERM to the script alone stops it the same way.
    // SAFETY: kill(2) on the script's own pid; no memory is shared.
    assert_eq!(unsafe { libc::kill(again.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(again.wait().expect("wait").code(), Some(0));
}

/// Waits for a child that should end by itself, killing it if it does not within a minute;
/// returns its status and its stderr.
trait WaitOrKill {
    fn wait_with_output_or_kill(&mut self) -> (std::process::ExitStatus, String);
}

impl WaitOrKill for Child {
    fn wait_with_output_or_kill(&mut self) -> (std::process::ExitStatus, String) {
        const WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(60);
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.try_wait().expect("poll the child") {
                let mut err = String::new();
                if let Some(e) = self.stderr.as_mut() {
                    std::io::Read::read_to_string(e, &mut err).expect("read stderr");
                }
                return (status, err);
            }
            if started.elapsed() > WAIT_MAX {
                let _ = self.kill();
                panic!("the child did not end within {WAIT_MAX:?}");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}
