//! Multi-partition execution. A SELECT gathers each source's rows (filtered where that is
//! safe) from the partitions that hold them and runs the rest of the plan at the
//! coordinator, unless the partitions can do more of it on their own rows: an aggregate
//! over one table, or a join on partition columns (`colocated.rs`), runs on each partition
//! and the coordinator merges what they answer. DML is routed row by row (INSERT) or run
//! everywhere (UPDATE/DELETE).
//! What each partition runs is a `Fragment` (`fragment.rs`): a step described as data,
//! with the closure `site_fn` builds from it, the same here and on any other node.

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use lockstep_core::{Error, Result, ResultColumn, ResultTable, TableDef, Value, ViewAggregate};
use lockstep_storage::Partition;

use crate::colocated;
use crate::exec::{each_in_table, probe, run_select, run_select_merged, GatheredSource, PartitionSource};
use crate::exec_agg::{partial_rows, pushes_down};
use crate::exec_dml::{insert_rows, source_rows};
use crate::exec_query::{run_statement, GatheredTables};
use crate::expr::{arith, sort_cmp, ArithOp, Env};
use crate::limits::{row_bytes, Limits};
use crate::plan::{SelectPlan, SubBody};
use crate::plan_dml::{InsertPlan, InsertSource};
use crate::{coerce_params, execute_coerced, ExecCtx, Fragment, FragmentSpec, Plan, Prepared, Route, SiteAccess, SiteFn, Step, Target};

/// Rows, or bytes, a partition gathers between two reports to the statement's shared
/// tally, where every partition's share is held against the gather caps as it grows.
const TALLY_EVERY_ROWS: usize = 1024;
const TALLY_EVERY_BYTES: usize = 1024 * 1024;

/// Rows and bytes gathered so far by every partition of one multi-partition read.
#[derive(Default)]
struct Tally {
    rows: AtomicUsize,
    bytes: AtomicUsize,
}

impl Tally {
    /// A tally that counts on from what earlier steps gathered (see `Step::GatherLevel`).
    fn starting_at(rows: u64, bytes: u64) -> Tally {
        let n = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        Tally { rows: AtomicUsize::new(n(rows)), bytes: AtomicUsize::new(n(bytes)) }
    }

    /// Adds a partition's share; fails once the total passes a cap.
    fn add(&self, rows: usize, bytes: usize, limits: &Limits) -> Result<()> {
        let rows = self.rows.fetch_add(rows, AtomicOrdering::Relaxed).saturating_add(rows);
        let bytes = self.bytes.fetch_add(bytes, AtomicOrdering::Relaxed).saturating_add(bytes);
        match limits.gather_too_big(rows, bytes) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// One partition's running count of what it gathered, reported to the tally in steps.
struct Share<'a> {
    tally: &'a Tally,
    rows: usize,
    bytes: usize,
}

impl Share<'_> {
    fn add(&mut self, row: &[Value], limits: &Limits) -> Result<()> {
        self.rows += 1;
        self.bytes = self.bytes.saturating_add(row_bytes(row));
        if self.rows >= TALLY_EVERY_ROWS || self.bytes >= TALLY_EVERY_BYTES {
            self.report(limits)?;
        }
        Ok(())
    }

    fn report(&mut self, limits: &Limits) -> Result<()> {
        let (rows, bytes) = (std::mem::take(&mut self.rows), std::mem::take(&mut self.bytes));
        self.tally.add(rows, bytes, limits)
    }
}

pub(crate) fn select_of(p: &Prepared) -> Option<&SelectPlan> {
    match &p.plan {
        Plan::Select(s) => Some(s),
        Plan::Insert(InsertPlan { source: InsertSource::Select(s), .. }) => Some(s),
        _ => None,
    }
}

fn insert_of(p: &Prepared) -> Option<&InsertPlan> {
    match &p.plan {
        Plan::Insert(i) => Some(i),
        _ => None,
    }
}

