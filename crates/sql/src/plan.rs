//! SELECT planning: FROM sources in join order, filters placed at the earliest level that
//! can evaluate them, grouping, projection, ordering and limits.

use std::sync::Arc;

use lockstep_core::{Catalog, ColumnDef, DataType, Error, Result, ResultColumn, TableDef, TableKind, Value};
use sqlparser::ast::{self as ast, JoinConstraint, JoinOperator, SelectItem, SetExpr, TableFactor};

use crate::access::{choose_access, implied_partials, Access, KeyTerm, KeyTerms};
use crate::bind::{ident_name, object_name, AggCtx, Binder, Cte, Source, Typed};
use crate::ddl_index::indexed_expression;
use crate::expr::{CmpOp, Expr};

/// Most FROM items one SELECT may join: the join planner keeps a set of sources in one
/// `u64` (`join_order.rs`), and the executor recurses once per source.
pub const JOIN_SOURCES_MAX: usize = 64;
/// Most output columns of one SELECT.
pub const SELECT_COLUMNS_MAX: usize = 1024;
/// Most set operations (UNION, INTERSECT, EXCEPT) one query may chain: each is a level of
/// recursion when it is planned and run.
pub const SET_OPERATIONS_MAX: usize = 64;
/// The table id of a derived table (a subquery in FROM, a plain view): it names no stored
/// table; its rows come from `Level::derived`.
pub const DERIVED_TABLE_ID: lockstep_core::TableId = lockstep_core::TableId::MAX;

/// One of a statement's subqueries: in an expression (`Expr::Subquery`), in FROM
/// (`Level::derived`), or a side of a set operation.
#[derive(Clone, Debug)]
pub struct SubqueryPlan {
    pub body: SubBody,
    pub columns: Arc<[ResultColumn]>,
    /// It reads columns of the query around it (`Expr::Outer`): it runs once per row of
    /// that query instead of once per statement.
    pub correlated: bool,
    /// Part of a recursive WITH's recursive part: it runs again in every iteration.
    pub recursive: bool,
}

#[derive(Clone, Debug)]
pub enum SubBody {
    Select(Box<SelectPlan>),
    SetOp(SetOpPlan),
    /// `WITH RECURSIVE`: its base, then its step again and again (`plan_recursive.rs`).
    Recursive(crate::plan_recursive::RecursivePlan),
    /// The rows of the recursion's last iteration, which its recursive part reads under
    /// the WITH's name; these are its columns.
    Working(Arc<[ResultColumn]>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetOp {
    Union,
    Intersect,
    Except,
}

/// `left op [ALL] right`, both subqueries of the statement with as many columns.
#[derive(Clone, Debug)]
pub struct SetOpPlan {
    pub op: SetOp,
    pub all: bool,
    pub left: usize,
    pub right: usize,
    /// Each column's type; a side whose column has another type (INTEGER against BIGINT
    /// or FLOAT, say) has its values converted first, so equal values compare equal.
    pub types: Vec<DataType>,
    pub convert: [bool; 2],
}

/// One FROM item in join order.
#[derive(Clone, Debug)]
pub struct Level {
    pub source: Source,
    /// LEFT JOIN: a row of the earlier levels with no match is kept, padded with NULLs.
    pub left: bool,
    pub access: Access,
    /// Conditions for a row of this level to match, over the joined row so far.
    pub on: Vec<Expr>,
    /// `on` without the equalities the access path's index lookup already guarantees, for
    /// rows read from a partition's own index (see `access::residual_filters`).
    pub residual: Vec<Expr>,
    /// WHERE terms that must see the padded row of a LEFT JOIN level.
    pub post: Vec<Expr>,
    /// For multi-partition reads: how each partition reads this source alone
    /// (columns numbered from 0 within the source).
    pub gather_access: Access,
    pub gather_filter: Vec<Expr>,
    /// The source is a view of a partitioned table: gathered rows must be re-aggregated.
    pub merge_view: bool,
    pub partitioned: bool,
    /// A derived table: its rows are those of this subquery of the statement.
    pub derived: Option<usize>,
    /// Its position in FROM as written (levels run in the order the planner chose).
    pub written: usize,
    /// A hash join: the level's rows (as its access path finds them, which then depends on
    /// no other level) are put in a hash table on these columns once per run, and each
    /// joined row so far probes it instead of reading them all. Empty: nested loop.
    pub hash: Vec<crate::join_order::HashKey>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SortKey {
    Output(usize),
    Hidden(usize),
}

#[derive(Clone, Debug)]
pub struct SelectPlan {
    pub levels: Vec<Level>,
    /// Columns of the joined row (sum of the sources' widths).
    pub width: usize,
    pub agg: Option<AggCtx>,
    pub having: Option<Expr>,
    pub output: Vec<Expr>,
    pub columns: std::sync::Arc<[ResultColumn]>,
    /// ORDER BY expressions that are not output columns.
    pub hidden: Vec<Expr>,
    pub order: Vec<(SortKey, bool)>,
    /// The access path already yields rows in ORDER BY order.
    pub sorted_by_index: bool,
    pub distinct: bool,
    pub limit: Option<Expr>,
    pub offset: Option<Expr>,
    /// Each partition may stop after `offset + limit` rows when gathering (MP).
    pub gather_limit: bool,
    /// How the join order was chosen, and the plans for the row counts it meets at run
    /// time (`join_order::for_row_counts`).
    pub joins: crate::join_order::JoinPlan,
}

/// Whether the same group of a view of a partitioned table may be on several partitions,
/// so that rows gathered from them must be merged first. Not when the view groups by the
/// source's partitioning column: all the rows of a group are then on one partition, and
/// each partition's view rows are final (an aggregate over them pushes down).
fn view_groups_span_partitions(catalog: &Catalog, t: &TableDef) -> bool {
    match t.view() {
        Some(v) => {
            let source_pc = catalog.table_by_id(v.source).and_then(|s| s.partition_column);
            !source_pc.is_some_and(|pc| v.group_by.contains(&lockstep_core::ViewKey::Column(pc)))
        }
        None => false,
    }
}

/// Whether a table's rows live in partitions (not replicated on every site).
pub fn is_partitioned(catalog: &Catalog, t: &TableDef) -> bool {
    match &t.kind {
        TableKind::Table | TableKind::Stream { .. } => t.partition_column.is_some(),
        TableKind::View(v) => catalog.table_by_id(v.source).is_some_and(|s| s.partition_column.is_some()),
    }
}

fn unsupported(what: impl std::fmt::Display) -> Error {
    Error::sql(format!("{what} is not supported"))
}

/// A table standing for a subquery's rows: its columns, no indexes, replicated.
pub fn derived_table(name: &str, columns: &[ResultColumn]) -> TableDef {
    let columns = columns
        .iter()
        .map(|c| ColumnDef {
            name: c.name.to_string(),
            ty: c.ty,
            size: crate::ddl_parse::VARIABLE_SIZE_MAX,
            in_bytes: false,
            nullable: true,
            default: None,
        })
        .collect();
    TableDef { id: DERIVED_TABLE_ID, name: name.to_string(), columns, indexes: vec![], partition_column: None, kind: TableKind::Table }
}

/// Looks a FROM table up, refusing streams.
pub fn readable_table(catalog: &Catalog, name: &ast::ObjectName) -> Result<Arc<TableDef>> {
    let n = object_name(name)?;
    let t = catalog.table(&n).ok_or_else(|| Error::sql(format!("object not found: {n}")))?;
    if t.is_stream() {
        return Err(Error::sql(format!("stream {} cannot be queried", t.name)));
    }
    Ok(t.clone())
}

struct FromItem<'q> {
    source: Source,
    derived: Option<usize>,
    left: bool,
    /// ON conditions (a parenthesised join can give its last item the outer one as well).
    on: Vec<&'q ast::Expr>,
}

fn from_items<'q>(catalog: &Catalog, b: &mut Binder, from: &'q [ast::TableWithJoins]) -> Result<Vec<FromItem<'q>>> {
    let mut items: Vec<FromItem> = Vec::new();
    for twj in from {
        add_joins(catalog, b, &mut items, twj)?;
    }
    Ok(items)
}

