//! DECIMAL(38,12) arithmetic on i128 values scaled by 10^12, as VoltDB stores them.

/// 10^12, the fixed scale.
pub const SCALE: i128 = 1_000_000_000_000;
/// Largest magnitude: 38 digits.
pub const MAX_ABS: i128 = 99_999_999_999_999_999_999_999_999_999_999_999_999;

pub fn from_i64(v: i64) -> i128 {
    v as i128 * SCALE
}

pub fn to_f64(d: i128) -> f64 {
    d as f64 / SCALE as f64
}

pub fn from_f64(f: f64) -> Option<i128> {
    if !f.is_finite() {
        return None;
    }
    let scaled = (f * SCALE as f64).round();
    if scaled.abs() > MAX_ABS as f64 {
        return None;
    }
    Some(scaled as i128)
}

/// The integer value when the decimal has no fractional part.
pub fn to_exact_i64(d: i128) -> Option<i64> {
    if d % SCALE != 0 {
        return None;
    }
    i64::try_from(d / SCALE).ok()
}

/// Parses "-12.345" style text; more than 12 fractional digits are rounded half up.
pub fn parse(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int_part, frac_part) = match digits.split_once('.') {
        Some((i, f)) => (i, f),
        None => (digits, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.bytes().all(|b| b.is_ascii_digit()) || !frac_part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if int_part.len() > 26 {
        return None;
    }
    let mut value: i128 = if int_part.is_empty() { 0 } else { int_part.parse().ok()? };
    value = value.checked_mul(SCALE)?;
    let mut frac: i128 = 0;
    for (i, b) in frac_part.bytes().enumerate() {
        let digit = (b - b'0') as i128;
        if i < 12 {
            frac = frac * 10 + digit;
        } else {
            if i == 12 && digit >= 5 {
                frac += 1;
            }
            continue;
        }
    }
    for _ in frac_part.len()..12 {
        frac *= 10;
    }
    value += frac;
    Some(if neg { -value } else { value })
}

/// Formats with exactly 12 fractional digits, as VoltDB prints decimals.
pub fn format(d: i128) -> String {
    let sign = if d < 0 { "-" } else { "" };
    let abs = d.unsigned_abs();
    format!("{sign}{}.{:012}", abs / SCALE as u128, abs % SCALE as u128)
}

pub fn checked(d: Option<i128>) -> Option<i128> {
    d.filter(|v| v.abs() <= MAX_ABS)
}

pub fn mul(a: i128, b: i128) -> Option<i128> {
    // (a/S)*(b/S) = a*b/S^2 → scaled result a*b/S, computed without overflowing where possible.
    let (ai, af) = (a / SCALE, a % SCALE);
    let r = ai.checked_mul(b)?.checked_add(af.checked_mul(b)? / SCALE)?;
    checked(Some(r))
}

pub fn div(a: i128, b: i128) -> Option<i128> {
    if b == 0 {
        return None;
    }
    // Scale the dividend up as far as it fits, then correct.
    let r = match a.checked_mul(SCALE) {
        Some(x) => x / b,
        None => (a / b).checked_mul(SCALE)?,
    };
    checked(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_format_round_trip() {
        assert_eq!(parse("1.5"), Some(1_500_000_000_000));
        assert_eq!(parse("-1.5"), Some(-1_500_000_000_000));
        assert_eq!(format(parse("12.000000000001").unwrap()), "12.000000000001");
        assert_eq!(format(parse("0.0000000000005").unwrap()), "0.000000000001");
        assert_eq!(parse("abc"), None);
        assert_eq!(format(from_i64(-3)), "-3.000000000000");
    }

    #[test]
    fn multiply_and_divide() {
        assert_eq!(mul(parse("1.5").unwrap(), parse("2").unwrap()), parse("3"));
        assert_eq!(div(parse("1").unwrap(), parse("4").unwrap()), parse("0.25"));
        assert_eq!(div(1, 0), None);
    }
}
