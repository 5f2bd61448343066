//! Bound scalar expressions and their evaluation, with SQL's three-valued logic.
//!
//! Columns are positions in the row the expression is evaluated on (a table row, a joined
//! row, or an aggregated row), fixed by the binder. Depth is bounded by the text's nesting
//! check and the binder (`EXPR_DEPTH_MAX`), so the recursive evaluator cannot be driven
//! arbitrarily deep.

use std::borrow::Cow;
use std::cmp::Ordering;

use lockstep_core::{decimal, DataType, Error, Result, Value};

use crate::func::{self, Func};
use crate::limits::{Limits, Watch};
use crate::ExecCtx;

/// Deepest expression the text of a statement may nest, and the binder may build, in
/// levels (generated SQL nests deep). Every level costs a frame of `Expr::eval` (under
/// 3 KB in a debug build, the largest; far less optimised), so a tree this deep would not
/// fit a 2 MiB thread (the engine's sites and tokio workers): the binder puts an
/// `Expr::Deep` every `EVAL_CHUNK_LEVELS` levels, where evaluation moves to a stack of its
/// own when little is left. `nesting` and the tests in `tests_depth` hold every entry
/// point to it.
pub const EXPR_DEPTH_MAX: usize = 1000;
/// Levels of a tree between two `Expr::Deep` stack checks.
pub const EVAL_CHUNK_LEVELS: usize = 32;
/// Stack that must be left for evaluation to go on in place at an `Expr::Deep`: room for
/// `EVAL_CHUNK_LEVELS` levels of `eval` and of the functions it calls, with margin.
const EVAL_STACK_RED_ZONE_BYTES: usize = 512 * 1024;
/// The size of each stack segment evaluation moves to when the red zone is reached.
const EVAL_STACK_SEGMENT_BYTES: usize = 4 * 1024 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// The operator with its operands swapped (`a < b` ⇔ `b > a`).
    pub fn flip(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            o => o,
        }
    }
    fn test(self, o: Ordering) -> bool {
        match self {
            CmpOp::Eq => o == Ordering::Equal,
            CmpOp::Ne => o != Ordering::Equal,
            CmpOp::Lt => o == Ordering::Less,
            CmpOp::Le => o != Ordering::Greater,
            CmpOp::Gt => o == Ordering::Greater,
            CmpOp::Ge => o != Ordering::Less,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Const(Value),
    /// Statement parameter, 0-based; already coerced to its inferred type.
    Param(usize),
    Column(usize),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Arith(ArithOp, Box<Expr>, Box<Expr>),
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Concat(Box<Expr>, Box<Expr>),
    IsNull(Box<Expr>, bool),
    InList(Box<Expr>, Vec<Expr>, bool),
    /// `x BETWEEN lo AND hi` for an `x` that is not a column, parameter or constant (those
    /// become `x >= lo AND x <= hi`, which index ranges understand): `x` is kept once, so
    /// nested BETWEENs do not double the tree at every level.
    Between(Box<Expr>, Box<Expr>, Box<Expr>),
    Like(Box<Expr>, Box<Expr>, bool),
    Case {
        operand: Option<Box<Expr>>,
        whens: Vec<(Expr, Expr)>,
        otherwise: Option<Box<Expr>>,
    },
    Func(Func, Vec<Expr>),
    Cast(Box<Expr>, DataType),
    /// Column `i` of the enclosing query's row, read by a correlated subquery (`Env::outer`).
    Outer(usize),
    /// A subquery's answer used as a value: EXISTS, IN or a scalar.
    Subquery(Box<SubqueryRef>),
    /// The expression inside, evaluated on a fresh stack segment when the stack is low: the
    /// binder puts one every `EVAL_CHUNK_LEVELS` levels of a deep tree (`add_stack_checks`).
    /// It counts as no level and is seen through by every walk of the tree.
    Deep(Box<Expr>),
}

/// A subquery inside an expression: which of the statement's subqueries (`Prepared`'s
/// list, run by `Env::subqueries`) and how its rows become a value.
#[derive(Clone, Debug, PartialEq)]
pub struct SubqueryRef {
    pub id: usize,
    pub kind: SubqueryKind,
    /// The columns of the row this expression is evaluated on that the subquery reads
    /// (as `Expr::Outer`): empty for a subquery that does not depend on the row, whose
    /// answer is computed once per statement.
    pub outer_columns: Vec<usize>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum SubqueryKind {
    /// EXISTS: whether it has a row.
    Exists,
    /// `operand [NOT] IN (subquery)` over its one column. `same_type`: the operand and
    /// the column have one type, so equality is equality of values and a hash set can
    /// answer it.
    In { operand: Expr, negated: bool, same_type: bool },
    /// Its one value: NULL when it has no row, an error when it has more than one.
    Scalar,
    /// `operand op ANY (subquery)` (`all` false; SOME is ANY) or `operand op ALL
    /// (subquery)` over its one column.
    Quantified { operand: Expr, op: CmpOp, all: bool },
}

impl SubqueryKind {
    /// The expression compared with the subquery's rows, if any.
    pub fn operand(&self) -> Option<&Expr> {
        match self {
            SubqueryKind::In { operand, .. } | SubqueryKind::Quantified { operand, .. } => Some(operand),
            SubqueryKind::Exists | SubqueryKind::Scalar => None,
        }
    }
}

/// Runs a statement's subqueries for the expressions that use them (`exec_query::Runner`).
pub trait SubqueryRunner {
    /// The rows of subquery `id`, for the enclosing row `outer` (ignored, and the answer
    /// kept, when the subquery does not depend on it).
    fn rows(&self, id: usize, outer: &[Value], env: &Env) -> Result<std::rc::Rc<SubRows>>;
}

/// A subquery's answer, with the hash set an IN looks values up in, built on first use.
pub struct SubRows {
    pub rows: std::rc::Rc<[Vec<Value>]>,
    set: std::cell::OnceCell<(std::collections::HashSet<Value>, bool)>,
}

impl SubRows {
    pub fn new(rows: std::rc::Rc<[Vec<Value>]>) -> SubRows {
        SubRows { rows, set: std::cell::OnceCell::new() }
    }

    /// The first column's values, and whether one of them is NULL.
    fn set(&self) -> &(std::collections::HashSet<Value>, bool) {
        self.set.get_or_init(|| {
            let mut has_null = false;
            let mut set = std::collections::HashSet::with_capacity(self.rows.len());
            for r in self.rows.iter() {
                match r.first() {
                    Some(Value::Null) | None => has_null = true,
                    Some(v) => {
                        set.insert(v.clone());
                    }
                }
            }
            (set, has_null)
        })
    }
}

/// What an expression may read besides the row (parameters and the transaction clock),
/// and what the statement running it may spend (its deadline's watch, its memory caps).
pub struct Env<'a> {
    pub params: &'a [Value],
    pub now_micros: i64,
    pub watch: Watch,
    pub limits: Limits,
    /// The enclosing query's row, for a correlated subquery's `Expr::Outer` columns.
    pub outer: &'a [Value],
    /// What runs the statement's subqueries; None for statements without any.
    pub subqueries: Option<&'a dyn SubqueryRunner>,
}

impl<'a> Env<'a> {
    pub fn new(params: &'a [Value], ctx: &ExecCtx) -> Env<'a> {
        Env { params, now_micros: ctx.timestamp_micros, watch: Watch::new(ctx.deadline), limits: ctx.limits, outer: &[], subqueries: None }
    }

    /// The environment of a subquery run for the enclosing row `outer`.
    pub fn for_subquery<'b>(&'b self, outer: &'b [Value]) -> Env<'b> {
        Env {
            params: self.params,
            now_micros: self.now_micros,
            watch: self.watch.child(),
            limits: self.limits,
            outer,
            subqueries: self.subqueries,
        }
    }
}

/// NULL, for a column or parameter position past the end.
static NULL: Value = Value::Null;

impl Expr {
    /// Evaluates over `row`, borrowing a constant, parameter or column instead of copying it:
    /// a filter comparing a 1 KB column must not copy it per row.
    pub fn eval_ref<'a>(&'a self, row: &'a [Value], env: &'a Env) -> Result<Cow<'a, Value>> {
        Ok(match self {
            Expr::Const(v) => Cow::Borrowed(v),
            Expr::Param(i) => Cow::Borrowed(env.params.get(*i).unwrap_or(&NULL)),
            Expr::Column(i) => Cow::Borrowed(row.get(*i).unwrap_or(&NULL)),
            e => Cow::Owned(e.eval(row, env)?),
        })
    }

    /// Evaluates over `row`.
    ///
    /// This recurses once per level of the tree, so its frame is what bounds how deep an
    /// expression may be (`EXPR_DEPTH_MAX`): the arms that need many temporaries live in
    /// functions of their own, never inlined, so that they cost stack only when they run.
    pub fn eval(&self, row: &[Value], env: &Env) -> Result<Value> {
        match self {
            Expr::Const(v) => Ok(v.clone()),
            Expr::Param(i) => Ok(env.params.get(*i).cloned().unwrap_or(Value::Null)),
            Expr::Column(i) => Ok(row.get(*i).cloned().unwrap_or(Value::Null)),
            Expr::Neg(e) => negate(e.eval(row, env)?),
            Expr::Not(e) => Ok(not(e.eval(row, env)?)),
            Expr::Arith(op, a, b) => eval_arith(*op, a, b, row, env),
            Expr::Cmp(op, a, b) => eval_cmp(*op, a, b, row, env),
            Expr::And(a, b) => eval_and(a, b, row, env),
            Expr::Or(a, b) => eval_or(a, b, row, env),
            Expr::Concat(a, b) => eval_concat(a, b, row, env),
            Expr::IsNull(e, neg) => Ok(Value::Bool(e.eval_ref(row, env)?.is_null() != *neg)),
            Expr::InList(e, list, neg) => eval_in_list(e, list, *neg, row, env),
            Expr::Between(x, lo, hi) => eval_between(x, lo, hi, row, env),
            Expr::Like(e, p, neg) => eval_like(e, p, *neg, row, env),
            Expr::Case { operand, whens, otherwise } => eval_case(operand.as_deref(), whens, otherwise.as_deref(), row, env),
            Expr::Func(f, args) => func::call(*f, args, row, env),
            Expr::Cast(e, ty) => cast(e.eval(row, env)?, *ty),
            Expr::Outer(i) => Ok(env.outer.get(*i).cloned().unwrap_or(Value::Null)),
            Expr::Subquery(sq) => eval_subquery(sq, row, env),
            Expr::Deep(e) => eval_deep(e, row, env),
        }
    }

    /// Puts an `Expr::Deep` above every `EVAL_CHUNK_LEVELS` levels of the tree, so that
    /// however deep it is, evaluation checks the stack at least that often. Returns the
    /// levels above the last check. Planning only; grows its own stack as it goes.
    pub fn add_stack_checks(&mut self) -> usize {
        stacker::maybe_grow(WALK_STACK_RED_ZONE_BYTES, WALK_STACK_SEGMENT_BYTES, || {
            let mut below = 0;
            self.each_child_mut(&mut |c| below = below.max(c.add_stack_checks()));
            if below + 1 < EVAL_CHUNK_LEVELS || matches!(self, Expr::Deep(_)) {
                return below + 1;
            }
            let inner = std::mem::replace(self, Expr::Const(Value::Null));
            *self = Expr::Deep(Box::new(inner));
            0
        })
    }

    /// Calls `f` on each direct child (a subquery's operand included).
    fn each_child_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        match self {
            Expr::Const(_) | Expr::Param(_) | Expr::Column(_) | Expr::Outer(_) => {}
            Expr::Subquery(sq) => {
                if let SubqueryKind::In { operand, .. } | SubqueryKind::Quantified { operand, .. } = &mut sq.kind {
                    f(operand);
                }
            }
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) | Expr::Deep(e) => f(e),
            Expr::Arith(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) | Expr::Concat(a, b) | Expr::Like(a, b, _) => {
                f(a);
                f(b);
            }
            Expr::InList(e, l, _) => {
                f(e);
                l.iter_mut().for_each(f);
            }
            Expr::Between(x, lo, hi) => {
                f(x);
                f(lo);
                f(hi);
            }
            Expr::Case { operand, whens, otherwise } => {
                if let Some(o) = operand {
                    f(o);
                }
                for (w, t) in whens {
                    f(w);
                    f(t);
                }
                if let Some(o) = otherwise {
                    f(o);
                }
            }
            Expr::Func(_, args) => args.iter_mut().for_each(f),
        }
    }

    /// True when the expression holds (NULL counts as false), for filters.
    pub fn holds(&self, row: &[Value], env: &Env) -> Result<bool> {
        Ok(self.eval_ref(row, env)?.truth() == Some(true))
    }

    /// Calls `f` on every column position the expression reads.
    pub fn visit_columns(&self, f: &mut dyn FnMut(usize)) {
        match self {
            Expr::Column(i) => f(*i),
            Expr::Const(_) | Expr::Param(_) | Expr::Outer(_) => {}
            Expr::Subquery(sq) => {
                if let Some(operand) = sq.kind.operand() {
                    operand.visit_columns(f);
                }
                sq.outer_columns.iter().for_each(|&c| f(c));
            }
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) | Expr::Deep(e) => e.visit_columns(f),
            Expr::Arith(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) | Expr::Concat(a, b) | Expr::Like(a, b, _) => {
                a.visit_columns(f);
                b.visit_columns(f);
            }
            Expr::InList(e, l, _) => {
                e.visit_columns(f);
                l.iter().for_each(|x| x.visit_columns(f));
            }
            Expr::Between(x, lo, hi) => {
                x.visit_columns(f);
                lo.visit_columns(f);
                hi.visit_columns(f);
            }
            Expr::Case { operand, whens, otherwise } => {
                if let Some(o) = operand {
                    o.visit_columns(f);
                }
                for (w, t) in whens {
                    w.visit_columns(f);
                    t.visit_columns(f);
                }
                if let Some(o) = otherwise {
                    o.visit_columns(f);
                }
            }
            Expr::Func(_, args) => args.iter().for_each(|x| x.visit_columns(f)),
        }
    }

    /// Rewrites every column position through `map`.
    pub fn map_columns(&mut self, map: &dyn Fn(usize) -> usize) {
        match self {
            Expr::Column(i) => *i = map(*i),
            Expr::Const(_) | Expr::Param(_) | Expr::Outer(_) => {}
            // Only the operand moves: the subquery reads the row by the positions it was
            // planned with, so the planner never moves an expression that has one
            // (`stands_alone`).
            Expr::Subquery(sq) => {
                if let SubqueryKind::In { operand, .. } | SubqueryKind::Quantified { operand, .. } = &mut sq.kind {
                    operand.map_columns(map);
                }
            }
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) | Expr::Deep(e) => e.map_columns(map),
            Expr::Arith(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) | Expr::Concat(a, b) | Expr::Like(a, b, _) => {
                a.map_columns(map);
                b.map_columns(map);
            }
            Expr::InList(e, l, _) => {
                e.map_columns(map);
                l.iter_mut().for_each(|x| x.map_columns(map));
            }
            Expr::Between(x, lo, hi) => {
                x.map_columns(map);
                lo.map_columns(map);
                hi.map_columns(map);
            }
            Expr::Case { operand, whens, otherwise } => {
                if let Some(o) = operand {
                    o.map_columns(map);
                }
                for (w, t) in whens {
                    w.map_columns(map);
                    t.map_columns(map);
                }
                if let Some(o) = otherwise {
                    o.map_columns(map);
                }
            }
            Expr::Func(_, args) => args.iter_mut().for_each(|x| x.map_columns(map)),
        }
    }

    /// Levels of the tree (a constant is 1 deep). Called on trees the binder built, which
    /// are at most a few levels deeper than `EXPR_DEPTH_MAX`, and with a frame far smaller
    /// than `eval`'s.
    pub fn depth(&self) -> usize {
        let below = match self {
            Expr::Deep(e) => return e.depth(),
            Expr::Const(_) | Expr::Param(_) | Expr::Column(_) | Expr::Outer(_) => 0,
            Expr::Subquery(sq) => sq.kind.operand().map_or(0, Expr::depth),
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) => e.depth(),
            Expr::Arith(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) | Expr::Concat(a, b) | Expr::Like(a, b, _) => {
                a.depth().max(b.depth())
            }
            Expr::InList(e, l, _) => l.iter().map(Expr::depth).fold(e.depth(), usize::max),
            Expr::Between(x, lo, hi) => x.depth().max(lo.depth()).max(hi.depth()),
            Expr::Case { operand, whens, otherwise } => {
                let mut d = operand.as_ref().map_or(0, |o| o.depth()).max(otherwise.as_ref().map_or(0, |o| o.depth()));
                for (w, t) in whens {
                    d = d.max(w.depth()).max(t.depth());
                }
                d
            }
            Expr::Func(_, args) => args.iter().map(Expr::depth).max().unwrap_or(0),
        };
        below + 1
    }

    /// The highest column position read, if any.
    pub fn max_column(&self) -> Option<usize> {
        let mut m = None;
        self.visit_columns(&mut |c| m = Some(m.map_or(c, |x: usize| x.max(c))));
        m
    }

    /// The lowest column position read, if any.
    pub fn min_column(&self) -> Option<usize> {
        let mut m = None;
        self.visit_columns(&mut |c| m = Some(m.map_or(c, |x: usize| x.min(c))));
        m
    }

    /// Splits a conjunction into its terms.
    pub fn conjuncts(self, out: &mut Vec<Expr>) {
        let mut stack = vec![self];
        while let Some(e) = stack.pop() {
            match e {
                Expr::And(a, b) => {
                    stack.push(*b);
                    stack.push(*a);
                }
                Expr::Deep(inner) if matches!(*inner, Expr::And(..)) => stack.push(*inner),
                e => out.push(e),
            }
        }
    }

    /// Whether `f` holds for a node of the tree.
    fn any(&self, f: &dyn Fn(&Expr) -> bool) -> bool {
        if f(self) {
            return true;
        }
        match self {
            Expr::Const(_) | Expr::Param(_) | Expr::Column(_) | Expr::Outer(_) => false,
            Expr::Subquery(sq) => sq.kind.operand().is_some_and(|o| o.any(f)),
            Expr::Neg(e) | Expr::Not(e) | Expr::IsNull(e, _) | Expr::Cast(e, _) | Expr::Deep(e) => e.any(f),
            Expr::Arith(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) | Expr::Concat(a, b) | Expr::Like(a, b, _) => {
                a.any(f) || b.any(f)
            }
            Expr::InList(e, l, _) => e.any(f) || l.iter().any(|x| x.any(f)),
            Expr::Between(x, lo, hi) => x.any(f) || lo.any(f) || hi.any(f),
            Expr::Case { operand, whens, otherwise } => {
                operand.as_ref().is_some_and(|o| o.any(f))
                    || otherwise.as_ref().is_some_and(|o| o.any(f))
                    || whens.iter().any(|(w, t)| w.any(f) || t.any(f))
            }
            Expr::Func(_, args) => args.iter().any(|x| x.any(f)),
        }
    }

    /// Whether a partition can evaluate the expression alone, while gathering: it runs no
    /// subquery and reads no enclosing row.
    pub fn stands_alone(&self) -> bool {
        !self.any(&|e| matches!(e, Expr::Subquery(_) | Expr::Outer(_)))
    }

    /// Whether the value depends only on the row: no parameter, clock, subquery or
    /// enclosing row (what a materialized view may compute from its source's rows).
    pub fn is_deterministic(&self) -> bool {
        !self.any(&|e| matches!(e, Expr::Param(_) | Expr::Outer(_) | Expr::Subquery(_) | Expr::Func(crate::func::Func::Now, _)))
    }

    /// True for a constant or a parameter: a value fixed for the whole statement.
    pub fn is_fixed(&self) -> bool {
        matches!(self, Expr::Const(_) | Expr::Param(_))
    }
}

