//! Lockstep's types in PostgreSQL's terms: which type each column is described as, and its
//! values in PostgreSQL's text and binary formats (results out, parameters in).

use bytes::{BufMut, BytesMut};
use lockstep_core::{decimal, time, DataType, Error, Value};
use pgwire::api::results::FieldFormat;
use pgwire::api::Type;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01), which binary timestamps
/// count from.
const PG_EPOCH_MICROS: i64 = 946_684_800_000_000;
/// Decimal digits after the point in a Lockstep DECIMAL, and so the scale of a NUMERIC.
const DECIMAL_SCALE_DIGITS: i16 = 12;
/// A NUMERIC's digits are base 10,000: four decimal digits each.
const NBASE: u128 = 10_000;
/// Base-10,000 digits after the point of a Lockstep DECIMAL (12 decimal digits).
const DECIMAL_FRACTION_GROUPS: i32 = 3;
/// Sign words of PostgreSQL's binary NUMERIC.
const NUMERIC_POS: u16 = 0x0000;
const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;
/// Base-10,000 digits a binary NUMERIC parameter may carry (a DECIMAL(38,12) needs 14).
const NUMERIC_DIGITS_MAX: usize = 64;

/// The PostgreSQL type a Lockstep column is described as. PostgreSQL has no one-byte
/// integer, so TINYINT is a SMALLINT.
pub fn pg_type(t: DataType) -> Type {
    match t {
        DataType::TinyInt | DataType::SmallInt => Type::INT2,
        DataType::Integer => Type::INT4,
        DataType::BigInt => Type::INT8,
        DataType::Float => Type::FLOAT8,
        DataType::Decimal => Type::NUMERIC,
        DataType::Varchar => Type::VARCHAR,
        DataType::Varbinary => Type::BYTEA,
        DataType::Timestamp => Type::TIMESTAMP,
        DataType::Boolean => Type::BOOL,
        // PostgreSQL has no geography type of its own (PostGIS is an extension): WKT text.
        DataType::GeographyPoint | DataType::Geography => Type::TEXT,
    }
}

/// `pg_type.typlen` of a described column: its fixed width in bytes, or -1 (variable).
pub fn type_size(t: DataType) -> i16 {
    match t {
        DataType::TinyInt | DataType::SmallInt => 2,
        DataType::Integer => 4,
        DataType::BigInt | DataType::Float | DataType::Timestamp => 8,
        DataType::Boolean => 1,
        DataType::Decimal | DataType::Varchar | DataType::Varbinary | DataType::GeographyPoint | DataType::Geography => -1,
    }
}

/// Appends one field of a data row: its length (-1 for NULL), then its bytes in `format`.
/// `ty` is the column's type, which decides the width of an integer.
pub fn encode_field(out: &mut BytesMut, ty: DataType, v: &Value, format: FieldFormat) -> Result<(), Error> {
    if matches!(v, Value::Null) {
        out.put_i32(-1);
        return Ok(());
    }
    let at = out.len();
    out.put_i32(0);
    match format {
        FieldFormat::Text => encode_text(out, v),
        FieldFormat::Binary => encode_binary(out, ty, v)?,
    }
    let len =
        i32::try_from(out.len() - at - 4).map_err(|_| Error::graceful("a value is too large for the PostgreSQL protocol (over 2 GiB)"))?;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// PostgreSQL's text output of a value.
fn encode_text(out: &mut BytesMut, v: &Value) {
    use std::fmt::Write;
    let mut w = Writer(out);
    let _ = match v {
        Value::Null => Ok(()),
        Value::Int(i) => write!(w, "{i}"),
        Value::Float(f) => write!(w, "{}", float_text(*f)),
        Value::Decimal(d) => w.write_str(&decimal::format(d.get())),
        Value::Str(s) => w.write_str(s),
        Value::Bytes(b) => {
            w.0.put_slice(b"\\x");
            for byte in b.iter() {
                let _ = write!(w, "{byte:02x}");
            }
            Ok(())
        }
        Value::Timestamp(t) => w.write_str(&time::format_timestamp(*t)),
        Value::Bool(b) => w.write_str(if *b { "t" } else { "f" }),
        Value::Array(a) => write!(w, "{{{}}}", a.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")),
        Value::Point(_) | Value::Geography(_) => write!(w, "{v}"),
    };
}

/// A float as PostgreSQL prints one: the shortest text that reads back the same, with its
/// own names for the special values.
fn float_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        format!("{f}")
    }
}

