//! `lockstep load kafka`: consumes a Kafka topic (rskafka) and inserts each message as one
//! row, into a table (its T.insert procedure) or through a procedure, with many calls in
//! flight. A message is a JSON object (keys are column or parameter names), a JSON array
//! (values in order) or, with `--format csv`, a CSV line. Where each Kafka partition stands
//! is kept in the server, in the replicated table LOCKSTEP_KAFKA_OFFSETS, and moves past a
//! fetched chunk only after the server answered every row of it (inserted, or refused and
//! written to the rejects file): the rows are durable first (with the command log on), so
//! a killed loader, run again, resumes there and loses nothing. Rows of the chunk in flight
//! when it was killed are inserted again (at-least-once): rskafka has no consumer groups,
//! and a row and its position cannot share one transaction when the row goes through a
//! procedure of the user's.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lockstep_bench::conn::LoginArgs;
use lockstep_client::{status, Client, ClientError, Response};
use lockstep_core::Value;
use rskafka::client::partition::{OffsetAt, PartitionClient, UnknownTopicHandling};
use rskafka::client::ClientBuilder;
use rskafka::record::RecordAndOffset;

use crate::load_cmd::{
    catalog, cell_str, convert, convert_field, describe_target, Column, Layout, LineParser, Progress, Rejects, Target, BATCH_DEFAULT,
    BATCH_MAX, EXIT_FAILED, EXIT_OK, EXIT_REJECTED, MAX_ERRORS_DEFAULT,
};

/// The table that keeps each consumer's next offset per Kafka partition.
pub const OFFSETS_TABLE: &str = "LOCKSTEP_KAFKA_OFFSETS";
/// Bytes one fetch asks Kafka for at most.
const FETCH_BYTES_MAX: i32 = 4 * 1024 * 1024;
/// How long a fetch waits on the broker for new messages when a partition is at its end.
const FETCH_WAIT_MS: i32 = 500;
/// rskafka's retries of one request stop after this long; the load then fails.
const KAFKA_RETRY_MS: u64 = 30_000;
/// Largest message accepted.
const KAFKA_MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Messages loaded between two saves of the position: at most this many are loaded again
/// after the loader is killed.
const COMMIT_ROWS: usize = 1000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MessageFormat {
    /// A JSON object by column (or parameter) name, or a JSON array of the values in order.
    Json,
    /// One CSV line (`,` separated, `"` quoted, `\` escape), the values in column order.
    Csv,
}

#[derive(clap::Args)]
pub struct KafkaArgs {
    /// Kafka's bootstrap brokers, host:port, comma-separated.
    #[arg(long)]
    brokers: String,
    /// The topic to consume (every partition of it).
    #[arg(long)]
    topic: String,
    /// The table to load; rows go through its default insert procedure (TABLE.insert).
    #[arg(long, required_unless_present = "procedure")]
    table: Option<String>,
    /// Call this procedure once per message instead, the message's values as its parameters.
    #[arg(long)]
    procedure: Option<String>,
    /// What each message holds.
    #[arg(long, value_enum, default_value_t = MessageFormat::Json)]
    format: MessageFormat,
    /// Server address(es), host:port, comma-separated for the nodes of a cluster.
    #[arg(long, default_value = "127.0.0.1:21212")]
    server: String,
    /// Calls kept in flight at once.
    #[arg(long, default_value_t = BATCH_DEFAULT)]
    batch: usize,
    /// The name the consumed positions are kept under in LOCKSTEP_KAFKA_OFFSETS: loaders of
    /// one name share (and resume) one position per partition.
    #[arg(long, default_value = "lockstep-load")]
    consumer: String,
    /// Keep consuming new messages until interrupted, instead of stopping at the end the
    /// topic had when the load started.
    #[arg(long)]
    follow: bool,
    /// Stop once this many rows have been rejected (0: never stop).
    #[arg(long, default_value_t = MAX_ERRORS_DEFAULT)]
    maxerrors: u64,
    /// Write the rejected rows into this directory, as <TABLE>_rejects.txt.
    #[arg(long, value_name = "DIR", conflicts_with = "rejects")]
    reportdir: Option<PathBuf>,
    /// Write the rejected rows into this file: one line each, `TOPIC:PARTITION:OFFSET<TAB>REASON<TAB>MESSAGE`
    /// (default: standard error).
    #[arg(long, value_name = "FILE")]
    rejects: Option<PathBuf>,
    /// --user, --password, --tls, --tls-ca: for a server with security or TLS on.
    #[command(flatten)]
    login: LoginArgs,
    /// Run inside the server (`[[import.kafka]]`): no progress line, no summary.
    #[arg(skip)]
    in_server: bool,
}