/// Stack a walk of the tree over planning (`add_stack_checks`) keeps free.
const WALK_STACK_RED_ZONE_BYTES: usize = 64 * 1024;
/// The size of each stack segment such a walk moves to.
const WALK_STACK_SEGMENT_BYTES: usize = 1024 * 1024;

/// An `Expr::Deep`: goes on in place while the stack has room for the levels below it up
/// to the next check, on a fresh segment otherwise.
#[inline(never)]
fn eval_deep(e: &Expr, row: &[Value], env: &Env) -> Result<Value> {
    stacker::maybe_grow(EVAL_STACK_RED_ZONE_BYTES, EVAL_STACK_SEGMENT_BYTES, || e.eval(row, env))
}

/// A subquery's answer as a value, with SQL's rules: `x IN (…)` is true when some row
/// equals `x`, else unknown when `x` is NULL or a row is NULL, else false (so `NOT IN` of
/// a set holding a NULL is never true); over no rows IN is false whatever `x` is.
#[inline(never)]
fn eval_subquery(sq: &SubqueryRef, row: &[Value], env: &Env) -> Result<Value> {
    let runner = env.subqueries.ok_or_else(|| Error::unexpected("a subquery was evaluated where the statement's subqueries cannot run"))?;
    let outer = if sq.outer_columns.is_empty() { &[][..] } else { row };
    match &sq.kind {
        SubqueryKind::Exists => Ok(Value::Bool(!runner.rows(sq.id, outer, env)?.rows.is_empty())),
        SubqueryKind::Scalar => {
            let r = runner.rows(sq.id, outer, env)?;
            match &r.rows[..] {
                [] => Ok(Value::Null),
                [one] => Ok(one.first().cloned().unwrap_or(Value::Null)),
                more => Err(Error::sql(format!(
                    "a subquery used as a value returned {} rows; it must return at most one (add a WHERE, an aggregate or LIMIT 1)",
                    more.len()
                ))),
            }
        }
        SubqueryKind::Quantified { operand, op, all } => {
            let x = operand.eval_ref(row, env)?;
            let r = runner.rows(sq.id, outer, env)?;
            quantified(&x, *op, *all, &r.rows)
        }
        SubqueryKind::In { operand, negated, same_type } => {
            let x = operand.eval_ref(row, env)?;
            let r = runner.rows(sq.id, outer, env)?;
            let found = if r.rows.is_empty() {
                Some(false)
            } else if x.is_null() {
                None
            } else if *same_type {
                let (set, has_null) = r.set();
                if set.contains(&*x) {
                    Some(true)
                } else if *has_null {
                    None
                } else {
                    Some(false)
                }
            } else {
                let mut found = Some(false);
                for v in r.rows.iter().filter_map(|r| r.first()) {
                    match compare(CmpOp::Eq, &x, v)?.truth() {
                        Some(true) => {
                            found = Some(true);
                            break;
                        }
                        None => found = None,
                        Some(false) => {}
                    }
                }
                found
            };
            Ok(match found {
                None => Value::Null,
                Some(b) => Value::Bool(b != *negated),
            })
        }
    }
}