/// Adds one FROM item and its joins. A parenthesised join, `(a CROSS JOIN b)`, is laid out
/// in line: where it stands first or on the right of an inner join, its ON conditions and
/// the outer ones together are the same filters over the same rows, so the parentheses
/// change nothing. On the right of a LEFT JOIN they would (the outer join pads the whole
/// group), which is refused.
fn add_joins<'q>(catalog: &Catalog, b: &mut Binder, items: &mut Vec<FromItem<'q>>, twj: &'q ast::TableWithJoins) -> Result<()> {
    add_factor(catalog, b, items, &twj.relation, false, None)?;
    for j in &twj.joins {
        let (left, c) = match &j.join_operator {
            JoinOperator::Join(c) | JoinOperator::Inner(c) => (false, c),
            JoinOperator::Left(c) | JoinOperator::LeftOuter(c) => (true, c),
            JoinOperator::CrossJoin(c) => (false, c),
            // Not `{other:?}`: that would print the whole ON expression, recursively.
            _ => return Err(unsupported("this kind of join (use [INNER] JOIN, LEFT [OUTER] JOIN or CROSS JOIN)")),
        };
        let on = match c {
            JoinConstraint::On(e) => Some(e),
            JoinConstraint::None if !left => None,
            JoinConstraint::None => return Err(Error::sql("LEFT JOIN needs an ON condition")),
            JoinConstraint::Using(_) | JoinConstraint::Natural => return Err(unsupported("JOIN … USING / NATURAL JOIN")),
        };
        add_factor(catalog, b, items, &j.relation, left, on)?;
    }
    Ok(())
}

