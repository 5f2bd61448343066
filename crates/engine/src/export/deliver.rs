//! The background exporters: one thread per (target, partition) of a delivering target. It
//! reads the partition's segment files from its last acknowledged position, sends a batch
//! (after waiting up to the target's linger time for a partial one to fill),
//! and only after the target acknowledged it saves the new position durably (a small file
//! written, fsynced, then renamed). After a crash or an outage it resends from that
//! position: no row is skipped, and only rows after it can arrive twice. Segments wholly
//! delivered are deleted.
//!
//! In a cluster every replica of a partition writes the same rows under the same sequence
//! numbers (it runs the same transactions in the same order), but only the partition's
//! leader delivers (`Role`). It delivers a row only once every member has run the
//! transaction that wrote it (so a failover cannot take back a row a target already has),
//! and tells the other replicas how far its target acknowledged (`ClusterHooks::
//! export_acked`, at most every `ACK_SEND_INTERVAL_MS`). They pass over those rows in their
//! own buffers (and delete whole segments), so their disk stays bounded; a new leader
//! delivers from where it passed over, so after a failover only rows after the last
//! acknowledgement it heard can arrive twice, and none is skipped.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{lane_dir, segment_path, segments, ExportHub, Lane, TargetConfig, TargetKind};
use crate::cluster::ClusterHooks;
use crate::site::ClusterLink;

/// Rows sent in one batch at most.
pub const BATCH_ROWS_MAX: usize = 1000;
/// Bytes of rows (as stored) sent in one batch at most.
pub const BATCH_BYTES_MAX: u64 = 4 * 1024 * 1024;
/// How often an idle exporter looks for new rows.
pub const POLL_MS: u64 = 50;
/// First wait after a failed delivery; it doubles up to `RETRY_MAX_MS`.
pub const RETRY_FIRST_MS: u64 = 100;
pub const RETRY_MAX_MS: u64 = 5_000;
/// A leader tells the other replicas its target's acknowledged position at most this often.
pub const ACK_SEND_INTERVAL_MS: u64 = 100;
/// ... and again this often when it has not moved (a replica that missed it, or rejoined).
pub const ACK_REPEAT_MS: u64 = 2_000;
/// How often a leader looks whether every member has run the rows it is about to deliver.
pub const REPLICATED_POLL_MS: u64 = 2;

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
    /// The next row's sequence number is past the limit `read_batch_through` was given.
    Beyond,
    Nothing,
}

/// Reads up to a batch (`max_rows`) of complete lines from `p`. A line without its newline
/// is still being written and waits; a line that is not JSON (cut by a crash) is skipped.
pub fn read_batch(dir: &Path, p: Position, max_rows: usize) -> std::io::Result<Next> {
    read_batch_through(dir, p, max_rows, u64::MAX)
}

/// The row's sequence number (the `seq` every row is written with).
fn seq_of(row: &serde_json::Value) -> Option<u64> {
    row.get("seq").and_then(|s| s.as_u64())
}

