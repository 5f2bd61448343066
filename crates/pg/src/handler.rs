//! The query handlers pgwire calls: the simple query protocol, the extended one (parse,
//! bind, describe, execute, close), how each kind of statement runs (SQL and procedure
//! calls through the engine, `BEGIN`/`COMMIT`/`ROLLBACK` here), and its rows encoded.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::BytesMut;
use futures::{Sink, SinkExt};
use lockstep_core::{DataType, Error, ResultColumn, ResultTable, Value};
use lockstep_engine::{Call, Outcome, Principal};
use lockstep_server::Front;
use pgwire::api::auth::AuthDriver;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{CopyResponse, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionManager, ErrorHandler, Type, DEFAULT_NAME};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::{DataRow, NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Close, Describe, Parse, ParseComplete, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::PgWireBackendMessage;

use crate::errors::{self, code, error_info};
use crate::session::{self, Block, PORTALS_MAX, PREPARED_STATEMENTS_MAX};
use crate::settings::{show, show_columns};
use crate::statement::{self, Arg, Command};
use crate::types;

/// Everything a connection's handlers share.
pub struct Pg {
    pub front: Arc<Front>,
    parser: Arc<Parser>,
    pub(crate) driver: AuthDriver<crate::auth::Params, Arc<Principal>>,
}

impl Pg {
    pub fn new(front: Arc<Front>, cancels: Arc<ConnectionManager>) -> Arc<Pg> {
        let parser = Arc::new(Parser { front: front.clone() });
        let driver = AuthDriver::new(crate::auth::Params).with_connection_manager(cancels);
        Arc::new(Pg { front, parser, driver })
    }
}

/// A statement parsed for the extended protocol: what it is, the types of its `$n`
/// parameters as Lockstep infers them, and the columns of its rows (None: it returns none).
#[derive(Clone, Debug)]
pub struct Statement {
    pub command: Command,
    pub params: Vec<Option<DataType>>,
    /// Nothing converts the parameters Lockstep could not type (a Lua procedure's): they
    /// are `unknown`, and read as literals.
    pub untyped: bool,
    pub columns: Option<Arc<[ResultColumn]>>,
}

pub struct Parser {
    front: Arc<Front>,
}

impl Parser {
    fn describe(&self, command: Command) -> Result<Statement, Error> {
        let catalog = self.front.engine.catalog();
        let (params, columns, untyped) = match &command {
            Command::Sql(sql) => {
                let p = lockstep_sql::prepare(&catalog, sql)?;
                let columns = p.read_only.then(|| Arc::from(p.columns.clone()));
                (p.param_types.clone(), columns, false)
            }
            Command::Call { procedure, args, .. } => describe_call(&self.front, procedure, args)?,
            Command::Show(name) => (Vec::new(), Some(show_columns(name)), false),
            _ => (Vec::new(), None, false),
        };
        Ok(Statement { command, params, untyped, columns })
    }
}

/// A procedure call's parameter types and columns, and whether its untyped parameters are
/// read as literals: types and columns are known for procedures whose body is one SQL
/// statement and for the default ones (`T.insert`; planned here to learn them); a Lua
/// procedure's parameters are read as literals (unless the client gives their types) and
/// its rows are not described.
fn describe_call(
    front: &Front,
    procedure: &str,
    args: &[Arg],
) -> Result<(Vec<Option<DataType>>, Option<Arc<[ResultColumn]>>, bool), Error> {
    let view = front.engine.shared().view();
    let info = lockstep_core::get_ignoring_case(&view.procs, procedure)
        .ok_or_else(|| Error::unexpected(format!("Procedure {procedure} was not found")))?;
    let sql = match view.catalog.procedure(&info.name).map(|p| &p.body) {
        Some(lockstep_core::ProcedureBody::Sql(sql)) => Some(sql.clone()),
        Some(_) => None,
        None => default_procedure_sql(&view.catalog, &info.name),
    };
    let planned = sql.map(|sql| lockstep_sql::prepare(&view.catalog, &sql)).transpose()?;
    let pg_count = args.iter().filter_map(|a| if let Arg::Param(n) = a { Some(*n) } else { None }).max().unwrap_or(0);
    let mut params = vec![None; pg_count];
    for (position, arg) in args.iter().enumerate() {
        if let (Arg::Param(n), Some(p)) = (arg, &planned) {
            params[n - 1] = params[n - 1].or(p.param_types.get(position).copied().flatten());
        }
    }
    let untyped = planned.is_none();
    let columns = planned.filter(|p| p.read_only).map(|p| Arc::from(p.columns.clone()));
    Ok((params, columns, untyped))
}

/// The statement a default procedure (`TABLE.insert`, `.upsert`, `.update`, `.delete`,
/// `.select`) runs, for describing its parameters and rows: the same shapes as the
/// engine's registry builds (the engine runs the call; this only types it). None for
/// any other name.
fn default_procedure_sql(catalog: &lockstep_core::Catalog, name: &str) -> Option<String> {
    let (table, op) = name.rsplit_once('.')?;
    let t = catalog.table(table)?;
    let quote = lockstep_sql::quote_ident;
    let columns: Vec<String> = t.columns.iter().map(|c| quote(&c.name)).collect();
    let marks = vec!["?"; columns.len()].join(", ");
    let key = || -> Option<String> {
        let pk = t.primary_key()?;
        Some(pk.columns.iter().map(|&i| format!("{} = ?", quote(&t.columns[i].name))).collect::<Vec<_>>().join(" AND "))
    };
    let table = quote(&t.name);
    Some(match op.to_ascii_lowercase().as_str() {
        "insert" => format!("INSERT INTO {table} VALUES ({marks})"),
        "upsert" => format!("UPSERT INTO {table} VALUES ({marks})"),
        "select" => format!("SELECT * FROM {table} WHERE {}", key()?),
        "delete" => format!("DELETE FROM {table} WHERE {}", key()?),
        "update" => {
            let set = columns.iter().map(|c| format!("{c} = ?")).collect::<Vec<_>>().join(", ");
            format!("UPDATE {table} SET {set} WHERE {}", key()?)
        }
        _ => return None,
    })
}

#[async_trait]
impl QueryParser for Parser {
    type Statement = Statement;

    async fn parse_sql<C>(&self, _client: &C, sql: &str, _types: &[Option<Type>]) -> PgWireResult<Option<Statement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let statements = lockstep_sql::split_statements(sql).map_err(|e| errors::to_pgwire(&e))?;
        if statements.len() > 1 {
            return Err(user_error(code::SYNTAX_ERROR, "cannot insert multiple commands into a prepared statement"));
        }
        let Some(text) = statements.first() else { return Ok(None) };
        let command = statement::classify(text, |name| is_procedure(&self.front, name)).map_err(|e| errors::to_pgwire(&e))?;
        self.describe(command).map(Some).map_err(|e| errors::to_pgwire(&e))
    }

    fn get_parameter_types(&self, stmt: &Statement) -> PgWireResult<Vec<Type>> {
        Ok(stmt.params.iter().map(|t| types::param_type(*t, stmt.untyped)).collect())
    }

    fn get_result_schema(&self, stmt: &Statement, format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        let text = Format::UnifiedText;
        Ok(stmt.columns.as_deref().map(|c| fields(c, format.unwrap_or(&text))).unwrap_or_default())
    }
}

