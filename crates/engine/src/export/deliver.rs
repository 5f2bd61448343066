//! The background exporters: one thread per (target, partition) of a delivering target. It
//! reads the partition's segment files from its last acknowledged position, sends a batch
//! (after waiting up to the target's linger time for a partial one to fill),
//! and only after the target acknowledged it saves the new position durably (a small file
//! written, fsynced, then renamed). After a crash or an outage it resends from that
//! position: no row is skipped, and only rows after it can arrive twice. Segments wholly
//! delivered are deleted.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{lane_dir, segment_path, segments, ExportHub, Lane, TargetConfig, TargetKind};

/// Rows sent in one batch at most.
pub const BATCH_ROWS_MAX: usize = 1000;
/// Bytes of rows (as stored) sent in one batch at most.
pub const BATCH_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// How often an idle exporter looks for new rows.
pub const POLL_MS: u64 = 50;
/// First wait after a failed delivery; it doubles up to `RETRY_MAX_MS`.
pub const RETRY_FIRST_MS: u64 = 100;
pub const RETRY_MAX_MS: u64 = 5_000;

const POSITION_FILE: &str = "position";

/// Where delivery stands: the next byte to send in a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub segment: u64,
    pub offset: u64,
}

/// Reads a lane's saved position; none saved means the start of its oldest segment.
pub fn load_position(dir: &Path) -> Position {
    let saved = fs::read_to_string(dir.join(POSITION_FILE)).ok().and_then(|text| {
        let mut parts = text.split_whitespace().map(|p| p.parse::<u64>().ok());
        Some(Position { segment: parts.next()??, offset: parts.next()?? })
    });
    let oldest = segments(dir).first().copied().unwrap_or(1);
    match saved {
        // A position in a segment already deleted points at the next one that exists.
        Some(p) if p.segment >= oldest => p,
        _ => Position { segment: oldest, offset: 0 },
    }
}

/// Saves the position durably: a temporary file fsynced, renamed over the old, and the
/// directory fsynced, so a crash leaves either the old or the new position.
pub fn save_position(dir: &Path, p: Position) -> std::io::Result<()> {
    let tmp = dir.join(format!("{POSITION_FILE}.tmp"));
    let mut f = File::create(&tmp)?;
    writeln!(f, "{} {}", p.segment, p.offset)?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(POSITION_FILE))?;
    File::open(dir)?.sync_all()
}

/// A batch read from the files: whole lines, and where the next batch starts.
pub struct Batch {
    pub rows: Vec<serde_json::Value>,
    pub bytes: u64,
    pub end: Position,
}

/// What is next at a position.
pub enum Next {
    Rows(Batch),
    /// The segment is complete and delivered: move on to this (next) one.
    Segment(u64),
    Nothing,
}

/// Reads up to a batch (`max_rows`) of complete lines from `p`. A line without its newline
/// is still being written and waits; a line that is not JSON (cut by a crash) is skipped.
pub fn read_batch(dir: &Path, p: Position, max_rows: usize) -> std::io::Result<Next> {
    let path = segment_path(dir, p.segment);
    let mut rows = Vec::new();
    let mut offset = p.offset;
    if let Ok(f) = File::open(&path) {
        let mut r = BufReader::new(f);
        r.seek(SeekFrom::Start(p.offset))?;
        let mut line = Vec::new();
        while rows.len() < max_rows && offset - p.offset < BATCH_BYTES_MAX {
            line.clear();
            let n = r.read_until(b'\n', &mut line)?;
            if n == 0 || line.last() != Some(&b'\n') {
                break;
            }
            offset += n as u64;
            match serde_json::from_slice::<serde_json::Value>(&line) {
                Ok(v) => rows.push(v),
                // Written whole by this server: a line that does not parse was damaged on
                // disk, and is said, not passed over quietly.
                Err(e) => tracing::error!("export segment {} has a damaged line at byte {}: {e}", path.display(), offset - n as u64),
            }
        }
    }
    if offset > p.offset {
        return Ok(Next::Rows(Batch { rows, bytes: offset - p.offset, end: Position { segment: p.segment, offset } }));
    }
    // Nothing more here: a newer segment means this one is complete (the writer flushes a
    // segment before it begins the next).
    Ok(match segments(dir).into_iter().find(|s| *s > p.segment) {
        Some(next) => Next::Segment(next),
        None => Next::Nothing,
    })
}

