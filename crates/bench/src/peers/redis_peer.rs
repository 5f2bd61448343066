//! The Redis peer: Redis 7 Functions `ls_<procedure>` called with FCALL over multiplexed
//! (pipelined) connections. Each function answers an array of rows.

use std::sync::atomic::{AtomicUsize, Ordering};

use lockstep_core::{Error, Value};
use redis::aio::MultiplexedConnection;
use redis::Value as Rv;

use super::shape::Raw;

/// Most connections a pool may open.
pub const POOL_MAX: usize = 64;
/// How long a call may take before it counts as lost: the end-of-run checks scan millions of
/// keys inside one function (the client's default of 500 ms is too short for them).
pub const CALL_TIMEOUT_S: u64 = 120;

pub struct RedisPeer {
    conns: Vec<MultiplexedConnection>,
    next: AtomicUsize,
}

fn from_redis(v: &Rv) -> Value {
    match v {
        Rv::Nil => Value::Null,
        Rv::Int(i) => Value::Int(*i),
        // shape.rs decides between text and bytes.
        Rv::BulkString(b) => Value::Bytes(b.clone().into()),
        Rv::SimpleString(s) => Value::from(s.as_str()),
        Rv::Okay => Value::Str("OK".into()),
        Rv::Double(f) => Value::Float(*f),
        Rv::Boolean(b) => Value::Bool(*b),
        other => Value::Str(format!("{other:?}").into()),
    }
}

fn rows(reply: &Rv) -> Result<Vec<Vec<Value>>, Error> {
    let bad = || Error::unexpected(format!("redis: the function answered {reply:?}, not an array of rows"));
    let Rv::Array(items) = reply else { return Err(bad()) };
    items
        .iter()
        .map(|r| match r {
            Rv::Array(cols) => Ok(cols.iter().map(from_redis).collect()),
            _ => Err(bad()),
        })
        .collect()
}

fn arg(cmd: &mut redis::Cmd, v: &Value) {
    match v {
        // Redis has no NULL argument: the functions read an empty string as absent.
        Value::Null => cmd.arg(""),
        Value::Int(i) | Value::Timestamp(i) => cmd.arg(*i),
        Value::Float(f) => cmd.arg(*f),
        Value::Decimal(d) => cmd.arg(d.get().to_string()),
        Value::Str(s) => cmd.arg(s.as_str()),
        Value::Bytes(b) => cmd.arg(&b[..]),
        Value::Bool(b) => cmd.arg(i64::from(*b)),
        Value::Array(_) => cmd.arg(""),
        Value::Point(_) | Value::Geography(_) => cmd.arg(v.to_string()),
    };
}

impl RedisPeer {
    /// Opens `pool` multiplexed connections to `url` (redis://host:port).
    pub async fn connect(url: &str, pool: usize) -> Result<RedisPeer, Error> {
        let unavailable = |e: redis::RedisError| Error::unavailable(format!("cannot connect to {url}: {e} (is Redis running there?)"));
        let client = redis::Client::open(url).map_err(unavailable)?;
        let mut conns = Vec::new();
        for _ in 0..pool.clamp(1, POOL_MAX) {
            let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(std::time::Duration::from_secs(CALL_TIMEOUT_S)));
            conns.push(client.get_multiplexed_async_connection_with_config(&config).await.map_err(unavailable)?);
        }
        Ok(RedisPeer { conns, next: AtomicUsize::new(0) })
    }

    fn conn(&self) -> MultiplexedConnection {
        self.conns[self.next.fetch_add(1, Ordering::Relaxed) % self.conns.len()].clone()
    }

    /// Calls function `function` (no keys declared: a single server, not a cluster).
    pub async fn call(&self, function: &str, params: &[Value]) -> Result<Raw, Error> {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(function).arg(0);
        for p in params {
            arg(&mut cmd, p);
        }
        match cmd.query_async::<Rv>(&mut self.conn()).await {
            Ok(reply) => rows(&reply).map(Ok),
            Err(e) if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() => Err(Error::unexpected(format!("redis: {e}"))),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    /// Loads (or replaces) a library of functions.
    pub async fn load_library(&self, source: &str) -> Result<(), Error> {
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(source)
            .query_async::<Rv>(&mut self.conn())
            .await
            .map(|_| ())
            .map_err(|e| Error::sql(format!("redis: loading functions: {e}")))
    }
}
