//! Parameter sets (§1.4): int16 count, then type code + value per parameter, with arrays.

use lockstep_core::{Error, Result, Value};

use crate::codec::{malformed, put_i16, put_i32, put_i8, Reader};
use crate::scalar;
use crate::types::{self, WireType};

/// Most parameters in one call (the int16 count's range).
pub const PARAM_COUNT_MAX: usize = 32767;
/// Most elements in one array parameter (int16 count) — byte arrays are bounded by the frame.
pub const ARRAY_COUNT_MAX: usize = 32767;

fn unsupported(code: WireType) -> Error {
    Error::graceful(format!("{} parameters are not supported", types::name(code)))
}

/// Reads a parameter set into values, with each parameter's wire type code (ARRAY for arrays).
pub fn decode_params_typed(r: &mut Reader) -> Result<(Vec<Value>, Vec<WireType>)> {
    let mut codes = Vec::new();
    let values = decode_params_into(r, Some(&mut codes))?;
    Ok((values, codes))
}

/// Reads a parameter set into values.
pub fn decode_params(r: &mut Reader) -> Result<Vec<Value>> {
    decode_params_into(r, None)
}

/// Reads a parameter set, appending each parameter's type code to `codes` if given (the
/// server has no use for them, so it takes no list).
pub(crate) fn decode_params_into(r: &mut Reader, mut codes: Option<&mut Vec<WireType>>) -> Result<Vec<Value>> {
    let count = r.i16("parameter count")?;
    if count < 0 {
        return Err(malformed(format!("negative parameter count {count}")));
    }
    let count = count as usize;
    // Every parameter takes at least its type byte, so the remaining bytes bound the count.
    let mut values = Vec::with_capacity(count.min(r.remaining()));
    for i in 0..count {
        let code = r.i8("parameter type")?;
        values.push(decode_param(r, code, i)?);
        if let Some(codes) = codes.as_deref_mut() {
            codes.push(code);
        }
    }
    Ok(values)
}

fn decode_param(r: &mut Reader, code: WireType, index: usize) -> Result<Value> {
    // Naming the parameter costs a format! per value, so it is done only to report an
    // error: a failed read is repeated from the same place with the name.
    let start = r.clone();
    decode_param_named(r, code, "parameter").or_else(|_| {
        *r = start;
        decode_param_named(r, code, &format!("parameter {}", index + 1))
    })
}

fn decode_param_named(r: &mut Reader, code: WireType, what: &str) -> Result<Value> {
    match code {
        types::NULL => Ok(Value::Null),
        types::ARRAY => decode_array(r, what),
        types::VOLTTABLE => Err(unsupported(code)),
        types::GEOGRAPHY | types::GEOGRAPHY_POINT => scalar::read(r, code, what),
        types::TINYINT
        | types::SMALLINT
        | types::INTEGER
        | types::BIGINT
        | types::FLOAT
        | types::STRING
        | types::TIMESTAMP
        | types::DECIMAL
        | types::BOOLEAN
        | types::VARBINARY => scalar::read(r, code, what),
        other => Err(malformed(format!("{what} has unknown type code {other}"))),
    }
}

fn decode_array(r: &mut Reader, what: &str) -> Result<Value> {
    let elem = r.i8("array element type")?;
    match elem {
        // Byte arrays are a plain int32-length byte string.
        types::TINYINT => {
            let n = r.i32("byte array length")?;
            if n < 0 {
                return Err(malformed(format!("{what}: negative byte array length {n}")));
            }
            Ok(Value::Bytes(r.bytes(n as usize, what)?.into()))
        }
        types::SMALLINT
        | types::INTEGER
        | types::BIGINT
        | types::FLOAT
        | types::STRING
        | types::TIMESTAMP
        | types::DECIMAL
        | types::VARBINARY => {
            let n = r.i16("array length")?;
            if n < 0 {
                return Err(malformed(format!("{what}: negative array length {n}")));
            }
            let n = n as usize;
            let mut out = Vec::with_capacity(n.min(r.remaining()));
            for _ in 0..n {
                out.push(scalar::read(r, elem, what)?);
            }
            Ok(Value::Array(out.into()))
        }
        types::VOLTTABLE | types::GEOGRAPHY | types::GEOGRAPHY_POINT => {
            Err(Error::graceful(format!("arrays of {} parameters are not supported", types::name(elem))))
        }
        other => Err(malformed(format!("{what}: arrays of {} are not allowed", types::name(other)))),
    }
}

