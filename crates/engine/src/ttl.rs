//! TTL (`USING TTL`): a thread that, for each table with a TTL, about `MAX_FREQUENCY` times a
//! second runs a round: on each partition it deletes up to `BATCH_SIZE` rows older than a
//! cutoff, through calls of the table's `T.ttl_delete` procedure of at most
//! `TTL_ROWS_PER_CALL_MAX` rows each, sent one after the other (the next when the last has
//! answered, so other transactions run between them and none waits long behind a
//! deletion). The cutoff ("now" minus the TTL) and each call's row limit are decided here,
//! outside the transaction, and travel as the call's parameters: the call is logged like
//! any other, so a replica or a replay of the command log deletes exactly the same rows,
//! whatever its clock says. A table declared `MIGRATE TO TARGET` migrates its expired rows
//! instead (`migrate.rs` deletes them once the target has them).

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use lockstep_core::{Catalog, DataType, Result, TableDef, TableId, TtlDef, Value};
use lockstep_sql::quote_ident;

use crate::engine::{Call, Engine};
use crate::outcome::Outcome;

/// How often the thread looks at the catalog for work: 20 ms allows the largest
/// MAX_FREQUENCY (20 runs a second, `lockstep_sql` checks it).
const TTL_TICK_MS: u64 = 20;
/// Suffix of the per-table procedure that deletes one batch: `TABLE.ttl_delete`.
pub const TTL_PROCEDURE_SUFFIX: &str = "ttl_delete";
/// Rows one call deletes at most. A deleted row costs its partition about 1.7 µs (release
/// build, a table of two million rows with an index on the TTL column; calls of 200 rows
/// took 0.35 ms on average and up to 2.3 ms, `@Statistics PROCEDURE` during
/// `scripts/measure/ttl-p99.sh`), so a call holds its partition for some 40 µs. Beside
/// open-loop Voter at 20,000 calls/s, calls of 100 rows still raised its p99 by 0.4–0.65
/// ms; calls of 25 by 0.03–0.19 ms (the same script, three runs against two). A BATCH_SIZE
/// of 1,000 (the default) took up to 11–64 ms as one call.
pub const TTL_ROWS_PER_CALL_MAX: u32 = 25;

/// The name of `table`'s TTL procedure.
pub fn delete_procedure_name(table: &str) -> String {
    format!("{table}.{TTL_PROCEDURE_SUFFIX}")
}

