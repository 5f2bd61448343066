//! Timestamps: microseconds since the Unix epoch, UTC, parsed from and printed as
//! `YYYY-MM-DD HH:MM:SS.ffffff` (the JDBC text form VoltDB accepts).

/// Days since 1970-01-01 for a proleptic Gregorian date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// (year, month, day) for days since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719468;
    let era = if z >= 0 { z } else { z - 146096 } / 146097;
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

pub const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Parses a timestamp: an integer (microseconds), `YYYY-MM-DD`, or
/// `YYYY-MM-DD[ T]HH:MM:SS[.f{1,6}]`.
pub fn parse_timestamp(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(v) = s.parse::<i64>() {
        return Ok(v);
    }
    let bad = || format!("'{s}' is not a timestamp (expected YYYY-MM-DD HH:MM:SS.ffffff)");
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mut parts = date.split('-');
    let y: i64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let m: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let d: u32 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    if parts.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(bad());
    }
    let mut micros = days_from_civil(y, m, d) * MICROS_PER_DAY;
    if let Some(t) = time {
        let t = t.trim_end_matches('Z');
        let (hms, frac) = match t.split_once('.') {
            Some((a, b)) => (a, b),
            None => (t, ""),
        };
        let mut hp = hms.split(':');
        let h: i64 = hp.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let mi: i64 = hp.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
        let se: i64 = hp.next().map(|p| p.parse().ok()).unwrap_or(Some(0)).ok_or_else(bad)?;
        if hp.next().is_some() || h > 23 || mi > 59 || se > 59 {
            return Err(bad());
        }
        if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let mut f: i64 = if frac.is_empty() { 0 } else { frac.parse().map_err(|_| bad())? };
        for _ in frac.len()..6 {
            f *= 10;
        }
        micros += ((h * 60 + mi) * 60 + se) * 1_000_000 + f;
    }
    Ok(micros)
}

/// Formats as `YYYY-MM-DD HH:MM:SS.ffffff`.
pub fn format_timestamp(micros: i64) -> String {
    let days = micros.div_euclid(MICROS_PER_DAY);
    let rem = micros.rem_euclid(MICROS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let secs = rem / 1_000_000;
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:06}", secs / 3600, secs / 60 % 60, secs % 60, rem % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_dates_across_eras() {
        for micros in [0, 1, -1, 1_600_000_000_123_456, -86_400_000_001, 253_402_300_799_999_999] {
            assert_eq!(parse_timestamp(&format_timestamp(micros)), Ok(micros), "{micros}");
        }
        assert_eq!(parse_timestamp("2020-02-29"), Ok(days_from_civil(2020, 2, 29) * MICROS_PER_DAY));
        assert!(parse_timestamp("2020-13-01").is_err());
        assert!(parse_timestamp("yesterday").is_err());
    }
}