fn add_factor<'q>(
    catalog: &Catalog,
    b: &mut Binder,
    items: &mut Vec<FromItem<'q>>,
    f: &'q TableFactor,
    left: bool,
    on: Option<&'q ast::Expr>,
) -> Result<()> {
    let (name, alias) = match f {
        TableFactor::Table { name, alias, args: None, .. } => (name, alias),
        TableFactor::NestedJoin { table_with_joins, alias } => {
            if alias.is_some() {
                return Err(unsupported("an alias on a parenthesised join"));
            }
            if left && !table_with_joins.joins.is_empty() {
                return Err(unsupported("a parenthesised join on the right of LEFT JOIN"));
            }
            let first = items.len();
            add_joins(catalog, b, items, table_with_joins)?;
            // The outer join's ON condition goes to the group's last item, where every
            // table it may name has been joined (for `(b)` alone, that is `b` itself).
            let last = items.len() - 1;
            items[last].on.extend(on);
            items[first].left |= left;
            return Ok(());
        }
        TableFactor::Derived { lateral, subquery, alias, .. } => {
            if *lateral {
                return Err(unsupported("LATERAL"));
            }
            let alias = alias.as_ref().ok_or_else(|| Error::sql("a subquery in FROM needs a name: FROM (SELECT …) AS d"))?;
            let (id, _) = b.plan_subquery(subquery, &[], true)?;
            let mut cols = b.subqueries[id].columns.to_vec();
            rename_columns(&mut cols, alias)?;
            let table = Arc::new(derived_table(&ident_name(&alias.name), &cols));
            return push_item(items, table, ident_name(&alias.name), left, on, Some(id));
        }
        other => return Err(unsupported(format!("FROM item {other}"))),
    };
    let n = object_name(name)?;
    if name.0.len() == 1 {
        if let Some(i) = b.ctes.iter().rposition(|c| c.name.eq_ignore_ascii_case(&n)) {
            return expand_cte(b, items, i, alias.as_ref(), left, on);
        }
    }
    b.reads.push(n.to_ascii_lowercase());
    if catalog.table(&n).is_none() {
        if let Some(v) = catalog.plain_view(&n) {
            return expand_view(b, items, v, alias.as_ref(), left, on);
        }
    }
    let table = readable_table(catalog, name)?;
    let sname = match alias {
        Some(a) => {
            if !a.columns.is_empty() {
                return Err(unsupported("column aliases on a table in FROM"));
            }
            ident_name(&a.name)
        }
        None => table.name.clone(),
    };
    push_item(items, table, sname, left, on, None)
}

/// A common table expression read in FROM: its query, planned here as a derived table. It
/// sees the expressions defined before it, not those after it, and itself only when it is
/// recursive (`plan_recursive.rs`); inside its own recursive part its name stands for the
/// rows of the last iteration.
fn expand_cte<'q>(
    b: &mut Binder,
    items: &mut Vec<FromItem<'q>>,
    i: usize,
    alias: Option<&ast::TableAlias>,
    left: bool,
    on: Option<&'q ast::Expr>,
) -> Result<()> {
    let cte = b.ctes[i].clone();
    let (id, mut cols) = match cte.working {
        Some(w) => {
            b.working_reads += 1;
            (w, b.subqueries[w].columns.to_vec())
        }
        None => {
            let recursive = if cte.recursive { crate::plan_recursive::plan(b, i)? } else { None };
            let id = match recursive {
                Some(id) => id,
                None => {
                    let later = b.ctes.split_off(i);
                    let planned = b.plan_subquery(&cte.query, &[], true);
                    b.ctes.extend(later);
                    planned.map_err(|e| e.context(format!("in WITH {}", cte.name)))?.0
                }
            };
            let mut cols = b.subqueries[id].columns.to_vec();
            rename_columns(&mut cols, &cte.alias)?;
            (id, cols)
        }
    };
    let sname = match alias {
        Some(a) => {
            rename_columns(&mut cols, a)?;
            ident_name(&a.name)
        }
        None => cte.name.clone(),
    };
    let table = Arc::new(derived_table(&sname, &cols));
    push_item(items, table, sname, left, on, Some(id))
}

/// A plain view read in FROM: its query, planned here as a derived table under the view's
/// name (or the alias), with the view's column names.
fn expand_view<'q>(
    b: &mut Binder,
    items: &mut Vec<FromItem<'q>>,
    v: &lockstep_core::PlainViewDef,
    alias: Option<&ast::TableAlias>,
    left: bool,
    on: Option<&'q ast::Expr>,
) -> Result<()> {
    let in_view = |e: Error| e.context(format!("in view {}", v.name));
    let q = view_query(&v.query, &v.name).map_err(in_view)?;
    let (id, _) = b.plan_subquery(&q, &[], true).map_err(in_view)?;
    let mut cols = b.subqueries[id].columns.to_vec();
    if cols.len() != v.columns.len() {
        return Err(Error::sql(format!(
            "view {} now selects {} columns, not the {} it was created with: drop it and create it again",
            v.name,
            cols.len(),
            v.columns.len()
        )));
    }
    for (c, n) in cols.iter_mut().zip(&v.columns) {
        c.name = n.as_str().into();
    }
    let sname = match alias {
        Some(a) => {
            rename_columns(&mut cols, a)?;
            ident_name(&a.name)
        }
        None => v.name.clone(),
    };
    let table = Arc::new(derived_table(&sname, &cols));
    push_item(items, table, sname, left, on, Some(id))
}

/// The query of a plain view, parsed.
pub fn view_query(text: &str, name: &str) -> Result<ast::Query> {
    let rw = crate::script::rewrite_for_parser(text)?;
    if rw.param_count > 0 {
        return Err(Error::sql(format!("view {name} cannot have parameters (?)")));
    }
    let mut stmts = crate::nesting::parse_statements(&rw.sql, &format!(" in view {name}"))?;
    match (stmts.pop(), stmts.is_empty()) {
        (Some(ast::Statement::Query(q)), true) => Ok(*q),
        _ => Err(Error::sql(format!("view {name} must be defined by one SELECT"))),
    }
}

/// Plans a plain view's query as `CREATE VIEW` checks it: its column names, and the tables
/// and plain views it reads.
pub fn plan_view(catalog: &Catalog, text: &str, name: &str) -> Result<(Vec<String>, Vec<String>)> {
    let q = view_query(text, name)?;
    let mut b = Binder::new(0, Some(catalog));
    let plan = plan_query(catalog, &mut b, &q)?;
    let mut reads = std::mem::take(&mut b.reads);
    reads.sort();
    reads.dedup();
    Ok((plan.columns.iter().map(|c| c.name.to_string()).collect(), reads))
}

