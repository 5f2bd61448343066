//! The Tarantool peer: global Lua functions `ls_<procedure>` called over IPROTO with
//! rusty_tarantool (Tarantool 2.6, Debian 12's package, predates the IPROTO_ID handshake that
//! tarantool-rs requires). Each function answers an array of rows.

use std::sync::atomic::{AtomicUsize, Ordering};

use lockstep_core::{Error, Value};
use rmpv::Value as Mp;
use rusty_tarantool::tarantool::{Client, ClientConfig};

use super::shape::Raw;

/// Most connections a pool may open.
pub const POOL_MAX: usize = 64;
/// Most rows or columns we accept in one answer.
pub const ANSWER_ITEMS_MAX: usize = 10_000_000;
/// How long a call may take before it counts as lost.
pub const CALL_TIMEOUT_MS: u64 = 30_000;

pub struct TarantoolPeer {
    clients: Vec<Client>,
    next: AtomicUsize,
}

fn to_mp(v: &Value) -> Mp {
    match v {
        Value::Null => Mp::Nil,
        Value::Int(i) | Value::Timestamp(i) => Mp::from(*i),
        Value::Float(f) => Mp::from(*f),
        Value::Decimal(d) => Mp::from(d.get().to_string()),
        Value::Str(s) => Mp::from(s.as_str()),
        Value::Bytes(b) => Mp::Binary(b.to_vec()),
        Value::Bool(b) => Mp::Boolean(*b),
        Value::Array(a) => Mp::Array(a.iter().map(to_mp).collect()),
        Value::Point(_) | Value::Geography(_) => Mp::from(v.to_string()),
    }
}

fn from_mp(v: &Mp) -> Value {
    match v {
        Mp::Nil => Value::Null,
        Mp::Boolean(b) => Value::Bool(*b),
        Mp::Integer(i) => i.as_i64().map(Value::Int).unwrap_or_else(|| Value::Float(i.as_f64().unwrap_or(f64::NAN))),
        Mp::F32(f) => float(*f as f64),
        Mp::F64(f) => float(*f),
        // Lua strings may hold any bytes; shape.rs decides between text and bytes.
        Mp::String(s) => Value::Bytes(s.as_bytes().into()),
        Mp::Binary(b) => Value::Bytes(b.clone().into()),
        other => Value::Str(other.to_string().into()),
    }
}

/// Lua numbers are doubles: an integral one was an integer.
fn float(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Value::Int(f as i64)
    } else {
        Value::Float(f)
    }
}

fn rows(reply: Vec<Mp>) -> Result<Vec<Vec<Value>>, Error> {
    let bad = |what: &str| Error::unexpected(format!("tarantool: the function answered {what}, not an array of rows"));
    let Some(first) = reply.into_iter().next() else { return Ok(Vec::new()) };
    let Mp::Array(items) = first else { return Err(bad("a scalar")) };
    if items.len() > ANSWER_ITEMS_MAX {
        return Err(bad("too many rows"));
    }
    items
        .iter()
        .map(|r| match r {
            Mp::Array(cols) => Ok(cols.iter().map(from_mp).collect()),
            _ => Err(bad("a row that is not an array")),
        })
        .collect()
}

impl TarantoolPeer {
    /// Opens `pool` connections to host:port as `user`.
    pub async fn connect(addr: &str, user: &str, password: &str, pool: usize) -> Result<TarantoolPeer, Error> {
        let pool = pool.clamp(1, POOL_MAX);
        let clients: Vec<Client> =
            (0..pool).map(|_| ClientConfig::new(addr, user, password).set_timeout_time_ms(CALL_TIMEOUT_MS).build()).collect();
        let peer = TarantoolPeer { clients, next: AtomicUsize::new(0) };
        for c in &peer.clients {
            c.ping().await.map_err(|e| Error::unavailable(format!("cannot reach Tarantool at {addr}: {e} (is it running there?)")))?;
        }
        Ok(peer)
    }

    /// Calls `function`; its rows, or the error it raised.
    pub async fn call(&self, function: &str, params: &[Value]) -> Result<Raw, Error> {
        let c = &self.clients[self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len()];
        let args: Vec<Mp> = params.iter().map(to_mp).collect();
        match c.call_fn(function, &args).await {
            Ok(resp) => {
                let reply: Vec<Mp> = resp.decode().map_err(|e| Error::unexpected(format!("tarantool: undecodable answer: {e}")))?;
                rows(reply).map(Ok)
            }
            // The client reports the server's errors and lost connections alike: an error
            // raised by our functions carries their text, anything else counts as lost.
            Err(e) if e.kind() == std::io::ErrorKind::Other && !is_transport(&e.to_string()) => Ok(Err(e.to_string())),
            Err(e) => Err(Error::unexpected(format!("tarantool: {e}"))),
        }
    }

    /// Runs a Lua chunk (an app's spaces and functions) on the server.
    pub async fn eval(&self, chunk: &str) -> Result<(), Error> {
        let no_args: Vec<Mp> = Vec::new();
        self.clients[0].eval(chunk, &no_args).await.map(|_| ()).map_err(|e| Error::sql(format!("tarantool: loading the app: {e}")))
    }
}

/// Messages rusty_tarantool gives for a lost connection rather than a server error.
fn is_transport(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["disconnect", "dead", "connection", "timeout", "broken pipe"].iter().any(|w| m.contains(w))
}
