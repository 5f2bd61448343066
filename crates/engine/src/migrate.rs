//! `MIGRATE TO TARGET`: deleting migrated rows once their export target has them.
//!
//! `MIGRATE FROM t` (the `sql` crate's `migrate.rs`) flags rows and queues them to the
//! target; the exporter notes each migrated row the target acknowledged
//! (`ExportHub::note_acknowledged`). This thread takes those notes and deletes the rows
//! through calls of the table's generated `T.migrate_delete` procedure, at most
//! `MIGRATE_ROWS_PER_CALL_MAX` rows a call and one call in flight per (table, partition),
//! so the deletion is an ordinary transaction: logged, replayed and run by replicas, and a
//! partition never pauses long. A row is deleted only while it is still flagged by the
//! migration the target acknowledged (the flag is the migrating transaction's time): a row
//! deleted meanwhile is gone already, and a row updated meanwhile stays, unflagged (the
//! target got its old values; VoltDB's rule: an update cancels the migration).
//!
//! The notes live in memory. After a restart, rows still flagged whose acknowledgement was
//! lost are migrated again (`T.migrate_again`: queued anew with a new flag), once their
//! target's backlog on that partition has been delivered: a target may get such a row
//! twice (at least once), never not at all.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lockstep_core::{Catalog, Result, Value};
use lockstep_sql::ddl_migrate::{migration, migrations, Migration, MIGRATE_TXN_COLUMN};

use crate::engine::{Call, Engine};
use crate::export::Acknowledged;
use crate::outcome::Outcome;

/// How often the thread looks for acknowledged rows.
const MIGRATE_TICK_MS: u64 = 20;
/// Rows one call deletes (or migrates again) at most: like TTL's calls
/// (`ttl::TTL_ROWS_PER_CALL_MAX`), a fifth of a millisecond of a partition's time.
pub const MIGRATE_ROWS_PER_CALL_MAX: usize = 100;
/// Suffix of the procedure that deletes acknowledged rows: `TABLE.migrate_delete`.
pub const MIGRATE_DELETE_SUFFIX: &str = "migrate_delete";
/// Suffix of the procedure that migrates stale flagged rows again: `TABLE.migrate_again`.
pub const MIGRATE_AGAIN_SUFFIX: &str = "migrate_again";

/// The generated procedures of every partitioned migrating table (a table is created, then
/// partitioned; only a partitioned one migrates).
pub fn procedure_names(catalog: &Catalog) -> Vec<String> {
    migrations(catalog)
        .filter(|m| m.table.partition_column.is_some())
        .flat_map(|m| [MIGRATE_DELETE_SUFFIX, MIGRATE_AGAIN_SUFFIX].map(|s| format!("{}.{s}", m.table.name)))
        .collect()
}

/// The Lua source of procedure `name` when it is a migrating table's generated procedure.
pub fn procedure_source(catalog: &Catalog, name: &str) -> Option<String> {
    let (table, op) = name.rsplit_once('.')?;
    let t = catalog.table(table)?;
    let m = migration(catalog, t).filter(|m| m.table.partition_column.is_some())?;
    if op.eq_ignore_ascii_case(MIGRATE_DELETE_SUFFIX) {
        Some(delete_source(&m))
    } else if op.eq_ignore_ascii_case(MIGRATE_AGAIN_SUFFIX) {
        Some(again_source(&m))
    } else {
        None
    }
}

/// The key columns' names, and `K1 = ? AND K2 = ?`.
fn key_text(m: &Migration) -> (Vec<String>, String) {
    let names: Vec<String> = m.key.iter().map(|&c| m.table.columns[c].name.clone()).collect();
    let cond = names.iter().map(|k| format!("{k} = ?")).collect::<Vec<_>>().join(" AND ");
    (names, cond)
}

/// `T.migrate_delete(flags, key1s, key2s, …)`: for each acknowledged row (the flag it was
/// exported under, its key), deletes it if it is still flagged so; answers the rows deleted.
fn delete_source(m: &Migration) -> String {
    let (names, cond) = key_text(m);
    let args: Vec<String> = (1..=names.len()).map(|i| format!("k{i}[i]")).collect();
    let params: Vec<String> = (1..=names.len()).map(|i| format!("k{i}")).collect();
    format!(
        "local flag = sql [[SELECT {MIGRATE_TXN_COLUMN} FROM {flags} WHERE {cond}]]\n\
         local unflag = sql [[DELETE FROM {flags} WHERE {cond}]]\n\
         local delete = sql [[DELETE FROM {table} WHERE {cond}]]\n\
         return function(flags, {params})\n\
         \x20 local deleted = 0\n\
         \x20 for i = 1, #flags do\n\
         \x20   local f = flag:first({args})\n\
         \x20   if f and f.{txn} == flags[i] then\n\
         \x20     unflag:exec({args})\n\
         \x20     deleted = deleted + delete:exec({args})\n\
         \x20   end\n\
         \x20 end\n\
         \x20 return deleted\n\
         end\n",
        flags = m.flags.name,
        table = m.table.name,
        params = params.join(", "),
        args = args.join(", "),
        txn = MIGRATE_TXN_COLUMN.to_ascii_lowercase(),
    )
}

