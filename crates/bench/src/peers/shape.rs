//! Turns a peer's answer (rows, or a server error) into the `Answer` Lockstep gives for the
//! same procedure: the peers' functions return one row where Lockstep returns several tables
//! (charging's app statuses, TATP's counts), and this is where they are split again.

use lockstep_core::{DataType, ResultColumn, ResultTable, Value};

use crate::conn::{Answer, STATUS_SUCCESS, STATUS_USER_ABORT};

/// VoltDB's GRACEFUL_FAILURE status: the call ran and failed (not a user abort).
pub const STATUS_GRACEFUL_FAILURE: i8 = -2;
/// VoltDB's app status when the procedure set none.
pub const APP_STATUS_UNSET: i8 = i8::MIN;
/// What a peer function's error message carries when the procedure aborted on purpose.
pub const ABORT_MARK: &str = "abort:";

/// A peer's reply: rows, or the message of an error the server raised.
pub type Raw = Result<Vec<Vec<Value>>, String>;

/// Procedures whose first result column is a VARBINARY (Lua peers cannot tell bytes from text).
fn bytes_in_first_column(proc: &str) -> bool {
    matches!(proc, "Get" | "Scan" | "ScanAll")
}

fn column_type(v: &Value) -> DataType {
    match v {
        Value::Str(_) => DataType::Varchar,
        Value::Bytes(_) => DataType::Varbinary,
        Value::Float(_) => DataType::Float,
        Value::Timestamp(_) => DataType::Timestamp,
        _ => DataType::BigInt,
    }
}

/// A table of `rows` whose column names are `names` (or c0, c1 … when shorter).
pub fn table(names: &[&str], rows: Vec<Vec<Value>>) -> ResultTable {
    let width = rows.first().map(|r| r.len()).unwrap_or(names.len());
    let columns = (0..width)
        .map(|i| ResultColumn {
            name: names.get(i).map(|s| s.to_string()).unwrap_or_else(|| format!("c{i}")).into(),
            ty: rows.first().and_then(|r| r.get(i)).map(column_type).unwrap_or(DataType::BigInt),
        })
        .collect();
    ResultTable { columns, rows }
}

/// Text where Lockstep answers text, bytes where it answers bytes.
fn fix_types(proc: &str, rows: &mut [Vec<Value>]) {
    let first_bytes = bytes_in_first_column(proc);
    for row in rows.iter_mut() {
        for (i, v) in row.iter_mut().enumerate() {
            let want_bytes = first_bytes && i == 0;
            let new = match std::mem::replace(v, Value::Null) {
                Value::Str(s) if want_bytes => Value::Bytes(s.as_bytes().into()),
                Value::Bytes(b) if !want_bytes => match String::from_utf8(b.to_vec()) {
                    Ok(s) => Value::Str(s.into()),
                    Err(e) => Value::Bytes(e.into_bytes().into()),
                },
                other => other,
            };
            *v = new;
        }
    }
}

fn cell(row: &[Value], i: usize) -> Value {
    row.get(i).cloned().unwrap_or(Value::Null)
}

fn int(row: &[Value], i: usize) -> Option<i64> {
    match row.get(i) {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    }
}

fn success(app_status: i8, tables: Vec<ResultTable>) -> Answer {
    Answer::new(STATUS_SUCCESS, None, app_status, tables)
}

/// The answer for `proc` from a peer's reply.
pub fn answer(proc: &str, raw: Raw) -> Answer {
    let mut rows = match raw {
        Ok(rows) => rows,
        Err(message) => {
            return match message.find(ABORT_MARK) {
                Some(at) => {
                    Answer::new(STATUS_USER_ABORT, Some(message[at + ABORT_MARK.len()..].trim().to_string()), APP_STATUS_UNSET, Vec::new())
                }
                None => Answer::new(STATUS_GRACEFUL_FAILURE, Some(message), APP_STATUS_UNSET, Vec::new()),
            };
        }
    };
    fix_types(proc, &mut rows);
    let first = rows.first().cloned().unwrap_or_default();
    match proc {
        // One count per statement, one 1x1 table each.
        "UpdateSubscriberData" | "Reset" => {
            success(APP_STATUS_UNSET, first.into_iter().map(|v| table(&["modified_tuples"], vec![vec![v]])).collect())
        }
        "UpsertUser" | "AddCredit" | "ReportQuotaUsage" => charging(proc, &first),
        _ => success(APP_STATUS_UNSET, vec![table(&[], rows)]),
    }
}

/// A DML count table, as VoltDB answers an INSERT, UPDATE or DELETE.
fn count(n: i64) -> ResultTable {
    table(&["modified_tuples"], vec![vec![Value::Int(n)]])
}

/// The charging demo's remaining credit: (USERID, BALANCE), no row when `credit` is NULL.
fn remaining(user: Value, credit: Value) -> ResultTable {
    let rows = if credit == Value::Null { Vec::new() } else { vec![vec![user, credit]] };
    table(&["USERID", "BALANCE"], rows)
}