/// A fragment of `p` doing `step` with (converted) `params`: one allocation for the spec
/// besides the closure's (the parameters move into the spec, and the closure shares it).
fn fragment(p: &Arc<Prepared>, params: Vec<Value>, ctx: &ExecCtx, step: Step) -> Fragment {
    let spec = Arc::new(FragmentSpec { catalog_version: p.catalog_version, statement: p.statement.clone(), params, ctx: *ctx, step });
    Fragment { local: site_fn(p.clone(), spec.clone()), spec }
}

/// The closure that runs `spec` (a step of `p`) on a partition: what the coordinator sends
/// its own partitions, and what `fragment_fn` rebuilds on another node. Everything it needs
/// is in `p` and `spec`, so both are the same code over the same data. The partitions one
/// closure runs on share its tally (held in the closure, no allocation of its own).
pub(crate) fn site_fn(p: Arc<Prepared>, spec: Arc<FragmentSpec>) -> SiteFn {
    let tally = match &spec.step {
        Step::Partials | Step::JoinedRows => Some(Tally::default()),
        Step::GatherLevel { rows_before, bytes_before, .. } | Step::GatherQueryLevel { rows_before, bytes_before, .. } => {
            Some(Tally::starting_at(*rows_before, *bytes_before))
        }
        Step::Execute | Step::InsertRows(_) => None,
    };
    Arc::new(move |part: &mut Partition| run_step(&p, &spec, tally.as_ref(), part))
}

fn run_step(p: &Prepared, spec: &FragmentSpec, tally: Option<&Tally>, part: &mut Partition) -> Result<ResultTable> {
    let (params, ctx) = (&spec.params[..], &spec.ctx);
    let tally = || tally.ok_or_else(|| Error::unexpected("a gathering fragment has no tally"));
    match &spec.step {
        Step::Execute => execute_coerced(p, params, ctx, part),
        Step::Partials | Step::JoinedRows => {
            let s = select_of(p).ok_or_else(|| Error::unexpected("not a SELECT"))?;
            let env = Env::new(params, ctx);
            // A join runs in the order this partition's row counts choose, as a
            // single-partition statement does.
            let counted = crate::join_order::for_partition(s, part);
            let s = counted.as_deref().unwrap_or(s);
            let src = PartitionSource::new(part, &s.levels)?;
            let t = match spec.step {
                Step::JoinedRows => colocated::partition_rows(s, &src, &env)?,
                _ => partial_rows(s, &src, &env)?,
            };
            let bytes = t.rows.iter().map(|r| row_bytes(r)).sum();
            tally()?.add(t.rows.len(), bytes, &ctx.limits)?;
            Ok(t)
        }
        Step::GatherLevel { level, .. } => {
            let s = select_of(p).ok_or_else(|| Error::unexpected("not a SELECT"))?;
            gather_level(s, *level as usize, params, ctx, part, tally()?)
        }
        Step::GatherQueryLevel { query, level, .. } => {
            let s = query_plans(p).get(*query as usize).copied().flatten().ok_or_else(|| Error::unexpected("no such SELECT"))?;
            gather_level(s, *level as usize, params, ctx, part, tally()?)
        }
        Step::InsertRows(rows) => {
            let ins = insert_of(p).ok_or_else(|| Error::unexpected("not an INSERT"))?;
            let env = Env::new(params, ctx);
            let sp = part.savepoint();
            match insert_rows(ins, rows.clone(), part, &env) {
                Ok(n) => Ok(ResultTable::modified(n)),
                Err(e) => {
                    part.rollback_to(sp);
                    Err(e)
                }
            }
        }
    }
}

