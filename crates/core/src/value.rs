//! SQL values and column types, with the conversions VoltDB's clients rely on.
//!
//! Integers of every width are held as `Int(i64)`: the column's `DataType` says how wide it
//! is on the wire and what range it accepts. This keeps the executor to one integer kind.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};

pub use compact_str::CompactString;

use std::sync::Arc;

use crate::decimal;
use crate::error::{Error, Result};
use crate::geo::{self, GeoPoint, Polygon};
use crate::time;

/// A column or parameter type (VoltDB's VoltType).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    TinyInt,
    SmallInt,
    Integer,
    BigInt,
    Float,
    Decimal,
    Varchar,
    Varbinary,
    Timestamp,
    Boolean,
    /// A longitude and a latitude (`geo::GeoPoint`).
    GeographyPoint,
    /// A polygon (`geo::Polygon`); its size limit counts the bytes of its wire form.
    Geography,
}

impl DataType {
    /// The VoltType code used on the wire.
    pub fn wire_code(self) -> i8 {
        match self {
            DataType::TinyInt => 3,
            DataType::SmallInt => 4,
            DataType::Integer => 5,
            DataType::BigInt => 6,
            DataType::Float => 8,
            DataType::Varchar => 9,
            DataType::Timestamp => 11,
            DataType::Decimal => 22,
            DataType::Boolean => 23,
            DataType::Varbinary => 25,
            DataType::GeographyPoint => 26,
            DataType::Geography => 27,
        }
    }

    /// The type for a VoltType wire code, if it is one we support.
    pub fn from_wire_code(code: i8) -> Option<DataType> {
        Some(match code {
            3 => DataType::TinyInt,
            4 => DataType::SmallInt,
            5 => DataType::Integer,
            6 => DataType::BigInt,
            8 => DataType::Float,
            9 => DataType::Varchar,
            11 => DataType::Timestamp,
            22 => DataType::Decimal,
            23 => DataType::Boolean,
            25 => DataType::Varbinary,
            26 => DataType::GeographyPoint,
            27 => DataType::Geography,
            _ => return None,
        })
    }

    /// The SQL name of the type, as DDL and metadata spell it.
    pub fn sql_name(self) -> &'static str {
        match self {
            DataType::TinyInt => "TINYINT",
            DataType::SmallInt => "SMALLINT",
            DataType::Integer => "INTEGER",
            DataType::BigInt => "BIGINT",
            DataType::Float => "FLOAT",
            DataType::Decimal => "DECIMAL",
            DataType::Varchar => "VARCHAR",
            DataType::Varbinary => "VARBINARY",
            DataType::Timestamp => "TIMESTAMP",
            DataType::Boolean => "BOOLEAN",
            DataType::GeographyPoint => "GEOGRAPHY_POINT",
            DataType::Geography => "GEOGRAPHY",
        }
    }

    pub fn is_integer(self) -> bool {
        matches!(self, DataType::TinyInt | DataType::SmallInt | DataType::Integer | DataType::BigInt)
    }

    pub fn is_numeric(self) -> bool {
        self.is_integer() || matches!(self, DataType::Float | DataType::Decimal)
    }

    /// Inclusive range of an integer type; VoltDB reserves the minimum as the NULL sentinel.
    pub fn int_range(self) -> Option<(i64, i64)> {
        match self {
            DataType::TinyInt => Some((i8::MIN as i64 + 1, i8::MAX as i64)),
            DataType::SmallInt => Some((i16::MIN as i64 + 1, i16::MAX as i64)),
            DataType::Integer => Some((i32::MIN as i64 + 1, i32::MAX as i64)),
            DataType::BigInt => Some((i64::MIN + 1, i64::MAX)),
            _ => None,
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.sql_name())
    }
}

/// A DECIMAL's scaled i128 kept as two halves: an `i128` field would make every `Value`
/// 16-byte aligned, and so 32 bytes instead of 24, and rows are arrays of values.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Dec {
    low: u64,
    high: i64,
}

