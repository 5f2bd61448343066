//! The client: calls over one or more connections, pipelined, with a bounded window of calls
//! in flight (its backpressure) and partition-aware routing.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use lockstep_core::Value;
use lockstep_wire::response::status;
use lockstep_wire::types::{INTEGER, STRING};
use lockstep_wire::{decode_response, encode_invocation_typed, HashScheme, Invocation, Response, ResponseView, FRAME_SIZE_MAX_BYTES};
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::connection::Connection;
use crate::error::ClientError;
use crate::routing::{Routing, Target};

/// Default cap on calls in flight per client (the VoltDB client's default).
pub const MAX_IN_FLIGHT_DEFAULT: usize = 3000;
/// Largest window we allow; far beyond what any server queue admits.
pub const MAX_IN_FLIGHT_LIMIT: usize = 1 << 20;

/// How to connect.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    pub username: String,
    pub password: String,
    /// Calls in flight at once; further callers wait (1..=MAX_IN_FLIGHT_LIMIT).
    pub max_in_flight: usize,
    /// How the password is hashed for login: SHA-256 (VoltDB's client's default) or SHA-1.
    pub hash_scheme: HashScheme,
    /// TLS (see `client_tls_config`); None speaks plain TCP.
    pub tls: Option<Arc<tokio_rustls::rustls::ClientConfig>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            username: String::new(),
            password: String::new(),
            max_in_flight: MAX_IN_FLIGHT_DEFAULT,
            hash_scheme: HashScheme::Sha256,
            tls: None,
        }
    }
}

struct Inner {
    connections: Vec<Connection>,
    window: Arc<Semaphore>,
    max_in_flight: usize,
    next_handle: AtomicI64,
    round_robin: AtomicUsize,
    routing: RwLock<Routing>,
    /// `@GetPartitionKeys`, kept until the routing is refreshed (the topology may change).
    partition_keys: std::sync::Mutex<Option<PartitionKeys>>,
    /// A refresh of the routing runs now, or ran lately (`refresh_routing_soon`).
    refresh: std::sync::Mutex<RefreshState>,
}

#[derive(Default)]
struct RefreshState {
    running: bool,
    last: Option<std::time::Instant>,
}

/// The shortest time between two refreshes of the routing that calls bring about.
const ROUTING_REFRESH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// A connected client. Cheap to clone; clones share connections and the in-flight window.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// A call that has been sent and not yet answered; holds its slot of the window.
pub struct Sent {
    _permit: OwnedSemaphorePermit,
    reply: oneshot::Receiver<Result<Bytes, ClientError>>,
}

impl Sent {
    /// The answer with every table decoded (a failure status is still `Ok`).
    pub async fn wait(self) -> Result<Response, ClientError> {
        let payload = self.payload().await?;
        decode_response(&payload).map_err(|e| ClientError::Protocol(e.message))
    }

    /// The answer with its tables left in place, each cell decoded when read: cheaper when
    /// the caller reads a few cells of a large answer, or only its row counts.
    pub async fn wait_view(self) -> Result<ResponseView, ClientError> {
        let payload = self.payload().await?;
        ResponseView::parse(payload).map_err(|e| ClientError::Protocol(e.message))
    }

    async fn payload(self) -> Result<Bytes, ClientError> {
        self.reply.await.unwrap_or_else(|_| Err(ClientError::ConnectionLost("the connection closed".into())))
    }
}

impl Client {
    /// Connects to one server.
    pub async fn connect(addr: &str, config: ClientConfig) -> Result<Client, ClientError> {
        Self::connect_many(&[addr], config).await
    }

