//! Name resolution and typing: sqlparser expressions become bound `Expr`s with types.
//!
//! Columns resolve against a scope of FROM sources laid out side by side; aggregates are
//! collected into an `AggCtx` so that, after grouping, expressions read the aggregated row
//! `[group keys…, aggregate results…]`.

use std::sync::Arc;

use lockstep_core::{decimal, Catalog, DataType, Error, Result, TableDef, Value};
use sqlparser::ast::{self as ast, BinaryOperator, DuplicateTreatment, FunctionArg, FunctionArgExpr, FunctionArguments, UnaryOperator};

use crate::expr::{ArithOp, CmpOp, Expr, SubqueryKind, SubqueryRef, EXPR_DEPTH_MAX};
use crate::func::{self, Field, Func, TrimSide};

/// One FROM item: a table or view under its alias, occupying columns `offset..offset+width`.
#[derive(Clone, Debug)]
pub struct Source {
    pub name: String,
    pub table: Arc<TableDef>,
    pub offset: usize,
}

impl Source {
    pub fn width(&self) -> usize {
        self.table.columns.len()
    }
}

/// An expression with its type (None when unknown: NULL, or an untyped parameter).
#[derive(Clone, Debug)]
pub struct Typed {
    pub expr: Expr,
    pub ty: Option<DataType>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggFunc {
    CountStar,
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

#[derive(Clone, Debug, PartialEq)]
pub struct AggSpec {
    pub func: AggFunc,
    pub distinct: bool,
    /// The argument, over the input row (None for COUNT(*)).
    pub arg: Option<Expr>,
    pub ty: DataType,
}

/// Grouping of a SELECT: group keys and aggregates over the input row.
#[derive(Clone, Debug, Default)]
pub struct AggCtx {
    pub group: Vec<Expr>,
    pub aggs: Vec<AggSpec>,
}

/// Stack left below which `bind` moves to a new stack segment: more than one level of
/// binding needs (about 22 KB in a debug build), with room for what it calls.
const BIND_STACK_RED_ZONE_BYTES: usize = 128 * 1024;
/// Size of each stack segment `bind` adds when it runs short.
const BIND_STACK_SEGMENT_BYTES: usize = 1024 * 1024;

/// Deepest a statement may nest subqueries (a subquery inside a subquery …, derived
/// tables and views included). Each level runs inside the one above it, on the same stack.
pub const SUBQUERY_DEPTH_MAX: usize = 8;

/// A query enclosing the subquery being bound: the sources its columns come from.
struct OuterScope {
    sources: Vec<Source>,
    /// Its group keys, when it groups: its expressions then read the aggregated row
    /// `[keys…, aggregates…]`, where a correlated subquery may read a key.
    group: Option<Vec<Expr>>,
    /// A subquery in FROM (or a view): it may not read the enclosing query's columns.
    barrier: bool,
}

/// A common table expression: a named query, planned as a derived table where it is read.
#[derive(Clone)]
pub struct Cte {
    pub name: String,
    pub query: ast::Query,
    /// The `name (col, …)` alias, applied as a derived table's column names are.
    pub alias: ast::TableAlias,
    /// Declared in `WITH RECURSIVE`: its query may read its own name.
    pub recursive: bool,
    /// Inside its own recursive part: the subquery id of the rows the last iteration
    /// found, which its name then stands for (`SubBody::Working`).
    pub working: Option<usize>,
}

pub struct Binder<'c> {
    /// For planning subqueries; None where only expressions are bound.
    pub(crate) catalog: Option<&'c Catalog>,
    /// Every subquery of the statement, by id (`Expr::Subquery`, `Level::derived`).
    pub subqueries: Vec<crate::plan::SubqueryPlan>,
    /// The queries enclosing the one being bound, innermost last.
    outer: Vec<OuterScope>,
    /// Columns of the enclosing query read by the subquery being bound.
    outer_refs: Vec<usize>,
    /// Lower-case names of the tables and plain views the statement reads, for a plain
    /// view's dependencies.
    pub reads: Vec<String>,
    /// The common table expressions (`WITH name AS (…)`) in scope, innermost last.
    pub ctes: Vec<Cte>,
    pub param_types: Vec<Option<DataType>>,
    pub agg: Option<AggCtx>,
    /// Aggregate calls are collected (true) or only noticed (false, via `saw_agg`).
    agg_active: bool,
    pub saw_agg: bool,
    depth: usize,
    /// Join in FROM's written order with nested loops only, as the planner did before it
    /// chose orders (the reference plan the join tests compare against).
    pub written_join_order: bool,
    /// Reads of a recursive WITH's working rows so far: its recursive part is recursive
    /// only if it makes one.
    pub working_reads: usize,
}

/// The upper-cased name of an unquoted identifier; quoted identifiers keep their case.
pub fn ident_name(id: &ast::Ident) -> String {
    match id.quote_style {
        Some(_) => id.value.clone(),
        None => id.value.to_ascii_uppercase(),
    }
}

/// The last part of an object name (schema prefixes are ignored).
pub fn object_name(n: &ast::ObjectName) -> Result<String> {
    match n.0.last().and_then(|p| p.as_ident()) {
        Some(id) => Ok(ident_name(id)),
        None => Err(Error::sql(format!("bad name {n}"))),
    }
}

/// A column type by SQL name (DDL and CAST share it).
pub fn type_from_name(word: &str) -> Option<DataType> {
    Some(match word.to_ascii_uppercase().as_str() {
        "TINYINT" => DataType::TinyInt,
        "SMALLINT" => DataType::SmallInt,
        "INT" | "INTEGER" => DataType::Integer,
        "BIGINT" => DataType::BigInt,
        "FLOAT" | "DOUBLE" | "REAL" => DataType::Float,
        "DECIMAL" | "NUMERIC" | "DEC" => DataType::Decimal,
        "VARCHAR" | "CHAR" | "CHARACTER" | "TEXT" | "STRING" => DataType::Varchar,
        "VARBINARY" | "BINARY" | "BYTEA" => DataType::Varbinary,
        "TIMESTAMP" | "DATETIME" => DataType::Timestamp,
        "BOOLEAN" | "BOOL" => DataType::Boolean,
        "GEOGRAPHY_POINT" => DataType::GeographyPoint,
        "GEOGRAPHY" => DataType::Geography,
        _ => return None,
    })
}

fn unsupported(what: impl std::fmt::Display) -> Error {
    Error::sql(format!("{what} is not supported"))
}

/// A numeric literal: BIGINT when integral and in range, DECIMAL with a point, else FLOAT.
pub fn number_literal(s: &str) -> Result<Value> {
    if let Ok(i) = s.parse::<i64>() {
        return Ok(Value::Int(i));
    }
    if !s.contains(['e', 'E']) {
        if let Some(d) = decimal::parse(s) {
            return Ok(Value::Decimal(d.into()));
        }
    }
    s.parse::<f64>().map(Value::Float).map_err(|_| Error::sql(format!("bad number {s}")))
}

fn is_agg_name(name: &str) -> Option<AggFunc> {
    Some(match name {
        "COUNT" => AggFunc::Count,
        "SUM" => AggFunc::Sum,
        "MIN" => AggFunc::Min,
        "MAX" => AggFunc::Max,
        "AVG" => AggFunc::Avg,
        _ => return None,
    })
}

fn function_name(f: &ast::Function) -> String {
    f.name.to_string().to_ascii_uppercase()
}

/// The plain argument expressions of a call; `*` gives None.
fn function_args(f: &ast::Function) -> Result<(Vec<Option<&ast::Expr>>, bool)> {
    if f.over.is_some() || f.filter.is_some() || !f.within_group.is_empty() {
        return Err(unsupported(format!("window or filtered aggregate {}", f.name)));
    }
    match &f.args {
        FunctionArguments::None => Ok((vec![], false)),
        FunctionArguments::Subquery(_) => Err(unsupported("a subquery as a function argument")),
        FunctionArguments::List(list) => {
            if !list.clauses.is_empty() {
                return Err(unsupported(format!("clauses in {}(…)", f.name)));
            }
            let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
            let mut out = Vec::new();
            for a in &list.args {
                match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => out.push(Some(e)),
                    FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => out.push(None),
                    _ => return Err(unsupported(format!("argument {a} of {}", f.name))),
                }
            }
            Ok((out, distinct))
        }
    }
}

