//! One client connection: login, then a reader that decodes invocations and submits them,
//! and a writer that batches answers into few socket writes. A connection with too many
//! calls (or too many request bytes) in flight is not read until answers drain
//! (backpressure through TCP, as VoltDB does); a malformed frame closes only this connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use lockstep_core::{Error, Value};
use lockstep_engine::{auth, sysprocs, Call, Outcome, Principal};
use lockstep_wire::{
    decode_frame, decode_frame_with_limit, decode_invocation, decode_login_request, encode_login_response, encode_response, LoginError,
    LoginResponse, LoginSuccess, Response,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::clients::{InFlight, Slot, Window};
use crate::Front;

/// A client must finish logging in within this time (as VoltDB's server).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Login frames are small; anything bigger is not a login.
const LOGIN_FRAME_MAX_BYTES: usize = 16 * 1024;
/// Answers gathered into one write at most.
const WRITE_BATCH_MAX_BYTES: usize = 256 * 1024;
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Request bytes one connection may have in flight before the server stops reading it
/// (VoltDB stops reading at 8 MiB of pending requests). Counted in KiB.
const IN_FLIGHT_REQUEST_KIB_MAX: usize = 8 * 1024;

/// An answer on its way to the writer; its slot in the window is freed once encoded.
struct Answer {
    handle: i64,
    outcome: Outcome,
    /// From receipt to answer: VoltDB's cluster round trip.
    round_trip: Duration,
    _slot: Option<Slot>,
    /// `@Shutdown`: stop the server once this answer is on the wire.
    then_shutdown: bool,
}

/// A push (no call behind it): see `push.rs`.
impl From<(i64, Outcome)> for Answer {
    fn from((handle, outcome): (i64, Outcome)) -> Self {
        Answer { handle, outcome, round_trip: Duration::ZERO, _slot: None, then_shutdown: false }
    }
}

pub async fn run(socket: TcpStream, peer: SocketAddr, id: i64, front: Arc<Front>) {
    let _ = socket.set_nodelay(true);
    let Some(acceptor) = front.security.tls().cloned() else {
        let (reader, writer) = socket.into_split();
        return serve(reader, writer, peer, id, front).await;
    };
    // TLS on the client port: the handshake comes first (VoltDB's SSL mode), within the
    // login time. A client that does not speak TLS fails here and only its socket closes.
    match tokio::time::timeout(LOGIN_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(tls)) => {
            let (reader, writer) = tokio::io::split(tls);
            serve(reader, writer, peer, id, front).await
        }
        Ok(Err(e)) => tracing::info!(%peer, "TLS handshake failed (the client port requires TLS): {e}"),
        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
    }
}