/// `x op ANY (rows)` is true when the comparison holds for some row, else unknown when it
/// is unknown for some row, else false (so false over no rows); `x op ALL (rows)` is false
/// when it fails for some row, else unknown when it is unknown for some, else true (so
/// true over no rows).
fn quantified(x: &Value, op: CmpOp, all: bool, rows: &[Vec<Value>]) -> Result<Value> {
    let decisive = !all;
    let mut unknown = false;
    for v in rows.iter().filter_map(|r| r.first()) {
        match compare(op, x, v)?.truth() {
            Some(b) if b == decisive => return Ok(Value::Bool(decisive)),
            Some(_) => {}
            None => unknown = true,
        }
    }
    Ok(if unknown { Value::Null } else { Value::Bool(!decisive) })
}

/// NOT: unknown stays unknown.
fn not(v: Value) -> Value {
    match v.truth() {
        None => Value::Null,
        Some(b) => Value::Bool(!b),
    }
}

fn eval_arith(op: ArithOp, a: &Expr, b: &Expr, row: &[Value], env: &Env) -> Result<Value> {
    arith(op, a.eval(row, env)?, b.eval(row, env)?)
}

/// AND, evaluating `b` only when `a` is not false.
fn eval_and(a: &Expr, b: &Expr, row: &[Value], env: &Env) -> Result<Value> {
    let x = a.eval(row, env)?.truth();
    if x == Some(false) {
        return Ok(Value::Bool(false));
    }
    Ok(match (x, b.eval(row, env)?.truth()) {
        (_, Some(false)) => Value::Bool(false),
        (Some(true), Some(true)) => Value::Bool(true),
        _ => Value::Null,
    })
}

