//! One way to call procedures, over the network (the Rust client) or in this process (an
//! embedded engine, no network), so workloads are written once for both.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use lockstep_client::{client_tls_config, Client, ClientConfig, ResponseView};
use lockstep_core::{Error, ResultTable, Value};
use lockstep_engine::{Call, Engine, EngineConfig, Outcome};

/// VoltDB's SUCCESS status.
pub const STATUS_SUCCESS: i8 = 1;
/// VoltDB's USER_ABORT status (the procedure called `abort`).
pub const STATUS_USER_ABORT: i8 = -1;

/// The answer to one call, whichever way it travelled.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: i8,
    pub status_string: Option<String>,
    pub app_status: i8,
    tables: Tables,
}

/// An answer's tables: decoded (embedded engines and peers), or left in the bytes they came
/// in over the network, each cell decoded when read. Workloads read a row count or a cell
/// or two of most answers, and decoding every cell of every answer (TATP's 34 columns of a
/// subscriber, YCSB's 1 KB records) took a third of the client's work.
#[derive(Clone, Debug, PartialEq)]
enum Tables {
    Decoded(Vec<ResultTable>),
    InPlace(ResponseView),
}

impl Answer {
    pub fn new(status: i8, status_string: Option<String>, app_status: i8, tables: Vec<ResultTable>) -> Answer {
        Answer { status, status_string, app_status, tables: Tables::Decoded(tables) }
    }

    pub fn is_success(&self) -> bool {
        self.status == STATUS_SUCCESS
    }

    pub fn table_count(&self) -> usize {
        match &self.tables {
            Tables::Decoded(t) => t.len(),
            Tables::InPlace(v) => v.table_count(),
        }
    }

    /// Rows of table `table`; 0 when there is no such table.
    pub fn row_count(&self, table: usize) -> usize {
        match &self.tables {
            Tables::Decoded(t) => t.get(table).map_or(0, |t| t.rows.len()),
            Tables::InPlace(v) => v.table(table).map_or(0, |t| t.row_count()),
        }
    }

    /// The value at (table, row, column), if present (and, in place, well formed).
    pub fn value(&self, table: usize, row: usize, col: usize) -> Option<Value> {
        match &self.tables {
            Tables::Decoded(t) => t.get(table)?.rows.get(row)?.get(col).cloned(),
            Tables::InPlace(v) => v.table(table)?.row(row)?.value(col).ok(),
        }
    }

    /// The integer at (table, row, column), if present and integral.
    pub fn int(&self, table: usize, row: usize, col: usize) -> Option<i64> {
        match &self.tables {
            Tables::Decoded(t) => match t.get(table)?.rows.get(row)?.get(col)? {
                Value::Int(v) | Value::Timestamp(v) => Some(*v),
                _ => None,
            },
            Tables::InPlace(v) => v.table(table)?.row(row)?.int(col).ok().flatten(),
        }
    }

    /// Every row of table `table`, decoded; none when there is no such table (or, in place,
    /// when a row is malformed).
    pub fn rows(&self, table: usize) -> Vec<Vec<Value>> {
        match &self.tables {
            Tables::Decoded(t) => t.get(table).map(|t| t.rows.clone()).unwrap_or_default(),
            Tables::InPlace(v) => v.table(table).and_then(|t| t.to_table().ok()).map(|t| t.rows).unwrap_or_default(),
        }
    }

    /// The text in column `col` of every row of table `table`, borrowed from the answer;
    /// rows whose cell is not text (or NULL) are left out.
    pub fn texts(&self, table: usize, col: usize) -> Vec<&str> {
        match &self.tables {
            Tables::Decoded(t) => t.get(table).map_or_else(Vec::new, |t| {
                t.rows
                    .iter()
                    .filter_map(|r| match r.get(col) {
                        Some(Value::Str(k)) => Some(k.as_str()),
                        _ => None,
                    })
                    .collect()
            }),
            Tables::InPlace(v) => v.table(table).map_or_else(Vec::new, |t| t.rows().filter_map(|r| r.str(col).ok().flatten()).collect()),
        }
    }

