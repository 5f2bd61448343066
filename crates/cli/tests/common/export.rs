//! What an export target has acknowledged, read from its saved positions on disk.

use std::collections::HashMap;
use std::path::Path;

/// The sequence number (the rows' `seq` column) of the last row each of `partitions`
/// partitions of `target` had acknowledged, from its saved position (0: none yet).
pub fn acknowledged_seqs(data: &Path, target: &str, partitions: u32) -> HashMap<i64, u64> {
    let mut acked = HashMap::new();
    for p in 0..i64::from(partitions) {
        let dir = data.join("export").join(target).join(format!("partition-{p}"));
        let Ok(text) = std::fs::read_to_string(dir.join("position")) else {
            acked.insert(p, 0);
            continue;
        };
        let mut parts = text.split_whitespace().map(|x| x.parse::<u64>().expect("number"));
        let (segment, offset) = (parts.next().expect("segment"), parts.next().expect("offset"));
        assert_eq!(segment, 1, "a test this small fills one segment");
        let bytes = std::fs::read(dir.join(format!("{segment:010}.jsonl"))).expect("segment");
        let last = bytes[..offset as usize]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
            .filter_map(|v| v["seq"].as_u64())
            .next_back()
            .unwrap_or(0);
        acked.insert(p, last);
    }
    acked
}

/// An HTTP/1.1 receiver of export batches for the tests: keeps every record, in arrival
/// order; answers 503 (and counts the refusal) while `failing` is set, and waits
/// `delay_ms` before answering (to catch a kill mid-export), or `late_delay_ms` for every
/// request after the first `early_requests` when that is set.
#[derive(Default)]
pub struct Collector {
    pub failing: std::sync::atomic::AtomicBool,
    pub refused: std::sync::atomic::AtomicU64,
    pub delay_ms: std::sync::atomic::AtomicU64,
    pub early_requests: std::sync::atomic::AtomicU64,
    pub late_delay_ms: std::sync::atomic::AtomicU64,
    requests: std::sync::atomic::AtomicU64,
    records: std::sync::Mutex<Vec<serde_json::Value>>,
}

impl Collector {
    /// Listens on a free loopback port; returns the collector and the target's URL.
    pub fn start() -> (std::sync::Arc<Collector>, String) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        let url = format!("http://{}/batches", listener.local_addr().expect("address"));
        let c = std::sync::Arc::new(Collector::default());
        let cc = c.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let cc = cc.clone();
                std::thread::spawn(move || cc.serve(conn));
            }
        });
        (c, url)
    }

    fn serve(&self, conn: std::net::TcpStream) {
        use std::io::{BufRead, Read, Write};
        use std::sync::atomic::Ordering;
        let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(10)));
        let mut reader = std::io::BufReader::new(conn.try_clone().expect("clone"));
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let early = self.requests.fetch_add(1, Ordering::Relaxed) < self.early_requests.load(Ordering::Relaxed);
        let late = self.late_delay_ms.load(Ordering::Relaxed);
        let delay = if early || late == 0 { self.delay_ms.load(Ordering::Relaxed) } else { late };
        std::thread::sleep(std::time::Duration::from_millis(delay));
        let answer = if self.failing.load(Ordering::Relaxed) {
            self.refused.fetch_add(1, Ordering::Relaxed);
            "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        } else {
            let batch: Vec<serde_json::Value> = serde_json::from_slice(&body).expect("a JSON array of records");
            self.records.lock().expect("records").extend(batch);
            "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        };
        let mut conn = conn;
        let _ = conn.write_all(answer.as_bytes());
    }

    pub fn records(&self) -> Vec<serde_json::Value> {
        self.records.lock().expect("records").clone()
    }

    /// The distinct `ID` column values received.
    pub fn ids(&self) -> std::collections::BTreeSet<i64> {
        self.records().iter().filter_map(|r| r["row"]["ID"].as_i64()).collect()
    }

    /// (sequence number, ID) of each record received, per partition, in arrival order.
    pub fn by_partition(&self) -> std::collections::BTreeMap<i64, Vec<(u64, i64)>> {
        let mut by: std::collections::BTreeMap<i64, Vec<(u64, i64)>> = Default::default();
        for r in self.records() {
            let (p, seq, id) = (r["partition"].as_i64(), r["seq"].as_u64(), r["row"]["ID"].as_i64());
            by.entry(p.expect("partition")).or_default().push((seq.expect("seq"), id.expect("ID")));
        }
        by
    }
}
