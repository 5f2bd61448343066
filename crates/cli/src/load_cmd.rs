//! `lockstep load csv`: reads CSV files line by line, converts each value by the type of
//! the column (or procedure parameter) it goes to, and inserts the rows with many calls in
//! flight, each routed to its partition. A row that cannot be converted is rejected here,
//! with its line number and the reason, and never sent; a row the server refuses is
//! rejected with the server's message. Every line is either inserted or reported.
//! `lockstep load kafka` (load_kafka.rs) shares the conversion, the rejects file and the
//! target's description with it.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lockstep_bench::conn::LoginArgs;
use lockstep_client::{status, Client, ClientError, Response};
use lockstep_core::{DataType, Value};

/// How often the progress line on a terminal is redrawn.
pub(crate) const PROGRESS_INTERVAL_MS: u64 = 1000;
/// Calls in flight at once when `--batch` is not given.
pub(crate) const BATCH_DEFAULT: usize = 1000;
/// Upper bound of `--batch` (the server's site queues hold 65,536 calls each).
pub(crate) const BATCH_MAX: usize = 16_384;
/// The longest line a file may have (a row of VoltDB's largest values fits many times).
const LINE_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Rejected rows after which the load stops when `--maxerrors` is not given.
pub(crate) const MAX_ERRORS_DEFAULT: u64 = 100;
/// Worker threads of the loader's runtime: the connections' readers and writers run there
/// while this thread parses.
pub(crate) const RUNTIME_THREADS: usize = 2;
/// Start size of the buffer a line's unquoted fields are written into; it grows as needed.
const FIELD_BUFFER_START_BYTES: usize = 1024;
/// Start count of field ends per line; grows as needed.
const FIELD_ENDS_START: usize = 32;

/// Exit status when every row read was inserted.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status when some rows were rejected (by this loader or by the server).
pub(crate) const EXIT_REJECTED: u8 = 1;
/// Exit status when the load could not run or the connection failed.
pub(crate) const EXIT_FAILED: u8 = 2;

#[derive(clap::Args)]
pub struct LoadArgs {
    #[command(subcommand)]
    format: LoadFormat,
}

#[derive(clap::Subcommand)]
enum LoadFormat {
    /// Load CSV files into a table (its default insert procedure, T.insert) or through a
    /// procedure. Each line is one row; a value is converted by its column's type before it
    /// is sent, so a bad value is rejected with its line number and never reaches the
    /// server. Exit status: 0 when every row was inserted, 1 when some were rejected, 2
    /// when the load could not run or the server connection failed.
    Csv(CsvArgs),
    /// Consume a Kafka topic into a table or through a procedure: each message is one row
    /// (a JSON object by column name, or a CSV line with --format csv). The topic's
    /// positions are kept in the server (table LOCKSTEP_KAFKA_OFFSETS) and move only after
    /// the server acknowledged the rows; a run resumes where the last one stopped. Exit
    /// status as for csv.
    Kafka(crate::load_kafka::KafkaArgs),
}

#[derive(clap::Args)]
struct CsvArgs {
    /// CSV files to load, in order (`-` reads standard input). Each line is one row; blank
    /// lines are skipped.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// The table to load; rows go through its default insert procedure (TABLE.insert).
    #[arg(long, required_unless_present = "procedure")]
    table: Option<String>,
    /// Call this procedure once per row instead, the row's values as its parameters.
    #[arg(long)]
    procedure: Option<String>,
    /// Server address(es), host:port, comma-separated for the nodes of a cluster (each row
    /// goes to the node that leads its partition).
    #[arg(long, default_value = "127.0.0.1:21212")]
    server: String,
    /// Field separator (one character).
    #[arg(long, default_value = ",")]
    separator: char,
    /// Quote character: a quoted field may hold separators and doubled quotes.
    #[arg(long, default_value = "\"")]
    quotechar: char,
    /// Escape character inside quoted fields (`\"` is a quote).
    #[arg(long, default_value = "\\")]
    escape: char,
    /// Lines to skip at the start of each file (before the header line, if any).
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// A field equal to this string is NULL (besides an empty field of a non-string
    /// column and `\N`, which always are).
    #[arg(long)]
    nullstring: Option<String>,
    /// Calls kept in flight at once.
    #[arg(long, default_value_t = BATCH_DEFAULT)]
    batch: usize,
    /// Load at most this many rows (in all files together).
    #[arg(long)]
    limit: Option<u64>,
    /// Stop once this many rows have been rejected (0: never stop).
    #[arg(long, default_value_t = MAX_ERRORS_DEFAULT)]
    maxerrors: u64,
    /// Write the rejected rows into this directory, as <TABLE>_rejects.txt (or
    /// <PROCEDURE>_rejects.txt).
    #[arg(long, value_name = "DIR", conflicts_with = "rejects")]
    reportdir: Option<PathBuf>,
    /// Write the rejected rows into this file: one line each, `FILE:LINE<TAB>REASON<TAB>ROW`
    /// (default: standard error).
    #[arg(long, value_name = "FILE")]
    rejects: Option<PathBuf>,
    /// The first line of each file (after --skip) names the columns its fields go to;
    /// columns it does not name are NULL.
    #[arg(long)]
    header: bool,
    /// --user, --password, --tls, --tls-ca: for a server with security or TLS on.
    #[command(flatten)]
    login: LoginArgs,
}

