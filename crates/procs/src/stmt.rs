//! The statement API procedures see: `sql [[...]]` at load time, then `stmt:query/first/
//! values/exec/bind`, `batch(...)` and the result objects they return, plus `result_table`.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use lockstep_core::{DataType, ResultColumn, ResultTable, Value};
use mlua::{AnyUserData, LightUserData, Lua, LuaString, MultiValue, Table, UserData, UserDataFields, Value as LuaValue};

use crate::errors::{located, located_host_error};
use crate::result_obj::{self, Held};
use crate::shared::{Fatal, Shared};
use crate::{convert, freeze};
use crate::{raw_result, raw_stmt};

/// Longest SQL text `sql()` accepts.
pub(crate) const SQL_TEXT_MAX_BYTES: usize = 64 * 1024;
/// Most statements one `batch(...)` may run (VoltDB's limit is 200; ours is roomier).
pub(crate) const BATCH_LEN_MAX: usize = 1_000;
/// Most columns `result_table` builds.
pub(crate) const RESULT_COLUMNS_MAX: usize = 1_024;
/// How much SQL text an error message quotes.
const SQL_QUOTE_MAX_CHARS: usize = 60;

/// A statement planned at load time.
pub(crate) struct Stmt {
    pub(crate) id: usize,
    pub(crate) param_types: Vec<Option<lockstep_core::DataType>>,
    text: String,
    pub(crate) shared: Rc<Shared>,
    /// The lower-case keys of the result's columns, by the plan's column name, kept between
    /// calls: `first` would otherwise lower-case every name on every call.
    keys: RefCell<ColumnKeys>,
}

/// Column names with their lower-case keys. Shared, not borrowed, by a row being built: Lua
/// may run a finalizer that calls the same statement meanwhile.
pub(crate) type ColumnKeys = Rc<[(Arc<str>, Box<[u8]>)]>;

/// What `sql [[...]]` gives Lua: a userdata holding the statement. Its user value holds a
/// light pointer to the `Stmt`, which the `Rc` keeps in place, for the C functions behind
/// `first`, `values` and `exec` (`raw_stmt.rs`).
pub(crate) struct StmtRef(pub(crate) Rc<Stmt>);

/// A statement with its parameters, waiting for `batch`, when a parameter is an array (the
/// array is converted at bind time, so later changes to the Lua table do not leak in).
/// Scalar-only bindings are plain Lua tables instead (see [`BOUND_NAME`]): a userdata costs
/// a Rust allocation and a finalizer run by the collector, on every call of a procedure.
pub(crate) struct Bound {
    id: usize,
    params: Vec<Value>,
}

/// `__name` (and `__metatable`) of the metatable of scalar-only bound statements: a table
/// `{stmt, arg1, arg2, ...}` whose arguments `batch` converts and checks again.
pub(crate) const BOUND_NAME: &str = "bound statement";

/// The first row of a result as a row table, without keeping the result (the slow path of
/// `stmt:first`; the usual one is `raw_stmt::first`).
fn first_row(lua: &Lua, stmt: &Stmt, table: &ResultTable) -> mlua::Result<LuaValue> {
    let Some(row) = table.rows.first() else {
        return Ok(LuaValue::Nil);
    };
    let keys = stmt.keys_for(&table.columns);
    let t = lua.create_table_with_capacity(0, keys.len())?;
    for ((_, k), v) in keys.iter().zip(row) {
        t.raw_set(lua.create_string(k)?, convert::to_lua(lua, v)?)?;
    }
    Ok(LuaValue::Table(t))
}

/// Hands `table`'s rows to `row` one at a time until it returns false, as
/// `TxnHost::execute_each` does; returns what `exec` returns ([`modified_count`]).
pub fn each_row_of(table: &ResultTable, row: &mut dyn FnMut(&[Value]) -> lockstep_core::Result<bool>) -> lockstep_core::Result<i64> {
    for r in &table.rows {
        if !row(r)? {
            break;
        }
    }
    Ok(modified_count(table))
}

