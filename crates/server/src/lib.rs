//! Network front ends. For now the VoltDB wire protocol on TCP: accept connections, log
//! them in, decode invocations, hand them to the engine, and write the answers back.

pub mod clients;
pub mod config;
pub mod connection;
pub mod push;
pub mod security;

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use lockstep_engine::Engine;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};

pub use config::ServerConfig;

/// Connections accepted at once; more wait in the listen backlog.
pub const CONNECTIONS_MAX: usize = 1000;

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
    /// Users, login checks and TLS of the client port.
    pub security: security::Security,
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
            security,
        })
    }

    fn connection_id(&self) -> i64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// Accepts connections until `stop` completes or a client calls `@Shutdown`.
pub async fn serve(listener: TcpListener, front: Arc<Front>, stop: impl Future<Output = ()>) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            _ = &mut stop => break,
            _ = front.shutdown.notified() => break,
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let accepted = tokio::select! {
            _ = &mut stop => break,
            _ = front.shutdown.notified() => break,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((socket, peer)) => {
                let front = front.clone();
                let id = front.connection_id();
                tokio::spawn(async move {
                    connection::run(socket, peer, id, front).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}
