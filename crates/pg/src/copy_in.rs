//! `COPY … FROM STDIN` on a connection: the table's columns looked up, the rows read as
//! the copy data arrives (`copy.rs`) and inserted a batch of single-row calls at a time.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use lockstep_core::Value;
use pgwire::api::copy::CopyHandler;
use pgwire::api::results::Tag;
use pgwire::api::ClientInfo;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyFail};
use pgwire::messages::PgWireBackendMessage;

use crate::copy::{CopyIn, RowReader, COPY_BATCH_ROWS};
use crate::errors::{self, code, error_info};
use crate::handler::{fail_block, success, user_error, Pg};
use crate::session;

/// A `COPY … FROM STDIN` under way: its reader, the statement that inserts one row, how
/// many rows went in, and the first failure (after which the rest of the data is dropped).
pub struct CopyState {
    reader: RowReader,
    insert: String,
    pub(crate) columns: usize,
    table: String,
    loaded: u64,
    failed: Option<Box<ErrorInfo>>,
}

impl Pg {
    pub(crate) fn start_copy(&self, spec: &CopyIn) -> Result<CopyState, Box<ErrorInfo>> {
        let catalog = self.front.engine.catalog();
        let table =
            catalog.table(&spec.table).ok_or_else(|| error_info(code::UNDEFINED_TABLE, format!("object not found: {}", spec.table)))?;
        let indexes: Vec<usize> = match &spec.columns {
            None => (0..table.columns.len()).collect(),
            Some(names) => names
                .iter()
                .map(|n| {
                    table
                        .column_index(n)
                        .ok_or_else(|| error_info(code::UNDEFINED_COLUMN, format!("table {} has no column {n}", table.name)))
                })
                .collect::<Result<_, _>>()?,
        };
        let names: Vec<&str> = indexes.iter().map(|&i| table.columns[i].name.as_str()).collect();
        let marks = vec!["?"; names.len()].join(", ");
        let insert = format!("INSERT INTO {} ({}) VALUES ({marks})", table.name, names.join(", "));
        let types = indexes.iter().map(|&i| table.columns[i].ty).collect();
        Ok(CopyState {
            reader: RowReader::new(spec.clone(), types),
            insert,
            columns: indexes.len(),
            table: table.name.clone(),
            loaded: 0,
            failed: None,
        })
    }

    /// Inserts rows, a batch at a time, each row its own call (so each goes to its
    /// partition), the calls of a batch in flight together. Stops at the first failure.
    async fn load(&self, client: &(impl ClientInfo + ?Sized), state: &mut CopyState, rows: Vec<Vec<Value>>) {
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() && state.failed.is_none() {
            let batch: Vec<Vec<Value>> = rows.by_ref().take(COPY_BATCH_ROWS).collect();
            let calls = batch.into_iter().map(|row| self.adhoc(client, &state.insert, row));
            for outcome in futures::future::join_all(calls).await {
                match success(outcome) {
                    Ok(_) => state.loaded += 1,
                    Err(mut e) if state.failed.is_none() => {
                        e.message = format!(
                            "COPY {}, row {}: {} ({} rows before it were loaded and stay)",
                            state.table,
                            state.loaded + 1,
                            e.message,
                            state.loaded
                        );
                        state.failed = Some(e);
                    }
                    Err(_) => {}
                }
            }
        }
    }
}

/// The rows of a COPY arrive here; the statement ends at CopyDone (or CopyFail).
#[async_trait]
impl CopyHandler for Pg {
    async fn on_copy_data<C>(&self, client: &mut C, data: CopyData) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(mut state) = session::with(client, |s| s.copy.take()) else {
            return Err(user_error(code::PROTOCOL_VIOLATION, "COPY data arrived outside a COPY"));
        };
        if state.failed.is_none() {
            match state.reader.feed(&data.data) {
                Ok(rows) => self.load(client, &mut state, rows).await,
                Err(e) => state.failed = Some(errors::from_lockstep(&e)),
            }
        }
        session::with(client, |s| s.copy = Some(state));
        Ok(())
    }

    async fn on_copy_done<C>(&self, client: &mut C, _done: CopyDone) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(mut state) = session::with(client, |s| s.copy.take()) else {
            return Err(user_error(code::PROTOCOL_VIOLATION, "COPY done outside a COPY"));
        };
        if state.failed.is_none() {
            match state.reader.finish() {
                Ok(rows) => self.load(client, &mut state, rows).await,
                Err(e) => state.failed = Some(errors::from_lockstep(&e)),
            }
        }
        if let Some(e) = state.failed {
            fail_block(client);
            return Err(PgWireError::UserError(e));
        }
        client.send(PgWireBackendMessage::CommandComplete(Tag::new("COPY").with_rows(state.loaded as usize).into())).await?;
        Ok(())
    }

    async fn on_copy_fail<C>(&self, client: &mut C, fail: CopyFail) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let loaded = session::with(client, |s| s.copy.take()).map_or(0, |c| c.loaded);
        fail_block(client);
        user_error(code::QUERY_CANCELED, format!("COPY from stdin failed: {} ({loaded} rows before it were loaded and stay)", fail.message))
    }
}
