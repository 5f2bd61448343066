//! CREATE VIEW: a materialized view `SELECT k…, COUNT(*), SUM(x), COUNT(x), MIN(x), MAX(x)
//! FROM src [WHERE filter] [GROUP BY k…]`, kept up to date by storage; or, for a query that
//! does not group, a plain view, expanded by the planner where it is read.
//!
//! A group key is a source column or, as VoltDB allows, a deterministic expression over the
//! source row (`TRUNCATE(DAY, ts)`); the WHERE is a deterministic condition on the source
//! row. Both are bound here and handed to storage compiled (`RowExpr`), since storage
//! computes them for every source row it writes.

use std::sync::Arc;

use lockstep_core::{
    Catalog, ColumnDef, DataType, Error, IndexDef, PlainViewDef, Result, RowExpr, RowFn, TableDef, TableKind, Value, ViewAggregate,
    ViewDef, ViewKey,
};
use sqlparser::ast::{self as ast, SelectItem, SetExpr, TableFactor};

use crate::bind::{ident_name, object_name, Binder, Source, Typed};
use crate::ddl::DdlOutcome;
use crate::ddl_parse::{Cursor, VARIABLE_SIZE_MAX};
use crate::expr::{Env, Expr};
use crate::limits::{Limits, Watch};

/// A bound expression over a source row, as storage runs it: no parameters, no clock, no
/// deadline (it is part of a write that is already running).
#[derive(Debug)]
pub(crate) struct SourceRowFn(pub(crate) Expr);