fn is_procedure(front: &Front, name: &str) -> bool {
    lockstep_core::get_ignoring_case(&front.engine.shared().view().procs, name).is_some()
}

/// The row description of `columns`, each in the format the client asked for.
fn fields(columns: &[ResultColumn], format: &Format) -> Vec<FieldInfo> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            FieldInfo::new(c.name.to_string(), None, None, types::pg_type(c.ty), format.format_for(i))
                .with_type_size(types::type_size(c.ty))
        })
        .collect()
}

pub(crate) fn user_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(error_info(code, message))
}

/// What one statement produced.
pub(crate) enum Out {
    Rows {
        columns: Arc<[ResultColumn]>,
        rows: Vec<Vec<Value>>,
        tag: &'static str,
    },
    Done(String),
    BlockStart,
    BlockEnd(&'static str),
    /// The client may send the rows of a COPY, this many columns each.
    CopyIn(usize),
}

impl Pg {
    /// Runs one statement with its parameters; notices go to the client as they arise.
    async fn run<C>(&self, client: &mut C, command: &Command, params: Vec<Value>) -> Result<Vec<Out>, Box<ErrorInfo>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let block = session::with(client, |s| s.block);
        if block == Block::Failed && !matches!(command, Command::Commit | Command::Rollback) {
            return Err(error_info(
                code::IN_FAILED_TRANSACTION,
                "current transaction is aborted, commands ignored until end of transaction block",
            ));
        }
        let result = self.run_in_block(client, command, params).await;
        if result.is_err() {
            fail_block(client);
        }
        result
    }