/// Charging's answers: (app status, …) split into the tables the demo's procedures (and
/// apps/charging's) return. A repeated transaction id answers no table.
fn charging(proc: &str, r: &[Value]) -> Answer {
    let Some(status) = int(r, 0) else {
        return Answer::new(STATUS_GRACEFUL_FAILURE, Some(format!("{proc}: the peer answered {r:?}")), APP_STATUS_UNSET, Vec::new());
    };
    let app = status.clamp(i8::MIN as i64, i8::MAX as i64) as i8;
    if status == 46 {
        return success(app, Vec::new());
    }
    match proc {
        // (42, tables, purged): a new user's four counts; an update's five, the last the purge.
        "UpsertUser" => {
            let mut tables = vec![count(1), count(1), count(1), count(1)];
            if int(r, 1) == Some(5) {
                tables.push(count(int(r, 2).unwrap_or(0)));
            }
            success(app, tables)
        }
        // (55, userid, balance, remaining credit or NULL)
        "AddCredit" => success(
            app,
            vec![
                count(1),
                count(1),
                table(&["USERID", "BALANCE"], vec![vec![cell(r, 1), cell(r, 2)]]),
                remaining(cell(r, 1), cell(r, 3)),
                count(1),
            ],
        ),
        _ => {
            // (status, deleted, allocated or NULL, session, userid, remaining or NULL, balance,
            // productid, wanted 0/1)
            let (session, user, product) = (cell(r, 3), cell(r, 4), cell(r, 7));
            let alloc = match cell(r, 2) {
                Value::Null => Vec::new(),
                units => vec![vec![units, session.clone(), Value::Null, user.clone(), product.clone()]],
            };
            let reservation = table(&["ALLOCATED_UNITS", "SESSIONID", "LASTDATE", "USERID", "PRODUCTID"], alloc);
            let credit = remaining(user.clone(), cell(r, 5));
            let balance = table(&["BALANCE", "PRODUCT_ID", "SESSION_ID", "USERID"], vec![vec![cell(r, 6), product, session, user]]);
            if int(r, 8) != Some(1) {
                // Nothing wanted: no app status, and the five tables of the demo's second batch.
                let deleted = count(int(r, 1).unwrap_or(0));
                return success(APP_STATUS_UNSET, vec![deleted, count(1), reservation, credit, balance]);
            }
            let mut tables = Vec::with_capacity(4);
            if status != 43 {
                tables.push(count(1));
            }
            tables.extend([reservation, credit, balance]);
            success(app, tables)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aborts_and_failures_are_told_apart() {
        let a = answer("Vote", Err("ER_PROC_LUA: abort: no such user".into()));
        assert_eq!((a.status, a.status_string.as_deref()), (STATUS_USER_ABORT, Some("no such user")));
        let a = answer("Vote", Err("function not found".into()));
        assert_eq!(a.status, STATUS_GRACEFUL_FAILURE);
    }

    #[test]
    fn report_quota_usage_is_split_as_the_demo_answers() {
        let row = |status: i64, alloc: Value, wanted: i64| {
            vec![
                Value::Int(status),
                Value::Int(1),
                alloc,
                Value::Int(7),
                Value::Int(3),
                Value::Int(900),
                Value::Int(1000),
                Value::Int(2),
                Value::Int(wanted),
            ]
        };
        let a = answer("ReportQuotaUsage", Ok(vec![row(45, Value::Int(50), 1)]));
        assert_eq!((a.app_status, a.table_count()), (45, 4));
        assert_eq!(a.int(1, 0, 0), Some(50), "the reservation at len-3");
        assert_eq!(a.int(2, 0, 1), Some(900), "the remaining credit");
        assert_eq!(a.int(3, 0, 2), Some(7), "the session at len-1");
        let none = answer("ReportQuotaUsage", Ok(vec![row(43, Value::Null, 1)]));
        assert_eq!((none.app_status, none.table_count(), none.row_count(0)), (43, 3, 0));
        let used = answer("ReportQuotaUsage", Ok(vec![row(42, Value::Null, 0)]));
        assert_eq!((used.app_status, used.table_count(), used.int(0, 0, 0)), (APP_STATUS_UNSET, 5, Some(1)));
        assert_eq!(answer("AddCredit", Ok(vec![vec![Value::Int(46), Value::Null, Value::Null, Value::Null]])).table_count(), 0);
    }

    #[test]
    fn ycsb_values_are_bytes_and_keys_text() {
        let a = answer("Scan", Ok(vec![vec![Value::Str("v".into()), Value::Bytes(b"k"[..].into())]]));
        assert_eq!(a.rows(0)[0], vec![Value::Bytes(b"v"[..].into()), Value::Str("k".into())]);
    }
}