impl<'c> Binder<'c> {
    pub fn new(param_count: usize, catalog: Option<&'c Catalog>) -> Binder<'c> {
        Binder {
            catalog,
            subqueries: Vec::new(),
            outer: Vec::new(),
            outer_refs: Vec::new(),
            reads: Vec::new(),
            ctes: Vec::new(),
            param_types: vec![None; param_count],
            agg: None,
            agg_active: false,
            saw_agg: false,
            depth: 0,
            written_join_order: false,
            working_reads: 0,
        }
    }

    /// Plans `q` as a subquery of a query whose columns are `scope` (none for a `barrier`:
    /// a subquery in FROM). Returns its id and the columns of `scope` it reads.
    pub fn plan_subquery(&mut self, q: &ast::Query, scope: &[Source], barrier: bool) -> Result<(usize, Vec<usize>)> {
        let catalog = self.catalog.ok_or_else(|| unsupported("a subquery here"))?;
        if self.outer.len() >= SUBQUERY_DEPTH_MAX {
            return Err(Error::sql(format!("subqueries are nested more than {SUBQUERY_DEPTH_MAX} deep: simplify the statement")));
        }
        // The subquery binds with state of its own; the enclosing query's comes back after.
        let agg = self.agg.take();
        let (agg_active, saw_agg) = (self.agg_active, self.saw_agg);
        let refs = std::mem::take(&mut self.outer_refs);
        self.agg_active = false;
        self.saw_agg = false;
        self.outer.push(OuterScope { sources: scope.to_vec(), group: agg.as_ref().map(|a| a.group.clone()), barrier });
        let r = crate::plan::plan_subquery_body(catalog, self, q);
        self.outer.pop();
        let mut read = std::mem::replace(&mut self.outer_refs, refs);
        self.agg = agg;
        self.agg_active = agg_active;
        self.saw_agg = saw_agg;
        let id = r?;
        read.sort_unstable();
        read.dedup();
        if let Some(sq) = self.subqueries.get_mut(id) {
            sq.correlated = !read.is_empty();
        }
        Ok((id, read))
    }

    /// EXISTS asks only whether there is a row: a subquery that neither groups nor has a
    /// LIMIT of its own stops at its first (after its OFFSET, if it has one).
    fn stop_at_first_row(&mut self, id: usize) {
        if let Some(crate::plan::SubBody::Select(p)) = self.subqueries.get_mut(id).map(|s| &mut s.body) {
            if p.agg.is_none() && p.limit.is_none() {
                p.limit = Some(Expr::Const(Value::Int(1)));
            }
        }
    }

    /// How many reads of the enclosing query's columns the subquery being planned has made
    /// so far: a side of a set operation that adds some depends on the enclosing row.
    pub fn outer_reads(&self) -> usize {
        self.outer_refs.len()
    }

    /// The one column of subquery `id` (IN and scalar subqueries), or an error naming `what`.
    fn single_column(&self, id: usize, what: &str) -> Result<DataType> {
        let cols = &self.subqueries[id].columns;
        match &cols[..] {
            [c] => Ok(c.ty),
            _ => Err(Error::sql(format!("the subquery of {what} must return one column, not {}", cols.len()))),
        }
    }

    fn subquery_expr(&mut self, e: &ast::Expr, scope: &[Source]) -> Result<Typed> {
        let boolean = Some(DataType::Boolean);
        let sub = |id, kind, outer_columns| Expr::Subquery(Box::new(SubqueryRef { id, kind, outer_columns }));
        Ok(match e {
            ast::Expr::Exists { subquery, negated } => {
                let (id, refs) = self.plan_subquery(subquery, scope, false)?;
                self.stop_at_first_row(id);
                let x = sub(id, SubqueryKind::Exists, refs);
                Typed { expr: if *negated { Expr::Not(Box::new(x)) } else { x }, ty: boolean }
            }
            ast::Expr::InSubquery { expr, subquery, negated } => {
                let x = self.bind(expr, scope)?;
                let (id, refs) = self.plan_subquery(subquery, scope, false)?;
                let ty = self.single_column(id, "IN")?;
                self.infer_param(&x, Some(ty));
                check_comparable(x.ty, Some(ty))?;
                let x_ty = self.param_aware_type(&x);
                // Values of one type (any integer width is one Int) are equal exactly when
                // their hashes agree; FLOAT's -0.0 and 0.0 are not, so FLOAT compares.
                let same_type = x_ty.is_some_and(|t| (t == ty && t != DataType::Float) || (t.is_integer() && ty.is_integer()));
                let kind = SubqueryKind::In { operand: coerce_const(x.expr, Some(ty)), negated: *negated, same_type };
                Typed { expr: sub(id, kind, refs), ty: boolean }
            }
            ast::Expr::AnyOp { left, compare_op, right, .. } | ast::Expr::AllOp { left, compare_op, right } => {
                let all = matches!(e, ast::Expr::AllOp { .. });
                let word = if all { "ALL" } else { "ANY" };
                let ast::Expr::Subquery(q) = right.as_ref() else {
                    return Err(unsupported(format!("{word} over anything but a subquery")));
                };
                let op = match compare_op {
                    BinaryOperator::Eq => CmpOp::Eq,
                    BinaryOperator::NotEq => CmpOp::Ne,
                    BinaryOperator::Lt => CmpOp::Lt,
                    BinaryOperator::LtEq => CmpOp::Le,
                    BinaryOperator::Gt => CmpOp::Gt,
                    BinaryOperator::GtEq => CmpOp::Ge,
                    other => return Err(unsupported(format!("{other} {word}"))),
                };
                let x = self.bind(left, scope)?;
                let (id, refs) = self.plan_subquery(q, scope, false)?;
                let ty = self.single_column(id, word)?;
                self.infer_param(&x, Some(ty));
                check_comparable(x.ty, Some(ty))?;
                let kind = SubqueryKind::Quantified { operand: coerce_const(x.expr, Some(ty)), op, all };
                Typed { expr: sub(id, kind, refs), ty: boolean }
            }
            ast::Expr::Subquery(q) => {
                let (id, refs) = self.plan_subquery(q, scope, false)?;
                let ty = self.single_column(id, "a scalar subquery")?;
                Typed { expr: sub(id, SubqueryKind::Scalar, refs), ty: Some(ty) }
            }
            other => return Err(unsupported(format!("expression {other}"))),
        })
    }

    /// A column of the query being bound, or else of the query enclosing it (a correlated
    /// subquery), as `Expr::Outer`.
    fn column_or_outer(&mut self, scope: &[Source], qual: Option<&ast::Ident>, col: &ast::Ident) -> Result<Typed> {
        let err = match self.column(scope, qual, col) {
            Ok(t) => return Ok(t),
            Err(e) => e,
        };
        let Some(top) = self.outer.last() else {
            return Err(err);
        };
        let (sources, group, barrier) = (top.sources.clone(), top.group.clone(), top.barrier);
        if barrier {
            return Err(err);
        }
        match self.column(&sources, qual, col) {
            Ok(Typed { expr: Expr::Column(pos), ty }) => {
                // Over a grouped query's aggregated row, a column is there as a group key.
                let pos = match &group {
                    None => pos,
                    Some(keys) => keys.iter().position(|k| *k == Expr::Column(pos)).ok_or_else(|| {
                        Error::sql(format!(
                            "a subquery in a grouped query's select list, HAVING or ORDER BY may read only its GROUP BY columns, not {}",
                            display_name(qual, col)
                        ))
                    })?,
                };
                self.outer_refs.push(pos);
                Ok(Typed { expr: Expr::Outer(pos), ty })
            }
            Ok(t) => Ok(t),
            Err(_) => {
                let further = self.outer.iter().rev().skip(1).take_while(|o| !o.barrier).any(|o| {
                    let name = ident_name(col);
                    o.sources
                        .iter()
                        .any(|s| qual.is_none_or(|q| s.name.eq_ignore_ascii_case(&ident_name(q))) && s.table.column_index(&name).is_some())
                });
                if further {
                    return Err(unsupported(format!(
                        "a subquery reading {} of a query two or more levels out (only the query right around it)",
                        display_name(qual, col)
                    )));
                }
                Err(err)
            }
        }
    }

    /// Starts collecting aggregates over `group` keys.
    pub fn start_grouping(&mut self, group: Vec<Typed>) {
        self.agg = Some(AggCtx { group: group.into_iter().map(|g| g.expr).collect(), aggs: Vec::new() });
        self.agg_active = true;
    }

    /// Ends the grouping of one SELECT (the next side of a set operation starts without
    /// one): its keys and aggregates.
    pub fn end_grouping(&mut self) -> Option<AggCtx> {
        self.agg_active = false;
        self.agg.take()
    }

    /// Binds an expression over the aggregated row (when grouping) or the input row.
    ///
    /// Recursion here costs tens of KB of stack per level in debug builds, so each level
    /// runs on a stack that `stacker` extends on the heap when little is left (as
    /// sqlparser's parser does): binding never overflows whatever thread prepares.
    /// The tree it returns is at most `EXPR_DEPTH_MAX` deep, which is what bounds the
    /// evaluator's recursion.
    pub fn bind(&mut self, e: &ast::Expr, scope: &[Source]) -> Result<Typed> {
        if self.depth >= EXPR_DEPTH_MAX {
            return Err(too_deep());
        }
        self.depth += 1;
        let r = stacker::maybe_grow(BIND_STACK_RED_ZONE_BYTES, BIND_STACK_SEGMENT_BYTES, || self.bind_inner(e, scope));
        self.depth -= 1;
        match r {
            // Some forms build more levels than they have (NOT BETWEEN, say): check the
            // whole tree once it is built.
            Ok(t) if self.depth == 0 && t.expr.depth() > EXPR_DEPTH_MAX => Err(too_deep()),
            Ok(mut t) if self.depth == 0 => {
                t.expr.add_stack_checks();
                Ok(t)
            }
            r => r,
        }
    }

    /// Binds over the input row only, reporting whether an aggregate call was present.
    pub fn bind_input(&mut self, e: &ast::Expr, scope: &[Source]) -> (Result<Typed>, bool) {
        let (active, saw) = (self.agg_active, self.saw_agg);
        self.agg_active = false;
        self.saw_agg = false;
        let r = self.bind(e, scope);
        let had = self.saw_agg;
        self.agg_active = active;
        self.saw_agg = saw;
        (r, had)
    }

    /// Maps an input expression onto the aggregated row, if it is a group key.
    fn group_position(&self, e: &Expr) -> Option<usize> {
        self.agg.as_ref()?.group.iter().position(|g| g == e)
    }

    /// Re-expresses an input column for the aggregated row (for `*` with GROUP BY).
    pub fn grouped_column(&self, e: Expr, ty: Option<DataType>, name: &str) -> Result<Typed> {
        match self.group_position(&e) {
            Some(k) => Ok(Typed { expr: Expr::Column(k), ty }),
            None => Err(not_grouped(name)),
        }
    }

    fn bind_inner(&mut self, e: &ast::Expr, scope: &[Source]) -> Result<Typed> {
        if self.agg_active {
            if let ast::Expr::Function(f) = e {
                if is_agg_name(&function_name(f)).is_some() {
                    return self.bind_aggregate(f, scope);
                }
            }
            // The trial binds this same node again: it is not a level deeper. When it is
            // dropped, so are the subqueries it planned (binding again plans them anew).
            let mark = self.subqueries.len();
            self.depth -= 1;
            let (trial, had_agg) = self.bind_input(e, scope);
            self.depth += 1;
            if had_agg {
                self.subqueries.truncate(mark);
            }
            if !had_agg {
                let t = trial?;
                if let Some(k) = self.group_position(&t.expr) {
                    return Ok(Typed { expr: Expr::Column(k), ty: t.ty });
                }
                if t.expr.max_column().is_none() {
                    return Ok(t);
                }
                if let ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) = e {
                    return Err(not_grouped(&e.to_string()));
                }
            }
        }
        self.bind_node(e, scope)
    }

