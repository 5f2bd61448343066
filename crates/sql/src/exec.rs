//! SELECT execution: nested-loop joins over access paths, then grouping, DISTINCT, sorting
//! and LIMIT/OFFSET. Rows come from a `RowSource` — a partition's tables, or rows gathered
//! from every partition at the multi-partition coordinator.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashSet;
use std::ops::Bound;

use lockstep_core::{Error, Result, ResultTable, Value};
use lockstep_storage::{Partition, Table as StoreTable};

use crate::access::{eval_keys, eval_range, Access, KeyValues, RangeKeys};
use crate::exec_agg::{aggregate, finish_groups, merge_partials};
use crate::exec_join::HashTables;
use crate::exec_query::SharedRows;
use crate::expr::{sort_cmp, Env, Expr};
use crate::limits::{row_bytes, DEADLINE_CHECK_ROWS};
use crate::plan::{Level, SelectPlan, SortKey};

/// Where a level's candidate rows come from, with keys already evaluated.
pub enum Probe {
    /// Nothing can match (a NULL key, say).
    Empty,
    Scan,
    Lookup(usize, KeyValues),
    Range(usize, RangeKeys, bool),
}

/// Evaluates an access path's keys over the joined row so far.
pub fn probe(level: &Level, access: &Access, outer: &[Value], env: &Env) -> Result<Probe> {
    let table = &level.source.table;
    Ok(match access {
        Access::Scan => Probe::Scan,
        Access::Lookup { index, key } => match eval_keys(key, table, &table.indexes[*index].columns, outer, env)? {
            Some(k) => Probe::Lookup(*index, k),
            None => Probe::Empty,
        },
        Access::Range { index, eq, lo, hi, reverse } => match eval_range(eq, lo, hi, table, &table.indexes[*index].columns, outer, env)? {
            Some(r) => Probe::Range(*index, r, *reverse),
            None => Probe::Empty,
        },
    })
}

/// Rows of the plan's levels.
pub trait RowSource {
    /// Calls `f(row id, row)` for the candidate rows of level `j`; `f` returns false to stop.
    /// Returns false when stopped.
    fn each(&self, j: usize, probe: &Probe, f: &mut dyn FnMut(u32, &[Value]) -> Result<bool>) -> Result<bool>;

    /// The row of level `j` that `each` passed with `id` (a hash join keeps the ids):
    /// borrowed when the source holds it as values, else unpacked.
    fn row(&self, j: usize, id: u32) -> Option<Cow<'_, [Value]>>;

    /// Whether rows come from the partition's own indexes, so that a level's `residual`
    /// filters suffice (see `access::residual_filters`).
    fn reads_indexes(&self) -> bool {
        false
    }
}

/// The filters a row of level `l` must pass, read from `src`.
fn filters<'a>(l: &'a Level, src: &dyn RowSource) -> &'a [Expr] {
    if src.reads_indexes() {
        &l.residual
    } else {
        &l.on
    }
}

/// One partition's tables, one per level (None for a derived table, whose rows are in
/// `derived`).
pub struct PartitionSource<'a> {
    pub tables: smallvec::SmallVec<[Option<&'a StoreTable>; 4]>,
    derived: Vec<Option<SharedRows>>,
}

impl<'a> PartitionSource<'a> {
    pub fn new(part: &'a Partition, levels: &[Level]) -> Result<Self> {
        Self::with_derived(part, levels, Vec::new())
    }

    /// As `new`, with the rows of the derived tables among the levels (`derived[j]` for
    /// level `j`).
    pub fn with_derived(part: &'a Partition, levels: &[Level], derived: Vec<Option<SharedRows>>) -> Result<Self> {
        let mut tables = smallvec::SmallVec::new();
        for (j, l) in levels.iter().enumerate() {
            if l.derived.is_some() {
                if derived.get(j).is_none_or(Option::is_none) {
                    return Err(Error::unexpected(format!("the rows of derived table {} are missing", l.source.name)));
                }
                tables.push(None);
                continue;
            }
            tables.push(Some(part.table(l.source.table.id).map_err(|e| e.context(format!("reading {}", l.source.table.name)))?));
        }
        Ok(PartitionSource { tables, derived })
    }
}

