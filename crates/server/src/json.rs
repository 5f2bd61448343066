//! VoltDB's JSON forms of a call's answer and of its parameters, as its HTTP API uses them.
//!
//! An answer (`/api/1.0/`) is `{"status","appstatus","statusstring","appstatusstring",
//! "results":[{"status":-128,"schema":[{"name","type"}],"data":[[…]]}]}`, in that key order;
//! `/api/2.0/` keeps the first four keys and gives `results` as an object from the table's
//! index ("0", "1" …) to its rows, each row an object from column name to value. Column
//! types are VoltDB's wire type codes (BOOLEAN goes as TINYINT, as on the wire). Values:
//! integers and timestamps (microseconds) as numbers, FLOAT as a number, DECIMAL as a
//! string in Java's `BigDecimal` form at scale 12, VARBINARY as upper-case hex, NULL as null.
//!
//! Parameters are a JSON array: numbers, strings, null and arrays of them. Strings stay
//! strings here: the engine converts them to the procedure's parameter types the way it
//! converts any caller's (VoltDB's conversions: numeric text to numbers, hex to bytes …).

use std::fmt::Write as _;

use lockstep_core::{DataType, ResultTable, Value};
use lockstep_engine::Outcome;

/// Which answer layout a path asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `/api/1.0/`: tables with a schema and rows as arrays.
    V1,
    /// `/api/2.0/`: rows as objects keyed by column name.
    V2,
}

/// Most parameters one call may carry (the wire protocol's limit is the same order).
pub const PARAMETERS_MAX: usize = 1024;

/// The answer in VoltDB's JSON layout.
pub fn encode_outcome(o: &Outcome, layout: Layout) -> String {
    let mut out = String::with_capacity(128);
    out.push_str("{\"status\":");
    let _ = write!(out, "{}", o.status);
    let _ = write!(out, ",\"appstatus\":{}", o.app_status);
    out.push_str(",\"statusstring\":");
    opt_string(&mut out, o.status_string.as_deref());
    out.push_str(",\"appstatusstring\":");
    opt_string(&mut out, o.app_status_string.as_deref());
    out.push_str(",\"results\":");
    match layout {
        Layout::V1 => {
            out.push('[');
            for (i, t) in o.tables.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                table_v1(&mut out, t);
            }
            out.push(']');
        }
        Layout::V2 => {
            out.push('{');
            for (i, t) in o.tables.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "\"{i}\":");
                table_v2(&mut out, t);
            }
            out.push('}');
        }
    }
    out.push('}');
    out
}

/// The type code a column is shown with.
fn type_code(ty: DataType) -> i8 {
    match ty {
        DataType::Boolean => DataType::TinyInt.wire_code(),
        t => t.wire_code(),
    }
}

fn table_v1(out: &mut String, t: &ResultTable) {
    out.push_str("{\"status\":-128,\"schema\":[");
    for (i, c) in t.columns.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        string(out, &c.name);
        let _ = write!(out, ",\"type\":{}}}", type_code(c.ty));
    }
    out.push_str("],\"data\":[");
    for (i, row) in t.rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        for (j, v) in row.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            value(out, v);
        }
        out.push(']');
    }
    out.push_str("]}");
}

fn table_v2(out: &mut String, t: &ResultTable) {
    out.push('[');
    for (i, row) in t.rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('{');
        for (j, (c, v)) in t.columns.iter().zip(row).enumerate() {
            if j > 0 {
                out.push(',');
            }
            string(out, &c.name);
            out.push(':');
            value(out, v);
        }
        out.push('}');
    }
    out.push(']');
}

/// One cell. The value's own kind decides its form (a column's values all share it).
fn value(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Int(i) | Value::Timestamp(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Bool(b) => out.push(if *b { '1' } else { '0' }),
        Value::Float(f) => float(out, *f),
        Value::Decimal(d) => {
            out.push('"');
            out.push_str(&java_decimal(d.get()));
            out.push('"');
        }
        Value::Str(s) => string(out, s),
        // VoltDB's JSON API gives geography values as their WKT text.
        Value::Point(_) | Value::Geography(_) => string(out, &v.to_string()),
        Value::Bytes(b) => {
            out.push('"');
            for byte in b.iter() {
                let _ = write!(out, "{byte:02X}");
            }
            out.push('"');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                value(out, item);
            }
            out.push(']');
        }
    }
}

/// A float as Java's JSON writer gives it: whole numbers without a fraction, others in the
/// shortest form that reads back exactly. JSON has no NaN or infinity: those are null.
fn float(out: &mut String, f: f64) {
    if !f.is_finite() {
        out.push_str("null");
    } else if f.fract() == 0.0 && f.abs() < 1e15 {
        let _ = write!(out, "{}", f as i64);
    } else {
        let _ = write!(out, "{f:?}");
    }
}

/// A DECIMAL(38,12) as Java's `BigDecimal.toString` writes it at scale 12: plain digits
/// while the adjusted exponent is -6 or more, scientific notation below (so zero is
/// `0E-12` and 0.0000001 is `1.00000E-7`, exactly as VoltDB answers them).
pub fn java_decimal(d: i128) -> String {
    const SCALE: usize = 12;
    let sign = if d < 0 { "-" } else { "" };
    let digits = d.unsigned_abs().to_string();
    let adjusted = digits.len() as i64 - 1 - SCALE as i64;
    if adjusted >= -6 {
        return if digits.len() > SCALE {
            let (int, frac) = digits.split_at(digits.len() - SCALE);
            format!("{sign}{int}.{frac}")
        } else {
            format!("{sign}0.{}{digits}", "0".repeat(SCALE - digits.len()))
        };
    }
    let (first, rest) = digits.split_at(1);
    let point = if rest.is_empty() { String::new() } else { format!(".{rest}") };
    format!("{sign}{first}{point}E{adjusted}")
}