/// Whether `step` is one `p` can do: a spec from another node is checked before its
/// closure is built, so the closure never reaches past what the plan has.
pub(crate) fn check_step(p: &Prepared, step: &Step) -> Result<()> {
    let bad = |what: &str| Err(Error::unexpected(format!("a fragment asks for {what}, which statement \"{}\" cannot do", p.sql)));
    match step {
        Step::Execute => Ok(()),
        Step::Partials => match select_of(p) {
            Some(s) if pushes_down(s) => Ok(()),
            _ => bad("partial aggregates"),
        },
        Step::GatherLevel { level, .. } => match select_of(p) {
            Some(s) if (*level as usize) < s.levels.len() => Ok(()),
            _ => bad(&format!("the rows of source {level}")),
        },
        Step::GatherQueryLevel { query, level, .. } => match query_plans(p).get(*query as usize).copied().flatten() {
            Some(s) if s.levels.get(*level as usize).is_some_and(|l| l.derived.is_none()) => Ok(()),
            _ => bad(&format!("the rows of source {level} of SELECT {query}")),
        },
        Step::InsertRows(rows) => match insert_of(p) {
            Some(ins) if rows.iter().all(|r| r.len() == ins.columns.len()) => Ok(()),
            Some(ins) => bad(&format!("rows of other than {} values", ins.columns.len())),
            None => bad("an insert"),
        },
        Step::JoinedRows => match select_of(p) {
            Some(s) if p.subqueries.is_empty() && colocated::rows_run_on_each_partition(s) => Ok(()),
            _ => bad("the rows of a join on partition columns"),
        },
    }
}

/// Runs a statement across all partitions, read-consistently (every site is parked in the
/// same multi-partition transaction).
pub fn execute_mp(p: &Arc<Prepared>, params: &[Value], ctx: &ExecCtx, sites: &mut dyn SiteAccess) -> Result<ResultTable> {
    let params = coerce_params(p, params)?.into_owned();
    let routed = match &p.route {
        Route::PartitionParam { param, key_type } => {
            let v = params.get(*param).cloned().unwrap_or(Value::Null).coerce_to(*key_type)?;
            Some(sites.ring().partition_for(&v))
        }
        Route::PartitionConst(v) => Some(sites.ring().partition_for(v)),
        Route::AnyPartition => Some(0),
        Route::All => None,
    };
    if let Some(pid) = routed {
        // The parameters move into the spec: nothing else here needs them.
        let f = fragment(p, params, ctx, Step::Execute);
        return first(sites.run_fragment(Target::One(pid), f)?);
    }
    let env = Env::new(&params, ctx);
    match &p.plan {
        Plan::Select(s) if !p.subqueries.is_empty() => select_gathering_tables(p, s, &params, ctx, sites),
        Plan::Select(s) => select_everywhere(p, s, &params, ctx, sites, &env),
        Plan::Insert(i) => {
            let rows = match &i.source {
                InsertSource::Select(s) if !p.subqueries.is_empty() => select_gathering_tables(p, s, &params, ctx, sites)?.rows,
                InsertSource::Select(s) => select_everywhere(p, s, &params, ctx, sites, &env)?.rows,
                InsertSource::Values(_) => source_rows(i, &Partition::new(u32::MAX), &env)?,
            };
            insert_routed(p, i, rows, &params, ctx, sites)
        }
        Plan::Update(u) => dml_everywhere(p, &params, ctx, sites, u.level.partitioned),
        // Each partition would keep its own first n rows: n per partition, not n in all.
        Plan::Delete(d) if d.is_limited() && d.level.partitioned => Err(Error::sql(format!(
            "DELETE … ORDER BY … LIMIT on partitioned table {} must run on one partition: add WHERE {} = ? \
             (its partition column), or run it in a single-partition or directed procedure",
            d.level.source.table.name,
            d.level.source.table.partition_column.map_or("the partition column", |c| d.level.source.table.columns[c].name.as_str())
        ))),
        Plan::Delete(d) => dml_everywhere(p, &params, ctx, sites, d.level.partitioned),
    }
}

fn first(mut v: Vec<ResultTable>) -> Result<ResultTable> {
    if v.is_empty() {
        return Err(Error::unexpected("no partition answered"));
    }
    Ok(v.swap_remove(0))
}

fn count_of(t: &ResultTable) -> i64 {
    t.first_value().and_then(Value::as_i64).unwrap_or(0)
}

