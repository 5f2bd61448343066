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
//! The notes live in memory, and only the node leading a partition keeps them (it alone
//! deletes, `Engine::background_destinations`): notes for a partition led elsewhere are
//! dropped, and a lane's notes past `MIGRATE_PENDING_MAX` too, so memory stays bounded
//! whatever the targets acknowledge. A dropped note costs a re-send, never a row: whenever
//! this node starts leading a partition (its start is one such moment), rows flagged
//! before then that are still flagged once their target's backlog on that partition has
//! been delivered lost their acknowledgement (to a restart, to the old leader, or to a
//! dropped note), and are migrated again (`T.migrate_again`: queued anew with a new flag).
//! A target may get such a row twice (at least once), never not at all.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lockstep_core::{Catalog, Result, Value};
use lockstep_sql::ddl_migrate::{migration, migrations, Migration, MIGRATE_TXN_COLUMN};

use crate::engine::{Call, Engine};
use crate::export::{Acknowledged, TargetKind};
use crate::outcome::Outcome;

/// How often the thread looks for acknowledged rows.
const MIGRATE_TICK_MS: u64 = 20;
/// Rows one call deletes (or migrates again) at most: as many as TTL's calls
/// (`ttl::TTL_ROWS_PER_CALL_MAX`), some 40 µs of a partition's time.
pub const MIGRATE_ROWS_PER_CALL_MAX: usize = crate::ttl::TTL_ROWS_PER_CALL_MAX as usize;
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

/// The key columns' names, and `"K1" = ? AND "K2" = ?` (quoted: a key may be named with a
/// reserved word).
fn key_text(m: &Migration) -> (Vec<String>, String) {
    let names: Vec<String> = m.key.iter().map(|&c| m.table.columns[c].name.clone()).collect();
    let cond = names.iter().map(|k| format!("{} = ?", lockstep_sql::quote_ident(k))).collect::<Vec<_>>().join(" AND ");
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
        flags = lockstep_sql::quote_ident(&m.flags.name),
        table = lockstep_sql::quote_ident(&m.table.name),
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
        keys = names.iter().map(|k| lockstep_sql::quote_ident(k)).collect::<Vec<_>>().join(", "),
        flags = lockstep_sql::quote_ident(&m.flags.name),
        table = lockstep_sql::quote_ident(&m.table.name),
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
    /// Rows flagged before this time (µs) and still flagged once the target's backlog is
    /// delivered are to be migrated again (their acknowledgement was lost or dropped).
    sweep_before: Option<i64>,
    /// Whether this node led the partition at the last look.
    leads: bool,
    /// When a failed call may be retried.
    retry_at: Option<Instant>,
}

/// A call's answer, back on this thread.
struct Answer {
    key: (String, u32),
    /// A migration again: the cutoff it was sent with.
    again: Option<i64>,
    outcome: Outcome,
}

/// The migration thread's lanes, by (table, partition).
type Lanes = BTreeMap<(String, u32), Lane>;

/// Wait after a failed call before the next one on that partition.
const MIGRATE_RETRY_MS: u64 = 1_000;
/// Acknowledged rows one (table, partition) keeps waiting for deletion at most (about
/// 100 bytes each); past it, notes are dropped and those rows migrated again later.
pub const MIGRATE_PENDING_MAX: usize = 1_000_000;

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
    let mut lanes = Lanes::new();
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
        let now_micros = crate::sysprocs::now_millis().saturating_mul(1000);
        for ack in engine.shared().config.export.take_acknowledged() {
            queue(&catalog, &mut lanes, ack, now_micros);
        }
        let led: Vec<u32> =
            engine.background_destinations(true).into_iter().filter_map(|d| d.and_then(|p| u32::try_from(p).ok())).collect();
        for m in migrations(&catalog).filter(|m| m.table.partition_column.is_some()) {
            for &partition in &led {
                lanes.entry((m.table.name.clone(), partition)).or_default();
            }
        }
        follow_leadership(&mut lanes, |p| led.contains(&p), now_micros);
        for m in migrations(&catalog).filter(|m| m.table.partition_column.is_some()) {
            for &partition in &led {
                let key = (m.table.name.clone(), partition);
                let Some(lane) = lanes.get_mut(&key) else { continue };
                if lane.in_flight.is_some() || lane.retry_at.is_some_and(|t| Instant::now() < t) {
                    continue;
                }
                if !lane.pending.is_empty() {
                    send_delete(&engine, &tx, &m, key, lane);
                } else if let Some(cutoff) = lane.sweep_before.filter(|_| backlog_delivered(&engine, &m, partition)) {
                    send_again(&engine, &tx, key, lane, cutoff);
                }
            }
        }
    }
}