/// What `exec` returns: the modified-tuples count of DML, the row count of anything else.
pub fn modified_count(table: &ResultTable) -> i64 {
    let is_dml = table.columns.len() == 1 && table.rows.len() == 1 && table.columns[0].name.eq_ignore_ascii_case("modified_tuples");
    match (is_dml, table.first_value()) {
        (true, Some(Value::Int(n))) => *n,
        _ => table.rows.len() as i64,
    }
}

impl Stmt {
    /// The lower-case keys of `columns`, made once and kept while the columns stay the same
    /// (a statement's result columns are its plan's).
    pub(crate) fn keys_for(&self, columns: &[ResultColumn]) -> ColumnKeys {
        let mut keys = self.keys.borrow_mut();
        let cached = keys.len() == columns.len() && keys.iter().zip(columns).all(|((name, _), c)| *name == c.name);
        if !cached {
            *keys = columns.iter().map(|c| (c.name.clone(), c.name.to_ascii_lowercase().into_bytes().into())).collect();
        }
        keys.clone()
    }

    fn quoted(&self) -> String {
        let mut q: String = self.text.trim().chars().take(SQL_QUOTE_MAX_CHARS).collect();
        if self.text.trim().chars().count() > SQL_QUOTE_MAX_CHARS {
            q.push('…');
        }
        q
    }

    /// The call's arguments as statement parameters, checked against the plan.
    fn params(&self, lua: &Lua, args: &MultiValue) -> mlua::Result<Vec<Value>> {
        self.params_from(lua, args.len(), args.iter())
    }

    /// Fails unless `given` arguments is this statement's parameter count.
    fn check_count(&self, lua: &Lua, given: usize) -> mlua::Result<()> {
        if given == self.param_types.len() {
            return Ok(());
        }
        Err(located(
            lua,
            format_args!("statement \"{}\" takes {} parameters but was given {}", self.quoted(), self.param_types.len(), given),
        ))
    }

    /// `len` arguments as statement parameters, checked against the plan.
    fn params_from<'a>(&self, lua: &Lua, len: usize, args: impl Iterator<Item = &'a LuaValue>) -> mlua::Result<Vec<Value>> {
        self.check_count(lua, len)?;
        let mut params = Vec::with_capacity(len);
        for (i, (arg, ty)) in args.zip(&self.param_types).enumerate() {
            match convert::to_param(arg, *ty, i + 1) {
                Ok(v) => params.push(v),
                Err(msg) => return Err(located(lua, format_args!("{msg} (statement \"{}\")", self.quoted()))),
            }
        }
        Ok(params)
    }

    /// `stmt:bind(...)`: checks the arguments now (errors point at the bind), then keeps
    /// them in a plain table, or converted in a [`Bound`] when one is an array.
    fn bind(&self, lua: &Lua, ud: AnyUserData, args: MultiValue) -> mlua::Result<LuaValue> {
        // A bound statement is a plain table: kept by the module, a call could change it.
        if !self.shared.in_call() {
            return Err(outside_body(lua));
        }
        if args.iter().any(|a| matches!(a, LuaValue::Table(_))) {
            let params = self.params(lua, &args)?;
            return Ok(LuaValue::UserData(lua.create_userdata(Bound { id: self.id, params })?));
        }
        self.check_count(lua, args.len())?;
        for (i, (arg, ty)) in args.iter().zip(&self.param_types).enumerate() {
            if let Err(msg) = convert::check_scalar_param(arg, *ty, i + 1) {
                return Err(located(lua, format_args!("{msg} (statement \"{}\")", self.quoted())));
            }
        }
        let t = lua.create_table_with_capacity(args.len() + 1, 0)?;
        t.raw_set(1, ud)?;
        for (i, arg) in args.into_iter().enumerate() {
            t.raw_set(i + 2, arg)?;
        }
        t.set_metatable(self.shared.bound_meta.get().cloned())?;
        Ok(LuaValue::Table(t))
    }

    fn run(&self, lua: &Lua, args: &MultiValue) -> mlua::Result<ResultTable> {
        let params = self.params(lua, args)?;
        match self.shared.with_host(|h| h.execute(self.id, params)) {
            Some(Ok(t)) => Ok(t),
            Some(Err(e)) => Err(host_failed(lua, &self.shared, e)),
            None => Err(outside_body(lua)),
        }
    }
}

