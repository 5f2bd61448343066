//! Planning INSERT / UPSERT, UPDATE and DELETE.

use std::sync::Arc;

use lockstep_core::{Catalog, DataType, Error, Result, TableDef, TableKind, Value};
use sqlparser::ast::{self as ast, SetExpr, TableFactor, TableObject};

use crate::access::{choose_access, Access};
use crate::bind::{ident_name, object_name, Binder, Source};
use crate::expr::Expr;
use crate::func::Func;
use crate::plan::{is_partitioned, key_terms, plan_query, Level, SelectPlan};

/// `DEFAULT NOW` / `DEFAULT CURRENT_TIMESTAMP` is kept in the catalog as this value, since
/// `ColumnDef::default` can only hold a constant.
pub const DEFAULT_NOW_SENTINEL: Value = Value::Timestamp(i64::MIN);
/// Most rows one INSERT … VALUES may list.
pub const INSERT_ROWS_MAX: usize = 10_000;

#[derive(Clone, Debug)]
pub enum InsertSource {
    /// Rows of expressions, one per listed column.
    Values(Vec<Vec<Expr>>),
    Select(Box<SelectPlan>),
}

#[derive(Clone, Debug)]
pub struct InsertPlan {
    pub table: Arc<TableDef>,
    pub upsert: bool,
    /// Target column of each provided value.
    pub columns: Vec<usize>,
    pub source: InsertSource,
    /// The value of every column when not provided (DEFAULT, NOW or NULL).
    pub defaults: Vec<Expr>,
    /// A migrating table's flags: a row an UPSERT updates stops migrating.
    pub migrate_flags: Option<crate::migrate::Flags>,
}

#[derive(Clone, Debug)]
pub struct UpdatePlan {
    pub level: Level,
    pub sets: Vec<(usize, Expr)>,
    /// A migrating table's flags: an updated row stops migrating.
    pub migrate_flags: Option<crate::migrate::Flags>,
}

#[derive(Clone, Debug)]
pub struct DeletePlan {
    pub level: Level,
    /// `ORDER BY col [ASC|DESC], …`: (column, descending); empty without ORDER BY.
    pub order: Vec<(usize, bool)>,
    /// `LIMIT n` (a constant or a parameter): at most n rows, the first in `order`.
    pub limit: Option<Expr>,
    /// `MIGRATE FROM`: flag the rows and queue them to the export target instead.
    pub migrate: Option<crate::migrate::MigratePlan>,
    /// A migrating table's flags: a deleted row's flag goes with it.
    pub migrate_flags: Option<crate::migrate::Flags>,
}

impl DeletePlan {
    /// Whether it deletes only some of the rows it matches (ORDER BY … LIMIT), which is
    /// deterministic only when it runs on one partition.
    pub fn is_limited(&self) -> bool {
        self.limit.is_some()
    }
}

fn writable_table(catalog: &Catalog, name: &ast::ObjectName, verb: &str) -> Result<Arc<TableDef>> {
    let n = object_name(name)?;
    let t = catalog.table(&n).ok_or_else(|| Error::sql(format!("object not found: {n}")))?;
    match &t.kind {
        // A view of a stream: the stream holds no rows to recount, so its rows may go.
        TableKind::View(v)
            if verb == "delete from" && catalog.table_by_id(v.source).is_some_and(|s| matches!(s.kind, TableKind::Stream { .. })) =>
        {
            Ok(t.clone())
        }
        TableKind::View(_) => Err(Error::sql(format!("cannot {verb} view {}: materialized views are read-only", t.name))),
        TableKind::Stream { .. } if verb != "insert into" => {
            Err(Error::sql(format!("cannot {verb} stream {}: streams accept INSERT only", t.name)))
        }
        _ => Ok(t.clone()),
    }
}