pub fn run(args: LoadArgs) -> ExitCode {
    let args = match args.format {
        LoadFormat::Csv(args) => args,
        LoadFormat::Kafka(args) => return crate::load_kafka::run(args),
    };
    run_load(load_csv(&args))
}

/// Runs a load on its own runtime; its error is printed and exits with `EXIT_FAILED`.
pub(crate) fn run_load(load: impl std::future::Future<Output = Result<u8, String>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(RUNTIME_THREADS).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    let code = runtime.block_on(async {
        match load.await {
            Ok(code) => code,
            Err(message) => {
                eprintln!("error: {message}");
                EXIT_FAILED
            }
        }
    });
    ExitCode::from(code)
}

/// One column (or parameter) a row's fields are converted for.
#[derive(Clone, Debug)]
pub(crate) struct Column {
    pub(crate) name: String,
    /// None when the type is not known (a procedure whose parameters the catalog does not
    /// list): the value is sent as a string and the server converts it.
    pub(crate) ty: Option<DataType>,
    pub(crate) nullable: bool,
}

/// What a row is inserted with: the procedure and its parameters, in order.
pub(crate) struct Target {
    pub(crate) procedure: String,
    pub(crate) columns: Vec<Column>,
    /// A name for the rejects file.
    pub(crate) label: String,
}

/// Reads the table's columns (or the procedure's parameters) from the server's catalog.
pub(crate) async fn describe_target(client: &Client, table: Option<&str>, procedure: Option<&str>) -> Result<Target, String> {
    match (table, procedure) {
        (_, Some(p)) => {
            let table = catalog(client, "PROCEDURECOLUMNS").await?;
            let mut params: Vec<(i64, Column)> = Vec::new();
            let mut found = None;
            for row in &table.rows {
                let name = cell_str(row, 2);
                if !name.eq_ignore_ascii_case(p) {
                    continue;
                }
                found = Some(name.to_string());
                let column = Column { name: cell_str(row, 3).to_string(), ty: type_named(cell_str(row, 6)), nullable: true };
                params.push((cell_int(row, 17), column));
            }
            params.sort_by_key(|(ordinal, _)| *ordinal);
            let procedure = found.unwrap_or_else(|| p.to_string());
            Ok(Target { label: procedure.clone(), procedure, columns: params.into_iter().map(|(_, c)| c).collect() })
        }
        (Some(t), None) => {
            let table = catalog(client, "COLUMNS").await?;
            let mut cols: Vec<(i64, Column)> = Vec::new();
            let mut found = None;
            for row in &table.rows {
                let name = cell_str(row, 2);
                if !name.eq_ignore_ascii_case(t) {
                    continue;
                }
                found = Some(name.to_string());
                let ty = type_named(cell_str(row, 5));
                if ty.is_none() {
                    return Err(format!(
                        "column {} of {name} has type {}, which the loader cannot convert",
                        cell_str(row, 3),
                        cell_str(row, 5)
                    ));
                }
                let column = Column { name: cell_str(row, 3).to_string(), ty, nullable: cell_int(row, 10) != 0 };
                cols.push((cell_int(row, 16), column));
            }
            let name =
                found.ok_or_else(|| format!("the server has no table {t} (see `lockstep sql -c \"exec @SystemCatalog TABLES\"`)"))?;
            cols.sort_by_key(|(ordinal, _)| *ordinal);
            Ok(Target { procedure: format!("{name}.insert"), label: name, columns: cols.into_iter().map(|(_, c)| c).collect() })
        }
        (None, None) => Err("give --table or --procedure".into()),
    }
}

