//! The PostgreSQL peer: a pool of tokio-postgres connections, each procedure called as
//! `SELECT * FROM ls_<procedure>($1 …)` over the extended protocol with a statement prepared
//! once per connection; `@AdHoc` goes over the simple protocol.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use lockstep_core::{Error, Value};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage, Statement};

use super::shape::{table, Raw};

/// Most connections a pool may open (PostgreSQL runs one process per connection).
pub const POOL_MAX: usize = 256;
/// Most parameters a call may pass.
pub const PARAMS_MAX: usize = 64;

pub struct PgPeer {
    clients: Vec<Client>,
    /// Prepared statements per connection, by function name.
    prepared: Vec<Mutex<HashMap<String, Statement>>>,
    next: AtomicUsize,
}

fn lost(e: impl std::fmt::Display) -> Error {
    Error::unexpected(format!("postgres: {e}"))
}

/// Splits a client error: the server's message (the call ran and failed) or a lost call.
fn server_or_lost(e: tokio_postgres::Error) -> Result<String, Error> {
    match e.as_db_error() {
        Some(db) => Ok(db.message().to_string()),
        None => Err(lost(e)),
    }
}

type Param = Box<dyn ToSql + Sync + Send>;

/// The value as the parameter type PostgreSQL inferred for it.
fn param(v: &Value, ty: &Type) -> Result<Param, Error> {
    let mismatch = || Error::type_error(format!("postgres: cannot pass {v:?} as {ty}"));
    Ok(match (v, ty) {
        (Value::Null, t) if *t == Type::TEXT || *t == Type::VARCHAR => Box::new(None::<String>),
        (Value::Null, t) if *t == Type::BYTEA => Box::new(None::<Vec<u8>>),
        (Value::Null, _) => Box::new(None::<i64>),
        (Value::Int(i) | Value::Timestamp(i), t) if *t == Type::INT8 => Box::new(*i),
        (Value::Int(i), t) if *t == Type::INT4 => Box::new(i32::try_from(*i).map_err(|_| mismatch())?),
        (Value::Int(i), t) if *t == Type::INT2 => Box::new(i16::try_from(*i).map_err(|_| mismatch())?),
        (Value::Str(s), t) if *t == Type::TEXT || *t == Type::VARCHAR => Box::new(s.to_string()),
        (Value::Bytes(b), t) if *t == Type::TEXT || *t == Type::VARCHAR => Box::new(String::from_utf8(b.to_vec()).map_err(|_| mismatch())?),
        (Value::Bytes(b), t) if *t == Type::BYTEA => Box::new(b.to_vec()),
        (Value::Str(s), t) if *t == Type::BYTEA => Box::new(s.as_bytes().to_vec()),
        _ => return Err(mismatch()),
    })
}

/// One column of a result row as a Lockstep value.
fn column(row: &tokio_postgres::Row, i: usize) -> Result<Value, Error> {
    let ty = row.columns()[i].type_();
    let v = if *ty == Type::INT8 {
        row.try_get::<_, Option<i64>>(i).map(|v| v.map(Value::Int))
    } else if *ty == Type::INT4 {
        row.try_get::<_, Option<i32>>(i).map(|v| v.map(|v| Value::Int(v as i64)))
    } else if *ty == Type::INT2 {
        row.try_get::<_, Option<i16>>(i).map(|v| v.map(|v| Value::Int(v as i64)))
    } else if *ty == Type::BYTEA {
        row.try_get::<_, Option<Vec<u8>>>(i).map(|v| v.map(|b| Value::Bytes(b.into())))
    } else if *ty == Type::TEXT || *ty == Type::VARCHAR || *ty == Type::BPCHAR {
        row.try_get::<_, Option<String>>(i).map(|v| v.map(Value::from))
    } else {
        return Err(lost(format!("column {} has type {ty}, which the benchmark does not read", row.columns()[i].name())));
    };
    Ok(v.map_err(lost)?.unwrap_or(Value::Null))
}

impl PgPeer {
    /// Opens `pool` connections to `url` (postgres://user@host:port/db).
    pub async fn connect(url: &str, pool: usize) -> Result<PgPeer, Error> {
        let pool = pool.clamp(1, POOL_MAX);
        let mut clients = Vec::with_capacity(pool);
        for _ in 0..pool {
            let (client, connection) = tokio_postgres::connect(url, NoTls)
                .await
                .map_err(|e| Error::unavailable(format!("cannot connect to {url}: {e} (is PostgreSQL running there?)")))?;
            tokio::spawn(async move {
                // Ends when the client is dropped or the server goes away; calls then fail.
                let _ = connection.await;
            });
            clients.push(client);
        }
        let prepared = (0..pool).map(|_| Mutex::new(HashMap::new())).collect();
        Ok(PgPeer { clients, prepared, next: AtomicUsize::new(0) })
    }