/// Records a host error as fatal (it keeps its kind) and unwinds the Lua stack.
fn host_failed(lua: &Lua, shared: &Shared, e: lockstep_core::Error) -> mlua::Error {
    shared.set_fatal(Fatal::Host(located_host_error(lua, e)));
    mlua::Error::RuntimeError("statement failed".into())
}

fn outside_body(lua: &Lua) -> mlua::Error {
    located(lua, "statements run only inside the procedure body, not while the module loads")
}

impl UserData for StmtRef {
    fn add_fields<F: UserDataFields<Self>>(fields: &mut F) {
        // The methods sit in a plain `__index` table, so that `first` and `exec` can be C
        // functions that Lua calls directly (see `raw_stmt.rs`).
        fields.add_meta_field_with("__index", stmt_methods);
        // Lua's own errors name the type: "attempt to index a statement value".
        fields.add_meta_field("__name", "statement");
    }
}

/// The methods of statements: `first`, `values` and `exec` as C functions falling back to
/// the Rust ones kept in the registry, `query` and `bind` as Rust functions.
fn stmt_methods(lua: &Lua) -> mlua::Result<Table> {
    let stmt = |ud: &AnyUserData| ud.borrow::<StmtRef>().map(|r| r.0.clone());
    lua.set_named_registry_value(
        raw_stmt::FIRST_SLOW,
        lua.create_function(move |lua, (ud, args): (AnyUserData, MultiValue)| {
            let this = stmt(&ud)?;
            let _lift = this.shared.lift_heap_limit(lua);
            first_row(lua, &this, &this.run(lua, &args)?)
        })?,
    )?;
    lua.set_named_registry_value(
        raw_stmt::VALUES_SLOW,
        lua.create_function(move |lua, (ud, args): (AnyUserData, MultiValue)| {
            let this = stmt(&ud)?;
            let _lift = this.shared.lift_heap_limit(lua);
            let table = this.run(lua, &args)?;
            let row = table.rows.first().map(Vec::as_slice).unwrap_or_default();
            row.iter().map(|v| convert::to_lua(lua, v)).collect::<mlua::Result<MultiValue>>()
        })?,
    )?;
    lua.set_named_registry_value(
        raw_stmt::EXEC_SLOW,
        lua.create_function(move |lua, (ud, args): (AnyUserData, MultiValue)| {
            let this = stmt(&ud)?;
            Ok(modified_count(&this.run(lua, &args)?))
        })?,
    )?;
    lua.set_named_registry_value(
        raw_stmt::QUERY_SLOW,
        lua.create_function(move |lua, (ud, args): (AnyUserData, MultiValue)| {
            let this = stmt(&ud)?;
            result_obj::make(lua, Held::new(this.run(lua, &args)?, &this.shared))
        })?,
    )?;
    let methods = lua.create_table()?;
    methods.raw_set(
        "bind",
        lua.create_function(move |lua, (ud, args): (AnyUserData, MultiValue)| {
            let this = stmt(&ud)?;
            let _lift = this.shared.lift_heap_limit(lua);
            this.bind(lua, ud, args)
        })?,
    )?;
    // SAFETY: these are C functions following the rules in raw_stmt.rs.
    methods.raw_set("first", unsafe { lua.create_c_function(raw_stmt::first)? })?;
    methods.raw_set("values", unsafe { lua.create_c_function(raw_stmt::values)? })?;
    methods.raw_set("exec", unsafe { lua.create_c_function(raw_stmt::exec)? })?;
    methods.raw_set("query", unsafe { lua.create_c_function(raw_stmt::query)? })?;
    Ok(methods)
}