/// `T.migrate_again(cutoff, limit)`: migrates again up to `limit` rows flagged before
/// `cutoff` (µs); answers how many.
fn again_source(m: &Migration) -> String {
    let (names, cond) = key_text(m);
    let args: Vec<String> = names.iter().map(|k| format!("row[{:?}]", k.to_ascii_lowercase())).collect();
    format!(
        "local stale = sql [[SELECT {keys} FROM {flags} WHERE {MIGRATE_TXN_COLUMN} < ? LIMIT ?]]\n\
         local unflag = sql [[DELETE FROM {flags} WHERE {cond}]]\n\
         local again = sql [[MIGRATE FROM {table} WHERE {cond}]]\n\
         return function(cutoff, limit)\n\
         \x20 local n = 0\n\
         \x20 for row in stale:query(cutoff, limit):rows() do\n\
         \x20   unflag:exec({args})\n\
         \x20   again:exec({args})\n\
         \x20   n = n + 1\n\
         \x20 end\n\
         \x20 return n\n\
         end\n",
        keys = names.join(", "),
        flags = m.flags.name,
        table = m.table.name,
        args = args.join(", "),
    )
}

/// A key value as exported (JSON) back as a parameter; the statement converts it to the
/// column's type.
fn param_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::Int(i),
            None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::Str(s.as_str().into()),
        serde_json::Value::Bool(b) => Value::Bool(*b),
        _ => Value::Null,
    }
}

/// A row waiting to be deleted: its flag and key.
type Pending = (i64, Vec<Value>);

/// One (table, partition)'s work.
#[derive(Default)]
struct Lane {
    pending: VecDeque<Pending>,
    /// A call is out (its rows, to put back if it fails).
    in_flight: Option<Vec<Pending>>,
    /// Whether rows flagged before this thread started have been migrated again.
    swept: bool,
    /// When a failed call may be retried.
    retry_at: Option<Instant>,
}

/// A call's answer, back on this thread.
struct Answer {
    key: (String, u32),
    again: bool,
    outcome: Outcome,
}

/// Wait after a failed call before the next one on that partition.
const MIGRATE_RETRY_MS: u64 = 1_000;

/// Starts the migration thread; it stops when the engine shuts down.
pub fn start(engine: &Arc<Engine>) -> Result<std::thread::JoinHandle<()>> {
    let weak = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("migrate".into())
        .spawn(move || run(weak))
        .map_err(|e| lockstep_core::Error::unexpected(format!("cannot start the migration thread: {e}")))
}