    /// "status N: message", for reports.
    pub fn describe(&self) -> String {
        format!("status {}: {}", self.status, self.status_string.clone().unwrap_or_default())
    }

    fn from_outcome(o: Outcome) -> Answer {
        Answer::new(o.status, o.status_string, o.app_status, o.tables)
    }

    fn from_view(mut v: ResponseView) -> Answer {
        let status_string = v.status_string.take();
        Answer { status: v.status, status_string, app_status: v.app_status, tables: Tables::InPlace(v) }
    }
}

/// Who connects to a Lockstep server, and how: the flags `lockstep sql` and `lockstep bench`
/// share for a server with security on or TLS on its client port.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct LoginArgs {
    /// User name to log in as (needed when the server runs with --security on).
    #[arg(long, default_value = "")]
    pub user: String,
    /// Password of --user (default: the LOCKSTEP_PASSWORD environment variable).
    #[arg(long, env = "LOCKSTEP_PASSWORD", default_value = "", hide_env_values = true)]
    pub password: String,
    /// Speak TLS to the server (its client port was started with --tls-cert/--tls-key).
    #[arg(long)]
    pub tls: bool,
    /// Trust the server certificate(s) in this PEM file (implies --tls; default: the
    /// system's trusted roots).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

impl LoginArgs {
    /// The client configuration these flags describe, with room for `window` calls in flight.
    pub fn client_config(&self, window: usize) -> Result<ClientConfig, Error> {
        let tls = if self.tls || self.tls_ca.is_some() {
            Some(client_tls_config(self.tls_ca.as_deref()).map_err(|e| Error::graceful(e.to_string()))?)
        } else {
            None
        };
        Ok(ClientConfig {
            username: self.user.clone(),
            password: self.password.clone(),
            max_in_flight: window.max(1),
            tls,
            ..ClientConfig::default()
        })
    }
}

/// A connection to a server or an engine in this process. Cheap to clone.
#[derive(Clone)]
pub enum Conn {
    Net(Client),
    Embedded(Arc<EmbeddedEngine>),
    /// PostgreSQL, Tarantool or Redis running the same apps (crate::peers).
    Peer(Arc<crate::peers::Peer>),
}

/// An engine started by the benchmark, removed (with its data directory) on shutdown.
pub struct EmbeddedEngine {
    engine: Arc<Engine>,
    data_dir: PathBuf,
    /// (partition, key) pairs from @GetPartitionKeys, read once.
    keys: OnceLock<Vec<(i32, i64)>>,
}

