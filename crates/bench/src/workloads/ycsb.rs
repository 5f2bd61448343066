//! YCSB workloads A–F against the VoltDB binding's procedures: records of 10 fields × 100
//! bytes packed as the binding packs them, zipfian / latest / uniform key choice, scans as
//! every-partition `Scan` calls merged by the client (or one multi-partition `ScanAll`).
//! A merged scan asks each partition for its likely share of the rows, not for all of them,
//! and asks again for all of them in the rare case that a share falls short.
//! Check: every record reads back with the values last written.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use lockstep_core::{Error, Value};
use tokio::sync::Mutex;

use crate::apps;
use crate::conn::{Answer, Conn};
use crate::rng::{fnv64, latest, scrambled, Rng, Zipfian};
use crate::stats::Done;
use crate::workload::{populate, Check, Workload};
use crate::workloads::{classify, ok_or_err};

pub const FIELDS: usize = 10;
pub const FIELD_BYTES: usize = 100;
pub const KEYSPACE: &str = "usertable";
/// Records a run may insert beyond the loaded ones; later inserts become reads.
pub const INSERTS_MAX: u64 = 1_000_000;
/// Longest scan (YCSB E: uniform 1..100).
pub const SCAN_LENGTH_MAX: i64 = 100;
/// Standard deviations above its expected share of a scan's rows that each partition is
/// asked for: about one scan in 100 finds a share short and asks again.
const SCAN_SHARE_SIGMAS: f64 = 2.5;

/// Which of YCSB's core workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    A,
    B,
    C,
    D,
    E,
    F,
}

impl Mix {
    /// (read, update, insert, scan, read-modify-write) in percent.
    fn shares(self) -> [u32; 5] {
        match self {
            Mix::A => [50, 50, 0, 0, 0],
            Mix::B => [95, 5, 0, 0, 0],
            Mix::C => [100, 0, 0, 0, 0],
            Mix::D => [95, 0, 5, 0, 0],
            Mix::E => [0, 0, 5, 95, 0],
            Mix::F => [50, 0, 0, 0, 50],
        }
    }
}

pub struct Ycsb {
    mix: Mix,
    records: u64,
    scan_all: bool,
    zipf: Zipfian,
    /// Records that exist (loaded + inserted so far).
    count: AtomicU64,
    /// Per record and field, the versions sent and acknowledged; the lock orders writes of a key.
    versions: Vec<Mutex<Versions>>,
    /// The next record index an insert takes.
    next_insert: AtomicU64,
    /// Inserted records beyond `count` (finished ahead of an earlier insert).
    finished: Mutex<std::collections::BTreeSet<u64>>,
    /// Partitions the last every-partition scan reached (0 before the first).
    partitions: AtomicUsize,
}

/// The versions of one record's fields.
#[derive(Clone, Copy, Default)]
struct Versions {
    /// The last version sent to the server.
    sent: [u32; FIELDS],
    /// The highest version the server acknowledged: the one it holds at the end, because
    /// the writes of a key run in the order they were sent.
    acked: [u32; FIELDS],
}

/// The key of record `i` (YCSB's hashed insert order).
pub fn key_of(i: u64) -> String {
    format!("user{}", fnv64(i))
}

/// Field `f` of record `i` at `version`: self-describing text, then filler determined by them.
pub fn field_value(i: u64, f: usize, version: u32) -> Vec<u8> {
    let mut v = format!("{i}:{f}:{version}:").into_bytes();
    let mut rng = Rng::new(fnv64(i) ^ ((f as u64) << 40) ^ version as u64);
    while v.len() < FIELD_BYTES {
        v.push(b'a' + rng.range(0, 25) as u8);
    }
    v
}