impl Dec {
    pub const fn new(v: i128) -> Dec {
        Dec { low: v as u64, high: (v >> 64) as i64 }
    }

    pub const fn get(self) -> i128 {
        ((self.high as i128) << 64) | self.low as i128
    }
}

impl Ord for Dec {
    fn cmp(&self, other: &Dec) -> Ordering {
        self.get().cmp(&other.get())
    }
}

impl PartialOrd for Dec {
    fn partial_cmp(&self, other: &Dec) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Hash for Dec {
    /// As the i128 hashes, so index hashes are what they were.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.get().hash(state)
    }
}

impl From<i128> for Dec {
    fn from(v: i128) -> Dec {
        Dec::new(v)
    }
}

impl fmt::Debug for Dec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

/// One SQL value.
#[derive(Clone, Debug)]
pub enum Value {
    Null,
    Int(i64),
    Float(f64),
    /// Fixed point, scaled by 10^12 (VoltDB's DECIMAL(38,12)).
    Decimal(Dec),
    /// Text; up to 24 bytes are kept inline (no allocation to make, copy or free).
    Str(CompactString),
    /// Bytes, shared: a copy of a value (a 1 KB YCSB field read into a result, say) takes a
    /// reference, not another allocation.
    Bytes(Arc<[u8]>),
    /// Microseconds since the Unix epoch, UTC.
    Timestamp(i64),
    Bool(bool),
    /// An array parameter (VoltDB's `long[]`, `String[]` …); never stored in a table.
    /// Boxed, like every other variant's larger parts, so that a value is 24 bytes.
    Array(Box<[Value]>),
    /// A GEOGRAPHY_POINT.
    Point(GeoPoint),
    /// A GEOGRAPHY polygon, shared like bytes.
    Geography(Arc<Polygon>),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The natural type of the value, used for expression results without a column.
    pub fn natural_type(&self) -> Option<DataType> {
        Some(match self {
            Value::Null => return None,
            Value::Int(_) => DataType::BigInt,
            Value::Float(_) => DataType::Float,
            Value::Decimal(_) => DataType::Decimal,
            Value::Str(_) => DataType::Varchar,
            Value::Bytes(_) => DataType::Varbinary,
            Value::Timestamp(_) => DataType::Timestamp,
            Value::Bool(_) => DataType::Boolean,
            Value::Array(_) => return None,
            Value::Point(_) => DataType::GeographyPoint,
            Value::Geography(_) => DataType::Geography,
        })
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(v) | Value::Timestamp(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Int(v) => Some(*v as f64),
            Value::Float(v) => Some(*v),
            Value::Decimal(d) => Some(decimal::to_f64(d.get())),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// SQL truth value: NULL is unknown (None).
    pub fn truth(&self) -> Option<bool> {
        match self {
            Value::Null => None,
            Value::Bool(b) => Some(*b),
            Value::Int(v) => Some(*v != 0),
            _ => Some(true),
        }
    }

    /// SQL comparison: None when either side is NULL or the two cannot be compared.
    pub fn sql_cmp(&self, other: &Value) -> Option<Ordering> {
        use Value::*;
        match (self, other) {
            (Null, _) | (_, Null) => None,
            (Int(a), Int(b)) => Some(a.cmp(b)),
            (Decimal(a), Decimal(b)) => Some(a.cmp(b)),
            (Int(a), Decimal(b)) => Some(decimal::from_i64(*a).cmp(&b.get())),
            (Decimal(a), Int(b)) => Some(a.get().cmp(&decimal::from_i64(*b))),
            (Int(_) | Float(_) | Decimal(_), Int(_) | Float(_) | Decimal(_)) => self.as_f64()?.partial_cmp(&other.as_f64()?),
            (Str(a), Str(b)) => Some(a.cmp(b)),
            (Bytes(a), Bytes(b)) => Some(a.cmp(b)),
            (Timestamp(a), Timestamp(b)) => Some(a.cmp(b)),
            (Timestamp(a), Int(b)) | (Int(a), Timestamp(b)) => Some(a.cmp(b)),
            (Timestamp(a), Str(s)) => Some(a.cmp(&time::parse_timestamp(s).ok()?)),
            (Str(s), Timestamp(b)) => Some(time::parse_timestamp(s).ok()?.cmp(b)),
            (Bool(a), Bool(b)) => Some(a.cmp(b)),
            (Point(a), Point(b)) => Some(a.total_cmp(b)),
            (Geography(a), Geography(b)) => Some(a.total_cmp(b)),
            _ => None,
        }
    }

    /// Whether `coerce_to(ty)` would return the value unchanged, so the caller's value can
    /// be used as it is (the common case: a procedure passes the declared types). Must stay
    /// in step with `coerce_to`: anything not listed here simply takes the converting path.
    #[inline]
    pub fn coerces_to_itself(&self, ty: DataType) -> bool {
        match (self, ty) {
            (Value::Null, _) => true,
            (Value::Int(i), t) if t.is_integer() => match t.int_range() {
                Some((lo, hi)) => *i >= lo && *i <= hi,
                None => true,
            },
            (Value::Str(s), DataType::Varchar) => s != "\\N",
            (Value::Float(_), DataType::Float)
            | (Value::Decimal(_), DataType::Decimal)
            | (Value::Bytes(_), DataType::Varbinary)
            | (Value::Timestamp(_), DataType::Timestamp)
            | (Value::Bool(_), DataType::Boolean)
            | (Value::Point(_), DataType::GeographyPoint)
            | (Value::Geography(_), DataType::Geography) => true,
            _ => false,
        }
    }

    /// Converts the value to a column or parameter of type `ty`, with VoltDB's coercions
    /// (integers widen and narrow when in range, strings parse, hex strings become bytes).
    pub fn coerce_to(&self, ty: DataType) -> Result<Value> {
        use Value::*;
        let fail = || Error::type_error(format!("cannot convert {} to {}", self.describe(), ty.sql_name()));
        let out = match (self, ty) {
            (Null, _) => Null,
            (Str(s), _) if s == "\\N" => Null,
            (Int(v), t) if t.is_integer() => Int(*v),
            (Float(f), t) if t.is_integer() => {
                if f.fract() != 0.0 || !f.is_finite() {
                    return Err(fail());
                }
                Int(*f as i64)
            }
            (Decimal(d), t) if t.is_integer() => Int(decimal::to_exact_i64(d.get()).ok_or_else(fail)?),
            (Str(s), t) if t.is_integer() => Int(s.trim().parse::<i64>().map_err(|_| fail())?),
            (Timestamp(v), t) if t.is_integer() => Int(*v),
            (Bool(b), t) if t.is_integer() => Int(*b as i64),
            (Int(_) | Float(_) | Decimal(_), DataType::Float) => Float(self.as_f64().ok_or_else(fail)?),
            (Str(s), DataType::Float) => Float(s.trim().parse::<f64>().map_err(|_| fail())?),
            (Int(v), DataType::Decimal) => Decimal(decimal::from_i64(*v).into()),
            (Decimal(d), DataType::Decimal) => Decimal(*d),
            (Float(f), DataType::Decimal) => Decimal(decimal::from_f64(*f).ok_or_else(fail)?.into()),
            (Str(s), DataType::Decimal) => Decimal(decimal::parse(s).ok_or_else(fail)?.into()),
            (Str(s), DataType::Varchar) => Str(s.clone()),
            (Bytes(b), DataType::Varchar) => Str(CompactString::from_utf8(b).map_err(|_| fail())?),
            (Array(_), _) => return Err(fail()),
            (v, DataType::Varchar) => Str(compact_str::ToCompactString::to_compact_string(v)),
            (Bytes(b), DataType::Varbinary) => Bytes(b.clone()),
            (Str(s), DataType::Varbinary) => Bytes(parse_hex(s).ok_or_else(fail)?.into()),
            (Timestamp(v), DataType::Timestamp) | (Int(v), DataType::Timestamp) => Timestamp(*v),
            (Str(s), DataType::Timestamp) => Timestamp(time::parse_timestamp(s).map_err(|_| fail())?),
            (Bool(b), DataType::Boolean) => Bool(*b),
            (Int(v), DataType::Boolean) => Bool(*v != 0),
            // Geography values are written as WKT text by clients that have no type for them.
            (Point(p), DataType::GeographyPoint) => Point(*p),
            (Str(s), DataType::GeographyPoint) => Point(geo::parse_point(s)?),
            (Geography(g), DataType::Geography) => Geography(g.clone()),
            (Str(s), DataType::Geography) => Geography(Arc::new(geo::parse_polygon(s)?)),
            _ => return Err(fail()),
        };
        if let (Int(v), Some((lo, hi))) = (&out, ty.int_range()) {
            if *v < lo || *v > hi {
                return Err(Error::type_error(format!("value {v} is out of range for {}", ty.sql_name())));
            }
        }
        Ok(out)
    }

    /// A short description for error messages: the type and, for small values, the value.
    pub fn describe(&self) -> String {
        match self {
            Value::Null => "NULL".into(),
            Value::Str(s) if s.len() > 40 => format!("VARCHAR '{}…'", &s[..s.floor_char_boundary(40)]),
            Value::Str(s) => format!("VARCHAR '{s}'"),
            Value::Bytes(b) => format!("VARBINARY of {} bytes", b.len()),
            Value::Array(a) => format!("array of {} values", a.len()),
            Value::Geography(g) => format!("GEOGRAPHY of {} points", g.num_points()),
            v => format!("{} {v}", v.natural_type().map(|t| t.sql_name()).unwrap_or("NULL")),
        }
    }

    #[inline]
    fn rank(&self) -> u8 {
        match self {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Int(_) => 2,
            Value::Float(_) => 3,
            Value::Decimal(_) => 4,
            Value::Timestamp(_) => 5,
            Value::Str(_) => 6,
            Value::Bytes(_) => 7,
            Value::Array(_) => 8,
            Value::Point(_) => 9,
            Value::Geography(_) => 10,
        }
    }
}

/// Parses hex, with or without VoltDB's `X'..'` wrapper.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    let s = if (s.starts_with("X'") || s.starts_with("x'")) && s.ends_with('\'') && s.len() >= 3 { &s[2..s.len() - 1] } else { s };
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Lowercase hex of bytes.
pub fn to_hex(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02X}");
    }
    s
}