pub(crate) async fn catalog(client: &Client, selector: &str) -> Result<lockstep_core::ResultTable, String> {
    let r = client.call("@SystemCatalog", vec![Value::from(selector)]).await.map_err(|e| format!("cannot read the catalog: {e}"))?;
    if r.status != status::SUCCESS {
        return Err(format!("cannot read the catalog: {}", r.status_string.unwrap_or_default()));
    }
    r.tables.into_iter().next().ok_or_else(|| "the catalog answer has no table".to_string())
}

pub(crate) fn cell_str(row: &[Value], i: usize) -> &str {
    match row.get(i) {
        Some(Value::Str(s)) => s.as_str(),
        _ => "",
    }
}

fn cell_int(row: &[Value], i: usize) -> i64 {
    row.get(i).and_then(Value::as_i64).unwrap_or(0)
}

/// The type a catalog's TYPE_NAME names.
fn type_named(name: &str) -> Option<DataType> {
    use DataType::*;
    [TinyInt, SmallInt, Integer, BigInt, Float, Decimal, Varchar, Varbinary, Timestamp, Boolean]
        .into_iter()
        .find(|t| t.sql_name().eq_ignore_ascii_case(name))
}

/// Splits one line into fields with the csv crate's parser (csv-core). A line is one
/// record: a quote left open at the end of a line rejects that line, instead of swallowing
/// the lines after it into one value.
pub(crate) struct LineParser {
    reader: csv_core::Reader,
    out: Vec<u8>,
    ends: Vec<usize>,
}

impl LineParser {
    fn new(args: &CsvArgs) -> Result<LineParser, String> {
        Self::with(args.separator, args.quotechar, args.escape)
    }

    /// A parser of these separator, quote and escape characters.
    pub(crate) fn with(separator: char, quotechar: char, escape: char) -> Result<LineParser, String> {
        let byte = |c: char, what: &str| -> Result<u8, String> {
            u8::try_from(u32::from(c)).ok().filter(u8::is_ascii).ok_or_else(|| format!("--{what} must be one ASCII character, not {c:?}"))
        };
        let reader = csv_core::ReaderBuilder::new()
            .delimiter(byte(separator, "separator")?)
            .quote(byte(quotechar, "quotechar")?)
            .escape(Some(byte(escape, "escape")?))
            .double_quote(true)
            .build();
        Ok(LineParser { reader, out: vec![0; FIELD_BUFFER_START_BYTES], ends: vec![0; FIELD_ENDS_START] })
    }

    /// The fields of `line` (which ends with its newline), or why it is malformed.
    pub(crate) fn parse<'a>(&'a mut self, line: &[u8]) -> Result<Vec<&'a str>, String> {
        self.reader.reset();
        let (mut read, mut written, mut nends) = (0, 0, 0);
        loop {
            let (result, r, w, e) = self.reader.read_record(&line[read..], &mut self.out[written..], &mut self.ends[nends..]);
            read += r;
            written += w;
            nends += e;
            match result {
                csv_core::ReadRecordResult::Record => break,
                csv_core::ReadRecordResult::OutputFull => self.out.resize(self.out.len() * 2, 0),
                csv_core::ReadRecordResult::OutputEndsFull => self.ends.resize(self.ends.len() * 2, 0),
                // The newline was read as part of a value: a quote is still open.
                csv_core::ReadRecordResult::InputEmpty | csv_core::ReadRecordResult::End => {
                    return Err("unterminated quote (a quoted value must end on its line)".into())
                }
            }
        }
        let mut fields = Vec::with_capacity(nends);
        let mut start = 0;
        for (i, &end) in self.ends[..nends].iter().enumerate() {
            let bytes = &self.out[start..end];
            let field = std::str::from_utf8(bytes).map_err(|_| format!("field {} is not valid UTF-8", i + 1))?;
            fields.push(field);
            start = end;
        }
        Ok(fields)
    }
}

/// Where each column's value comes from: the field at that position, or none (NULL).
#[derive(Debug)]
pub(crate) struct Layout {
    sources: Vec<Option<usize>>,
    fields: usize,
}