/// Counts the rows and bytes not yet delivered in a lane, from its saved position.
fn undelivered(dir: &Path) -> (i64, i64) {
    let p = load_position(dir);
    let (mut rows, mut bytes) = (0i64, 0i64);
    for s in segments(dir).into_iter().filter(|s| *s >= p.segment) {
        let Ok(f) = File::open(segment_path(dir, s)) else { continue };
        let mut r = BufReader::new(f);
        let start = if s == p.segment { p.offset } else { 0 };
        if r.seek(SeekFrom::Start(start)).is_err() {
            continue;
        }
        for line in r.split(b'\n').map_while(Result::ok) {
            rows += 1;
            bytes += line.len() as i64 + 1;
        }
    }
    (rows, bytes)
}

/// Makes the lanes of delivering targets and counts what their files still hold; called
/// before the sites start writing (and replaying).
pub fn prepare(hub: &ExportHub, data_dir: &Path, partitions: u32) {
    for t in hub.targets.iter().filter(|t| t.kind.delivers()) {
        for partition in 0..partitions {
            let lane = hub.lane(&t.name, partition);
            let (rows, bytes) = undelivered(&lane_dir(data_dir, &lane.target, partition));
            lane.adjust_backlog(rows, bytes);
        }
    }
}

/// Starts one exporter thread per (delivering target, partition).
pub fn start_exporters(hub: &Arc<ExportHub>, data_dir: &Path, partitions: u32) -> std::io::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    for t in hub.targets.iter().filter(|t| t.kind.delivers()) {
        for partition in 0..partitions {
            let lane = hub.lane(&t.name, partition);
            let dir = lane_dir(data_dir, &lane.target, partition);
            let exporter = Exporter { hub: hub.clone(), config: t.clone(), lane, dir, partitions };
            let name = format!("export-{}-{partition}", t.name);
            threads.push(std::thread::Builder::new().name(name).spawn(move || exporter.run())?);
        }
    }
    Ok(threads)
}

/// Sends batches to one kind of target.
pub trait Sink {
    fn send(&mut self, rows: &[serde_json::Value]) -> Result<(), String>;
}

/// The sink of one (target, partition); `partitions` is how many the server has.
fn sink_for(config: &TargetConfig, partition: u32, partitions: u32) -> Box<dyn Sink + Send> {
    match &config.kind {
        TargetKind::Http { url } => Box::new(super::http::HttpSink::new(url)),
        TargetKind::Postgresql { url, table } => Box::new(super::postgres::PgSink::new(url, table)),
        TargetKind::Kafka(k) => Box::new(super::kafka::KafkaSink::new(k, partition, partitions)),
        // File targets have no exporter (`TargetKind::delivers`).
        TargetKind::File => Box::new(NoSink),
    }
}

struct NoSink;

impl Sink for NoSink {
    fn send(&mut self, _: &[serde_json::Value]) -> Result<(), String> {
        Ok(())
    }
}

struct Exporter {
    hub: Arc<ExportHub>,
    config: TargetConfig,
    lane: Arc<Lane>,
    dir: PathBuf,
    /// Partitions of the server (a Kafka topic the exporter creates gets as many).
    partitions: u32,
}

impl Exporter {
    fn stopping(&self) -> bool {
        self.hub.stopping.load(Ordering::Relaxed)
    }

    /// Sleeps in small steps so shutdown is not held up by a long wait.
    fn pause(&self, ms: u64) {
        let mut left = ms;
        while left > 0 && !self.stopping() {
            let step = left.min(POLL_MS);
            std::thread::sleep(Duration::from_millis(step));
            left -= step;
        }
    }

    fn note_error(&self, e: &str) {
        if !self.lane.down.swap(true, Ordering::Relaxed) {
            tracing::warn!("export target {} partition {} is down: {e}; rows are kept and resent", self.config.name, self.lane.partition);
        }
        if let Ok(mut last) = self.lane.last_error.lock() {
            *last = e.to_string();
        }
    }

    fn run(self) {
        let sink = sink_for(&self.config, self.lane.partition, self.partitions);
        self.run_with(sink);
    }

