//! Export of committed stream rows: each site appends its committed rows to JSON-lines
//! segment files under `<data>/export/<target>/partition-<P>/`, in commit order, as
//! transactions commit (the durable buffer). For targets of type `http`, `postgresql` or
//! `kafka` a background exporter per (target, partition) delivers those files from its last
//! acknowledged position (see `export/deliver.rs`), so a slow or stalled target never
//! holds up a transaction. Targets not configured, or of type `file`, keep the files; a
//! `file` target acknowledges the migrated rows it holds once they are on disk
//! (`export/file_ack.rs`).

mod deliver;
mod file_ack;
mod http;
mod image;
mod kafka;
mod postgres;

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lockstep_core::{Catalog, TableKind, Value};
use lockstep_storage::ExportRow;
use serde::Deserialize;
use serde_json::{json, Map};

pub use deliver::{prepare, start_exporters};
pub use image::{write_image, ImageMark, ImageStaging};
pub use kafka::KafkaSettings;

/// A segment file is closed and a new one begun once it holds this many bytes (checked
/// between transactions), so delivered rows can be deleted a segment at a time.
pub const SEGMENT_BYTES_MAX: u64 = 16 * 1024 * 1024;
/// The key that marks an exported line as a migrated row (`MIGRATE FROM`).
pub const MIGRATED_KEY: &str = "migrated";
/// Default bytes of undelivered rows kept for one target before it is reported over its
/// backlog limit.
pub const MAX_BACKLOG_BYTES_DEFAULT: u64 = 1024 * 1024 * 1024;

/// One `[[export.targets]]` entry of the server's configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(try_from = "RawTarget")]
pub struct TargetConfig {
    /// The name `CREATE STREAM … EXPORT TO TARGET name` uses.
    pub name: String,
    pub kind: TargetKind,
    /// Undelivered bytes above which the target is reported over its backlog limit.
    pub max_backlog_bytes: u64,
}

/// Where a target's rows go.
#[derive(Clone, Debug, PartialEq)]
pub enum TargetKind {
    /// The segment files under `<data>/export/` are the output (kept, never deleted). A
    /// migrated row is acknowledged once its segment is fsynced.
    File,
    /// POST batches as a JSON array to `url` (`http://host:port/path`); 2xx is success.
    Http { url: String },
    /// Insert batches into `table` of the database at `url` (a tokio-postgres connection
    /// string, `host=… port=… user=… dbname=…` or `postgresql://…`), one transaction each.
    Postgresql { url: String, table: String },
    /// Produce each row as a JSON message to a Kafka topic (see `export/kafka.rs`).
    Kafka(KafkaSettings),
}

/// A target as written in the file: every key any type takes, unknown keys refused (a
/// typo must not pass silently); `TargetConfig::try_from` checks what the type needs.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    url: Option<String>,
    table: Option<String>,
    max_backlog_bytes: Option<u64>,
    // kafka
    brokers: Option<String>,
    topic: Option<String>,
    key_column: Option<String>,
    acks: Option<String>,
    batch_size: Option<usize>,
    linger_ms: Option<u64>,
}

impl TryFrom<RawTarget> for TargetConfig {
    type Error = String;

    fn try_from(r: RawTarget) -> Result<Self, String> {
        let name = r.name;
        let need =
            |v: Option<String>, key: &str| v.ok_or_else(|| format!("export target {name:?} of type {:?} needs {key} = \"…\"", r.kind));
        let kind = match r.kind.as_str() {
            "file" => TargetKind::File,
            "http" => TargetKind::Http { url: need(r.url, "url")? },
            "postgresql" => TargetKind::Postgresql { url: need(r.url, "url")?, table: need(r.table, "table")? },
            "kafka" => TargetKind::Kafka(KafkaSettings::parse(&name, r.brokers, r.topic, r.key_column, r.acks, r.batch_size, r.linger_ms)?),
            other => return Err(format!("export target {name:?}: unknown type {other:?}; use file, http, postgresql or kafka")),
        };
        Ok(TargetConfig { name, kind, max_backlog_bytes: r.max_backlog_bytes.unwrap_or(MAX_BACKLOG_BYTES_DEFAULT) })
    }
}

