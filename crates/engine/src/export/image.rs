//! Export numbering in a cluster's rejoin image. Replicas number a partition's export rows
//! alike because they commit the same entries in the same order; a node that was down
//! missed entries, so its old files no longer match. The leader therefore puts into the
//! image, for each delivering target, its next sequence number and the rows its target has
//! not acknowledged (`ImageMark`, `write_image`); the joiner replaces its files with those
//! rows and numbers from there (`ImageStaging`, `ExportWriter::adopt`), so from the image on
//! its buffer is the leader's: it can pass over by the leader's reports, and deliver the
//! same numbers if it leads later.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use lockstep_core::{Error, Result};

use super::deliver::{load_position, save_position, Position};
use super::{lane_dir, open_segment, segment_path, segments, ExportHub, ExportWriter, TargetFile};
use crate::snapshot::format::ExportChunk;
use crate::snapshot::writer::CHUNK_BYTES_TARGET;
use crate::snapshot::SnapshotWriter;

/// How many times the leader opens a lane's segments again when its exporter deleted one
/// between reading the position and opening it (each time the position has moved on).
const OPEN_ATTEMPTS_MAX: usize = 16;
/// The file a joiner stages a target's rows in while it reads the image (not a segment:
/// its name does not end in `.jsonl`).
const STAGING_FILE: &str = "rejoin-image.tmp";

/// Where one delivering target's numbering stood on the leader when a rejoin image was
/// taken: its next sequence number, and the end of the rows written before that point.
#[derive(Clone, Debug)]
pub struct ImageMark {
    target: String,
    dir: PathBuf,
    next_seq: u64,
    end: Position,
}

impl ExportWriter {
    /// Leader, on the site thread at the point the image is taken (between transactions):
    /// flushes each delivering target's rows and notes where its numbering stands.
    pub fn image_marks(&mut self) -> std::io::Result<Vec<ImageMark>> {
        let targets: Vec<String> = self.hub.targets.iter().filter(|t| t.kind.delivers()).map(|t| t.name.to_uppercase()).collect();
        let mut marks = Vec::with_capacity(targets.len());
        for target in targets {
            let f = self.file(&target)?;
            f.out.flush()?;
            let end = Position { segment: f.segment, offset: f.segment_bytes };
            marks.push(ImageMark { target, dir: f.dir.clone(), next_seq: f.next_seq, end });
        }
        Ok(marks)
    }

    /// Joiner: an empty staging area for the export rows of an image of this partition.
    pub fn stage(&self) -> ImageStaging {
        ImageStaging { data_dir: self.data_dir.clone(), partition: self.partition, hub: self.hub.clone(), lanes: Vec::new() }
    }

    /// Joiner, on the site thread once the whole image was read: replaces each staged
    /// target's files with the leader's rows and numbers new rows from the leader's next
    /// sequence number. Returns the targets adopted; the others keep their files and their
    /// own numbering (`Lane::rejoined` stays set).
    pub fn adopt(&mut self, mut staging: ImageStaging) -> std::io::Result<Vec<String>> {
        let mut adopted = Vec::new();
        for staged in std::mem::take(&mut staging.lanes) {
            let (target, path) = (staged.target.clone(), staged.path.clone());
            if let Err(e) = self.adopt_lane(staged) {
                // Renamed already, or left to stage the next attempt's rows anew.
                let _ = fs::remove_file(&path);
                return Err(e);
            }
            adopted.push(target);
        }
        adopted.sort();
        Ok(adopted)
    }