    async fn run_in_block<C>(&self, client: &mut C, command: &Command, params: Vec<Value>) -> Result<Vec<Out>, Box<ErrorInfo>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        match command {
            Command::Empty => Ok(Vec::new()),
            Command::Begin | Command::Commit | Command::Rollback => self.transaction(client, command).await,
            Command::Set { name, value } => self.set(client, name.as_deref(), value.as_deref()).await,
            Command::ResetAll => {
                session::with(client, |s| s.settings.clear());
                Ok(vec![Out::Done("RESET".into())])
            }
            Command::Show(name) => show(client, name),
            Command::Call { procedure, args, select } => {
                let read_only =
                    lockstep_core::get_ignoring_case(&self.front.engine.shared().view().procs, procedure).is_none_or(|p| p.read_only);
                admit(client, !read_only)?;
                let values = call_args(args, params)?;
                let outcome = self.submit(client, procedure.clone(), values).await;
                let tables = success(outcome)?;
                let tag = if *select { "SELECT" } else { "CALL" };
                if tables.is_empty() {
                    return Ok(vec![Out::Done("CALL".into())]);
                }
                Ok(tables.into_iter().map(|t| Out::Rows { columns: t.columns, rows: t.rows, tag }).collect())
            }
            Command::Copy(spec) => {
                admit(client, true)?;
                let state = self.start_copy(spec)?;
                let columns = state.columns;
                session::with(client, |s| s.copy = Some(Box::new(state)));
                Ok(vec![Out::CopyIn(columns)])
            }
            Command::Catalog(sql) => match crate::catalog::answer(sql, &self.front.engine.catalog()) {
                Some((columns, rows)) => Ok(vec![Out::Rows { columns, rows, tag: "SELECT" }]),
                None => Err(error_info(
                    code::UNDEFINED_TABLE,
                    "PostgreSQL's catalog (pg_catalog) is not there: only the queries of psql's \\d, \\dt, \\dv, \\d NAME, \\df and \\dn are answered",
                )),
            },
            Command::Ddl(sql) => {
                admit(client, true)?;
                success(self.adhoc(client, sql, params).await)?;
                Ok(vec![Out::Done(statement::command_tag(sql))])
            }
            Command::Sql(sql) => {
                let writes = statement::writes(sql);
                admit(client, writes)?;
                let tables = success(self.adhoc(client, sql, params).await)?;
                let Some(table) = tables.into_iter().next() else { return Ok(vec![Out::Done(statement::command_tag(sql))]) };
                if writes {
                    return Ok(vec![Out::Done(write_tag(sql, &table))]);
                }
                Ok(vec![Out::Rows { columns: table.columns, rows: table.rows, tag: "SELECT" }])
            }
        }
    }

    /// `BEGIN`, `COMMIT`, `ROLLBACK`: see `docs/guide/postgres.md` for why a block may
    /// change data with one statement only.
    async fn transaction<C>(&self, client: &mut C, command: &Command) -> Result<Vec<Out>, Box<ErrorInfo>>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let block = session::with(client, |s| s.block);
        match (command, block) {
            (Command::Begin, Block::None) => {
                session::with(client, |s| s.block = Block::Open { wrote: false });
                notice(client, "NOTICE", "Lockstep runs every statement as its own transaction: in this block, the first statement that changes data commits when it runs, and a second one is refused").await?;
                Ok(vec![Out::BlockStart])
            }
            (Command::Begin, _) => {
                notice(client, "WARNING", "there is already a transaction in progress").await?;
                Ok(vec![Out::Done("BEGIN".into())])
            }
            (Command::Commit, Block::Open { .. }) => {
                session::with(client, |s| s.block = Block::None);
                Ok(vec![Out::BlockEnd("COMMIT")])
            }
            (Command::Commit | Command::Rollback, Block::Failed) => {
                session::with(client, |s| s.block = Block::None);
                Ok(vec![Out::BlockEnd("ROLLBACK")])
            }
            (Command::Rollback, Block::Open { wrote }) => {
                session::with(client, |s| s.block = Block::None);
                if wrote {
                    notice(client, "WARNING", "ROLLBACK cannot undo the change made in this block: Lockstep committed it when it ran")
                        .await?;
                }
                Ok(vec![Out::BlockEnd("ROLLBACK")])
            }
            (_, _) => {
                notice(client, "WARNING", "there is no transaction in progress").await?;
                Ok(vec![Out::Done(if matches!(command, Command::Commit) { "COMMIT" } else { "ROLLBACK" }.into())])
            }
        }
    }

    /// Sends a call to the engine and waits for its outcome, as the VoltDB front end does.
    async fn submit(&self, client: &(impl ClientInfo + ?Sized), procedure: String, params: Vec<Value>) -> Outcome {
        if let Some(why) = self.front.unavailable() {
            return Outcome::error(Error::unavailable(why));
        }
        let principal = session::with(client, |s| s.principal.clone());
        let adhoc = procedure == "@AdHoc";
        let call = Call { procedure, params, partition_destination: None, all_partition: false, timeout_ms: None, principal };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let started = std::time::Instant::now();
        self.front.engine.submit(call, Box::new(move |o| drop(tx.send(o))));
        let outcome = rx.await.unwrap_or_else(|_| Outcome::error(Error::unexpected("the engine dropped the call without an answer")));
        let now = std::time::Instant::now();
        self.front.engine.shared().stats.latency.record_at(now, now.saturating_duration_since(started));
        if adhoc {
            self.front.subscribers.catalog_may_have_changed(&self.front.engine);
        }
        outcome
    }

    pub(crate) async fn adhoc(&self, client: &(impl ClientInfo + ?Sized), sql: &str, params: Vec<Value>) -> Outcome {
        let mut all = Vec::with_capacity(params.len() + 1);
        all.push(Value::Str(sql.into()));
        all.extend(params);
        self.submit(client, "@AdHoc".into(), all).await
    }
}