/// Index keys need a total order and a hash that agree: values of different kinds order by
/// kind, floats by `total_cmp`. Keys are coerced to their column type before use, so two
/// equal SQL values always have the same kind here.
impl PartialEq for Value {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Value {}

impl PartialOrd for Value {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Value {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        use Value::*;
        match (self, other) {
            (Int(a), Int(b)) => a.cmp(b),
            (Float(a), Float(b)) => a.total_cmp(b),
            (Decimal(a), Decimal(b)) => a.cmp(b),
            (Str(a), Str(b)) => a.cmp(b),
            (Bytes(a), Bytes(b)) => a.cmp(b),
            (Timestamp(a), Timestamp(b)) => a.cmp(b),
            (Bool(a), Bool(b)) => a.cmp(b),
            (Array(a), Array(b)) => a.cmp(b),
            (Point(a), Point(b)) => a.total_cmp(b),
            (Geography(a), Geography(b)) => a.total_cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl Hash for Value {
    #[inline]
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u8(self.rank());
        match self {
            Value::Null => {}
            Value::Int(v) | Value::Timestamp(v) => v.hash(state),
            Value::Float(f) => f.to_bits().hash(state),
            Value::Decimal(d) => d.hash(state),
            Value::Str(s) => s.as_str().hash(state),
            Value::Bytes(b) => b[..].hash(state),
            Value::Bool(b) => b.hash(state),
            Value::Array(a) => a.hash(state),
            Value::Point(p) => {
                p.lng.to_bits().hash(state);
                p.lat.to_bits().hash(state);
            }
            Value::Geography(g) => {
                for v in g.rings.iter().flatten() {
                    v.0.to_bits().hash(state);
                    v.1.to_bits().hash(state);
                    v.2.to_bits().hash(state);
                }
            }
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v}"),
            Value::Decimal(d) => f.write_str(&decimal::format(d.get())),
            Value::Str(s) => f.write_str(s),
            Value::Bytes(b) => f.write_str(&to_hex(b)),
            Value::Timestamp(t) => f.write_str(&time::format_timestamp(*t)),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Point(p) => f.write_str(&p.wkt()),
            Value::Geography(g) => f.write_str(&g.wkt()),
            Value::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                f.write_str("]")
            }
        }
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.into())
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v.into())
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decimal_keeps_every_i128_and_its_order_in_two_halves() {
        let all = [i128::MIN + 1, -(1 << 64) - 1, -(1 << 64), -1, 0, 1, u64::MAX as i128, 1 << 64, decimal::MAX_ABS, i128::MAX];
        for (i, a) in all.iter().enumerate() {
            assert_eq!(Dec::new(*a).get(), *a);
            for b in &all[i..] {
                assert_eq!(Dec::new(*a).cmp(&Dec::new(*b)), a.cmp(b), "{a} against {b}");
            }
        }
    }