impl TargetKind {
    fn delivers(&self) -> bool {
        !matches!(self, TargetKind::File)
    }

    /// The type's name, as the configuration file spells it.
    pub fn name(&self) -> &'static str {
        match self {
            TargetKind::File => "file",
            TargetKind::Http { .. } => "http",
            TargetKind::Postgresql { .. } => "postgresql",
            TargetKind::Kafka(_) => "kafka",
        }
    }

    /// Rows per batch at most, and how long a partial batch waits to fill (milliseconds).
    fn batching(&self) -> (usize, u64) {
        match self {
            TargetKind::Kafka(k) => (k.batch_rows, k.linger_ms),
            _ => (deliver::BATCH_ROWS_MAX, 0),
        }
    }
}

/// Counters of one (target, partition): shared by the site that writes and the exporter.
#[derive(Debug, Default)]
pub struct Lane {
    pub target: String,
    pub partition: u32,
    /// True when an exporter delivers this lane (http, postgresql, kafka).
    pub delivered_by_exporter: bool,
    pub rows_written: AtomicU64,
    pub rows_delivered: AtomicU64,
    pub backlog_rows: AtomicI64,
    pub backlog_bytes: AtomicI64,
    pub max_backlog_bytes: AtomicU64,
    /// False while the target refuses or cannot be reached.
    pub down: AtomicBool,
    pub over_limit: AtomicBool,
    pub last_error: Mutex<String>,
    /// In a cluster: the highest sequence number the partition's leader reported its
    /// target acknowledged (`Lane::leader_acked`); this node's exporter passes over the
    /// rows up to it.
    pub leader_acked: AtomicU64,
    /// In a cluster: this node is loading the partition's image from its leader (a rejoin),
    /// and its files still number rows from its old history, not as the leader's do, so it
    /// passes nothing over by the leader's numbers. Cleared when the image's export rows
    /// replace the files (`ExportWriter::adopt`); an image without them (from a version
    /// that did not carry them) leaves it set, and the lane keeps every row (see
    /// docs/cluster.md).
    pub rejoined: AtomicBool,
    /// How many times a rejoin image replaced the lane's files: the exporter rereads its
    /// position when this moves.
    pub replaced: AtomicU64,
}

