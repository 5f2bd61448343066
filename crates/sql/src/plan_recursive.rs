//! `WITH RECURSIVE name (cols) AS (base UNION [ALL] step) …`: the base is planned as any
//! subquery; the step is planned with `name` standing for the rows the last iteration
//! found (a derived level over `SubBody::Working`). At run time (`exec_query.rs`) the
//! base's rows start the answer, and the step runs again over each iteration's new rows
//! until it finds none, within `RECURSION_ITERATIONS_MAX` iterations and
//! `RECURSION_ROWS_MAX` rows. Without ALL, rows already in the answer are not new.

use std::sync::Arc;

use lockstep_core::{Error, Result, ResultColumn};
use sqlparser::ast::{self as ast, SetExpr};

use crate::bind::{Binder, Cte};
use crate::plan::{push_subquery, rename_columns, set_op_plan, SetOp, SubBody};

/// Most iterations of a recursive WITH's step (the depth of a tree walk, the length of a
/// counted series).
pub const RECURSION_ITERATIONS_MAX: usize = 100_000;
/// Most rows a recursive WITH's answer may hold.
pub const RECURSION_ROWS_MAX: usize = 1_000_000;

#[derive(Clone, Debug)]
pub struct RecursivePlan {
    pub name: String,
    /// Subquery ids: the base, the step, and the working rows the step reads.
    pub base: usize,
    pub step: usize,
    pub working: usize,
    /// UNION ALL: every row found is kept; UNION: each row once.
    pub all: bool,
    /// The answer's columns (the base's types, under the WITH's names).
    pub columns: Arc<[ResultColumn]>,
    /// The step's columns have other types than the base's: its values are converted.
    pub convert_step: bool,
}

/// A part of the WITH's query as a query of its own.
fn part(whole: &ast::Query, body: &SetExpr) -> ast::Query {
    let mut q = whole.clone();
    q.body = Box::new(body.clone());
    q
}

/// Plans WITH entry `i` (declared RECURSIVE) read in FROM: its subquery id, or None when
/// its query is not `base UNION [ALL] step` with a step that reads its name (then it is an
/// ordinary WITH entry).
pub fn plan(b: &mut Binder, i: usize) -> Result<Option<usize>> {
    let cte = b.ctes[i].clone();
    let q = &cte.query;
    let SetExpr::SetOperation { op: ast::SetOperator::Union, set_quantifier, left, right } = q.body.as_ref() else {
        return Ok(None);
    };
    let all = match set_quantifier {
        ast::SetQuantifier::All => true,
        ast::SetQuantifier::Distinct | ast::SetQuantifier::None => false,
        other => return Err(Error::sql(format!("UNION {other} is not supported in WITH RECURSIVE {}", cte.name))),
    };
    let in_with = |e: Error| e.context(format!("in WITH RECURSIVE {}", cte.name));
    if q.order_by.is_some() || q.limit_clause.is_some() || q.with.is_some() {
        return Err(in_with(Error::sql(
            "ORDER BY, LIMIT and WITH are not supported around a recursive UNION: put them in the query that reads it",
        )));
    }
    // The base does not see the name (PostgreSQL refuses a reference there too).
    let later = b.ctes.split_off(i);
    let planned = plan_parts(b, &cte, q, left, right);
    b.ctes.extend(later);
    let Parts { base, step, working, used, columns } = planned.map_err(in_with)?;
    if !used {
        // Not recursive after all: a plain UNION of the two parts.
        let plan = set_op_plan(b, SetOp::Union, all, base, step).map_err(in_with)?;
        return Ok(Some(push_subquery(b, SubBody::SetOp(plan))));
    }
    let step_cols = &b.subqueries[step].columns;
    if step_cols.len() != columns.len() {
        return Err(in_with(Error::sql(format!(
            "the recursive part selects {} columns, the base {}: they must have as many",
            step_cols.len(),
            columns.len()
        ))));
    }
    let mut convert_step = false;
    for (k, (s, c)) in step_cols.iter().zip(columns.iter()).enumerate() {
        if s.ty == c.ty || (s.ty.is_integer() && c.ty.is_integer()) {
            continue;
        }
        let numbers = s.ty.is_numeric() && c.ty.is_numeric();
        if !numbers && !is_untyped_null(b, step, k) {
            return Err(in_with(Error::sql(format!(
                "column {} is {} in the base and {} in the recursive part: cast one so they match",
                k + 1,
                c.ty.sql_name(),
                s.ty.sql_name()
            ))));
        }
        convert_step = true;
    }
    let plan = RecursivePlan { name: cte.name.clone(), base, step, working, all, columns, convert_step };
    Ok(Some(push_subquery(b, SubBody::Recursive(plan))))
}

/// A bare NULL in the step's output (typed as VARCHAR): it takes the base's type.
fn is_untyped_null(b: &Binder, step: usize, k: usize) -> bool {
    match &b.subqueries[step].body {
        SubBody::Select(p) => matches!(p.output.get(k), Some(crate::expr::Expr::Const(lockstep_core::Value::Null))),
        _ => false,
    }
}

struct Parts {
    base: usize,
    step: usize,
    working: usize,
    /// The step read the working rows.
    used: bool,
    columns: Arc<[ResultColumn]>,
}

/// Plans the base, then the step with the WITH's name standing for the working rows; the
/// step and every subquery in it are marked to run again in each iteration.
fn plan_parts(b: &mut Binder, cte: &Cte, q: &ast::Query, left: &SetExpr, right: &SetExpr) -> Result<Parts> {
    let (base, _) = b.plan_subquery(&part(q, left), &[], true)?;
    let mut cols = b.subqueries[base].columns.to_vec();
    rename_columns(&mut cols, &cte.alias)?;
    let columns: Arc<[ResultColumn]> = cols.into();
    let working = push_subquery(b, SubBody::Working(columns.clone()));
    b.subqueries[working].recursive = true;
    b.ctes.push(Cte { working: Some(working), recursive: false, ..cte.clone() });
    let reads = b.working_reads;
    let first = b.subqueries.len();
    let planned = b.plan_subquery(&part(q, right), &[], true);
    b.ctes.pop();
    let (step, _) = planned?;
    for sq in &mut b.subqueries[first..] {
        sq.recursive = true;
    }
    Ok(Parts { base, step, working, used: b.working_reads > reads, columns })
}
