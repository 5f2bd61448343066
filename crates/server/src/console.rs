//! The web console: one page at `/` (its HTML, CSS, script and the vendored Chart.js are
//! compiled into the binary) and the two JSON reads it polls, `/console/api/live` and
//! `/console/api/schema`. The page runs SQL through the JSON API (`/api/1.0/`) like any
//! other client.
//!
//! The console must not slow a server that runs flat out, so `live` answers from the
//! counters the front end and the engine keep for any reader (the same as `/metrics`):
//! calls by procedure, the latency histogram, queue lengths, the command log. Two figures
//! are not counters: rows and memory by table live on the sites (a short `@Statistics
//! TABLE` read behind their queued work), and the snapshots on disk. Both are cached and
//! refreshed in the background at most every few seconds, however many pages poll; a
//! request never waits for them.
//!
//! With users on, the data reads need the same login as the API (HTTP Basic); the page
//! and its files hold no data and are served to anyone.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Response, StatusCode};
use lockstep_core::catalog::{Catalog, Partitioning, ProcedureBody, TableDef, TableKind};
use lockstep_core::DataType;
use lockstep_engine::{auth, snapshot, stats, Principal};
use serde_json::{json, Value as J};

use crate::metrics::{self, LATENCY_BOUNDS_US};
use crate::Front;

/// Rows and memory by table are asked of the sites at most this often.
pub const TABLE_FIGURES_REFRESH_MS: u64 = 5_000;
/// The snapshots directory is read at most this often.
pub const SNAPSHOTS_REFRESH_MS: u64 = 2_000;
/// Snapshot directories looked at per read at most (the newest by id); older ones are
/// counted, not read.
const SNAPSHOT_DIRS_READ_MAX: usize = 64;

/// Where the console's files and data are served.
const PREFIX: &str = "/console/";

/// The page's files: path, content type, body.
const FILES: [(&str, &str, &str); 5] = [
    ("/", "text/html; charset=utf-8", include_str!("../console/index.html")),
    ("/console/console.css", "text/css; charset=utf-8", include_str!("../console/console.css")),
    ("/console/console.js", "text/javascript; charset=utf-8", include_str!("../console/console.js")),
    (
        "/console/vendor/chart.js/chart.umd.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../console/vendor/chart.js/chart.umd.min.js"),
    ),
    ("/console/vendor/chart.js/LICENSE.md", "text/plain; charset=utf-8", include_str!("../console/vendor/chart.js/LICENSE.md")),
];

/// The page may load its own files only: no inline script, nothing from elsewhere, no
/// framing (the JSON it shows comes from this server and is written as text, never HTML).
const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

type Body = Full<Bytes>;

/// Is `path` the console's (the page at `/`, or anything under `/console/`)?
pub fn serves(path: &str) -> bool {
    path == "/" || path.starts_with(PREFIX)
}

/// A figure read in the background, and when.
struct Cached<T> {
    value: Option<Arc<T>>,
    read_at: Option<Instant>,
    /// A read is under way (at most one at a time).
    reading: bool,
}

impl<T> Default for Cached<T> {
    fn default() -> Self {
        Cached { value: None, read_at: None, reading: false }
    }
}

impl<T> Cached<T> {
    /// The value to answer with now, and whether a new read should start (the value is
    /// older than `max_age` and no read is under way; the caller starts it).
    fn take(&mut self, max_age: Duration) -> (Option<Arc<T>>, Option<Duration>, bool) {
        let age = self.read_at.map(|at| at.elapsed());
        let stale = age.is_none_or(|a| a >= max_age);
        let start = stale && !self.reading;
        if start {
            self.reading = true;
        }
        (self.value.clone(), age, start)
    }

    fn put(&mut self, value: Option<T>) {
        if let Some(v) = value {
            self.value = Some(Arc::new(v));
        }
        self.read_at = Some(Instant::now());
        self.reading = false;
    }
}

