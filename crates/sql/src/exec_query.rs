//! Statements with subqueries, derived tables or set operations. The statement's SELECT
//! runs as any other (`exec::run_select`); each subquery runs when an expression or a
//! derived table first needs it, through the `Runner` the expressions reach by their `Env`.
//! A subquery that does not read the enclosing row runs once per statement and its answer
//! is kept; a correlated one runs for each row that asks. Every subquery reads the same
//! tables as the statement — one partition's (`PartitionTables`), or, across partitions,
//! the rows gathered from all of them while every site was parked in the same transaction
//! (`GatheredTables`: each SELECT's sources, filtered by what does not depend on an
//! enclosing row) — so they all see one snapshot.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use lockstep_core::{Error, Result, ResultTable, Value};
use lockstep_storage::Partition;

use crate::exec::{run_select, GatheredSource, PartitionSource, RowSource};
use crate::expr::{Env, SubRows, SubqueryRunner};
use crate::limits::row_bytes;
use crate::plan::{SelectPlan, SetOp, SetOpPlan, SubBody, SubqueryPlan};
use crate::plan_recursive::{RecursivePlan, RECURSION_ITERATIONS_MAX, RECURSION_ROWS_MAX};
use crate::ExecCtx;

/// Rows shared between the levels and subqueries that read them.
pub type SharedRows = Rc<[Vec<Value>]>;

/// Where the stored tables' rows come from.
pub trait Tables {
    /// A row source for the levels of `plan`, the statement's SELECT number `query` (0 for
    /// its own, k + 1 for subquery k); `derived[j]` holds the rows of level `j` when it is
    /// a derived table.
    fn source<'s>(&'s self, query: usize, plan: &SelectPlan, derived: Vec<Option<SharedRows>>) -> Result<Box<dyn RowSource + 's>>;
    /// The rows were gathered from several partitions, so no index order holds.
    fn gathered(&self) -> bool;
}

/// One partition's tables.
pub struct PartitionTables<'a>(pub &'a Partition);

impl Tables for PartitionTables<'_> {
    fn source<'s>(&'s self, _query: usize, plan: &SelectPlan, derived: Vec<Option<SharedRows>>) -> Result<Box<dyn RowSource + 's>> {
        Ok(Box::new(PartitionSource::with_derived(self.0, &plan.levels, derived)?))
    }

    fn gathered(&self) -> bool {
        false
    }
}

/// The rows of each stored source of each SELECT of the statement, gathered from every
/// partition that holds them, by (query, level) as `Tables::source` numbers them.
pub struct GatheredTables {
    pub levels: HashMap<(usize, usize), SharedRows>,
}

impl Tables for GatheredTables {
    fn source<'s>(&'s self, query: usize, plan: &SelectPlan, derived: Vec<Option<SharedRows>>) -> Result<Box<dyn RowSource + 's>> {
        let mut rows = Vec::with_capacity(plan.levels.len());
        let mut index_columns = Vec::with_capacity(plan.levels.len());
        for (j, (l, d)) in plan.levels.iter().zip(derived).enumerate() {
            let r = match d {
                Some(r) => r,
                None => self.levels.get(&(query, j)).cloned().ok_or_else(|| {
                    Error::unexpected(format!("the rows of {} were not gathered for this statement", l.source.table.name))
                })?,
            };
            rows.push(r);
            index_columns.push(crate::exec::gathered_index_columns(&l.source.table));
        }
        Ok(Box::new(GatheredSource::new(rows, index_columns)))
    }

    fn gathered(&self) -> bool {
        true
    }
}

/// Runs the subqueries of one statement over `tables`, keeping the answers of those that
/// do not depend on the enclosing row.
pub struct Runner<'a> {
    subs: &'a [SubqueryPlan],
    tables: &'a dyn Tables,
    kept: RefCell<Vec<Option<Rc<SubRows>>>>,
    /// Bytes of the answers kept, held against the cap on what one answer may hold: each
    /// answer is capped as it is built, and together they may not pass it either.
    kept_bytes: std::cell::Cell<usize>,
    /// Each SELECT subquery's row source, built on its first run: a correlated subquery
    /// over gathered rows then builds the hash of a level's rows on a key once, not once
    /// per outer row.
    sources: RefCell<Vec<Option<Rc<dyn RowSource + 'a>>>>,
    /// The rows each running recursive WITH found in its last iteration, by the id of its
    /// `SubBody::Working` subquery.
    working: RefCell<HashMap<usize, SharedRows>>,
}