    fn pick(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len()
    }

    async fn statement(&self, c: usize, function: &str, arity: usize) -> Result<Result<Statement, String>, Error> {
        let key = format!("{function}/{arity}");
        if let Some(s) = self.prepared[c].lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(Ok(s.clone()));
        }
        let placeholders: Vec<String> = (1..=arity).map(|i| format!("${i}")).collect();
        let sql = format!("SELECT * FROM {function}({})", placeholders.join(", "));
        match self.clients[c].prepare(&sql).await {
            Ok(s) => {
                self.prepared[c].lock().unwrap_or_else(|e| e.into_inner()).insert(key, s.clone());
                Ok(Ok(s))
            }
            Err(e) => server_or_lost(e).map(Err),
        }
    }

    /// Calls function `function` with `params`; its rows or the server's error message.
    pub async fn call(&self, function: &str, params: &[Value]) -> Result<Raw, Error> {
        if params.len() > PARAMS_MAX {
            return Err(Error::graceful(format!("{} parameters, more than {PARAMS_MAX}", params.len())));
        }
        let c = self.pick();
        let stmt = match self.statement(c, function, params.len()).await? {
            Ok(s) => s,
            Err(message) => return Ok(Err(message)),
        };
        let mut boxed = Vec::with_capacity(params.len());
        for (v, ty) in params.iter().zip(stmt.params()) {
            boxed.push(param(v, ty)?);
        }
        let refs: Vec<&(dyn ToSql + Sync)> = boxed.iter().map(|b| b.as_ref() as &(dyn ToSql + Sync)).collect();
        let rows = match self.clients[c].query(&stmt, &refs).await {
            Ok(rows) => rows,
            Err(e) => return server_or_lost(e).map(Err),
        };
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push((0..row.len()).map(|i| column(row, i)).collect::<Result<Vec<_>, _>>()?);
        }
        Ok(Ok(out))
    }

    /// Runs SQL over the simple protocol: the last result's rows (integers as integers), or
    /// the rows changed by a statement without result.
    pub async fn adhoc(&self, sql: &str) -> Result<Result<lockstep_core::ResultTable, String>, Error> {
        let messages = match self.clients[0].simple_query(sql).await {
            Ok(m) => m,
            Err(e) => return server_or_lost(e).map(Err),
        };
        let mut rows = Vec::new();
        let mut changed = None;
        let mut query = false;
        for m in messages {
            match m {
                SimpleQueryMessage::Row(r) => {
                    let row = (0..r.len())
                        .map(|i| match r.get(i) {
                            None => Value::Null,
                            Some(t) => t.parse::<i64>().map(Value::Int).unwrap_or_else(|_| Value::Str(t.to_string().into())),
                        })
                        .collect();
                    rows.push(row);
                }
                SimpleQueryMessage::CommandComplete(n) => changed = Some(n),
                SimpleQueryMessage::RowDescription(_) => query = true,
                _ => {}
            }
        }
        if !query {
            if let Some(n) = changed {
                return Ok(Ok(lockstep_core::ResultTable::modified(n)));
            }
        }
        Ok(Ok(table(&[], rows)))
    }

    /// Runs a script of several statements (an app's schema and functions) in one transaction.
    /// The apps' tables are UNLOGGED, the promise of a run without durability; a server
    /// that commits synchronously is a durable run, and then they are logged tables.
    pub async fn batch(&self, script: &str) -> Result<(), Error> {
        let durable = self.synchronous_commit().await?;
        let script = if durable { script.replace("CREATE UNLOGGED TABLE", "CREATE TABLE") } else { script.to_string() };
        self.clients[0].batch_execute(&script).await.map_err(|e| match e.as_db_error() {
            Some(db) => Error::sql(format!("postgres: {}", db.message())),
            None => lost(e),
        })
    }

    /// Whether the server waits for the WAL's flush at each commit (and fsyncs at all).
    async fn synchronous_commit(&self) -> Result<bool, Error> {
        let mut on = true;
        for setting in ["synchronous_commit", "fsync"] {
            let row = self.clients[0].query_one(&format!("SHOW {setting}"), &[]).await.map_err(lost)?;
            let value: String = row.try_get(0).map_err(lost)?;
            on &= value != "off";
        }
        Ok(on)
    }
}