    fn bind_node(&mut self, e: &ast::Expr, scope: &[Source]) -> Result<Typed> {
        use ast::Expr as A;
        Ok(match e {
            A::Identifier(id) if crate::migrate::is_migrating_word(id, scope) => self.bind_migrating(scope)?,
            A::Identifier(id) => self.column_or_outer(scope, None, id)?,
            A::CompoundIdentifier(parts) => match parts.as_slice() {
                [t, c] => self.column_or_outer(scope, Some(t), c)?,
                _ => return Err(Error::sql(format!("unsupported column reference {e}"))),
            },
            A::Value(v) => self.literal(&v.value)?,
            A::Nested(inner) => self.bind(inner, scope)?,
            A::UnaryOp { op, expr } => {
                let t = self.bind(expr, scope)?;
                match op {
                    UnaryOperator::Minus => {
                        if let Expr::Const(v) = &t.expr {
                            if !v.is_null() {
                                return Ok(Typed {
                                    expr: Expr::Const(crate::expr::arith(ArithOp::Sub, Value::Int(0), v.clone())?),
                                    ty: t.ty,
                                });
                            }
                        }
                        self.numeric_operand(&t, "unary minus")?;
                        Typed { ty: t.ty.map(widen), expr: Expr::Neg(Box::new(t.expr)) }
                    }
                    UnaryOperator::Plus => t,
                    UnaryOperator::Not => Typed { expr: Expr::Not(Box::new(t.expr)), ty: Some(DataType::Boolean) },
                    other => return Err(unsupported(format!("operator {other}"))),
                }
            }
            A::BinaryOp { left, op, right } => self.binary(left, op, right, scope)?,
            A::IsNull(x) | A::IsNotNull(x) => {
                let t = self.bind(x, scope)?;
                Typed { expr: Expr::IsNull(Box::new(t.expr), matches!(e, A::IsNotNull(_))), ty: Some(DataType::Boolean) }
            }
            A::InList { expr, list, negated } => {
                let l = self.bind(expr, scope)?;
                let mut items = Vec::with_capacity(list.len());
                for x in list {
                    let mut t = self.bind(x, scope)?;
                    self.infer_param(&t, l.ty);
                    t.expr = coerce_const(t.expr, l.ty);
                    items.push(t.expr);
                }
                Typed { expr: Expr::InList(Box::new(l.expr), items, *negated), ty: Some(DataType::Boolean) }
            }
            A::Between { expr, negated, low, high } => {
                let x = self.bind(expr, scope)?;
                let lo = self.bind(low, scope)?;
                let hi = self.bind(high, scope)?;
                let both = if matches!(x.expr, Expr::Column(_) | Expr::Param(_) | Expr::Const(_)) {
                    let ge = self.comparison(CmpOp::Ge, x.clone(), lo)?;
                    let le = self.comparison(CmpOp::Le, x, hi)?;
                    Expr::And(Box::new(ge), Box::new(le))
                } else {
                    let lo = self.compared_with(&x, lo)?;
                    let hi = self.compared_with(&x, hi)?;
                    Expr::Between(Box::new(x.expr), Box::new(lo), Box::new(hi))
                };
                Typed { expr: if *negated { Expr::Not(Box::new(both)) } else { both }, ty: Some(DataType::Boolean) }
            }
            A::Like { negated, any, expr, pattern, escape_char } => {
                if *any || escape_char.is_some() {
                    return Err(unsupported("LIKE ANY / LIKE … ESCAPE"));
                }
                let x = self.bind(expr, scope)?;
                let p = self.bind(pattern, scope)?;
                self.infer_param(&x, Some(DataType::Varchar));
                self.infer_param(&p, Some(DataType::Varchar));
                for t in [&x, &p] {
                    if let Some(ty) = t.ty {
                        if ty != DataType::Varchar {
                            return Err(Error::sql(format!("LIKE needs VARCHAR operands, not {}", ty.sql_name())));
                        }
                    }
                }
                Typed { expr: Expr::Like(Box::new(x.expr), Box::new(p.expr), *negated), ty: Some(DataType::Boolean) }
            }
            A::Case { operand, conditions, else_result, .. } => {
                let op = match operand {
                    Some(o) => Some(self.bind(o, scope)?),
                    None => None,
                };
                let mut whens = Vec::new();
                let mut ty = None;
                for w in conditions {
                    let c = self.bind(&w.condition, scope)?;
                    if let Some(o) = &op {
                        self.infer_param(&c, o.ty);
                    }
                    let r = self.bind(&w.result, scope)?;
                    ty = merge_type(ty, r.ty);
                    whens.push((c.expr, r.expr));
                }
                let otherwise = match else_result {
                    Some(x) => {
                        let r = self.bind(x, scope)?;
                        ty = merge_type(ty, r.ty);
                        Some(Box::new(r.expr))
                    }
                    None => None,
                };
                Typed { expr: Expr::Case { operand: op.map(|o| Box::new(o.expr)), whens, otherwise }, ty }
            }
            A::Cast { expr, data_type, format, .. } => {
                if format.is_some() {
                    return Err(unsupported("CAST … FORMAT"));
                }
                let name = data_type.to_string();
                let word = name.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or("");
                let ty = type_from_name(word).ok_or_else(|| Error::sql(format!("unknown type {name} in CAST")))?;
                let t = self.bind(expr, scope)?;
                self.infer_param(&t, Some(ty));
                Typed { expr: Expr::Cast(Box::new(t.expr), ty), ty: Some(ty) }
            }
            A::Extract { field, expr, .. } => {
                let f = Field::parse(&field.to_string()).ok_or_else(|| unsupported(format!("EXTRACT of {field}")))?;
                {
                    let a = self.bind(expr, scope)?;
                    self.call(Func::Extract(f), vec![a])?
                }
            }
            A::Ceil { expr, field } | A::Floor { expr, field } => {
                if !matches!(field, ast::CeilFloorKind::DateTimeField(ast::DateTimeField::NoDateTime)) {
                    return Err(unsupported(format!("{e}")));
                }
                let f = if matches!(e, A::Ceil { .. }) { Func::Ceiling } else { Func::Floor };
                let a = self.bind(expr, scope)?;
                self.call(f, vec![a])?
            }
            A::Position { expr, r#in } => {
                let a = self.bind(expr, scope)?;
                let b = self.bind(r#in, scope)?;
                self.call(Func::Position, vec![a, b])?
            }
            A::Substring { expr, substring_from, substring_for, .. } => {
                let mut args = vec![self.bind(expr, scope)?];
                match substring_from {
                    Some(f) => args.push(self.bind(f, scope)?),
                    None => return Err(Error::sql("SUBSTRING takes 2 to 3 arguments: SUBSTRING(s, from [, length])")),
                }
                if let Some(f) = substring_for {
                    args.push(self.bind(f, scope)?);
                }
                self.call(Func::Substring, args)?
            }
            A::Trim { trim_where, trim_what, expr, trim_characters } => {
                if trim_characters.is_some() {
                    return Err(unsupported("TRIM with a character list"));
                }
                let side = match trim_where {
                    Some(ast::TrimWhereField::Leading) => TrimSide::Leading,
                    Some(ast::TrimWhereField::Trailing) => TrimSide::Trailing,
                    _ => TrimSide::Both,
                };
                let mut args = vec![self.bind(expr, scope)?];
                if let Some(w) = trim_what {
                    args.push(self.bind(w, scope)?);
                }
                self.call(Func::Trim(side), args)?
            }
            A::Function(f) => self.function(f, scope)?,
            A::InSubquery { .. } | A::Exists { .. } | A::Subquery(_) | A::AnyOp { .. } | A::AllOp { .. } => self.subquery_expr(e, scope)?,
            A::IsTrue(_) | A::IsFalse(_) | A::IsNotTrue(_) | A::IsNotFalse(_) => return Err(unsupported(format!("{e}"))),
            A::TypedString(ts) => {
                let word = ts.data_type.to_string();
                let ty = type_from_name(word.split('(').next().unwrap_or("")).ok_or_else(|| unsupported(format!("literal {e}")))?;
                let s = match &ts.value.value {
                    ast::Value::SingleQuotedString(s) => s.clone(),
                    _ => return Err(unsupported(format!("literal {e}"))),
                };
                Typed { expr: Expr::Const(Value::Str(s.into()).coerce_to(ty)?), ty: Some(ty) }
            }
            other => return Err(unsupported(format!("expression {other}"))),
        })
    }

    fn column(&mut self, scope: &[Source], qual: Option<&ast::Ident>, col: &ast::Ident) -> Result<Typed> {
        let name = ident_name(col);
        if qual.is_none() && scope.iter().all(|s| s.table.column_index(&name).is_none()) {
            // VoltDB accepts these niladic functions without parentheses.
            match name.as_str() {
                "CURRENT_TIMESTAMP" | "NOW" => return self.call(Func::Now, vec![]),
                _ => {}
            }
        }
        let mut found: Option<(usize, DataType, &str)> = None;
        let q = qual.map(ident_name);
        let mut matched_qual = false;
        for s in scope {
            if let Some(q) = &q {
                if !s.name.eq_ignore_ascii_case(q) {
                    continue;
                }
                matched_qual = true;
            }
            if let Some(i) = s.table.column_index(&name) {
                if let Some((_, _, other)) = found {
                    return Err(Error::sql(format!("column {name} is ambiguous: it is in {other} and {}", s.name)));
                }
                found = Some((s.offset + i, s.table.columns[i].ty, &s.name));
            }
        }
        match (found, q) {
            (Some((pos, ty, _)), _) => Ok(Typed { expr: Expr::Column(pos), ty: Some(ty) }),
            (None, Some(q)) if !matched_qual => Err(Error::sql(format!("unknown table or alias {q} (in {q}.{name})"))),
            (None, Some(q)) => Err(Error::sql(format!("unknown column {name} in {q}"))),
            (None, None) if scope.is_empty() => Err(Error::sql(format!("unknown column {name}: the statement has no FROM clause"))),
            (None, None) => Err(Error::sql(format!(
                "unknown column {name} (looked in {})",
                scope.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    fn literal(&mut self, v: &ast::Value) -> Result<Typed> {
        use ast::Value as V;
        let val = match v {
            V::Number(s, _) => number_literal(s)?,
            V::SingleQuotedString(s) | V::DoubleQuotedString(s) | V::NationalStringLiteral(s) | V::EscapedStringLiteral(s) => {
                Value::from(s.as_str())
            }
            V::HexStringLiteral(h) => {
                Value::Bytes(lockstep_core::value::parse_hex(h).ok_or_else(|| Error::sql(format!("bad hex literal X'{h}'")))?.into())
            }
            V::Boolean(b) => Value::Bool(*b),
            V::Null => Value::Null,
            V::Placeholder(p) => {
                let n: usize = p.trim_start_matches(['?', '$']).parse().map_err(|_| Error::sql(format!("bad parameter {p}")))?;
                if n == 0 || n > self.param_types.len() {
                    return Err(Error::sql(format!("bad parameter {p}")));
                }
                return Ok(Typed { expr: Expr::Param(n - 1), ty: self.param_types[n - 1] });
            }
            other => return Err(unsupported(format!("literal {other}"))),
        };
        let ty = val.natural_type();
        Ok(Typed { expr: Expr::Const(val), ty })
    }

    /// Gives an untyped parameter the type its context implies.
    pub fn infer_param(&mut self, t: &Typed, ty: Option<DataType>) {
        if let (Expr::Param(i), Some(ty)) = (&t.expr, ty) {
            if let Some(slot) = self.param_types.get_mut(*i) {
                if slot.is_none() {
                    *slot = Some(ty);
                }
            }
        }
    }

    fn numeric_operand(&self, t: &Typed, what: &str) -> Result<()> {
        match t.ty {
            Some(ty) if !ty.is_numeric() => Err(Error::sql(format!("{what} needs numbers, not {}", ty.sql_name()))),
            _ => Ok(()),
        }
    }

    fn binary(&mut self, l: &ast::Expr, op: &BinaryOperator, r: &ast::Expr, scope: &[Source]) -> Result<Typed> {
        let a = self.bind(l, scope)?;
        let b = self.bind(r, scope)?;
        let cmp = match op {
            BinaryOperator::Eq => Some(CmpOp::Eq),
            BinaryOperator::NotEq => Some(CmpOp::Ne),
            BinaryOperator::Lt => Some(CmpOp::Lt),
            BinaryOperator::LtEq => Some(CmpOp::Le),
            BinaryOperator::Gt => Some(CmpOp::Gt),
            BinaryOperator::GtEq => Some(CmpOp::Ge),
            _ => None,
        };
        if let Some(c) = cmp {
            return Ok(Typed { expr: self.comparison(c, a, b)?, ty: Some(DataType::Boolean) });
        }
        let arith = match op {
            BinaryOperator::Plus => Some(ArithOp::Add),
            BinaryOperator::Minus => Some(ArithOp::Sub),
            BinaryOperator::Multiply => Some(ArithOp::Mul),
            BinaryOperator::Divide => Some(ArithOp::Div),
            BinaryOperator::Modulo => Some(ArithOp::Mod),
            _ => None,
        };
        if let Some(o) = arith {
            self.infer_param(&a, b.ty);
            self.infer_param(&b, a.ty);
            self.numeric_operand(&a, "arithmetic")?;
            self.numeric_operand(&b, "arithmetic")?;
            let ty = match (a.ty, b.ty) {
                (None, None) => None,
                _ => Some(func::numeric_result(&[a.ty, b.ty])),
            };
            return Ok(Typed { expr: Expr::Arith(o, Box::new(a.expr), Box::new(b.expr)), ty });
        }
        let bx = |x: Expr| Box::new(x);
        Ok(match op {
            BinaryOperator::And => Typed { expr: Expr::And(bx(a.expr), bx(b.expr)), ty: Some(DataType::Boolean) },
            BinaryOperator::Or => Typed { expr: Expr::Or(bx(a.expr), bx(b.expr)), ty: Some(DataType::Boolean) },
            BinaryOperator::StringConcat => {
                self.infer_param(&a, Some(DataType::Varchar));
                self.infer_param(&b, Some(DataType::Varchar));
                Typed { expr: Expr::Concat(bx(a.expr), bx(b.expr)), ty: Some(DataType::Varchar) }
            }
            other => return Err(unsupported(format!("operator {other}"))),
        })
    }

    /// A comparison, typing parameters and converting constants to the other side's type
    /// (so `ts_col > '2024-01-01'` compares timestamps and can use an index).
    pub fn comparison(&mut self, op: CmpOp, a: Typed, b: Typed) -> Result<Expr> {
        self.infer_param(&a, b.ty);
        self.infer_param(&b, a.ty);
        check_comparable(a.ty, b.ty)?;
        let l = coerce_const(a.expr, b.ty);
        let r = coerce_const(b.expr, a.ty);
        Ok(Expr::Cmp(op, Box::new(l), Box::new(r)))
    }

    /// `b`, typed and converted for comparison with `a`, an expression that is neither a
    /// constant nor a parameter (as `comparison` would, without building the comparison).
    fn compared_with(&mut self, a: &Typed, b: Typed) -> Result<Expr> {
        self.infer_param(&b, a.ty);
        check_comparable(a.ty, b.ty)?;
        Ok(coerce_const(b.expr, a.ty))
    }

    fn function(&mut self, f: &ast::Function, scope: &[Source]) -> Result<Typed> {
        let name = function_name(f);
        if is_agg_name(&name).is_some() {
            // Only reached when aggregates are not being collected here.
            if self.agg_active {
                return self.bind_aggregate(f, scope);
            }
            let (args, _) = function_args(f)?;
            for a in args.into_iter().flatten() {
                self.bind(a, scope)?;
            }
            self.saw_agg = true;
            return Ok(Typed { expr: Expr::Const(Value::Null), ty: None });
        }
        let (args, distinct) = function_args(f)?;
        if distinct {
            return Err(Error::sql(format!("DISTINCT is only allowed in aggregate functions, not {name}")));
        }
        if let Some(make) = func::unit_function(&name) {
            let unit = match args.first() {
                Some(Some(ast::Expr::Identifier(id))) => func::TimeUnit::parse(&id.value),
                Some(Some(ast::Expr::Value(v))) => v.value.clone().into_string().and_then(|s| func::TimeUnit::parse(&s)),
                _ => None,
            }
            .ok_or_else(|| Error::sql(format!("the first argument of {name} must be a time unit such as DAY or SECOND")))?;
            let mut bound = Vec::new();
            for a in &args[1..] {
                bound.push(self.bind(a.ok_or_else(|| Error::sql(format!("bad argument * to {name}")))?, scope)?);
            }
            return self.call(make(unit), bound);
        }
        if name == "EXTRACT" {
            return Err(Error::sql("use EXTRACT(field FROM timestamp)"));
        }
        let func = func::lookup(&name).ok_or_else(|| Error::sql(format!("unknown function {name}")))?;
        let mut bound = Vec::new();
        for a in &args {
            bound.push(self.bind(a.ok_or_else(|| Error::sql(format!("bad argument * to {name}")))?, scope)?);
        }
        self.call(func, bound)
    }

    /// Checks the argument count and types of a call and builds it.
    fn call(&mut self, f: Func, args: Vec<Typed>) -> Result<Typed> {
        let (lo, hi) = func::arity(f);
        if args.len() < lo || args.len() > hi {
            let want = if lo == hi { format!("{lo}") } else { format!("{lo} to {hi}") };
            return Err(Error::sql(format!("{f:?} takes {want} arguments, not {}", args.len())));
        }
        // Parameters of functions with a clear argument kind get that kind.
        let want: Option<DataType> = match f {
            Func::Upper | Func::Lower | Func::Trim(_) | Func::CharLength | Func::Replace | Func::Position => Some(DataType::Varchar),
            Func::Extract(_) | Func::Truncate(_) | Func::SinceEpoch(_) => Some(DataType::Timestamp),
            Func::ToTimestamp(_) | Func::FromUnixtime => Some(DataType::BigInt),
            _ => None,
        };
        for (i, a) in args.iter().enumerate() {
            let ty = match f {
                Func::Substring | Func::Left | Func::Right if i > 0 => Some(DataType::BigInt),
                Func::Substring | Func::Left | Func::Right => Some(DataType::Varchar),
                Func::DateAdd(_) if i == 0 => Some(DataType::BigInt),
                Func::DateAdd(_) => Some(DataType::Timestamp),
                _ => want,
            };
            self.infer_param(a, ty);
        }
        let types: Vec<Option<DataType>> = args.iter().map(|a| self.param_aware_type(a)).collect();
        let ty = func::result_type(f, &types)?;
        Ok(Typed { expr: Expr::Func(f, args.into_iter().map(|a| a.expr).collect()), ty })
    }

    fn param_aware_type(&self, t: &Typed) -> Option<DataType> {
        match t.expr {
            Expr::Param(i) => self.param_types.get(i).copied().flatten(),
            _ => t.ty,
        }
    }

    fn bind_aggregate(&mut self, f: &ast::Function, scope: &[Source]) -> Result<Typed> {
        let name = function_name(f);
        let func = is_agg_name(&name).ok_or_else(|| Error::sql(format!("unknown aggregate {name}")))?;
        let (args, distinct) = function_args(f)?;
        let (func, arg) = match (func, args.as_slice()) {
            (AggFunc::Count, [None]) if !distinct => (AggFunc::CountStar, None),
            (_, [Some(a)]) => {
                let (t, nested) = self.bind_input(a, scope);
                if nested {
                    return Err(Error::sql(format!("aggregate functions cannot be nested ({f})")));
                }
                (func, Some(t?))
            }
            _ => return Err(Error::sql(format!("{name} takes one argument"))),
        };
        let arg_ty = arg.as_ref().and_then(|a| a.ty);
        let ty = match func {
            AggFunc::CountStar | AggFunc::Count => DataType::BigInt,
            AggFunc::Sum | AggFunc::Avg => {
                let t = arg_ty.ok_or_else(|| Error::sql(format!("cannot tell the type of the argument of {name}")))?;
                if !t.is_numeric() {
                    return Err(Error::sql(format!("{name} needs a numeric argument, not {}", t.sql_name())));
                }
                if func == AggFunc::Sum && t.is_integer() {
                    DataType::BigInt
                } else {
                    t
                }
            }
            AggFunc::Min | AggFunc::Max => arg_ty.ok_or_else(|| Error::sql(format!("cannot tell the type of the argument of {name}")))?,
        };
        // The argument is bound below the top of its expression, which it leaves: it gets
        // stack checks of its own.
        let arg = arg.map(|mut a| {
            a.expr.add_stack_checks();
            a.expr
        });
        let spec = AggSpec { func, distinct: distinct && func != AggFunc::CountStar, arg, ty };
        let ctx = self.agg.as_mut().ok_or_else(|| Error::sql(format!("aggregate {name} is not allowed here")))?;
        let pos = match ctx.aggs.iter().position(|a| *a == spec) {
            Some(p) => p,
            None => {
                ctx.aggs.push(spec);
                ctx.aggs.len() - 1
            }
        };
        Ok(Typed { expr: Expr::Column(ctx.group.len() + pos), ty: Some(ty) })
    }
}

fn display_name(qual: Option<&ast::Ident>, col: &ast::Ident) -> String {
    match qual {
        Some(q) => format!("{}.{}", ident_name(q), ident_name(col)),
        None => ident_name(col),
    }
}

fn too_deep() -> Error {
    Error::sql(format!("expression is nested more than {EXPR_DEPTH_MAX} levels deep: simplify it or split it"))
}

fn not_grouped(name: &str) -> Error {
    Error::sql(format!("column {name} must appear in the GROUP BY clause or be used in an aggregate function"))
}

/// Integer widths widen to BIGINT in expressions.
fn widen(t: DataType) -> DataType {
    if t.is_integer() {
        DataType::BigInt
    } else {
        t
    }
}

fn merge_type(a: Option<DataType>, b: Option<DataType>) -> Option<DataType> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(x), Some(y)) if x == y => Some(x),
        (Some(x), Some(y)) if x.is_numeric() && y.is_numeric() => {
            Some(if x.is_integer() && y.is_integer() { DataType::BigInt } else { func::numeric_result(&[Some(x), Some(y)]) })
        }
        (Some(x), Some(_)) => Some(x),
    }
}

fn class(t: DataType) -> u8 {
    match t {
        t if t.is_numeric() => 0,
        DataType::Varchar => 1,
        DataType::Varbinary => 2,
        DataType::Timestamp => 3,
        DataType::Boolean => 4,
        DataType::GeographyPoint => 6,
        DataType::Geography => 7,
        _ => 5,
    }
}

/// Rejects comparisons that can never work (a number with a timestamp, say) at prepare time.
fn check_comparable(a: Option<DataType>, b: Option<DataType>) -> Result<()> {
    if let (Some(x), Some(y)) = (a, b) {
        let ok = class(x) == class(y)
            || matches!(
                (class(x), class(y)),
                (1, 3) | (3, 1) | (1, 0) | (0, 1) | (1, 2) | (2, 1) | (3, 0) | (0, 3) | (1, 6) | (6, 1) | (1, 7) | (7, 1)
            );
        if !ok {
            return Err(Error::sql(format!("cannot compare {} with {}", x.sql_name(), y.sql_name())));
        }
    }
    Ok(())
}

/// Converts a constant to `ty` when that is lossless; otherwise leaves it for run-time
/// comparison (e.g. an INTEGER column against 1.5).
pub fn coerce_const(e: Expr, ty: Option<DataType>) -> Expr {
    match (e, ty) {
        (Expr::Const(v), Some(ty)) if !v.is_null() && v.natural_type() != Some(ty) => {
            let keep_numeric =
                v.natural_type().is_some_and(|t| t.is_numeric()) && ty.is_numeric() && !(ty.is_integer() && matches!(v, Value::Int(_)));
            if keep_numeric {
                return Expr::Const(v);
            }
            match v.coerce_to(ty) {
                Ok(c) => Expr::Const(c),
                Err(_) => Expr::Const(v),
            }
        }
        (e, _) => e,
    }
}
