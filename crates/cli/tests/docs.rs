//! The README and the user guide stay true: their `console` blocks run against a real
//! server and must print what they show, the code they show is the code the tests compile,
//! and their TOML examples are configurations the server accepts.
//!
//! A ```console block holds commands after a `$ ` prompt (a line ending in `\` goes on on
//! the next), each followed by the output it must print, stdout and stderr together; a line
//! `...` stands for any number of lines. A command shown without output must succeed. The
//! commands run with bash, in a scratch directory that holds the repository's `apps` and
//! `docs`, against a server of their own (one per Markdown file, 2 sites), with `lockstep`
//! on the PATH pointing at it. Set LOCKSTEP_DOCS_BLESS=1 to write what the commands print
//! into the files instead (review the diff), and put `(output)` under a new command to
//! have it filled in.
//!
//! A block right after a line `<!-- file: PATH -->` is written to PATH in the scratch
//! directory before the document's commands run (a procedure the text shows, say). A block
//! right after a line `<!-- same as PATH -->` must be exactly the file PATH (from the
//! repository root): the Java and Rust client examples are files that the Java suite and
//! `readme_rust_client_example_votes` compile and run. One after `<!-- part of PATH -->`
//! must appear, as a whole, in that file. TOML examples must be configurations the server
//! accepts, except Cargo manifests (with a `[dependencies]` table), which must be TOML.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{repo_root, Server, TempDir, BIN};

/// The files whose examples are checked.
fn documents() -> Vec<PathBuf> {
    let root = repo_root();
    let mut docs = vec![root.join("README.md"), root.join("apps/voter/README.md")];
    let guide = root.join("docs/guide");
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&guide)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", guide.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// A fenced block: its info string, the line of its first content line, its text, and the
/// comment line just before its fence (if any).
#[derive(Debug)]
struct Block {
    info: String,
    first_line: usize,
    lines: Vec<String>,
    note: Option<String>,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut current: Option<Block> = None;
    let mut previous = "";
    for (n, line) in text.lines().enumerate() {
        match current.as_mut() {
            Some(_) if line.trim_start().starts_with("```") => out.extend(current.take()),
            Some(b) => b.lines.push(line.to_string()),
            None if line.trim_start().starts_with("```") => {
                let note = previous.trim().strip_prefix("<!--").and_then(|s| s.strip_suffix("-->")).map(|s| s.trim().to_string());
                let info = line.trim_start().trim_start_matches('`').trim().to_string();
                current = Some(Block { info, first_line: n + 2, lines: Vec::new(), note });
            }
            None => {}
        }
        previous = line;
    }
    assert!(current.is_none(), "a fenced block is not closed");
    out
}

/// One command of a console block and the output shown under it.
#[derive(Debug)]
struct Step {
    command: String,
    /// Line numbers (1-based) of the expected output in the file: [from, to).
    output_lines: (usize, usize),
    expected: Vec<String>,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let mut continuing = false;
    for (k, line) in block.lines.iter().enumerate() {
        let n = block.first_line + k;
        if continuing {
            let step = out.last_mut().expect("a command being continued");
            step.command.push('\n');
            step.command.push_str(line);
            continuing = line.ends_with('\\');
            step.output_lines = (n + 1, n + 1);
        } else if let Some(cmd) = line.strip_prefix("$ ") {
            continuing = cmd.ends_with('\\');
            out.push(Step { command: cmd.to_string(), output_lines: (n + 1, n + 1), expected: Vec::new() });
        } else {
            let step = out.last_mut().unwrap_or_else(|| panic!("line {n}: output before any `$ ` command"));
            step.expected.push(line.to_string());
            step.output_lines.1 = n + 1;
        }
    }
    out
}

/// Whether `actual` is what `expected` shows, `...` lines matching any run of lines.
fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e == "..." => (0..=actual.len()).any(|skip| matches(rest, &actual[skip..])),
        Some((e, rest)) => actual.split_first().is_some_and(|(a, more)| a == e && matches(rest, more)),
    }
}

fn normalize(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(|l| l.trim_end().to_string()).collect();
    while lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    lines
}

