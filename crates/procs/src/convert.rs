//! Conversions between SQL values and Lua values, in both directions.
//!
//! SQL → Lua: Int/Timestamp → integer, Float → number, Decimal → string (exact text),
//! Str/Bytes → string, Bool → boolean, Null → nil, Array → array table.
//! Lua → statement parameter: integer → Int, number → Float, string → Str (Bytes when the
//! parameter is VARBINARY), boolean → Bool, nil → Null, array of those → Array.

use lockstep_core::{decimal, DataType, Value};
use mlua::{Lua, Value as LuaValue};

/// Longest array a procedure may pass as one statement parameter (for `IN ?`).
pub(crate) const ARRAY_PARAM_LEN_MAX: usize = 100_000;

/// A SQL value as a Lua value.
pub(crate) fn to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                // Arrays never nest in VoltDB parameters; an inner array becomes nil rather
                // than recursing on input-controlled depth.
                t.raw_set(i + 1, scalar_to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
        scalar => scalar_to_lua(lua, scalar)?,
    })
}

/// A non-array SQL value as a Lua value (arrays become nil).
pub(crate) fn scalar_to_lua(lua: &Lua, v: &Value) -> mlua::Result<LuaValue> {
    Ok(match v {
        Value::Null | Value::Array(_) => LuaValue::Nil,
        Value::Int(i) | Value::Timestamp(i) => LuaValue::Integer(*i),
        Value::Float(f) => LuaValue::Number(*f),
        Value::Decimal(d) => LuaValue::String(lua.create_string(decimal::format(d.get()))?),
        Value::Str(s) => LuaValue::String(lua.create_string(s)?),
        Value::Bytes(b) => LuaValue::String(lua.create_string(b)?),
        Value::Bool(b) => LuaValue::Boolean(*b),
        // Geography reaches Lua as its WKT text, which a statement parameter of a geography
        // type reads back.
        Value::Point(_) | Value::Geography(_) => LuaValue::String(lua.create_string(v.to_string())?),
    })
}

/// A Lua value as statement parameter number `pos` (1-based) of type `ty`; the error text
/// names the parameter.
pub(crate) fn to_param(v: &LuaValue, ty: Option<DataType>, pos: usize) -> Result<Value, String> {
    match v {
        LuaValue::Table(t) => {
            let t = crate::freeze::readable(t.clone());
            let len = t.raw_len();
            if len > ARRAY_PARAM_LEN_MAX {
                return Err(format!("parameter {pos} is an array of {len} values; the limit is {ARRAY_PARAM_LEN_MAX}"));
            }
            let mut items = Vec::with_capacity(len);
            for i in 1..=len {
                let item: LuaValue = t.raw_get(i).map_err(|e| e.to_string())?;
                if matches!(item, LuaValue::Table(_)) {
                    return Err(format!("parameter {pos} is an array of arrays; arrays cannot nest"));
                }
                items.push(scalar_to_param(&item, ty, pos)?);
            }
            Ok(Value::Array(items.into()))
        }
        other => scalar_to_param(other, ty, pos),
    }
}

/// Checks what [`to_param`] would check of a non-table value, without converting it.
pub(crate) fn check_scalar_param(v: &LuaValue, ty: Option<DataType>, pos: usize) -> Result<(), String> {
    match v {
        LuaValue::Nil | LuaValue::Integer(_) | LuaValue::Number(_) | LuaValue::Boolean(_) => Ok(()),
        LuaValue::String(_) if ty == Some(DataType::Varbinary) => Ok(()),
        LuaValue::String(s) if s.to_str().is_ok() => Ok(()),
        other => scalar_to_param(other, ty, pos).map(|_| ()),
    }
}

fn scalar_to_param(v: &LuaValue, ty: Option<DataType>, pos: usize) -> Result<Value, String> {
    Ok(match v {
        LuaValue::Nil => Value::Null,
        LuaValue::Integer(i) => Value::Int(*i),
        LuaValue::Number(f) => Value::Float(*f),
        LuaValue::Boolean(b) => Value::Bool(*b),
        LuaValue::String(s) => string_param(&s.as_bytes(), ty).ok_or_else(|| {
            format!(
                "parameter {pos} is a string that is not valid UTF-8 text (only VARBINARY \
                 parameters take raw bytes)"
            )
        })?,
        other => {
            return Err(format!(
                "parameter {pos} is a {}; statement parameters are integers, numbers, strings, \
                 booleans, nil or arrays of those",
                other.type_name()
            ))
        }
    })
}

