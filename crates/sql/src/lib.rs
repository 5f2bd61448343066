//! Lockstep's SQL layer: parse → bind → plan → execute for VoltDB's dialect, and DDL into
//! the catalog.
//!
//! A statement's path: `script` (splitting, `?` numbering) → sqlparser → `bind` (names,
//! types) → `plan` / `plan_dml` (+ `access` paths, `route`) → `exec` / `exec_dml` on one
//! partition, or `mp` across all of them; subqueries, derived tables, views and set
//! operations run through `exec_query`. DDL goes through `ddl`.

mod access;
mod bind;
mod colocated;
mod ddl;
mod ddl_index;
pub mod ddl_migrate;
mod ddl_parse;
mod ddl_proc;
mod ddl_task;
mod ddl_ttl;
mod ddl_view;
mod exec;
mod exec_agg;
mod exec_dml;
mod exec_join;
mod exec_query;
mod explain;
mod expr;
mod fragment;
mod func;
mod func_geo;
mod func_json;
mod join_order;
mod lex;
mod limits;
mod migrate;
mod mp;
mod nesting;
mod plan;
mod plan_dml;
mod plan_recursive;
mod route;
mod script;
pub mod testing;

#[cfg(test)]
mod tests_ddl;
#[cfg(test)]
mod tests_depth;
#[cfg(test)]
mod tests_expr_index;
#[cfg(test)]
mod tests_fragment;
#[cfg(test)]
mod tests_geo;
#[cfg(test)]
mod tests_join;
#[cfg(test)]
mod tests_json;
#[cfg(test)]
mod tests_limits;
#[cfg(test)]
mod tests_mp;
#[cfg(test)]
mod tests_partial_index;
#[cfg(test)]
mod tests_query;
#[cfg(test)]
mod tests_scan;
#[cfg(test)]
mod tests_sql;
#[cfg(test)]
mod tests_views;

use std::borrow::Cow;
use std::sync::Arc;

use lockstep_core::{Catalog, DataType, Error, HashRing, Result, ResultColumn, ResultTable, Value};
use lockstep_storage::Partition;
use serde::{Deserialize, Serialize};
use sqlparser::ast::Statement;

pub use ddl::{apply_ddl, DdlEnv, DdlOutcome};
pub use explain::explain;
pub use fragment::{fragment_fn, Fragment, FragmentSpec, PlanCache, StatementRef, StatementResolver, Step, ADHOC_PLANS_MAX};
pub use limits::{is_query_timeout, Deadline, Limits, DEADLINE_CHECK_ROWS, GATHER_BYTES_MAX, GATHER_ROWS_MAX, RESULT_BYTES_MAX};
pub use mp::execute_mp;
pub use plan_dml::DEFAULT_NOW_SENTINEL;
pub use script::{is_ddl, split_statements};

/// What a statement may read besides its parameters, and what it may spend. It travels
/// inside a fragment's description (`FragmentSpec`), the deadline as time left.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ExecCtx {
    pub txn_id: i64,
    /// NOW / CURRENT_TIMESTAMP: the transaction's timestamp, never the clock.
    pub timestamp_micros: i64,
    /// When the statement must stop (the query timeout), or None for no limit: the replay
    /// of the command log runs without one. Expiry fails the statement with VoltDB's
    /// "A SQL query was terminated after X.XXX seconds because it exceeded the query
    /// timeout period." (`is_query_timeout`), a graceful failure.
    #[serde(with = "limits::deadline_serde")]
    pub deadline: Option<Deadline>,
    /// The memory caps (answer bytes, rows and bytes gathered by a multi-partition read).
    pub limits: Limits,
}

impl ExecCtx {
    /// A context with no deadline and the default caps.
    pub fn new(txn_id: i64, timestamp_micros: i64) -> ExecCtx {
        ExecCtx { txn_id, timestamp_micros, deadline: None, limits: Limits::DEFAULT }
    }
}

/// Where a statement must run.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    /// Single-partition: the partition owning parameter `param`.
    PartitionParam { param: usize, key_type: DataType },
    /// Single-partition: the partition owning this key value.
    PartitionConst(Value),
    /// Reads only replicated tables: any one partition will do.
    AnyPartition,
    /// Multi-partition.
    All,
}

/// The executable plan of a statement.
#[derive(Clone, Debug)]
pub(crate) enum Plan {
    Select(plan::SelectPlan),
    Insert(plan_dml::InsertPlan),
    Update(plan_dml::UpdatePlan),
    Delete(plan_dml::DeletePlan),
}