/// The wire type a value is sent as (integers as BIGINT, the widest).
fn natural_code(v: &Value) -> Option<WireType> {
    Some(match v {
        Value::Null => types::NULL,
        Value::Int(_) => types::BIGINT,
        Value::Float(_) => types::FLOAT,
        Value::Decimal(_) => types::DECIMAL,
        Value::Str(_) => types::STRING,
        Value::Bytes(_) => types::VARBINARY,
        Value::Timestamp(_) => types::TIMESTAMP,
        Value::Bool(_) => types::BOOLEAN,
        Value::Array(_) => return None,
        Value::Point(_) => types::GEOGRAPHY_POINT,
        Value::Geography(_) => types::GEOGRAPHY,
    })
}

/// Appends a parameter set. Fails for more than `PARAM_COUNT_MAX` parameters, arrays mixing
/// element kinds or nesting, and values that cannot be sent (the integer NULL sentinel).
pub fn encode_params(params: &[Value], out: &mut Vec<u8>) -> Result<()> {
    encode_params_typed(params, &[], out)
}

/// `encode_params` where `hints[i]`, when it is a narrower integer type the value fits, is
/// the wire type of integer parameter i (so a call can send INTEGER where a peer expects it).
pub fn encode_params_typed(params: &[Value], hints: &[WireType], out: &mut Vec<u8>) -> Result<()> {
    if params.len() > PARAM_COUNT_MAX {
        return Err(Error::graceful(format!("{} parameters is more than the maximum of {PARAM_COUNT_MAX}", params.len())));
    }
    put_i16(out, params.len() as i16);
    for (i, p) in params.iter().enumerate() {
        let bad = || Error::graceful(format!("parameter {} ({}) cannot be sent", i + 1, p.describe()));
        match p {
            Value::Null => put_i8(out, types::NULL),
            Value::Array(items) => encode_array(items, out).map_err(|e| e.context(format!("parameter {}", i + 1)))?,
            v => {
                let mut code = natural_code(v).ok_or_else(bad)?;
                if let (Value::Int(n), Some(&hint)) = (v, hints.get(i)) {
                    if fits_integer(hint, *n) {
                        code = hint;
                    }
                }
                put_i8(out, code);
                if !scalar::write(out, code, v) {
                    return Err(bad());
                }
            }
        }
    }
    Ok(())
}

/// Whether integer `v` can be sent as the integer type `code` (its NULL sentinel excluded).
fn fits_integer(code: WireType, v: i64) -> bool {
    let (lo, hi) = match code {
        types::TINYINT => (i8::MIN as i64, i8::MAX as i64),
        types::SMALLINT => (i16::MIN as i64, i16::MAX as i64),
        types::INTEGER => (i32::MIN as i64, i32::MAX as i64),
        types::BIGINT => (i64::MIN, i64::MAX),
        _ => return false,
    };
    v > lo && v <= hi
}

fn encode_array(items: &[Value], out: &mut Vec<u8>) -> Result<()> {
    if items.len() > ARRAY_COUNT_MAX {
        return Err(Error::graceful(format!("array of {} elements is over {ARRAY_COUNT_MAX}", items.len())));
    }
    // The element type is that of the first non-NULL element; all-NULL arrays go as BIGINT.
    let mut elem = types::BIGINT;
    if let Some(first) = items.iter().find(|v| !v.is_null()) {
        elem = match natural_code(first) {
            Some(c) if c != types::BOOLEAN => c,
            _ => return Err(Error::graceful(format!("arrays of {} are not supported", first.describe()))),
        };
    }
    put_i8(out, types::ARRAY);
    put_i8(out, elem);
    put_i16(out, items.len() as i16);
    for v in items {
        if !v.is_null() && natural_code(v) != Some(elem) {
            return Err(Error::graceful("an array's elements must all have the same type"));
        }
        if !scalar::write(out, elem, v) {
            return Err(Error::graceful(format!("array element {} cannot be sent", v.describe())));
        }
    }
    Ok(())
}

