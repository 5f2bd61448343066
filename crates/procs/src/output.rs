//! What a procedure body returns, turned into the result tables the client receives.
//!
//! nil → none; integer → 1×1 BIGINT; float → 1×1 FLOAT; string → 1×1 VARCHAR; boolean →
//! 1×1 TINYINT (column name ""); a result object → that table; an array of those → several.

use lockstep_core::{DataType, Error, ResultTable, Value};
use mlua::{AnyUserData, MultiValue, Value as LuaValue};

use crate::result_obj::{self, Taken};
use crate::shared::Shared;

/// Most result tables one call may return.
pub(crate) const RETURN_TABLES_MAX: usize = 10_000;

/// Collects the tables, moving result objects out of Lua (no copy) unless one is returned
/// twice.
pub(crate) fn tables(
    procedure: &str,
    shared: &Shared,
    returned: MultiValue,
) -> Result<Vec<ResultTable>, Error> {
    let mut out = Collector {
        shared,
        procedure,
        tables: Vec::new(),
        taken: Vec::new(),
    };
    for v in returned {
        match v {
            LuaValue::Table(t) if crate::stmt::is_bound(shared, &t) => {
                return Err(out.bad("a bound statement (run it with batch)"));
            }
            LuaValue::Table(t) => {
                let len = t.raw_len();
                if len == 0 && t.clone().pairs::<LuaValue, LuaValue>().next().is_some() {
                    return Err(out.bad("a table that is not an array"));
                }
                if len > RETURN_TABLES_MAX {
                    return Err(out.bad(&format!("{len} tables; the limit is {RETURN_TABLES_MAX}")));
                }
                for i in 1..=len {
                    let item: LuaValue = t.raw_get(i).map_err(|e| out.bad(&e.to_string()))?;
                    if let LuaValue::Table(inner) = &item {
                        if crate::stmt::is_bound(shared, inner) {
                            return Err(out.bad("a bound statement (run it with batch)"));
                        }
                        return Err(out.bad("an array containing a table (arrays of arrays are not results; use result_table)"));
                    }
                    out.add(item)?;
                }
            }
            other => out.add(other)?,
        }
        if out.tables.len() > RETURN_TABLES_MAX {
            return Err(out.bad(&format!("more than {RETURN_TABLES_MAX} tables")));
        }
    }
    Ok(out.tables)
}

struct Collector<'a> {
    shared: &'a Shared,
    procedure: &'a str,
    tables: Vec<ResultTable>,
    /// Result objects already moved out: their address and their index in `tables`.
    taken: Vec<(*const std::ffi::c_void, usize)>,
}

impl Collector<'_> {
    fn bad(&self, what: &str) -> Error {
        Error::unexpected(format!(
            "procedure {} returned {what}; a procedure returns nil, a number, a string, a \
             boolean, a result, or an array of those",
            self.procedure
        ))
    }

    fn add(&mut self, v: LuaValue) -> Result<(), Error> {
        match v {
            LuaValue::Nil => {}
            LuaValue::Integer(i) => self.tables.push(ResultTable::scalar("", i)),
            LuaValue::Number(f) => self.tables.push(single(DataType::Float, Value::Float(f))),
            LuaValue::Boolean(b) => self
                .tables
                .push(single(DataType::TinyInt, Value::Int(b as i64))),
            LuaValue::String(s) => match s.to_str() {
                Ok(text) => self
                    .tables
                    .push(single(DataType::Varchar, Value::Str((&*text).into()))),
                Err(_) => return Err(self.bad("a string that is not valid UTF-8 text")),
            },
            LuaValue::UserData(ud) => self.add_result(ud)?,
            other => return Err(self.bad(&describe(&other))),
        }
        Ok(())
    }

    /// Moves the table out of a result object; a result returned twice is copied.
    fn add_result(&mut self, ud: AnyUserData) -> Result<(), Error> {
        let addr = ud.to_pointer();
        if let Some(&(_, i)) = self.taken.iter().find(|(a, _)| *a == addr) {
            let copy = self.tables[i].clone();
            self.tables.push(copy);
            return Ok(());
        }
        match result_obj::take(self.shared, &ud) {
            Taken::Table(table) => {
                self.taken.push((addr, self.tables.len()));
                self.tables.push(table);
                Ok(())
            }
            Taken::Gone => Err(self.bad("a result already returned by an earlier call")),
            Taken::NotAResult => Err(self.bad(&describe(&LuaValue::UserData(ud)))),
        }
    }
}

fn single(ty: DataType, v: Value) -> ResultTable {
    let mut t = ResultTable::with_columns(&[("", ty)]);
    t.push(vec![v]);
    t
}

fn describe(v: &LuaValue) -> String {
    match v {
        LuaValue::UserData(ud) if ud.is::<crate::stmt::StmtRef>() => {
            "a statement (call :query, :first or :exec on it)".to_string()
        }
        LuaValue::UserData(ud) if ud.is::<crate::stmt::Bound>() => {
            "a bound statement (run it with batch)".to_string()
        }
        other => format!("a {}", other.type_name()),
    }
}