/// A statement planned once and executed many times.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The statement's text (shared with `statement` when that is `StatementRef::Sql`).
    pub sql: Arc<str>,
    /// How another node finds this same plan: by its text, or as a procedure's statement
    /// (the registry that plans procedures says so). Fragments carry it.
    pub statement: StatementRef,
    /// The catalog it was planned against: another node plans the same statement alike
    /// only against the same catalog version.
    pub catalog_version: u64,
    /// Inferred type of each `?` (None if unknown).
    pub param_types: Vec<Option<DataType>>,
    /// Output schema (DML: modified_tuples BIGINT).
    pub columns: Vec<ResultColumn>,
    pub read_only: bool,
    pub route: Route,
    /// DML on a replicated table (must run multi-partition).
    pub writes_replicated: bool,
    pub(crate) plan: Plan,
    /// The subqueries of a SELECT (in expressions, in FROM, sides of set operations), by
    /// the ids its plan uses; empty for most statements.
    pub(crate) subqueries: Vec<plan::SubqueryPlan>,
}

fn parse_one(sql: &str) -> Result<Statement> {
    let mut stmts = nesting::parse_statements(sql, "")?;
    match stmts.len() {
        1 => Ok(stmts.remove(0)),
        0 => Err(Error::sql("no SQL statement given")),
        n => Err(Error::sql(format!("expected one SQL statement, got {n}"))),
    }
}

impl Prepared {
    /// Whether running it can only free memory (a DELETE): allowed above the memory limit.
    pub fn frees_memory(&self) -> bool {
        matches!(&self.plan, Plan::Delete(d) if d.migrate.is_none())
    }
}

/// Parses, binds, types, plans and routes one DML or SELECT statement.
/// `name` as a quoted SQL identifier, for SQL generated from the catalog (default
/// procedures, TTL and migration deletes): a name may need quotes (a space, a reserved
/// word).
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub fn prepare(catalog: &Catalog, sql: &str) -> Result<Prepared> {
    prepare_joining(catalog, sql, false)
}

/// As `prepare`; `written_join_order` keeps FROM's order and nested loops (the reference
/// plan tests compare the chosen joins with).
pub(crate) fn prepare_joining(catalog: &Catalog, sql: &str, written_join_order: bool) -> Result<Prepared> {
    if is_ddl(sql) {
        return Err(Error::sql("DDL cannot be prepared as a query; apply it as DDL"));
    }
    let migrate_as_delete = migrate::as_delete(sql);
    let rw = script::rewrite_for_parser(migrate_as_delete.as_deref().unwrap_or(sql))?;
    let stmt = parse_one(&rw.sql)?;
    let mut b = bind::Binder::new(rw.param_count, Some(catalog));
    b.written_join_order = written_join_order;
    let plan = match &stmt {
        Statement::Query(q) => Plan::Select(plan::plan_query(catalog, &mut b, q)?),
        Statement::Insert(i) => Plan::Insert(plan_dml::plan_insert(catalog, &mut b, i, rw.upsert)?),
        Statement::Update(u) => Plan::Update(plan_dml::plan_update(catalog, &mut b, u)?),
        Statement::Delete(d) => {
            let mut plan = plan_dml::plan_delete(catalog, &mut b, d)?;
            if migrate_as_delete.is_some() {
                migrate::plan(catalog, &mut plan)?;
            }
            Plan::Delete(plan)
        }
        other => {
            let text = other.to_string();
            let word = text.split_whitespace().next().unwrap_or("this").to_ascii_uppercase();
            return Err(Error::sql(format!("{word} statements are not supported")));
        }
    };
    let columns = match &plan {
        Plan::Select(s) => s.columns.to_vec(),
        _ => vec![ResultColumn { name: "modified_tuples".into(), ty: DataType::BigInt }],
    };
    let subqueries = std::mem::take(&mut b.subqueries);
    let (route, writes_replicated) = match &plan {
        _ if subqueries.is_empty() => route::route(catalog, &plan),
        Plan::Select(s) => (route::query_route(s, &subqueries), false),
        // INSERT … SELECT runs across partitions whatever its SELECT reads.
        Plan::Insert(plan_dml::InsertPlan { source: plan_dml::InsertSource::Select(_), .. }) => route::route(catalog, &plan),
        Plan::Update(_) | Plan::Delete(_) => route::dml_with_subqueries_route(catalog, &plan, &subqueries)?,
        Plan::Insert(_) => return Err(Error::sql("subqueries are not supported in INSERT … VALUES: use INSERT … SELECT")),
    };
    let sql: Arc<str> = Arc::from(sql);
    Ok(Prepared {
        statement: StatementRef::Sql(sql.clone()),
        sql,
        catalog_version: catalog.version,
        param_types: b.param_types,
        columns,
        read_only: matches!(plan, Plan::Select(_)),
        route,
        writes_replicated,
        plan,
        subqueries,
    })
}

