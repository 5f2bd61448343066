//! The PostgreSQL wire protocol (`--pg`): psql and PostgreSQL drivers run SQL and call
//! procedures through the same engine as the VoltDB port. The protocol itself (framing,
//! start-up, the extended-query state machine) is the `pgwire` crate's; this crate maps it
//! onto Lockstep: statements (`statement.rs`), types (`types.rs`), errors and their
//! SQLSTATEs (`errors.rs`), logins (`auth.rs`, SCRAM in `scram.rs`), settings (`settings.rs`), `COPY`
//! (`copy.rs`, `copy_in.rs`), TLS (`tls.rs`), per-connection state (`session.rs`) and the query handlers
//! (`handler.rs`). What works and what does not yet is in `docs/guide/postgres.md`.

pub mod auth;
pub mod catalog;
pub mod copy;
pub mod copy_in;
pub mod errors;
pub mod handler;
pub mod scram;
pub mod session;
pub mod settings;
pub mod socket;
pub mod statement;
pub mod tls;
pub mod types;

use std::sync::Arc;

use bytes::BytesMut;
use lockstep_server::Front;
use pgwire::api::ConnectionManager;
use pgwire::messages::response::ErrorResponse;
use pgwire::messages::Message;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How long the answer to a connection over the limit may take to write.
const REFUSAL_TIMEOUT_MS: u64 = 1_000;
/// After a failed accept (out of file descriptors, usually), wait this long before the next.
const ACCEPT_RETRY_MS: u64 = 50;

/// What every connection shares: the handlers, and the registry of connections that
/// cancel requests look up.
pub struct Handlers {
    pg: Arc<handler::Pg>,
    cancels: Arc<ConnectionManager>,
}

/// Accepts PostgreSQL clients until the task is dropped. Past `--max-connections` of them
/// (counted apart from the VoltDB port's), a new one is told so and closed.
pub async fn serve(listener: TcpListener, front: Arc<Front>) {
    let cancels = Arc::new(ConnectionManager::new());
    let slots = Arc::new(Semaphore::new(front.config.max_connections));
    let handlers = Arc::new(Handlers { pg: handler::Pg::new(front.clone(), cancels.clone()), cancels });
    loop {
        match listener.accept().await {
            Ok((socket, peer)) => {
                let _ = socket.set_nodelay(true);
                match slots.clone().try_acquire_owned() {
                    Ok(permit) => {
                        let handlers = handlers.clone();
                        tokio::spawn(async move {
                            if let Err(e) = socket::run(socket, &handlers).await {
                                tracing::debug!(%peer, "PostgreSQL connection ended: {e}");
                            }
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "PostgreSQL connection refused: {} are open (--max-connections)", front.config.max_connections);
                        tokio::spawn(refuse(socket));
                    }
                }
            }
            Err(e) => {
                tracing::warn!("PostgreSQL accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(ACCEPT_RETRY_MS)).await;
            }
        }
    }
}

/// Answers a connection over the limit with PostgreSQL's "too many connections" and closes
/// it (a client reads an error response at any point of the start-up).
async fn refuse(mut socket: TcpStream) {
    let mut info = errors::error_info(errors::code::TOO_MANY_CONNECTIONS, "sorry, too many clients already (--max-connections)");
    info.severity = pgwire::error::SEVERITY_FATAL.to_owned();
    let mut out = BytesMut::new();
    if ErrorResponse::from(*info).encode(&mut out).is_ok() {
        let _ = tokio::time::timeout(std::time::Duration::from_millis(REFUSAL_TIMEOUT_MS), socket.write_all(&out)).await;
    }
    let _ = socket.shutdown().await;
}