/// A Lua string as a parameter of type `ty`: raw bytes for VARBINARY, else text (None when
/// it is not UTF-8).
pub(crate) fn string_param(bytes: &[u8], ty: Option<DataType>) -> Option<Value> {
    if ty == Some(DataType::Varbinary) {
        return Some(Value::Bytes(bytes.into()));
    }
    std::str::from_utf8(bytes).ok().map(|text| Value::Str(text.into()))
}

/// A Lua value as a result-table cell, inferring its column type (None for nil).
pub(crate) fn to_cell(v: &LuaValue) -> Result<(Value, Option<DataType>), String> {
    Ok(match v {
        LuaValue::Nil => (Value::Null, None),
        LuaValue::Integer(i) => (Value::Int(*i), Some(DataType::BigInt)),
        LuaValue::Number(f) => (Value::Float(*f), Some(DataType::Float)),
        LuaValue::Boolean(b) => (Value::Int(*b as i64), Some(DataType::TinyInt)),
        LuaValue::String(s) => match s.to_str() {
            Ok(text) => (Value::Str((&*text).into()), Some(DataType::Varchar)),
            Err(_) => return Err("a string that is not valid UTF-8 text".into()),
        },
        other => return Err(format!("a {}", other.type_name())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_values_become_the_documented_lua_values() {
        let lua = Lua::new();
        let s = |v: &Value| to_lua(&lua, v).unwrap();
        assert_eq!(s(&Value::Int(7)), LuaValue::Integer(7));
        assert_eq!(s(&Value::Timestamp(9)), LuaValue::Integer(9));
        assert_eq!(s(&Value::Float(1.5)), LuaValue::Number(1.5));
        assert_eq!(s(&Value::Bool(true)), LuaValue::Boolean(true));
        assert_eq!(s(&Value::Null), LuaValue::Nil);
        let d = s(&Value::Decimal(decimal::parse("12.5").unwrap().into()));
        assert_eq!(d.as_string().unwrap().to_str().unwrap(), decimal::format(decimal::parse("12.5").unwrap()));
        let b = s(&Value::Bytes(vec![0, 255].into()));
        assert_eq!(b.as_string().unwrap().as_bytes().to_vec(), vec![0u8, 255]);
        let a = s(&Value::Array(vec![Value::Int(1), Value::from("x")].into()));
        let t = a.as_table().unwrap();
        assert_eq!(t.raw_len(), 2);
        assert_eq!(t.raw_get::<String>(2).unwrap(), "x");
    }

    #[test]
    fn lua_values_become_parameters_by_declared_type() {
        let lua = Lua::new();
        let s = LuaValue::String(lua.create_string(b"\xff\x00").unwrap());
        assert_eq!(to_param(&s, Some(DataType::Varbinary), 1).unwrap(), Value::Bytes(vec![255, 0].into()));
        assert!(to_param(&s, Some(DataType::Varchar), 1).unwrap_err().contains("parameter 1"));
        let t = LuaValue::String(lua.create_string("hi").unwrap());
        assert_eq!(to_param(&t, None, 1).unwrap(), Value::from("hi"));
        assert_eq!(to_param(&LuaValue::Integer(3), None, 1).unwrap(), Value::Int(3));
        assert_eq!(to_param(&LuaValue::Number(0.5), None, 1).unwrap(), Value::Float(0.5));
        assert_eq!(to_param(&LuaValue::Nil, None, 1).unwrap(), Value::Null);
        let f = LuaValue::Function(lua.create_function(|_, ()| Ok(())).unwrap());
        let e = to_param(&f, None, 2).unwrap_err();
        assert!(e.starts_with("parameter 2 is a function"), "{e}");
    }
}