/// An error inside a `BEGIN` block fails the block.
pub(crate) fn fail_block(client: &(impl ClientInfo + ?Sized)) {
    session::with(client, |s| {
        if matches!(s.block, Block::Open { .. }) {
            s.block = Block::Failed;
        }
    });
}

/// Applies the block's rule before a statement runs: one that changes data is the block's
/// first and last such statement.
fn admit(client: &(impl ClientInfo + ?Sized), writes: bool) -> Result<(), Box<ErrorInfo>> {
    if !writes {
        return Ok(());
    }
    session::with(client, |s| {
        match s.block {
        Block::Open { wrote: true } => Err(error_info(
            code::FEATURE_NOT_SUPPORTED,
            "Lockstep runs every statement as its own transaction, so a transaction block may change data with one statement only, and the earlier one has committed: send ROLLBACK, then run the changes without BEGIN, or in one stored procedure to make them atomic",
        )),
        Block::Open { wrote: false } => {
            s.block = Block::Open { wrote: true };
            Ok(())
        }
        _ => Ok(()),
    }
    })
}

/// The tables of a successful outcome, or its error with a SQLSTATE.
pub(crate) fn success(o: Outcome) -> Result<Vec<ResultTable>, Box<ErrorInfo>> {
    if o.is_success() {
        return Ok(o.tables);
    }
    let message = o.status_string.unwrap_or_else(|| "the call failed".into());
    Err(error_info(errors::sqlstate(errors::kind_from_status(o.status), &message), message))
}

