//! Scalar SQL functions: name lookup, argument counts, result types and evaluation.
//!
//! Arguments arrive unevaluated so COALESCE and friends can stop early.

use lockstep_core::time::{civil_from_days, days_from_civil, MICROS_PER_DAY};
use lockstep_core::{decimal, DataType, Error, Result, Value};

use crate::expr::{arith, text_of, ArithOp, Env, Expr};
use crate::func_geo::{self, GeoFunc};
use crate::func_json;

/// Units for DATEADD, TRUNCATE, SINCE_EPOCH and TO_TIMESTAMP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    Year,
    Quarter,
    Month,
    Week,
    Day,
    Hour,
    Minute,
    Second,
    Milli,
    Micro,
}

impl TimeUnit {
    pub fn parse(s: &str) -> Option<TimeUnit> {
        Some(match s.to_ascii_uppercase().as_str() {
            "YEAR" => TimeUnit::Year,
            "QUARTER" => TimeUnit::Quarter,
            "MONTH" => TimeUnit::Month,
            "WEEK" => TimeUnit::Week,
            "DAY" => TimeUnit::Day,
            "HOUR" => TimeUnit::Hour,
            "MINUTE" => TimeUnit::Minute,
            "SECOND" => TimeUnit::Second,
            "MILLISECOND" | "MILLIS" => TimeUnit::Milli,
            "MICROSECOND" | "MICROS" => TimeUnit::Micro,
            _ => return None,
        })
    }

    /// Fixed length in microseconds, for units that have one.
    fn micros(self) -> Option<i64> {
        Some(match self {
            TimeUnit::Week => 7 * MICROS_PER_DAY,
            TimeUnit::Day => MICROS_PER_DAY,
            TimeUnit::Hour => 3_600_000_000,
            TimeUnit::Minute => 60_000_000,
            TimeUnit::Second => 1_000_000,
            TimeUnit::Milli => 1_000,
            TimeUnit::Micro => 1,
            _ => return None,
        })
    }
}

/// Fields for EXTRACT and the YEAR()/MONTH()… shorthands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Year,
    Quarter,
    Month,
    Day,
    Hour,
    Minute,
    Second,
    DayOfWeek,
    DayOfYear,
    Week,
}