    fn adopt_lane(&mut self, staged: Staged) -> std::io::Result<()> {
        let Staged { target, next_seq, path, out, rows, bytes, .. } = staged;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        if let Some(mut old) = self.files.remove(&target) {
            old.out.flush()?;
        }
        let dir = lane_dir(&self.data_dir, &target, self.partition);
        let old = segments(&dir);
        let base = old.last().map_or(1, |s| s + 1);
        // The leader's rows become the newest segment, then the old ones go, then the
        // position points at it: an exporter's stale save of an old position (a step begun
        // before) then reads as "the oldest segment", which is this one.
        fs::rename(&path, segment_path(&dir, base))?;
        for s in old {
            if let Err(e) = fs::remove_file(segment_path(&dir, s)) {
                tracing::warn!("cannot delete export segment {s} of {} replaced by a rejoin image: {e}", dir.display());
            }
        }
        save_position(&dir, Position { segment: base, offset: 0 })?;
        let (out, segment_bytes) = open_segment(&segment_path(&dir, base))?;
        let lane = self.hub.lane(&target, self.partition);
        lane.adjust_backlog(rows - lane.backlog_rows.load(Ordering::Relaxed), bytes - lane.backlog_bytes.load(Ordering::Relaxed));
        // The exporter rereads its position, and may pass over by the leader's reports again.
        // Those heard before are forgotten: they were heard while the files here were
        // numbered otherwise, and the leader repeats its position (`ACK_REPEAT_MS`).
        lane.leader_acked.store(0, Ordering::SeqCst);
        lane.replaced.fetch_add(1, Ordering::SeqCst);
        lane.rejoined.store(false, Ordering::SeqCst);
        let acknowledges = super::acknowledges(&self.hub, &target);
        let file = TargetFile {
            out,
            dir,
            segment: base,
            segment_bytes,
            next_seq,
            lane,
            on_disk: Default::default(),
            acknowledges,
            unsynced: Vec::new(),
        };
        self.files.insert(target, file);
        Ok(())
    }
}

/// Leader, off the site thread: writes each mark's target into the image, with its next
/// sequence number and the rows from its target's acknowledged position to the mark (rows
/// acknowledged meanwhile may be among them: the joiner passes over them by the leader's
/// reports). At least one section per target, so the joiner adopts its numbering even
/// without rows.
pub fn write_image(writer: &mut SnapshotWriter, marks: &[ImageMark]) -> Result<()> {
    let io = |m: &ImageMark, e: std::io::Error| Error::unexpected(format!("cannot read the export rows in {}: {e}", m.dir.display()));
    for m in marks {
        let mut chunk = ExportChunk { target: m.target.clone(), next_seq: m.next_seq, lines: Vec::new() };
        let mut chunk_bytes = 0;
        for (segment, file, start) in open_unacknowledged(&m.dir, m.end).map_err(|e| io(m, e))? {
            let stop = if segment == m.end.segment { Some(m.end.offset) } else { None };
            for_each_line(file, start, stop, &mut |line| {
                chunk_bytes += line.len();
                chunk.lines.push(line.to_vec());
                if chunk_bytes >= CHUNK_BYTES_TARGET {
                    writer.write_export(&chunk)?;
                    (chunk.lines, chunk_bytes) = (Vec::new(), 0);
                }
                Ok(())
            })
            .map_err(|e| match e {
                LineError::Io(e) => io(m, e),
                LineError::Image(e) => e,
            })?;
        }
        writer.write_export(&chunk)?;
    }
    Ok(())
}

/// The segments of a lane from its saved position through `end`, each opened (an open file
/// stays readable after the exporter deletes it) with the offset to read from.
fn open_unacknowledged(dir: &Path, end: Position) -> std::io::Result<Vec<(u64, File, u64)>> {
    'again: for _ in 0..OPEN_ATTEMPTS_MAX {
        let p = load_position(dir);
        if (p.segment, p.offset) >= (end.segment, end.offset) {
            return Ok(Vec::new());
        }
        let mut files = Vec::new();
        for s in segments(dir).into_iter().filter(|s| (p.segment..=end.segment).contains(s)) {
            match File::open(segment_path(dir, s)) {
                // A segment that went after the position was read: the position moved
                // past it, so the lane is opened again from the new one.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue 'again,
                Err(e) => return Err(e),
                Ok(f) => files.push((s, f, if s == p.segment { p.offset } else { 0 })),
            }
        }
        return Ok(files);
    }
    Err(std::io::Error::other(format!("its segments kept being deleted while they were opened ({OPEN_ATTEMPTS_MAX} attempts)")))
}

/// Why copying a lane's lines stopped: its files could not be read, or the image could
/// not be written.
enum LineError {
    Io(std::io::Error),
    Image(Error),
}