/// Whether `coerce_to(ty)` would return `v` unchanged (an untyped parameter always does).
fn coerces_to_itself(v: &Value, ty: Option<DataType>) -> bool {
    ty.is_none_or(|t| v.coerces_to_itself(t))
}

/// The parameters converted to the statement's types; borrowed when none needs converting.
pub(crate) fn coerce_params<'a>(p: &Prepared, params: &'a [Value]) -> Result<Cow<'a, [Value]>> {
    if params.len() != p.param_types.len() {
        return Err(Error::sql(format!("statement expects {} parameters but {} were given", p.param_types.len(), params.len())));
    }
    if params.iter().zip(&p.param_types).all(|(v, t)| coerces_to_itself(v, *t)) {
        return Ok(Cow::Borrowed(params));
    }
    let mut out = Vec::with_capacity(params.len());
    for (i, (v, t)) in params.iter().zip(&p.param_types).enumerate() {
        let c = match (v, t) {
            (Value::Array(items), Some(t)) => {
                let mut conv = Vec::with_capacity(items.len());
                for x in items {
                    conv.push(x.coerce_to(*t).map_err(|e| e.context(format!("parameter {}", i + 1)))?);
                }
                Value::Array(conv.into())
            }
            (v, Some(t)) => v.coerce_to(*t).map_err(|e| e.context(format!("parameter {}", i + 1)))?,
            (v, None) => v.clone(),
        };
        out.push(c);
    }
    Ok(Cow::Owned(out))
}

/// Runs on one partition's data (a single-partition transaction, or a fragment).
pub fn execute(p: &Prepared, params: &[Value], ctx: &ExecCtx, part: &mut Partition) -> Result<ResultTable> {
    let params = coerce_params(p, params)?;
    execute_coerced(p, &params, ctx, part)
}

pub(crate) fn execute_coerced(p: &Prepared, params: &[Value], ctx: &ExecCtx, part: &mut Partition) -> Result<ResultTable> {
    if let Plan::Select(s) = &p.plan {
        if !p.subqueries.is_empty() {
            return exec_query::run_statement(s, &p.subqueries, &exec_query::PartitionTables(part), params, ctx);
        }
        let env = expr::Env::new(params, ctx);
        let counted = join_order::for_partition(s, part);
        let s = counted.as_deref().unwrap_or(s);
        let src = exec::PartitionSource::new(part, &s.levels)?;
        return exec::run_select(s, &src, &env, false);
    }
    let env = expr::Env::new(params, ctx);
    run_dml(p, &env, part).map(ResultTable::modified)
}

/// Runs on one partition's data as `execute` does, but hands the result's rows to `row`
/// one at a time (it returns false to stop) instead of collecting a table: a SELECT's
/// output rows, or the one `modified_tuples` row of a DML statement. Returns the rows a
/// SELECT handed over, or the rows a DML statement changed. A procedure's point reads and
/// writes take this path: it allocates no result table, no row vector for rows of up to 8
/// columns, and no column list.
pub fn execute_each(
    p: &Prepared,
    params: &[Value],
    ctx: &ExecCtx,
    part: &mut Partition,
    row: &mut dyn FnMut(&[Value]) -> Result<bool>,
) -> Result<u64> {
    let params = coerce_params(p, params)?;
    if matches!(p.plan, Plan::Select(_)) && !p.subqueries.is_empty() {
        let t = execute_coerced(p, &params, ctx, part)?;
        let mut sent = 0;
        for r in &t.rows {
            sent += 1;
            if !row(r)? {
                break;
            }
        }
        return Ok(sent);
    }
    let env = expr::Env::new(&params, ctx);
    if let Plan::Select(s) = &p.plan {
        let counted = join_order::for_partition(s, part);
        let s = counted.as_deref().unwrap_or(s);
        let src = exec::PartitionSource::new(part, &s.levels)?;
        return exec::each_select_row(s, &src, &env, row);
    }
    let n = run_dml(p, &env, part)?;
    row(&[Value::Int(n as i64)])?;
    Ok(n)
}