/// A single-source level for UPDATE/DELETE.
fn single_level(catalog: &Catalog, table: Arc<TableDef>, name: String, filter: Vec<Expr>) -> Level {
    let source = Source { name, table: table.clone(), offset: 0 };
    let access = choose_access(&table, &key_terms(&filter, &source));
    let mut level = Level {
        partitioned: is_partitioned(catalog, &table),
        source,
        left: false,
        access,
        on: filter,
        residual: Vec::new(),
        post: Vec::new(),
        gather_access: Access::Scan,
        gather_filter: Vec::new(),
        merge_view: false,
        derived: None,
        written: 0,
        hash: Vec::new(),
    };
    level.residual = crate::access::residual_filters(&level);
    level
}

fn where_terms(b: &mut Binder, sel: Option<&ast::Expr>, scope: &[Source]) -> Result<Vec<Expr>> {
    let mut terms = Vec::new();
    if let Some(w) = sel {
        let (t, had) = b.bind_input(w, scope);
        if had {
            return Err(Error::sql("aggregate functions are not allowed in WHERE"));
        }
        t?.expr.conjuncts(&mut terms);
    }
    Ok(terms)
}

fn table_and_alias(f: &TableFactor) -> Result<(&ast::ObjectName, Option<String>)> {
    match f {
        TableFactor::Table { name, alias, args: None, .. } => Ok((name, alias.as_ref().map(|a| ident_name(&a.name)))),
        other => Err(Error::sql(format!("cannot modify {other}"))),
    }
}

pub fn plan_update(catalog: &Catalog, b: &mut Binder, u: &ast::Update) -> Result<UpdatePlan> {
    if !u.table.joins.is_empty() || u.from.is_some() || u.returning.is_some() || u.output.is_some() || u.or.is_some() || u.limit.is_some() {
        return Err(Error::sql("UPDATE supports only: UPDATE table SET col = expr, … [WHERE …]"));
    }
    let (name, alias) = table_and_alias(&u.table.relation)?;
    let table = writable_table(catalog, name, "update")?;
    let sname = alias.unwrap_or_else(|| table.name.clone());
    let scope = [Source { name: sname.clone(), table: table.clone(), offset: 0 }];
    let mut sets: Vec<(usize, Expr)> = Vec::new();
    for a in &u.assignments {
        let col_name = match &a.target {
            ast::AssignmentTarget::ColumnName(n) => object_name(n)?,
            ast::AssignmentTarget::Tuple(_) => return Err(Error::sql("UPDATE … SET (a, b) = … is not supported")),
        };
        let c = table.column_index(&col_name).ok_or_else(|| Error::sql(format!("unknown column {col_name} in {}", table.name)))?;
        // Assigning the partition column is allowed only to its current value (checked
        // per row when it runs): VoltDB's default `T.update` sets every column.
        if sets.iter().any(|(x, _)| *x == c) {
            return Err(Error::sql(format!("column {col_name} is assigned twice")));
        }
        let (t, had) = b.bind_input(&a.value, &scope);
        if had {
            return Err(Error::sql("aggregate functions are not allowed in UPDATE … SET"));
        }
        let t = t?;
        let ty = table.columns[c].ty;
        b.infer_param(&t, Some(ty));
        sets.push((c, const_for_column(t.expr, &table, c)?));
    }
    let filter = where_terms(b, u.selection.as_ref(), &scope)?;
    let migrate_flags = crate::migrate::flags_of(catalog, &table);
    Ok(UpdatePlan { level: single_level(catalog, table, sname, filter), sets, migrate_flags })
}