/// Calls `f` with each whole line (without its newline) from byte `start` to `stop` (or
/// the end of the file).
fn for_each_line(file: File, start: u64, stop: Option<u64>, f: &mut dyn FnMut(&[u8]) -> Result<()>) -> std::result::Result<(), LineError> {
    let mut r = BufReader::new(file);
    r.seek(SeekFrom::Start(start)).map_err(LineError::Io)?;
    let mut input: Box<dyn BufRead> = match stop {
        Some(stop) => Box::new(BufReader::new(r.take(stop.saturating_sub(start)))),
        None => Box::new(r),
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line).map_err(LineError::Io)? == 0 {
            return Ok(());
        }
        // A line without its newline is still being written (or was cut by a crash): it
        // belongs to no committed transaction before the mark.
        if line.pop() != Some(b'\n') {
            return Ok(());
        }
        f(&line).map_err(LineError::Image)?;
    }
}

/// Joiner: the export rows of a rejoin image as they are read, staged in a file beside each
/// lane's segments until the whole image has been read and checked (`ExportWriter::adopt`).
/// Dropped without adopting, it deletes what it staged.
pub struct ImageStaging {
    data_dir: PathBuf,
    partition: u32,
    hub: Arc<ExportHub>,
    lanes: Vec<Staged>,
}

struct Staged {
    target: String,
    next_seq: u64,
    path: PathBuf,
    out: BufWriter<File>,
    rows: i64,
    bytes: i64,
    /// The sequence number of the last row staged (0: none yet).
    last_seq: u64,
}

impl ImageStaging {
    /// Adds one export section of the image. Targets this node does not deliver to are left
    /// out (the configurations differ: their rows are not this node's to keep).
    pub fn add(&mut self, chunk: ExportChunk) -> Result<()> {
        let target = chunk.target.to_uppercase();
        if !self.hub.target(&target).is_some_and(|t| t.kind.delivers()) {
            tracing::warn!(
                partition = self.partition,
                "the rejoin image carries rows of export target {target}, which this node does not deliver to: left out"
            );
            return Ok(());
        }
        let io = |what: &str, path: &Path, e: std::io::Error| Error::unexpected(format!("cannot {what} {}: {e}", path.display()));
        let i = match self.lanes.iter().position(|l| l.target == target) {
            Some(i) => i,
            None => {
                let dir = lane_dir(&self.data_dir, &target, self.partition);
                fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
                let path = dir.join(STAGING_FILE);
                let file = File::create(&path).map_err(|e| io("create", &path, e))?;
                let out = BufWriter::new(file);
                self.lanes.push(Staged { target: target.clone(), next_seq: chunk.next_seq, path, out, rows: 0, bytes: 0, last_seq: 0 });
                self.lanes.len() - 1
            }
        };
        let lane = &mut self.lanes[i];
        if lane.next_seq != chunk.next_seq {
            return Err(corrupt_image(&target, "its sections disagree on the next sequence number"));
        }
        for line in &chunk.lines {
            let seq = serde_json::from_slice::<serde_json::Value>(line).ok().and_then(|v| v.get("seq").and_then(|s| s.as_u64()));
            match seq {
                Some(seq) if seq > lane.last_seq && seq < lane.next_seq => lane.last_seq = seq,
                _ => {
                    return Err(corrupt_image(&target, "a row is not numbered after the one before it and below the next sequence number"))
                }
            }
            lane.out.write_all(line).and_then(|()| lane.out.write_all(b"\n")).map_err(|e| io("write", &lane.path, e))?;
            lane.rows += 1;
            lane.bytes += line.len() as i64 + 1;
        }
        Ok(())
    }
}

fn corrupt_image(target: &str, what: &str) -> Error {
    Error::unexpected(format!("the rejoin image's export rows of target {target} are damaged: {what}; the rejoin is tried again"))
}

