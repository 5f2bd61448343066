//! Grouping and aggregates. Rows stream through running accumulators, one per aggregate
//! and group, so nothing of the input is kept: `COUNT(*)` over a table of millions of rows
//! holds one counter. Across partitions each partition aggregates its own rows and hands
//! over only its groups' running states (`partial_rows`), which the coordinator merges
//! (`merge_partials`), instead of gathering every row.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use lockstep_core::{decimal, DataType, Error, Result, ResultColumn, ResultTable, Value};

use crate::bind::{AggCtx, AggFunc, AggSpec};
use crate::exec::{eval_all, join_rows, Collected, RowSource};
use crate::expr::{arith, sort_cmp, ArithOp, Env};
use crate::limits::{row_bytes, value_bytes};
use crate::plan::SelectPlan;

/// Bytes counted for one accumulator of a group (its value and count), towards the cap on
/// what a statement holds.
const ACC_BYTES: usize = 48;

/// Running state of one aggregate in one group.
#[derive(Clone)]
struct Acc {
    value: Value,
    count: i64,
    seen: Option<HashSet<Value>>,
}

impl Acc {
    fn new(spec: &AggSpec) -> Acc {
        Acc { value: Value::Null, count: 0, seen: spec.distinct.then(HashSet::new) }
    }

    /// Adds one input row; returns the bytes newly held (a DISTINCT aggregate keeps the
    /// values it saw).
    fn add(&mut self, spec: &AggSpec, row: &[Value], env: &Env) -> Result<usize> {
        let v = match &spec.arg {
            None => {
                self.count += 1;
                return Ok(0);
            }
            // Borrowed: a column is read in place, not copied for each row.
            Some(a) => a.eval_ref(row, env)?,
        };
        if v.is_null() {
            return Ok(0);
        }
        if self.seen.is_none() && self.add_in_place(spec.func, &v) {
            return Ok(0);
        }
        let v = v.into_owned();
        let mut held = 0;
        if let Some(seen) = &mut self.seen {
            if seen.contains(&v) {
                return Ok(0);
            }
            held = value_bytes(&v);
            seen.insert(v.clone());
        }
        self.count += 1;
        self.fold(spec.func, v)?;
        Ok(held)
    }

    /// Adds a non-NULL value to an aggregate without DISTINCT where that needs no copy of
    /// it: COUNT, a SUM or AVG of integers that does not overflow (the general path reports
    /// overflow), a MIN or MAX the value does not replace. False: use the general path.
    fn add_in_place(&mut self, func: AggFunc, v: &Value) -> bool {
        let done = match (func, &mut self.value, v) {
            (AggFunc::CountStar | AggFunc::Count, _, _) => true,
            (AggFunc::Sum | AggFunc::Avg, Value::Int(acc), Value::Int(x)) => match acc.checked_add(*x) {
                Some(sum) => {
                    *acc = sum;
                    true
                }
                None => false,
            },
            (AggFunc::Min, value, v) => !value.is_null() && sort_cmp(v, value) != Ordering::Less,
            (AggFunc::Max, value, v) => !value.is_null() && sort_cmp(v, value) != Ordering::Greater,
            _ => false,
        };
        if done {
            self.count += 1;
        }
        done
    }

    /// Folds a non-NULL value into the running value.
    fn fold(&mut self, func: AggFunc, v: Value) -> Result<()> {
        match func {
            AggFunc::CountStar | AggFunc::Count => {}
            AggFunc::Sum | AggFunc::Avg => {
                self.value =
                    if self.value.is_null() { v } else { arith(ArithOp::Add, std::mem::replace(&mut self.value, Value::Null), v)? };
            }
            AggFunc::Min => {
                if self.value.is_null() || sort_cmp(&v, &self.value) == Ordering::Less {
                    self.value = v;
                }
            }
            AggFunc::Max => {
                if self.value.is_null() || sort_cmp(&v, &self.value) == Ordering::Greater {
                    self.value = v;
                }
            }
        }
        Ok(())
    }

    /// Merges another partition's running state of the same aggregate and group.
    fn merge(&mut self, func: AggFunc, value: Value, count: i64) -> Result<()> {
        self.count += count;
        if value.is_null() {
            return Ok(());
        }
        self.fold(func, value)
    }

    fn result(&self, spec: &AggSpec) -> Result<Value> {
        Ok(match spec.func {
            AggFunc::CountStar | AggFunc::Count => Value::Int(self.count),
            AggFunc::Sum | AggFunc::Min | AggFunc::Max => self.value.clone(),
            AggFunc::Avg => match &self.value {
                Value::Null => Value::Null,
                // VoltDB truncates the average of integers.
                Value::Int(s) => Value::Int(s / self.count),
                Value::Float(s) => Value::Float(s / self.count as f64),
                Value::Decimal(s) => Value::Decimal(
                    decimal::div(s.get(), decimal::from_i64(self.count)).ok_or_else(|| Error::sql("numeric overflow in AVG"))?.into(),
                ),
                v => return Err(Error::sql(format!("AVG of {}", v.describe()))),
            },
        })
    }
}

/// The groups of a statement so far, in the order they were first seen.
pub struct Groups {
    index: HashMap<Vec<Value>, usize, foldhash::fast::FixedState>,
    list: Vec<(Vec<Value>, Vec<Acc>)>,
    /// What the groups hold, as `row_bytes` counts it, for the cap on a statement's memory.
    bytes: usize,
}