/// `AS d (x, y)`: the derived table's columns renamed, as many names as it has columns.
pub(crate) fn rename_columns(cols: &mut [ResultColumn], alias: &ast::TableAlias) -> Result<()> {
    if alias.columns.is_empty() {
        return Ok(());
    }
    if alias.columns.len() != cols.len() {
        return Err(Error::sql(format!(
            "{} names {} columns, but its subquery has {}",
            ident_name(&alias.name),
            alias.columns.len(),
            cols.len()
        )));
    }
    for (c, a) in cols.iter_mut().zip(&alias.columns) {
        c.name = ident_name(&a.name).into();
    }
    Ok(())
}

fn push_item<'q>(
    items: &mut Vec<FromItem<'q>>,
    table: Arc<TableDef>,
    sname: String,
    left: bool,
    on: Option<&'q ast::Expr>,
    derived: Option<usize>,
) -> Result<()> {
    if items.iter().any(|i| i.source.name.eq_ignore_ascii_case(&sname)) {
        return Err(Error::sql(format!("{sname} appears twice in FROM; give one of them an alias")));
    }
    if items.len() >= JOIN_SOURCES_MAX {
        return Err(Error::sql(format!("a SELECT may join at most {JOIN_SOURCES_MAX} tables")));
    }
    let offset = items.last().map(|i| i.source.offset + i.source.width()).unwrap_or(0);
    items.push(FromItem { source: Source { name: sname, table, offset }, derived, left, on: on.into_iter().collect() });
    Ok(())
}

/// The level holding column `c` of the joined row.
pub fn level_of_column(levels: &[Source], c: usize) -> usize {
    levels.iter().rposition(|s| s.offset <= c).unwrap_or(0)
}

fn level_of(sources: &[Source], e: &Expr) -> usize {
    e.max_column().map(|c| level_of_column(sources, c)).unwrap_or(0)
}

/// Plans a query (a SELECT, or set operations over SELECTs, with optional ORDER BY /
/// LIMIT / OFFSET).
pub fn plan_query(catalog: &Catalog, b: &mut Binder, q: &ast::Query) -> Result<SelectPlan> {
    if q.fetch.is_some() || !q.locks.is_empty() || q.for_clause.is_some() {
        return Err(unsupported("FETCH / FOR UPDATE"));
    }
    // WITH's names are in scope for the query and the subqueries in it, and no further.
    let scope = b.ctes.len();
    if let Some(w) = &q.with {
        for cte in &w.cte_tables {
            if cte.from.is_some() {
                return Err(unsupported("WITH … FROM"));
            }
            b.ctes.push(Cte {
                name: ident_name(&cte.alias.name),
                query: (*cte.query).clone(),
                alias: cte.alias.clone(),
                recursive: w.recursive,
                working: None,
            });
        }
    }
    let r = plan_query_body(catalog, b, q);
    b.ctes.truncate(scope);
    r
}

fn plan_query_body(catalog: &Catalog, b: &mut Binder, q: &ast::Query) -> Result<SelectPlan> {
    match q.body.as_ref() {
        SetExpr::Select(s) => plan_select(catalog, b, s, Some(q)),
        body @ (SetExpr::SetOperation { .. } | SetExpr::Query(_)) => {
            let id = plan_set_expr(catalog, b, body, 0)?;
            plan_over_subquery(b, id, q)
        }
        _ => Err(unsupported("this kind of query")),
    }
}

/// Plans a subquery's text and adds it to the statement's subqueries: its id.
pub fn plan_subquery_body(catalog: &Catalog, b: &mut Binder, q: &ast::Query) -> Result<usize> {
    let bare = q.order_by.is_none() && q.limit_clause.is_none() && q.with.is_none() && q.fetch.is_none();
    if bare && matches!(q.body.as_ref(), SetExpr::SetOperation { .. }) {
        return plan_set_expr(catalog, b, &q.body, 0);
    }
    let plan = plan_query(catalog, b, q)?;
    Ok(push_subquery(b, SubBody::Select(Box::new(plan))))
}

pub(crate) fn push_subquery(b: &mut Binder, body: SubBody) -> usize {
    let columns = match &body {
        SubBody::Select(p) => p.columns.clone(),
        SubBody::SetOp(s) => {
            b.subqueries[s.left].columns.iter().zip(&s.types).map(|(c, t)| ResultColumn { name: c.name.clone(), ty: *t }).collect()
        }
        SubBody::Recursive(r) => r.columns.clone(),
        SubBody::Working(columns) => columns.clone(),
    };
    b.subqueries.push(SubqueryPlan { body, columns, correlated: false, recursive: false });
    b.subqueries.len() - 1
}