/// OR, evaluating `b` only when `a` is not true.
fn eval_or(a: &Expr, b: &Expr, row: &[Value], env: &Env) -> Result<Value> {
    let x = a.eval(row, env)?.truth();
    if x == Some(true) {
        return Ok(Value::Bool(true));
    }
    Ok(match (x, b.eval(row, env)?.truth()) {
        (_, Some(true)) => Value::Bool(true),
        (Some(false), Some(false)) => Value::Bool(false),
        _ => Value::Null,
    })
}

/// `a op b`, comparing in place (a filter comparing a 1 KB column must not copy it).
fn eval_cmp(op: CmpOp, a: &Expr, b: &Expr, row: &[Value], env: &Env) -> Result<Value> {
    let (x, y) = (a.eval_ref(row, env)?, b.eval_ref(row, env)?);
    compare(op, &x, &y)
}

/// `x || y`: NULL when either is.
#[inline(never)]
fn eval_concat(a: &Expr, b: &Expr, row: &[Value], env: &Env) -> Result<Value> {
    Ok(match (a.eval(row, env)?, b.eval(row, env)?) {
        (Value::Null, _) | (_, Value::Null) => Value::Null,
        (x, y) => Value::Str(format!("{}{}", text_of(&x), text_of(&y)).into()),
    })
}