impl<'a> Runner<'a> {
    pub fn new(subs: &'a [SubqueryPlan], tables: &'a dyn Tables) -> Runner<'a> {
        Runner {
            subs,
            tables,
            kept: RefCell::new(vec![None; subs.len()]),
            kept_bytes: std::cell::Cell::new(0),
            sources: RefCell::new(vec![None; subs.len()]),
            working: RefCell::new(HashMap::new()),
        }
    }

    /// The row source of SELECT subquery `id`, run in `env`. It is kept unless a level's
    /// rows depend on the enclosing row (a set operation with ORDER BY or LIMIT inside a
    /// correlated subquery reads its sides as a derived level).
    fn source(&self, id: usize, plan: &SelectPlan, env: &Env) -> Result<Rc<dyn RowSource + 'a>> {
        let keep = plan.levels.iter().all(|l| l.derived.is_none_or(|d| self.subs.get(d).is_some_and(|s| !s.correlated)));
        if keep {
            if let Some(s) = self.sources.borrow().get(id).and_then(Clone::clone) {
                return Ok(s);
            }
        }
        let src: Rc<dyn RowSource + 'a> = Rc::from(self.tables.source(id + 1, plan, derived_rows(plan, env)?)?);
        if keep {
            if let Some(slot) = self.sources.borrow_mut().get_mut(id) {
                *slot = Some(src.clone());
            }
        }
        Ok(src)
    }

    fn compute(&self, id: usize, sub: &SubqueryPlan, outer: &[Value], env: &Env) -> Result<SharedRows> {
        match &sub.body {
            SubBody::Select(plan) => {
                let inner = env.for_subquery(outer);
                let src = self.source(id, plan, &inner)?;
                Ok(run_select(plan, &*src, &inner, self.tables.gathered())?.rows.into())
            }
            SubBody::SetOp(s) => {
                let l = self.rows(s.left, outer, env)?;
                let r = self.rows(s.right, outer, env)?;
                set_operation(s, &l.rows, &r.rows, env)
            }
            SubBody::Recursive(r) => self.recurse(r, outer, env),
            SubBody::Working(_) => self
                .working
                .borrow()
                .get(&id)
                .cloned()
                .ok_or_else(|| Error::unexpected(format!("subquery {id} read the rows of a recursive WITH that is not running"))),
        }
    }

    /// A recursive WITH's rows: the base's, then the step's over each iteration's new rows
    /// until it finds none.
    fn recurse(&self, r: &RecursivePlan, outer: &[Value], env: &Env) -> Result<SharedRows> {
        let mut acc = Accumulated { answer: Vec::new(), seen: HashSet::new(), bytes: 0 };
        let base = self.rows(r.base, outer, env)?;
        let mut fresh = acc.add(r, &base.rows, false, env)?;
        let mut iterations = 0usize;
        while !fresh.is_empty() {
            iterations += 1;
            if iterations > RECURSION_ITERATIONS_MAX {
                self.working.borrow_mut().remove(&r.working);
                return Err(Error::sql(format!(
                    "WITH RECURSIVE {} was still finding rows after {RECURSION_ITERATIONS_MAX} iterations (the most it may run): \
                     give its recursive part a condition that stops it",
                    r.name
                )));
            }
            env.watch.check()?;
            self.working.borrow_mut().insert(r.working, fresh.into());
            self.forget_recursive();
            let step = self.rows(r.step, outer, env);
            let step = match step {
                Ok(s) => s,
                Err(e) => {
                    self.working.borrow_mut().remove(&r.working);
                    return Err(e);
                }
            };
            fresh = acc.add(r, &step.rows, r.convert_step, env)?;
        }
        self.working.borrow_mut().remove(&r.working);
        Ok(acc.answer.into())
    }

    /// Drops the answers and row sources kept for the subqueries that run again in each
    /// iteration of a recursive WITH.
    fn forget_recursive(&self) {
        let (mut kept, mut sources) = (self.kept.borrow_mut(), self.sources.borrow_mut());
        for (id, _) in self.subs.iter().enumerate().filter(|(_, s)| s.recursive) {
            if let Some(k) = kept.get_mut(id) {
                *k = None;
            }
            if let Some(s) = sources.get_mut(id) {
                *s = None;
            }
        }
    }
}