/// Keeps the notes of the partitions this node leads only (`leads`): another node's lane
/// drops them (its leader deletes those rows, or whoever leads next migrates them again).
/// A partition this node starts leading sweeps the rows flagged before now.
fn follow_leadership(lanes: &mut Lanes, leads: impl Fn(u32) -> bool, now_micros: i64) {
    for ((_, partition), lane) in lanes.iter_mut() {
        let leads_now = leads(*partition);
        if leads_now && !lane.leads {
            lane.sweep_before = Some(now_micros);
        }
        if !leads_now {
            lane.pending = VecDeque::new();
        }
        lane.leads = leads_now;
    }
}

/// Whether the target has everything queued on this partition (so a row flagged before
/// the start that is still flagged lost its acknowledgement).
fn backlog_delivered(engine: &Engine, m: &Migration, partition: u32) -> bool {
    let hub = &engine.shared().config.export;
    match hub.target(m.target).map(|t| &t.kind) {
        // Not configured: nothing acknowledges yet, and nothing is migrated again.
        None => false,
        // Its files are the destination: every row written is there.
        Some(TargetKind::File) => true,
        Some(_) => hub.lane(m.target, partition).backlog_rows.load(Ordering::Relaxed) <= 0,
    }
}

/// Files an acknowledged row under its table and partition; past `MIGRATE_PENDING_MAX`
/// the note is dropped and the row is migrated again later.
fn queue(catalog: &Catalog, lanes: &mut Lanes, ack: Acknowledged, now_micros: i64) {
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
    let lane = lanes.entry((m.table.name.clone(), ack.partition)).or_default();
    if lane.pending.len() >= MIGRATE_PENDING_MAX {
        lane.sweep_before = Some(now_micros);
        return;
    }
    lane.pending.push_back((flag, key));
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
    submit(engine, tx, key, format!("{}.{MIGRATE_DELETE_SUFFIX}", m.table.name), params, None);
}

/// Sends a partition a call migrating again rows flagged before `cutoff_micros`.
fn send_again(engine: &Engine, tx: &Sender<Answer>, key: (String, u32), lane: &mut Lane, cutoff_micros: i64) {
    lane.in_flight = Some(Vec::new());
    let params = vec![Value::Int(cutoff_micros), Value::Int(MIGRATE_ROWS_PER_CALL_MAX as i64)];
    let procedure = format!("{}.{MIGRATE_AGAIN_SUFFIX}", key.0);
    submit(engine, tx, key, procedure, params, Some(cutoff_micros));
}

fn submit(engine: &Engine, tx: &Sender<Answer>, key: (String, u32), procedure: String, params: Vec<Value>, again: Option<i64>) {
    let call = Call { procedure, params, partition_destination: i32::try_from(key.1).ok(), ..Call::default() };
    let tx = tx.clone();
    engine.submit(call, Box::new(move |outcome: Outcome| drop(tx.send(Answer { key, again, outcome }))));
}