/// `e [NOT] IN (list)`, where an item may be an array parameter (`IN ?`).
#[inline(never)]
fn eval_in_list(e: &Expr, list: &[Expr], neg: bool, row: &[Value], env: &Env) -> Result<Value> {
    let v = e.eval_ref(row, env)?;
    if v.is_null() {
        return Ok(Value::Null);
    }
    let mut saw_null = false;
    for item in list {
        let w = item.eval_ref(row, env)?;
        if let Value::Array(items) = &*w {
            for x in items {
                match v.sql_cmp(x) {
                    Some(Ordering::Equal) => return Ok(Value::Bool(!neg)),
                    None => saw_null = true,
                    _ => {}
                }
            }
            continue;
        }
        match v.sql_cmp(&w) {
            Some(Ordering::Equal) => return Ok(Value::Bool(!neg)),
            None => saw_null = true,
            _ => {}
        }
    }
    Ok(if saw_null { Value::Null } else { Value::Bool(neg) })
}

/// `x >= lo AND x <= hi` with `x` evaluated once.
#[inline(never)]
fn eval_between(x: &Expr, lo: &Expr, hi: &Expr, row: &[Value], env: &Env) -> Result<Value> {
    let v = x.eval_ref(row, env)?;
    let ge = compare(CmpOp::Ge, &v, &*lo.eval_ref(row, env)?)?.truth();
    if ge == Some(false) {
        return Ok(Value::Bool(false));
    }
    Ok(match (ge, compare(CmpOp::Le, &v, &*hi.eval_ref(row, env)?)?.truth()) {
        (_, Some(false)) => Value::Bool(false),
        (Some(true), Some(true)) => Value::Bool(true),
        _ => Value::Null,
    })
}