/// A recursive WITH's answer so far.
struct Accumulated {
    answer: Vec<Vec<Value>>,
    /// The rows in the answer, for UNION (without ALL).
    seen: HashSet<Vec<Value>>,
    bytes: usize,
}

impl Accumulated {
    /// Adds the rows that are new (all of them with UNION ALL) and returns them.
    fn add(&mut self, r: &RecursivePlan, rows: &[Vec<Value>], convert: bool, env: &Env) -> Result<Vec<Vec<Value>>> {
        let mut fresh = Vec::new();
        for row in rows {
            env.watch.tick()?;
            let row: Vec<Value> = if convert {
                row.iter()
                    .zip(r.columns.iter())
                    .map(|(v, c)| if v.is_null() { Ok(Value::Null) } else { v.coerce_to(c.ty) })
                    .collect::<Result<_>>()?
            } else {
                row.clone()
            };
            if !r.all && !self.seen.insert(row.clone()) {
                continue;
            }
            self.bytes = self.bytes.saturating_add(row_bytes(&row));
            if self.bytes > env.limits.result_bytes_max {
                return Err(env.limits.result_too_big());
            }
            if self.answer.len() >= RECURSION_ROWS_MAX {
                return Err(Error::sql(format!(
                    "WITH RECURSIVE {} found more than {RECURSION_ROWS_MAX} rows (the most it may hold): give its recursive part a condition that stops it sooner",
                    r.name
                )));
            }
            self.answer.push(row.clone());
            fresh.push(row);
        }
        Ok(fresh)
    }
}

impl SubqueryRunner for Runner<'_> {
    fn rows(&self, id: usize, outer: &[Value], env: &Env) -> Result<Rc<SubRows>> {
        if let Some(r) = self.kept.borrow().get(id).and_then(Clone::clone) {
            return Ok(r);
        }
        let sub = self.subs.get(id).ok_or_else(|| Error::unexpected(format!("no subquery {id} in the statement")))?;
        let rows = Rc::new(SubRows::new(self.compute(id, sub, outer, env)?));
        // Kept for one iteration of a recursive WITH (see `forget_recursive`), held
        // against the cap as it is built rather than here, iteration after iteration.
        if sub.recursive && !sub.correlated {
            if let Some(slot) = self.kept.borrow_mut().get_mut(id) {
                *slot = Some(rows.clone());
            }
        } else if !sub.correlated {
            let bytes = rows.rows.iter().fold(self.kept_bytes.get(), |b, r| b.saturating_add(row_bytes(r)));
            if bytes > env.limits.result_bytes_max {
                return Err(env.limits.result_too_big());
            }
            self.kept_bytes.set(bytes);
            if let Some(slot) = self.kept.borrow_mut().get_mut(id) {
                *slot = Some(rows.clone());
            }
        }
        Ok(rows)
    }
}

/// The rows of `plan`'s derived tables, by level, for the enclosing row of `env` (which
/// only the sides of a set operation under ORDER BY or LIMIT may read: a subquery in FROM
/// cannot).
fn derived_rows(plan: &SelectPlan, env: &Env) -> Result<Vec<Option<SharedRows>>> {
    let mut derived = Vec::with_capacity(plan.levels.len());
    for l in &plan.levels {
        derived.push(match l.derived {
            Some(id) => {
                let runner = env.subqueries.ok_or_else(|| Error::unexpected("a derived table without the statement's subqueries"))?;
                Some(runner.rows(id, env.outer, env)?.rows.clone())
            }
            None => None,
        });
    }
    Ok(derived)
}