/// A scratch directory with the repository's `apps` and `docs`, and `bin/lockstep`, which
/// sends `sql`, `snapshot` and `load` to `addr` and refuses to start a second server.
fn workdir(addr: &str) -> TempDir {
    let dir = TempDir::new("docs");
    for name in ["apps", "docs"] {
        std::os::unix::fs::symlink(repo_root().join(name).canonicalize().expect("repository path"), dir.0.join(name)).expect("symlink");
    }
    let bin = dir.0.join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    let wrapper = format!(
        "#!/bin/sh\n\
         case \"$1\" in\n\
         sql|snapshot) sub=$1; shift; exec '{BIN}' \"$sub\" --server {addr} \"$@\" ;;\n\
         load) case \" $* \" in *' --help '*) exec '{BIN}' \"$@\" ;; esac\n\
         sub=$2; shift 2; exec '{BIN}' load \"$sub\" --server {addr} \"$@\" ;;\n\
         server) case \" $* \" in *' --help '*) exec '{BIN}' \"$@\" ;; esac\n\
         echo 'docs test: a console block cannot start a server; show that in a sh block' >&2; exit 2 ;;\n\
         *) exec '{BIN}' \"$@\" ;;\n\
         esac\n"
    );
    let path = bin.join("lockstep");
    std::fs::write(&path, wrapper).expect("write wrapper");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod wrapper");
    dir
}

/// Writes the document's `<!-- file: PATH -->` blocks into `dir`.
fn write_files(text: &str, dir: &Path) {
    for b in blocks(text) {
        let Some(path) = b.note.as_deref().and_then(|n| n.strip_prefix("file:")) else { continue };
        let path = dir.join(path.trim());
        assert!(path.starts_with(dir) && !path.components().any(|c| c == std::path::Component::ParentDir), "{}", path.display());
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the file's directory");
        std::fs::write(&path, b.lines.join("\n") + "\n").expect("write the example file");
    }
}

/// Runs one command as a user would type it; returns (succeeded, stdout and stderr).
fn run(command: &str, dir: &Path) -> (bool, String) {
    let path = format!("{}:{}", dir.join("bin").display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("{{\n{command}\n}} 2>&1"))
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("LOCKSTEP_PASSWORD")
        .stdin(Stdio::null())
        .output()
        .expect("run bash");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Starts a quiet server (warnings and errors only) for one document.
fn quiet_server(data: &Path) -> Server {
    let child = Command::new(BIN)
        .args(["server", "--listen", "127.0.0.1:0", "--http", "off", "--pg", "off", "--sites", "2", "--data"])
        .arg(data)
        .env("LOCKSTEP_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start lockstep server");
    Server::from_child(child, data)
}

#[test]
fn console_examples_in_the_docs_print_what_they_show() {
    let bless = std::env::var_os("LOCKSTEP_DOCS_BLESS").is_some();
    let mut failures = Vec::new();
    let mut ran = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("cannot read {}: {e}", doc.display()));
        let console: Vec<Block> = blocks(&text).into_iter().filter(|b| b.info == "console").collect();
        if console.is_empty() {
            continue;
        }
        let data = TempDir::new("docs-data");
        let server = quiet_server(&data.0);
        let dir = workdir(&server.addr);
        write_files(&text, &dir.0);
        // Replacement output by line range, for LOCKSTEP_DOCS_BLESS.
        let mut blessed: BTreeMap<(usize, usize), Vec<String>> = BTreeMap::new();
        for step in console.iter().flat_map(steps) {
            ran += 1;
            let (ok, output) = run(&step.command, &dir.0);
            let actual = normalize(&output);
            let expected = normalize(&step.expected.join("\n"));
            let good = if expected.is_empty() { ok } else { expected != ["(output)"] && matches(&expected, &actual) };
            if good {
                continue;
            }
            if bless && !expected.is_empty() {
                blessed.insert(step.output_lines, actual);
                continue;
            }
            failures.push(format!(
                "{}:{}: $ {}\n--- shown\n{}\n--- printed{}\n{}",
                doc.display(),
                step.output_lines.0 - 1,
                step.command,
                expected.join("\n"),
                if ok { "" } else { " (and failed)" },
                actual.join("\n")
            ));
        }
        drop(server);
        if !blessed.is_empty() {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for ((from, to), new) in blessed.into_iter().rev() {
                lines.splice(from - 1..to - 1, new);
            }
            std::fs::write(&doc, lines.join("\n") + "\n").expect("write blessed document");
            eprintln!("LOCKSTEP_DOCS_BLESS: rewrote outputs in {}", doc.display());
        }
    }
    assert!(ran > 0, "no console examples found");
    assert!(
        failures.is_empty(),
        "{} example(s) print something else (LOCKSTEP_DOCS_BLESS=1 rewrites them):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn code_shown_in_the_docs_is_the_code_the_tests_compile() {
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read document");
        for b in blocks(&text) {
            let note = b.note.as_deref().unwrap_or("");
            let (whole, path) = match (note.strip_prefix("same as "), note.strip_prefix("part of ")) {
                (Some(p), _) => (true, p.trim()),
                (None, Some(p)) => (false, p.trim()),
                (None, None) => continue,
            };
            let file = repo_root().join(path);
            let source =
                std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: cannot read {}: {e}", doc.display(), file.display()));
            let shown = b.lines.join("\n");
            if whole {
                assert_eq!(
                    shown.trim_end(),
                    source.trim_end(),
                    "{}:{}: the block differs from {path}; copy the file into the document",
                    doc.display(),
                    b.first_line
                );
            } else {
                assert!(source.contains(shown.trim_end()), "{}:{}: the block is not in {path} as shown", doc.display(), b.first_line);
            }
            checked += 1;
        }
    }
    assert!(checked >= 5, "expected Vote, its DDL, and the Java, JDBC and Rust examples, found {checked}");
}