struct Writer<'a>(&'a mut BytesMut);

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.put_slice(s.as_bytes());
        Ok(())
    }
}

fn encode_binary(out: &mut BytesMut, ty: DataType, v: &Value) -> Result<(), Error> {
    let wrong = || Error::unexpected(format!("a {} column holds {}", ty.sql_name(), v.describe()));
    match (ty, v) {
        (DataType::TinyInt | DataType::SmallInt, Value::Int(i)) => out.put_i16(i16::try_from(*i).map_err(|_| wrong())?),
        (DataType::Integer, Value::Int(i)) => out.put_i32(i32::try_from(*i).map_err(|_| wrong())?),
        (DataType::BigInt, Value::Int(i)) => out.put_i64(*i),
        (DataType::Float, Value::Float(f)) => out.put_f64(*f),
        (DataType::Float, Value::Int(i)) => out.put_f64(*i as f64),
        (DataType::Decimal, Value::Decimal(d)) => encode_numeric(out, d.get()),
        (DataType::Decimal, Value::Int(i)) => encode_numeric(out, decimal::from_i64(*i)),
        (DataType::Varchar, Value::Str(s)) => out.put_slice(s.as_bytes()),
        (DataType::Varbinary, Value::Bytes(b)) => out.put_slice(b),
        (DataType::Timestamp, Value::Timestamp(t) | Value::Int(t)) => out.put_i64(t.saturating_sub(PG_EPOCH_MICROS)),
        (DataType::Boolean, Value::Bool(b)) => out.put_u8(u8::from(*b)),
        // Described as text, whose binary form is the text itself.
        (DataType::GeographyPoint, Value::Point(_)) | (DataType::Geography, Value::Geography(_)) => out.put_slice(v.to_string().as_bytes()),
        // A value whose type differs from its column's (an expression's result, say) is
        // sent as text would be: describe it as VARCHAR in that case (see `value_type`).
        _ => return Err(wrong()),
    }
    Ok(())
}

/// A DECIMAL (scaled by 10¹²) as PostgreSQL's binary NUMERIC: base-10,000 digits, the
/// weight of the first, the sign and the display scale (12, as the text form shows).
pub fn encode_numeric(out: &mut BytesMut, d: i128) {
    let abs = d.unsigned_abs();
    // Every base-10,000 digit, least significant first, starting 3 digits below the point.
    let mut groups = Vec::new();
    let mut rest = abs;
    while rest > 0 {
        groups.push((rest % NBASE) as i16);
        rest /= NBASE;
    }
    // The weight of the most significant digit: digits above the fraction's three, less one.
    let weight = groups.len() as i32 - DECIMAL_FRACTION_GROUPS - 1;
    let trailing_zeros = groups.iter().take_while(|g| **g == 0).count();
    let digits: Vec<i16> = groups[trailing_zeros..].iter().rev().copied().collect();
    out.put_i16(digits.len() as i16);
    out.put_i16(if digits.is_empty() { 0 } else { weight as i16 });
    out.put_u16(if d < 0 { NUMERIC_NEG } else { NUMERIC_POS });
    out.put_i16(DECIMAL_SCALE_DIGITS);
    for g in digits {
        out.put_i16(g);
    }
}