    /// Connects to every address (one connection each) and learns the topology. All servers
    /// must belong to the same cluster instance.
    pub async fn connect_many<S: AsRef<str>>(addrs: &[S], config: ClientConfig) -> Result<Client, ClientError> {
        if addrs.is_empty() {
            return Err(ClientError::InvalidCall("no server address given".into()));
        }
        if config.max_in_flight == 0 || config.max_in_flight > MAX_IN_FLIGHT_LIMIT {
            return Err(ClientError::InvalidCall(format!("max_in_flight must be 1..={MAX_IN_FLIGHT_LIMIT}, not {}", config.max_in_flight)));
        }
        let mut connections: Vec<Connection> = Vec::with_capacity(addrs.len());
        for addr in addrs {
            let addr = addr.as_ref();
            let conn = Connection::open(addr, &config).await?;
            if let Some(first) = connections.first() {
                let a = (first.login.cluster_start_ms, first.login.leader_ipv4);
                if (conn.login.cluster_start_ms, conn.login.leader_ipv4) != a {
                    return Err(ClientError::Login(format!("{addr} belongs to another cluster (instance id mismatch)")));
                }
            }
            connections.push(conn);
        }
        let client = Client {
            inner: Arc::new(Inner {
                connections,
                window: Arc::new(Semaphore::new(config.max_in_flight)),
                max_in_flight: config.max_in_flight,
                next_handle: AtomicI64::new(0),
                round_robin: AtomicUsize::new(0),
                routing: RwLock::new(Routing::default()),
                partition_keys: std::sync::Mutex::new(None),
                refresh: std::sync::Mutex::default(),
            }),
        };
        client.refresh_routing().await;
        Ok(client)
    }

    /// Calls a procedure. A failure status is still `Ok`: check `Response::status`.
    pub async fn call(&self, proc: &str, params: Vec<Value>) -> Result<Response, ClientError> {
        self.start_call(proc, params).await?.wait().await
    }

    /// Queues a call on its connection and returns before the answer. Calls started one
    /// after another for the same partition reach the server, and run there, in that order.
    pub async fn start_call(&self, proc: &str, params: Vec<Value>) -> Result<Sent, ClientError> {
        self.send(Invocation::new(proc, 0, params), &[]).await
    }

    /// `call` that gives up after `timeout`; the window slot is freed then, and a late
    /// answer is dropped.
    pub async fn call_with_timeout(&self, proc: &str, params: Vec<Value>, timeout: std::time::Duration) -> Result<Response, ClientError> {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        tokio::time::timeout(timeout, self.call(proc, params)).await.unwrap_or(Err(ClientError::Timeout(ms)))
    }

    /// Runs `proc` once on every partition (VoltDB's `callAllPartitionProcedure`): each call gets
    /// that partition's key from `@GetPartitionKeys` as its first parameter. One response per
    /// partition, in partition order.
    pub async fn call_all_partitions(&self, proc: &str, params: Vec<Value>) -> Result<Vec<Response>, ClientError> {
        self.all_partitions(proc, params, Sent::wait).await
    }

    /// `call_all_partitions` with each answer's tables left in place (see `Sent::wait_view`).
    pub async fn call_all_partitions_view(&self, proc: &str, params: Vec<Value>) -> Result<Vec<ResponseView>, ClientError> {
        self.all_partitions(proc, params, Sent::wait_view).await
    }

    async fn all_partitions<R, F: std::future::Future<Output = Result<R, ClientError>>>(
        &self,
        proc: &str,
        params: Vec<Value>,
        wait: impl Fn(Sent) -> F,
    ) -> Result<Vec<R>, ClientError> {
        let keys = self.partition_keys().await?;
        let mut out = Vec::with_capacity(keys.len());
        // A window's worth at a time, its slots taken all at once: a caller holding some
        // slots while it waits for more could wait forever on another doing the same.
        for chunk in keys.chunks(self.inner.max_in_flight) {
            let mut permits = self.permits(chunk.len()).await?;
            let mut sent = Vec::with_capacity(chunk.len());
            for &(partition, key) in chunk {
                let mut call_params = Vec::with_capacity(params.len() + 1);
                call_params.push(Value::Int(key));
                call_params.extend(params.iter().cloned());
                let mut inv = Invocation::new(proc, 0, call_params);
                inv.all_partition = true;
                inv.partition_destination = Some(partition);
                let permit = permits.split(1).ok_or_else(|| ClientError::Protocol("window slots miscounted".into()))?;
                sent.push(self.send_with(permit, inv, &[INTEGER])?);
            }
            for s in sent {
                out.push(wait(s).await?);
            }
        }
        Ok(out)
    }

