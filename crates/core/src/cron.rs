//! Cron schedules for `CREATE TASK … ON SCHEDULE CRON '…'`: six fields (seconds, minutes,
//! hours, day of month, month, day of week) or the classic five (seconds are then 0), each
//! `*`, `?`, a number or name, a range `a-b`, a step `*/n` or `a-b/n`, or a list of those.
//! Days of the week are 0-7 (0 and 7 are Sunday) or SUN…SAT; months 1-12 or JAN…DEC. As in
//! Unix cron, when both day fields are restricted a day matching either one fires. Times
//! are UTC.

use crate::time::civil_from_days;

/// How far ahead `next_after` looks for a matching second (a schedule such as 30 February
/// never fires).
const CRON_SEARCH_DAYS_MAX: i64 = 366 * 8;
const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// A parsed schedule: for each field, which values match (bit i: value i).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Whether the day-of-month and day-of-week fields were `*` (or `?`).
    any_day: bool,
    any_weekday: bool,
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl Cron {
    /// Parses a cron expression, or says which field is wrong and why.
    pub fn parse(text: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let fields: Vec<&str> = match fields.len() {
            6 => fields,
            5 => std::iter::once("0").chain(fields).collect(),
            n => {
                return Err(format!(
                    "a cron schedule has 6 fields (seconds minutes hours day-of-month month day-of-week) or 5 (no seconds), not {n}"
                ))
            }
        };
        let any = |f: &str| f == "*" || f == "?";
        let mut weekdays = field(fields[5], "day of week", 0, 7, 1, &WEEKDAYS, 0)?;
        // 7 is Sunday too.
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        Ok(Cron {
            seconds: field(fields[0], "seconds", 0, 59, 0, &[], 0)?,
            minutes: field(fields[1], "minutes", 0, 59, 0, &[], 0)?,
            hours: field(fields[2], "hours", 0, 23, 0, &[], 0)?,
            days: field(fields[3], "day of month", 1, 31, 1, &[], 0)?,
            months: field(fields[4], "month", 1, 12, 1, &MONTHS, 1)?,
            weekdays,
            any_day: any(fields[3]),
            any_weekday: any(fields[5]),
        })
    }

    /// The first matching second strictly after `after_micros` (µs since 1970, UTC), in
    /// µs; None when nothing matches within the next eight years.
    pub fn next_after(&self, after_micros: i64) -> Option<i64> {
        let start = after_micros.div_euclid(MICROS_PER_SECOND) + 1;
        let first_day = start.div_euclid(SECONDS_PER_DAY);
        for day in first_day..first_day + CRON_SEARCH_DAYS_MAX {
            if !self.day_matches(day) {
                continue;
            }
            let from = if day == first_day { start.rem_euclid(SECONDS_PER_DAY) } else { 0 };
            if let Some(second_of_day) = self.first_time_from(from) {
                return Some((day * SECONDS_PER_DAY + second_of_day) * MICROS_PER_SECOND);
            }
        }
        None
    }

    fn day_matches(&self, day: i64) -> bool {
        let (_, month, dom) = civil_from_days(day);
        if self.months & (1 << month) == 0 {
            return false;
        }
        // 1970-01-01 was a Thursday (4).
        let weekday = (day + 4).rem_euclid(7);
        let by_day = self.days & (1 << dom) != 0;
        let by_weekday = self.weekdays & (1 << weekday) != 0;
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (false, true) => by_day,
            (true, false) => by_weekday,
            (false, false) => by_day || by_weekday,
        }
    }

    /// The first matching second of a day at or after `from` seconds into it.
    fn first_time_from(&self, from: i64) -> Option<i64> {
        let bits = |set: u64, max: i64| (0..=max).filter(move |v| set & (1 << v) != 0);
        for h in bits(self.hours, 23) {
            for m in bits(self.minutes, 59) {
                for s in bits(self.seconds, 59) {
                    let t = h * 3600 + m * 60 + s;
                    if t >= from {
                        return Some(t);
                    }
                }
            }
        }
        None
    }
}