pub fn plan_delete(catalog: &Catalog, b: &mut Binder, d: &ast::Delete) -> Result<DeletePlan> {
    let from = match &d.from {
        ast::FromTable::WithFromKeyword(v) | ast::FromTable::WithoutKeyword(v) => v,
    };
    if !d.tables.is_empty() || d.using.is_some() || d.returning.is_some() || from.len() != 1 || !from[0].joins.is_empty() {
        return Err(Error::sql("DELETE supports only: DELETE FROM table [WHERE …] [ORDER BY column, … LIMIT n]"));
    }
    let (name, alias) = table_and_alias(&from[0].relation)?;
    let table = writable_table(catalog, name, "delete from")?;
    let sname = alias.unwrap_or_else(|| table.name.clone());
    let scope = [Source { name: sname.clone(), table: table.clone(), offset: 0 }];
    let filter = where_terms(b, d.selection.as_ref(), &scope)?;
    let order = delete_order(&table, &d.order_by)?;
    let limit = match &d.limit {
        Some(_) if order.is_empty() => {
            return Err(Error::sql(format!(
                "DELETE … LIMIT needs an ORDER BY over a unique key of {} so that every replica deletes the same rows",
                table.name
            )));
        }
        Some(e) => Some(crate::plan::limit_expr(b, e, "LIMIT")?),
        None => None,
    };
    let migrate_flags = crate::migrate::flags_of(catalog, &table);
    Ok(DeletePlan { level: single_level(catalog, table, sname, filter), order, limit, migrate: None, migrate_flags })
}

/// `DELETE … ORDER BY`: plain columns of the table, which (as in VoltDB) must include every
/// column of its primary key or of a unique index, or be every column, so that the order,
/// and so the rows a LIMIT keeps, is the same on every replica.
fn delete_order(table: &TableDef, order_by: &[ast::OrderByExpr]) -> Result<Vec<(usize, bool)>> {
    let mut order = Vec::with_capacity(order_by.len());
    for o in order_by {
        let col_name = match &o.expr {
            ast::Expr::Identifier(i) => ident_name(i),
            ast::Expr::CompoundIdentifier(parts) if !parts.is_empty() => ident_name(&parts[parts.len() - 1]),
            other => return Err(Error::sql(format!("DELETE … ORDER BY takes column names, not {other}"))),
        };
        let c = table.column_index(&col_name).ok_or_else(|| Error::sql(format!("unknown column {col_name} in {}", table.name)))?;
        if o.options.nulls_first.is_some() || o.with_fill.is_some() {
            return Err(Error::sql("DELETE … ORDER BY takes column [ASC | DESC] only (NULLS FIRST/LAST is not supported)"));
        }
        order.push((c, matches!(o.options.sort, Some(ast::OrderBySort::Desc))));
    }
    if order.is_empty() {
        return Ok(order);
    }
    let has = |c: &usize| order.iter().any(|(o, _)| o == c);
    // A partial unique index leaves rows outside its condition free to repeat a key.
    let unique =
        table.indexes.iter().any(|i| (i.unique || i.primary) && !i.assume_unique && i.predicate.is_none() && i.columns.iter().all(has));
    if !unique && !(0..table.columns.len()).all(|c| has(&c)) {
        return Err(Error::sql(format!(
            "DELETE … ORDER BY must name every column of {}'s primary key or of one of its unique indexes (or every column), \
             so that every replica deletes the same rows",
            table.name
        )));
    }
    Ok(order)
}

/// Converts a constant to the column's type now, so a bad literal fails at prepare time.
fn const_for_column(e: Expr, table: &TableDef, c: usize) -> Result<Expr> {
    match e {
        Expr::Const(v) => {
            let col = &table.columns[c];
            let v = v.coerce_to(col.ty).map_err(|err| err.context(format!("column {} of {}", col.name, table.name)))?;
            Ok(Expr::Const(v))
        }
        e => Ok(e),
    }
}

fn default_expr(table: &TableDef, c: usize) -> Expr {
    match &table.columns[c].default {
        Some(v) if *v == DEFAULT_NOW_SENTINEL && table.columns[c].ty == DataType::Timestamp => Expr::Func(Func::Now, vec![]),
        Some(v) => Expr::Const(v.clone()),
        None => Expr::Const(Value::Null),
    }
}