impl Layout {
    pub(crate) fn positional(columns: &[Column]) -> Layout {
        Layout { sources: (0..columns.len()).map(Some).collect(), fields: columns.len() }
    }

    /// The layout a header line names.
    fn from_header(columns: &[Column], names: &[&str]) -> Result<Layout, String> {
        let mut sources = vec![None; columns.len()];
        for (field, name) in names.iter().enumerate() {
            let name = name.trim();
            let i = columns
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(name))
                .ok_or_else(|| format!("the header names {name:?}, which is not one of the columns ({})", column_names(columns)))?;
            if sources[i].is_some() {
                return Err(format!("the header names {name:?} twice"));
            }
            sources[i] = Some(field);
        }
        if let Some(c) = columns.iter().zip(&sources).find(|(c, s)| s.is_none() && !c.nullable).map(|(c, _)| c) {
            return Err(format!("the header does not name column {}, which is NOT NULL", c.name));
        }
        Ok(Layout { sources, fields: names.len() })
    }
}

fn column_names(columns: &[Column]) -> String {
    columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Converts a line's fields into the call's parameters, or says why it cannot.
pub(crate) fn convert(fields: &[&str], layout: &Layout, columns: &[Column], nullstring: Option<&str>) -> Result<Vec<Value>, String> {
    if fields.len() != layout.fields {
        return Err(format!("{} fields, expected {}", fields.len(), layout.fields));
    }
    let mut row = Vec::with_capacity(columns.len());
    for (column, source) in columns.iter().zip(&layout.sources) {
        let value = match source {
            None => Value::Null,
            Some(i) => convert_field(fields[*i], column, nullstring)?,
        };
        if value == Value::Null && !column.nullable {
            return Err(format!("column {} is NOT NULL", column.name));
        }
        row.push(value);
    }
    Ok(row)
}

pub(crate) fn convert_field(field: &str, column: &Column, nullstring: Option<&str>) -> Result<Value, String> {
    if nullstring == Some(field) || field == "\\N" {
        return Ok(Value::Null);
    }
    let Some(ty) = column.ty else {
        return Ok(Value::from(field));
    };
    if field.is_empty() && !matches!(ty, DataType::Varchar | DataType::Varbinary) {
        return Ok(Value::Null);
    }
    let bad = || format!("column {}: {field:?} is not a valid {}", column.name, ty.sql_name());
    match ty {
        DataType::Boolean => match field.trim().to_ascii_lowercase().as_str() {
            "true" | "t" | "1" | "yes" => Ok(Value::Bool(true)),
            "false" | "f" | "0" | "no" => Ok(Value::Bool(false)),
            _ => Err(bad()),
        },
        _ => Value::from(field).coerce_to(ty).map_err(|e| {
            if e.message.contains("out of range") {
                format!("column {}: {}", column.name, e.message)
            } else {
                bad()
            }
        }),
    }
}

/// The rejected rows: one line each, `FILE:LINE<TAB>REASON<TAB>ROW`.
pub(crate) struct Rejects {
    out: Box<dyn Write>,
    pub(crate) path: Option<PathBuf>,
    count: u64,
}

impl Rejects {
    fn open(args: &CsvArgs, label: &str) -> Result<Rejects, String> {
        Self::open_at(args.rejects.as_deref(), args.reportdir.as_deref(), label)
    }

    /// Rejects into `rejects`, or `<reportdir>/<label>_rejects.txt`, or standard error.
    pub(crate) fn open_at(rejects: Option<&Path>, reportdir: Option<&Path>, label: &str) -> Result<Rejects, String> {
        let path = match (rejects.map(Path::to_path_buf), reportdir) {
            (Some(f), _) => Some(f),
            (None, Some(dir)) => {
                std::fs::create_dir_all(dir).map_err(|e| format!("cannot create --reportdir {}: {e}", dir.display()))?;
                Some(dir.join(format!("{label}_rejects.txt")))
            }
            (None, None) => None,
        };
        let out: Box<dyn Write> = match &path {
            Some(p) => Box::new(std::io::BufWriter::new(File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?)),
            None => Box::new(std::io::stderr()),
        };
        Ok(Rejects { out, path, count: 0 })
    }

    pub(crate) fn reject(&mut self, file: &str, line: u64, reason: &str, row: &[u8]) {
        self.count += 1;
        let row = String::from_utf8_lossy(row);
        let row = row.trim_end_matches(['\n', '\r']);
        let reason = reason.replace(['\t', '\n'], " ");
        if let Err(e) = writeln!(self.out, "{file}:{line}\t{reason}\t{row}") {
            eprintln!("error: cannot write a rejected row ({file}:{line}): {e}");
        }
    }

    pub(crate) fn finish(&mut self) {
        if let Err(e) = self.out.flush() {
            eprintln!("error: cannot write the rejects file: {e}");
        }
    }
}

/// A row sent and not yet answered: where it came from, for the rejects file.
struct InFlight {
    file: std::sync::Arc<str>,
    line: u64,
    raw: Vec<u8>,
    answer: Result<Response, ClientError>,
}

/// What a load has done so far: the counts of its live progress line (drawn on a terminal
/// at most every `PROGRESS_INTERVAL_MS`) and of its summary. Shared by the CSV and the
/// Kafka loaders.
pub(crate) struct Progress {
    pub(crate) read: u64,
    pub(crate) inserted: u64,
    pub(crate) rejected: u64,
    /// What is read: "rows" (lines of files) or "messages".
    unit: &'static str,
    started: Instant,
    last_shown: Instant,
    /// Whether the live line is drawn.
    live: bool,
}

impl Progress {
    pub(crate) fn new(unit: &'static str, live: bool) -> Progress {
        let now = Instant::now();
        Progress { read: 0, inserted: 0, rejected: 0, unit, started: now, last_shown: now, live }
    }

    fn rate(&self) -> f64 {
        let secs = self.started.elapsed().as_secs_f64();
        if secs > 0.0 {
            self.inserted as f64 / secs
        } else {
            0.0
        }
    }

    pub(crate) fn show(&mut self) {
        if !self.live || self.last_shown.elapsed() < Duration::from_millis(PROGRESS_INTERVAL_MS) {
            return;
        }
        self.last_shown = Instant::now();
        eprint!("\r{} {} read, {} inserted, {} rejected, {:.0} rows/s   ", self.read, self.unit, self.inserted, self.rejected, self.rate());
    }

    /// The summary on stdout (ending the live line first), and where the rejected rows are.
    pub(crate) fn summary(&self, rejects: &Rejects) {
        if self.live {
            eprintln!();
        }
        println!("{} {} read, {} inserted, {} rejected", self.read, self.unit, self.inserted, self.rejected);
        println!("elapsed {:.2} s, {:.0} rows/s", self.started.elapsed().as_secs_f64(), self.rate());
        if let (Some(path), true) = (&rejects.path, self.rejected > 0) {
            println!("rejected rows are in {}", path.display());
        }
    }
}

/// Why reading stopped before the end of the input.
enum Stop {
    MaxErrors,
    ConnectionFailed(String),
}

struct Loader<'a> {
    args: &'a CsvArgs,
    client: Client,
    target: Target,
    parser: LineParser,
    rejects: Rejects,
    counts: Progress,
    pending: FuturesUnordered<futures::future::BoxFuture<'static, InFlight>>,
    stop: Option<Stop>,
}

