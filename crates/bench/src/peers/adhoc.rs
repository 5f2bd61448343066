//! The few `@AdHoc` statements the workloads send during setup and checks, recognised so
//! that peers without SQL (Tarantool's spaces, Redis) can answer them with functions, and
//! Lockstep's UPSERT rewritten for PostgreSQL. Anything else is refused with a clear message.

use lockstep_core::{Error, Value};

/// Longest statement we try to recognise.
pub const ADHOC_SQL_MAX_BYTES: usize = 4096;

/// A recognised statement.
#[derive(Clone, Debug, PartialEq)]
pub enum Query {
    /// SELECT COUNT(*) FROM t
    Count(String),
    /// DELETE FROM t
    DeleteAll(String),
    /// SELECT COUNT(*) FROM v_votes_by_phone_number WHERE num_votes > n
    VotesOverLimit(i64),
    /// UPSERT INTO product_table (productid, productname, unit_cost) VALUES (id, 'name', cost)
    UpsertProduct(i64, String, i64),
    /// SELECT SUM(balance) FROM user_balances
    SumBalance,
    /// SELECT COUNT(*) FROM user_balances WHERE balance < 0
    NegativeBalances,
    /// (userid, balance, reserved) of every user holding reservations
    Reservations,
}

impl Query {
    /// The Lua function that answers it and its arguments (Tarantool's and Redis's names).
    pub fn function(&self) -> (&'static str, Vec<Value>) {
        match self {
            Query::Count(t) => ("ls_count", vec![Value::from(t.as_str())]),
            Query::DeleteAll(t) => ("ls_truncate", vec![Value::from(t.as_str())]),
            Query::VotesOverLimit(n) => ("ls_voter_over_limit", vec![Value::Int(*n)]),
            Query::UpsertProduct(id, name, cost) => {
                ("ls_upsert_product", vec![Value::Int(*id), Value::from(name.as_str()), Value::Int(*cost)])
            }
            Query::SumBalance => ("ls_charging_sum_balance", vec![]),
            Query::NegativeBalances => ("ls_charging_negative_balances", vec![]),
            Query::Reservations => ("ls_charging_reservations", vec![]),
        }
    }
}

fn normalize(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase()
}

fn identifier(s: &str) -> Option<String> {
    (!s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')).then(|| s.to_string())
}

/// Recognises one of the workloads' statements.
pub fn parse(sql: &str) -> Result<Query, Error> {
    if sql.len() > ADHOC_SQL_MAX_BYTES {
        return Err(Error::sql(format!("statement of {} bytes is longer than {ADHOC_SQL_MAX_BYTES}", sql.len())));
    }
    let n = normalize(sql);
    let unknown = || Error::sql(format!("this peer answers only the benchmark's own queries, not: {sql}"));
    if let Some(rest) = n.strip_prefix("select count(*) from v_votes_by_phone_number where num_votes > ") {
        return rest.trim().parse().map(Query::VotesOverLimit).map_err(|_| unknown());
    }
    if n == "select count(*) from user_balances where balance < 0" {
        return Ok(Query::NegativeBalances);
    }
    if n == "select sum(balance) from user_balances" {
        return Ok(Query::SumBalance);
    }
    if n.starts_with("select u.userid, b.balance, sum(u.allocated_units * p.unit_cost) as reserved") {
        return Ok(Query::Reservations);
    }
    if let Some(t) = n.strip_prefix("select count(*) from ").and_then(identifier) {
        return Ok(Query::Count(t));
    }
    if let Some(t) = n.strip_prefix("delete from ").and_then(identifier) {
        return Ok(Query::DeleteAll(t));
    }
    if let Some(rest) = n.strip_prefix("upsert into product_table (productid, productname, unit_cost) values (") {
        // Case is kept for the name: take it from the original text.
        let (open, close) = (sql.find('\'').ok_or_else(unknown)?, sql.rfind('\'').ok_or_else(unknown)?);
        let name = sql.get(open + 1..close).ok_or_else(unknown)?.to_string();
        let id = rest.split(',').next().and_then(|s| s.trim().parse().ok()).ok_or_else(unknown)?;
        let cost = rest.trim_end_matches(')').rsplit(',').next().and_then(|s| s.trim().parse().ok()).ok_or_else(unknown)?;
        return Ok(Query::UpsertProduct(id, name, cost));
    }
    Err(unknown())
}

/// Lockstep's `UPSERT INTO t (c1, c2, …) VALUES (…)` as PostgreSQL's INSERT … ON CONFLICT
/// on the first column (the workloads' upserts name the primary key first); other
/// statements unchanged.
pub fn for_postgres(sql: &str) -> Result<String, Error> {
    let trimmed = sql.trim_start();
    if trimmed.len() < 7 || !trimmed[..7].eq_ignore_ascii_case("upsert ") {
        return Ok(sql.to_string());
    }
    let bad = || Error::sql(format!("cannot translate for PostgreSQL (columns must be listed): {sql}"));
    let open = trimmed.find('(').ok_or_else(bad)?;
    let close = trimmed[open..].find(')').ok_or_else(bad)? + open;
    let columns: Vec<&str> = trimmed[open + 1..close].split(',').map(str::trim).collect();
    let key = columns.first().filter(|c| !c.is_empty()).ok_or_else(bad)?;
    let set: Vec<String> = columns.iter().skip(1).map(|c| format!("{c} = EXCLUDED.{c}")).collect();
    let action = if set.is_empty() { "NOTHING".to_string() } else { format!("UPDATE SET {}", set.join(", ")) };
    Ok(format!("INSERT {} ON CONFLICT ({key}) DO {action}", &trimmed[7..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_workloads_queries() {
        assert_eq!(parse("SELECT COUNT(*) FROM votes").unwrap(), Query::Count("votes".into()));
        assert_eq!(parse("DELETE FROM Store").unwrap(), Query::DeleteAll("store".into()));
        assert_eq!(parse("SELECT COUNT(*) FROM v_votes_by_phone_number WHERE num_votes > 2").unwrap(), Query::VotesOverLimit(2));
        assert_eq!(
            parse("UPSERT INTO product_table (productid, productname, unit_cost) VALUES (3, 'roaming data/GB', 342)").unwrap(),
            Query::UpsertProduct(3, "roaming data/GB".into(), 342)
        );
        assert!(parse("SELECT * FROM votes").is_err());
    }

    #[test]
    fn upsert_becomes_insert_on_conflict() {
        assert_eq!(
            for_postgres("UPSERT INTO product_table (productid, productname, unit_cost) VALUES (0, 'web site', 0)").unwrap(),
            "INSERT INTO product_table (productid, productname, unit_cost) VALUES (0, 'web site', 0) ON CONFLICT (productid) DO UPDATE SET productname = EXCLUDED.productname, unit_cost = EXCLUDED.unit_cost"
        );
        assert_eq!(for_postgres("DELETE FROM store").unwrap(), "DELETE FROM store");
    }
}