/// `INSERT 0 n`, `UPDATE n`, … from the count a DML statement returns.
fn write_tag(sql: &str, table: &ResultTable) -> String {
    let n = match table.rows.first().and_then(|r| r.first()) {
        Some(Value::Int(n)) => *n,
        _ => 0,
    };
    match statement::command_tag(sql).as_str() {
        "INSERT" | "UPSERT" => format!("INSERT 0 {n}"),
        "TRUNCATE" => "TRUNCATE TABLE".into(),
        other => format!("{other} {n}"),
    }
}

/// A `CALL`'s arguments with the client's parameters put in.
fn call_args(args: &[Arg], params: Vec<Value>) -> Result<Vec<Value>, Box<ErrorInfo>> {
    args.iter()
        .map(|a| match a {
            Arg::Value(v) => Ok(v.clone()),
            Arg::Param(n) => {
                params.get(n - 1).cloned().ok_or_else(|| error_info(code::PROTOCOL_VIOLATION, format!("there is no parameter ${n}")))
            }
        })
        .collect()
}

async fn notice<C>(client: &mut C, severity: &str, message: &str) -> Result<(), Box<ErrorInfo>>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let info = ErrorInfo::new(severity.to_string(), "00000".to_string(), message.to_string());
    client.feed(PgWireBackendMessage::NoticeResponse(info.into())).await.map_err(|e| internal(PgWireError::from(e)))
}

pub(crate) fn internal(e: PgWireError) -> Box<ErrorInfo> {
    error_info(code::INTERNAL_ERROR, e.to_string())
}

/// Rows as pgwire's data-row stream, each value in its column's format.
fn query_response(columns: &[ResultColumn], rows: Vec<Vec<Value>>, format: &Format, tag: &str) -> QueryResponse {
    let schema = Arc::new(fields(columns, format));
    let types: Vec<(DataType, FieldFormat)> = columns.iter().enumerate().map(|(i, c)| (c.ty, format.format_for(i))).collect();
    let encoded: Vec<PgWireResult<DataRow>> = rows.into_iter().map(|row| encode_row(&types, &row)).collect();
    let mut response = QueryResponse::new(schema, futures::stream::iter(encoded));
    response.set_command_tag(tag);
    response
}

fn encode_row(types: &[(DataType, FieldFormat)], row: &[Value]) -> PgWireResult<DataRow> {
    let mut data = BytesMut::with_capacity(16 * row.len());
    for ((ty, format), v) in types.iter().zip(row) {
        types::encode_field(&mut data, *ty, v, *format).map_err(|e| errors::to_pgwire(&e))?;
    }
    Ok(DataRow::new(data, row.len() as i16))
}

fn to_response(out: Out, format: &Format) -> Response {
    match out {
        Out::Rows { columns, rows, tag } => Response::Query(query_response(&columns, rows, format, tag)),
        Out::Done(tag) => Response::Execution(Tag::new(&tag)),
        Out::BlockStart => Response::TransactionStart(Tag::new("BEGIN")),
        Out::BlockEnd(tag) => Response::TransactionEnd(Tag::new(tag)),
        Out::CopyIn(columns) => Response::CopyIn(CopyResponse::new(0, columns, futures::stream::empty())),
    }
}