async fn load_csv(args: &CsvArgs) -> Result<u8, String> {
    if args.batch == 0 || args.batch > BATCH_MAX {
        return Err(format!("--batch must be 1..={BATCH_MAX}, not {}", args.batch));
    }
    let parser = LineParser::new(args)?;
    let config = args.login.client_config(args.batch).map_err(|e| e.message)?;
    let addrs: Vec<&str> = args.server.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
    let client = Client::connect_many(&addrs, config)
        .await
        .map_err(|e| format!("cannot connect to {}: {e} (is `lockstep server` running there?)", args.server))?;
    let target = describe_target(&client, args.table.as_deref(), args.procedure.as_deref()).await?;
    let rejects = Rejects::open(args, &target.label)?;
    let mut loader = Loader {
        args,
        client,
        target,
        parser,
        rejects,
        counts: Progress::new("rows", std::io::stderr().is_terminal()),
        pending: FuturesUnordered::new(),
        stop: None,
    };
    let mut result = Ok(());
    for path in &args.files {
        result = loader.load_file(path).await;
        if result.is_err() || loader.stop.is_some() || loader.limit_reached() {
            break;
        }
    }
    loader.drain_all().await;
    loader.rejects.finish();
    loader.summary();
    result?;
    Ok(match (&loader.stop, loader.counts.rejected) {
        (Some(Stop::ConnectionFailed(_)), _) => EXIT_FAILED,
        (_, 0) => EXIT_OK,
        _ => EXIT_REJECTED,
    })
}