/// Reads a binary NUMERIC into a DECIMAL (scaled by 10¹²); digits past the twelfth decimal
/// round half up.
pub fn decode_numeric(mut b: &[u8]) -> Result<i128, Error> {
    let bad = |why: &str| Error::graceful(format!("bad binary NUMERIC parameter: {why}"));
    let mut word = || -> Result<u16, Error> {
        let (head, tail) = b.split_first_chunk::<2>().ok_or_else(|| bad("too short"))?;
        b = tail;
        Ok(u16::from_be_bytes(*head))
    };
    let ndigits = word()? as usize;
    let weight = word()? as i16 as i32;
    let sign = word()?;
    let _dscale = word()?;
    if sign == NUMERIC_NAN {
        return Err(Error::graceful("NaN cannot be stored in a DECIMAL"));
    }
    if sign != NUMERIC_POS && sign != NUMERIC_NEG {
        return Err(bad("unknown sign (infinity cannot be stored in a DECIMAL)"));
    }
    if ndigits > NUMERIC_DIGITS_MAX {
        return Err(bad("too many digits for a DECIMAL(38,12)"));
    }
    let overflow = || Error::graceful("the NUMERIC parameter is out of range for a DECIMAL(38,12)");
    let mut scaled: i128 = 0;
    for i in 0..ndigits {
        let digit = i128::from(word()?);
        if digit >= NBASE as i128 {
            return Err(bad("a digit is over 9999"));
        }
        // This digit's power of 10,000 once scaled by 10¹² (three more digits).
        let power = weight - i as i32 + DECIMAL_FRACTION_GROUPS;
        if power >= 0 {
            let factor = (NBASE as i128).checked_pow(power as u32).ok_or_else(overflow)?;
            scaled = digit.checked_mul(factor).and_then(|x| scaled.checked_add(x)).ok_or_else(overflow)?;
        } else if power == -1 && digit >= 5_000 {
            scaled = scaled.checked_add(1).ok_or_else(overflow)?;
        }
    }
    let value = if sign == NUMERIC_NEG { -scaled } else { scaled };
    decimal::checked(Some(value)).ok_or_else(overflow)
}

/// Decodes one bound parameter. `ty` is its PostgreSQL type (the client's, or the one
/// described); a text parameter of a type Lockstep converts itself (numeric, timestamp,
/// text, unknown) is passed as a string, which the statement converts to its column's type.
pub fn decode_param(bytes: Option<&[u8]>, ty: &Type, format: FieldFormat) -> Result<Value, Error> {
    let Some(b) = bytes else { return Ok(Value::Null) };
    match format {
        FieldFormat::Text => decode_text_param(b, ty),
        FieldFormat::Binary => decode_binary_param(b, ty),
    }
}

fn decode_text_param(b: &[u8], ty: &Type) -> Result<Value, Error> {
    let text = std::str::from_utf8(b).map_err(|_| Error::graceful("a text parameter is not valid UTF-8"))?;
    let bad = || Error::graceful(format!("invalid input syntax for type {}: \"{text}\"", ty.name()));
    Ok(match *ty {
        Type::INT2 | Type::INT4 | Type::INT8 => Value::Int(text.trim().parse().map_err(|_| bad())?),
        Type::FLOAT4 | Type::FLOAT8 => Value::Float(parse_float(text).ok_or_else(bad)?),
        Type::BOOL => Value::Bool(parse_bool(text).ok_or_else(bad)?),
        Type::BYTEA => Value::Bytes(parse_bytea(text).ok_or_else(bad)?.into()),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => Value::Timestamp(parse_timestamp(text).ok_or_else(bad)?),
        Type::UNKNOWN => literal(text),
        _ => Value::Str(text.into()),
    })
}

fn parse_float(text: &str) -> Option<f64> {
    match text.trim().to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "infinity" | "+infinity" | "inf" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        t => t.parse().ok(),
    }
}

fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "yes" | "on" | "1" | "y" => Some(true),
        "f" | "false" | "no" | "off" | "0" | "n" => Some(false),
        _ => None,
    }
}

/// A timestamp as PostgreSQL writes one, in microseconds since the epoch (UTC): Lockstep's
/// `YYYY-MM-DD HH:MM:SS.ffffff`, with an optional zone offset (`+00`, `-05:30`, `Z`) that
/// drivers add (JDBC does), taken away.
fn parse_timestamp(text: &str) -> Option<i64> {
    let t = text.trim();
    // The offset starts at the last sign after the time of day (the date has '-' too).
    let time_at = t.find([' ', 'T']).unwrap_or(t.len());
    let (local, offset_s) = match t[time_at..].rfind(['+', '-']).map(|i| time_at + i) {
        Some(at) => (&t[..at], zone_offset_s(&t[at..])?),
        None => (t.strip_suffix('Z').unwrap_or(t), 0),
    };
    let micros = time::parse_timestamp(local).ok()?;
    micros.checked_sub(offset_s.checked_mul(1_000_000)?)
}

