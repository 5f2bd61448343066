//! Writes the seed corpus of every fuzz target into `fuzz/corpus/<target>/`, from real
//! inputs: messages the wire encoders make (the bytes the Rust client and the server
//! send), the apps' DDL and the SQL of their procedures, a command log written by the
//! command log writer, and a snapshot written by the snapshot writer.
//!
//! Run from the repository: `cargo run --manifest-path fuzz/Cargo.toml --bin make-seeds`.
//! Each file is named by its content's checksum, so a rerun adds no duplicates.

use std::path::{Path, PathBuf};

use lockstep_core::{DataType, ResultTable, Value};
use lockstep_engine::cmdlog::fuzzing::{ScratchDir, FLAG_CONTIGUOUS_NAMES, FLAG_FIX_CHECKSUMS, SEGMENT_SEPARATOR};
use lockstep_engine::cmdlog::{segment::list_segments, CommandLog, Durability, Record};
use lockstep_engine::snapshot::fuzzing::FLAG_MANIFEST_FROM_INPUT;
use lockstep_engine::snapshot::{partition_file_name, Manifest, SnapshotBuilder};
use lockstep_wire::login::SERVICE_DATABASE;
use lockstep_wire::{
    encode_invocation, encode_login_request, encode_login_response, encode_params, encode_response, encode_table, HashScheme, Invocation,
    LoginCode, LoginRequest, LoginResponse, LoginSuccess, Response,
};

type Seeds = Vec<Vec<u8>>;

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let written = [("wire", wire()), ("sql", sql(&root.join("../apps"))), ("cmdlog", cmdlog()), ("snapshot", snapshot())]
        .into_iter()
        .map(|(target, seeds)| write_all(&root.join("corpus").join(target), &seeds))
        .sum::<usize>();
    println!("{written} seed files written under {}", root.join("corpus").display());
}

