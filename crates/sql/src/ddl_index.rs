//! CREATE [UNIQUE | ASSUMEUNIQUE] INDEX: key parts that are columns or, as VoltDB allows,
//! deterministic expressions over the row (`FIELD(doc, 'k')`, `a + b`, `SUBSTRING(s, 1, 3)`),
//! and an optional `WHERE` condition that makes the index partial: it holds only the rows
//! for which the condition is true, and a unique one refuses duplicates only among them
//! (PostgreSQL's meaning; VoltDB accepts the same DDL).
//!
//! An expression part is bound here against the table alone and handed to storage
//! compiled (`IndexKeyFn`), which computes it whenever a row is written and keeps the value
//! after the row's columns (`lockstep_core::IndexDef`), so the index needs no change to hold
//! it. The planner finds such an index by comparing a query's bound expression with the
//! compiled one (`indexed_expression`). A partial index's condition is bound the same way
//! and kept as a `SourceRowFn`, whose bound tree the planner reads (`partial_predicate`) to
//! use the index only for queries whose WHERE implies it (`access::implied_partial`).

use std::sync::Arc;

use lockstep_core::{Catalog, DataType, Error, IndexDef, IndexExpr, Result, RowExpr, RowFn, TableDef, Value};
use sqlparser::ast;

use crate::ddl::{check_unique_partitioning, done, index_name_taken, DdlOutcome};
use crate::ddl_parse::Cursor;
use crate::ddl_view::{bind_row_expr, SourceRowFn};
use crate::expr::{Env, Expr};
use crate::limits::{Limits, Watch};

/// Most key parts one index may have (VoltDB's own limit is far above any real index).
pub const INDEX_KEY_PARTS_MAX: usize = 64;

/// An index key expression as storage computes it: the bound expression, its value
/// converted to the key's type (every integer width held as one kind, as the index and the
/// planner's probe values are), so the index orders one kind of value.
#[derive(Debug)]
pub(crate) struct IndexKeyFn {
    pub(crate) expr: Expr,
    ty: DataType,
}