impl Loader<'_> {
    fn limit_reached(&self) -> bool {
        self.args.limit.is_some_and(|l| self.counts.read >= l)
    }

    async fn load_file(&mut self, path: &Path) -> Result<(), String> {
        let name: std::sync::Arc<str> = path.display().to_string().into();
        let mut input: Box<dyn BufRead> = if path == Path::new("-") {
            Box::new(BufReader::new(std::io::stdin()))
        } else {
            Box::new(BufReader::new(File::open(path).map_err(|e| format!("cannot open {name}: {e}"))?))
        };
        let mut layout = if self.args.header { None } else { Some(Layout::positional(&self.target.columns)) };
        let mut line = Vec::new();
        let mut number = 0u64;
        loop {
            line.clear();
            let n = std::io::Read::take(&mut input, LINE_BYTES_MAX + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| format!("cannot read {name} after line {number}: {e}"))?;
            if n == 0 {
                return Ok(());
            }
            number += 1;
            if n as u64 > LINE_BYTES_MAX {
                return Err(format!("{name}:{number}: the line is longer than {LINE_BYTES_MAX} bytes; is this a CSV file?"));
            }
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            if number <= self.args.skip || line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Some(layout) = &layout else {
                let fields = self.parser.parse(&line).map_err(|e| format!("{name}:{number}: the header line: {e}"))?;
                layout = Some(Layout::from_header(&self.target.columns, &fields).map_err(|e| format!("{name}:{number}: {e}"))?);
                continue;
            };
            if self.limit_reached() {
                return Ok(());
            }
            self.counts.read += 1;
            let row =
                self.parser.parse(&line).and_then(|fields| convert(&fields, layout, &self.target.columns, self.args.nullstring.as_deref()));
            match row {
                Ok(row) => self.send(&name, number, &line, row).await,
                Err(reason) => self.reject(&name, number, &reason, &line),
            }
            self.collect_ready();
            self.counts.show();
            if self.stop.is_some() {
                if matches!(self.stop, Some(Stop::MaxErrors)) {
                    eprintln!("stopped after {} rejected rows (--maxerrors); {name} was read up to line {number}", self.counts.rejected);
                }
                return Ok(());
            }
        }
    }

    async fn send(&mut self, file: &std::sync::Arc<str>, line: u64, raw: &[u8], row: Vec<Value>) {
        // The client's window is --batch calls: wait for an answer before taking a slot,
        // never while holding every slot in an unpolled answer.
        while self.pending.len() >= self.args.batch {
            if let Some(done) = self.pending.next().await {
                self.answered(done);
            }
        }
        let sent = self.client.start_call(&self.target.procedure, row).await;
        let file = file.clone();
        let raw = raw.to_vec();
        self.pending.push(
            async move {
                let answer = match sent {
                    Ok(s) => s.wait().await,
                    Err(e) => Err(e),
                };
                InFlight { file, line, raw, answer }
            }
            .boxed(),
        );
    }

    fn collect_ready(&mut self) {
        while let Some(Some(done)) = self.pending.next().now_or_never() {
            self.answered(done);
        }
    }

    async fn drain_all(&mut self) {
        while let Some(done) = self.pending.next().await {
            self.answered(done);
            self.counts.show();
        }
    }

    fn answered(&mut self, done: InFlight) {
        match done.answer {
            Ok(r) if r.status == status::SUCCESS => self.counts.inserted += 1,
            Ok(r) => {
                let reason = format!("the server refused the row: {}", r.status_string.unwrap_or_default());
                self.reject(&done.file, done.line, &reason, &done.raw);
            }
            Err(e) => {
                let reason = format!("no answer from the server ({e}); the row may or may not be in the table");
                self.reject(&done.file, done.line, &reason, &done.raw);
                if !matches!(self.stop, Some(Stop::ConnectionFailed(_))) {
                    self.stop = Some(Stop::ConnectionFailed(e.to_string()));
                }
            }
        }
    }

    fn reject(&mut self, file: &str, line: u64, reason: &str, raw: &[u8]) {
        self.rejects.reject(file, line, reason, raw);
        self.counts.rejected += 1;
        if self.args.maxerrors > 0 && self.counts.rejected >= self.args.maxerrors && self.stop.is_none() {
            self.stop = Some(Stop::MaxErrors);
        }
    }

    fn summary(&self) {
        self.counts.summary(&self.rejects);
        if let Some(Stop::ConnectionFailed(e)) = &self.stop {
            eprintln!("error: the load stopped: the server connection failed ({e})");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        args: CsvArgs,
    }

    fn args(extra: &[&str]) -> CsvArgs {
        let mut argv = vec!["load", "--table", "t"];
        argv.extend_from_slice(extra);
        argv.push("f.csv");
        Cmd::parse_from(argv).args
    }

    fn fields(parser: &mut LineParser, line: &str) -> Result<Vec<String>, String> {
        parser.parse(line.as_bytes()).map(|f| f.into_iter().map(String::from).collect())
    }

    #[test]
    fn lines_split_with_quotes_and_escapes() {
        let mut p = LineParser::new(&args(&[])).unwrap();
        assert_eq!(fields(&mut p, "1,\"a,b\",c\n").unwrap(), ["1", "a,b", "c"]);
        assert_eq!(fields(&mut p, "1,\"say \"\"hi\"\"\",x\r\n").unwrap(), ["1", "say \"hi\"", "x"]);
        assert_eq!(fields(&mut p, "1,\"back\\\"slash\",x\n").unwrap(), ["1", "back\"slash", "x"]);
        assert!(fields(&mut p, "1,\"open,x\n").unwrap_err().contains("unterminated quote"));
        // The parser is reset per line: an open quote does not leak into the next line.
        assert_eq!(fields(&mut p, "2,b,c\n").unwrap(), ["2", "b", "c"]);
    }

    #[test]
    fn other_separator_and_quote() {
        let mut p = LineParser::new(&args(&["--separator", "|", "--quotechar", "'"])).unwrap();
        assert_eq!(fields(&mut p, "1|'a|b'|,\n").unwrap(), ["1", "a|b", ","]);
        assert!(LineParser::new(&args(&["--separator", "é"])).is_err());
    }

    fn cols() -> Vec<Column> {
        vec![
            Column { name: "ID".into(), ty: Some(DataType::Integer), nullable: false },
            Column { name: "NAME".into(), ty: Some(DataType::Varchar), nullable: true },
            Column { name: "AMOUNT".into(), ty: Some(DataType::Float), nullable: true },
        ]
    }

    #[test]
    fn values_convert_by_column_type() {
        let c = cols();
        let l = Layout::positional(&c);
        assert_eq!(convert(&["1", "a", "2.5"], &l, &c, None).unwrap(), vec![Value::Int(1), Value::from("a"), Value::Float(2.5)]);
        assert_eq!(convert(&["1", "", ""], &l, &c, None).unwrap(), vec![Value::Int(1), Value::from(""), Value::Null]);
        assert_eq!(convert(&["1", "NULL", "\\N"], &l, &c, Some("NULL")).unwrap(), vec![Value::Int(1), Value::Null, Value::Null]);
        assert!(convert(&["x", "a", "1"], &l, &c, None).unwrap_err().contains("not a valid INTEGER"));
        assert!(convert(&["9999999999", "a", "1"], &l, &c, None).unwrap_err().contains("out of range"));
        assert!(convert(&["", "a", "1"], &l, &c, None).unwrap_err().contains("NOT NULL"));
        assert!(convert(&["1", "a"], &l, &c, None).unwrap_err().contains("2 fields, expected 3"));
    }

    #[test]
    fn header_maps_names_to_columns() {
        let c = cols();
        let l = Layout::from_header(&c, &["amount", " id "]).unwrap();
        assert_eq!(convert(&["2.5", "7"], &l, &c, None).unwrap(), vec![Value::Int(7), Value::Null, Value::Float(2.5)]);
        assert!(Layout::from_header(&c, &["name"]).unwrap_err().contains("NOT NULL"));
        assert!(Layout::from_header(&c, &["id", "nope"]).unwrap_err().contains("not one of the columns"));
        assert!(Layout::from_header(&c, &["id", "ID"]).unwrap_err().contains("twice"));
    }
}