/// The console's shared state: the figures it caches for every page that polls.
#[derive(Default)]
pub struct Console {
    tables: Mutex<Cached<metrics::TableFigures>>,
    snapshots: Mutex<Cached<Snapshots>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Answers a request under the console's paths. `login` checks the caller's credentials
/// (only the data reads call it).
pub fn handle<L>(method: &Method, path: &str, login: L, front: &Arc<Front>, console: &Arc<Console>) -> Response<Body>
where
    L: FnOnce() -> Result<Option<Arc<Principal>>, String>,
{
    if method != Method::GET && method != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "The console's paths answer GET only\n");
    }
    if let Some((_, content_type, body)) = FILES.iter().find(|(p, _, _)| *p == path) {
        return file(content_type, body);
    }
    let sysproc = match path {
        "/console/api/live" => "@Statistics",
        "/console/api/schema" => "@SystemCatalog",
        _ => return text(StatusCode::NOT_FOUND, "Resource not found\n"),
    };
    if let Err(message) = login().and_then(|who| permitted(who.as_deref(), front, sysproc)) {
        return data(StatusCode::UNAUTHORIZED, &json!({ "error": message }));
    }
    match path {
        "/console/api/live" => data(StatusCode::OK, &live(front, console)),
        _ => data(StatusCode::OK, &schema(&front.engine.catalog())),
    }
}

/// The console's reads need what the system procedure they stand for needs.
fn permitted(who: Option<&Principal>, front: &Front, sysproc: &str) -> Result<(), String> {
    auth::check_system(who, &front.engine.catalog(), sysproc).map_err(|e| e.message)
}

/// Everything the monitor's charts show, read from shared counters (and the caches).
fn live(front: &Arc<Front>, console: &Arc<Console>) -> J {
    let shared = front.engine.shared();
    let window = shared.stats.latency.summary();
    json!({
        "now_ms": now_ms(),
        "started_ms": shared.started_ms,
        "partitions": front.engine.partition_count(),
        "procedures": procedures(front),
        "latency": {
            "bounds_us": LATENCY_BOUNDS_US,
            "counts": front.metrics.latency.counts(),
            "window": {
                "interval_ms": window.interval_ms,
                "count": window.count,
                "percentiles_us": window.percentiles_us,
                "max_us": window.max_us,
            },
        },
        "queues": shared.site_queue_depths(),
        "mp_queue": shared.mp_queue_depth(),
        "busy_seconds": shared.site_busy_seconds(),
        "cpu_seconds": stats::process_cpu_seconds(),
        "connections": front.live.len(),
        "rss_bytes": stats::rss_kb().saturating_mul(1024),
        "command_log": command_log(front),
        "tables": tables(front, console),
        "snapshots": snapshots(front, console),
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Calls, aborts, failures and summed latency of every procedure counted so far.
fn procedures(front: &Front) -> Vec<J> {
    let procs = front.metrics.procedures_sorted();
    procs
        .iter()
        .map(|(name, c)| {
            let (calls, aborts, failures, latency_us) = c.figures();
            json!({ "name": &**name, "calls": calls, "aborts": aborts, "failures": failures, "latency_us": latency_us })
        })
        .collect()
}

fn command_log(front: &Front) -> J {
    let log = front.engine.shared().durable.log.stats();
    json!({
        "mode": log.mode,
        "records": log.records,
        "bytes": log.bytes,
        "syncs": log.syncs,
        "last_sync_us": log.last_sync_latency_us,
        "failed": log.failed,
        "failures": log.failures,
        "queued": log.queued,
    })
}

/// Rows and memory by table as last read from the sites (null before the first read);
/// starts a new read in the background when it is older than `TABLE_FIGURES_REFRESH_MS`.
fn tables(front: &Arc<Front>, console: &Arc<Console>) -> J {
    let (value, age, start) = lock(&console.tables).take(Duration::from_millis(TABLE_FIGURES_REFRESH_MS));
    if start {
        let (front, console) = (front.clone(), console.clone());
        tokio::spawn(async move {
            let figures = metrics::table_figures(&front.engine).await;
            lock(&console.tables).put(figures);
        });
    }
    let Some(t) = value else { return J::Null };
    let rows: Vec<J> = t.tables.iter().map(|(name, rows, bytes)| json!({ "name": name, "rows": rows, "bytes": bytes })).collect();
    let age_ms = age.map_or(0, |a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX));
    json!({ "age_ms": age_ms, "tables": rows })
}

/// The snapshots on disk, as last read (null before the first read); refreshed in the
/// background like `tables`.
fn snapshots(front: &Arc<Front>, console: &Arc<Console>) -> J {
    let (value, _, start) = lock(&console.snapshots).take(Duration::from_millis(SNAPSHOTS_REFRESH_MS));
    if start {
        let dir = snapshot::snapshots_dir(&front.engine.shared().config.data_dir);
        let console = console.clone();
        tokio::spawn(async move {
            let read = tokio::task::spawn_blocking(move || read_snapshots(&dir)).await.ok();
            lock(&console.snapshots).put(read);
        });
    }
    match value {
        Some(s) => s.to_json(),
        None => J::Null,
    }
}

/// What the snapshots directory holds: complete snapshots (a manifest, written last) and
/// the newest directory without one, which is a snapshot being written if it is newer
/// than every complete one.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Snapshots {
    pub(crate) complete: usize,
    /// (id, completed at in ms since the epoch, bytes) of the newest complete snapshot.
    pub(crate) newest: Option<(u64, u64, u64)>,
    /// (id, bytes written so far) of a snapshot being written.
    pub(crate) writing: Option<(u64, u64)>,
}

impl Snapshots {
    fn to_json(&self) -> J {
        json!({
            "complete": self.complete,
            "newest": self.newest.map(|(id, at, bytes)| json!({ "id": id, "created_ms": at, "bytes": bytes })),
            "writing": self.writing.map(|(id, bytes)| json!({ "id": id, "bytes": bytes })),
        })
    }
}

/// Reads the manifests of the newest snapshot directories (not their files: a manifest
/// is enough to show the state; `snapshot::verify` is for restores).
pub(crate) fn read_snapshots(root: &Path) -> Snapshots {
    let mut dirs: Vec<(u64, PathBuf)> = match std::fs::read_dir(root) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let id = e.file_name().to_str()?.parse::<u64>().ok()?;
                Some((id, e.path()))
            })
            .collect(),
        Err(_) => return Snapshots::default(),
    };
    dirs.sort_by_key(|(id, _)| std::cmp::Reverse(*id));
    let mut out = Snapshots::default();
    let mut incomplete_newer = None;
    for (id, dir) in dirs.iter().take(SNAPSHOT_DIRS_READ_MAX) {
        match snapshot::Manifest::read(dir) {
            Ok(m) => {
                out.complete += 1;
                if out.newest.is_none() {
                    out.newest = Some((m.id, m.created_unix_ms, m.files.iter().map(|f| f.size).sum()));
                }
            }
            Err(_) if out.newest.is_none() && incomplete_newer.is_none() => incomplete_newer = Some((*id, dir_bytes(dir))),
            Err(_) => {}
        }
    }
    out.complete += dirs.len().saturating_sub(SNAPSHOT_DIRS_READ_MAX);
    out.writing = incomplete_newer;
    out
}