#[async_trait]
impl SimpleQueryHandler for Pg {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = match lockstep_sql::split_statements(query) {
            Ok(s) => s,
            Err(e) => return Ok(vec![Response::Error(errors::from_lockstep(&e))]),
        };
        let mut responses = Vec::with_capacity(statements.len());
        // Like PostgreSQL, the statements after a failed one are not run.
        for (i, text) in statements.iter().enumerate() {
            let outs = match statement::classify(text, |name| is_procedure(&self.front, name)) {
                // Its rows come after this answer: a statement after it would run first.
                Ok(Command::Copy(_)) if i + 1 < statements.len() => {
                    Err(error_info(code::FEATURE_NOT_SUPPORTED, "COPY … FROM STDIN must be the last statement of a query string"))
                }
                Ok(command) => self.run(client, &command, Vec::new()).await,
                Err(e) => Err(errors::from_lockstep(&e)),
            };
            match outs {
                Ok(outs) => responses.extend(outs.into_iter().map(|o| to_response(o, &Format::UnifiedText))),
                Err(e) => {
                    responses.push(Response::Error(e));
                    break;
                }
            }
        }
        if statements.is_empty() {
            responses.push(Response::EmptyQuery);
        }
        Ok(responses)
    }
}

#[async_trait]
impl ExtendedQueryHandler for Pg {
    type Statement = Statement;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        self.parser.clone()
    }

    async fn on_parse<C>(&self, client: &mut C, message: Parse) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.clone().unwrap_or_else(|| DEFAULT_NAME.to_owned());
        reserve_name(client, &name, true)?;
        match StoredStatement::parse(client, &message, self.parser.clone()).await? {
            Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
            None => client.portal_store().put_empty_statement(&name),
        }
        client.send(PgWireBackendMessage::ParseComplete(ParseComplete::new())).await?;
        Ok(())
    }

    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement_name = message.statement_name.as_deref().unwrap_or(DEFAULT_NAME);
        let portal_name = message.portal_name.as_deref().unwrap_or(DEFAULT_NAME).to_owned();
        reserve_name(client, &portal_name, false)?;
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) if message.parameters.is_empty() => client.portal_store().put_empty_portal(&portal_name),
            Some(Entry::Empty) => {
                return Err(user_error(code::PROTOCOL_VIOLATION, "bind message supplies parameters to an empty statement"))
            }
            None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
        }
        client.send(PgWireBackendMessage::BindComplete(BindComplete::new())).await?;
        Ok(())
    }

    /// Describe, answered here: a statement that returns no rows is described by NoData
    /// (pgwire sends an empty row description when it has parameters, which JDBC reads as
    /// a result set).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let (params, fields) = match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => match client.portal_store().get_statement(name) {
                Some(Entry::Value(stored)) => {
                    let described = self.parser.get_parameter_types(&stored.statement)?;
                    let types = (0..described.len().max(stored.parameter_types.len()))
                        .map(|i| {
                            let ty = stored.parameter_types.get(i).cloned().flatten().or_else(|| described.get(i).cloned());
                            types::described_param_type(ty)
                        })
                        .collect::<Vec<Type>>();
                    (Some(types), self.parser.get_result_schema(&stored.statement, None)?)
                }
                Some(Entry::Empty) => (Some(Vec::new()), Vec::new()),
                None => return Err(PgWireError::StatementNotFound(name.to_owned())),
            },
            TARGET_TYPE_BYTE_PORTAL => match client.portal_store().get_portal(name) {
                Some(Entry::Value(portal)) => {
                    (None, self.parser.get_result_schema(&portal.statement.statement, Some(&portal.result_column_format))?)
                }
                Some(Entry::Empty) => (None, Vec::new()),
                None => return Err(PgWireError::PortalNotFound(name.to_owned())),
            },
            other => return Err(PgWireError::InvalidTargetType(other)),
        };
        if let Some(types) = params {
            client
                .send(PgWireBackendMessage::ParameterDescription(ParameterDescription::new(types.iter().map(Type::oid).collect())))
                .await?;
        }
        if fields.is_empty() {
            client.send(PgWireBackendMessage::NoData(NoData::new())).await?;
        } else {
            client.send(PgWireBackendMessage::RowDescription(RowDescription::new(fields.iter().map(Into::into).collect()))).await?;
        }
        Ok(())
    }

    async fn on_close<C>(&self, client: &mut C, message: Close) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                client.portal_store().rm_statement(name);
                session::with(client, |s| s.statements.remove(name));
            }
            TARGET_TYPE_BYTE_PORTAL => {
                client.portal_store().rm_portal(name);
                session::with(client, |s| s.portals.remove(name));
            }
            _ => {}
        }
        client.send(PgWireBackendMessage::CloseComplete(pgwire::messages::extendedquery::CloseComplete::new())).await?;
        Ok(())
    }

    async fn do_query<C>(&self, client: &mut C, portal: &Portal<Statement>, _max_rows: usize) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let stmt = &portal.statement.statement;
        // Failures are errors, not error responses: pgwire then skips what the client sent
        // after them until Sync, as PostgreSQL does.
        let params = bound_params(portal).map_err(PgWireError::UserError)?;
        let outs = self.run(client, &stmt.command, params).await.map_err(PgWireError::UserError)?;
        // One result per execution: a procedure's first table, and only when its rows
        // were described (the client reads them with that description).
        let out = match outs.into_iter().next() {
            None => return Ok(Response::EmptyQuery),
            Some(Out::Rows { .. }) if stmt.columns.is_none() => Out::Done("CALL".into()),
            Some(o) => o,
        };
        Ok(to_response(out, &portal.result_column_format))
    }
}