/// UPDATE/DELETE: partitioned tables sum the counts; a replicated table changes the same
/// rows on every partition, so one partition's count is the answer.
fn dml_everywhere(
    p: &Arc<Prepared>,
    params: &[Value],
    ctx: &ExecCtx,
    sites: &mut dyn SiteAccess,
    partitioned: bool,
) -> Result<ResultTable> {
    let f = fragment(p, params.to_vec(), ctx, Step::Execute);
    let results = sites.run_fragment(Target::All, f)?;
    let n = if partitioned { results.iter().map(count_of).sum() } else { results.first().map(count_of).unwrap_or(0) };
    Ok(ResultTable::modified(n as u64))
}

/// Sends each row to the partition that owns its key (all partitions for a replicated
/// table; partition 0 for a stream without a partition column).
fn insert_routed(
    p: &Arc<Prepared>,
    ins: &InsertPlan,
    rows: Vec<Vec<Value>>,
    params: &[Value],
    ctx: &ExecCtx,
    sites: &mut dyn SiteAccess,
) -> Result<ResultTable> {
    let total = rows.len();
    let mut by_part: BTreeMap<u32, Vec<Vec<Value>>> = BTreeMap::new();
    let target_all = ins.table.is_replicated();
    match ins.table.partition_column {
        Some(pc) if !target_all => {
            let ty = ins.table.columns[pc].ty;
            let pos = ins.columns.iter().position(|&c| c == pc);
            let env = Env::new(params, ctx);
            for r in rows {
                env.watch.tick()?;
                let key = match pos {
                    Some(i) => r[i].clone(),
                    None => ins.defaults[pc].eval(&[], &env)?,
                };
                let key = key.coerce_to(ty).unwrap_or(key);
                by_part.entry(sites.ring().partition_for(&key)).or_default().push(r);
            }
        }
        _ => {
            by_part.insert(0, rows);
        }
    }
    for (pid, rows) in by_part {
        let f = fragment(p, params.to_vec(), ctx, Step::InsertRows(rows));
        let target = if target_all { Target::All } else { Target::One(pid) };
        sites.run_fragment(target, f)?;
    }
    Ok(ResultTable::modified(total as u64))
}

/// A SELECT over every partition: an aggregate over one table or a co-located join is
/// aggregated by each partition and merged here; a co-located join without aggregates is
/// run by each partition and its rows merged here; anything else gathers its sources'
/// rows and runs the rest here.
fn select_everywhere(
    p: &Arc<Prepared>,
    s: &SelectPlan,
    params: &[Value],
    ctx: &ExecCtx,
    sites: &mut dyn SiteAccess,
    env: &Env,
) -> Result<ResultTable> {
    if pushes_down(s) {
        let partials = gather_partials(p, s, params, ctx, sites)?;
        sites.reads_done();
        return run_select_merged(s, partials, env);
    }
    if colocated::rows_run_on_each_partition(s) {
        let f = fragment(p, params.to_vec(), ctx, Step::JoinedRows);
        let parts = sites.run_fragment(Target::All, f)?;
        sites.reads_done();
        return colocated::merge_rows(s, parts, env);
    }
    let gathered = gather(p, s, params, ctx, sites)?;
    sites.reads_done();
    // The join order again, from the rows gathered (this node's choice: the answer is
    // this coordinator's alone).
    match crate::join_order::for_row_counts(s, &|j| gathered.rows.get(j).map(|r| r.len() as u64)) {
        Some(v) => run_select(&v, &in_order_of(s, &v, gathered)?, env, true),
        None => run_select(s, &gathered, env, true),
    }
}

/// Rows gathered for the levels of `s`, rearranged for `v`, the same levels in another order.
fn in_order_of(s: &SelectPlan, v: &SelectPlan, mut g: GatheredSource) -> Result<GatheredSource> {
    let mut rows = Vec::with_capacity(v.levels.len());
    let mut index_columns = Vec::with_capacity(v.levels.len());
    for l in &v.levels {
        let j = s.levels.iter().position(|x| x.written == l.written).filter(|&j| j < g.rows.len() && j < g.index_columns.len());
        let j = j.ok_or_else(|| Error::unexpected(format!("no gathered rows for source {} of the join", l.written)))?;
        rows.push(g.rows[j].clone());
        index_columns.push(std::mem::take(&mut g.index_columns[j]));
    }
    Ok(GatheredSource::new(rows, index_columns))
}