/// Packs (name, value) fields as the VoltDB binding does (big-endian int32 lengths).
pub fn pack(fields: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + fields.len() * (FIELD_BYTES + 16));
    out.extend_from_slice(&(fields.len() as i32).to_be_bytes());
    for (name, value) in fields {
        out.extend_from_slice(&(name.len() as i32).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&(value.len() as i32).to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

fn take_i32(b: &[u8], at: &mut usize) -> Option<usize> {
    let v = i32::from_be_bytes(b.get(*at..*at + 4)?.try_into().ok()?);
    *at += 4;
    usize::try_from(v).ok()
}

/// Unpacks a packed record; None when malformed.
pub fn unpack(b: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let mut at = 0;
    let n = take_i32(b, &mut at)?;
    if n > 1024 {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let l = take_i32(b, &mut at)?;
        let name = String::from_utf8(b.get(at..at + l)?.to_vec()).ok()?;
        at += l;
        let l = take_i32(b, &mut at)?;
        let value = b.get(at..at + l)?.to_vec();
        at += l;
        out.push((name, value));
    }
    (at == b.len()).then_some(out)
}

fn full_record(i: u64) -> Vec<u8> {
    let fields: Vec<(String, Vec<u8>)> = (0..FIELDS).map(|f| (format!("field{f}"), field_value(i, f, 0))).collect();
    pack(&fields)
}

impl Ycsb {
    pub fn new(mix: Mix, records: Option<u64>, scan_all: bool) -> Ycsb {
        let records = records.unwrap_or(100_000).max(1);
        let capacity = records + if matches!(mix, Mix::D | Mix::E) { INSERTS_MAX } else { 0 };
        Ycsb {
            mix,
            records,
            scan_all,
            zipf: Zipfian::new(records),
            count: AtomicU64::new(records),
            versions: (0..capacity).map(|_| Mutex::new(Versions::default())).collect(),
            next_insert: AtomicU64::new(records),
            finished: Mutex::new(std::collections::BTreeSet::new()),
            partitions: AtomicUsize::new(0),
        }
    }

    fn keyspace() -> Value {
        Value::Bytes(KEYSPACE.as_bytes().into())
    }

    fn pick_existing(&self, rng: &mut Rng) -> u64 {
        let n = self.count.load(Ordering::Relaxed);
        match self.mix {
            Mix::D => latest(&self.zipf, rng, n),
            _ => scrambled(&self.zipf, rng, n),
        }
    }

    async fn read(&self, conn: &Conn, i: u64) -> Done {
        let r = conn.call("Get", vec![Self::keyspace(), Value::from(key_of(i).as_str())]).await;
        classify(r, |a| if a.row_count(0) == 1 { Done::ok("found") } else { Done::error(format!("record {i} not found")) })
    }

    /// Writes one field with the next version. The record's lock is held until the write's
    /// place in the server's order is fixed, so versions reach the server in order without
    /// a hot key waiting a whole round trip per write.
    async fn update(&self, conn: &Conn, rng: &mut Rng, i: u64) -> Done {
        let f = rng.range(0, FIELDS as i64 - 1) as usize;
        let mut versions = self.versions[i as usize].lock().await;
        versions.sent[f] += 1;
        let version = versions.sent[f];
        let data = pack(&[(format!("field{f}"), field_value(i, f, version))]);
        let r =
            conn.call_in_order("Put", vec![Self::keyspace(), Value::from(key_of(i).as_str()), Value::Bytes(data.into())], versions).await;
        let done = classify(r, |_| Done::ok("written"));
        if matches!(done, Done::Ok { .. }) {
            let mut versions = self.versions[i as usize].lock().await;
            versions.acked[f] = versions.acked[f].max(version);
        }
        done
    }

    async fn insert(&self, conn: &Conn) -> Option<Done> {
        let i = self.next_insert.fetch_add(1, Ordering::Relaxed);
        if i as usize >= self.versions.len() {
            return None;
        }
        let r = conn.call("Put", vec![Self::keyspace(), Value::from(key_of(i).as_str()), Value::Bytes(full_record(i).into())]).await;
        let done = classify(r, |_| Done::ok("inserted"));
        if matches!(done, Done::Ok { .. }) {
            // Inserts finish out of order: readers see only the unbroken run of finished ones.
            let mut f = self.finished.lock().await;
            f.insert(i);
            let mut c = self.count.load(Ordering::Relaxed);
            while f.remove(&c) {
                c += 1;
            }
            self.count.store(c, Ordering::Relaxed);
        }
        Some(done)
    }

    async fn scan(&self, conn: &Conn, rng: &mut Rng) -> Done {
        let start = key_of(self.pick_existing(rng));
        let len = rng.range(1, SCAN_LENGTH_MAX);
        let start_bytes = Value::Bytes(start.clone().into_bytes().into());
        if self.scan_all {
            let r = conn.call("ScanAll", vec![Self::keyspace(), start_bytes, Value::Int(len)]).await;
            return classify(r, |a| scan_outcome(&scanned_keys(a), &start, len));
        }
        // Hashing spreads a key range over the partitions, so each holds about its share of
        // the scan's rows: asking each for all of them sent `partitions` times the rows.
        let asked = scan_share(len, self.partitions.load(Ordering::Relaxed));
        let mut params = vec![Self::keyspace(), start_bytes, Value::Int(asked)];
        for round in 0..2 {
            let answers = match conn.call_all_partitions("Scan", params.clone()).await {
                Ok(a) => a,
                Err(e) => return Done::error(e.message),
            };
            self.partitions.store(answers.len(), Ordering::Relaxed);
            let mut runs = Vec::with_capacity(answers.len());
            for a in &answers {
                if let Err(e) = ok_or_err(a) {
                    return Done::error(e.message);
                }
                runs.push(scanned_keys(a));
            }
            let Some(keys) = merge_sorted(&runs, len as usize) else {
                return Done::error("a partition's Scan result was not in key order");
            };
            // A second round asks for every row, which always decides the scan.
            if round == 1 || scan_decided(&runs, &keys, asked as usize, len as usize) {
                return scan_outcome(&keys, &start, len);
            }
            params[2] = Value::Int(len);
        }
        unreachable!("the second round of a scan always returns")
    }
}

/// Rows asked of each of `partitions` partitions for a scan of `len` rows: the expected
/// share plus `SCAN_SHARE_SIGMAS` standard deviations (the count a partition holds is
/// binomial), and all of them while the partitions are not known yet.
pub fn scan_share(len: i64, partitions: usize) -> i64 {
    if partitions <= 1 {
        return len;
    }
    let (n, p) = (len as f64, 1.0 / partitions as f64);
    let share = n * p + SCAN_SHARE_SIGMAS * (n * p * (1.0 - p)).sqrt() + 1.0;
    (share.ceil() as i64).min(len)
}

/// Whether the first `len` keys `merged` from the per-partition `runs` are the scan's: a
/// run that came back with all `asked` rows may hold more keys past its last one, so every
/// merged key must come before that last key (and there must be `len` of them).
pub fn scan_decided<K: Ord>(runs: &[Vec<K>], merged: &[K], asked: usize, len: usize) -> bool {
    let cut_short = runs.iter().filter(|r| asked < len && r.len() >= asked).filter_map(|r| r.last()).min();
    match cut_short {
        None => true,
        Some(bound) => merged.len() == len && merged.last().is_some_and(|k| k <= bound),
    }
}

/// The keys (column 1) of a scan's rows, borrowed from the answer: a scan returns up to
/// 200 rows, and copying each key took about 4 of the client's 62 µs per scan.
fn scanned_keys(a: &Answer) -> Vec<&str> {
    a.texts(0, 1)
}

/// Merges per-partition sorted runs, keeping the first `limit`; None if a run is unsorted.
pub fn merge_sorted<K: Ord + Clone>(runs: &[Vec<K>], limit: usize) -> Option<Vec<K>> {
    if runs.iter().any(|r| r.windows(2).any(|w| w[0] > w[1])) {
        return None;
    }
    let mut heads = vec![0usize; runs.len()];
    let mut out = Vec::with_capacity(limit);
    while out.len() < limit {
        let mut best: Option<usize> = None;
        for (r, run) in runs.iter().enumerate() {
            if let Some(k) = run.get(heads[r]) {
                if best.is_none_or(|b| k < &runs[b][heads[b]]) {
                    best = Some(r);
                }
            }
        }
        let Some(b) = best else { break };
        out.push(runs[b][heads[b]].clone());
        heads[b] += 1;
    }
    Some(out)
}

fn scan_outcome(keys: &[&str], start: &str, len: i64) -> Done {
    if keys.len() > len as usize || keys.first().is_some_and(|&k| k < start) || keys.windows(2).any(|w| w[0] >= w[1]) {
        return Done::error(format!("scan from {start} returned keys out of order or range: {keys:?}"));
    }
    Done::ok(if keys.first().is_some_and(|&k| k == start) { "found" } else { "short" })
}

impl Workload for Ycsb {
    async fn setup(&self, conn: &Conn) -> Result<(), Error> {
        apps::ensure_loaded(conn, &apps::YCSB, "Store").await?;
        let have = conn.scalar("SELECT COUNT(*) FROM Store").await?;
        if have > 0 {
            // Our check needs records as we wrote them: start from a clean table.
            conn.adhoc("DELETE FROM Store").await?;
        }
        let conn2 = conn.clone();
        populate("ycsb records", self.records, move |i| {
            let conn = conn2.clone();
            async move {
                let params = vec![Ycsb::keyspace(), Value::from(key_of(i).as_str()), Value::Bytes(full_record(i).into())];
                let a = conn.call("Put", params).await?;
                ok_or_err(&a).map_err(|e| e.context(format!("Put(record {i})")))
            }
        })
        .await
    }

    fn one<'a>(&'a self, conn: &'a Conn, rng: &'a mut Rng) -> impl std::future::Future<Output = (&'static str, Done)> + Send + 'a {
        async move {
            let shares = self.mix.shares();
            let mut r = rng.range(0, 99) as u32;
            let mut kind = 0;
            while kind < 4 && r >= shares[kind] {
                r -= shares[kind];
                kind += 1;
            }
            match kind {
                0 => {
                    let i = self.pick_existing(rng);
                    ("READ", self.read(conn, i).await)
                }
                1 => {
                    let i = self.pick_existing(rng);
                    ("UPDATE", self.update(conn, rng, i).await)
                }
                // Inserts and scans are boxed: their futures are large, and every call's
                // future would otherwise have their size (the window of calls pays in cache).
                2 => match Box::pin(self.insert(conn)).await {
                    Some(d) => ("INSERT", d),
                    None => {
                        let i = self.pick_existing(rng);
                        ("READ", self.read(conn, i).await)
                    }
                },
                3 => ("SCAN", Box::pin(self.scan(conn, rng)).await),
                _ => {
                    let i = self.pick_existing(rng);
                    let read = self.read(conn, i).await;
                    if !matches!(read, Done::Ok { .. }) {
                        return ("READ-MODIFY-WRITE", read);
                    }
                    ("READ-MODIFY-WRITE", self.update(conn, rng, i).await)
                }
            }
        }
    }

    async fn check(&self, conn: &Conn) -> Check {
        let mut c = Check::new();
        let n = self.count.load(Ordering::Relaxed);
        let bad = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let versions: Arc<Vec<[u32; FIELDS]>> = {
            let mut v = Vec::with_capacity(n as usize);
            for i in 0..n as usize {
                v.push(self.versions[i].lock().await.acked);
            }
            Arc::new(v)
        };
        let (conn2, bad2) = (conn.clone(), bad.clone());
        let r = populate("ycsb check", n, move |i| {
            let (conn, bad, versions) = (conn2.clone(), bad2.clone(), versions.clone());
            async move {
                let a = conn.call("Get", vec![Ycsb::keyspace(), Value::from(key_of(i).as_str())]).await?;
                ok_or_err(&a)?;
                let problem = match a.value(0, 0, 0) {
                    Some(Value::Bytes(b)) => match unpack(&b) {
                        None => Some("malformed value".to_string()),
                        Some(fields) => {
                            let mut p = None;
                            for f in 0..FIELDS {
                                let want = field_value(i, f, versions[i as usize][f]);
                                let name = format!("field{f}");
                                match fields.iter().find(|(n, _)| *n == name) {
                                    Some((_, v)) if *v == want => {}
                                    _ => p = Some(format!("{name} is not version {}", versions[i as usize][f])),
                                }
                            }
                            if fields.len() != FIELDS {
                                p = Some(format!("{} fields", fields.len()));
                            }
                            p
                        }
                    },
                    other => Some(format!("read back {other:?}")),
                };
                if let Some(p) = problem {
                    let mut b = bad.lock().unwrap_or_else(|e| e.into_inner());
                    b.push(format!("record {i}: {p}"));
                }
                Ok(())
            }
        })
        .await;
        if let Err(e) = r {
            c.expect(false, format!("reading records back: {}", e.message));
            return c;
        }
        let bad = bad.lock().unwrap_or_else(|e| e.into_inner()).clone();
        c.expect(bad.is_empty(), format!("{n} records read back with the values last written ({} wrong)", bad.len()));
        for b in bad.iter().take(5) {
            c.details.push(b.clone());
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_and_unpack_round_trip() {
        let fields = vec![("field0".to_string(), b"abc".to_vec()), ("f".to_string(), Vec::new())];
        let b = pack(&fields);
        assert_eq!(b.len(), 4 + (4 + 6 + 4 + 3) + (4 + 1 + 4));
        assert_eq!(unpack(&b), Some(fields));
        assert_eq!(unpack(&b[..b.len() - 1]), None);
        assert_eq!(full_record(7).len(), 4 + 10 * (4 + 6 + 4 + 100));
    }

    #[test]
    fn merge_keeps_order_and_limit() {
        let runs = vec![vec!["a", "d"], vec!["b", "c", "e"]];
        assert_eq!(merge_sorted(&runs, 4), Some(vec!["a", "b", "c", "d"]));
        assert_eq!(merge_sorted(&[vec!["b", "a"]], 5), None);
        assert_eq!(merge_sorted(&[vec!["a"], vec![]], 5), Some(vec!["a"]));
    }

    #[test]
    fn a_scan_asks_each_partition_for_its_share_and_knows_when_that_was_not_enough() {
        assert_eq!(scan_share(50, 0), 50);
        assert_eq!(scan_share(50, 1), 50);
        // 25 expected, σ ≈ 3.5: 25 + 8.8 + 1.
        assert_eq!(scan_share(50, 2), 35);
        assert_eq!(scan_share(3, 2), 3);
        assert!(scan_share(100, 4) < 50);
        // Asked 2 of each for a scan of 3. A full run ending at "d" hides keys after "d".
        let runs = vec![vec!["a", "d"], vec!["b", "c"]];
        let merged = merge_sorted(&runs, 3).unwrap();
        assert_eq!(merged, ["a", "b", "c"]);
        assert!(scan_decided(&runs, &merged, 2, 3));
        // Both runs full, and the first may hold a key between its "b" and the merged "c".
        let runs = vec![vec!["a", "b"], vec!["c", "d"]];
        let merged = merge_sorted(&runs, 3).unwrap();
        assert!(!scan_decided(&runs, &merged, 2, 3));
        // Both full, but every merged key comes before both runs' last keys.
        let runs = vec![vec!["a", "e"], vec!["b", "c"]];
        assert!(scan_decided(&runs, &merge_sorted(&runs, 3).unwrap(), 2, 3));
        // A short run holds every key the partition has: merged from it, fewer keys is fine.
        let runs = vec![vec!["a"], vec!["b"]];
        assert!(scan_decided(&runs, &merge_sorted(&runs, 3).unwrap(), 2, 3));
        // A full run and too few keys merged: the full partition may have more.
        let runs = vec![vec!["a", "b"], vec![]];
        assert!(!scan_decided(&runs, &merge_sorted(&runs, 3).unwrap(), 2, 3));
        // Asked for everything: always decided.
        let runs = vec![vec!["a", "e", "f"], vec!["b", "c", "d"]];
        assert!(scan_decided(&runs, &merge_sorted(&runs, 3).unwrap(), 3, 3));
    }
}