    fn run_with(self, mut sink: Box<dyn Sink + Send>) {
        let mut pos = load_position(&self.dir);
        let (max_rows, linger_ms) = self.config.kind.batching();
        // Since when a partial batch has waited to fill (linger).
        let mut lingering: Option<Instant> = None;
        while !self.stopping() {
            match read_batch(&self.dir, pos, max_rows) {
                Ok(Next::Rows(batch)) => {
                    if batch.rows.len() < max_rows && linger_ms > 0 {
                        let since = *lingering.get_or_insert_with(Instant::now);
                        let left = Duration::from_millis(linger_ms).saturating_sub(since.elapsed());
                        if !left.is_zero() {
                            self.pause((left.as_millis() as u64).clamp(1, POLL_MS));
                            continue;
                        }
                    }
                    lingering = None;
                    if self.deliver(sink.as_mut(), &batch) {
                        pos = batch.end;
                    }
                }
                Ok(Next::Segment(next)) => {
                    let done = pos.segment;
                    pos = Position { segment: next, offset: 0 };
                    self.save(pos);
                    if let Err(e) = fs::remove_file(segment_path(&self.dir, done)) {
                        tracing::warn!("cannot delete delivered export segment {done} of {}: {e}", self.dir.display());
                    }
                }
                Ok(Next::Nothing) => self.pause(POLL_MS),
                Err(e) => {
                    self.note_error(&format!("cannot read {}: {e}", self.dir.display()));
                    self.pause(RETRY_MAX_MS);
                }
            }
        }
    }

    /// Sends one batch until the target takes it (true), or the server stops (false).
    fn deliver(&self, sink: &mut dyn Sink, batch: &Batch) -> bool {
        let mut wait = RETRY_FIRST_MS;
        loop {
            if self.stopping() {
                return false;
            }
            match if batch.rows.is_empty() { Ok(()) } else { sink.send(&batch.rows) } {
                Ok(()) => break,
                Err(e) => {
                    self.note_error(&e);
                    self.pause(wait);
                    wait = (wait * 2).min(RETRY_MAX_MS);
                }
            }
        }
        // Only now is the batch acknowledged: the position moves past it. The rows under
        // the position go to disk first, so a power cut cannot leave a saved position past
        // the end of a segment the replay then writes again under different numbers.
        if let Err(e) = File::open(segment_path(&self.dir, batch.end.segment)).and_then(|f| f.sync_data()) {
            tracing::warn!("cannot sync export segment {} of {}: {e}", batch.end.segment, self.dir.display());
        }
        self.save(batch.end);
        // Migrated rows may leave their table now that the target has them.
        self.hub.note_acknowledged(self.lane.partition, &batch.rows);
        if self.lane.down.swap(false, Ordering::Relaxed) {
            tracing::info!("export target {} partition {} is up again", self.config.name, self.lane.partition);
        }
        self.lane.rows_delivered.fetch_add(batch.rows.len() as u64, Ordering::Relaxed);
        self.lane.adjust_backlog(-(batch.rows.len() as i64), -(batch.bytes as i64));
        true
    }

