//! Export of committed stream rows to files: one JSON-lines file per target and
//! partition under `<data>/export/`, each line numbered. Rows are written after their
//! transaction commits, in commit order, so delivery is in order per partition.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use lockstep_core::{Catalog, TableKind, Value};
use lockstep_storage::ExportRow;
use serde_json::{json, Map};

struct TargetFile {
    out: BufWriter<File>,
    next_seq: u64,
}

/// Writes one partition's exported rows.
pub struct ExportWriter {
    dir: PathBuf,
    partition: u32,
    files: HashMap<String, TargetFile>,
    dirty: bool,
}

/// The last sequence number in an export file, so numbering continues after a restart.
fn last_seq(path: &Path) -> u64 {
    let Ok(f) = File::open(path) else { return 0 };
    let mut last = 0;
    for line in BufReader::new(f).lines().map_while(Result::ok) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            if let Some(s) = v.get("seq").and_then(|s| s.as_u64()) {
                last = s;
            }
        }
    }
    last
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

impl ExportWriter {
    pub fn new(data_dir: &Path, partition: u32) -> Self {
        ExportWriter { dir: data_dir.join("export"), partition, files: HashMap::new(), dirty: false }
    }

    fn file(&mut self, target: &str) -> std::io::Result<&mut TargetFile> {
        match self.files.entry(target.to_string()) {
            std::collections::hash_map::Entry::Occupied(e) => Ok(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let dir = self.dir.join(target);
                fs::create_dir_all(&dir)?;
                let path = dir.join(format!("partition-{}.jsonl", self.partition));
                let next_seq = last_seq(&path) + 1;
                let f = OpenOptions::new().create(true).append(true).open(&path)?;
                Ok(e.insert(TargetFile { out: BufWriter::new(f), next_seq }))
            }
        }
    }

    /// Appends the committed rows of one transaction.
    pub fn write(&mut self, catalog: &Catalog, txn_id: i64, rows: Vec<ExportRow>) -> std::io::Result<()> {
        for r in rows {
            let Some(def) = catalog.table_by_id(r.stream) else { continue };
            let TableKind::Stream { target: Some(target) } = &def.kind else { continue };
            let mut row = Map::new();
            for (c, v) in def.columns.iter().zip(&r.row) {
                row.insert(c.name.clone(), json_value(v));
            }
            let partition = self.partition;
            let f = self.file(target)?;
            let line = json!({"seq": f.next_seq, "txn_id": txn_id, "partition": partition, "stream": def.name, "row": row});
            f.next_seq += 1;
            serde_json::to_writer(&mut f.out, &line)?;
            f.out.write_all(b"\n")?;
            self.dirty = true;
        }
        Ok(())
    }

    /// Pushes buffered lines to the files (called when the site goes idle).
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.dirty {
            for f in self.files.values_mut() {
                f.out.flush()?;
            }
            self.dirty = false;
        }
        Ok(())
    }
}