/// `+HH`, `+HH:MM`, `-HHMM`, `+HH:MM:SS` in seconds east of UTC.
fn zone_offset_s(zone: &str) -> Option<i64> {
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let digits: String = zone[1..].chars().filter(char::is_ascii_digit).collect();
    if digits.len() > 6
        || !digits.len().is_multiple_of(2)
        || digits.is_empty()
        || zone[1..].chars().any(|c| !c.is_ascii_digit() && c != ':')
    {
        return None;
    }
    let part = |i: usize| digits.get(i..i + 2).map_or(Some(0), |p| p.parse::<i64>().ok());
    Some(sign * (part(0)? * 3600 + part(2)? * 60 + part(4)?))
}

/// PostgreSQL's hex format for bytea (`\x0a0b`).
fn parse_bytea(text: &str) -> Option<Vec<u8>> {
    let hex = text.strip_prefix("\\x").or_else(|| text.strip_prefix("\\X"))?;
    lockstep_core::value::parse_hex(hex)
}

fn decode_binary_param(b: &[u8], ty: &Type) -> Result<Value, Error> {
    let wrong = || Error::graceful(format!("a binary {} parameter of {} bytes has the wrong length", ty.name(), b.len()));
    Ok(match *ty {
        Type::INT2 => Value::Int(i16::from_be_bytes(b.try_into().map_err(|_| wrong())?).into()),
        Type::INT4 => Value::Int(i32::from_be_bytes(b.try_into().map_err(|_| wrong())?).into()),
        Type::INT8 => Value::Int(i64::from_be_bytes(b.try_into().map_err(|_| wrong())?)),
        Type::FLOAT4 => Value::Float(f32::from_be_bytes(b.try_into().map_err(|_| wrong())?).into()),
        Type::FLOAT8 => Value::Float(f64::from_be_bytes(b.try_into().map_err(|_| wrong())?)),
        Type::BOOL => match b {
            [v] => Value::Bool(*v != 0),
            _ => return Err(wrong()),
        },
        Type::NUMERIC => Value::Decimal(decode_numeric(b)?.into()),
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let t = i64::from_be_bytes(b.try_into().map_err(|_| wrong())?);
            Value::Timestamp(t.checked_add(PG_EPOCH_MICROS).ok_or_else(|| Error::graceful("the timestamp parameter is out of range"))?)
        }
        Type::BYTEA => Value::Bytes(b.to_vec().into()),
        Type::UNKNOWN => literal(std::str::from_utf8(b).map_err(|_| Error::graceful("a text parameter is not valid UTF-8"))?),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            Value::Str(std::str::from_utf8(b).map_err(|_| Error::graceful("a text parameter is not valid UTF-8"))?.into())
        }
        _ => return Err(Error::graceful(format!("parameters of type {} are not supported; send text or a Lockstep type", ty.name()))),
    })
}

/// The PostgreSQL type of a parameter whose type the client left open: the type Lockstep
/// inferred for it; else text where the statement converts strings to its column's type,
/// or `unknown` where nothing will (a Lua procedure's arguments): a value sent for an
/// `unknown` parameter is read as a literal would be (`literal`).
pub fn param_type(inferred: Option<DataType>, untyped: bool) -> Type {
    match inferred {
        Some(t) => pg_type(t),
        None if untyped => Type::UNKNOWN,
        None => Type::TEXT,
    }
}

/// The type a parameter is described with. PostgreSQL never describes one as `unknown`, and
/// drivers cannot send a typed value for one (pgx has no encoding for it): one the client
/// left open and nothing converts is described as text, which every driver can send, and
/// is still read as a literal when it arrives (its type at Bind is the one of the Parse).
pub fn described_param_type(ty: Option<Type>) -> Type {
    match ty {
        None | Some(Type::UNKNOWN) => Type::TEXT,
        Some(t) => t,
    }
}