fn run(engine: Weak<Engine>) {
    let (tx, answers): (Sender<Answer>, Receiver<Answer>) = channel();
    // Rows flagged before now are stale once their target's backlog is delivered.
    let started_micros = crate::sysprocs::now_millis().saturating_mul(1000);
    let mut lanes: BTreeMap<(String, u32), Lane> = BTreeMap::new();
    loop {
        let answer = match answers.recv_timeout(Duration::from_millis(MIGRATE_TICK_MS)) {
            Ok(a) => Some(a),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let Some(engine) = engine.upgrade() else { return };
        if engine.shared().is_shutting_down() {
            return;
        }
        if let Some(a) = answer {
            answered(&mut lanes, a);
        }
        let catalog = engine.catalog();
        for ack in engine.shared().config.export.take_acknowledged() {
            queue(&catalog, &mut lanes, ack);
        }
        for m in migrations(&catalog).filter(|m| m.table.partition_column.is_some()) {
            for destination in engine.background_destinations(true) {
                let Some(partition) = destination.and_then(|p| u32::try_from(p).ok()) else { continue };
                let key = (m.table.name.clone(), partition);
                let lane = lanes.entry(key.clone()).or_default();
                if lane.in_flight.is_some() || lane.retry_at.is_some_and(|t| Instant::now() < t) {
                    continue;
                }
                if !lane.pending.is_empty() {
                    send_delete(&engine, &tx, &m, key, lane);
                } else if !lane.swept && backlog_delivered(&engine, &m, partition) {
                    send_again(&engine, &tx, key, lane, started_micros);
                }
            }
        }
    }
}

/// Whether the target has everything queued on this partition (so a row flagged before
/// the start that is still flagged lost its acknowledgement).
fn backlog_delivered(engine: &Engine, m: &Migration, partition: u32) -> bool {
    let hub = &engine.shared().config.export;
    hub.target(m.target).is_some_and(|t| t.kind.name() != "file") && hub.lane(m.target, partition).backlog_rows.load(Ordering::Relaxed) <= 0
}

/// Files an acknowledged row under its table and partition.
fn queue(catalog: &Catalog, lanes: &mut BTreeMap<(String, u32), Lane>, ack: Acknowledged) {
    let Some(m) = catalog.table(&ack.table).and_then(|t| migration(catalog, t)) else { return };
    let key: Option<Vec<Value>> = m.key.iter().map(|&c| ack.row.get(&m.table.columns[c].name).map(param_value)).collect();
    let Some(key) = key else {
        tracing::warn!(
            "a migrated row of {} came back without its key; it stays flagged until the next restart migrates it again",
            m.table.name
        );
        return;
    };
    let flag = crate::txn_id::timestamp_micros(ack.txn_id);
    lanes.entry((m.table.name.clone(), ack.partition)).or_default().pending.push_back((flag, key));
}

/// Sends a partition its next deletion: up to `MIGRATE_ROWS_PER_CALL_MAX` rows.
fn send_delete(engine: &Engine, tx: &Sender<Answer>, m: &Migration, key: (String, u32), lane: &mut Lane) {
    let n = lane.pending.len().min(MIGRATE_ROWS_PER_CALL_MAX);
    let rows: Vec<Pending> = lane.pending.drain(..n).collect();
    let mut params = vec![Value::Array(rows.iter().map(|(f, _)| Value::Int(*f)).collect())];
    for k in 0..m.key.len() {
        params.push(Value::Array(rows.iter().map(|(_, key)| key.get(k).cloned().unwrap_or(Value::Null)).collect()));
    }
    lane.in_flight = Some(rows);
    submit(engine, tx, key, format!("{}.{MIGRATE_DELETE_SUFFIX}", m.table.name), params, false);
}

/// Sends a partition a call migrating again rows flagged before the thread started.
fn send_again(engine: &Engine, tx: &Sender<Answer>, key: (String, u32), lane: &mut Lane, cutoff_micros: i64) {
    lane.in_flight = Some(Vec::new());
    let params = vec![Value::Int(cutoff_micros), Value::Int(MIGRATE_ROWS_PER_CALL_MAX as i64)];
    let procedure = format!("{}.{MIGRATE_AGAIN_SUFFIX}", key.0);
    submit(engine, tx, key, procedure, params, true);
}

fn submit(engine: &Engine, tx: &Sender<Answer>, key: (String, u32), procedure: String, params: Vec<Value>, again: bool) {
    let call = Call { procedure, params, partition_destination: i32::try_from(key.1).ok(), ..Call::default() };
    let tx = tx.clone();
    engine.submit(call, Box::new(move |outcome: Outcome| drop(tx.send(Answer { key, again, outcome }))));
}

/// Settles a call: a failed deletion puts its rows back (retried later); a migration again
/// that found a full call's worth goes on, one that found fewer is done.
fn answered(lanes: &mut BTreeMap<(String, u32), Lane>, a: Answer) {
    let Some(lane) = lanes.get_mut(&a.key) else { return };
    let rows = lane.in_flight.take().unwrap_or_default();
    if !a.outcome.is_success() {
        tracing::debug!("migration of {} partition {}: {}", a.key.0, a.key.1, a.outcome.status_string.as_deref().unwrap_or("failed"));
        for r in rows.into_iter().rev() {
            lane.pending.push_front(r);
        }
        lane.retry_at = Some(Instant::now() + Duration::from_millis(MIGRATE_RETRY_MS));
        return;
    }
    lane.retry_at = None;
    if a.again {
        let n = a.outcome.tables.first().and_then(|t| t.first_value()).and_then(Value::as_i64).unwrap_or(0);
        lane.swept = n < MIGRATE_ROWS_PER_CALL_MAX as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(ddl: &[&str]) -> Catalog {
        let mut c = Catalog::default();
        let env = crate::ddl::FsDdlEnv::new(std::env::temp_dir());
        for sql in ddl {
            lockstep_sql::apply_ddl(&mut c, sql, &env).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        c
    }

    #[test]
    fn only_migrating_tables_have_the_procedures() {
        let c = catalog(&[
            "CREATE TABLE a MIGRATE TO TARGET t (id INTEGER NOT NULL, r INTEGER NOT NULL, PRIMARY KEY (id, r))",
            "PARTITION TABLE a ON COLUMN id",
            "CREATE TABLE b (id INTEGER NOT NULL, PRIMARY KEY (id))",
        ]);
        assert_eq!(procedure_names(&c), ["A.migrate_delete", "A.migrate_again"]);
        let delete = procedure_source(&c, "A.migrate_delete").unwrap();
        assert!(delete.contains("DELETE FROM A WHERE ID = ? AND R = ?"), "{delete}");
        assert!(delete.contains("flag:first(k1[i], k2[i])"), "{delete}");
        let again = procedure_source(&c, "a.MIGRATE_AGAIN").unwrap();
        assert!(again.contains("MIGRATE FROM A WHERE ID = ? AND R = ?"), "{again}");
        assert!(procedure_source(&c, "B.migrate_delete").is_none());
        assert!(procedure_source(&c, "A.insert").is_none());
    }
}