/// Runs `plan`, its derived tables' rows first.
fn run_plan(plan: &SelectPlan, tables: &dyn Tables, env: &Env) -> Result<ResultTable> {
    let src = tables.source(0, plan, derived_rows(plan, env)?)?;
    run_select(plan, &*src, env, tables.gathered())
}

/// Runs a statement's SELECT that has subqueries over `tables`.
pub fn run_statement(
    plan: &SelectPlan,
    subs: &[SubqueryPlan],
    tables: &dyn Tables,
    params: &[Value],
    ctx: &ExecCtx,
) -> Result<ResultTable> {
    run_statement_in(plan, subs, tables, &Env::new(params, ctx))
}

/// `run_statement` with the statement's environment at hand (an INSERT … SELECT's).
pub fn run_statement_in(plan: &SelectPlan, subs: &[SubqueryPlan], tables: &dyn Tables, env: &Env) -> Result<ResultTable> {
    let runner = Runner::new(subs, tables);
    let mut env = env.for_subquery(&[]);
    env.subqueries = Some(&runner);
    run_plan(plan, tables, &env)
}

/// Runs `f` with `env` given a runner for `subs` over `tables` (an UPDATE or DELETE
/// reading through subqueries).
pub fn with_runner<T>(subs: &[SubqueryPlan], tables: &dyn Tables, env: &Env, f: impl FnOnce(&Env) -> Result<T>) -> Result<T> {
    let runner = Runner::new(subs, tables);
    let mut env = env.for_subquery(&[]);
    env.subqueries = Some(&runner);
    f(&env)
}

/// A side's rows with its columns converted to the operation's types where they differ.
fn converted<'r>(s: &SetOpPlan, side: usize, rows: &'r [Vec<Value>]) -> std::borrow::Cow<'r, [Vec<Value>]> {
    if !s.convert[side] {
        return std::borrow::Cow::Borrowed(rows);
    }
    let conv =
        |(v, t): (&Value, &lockstep_core::DataType)| if v.is_null() { Value::Null } else { v.coerce_to(*t).unwrap_or_else(|_| v.clone()) };
    std::borrow::Cow::Owned(rows.iter().map(|r| r.iter().zip(&s.types).map(conv).collect()).collect())
}

/// `left op [ALL] right`. Rows are duplicates when every column is equal, NULL equal to
/// NULL (SQL's rule for duplicates, unlike `=`). Without ALL the answer has no duplicates;
/// with ALL, a row that is m times on the left and n times on the right is there m + n
/// times (UNION), min(m, n) times (INTERSECT) or max(m − n, 0) times (EXCEPT).
fn set_operation(s: &SetOpPlan, left: &[Vec<Value>], right: &[Vec<Value>], env: &Env) -> Result<SharedRows> {
    let (l, r) = (converted(s, 0, left), converted(s, 1, right));
    combine(s, &l, &r, env)
}

fn combine<'r>(s: &SetOpPlan, l: &'r [Vec<Value>], r: &'r [Vec<Value>], env: &Env) -> Result<SharedRows> {
    let mut out: Vec<Vec<Value>> = Vec::new();
    let mut seen: HashSet<&[Value]> = HashSet::new();
    // Each output row once without ALL.
    let mut keep = |row: &'r [Value], out: &mut Vec<Vec<Value>>| {
        if s.all || seen.insert(row) {
            out.push(row.to_vec());
        }
    };
    match s.op {
        SetOp::Union => {
            for row in l.iter().chain(r.iter()) {
                env.watch.tick()?;
                keep(row, &mut out);
            }
        }
        SetOp::Intersect | SetOp::Except => {
            let mut counts: HashMap<&[Value], usize> = HashMap::new();
            for row in r.iter() {
                env.watch.tick()?;
                *counts.entry(row).or_default() += 1;
            }
            for row in l.iter() {
                env.watch.tick()?;
                let n = counts.get_mut(&row[..]);
                let in_right = n.as_ref().is_some_and(|n| **n > 0);
                if s.all {
                    if let Some(n) = n {
                        *n = n.saturating_sub(1);
                    }
                }
                if in_right == (s.op == SetOp::Intersect) {
                    keep(row, &mut out);
                }
            }
        }
    }
    Ok(out.into())
}