impl UserData for Bound {}

/// Puts `sql`, `batch` and `result_table` into the sandbox's base table.
pub(crate) fn register(lua: &Lua, base: &Table, shared: &Rc<Shared>) -> mlua::Result<()> {
    // `__metatable` hides the metatable from getmetatable/setmetatable, so procedures can
    // neither forge a bound statement from a table nor change this one.
    let bound_meta = lua.create_table()?;
    bound_meta.raw_set("__name", BOUND_NAME)?;
    bound_meta.raw_set("__metatable", BOUND_NAME)?;
    let _ = shared.bound_meta.set(bound_meta);
    result_obj::register(lua, shared)?;
    let s = shared.clone();
    base.raw_set(
        "sql",
        lua.create_function(move |lua, text: LuaValue| {
            let LuaValue::String(text) = text else {
                return Err(located(lua, "sql() takes the statement text as a string"));
            };
            let text = text.to_str().map_err(|_| located(lua, "sql() text is not valid UTF-8"))?.to_string();
            if text.len() > SQL_TEXT_MAX_BYTES {
                return Err(located(lua, format_args!("sql() text is {} bytes; the limit is {SQL_TEXT_MAX_BYTES}", text.len())));
            }
            match s.with_prepare(|prepare| prepare(&text)) {
                Some(Ok(info)) => {
                    let stmt = Rc::new(Stmt {
                        id: info.id,
                        param_types: info.param_types,
                        text,
                        shared: s.clone(),
                        keys: RefCell::new(Rc::new([])),
                    });
                    let at = Rc::as_ptr(&stmt).cast_mut().cast();
                    let ud = lua.create_userdata(StmtRef(stmt))?;
                    ud.set_user_value(LightUserData(at))?;
                    Ok(ud)
                }
                Some(Err(e)) => Err(host_failed(lua, &s, e)),
                None => Err(located(
                    lua,
                    "sql() can only be called while the module loads (at module level, outside \
                     the body function)",
                )),
            }
        })?,
    )?;
    let s = shared.clone();
    base.raw_set("batch", lua.create_function(move |lua, args: MultiValue| batch(lua, &s, args))?)?;
    let s = shared.clone();
    lua.set_named_registry_value(raw_result::SLOW, lua.create_function(move |lua, args| result_table(lua, &s, args))?)?;
    // SAFETY: a C function following the rules in raw_stmt.rs and raw_result.rs.
    base.raw_set("result_table", unsafe { lua.create_c_function(raw_result::result_table)? })?;
    Ok(())
}