    /// The partition a single-partition call would run at, when the topology is known.
    pub fn partition_for_call(&self, proc: &str, params: &[Value]) -> Option<u32> {
        match self.routing().target(proc, params) {
            Target::Partition(p) => Some(p),
            _ => None,
        }
    }

    /// Calls in flight right now.
    pub fn in_flight(&self) -> usize {
        self.inner.max_in_flight - self.inner.window.available_permits()
    }

    /// The build string of the first server.
    pub fn build_string(&self) -> &str {
        &self.inner.connections[0].login.build
    }

    /// Re-reads `@Statistics TOPO` and `@SystemCatalog PROCEDURES`. On any failure routing
    /// falls back to round-robin; returns whether partition-aware routing is on.
    pub async fn refresh_routing(&self) -> bool {
        let mut routing = Routing::default();
        let topo = Invocation::new("@Statistics", 0, vec![Value::from("TOPO"), Value::Int(0)]);
        let ok = match self.system_call(topo, &[STRING, INTEGER]).await {
            Some(r) => routing.apply_topology(&r.tables),
            None => false,
        };
        if ok {
            let procs = Invocation::new("@SystemCatalog", 0, vec![Value::from("PROCEDURES")]);
            if let Some(t) = self.system_call(procs, &[]).await.and_then(|r| r.tables.into_iter().next()) {
                routing.apply_procedures(&t);
            }
        }
        let ok = ok && !routing.procedures.is_empty();
        *lock_keys(&self.inner.partition_keys) = None;
        *self.inner.routing.write().unwrap_or_else(|e| e.into_inner()) = routing;
        ok
    }

    /// A call named a procedure the routing does not know (made after this client
    /// connected) while the client has several nodes to choose from: it goes to any node,
    /// which forwards it, and the routing is read again in the background, at most once a
    /// second, so that later calls go to their leaders.
    fn refresh_routing_soon(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        {
            let mut r = self.inner.refresh.lock().unwrap_or_else(|e| e.into_inner());
            if r.running || r.last.is_some_and(|t| t.elapsed() < ROUTING_REFRESH_INTERVAL) {
                return;
            }
            r.running = true;
        }
        let client = self.clone();
        runtime.spawn(async move {
            client.refresh_routing().await;
            let mut r = client.inner.refresh.lock().unwrap_or_else(|e| e.into_inner());
            *r = RefreshState { running: false, last: Some(std::time::Instant::now()) };
        });
    }

    async fn system_call(&self, inv: Invocation, hints: &[i8]) -> Option<Response> {
        let sent = self.send(inv, hints).await.ok()?;
        sent.wait().await.ok().filter(|r| r.status == status::SUCCESS)
    }

    /// One key per partition, asked once and kept until the routing is refreshed.
    async fn partition_keys(&self) -> Result<PartitionKeys, ClientError> {
        if let Some(keys) = lock_keys(&self.inner.partition_keys).clone() {
            return Ok(keys);
        }
        let keys = Arc::new(self.fetch_partition_keys().await?);
        *lock_keys(&self.inner.partition_keys) = Some(keys.clone());
        Ok(keys)
    }

    async fn fetch_partition_keys(&self) -> Result<Vec<(i32, i64)>, ClientError> {
        let inv = Invocation::new("@GetPartitionKeys", 0, vec![Value::from("INTEGER")]);
        let resp = self.send(inv, &[]).await?.wait().await?;
        if resp.status != status::SUCCESS {
            return Err(ClientError::Failed(format!("@GetPartitionKeys failed: {}", resp.status_string.unwrap_or_default())));
        }
        let table = resp
            .tables
            .first()
            .filter(|t| t.columns.len() == 2)
            .ok_or_else(|| ClientError::Protocol("@GetPartitionKeys must return one table of two columns".into()))?;
        let mut keys = Vec::with_capacity(table.rows.len());
        for row in &table.rows {
            match (row.first(), row.get(1)) {
                (Some(Value::Int(p)), Some(Value::Int(k))) => {
                    let p = i32::try_from(*p).map_err(|_| ClientError::Protocol(format!("partition id {p} out of range")))?;
                    keys.push((p, *k));
                }
                _ => return Err(ClientError::Protocol("@GetPartitionKeys rows must be two integers".into())),
            }
        }
        keys.sort_unstable();
        Ok(keys)
    }