#[inline(never)]
fn eval_like(e: &Expr, p: &Expr, neg: bool, row: &[Value], env: &Env) -> Result<Value> {
    Ok(match (&*e.eval_ref(row, env)?, &*p.eval_ref(row, env)?) {
        (Value::Null, _) | (_, Value::Null) => Value::Null,
        (Value::Str(s), Value::Str(pat)) => Value::Bool(like(s, pat) != neg),
        (x, _) => return Err(Error::sql(format!("LIKE needs VARCHAR operands, not {}", x.describe()))),
    })
}

#[inline(never)]
fn eval_case(operand: Option<&Expr>, whens: &[(Expr, Expr)], otherwise: Option<&Expr>, row: &[Value], env: &Env) -> Result<Value> {
    let op = match operand {
        Some(o) => Some(o.eval_ref(row, env)?),
        None => None,
    };
    for (w, then) in whens {
        let hit = match &op {
            Some(v) => v.sql_cmp(&*w.eval_ref(row, env)?) == Some(Ordering::Equal),
            None => w.eval_ref(row, env)?.truth() == Some(true),
        };
        if hit {
            return then.eval(row, env);
        }
    }
    match otherwise {
        Some(e) => e.eval(row, env),
        None => Ok(Value::Null),
    }
}

/// The text of a value in string contexts (`||`, CONCAT).
pub fn text_of(v: &Value) -> String {
    match v {
        Value::Str(s) => s.to_string(),
        other => other.to_string(),
    }
}