/// Bytes of the files directly in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.filter_map(Result::ok).filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
}

/// The schema view: tables, streams and views with their columns, partitioning and
/// indexes, and the procedures with their routing, from the catalog (no partition is asked).
fn schema(catalog: &Catalog) -> J {
    let tables: Vec<J> = catalog.tables().map(|t| table_json(catalog, t)).collect();
    let procedures: Vec<J> = catalog
        .procedures()
        .map(|p| {
            let (language, sql) = match &p.body {
                ProcedureBody::Sql(text) => ("SQL", Some(text.as_str())),
                ProcedureBody::Lua { .. } => ("Lua", None),
            };
            let partitioning = match &p.partitioning {
                Partitioning::Multi => json!({ "kind": "multi-partition" }),
                Partitioning::Directed => json!({ "kind": "directed" }),
                Partitioning::Single { table, column, parameter, .. } => {
                    json!({ "kind": "single-partition", "table": table, "column": column, "parameter": parameter })
                }
            };
            json!({ "name": p.name, "language": language, "sql": sql, "partitioning": partitioning })
        })
        .collect();
    json!({ "version": catalog.version, "tables": tables, "procedures": procedures })
}

fn table_json(catalog: &Catalog, t: &TableDef) -> J {
    let column_name = |i: usize| t.columns.get(i).map_or("?", |c| c.name.as_str());
    let columns: Vec<J> = t
        .columns
        .iter()
        .map(|c| {
            let sized = matches!(c.ty, DataType::Varchar | DataType::Varbinary);
            let ty = if sized { format!("{}({}{})", c.ty, c.size, if c.in_bytes { " BYTES" } else { "" }) } else { c.ty.to_string() };
            json!({ "name": c.name, "type": ty, "nullable": c.nullable })
        })
        .collect();
    let indexes: Vec<J> = t
        .indexes
        .iter()
        .map(|i| {
            let cols: Vec<&str> = i.columns.iter().map(|c| column_name(*c)).collect();
            json!({ "name": i.name, "columns": cols, "unique": i.unique || i.assume_unique, "primary": i.primary })
        })
        .collect();
    let (kind, source) = match &t.kind {
        TableKind::Table => ("table", None),
        TableKind::Stream { .. } => ("stream", None),
        TableKind::View(v) => ("view", catalog.table_by_id(v.source).map(|s| s.name.clone())),
    };
    json!({
        "name": t.name,
        "kind": kind,
        "partition_column": t.partition_column.map(column_name),
        "replicated": t.is_replicated(),
        "source": source,
        "columns": columns,
        "indexes": indexes,
    })
}