    fn save(&self, pos: Position) {
        // If the position cannot be saved the rows are sent again after a restart: a
        // duplicate, never a loss.
        if let Err(e) = save_position(&self.dir, pos) {
            tracing::error!("cannot save the export position in {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_survives_and_batches_resume_after_it() {
        let dir = std::env::temp_dir().join(format!("lockstep-export-pos-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(segment_path(&dir, 1), "{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3").unwrap();
        let start = load_position(&dir);
        assert_eq!(start, Position { segment: 1, offset: 0 });
        let Next::Rows(b) = read_batch(&dir, start, BATCH_ROWS_MAX).unwrap() else { panic!("rows expected") };
        // The unfinished third line waits for its newline.
        assert_eq!(b.rows.len(), 2);
        save_position(&dir, b.end).unwrap();
        assert_eq!(load_position(&dir), b.end);
        assert!(matches!(read_batch(&dir, b.end, BATCH_ROWS_MAX).unwrap(), Next::Nothing));
        fs::write(segment_path(&dir, 2), "{\"seq\":4}\n").unwrap();
        // The third line was never finished (a crash): once a newer segment exists the
        // exporter moves on.
        let mut f = fs::OpenOptions::new().append(true).open(segment_path(&dir, 1)).unwrap();
        f.write_all(b"\n").unwrap();
        let Next::Rows(b2) = read_batch(&dir, b.end, BATCH_ROWS_MAX).unwrap() else { panic!("rest of line expected") };
        assert!(b2.rows.is_empty());
        assert!(matches!(read_batch(&dir, b2.end, BATCH_ROWS_MAX).unwrap(), Next::Segment(2)));
        assert_eq!(undelivered(&dir), (2, 19));
        let _ = fs::remove_dir_all(&dir);
    }

    /// Takes every batch, or refuses while `refuse` is set.
    struct Collect(Arc<std::sync::Mutex<Vec<u64>>>, Arc<std::sync::atomic::AtomicBool>);

    impl Sink for Collect {
        fn send(&mut self, rows: &[serde_json::Value]) -> Result<(), String> {
            if self.1.load(Ordering::Relaxed) {
                return Err("refused".into());
            }
            self.0.lock().unwrap().extend(rows.iter().filter_map(|r| r["seq"].as_u64()));
            Ok(())
        }
    }

    #[test]
    fn an_exporter_delivers_in_order_through_a_refusal_and_deletes_delivered_segments() {
        let dir = std::env::temp_dir().join(format!("lockstep-export-run-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(segment_path(&dir, 1), "{\"seq\":1}\n{\"seq\":2}\n").unwrap();
        fs::write(segment_path(&dir, 2), "{\"seq\":3}\n").unwrap();
        let config = TargetConfig { name: "T".into(), kind: TargetKind::Http { url: "http://x".into() }, max_backlog_bytes: 1 };
        let hub = Arc::new(ExportHub::new(vec![config.clone()]));
        let lane = hub.lane("T", 0);
        lane.adjust_backlog(3, 30);
        assert!(lane.over_limit.load(Ordering::Relaxed), "30 bytes are over a limit of 1");
        let (got, refuse) = (Arc::new(std::sync::Mutex::new(Vec::new())), Arc::new(std::sync::atomic::AtomicBool::new(true)));
        let sink = Collect(got.clone(), refuse.clone());
        let exporter = Exporter { hub: hub.clone(), config, lane: lane.clone(), dir: dir.clone(), partitions: 1 };
        let thread = std::thread::spawn(move || exporter.run_with(Box::new(sink)));
        let wait_until = |what: &str, f: &dyn Fn() -> bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !f() {
                assert!(std::time::Instant::now() < deadline, "never: {what}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        wait_until("the refusal is seen", &|| lane.down.load(Ordering::Relaxed));
        assert!(got.lock().unwrap().is_empty());
        assert_eq!(load_position(&dir), Position { segment: 1, offset: 0 }, "nothing acknowledged, nothing moved");
        refuse.store(false, Ordering::Relaxed);
        wait_until("all delivered", &|| got.lock().unwrap().len() == 3);
        wait_until("segment 1 deleted", &|| !segment_path(&dir, 1).exists());
        hub.stopping.store(true, Ordering::Relaxed);
        thread.join().unwrap();
        assert_eq!(*got.lock().unwrap(), [1, 2, 3]);
        assert_eq!(load_position(&dir), Position { segment: 2, offset: 10 });
        assert!(segment_path(&dir, 2).exists(), "the newest segment stays");
        assert!(!lane.down.load(Ordering::Relaxed) && !lane.over_limit.load(Ordering::Relaxed));
        assert_eq!(lane.rows_delivered.load(Ordering::Relaxed), 3);
        let _ = fs::remove_dir_all(&dir);
    }

    /// Notes the size of every batch it takes.
    struct Sizes(Arc<std::sync::Mutex<Vec<usize>>>);

    impl Sink for Sizes {
        fn send(&mut self, rows: &[serde_json::Value]) -> Result<(), String> {
            self.0.lock().unwrap().push(rows.len());
            Ok(())
        }
    }

    #[test]
    fn a_partial_batch_lingers_until_it_fills() {
        let dir = std::env::temp_dir().join(format!("lockstep-export-linger-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(segment_path(&dir, 1), "{\"seq\":1}\n{\"seq\":2}\n").unwrap();
        let settings = super::super::KafkaSettings {
            brokers: vec!["h:1".into()],
            topic: "t".into(),
            key_column: None,
            batch_rows: 3,
            // Far longer than the test: the batch can only go once it is full.
            linger_ms: 60_000,
        };
        let config = TargetConfig { name: "K".into(), kind: TargetKind::Kafka(settings), max_backlog_bytes: u64::MAX };
        let hub = Arc::new(ExportHub::new(vec![config.clone()]));
        let lane = hub.lane("K", 0);
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let exporter = Exporter { hub: hub.clone(), config, lane: lane.clone(), dir: dir.clone(), partitions: 1 };
        let sink = Sizes(sizes.clone());
        let thread = std::thread::spawn(move || exporter.run_with(Box::new(sink)));
        std::thread::sleep(Duration::from_millis(3 * POLL_MS));
        let mut f = fs::OpenOptions::new().append(true).open(segment_path(&dir, 1)).unwrap();
        f.write_all(b"{\"seq\":3}\n{\"seq\":4}\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while lane.rows_delivered.load(Ordering::Relaxed) < 3 {
            assert!(std::time::Instant::now() < deadline, "the full batch never went");
            std::thread::sleep(Duration::from_millis(10));
        }
        hub.stopping.store(true, Ordering::Relaxed);
        thread.join().unwrap();
        assert_eq!(sizes.lock().unwrap()[0], 3, "the first batch went before it was full");
        let _ = fs::remove_dir_all(&dir);
    }
}