/// After a run inside the server failed (Kafka or the server unreachable, a bad setting
/// found late), the importer waits this long before it starts again.
const IMPORT_RETRY_MS: u64 = 5_000;

/// The loader's arguments for one `[[import.kafka]]` of the server's configuration, checked
/// as the command line's are; rejected rows go to `<data>/import/<TABLE>_rejects.txt`.
pub fn server_import(
    import: &lockstep_server::config::KafkaImport,
    server: std::net::SocketAddr,
    data_dir: &std::path::Path,
) -> Result<KafkaArgs, String> {
    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        args: KafkaArgs,
    }
    let mut argv = vec!["import".to_string(), "--brokers".into(), import.brokers.clone(), "--topic".into(), import.topic.clone()];
    argv.extend(["--server".into(), server.to_string(), "--follow".into()]);
    let report = data_dir.join("import");
    argv.extend(["--reportdir".into(), report.display().to_string(), "--maxerrors".into(), "0".into()]);
    argv.extend(["--consumer".into(), import.consumer.clone().unwrap_or_else(|| "lockstep-server".into())]);
    let optional = [
        ("--table", import.table.clone()),
        ("--procedure", import.procedure.clone()),
        ("--format", import.format.clone()),
        ("--batch", import.batch.map(|b| b.to_string())),
        ("--user", import.user.clone()),
        ("--password", import.password.clone()),
    ];
    for (flag, value) in optional {
        if let Some(v) = value {
            argv.extend([flag.to_string(), v]);
        }
    }
    let mut wrap = <Wrap as clap::Parser>::try_parse_from(&argv)
        .map_err(|e| format!("[[import.kafka]] of topic {:?}: {}", import.topic, e.to_string().lines().next().unwrap_or_default()))?;
    if wrap.args.batch == 0 || wrap.args.batch > BATCH_MAX {
        return Err(format!("[[import.kafka]] of topic {:?}: batch must be 1..={BATCH_MAX}", import.topic));
    }
    wrap.args.in_server = true;
    Ok(wrap.args)
}

/// Runs a configured import on a thread of its own for as long as the server runs; a run
/// that fails is started again after `IMPORT_RETRY_MS`, from the positions it saved.
pub fn start_server_import(args: KafkaArgs) -> std::io::Result<()> {
    let name = format!("import-kafka-{}", args.topic);
    std::thread::Builder::new().name(name).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("the Kafka import of topic {} cannot start its runtime: {e}", args.topic);
                return;
            }
        };
        loop {
            match runtime.block_on(load(&args)) {
                Ok(_) => tracing::warn!("the Kafka import of topic {} stopped; it starts again", args.topic),
                Err(e) => {
                    tracing::warn!("the Kafka import of topic {} failed: {e}; it starts again in {} s", args.topic, IMPORT_RETRY_MS / 1000)
                }
            }
            std::thread::sleep(Duration::from_millis(IMPORT_RETRY_MS));
        }
    })?;
    Ok(())
}

pub fn run(args: KafkaArgs) -> ExitCode {
    crate::load_cmd::run_load(load(&args))
}

/// A SQL string literal.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

async fn adhoc(client: &Client, sql: &str) -> Result<Response, String> {
    let r = client.call("@AdHoc", vec![Value::from(sql)]).await.map_err(|e| format!("{sql}: {e}"))?;
    if r.status != status::SUCCESS {
        return Err(format!("{sql}: {}", r.status_string.unwrap_or_default()));
    }
    Ok(r)
}

/// Makes the offsets table if the server has none, and reads this consumer's positions.
async fn stored_offsets(client: &Client, consumer: &str, topic: &str) -> Result<HashMap<i32, i64>, String> {
    let tables = catalog(client, "TABLES").await?;
    if !tables.rows.iter().any(|r| cell_str(r, 2).eq_ignore_ascii_case(OFFSETS_TABLE)) {
        let ddl = format!(
            "CREATE TABLE {OFFSETS_TABLE} (consumer VARCHAR(200) NOT NULL, topic VARCHAR(250) NOT NULL, \
             kafka_partition INTEGER NOT NULL, next_offset BIGINT NOT NULL, PRIMARY KEY (consumer, topic, kafka_partition))"
        );
        if let Err(e) = adhoc(client, &ddl).await {
            // Another loader may have made it meanwhile.
            let again = catalog(client, "TABLES").await?;
            if !again.rows.iter().any(|r| cell_str(r, 2).eq_ignore_ascii_case(OFFSETS_TABLE)) {
                return Err(format!("cannot create the offsets table: {e}"));
            }
        }
    }
    let sql = format!(
        "SELECT kafka_partition, next_offset FROM {OFFSETS_TABLE} WHERE consumer = {} AND topic = {}",
        quoted(consumer),
        quoted(topic)
    );
    let r = adhoc(client, &sql).await?;
    let mut offsets = HashMap::new();
    if let Some(t) = r.tables.first() {
        for row in &t.rows {
            if let (Some(p), Some(o)) = (row.first().and_then(Value::as_i64), row.get(1).and_then(Value::as_i64)) {
                offsets.insert(p as i32, o);
            }
        }
    }
    Ok(offsets)
}

