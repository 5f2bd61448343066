//! TTL (`USING TTL`): a thread that, for each table with a TTL, about `MAX_FREQUENCY` times a
//! second sends each partition one call of the table's `T.ttl_delete` procedure, which
//! deletes at most `BATCH_SIZE` rows older than a cutoff. The cutoff ("now" minus the TTL)
//! is decided here, outside the transaction, and travels as the call's parameter: the call
//! is logged like any other, so a replica or a replay of the command log deletes exactly
//! the same rows, whatever its clock says.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use lockstep_core::{Catalog, DataType, Result, TableDef, TableId, TtlDef, Value};

use crate::engine::{Call, Engine};
use crate::outcome::Outcome;

/// How often the thread looks at the catalog for work: 20 ms allows the largest
/// MAX_FREQUENCY (20 runs a second, `lockstep_sql` checks it).
const TTL_TICK_MS: u64 = 20;
/// Suffix of the per-table procedure that deletes one batch: `TABLE.ttl_delete`.
pub const TTL_PROCEDURE_SUFFIX: &str = "ttl_delete";

/// The name of `table`'s TTL procedure.
pub fn delete_procedure_name(table: &str) -> String {
    format!("{table}.{TTL_PROCEDURE_SUFFIX}")
}

/// The Lua source of procedure `name` when it is a table's TTL procedure. Its one
/// parameter is the cutoff in the column's own terms (µs for a TIMESTAMP, seconds for an
/// integer); it answers the rows it deleted. With a primary key it deletes exactly the
/// first `BATCH_SIZE` expired rows it finds; without one, the oldest expired rows up to the
/// time of the `BATCH_SIZE`-th oldest (rows sharing that time go together).
pub fn delete_procedure_source(catalog: &Catalog, name: &str) -> Option<String> {
    let (table, op) = name.rsplit_once('.')?;
    if !op.eq_ignore_ascii_case(TTL_PROCEDURE_SUFFIX) {
        return None;
    }
    let t = catalog.table(table)?;
    let ttl = catalog.ttl(t.id)?;
    let (table, column, n) = (&t.name, &ttl.column, ttl.batch_size);
    Some(match t.primary_key() {
        Some(pk) => {
            let keys: Vec<&str> = pk.columns.iter().map(|&i| t.columns[i].name.as_str()).collect();
            let key_where: Vec<String> = keys.iter().map(|k| format!("{k} = ?")).collect();
            let key_args: Vec<String> = keys.iter().map(|k| format!("row[{:?}]", k.to_ascii_lowercase())).collect();
            format!(
                "local expired = sql [[SELECT {} FROM {table} WHERE {column} < ? LIMIT {n}]]\n\
                 local delete = sql [[DELETE FROM {table} WHERE {}]]\n\
                 return function(cutoff)\n\
                 \x20 local deleted = 0\n\
                 \x20 for row in expired:query(cutoff):rows() do\n\
                 \x20   deleted = deleted + delete:exec({})\n\
                 \x20 end\n\
                 \x20 return deleted\n\
                 end\n",
                keys.join(", "),
                key_where.join(" AND "),
                key_args.join(", ")
            )
        }
        None => format!(
            "local oldest = sql [[SELECT {column} AS t FROM {table} WHERE {column} < ? ORDER BY {column} LIMIT {n}]]\n\
             local delete = sql [[DELETE FROM {table} WHERE {column} <= ?]]\n\
             return function(cutoff)\n\
             \x20 local rows = oldest:query(cutoff)\n\
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
    waiting: usize,
    deleted: i64,
    failed: i64,
    error: Option<String>,
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
    // When each table last started a run, and whether that run is still out.
    let mut last: BTreeMap<TableId, (Instant, Arc<Mutex<Round>>)> = BTreeMap::new();
    loop {
        std::thread::sleep(Duration::from_millis(TTL_TICK_MS));
        let Some(engine) = engine.upgrade() else { return };
        if engine.shared().is_shutting_down() {
            return;
        }
        let catalog = engine.catalog();
        last.retain(|id, _| catalog.ttl(*id).is_some());
        for (table, ttl) in catalog.ttls() {
            let period = Duration::from_millis(1000 / u64::from(ttl.max_frequency.max(1)));
            if let Some((at, round)) = last.get(&table.id) {
                let busy = round.lock().map(|r| r.waiting > 0).unwrap_or(false);
                if busy || at.elapsed() < period {
                    continue;
                }
            }
            let round = start_round(&engine, table, ttl);
            last.insert(table.id, (Instant::now(), round));
        }
    }
}

/// Sends one run's calls: each partition for a partitioned table, one multi-partition
/// call for a replicated one (in a cluster, only those this node leads or coordinates).
/// The answers are counted into the table's statistics once all are in.
fn start_round(engine: &Arc<Engine>, table: &TableDef, ttl: &TtlDef) -> Arc<Mutex<Round>> {
    let now_micros = crate::sysprocs::now_millis().saturating_mul(1000);
    let param = cutoff(table, ttl, now_micros);
    let destinations = engine.background_destinations(table.partition_column.is_some());
    let round = Arc::new(Mutex::new(Round { waiting: destinations.len(), ..Round::default() }));
    let procedure = delete_procedure_name(&table.name);
    for destination in destinations {
        let call =
            Call { procedure: procedure.clone(), params: vec![param.clone()], partition_destination: destination, ..Call::default() };
        let (round, stats, name) = (round.clone(), engine.clone(), table.name.clone());
        engine.submit(
            call,
            Box::new(move |o: Outcome| {
                let mut r = round.lock().unwrap_or_else(|e| e.into_inner());
                if o.is_success() {
                    r.deleted += o.tables.first().and_then(|t| t.first_value()).and_then(Value::as_i64).unwrap_or(0);
                } else {
                    r.failed += 1;
                    r.error = o.status_string.clone();
                }
                r.waiting -= 1;
                if r.waiting == 0 {
                    if let Some(e) = &r.error {
                        tracing::debug!("TTL of {name}: {e}");
                    }
                    stats.shared().stats.ttl.record(&name, &r);
                }
            }),
        );
    }
    round
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
        assert!(source.contains("SELECT ID FROM A WHERE T < ? LIMIT 7"), "{source}");
        assert!(delete_procedure_source(&c, "B.ttl_delete").is_none());
        assert!(delete_procedure_source(&c, "A.insert").is_none());
    }
}