/// The Lua source of procedure `name` when it is a table's TTL procedure. Its parameters
/// are the cutoff in the column's own terms (µs for a TIMESTAMP, seconds for an integer)
/// and how many rows it may delete (`BATCH_SIZE` when absent, as in calls logged before
/// the limit was a parameter); it answers the rows it deleted. With a primary key it
/// deletes exactly the first `limit` expired rows it finds; without one, the oldest expired
/// rows up to the time of the `limit`-th oldest (rows sharing that time go together).
pub fn delete_procedure_source(catalog: &Catalog, name: &str) -> Option<String> {
    let (table, op) = name.rsplit_once('.')?;
    if !op.eq_ignore_ascii_case(TTL_PROCEDURE_SUFFIX) {
        return None;
    }
    let t = catalog.table(table)?;
    let ttl = catalog.ttl(t.id)?;
    let (table, column, n) = (quote_ident(&t.name), quote_ident(&ttl.column), ttl.batch_size);
    if let Some(m) = lockstep_sql::ddl_migrate::migration(catalog, t).filter(|m| m.table.partition_column.is_some()) {
        // MIGRATE TO TARGET: expired rows are migrated (exported, deleted once the target
        // has them), the oldest first by key; rows migrating already are passed over.
        let keys: Vec<String> = m.key.iter().map(|&i| quote_ident(&t.columns[i].name)).collect();
        return Some(format!(
            "local migrate = sql [[MIGRATE FROM {table} WHERE {column} < ? ORDER BY {} LIMIT ?]]\n\
             return function(cutoff, limit)\n\
             \x20 return migrate:exec(cutoff, limit or {n})\n\
             end\n",
            keys.join(", ")
        ));
    }
    Some(match t.primary_key() {
        Some(pk) => {
            let keys: Vec<&str> = pk.columns.iter().map(|&i| t.columns[i].name.as_str()).collect();
            let key_where: Vec<String> = keys.iter().map(|k| format!("{} = ?", quote_ident(k))).collect();
            let key_list: Vec<String> = keys.iter().map(|k| quote_ident(k)).collect();
            let key_args: Vec<String> = keys.iter().map(|k| format!("row[{:?}]", k.to_ascii_lowercase())).collect();
            format!(
                "local expired = sql [[SELECT {} FROM {table} WHERE {column} < ? LIMIT ?]]\n\
                 local delete = sql [[DELETE FROM {table} WHERE {}]]\n\
                 return function(cutoff, limit)\n\
                 \x20 local deleted = 0\n\
                 \x20 for row in expired:query(cutoff, limit or {n}):rows() do\n\
                 \x20   deleted = deleted + delete:exec({})\n\
                 \x20 end\n\
                 \x20 return deleted\n\
                 end\n",
                key_list.join(", "),
                key_where.join(" AND "),
                key_args.join(", ")
            )
        }
        None => format!(
            "local oldest = sql [[SELECT {column} AS t FROM {table} WHERE {column} < ? ORDER BY {column} LIMIT ?]]\n\
             local delete = sql [[DELETE FROM {table} WHERE {column} <= ?]]\n\
             return function(cutoff, limit)\n\
             \x20 local rows = oldest:query(cutoff, limit or {n})\n\
             \x20 if #rows == 0 then return 0 end\n\
             \x20 return delete:exec(rows[#rows].t)\n\
             end\n"
        ),
    })
}

/// The cutoff for `ttl` at `now_micros`, in the terms of the column (see
/// `delete_procedure_source`).
fn cutoff(table: &TableDef, ttl: &TtlDef, now_micros: i64) -> Value {
    let micros = now_micros.saturating_sub(ttl.max_age_micros());
    match table.column_index(&ttl.column).map(|i| table.columns[i].ty) {
        Some(DataType::Timestamp) | None => Value::Timestamp(micros),
        Some(_) => Value::Int(micros.div_euclid(1_000_000)),
    }
}

/// What TTL did to one table (`@Statistics TTL`).
#[derive(Clone, Debug, Default)]
pub struct TtlCounters {
    pub rows_deleted: i64,
    /// Rows deleted by the last run (all partitions).
    pub rows_deleted_last_round: i64,
    pub runs: i64,
    pub failed_calls: i64,
    /// When the last run's answers were all in, ms since the Unix epoch (0: never).
    pub last_run_ms: i64,
    pub last_error: Option<String>,
}

/// TTL counters by table name, shared with `@Statistics`.
#[derive(Default)]
pub struct TtlStats {
    tables: Mutex<BTreeMap<String, TtlCounters>>,
}

impl TtlStats {
    /// The counters of every table with a TTL now (others are dropped: their TTL is gone).
    pub fn snapshot(&self, catalog: &Catalog) -> Vec<(String, TtlCounters)> {
        let map = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        catalog.ttls().map(|(t, _)| (t.name.clone(), map.get(&t.name).cloned().unwrap_or_default())).collect()
    }

    fn record(&self, table: &str, round: &Round) {
        let mut map = self.tables.lock().unwrap_or_else(|e| e.into_inner());
        let c = map.entry(table.to_string()).or_default();
        c.rows_deleted += round.deleted;
        c.rows_deleted_last_round = round.deleted;
        c.runs += 1;
        c.failed_calls += round.failed;
        c.last_run_ms = crate::sysprocs::now_millis();
        if round.error.is_some() {
            c.last_error = round.error.clone();
        }
    }
}

/// One run over a table's partitions, filled in as the answers arrive.
#[derive(Default)]
struct Round {
    /// Partitions whose deletion is still going on.
    waiting: usize,
    deleted: i64,
    failed: i64,
    error: Option<String>,
}