/// Plans one side of a set operation (or the whole of one): its subquery id.
fn plan_set_expr(catalog: &Catalog, b: &mut Binder, body: &SetExpr, depth: usize) -> Result<usize> {
    if depth >= SET_OPERATIONS_MAX {
        return Err(Error::sql(format!("a query may chain at most {SET_OPERATIONS_MAX} UNION / INTERSECT / EXCEPT operations")));
    }
    // A side that reads the enclosing query's row runs again for each such row.
    let before = b.outer_reads();
    let id = match body {
        SetExpr::Select(s) => {
            let plan = plan_select(catalog, b, s, None)?;
            push_subquery(b, SubBody::Select(Box::new(plan)))
        }
        SetExpr::Query(q) => plan_subquery_body(catalog, b, q)?,
        SetExpr::SetOperation { op, set_quantifier, left, right } => {
            let op = match op {
                ast::SetOperator::Union => SetOp::Union,
                ast::SetOperator::Intersect => SetOp::Intersect,
                ast::SetOperator::Except | ast::SetOperator::Minus => SetOp::Except,
            };
            let all = match set_quantifier {
                ast::SetQuantifier::All => true,
                ast::SetQuantifier::Distinct | ast::SetQuantifier::None => false,
                other => return Err(unsupported(format!("{op:?} {other}"))),
            };
            let l = plan_set_expr(catalog, b, left, depth + 1)?;
            let r = plan_set_expr(catalog, b, right, depth + 1)?;
            let plan = set_op_plan(b, op, all, l, r)?;
            push_subquery(b, SubBody::SetOp(plan))
        }
        _ => return Err(unsupported("this kind of query")),
    };
    b.subqueries[id].correlated = b.outer_reads() > before;
    Ok(id)
}

fn set_op_name(op: SetOp, all: bool) -> String {
    let name = match op {
        SetOp::Union => "UNION",
        SetOp::Intersect => "INTERSECT",
        SetOp::Except => "EXCEPT",
    };
    if all {
        format!("{name} ALL")
    } else {
        name.to_string()
    }
}

/// Checks that both sides have as many columns, of types that compare, and works out each
/// column's type (the wider number, say).
pub(crate) fn set_op_plan(b: &Binder, op: SetOp, all: bool, left: usize, right: usize) -> Result<SetOpPlan> {
    let (lc, rc) = (&b.subqueries[left].columns, &b.subqueries[right].columns);
    let name = set_op_name(op, all);
    if lc.len() != rc.len() {
        return Err(Error::sql(format!(
            "each side of {name} must have as many columns: the left has {}, the right {}",
            lc.len(),
            rc.len()
        )));
    }
    // A bare NULL has no type of its own (it is listed as VARCHAR): it takes the other side's.
    let null_at = |id: usize, i: usize| match &b.subqueries[id].body {
        SubBody::Select(p) => matches!(p.output.get(i), Some(Expr::Const(Value::Null))),
        SubBody::SetOp(_) | SubBody::Recursive(_) | SubBody::Working(_) => false,
    };
    let mut types = Vec::with_capacity(lc.len());
    for (i, (a, c)) in lc.iter().zip(rc.iter()).enumerate() {
        let ty = match (a.ty, c.ty) {
            (x, y) if x == y => x,
            (_, y) if null_at(left, i) => y,
            (x, _) if null_at(right, i) => x,
            (x, y) if x.is_integer() && y.is_integer() => DataType::BigInt,
            (x, y) if x.is_numeric() && y.is_numeric() => crate::func::numeric_result(&[Some(x), Some(y)]),
            (x, y) => {
                return Err(Error::sql(format!(
                    "column {} of {name} is {} on the left and {} on the right: cast one side so they match",
                    i + 1,
                    x.sql_name(),
                    y.sql_name()
                )))
            }
        };
        types.push(ty);
    }
    let differs = |cols: &[ResultColumn]| cols.iter().zip(&types).any(|(c, t)| c.ty != *t && !(c.ty.is_integer() && t.is_integer()));
    let convert = [differs(lc), differs(rc)];
    Ok(SetOpPlan { op, all, left, right, types, convert })
}

/// `SELECT * FROM (subquery id) ORDER BY … LIMIT … OFFSET …`: the ORDER BY and limits of a
/// query whose body is a set operation (or a parenthesised query) apply to its whole.
fn plan_over_subquery(b: &mut Binder, id: usize, q: &ast::Query) -> Result<SelectPlan> {
    let columns = b.subqueries[id].columns.clone();
    let table = Arc::new(derived_table("", &columns));
    let source = Source { name: String::new(), table, offset: 0 };
    let sources = std::slice::from_ref(&source);
    let output: Vec<Expr> = (0..columns.len()).map(Expr::Column).collect();
    let aliases: Vec<Option<String>> = columns.iter().map(|c| Some(c.name.to_string())).collect();
    let mut hidden = Vec::new();
    let order = order_by(b, sources, q, &output, &columns, &aliases, &mut hidden)?;
    let (limit, offset) = limits(b, q)?;
    let level = Level {
        source: source.clone(),
        left: false,
        access: Access::Scan,
        on: vec![],
        residual: vec![],
        post: vec![],
        gather_access: Access::Scan,
        gather_filter: vec![],
        merge_view: false,
        partitioned: false,
        derived: Some(id),
        written: 0,
        hash: Vec::new(),
    };
    Ok(SelectPlan {
        levels: vec![level],
        width: columns.len(),
        agg: None,
        having: None,
        output,
        columns,
        hidden,
        order,
        sorted_by_index: false,
        distinct: false,
        limit,
        offset,
        gather_limit: false,
        joins: Default::default(),
    })
}