/// `read_batch`, stopping before the first row whose sequence number is past `through`.
pub fn read_batch_through(dir: &Path, p: Position, max_rows: usize, through: u64) -> std::io::Result<Next> {
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
            match serde_json::from_slice::<serde_json::Value>(&line) {
                Ok(v) if seq_of(&v).is_some_and(|s| s > through) => {
                    if offset == p.offset {
                        return Ok(Next::Beyond);
                    }
                    break;
                }
                Ok(v) => {
                    offset += n as u64;
                    rows.push(v)
                }
                // Written whole by this server: a line that does not parse was damaged on
                // disk, and is said, not passed over quietly.
                Err(e) => {
                    tracing::error!("export segment {} has a damaged line at byte {offset}: {e}", path.display());
                    offset += n as u64;
                }
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

/// Starts one exporter thread per (delivering target, partition). `cluster` is the
/// engine's link to its cluster (empty on a single node, or until it joins one).
pub fn start_exporters(
    hub: &Arc<ExportHub>,
    data_dir: &Path,
    partitions: u32,
    cluster: &ClusterLink,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    for t in hub.targets.iter().filter(|t| t.kind.delivers()) {
        for partition in 0..partitions {
            let lane = hub.lane(&t.name, partition);
            let dir = lane_dir(data_dir, &lane.target, partition);
            let exporter = Exporter { hub: hub.clone(), config: t.clone(), lane, dir, partitions, cluster: cluster.clone() };
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

/// What this node's exporter of a partition does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Not in a cluster: it delivers what it reads.
    Alone,
    /// This node leads the partition: it delivers rows every member has run, and tells the
    /// other replicas how far its target acknowledged.
    Leader,
    /// Another node leads it (or none does yet): it delivers nothing and passes over the rows
    /// the leader reported acknowledged.
    Follower,
}

impl Role {
    pub fn of(cluster: Option<&dyn ClusterHooks>, partition: u32) -> Role {
        match cluster {
            None => Role::Alone,
            Some(c) if c.leads(partition) => Role::Leader,
            Some(_) => Role::Follower,
        }
    }

    fn delivers(self) -> bool {
        self != Role::Follower
    }
}

/// When a leader last told the other replicas its acknowledged position, and which.
#[derive(Debug, Default)]
pub struct AckReport {
    sent: u64,
    at: Option<Instant>,
}

impl AckReport {
    /// Whether `acked` is to be sent now: a new position once `ACK_SEND_INTERVAL_MS` has
    /// passed since the last report, the same one again after `ACK_REPEAT_MS`.
    pub fn due(&self, acked: u64, now: Instant) -> bool {
        if acked == 0 {
            return false;
        }
        match self.at {
            None => true,
            Some(at) => {
                let since = now.saturating_duration_since(at);
                (acked > self.sent && since >= Duration::from_millis(ACK_SEND_INTERVAL_MS)) || since >= Duration::from_millis(ACK_REPEAT_MS)
            }
        }
    }

    pub fn sent(&mut self, acked: u64, now: Instant) {
        (self.sent, self.at) = (acked, Some(now));
    }
}

struct Exporter {
    hub: Arc<ExportHub>,
    config: TargetConfig,
    lane: Arc<Lane>,
    dir: PathBuf,
    /// Partitions of the server (a Kafka topic the exporter creates gets as many).
    partitions: u32,
    cluster: ClusterLink,
}

impl Exporter {
    fn stopping(&self) -> bool {
        self.hub.stopping.load(Ordering::Relaxed)
    }

    fn hooks(&self) -> Option<Arc<dyn ClusterHooks>> {
        self.cluster.get().cloned()
    }

    fn role(&self) -> Role {
        Role::of(self.hooks().as_deref(), self.lane.partition)
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
        // The highest sequence number delivered or passed over here (0: none yet known).
        let mut passed = 0u64;
        let mut report = AckReport::default();
        let mut replaced = self.lane.replaced.load(Ordering::SeqCst);
        while !self.stopping() {
            if let Some(p) = self.replaced_files(&mut replaced) {
                (pos, passed, lingering) = (p, 0, None);
            }
            let role = self.role();
            if role == Role::Leader {
                self.report_acked(&mut report, passed);
            }
            // Rows the leader's target acknowledged are passed over, whatever the role: a
            // new leader starts after them.
            let leader_acked = self.lane.leader_acked.load(Ordering::Relaxed);
            if leader_acked > passed && !self.lane.rejoined.load(Ordering::Relaxed) {
                match read_batch_through(&self.dir, pos, BATCH_ROWS_MAX, leader_acked) {
                    Ok(Next::Rows(batch)) => {
                        pos = batch.end;
                        passed = passed.max(batch.rows.iter().filter_map(seq_of).max().unwrap_or(0));
                        self.save(pos);
                        self.lane.adjust_backlog(-(batch.rows.len() as i64), -(batch.bytes as i64));
                        continue;
                    }
                    Ok(Next::Segment(next)) => {
                        pos = self.next_segment(pos, next);
                        continue;
                    }
                    // Every row up to it is behind the position.
                    Ok(Next::Beyond) => passed = leader_acked,
                    // This replica has not run those transactions yet.
                    Ok(Next::Nothing) => {}
                    Err(e) => {
                        self.note_error(&format!("cannot read {}: {e}", self.dir.display()));
                        self.pause(RETRY_MAX_MS);
                        continue;
                    }
                }
            }
            if !role.delivers() {
                self.pause(POLL_MS);
                continue;
            }
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
                    if role == Role::Leader && !self.replicated() {
                        // No longer leading: what to do next is decided again.
                        self.pause(POLL_MS);
                        continue;
                    }
                    if self.deliver(sink.as_mut(), &batch) {
                        pos = batch.end;
                        passed = passed.max(batch.rows.iter().filter_map(seq_of).max().unwrap_or(0));
                    }
                }
                Ok(Next::Segment(next)) => pos = self.next_segment(pos, next),
                Ok(Next::Beyond) | Ok(Next::Nothing) => self.pause(POLL_MS),
                Err(e) => {
                    self.note_error(&format!("cannot read {}: {e}", self.dir.display()));
                    self.pause(RETRY_MAX_MS);
                }
            }
        }
    }

    /// The segment at `pos` is complete and every row of it delivered or passed over: moves
    /// to `next` and deletes it.
    fn next_segment(&self, pos: Position, next: u64) -> Position {
        let done = pos.segment;
        let pos = Position { segment: next, offset: 0 };
        self.save(pos);
        if let Err(e) = fs::remove_file(segment_path(&self.dir, done)) {
            tracing::warn!("cannot delete delivered export segment {done} of {}: {e}", self.dir.display());
        }
        pos
    }

    /// The position to go on from when a rejoin image replaced the lane's files since the
    /// exporter last looked (`Lane::replaced` moved past `seen`): read again from disk, in
    /// the files numbered like the leader's.
    fn replaced_files(&self, seen: &mut u64) -> Option<Position> {
        let now = self.lane.replaced.load(Ordering::SeqCst);
        (now != *seen).then(|| {
            *seen = now;
            load_position(&self.dir)
        })
    }

    /// Leader: tells the other replicas how far its target acknowledged, when due.
    fn report_acked(&self, report: &mut AckReport, passed: u64) {
        // A node that rejoined without its leader's numbering counts in numbers of its own:
        // the replicas would pass over rows by them that the target never had.
        if self.lane.rejoined.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        if let Some(hooks) = self.hooks().filter(|_| report.due(passed, now)) {
            hooks.export_acked(self.lane.partition, &self.lane.target, passed);
            report.sent(passed, now);
        }
    }

    /// Leader, before it delivers rows it read: waits until every member has run every
    /// entry appended by now (a transaction is appended before its rows are written, so
    /// those rows are among them). False when this node stops leading first (or the server
    /// stops): the rows are not delivered from here.
    fn replicated(&self) -> bool {
        let Some(hooks) = self.hooks() else { return true };
        let partition = self.lane.partition;
        let Some((appended, _)) = hooks.replication_marks(partition) else { return true };
        loop {
            if self.stopping() || !hooks.leads(partition) {
                return false;
            }
            match hooks.replication_marks(partition) {
                Some((_, committed)) if committed < appended => std::thread::sleep(Duration::from_millis(REPLICATED_POLL_MS)),
                _ => return true,
            }
        }
    }

    /// Sends one batch until the target takes it (true), or the server stops or this node
    /// stops leading the partition (false).
    fn deliver(&self, sink: &mut dyn Sink, batch: &Batch) -> bool {
        let mut wait = RETRY_FIRST_MS;
        loop {
            if self.stopping() || !self.role().delivers() {
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
        let exporter =
            Exporter { hub: hub.clone(), config, lane: lane.clone(), dir: dir.clone(), partitions: 1, cluster: Default::default() };
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
        let exporter =
            Exporter { hub: hub.clone(), config, lane: lane.clone(), dir: dir.clone(), partitions: 1, cluster: Default::default() };
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

    #[test]
    fn a_batch_read_through_a_sequence_number_stops_before_the_rows_after_it() {
        let dir = std::env::temp_dir().join(format!("lockstep-export-through-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(segment_path(&dir, 1), "{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n").unwrap();
        let start = Position { segment: 1, offset: 0 };
        let Next::Rows(b) = read_batch_through(&dir, start, BATCH_ROWS_MAX, 2).unwrap() else { panic!("rows expected") };
        assert_eq!(b.rows.iter().filter_map(seq_of).collect::<Vec<_>>(), [1, 2]);
        assert!(matches!(read_batch_through(&dir, b.end, BATCH_ROWS_MAX, 2).unwrap(), Next::Beyond));
        assert!(matches!(read_batch_through(&dir, b.end, BATCH_ROWS_MAX, 3).unwrap(), Next::Rows(r) if r.rows.len() == 1));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_leader_reports_a_new_position_at_most_every_interval_and_repeats_an_old_one() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut r = AckReport::default();
        assert!(!r.due(0, t0), "nothing acknowledged, nothing to say");
        assert!(r.due(5, t0), "the first position goes at once");
        r.sent(5, t0);
        assert!(!r.due(9, ms(ACK_SEND_INTERVAL_MS - 1)), "a new position waits for the interval");
        assert!(r.due(9, ms(ACK_SEND_INTERVAL_MS)));
        assert!(!r.due(5, ms(ACK_REPEAT_MS - 1)), "the same position is not sent again soon");
        assert!(r.due(5, ms(ACK_REPEAT_MS)), "... but again later, for a replica that missed it");
    }

    /// A cluster of one partition as its exporter sees it: whether this node leads it, the
    /// replication's (appended, committed) entries, and the positions reported.
    #[derive(Default)]
    struct FakeCluster {
        leads: AtomicBool,
        marks: std::sync::Mutex<(u64, u64)>,
        reported: std::sync::Mutex<Vec<u64>>,
    }

    impl ClusterHooks for FakeCluster {
        fn leads(&self, _: u32) -> bool {
            self.leads.load(Ordering::Relaxed)
        }
        fn forward(
            &self,
            _: u32,
            _: crate::cluster::SpRequest,
            _: Vec<lockstep_core::Value>,
            _: Option<Duration>,
            _: crate::outcome::Reply,
        ) {
        }
        fn replicate(&self, _: u32, _: Vec<u8>, _: u64, _: crate::cluster::Committed) -> Result<(), String> {
            Err("not here".into())
        }
        fn applied(&self, _: u32, _: u64, _: u64) {}
        fn change_schema(&self, _: Vec<String>, _: crate::outcome::Reply) {}
        fn topology(&self) -> crate::cluster::Topology {
            Default::default()
        }
        fn replication_marks(&self, _: u32) -> Option<(u64, u64)> {
            Some(*self.marks.lock().unwrap())
        }
        fn export_acked(&self, _: u32, _: &str, seq: u64) {
            self.reported.lock().unwrap().push(seq);
        }
    }

    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_follower_passes_over_what_the_leader_acknowledged_and_delivers_only_once_it_leads() {
        let dir = std::env::temp_dir().join(format!("lockstep-export-follow-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(segment_path(&dir, 1), "{\"seq\":1}\n{\"seq\":2}\n").unwrap();
        fs::write(segment_path(&dir, 2), "{\"seq\":3}\n{\"seq\":4}\n").unwrap();
        let config = TargetConfig { name: "T".into(), kind: TargetKind::Http { url: "http://x".into() }, max_backlog_bytes: u64::MAX };
        let hub = Arc::new(ExportHub::new(vec![config.clone()]));
        let lane = hub.lane("T", 0);
        let fake = Arc::new(FakeCluster::default());
        let cluster: ClusterLink = Default::default();
        let hooks: Arc<dyn ClusterHooks> = fake.clone();
        let _ = cluster.set(hooks);
        let (got, refuse) = (Arc::new(std::sync::Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let exporter = Exporter { hub: hub.clone(), config, lane: lane.clone(), dir: dir.clone(), partitions: 1, cluster };
        let sink = Collect(got.clone(), refuse);
        let thread = std::thread::spawn(move || exporter.run_with(Box::new(sink)));
        let wait_until = |what: &str, f: &dyn Fn() -> bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !f() {
                assert!(std::time::Instant::now() < deadline, "never: {what}");
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        // A follower: the leader reports rows 1..3 acknowledged; they are passed over (the
        // first segment deleted), nothing is sent.
        lane.leader_acked(3);
        wait_until("rows 1..3 passed over", &|| load_position(&dir) == Position { segment: 2, offset: 10 });
        assert!(!segment_path(&dir, 1).exists(), "a segment passed over is deleted");
        // It leads now, but row 4's transaction has not reached every member yet.
        *fake.marks.lock().unwrap() = (7, 6);
        fake.leads.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(5 * POLL_MS));
        assert!(got.lock().unwrap().is_empty(), "a row went out before every member ran its transaction");
        *fake.marks.lock().unwrap() = (8, 7);
        wait_until("row 4 delivered", &|| got.lock().unwrap().len() == 1);
        assert_eq!(*got.lock().unwrap(), [4], "delivery resumes after what the old leader acknowledged");
        wait_until("its position reported", &|| fake.reported.lock().unwrap().last() == Some(&4));
        hub.stopping.store(true, Ordering::Relaxed);
        thread.join().unwrap();
        assert_eq!(lane.rows_delivered.load(Ordering::Relaxed), 1);
        let _ = fs::remove_dir_all(&dir);
    }
}