/// Counts a new named statement or portal against the connection's limit.
fn reserve_name(client: &(impl ClientInfo + ?Sized), name: &str, statement: bool) -> PgWireResult<()> {
    if name == DEFAULT_NAME {
        return Ok(());
    }
    let (what, max) = if statement { ("prepared statements", PREPARED_STATEMENTS_MAX) } else { ("portals", PORTALS_MAX) };
    let admitted = session::with(client, |s| {
        let set = if statement { &mut s.statements } else { &mut s.portals };
        if set.contains(name) {
            return true;
        }
        if set.len() >= max {
            return false;
        }
        set.insert(name.to_string());
        true
    });
    if admitted {
        Ok(())
    } else {
        Err(user_error(code::PROGRAM_LIMIT, format!("a connection may hold at most {max} named {what}: close (DEALLOCATE) some first")))
    }
}

/// The portal's parameters as Lockstep values, each decoded by its type (the client's,
/// else the one described) and format.
fn bound_params(portal: &Portal<Statement>) -> Result<Vec<Value>, Box<ErrorInfo>> {
    let stored = &portal.statement;
    let expected = stored.statement.params.len().max(stored.parameter_types.len());
    if portal.parameters.len() != expected {
        return Err(error_info(
            code::PROTOCOL_VIOLATION,
            format!("bind message supplies {} parameters, but the prepared statement requires {expected}", portal.parameters.len()),
        ));
    }
    portal
        .parameters
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            let ty = stored
                .parameter_types
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| types::param_type(stored.statement.params.get(i).copied().flatten(), stored.statement.untyped));
            types::decode_param(bytes.as_deref(), &ty, portal.parameter_format.format_for(i)).map_err(|e| errors::from_lockstep(&e))
        })
        .collect()
}

/// Rewrites the errors pgwire makes itself where Lockstep has more to say.
pub struct Errors;

impl ErrorHandler for Errors {
    fn on_error<C: ClientInfo>(&self, _client: &C, error: &mut PgWireError) {
        if matches!(error, PgWireError::QueryCanceled) {
            *error = user_error(
                code::QUERY_CANCELED,
                "canceling statement due to user request: the answer is no longer awaited, but the statement runs on to its end (or the query timeout) in Lockstep, and a change it makes stands",
            );
        }
    }
}