/// `batch(b1, b2, ...)` returns the results in order; `batch({b1, b2, ...})` returns an array.
fn batch(lua: &Lua, shared: &Shared, args: MultiValue) -> mlua::Result<MultiValue> {
    let _lift = shared.lift_heap_limit(lua);
    let (items, as_array): (Vec<LuaValue>, bool) = match args.front() {
        // One table is the array form, unless it is itself a bound statement.
        Some(LuaValue::Table(t)) if args.len() == 1 && !is_bound(shared, t) => {
            let t = freeze::readable(t.clone());
            let len = t.raw_len();
            if len > BATCH_LEN_MAX {
                return Err(batch_too_long(lua, len));
            }
            let mut items = Vec::with_capacity(len);
            for i in 1..=len {
                items.push(t.raw_get(i)?);
            }
            (items, true)
        }
        _ => (args.into_iter().collect(), false),
    };
    if items.len() > BATCH_LEN_MAX {
        return Err(batch_too_long(lua, items.len()));
    }
    let mut calls = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let call = match item {
            LuaValue::Table(t) => bound_call(lua, shared, t)?,
            LuaValue::UserData(ud) => ud.borrow::<Bound>().ok().map(|b| (b.id, b.params.clone())),
            _ => None,
        };
        let Some(call) = call else {
            return Err(located(
                lua,
                format_args!("batch() item {} is a {}; pass statements bound with stmt:bind(...)", i + 1, item.type_name()),
            ));
        };
        calls.push(call);
    }
    let tables = match shared.with_host(|h| h.execute_batch(calls)) {
        Some(Ok(tables)) => tables,
        Some(Err(e)) => return Err(host_failed(lua, shared, e)),
        None => return Err(outside_body(lua)),
    };
    if tables.len() != items.len() {
        let e = lockstep_core::Error::unexpected(format!(
            "the engine returned {} results for a batch of {} statements",
            tables.len(),
            items.len()
        ));
        return Err(host_failed(lua, shared, e));
    }
    let mut out = MultiValue::with_capacity(tables.len());
    for t in tables {
        out.push_back(LuaValue::UserData(result_obj::make(lua, Held::new(t, shared))?));
    }
    if as_array {
        let t = lua.create_sequence_from(out)?;
        return Ok(MultiValue::from_vec(vec![LuaValue::Table(t)]));
    }
    Ok(out)
}

/// Whether `t` is a scalar-only bound statement made by `stmt:bind`.
pub(crate) fn is_bound(shared: &Shared, t: &Table) -> bool {
    match (t.metatable(), shared.bound_meta.get()) {
        (Some(mt), Some(bound)) => mt == *bound,
        _ => false,
    }
}

/// The statement and converted parameters of a bound-statement table; None when `t` is not
/// one. The arguments are converted (and so checked) again here: the table is plain Lua.
fn bound_call(lua: &Lua, shared: &Shared, t: &Table) -> mlua::Result<Option<(usize, Vec<Value>)>> {
    if !is_bound(shared, t) {
        return Ok(None);
    }
    let LuaValue::UserData(ud) = t.raw_get::<LuaValue>(1)? else {
        return Ok(None);
    };
    let Ok(stmt) = ud.borrow::<StmtRef>() else {
        return Ok(None);
    };
    let stmt = &stmt.0;
    // raw_len is at least 1 here (slot 1 holds the statement); trailing nil arguments
    // shorten a Lua sequence, so count the slots the statement expects when they are nil.
    let len = t.raw_len().saturating_sub(1).max(stmt.param_types.len());
    let mut args = Vec::with_capacity(len);
    for i in 0..len {
        args.push(t.raw_get::<LuaValue>(i + 2)?);
    }
    Ok(Some((stmt.id, stmt.params_from(lua, len, args.iter())?)))
}

fn batch_too_long(lua: &Lua, len: usize) -> mlua::Error {
    located(lua, format_args!("batch() of {len} statements; the limit is {BATCH_LEN_MAX}"))
}