/// Each partition's groups of an aggregate over one table or a co-located join
/// (`partial_rows`), read where the rows are (a partitioned source: every partition; one
/// replicated table: partition 0).
fn gather_partials(
    p: &Arc<Prepared>,
    s: &SelectPlan,
    params: &[Value],
    ctx: &ExecCtx,
    sites: &mut dyn SiteAccess,
) -> Result<Vec<ResultTable>> {
    let f = fragment(p, params.to_vec(), ctx, Step::Partials);
    let target = if s.levels.iter().any(|l| l.partitioned) { Target::All } else { Target::One(0) };
    sites.run_fragment(target, f)
}

/// Gathers every level's rows: partitioned sources from all partitions, replicated ones
/// from partition 0. Every partition holds its share against the gather caps as it reads.
fn gather(p: &Arc<Prepared>, s: &SelectPlan, params: &[Value], ctx: &ExecCtx, sites: &mut dyn SiteAccess) -> Result<GatheredSource> {
    let env = Env::new(params, ctx);
    let mut rows = Vec::with_capacity(s.levels.len());
    // What the levels before gathered: each level's step counts its caps on from there.
    let (mut rows_before, mut bytes_before) = (0u64, 0u64);
    for (j, level) in s.levels.iter().enumerate() {
        let step = Step::GatherLevel { level: j as u32, rows_before, bytes_before };
        let f = fragment(p, params.to_vec(), ctx, step);
        let target = if level.partitioned { Target::All } else { Target::One(0) };
        let mut level_rows = Vec::new();
        for t in sites.run_fragment(target, f)? {
            env.watch.tick()?;
            level_rows.extend(t.rows);
        }
        if j + 1 < s.levels.len() {
            // Counted from what arrived (a partition on another node counts in a tally of
            // its own); a one-source read, the common case, skips this.
            rows_before = rows_before.saturating_add(level_rows.len() as u64);
            bytes_before = level_rows.iter().fold(bytes_before, |b, r| b.saturating_add(row_bytes(r) as u64));
        }
        if level.merge_view {
            level_rows = merge_view_rows(&level.source.table, level_rows, &env)?;
        }
        rows.push(level_rows.into());
    }
    let index_columns = s.levels.iter().map(|l| crate::exec::gathered_index_columns(&l.source.table)).collect();
    Ok(GatheredSource::new(rows, index_columns))
}

/// The SELECT plans of a statement with subqueries, numbered as `Step::GatherQueryLevel`
/// does: 0 is the statement's own (an INSERT's SELECT), k + 1 its subquery k (None for a
/// set operation, which reads no table itself).
fn query_plans(p: &Prepared) -> Vec<Option<&SelectPlan>> {
    let subs = p.subqueries.iter().map(|s| match &s.body {
        SubBody::Select(p) => Some(&**p),
        SubBody::SetOp(_) | SubBody::Recursive(_) | SubBody::Working(_) => None,
    });
    std::iter::once(select_of(p)).chain(subs).collect()
}

/// A SELECT with subqueries or set operations across partitions: the stored sources of
/// every SELECT in it are gathered (partitioned ones from every partition, replicated ones
/// from partition 0, each filtered by its terms that depend on neither another source nor
/// an enclosing row; all while the sites are parked in this transaction, so one
/// snapshot), then the statement runs here over what was gathered.
fn select_gathering_tables(
    p: &Arc<Prepared>,
    s: &SelectPlan,
    params: &[Value],
    ctx: &ExecCtx,
    sites: &mut dyn SiteAccess,
) -> Result<ResultTable> {
    let env = Env::new(params, ctx);
    let mut levels = HashMap::new();
    let (mut rows_before, mut bytes_before) = (0u64, 0u64);
    for (query, plan) in query_plans(p).into_iter().enumerate() {
        let Some(plan) = plan else { continue };
        for (j, level) in plan.levels.iter().enumerate().filter(|(_, l)| l.derived.is_none()) {
            let step = Step::GatherQueryLevel { query: query as u32, level: j as u32, rows_before, bytes_before };
            let f = fragment(p, params.to_vec(), ctx, step);
            let target = if level.partitioned { Target::All } else { Target::One(0) };
            let mut rows = Vec::new();
            for r in sites.run_fragment(target, f)? {
                env.watch.tick()?;
                rows.extend(r.rows);
            }
            rows_before = rows_before.saturating_add(rows.len() as u64);
            bytes_before = rows.iter().fold(bytes_before, |b, r| b.saturating_add(row_bytes(r) as u64));
            if level.merge_view {
                rows = merge_view_rows(&level.source.table, rows, &env)?;
            }
            levels.insert((query, j), rows.into());
        }
    }
    sites.reads_done();
    run_statement(s, &p.subqueries, &GatheredTables { levels }, params, ctx)
}