/// A SELECT; `q` is the query it is the body of (for ORDER BY and limits), None for a side
/// of a set operation.
fn plan_select(catalog: &Catalog, b: &mut Binder, s: &ast::Select, q: Option<&ast::Query>) -> Result<SelectPlan> {
    if s.top.is_some()
        || s.into.is_some()
        || !s.lateral_views.is_empty()
        || s.prewhere.is_some()
        || s.qualify.is_some()
        || !s.named_window.is_empty()
    {
        return Err(unsupported("this SELECT clause"));
    }
    let distinct = match &s.distinct {
        None | Some(ast::Distinct::All) => false,
        Some(ast::Distinct::Distinct) => true,
        Some(ast::Distinct::On(_)) => return Err(unsupported("DISTINCT ON")),
    };
    let items = from_items(catalog, b, &s.from)?;
    let sources: Vec<Source> = items.iter().map(|i| i.source.clone()).collect();
    let width: usize = sources.iter().map(Source::width).sum();

    // Filters: ON conditions of each join, then WHERE.
    let mut on: Vec<Vec<Expr>> = vec![Vec::new(); sources.len()];
    let mut post: Vec<Vec<Expr>> = vec![Vec::new(); sources.len()];
    let place = |e: Expr, on: &mut Vec<Vec<Expr>>, post: &mut Vec<Vec<Expr>>| {
        if sources.is_empty() {
            return;
        }
        let l = level_of(&sources, &e);
        if items[l].left {
            post[l].push(e);
        } else {
            on[l].push(e);
        }
    };
    let mut no_from_filter: Vec<Expr> = Vec::new();
    for (j, it) in items.iter().enumerate() {
        for cond in it.on.iter().copied() {
            let (t, had_agg) = b.bind_input(cond, &sources[..=j]);
            if had_agg {
                return Err(Error::sql("aggregate functions are not allowed in ON"));
            }
            let mut terms = Vec::new();
            t?.expr.conjuncts(&mut terms);
            for e in terms {
                if it.left {
                    on[j].push(e);
                } else {
                    place(e, &mut on, &mut post);
                }
            }
        }
    }
    if let Some(w) = &s.selection {
        let (t, had_agg) = b.bind_input(w, &sources);
        if had_agg {
            return Err(Error::sql("aggregate functions are not allowed in WHERE; use HAVING"));
        }
        let mut terms = Vec::new();
        t?.expr.conjuncts(&mut terms);
        for e in terms {
            if sources.is_empty() {
                no_from_filter.push(e);
            } else {
                place(e, &mut on, &mut post);
            }
        }
    }

    // Grouping.
    let group_exprs: &[ast::Expr] = match &s.group_by {
        ast::GroupByExpr::Expressions(v, mods) if mods.is_empty() => v,
        _ => return Err(unsupported("GROUP BY ALL / ROLLUP / CUBE")),
    };
    let mut aggregated = !group_exprs.is_empty() || s.having.is_some();
    if !aggregated {
        // A look for aggregates only: the subqueries it planned are planned again below.
        let mark = b.subqueries.len();
        for item in &s.projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                let (r, had) = b.bind_input(e, &sources);
                r?;
                aggregated |= had;
            }
        }
        b.subqueries.truncate(mark);
    }
    if aggregated {
        let mut keys = Vec::new();
        for g in group_exprs {
            if let ast::Expr::Value(v) = g {
                if let ast::Value::Number(..) = v.value {
                    return Err(unsupported("GROUP BY a column position"));
                }
            }
            let (t, had) = b.bind_input(g, &sources);
            if had {
                return Err(Error::sql("aggregate functions are not allowed in GROUP BY"));
            }
            keys.push(t?);
        }
        b.start_grouping(keys);
    }

    // Projection.
    let mut output = Vec::new();
    let mut columns = Vec::new();
    let mut aliases: Vec<Option<String>> = Vec::new();
    for item in &s.projection {
        match item {
            SelectItem::Wildcard(opts) | SelectItem::QualifiedWildcard(_, opts) => {
                if opts.opt_exclude.is_some()
                    || opts.opt_except.is_some()
                    || opts.opt_replace.is_some()
                    || opts.opt_rename.is_some()
                    || opts.opt_ilike.is_some()
                {
                    return Err(unsupported("wildcard options"));
                }
                let qual = match item {
                    SelectItem::QualifiedWildcard(ast::SelectItemQualifiedWildcardKind::ObjectName(n), _) => Some(object_name(n)?),
                    SelectItem::QualifiedWildcard(..) => return Err(unsupported("this wildcard")),
                    _ => None,
                };
                let mut any = false;
                for src in &sources {
                    if qual.as_ref().is_some_and(|q| !q.eq_ignore_ascii_case(&src.name)) {
                        continue;
                    }
                    any = true;
                    for (i, c) in src.table.columns.iter().enumerate() {
                        let e = Expr::Column(src.offset + i);
                        let t = if aggregated { b.grouped_column(e, Some(c.ty), &c.name)? } else { Typed { expr: e, ty: Some(c.ty) } };
                        output.push(t.expr);
                        columns.push(ResultColumn { name: c.name.as_str().into(), ty: c.ty });
                        aliases.push(None);
                    }
                }
                if !any {
                    return Err(match qual {
                        Some(q) => Error::sql(format!("unknown table or alias {q} in {q}.*")),
                        None => Error::sql("SELECT * needs a FROM clause"),
                    });
                }
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let t = b.bind(e, &sources)?;
                let (name, alias) = match item {
                    SelectItem::ExprWithAlias { alias, .. } => (ident_name(alias), Some(ident_name(alias))),
                    _ => match e {
                        ast::Expr::Identifier(id) => (column_name(&sources, None, id), None),
                        ast::Expr::CompoundIdentifier(p) if p.len() == 2 => (column_name(&sources, Some(&p[0]), &p[1]), None),
                        _ => (format!("C{}", columns.len() + 1), None),
                    },
                };
                let ty = t.ty.unwrap_or(DataType::Varchar);
                output.push(t.expr);
                columns.push(ResultColumn { name: name.into(), ty });
                aliases.push(alias);
            }
            SelectItem::ExprWithAliases { .. } => return Err(unsupported("multiple aliases")),
        }
        if output.len() > SELECT_COLUMNS_MAX {
            return Err(Error::sql(format!("a SELECT may have at most {SELECT_COLUMNS_MAX} columns")));
        }
    }
    let having = match &s.having {
        Some(h) => Some(b.bind(h, &sources)?.expr),
        None => None,
    };

    // ORDER BY.
    let mut hidden = Vec::new();
    let order = match q {
        Some(q) => order_by(b, &sources, q, &output, &columns, &aliases, &mut hidden)?,
        None => Vec::new(),
    };
    if distinct && !hidden.is_empty() {
        return Err(Error::sql("with SELECT DISTINCT, ORDER BY expressions must appear in the select list"));
    }
    let (limit, offset) = match q {
        Some(q) => limits(b, q)?,
        None => (None, None),
    };
    let agg = b.end_grouping();

    // Levels with access paths.
    let mut levels = Vec::with_capacity(sources.len());
    for (j, it) in items.iter().enumerate() {
        let src = &sources[j];
        let terms = key_terms(&on[j], src);
        let access = choose_access(&src.table, &terms);
        let partitioned = it.derived.is_none() && is_partitioned(catalog, &src.table);
        let merge_view = partitioned && view_groups_span_partitions(catalog, &src.table);
        let group_len = src.table.view().map(|v| v.group_by.len()).unwrap_or(usize::MAX);
        let mut gather_filter = Vec::new();
        for e in &on[j] {
            let local = e.min_column().is_some_and(|c| c >= src.offset) || e.max_column().is_none();
            let ok_for_view = !merge_view || e.max_column().is_none_or(|c| c < src.offset + group_len);
            if local && ok_for_view && e.max_column().is_some() && e.stands_alone() {
                let mut l = e.clone();
                let off = src.offset;
                l.map_columns(&|c| c - off);
                gather_filter.push(l);
            }
        }
        let local_src = Source { offset: 0, ..src.clone() };
        let gather_access = choose_access(&src.table, &key_terms(&gather_filter, &local_src));
        levels.push(Level {
            source: src.clone(),
            left: it.left,
            access,
            on: std::mem::take(&mut on[j]),
            residual: Vec::new(),
            post: std::mem::take(&mut post[j]),
            gather_access,
            gather_filter,
            merge_view,
            partitioned,
            derived: it.derived,
            written: j,
            hash: Vec::new(),
        });
    }
    if let Some(l0) = levels.first_mut() {
        l0.on.append(&mut no_from_filter);
    }
    let mut plan = SelectPlan {
        levels,
        width,
        agg,
        having,
        output,
        columns: columns.into(),
        hidden,
        order,
        sorted_by_index: false,
        distinct,
        limit,
        offset,
        gather_limit: false,
        joins: Default::default(),
    };
    if !no_from_filter.is_empty() {
        // SELECT … WHERE … without FROM: filter the single empty row via HAVING-like check.
        let cond = and_balanced(no_from_filter);
        plan.having = match (plan.having.take(), cond) {
            (Some(h), Some(c)) => Some(Expr::And(Box::new(h), Box::new(c))),
            (h, c) => h.or(c),
        };
        if plan.agg.is_none() {
            plan.agg = Some(AggCtx::default());
        }
    }
    if !b.written_join_order {
        plan.joins.estimate = crate::join_order::arrange(&mut plan.levels, &sources, &Default::default());
        // Run-time row counts may choose another order when some level is a stored table.
        if plan.joins.estimate.is_some() && plan.levels.iter().any(|l| l.derived.is_none()) {
            plan.joins.by_row_counts = Some(Default::default());
        }
    }
    crate::access::order_by_index(&mut plan);
    for l in &mut plan.levels {
        l.residual = crate::access::residual_filters(l);
    }
    plan.gather_limit = plan.limit.is_some()
        && plan.levels.len() == 1
        && plan.agg.is_none()
        && !plan.distinct
        && !plan.levels[0].merge_view
        && plan.levels[0].derived.is_none()
        && plan.levels[0].on.iter().all(Expr::stands_alone)
        && (plan.order.is_empty() || plan.sorted_by_index);
    if plan.gather_limit {
        let l = &mut plan.levels[0];
        l.gather_access = l.access.clone();
        l.gather_filter = l.on.clone();
    }
    Ok(plan)
}