fn file(content_type: &'static str, body: &'static str) -> Response<Body> {
    let mut r = respond(StatusCode::OK, content_type, Bytes::from_static(body.as_bytes()));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn data(status: StatusCode, value: &J) -> Response<Body> {
    let mut r = respond(status, "application/json; charset=utf-8", Bytes::from(value.to_string()));
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn text(status: StatusCode, body: &'static str) -> Response<Body> {
    respond(status, "text/plain; charset=utf-8", Bytes::from_static(body.as_bytes()))
}

/// A response with the console's security headers.
fn respond(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(HeaderName::from_static("content-security-policy"), HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(HeaderName::from_static("x-content-type-options"), HeaderValue::from_static("nosniff"));
    h.insert(HeaderName::from_static("x-frame-options"), HeaderValue::from_static("DENY"));
    h.insert(HeaderName::from_static("referrer-policy"), HeaderValue::from_static("no-referrer"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_only_files_that_are_served() {
        let (_, _, page) = FILES[0];
        for needed in ["/console/console.css", "/console/console.js", "/console/vendor/chart.js/chart.umd.min.js"] {
            assert!(page.contains(needed), "index.html does not load {needed}");
            assert!(FILES.iter().any(|(p, _, _)| *p == needed));
        }
        assert!(serves("/") && serves("/console/api/live") && !serves("/api/1.0/") && !serves("/metrics"));
    }

    #[test]
    fn a_cached_figure_is_read_again_only_when_stale_and_once_at_a_time() {
        let mut c: Cached<u32> = Cached::default();
        let max_age = Duration::from_secs(60);
        assert!(matches!(c.take(max_age), (None, None, true)));
        assert!(!c.take(max_age).2, "a second read must not start while one is under way");
        c.put(Some(7));
        let (v, age, start) = c.take(max_age);
        assert_eq!((v.as_deref(), age.is_some(), start), (Some(&7), true, false));
        c.put(None);
        assert_eq!(c.take(Duration::ZERO).0.as_deref(), Some(&7), "a failed read keeps the last value");
    }

    #[test]
    fn snapshots_are_read_from_manifests_and_a_newer_directory_without_one_is_being_written() {
        let root = std::env::temp_dir().join(format!("lockstep-console-snapshots-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert_eq!(read_snapshots(&root), Snapshots::default(), "no directory, no snapshots");
        let manifest = |id: u64| {
            let m = snapshot::Manifest {
                format: snapshot::manifest::FORMAT_VERSION,
                id,
                txn_id: 1,
                partitions: 1,
                created_unix_ms: 1000 + id,
                files: vec![snapshot::FileEntry { name: "catalog.sql".into(), size: 10 * id, crc32c: 0 }],
            };
            let dir = root.join(id.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(snapshot::MANIFEST_FILE), serde_json::to_vec(&m).unwrap()).unwrap();
        };
        manifest(1);
        manifest(2);
        std::fs::create_dir_all(root.join("3")).unwrap();
        std::fs::write(root.join("3").join("partition-0.snap"), [0u8; 5]).unwrap();
        let s = read_snapshots(&root);
        assert_eq!(s, Snapshots { complete: 2, newest: Some((2, 1002, 20)), writing: Some((3, 5)) });
        let _ = std::fs::remove_dir_all(&root);
    }
}