/// Logs the client in, then reads and answers its calls until it leaves.
async fn serve<R, W>(mut reader: R, mut writer: W, peer: SocketAddr, id: i64, front: Arc<Front>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let principal = match tokio::time::timeout(LOGIN_TIMEOUT, login(&mut reader, &mut writer, &mut buf, id, &front)).await {
        Ok(Ok(p)) => p,
        Ok(Err(reason)) => {
            tracing::info!(%peer, "login failed: {reason}");
            let _ = writer.shutdown().await;
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "login timed out");
            return;
        }
    };
    let (tx, rx) = mpsc::unbounded_channel::<Answer>();
    let writer_task = tokio::spawn(write_answers(writer, rx, front.clone()));
    let in_flight = InFlight::new(front.config.in_flight_per_connection, IN_FLIGHT_REQUEST_KIB_MAX);
    front.live.add(id, Window { peer, in_flight: in_flight.clone() });
    let reason = loop {
        match decode_frame(&mut buf) {
            Ok(Some(frame)) => {
                // Backpressure: wait for slots before taking on more work; meanwhile the
                // socket is not read, so TCP slows the client down.
                let slot = in_flight.take(frame.len() / 1024 + 1).await;
                if let Err(reason) = dispatch(&frame, slot, id, principal.as_ref(), &tx, &front) {
                    break reason;
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => break format!("malformed frame: {e}"),
        }
        match reader.read_buf(&mut buf).await {
            Ok(0) => break String::new(),
            Ok(_) => {}
            // TLS: a client that leaves without close_notify has still just left.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break String::new(),
            Err(e) => break format!("read failed: {e}"),
        }
    };
    if !reason.is_empty() {
        tracing::warn!(%peer, connection = id, "closing connection: {reason}");
    }
    front.subscribers.remove(id);
    front.live.remove(id);
    drop(tx);
    let _ = writer_task.await;
}

/// Reads and answers the login frame; the logged-in user when security is on.
async fn login<R, W>(reader: &mut R, writer: &mut W, buf: &mut BytesMut, id: i64, front: &Front) -> Result<Option<Arc<Principal>>, String>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let frame = loop {
        match decode_frame_with_limit(buf, LOGIN_FRAME_MAX_BYTES) {
            Ok(Some(f)) => break f,
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if reader.read_buf(buf).await.map_err(|e| e.to_string())? == 0 {
            return Err("closed before logging in".into());
        }
    };
    let mut out = Vec::new();
    let checked = decode_login_request(&frame).and_then(|req| match front.security.login(&req) {
        Ok(principal) => Ok(principal),
        Err(code) => Err(LoginError { code, error: Error::graceful(format!("user {:?}: wrong user name or password", req.username)) }),
    });
    let result = match checked {
        Ok(principal) => {
            let ok = LoginSuccess {
                host_id: sysprocs::HOST_ID,
                connection_id: id,
                cluster_start_ms: front.engine.shared().started_ms,
                leader_ipv4: u32::from(std::net::Ipv4Addr::LOCALHOST),
                build: sysprocs::BUILD_STRING.to_string(),
            };
            encode_login_response(&LoginResponse::Success(ok), &mut out);
            Ok(principal)
        }
        Err(e) => {
            encode_login_response(&LoginResponse::Failure(e.code), &mut out);
            Err(e.error.message)
        }
    };
    writer.write_all(&out).await.map_err(|e| e.to_string())?;
    writer.flush().await.map_err(|e| e.to_string())?;
    result
}

/// Decodes one invocation and starts it. An Err closes the connection.
fn dispatch(
    frame: &[u8],
    slot: Slot,
    id: i64,
    principal: Option<&Arc<Principal>>,
    tx: &mpsc::UnboundedSender<Answer>,
    front: &Arc<Front>,
) -> Result<(), String> {
    let inv = decode_invocation(frame).map_err(|e| format!("bad invocation: {e}"))?;
    let started = Instant::now();
    let handle = inv.handle;
    // Only system procedures need their name lower-cased (user procedure names keep case).
    let lower = if inv.procedure.starts_with('@') { inv.procedure.to_ascii_lowercase() } else { String::new() };
    // The system procedures answered here are checked here; the engine checks the rest.
    if let Some(who) = principal.filter(|_| matches!(lower.as_str(), "@subscribe" | "@statistics" | "@shutdown")) {
        if let Err(e) = auth::check_system(Some(who), &front.engine.catalog(), &lower, &inv.procedure) {
            let _ = tx.send(Answer {
                handle,
                outcome: Outcome::error(e),
                round_trip: started.elapsed(),
                _slot: Some(slot),
                then_shutdown: false,
            });
            return Ok(());
        }
    }
    match lower.as_str() {
        "@subscribe" => {
            let outcome = subscribe(&inv.params, id, tx, front);
            let _ = tx.send(Answer { handle, outcome, round_trip: started.elapsed(), _slot: Some(slot), then_shutdown: false });
            return Ok(());
        }
        "@statistics" if matches!(inv.params.first(), Some(Value::Str(s)) if s.eq_ignore_ascii_case("LIVECLIENTS")) => {
            let outcome = Outcome::tables(vec![front.live.table()]);
            let _ = tx.send(Answer { handle, outcome, round_trip: started.elapsed(), _slot: Some(slot), then_shutdown: false });
            return Ok(());
        }
        "@shutdown" => {
            tracing::info!(connection = id, "@Shutdown called: stopping");
            let _ = tx.send(Answer {
                handle,
                outcome: Outcome::tables(Vec::new()),
                round_trip: started.elapsed(),
                _slot: Some(slot),
                then_shutdown: true,
            });
            return Ok(());
        }
        _ => {}
    }
    // LATENCY counts the calls applications make: user procedures and ad-hoc SQL.
    let user_call = lower.is_empty() || lower == "@adhoc";
    let adhoc = lower == "@adhoc";
    let tx = tx.clone();
    let call = Call {
        procedure: inv.procedure,
        params: inv.params,
        partition_destination: inv.partition_destination,
        all_partition: inv.all_partition,
        principal: principal.cloned(),
    };
    let reply_front = front.clone();
    front.engine.submit(
        call,
        Box::new(move |outcome| {
            // The clock is read once, here, where the answer is ready: not again for the
            // latency window nor when encoding.
            let now = Instant::now();
            let round_trip = now.saturating_duration_since(started);
            if user_call {
                reply_front.engine.shared().stats.latency.record_at(now, round_trip);
            }
            if adhoc {
                reply_front.subscribers.catalog_may_have_changed(&reply_front.engine);
            }
            let _ = tx.send(Answer { handle, outcome, round_trip, _slot: Some(slot), then_shutdown: false });
        }),
    );
    Ok(())
}

/// `@Subscribe("TOPOLOGY")`: this connection gets procedure pushes from now on.
fn subscribe(params: &[Value], id: i64, tx: &mpsc::UnboundedSender<Answer>, front: &Front) -> Outcome {
    let what = match params.first() {
        Some(Value::Str(s)) => s.as_str(),
        _ => "",
    };
    if !what.eq_ignore_ascii_case("TOPOLOGY") {
        return Outcome::error(Error::graceful(format!("Parameter \"{what}\" is not recognized/supported")));
    }
    if !front.subscribers.add(id, Box::new(tx.clone())) {
        return Outcome::error(Error::unavailable("too many subscribed connections"));
    }
    Outcome::tables(Vec::new())
}

/// Encodes an answer; returns whether it asks for the server to stop.
fn encode_answer(a: Answer, out: &mut Vec<u8>) -> bool {
    let then_shutdown = a.then_shutdown;
    let o = a.outcome;
    let r = Response {
        handle: a.handle,
        status: o.status,
        status_string: o.status_string,
        app_status: o.app_status,
        app_status_string: o.app_status_string,
        cluster_round_trip_ms: a.round_trip.as_millis().min(i32::MAX as u128) as i32,
        tables: o.tables,
    };
    encode_response(&r, out);
    then_shutdown
}

/// Writes answers as they come, gathering whatever is ready into one write.
async fn write_answers<W: AsyncWrite + Unpin>(mut writer: W, mut rx: mpsc::UnboundedReceiver<Answer>, front: Arc<Front>) {
    let mut out = Vec::with_capacity(WRITE_BATCH_MAX_BYTES);
    while let Some(first) = rx.recv().await {
        let mut shutdown = encode_answer(first, &mut out);
        while out.len() < WRITE_BATCH_MAX_BYTES {
            match rx.try_recv() {
                Ok(a) => shutdown |= encode_answer(a, &mut out),
                Err(_) => break,
            }
        }
        // The flush is a no-op on TCP; TLS may hold the tail of a record until it.
        let written = writer.write_all(&out).await.is_ok() && writer.flush().await.is_ok();
        if shutdown {
            // The caller has its answer (if it is still there): now stop the server.
            let _ = writer.flush().await;
            front.shutdown.notify_one();
        }
        if !written {
            return;
        }
        out.clear();
    }
    let _ = writer.shutdown().await;
}