/// A round in progress: what its calls send, and how far each partition has got.
struct Running {
    table: String,
    procedure: String,
    cutoff: Value,
    batch_size: u32,
    /// Per destination: where its calls go, and the rows deleted there so far.
    parts: Vec<(Option<i32>, u32)>,
    round: Round,
}

/// A call's answer, sent back to the TTL thread (which sends the next call, if any: never a
/// site's thread, which must not wait on its own queue).
struct Answer {
    table: TableId,
    part: usize,
    /// The rows the call was allowed to delete.
    limit: u32,
    outcome: Outcome,
}

/// Starts the TTL thread; it stops when the engine shuts down.
pub fn start(engine: &Arc<Engine>) -> Result<std::thread::JoinHandle<()>> {
    let weak = Arc::downgrade(engine);
    std::thread::Builder::new()
        .name("ttl".into())
        .spawn(move || run(weak))
        .map_err(|e| lockstep_core::Error::unexpected(format!("cannot start the TTL thread: {e}")))
}

fn run(engine: Weak<Engine>) {
    let (tx, answers): (Sender<Answer>, Receiver<Answer>) = channel();
    // When each table last started a round, and the round if it is still going on.
    let mut last: BTreeMap<TableId, (Instant, Option<Running>)> = BTreeMap::new();
    let mut next_tick = Instant::now() + Duration::from_millis(TTL_TICK_MS);
    loop {
        let answer = match answers.recv_timeout(next_tick.saturating_duration_since(Instant::now())) {
            Ok(a) => Some(a),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let Some(engine) = engine.upgrade() else { return };
        if engine.shared().is_shutting_down() {
            return;
        }
        if let Some(a) = answer {
            if let Some((_, running)) = last.get_mut(&a.table) {
                let finished = running.as_mut().is_some_and(|r| answered(&engine, &tx, a, r));
                if finished {
                    if let Some(r) = running.take() {
                        engine.shared().stats.ttl.record(&r.table, &r.round);
                    }
                }
            }
        }
        if Instant::now() < next_tick {
            continue;
        }
        next_tick = Instant::now() + Duration::from_millis(TTL_TICK_MS);
        let catalog = engine.catalog();
        last.retain(|id, _| catalog.ttls().any(|(t, _)| t.id == *id));
        for (table, ttl) in catalog.ttls() {
            let period = Duration::from_millis(1000 / u64::from(ttl.max_frequency.max(1)));
            if let Some((at, running)) = last.get(&table.id) {
                if running.is_some() || at.elapsed() < period {
                    continue;
                }
            }
            let running = start_round(&engine, &tx, table, ttl);
            last.insert(table.id, (Instant::now(), running));
        }
    }
}

/// Starts a round: the first call on each partition for a partitioned table, one
/// multi-partition call for a replicated one (in a cluster, only those this node leads or
/// coordinates). None when there is nowhere to send it.
fn start_round(engine: &Arc<Engine>, tx: &Sender<Answer>, table: &TableDef, ttl: &TtlDef) -> Option<Running> {
    let now_micros = crate::sysprocs::now_millis().saturating_mul(1000);
    let parts: Vec<(Option<i32>, u32)> =
        engine.background_destinations(table.partition_column.is_some()).into_iter().map(|d| (d, 0)).collect();
    if parts.is_empty() {
        return None;
    }
    let running = Running {
        table: table.name.clone(),
        procedure: delete_procedure_name(&table.name),
        cutoff: cutoff(table, ttl, now_micros),
        batch_size: ttl.batch_size,
        round: Round { waiting: parts.len(), ..Round::default() },
        parts,
    };
    for part in 0..running.parts.len() {
        send_next(engine, tx, table.id, &running, part);
    }
    Some(running)
}

/// Sends partition `part` of a round its next call: as many rows as are left of the batch,
/// at most `TTL_ROWS_PER_CALL_MAX`.
fn send_next(engine: &Engine, tx: &Sender<Answer>, table: TableId, r: &Running, part: usize) {
    let (destination, done) = r.parts[part];
    let limit = r.batch_size.saturating_sub(done).min(TTL_ROWS_PER_CALL_MAX);
    let call = Call {
        procedure: r.procedure.clone(),
        params: vec![r.cutoff.clone(), Value::Int(i64::from(limit))],
        partition_destination: destination,
        ..Call::default()
    };
    let tx = tx.clone();
    engine.submit(call, Box::new(move |outcome: Outcome| drop(tx.send(Answer { table, part, limit, outcome }))));
}

/// Counts a call's answer into its round and sends the partition's next call while its
/// batch is not done and the last call found as many rows as it was allowed. True when
/// the whole round is over.
fn answered(engine: &Engine, tx: &Sender<Answer>, a: Answer, r: &mut Running) -> bool {
    let Some(slot) = r.parts.get(a.part).map(|p| p.1) else { return false };
    let mut more = false;
    if a.outcome.is_success() {
        let deleted = a.outcome.tables.first().and_then(|t| t.first_value()).and_then(Value::as_i64).unwrap_or(0);
        r.round.deleted += deleted;
        let done = slot.saturating_add(u32::try_from(deleted).unwrap_or(u32::MAX));
        r.parts[a.part].1 = done;
        more = deleted >= i64::from(a.limit) && done < r.batch_size;
    } else {
        r.round.failed += 1;
        r.round.error = a.outcome.status_string.clone();
        tracing::debug!("TTL of {}: {}", r.table, r.round.error.as_deref().unwrap_or("failed"));
    }
    if more {
        send_next(engine, tx, a.table, r, a.part);
        return false;
    }
    r.round.waiting -= 1;
    r.round.waiting == 0
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
    fn the_cutoff_is_in_the_columns_terms() {
        let c = catalog(&[
            "CREATE TABLE a (id INTEGER NOT NULL, t TIMESTAMP NOT NULL, PRIMARY KEY (id)) USING TTL 2 MINUTES ON COLUMN t",
            "CREATE TABLE b (s BIGINT NOT NULL) USING TTL 30 ON COLUMN s",
        ]);
        let now = 1_000_000_000_000_000;
        let (a, ta) = c.ttls().find(|(t, _)| t.name == "A").unwrap();
        assert_eq!(cutoff(a, ta, now), Value::Timestamp(now - 120_000_000));
        let (b, tb) = c.ttls().find(|(t, _)| t.name == "B").unwrap();
        assert_eq!(cutoff(b, tb, now), Value::Int(now / 1_000_000 - 30));
    }

    #[test]
    fn only_tables_with_a_ttl_have_the_procedure() {
        let c = catalog(&[
            "CREATE TABLE a (id INTEGER NOT NULL, t TIMESTAMP NOT NULL, PRIMARY KEY (id)) USING TTL 2 ON COLUMN t BATCH_SIZE 7",
            "CREATE TABLE b (s BIGINT NOT NULL)",
        ]);
        let source = delete_procedure_source(&c, "A.ttl_delete").unwrap();
        assert!(source.contains(r#"SELECT "ID" FROM "A" WHERE "T" < ? LIMIT ?"#), "{source}");
        assert!(source.contains("limit or 7"), "{source}");
        assert!(delete_procedure_source(&c, "B.ttl_delete").is_none());
        assert!(delete_procedure_source(&c, "A.insert").is_none());
    }

    #[test]
    fn a_migrating_table_migrates_expired_rows() {
        let c = catalog(&[
            "CREATE TABLE m MIGRATE TO TARGET t (id INTEGER NOT NULL, t TIMESTAMP NOT NULL, PRIMARY KEY (id)) USING TTL 2 ON COLUMN t",
            "PARTITION TABLE m ON COLUMN id",
        ]);
        let source = delete_procedure_source(&c, "M.ttl_delete").unwrap();
        assert!(source.contains(r#"MIGRATE FROM "M" WHERE "T" < ? ORDER BY "ID" LIMIT ?"#), "{source}");
    }
}