impl Drop for ImageStaging {
    fn drop(&mut self) {
        for lane in self.lanes.drain(..) {
            drop(lane.out);
            let _ = fs::remove_file(&lane.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::cluster::ClusterHooks;
    use crate::export::{TargetConfig, TargetKind};
    use crate::snapshot::format::SnapshotItem;
    use crate::snapshot::PartitionReader;

    const TARGET: &str = "HOOK";

    fn hub() -> Arc<ExportHub> {
        let config =
            TargetConfig { name: "hook".into(), kind: TargetKind::Http { url: "http://127.0.0.1:9/".into() }, max_backlog_bytes: u64::MAX };
        Arc::new(ExportHub::new(vec![config]))
    }

    fn fresh(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lockstep-export-image-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn rows(seqs: std::ops::RangeInclusive<u64>, history: &str) -> String {
        seqs.map(|s| format!("{{\"seq\":{s},\"txn_id\":{s},\"row\":\"{history}{s}\"}}\n")).collect()
    }

    fn seqs_in(dir: &Path) -> Vec<u64> {
        segments(dir)
            .into_iter()
            .flat_map(|s| fs::read_to_string(segment_path(dir, s)).unwrap().lines().map(str::to_string).collect::<Vec<_>>())
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok()?.get("seq")?.as_u64())
            .collect()
    }

    /// The leader writes an image of partition 0's export numbering; the chunks it holds.
    fn leader_image(leader: &Path, work: &Path) -> Vec<ExportChunk> {
        let mut writer = ExportWriter::new(leader, 0, hub());
        let marks = writer.image_marks().unwrap();
        let mut snap = SnapshotWriter::create(work, 0, 1).unwrap();
        write_image(&mut snap, &marks).unwrap();
        let entry = snap.finish().unwrap();
        let mut reader = PartitionReader::open(work.join(&entry.name), entry, 0).unwrap();
        let mut chunks = Vec::new();
        while let Some(item) = reader.next_item().unwrap() {
            if let SnapshotItem::Export(c) = item {
                chunks.push(c);
            }
        }
        chunks
    }

    /// Leader: rows 1..9 in two segments, its target acknowledged through 5 (the position
    /// is inside segment 2). Joiner: its old history, rows 1..4 of other transactions.
    fn leader_and_joiner(tag: &str) -> (PathBuf, PathBuf, PathBuf) {
        let root = fresh(tag);
        let (leader, joiner, work) = (root.join("leader"), root.join("joiner"), root.join("work"));
        let lane = lane_dir(&leader, TARGET, 0);
        fs::create_dir_all(&lane).unwrap();
        fs::write(segment_path(&lane, 1), rows(1..=3, "a")).unwrap();
        fs::write(segment_path(&lane, 2), rows(4..=9, "a")).unwrap();
        let acked = rows(4..=5, "a").len() as u64;
        save_position(&lane, Position { segment: 2, offset: acked }).unwrap();
        let old = lane_dir(&joiner, TARGET, 0);
        fs::create_dir_all(&old).unwrap();
        fs::write(segment_path(&old, 1), rows(1..=4, "old")).unwrap();
        fs::create_dir_all(&work).unwrap();
        (leader, joiner, work)
    }

    #[test]
    fn a_joiner_takes_the_leaders_unacknowledged_rows_and_numbers_new_rows_like_it() {
        let (leader, joiner, work) = leader_and_joiner("adopt");
        let chunks = leader_image(&leader, &work);
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0].next_seq, 10, "the leader numbers its next row 10");
        assert_eq!(chunks[0].lines.len(), 4, "rows 6..9 are not acknowledged");

        let hub = hub();
        let mut writer = ExportWriter::new(&joiner, 0, hub.clone());
        let lane = hub.lane(TARGET, 0);
        lane.rejoined.store(true, Ordering::SeqCst);
        let mut staging = writer.stage();
        for c in chunks {
            staging.add(c).unwrap();
        }
        assert_eq!(writer.adopt(staging).unwrap(), [TARGET]);
        let dir = lane_dir(&joiner, TARGET, 0);
        assert_eq!(seqs_in(&dir), [6, 7, 8, 9], "the old history is gone, the leader's rows are here");
        assert!(!dir.join(STAGING_FILE).exists());
        assert_eq!(load_position(&dir), Position { segment: 2, offset: 0 });
        assert_eq!(writer.files[TARGET].next_seq, 10);
        assert_eq!(lane.backlog_rows.load(Ordering::Relaxed), 4);
        assert!(!lane.rejoined.load(Ordering::SeqCst), "it may pass over by the leader's reports again");
        assert_eq!(lane.replaced.load(Ordering::SeqCst), 1);
        let _ = fs::remove_dir_all(leader.parent().unwrap());
    }

    #[test]
    fn an_image_taken_after_everything_was_acknowledged_carries_only_the_numbering() {
        let (leader, joiner, work) = leader_and_joiner("none");
        let lane = lane_dir(&leader, TARGET, 0);
        save_position(&lane, Position { segment: 2, offset: rows(4..=9, "a").len() as u64 }).unwrap();
        let chunks = leader_image(&leader, &work);
        assert_eq!((chunks.len(), chunks[0].lines.len(), chunks[0].next_seq), (1, 0, 10));
        let mut writer = ExportWriter::new(&joiner, 0, hub());
        let mut staging = writer.stage();
        staging.add(chunks[0].clone()).unwrap();
        writer.adopt(staging).unwrap();
        assert!(seqs_in(&lane_dir(&joiner, TARGET, 0)).is_empty());
        assert_eq!(writer.files[TARGET].next_seq, 10);
        let _ = fs::remove_dir_all(leader.parent().unwrap());
    }

    #[test]
    fn rows_out_of_order_or_past_the_next_number_are_refused_and_nothing_is_replaced() {
        let joiner = fresh("refuse");
        let old = lane_dir(&joiner, TARGET, 0);
        fs::create_dir_all(&old).unwrap();
        fs::write(segment_path(&old, 1), rows(1..=2, "old")).unwrap();
        let writer = ExportWriter::new(&joiner, 0, hub());
        let line = |s: u64| format!("{{\"seq\":{s}}}").into_bytes();
        for lines in [vec![line(5), line(4)], vec![line(7)]] {
            let mut staging = writer.stage();
            let e = staging.add(ExportChunk { target: TARGET.into(), next_seq: 7, lines }).unwrap_err();
            assert!(e.message.contains("damaged"), "{}", e.message);
            drop(staging);
            assert!(!old.join(STAGING_FILE).exists(), "what was staged goes");
            assert_eq!(seqs_in(&old), [1, 2]);
        }
        let _ = fs::remove_dir_all(&joiner);
    }

    /// A node that follows partition 0, whose leader is elsewhere.
    struct Follower;

    impl ClusterHooks for Follower {
        fn leads(&self, _: u32) -> bool {
            false
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
        fn replicate(&self, _: u32, _: Vec<u8>, _: u64, _: crate::cluster::Committed) -> std::result::Result<(), String> {
            Err("not here".into())
        }
        fn applied(&self, _: u32, _: u64, _: u64) {}
        fn change_schema(&self, _: Vec<String>, _: crate::outcome::Reply) {}
        fn topology(&self) -> crate::cluster::Topology {
            Default::default()
        }
    }

    fn wait_until(what: &str, f: &dyn Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_follower_passes_over_by_the_leaders_reports_in_the_files_it_adopted() {
        let (leader, joiner, work) = leader_and_joiner("follow");
        // The joiner's old history went further than the rows the image carries: whatever it
        // had passed over there says nothing of the new files.
        fs::write(segment_path(&lane_dir(&joiner, TARGET, 0), 1), rows(1..=12, "old")).unwrap();
        let hub = hub();
        super::super::prepare(&hub, &joiner, 1);
        let link: crate::site::ClusterLink = Default::default();
        let hooks: Arc<dyn ClusterHooks> = Arc::new(Follower);
        let _ = link.set(hooks);
        let threads = super::super::start_exporters(&hub, &joiner, 1, &link).unwrap();
        let lane = hub.lane(TARGET, 0);
        let dir = lane_dir(&joiner, TARGET, 0);
        lane.leader_acked(12);
        wait_until("the old rows passed over", &|| lane.backlog_rows.load(Ordering::Relaxed) == 0);

        // The rejoin: nothing is passed over by the leader's numbers until the image's rows
        // replace the files.
        lane.rejoined.store(true, Ordering::SeqCst);
        let mut writer = ExportWriter::new(&joiner, 0, hub.clone());
        let mut staging = writer.stage();
        for c in leader_image(&leader, &work) {
            staging.add(c).unwrap();
        }
        writer.adopt(staging).unwrap();
        assert_eq!(lane.backlog_rows.load(Ordering::Relaxed), 4, "rows 6..9 wait for their acknowledgement");
        // The leader's target acknowledged through 8: passed over here, row 9 kept.
        lane.leader_acked(8);
        wait_until("rows 6..8 passed over", &|| lane.backlog_rows.load(Ordering::Relaxed) == 1);
        let rest = match super::super::deliver::read_batch(&dir, load_position(&dir), 10).unwrap() {
            super::super::deliver::Next::Rows(b) => b.rows.iter().filter_map(|r| r["seq"].as_u64()).collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        assert_eq!(rest, [9], "the next row a new leader here would deliver");
        hub.stopping.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let _ = fs::remove_dir_all(leader.parent().unwrap());
    }
}