impl Drop for EmbeddedEngine {
    fn drop(&mut self) {
        self.engine.shutdown();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn err(message: impl Into<String>) -> Error {
    Error::unexpected(message.into())
}

impl Conn {
    /// Connects to a server with room for `window` calls in flight.
    pub async fn connect(addr: &str, window: usize) -> Result<Conn, Error> {
        Self::connect_as(addr, &LoginArgs::default(), window).await
    }

    /// Connects to a server as `login` says (user, password, TLS). `addr` may list the
    /// nodes of a cluster, comma-separated: one connection to each, and each call goes to
    /// the node that leads its partition.
    pub async fn connect_as(addr: &str, login: &LoginArgs, window: usize) -> Result<Conn, Error> {
        let config = login.client_config(window)?;
        let addrs: Vec<&str> = addr.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
        let client = Client::connect_many(&addrs, config)
            .await
            .map_err(|e| err(format!("cannot connect to {addr}: {e} (is `lockstep server` running there?)")))?;
        Ok(Conn::Net(client))
    }

    /// Starts an engine in this process on a fresh temporary data directory.
    pub fn embedded(sites: Option<u32>) -> Result<Conn, Error> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let data_dir = std::env::temp_dir().join(format!("lockstep-bench-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir).map_err(|e| err(format!("cannot create {}: {e}", data_dir.display())))?;
        let mut config = EngineConfig::new(&data_dir);
        if let Some(s) = sites {
            config.sites = s;
        }
        let engine = Engine::start(config)?;
        Ok(Conn::Embedded(Arc::new(EmbeddedEngine { engine, data_dir, keys: OnceLock::new() })))
    }

    /// Learns the servers' partitions and procedures again (a client learns them when it
    /// connects, before the workload's schema exists): calls then go straight to the node
    /// that leads their partition, rather than round the nodes (each forwarding the call).
    pub async fn refresh_routing(&self) {
        if let Conn::Net(c) = self {
            c.refresh_routing().await;
        }
    }

    /// Calls a procedure. A failure status is an `Ok` answer; `Err` means the call was lost.
    pub async fn call(&self, proc: &str, params: Vec<Value>) -> Result<Answer, Error> {
        self.call_in_order(proc, params, ()).await
    }

    /// Calls a procedure, dropping `order_guard` as soon as the call's place in the
    /// server's order is fixed: once it is queued, for Lockstep (one ordered connection per
    /// partition, one queue per site); only after the answer for peers, whose connection
    /// pools give no order. Writers of one key hold the key's lock as the guard.
    pub async fn call_in_order<G>(&self, proc: &str, params: Vec<Value>, order_guard: G) -> Result<Answer, Error> {
        match self {
            Conn::Net(c) => {
                let sent = c.start_call(proc, params).await.map_err(|e| err(e.to_string()))?;
                drop(order_guard);
                sent.wait_view().await.map(Answer::from_view).map_err(|e| err(e.to_string()))
            }
            Conn::Embedded(e) => {
                let answer = e.start(Call { procedure: proc.to_string(), params, ..Call::default() });
                drop(order_guard);
                answer.await.map(Answer::from_outcome).map_err(|_| err("the engine dropped a call"))
            }
            Conn::Peer(p) => {
                // Boxed: a peer's client future is large, and every call's future would
                // otherwise have its size, which the bench's window of calls pays in cache.
                let r = Box::pin(p.call(proc, params)).await;
                drop(order_guard);
                r
            }
        }
    }

    /// Runs a procedure on every partition; one answer per partition, in partition order.
    pub async fn call_all_partitions(&self, proc: &str, params: Vec<Value>) -> Result<Vec<Answer>, Error> {
        match self {
            Conn::Net(c) => {
                let rs = c.call_all_partitions_view(proc, params).await.map_err(|e| err(e.to_string()))?;
                Ok(rs.into_iter().map(Answer::from_view).collect())
            }
            Conn::Embedded(e) => {
                let keys = e.partition_keys().await?;
                let mut pending = Vec::with_capacity(keys.len());
                for (partition, key) in keys {
                    let mut p = Vec::with_capacity(params.len() + 1);
                    p.push(Value::Int(key));
                    p.extend(params.iter().cloned());
                    let call = Call {
                        procedure: proc.to_string(),
                        params: p,
                        partition_destination: Some(partition),
                        all_partition: true,
                        ..Call::default()
                    };
                    pending.push(e.start(call));
                }
                let mut out = Vec::with_capacity(pending.len());
                for rx in pending {
                    out.push(rx.await.map(Answer::from_outcome).map_err(|_| err("the engine dropped a call"))?);
                }
                Ok(out)
            }
            Conn::Peer(p) => p.call_all_partitions(proc, params).await,
        }
    }

    /// `@AdHoc` that must succeed; its failure message becomes the error.
    pub async fn adhoc(&self, sql: &str) -> Result<Answer, Error> {
        let a = self.call("@AdHoc", vec![Value::Str(sql.to_string().into())]).await?;
        if !a.is_success() {
            return Err(Error::sql(format!("{sql}: {}", a.status_string.unwrap_or_default())));
        }
        Ok(a)
    }

    /// The single integer an `@AdHoc` query returns (NULL reads as 0).
    pub async fn scalar(&self, sql: &str) -> Result<i64, Error> {
        let a = self.adhoc(sql).await?;
        match a.value(0, 0, 0) {
            Some(Value::Int(v)) => Ok(v),
            Some(Value::Null) => Ok(0),
            other => Err(err(format!("{sql}: expected one integer, got {other:?}"))),
        }
    }
}

impl EmbeddedEngine {
    fn start(&self, call: Call) -> tokio::sync::oneshot::Receiver<Outcome> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.engine.submit(
            call,
            Box::new(move |o| {
                // The caller may have gone away; its answer is then not needed.
                let _ = tx.send(o);
            }),
        );
        rx
    }

    async fn submit(&self, call: Call) -> Result<Answer, Error> {
        self.start(call).await.map(Answer::from_outcome).map_err(|_| err("the engine dropped a call"))
    }

    async fn partition_keys(&self) -> Result<Vec<(i32, i64)>, Error> {
        if let Some(k) = self.keys.get() {
            return Ok(k.clone());
        }
        let call = Call { procedure: "@GetPartitionKeys".into(), params: vec![Value::from("INTEGER")], ..Call::default() };
        let a = self.submit(call).await?;
        let mut keys = Vec::new();
        for row in a.rows(0) {
            if let (Some(Value::Int(p)), Some(Value::Int(k))) = (row.first(), row.get(1)) {
                keys.push((*p as i32, *k));
            }
        }
        if keys.is_empty() {
            return Err(err(format!("@GetPartitionKeys returned no partitions ({})", a.describe())));
        }
        keys.sort_unstable();
        let _ = self.keys.set(keys.clone());
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockstep_core::DataType;
    use lockstep_wire::{encode_response, Response};

    /// An answer read in place gives what the same answer decoded gives, accessor by accessor.
    #[test]
    fn answers_read_in_place_equal_decoded_ones() {
        let mut t = ResultTable::with_columns(&[("n", DataType::BigInt), ("k", DataType::Varchar), ("v", DataType::Varbinary)]);
        t.push(vec![Value::Int(3), Value::from("a"), Value::Bytes(vec![1].into())]);
        t.push(vec![Value::Int(9), Value::Null, Value::Null]);
        t.push(vec![Value::Null, Value::from("c"), Value::Bytes(vec![].into())]);
        let mut r = Response::success(5, vec![t, ResultTable::scalar("x", 11)]);
        r.app_status = 3;
        r.status_string = Some("done".into());
        let mut out = Vec::new();
        encode_response(&r, &mut out);
        let in_place = Answer::from_view(ResponseView::parse(bytes::Bytes::from(out).slice(4..)).unwrap());
        let decoded = Answer::new(r.status, r.status_string, r.app_status, r.tables);
        for a in [&in_place, &decoded] {
            assert_eq!((a.status, a.app_status, a.status_string.as_deref()), (STATUS_SUCCESS, 3, Some("done")));
            assert_eq!(a.table_count(), 2);
            assert_eq!((a.row_count(0), a.row_count(1), a.row_count(2)), (3, 1, 0));
            assert_eq!((a.int(0, 0, 0), a.int(0, 1, 0), a.int(0, 2, 0), a.int(1, 0, 0)), (Some(3), Some(9), None, Some(11)));
            assert_eq!(a.value(0, 0, 2), Some(Value::Bytes(vec![1].into())));
            assert_eq!((a.value(0, 3, 0), a.value(0, 0, 3), a.value(2, 0, 0)), (None, None, None));
            assert_eq!(a.texts(0, 1), vec!["a", "c"]);
            assert!(a.texts(0, 0).is_empty() && a.texts(5, 1).is_empty());
        }
        assert_eq!(in_place.rows(0), decoded.rows(0));
        assert_eq!(in_place.rows(1), vec![vec![Value::Int(11)]]);
    }
}