pub fn plan_insert(catalog: &Catalog, b: &mut Binder, ins: &ast::Insert, upsert: bool) -> Result<InsertPlan> {
    if ins.or.is_some()
        || ins.ignore
        || ins.on.is_some()
        || ins.returning.is_some()
        || !ins.assignments.is_empty()
        || ins.partitioned.is_some()
        || ins.overwrite
    {
        return Err(Error::sql("INSERT supports only: INSERT INTO table [(cols)] VALUES (…) | SELECT …"));
    }
    let name = match &ins.table {
        TableObject::TableName(n) => n,
        _ => return Err(Error::sql("INSERT needs a table name")),
    };
    let table = writable_table(catalog, name, "insert into")?;
    let columns: Vec<usize> = if ins.columns.is_empty() {
        (0..table.columns.len()).collect()
    } else {
        let mut v = Vec::new();
        for c in &ins.columns {
            let n = object_name(c)?;
            let i = table.column_index(&n).ok_or_else(|| Error::sql(format!("unknown column {n} in {}", table.name)))?;
            if v.contains(&i) {
                return Err(Error::sql(format!("column {n} is listed twice")));
            }
            v.push(i);
        }
        v
    };
    if upsert {
        let pk = table.primary_key().ok_or_else(|| Error::sql(format!("UPSERT needs a primary key, and {} has none", table.name)))?;
        if let Some(&missing) = pk.columns.iter().find(|c| !columns.contains(c)) {
            return Err(Error::sql(format!("UPSERT must give the primary key column {}", table.columns[missing].name)));
        }
    }
    for (c, col) in table.columns.iter().enumerate() {
        if !columns.contains(&c) && !col.nullable && col.default.is_none() {
            return Err(Error::sql(format!("column {} of {} has no default and is not nullable: give it a value", col.name, table.name)));
        }
    }
    let q = ins.source.as_ref().ok_or_else(|| Error::sql("INSERT needs VALUES or a SELECT"))?;
    let source = match q.body.as_ref() {
        SetExpr::Values(values) if q.order_by.is_none() && q.limit_clause.is_none() => {
            if values.rows.len() > INSERT_ROWS_MAX {
                return Err(Error::sql(format!("INSERT may list at most {INSERT_ROWS_MAX} rows")));
            }
            let mut rows = Vec::with_capacity(values.rows.len());
            for r in &values.rows {
                if r.content.len() != columns.len() {
                    return Err(Error::sql(format!(
                        "INSERT into {} gives {} values for {} columns",
                        table.name,
                        r.content.len(),
                        columns.len()
                    )));
                }
                let mut row = Vec::with_capacity(columns.len());
                for (e, &c) in r.content.iter().zip(&columns) {
                    let (t, had) = b.bind_input(e, &[]);
                    if had {
                        return Err(Error::sql("aggregate functions are not allowed in VALUES"));
                    }
                    let t = t?;
                    b.infer_param(&t, Some(table.columns[c].ty));
                    row.push(const_for_column(t.expr, &table, c)?);
                }
                rows.push(row);
            }
            InsertSource::Values(rows)
        }
        SetExpr::Values(_) => return Err(Error::sql("ORDER BY / LIMIT after VALUES is not supported")),
        SetExpr::Select(_) | SetExpr::SetOperation { .. } | SetExpr::Query(_) => {
            let plan = plan_query(catalog, b, q)?;
            if plan.columns.len() != columns.len() {
                return Err(Error::sql(format!(
                    "INSERT into {} selects {} columns for {} target columns",
                    table.name,
                    plan.columns.len(),
                    columns.len()
                )));
            }
            InsertSource::Select(Box::new(plan))
        }
        _ => return Err(Error::sql("INSERT needs VALUES or a SELECT")),
    };
    let defaults = (0..table.columns.len()).map(|c| default_expr(&table, c)).collect();
    let migrate_flags = if upsert { crate::migrate::flags_of(catalog, &table) } else { None };
    Ok(InsertPlan { table, upsert, columns, source, defaults, migrate_flags })
}