impl Field {
    pub fn parse(s: &str) -> Option<Field> {
        Some(match s.to_ascii_uppercase().as_str() {
            "YEAR" => Field::Year,
            "QUARTER" => Field::Quarter,
            "MONTH" => Field::Month,
            "DAY" | "DAY_OF_MONTH" | "DAYOFMONTH" => Field::Day,
            "HOUR" => Field::Hour,
            "MINUTE" => Field::Minute,
            "SECOND" => Field::Second,
            "DAYOFWEEK" | "DAY_OF_WEEK" | "DOW" => Field::DayOfWeek,
            "DAYOFYEAR" | "DAY_OF_YEAR" | "DOY" => Field::DayOfYear,
            "WEEK" | "WEEKOFYEAR" | "WEEK_OF_YEAR" => Field::Week,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimSide {
    Both,
    Leading,
    Trailing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Abs,
    Ceiling,
    Floor,
    Round,
    Mod,
    Power,
    Sqrt,
    Exp,
    Ln,
    Log10,
    Upper,
    Lower,
    /// (string [, characters])
    Trim(TrimSide),
    /// (string, from [, length]), 1-based characters
    Substring,
    CharLength,
    OctetLength,
    Concat,
    Replace,
    /// (needle, haystack) → 1-based position or 0
    Position,
    Left,
    Right,
    Coalesce,
    Nullif,
    Now,
    Extract(Field),
    DateAdd(TimeUnit),
    Truncate(TimeUnit),
    SinceEpoch(TimeUnit),
    ToTimestamp(TimeUnit),
    FromUnixtime,
    /// VoltDB's JSON functions (`func_json.rs`).
    Field,
    ArrayElement,
    ArrayLength,
    SetField,
    /// VoltDB's geospatial functions (`func_geo.rs`).
    Geo(GeoFunc),
}

/// Functions whose first argument is a unit keyword: (name, constructor).
pub fn unit_function(name: &str) -> Option<fn(TimeUnit) -> Func> {
    Some(match name {
        "DATEADD" => Func::DateAdd,
        "TRUNCATE" => Func::Truncate,
        "SINCE_EPOCH" => Func::SinceEpoch,
        "TO_TIMESTAMP" => Func::ToTimestamp,
        _ => return None,
    })
}

/// A plain function by upper-cased name.
pub fn lookup(name: &str) -> Option<Func> {
    Some(match name {
        "ABS" => Func::Abs,
        "CEILING" | "CEIL" => Func::Ceiling,
        "FLOOR" => Func::Floor,
        "ROUND" => Func::Round,
        "MOD" => Func::Mod,
        "POWER" | "POW" => Func::Power,
        "SQRT" => Func::Sqrt,
        "EXP" => Func::Exp,
        "LN" | "LOG" => Func::Ln,
        "LOG10" => Func::Log10,
        "UPPER" | "UCASE" => Func::Upper,
        "LOWER" | "LCASE" => Func::Lower,
        "TRIM" => Func::Trim(TrimSide::Both),
        "LTRIM" => Func::Trim(TrimSide::Leading),
        "RTRIM" => Func::Trim(TrimSide::Trailing),
        "SUBSTRING" | "SUBSTR" => Func::Substring,
        "CHAR_LENGTH" | "CHARACTER_LENGTH" | "LENGTH" => Func::CharLength,
        "OCTET_LENGTH" => Func::OctetLength,
        "CONCAT" => Func::Concat,
        "REPLACE" => Func::Replace,
        "POSITION" => Func::Position,
        "LEFT" => Func::Left,
        "RIGHT" => Func::Right,
        "COALESCE" => Func::Coalesce,
        "NULLIF" => Func::Nullif,
        "NOW" | "CURRENT_TIMESTAMP" => Func::Now,
        "FROM_UNIXTIME" => Func::FromUnixtime,
        "FIELD" => Func::Field,
        "ARRAY_ELEMENT" => Func::ArrayElement,
        "ARRAY_LENGTH" => Func::ArrayLength,
        "SET_FIELD" => Func::SetField,
        "YEAR" => Func::Extract(Field::Year),
        "QUARTER" => Func::Extract(Field::Quarter),
        "MONTH" => Func::Extract(Field::Month),
        "DAY" | "DAYOFMONTH" => Func::Extract(Field::Day),
        "HOUR" => Func::Extract(Field::Hour),
        "MINUTE" => Func::Extract(Field::Minute),
        "SECOND" => Func::Extract(Field::Second),
        "DAYOFWEEK" => Func::Extract(Field::DayOfWeek),
        "DAYOFYEAR" => Func::Extract(Field::DayOfYear),
        "WEEK" | "WEEKOFYEAR" => Func::Extract(Field::Week),
        other => return func_geo::lookup(other).map(Func::Geo),
    })
}

/// Most arguments a variadic function (CONCAT, COALESCE) may take.
pub const FUNCTION_ARGS_MAX: usize = 64;

/// Inclusive (min, max) argument counts, counting the unit of unit functions out.
pub fn arity(f: Func) -> (usize, usize) {
    match f {
        Func::Now => (0, 0),
        Func::Abs | Func::Ceiling | Func::Floor | Func::Sqrt | Func::Exp | Func::Ln | Func::Log10 => (1, 1),
        Func::Upper | Func::Lower | Func::CharLength | Func::OctetLength | Func::FromUnixtime => (1, 1),
        Func::Extract(_) | Func::Truncate(_) | Func::SinceEpoch(_) | Func::ToTimestamp(_) => (1, 1),
        Func::Round => (1, 2),
        Func::Trim(_) => (1, 2),
        Func::Mod | Func::Power | Func::Position | Func::Left | Func::Right | Func::Nullif => (2, 2),
        Func::DateAdd(_) => (2, 2),
        Func::Substring => (2, 3),
        Func::Replace | Func::SetField => (3, 3),
        Func::ArrayLength => (1, 1),
        Func::Field | Func::ArrayElement => (2, 2),
        Func::Concat => (2, FUNCTION_ARGS_MAX),
        Func::Coalesce => (1, FUNCTION_ARGS_MAX),
        Func::Geo(g) => g.arity(),
    }
}

fn need(t: Option<DataType>, ok: fn(DataType) -> bool, f: Func, what: &str) -> Result<()> {
    match t {
        Some(t) if !ok(t) => Err(Error::sql(format!("{f:?} needs {what} arguments, not {}", t.sql_name()))),
        _ => Ok(()),
    }
}

fn is_text(t: DataType) -> bool {
    t == DataType::Varchar
}

fn is_time(t: DataType) -> bool {
    t == DataType::Timestamp || t == DataType::Varchar
}

/// The result type (None when unknown, e.g. COALESCE of parameters), checking argument kinds.
pub fn result_type(f: Func, args: &[Option<DataType>]) -> Result<Option<DataType>> {
    let a0 = args.first().copied().flatten();
    Ok(match f {
        Func::Abs | Func::Ceiling | Func::Floor | Func::Round => {
            need(a0, DataType::is_numeric, f, "numeric")?;
            a0.map(|t| if t.is_integer() { DataType::BigInt } else { t })
        }
        Func::Mod => {
            for a in args {
                need(*a, DataType::is_numeric, f, "numeric")?;
            }
            Some(numeric_result(args))
        }
        Func::Power | Func::Sqrt | Func::Exp | Func::Ln | Func::Log10 => {
            for a in args {
                need(*a, DataType::is_numeric, f, "numeric")?;
            }
            Some(DataType::Float)
        }
        Func::Upper | Func::Lower | Func::Trim(_) | Func::Substring | Func::Replace | Func::Left | Func::Right => {
            need(a0, is_text, f, "VARCHAR")?;
            Some(DataType::Varchar)
        }
        Func::Concat => Some(DataType::Varchar),
        Func::Field | Func::ArrayElement | Func::SetField => {
            need(a0, is_text, f, "VARCHAR")?;
            Some(DataType::Varchar)
        }
        Func::ArrayLength => {
            need(a0, is_text, f, "VARCHAR")?;
            Some(DataType::Integer)
        }
        Func::CharLength | Func::OctetLength | Func::Position => Some(DataType::Integer),
        Func::Coalesce | Func::Nullif => args.iter().copied().flatten().next(),
        Func::Now | Func::DateAdd(_) | Func::Truncate(_) | Func::ToTimestamp(_) | Func::FromUnixtime => {
            if let Func::DateAdd(_) | Func::Truncate(_) = f {
                need(args.last().copied().flatten(), is_time, f, "TIMESTAMP")?;
            }
            Some(DataType::Timestamp)
        }
        Func::Extract(Field::Second) => {
            need(a0, is_time, f, "TIMESTAMP")?;
            Some(DataType::Decimal)
        }
        Func::Extract(_) => {
            need(a0, is_time, f, "TIMESTAMP")?;
            Some(DataType::Integer)
        }
        Func::SinceEpoch(_) => {
            need(a0, is_time, f, "TIMESTAMP")?;
            Some(DataType::BigInt)
        }
        Func::Geo(g) => func_geo::result_type(g, args)?,
    })
}

/// BIGINT for integers, FLOAT if any float, DECIMAL if any decimal.
pub fn numeric_result(args: &[Option<DataType>]) -> DataType {
    let mut out = DataType::BigInt;
    for t in args.iter().flatten() {
        match t {
            DataType::Float => return DataType::Float,
            DataType::Decimal => out = DataType::Decimal,
            _ => {}
        }
    }
    out
}

fn arg_err(f: Func, v: &Value, what: &str) -> Error {
    Error::sql(format!("{f:?} needs {what}, not {}", v.describe()))
}

fn int_arg(f: Func, v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Float(x) if x.fract() == 0.0 => Ok(*x as i64),
        Value::Decimal(d) => decimal::to_exact_i64(d.get()).ok_or_else(|| arg_err(f, v, "an integer")),
        _ => Err(arg_err(f, v, "an integer")),
    }
}

fn ts_arg(f: Func, v: &Value) -> Result<i64> {
    match v {
        Value::Timestamp(t) => Ok(*t),
        Value::Str(s) => lockstep_core::time::parse_timestamp(s).map_err(Error::sql),
        _ => Err(arg_err(f, v, "a TIMESTAMP")),
    }
}

fn float_arg(f: Func, v: &Value) -> Result<f64> {
    v.as_f64().ok_or_else(|| arg_err(f, v, "a number"))
}

fn finite(f: Func, x: f64) -> Result<Value> {
    if x.is_finite() {
        Ok(Value::Float(x))
    } else {
        Err(Error::sql(format!("{f:?} result is not a finite number")))
    }
}

/// Evaluates a function call.
pub fn call(f: Func, args: &[Expr], row: &[Value], env: &Env) -> Result<Value> {
    match f {
        Func::Coalesce => {
            for a in args {
                let v = a.eval(row, env)?;
                if !v.is_null() {
                    return Ok(v);
                }
            }
            return Ok(Value::Null);
        }
        Func::Now => return Ok(Value::Timestamp(env.now_micros)),
        _ => {}
    }
    let mut vals = Vec::with_capacity(args.len());
    for a in args {
        vals.push(a.eval(row, env)?);
    }
    if f == Func::Nullif {
        return Ok(if vals[0].sql_cmp(&vals[1]) == Some(std::cmp::Ordering::Equal) { Value::Null } else { vals[0].clone() });
    }
    if vals.iter().any(Value::is_null) {
        return Ok(Value::Null);
    }
    apply(f, &vals)
}

/// Applies `f` to its evaluated arguments (none NULL). Kept apart from `call`, and never
/// inlined into it, so the large frame this match needs (in debug builds above all) is not
/// on the stack once per level of nested calls: `call` recurses through `Expr::eval`.
#[inline(never)]
fn apply(f: Func, vals: &[Value]) -> Result<Value> {
    let v0 = &vals[0];
    Ok(match f {
        Func::Abs => match v0 {
            Value::Int(i) => Value::Int(i.checked_abs().ok_or_else(|| Error::sql("numeric overflow in ABS"))?),
            Value::Float(x) => Value::Float(x.abs()),
            Value::Decimal(d) => Value::Decimal(d.get().abs().into()),
            _ => return Err(arg_err(f, v0, "a number")),
        },
        Func::Ceiling | Func::Floor => {
            let up = f == Func::Ceiling;
            match v0 {
                Value::Int(i) => Value::Int(*i),
                Value::Float(x) => Value::Float(if up { x.ceil() } else { x.floor() }),
                Value::Decimal(d) => {
                    let d = d.get();
                    let q = d.div_euclid(decimal::SCALE) * decimal::SCALE;
                    Value::Decimal(if up && q != d { q + decimal::SCALE } else { q }.into())
                }
                _ => return Err(arg_err(f, v0, "a number")),
            }
        }
        Func::Round => {
            let places = match vals.get(1) {
                Some(p) => int_arg(f, p)?,
                None => 0,
            };
            round(f, v0, places)?
        }
        Func::Mod => arith(ArithOp::Mod, v0.clone(), vals[1].clone())?,
        Func::Power => finite(f, float_arg(f, v0)?.powf(float_arg(f, &vals[1])?))?,
        Func::Sqrt => {
            let x = float_arg(f, v0)?;
            if x < 0.0 {
                return Err(Error::sql("SQRT of a negative number"));
            }
            Value::Float(x.sqrt())
        }
        Func::Exp => finite(f, float_arg(f, v0)?.exp())?,
        Func::Ln | Func::Log10 => {
            let x = float_arg(f, v0)?;
            if x <= 0.0 {
                return Err(Error::sql(format!("{f:?} of a number that is not positive")));
            }
            Value::Float(if f == Func::Ln { x.ln() } else { x.log10() })
        }
        Func::Upper => Value::Str(str_arg(f, v0)?.to_uppercase().into()),
        Func::Lower => Value::Str(str_arg(f, v0)?.to_lowercase().into()),
        Func::Trim(side) => {
            let s = str_arg(f, v0)?;
            let chars: Vec<char> = match vals.get(1) {
                Some(c) => str_arg(f, c)?.chars().collect(),
                None => vec![' '],
            };
            let m = |c: char| chars.contains(&c);
            Value::Str(
                match side {
                    TrimSide::Both => s.trim_matches(m),
                    TrimSide::Leading => s.trim_start_matches(m),
                    TrimSide::Trailing => s.trim_end_matches(m),
                }
                .into(),
            )
        }
        Func::Substring => {
            let s = str_arg(f, v0)?;
            let from = int_arg(f, &vals[1])?;
            let end = match vals.get(2) {
                Some(l) => {
                    let len = int_arg(f, l)?;
                    if len < 0 {
                        return Err(Error::sql("SUBSTRING length must not be negative"));
                    }
                    Some(from.saturating_add(len))
                }
                None => None,
            };
            let start = from.max(1) as usize - 1;
            let take = match end {
                Some(e) => (e.max(1) as usize - 1).saturating_sub(start),
                None => usize::MAX,
            };
            Value::Str(s.chars().skip(start).take(take).collect())
        }
        Func::CharLength => Value::Int(str_arg(f, v0)?.chars().count() as i64),
        Func::OctetLength => match v0 {
            Value::Bytes(b) => Value::Int(b.len() as i64),
            v => Value::Int(text_of(v).len() as i64),
        },
        Func::Concat => Value::Str(vals.iter().map(text_of).collect()),
        Func::Replace => {
            let (s, a, b) = (str_arg(f, v0)?, str_arg(f, &vals[1])?, str_arg(f, &vals[2])?);
            Value::Str(if a.is_empty() { s.into() } else { s.replace(a, b).into() })
        }
        Func::Position => {
            let (needle, hay) = (str_arg(f, v0)?, str_arg(f, &vals[1])?);
            Value::Int(match hay.find(needle) {
                Some(i) => hay[..i].chars().count() as i64 + 1,
                None => 0,
            })
        }
        Func::Left | Func::Right => {
            let s = str_arg(f, v0)?;
            let n = int_arg(f, &vals[1])?;
            if n < 0 {
                return Err(Error::sql(format!("{f:?} length must not be negative")));
            }
            let count = s.chars().count();
            let n = (n as usize).min(count);
            Value::Str(if f == Func::Left { s.chars().take(n).collect() } else { s.chars().skip(count - n).collect() })
        }
        Func::Extract(field) => extract(field, ts_arg(f, v0)?),
        Func::DateAdd(unit) => {
            let n = int_arg(f, v0)?;
            Value::Timestamp(date_add(unit, n, ts_arg(f, &vals[1])?)?)
        }
        Func::Truncate(unit) => Value::Timestamp(truncate(unit, ts_arg(f, v0)?)),
        Func::SinceEpoch(unit) => Value::Int(since_epoch(unit, ts_arg(f, v0)?)),
        Func::ToTimestamp(unit) => Value::Timestamp(to_timestamp(unit, int_arg(f, v0)?)?),
        Func::FromUnixtime => Value::Timestamp(to_timestamp(TimeUnit::Second, int_arg(f, v0)?)?),
        Func::Field => func_json::field(v0, &vals[1])?,
        Func::ArrayElement => func_json::array_element(v0, int_arg(f, &vals[1])?)?,
        Func::ArrayLength => func_json::array_length(v0)?,
        Func::SetField => func_json::set_field(v0, &vals[1], &vals[2])?,
        Func::Geo(g) => func_geo::apply(g, vals)?,
        Func::Coalesce | Func::Nullif | Func::Now => Value::Null,
    })
}

fn str_arg(f: Func, v: &Value) -> Result<&str> {
    v.as_str().ok_or_else(|| arg_err(f, v, "a VARCHAR"))
}

/// Rounds half away from zero to `places` decimal places.
fn round(f: Func, v: &Value, places: i64) -> Result<Value> {
    let places = places.clamp(-18, 12);
    Ok(match v {
        Value::Int(i) if places >= 0 => Value::Int(*i),
        Value::Int(i) => {
            let m = 10i64.pow((-places) as u32);
            let r = (i.abs() + m / 2) / m * m;
            Value::Int(if *i < 0 { -r } else { r })
        }
        Value::Float(x) => {
            let m = 10f64.powi(places as i32);
            Value::Float((x * m).round() / m)
        }
        Value::Decimal(d) => {
            let d = d.get();
            let unit = 10i128.pow((12 - places) as u32);
            let r = (d.abs() + unit / 2) / unit * unit;
            Value::Decimal(if d < 0 { -r } else { r }.into())
        }
        _ => return Err(arg_err(f, v, "a number")),
    })
}

fn split(ts: i64) -> (i64, i64) {
    (ts.div_euclid(MICROS_PER_DAY), ts.rem_euclid(MICROS_PER_DAY))
}

fn extract(field: Field, ts: i64) -> Value {
    let (days, tod) = split(ts);
    let (y, m, d) = civil_from_days(days);
    let v = match field {
        Field::Year => y,
        Field::Quarter => (m as i64 - 1) / 3 + 1,
        Field::Month => m as i64,
        Field::Day => d as i64,
        Field::Hour => tod / 3_600_000_000,
        Field::Minute => tod / 60_000_000 % 60,
        Field::Second => {
            // VoltDB returns seconds with their fraction, as DECIMAL.
            let micros = tod % 60_000_000;
            return Value::Decimal((micros as i128 * (decimal::SCALE / 1_000_000)).into());
        }
        // 1970-01-01 was a Thursday; 1 = Sunday … 7 = Saturday.
        Field::DayOfWeek => (days + 4).rem_euclid(7) + 1,
        Field::DayOfYear => days - days_from_civil(y, 1, 1) + 1,
        Field::Week => iso_week(days),
    };
    Value::Int(v)
}

/// ISO-8601 week number of the day.
fn iso_week(days: i64) -> i64 {
    let weekday = (days + 3).rem_euclid(7); // 0 = Monday
    let thursday = days - weekday + 3;
    let (y, _, _) = civil_from_days(thursday);
    (thursday - days_from_civil(y, 1, 1)) / 7 + 1
}

fn month_len(y: i64, m: u32) -> u32 {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (days_from_civil(ny, nm, 1) - days_from_civil(y, m, 1)) as u32
}

fn ts_overflow() -> Error {
    Error::sql("timestamp arithmetic overflow")
}

fn date_add(unit: TimeUnit, n: i64, ts: i64) -> Result<i64> {
    if let Some(len) = unit.micros() {
        return n.checked_mul(len).and_then(|d| ts.checked_add(d)).ok_or_else(ts_overflow);
    }
    let months = match unit {
        TimeUnit::Year => n.checked_mul(12),
        TimeUnit::Quarter => n.checked_mul(3),
        _ => Some(n),
    }
    .ok_or_else(ts_overflow)?;
    if months.abs() > 12 * 300_000 {
        return Err(ts_overflow());
    }
    let (days, tod) = split(ts);
    let (y, m, d) = civil_from_days(days);
    let total = y * 12 + (m as i64 - 1) + months;
    let (ny, nm) = (total.div_euclid(12), total.rem_euclid(12) as u32 + 1);
    let nd = d.min(month_len(ny, nm));
    Ok(days_from_civil(ny, nm, nd) * MICROS_PER_DAY + tod)
}

fn truncate(unit: TimeUnit, ts: i64) -> i64 {
    let (days, _) = split(ts);
    let (y, m, _) = civil_from_days(days);
    match unit {
        TimeUnit::Year => days_from_civil(y, 1, 1) * MICROS_PER_DAY,
        TimeUnit::Quarter => days_from_civil(y, (m - 1) / 3 * 3 + 1, 1) * MICROS_PER_DAY,
        TimeUnit::Month => days_from_civil(y, m, 1) * MICROS_PER_DAY,
        // Weeks start on Monday.
        TimeUnit::Week => (days - (days + 3).rem_euclid(7)) * MICROS_PER_DAY,
        u => {
            let len = u.micros().unwrap_or(1);
            ts.div_euclid(len) * len
        }
    }
}

fn since_epoch(unit: TimeUnit, ts: i64) -> i64 {
    match unit.micros() {
        Some(len) => ts.div_euclid(len),
        None => {
            let (y, m, _) = civil_from_days(split(ts).0);
            let months = (y - 1970) * 12 + m as i64 - 1;
            match unit {
                TimeUnit::Year => y - 1970,
                TimeUnit::Quarter => months.div_euclid(3),
                _ => months,
            }
        }
    }
}

fn to_timestamp(unit: TimeUnit, n: i64) -> Result<i64> {
    match unit.micros() {
        Some(len) => n.checked_mul(len).ok_or_else(ts_overflow),
        None => date_add(unit, n, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::time::parse_timestamp;

    fn ts(s: &str) -> i64 {
        parse_timestamp(s).unwrap()
    }

    #[test]
    fn calendar_fields() {
        let t = ts("2024-02-29 13:45:07.250000");
        assert_eq!(extract(Field::Year, t), Value::Int(2024));
        assert_eq!(extract(Field::Quarter, t), Value::Int(1));
        assert_eq!(extract(Field::Month, t), Value::Int(2));
        assert_eq!(extract(Field::Day, t), Value::Int(29));
        assert_eq!(extract(Field::Hour, t), Value::Int(13));
        assert_eq!(extract(Field::Minute, t), Value::Int(45));
        assert_eq!(extract(Field::Second, t), Value::Decimal(decimal::parse("7.25").unwrap().into()));
        assert_eq!(extract(Field::DayOfWeek, t), Value::Int(5)); // Thursday
        assert_eq!(extract(Field::DayOfYear, t), Value::Int(60));
        assert_eq!(extract(Field::Week, t), Value::Int(9));
        assert_eq!(extract(Field::Week, ts("2021-01-03")), Value::Int(53));
    }

    #[test]
    fn date_arithmetic() {
        assert_eq!(date_add(TimeUnit::Month, 1, ts("2024-01-31")).unwrap(), ts("2024-02-29"));
        assert_eq!(date_add(TimeUnit::Year, -1, ts("2024-02-29 01:00:00")).unwrap(), ts("2023-02-28 01:00:00"));
        assert_eq!(date_add(TimeUnit::Day, 2, ts("2024-12-31")).unwrap(), ts("2025-01-02"));
        assert_eq!(truncate(TimeUnit::Week, ts("2024-03-03 10:00:00")), ts("2024-02-26"));
        assert_eq!(truncate(TimeUnit::Quarter, ts("2024-08-15 10:00:00")), ts("2024-07-01"));
        assert_eq!(truncate(TimeUnit::Hour, ts("2024-08-15 10:59:59")), ts("2024-08-15 10:00:00"));
        assert_eq!(since_epoch(TimeUnit::Second, ts("1970-01-02")), 86_400);
        assert_eq!(since_epoch(TimeUnit::Month, ts("1971-03-05")), 14);
        assert_eq!(to_timestamp(TimeUnit::Day, 1).unwrap(), MICROS_PER_DAY);
        assert_eq!(to_timestamp(TimeUnit::Month, 13).unwrap(), ts("1971-02-01"));
    }

    #[test]
    fn rounding() {
        assert_eq!(round(Func::Round, &Value::Float(2.5), 0).unwrap(), Value::Float(3.0));
        assert_eq!(round(Func::Round, &Value::Float(-2.5), 0).unwrap(), Value::Float(-3.0));
        let d = Value::Decimal(decimal::parse("1.235").unwrap().into());
        assert_eq!(round(Func::Round, &d, 2).unwrap(), Value::Decimal(decimal::parse("1.24").unwrap().into()));
        assert_eq!(round(Func::Round, &Value::Int(1250), -2).unwrap(), Value::Int(1300));
    }
}