/// Saves a partition's next offset (after the rows before it were acknowledged).
async fn save_offset(client: &Client, consumer: &str, topic: &str, partition: i32, next: i64) -> Result<(), String> {
    let sql = format!("UPSERT INTO {OFFSETS_TABLE} VALUES ({}, {}, {partition}, {next})", quoted(consumer), quoted(topic));
    adhoc(client, &sql).await.map(|_| ()).map_err(|e| format!("cannot save the consumed position: {e}"))
}

/// Converts one message into the call's parameters, or says why it cannot.
fn message_row(
    value: &[u8],
    format: MessageFormat,
    columns: &[Column],
    layout: &Layout,
    parser: &mut LineParser,
) -> Result<Vec<Value>, String> {
    match format {
        MessageFormat::Csv => {
            let mut line = value.to_vec();
            if !line.ends_with(b"\n") {
                line.push(b'\n');
            }
            let fields = parser.parse(&line)?;
            convert(&fields, layout, columns, None)
        }
        MessageFormat::Json => {
            let v: serde_json::Value = serde_json::from_slice(value).map_err(|e| format!("not JSON: {e}"))?;
            match v {
                serde_json::Value::Object(map) => {
                    if let Some(k) = map.keys().find(|k| !columns.iter().any(|c| c.name.eq_ignore_ascii_case(k))) {
                        return Err(format!("key {k:?} is not one of the columns ({})", names(columns)));
                    }
                    let values: Vec<Option<&serde_json::Value>> =
                        columns.iter().map(|c| map.iter().find(|(k, _)| c.name.eq_ignore_ascii_case(k)).map(|(_, v)| v)).collect();
                    json_row(&values, columns)
                }
                serde_json::Value::Array(items) => {
                    if items.len() != columns.len() {
                        return Err(format!("{} values, expected {}", items.len(), columns.len()));
                    }
                    json_row(&items.iter().map(Some).collect::<Vec<_>>(), columns)
                }
                _ => Err("a message must be a JSON object or array".into()),
            }
        }
    }
}

fn names(columns: &[Column]) -> String {
    columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
}

/// Converts JSON values by their columns' types (a missing value is NULL).
fn json_row(values: &[Option<&serde_json::Value>], columns: &[Column]) -> Result<Vec<Value>, String> {
    let mut row = Vec::with_capacity(columns.len());
    for (column, v) in columns.iter().zip(values) {
        let value = match v {
            None | Some(serde_json::Value::Null) => Value::Null,
            Some(serde_json::Value::String(s)) if s.is_empty() => Value::from(""),
            Some(serde_json::Value::String(s)) => convert_field(s, column, None)?,
            Some(other) => convert_field(&other.to_string(), column, None)?,
        };
        if value == Value::Null && !column.nullable {
            return Err(format!("column {} is NOT NULL", column.name));
        }
        row.push(value);
    }
    Ok(row)
}

/// One Kafka partition being consumed.
struct Source {
    client: PartitionClient,
    /// The next offset to fetch.
    next: i64,
    /// Where to stop (the end when the load started), or None with --follow.
    end: Option<i64>,
}

impl Source {
    fn done(&self) -> bool {
        self.end.is_some_and(|e| self.next >= e)
    }
}

struct InFlight {
    offset: i64,
    raw: Vec<u8>,
    answer: Result<Response, ClientError>,
}