impl Lane {
    /// Notes bytes written or delivered and reports crossing the backlog limit once.
    fn adjust_backlog(&self, rows: i64, bytes: i64) {
        self.backlog_rows.fetch_add(rows, Ordering::Relaxed);
        let now = self.backlog_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if !self.delivered_by_exporter {
            return;
        }
        let over = now > 0 && now as u64 > self.max_backlog_bytes.load(Ordering::Relaxed);
        if over && !self.over_limit.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                target_name = %self.target,
                partition = self.partition,
                "export target {} is over its backlog limit ({} bytes undelivered in partition {}); rows are still kept on disk, none is dropped — fix the target or raise max_backlog_bytes",
                self.target,
                now,
                self.partition
            );
        } else if !over && self.over_limit.swap(false, Ordering::Relaxed) {
            tracing::info!("export target {} partition {} is back under its backlog limit", self.target, self.partition);
        }
    }

    /// The partition's leader reports its target acknowledged the rows through `seq`.
    /// Reports can arrive late or out of order: the highest one counts.
    pub fn leader_acked(&self, seq: u64) {
        self.leader_acked.fetch_max(seq, Ordering::Relaxed);
    }

    pub fn last_error(&self) -> String {
        self.last_error.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

/// The export configuration and the live counters, shared by the sites, the exporters and
/// `@Statistics EXPORT`.
#[derive(Debug, Default)]
pub struct ExportHub {
    pub targets: Vec<TargetConfig>,
    lanes: Mutex<HashMap<(String, u32), Arc<Lane>>>,
    pub(crate) stopping: AtomicBool,
    /// Migrated rows their target has acknowledged, waiting for the migration thread to
    /// delete them from their table (`migrate.rs`).
    acknowledged: Mutex<Vec<Acknowledged>>,
}

/// A migrated row (`MIGRATE FROM`) its target has acknowledged.
#[derive(Clone, Debug, PartialEq)]
pub struct Acknowledged {
    pub partition: u32,
    /// The migrating table.
    pub table: String,
    /// The transaction that migrated it (its time is the row's flag).
    pub txn_id: i64,
    /// The row as exported (column name → JSON value).
    pub row: Map<String, serde_json::Value>,
}

impl ExportHub {
    pub fn new(targets: Vec<TargetConfig>) -> Self {
        ExportHub { targets, ..Default::default() }
    }

    pub fn target(&self, name: &str) -> Option<&TargetConfig> {
        self.targets.iter().find(|t| t.name.eq_ignore_ascii_case(name))
    }

    /// The counters of one (target, partition), made on first use. Targets are named as the
    /// catalog keeps them (upper case), whatever the configuration file's spelling.
    pub fn lane(&self, target: &str, partition: u32) -> Arc<Lane> {
        let target = target.to_uppercase();
        let target = target.as_str();
        let mut lanes = match self.lanes.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        lanes
            .entry((target.to_string(), partition))
            .or_insert_with(|| {
                let config = self.target(target);
                Arc::new(Lane {
                    target: target.to_string(),
                    partition,
                    delivered_by_exporter: config.is_some_and(|c| c.kind.delivers()),
                    max_backlog_bytes: AtomicU64::new(config.map_or(MAX_BACKLOG_BYTES_DEFAULT, |c| c.max_backlog_bytes)),
                    ..Default::default()
                })
            })
            .clone()
    }

    /// Notes the migrated rows among `rows`, which the target of lane `partition` has just
    /// acknowledged. Called by the exporter after it saved its position past them.
    pub(crate) fn note_acknowledged(&self, partition: u32, rows: &[serde_json::Value]) {
        let migrated = rows.iter().filter(|r| r.get(MIGRATED_KEY).and_then(|m| m.as_bool()) == Some(true)).filter_map(|r| {
            Some(Acknowledged {
                partition,
                table: r.get("stream")?.as_str()?.to_string(),
                txn_id: r.get("txn_id")?.as_i64()?,
                row: r.get("row")?.as_object()?.clone(),
            })
        });
        let mut list = self.acknowledged.lock().unwrap_or_else(|e| e.into_inner());
        list.extend(migrated);
    }

    /// Takes the acknowledged migrated rows noted so far.
    pub fn take_acknowledged(&self) -> Vec<Acknowledged> {
        std::mem::take(&mut *self.acknowledged.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Every lane, sorted by target and partition.
    pub fn lanes(&self) -> Vec<Arc<Lane>> {
        let lanes = match self.lanes.lock() {
            Ok(l) => l,
            Err(p) => p.into_inner(),
        };
        let mut all: Vec<_> = lanes.values().cloned().collect();
        all.sort_by(|a, b| (&a.target, a.partition).cmp(&(&b.target, b.partition)));
        all
    }
}

/// The directory of one (target, partition)'s segments.
pub fn lane_dir(data_dir: &Path, target: &str, partition: u32) -> PathBuf {
    data_dir.join("export").join(target).join(format!("partition-{partition}"))
}

fn segment_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{segment:010}.jsonl"))
}

/// The segment numbers in a lane's directory, oldest first.
pub fn segments(dir: &Path) -> Vec<u64> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut all: Vec<u64> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".jsonl")).and_then(|n| n.parse().ok()))
        .collect();
    all.sort_unstable();
    all
}

