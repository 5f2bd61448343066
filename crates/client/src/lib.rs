//! The Lockstep client: async, pipelined and partition-aware, over the VoltDB wire protocol.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lockstep_client::ClientError> {
//! use lockstep_client::{Client, ClientConfig};
//! let client = Client::connect("127.0.0.1:21212", ClientConfig::default()).await?;
//! let resp = client.call("@AdHoc", vec!["SELECT 1".into()]).await?;
//! assert_eq!(resp.status, lockstep_client::status::SUCCESS);
//! // Read in place: only the cells asked for are decoded.
//! let view = client.start_call("@AdHoc", vec!["SELECT 1".into()]).await?.wait_view().await?;
//! let one = view.table(0).and_then(|t| t.row(0)).map(|row| row.int(0));
//! # Ok(()) }
//! ```

mod client;
mod connection;
mod error;
pub mod routing;
pub mod tls;

#[cfg(test)]
mod mock;
#[cfg(test)]
mod tests;

pub use client::{Client, ClientConfig, MAX_IN_FLIGHT_DEFAULT, MAX_IN_FLIGHT_LIMIT};
pub use connection::LOGIN_TIMEOUT_MS;
pub use error::ClientError;
pub use lockstep_wire::response::status;
pub use lockstep_wire::{HashScheme, Response, ResponseView, RowView, TableView};
pub use tls::client_tls_config;