/// A value written as SQL writes a literal: an integer is a BIGINT, a number with a point a
/// DECIMAL, one with an exponent a FLOAT; anything else is text.
pub fn literal(text: &str) -> Value {
    let t = text.trim();
    if let Ok(i) = t.parse::<i64>() {
        return Value::Int(i);
    }
    let numeric = !t.is_empty()
        && t.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
        && t.bytes().any(|b| b.is_ascii_digit());
    if numeric {
        if !t.contains(['e', 'E']) {
            if let Some(d) = decimal::parse(t) {
                return Value::Decimal(d.into());
            }
        }
        if let Ok(f) = t.parse::<f64>() {
            return Value::Float(f);
        }
    }
    Value::Str(text.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binary(ty: DataType, v: &Value) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_field(&mut out, ty, v, FieldFormat::Binary).unwrap();
        out[4..].to_vec()
    }

    fn text(v: &Value) -> String {
        let mut out = BytesMut::new();
        encode_field(&mut out, DataType::Varchar, v, FieldFormat::Text).unwrap();
        String::from_utf8(out[4..].to_vec()).unwrap()
    }

    #[test]
    fn every_lockstep_type_has_its_postgresql_type() {
        let pairs = [
            (DataType::TinyInt, Type::INT2),
            (DataType::SmallInt, Type::INT2),
            (DataType::Integer, Type::INT4),
            (DataType::BigInt, Type::INT8),
            (DataType::Float, Type::FLOAT8),
            (DataType::Decimal, Type::NUMERIC),
            (DataType::Varchar, Type::VARCHAR),
            (DataType::Varbinary, Type::BYTEA),
            (DataType::Timestamp, Type::TIMESTAMP),
            (DataType::Boolean, Type::BOOL),
            (DataType::GeographyPoint, Type::TEXT),
            (DataType::Geography, Type::TEXT),
        ];
        for (lockstep, pg) in pairs {
            assert_eq!(pg_type(lockstep), pg, "{lockstep:?}");
            let size = type_size(lockstep);
            if size > 0 {
                let sample = match lockstep {
                    DataType::Float => Value::Float(1.5),
                    DataType::Timestamp => Value::Timestamp(0),
                    DataType::Boolean => Value::Bool(true),
                    _ => Value::Int(7),
                };
                assert_eq!(binary(lockstep, &sample).len(), size as usize, "{lockstep:?}");
            }
        }
    }

    #[test]
    fn integers_and_floats_round_trip_in_both_formats() {
        for (ty, pg, v) in [
            (DataType::SmallInt, Type::INT2, Value::Int(-32768)),
            (DataType::Integer, Type::INT4, Value::Int(2_147_483_647)),
            (DataType::BigInt, Type::INT8, Value::Int(i64::MIN + 1)),
            (DataType::Float, Type::FLOAT8, Value::Float(-0.1)),
            (DataType::Boolean, Type::BOOL, Value::Bool(true)),
        ] {
            let b = binary(ty, &v);
            assert_eq!(decode_param(Some(&b), &pg, FieldFormat::Binary).unwrap(), v);
            let t = text(&v);
            assert_eq!(decode_param(Some(t.as_bytes()), &pg, FieldFormat::Text).unwrap(), v);
        }
        assert!(encode_field(&mut BytesMut::new(), DataType::Integer, &Value::Int(1 << 40), FieldFormat::Binary).is_err());
        assert_eq!(text(&Value::Float(f64::NEG_INFINITY)), "-Infinity");
    }

    #[test]
    fn decimals_round_trip_through_binary_numeric() {
        for text in ["0", "1", "-1", "0.000000000001", "12345678.9", "-99999999999999999999999999.999999999999", "10000", "0.5"] {
            let d = decimal::parse(text).unwrap();
            let mut out = BytesMut::new();
            encode_numeric(&mut out, d);
            assert_eq!(decode_numeric(&out).unwrap(), d, "{text}");
        }
    }

    #[test]
    fn binary_numeric_matches_postgresql_layout() {
        // 12345.678: digits 1 2345 6780, weight 1, scale 12.
        let mut out = BytesMut::new();
        encode_numeric(&mut out, decimal::parse("12345.678").unwrap());
        let words: Vec<i16> = out.chunks(2).map(|c| i16::from_be_bytes([c[0], c[1]])).collect();
        assert_eq!(words, [3, 1, 0, 12, 1, 2345, 6780]);
        // A digit past the twelfth decimal rounds half up.
        let tiny = [0u8, 1, 0xff, 0xfc, 0, 0, 0, 0, 0x13, 0x88]; // 5000 × 10000⁻⁴ = 5e-13
        assert_eq!(decode_numeric(&tiny).unwrap(), 1);
        let nan = [0u8, 0, 0, 0, 0xC0, 0, 0, 0];
        assert!(decode_numeric(&nan).is_err());
    }

    #[test]
    fn timestamps_count_from_2000_in_binary_and_print_in_iso_text() {
        let v = Value::Timestamp(PG_EPOCH_MICROS + 1);
        assert_eq!(binary(DataType::Timestamp, &v), 1i64.to_be_bytes());
        assert_eq!(text(&v), "2000-01-01 00:00:00.000001");
        assert_eq!(
            decode_param(Some(&0i64.to_be_bytes()), &Type::TIMESTAMP, FieldFormat::Binary).unwrap(),
            Value::Timestamp(PG_EPOCH_MICROS)
        );
    }

    #[test]
    fn text_timestamps_may_carry_a_zone_offset() {
        let ts = |t: &str| decode_param(Some(t.as_bytes()), &Type::TIMESTAMP, FieldFormat::Text).unwrap();
        let base = time::parse_timestamp("2024-01-02 03:04:05.000006").unwrap();
        assert_eq!(ts("2024-01-02 03:04:05.000006"), Value::Timestamp(base));
        assert_eq!(ts("2024-01-02 03:04:05.000006+00"), Value::Timestamp(base));
        assert_eq!(ts("2024-01-02T03:04:05.000006Z"), Value::Timestamp(base));
        assert_eq!(ts("2024-01-02 05:34:05.000006+02:30"), Value::Timestamp(base));
        assert_eq!(ts("2024-01-01 22:04:05.000006-0500"), Value::Timestamp(base));
        assert_eq!(ts("2024-01-02"), Value::Timestamp(time::parse_timestamp("2024-01-02").unwrap()));
        assert!(decode_param(Some(b"2024-01-02 03:04:05+xx"), &Type::TIMESTAMP, FieldFormat::Text).is_err());
    }

    #[test]
    fn bytes_use_postgresql_hex_text() {
        let v = Value::Bytes(vec![0u8, 0xab, 0x10].into());
        assert_eq!(text(&v), "\\x00ab10");
        assert_eq!(decode_param(Some(b"\\x00ab10"), &Type::BYTEA, FieldFormat::Text).unwrap(), v);
        assert_eq!(binary(DataType::Varbinary, &v), [0, 0xab, 0x10]);
    }

    #[test]
    fn untyped_parameters_read_as_literals_and_typed_text_stays_text() {
        assert_eq!(param_type(None, true), Type::UNKNOWN);
        assert_eq!(param_type(None, false), Type::TEXT);
        assert_eq!(param_type(Some(DataType::BigInt), true), Type::INT8);
        assert_eq!(described_param_type(Some(param_type(None, true))), Type::TEXT);
        assert_eq!(described_param_type(None), Type::TEXT);
        assert_eq!(described_param_type(Some(Type::INT8)), Type::INT8);
        let unknown = |t: &str| decode_param(Some(t.as_bytes()), &Type::UNKNOWN, FieldFormat::Text).unwrap();
        assert_eq!(unknown("5551234567"), Value::Int(5_551_234_567));
        assert_eq!(unknown("-1.5"), Value::Decimal(decimal::parse("-1.5").unwrap().into()));
        assert_eq!(unknown("1e3"), Value::Float(1000.0));
        assert_eq!(unknown("Ohio"), Value::Str("Ohio".into()));
        assert_eq!(unknown("1-2"), Value::Str("1-2".into()));
        assert_eq!(decode_param(Some(b"42"), &Type::TEXT, FieldFormat::Text).unwrap(), Value::Str("42".into()));
    }

    #[test]
    fn nulls_have_length_minus_one_and_bad_text_is_refused() {
        let mut out = BytesMut::new();
        encode_field(&mut out, DataType::Integer, &Value::Null, FieldFormat::Binary).unwrap();
        assert_eq!(&out[..], (-1i32).to_be_bytes());
        assert_eq!(decode_param(None, &Type::INT4, FieldFormat::Binary).unwrap(), Value::Null);
        assert!(decode_param(Some(b"12x"), &Type::INT4, FieldFormat::Text).is_err());
        assert!(decode_param(Some(&[0, 1]), &Type::INT4, FieldFormat::Binary).is_err());
    }
}