struct TargetFile {
    out: BufWriter<File>,
    dir: PathBuf,
    segment: u64,
    segment_bytes: u64,
    next_seq: u64,
    lane: Arc<Lane>,
    /// Rows per transaction already in the files when they were opened: the command log's
    /// replay runs those transactions again, and their rows must not be written twice.
    on_disk: HashMap<i64, usize>,
    /// A `file` target: its migrated rows are acknowledged once on disk.
    acknowledges: bool,
    /// The migrated rows written since the last hand-off to the acknowledger.
    unsynced: Vec<serde_json::Value>,
}

/// Writes one partition's exported rows.
pub struct ExportWriter {
    data_dir: PathBuf,
    partition: u32,
    hub: Arc<ExportHub>,
    files: HashMap<String, TargetFile>,
    dirty: bool,
    /// The thread that fsyncs `file` targets' segments and acknowledges their migrated rows.
    file_acks: file_ack::FileAcks,
}

/// What the segments of a lane hold: the last sequence number (numbering continues after
/// a restart) and the rows each transaction wrote.
fn scan_segments(dir: &Path) -> (u64, HashMap<i64, usize>) {
    let (mut last, mut rows) = (0, HashMap::new());
    for s in segments(dir) {
        let Ok(f) = File::open(segment_path(dir, s)) else { continue };
        for line in BufReader::new(f).lines().map_while(Result::ok) {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if let Some(seq) = v.get("seq").and_then(|s| s.as_u64()) {
                last = seq;
            }
            if let Some(txn) = v.get("txn_id").and_then(|t| t.as_i64()) {
                *rows.entry(txn).or_insert(0) += 1;
            }
        }
    }
    (last, rows)
}

fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::Null => serde_json::Value::Null,
        Value::Int(i) => json!(i),
        Value::Float(f) => json!(f),
        Value::Bool(b) => json!(b),
        Value::Array(a) => serde_json::Value::Array(a.iter().map(json_value).collect()),
        other => json!(other.to_string()),
    }
}

/// Opens a segment for appending; a line cut short by a crash is ended first, so the next
/// line starts on its own (readers skip the broken one).
fn open_segment(path: &Path) -> std::io::Result<(BufWriter<File>, u64)> {
    let mut f = OpenOptions::new().create(true).read(true).append(true).open(path)?;
    let len = f.metadata()?.len();
    let mut len_after = len;
    if len > 0 {
        use std::io::{Read, Seek, SeekFrom};
        let mut last = [0u8; 1];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            f.write_all(b"\n")?;
            len_after += 1;
        }
    }
    Ok((BufWriter::new(f), len_after))
}

/// Whether `target`'s files acknowledge the migrated rows they hold once synced: only a
/// target configured as `file`. One not configured yet may become a delivering one, which
/// must still find its migrated rows in the table.
pub(crate) fn acknowledges(hub: &ExportHub, target: &str) -> bool {
    hub.target(target).is_some_and(|c| c.kind == TargetKind::File)
}

impl ExportWriter {
    pub fn new(data_dir: &Path, partition: u32, hub: Arc<ExportHub>) -> Self {
        ExportWriter {
            data_dir: data_dir.to_path_buf(),
            partition,
            hub,
            files: HashMap::new(),
            dirty: false,
            file_acks: Default::default(),
        }
    }

