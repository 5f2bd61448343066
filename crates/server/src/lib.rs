//! Network front ends: the VoltDB wire protocol on TCP (accept connections, log them in,
//! decode invocations, hand them to the engine, and write the answers back) and the HTTP
//! port (`http.rs`: VoltDB's JSON API, Prometheus' `/metrics` and the web console, `console.rs`). In a
//! cluster (`cluster.rs`) the server is one node, joined to the others through the engine's
//! cluster hooks.

pub mod clients;
pub mod cluster;
pub mod config;
pub mod connection;
pub mod console;
pub mod dispatch;
pub mod http;
pub mod json;
pub mod metrics;
mod outbox;
pub mod push;
pub mod security;

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use lockstep_core::throttle::Throttle;
use lockstep_engine::Engine;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};

pub use config::ServerConfig;

/// Refusals being written at once; beyond them a connection over the limit is just closed.
const REFUSALS_IN_PROGRESS_MAX: usize = 64;
/// Refused connections logged per window; the rest are counted.
static REFUSED_LOG: Throttle = Throttle::new(5, std::time::Duration::from_secs(60));

/// State every connection shares.
pub struct Front {
    pub engine: Arc<Engine>,
    pub config: ServerConfig,
    next_connection_id: AtomicI64,
    /// Woken by `@Shutdown`.
    pub shutdown: Notify,
    /// Connections that called `@Subscribe("TOPOLOGY")`, told when the catalog changes.
    pub subscribers: push::Subscribers,
    /// In-flight windows of the open connections (`@Statistics LIVECLIENTS`).
    pub live: clients::LiveClients,
    /// The server-wide budget for large frames, in KiB (see `connection::LARGE_FRAME_BYTES`).
    pub large_requests: Arc<Semaphore>,
    /// Users, login checks and TLS of the client port.
    pub security: security::Security,
    /// Set when this server is a node of a cluster: while the node does not serve (cut off
    /// from the majority), calls are refused.
    pub cluster: std::sync::OnceLock<Arc<cluster::ClusterGlue>>,
    /// Calls by procedure, latencies and HTTP requests, for `/metrics`.
    pub metrics: metrics::Metrics,
}

impl Front {
    /// A front end with security off and no TLS, whatever `config.security` says; a server
    /// builds its `Security` from the configuration and uses `with_security`.
    pub fn new(engine: Arc<Engine>, config: ServerConfig) -> Arc<Front> {
        Self::with_security(engine, config, security::Security::off())
    }

    pub fn with_security(engine: Arc<Engine>, config: ServerConfig, security: security::Security) -> Arc<Front> {
        let subscribers = push::Subscribers::new(engine.catalog().version);
        Arc::new(Front {
            engine,
            config,
            next_connection_id: AtomicI64::new(1),
            shutdown: Notify::new(),
            subscribers,
            live: Default::default(),
            large_requests: Arc::new(Semaphore::new(connection::LARGE_REQUESTS_KIB_MAX)),
            security,
            cluster: std::sync::OnceLock::new(),
            metrics: metrics::Metrics::default(),
        })
    }

    /// Why calls are refused now (a cluster node that does not serve), or None.
    pub fn unavailable(&self) -> Option<String> {
        self.cluster.get().and_then(|c| c.refusal())
    }

    fn connection_id(&self) -> i64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Connections accepted since the server started.
    fn connections_opened(&self) -> u64 {
        self.next_connection_id.load(Ordering::Relaxed).saturating_sub(1) as u64
    }
}

/// Accepts connections until `stop` completes or a client calls `@Shutdown`. Past
/// `max_connections`, a new connection is answered "Server has too many connections".
pub async fn serve(listener: TcpListener, front: Arc<Front>, stop: impl Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(front.config.max_connections));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_PROGRESS_MAX));
    let releaser = tokio::spawn(release_memory_while_over_the_limit(front.clone()));
    let pusher = tokio::spawn(push_changes(front.clone()));
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            _ = &mut stop => break,
            _ = front.shutdown.notified() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((socket, peer)) => match slots.clone().try_acquire_owned() {
                Ok(permit) => {
                    let front = front.clone();
                    let id = front.connection_id();
                    tokio::spawn(async move {
                        connection::run(socket, peer, id, front).await;
                        drop(permit);
                    });
                }
                Err(_) => {
                    if let Some(suppressed) = REFUSED_LOG.admit() {
                        tracing::warn!(%peer, suppressed, "connection refused: {} connections are open (--max-connections)", front.config.max_connections);
                    }
                    if let Ok(permit) = refusals.clone().try_acquire_owned() {
                        tokio::spawn(async move {
                            connection::refuse(socket).await;
                            drop(permit);
                        });
                    }
                }
            },
            Err(e) => {
                // Out of file descriptors, usually: wait for connections to close.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    releaser.abort();
    pusher.abort();
}

/// Tells subscribed connections what changed (`push::Subscribers::refresh`).
async fn push_changes(front: Arc<Front>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(push::CHANGE_CHECK_MS));
    loop {
        tick.tick().await;
        front.subscribers.refresh(&front.engine, front.connections_opened());
    }
}

/// While memory is over the limit, hands back what the front end's threads freed: a call's
/// parameters are allocated here and freed by a site, and the allocator returns such
/// memory only through the thread that allocated it.
async fn release_memory_while_over_the_limit(front: Arc<Front>) {
    let shared = front.engine.shared().clone();
    let Some(release) = shared.config.release_memory else { return };
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(200));
    loop {
        tick.tick().await;
        if shared.memory.refuses_writes() {
            release();
        }
    }
}