impl RowFn for SourceRowFn {
    fn eval(&self, row: &[Value]) -> Result<Value> {
        let env = Env { params: &[], now_micros: 0, watch: Watch::new(None), limits: Limits::default(), outer: &[], subqueries: None };
        self.0.eval(row, &env)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Binds `e` over the source row, refusing what storage could not compute the same way on
/// every replica and at every replay: NOW, parameters, subqueries.
fn bind_source_expr(src: &Arc<TableDef>, e: &ast::Expr, what: &str) -> Result<Typed> {
    bind_row_expr(src, e, what, "a materialized view")
}

/// Binds `e` over a row of `src` for storage to compute (`what` of `object`: "the WHERE"
/// of "a materialized view"), refusing aggregates and what is not deterministic.
pub(crate) fn bind_row_expr(src: &Arc<TableDef>, e: &ast::Expr, what: &str, object: &str) -> Result<Typed> {
    let scope = [Source { name: src.name.clone(), table: src.clone(), offset: 0 }];
    if has_parameter(&e.to_string()) {
        return Err(not_deterministic(what, object, e));
    }
    let mut binder = Binder::new(0, None);
    let (typed, had_agg) = binder.bind_input(e, &scope);
    let typed = typed.map_err(|err| err.context(format!("{what} of {object}")))?;
    if had_agg {
        return Err(Error::sql(format!("{what} of {object} cannot use an aggregate: {e}")));
    }
    if !typed.expr.is_deterministic() {
        return Err(not_deterministic(what, object, e));
    }
    Ok(typed)
}

fn not_deterministic(what: &str, object: &str, e: &ast::Expr) -> Error {
    Error::sql(format!(
        "{what} of {object} must give the same answer for a row every time it is computed: {e} reads the clock, a parameter or a subquery (use constants and the row's columns)"
    ))
}

/// Whether SQL text has a `?` parameter outside string literals.
fn has_parameter(sql: &str) -> bool {
    let mut in_string = false;
    sql.chars().any(|c| {
        if c == '\'' {
            in_string = !in_string;
        }
        c == '?' && !in_string
    })
}

fn row_expr(e: &ast::Expr, typed: Typed) -> RowExpr {
    RowExpr { text: e.to_string(), eval: Arc::new(SourceRowFn(typed.expr)) }
}

fn not_in_view(what: &str) -> Error {
    Error::sql(format!("{what} is not supported in materialized views"))
}

fn column_of(src: &TableDef, e: &ast::Expr) -> Result<usize> {
    let id = match e {
        ast::Expr::Identifier(id) => id,
        ast::Expr::CompoundIdentifier(p) if p.len() == 2 => &p[1],
        other => return Err(not_in_view(&format!("expression {other} (use a plain column)"))),
    };
    let n = ident_name(id);
    src.column_index(&n).ok_or_else(|| Error::sql(format!("unknown column {n} in {}", src.name)))
}

/// Whether an upper-cased function name is an aggregate's.
fn is_aggregate(name: &str) -> bool {
    matches!(name, "COUNT" | "SUM" | "MIN" | "MAX" | "AVG")
}

/// Whether a view's query groups (GROUP BY, or an aggregate in its select list): such a
/// view is materialized and kept by storage; any other is a plain view.
fn aggregates(q: &ast::Query) -> bool {
    let SetExpr::Select(s) = q.body.as_ref() else {
        return false;
    };
    let grouped = !matches!(&s.group_by, ast::GroupByExpr::Expressions(v, m) if v.is_empty() && m.is_empty());
    grouped
        || s.projection.iter().any(|item| match item {
            SelectItem::UnnamedExpr(ast::Expr::Function(f)) | SelectItem::ExprWithAlias { expr: ast::Expr::Function(f), .. } => {
                is_aggregate(&f.name.to_string().to_ascii_uppercase())
            }
            _ => false,
        })
}

/// `CREATE VIEW v [(names)] AS <query without grouping>`: a named query the planner expands
/// where the view is read. The query is planned now, so a view that cannot run is refused
/// here.
fn create_plain_view(catalog: &mut Catalog, name: String, names: Option<Vec<String>>, text: &str) -> Result<DdlOutcome> {
    let query = text.trim().trim_end_matches(';').trim_end().to_string();
    let (mut columns, reads) = crate::plan::plan_view(catalog, &query, &name)?;
    if let Some(n) = names {
        if n.len() != columns.len() {
            return Err(Error::sql(format!("view {name} names {} columns but selects {}", n.len(), columns.len())));
        }
        columns = n;
    }
    for (i, col) in columns.iter().enumerate() {
        if columns[..i].iter().any(|c| c.eq_ignore_ascii_case(col)) {
            return Err(Error::sql(format!("view {name} has two columns named {col}: name them apart with AS")));
        }
    }
    catalog.add_plain_view(PlainViewDef { name: name.clone(), query, columns, reads })?;
    Ok(DdlOutcome { message: format!("view {name} created") })
}

pub fn create_view(catalog: &mut Catalog, c: &mut Cursor) -> Result<DdlOutcome> {
    let name = c.ident("a view name")?;
    let names = if c.peek().is_some_and(|t| t.is_punct("(")) { Some(c.name_list("a column name")?) } else { None };
    c.expect_word("AS")?;
    let text = c.rest();
    let stmts = crate::nesting::parse_statements(text, &format!(" in view {name}"))?;
    let q = match stmts.as_slice() {
        [ast::Statement::Query(q)] => q,
        _ => return Err(Error::sql(format!("view {name} must be defined by one SELECT"))),
    };
    if !aggregates(q) {
        return create_plain_view(catalog, name, names, text);
    }
    if q.order_by.is_some() || q.limit_clause.is_some() || q.with.is_some() {
        return Err(not_in_view("ORDER BY / LIMIT / WITH"));
    }
    let s = match q.body.as_ref() {
        SetExpr::Select(s) => s,
        _ => return Err(not_in_view("this kind of query")),
    };
    if s.having.is_some() || s.distinct.is_some() {
        return Err(not_in_view("HAVING / DISTINCT"));
    }
    if s.from.len() != 1 || !s.from[0].joins.is_empty() {
        return Err(not_in_view("a join"));
    }
    let src_name = match &s.from[0].relation {
        TableFactor::Table { name, .. } => object_name(name)?,
        _ => return Err(not_in_view("a subquery")),
    };
    let src = catalog.table(&src_name).cloned().ok_or_else(|| Error::sql(format!("object not found: {src_name}")))?;
    if src.view().is_some() {
        return Err(not_in_view("a view over another view"));
    }
    let filter = match &s.selection {
        Some(w) => {
            let typed = bind_source_expr(&src, w, "the WHERE")?;
            if typed.ty.is_some_and(|t| t != DataType::Boolean) {
                return Err(Error::sql(format!("the WHERE of view {name} must be a condition, not {w}")));
            }
            Some(row_expr(w, typed))
        }
        None => None,
    };
    let group: Vec<GroupKey> = match &s.group_by {
        ast::GroupByExpr::Expressions(v, m) if m.is_empty() => v.iter().map(|e| group_key(&src, e)).collect::<Result<_>>()?,
        _ => return Err(not_in_view("this GROUP BY")),
    };
    let mut group_by = Vec::new();
    let mut aggregates = Vec::new();
    let mut columns: Vec<ColumnDef> = Vec::new();
    for (i, item) in s.projection.iter().enumerate() {
        let (e, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(ident_name(alias))),
            _ => return Err(not_in_view("SELECT *")),
        };
        let col_name = |default: String| names.as_ref().and_then(|n| n.get(i).cloned()).or(alias.clone()).unwrap_or(default);
        let aggregate = match e {
            ast::Expr::Function(f) => is_aggregate(&f.name.to_string().to_ascii_uppercase()).then_some(f),
            _ => None,
        };
        if let Some(f) = aggregate {
            let fname = f.name.to_string().to_ascii_uppercase();
            let args = match &f.args {
                ast::FunctionArguments::List(l) if l.duplicate_treatment.is_none() => &l.args,
                _ => return Err(not_in_view(&format!("{e}"))),
            };
            let arg = match args.as_slice() {
                [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)] => None,
                [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(a))] => Some(column_of(&src, a)?),
                _ => return Err(not_in_view(&format!("{e}"))),
            };
            let (agg, ty, nullable) = match (fname.as_str(), arg) {
                ("COUNT", None) => (ViewAggregate::CountStar, DataType::BigInt, false),
                ("COUNT", Some(a)) => (ViewAggregate::Count(a), DataType::BigInt, false),
                ("SUM", Some(a)) => {
                    let t = src.columns[a].ty;
                    if !t.is_numeric() {
                        return Err(Error::sql(format!("SUM needs a numeric column, not {}", t.sql_name())));
                    }
                    (ViewAggregate::Sum(a), if t.is_integer() { DataType::BigInt } else { t }, true)
                }
                ("MIN", Some(a)) => (ViewAggregate::Min(a), src.columns[a].ty, true),
                ("MAX", Some(a)) => (ViewAggregate::Max(a), src.columns[a].ty, true),
                _ => return Err(not_in_view(&format!("{e}"))),
            };
            let (size, in_bytes) = arg.map(|a| (src.columns[a].size, src.columns[a].in_bytes)).unwrap_or((0, false));
            aggregates.push(agg);
            columns.push(ColumnDef { name: col_name(format!("C{}", i + 1)), ty, size, in_bytes, nullable, default: None });
        } else {
            if !aggregates.is_empty() {
                return Err(Error::sql(format!("in view {name}, the GROUP BY columns must come before the aggregates")));
            }
            let key = group_key(&src, e)?;
            let Some(g) = group.iter().find(|g| g.bound == key.bound) else {
                return Err(Error::sql(format!("{e} in view {name} must be in its GROUP BY")));
            };
            let (def, key) = match g.bound {
                Expr::Column(col) => {
                    let mut def = src.columns[col].clone();
                    def.name = col_name(def.name.clone());
                    def.default = None;
                    (def, ViewKey::Column(col))
                }
                _ => (key_column(g, col_name(format!("C{}", i + 1)))?, ViewKey::Expr(g.row.clone())),
            };
            group_by.push(key);
            columns.push(def);
        }
    }
    if group_by.len() != group.len() {
        return Err(Error::sql(format!("view {name} must select every GROUP BY column, first")));
    }
    if let Some(n) = &names {
        if n.len() != columns.len() {
            return Err(Error::sql(format!("view {name} names {} columns but selects {}", n.len(), columns.len())));
        }
    }
    for (i, col) in columns.iter().enumerate() {
        if columns[..i].iter().any(|c| c.name.eq_ignore_ascii_case(&col.name)) {
            return Err(Error::sql(format!("view {name} has two columns named {}", col.name)));
        }
    }
    let indexes = if group_by.is_empty() {
        Vec::new()
    } else {
        vec![IndexDef {
            name: format!("PK_{name}"),
            columns: (0..group_by.len()).collect(),
            unique: true,
            assume_unique: false,
            primary: true,
            exprs: vec![],
            predicate: None,
        }]
    };
    let partition_column = src.partition_column.and_then(|pc| group_by.iter().position(|g| g.column() == Some(pc)));
    let def = TableDef {
        id: 0,
        name: name.clone(),
        columns,
        indexes,
        partition_column,
        kind: TableKind::View(ViewDef { source: src.id, group_by, aggregates, filter }),
    };
    catalog.add_table(def)?;
    Ok(DdlOutcome { message: format!("view {name} created") })
}

/// A GROUP BY entry of a materialized view: bound over the source row, and compiled.
struct GroupKey {
    bound: Expr,
    ty: Option<DataType>,
    row: RowExpr,
}

fn group_key(src: &Arc<TableDef>, e: &ast::Expr) -> Result<GroupKey> {
    let typed = bind_source_expr(src, e, "a GROUP BY key")?;
    let (bound, ty) = (typed.expr.clone(), typed.ty);
    Ok(GroupKey { bound, ty, row: row_expr(e, typed) })
}

/// The view column of an expression group key: its type from the binder; a string or
/// bytes may be as long as VoltDB allows (an expression such as `CONCAT(a, b)` can be
/// longer than any column it reads).
fn key_column(g: &GroupKey, name: String) -> Result<ColumnDef> {
    let Some(ty) = g.ty else {
        return Err(Error::sql(format!("the type of GROUP BY key {} is unknown: CAST it to a type", g.row.text)));
    };
    let size = if matches!(ty, DataType::Varchar | DataType::Varbinary) { VARIABLE_SIZE_MAX } else { 0 };
    Ok(ColumnDef { name, ty, size, in_bytes: false, nullable: true, default: None })
}