fn negate(v: Value) -> Result<Value> {
    Ok(match v {
        Value::Null => Value::Null,
        Value::Int(i) => Value::Int(i.checked_neg().ok_or_else(overflow)?),
        Value::Float(f) => Value::Float(-f),
        Value::Decimal(d) => Value::Decimal((-d.get()).into()),
        other => return Err(Error::sql(format!("cannot negate {}", other.describe()))),
    })
}

fn overflow() -> Error {
    Error::sql("numeric overflow in integer arithmetic")
}

fn div_zero() -> Error {
    Error::sql("division by zero")
}

/// Arithmetic with VoltDB's promotion: integers stay integers (overflow is an error),
/// any FLOAT makes FLOAT, otherwise any DECIMAL makes DECIMAL.
pub fn arith(op: ArithOp, a: Value, b: Value) -> Result<Value> {
    use Value::*;
    Ok(match (a, b) {
        (Null, _) | (_, Null) => Null,
        (Int(x), Int(y)) => Int(match op {
            ArithOp::Add => x.checked_add(y),
            ArithOp::Sub => x.checked_sub(y),
            ArithOp::Mul => x.checked_mul(y),
            ArithOp::Div => {
                if y == 0 {
                    return Err(div_zero());
                }
                x.checked_div(y)
            }
            ArithOp::Mod => {
                if y == 0 {
                    return Err(div_zero());
                }
                x.checked_rem(y)
            }
        }
        .ok_or_else(overflow)?),
        (x @ (Int(_) | Float(_) | Decimal(_)), y @ (Int(_) | Float(_) | Decimal(_))) if matches!(x, Float(_)) || matches!(y, Float(_)) => {
            let (p, q) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            if q == 0.0 && matches!(op, ArithOp::Div | ArithOp::Mod) {
                return Err(div_zero());
            }
            Float(match op {
                ArithOp::Add => p + q,
                ArithOp::Sub => p - q,
                ArithOp::Mul => p * q,
                ArithOp::Div => p / q,
                ArithOp::Mod => p % q,
            })
        }
        (x @ (Int(_) | Decimal(_)), y @ (Int(_) | Decimal(_))) => {
            let p = to_dec(&x);
            let q = to_dec(&y);
            let r = match op {
                ArithOp::Add => decimal::checked(p.checked_add(q)),
                ArithOp::Sub => decimal::checked(p.checked_sub(q)),
                ArithOp::Mul => decimal::mul(p, q),
                ArithOp::Div => {
                    if q == 0 {
                        return Err(div_zero());
                    }
                    decimal::div(p, q)
                }
                ArithOp::Mod => {
                    if q == 0 {
                        return Err(div_zero());
                    }
                    p.checked_rem(q)
                }
            };
            Decimal(r.ok_or_else(|| Error::sql("numeric overflow in DECIMAL arithmetic"))?.into())
        }
        (x, y) => return Err(Error::sql(format!("arithmetic needs numbers, not {} and {}", x.describe(), y.describe()))),
    })
}

fn to_dec(v: &Value) -> i128 {
    match v {
        Value::Int(i) => decimal::from_i64(*i),
        Value::Decimal(d) => d.get(),
        _ => 0,
    }
}

/// A comparison with NULL (or between values that cannot be compared) is unknown.
pub fn compare(op: CmpOp, x: &Value, y: &Value) -> Result<Value> {
    if x.is_null() || y.is_null() {
        return Ok(Value::Null);
    }
    match x.sql_cmp(y) {
        Some(o) => Ok(Value::Bool(op.test(o))),
        None => Err(Error::sql(format!("cannot compare {} with {}", x.describe(), y.describe()))),
    }
}