/// Visits the rows of a derived table (it has no index: every probe but `Empty` scans).
fn each_derived(rows: &[Vec<Value>], probe: &Probe, f: &mut dyn FnMut(u32, &[Value]) -> Result<bool>) -> Result<bool> {
    if matches!(probe, Probe::Empty) {
        return Ok(true);
    }
    for (i, r) in rows.iter().enumerate() {
        if !f(i as u32, r)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Visits the rows of one stored table selected by `probe`.
pub fn each_in_table(t: &StoreTable, probe: &Probe, f: &mut dyn FnMut(u32, &[Value]) -> Result<bool>) -> Result<bool> {
    match probe {
        Probe::Empty => {}
        Probe::Scan => {
            return each_prefetched(t, t.ids(), f);
        }
        Probe::Lookup(ix, key) => {
            let mut row = RowBuf::take();
            for id in t.lookup_iter(*ix, key) {
                if t.get_into(id, &mut row.0) && !f(id, &row.0)? {
                    return Ok(false);
                }
            }
        }
        Probe::Range(ix, keys, reverse) => {
            let lo = bound_ref(&keys.lo);
            let hi = bound_ref(&keys.hi);
            return each_prefetched(t, t.range(*ix, lo, hi, *reverse), f);
        }
    }
    Ok(true)
}

thread_local! {
    static ROW_BUF: std::cell::Cell<Vec<Value>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The vector a visit unpacks stored rows into: the thread's spare one when there is one (a
/// nested visit, a join's inner level, makes its own), given back when the visit ends, so
/// a point lookup allocates nothing.
struct RowBuf(Vec<Value>);

impl RowBuf {
    fn take() -> RowBuf {
        RowBuf(ROW_BUF.take())
    }
}

impl Drop for RowBuf {
    fn drop(&mut self) {
        let mut row = std::mem::take(&mut self.0);
        row.clear();
        ROW_BUF.set(row);
    }
}

/// Rows visited per prefetch batch.
const PREFETCH_BATCH: usize = 8;

/// Visits the rows `ids` in batches, first asking the CPU for each batch's value arrays,
/// then for their strings, so a scan over rows scattered in memory waits for their cache
/// misses together rather than one after another. A batch may run past a LIMIT's last row:
/// that costs a few index steps and prefetches, never a visit.
fn each_prefetched(t: &StoreTable, mut ids: impl Iterator<Item = u32>, f: &mut dyn FnMut(u32, &[Value]) -> Result<bool>) -> Result<bool> {
    let mut batch = [0u32; PREFETCH_BATCH];
    let mut row = RowBuf::take();
    loop {
        let mut n = 0;
        for id in ids.by_ref().take(PREFETCH_BATCH) {
            batch[n] = id;
            n += 1;
        }
        if n == 0 {
            return Ok(true);
        }
        for &id in &batch[..n] {
            t.prefetch_row(id);
        }
        for &id in &batch[..n] {
            t.prefetch_data(id);
        }
        for &id in &batch[..n] {
            if t.get_into(id, &mut row.0) && !f(id, &row.0)? {
                return Ok(false);
            }
        }
    }
}

fn bound_ref(b: &Bound<Vec<Value>>) -> Bound<&[Value]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl RowSource for PartitionSource<'_> {
    fn reads_indexes(&self) -> bool {
        true
    }

    fn row(&self, j: usize, id: u32) -> Option<Cow<'_, [Value]>> {
        match self.tables.get(j)? {
            Some(t) => t.get(id).map(Cow::Owned),
            None => self.derived.get(j)?.as_ref()?.get(id as usize).map(|r| Cow::Borrowed(r.as_slice())),
        }
    }

    fn each(&self, j: usize, probe: &Probe, f: &mut dyn FnMut(u32, &[Value]) -> Result<bool>) -> Result<bool> {
        match self.tables[j] {
            Some(t) => each_in_table(t, probe, f),
            None => match self.derived.get(j) {
                Some(Some(rows)) => each_derived(rows, probe, f),
                _ => Err(Error::unexpected(format!("no rows for source {j}"))),
            },
        }
    }
}

/// Rows gathered at the coordinator, one list per level. A level probed by index key (a
/// join on an indexed column, say) gets a hash of its rows on that key's columns, built the
/// first time it is probed, so joins stay linear; other probes scan (every filter is
/// re-checked anyway).
pub struct GatheredSource {
    pub rows: Vec<SharedRows>,
    /// For each level, each index's columns (positions within that level's rows).
    pub index_columns: Vec<Vec<Vec<usize>>>,
    hashed: std::cell::RefCell<std::collections::HashMap<(usize, usize, usize), std::collections::HashMap<Vec<Value>, Vec<u32>>>>,
}

/// Each index's columns for `GatheredSource`: an index with an expression key gets none
/// (gathered rows do not carry computed keys), so a probe of it scans and the level's
/// filters decide.
pub fn gathered_index_columns(table: &lockstep_core::TableDef) -> Vec<Vec<usize>> {
    table.indexes.iter().map(|i| if i.exprs.is_empty() { i.columns.clone() } else { Vec::new() }).collect()
}

impl GatheredSource {
    pub fn new(rows: Vec<SharedRows>, index_columns: Vec<Vec<Vec<usize>>>) -> Self {
        GatheredSource { rows, index_columns, hashed: Default::default() }
    }

    /// The rows of level `j` whose first `key.len()` columns of index `ix` equal `key`.
    fn matching(&self, j: usize, ix: usize, key: &[Value]) -> Option<Vec<u32>> {
        let cols = self.index_columns.get(j)?.get(ix)?.get(..key.len())?;
        let mut hashed = self.hashed.borrow_mut();
        let map = hashed.entry((j, ix, key.len())).or_insert_with(|| {
            let mut m: std::collections::HashMap<Vec<Value>, Vec<u32>> = std::collections::HashMap::new();
            for (i, r) in self.rows[j].iter().enumerate() {
                m.entry(cols.iter().map(|&c| r[c].clone()).collect()).or_default().push(i as u32);
            }
            m
        });
        Some(map.get(key).cloned().unwrap_or_default())
    }
}

impl RowSource for GatheredSource {
    fn row(&self, j: usize, id: u32) -> Option<Cow<'_, [Value]>> {
        self.rows.get(j)?.get(id as usize).map(|r| Cow::Borrowed(r.as_slice()))
    }

    fn each(&self, j: usize, probe: &Probe, f: &mut dyn FnMut(u32, &[Value]) -> Result<bool>) -> Result<bool> {
        if matches!(probe, Probe::Empty) {
            return Ok(true);
        }
        if let Probe::Lookup(ix, key) = probe {
            if let Some(ids) = self.matching(j, *ix, key) {
                for i in ids {
                    if !f(i, &self.rows[j][i as usize])? {
                        return Ok(false);
                    }
                }
                return Ok(true);
            }
        }
        for (i, r) in self.rows[j].iter().enumerate() {
            if !f(i as u32, r)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn all_hold(conds: &[Expr], row: &[Value], env: &Env) -> Result<bool> {
    for c in conds {
        if !c.holds(row, env)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Enumerates the joined rows that pass every filter, calling `emit` (false = stop).
pub fn join_rows(plan: &SelectPlan, src: &dyn RowSource, env: &Env, emit: &mut dyn FnMut(&[Value]) -> Result<bool>) -> Result<()> {
    match plan.levels.len() {
        0 => {
            emit(&[])?;
        }
        1 => {
            let l = &plan.levels[0];
            let p = probe(l, &l.access, &[], env)?;
            let on = filters(l, src);
            src.each(0, &p, &mut |_, row| {
                env.watch.tick()?;
                if !all_hold(on, row, env)? || !all_hold(&l.post, row, env)? {
                    return Ok(true);
                }
                emit(row)
            })?;
        }
        _ => {
            let mut buf = vec![Value::Null; plan.width];
            let hashes = HashTables::new(plan.levels.len());
            join_level(plan, src, env, &hashes, 0, &mut buf, emit)?;
        }
    }
    Ok(())
}

/// One join level; depth is bounded by JOIN_SOURCES_MAX.
fn join_level(
    plan: &SelectPlan,
    src: &dyn RowSource,
    env: &Env,
    hashes: &HashTables,
    j: usize,
    buf: &mut Vec<Value>,
    emit: &mut dyn FnMut(&[Value]) -> Result<bool>,
) -> Result<bool> {
    if j == plan.levels.len() {
        return emit(buf);
    }
    let l = &plan.levels[j];
    let (off, w) = (l.source.offset, l.source.width());
    let on = filters(l, src);
    let mut matched = false;
    let mut go_on = true;
    let mut visit = |row: &[Value], buf: &mut Vec<Value>| -> Result<bool> {
        env.watch.tick()?;
        buf[off..off + w].clone_from_slice(row);
        if !all_hold(on, buf, env)? {
            return Ok(true);
        }
        matched = true;
        if !all_hold(&l.post, buf, env)? {
            return Ok(true);
        }
        go_on = join_level(plan, src, env, hashes, j + 1, buf, emit)?;
        Ok(go_on)
    };
    match hashes.table(plan, src, env, j, buf)? {
        Some(table) => {
            for &id in table.matching(&l.hash, buf) {
                let row = src.row(j, id).ok_or_else(|| Error::unexpected(format!("row {id} of source {j} vanished during a hash join")))?;
                if !visit(&row, buf)? {
                    break;
                }
            }
        }
        None => {
            let p = probe(l, &l.access, buf, env)?;
            src.each(j, &p, &mut |_, row| visit(row, buf))?;
        }
    }
    if l.left && !matched && go_on {
        for v in &mut buf[off..off + w] {
            *v = Value::Null;
        }
        if all_hold(&l.post, buf, env)? {
            go_on = join_level(plan, src, env, hashes, j + 1, buf, emit)?;
        }
    }
    Ok(go_on)
}

/// The value of a LIMIT or OFFSET expression.
pub(crate) fn count_of(e: &Option<Expr>, env: &Env, what: &str) -> Result<Option<usize>> {
    match e {
        None => Ok(None),
        Some(e) => match e.eval(&[], env)? {
            Value::Int(n) if n >= 0 => Ok(Some(n as usize)),
            Value::Null => Ok(None),
            v => Err(Error::sql(format!("{what} must be a non-negative integer, not {}", v.describe()))),
        },
    }
}

/// Output rows with their sort keys, before DISTINCT / ORDER BY / LIMIT, and the bytes
/// they hold (capped by `Limits::result_bytes_max` as they come). When only the first
/// `keep` rows in sort order can be answered (ORDER BY … LIMIT, no DISTINCT), the rows are
/// cut back to those every so often, so a top-N over a large table holds about N rows.
pub struct Collected<'p> {
    rows: Vec<(Vec<Value>, Vec<Value>)>,
    bytes: usize,
    keep: Option<usize>,
    order: &'p [(SortKey, bool)],
}

/// Fewest rows a top-N collection holds before it is cut back (it is cut back at twice N).
const TOP_N_CUT_ROWS_MIN: usize = 1024;

impl<'p> Collected<'p> {
    fn new(order: &'p [(SortKey, bool)], keep: Option<usize>) -> Self {
        Collected { rows: Vec::new(), bytes: 0, keep, order }
    }

    pub fn push(&mut self, output: Vec<Value>, hidden: Vec<Value>, env: &Env) -> Result<()> {
        self.bytes = self.bytes.saturating_add(row_bytes(&output) + row_bytes(&hidden));
        self.rows.push((output, hidden));
        if let Some(k) = self.keep {
            if self.rows.len() >= k.saturating_mul(2).max(TOP_N_CUT_ROWS_MIN) || self.bytes > env.limits.result_bytes_max {
                self.cut_back(k, env)?;
            }
        }
        if self.bytes > env.limits.result_bytes_max {
            return Err(env.limits.result_too_big());
        }
        Ok(())
    }

    /// Keeps the first `k` rows in sort order. The sort is stable and rows kept earlier
    /// come first, so the rows kept are those a full sort would put first.
    fn cut_back(&mut self, k: usize, env: &Env) -> Result<()> {
        self.sort(env)?;
        self.rows.truncate(k);
        self.bytes = self.rows.iter().map(|(o, h)| row_bytes(o) + row_bytes(h)).sum();
        Ok(())
    }

    /// Sorts by the ORDER BY keys, looking at the deadline before and after a large sort.
    fn sort(&mut self, env: &Env) -> Result<()> {
        let large = self.rows.len() >= DEADLINE_CHECK_ROWS as usize;
        if large {
            env.watch.check()?;
        }
        let order = self.order;
        self.rows.sort_by(|a, b| compare_rows(order, a, b));
        if large {
            env.watch.check()?;
        }
        Ok(())
    }
}

fn compare_rows(order: &[(SortKey, bool)], a: &(Vec<Value>, Vec<Value>), b: &(Vec<Value>, Vec<Value>)) -> Ordering {
    for (k, desc) in order {
        let (x, y) = match k {
            SortKey::Output(i) => (&a.0[*i], &b.0[*i]),
            SortKey::Hidden(i) => (&a.1[*i], &b.1[*i]),
        };
        let o = sort_cmp(x, y);
        if o != Ordering::Equal {
            return if *desc { o.reverse() } else { o };
        }
    }
    Ordering::Equal
}

pub(crate) fn eval_all(exprs: &[Expr], row: &[Value], env: &Env) -> Result<Vec<Value>> {
    let mut out = Vec::with_capacity(exprs.len());
    for e in exprs {
        // Most outputs are plain columns (`SELECT *` of a 34-column row, say): `eval_ref`
        // copies those without a call into `eval`.
        out.push(e.eval_ref(row, env)?.into_owned());
    }
    Ok(out)
}

/// Runs a SELECT plan over `src`. `force_sort` re-sorts even when the access path was
/// ordered (rows gathered from several partitions are not).
pub fn run_select(plan: &SelectPlan, src: &dyn RowSource, env: &Env, force_sort: bool) -> Result<ResultTable> {
    if streams(plan, force_sort) {
        let mut t = ResultTable::new(plan.columns.clone());
        let mut bytes = 0usize;
        each_streamed(plan, src, env, &mut |row| {
            let out = eval_all(&plan.output, row, env)?;
            bytes = bytes.saturating_add(row_bytes(&out));
            if bytes > env.limits.result_bytes_max {
                return Err(env.limits.result_too_big());
            }
            t.rows.push(out);
            Ok(true)
        })?;
        return Ok(t);
    }
    let need_sort = !plan.order.is_empty() && (!plan.sorted_by_index || force_sort);
    collect_select(plan, env, need_sort, &mut |out| match &plan.agg {
        None => join_rows(plan, src, env, &mut |row| {
            out.push(eval_all(&plan.output, row, env)?, eval_all(&plan.hidden, row, env)?, env)?;
            Ok(true)
        }),
        Some(agg) => {
            let groups = aggregate(plan, agg, src, env)?;
            finish_groups(plan, agg, groups, env, out)
        }
    })
}

/// Finishes a multi-partition aggregate read from each partition's `partial_rows`.
pub fn run_select_merged(plan: &SelectPlan, partials: Vec<ResultTable>, env: &Env) -> Result<ResultTable> {
    let agg = plan.agg.as_ref().ok_or_else(|| Error::unexpected("merging partial aggregates of a plan without aggregates"))?;
    let mut partials = Some(partials);
    collect_select(plan, env, !plan.order.is_empty(), &mut |out| {
        let groups = merge_partials(agg, partials.take().unwrap_or_default(), env)?;
        finish_groups(plan, agg, groups, env, out)
    })
}

/// Collects output rows with `fill`, then applies DISTINCT, ORDER BY and LIMIT/OFFSET.
pub(crate) fn collect_select(
    plan: &SelectPlan,
    env: &Env,
    need_sort: bool,
    fill: &mut dyn FnMut(&mut Collected) -> Result<()>,
) -> Result<ResultTable> {
    let limit = count_of(&plan.limit, env, "LIMIT")?;
    let offset = count_of(&plan.offset, env, "OFFSET")?.unwrap_or(0);
    let keep = if need_sort && !plan.distinct { limit.map(|l| l.saturating_add(offset)) } else { None };
    let mut out = Collected::new(&plan.order, keep);
    fill(&mut out)?;
    finish(plan, out, need_sort, offset, limit, env)
}

/// Runs a SELECT plan over `src`, handing each output row to `emit` (false stops): rows
/// that come out in the order they are found go straight from the row to `emit` through
/// one reused buffer; others are collected, grouped and sorted by `run_select` first.
/// Returns the rows handed over.
pub fn each_select_row(plan: &SelectPlan, src: &dyn RowSource, env: &Env, emit: &mut dyn FnMut(&[Value]) -> Result<bool>) -> Result<u64> {
    let mut sent = 0u64;
    if !streams(plan, false) {
        for r in &run_select(plan, src, env, false)?.rows {
            sent += 1;
            if !emit(r)? {
                break;
            }
        }
        return Ok(sent);
    }
    let mut out: smallvec::SmallVec<[Value; 8]> = smallvec::SmallVec::new();
    each_streamed(plan, src, env, &mut |row| {
        out.clear();
        for e in &plan.output {
            out.push(e.eval_ref(row, env)?.into_owned());
        }
        sent += 1;
        emit(&out)
    })?;
    Ok(sent)
}

/// Whether the plan's rows come out in the order they are found, with nothing to group,
/// sort or deduplicate (most point reads): they can go out as they are found.
fn streams(plan: &SelectPlan, force_sort: bool) -> bool {
    let need_sort = !plan.order.is_empty() && (!plan.sorted_by_index || force_sort);
    plan.agg.is_none() && !plan.distinct && !need_sort
}

/// For a plan that `streams`: calls `emit` with each joined row after OFFSET, up to
/// LIMIT, until it returns false.
fn each_streamed(plan: &SelectPlan, src: &dyn RowSource, env: &Env, emit: &mut dyn FnMut(&[Value]) -> Result<bool>) -> Result<()> {
    let limit = count_of(&plan.limit, env, "LIMIT")?;
    let offset = count_of(&plan.offset, env, "OFFSET")?.unwrap_or(0);
    let stop_at = limit.map(|l| l.saturating_add(offset));
    if stop_at == Some(0) {
        return Ok(());
    }
    let mut seen = 0usize;
    join_rows(plan, src, env, &mut |row| {
        seen += 1;
        if seen > offset && !emit(row)? {
            return Ok(false);
        }
        Ok(stop_at.is_none_or(|s| seen < s))
    })
}

fn finish(plan: &SelectPlan, mut c: Collected, need_sort: bool, offset: usize, limit: Option<usize>, env: &Env) -> Result<ResultTable> {
    if plan.distinct {
        let large = c.rows.len() >= DEADLINE_CHECK_ROWS as usize;
        if large {
            env.watch.check()?;
        }
        let mut seen = HashSet::new();
        c.rows.retain(|(o, _)| seen.insert(o.clone()));
        if large {
            env.watch.check()?;
        }
    }
    if need_sort {
        c.sort(env)?;
    }
    let mut t = ResultTable::new(plan.columns.clone());
    let take = limit.unwrap_or(usize::MAX);
    t.rows = c.rows.into_iter().skip(offset).take(take).map(|(o, _)| o).collect();
    Ok(t)
}