async fn open_sources(args: &KafkaArgs, stored: &HashMap<i32, i64>) -> Result<Vec<Source>, String> {
    let brokers: Vec<String> = args.brokers.split(',').map(str::trim).filter(|b| !b.is_empty()).map(String::from).collect();
    let backoff = rskafka::BackoffConfig { deadline: Some(Duration::from_millis(KAFKA_RETRY_MS)), ..Default::default() };
    let kafka = ClientBuilder::new(brokers)
        .client_id("lockstep-load")
        .max_message_size(KAFKA_MESSAGE_BYTES_MAX)
        .backoff_config(backoff)
        .build()
        .await
        .map_err(|e| format!("cannot connect to Kafka at {}: {e}", args.brokers))?;
    let topics = kafka.list_topics().await.map_err(|e| format!("cannot list Kafka's topics: {e}"))?;
    let topic = topics
        .into_iter()
        .find(|t| t.name == args.topic)
        .ok_or_else(|| format!("Kafka at {} has no topic {:?}", args.brokers, args.topic))?;
    let mut sources = Vec::new();
    for p in topic.partitions {
        let client = kafka
            .partition_client(args.topic.clone(), p, UnknownTopicHandling::Retry)
            .await
            .map_err(|e| format!("cannot open partition {p} of {}: {e}", args.topic))?;
        let earliest = client.get_offset(OffsetAt::Earliest).await.map_err(|e| format!("partition {p}: {e}"))?;
        let end =
            if args.follow { None } else { Some(client.get_offset(OffsetAt::Latest).await.map_err(|e| format!("partition {p}: {e}"))?) };
        // A stored position older than what Kafka still keeps starts at the oldest kept.
        let next = stored.get(&p).copied().unwrap_or(earliest).max(earliest);
        sources.push(Source { client, next, end });
    }
    Ok(sources)
}

struct Loader<'a> {
    args: &'a KafkaArgs,
    client: Client,
    target: Target,
    layout: Layout,
    parser: LineParser,
    rejects: Rejects,
    counts: Progress,
    failed: Option<String>,
}

async fn load(args: &KafkaArgs) -> Result<u8, String> {
    if args.batch == 0 || args.batch > BATCH_MAX {
        return Err(format!("--batch must be 1..={BATCH_MAX}, not {}", args.batch));
    }
    let config = args.login.client_config(args.batch).map_err(|e| e.message)?;
    let addrs: Vec<&str> = args.server.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
    let client = Client::connect_many(&addrs, config)
        .await
        .map_err(|e| format!("cannot connect to {}: {e} (is `lockstep server` running there?)", args.server))?;
    let target = describe_target(&client, args.table.as_deref(), args.procedure.as_deref()).await?;
    let stored = stored_offsets(&client, &args.consumer, &args.topic).await?;
    let mut sources = open_sources(args, &stored).await?;
    let rejects = Rejects::open_at(args.rejects.as_deref(), args.reportdir.as_deref(), &target.label)?;
    let mut loader = Loader {
        args,
        client,
        layout: Layout::positional(&target.columns),
        target,
        parser: LineParser::with(',', '"', '\\')?,
        rejects,
        counts: Progress::new("messages", !args.in_server && std::io::stderr().is_terminal()),
        failed: None,
    };
    let result = loader.consume(&mut sources).await;
    loader.rejects.finish();
    if !args.in_server {
        loader.summary();
    }
    result?;
    Ok(match (&loader.failed, loader.counts.rejected) {
        (Some(_), _) => EXIT_FAILED,
        (None, 0) => EXIT_OK,
        _ => EXIT_REJECTED,
    })
}