    #[test]
    fn text_is_inline_up_to_24_bytes_and_hashes_as_before() {
        use std::hash::BuildHasher;
        // Rows are arrays of values: the size is what every stored cell costs.
        assert_eq!(std::mem::size_of::<Value>(), 24);
        let short = Value::from("CA");
        let Value::Str(s) = &short else { unreachable!() };
        assert!(!s.is_heap_allocated());
        let long = Value::from("a string longer than 24 bytes");
        let Value::Str(s) = &long else { unreachable!() };
        assert!(s.is_heap_allocated());
        // Index hashes (and so orders derived from them) are those of the text.
        let state = std::hash::RandomState::new();
        let mut h = state.build_hasher();
        h.write_u8(short.rank());
        "CA".hash(&mut h);
        assert_eq!(state.hash_one(&short), h.finish());
    }

    #[test]
    fn integers_widen_and_narrow_in_range() {
        assert_eq!(Value::Int(5).coerce_to(DataType::BigInt).unwrap(), Value::Int(5));
        assert_eq!(Value::Int(127).coerce_to(DataType::TinyInt).unwrap(), Value::Int(127));
        assert!(Value::Int(128).coerce_to(DataType::TinyInt).is_err());
        assert!(Value::Int(-128).coerce_to(DataType::TinyInt).is_err());
    }

    #[test]
    fn strings_parse_into_numbers_bytes_and_timestamps() {
        assert_eq!(Value::from("42").coerce_to(DataType::Integer).unwrap(), Value::Int(42));
        assert_eq!(Value::from("X'0aff'").coerce_to(DataType::Varbinary).unwrap(), Value::Bytes(vec![10, 255].into()));
        assert_eq!(Value::from("\\N").coerce_to(DataType::Integer).unwrap(), Value::Null);
        assert_eq!(Value::from("1970-01-01 00:00:01").coerce_to(DataType::Timestamp).unwrap(), Value::Timestamp(1_000_000));
        assert!(Value::from("abc").coerce_to(DataType::Integer).is_err());
    }

    #[test]
    fn sql_comparison_is_unknown_with_null_and_numeric_across_kinds() {
        assert_eq!(Value::Null.sql_cmp(&Value::Int(1)), None);
        assert_eq!(Value::Int(2).sql_cmp(&Value::Float(1.5)), Some(Ordering::Greater));
        assert_eq!(Value::Int(1).sql_cmp(&Value::Decimal(decimal::from_i64(1).into())), Some(Ordering::Equal));
    }
}