    fn routing(&self) -> std::sync::RwLockReadGuard<'_, Routing> {
        // Routing is replaced whole under the lock; a poisoned lock still holds a valid value.
        self.inner.routing.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `n` slots of the window at once.
    async fn permits(&self, n: usize) -> Result<OwnedSemaphorePermit, ClientError> {
        let n = u32::try_from(n).map_err(|_| ClientError::InvalidCall(format!("{n} window slots")))?;
        self.inner.window.clone().acquire_many_owned(n).await.map_err(|_| ClientError::ConnectionLost("the client is closed".into()))
    }

    /// Takes a window slot, encodes the call and queues it on the right connection.
    async fn send(&self, inv: Invocation, hints: &[i8]) -> Result<Sent, ClientError> {
        let permit = self.permits(1).await?;
        self.send_with(permit, inv, hints)
    }

    /// Encodes the call and queues it on the right connection, in the window slot `permit`.
    fn send_with(&self, permit: OwnedSemaphorePermit, mut inv: Invocation, hints: &[i8]) -> Result<Sent, ClientError> {
        inv.handle = self.inner.next_handle.fetch_add(1, Ordering::Relaxed);
        let mut frame = Vec::new();
        encode_invocation_typed(&inv, hints, &mut frame).map_err(|e| ClientError::InvalidCall(e.message))?;
        if frame.len() - 4 > FRAME_SIZE_MAX_BYTES {
            return Err(ClientError::InvalidCall(format!(
                "the call is {} bytes, over the {FRAME_SIZE_MAX_BYTES}-byte message limit",
                frame.len() - 4
            )));
        }
        let (host, unknown) = {
            let routing = self.routing();
            let target = match inv.partition_destination {
                Some(p) => u32::try_from(p).map(Target::Partition).unwrap_or(Target::Anywhere),
                None => routing.target(&inv.procedure, &inv.params),
            };
            // A routed call is known; with one connection there is nowhere else to send it.
            let unknown = target == Target::Anywhere
                && self.inner.connections.len() > 1
                && routing.ring.is_some()
                && !inv.procedure.starts_with('@')
                && !routing.knows(&inv.procedure);
            (routing.host_for(target), unknown)
        };
        if unknown {
            self.refresh_routing_soon();
        }
        let conn = self.pick(host)?;
        let reply = conn.send(inv.handle, frame)?;
        Ok(Sent { _permit: permit, reply })
    }

    /// The connection to `host` (the leader of the call's partition), else the next open one.
    fn pick(&self, host: Option<i32>) -> Result<&Connection, ClientError> {
        let conns = &self.inner.connections;
        if let Some(host) = host {
            if let Some(c) = conns.iter().find(|c| c.login.host_id == host && c.is_open()) {
                return Ok(c);
            }
        }
        let start = self.inner.round_robin.fetch_add(1, Ordering::Relaxed);
        (0..conns.len())
            .map(|i| &conns[(start + i) % conns.len()])
            .find(|c| c.is_open())
            .or_else(|| conns.first())
            .ok_or_else(|| ClientError::ConnectionLost("no connection".into()))
    }
}

/// One (partition, key) pair per partition: a call with that key runs on that partition.
type PartitionKeys = Arc<Vec<(i32, i64)>>;

/// The partition-key cache is only swapped under the lock; a poisoned lock still holds a
/// valid value.
fn lock_keys(m: &std::sync::Mutex<Option<PartitionKeys>>) -> std::sync::MutexGuard<'_, Option<PartitionKeys>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