/// Total order for sorting: NULL first, then SQL order, then kind order as a tie-break.
pub fn sort_cmp(a: &Value, b: &Value) -> Ordering {
    match (a.is_null(), b.is_null()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => a.sql_cmp(b).unwrap_or_else(|| a.cmp(b)),
    }
}

/// LIKE with `%` (any run) and `_` (one character), matched without recursion.
pub fn like(s: &str, pat: &str) -> bool {
    let s: Vec<char> = s.chars().collect();
    let p: Vec<char> = pat.chars().collect();
    let (mut i, mut j) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None; // (pattern pos after %, text pos)
    while i < s.len() {
        if j < p.len() && (p[j] == '_' || (p[j] != '%' && p[j] == s[i])) {
            i += 1;
            j += 1;
        } else if j < p.len() && p[j] == '%' {
            star = Some((j + 1, i));
            j += 1;
        } else if let Some((pj, si)) = star {
            j = pj;
            i = si + 1;
            star = Some((pj, si + 1));
        } else {
            return false;
        }
    }
    while j < p.len() && p[j] == '%' {
        j += 1;
    }
    j == p.len()
}

/// CAST: like column coercion, but FLOAT/DECIMAL to integer truncates toward zero
/// and numbers to VARCHAR print plainly.
pub fn cast(v: Value, ty: DataType) -> Result<Value> {
    match (&v, ty) {
        (Value::Float(f), t) if t.is_integer() && f.is_finite() => Value::Int(f.trunc() as i64).coerce_to(t),
        (Value::Decimal(d), t) if t.is_integer() => Value::Int((d.get() / decimal::SCALE) as i64).coerce_to(t),
        _ => v.coerce_to(ty),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Env<'static> {
        Env::new(&[], &ExecCtx::new(0, 0))
    }

    fn c(v: Value) -> Box<Expr> {
        Box::new(Expr::Const(v))
    }

    #[test]
    fn three_valued_logic() {
        let t = Value::Bool(true);
        let f = Value::Bool(false);
        let n = Value::Null;
        let and = |a: &Value, b: &Value| Expr::And(c(a.clone()), c(b.clone())).eval(&[], &env()).unwrap();
        let or = |a: &Value, b: &Value| Expr::Or(c(a.clone()), c(b.clone())).eval(&[], &env()).unwrap();
        assert_eq!(and(&n, &f), f);
        assert!(and(&n, &t).is_null());
        assert_eq!(or(&n, &t), t);
        assert!(or(&n, &f).is_null());
        assert!(Expr::Not(c(n.clone())).eval(&[], &env()).unwrap().is_null());
        let in_null = Expr::InList(c(Value::Int(1)), vec![Expr::Const(Value::Int(2)), Expr::Const(Value::Null)], false);
        assert!(in_null.eval(&[], &env()).unwrap().is_null());
        let in_hit = Expr::InList(c(Value::Int(2)), vec![Expr::Const(Value::Int(2)), Expr::Const(Value::Null)], false);
        assert_eq!(in_hit.eval(&[], &env()).unwrap(), t);
    }

    #[test]
    fn integer_arithmetic_checks_overflow_and_zero() {
        assert_eq!(arith(ArithOp::Div, Value::Int(7), Value::Int(2)).unwrap(), Value::Int(3));
        assert_eq!(arith(ArithOp::Div, Value::Int(-7), Value::Int(2)).unwrap(), Value::Int(-3));
        assert_eq!(arith(ArithOp::Mod, Value::Int(-7), Value::Int(3)).unwrap(), Value::Int(-1));
        assert!(arith(ArithOp::Add, Value::Int(i64::MAX), Value::Int(1)).unwrap_err().message.contains("overflow"));
        assert!(arith(ArithOp::Div, Value::Int(1), Value::Int(0)).unwrap_err().message.contains("division by zero"));
        assert_eq!(arith(ArithOp::Mul, Value::Int(3), Value::Float(0.5)).unwrap(), Value::Float(1.5));
        let d = arith(ArithOp::Add, Value::Int(1), Value::Decimal(decimal::parse("0.25").unwrap().into())).unwrap();
        assert_eq!(d, Value::Decimal(decimal::parse("1.25").unwrap().into()));
    }

    #[test]
    fn like_patterns() {
        assert!(like("hello", "h%o"));
        assert!(like("hello", "_ello"));
        assert!(like("hello", "%"));
        assert!(like("", "%"));
        assert!(!like("hello", "h_o"));
        assert!(like("abcabc", "%abc"));
        assert!(like("a%b", "a%b"));
        assert!(!like("abd", "a%c"));
    }

    #[test]
    fn sorting_puts_null_first() {
        let mut v = vec![Value::Int(3), Value::Null, Value::Int(1)];
        v.sort_by(sort_cmp);
        assert_eq!(v, vec![Value::Null, Value::Int(1), Value::Int(3)]);
    }
}