fn write_all(dir: &Path, seeds: &Seeds) -> usize {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    for seed in seeds {
        let path = dir.join(format!("seed-{:08x}", crc32c::crc32c(seed)));
        std::fs::write(&path, seed).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    seeds.len()
}

fn prefixed(selector: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![selector];
    out.extend_from_slice(payload);
    out
}

/// One value of every type a parameter or a cell can carry, NULL included.
fn every_value() -> Vec<Value> {
    vec![
        Value::Int(7),
        Value::Int(-300),
        Value::Int(70_000),
        Value::Int(5_551_234_567),
        Value::Float(2.5),
        Value::from("NY"),
        Value::Bytes(vec![1, 2, 3].into()),
        Value::Timestamp(1_709_294_400_000_000),
        Value::Decimal(lockstep_core::Dec::new(12_340_000_000_000)),
        Value::Bool(true),
        Value::Null,
        Value::Array(vec![Value::Int(1), Value::Int(2)].into()),
        Value::Array(vec![Value::from("a"), Value::from("b")].into()),
    ]
}

fn every_type_table() -> ResultTable {
    let mut t = ResultTable::with_columns(&[
        ("T", DataType::TinyInt),
        ("S", DataType::SmallInt),
        ("I", DataType::Integer),
        ("B", DataType::BigInt),
        ("F", DataType::Float),
        ("V", DataType::Varchar),
        ("TS", DataType::Timestamp),
        ("D", DataType::Decimal),
        ("VB", DataType::Varbinary),
    ]);
    t.push(vec![
        Value::Int(1),
        Value::Int(2),
        Value::Int(3),
        Value::Int(4),
        Value::Float(0.5),
        Value::from("five"),
        Value::Timestamp(6),
        Value::Decimal(lockstep_core::Dec::new(7_000_000_000_000)),
        Value::Bytes(vec![8].into()),
    ]);
    t.push(vec![Value::Null; 9]);
    t
}

/// Selectors as in `lockstep_wire::fuzzing::decode_any`.
fn wire() -> Seeds {
    let (frames, login, invocation, params, tables, response, handle) = (0, 1, 2, 3, 4, 5, 6);
    let mut seeds = Vec::new();
    let mut stream = Vec::new();
    for (version, scheme) in [(0, HashScheme::Sha1), (1, HashScheme::Sha256)] {
        let req = LoginRequest {
            version,
            scheme,
            service: SERVICE_DATABASE.into(),
            username: "admin".into(),
            digest: vec![7; scheme.digest_len()],
        };
        let mut out = Vec::new();
        encode_login_request(&req, &mut out);
        seeds.push(prefixed(login, &out[4..]));
        stream.extend_from_slice(&out);
    }
    let success = LoginSuccess {
        host_id: 0,
        connection_id: 1,
        cluster_start_ms: 1_709_294_400_000,
        leader_ipv4: 0x7f00_0001,
        build: "lockstep".into(),
    };
    for resp in [LoginResponse::Success(success), LoginResponse::Failure(LoginCode::AuthFailed)] {
        let mut out = Vec::new();
        encode_login_response(&resp, &mut out);
        seeds.push(prefixed(login, &out[4..]));
    }
    let mut calls = vec![
        Invocation::new("Vote", 1, vec![Value::Int(5_551_234_567), Value::Int(3), Value::Int(10)]),
        Invocation::new("@AdHoc", 2, vec![Value::from("SELECT COUNT(*) FROM votes WHERE phone_number = ?"), Value::Int(5)]),
        Invocation::new("@Ping", 3, vec![]),
        Invocation::new("Every", 4, every_value()),
    ];
    calls[1].timeout_ms = Some(5000);
    calls[2].all_partition = true;
    calls[3].partition_destination = Some(1);
    for call in &calls {
        let mut out = Vec::new();
        if encode_invocation(call, &mut out).is_ok() {
            seeds.push(prefixed(invocation, &out[4..]));
            stream.extend_from_slice(&out);
        }
    }
    seeds.push(prefixed(frames, &stream));
    let mut p = Vec::new();
    if encode_params(&every_value(), &mut p).is_ok() {
        seeds.push(prefixed(params, &p));
    }
    let mut t = Vec::new();
    encode_table(&every_type_table(), &mut t);
    encode_table(&ResultTable::scalar("modified_tuples", 1), &mut t);
    seeds.push(prefixed(tables, &t));
    let mut error = Response::error(9, &lockstep_core::Error::sql("no such table"));
    error.app_status_string = Some("app".into());
    for r in [Response::success(8, vec![every_type_table(), ResultTable::modified(2)]), error] {
        let mut out = Vec::new();
        encode_response(&r, &mut out);
        seeds.push(prefixed(response, &out[4..]));
        seeds.push(prefixed(handle, &out[4..12]));
    }
    seeds
}

/// Selectors as in `lockstep_fuzz::sql::run`: split, prepare, DDL, execute.
fn sql(apps: &Path) -> Seeds {
    let (split, prepare, ddl, execute) = (0, 1, 2, 3);
    let mut seeds = vec![prefixed(ddl, SCHEMA_SCRIPT.as_bytes())];
    let mut app_dirs: Vec<PathBuf> = std::fs::read_dir(apps).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    app_dirs.sort();
    for app in app_dirs {
        let Ok(script) = std::fs::read_to_string(app.join("ddl.sql")) else {
            continue;
        };
        if script.len() <= lockstep_fuzz::sql::SQL_INPUT_MAX_BYTES {
            seeds.push(prefixed(split, script.as_bytes()));
        }
        for stmt in lockstep_sql::split_statements(&script).unwrap_or_default() {
            seeds.push(prefixed(ddl, stmt.as_bytes()));
        }
        let mut procs: Vec<PathBuf> =
            std::fs::read_dir(app.join("procedures")).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
        procs.sort();
        for lua in procs {
            let source = std::fs::read_to_string(&lua).unwrap_or_default();
            for query in lua_sql(&source) {
                seeds.push(prefixed(prepare, query.as_bytes()));
                seeds.push(prefixed(execute, query.as_bytes()));
            }
        }
    }
    seeds
}

/// A script that changes a schema with rows in it, for the DDL-and-statements entry point.
const SCHEMA_SCRIPT: &str = "CREATE TABLE f (a INTEGER NOT NULL, b VARCHAR(10), PRIMARY KEY (a));
PARTITION TABLE f ON COLUMN a;
INSERT INTO f VALUES (1, 'x');
INSERT INTO f VALUES (2, NULL);
CREATE INDEX fi ON f (b);
SELECT b, COUNT(*) FROM f GROUP BY b ORDER BY b;
ALTER TABLE f ADD COLUMN c BIGINT DEFAULT 7;
UPDATE f SET c = a + 1 WHERE a = ?;
CREATE VIEW fv (b, n) AS SELECT b, COUNT(*) FROM f GROUP BY b;
SELECT * FROM fv;
DELETE FROM f WHERE a = 1;
DROP VIEW fv;
DROP TABLE f;
";

/// The SQL statements in a Lua procedure: `sql [[...]]` long strings that start with a
/// statement keyword.
fn lua_sql(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(open) = rest.find("[[") {
        let after = &rest[open + 2..];
        let Some(close) = after.find("]]") else {
            break;
        };
        let text = after[..close].trim();
        let head = text.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
        if ["SELECT", "INSERT", "UPDATE", "DELETE", "UPSERT"].contains(&head.as_str()) {
            out.push(text.to_string());
        }
        rest = &after[close + 2..];
    }
    out
}

/// Records of every kind.
fn records() -> Vec<Record> {
    vec![
        Record::Sp {
            txn_id: 1 << 20,
            partition: 1,
            procedure: "Vote".into(),
            params: vec![Value::Int(5_551_234_567), Value::Int(2), Value::Int(10)],
        },
        Record::AdHocSp {
            txn_id: (1 << 20) + 1,
            partition: 0,
            sql: "DELETE FROM votes WHERE phone_number = ?".into(),
            params: vec![Value::Int(5)],
        },
        Record::MpMarker { partition: 0, mp_txn_id: (1 << 20) + 2 },
        Record::MpMarker { partition: 1, mp_txn_id: (1 << 20) + 2 },
        Record::Mp {
            txn_id: (1 << 20) + 2,
            procedure: "@AdHoc".into(),
            params: vec![Value::from("UPDATE contestants SET contestant_name = 'x'")],
        },
        Record::Sp { txn_id: (1 << 20) + 3, partition: 0, procedure: "Every".into(), params: every_value() },
        Record::SnapshotTaken { txn_id: (1 << 20) + 4, snapshot_id: 3 },
    ]
}

/// Segment files written by the real command log writer, as fuzz inputs (flags byte first).
fn cmdlog() -> Seeds {
    let dir = ScratchDir::new("seeds-cmdlog").unwrap_or_else(|e| panic!("cannot make a scratch directory: {e}"));
    let log = CommandLog::open(dir.path(), Durability::Sync).unwrap_or_else(|e| panic!("cannot open a command log: {e}"));
    for r in records() {
        let body = r.encode().unwrap_or_else(|e| panic!("cannot encode {r:?}: {e}"));
        log.append(&body, None).unwrap_or_else(|e| panic!("cannot append: {e}"));
    }
    log.flush_and_sync().unwrap_or_else(|e| panic!("cannot sync the log: {e}"));
    drop(log);
    let segments = list_segments(dir.path()).unwrap_or_default();
    let seg = segments.first().map(|s| std::fs::read(&s.path).unwrap_or_default()).unwrap_or_default();
    let records_end = seg.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let whole = &seg[..records_end];
    let mut seeds = Vec::new();
    for flags in [0, FLAG_FIX_CHECKSUMS | FLAG_CONTIGUOUS_NAMES] {
        seeds.push(prefixed(flags, whole));
        // A torn tail, and the writer's zeros laid down ahead of the records.
        seeds.push(prefixed(flags, &whole[..whole.len() - 5]));
        seeds.push(prefixed(flags, &seg[..(records_end + 64).min(seg.len())]));
    }
    let mut two = prefixed(FLAG_FIX_CHECKSUMS | FLAG_CONTIGUOUS_NAMES, whole);
    two.extend_from_slice(SEGMENT_SEPARATOR);
    two.extend_from_slice(whole);
    seeds.push(two);
    seeds
}

/// A snapshot written by the real snapshot writer, as fuzz inputs (flags byte first).
fn snapshot() -> Seeds {
    let root = ScratchDir::new("seeds-snapshot").unwrap_or_else(|e| panic!("cannot make a scratch directory: {e}"));
    let b = SnapshotBuilder::create(root.path(), 1, 42, 1, "CREATE TABLE T (A INTEGER NOT NULL);")
        .unwrap_or_else(|e| panic!("cannot create a snapshot: {e}"));
    let mut w = b.partition_writer(0).unwrap_or_else(|e| panic!("cannot write partition 0: {e}"));
    let table = every_type_table();
    let types: Vec<DataType> = table.columns.iter().map(|c| c.ty).collect();
    let steps = w
        .begin_table("EVERY", &types)
        .and_then(|_| w.write_rows(&table.rows))
        .and_then(|_| w.begin_table("EMPTY", &[DataType::Integer]))
        .and_then(|_| w.begin_table("ONE", &[DataType::BigInt]))
        .and_then(|_| w.write_rows(&[vec![Value::Int(1)], vec![Value::Int(2)]]));
    steps.unwrap_or_else(|e| panic!("cannot write rows: {e}"));
    let entry = w.finish().unwrap_or_else(|e| panic!("cannot finish partition 0: {e}"));
    b.complete(vec![entry]).unwrap_or_else(|e| panic!("cannot complete the snapshot: {e}"));
    let dir = root.path().join("1");
    let file = std::fs::read(dir.join(partition_file_name(0))).unwrap_or_default();
    // The manifest as written, less its creation time, so that a rerun makes the same seed.
    let mut manifest = Manifest::read(&dir).unwrap_or_else(|e| panic!("cannot read the manifest back: {e}"));
    manifest.created_unix_ms = 0;
    let manifest = serde_json::to_vec(&manifest).unwrap_or_else(|e| panic!("cannot write the manifest: {e}"));
    let mut seeds = vec![prefixed(0, &file), prefixed(1, &file), prefixed(1, &file[..file.len() - 30])];
    let mut with_manifest = vec![FLAG_MANIFEST_FROM_INPUT | 1];
    with_manifest.extend_from_slice(&(manifest.len() as u16).to_be_bytes());
    with_manifest.extend_from_slice(&manifest);
    with_manifest.extend_from_slice(&file);
    seeds.push(with_manifest);
    seeds
}