impl Groups {
    fn new() -> Groups {
        Groups { index: HashMap::default(), list: Vec::new(), bytes: 0 }
    }

    fn hold(&mut self, bytes: usize, env: &Env) -> Result<()> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > env.limits.result_bytes_max {
            return Err(env.limits.result_too_big());
        }
        Ok(())
    }

    /// The position of the group with `key`, made if new.
    fn slot(&mut self, agg: &AggCtx, key: Vec<Value>, env: &Env) -> Result<usize> {
        if let Some(&g) = self.index.get(&key) {
            return Ok(g);
        }
        self.hold(2 * row_bytes(&key) + ACC_BYTES * agg.aggs.len(), env)?;
        let g = self.list.len();
        self.index.insert(key.clone(), g);
        self.list.push((key, agg.aggs.iter().map(Acc::new).collect()));
        Ok(g)
    }

    /// The one group of a statement without GROUP BY.
    fn only(&mut self, agg: &AggCtx) -> usize {
        if self.list.is_empty() {
            self.list.push((Vec::new(), agg.aggs.iter().map(Acc::new).collect()));
        }
        0
    }
}

/// Feeds every joined row of `src` through the aggregates, keeping no row.
pub fn aggregate(plan: &SelectPlan, agg: &AggCtx, src: &dyn RowSource, env: &Env) -> Result<Groups> {
    let mut groups = Groups::new();
    join_rows(plan, src, env, &mut |row| {
        let g = if agg.group.is_empty() { groups.only(agg) } else { groups.slot(agg, eval_all(&agg.group, row, env)?, env)? };
        let mut held = 0;
        for (acc, spec) in groups.list[g].1.iter_mut().zip(&agg.aggs) {
            held += acc.add(spec, row, env)?;
        }
        if held > 0 {
            groups.hold(held, env)?;
        }
        Ok(true)
    })?;
    Ok(groups)
}

/// Whether each partition can aggregate its own rows for a multi-partition read: one
/// source that needs no re-aggregation first (not a view of a partitioned table), or a
/// join every partition can run on its own rows (`colocated.rs`); and no DISTINCT
/// aggregate (its values seen would have to travel whole).
pub fn pushes_down(plan: &SelectPlan) -> bool {
    let one_table = plan.levels.len() == 1 && !plan.levels[0].merge_view;
    let no_distinct = plan.agg.as_ref().is_some_and(|a| a.aggs.iter().all(|s| !s.distinct));
    no_distinct && (one_table || crate::colocated::is_colocated(plan))
}

/// One partition's groups as rows: the key's values, then each aggregate's running value
/// and count.
pub fn partial_rows(plan: &SelectPlan, src: &dyn RowSource, env: &Env) -> Result<ResultTable> {
    let agg = plan.agg.as_ref().ok_or_else(|| Error::unexpected("partial aggregation of a plan without aggregates"))?;
    let groups = aggregate(plan, agg, src, env)?;
    let width = agg.group.len() + 2 * agg.aggs.len();
    let columns: Vec<ResultColumn> = (0..width).map(|i| ResultColumn { name: format!("P{i}").into(), ty: DataType::BigInt }).collect();
    let mut t = ResultTable::new(columns);
    for (key, accs) in groups.list {
        let mut row = key;
        for a in accs {
            row.push(a.value);
            row.push(Value::Int(a.count));
        }
        t.rows.push(row);
    }
    Ok(t)
}

/// Merges the partitions' `partial_rows` into the groups of the whole table.
pub fn merge_partials(agg: &AggCtx, partials: Vec<ResultTable>, env: &Env) -> Result<Groups> {
    let k = agg.group.len();
    let mut groups = Groups::new();
    for t in partials {
        for mut row in t.rows {
            env.watch.tick()?;
            if row.len() != k + 2 * agg.aggs.len() {
                return Err(Error::unexpected("a partition's partial aggregate has the wrong shape"));
            }
            let states = row.split_off(k);
            let g = if k == 0 { groups.only(agg) } else { groups.slot(agg, row, env)? };
            let mut states = states.into_iter();
            for (acc, spec) in groups.list[g].1.iter_mut().zip(&agg.aggs) {
                let (value, count) = (states.next().unwrap_or(Value::Null), states.next().and_then(|c| c.as_i64()).unwrap_or(0));
                acc.merge(spec.func, value, count)?;
            }
        }
    }
    Ok(groups)
}

/// The aggregated rows (`[group keys…, aggregate results…]`) that pass HAVING, as output
/// rows in `out`. A statement without GROUP BY has one group even with no rows.
pub fn finish_groups(plan: &SelectPlan, agg: &AggCtx, mut groups: Groups, env: &Env, out: &mut Collected) -> Result<()> {
    if agg.group.is_empty() {
        groups.only(agg);
    }
    for (key, accs) in groups.list {
        env.watch.tick()?;
        let mut row = key;
        for (acc, spec) in accs.iter().zip(&agg.aggs) {
            row.push(acc.result(spec)?);
        }
        if let Some(h) = &plan.having {
            if !h.holds(&row, env)? {
                continue;
            }
        }
        out.push(eval_all(&plan.output, &row, env)?, eval_all(&plan.hidden, &row, env)?, env)?;
    }
    Ok(())
}