/// Settles a call: a failed deletion puts its rows back (retried later); a migration again
/// that found a full call's worth goes on, one that found fewer is done (unless a later
/// sweep was asked for meanwhile).
fn answered(lanes: &mut Lanes, a: Answer) {
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
    if let Some(cutoff) = a.again {
        let n = a.outcome.tables.first().and_then(|t| t.first_value()).and_then(Value::as_i64).unwrap_or(0);
        if n < MIGRATE_ROWS_PER_CALL_MAX as i64 && lane.sweep_before == Some(cutoff) {
            lane.sweep_before = None;
        }
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

    const TABLE_A: [&str; 2] = [
        "CREATE TABLE a MIGRATE TO TARGET t (id INTEGER NOT NULL, r INTEGER NOT NULL, PRIMARY KEY (id, r))",
        "PARTITION TABLE a ON COLUMN id",
    ];

    /// Row (id, 0) of table A, acknowledged on `partition`.
    fn ack(partition: u32, id: i64) -> Acknowledged {
        let row = serde_json::json!({"ID": id, "R": 0}).as_object().cloned().unwrap_or_default();
        Acknowledged { partition, table: "A".into(), txn_id: 1 << 23, row }
    }

    fn lane(lanes: &Lanes, partition: u32) -> &Lane {
        &lanes[&("A".to_string(), partition)]
    }

    #[test]
    fn notes_stay_only_where_this_node_leads_and_a_new_leader_sweeps() {
        let c = catalog(&TABLE_A);
        let mut lanes = Lanes::new();
        queue(&c, &mut lanes, ack(0, 1), 10);
        queue(&c, &mut lanes, ack(1, 2), 10);
        follow_leadership(&mut lanes, |p| p == 0, 100);
        // Led here: the note waits for its deletion, and rows flagged before this node
        // began leading are swept once the backlog is delivered.
        let flag = crate::txn_id::timestamp_micros(1 << 23);
        assert_eq!(lane(&lanes, 0).pending, [(flag, vec![Value::Int(1), Value::Int(0)])].into_iter().collect::<VecDeque<_>>());
        assert_eq!(lane(&lanes, 0).sweep_before, Some(100));
        // Led elsewhere: dropped, however many arrive.
        for id in 0..10_000 {
            queue(&c, &mut lanes, ack(1, id), 200);
            follow_leadership(&mut lanes, |p| p == 0, 200);
        }
        assert!(lane(&lanes, 1).pending.is_empty());
        assert_eq!(lane(&lanes, 1).sweep_before, None);
        // Partition 1 comes to this node: what its notes were are found again by a sweep;
        // partition 0, still led, is not swept again.
        follow_leadership(&mut lanes, |_| true, 300);
        assert_eq!(lane(&lanes, 1).sweep_before, Some(300));
        assert_eq!(lane(&lanes, 0).sweep_before, Some(100));
        assert_eq!(lane(&lanes, 0).pending.len(), 1);
    }

    #[test]
    fn a_lane_keeps_at_most_the_cap_and_sweeps_what_it_dropped() {
        let c = catalog(&TABLE_A);
        let mut lanes = Lanes::new();
        queue(&c, &mut lanes, ack(0, 0), 10);
        follow_leadership(&mut lanes, |_| true, 20);
        let l = lanes.entry(("A".to_string(), 0)).or_default();
        (l.pending.len()..MIGRATE_PENDING_MAX).for_each(|i| l.pending.push_back((0, vec![Value::Int(i as i64)])));
        l.sweep_before = None;
        queue(&c, &mut lanes, ack(0, -1), 30);
        assert_eq!(lane(&lanes, 0).pending.len(), MIGRATE_PENDING_MAX);
        assert_eq!(lane(&lanes, 0).sweep_before, Some(30), "the dropped row is migrated again later");
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
        assert!(delete.contains(r#"DELETE FROM "A" WHERE "ID" = ? AND "R" = ?"#), "{delete}");
        assert!(delete.contains("flag:first(k1[i], k2[i])"), "{delete}");
        let again = procedure_source(&c, "a.MIGRATE_AGAIN").unwrap();
        assert!(again.contains(r#"MIGRATE FROM "A" WHERE "ID" = ? AND "R" = ?"#), "{again}");
        assert!(procedure_source(&c, "B.migrate_delete").is_none());
        assert!(procedure_source(&c, "A.insert").is_none());
    }
}