#[test]
fn toml_examples_in_the_docs_are_accepted_by_the_server() {
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("read document");
        for b in blocks(&text).into_iter().filter(|b| b.info == "toml") {
            let text = b.lines.join("\n");
            if b.lines.iter().any(|l| l.trim() == "[dependencies]") {
                let manifest: Result<toml::Table, _> = toml::from_str(&text);
                assert!(manifest.is_ok(), "{}:{}: the Cargo manifest is not TOML: {manifest:?}", doc.display(), b.first_line);
                continue;
            }
            let parsed: Result<lockstep_server::config::FileConfig, _> = toml::from_str(&text);
            if let Err(e) = parsed {
                panic!("{}:{}: the TOML example is not a valid configuration: {e}", doc.display(), b.first_line);
            }
            checked += 1;
        }
    }
    assert!(checked >= 2, "expected the README's and the configuration page's TOML examples, found {checked}");
}

/// The VoltDB client version the README says was tested is the one the Java suite uses.
#[test]
fn the_readme_names_the_java_client_version_the_suite_tests() {
    let pom = std::fs::read_to_string(repo_root().join("compat/java/pom.xml")).expect("read pom.xml");
    let version =
        pom.split("<voltdbclient.version>").nth(1).and_then(|s| s.split('<').next()).expect("voltdbclient.version in compat/java/pom.xml");
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("read README.md");
    assert!(readme.contains(&format!("org.voltdb:voltdbclient:{version}")), "README.md does not name voltdbclient {version}");
    let flag = "--add-opens java.base/sun.nio.ch=ALL-UNNAMED";
    assert!(pom.contains(flag) && readme.contains(flag), "README.md and pom.xml must both carry {flag}");
}

/// The guide's table of system procedures is the server's (`sysproc_table`): the same
/// procedures, parameters, callers and threads, in the same order.
#[test]
fn the_guides_system_procedure_table_is_the_servers() {
    use lockstep_engine::auth::SysAccess;
    use lockstep_engine::sysproc_table::SYSTEM_PROCEDURES;
    let guide = std::fs::read_to_string(repo_root().join("docs/guide/monitoring.md")).expect("read monitoring.md");
    let documented: Vec<Vec<String>> = guide
        .lines()
        .filter(|l| l.starts_with("| `@"))
        .map(|l| l.replace("\\|", "¦").split('|').skip(1).take(4).map(|c| c.trim().replace('¦', "|")).collect())
        .collect();
    let served: Vec<Vec<String>> = SYSTEM_PROCEDURES
        .iter()
        .map(|s| {
            let who = match s.access {
                SysAccess::AnyUser => "any user",
                SysAccess::Admin => "ADMIN",
                SysAccess::BySql => "by its SQL",
            };
            vec![format!("`{}`", s.name), s.params.to_string(), who.to_string(), s.answered_by.describe().to_string()]
        })
        .collect();
    assert_eq!(documented, served, "docs/guide/monitoring.md's system procedures differ from crates/engine/src/sysproc_table.rs");
}

#[allow(dead_code)]
#[path = "snippets/voter_client.rs"]
mod voter_client;

/// The README's Rust client example, against a server with Voter loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_rust_client_example_votes() {
    let data = TempDir::new("docs-rust");
    let server = quiet_server(&data.0);
    let ddl = repo_root().join("apps/voter/ddl.sql");
    let out = server.sql(&["-f", ddl.to_str().expect("path")]);
    assert!(out.status.success(), "loading voter failed: {}", String::from_utf8_lossy(&out.stderr));
    let out =
        server.sql(&["-c", "exec Initialize 6 'Edwina Burnam,Tabatha Gehling,Kelly Clauss,Jessie Alloway,Alana Bregman,Jessie Eichman'"]);
    assert!(out.status.success());
    voter_client::vote_and_print(&server.addr).await.expect("the example runs");
    let client = server.client().await;
    let votes = common::adhoc(&client, "SELECT COUNT(*) FROM votes WHERE phone_number = 5550001234").await;
    assert_eq!(common::scalar(&votes), lockstep_core::Value::Int(1), "the example's vote was counted");
}