impl RowFn for IndexKeyFn {
    fn eval(&self, row: &[Value]) -> Result<Value> {
        let env = Env { params: &[], now_micros: 0, watch: Watch::new(None), limits: Limits::default(), outer: &[], subqueries: None };
        let v = self.expr.eval(row, &env)?;
        let target = if self.ty.is_integer() { DataType::BigInt } else { self.ty };
        if v.is_null() || v.coerces_to_itself(target) {
            return Ok(v);
        }
        v.coerce_to(target)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// The key position (a hidden one after the columns) of `table`'s index expression that
/// `e` is, when `e` is bound over a source whose columns start at `offset`.
pub fn indexed_expression(table: &TableDef, e: &Expr, offset: usize) -> Option<usize> {
    if matches!(e, Expr::Column(_) | Expr::Const(_) | Expr::Param(_)) {
        return None;
    }
    let width = table.columns.len();
    table
        .computed()
        .position(|k| {
            let Some(f) = k.expr.eval.as_any().downcast_ref::<IndexKeyFn>() else { return false };
            if offset == 0 {
                return f.expr == *e;
            }
            let mut shifted = f.expr.clone();
            shifted.map_columns(&|c| c + offset);
            shifted == *e
        })
        .map(|k| width + k)
}

/// The bound condition of `table`'s index number `index`, when it is a partial index, over
/// the table's columns from 0.
pub fn partial_predicate(table: &TableDef, index: usize) -> Option<&Expr> {
    let p = table.indexes.get(index)?.predicate.as_ref()?;
    p.eval.as_any().downcast_ref::<SourceRowFn>().map(|f| &f.0)
}

/// `WHERE condition` of a partial index: the rest of the statement, bound over `t`. Like
/// an expression key it must be deterministic (no clock, parameter or subquery) and use no
/// aggregate, since storage computes it for every row it writes, on every replica and at
/// every replay.
fn predicate(c: &mut Cursor, t: &Arc<TableDef>, name: &str) -> Result<RowExpr> {
    // The condition runs to the end of the statement: it is parsed from the text, so the
    // cursor's tokens are used up here.
    let text = c.rest().trim();
    while c.next().is_some() {}
    let expected =
        |why: &str| Error::sql(format!("index {name}: expected WHERE followed by a condition on the columns of {}{why}", t.name));
    if text.is_empty() {
        return Err(expected(""));
    }
    let stmts = crate::nesting::parse_statements(&format!("SELECT 1 WHERE {text}"), "").map_err(|e| {
        // The parser's position is in the text built here, not the user's: leave it out.
        let why = e.message.split(" at Line:").next().unwrap_or_default().to_string();
        expected(&format!(" ({why})"))
    })?;
    let cond = match stmts.as_slice() {
        [ast::Statement::Query(q)] if q.order_by.is_none() && q.limit_clause.is_none() && q.with.is_none() => match q.body.as_ref() {
            ast::SetExpr::Select(sel) if sel.group_by == ast::GroupByExpr::Expressions(vec![], vec![]) && sel.having.is_none() => {
                sel.selection.clone()
            }
            _ => None,
        },
        _ => None,
    };
    let Some(cond) = cond else { return Err(expected(&format!(", not {text}"))) };
    let typed = bind_row_expr(t, &cond, "the WHERE", &format!("index {name}"))?;
    if typed.ty != Some(DataType::Boolean) {
        return Err(Error::sql(format!("the WHERE of index {name} must be a condition (true or false for each row), not {cond}")));
    }
    Ok(RowExpr { text: cond.to_string(), eval: Arc::new(SourceRowFn(typed.expr)) })
}

/// Refuses a GEOGRAPHY key (VoltDB indexes polygons only with its own geospatial index,
/// which Lockstep does not have); points may be keys.
pub(crate) fn check_key_type(what: &str, ty: DataType) -> Result<()> {
    if ty == DataType::Geography {
        return Err(Error::sql(format!("{what} is a GEOGRAPHY: polygons cannot be index or key columns")));
    }
    Ok(())
}

/// One key part as written: a column, or an expression with its type.
enum Part {
    Column(usize),
    Expr(RowExpr, DataType),
}

/// `( key [ASC | DESC], … )`: the text between the parentheses is parsed as an ORDER BY
/// list (which has exactly that shape) and each item bound over `t`. A DESC part is kept in
/// ascending order: an ORDER BY … DESC reads the index backwards.
fn key_parts(c: &mut Cursor, t: &Arc<TableDef>, name: &str) -> Result<Vec<Part>> {
    let before = c.rest();
    c.skip_parens()?;
    let group = before[..before.len() - c.rest().len()].trim_end();
    let inner = group.strip_prefix('(').and_then(|g| g.strip_suffix(')')).unwrap_or_default();
    let expected = |why: &str| {
        Error::sql(format!("index {name}: expected ( key [ASC | DESC], … ), each key a column or an expression of {}{why}", t.name))
    };
    let stmts = crate::nesting::parse_statements(&format!("SELECT 1 ORDER BY {inner}"), "").map_err(|e| {
        // The parser's position is in the text built here, not the user's: leave it out.
        let why = e.message.split(" at Line:").next().unwrap_or_default().to_string();
        expected(&format!(" ({why})"))
    })?;
    let items = match stmts.as_slice() {
        [ast::Statement::Query(q)] => match q.order_by.as_ref().map(|o| &o.kind) {
            Some(ast::OrderByKind::Expressions(v)) => v.clone(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    if items.is_empty() {
        return Err(expected(""));
    }
    if items.len() > INDEX_KEY_PARTS_MAX {
        return Err(Error::sql(format!("index {name} has {} keys; at most {INDEX_KEY_PARTS_MAX} are allowed", items.len())));
    }
    let mut parts = Vec::with_capacity(items.len());
    for o in &items {
        if o.options.nulls_first.is_some() || o.with_fill.is_some() {
            return Err(Error::sql(format!("index {name}: a key takes ASC or DESC only, not {o}")));
        }
        parts.push(key_part(t, &o.expr, name)?);
    }
    Ok(parts)
}

fn key_part(t: &Arc<TableDef>, e: &ast::Expr, name: &str) -> Result<Part> {
    let typed = bind_row_expr(t, e, &format!("key {e}"), &format!("index {name}"))?;
    if let Some(ty) = typed.ty {
        check_key_type(&format!("key {e} of index {name}"), ty)?;
    }
    if let Expr::Column(c) = typed.expr {
        return Ok(Part::Column(c));
    }
    if typed.expr.max_column().is_none() {
        return Err(Error::sql(format!("key {e} of index {name} reads no column of {}: index a column or an expression of them", t.name)));
    }
    let ty = typed.ty.ok_or_else(|| Error::sql(format!("key {e} of index {name} has no type of its own: CAST it to one")))?;
    let text = e.to_string();
    Ok(Part::Expr(RowExpr { text, eval: Arc::new(IndexKeyFn { expr: typed.expr, ty }) }, ty))
}

/// `CREATE [UNIQUE | ASSUMEUNIQUE] INDEX name ON table (key [ASC | DESC], …) [WHERE cond]`.
pub fn create_index(catalog: &mut Catalog, c: &mut Cursor, unique: bool, assume_unique: bool) -> Result<DdlOutcome> {
    let name = c.ident("an index name")?;
    c.expect_word("ON")?;
    let tname = c.ident("a table name")?;
    let t = catalog.table(&tname).cloned().ok_or_else(|| Error::sql(format!("object not found: {tname}")))?;
    if t.is_stream() {
        return Err(Error::sql(format!("cannot index stream {tname}")));
    }
    let parts = key_parts(c, &t, &name)?;
    let predicate = if c.eat_word("WHERE") {
        if t.view().is_some() {
            return Err(Error::sql(format!("index {name}: a view's indexes cannot be partial (WHERE); index the view whole")));
        }
        Some(predicate(c, &t, &name)?)
    } else {
        None
    };
    c.expect_end()?;
    if let Some(other) = index_name_taken(catalog, &name) {
        return Err(Error::sql(format!("index name {name} is already used by table {other}")));
    }
    let mut columns = Vec::with_capacity(parts.len());
    let mut exprs: Vec<IndexExpr> = Vec::new();
    for (part, p) in parts.into_iter().enumerate() {
        match p {
            Part::Column(col) => {
                if columns.contains(&col) {
                    return Err(Error::sql(format!("column {} appears twice in index {name}", t.columns[col].name)));
                }
                columns.push(col);
            }
            Part::Expr(expr, ty) => {
                if t.view().is_some() {
                    return Err(Error::sql(format!("index {name}: a view's indexes take columns only, not {}", expr.text)));
                }
                if exprs.iter().any(|x| x.expr == expr) {
                    return Err(Error::sql(format!("key {} appears twice in index {name}", expr.text)));
                }
                // A placeholder: `TableDef::number_computed` gives the hidden position.
                columns.push(usize::MAX);
                exprs.push(IndexExpr { part, expr, ty });
            }
        }
    }
    let mut def = (*t).clone();
    let ix = IndexDef { name: name.clone(), columns, unique: unique && !assume_unique, assume_unique, primary: false, exprs, predicate };
    check_unique_partitioning(&def, &ix)?;
    def.indexes.push(ix);
    catalog.replace_table(def)?;
    done(format!("index {name} created on {}", t.name))
}