/// One field's set of values (bit i: value i, `lo..=hi`). `names` spell values from
/// `first_name` on.
fn field(text: &str, what: &str, lo: u32, hi: u32, star_lo: u32, names: &[&str], first_name: u32) -> Result<u64, String> {
    let bad = |why: String| format!("cron {what} field '{text}': {why}");
    let value = |s: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as u32 + first_name);
        }
        let v: u32 = s.parse().map_err(|_| bad(format!("'{s}' is not a number")))?;
        if v < lo || v > hi {
            return Err(bad(format!("{v} is outside {lo}-{hi}")));
        }
        Ok(v)
    };
    let mut set = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                (r, s.parse::<u32>().ok().filter(|s| *s > 0).ok_or_else(|| bad(format!("step '{s}' is not a positive number")))?)
            }
            None => (part, 1),
        };
        let (from, to) = if range == "*" || range == "?" {
            (star_lo.max(lo), hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            (v, if step > 1 { hi } else { v })
        };
        if from > to {
            return Err(bad(format!("the range {from}-{to} is empty")));
        }
        let mut v = from;
        while v <= to {
            set |= 1 << v;
            v += step;
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::days_from_civil;

    fn at(y: i64, mo: u32, d: u32, h: i64, mi: i64, s: i64) -> i64 {
        ((days_from_civil(y, mo, d) * SECONDS_PER_DAY) + h * 3600 + mi * 60 + s) * MICROS_PER_SECOND
    }

    #[test]
    fn next_fire_times() {
        let every_5s = Cron::parse("*/5 * * * * *").unwrap();
        assert_eq!(every_5s.next_after(at(2024, 3, 1, 10, 0, 3)), Some(at(2024, 3, 1, 10, 0, 5)));
        assert_eq!(every_5s.next_after(at(2024, 3, 1, 10, 0, 5)), Some(at(2024, 3, 1, 10, 0, 10)), "strictly after");
        let nightly = Cron::parse("30 2 * * *").unwrap();
        assert_eq!(nightly.next_after(at(2024, 12, 31, 3, 0, 0)), Some(at(2025, 1, 1, 2, 30, 0)));
        // 2024-03-01 was a Friday: the next Monday 09:00 is the 4th.
        let mondays = Cron::parse("0 0 9 ? * MON").unwrap();
        assert_eq!(mondays.next_after(at(2024, 3, 1, 12, 0, 0)), Some(at(2024, 3, 4, 9, 0, 0)));
        let sunday7 = Cron::parse("0 0 0 * * 7").unwrap();
        assert_eq!(sunday7.next_after(at(2024, 3, 1, 0, 0, 0)), Some(at(2024, 3, 3, 0, 0, 0)));
        let leap = Cron::parse("0 0 0 29 FEB *").unwrap();
        assert_eq!(leap.next_after(at(2024, 3, 1, 0, 0, 0)), Some(at(2028, 2, 29, 0, 0, 0)));
        assert_eq!(Cron::parse("0 0 0 30 2 *").unwrap().next_after(at(2024, 1, 1, 0, 0, 0)), None);
        let list = Cron::parse("0 10-20/5,59 * * * *").unwrap();
        assert_eq!(list.next_after(at(2024, 3, 1, 10, 16, 0)), Some(at(2024, 3, 1, 10, 20, 0)));
        assert_eq!(list.next_after(at(2024, 3, 1, 10, 21, 0)), Some(at(2024, 3, 1, 10, 59, 0)));
    }

    #[test]
    fn bad_schedules_say_what_is_wrong() {
        assert!(Cron::parse("* * *").unwrap_err().contains("6 fields"));
        assert!(Cron::parse("0 61 * * * *").unwrap_err().contains("minutes field '61': 61 is outside 0-59"));
        assert!(Cron::parse("0 * * * FOO *").unwrap_err().contains("'FOO' is not a number"));
        assert!(Cron::parse("*/0 * * * * *").unwrap_err().contains("step"));
        assert!(Cron::parse("0 0 20-10 * * *").unwrap_err().contains("empty"));
    }
}