/// One partition's rows of level `j`, filtered by the terms that are safe to apply early.
fn gather_level(s: &SelectPlan, j: usize, params: &[Value], ctx: &ExecCtx, part: &mut Partition, tally: &Tally) -> Result<ResultTable> {
    let level = s.levels.get(j).ok_or_else(|| Error::unexpected(format!("no source {j} in the SELECT")))?;
    let env = Env::new(params, ctx);
    let table = part.table(level.source.table.id)?;
    let stop_at = if s.gather_limit {
        let n = |e: &Option<crate::expr::Expr>| -> Result<usize> {
            Ok(match e {
                Some(e) => e.eval(&[], &env)?.as_i64().unwrap_or(0).max(0) as usize,
                None => 0,
            })
        };
        Some(n(&s.limit)?.saturating_add(n(&s.offset)?))
    } else {
        None
    };
    let mut out = ResultTable::new(
        level.source.table.columns.iter().map(|c| ResultColumn { name: c.name.as_str().into(), ty: c.ty }).collect::<Vec<_>>(),
    );
    if stop_at == Some(0) {
        return Ok(out);
    }
    let mut share = Share { tally, rows: 0, bytes: 0 };
    let pr = probe(level, &level.gather_access, &[], &env)?;
    each_in_table(table, &pr, &mut |_, row| {
        env.watch.tick()?;
        for c in &level.gather_filter {
            if !c.holds(row, &env)? {
                return Ok(true);
            }
        }
        share.add(row, &ctx.limits)?;
        out.rows.push(row.to_vec());
        Ok(stop_at.is_none_or(|n| out.rows.len() < n))
    })?;
    share.report(&ctx.limits)?;
    Ok(out)
}

/// Re-aggregates a partitioned view's per-partition groups: counts and sums add, MIN/MAX
/// combine.
fn merge_view_rows(def: &TableDef, rows: Vec<Vec<Value>>, env: &Env) -> Result<Vec<Vec<Value>>> {
    let Some(view) = def.view() else {
        return Ok(rows);
    };
    let k = view.group_by.len();
    let mut index: HashMap<Vec<Value>, usize> = HashMap::new();
    let mut out: Vec<Vec<Value>> = Vec::new();
    for r in rows {
        env.watch.tick()?;
        let key = r[..k].to_vec();
        let Some(&i) = index.get(&key) else {
            index.insert(key, out.len());
            out.push(r);
            continue;
        };
        let acc = &mut out[i];
        for (a, agg) in view.aggregates.iter().enumerate() {
            let c = k + a;
            let (x, y) = (std::mem::replace(&mut acc[c], Value::Null), r[c].clone());
            acc[c] = match (x, y) {
                (Value::Null, v) | (v, Value::Null) => v,
                (x, y) => match agg {
                    ViewAggregate::CountStar | ViewAggregate::Count(_) | ViewAggregate::Sum(_) => arith(ArithOp::Add, x, y)?,
                    ViewAggregate::Min(_) => {
                        if sort_cmp(&y, &x) == Ordering::Less {
                            y
                        } else {
                            x
                        }
                    }
                    ViewAggregate::Max(_) => {
                        if sort_cmp(&y, &x) == Ordering::Greater {
                            y
                        } else {
                            x
                        }
                    }
                },
            };
        }
    }
    Ok(out)
}
