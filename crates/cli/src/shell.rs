//! `lockstep sql`: a sqlcmd-like shell. Reads statements interactively (with history), from
//! `-c` strings, from a `-f` file or from piped stdin, sends them to the server and prints
//! the results as a table, CSV or JSON.

mod args;
mod output;
mod split;

use std::io::{BufRead, IsTerminal};
use std::path::{Path, PathBuf};

/// Writes to stdout; a reader that went away (`lockstep sql … | head`) ends the shell
/// quietly, as it ends any Unix tool, rather than with a panic.
macro_rules! out {
    ($($arg:tt)*) => { crate::shell::write_out(format_args!($($arg)*)) };
}
macro_rules! outln {
    ($($arg:tt)*) => { crate::shell::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

use lockstep_client::{status, Client, ClientConfig, Response};
use lockstep_core::{ResultTable, Value};

pub use output::Format;
use split::{Item, Splitter};

/// Largest script file the shell reads.
pub const SCRIPT_FILE_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// Deepest nesting of `file` directives (a file that includes itself stops here).
pub const FILE_NESTING_MAX: u32 = 16;
/// Lines read ahead from piped stdin.
const STDIN_LINES_QUEUED_MAX: usize = 256;
/// Characters of a statement quoted in an error message.
const PREVIEW_CHARS: usize = 60;

const HELP: &str = "\
Statements end with ';' and may span lines. Other commands are one line:
  exec PROC [args...]         call a procedure; args: numbers, 'strings', NULL
  explain SQL;                show the plan of a statement
  show tables | show procedures
  file PATH                   run the statements in a file
  file -inlinebatch END       run the lines up to a line END
  help                        this text
  quit | exit                 leave the shell
";

/// Options of `lockstep sql`.
#[derive(Clone, Debug)]
pub struct ShellOptions {
    /// Server address, host:port.
    pub server: String,
    /// Statements given with -c, run in order.
    pub commands: Vec<String>,
    /// A script given with -f.
    pub file: Option<PathBuf>,
    pub format: Format,
    /// User, password and TLS.
    pub client: ClientConfig,
}

impl Default for ShellOptions {
    fn default() -> Self {
        ShellOptions {
            server: "127.0.0.1:21212".into(),
            commands: Vec::new(),
            file: None,
            format: Format::Table,
            client: ClientConfig::default(),
        }
    }
}

/// Runs the shell; returns the process exit code (0 when every statement succeeded).
pub async fn run(opts: ShellOptions) -> i32 {
    let client = match Client::connect(&opts.server, opts.client.clone()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot connect to {}: {e}", opts.server);
            return 1;
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let mut shell = Shell { client, format: opts.format, failed: false };
    if let Some(file) = &opts.file {
        shell.run_file(file, &cwd, 0).await;
    } else if !opts.commands.is_empty() {
        for (n, text) in opts.commands.iter().enumerate() {
            let mut ctx = Ctx::script(format!("-c #{}", n + 1), cwd.clone(), 0);
            if shell.run_text(text, &mut ctx).await == Flow::Quit {
                break;
            }
        }
    } else if std::io::stdin().is_terminal() {
        shell.interactive(&opts.server, cwd).await;
    } else {
        shell.run_stdin(cwd).await;
    }
    i32::from(shell.failed)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

/// Where statements come from: for messages, relative paths and error policy.
struct Ctx {
    source: String,
    base_dir: PathBuf,
    depth: u32,
    /// Scripts stop at the first error; the interactive shell carries on.
    stop_on_error: bool,
    statement: usize,
}

impl Ctx {
    fn script(source: String, base_dir: PathBuf, depth: u32) -> Ctx {
        Ctx { source, base_dir, depth, stop_on_error: true, statement: 0 }
    }
}

struct Shell {
    client: Client,
    format: Format,
    failed: bool,
}

fn preview(item: &Item) -> String {
    let text = match item {
        Item::Sql(s) | Item::Directive(s) => s.as_str(),
        Item::InlineBatch(_) => "file -inlinebatch",
    };
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(PREVIEW_CHARS) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

fn first_word(s: &str) -> String {
    s.split_whitespace().next().unwrap_or("").to_ascii_lowercase()
}

impl Shell {
    /// Runs one item, reporting a failure; Quit on `quit` or on an error in a script.
    async fn execute(&mut self, item: Item, ctx: &mut Ctx) -> Flow {
        ctx.statement += 1;
        let what = preview(&item);
        let result = match item {
            Item::Sql(sql) => self.exec_sql(&sql, ctx).await,
            Item::Directive(d) => self.exec_directive(&d, ctx).await,
            Item::InlineBatch(text) => {
                let mut inner = Ctx::script(ctx.source.clone(), ctx.base_dir.clone(), ctx.depth + 1);
                inner.stop_on_error = ctx.stop_on_error;
                let flow = Box::pin(self.run_text(&text, &mut inner)).await;
                Ok(flow)
            }
        };
        match result {
            Ok(flow) => flow,
            Err(msg) => {
                self.failed = true;
                if ctx.stop_on_error {
                    eprintln!("ERROR in statement {} of {} ({what}): {msg}", ctx.statement, ctx.source);
                    Flow::Quit
                } else {
                    eprintln!("ERROR: {msg}");
                    Flow::Continue
                }
            }
        }
    }

    async fn run_text(&mut self, text: &str, ctx: &mut Ctx) -> Flow {
        let mut splitter = Splitter::new();
        for line in text.lines() {
            for item in splitter.push_line(line) {
                if self.execute(item, ctx).await == Flow::Quit {
                    return Flow::Quit;
                }
            }
        }
        match splitter.finish() {
            Some(item) => self.execute(item, ctx).await,
            None => Flow::Continue,
        }
    }

    async fn run_file(&mut self, path: &Path, base_dir: &Path, depth: u32) -> Flow {
        let path = base_dir.join(path);
        let text = match read_script(&path, depth) {
            Ok(t) => t,
            Err(msg) => {
                eprintln!("ERROR: {msg}");
                self.failed = true;
                return Flow::Quit;
            }
        };
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        let mut ctx = Ctx::script(path.display().to_string(), dir, depth);
        Box::pin(self.run_text(&text, &mut ctx)).await
    }

    async fn run_stdin(&mut self, cwd: PathBuf) {
        let mut ctx = Ctx::script("stdin".into(), cwd, 0);
        // Lines are read on a blocking thread and handed over one by one, so a long pipe
        // is processed as it arrives.
        let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<String>>(STDIN_LINES_QUEUED_MAX);
        tokio::task::spawn_blocking(move || {
            for line in std::io::stdin().lock().lines() {
                if tx.blocking_send(line).is_err() {
                    return;
                }
            }
        });
        let mut splitter = Splitter::new();
        while let Some(line) = rx.recv().await {
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("ERROR: reading stdin: {e}");
                    self.failed = true;
                    return;
                }
            };
            for item in splitter.push_line(&line) {
                if self.execute(item, &mut ctx).await == Flow::Quit {
                    return;
                }
            }
        }
        if let Some(item) = splitter.finish() {
            self.execute(item, &mut ctx).await;
        }
    }

    async fn interactive(&mut self, server: &str, cwd: PathBuf) {
        let mut editor = match rustyline::DefaultEditor::new() {
            Ok(e) => e,
            Err(e) => {
                eprintln!("ERROR: cannot start the line editor: {e}");
                self.failed = true;
                return;
            }
        };
        let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".lockstep_history"));
        if let Some(h) = &history {
            let _ = editor.load_history(h); // a missing history file is normal
        }
        outln!("Connected to {server} ({}). Type help for help, quit to leave.", self.client.build_string());
        let mut ctx = Ctx { source: "input".into(), base_dir: cwd, depth: 0, stop_on_error: false, statement: 0 };
        let mut splitter = Splitter::new();
        'read: loop {
            let prompt = if splitter.is_idle() { "lockstep> " } else { "       -> " };
            // The editor blocks on the terminal, so it runs off the async worker threads.
            let read = tokio::task::spawn_blocking(move || {
                let line = editor.readline(prompt);
                (editor, line)
            })
            .await;
            let Ok((e, line)) = read else { return };
            editor = e;
            match line {
                Ok(line) => {
                    if !line.trim().is_empty() {
                        let _ = editor.add_history_entry(line.as_str());
                    }
                    for item in splitter.push_line(&line) {
                        if self.execute(item, &mut ctx).await == Flow::Quit {
                            break 'read;
                        }
                    }
                }
                // Ctrl-C abandons the statement being typed; Ctrl-D leaves.
                Err(rustyline::error::ReadlineError::Interrupted) => splitter = Splitter::new(),
                Err(rustyline::error::ReadlineError::Eof) => break,
                Err(e) => {
                    eprintln!("ERROR: {e}");
                    break;
                }
            }
        }
        if let Some(h) = &history {
            let _ = editor.save_history(h);
        }
    }

    async fn exec_sql(&mut self, sql: &str, ctx: &Ctx) -> Result<Flow, String> {
        if first_word(sql) == "explain" {
            let rest = sql.trim_start()[7..].trim().to_string();
            let resp = self.call("@Explain", vec![Value::Str(rest.into())]).await?;
            self.print(&resp)?;
            return Ok(Flow::Continue);
        }
        let sql = args::inline_procedure_source(sql, &ctx.base_dir)?;
        let resp = self.call("@AdHoc", vec![Value::Str(sql.into())]).await?;
        self.print(&resp)?;
        Ok(Flow::Continue)
    }

    async fn exec_directive(&mut self, d: &str, ctx: &Ctx) -> Result<Flow, String> {
        let words: Vec<&str> = d.split_whitespace().collect();
        let arg = |i: usize| words.get(i).map(|w| w.to_ascii_lowercase()).unwrap_or_default();
        match arg(0).as_str() {
            "help" => out!("{HELP}"),
            "quit" | "exit" => return Ok(Flow::Quit),
            "exec" | "execute" => {
                let rest = d.trim_start()[words[0].len()..].trim_start();
                let name_end = rest.find(|c: char| c.is_whitespace() || c == ',').unwrap_or(rest.len());
                let (name, args) = rest.split_at(name_end);
                if name.is_empty() {
                    return Err("usage: exec PROCEDURE [arguments]".into());
                }
                let params = args::parse_exec_args(args)?;
                let resp = self.call(name, params).await?;
                self.print(&resp)?;
            }
            "show" => match arg(1).as_str() {
                "tables" => self.show("TABLES", &["TABLE_NAME", "TABLE_TYPE", "REMARKS"]).await?,
                "procedures" | "procs" => self.show("PROCEDURES", &["PROCEDURE_NAME", "REMARKS"]).await?,
                "classes" => eprintln!("Lockstep has no Java classes; procedures are Lua files."),
                other => return Err(format!("unknown: show {other} (try show tables or show procedures)")),
            },
            "file" => {
                let path = match (words.get(1), words.get(2)) {
                    (Some(flag), Some(p)) if flag.starts_with('-') => p,
                    (Some(p), None) => p,
                    _ => return Err("usage: file PATH or file -inlinebatch END".into()),
                };
                let path = path.trim_matches('\'').trim_matches('"');
                if self.run_file(Path::new(path), &ctx.base_dir, ctx.depth + 1).await == Flow::Quit && self.failed {
                    return Err(format!("file {path} failed"));
                }
            }
            "load" | "remove" if arg(1) == "classes" => eprintln!(
                "Notice: Java classes are not loaded by Lockstep; a procedure declared FROM CLASS a.b.Name \
                 is bound to Name.lua on the procedure path."
            ),
            other => return Err(format!("unknown command {other:?}; type help")),
        }
        Ok(Flow::Continue)
    }

    /// `show …`: the named columns of an `@SystemCatalog` selector.
    async fn show(&mut self, selector: &str, columns: &[&str]) -> Result<(), String> {
        let resp = self.call("@SystemCatalog", vec![Value::from(selector)]).await?;
        check(&resp)?;
        let Some(t) = resp.tables.first() else {
            return Err(format!("@SystemCatalog {selector} returned no table"));
        };
        let idx: Vec<usize> = columns.iter().filter_map(|c| t.column_index(c)).collect();
        let mut out = ResultTable::new(idx.iter().map(|&i| t.columns[i].clone()).collect::<Vec<_>>());
        for row in &t.rows {
            out.push(idx.iter().map(|&i| row[i].clone()).collect());
        }
        if let Some(text) = output::render(&out, self.format) {
            out!("{text}");
        }
        Ok(())
    }

    async fn call(&self, proc: &str, params: Vec<Value>) -> Result<Response, String> {
        self.client.call(proc, params).await.map_err(|e| e.to_string())
    }

    /// Prints a response's tables, or returns the server's message for a failure.
    fn print(&self, resp: &Response) -> Result<(), String> {
        check(resp)?;
        // DDL answers with what it did in the status string (and a zero count per statement).
        if let (Some(msg), Format::Table) = (&resp.status_string, self.format) {
            outln!("{msg}");
            return Ok(());
        }
        if resp.tables.is_empty() && self.format == Format::Table {
            outln!("Command succeeded.");
        }
        for t in &resp.tables {
            if let Some(text) = output::render(t, self.format) {
                out!("{text}");
            }
        }
        Ok(())
    }
}

fn check(resp: &Response) -> Result<(), String> {
    if resp.status == status::SUCCESS {
        return Ok(());
    }
    Err(resp.status_string.clone().unwrap_or_else(|| format!("the call failed with status {}", resp.status)))
}

fn read_script(path: &Path, depth: u32) -> Result<String, String> {
    if depth > FILE_NESTING_MAX {
        return Err(format!("files nested more than {FILE_NESTING_MAX} deep (does {} include itself?)", path.display()));
    }
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.len() > SCRIPT_FILE_MAX_BYTES {
        return Err(format!("{} is larger than {SCRIPT_FILE_MAX_BYTES} bytes", path.display()));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

pub(crate) fn write_out(text: std::fmt::Arguments) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
}