    fn file(&mut self, target: &str) -> std::io::Result<&mut TargetFile> {
        match self.files.entry(target.to_string()) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let dir = lane_dir(&self.data_dir, target, self.partition);
                fs::create_dir_all(&dir)?;
                let segment = segments(&dir).last().copied().unwrap_or(1);
                let (last, on_disk) = scan_segments(&dir);
                let (out, segment_bytes) = open_segment(&segment_path(&dir, segment))?;
                let lane = self.hub.lane(target, self.partition);
                let acknowledges = acknowledges(&self.hub, target);
                let next_seq = last + 1;
                Ok(e.insert(TargetFile { out, dir, segment, segment_bytes, next_seq, lane, on_disk, acknowledges, unsynced: Vec::new() }))
            }
        }
    }

    /// Appends the committed rows of one transaction.
    pub fn write(&mut self, catalog: &Catalog, txn_id: i64, rows: Vec<ExportRow>) -> std::io::Result<()> {
        let mut touched: Vec<String> = Vec::new();
        for r in rows {
            let Some(def) = catalog.table_by_id(r.stream) else { continue };
            let TableKind::Stream { target: Some(target) } = &def.kind else { continue };
            let mut row = Map::new();
            for (c, v) in def.columns.iter().zip(&r.row) {
                row.insert(c.name.clone(), json_value(v));
            }
            let partition = self.partition;
            let f = self.file(target)?;
            if let Some(n) = f.on_disk.get_mut(&txn_id).filter(|n| **n > 0) {
                // Replayed: this row is in the files already.
                *n -= 1;
                continue;
            }
            // A migrated row is exported under its table's name, marked as migrated.
            let line = match lockstep_sql::ddl_migrate::table_of_rows_stream(&def.name) {
                Some(table) => {
                    json!({"seq": f.next_seq, "txn_id": txn_id, "partition": partition, "stream": table, MIGRATED_KEY: true, "row": row})
                }
                None => json!({"seq": f.next_seq, "txn_id": txn_id, "partition": partition, "stream": def.name, "row": row}),
            };
            let mut bytes = serde_json::to_vec(&line)?;
            bytes.push(b'\n');
            f.out.write_all(&bytes)?;
            if f.acknowledges && line.get(MIGRATED_KEY).is_some() {
                f.unsynced.push(line);
            }
            f.next_seq += 1;
            f.segment_bytes += bytes.len() as u64;
            f.lane.rows_written.fetch_add(1, Ordering::Relaxed);
            f.lane.adjust_backlog(1, bytes.len() as i64);
            if !touched.iter().any(|t| t == target) {
                touched.push(target.clone());
            }
            self.dirty = true;
        }
        // Between transactions: a full segment is closed (flushed) before the next one
        // exists, so an exporter that sees a newer segment knows the older is complete.
        for target in touched {
            if let Some(f) = self.files.get_mut(&target) {
                let full = f.segment_bytes >= SEGMENT_BYTES_MAX;
                if full || f.unsynced.len() >= file_ack::FILE_ACK_ROWS_MAX {
                    hand_off(&mut self.file_acks, &self.hub, self.partition, &target, f)?;
                }
                if full {
                    f.out.flush()?;
                    f.segment += 1;
                    let (out, len) = open_segment(&segment_path(&f.dir, f.segment))?;
                    f.out = out;
                    f.segment_bytes = len;
                }
            }
        }
        Ok(())
    }

    /// Pushes buffered lines to the files (called when the site goes idle), and hands the
    /// migrated rows of `file` targets to their acknowledger.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.dirty {
            for (target, f) in self.files.iter_mut() {
                f.out.flush()?;
                hand_off(&mut self.file_acks, &self.hub, self.partition, target, f)?;
            }
            self.dirty = false;
        }
        Ok(())
    }
}

/// Flushes a `file` target's segment and hands its migrated rows written since the last
/// hand-off to the acknowledger, which notes them once the segment is fsynced.
fn hand_off(acks: &mut file_ack::FileAcks, hub: &Arc<ExportHub>, partition: u32, target: &str, f: &mut TargetFile) -> std::io::Result<()> {
    if f.unsynced.is_empty() {
        return Ok(());
    }
    f.out.flush()?;
    let file = f.out.get_ref().try_clone()?;
    let rows = std::mem::take(&mut f.unsynced);
    acks.send(hub, partition, file_ack::SyncJob { target: target.to_string(), segment: f.segment, file, rows });
    Ok(())
}