/// `result_table({"name", "count"}, {{"a", 1}, {"b", 2}})`: a result built in Lua. Column
/// types come from the first non-nil value of each column (VARCHAR when all are nil).
fn result_table(lua: &Lua, shared: &Shared, (names, rows): (LuaValue, LuaValue)) -> mlua::Result<AnyUserData> {
    if !shared.in_call() {
        // A result is consumed when a call returns it: the module cannot keep one.
        return Err(located(lua, "result_table() runs only inside the procedure body, not while the module loads"));
    }
    let (LuaValue::Table(names_table), LuaValue::Table(rows)) = (names, rows) else {
        return Err(located(lua, "result_table(names, rows) takes an array of column names and an array of rows"));
    };
    let (names_table, rows) = (freeze::readable(names_table), freeze::readable(rows));
    let ncols = names_table.raw_len();
    if ncols == 0 || ncols > RESULT_COLUMNS_MAX {
        return Err(located(lua, format_args!("result_table() needs 1 to {RESULT_COLUMNS_MAX} column names")));
    }
    let mut names = Vec::with_capacity(ncols);
    for i in 1..=ncols {
        let LuaValue::String(name) = names_table.raw_get::<LuaValue>(i)? else {
            return Err(located(lua, format_args!("result_table() column name {i} is not a string")));
        };
        names.push(name);
    }
    let nrows = rows.raw_len();
    let mut cells: Vec<Vec<Value>> = Vec::with_capacity(nrows);
    let mut types: Vec<Option<DataType>> = vec![None; ncols];
    for r in 1..=nrows {
        let LuaValue::Table(row) = rows.raw_get::<LuaValue>(r)? else {
            return Err(located(lua, format_args!("result_table() row {r} is not an array")));
        };
        let row = freeze::readable(row);
        let mut out = Vec::with_capacity(ncols);
        for c in 1..=ncols {
            let (v, ty) = convert::to_cell(&row.raw_get::<LuaValue>(c)?)
                .map_err(|what| located(lua, format_args!("result_table() row {r} column {c} is {what}")))?;
            if types[c - 1].is_none() {
                types[c - 1] = ty;
            }
            out.push(v);
        }
        cells.push(out);
    }
    let types: Vec<DataType> = types.into_iter().map(|t| t.unwrap_or(DataType::Varchar)).collect();
    let names: Vec<_> = names.iter().map(LuaString::as_bytes).collect();
    let mut texts = Vec::with_capacity(names.len());
    for name in &names {
        let text = std::str::from_utf8(name).map_err(|_| located(lua, "result_table() column names must be UTF-8"))?;
        texts.push(text);
    }
    let mut table = ResultTable::new(built_columns(shared, &texts, &types));
    for (r, row) in cells.into_iter().enumerate() {
        let mut out = Vec::with_capacity(ncols);
        for (c, (v, &ty)) in row.into_iter().zip(&types).enumerate() {
            // Most cells already have their column's type (the first non-nil value of the
            // column set it): only the others are converted.
            let v = if v.coerces_to_itself(ty) {
                v
            } else {
                v.coerce_to(ty).map_err(|e| located(lua, format_args!("result_table() row {} column {}: {}", r + 1, c + 1, e.message)))?
            };
            out.push(v);
        }
        table.push(out);
    }
    result_obj::make(lua, Held::new(table, shared))
}

/// Most column sets `result_table` keeps for reuse (see `Shared::built_columns`).
const BUILT_COLUMNS_KEPT: usize = 16;

/// The columns named `names` with types `types`: a set built recently if one matches
/// exactly, else a new one (kept for next time).
pub(crate) fn built_columns(shared: &Shared, names: &[&str], types: &[DataType]) -> Arc<[ResultColumn]> {
    let mut kept = shared.built_columns.borrow_mut();
    let same = |cols: &Arc<[ResultColumn]>| {
        cols.len() == names.len() && cols.iter().zip(names).zip(types).all(|((c, n), &t)| c.ty == t && &*c.name == *n)
    };
    if let Some(cols) = kept.iter().find(|c| same(c)) {
        return cols.clone();
    }
    let columns: Arc<[ResultColumn]> = names.iter().zip(types).map(|(&name, &ty)| ResultColumn { name: name.into(), ty }).collect();
    if kept.len() == BUILT_COLUMNS_KEPT {
        kept.pop_front();
    }
    kept.push_back(columns.clone());
    columns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_counts_modified_tuples_or_rows() {
        assert_eq!(modified_count(&ResultTable::modified(3)), 3);
        let mut t = ResultTable::with_columns(&[("A", DataType::BigInt)]);
        t.push(vec![Value::Int(10)]);
        t.push(vec![Value::Int(11)]);
        assert_eq!(modified_count(&t), 2);
    }
}
