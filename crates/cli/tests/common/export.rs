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
