//! Multi-partition execution. A SELECT gathers each source's rows (filtered where that is
//! safe) from the partitions that hold them and runs the rest of the plan at the
//! coordinator; DML is routed row by row (INSERT) or run everywhere (UPDATE/DELETE).

use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use lockstep_core::{Error, Result, ResultColumn, ResultTable, TableDef, Value, ViewAggregate};
use lockstep_storage::Partition;

use crate::exec::{each_in_table, probe, run_select, run_select_merged, GatheredSource, PartitionSource};
use crate::exec_agg::{partial_rows, pushes_down};
use crate::exec_dml::{insert_rows, source_rows};
use crate::expr::{arith, sort_cmp, ArithOp, Env};
use crate::limits::{row_bytes, Limits};
use crate::plan::SelectPlan;
use crate::plan_dml::{InsertPlan, InsertSource};
use crate::{coerce_params, execute_coerced, ExecCtx, Plan, Prepared, Route, SiteAccess, SiteFn, Target};

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

fn select_of(p: &Prepared) -> Option<&SelectPlan> {
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

/// Runs a statement across all partitions, read-consistently (every site is parked in the
/// same multi-partition transaction).
pub fn execute_mp(p: &Arc<Prepared>, params: &[Value], ctx: &ExecCtx, sites: &mut dyn SiteAccess) -> Result<ResultTable> {
    let params = coerce_params(p, params)?.into_owned();
    let one = |pid: u32| -> (Target, SiteFn) {
        let (p, params, ctx) = (p.clone(), params.clone(), *ctx);
        (Target::One(pid), Arc::new(move |part: &mut Partition| execute_coerced(&p, &params, &ctx, part)))
    };
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
        let (t, f) = one(pid);
        return first(sites.run(t, f)?);
    }
    let env = Env::new(&params, ctx);
    match &p.plan {
        Plan::Select(s) => select_everywhere(p, s, &params, ctx, sites, &env),
        Plan::Insert(i) => {
            let rows = match &i.source {
                InsertSource::Select(s) => select_everywhere(p, s, &params, ctx, sites, &env)?.rows,
                InsertSource::Values(_) => source_rows(i, &Partition::new(u32::MAX), &env)?,
            };
            insert_routed(p, i, rows, &params, ctx, sites)
        }
        Plan::Update(u) => dml_everywhere(p, &params, ctx, sites, u.level.partitioned),
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
    let (pp, params, ctx) = (p.clone(), params.to_vec(), *ctx);
    let f: SiteFn = Arc::new(move |part: &mut Partition| execute_coerced(&pp, &params, &ctx, part));
    let results = sites.run(Target::All, f)?;
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
        let (pp, params, ctx) = (p.clone(), params.to_vec(), *ctx);
        let rows = Arc::new(rows);
        let f: SiteFn = Arc::new(move |part: &mut Partition| {
            let ins = insert_of(&pp).ok_or_else(|| Error::unexpected("not an INSERT"))?;
            let env = Env::new(&params, &ctx);
            let sp = part.savepoint();
            match insert_rows(ins, rows.as_ref().clone(), part, &env) {
                Ok(n) => Ok(ResultTable::modified(n)),
                Err(e) => {
                    part.rollback_to(sp);
                    Err(e)
                }
            }
        });
        let target = if target_all { Target::All } else { Target::One(pid) };
        sites.run(target, f)?;
    }
    Ok(ResultTable::modified(total as u64))
}

/// A SELECT over every partition: an aggregate over one table is aggregated by each
/// partition and merged here; anything else gathers its rows and runs the rest here.
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
    let gathered = gather(p, s, params, ctx, sites)?;
    sites.reads_done();
    run_select(s, &gathered, env, true)
}

/// Each partition's groups of an aggregate over one table (`partial_rows`), the table
/// read where it is (partitioned: every partition; replicated: partition 0).
fn gather_partials(
    p: &Arc<Prepared>,
    s: &SelectPlan,
    params: &[Value],
    ctx: &ExecCtx,
    sites: &mut dyn SiteAccess,
) -> Result<Vec<ResultTable>> {
    let tally = Arc::new(Tally::default());
    let (pp, params2, ctx2, tally2) = (p.clone(), params.to_vec(), *ctx, tally.clone());
    let f: SiteFn = Arc::new(move |part: &mut Partition| {
        let s = select_of(&pp).ok_or_else(|| Error::unexpected("not a SELECT"))?;
        let env = Env::new(&params2, &ctx2);
        let t = partial_rows(s, &PartitionSource::new(part, &s.levels)?, &env)?;
        let bytes = t.rows.iter().map(|r| row_bytes(r)).sum();
        tally2.add(t.rows.len(), bytes, &ctx2.limits)?;
        Ok(t)
    });
    let target = if s.levels.first().is_some_and(|l| l.partitioned) { Target::All } else { Target::One(0) };
    sites.run(target, f)
}

/// Gathers every level's rows: partitioned sources from all partitions, replicated ones
/// from partition 0. Every partition holds its share against the gather caps as it reads.
fn gather(p: &Arc<Prepared>, s: &SelectPlan, params: &[Value], ctx: &ExecCtx, sites: &mut dyn SiteAccess) -> Result<GatheredSource> {
    let tally = Arc::new(Tally::default());
    let env = Env::new(params, ctx);
    let mut rows = Vec::with_capacity(s.levels.len());
    for (j, level) in s.levels.iter().enumerate() {
        let (pp, params2, ctx2, tally2) = (p.clone(), params.to_vec(), *ctx, tally.clone());
        let f: SiteFn = Arc::new(move |part: &mut Partition| {
            let s = select_of(&pp).ok_or_else(|| Error::unexpected("not a SELECT"))?;
            gather_level(s, j, &params2, &ctx2, part, &tally2)
        });
        let target = if level.partitioned { Target::All } else { Target::One(0) };
        let mut level_rows = Vec::new();
        for t in sites.run(target, f)? {
            env.watch.tick()?;
            level_rows.extend(t.rows);
        }
        if level.merge_view {
            level_rows = merge_view_rows(&level.source.table, level_rows, &env)?;
        }
        rows.push(level_rows);
    }
    let index_columns = s.levels.iter().map(|l| l.source.table.indexes.iter().map(|i| i.columns.clone()).collect()).collect();
    Ok(GatheredSource::new(rows, index_columns))
}

/// One partition's rows of level `j`, filtered by the terms that are safe to apply early.
fn gather_level(s: &SelectPlan, j: usize, params: &[Value], ctx: &ExecCtx, part: &mut Partition, tally: &Tally) -> Result<ResultTable> {
    let level = &s.levels[j];
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
