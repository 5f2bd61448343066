//! One value of a given VoltType: its encoding and NULL sentinel, shared by parameters and
//! table cells (§1.4.1). Sentinels decode to `Value::Null`.

use std::sync::Arc;

use lockstep_core::geo::{GeoPoint, Polygon};
use lockstep_core::{decimal, DataType, Result, Value};

use crate::codec::{malformed, put_f64, put_i128, put_i16, put_i32, put_i64, put_i8, put_varbinary, Reader};
use crate::types::{self, WireType};

/// Reads one value of scalar type `code`. Inlined: a snapshot load calls it for tens of
/// millions of values.
#[inline]
pub fn read(r: &mut Reader, code: WireType, what: &str) -> Result<Value> {
    Ok(match code {
        types::TINYINT => match r.i8(what)? {
            i8::MIN => Value::Null,
            v => Value::Int(v as i64),
        },
        types::SMALLINT => match r.i16(what)? {
            i16::MIN => Value::Null,
            v => Value::Int(v as i64),
        },
        types::INTEGER => match r.i32(what)? {
            i32::MIN => Value::Null,
            v => Value::Int(v as i64),
        },
        types::BIGINT => match r.i64(what)? {
            i64::MIN => Value::Null,
            v => Value::Int(v),
        },
        types::FLOAT => match r.f64(what)? {
            v if v <= types::FLOAT_NULL => Value::Null,
            v => Value::Float(v),
        },
        types::STRING => match r.str(what)? {
            None => Value::Null,
            Some(s) => Value::Str(s.into()),
        },
        types::TIMESTAMP => match r.i64(what)? {
            i64::MIN => Value::Null,
            v => Value::Timestamp(v),
        },
        types::DECIMAL => match r.i128(what)? {
            types::DECIMAL_NULL => Value::Null,
            v => Value::Decimal(v.into()),
        },
        types::BOOLEAN => match r.i8(what)? {
            i8::MIN => Value::Null,
            v => Value::Bool(v != 0),
        },
        types::VARBINARY => match r.varbinary(what)? {
            None => Value::Null,
            Some(b) => Value::Bytes(b.into()),
        },
        types::GEOGRAPHY_POINT => match (r.f64(what)?, r.f64(what)?) {
            (types::POINT_NULL, types::POINT_NULL) => Value::Null,
            (lng, lat) => Value::Point(GeoPoint::new(lng, lat).map_err(|e| malformed(format!("{what}: {}", e.message)))?),
        },
        types::GEOGRAPHY => match r.varbinary(what)? {
            None => Value::Null,
            Some(b) => Value::Geography(Arc::new(Polygon::from_wire(b).map_err(|e| malformed(format!("{what}: {}", e.message)))?)),
        },
        other => {
            return Err(malformed(format!("{what} has unsupported type {}", types::name(other))));
        }
    })
}

fn int_in(v: i64, lo: i64, hi: i64) -> Option<i64> {
    (lo..=hi).contains(&v).then_some(v)
}

/// Writes `v` as type `code` (NULL as the type's sentinel). Returns false, writing nothing,
/// when the value does not fit the type even after VoltDB's usual conversions.
pub fn write(out: &mut Vec<u8>, code: WireType, v: &Value) -> bool {
    if let Some(ty) = DataType::from_wire_code(code) {
        if !fits(ty, v) {
            return match v.coerce_to(ty) {
                Ok(c) if fits(ty, &c) => write(out, code, &c),
                _ => false,
            };
        }
    }
    match (code, v) {
        (types::TINYINT, Value::Null) => put_i8(out, i8::MIN),
        (types::TINYINT, Value::Bool(b)) => put_i8(out, *b as i8),
        (types::TINYINT, Value::Int(i)) => put_i8(out, *i as i8),
        (types::SMALLINT, Value::Null) => put_i16(out, i16::MIN),
        (types::SMALLINT, Value::Int(i)) => put_i16(out, *i as i16),
        (types::INTEGER, Value::Null) => put_i32(out, i32::MIN),
        (types::INTEGER, Value::Int(i)) => put_i32(out, *i as i32),
        (types::BIGINT, Value::Null) => put_i64(out, i64::MIN),
        (types::BIGINT, Value::Int(i)) => put_i64(out, *i),
        (types::FLOAT, Value::Null) => put_f64(out, types::FLOAT_NULL),
        (types::FLOAT, Value::Float(f)) => put_f64(out, *f),
        (types::STRING, Value::Null) | (types::VARBINARY, Value::Null) => put_i32(out, -1),
        (types::STRING, Value::Str(s)) => put_varbinary(out, s.as_bytes()),
        (types::VARBINARY, Value::Bytes(b)) => put_varbinary(out, b),
        (types::TIMESTAMP, Value::Null) => put_i64(out, i64::MIN),
        (types::TIMESTAMP, Value::Timestamp(t) | Value::Int(t)) => put_i64(out, *t),
        (types::DECIMAL, Value::Null) => put_i128(out, types::DECIMAL_NULL),
        (types::DECIMAL, Value::Decimal(d)) => put_i128(out, d.get()),
        (types::DECIMAL, Value::Int(i)) => put_i128(out, decimal::from_i64(*i)),
        (types::BOOLEAN, Value::Null) => put_i8(out, i8::MIN),
        (types::BOOLEAN, Value::Bool(b)) => put_i8(out, *b as i8),
        (types::GEOGRAPHY_POINT, Value::Null) => {
            put_f64(out, types::POINT_NULL);
            put_f64(out, types::POINT_NULL);
        }
        (types::GEOGRAPHY_POINT, Value::Point(p)) => {
            put_f64(out, p.lng);
            put_f64(out, p.lat);
        }
        (types::GEOGRAPHY, Value::Null) => put_i32(out, -1),
        (types::GEOGRAPHY, Value::Geography(g)) => {
            put_i32(out, g.wire_len() as i32);
            g.to_wire(out);
        }
        _ => return false,
    }
    true
}