/// Runs an INSERT, UPDATE or DELETE: the rows it changed. A failed statement leaves no
/// partial effect.
fn run_dml(p: &Prepared, env: &expr::Env, part: &mut Partition) -> Result<u64> {
    let sp = part.savepoint();
    let r = match &p.plan {
        Plan::Insert(i @ plan_dml::InsertPlan { source: plan_dml::InsertSource::Select(s), .. }) if !p.subqueries.is_empty() => {
            let rows = exec_query::run_statement_in(s, &p.subqueries, &exec_query::PartitionTables(part), env).map(|t| t.rows);
            rows.and_then(|rows| exec_dml::insert_rows(i, rows, part, env))
        }
        Plan::Insert(i) => exec_dml::run_insert(i, part, env),
        // With subqueries: what the statement reads (through them too) is read first, with
        // the partition lent to them, and written after.
        Plan::Update(u) if !p.subqueries.is_empty() => {
            let changes =
                exec_query::with_runner(&p.subqueries, &exec_query::PartitionTables(part), env, |e| exec_dml::update_changes(u, part, e));
            changes.and_then(|c| exec_dml::apply_update(u, c, part, env))
        }
        Plan::Delete(d) if !p.subqueries.is_empty() => {
            let rows =
                exec_query::with_runner(&p.subqueries, &exec_query::PartitionTables(part), env, |e| exec_dml::delete_rows(d, part, e));
            rows.and_then(|r| exec_dml::apply_delete(d, r, part, env))
        }
        Plan::Update(u) => exec_dml::run_update(u, part, env),
        Plan::Delete(d) => exec_dml::run_delete(d, part, env),
        Plan::Select(_) => Ok(0),
    };
    if r.is_err() {
        part.rollback_to(sp);
    }
    r
}

/// Which partitions a multi-partition step runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    All,
    One(u32),
}

/// Work run on a partition during a multi-partition transaction. On its own it is
/// local-only: nothing describes it, so no other node could run it (a snapshot restore,
/// which reads this node's files). A statement's work travels as a `Fragment`, which pairs
/// the closure with its description.
pub type SiteFn = Arc<dyn Fn(&mut Partition) -> Result<ResultTable> + Send + Sync>;

/// The coordinator's view of the sites parked in the current multi-partition transaction.
pub trait SiteAccess {
    fn partition_count(&self) -> u32;
    fn ring(&self) -> &HashRing;
    /// Runs local-only work `f` on the targeted partitions; one result per partition, in
    /// partition order. An access that reaches partitions on other nodes must refuse it for
    /// them: `f` has no description to send.
    fn run(&mut self, target: Target, f: SiteFn) -> Result<Vec<ResultTable>>;
    /// Runs a statement's fragment on the targeted partitions, as `run` does. A partition
    /// here runs `fragment.local`; a partition on another node is to be sent
    /// `fragment.spec`, from which that node builds the same closure (`fragment_fn`). The
    /// default runs every partition here.
    fn run_fragment(&mut self, target: Target, fragment: Fragment) -> Result<Vec<ResultTable>> {
        self.run(target, fragment.local)
    }
    /// A read has everything it needs from the partitions; what is left (a join, a sort,
    /// a merge) runs on what was gathered. The caller may let the partitions go on.
    fn reads_done(&mut self) {}
}

#[cfg(test)]
mod coerce_tests {
    use super::*;

    /// The borrowing fast path must agree with `coerce_to` wherever it claims a value is
    /// already of its type, and leave to `coerce_to` everything it is unsure of.
    #[test]
    fn values_kept_as_they_are_equal_their_coercion() {
        use DataType::*;
        let types = [TinyInt, SmallInt, Integer, BigInt, Float, Decimal, Varchar, Varbinary, Timestamp, Boolean];
        let values = [
            Value::Null,
            Value::Int(5),
            Value::Int(300),
            Value::Int(i64::MIN),
            Value::Int(-128),
            Value::Float(1.5),
            Value::Decimal(lockstep_core::Dec::new(7)),
            Value::from("abc"),
            Value::from("\\N"),
            Value::Bytes(vec![1, 2].into()),
            Value::Timestamp(9),
            Value::Bool(true),
        ];
        let mut kept = 0;
        for v in &values {
            for t in types {
                if coerces_to_itself(v, Some(t)) {
                    kept += 1;
                    assert_eq!(v.coerce_to(t).ok().as_ref(), Some(v), "{v:?} as {t:?}");
                }
            }
        }
        // Null ×10, Int(5) ×4, Int(300) ×3, Int(MIN) ×0 (VoltDB's NULL, out of every
        // range), Int(-128) ×3 (not TINYINT), one each for Float, Decimal, "abc", Bytes,
        // Timestamp, Bool.
        assert_eq!(kept, 10 + 4 + 3 + 3 + 6);
        assert!(!coerces_to_itself(&Value::from("\\N"), Some(Varchar)));
        assert!(coerces_to_itself(&Value::from("x"), None));
    }
}