/// The conjunction of `terms` as a balanced tree: WHERE's terms were split apart, and
/// chaining them back one after another could build a tree far deeper than the one they
/// came from (a balanced `(a AND b) AND (c AND d)` …), deeper than `eval` may recurse.
fn and_balanced(mut terms: Vec<Expr>) -> Option<Expr> {
    while terms.len() > 1 {
        let mut next = Vec::with_capacity(terms.len().div_ceil(2));
        let mut it = terms.into_iter();
        while let Some(a) = it.next() {
            next.push(match it.next() {
                Some(b) => Expr::And(Box::new(a), Box::new(b)),
                None => a,
            });
        }
        terms = next;
    }
    terms.pop()
}

fn column_name(sources: &[Source], qual: Option<&ast::Ident>, id: &ast::Ident) -> String {
    let name = ident_name(id);
    let q = qual.map(ident_name);
    for s in sources {
        if q.as_ref().is_some_and(|q| !q.eq_ignore_ascii_case(&s.name)) {
            continue;
        }
        if let Some(i) = s.table.column_index(&name) {
            return s.table.columns[i].name.clone();
        }
    }
    name
}

/// The ORDER BY of `q` as sort keys over the output (or hidden expressions).
fn order_by(
    b: &mut Binder,
    sources: &[Source],
    q: &ast::Query,
    output: &[Expr],
    columns: &[ResultColumn],
    aliases: &[Option<String>],
    hidden: &mut Vec<Expr>,
) -> Result<Vec<(SortKey, bool)>> {
    let mut order = Vec::new();
    if let Some(ob) = &q.order_by {
        let exprs = match &ob.kind {
            ast::OrderByKind::Expressions(v) => v,
            ast::OrderByKind::All(_) => return Err(unsupported("ORDER BY ALL")),
        };
        for o in exprs {
            if o.options.nulls_first.is_some() || o.with_fill.is_some() {
                return Err(unsupported("NULLS FIRST/LAST in ORDER BY"));
            }
            let desc = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
            let key = order_key(b, sources, &o.expr, output, columns, aliases, hidden)?;
            order.push((key, desc));
        }
    }
    Ok(order)
}