fn opt_string(out: &mut String, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.push_str("null"),
    }
}

/// A JSON string literal, escaped.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The `Parameters` of a call: a JSON array. Err says what is wrong with it.
pub fn parse_parameters(text: &str) -> Result<Vec<Value>, String> {
    let parsed: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("Parameters is not valid JSON: {e}"))?;
    let serde_json::Value::Array(items) = parsed else {
        return Err("Parameters must be a JSON array, such as [1,\"text\",null]".into());
    };
    if items.len() > PARAMETERS_MAX {
        return Err(format!("{} parameters given; at most {PARAMETERS_MAX} are accepted", items.len()));
    }
    items.iter().enumerate().map(|(i, v)| parameter(v, true).map_err(|e| format!("parameter {}: {e}", i + 1))).collect()
}

/// One parameter; arrays only at the top level (VoltDB's array parameters are flat).
fn parameter(v: &serde_json::Value, top: bool) -> Result<Value, String> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => Value::Null,
        J::String(s) => Value::from(s.as_str()),
        J::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::Int(i),
            // Integers beyond 64 bits are refused, as VoltDB refuses them.
            (None, _) if n.is_u64() => return Err(format!("{n} is out of the range of a BIGINT")),
            (None, Some(f)) => Value::Float(f),
            (None, None) => return Err(format!("{n} is not a number a parameter can hold")),
        },
        J::Array(items) if top => Value::Array(items.iter().map(|i| parameter(i, false)).collect::<Result<_, _>>()?),
        J::Array(_) => return Err("arrays of arrays are not supported".into()),
        J::Bool(_) => return Err("true and false are not parameter values: pass 1 or 0".into()),
        J::Object(_) => return Err("table (object) parameters are not supported".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::ResultColumn;
    use std::sync::Arc;

    #[test]
    fn decimals_read_as_java_writes_them() {
        let unit = 1_000_000_000_000i128;
        assert_eq!(java_decimal(0), "0E-12");
        assert_eq!(java_decimal(unit * 3 / 2), "1.500000000000");
        assert_eq!(java_decimal(-unit * 12345), "-12345.000000000000");
        assert_eq!(java_decimal(1_000_000), "0.000001000000");
        assert_eq!(java_decimal(100_000), "1.00000E-7");
        assert_eq!(java_decimal(1), "1E-12");
        assert_eq!(java_decimal(-25), "-2.5E-11");
    }

    #[test]
    fn answers_have_voltdb_keys_in_order_and_both_layouts() {
        let cols: Arc<[ResultColumn]> = Arc::new([
            ResultColumn { name: "C".into(), ty: DataType::BigInt },
            ResultColumn { name: "B".into(), ty: DataType::Varbinary },
            ResultColumn { name: "F".into(), ty: DataType::Float },
        ]);
        let mut t = ResultTable::new(cols);
        t.push(vec![Value::Int(7), Value::Bytes(Arc::from(&[0x0a_u8, 0xff][..])), Value::Float(2.5)]);
        t.push(vec![Value::Null, Value::Null, Value::Float(3.0)]);
        let o = Outcome::tables(vec![t]);
        assert_eq!(
            encode_outcome(&o, Layout::V1),
            r#"{"status":1,"appstatus":-128,"statusstring":null,"appstatusstring":null,"results":[{"status":-128,"schema":[{"name":"C","type":6},{"name":"B","type":25},{"name":"F","type":8}],"data":[[7,"0AFF",2.5],[null,null,3]]}]}"#
        );
        assert_eq!(
            encode_outcome(&o, Layout::V2),
            r#"{"status":1,"appstatus":-128,"statusstring":null,"appstatusstring":null,"results":{"0":[{"C":7,"B":"0AFF","F":2.5},{"C":null,"B":null,"F":3}]}}"#
        );
        let e = Outcome::error(lockstep_core::Error::unexpected("Procedure \"X\" was not found"));
        assert_eq!(
            encode_outcome(&e, Layout::V1),
            r#"{"status":-3,"appstatus":-128,"statusstring":"Procedure \"X\" was not found","appstatusstring":null,"results":[]}"#
        );
    }

    #[test]
    fn parameters_are_a_flat_json_array() {
        let p = parse_parameters(r#"[1, "2", null, 1.5, [1, 2], -9223372036854775807]"#).unwrap();
        assert!(matches!(p[0], Value::Int(1)));
        assert_eq!(p[1].as_str(), Some("2"));
        assert!(p[2].is_null());
        assert!(matches!(p[3], Value::Float(f) if f == 1.5));
        assert!(matches!(&p[4], Value::Array(a) if a.len() == 2));
        assert!(matches!(p[5], Value::Int(i) if i == -i64::MAX));
        for bad in ["{}", "[", "[true]", "[[[1]]]", "[{\"a\":1}]", "[18446744073709551615]"] {
            assert!(parse_parameters(bad).is_err(), "{bad} was accepted");
        }
    }
}