impl Loader<'_> {
    /// Fetches a chunk from each partition in turn until all reached their end.
    async fn consume(&mut self, sources: &mut [Source]) -> Result<(), String> {
        loop {
            if sources.iter().all(Source::done) {
                return Ok(());
            }
            for s in sources.iter_mut().filter(|s| !s.done()) {
                let (records, high) = s
                    .client
                    .fetch_records(s.next, 1..FETCH_BYTES_MAX, FETCH_WAIT_MS)
                    .await
                    .map_err(|e| format!("cannot fetch partition {} of {}: {e}", s.client.partition(), self.args.topic))?;
                let mut records: Vec<_> =
                    records.into_iter().filter(|r| r.offset >= s.next && s.end.is_none_or(|e| r.offset < e)).collect();
                let partition = s.client.partition();
                if records.is_empty() && high <= s.next && s.end.is_some() {
                    // Offsets up to the end that hold no message (a transaction's markers).
                    s.end = Some(s.next);
                }
                while !records.is_empty() {
                    let rest = records.split_off(records.len().min(COMMIT_ROWS));
                    s.next = self.load_chunk(partition, records).await?;
                    records = rest;
                }
                if self.args.maxerrors > 0 && self.counts.rejected >= self.args.maxerrors {
                    eprintln!("stopped after {} rejected rows (--maxerrors)", self.counts.rejected);
                    return Ok(());
                }
            }
        }
    }

    /// Loads messages of one partition, waits for every answer, then saves the position
    /// after them; returns that position.
    async fn load_chunk(&mut self, partition: i32, records: Vec<RecordAndOffset>) -> Result<i64, String> {
        let Some(next) = records.last().map(|r| r.offset + 1) else { return Err("no messages".into()) };
        let mut pending = FuturesUnordered::new();
        for r in records {
            self.counts.read += 1;
            let raw = r.record.value.unwrap_or_default();
            match message_row(&raw, self.args.format, &self.target.columns, &self.layout, &mut self.parser) {
                Ok(row) => {
                    while pending.len() >= self.args.batch {
                        if let Some(done) = pending.next().await {
                            self.answered(partition, done);
                        }
                    }
                    let sent = self.client.start_call(&self.target.procedure, row).await;
                    let offset = r.offset;
                    pending.push(
                        async move {
                            let answer = match sent {
                                Ok(s) => s.wait().await,
                                Err(e) => Err(e),
                            };
                            InFlight { offset, raw, answer }
                        }
                        .boxed(),
                    );
                }
                Err(reason) => self.reject(partition, r.offset, &reason, &raw),
            }
            self.counts.show();
        }
        while let Some(done) = pending.next().await {
            self.answered(partition, done);
        }
        if let Some(e) = &self.failed {
            // Rows of this chunk may be missing: its position is not saved, and a new run
            // starts at this chunk again.
            return Err(format!("the server connection failed ({e}); run the load again to resume"));
        }
        // The chunk's rejected rows are written out before its position moves past them.
        self.rejects.finish();
        save_offset(&self.client, &self.args.consumer, &self.args.topic, partition, next).await?;
        Ok(next)
    }

    fn answered(&mut self, partition: i32, done: InFlight) {
        match done.answer {
            Ok(r) if r.status == status::SUCCESS => self.counts.inserted += 1,
            Ok(r) => {
                let reason = format!("the server refused the row: {}", r.status_string.unwrap_or_default());
                self.reject(partition, done.offset, &reason, &done.raw);
            }
            Err(e) => {
                if self.failed.is_none() {
                    self.failed = Some(e.to_string());
                }
            }
        }
    }

    fn reject(&mut self, partition: i32, offset: i64, reason: &str, raw: &[u8]) {
        self.rejects.reject(&format!("{}:{partition}", self.args.topic), offset as u64, reason, raw);
        self.counts.rejected += 1;
    }

    fn summary(&self) {
        self.counts.summary(&self.rejects);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::DataType;

    fn cols() -> Vec<Column> {
        vec![
            Column { name: "ID".into(), ty: Some(DataType::BigInt), nullable: false },
            Column { name: "NOTE".into(), ty: Some(DataType::Varchar), nullable: true },
        ]
    }

    fn row(msg: &str, format: MessageFormat) -> Result<Vec<Value>, String> {
        let c = cols();
        let mut p = LineParser::with(',', '"', '\\').unwrap();
        message_row(msg.as_bytes(), format, &c, &Layout::positional(&c), &mut p)
    }

    #[test]
    fn messages_convert_by_column() {
        assert_eq!(row(r#"{"id": 7, "Note": "x"}"#, MessageFormat::Json).unwrap(), vec![Value::Int(7), Value::from("x")]);
        assert_eq!(row(r#"{"id": "8"}"#, MessageFormat::Json).unwrap(), vec![Value::Int(8), Value::Null]);
        assert_eq!(row(r#"[9, "y"]"#, MessageFormat::Json).unwrap(), vec![Value::Int(9), Value::from("y")]);
        assert_eq!(row("10,\"a,b\"", MessageFormat::Csv).unwrap(), vec![Value::Int(10), Value::from("a,b")]);
        assert!(row(r#"{"id": 1, "nope": 2}"#, MessageFormat::Json).unwrap_err().contains("not one of the columns"));
        assert!(row(r#"{"note": "x"}"#, MessageFormat::Json).unwrap_err().contains("NOT NULL"));
        assert!(row(r#"{"id": "x"}"#, MessageFormat::Json).unwrap_err().contains("not a valid"));
        assert!(row("not json", MessageFormat::Json).unwrap_err().contains("not JSON"));
        assert!(row("5", MessageFormat::Json).unwrap_err().contains("object or array"));
    }

    #[test]
    fn literals_are_quoted() {
        assert_eq!(quoted("it's"), "'it''s'");
    }
}