fn order_key(
    b: &mut Binder,
    sources: &[Source],
    e: &ast::Expr,
    output: &[Expr],
    columns: &[ResultColumn],
    aliases: &[Option<String>],
    hidden: &mut Vec<Expr>,
) -> Result<SortKey> {
    if let ast::Expr::Identifier(id) = e {
        let name = ident_name(id);
        if let Some(i) = aliases.iter().position(|a| a.as_deref().is_some_and(|a| a.eq_ignore_ascii_case(&name))) {
            return Ok(SortKey::Output(i));
        }
    }
    if let ast::Expr::Value(v) = e {
        if let ast::Value::Number(n, _) = &v.value {
            let k: usize = n.parse().map_err(|_| Error::sql(format!("bad ORDER BY position {n}")))?;
            if k == 0 || k > columns.len() {
                return Err(Error::sql(format!("ORDER BY position {k} is not in the select list (1 to {})", columns.len())));
            }
            return Ok(SortKey::Output(k - 1));
        }
    }
    let t = match b.bind(e, sources) {
        Ok(t) => t,
        Err(err) => {
            // An output column name that is not an input column (e.g. a view's alias).
            if let ast::Expr::Identifier(id) = e {
                let name = ident_name(id);
                if let Some(i) = columns.iter().position(|c| c.name.eq_ignore_ascii_case(&name)) {
                    return Ok(SortKey::Output(i));
                }
            }
            return Err(err);
        }
    };
    if let Some(i) = output.iter().position(|o| *o == t.expr) {
        return Ok(SortKey::Output(i));
    }
    hidden.push(t.expr);
    Ok(SortKey::Hidden(hidden.len() - 1))
}

pub(crate) fn limit_expr(b: &mut Binder, e: &ast::Expr, what: &str) -> Result<Expr> {
    let t = b.bind(e, &[])?;
    b.infer_param(&t, Some(DataType::BigInt));
    match &t.expr {
        Expr::Const(Value::Int(n)) if *n >= 0 => Ok(t.expr),
        Expr::Param(_) => Ok(t.expr),
        _ => Err(Error::sql(format!("{what} must be a non-negative integer or a parameter"))),
    }
}

fn limits(b: &mut Binder, q: &ast::Query) -> Result<(Option<Expr>, Option<Expr>)> {
    match &q.limit_clause {
        None => Ok((None, None)),
        Some(ast::LimitClause::LimitOffset { limit, offset, limit_by }) => {
            if !limit_by.is_empty() {
                return Err(unsupported("LIMIT BY"));
            }
            let l = match limit {
                Some(e) => Some(limit_expr(b, e, "LIMIT")?),
                None => None,
            };
            let o = match offset {
                Some(o) => Some(limit_expr(b, &o.value, "OFFSET")?),
                None => None,
            };
            Ok((l, o))
        }
        Some(ast::LimitClause::OffsetCommaLimit { offset, limit }) => {
            Ok((Some(limit_expr(b, limit, "LIMIT")?), Some(limit_expr(b, offset, "OFFSET")?)))
        }
    }
}

/// `col op key` terms usable by an index on `src`: the key reads only earlier levels (in
/// FROM as written).
pub fn key_terms(on: &[Expr], src: &Source) -> KeyTerms {
    key_terms_over(on, src, &|c| c < src.offset)
}

/// `col op key` terms usable by an index on `src`, where the key reads only columns for
/// which `joined` holds (those of the levels read before this one), and the partial
/// indexes of `src` whose condition `on` implies.
pub fn key_terms_over(on: &[Expr], src: &Source, joined: &dyn Fn(usize) -> bool) -> KeyTerms {
    let range = src.offset..src.offset + src.width();
    let mut out = Vec::new();
    for e in on {
        if let Expr::Cmp(op, a, b) = e {
            if *op == CmpOp::Ne {
                continue;
            }
            for (x, y, o) in [(a, b, *op), (b, a, op.flip())] {
                // A column of this source, or an expression one of its indexes keeps.
                let column = match x.as_ref() {
                    Expr::Column(c) if range.contains(c) => Some(c - src.offset),
                    Expr::Column(_) => None,
                    other => indexed_expression(&src.table, other, src.offset),
                };
                if let Some(column) = column {
                    let mut reads_joined = true;
                    y.visit_columns(&mut |k| reads_joined &= joined(k));
                    if reads_joined {
                        out.push(KeyTerm { column, op: o, key: (**y).clone() });
                        break;
                    }
                }
            }
        }
    }
    KeyTerms { terms: out, partial: implied_partials(&src.table, on, src.offset) }
}