/// Appends a byte array the way non-Java clients send it (−99, TINYINT, int32 length, bytes).
pub fn encode_byte_array(bytes: &[u8], out: &mut Vec<u8>) {
    put_i8(out, types::ARRAY);
    put_i8(out, types::TINYINT);
    put_i32(out, bytes.len() as i32);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> Result<Vec<Value>> {
        let mut r = Reader::new(bytes);
        let v = decode_params(&mut r)?;
        r.expect_end("parameters")?;
        Ok(v)
    }

    #[test]
    fn byte_arrays_become_bytes() {
        let mut out = vec![0, 1];
        encode_byte_array(&[9, 8, 7], &mut out);
        assert_eq!(decode(&out).unwrap(), vec![Value::Bytes(vec![9, 8, 7].into())]);
    }

    #[test]
    fn unsupported_types_say_so() {
        assert_eq!(decode(&[0, 1, 21, 0, 0, 0, 0]).unwrap_err().message, "VOLTTABLE parameters are not supported");
        assert!(decode(&[0, 1, 26]).unwrap_err().message.contains("needs 8 bytes"), "a short point is malformed");
        assert!(decode(&[0, 1, 99]).unwrap_err().message.contains("unknown type code 99"));
        assert!(decode(&[0xff, 0xff]).unwrap_err().message.contains("negative parameter count"));
        assert!(decode(&[0x7f, 0xff]).is_err(), "count larger than the message");
    }

    #[test]
    fn integer_widths_are_kept_and_sentinels_are_null() {
        let bytes = [0, 4, 3, 5, 4, 0x80, 0, 5, 0, 0, 0, 9, 23, 1];
        let mut r = Reader::new(&bytes);
        let (values, codes) = decode_params_typed(&mut r).unwrap();
        assert_eq!(values, vec![Value::Int(5), Value::Null, Value::Int(9), Value::Bool(true)]);
        assert_eq!(codes, vec![3, 4, 5, 23]);
    }

    #[test]
    fn a_bad_parameter_is_named_by_its_position() {
        // Parameter 1 is INTEGER 5; parameter 2 is a BIGINT cut short, then a string that is
        // not UTF-8 as parameter 2 of another set.
        let e = decode(&[0, 2, 5, 0, 0, 0, 5, 6, 0, 0]).unwrap_err().message;
        assert!(e.contains("parameter 2"), "{e}");
        let e = decode(&[0, 2, 5, 0, 0, 0, 5, 9, 0, 0, 0, 1, 0xff]).unwrap_err().message;
        assert!(e.contains("parameter 2 is not valid UTF-8"), "{e}");
    }

    #[test]
    fn mixed_and_nested_arrays_are_refused() {
        let mut out = Vec::new();
        assert!(encode_params(&[Value::Array(vec![Value::Int(1), Value::from("a")].into())], &mut out).is_err());
        assert!(encode_params(&[Value::Array(vec![Value::Array(vec![].into())].into())], &mut out).is_err());
        assert!(encode_params(&[Value::Int(i64::MIN)], &mut out).is_err());
    }

    /// GEOGRAPHY_POINT (two doubles) and GEOGRAPHY (length + polygon) parameters round-trip
    /// exactly, and their NULL sentinels read as NULL.
    #[test]
    fn geography_parameters_round_trip() {
        let point = Value::Point(lockstep_core::geo::GeoPoint::new(-71.0645, 42.3589).unwrap());
        let poly = Value::Geography(std::sync::Arc::new(
            lockstep_core::geo::parse_polygon("POLYGON((0 0, 1 0, 1 1, 0 1, 0 0), (0.2 0.2, 0.2 0.4, 0.4 0.4, 0.2 0.2))").unwrap(),
        ));
        let mut out = Vec::new();
        encode_params(&[point.clone(), poly.clone()], &mut out).unwrap();
        assert_eq!(&out[2..3], &[26]);
        assert_eq!(&out[3..11], &(-71.0645f64).to_be_bytes());
        let back = decode(&out).unwrap();
        assert_eq!(back, vec![point, poly.clone()]);
        assert_eq!(back[1].to_string(), poly.to_string());
        let mut nulls = vec![0, 2, 26];
        nulls.extend(360f64.to_be_bytes());
        nulls.extend(360f64.to_be_bytes());
        nulls.extend([27, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode(&nulls).unwrap(), vec![Value::Null, Value::Null]);
        let mut off_globe = vec![0, 1, 26];
        off_globe.extend(200f64.to_be_bytes());
        off_globe.extend(0f64.to_be_bytes());
        assert!(decode(&off_globe).unwrap_err().message.contains("longitude 200"));
    }
}