/// Whether `v` can be written as `ty` directly (the integer NULL sentinel itself does not fit).
fn fits(ty: DataType, v: &Value) -> bool {
    match (ty, v) {
        (_, Value::Null) => true,
        (DataType::TinyInt, Value::Bool(_)) => true,
        (DataType::TinyInt, Value::Int(i)) => int_in(*i, i8::MIN as i64 + 1, i8::MAX as i64).is_some(),
        (DataType::SmallInt, Value::Int(i)) => int_in(*i, i16::MIN as i64 + 1, i16::MAX as i64).is_some(),
        (DataType::Integer, Value::Int(i)) => int_in(*i, i32::MIN as i64 + 1, i32::MAX as i64).is_some(),
        (DataType::BigInt, Value::Int(i)) => *i != i64::MIN,
        (DataType::Float, Value::Float(f)) => *f > types::FLOAT_NULL || f.is_nan(),
        (DataType::Varchar, Value::Str(_)) => true,
        (DataType::Varbinary, Value::Bytes(_)) => true,
        (DataType::Timestamp, Value::Timestamp(t) | Value::Int(t)) => *t != i64::MIN,
        (DataType::Decimal, Value::Decimal(d)) => d.get() != types::DECIMAL_NULL,
        (DataType::Decimal, Value::Int(_)) => true,
        (DataType::Boolean, Value::Bool(_)) => true,
        (DataType::GeographyPoint, Value::Point(_)) => true,
        (DataType::Geography, Value::Geography(_)) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(code: WireType, v: &Value) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        write(&mut out, code, v).then_some(out)
    }

    #[test]
    fn sentinels_read_as_null() {
        for (code, bytes) in [
            (types::TINYINT, vec![0x80]),
            (types::SMALLINT, vec![0x80, 0]),
            (types::INTEGER, vec![0x80, 0, 0, 0]),
            (types::BIGINT, vec![0x80, 0, 0, 0, 0, 0, 0, 0]),
            (types::FLOAT, vec![0xff, 0xee, 0x42, 0xd1, 0x30, 0x77, 0x3b, 0x76]),
            (types::FLOAT, (-f64::MAX).to_be_bytes().to_vec()),
            (types::TIMESTAMP, vec![0x80, 0, 0, 0, 0, 0, 0, 0]),
            (types::STRING, vec![0xff; 4]),
            (types::VARBINARY, vec![0xff; 4]),
            (types::DECIMAL, {
                let mut d = vec![0; 16];
                d[0] = 0x80;
                d
            }),
        ] {
            assert_eq!(read(&mut Reader::new(&bytes), code, "x").unwrap(), Value::Null, "type {code}");
            assert_eq!(enc(code, &Value::Null).unwrap().len(), bytes.len());
        }
        assert_eq!(enc(types::FLOAT, &Value::Null).unwrap(), vec![0xff, 0xee, 0x42, 0xd1, 0x30, 0x77, 0x3b, 0x76]);
    }

    #[test]
    fn values_that_do_not_fit_are_refused_or_converted() {
        assert_eq!(enc(types::TINYINT, &Value::Int(200)), None);
        assert_eq!(enc(types::TINYINT, &Value::Int(-128)), None, "the sentinel is not a value");
        assert_eq!(enc(types::TINYINT, &Value::Bool(true)), Some(vec![1]));
        assert_eq!(enc(types::INTEGER, &Value::from("7")), Some(vec![0, 0, 0, 7]));
        assert_eq!(enc(types::FLOAT, &Value::Int(2)), Some(2.0f64.to_be_bytes().to_vec()));
        assert_eq!(enc(types::BIGINT, &Value::from("x")), None);
    }
}
