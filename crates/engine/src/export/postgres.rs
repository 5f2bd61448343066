//! The `postgresql` export target: inserts each batch into a table of a PostgreSQL database
//! in one transaction (tokio-postgres on a small runtime of the exporter's own). The row's
//! columns are inserted by name; the table must have them.

use std::fmt::Write as _;

use super::deliver::Sink;

/// Connecting gives up after this long.
pub const PG_CONNECT_TIMEOUT_S: u64 = 10;

pub struct PgSink {
    url: String,
    table: String,
    runtime: Option<tokio::runtime::Runtime>,
    client: Option<tokio_postgres::Client>,
}

impl PgSink {
    pub fn new(url: &str, table: &str) -> Self {
        PgSink { url: url.to_string(), table: table.to_string(), runtime: None, client: None }
    }
}

/// `"name"`, with quotes inside doubled.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A SQL literal for a JSON value (standard strings: a quote is doubled, no backslashes).
fn literal(v: &serde_json::Value) -> Result<String, String> {
    Ok(match v {
        serde_json::Value::Null => "NULL".into(),
        serde_json::Value::Bool(b) => b.to_string().to_uppercase(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) if s.contains('\0') => return Err("a string with a NUL byte cannot go to PostgreSQL".into()),
        serde_json::Value::String(s) => format!("'{}'", s.replace('\'', "''")),
        other => format!("'{}'", other.to_string().replace('\'', "''")),
    })
}

/// `BEGIN; INSERT …; COMMIT` for a batch of export records (their `row` objects).
fn batch_sql(table: &str, rows: &[serde_json::Value]) -> Result<String, String> {
    let table = table.split('.').map(ident).collect::<Vec<_>>().join(".");
    let mut sql = String::from("BEGIN;\n");
    for r in rows {
        let Some(row) = r.get("row").and_then(|r| r.as_object()) else { continue };
        let cols: Vec<String> = row.keys().map(|k| ident(&k.to_lowercase())).collect();
        let vals: Vec<String> = row.values().map(literal).collect::<Result<_, _>>()?;
        let _ = writeln!(sql, "INSERT INTO {table} ({}) VALUES ({});", cols.join(", "), vals.join(", "));
    }
    sql.push_str("COMMIT;");
    Ok(sql)
}

impl Sink for PgSink {
    fn send(&mut self, rows: &[serde_json::Value]) -> Result<(), String> {
        let sql = batch_sql(&self.table, rows)?;
        if self.runtime.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            self.runtime = Some(rt);
        }
        let Some(rt) = self.runtime.as_ref() else { return Err("no runtime".into()) };
        let (url, client) = (&self.url, &mut self.client);
        rt.block_on(async {
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                let mut config: tokio_postgres::Config = url.parse().map_err(|e| format!("bad postgresql url {url:?}: {e}"))?;
                config.connect_timeout(std::time::Duration::from_secs(PG_CONNECT_TIMEOUT_S));
                let (c, conn) = config.connect(tokio_postgres::NoTls).await.map_err(|e| format!("cannot connect to PostgreSQL: {e}"))?;
                tokio::spawn(conn);
                *client = Some(c);
            }
            let Some(c) = client.as_ref() else { return Err("no connection".to_string()) };
            match c.batch_execute(&sql).await {
                Ok(()) => Ok(()),
                Err(e) => {
                    // The connection may be in a failed transaction: start afresh next time.
                    *client = None;
                    Err(format!("PostgreSQL refused the batch: {e}"))
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_quote_names_and_strings() {
        let rows = vec![serde_json::json!({"seq": 1, "row": {"ID": 7, "NOTE": "it's"}})];
        let sql = batch_sql("public.events", &rows).unwrap();
        assert!(sql.contains("INSERT INTO \"public\".\"events\" (\"id\", \"note\") VALUES (7, 'it''s');"), "{sql}");
        assert!(sql.starts_with("BEGIN;") && sql.ends_with("COMMIT;"));
    }
}
