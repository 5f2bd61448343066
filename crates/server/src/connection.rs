//! One client connection: login, then a reader that decodes invocations and submits them,
//! and answers batched into few socket writes: on plain TCP written by the threads that
//! give them (`outbox.rs`), on TLS by a writer task fed through a channel. A connection
//! with too many calls, request bytes or unread answer bytes in flight is not read until
//! answers drain (backpressure through TCP, as VoltDB does); a malformed frame closes only
//! this connection.
//! Time limits close connections that stall: a frame that never completes, answers the
//! client never reads, and (after `--idle-timeout`) a connection that sends nothing.

use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use lockstep_core::throttle::Throttle;
use lockstep_core::{Error, Value};
use lockstep_engine::stats::IntervalBaselines;
use lockstep_engine::{sysprocs, Call, Outcome, Principal};
use lockstep_wire::{
    decode_frame, decode_frame_with_limit, decode_invocation, decode_login_request, encode_login_response, encode_response, LoginCode,
    LoginError, LoginResponse, LoginSuccess, Response, FRAME_SIZE_MAX_BYTES,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

use crate::clients::{InFlight, Slot, Window};
use crate::outbox::{self, Outbox};
use crate::push::PushSink;
use crate::{dispatch, Front};

/// A client must finish logging in within this time (as VoltDB's server).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// A refused client gets this long to send its login before the refusal is written.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Login frames are small; anything bigger is not a login.
const LOGIN_FRAME_MAX_BYTES: usize = 16 * 1024;
/// Answers gathered into one write at most.
const WRITE_BATCH_MAX_BYTES: usize = 256 * 1024;
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Request bytes one connection may have in flight before the server stops reading it
/// (VoltDB stops reading at 8 MiB of pending requests). Counted in KiB.
const IN_FLIGHT_REQUEST_KIB_MAX: usize = 8 * 1024;
/// Encoded answers one connection may leave unread before the server stops reading its
/// calls (and stops taking more answers off the engine for it).
const UNREAD_ANSWER_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Frames above this size reserve their bytes in the server-wide budget before they are read.
pub const LARGE_FRAME_BYTES: usize = 1024 * 1024;
/// The server-wide budget for large frames being read or being run, in KiB: 20 clients
/// half-sending 49 MiB frames must not hold a gigabyte.
pub const LARGE_REQUESTS_KIB_MAX: usize = 256 * 1024;

/// Bad connections (malformed frames, failed logins) logged per window; the rest counted.
static CLOSED_CONNECTIONS_LOG: Throttle = Throttle::new(20, Duration::from_secs(60));

/// An answer on its way to the socket; its slot in the window is freed once encoded.
pub(crate) struct Answer {
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

/// Logs why a connection ended, at most `CLOSED_CONNECTIONS_LOG`'s rate.
fn log_closed(peer: SocketAddr, id: i64, reason: &str) {
    if let Some(suppressed) = CLOSED_CONNECTIONS_LOG.admit() {
        if suppressed > 0 {
            tracing::warn!(%peer, connection = id, suppressed, "closing connection: {reason} ({suppressed} similar lines suppressed)");
        } else {
            tracing::warn!(%peer, connection = id, "closing connection: {reason}");
        }
    }
}

pub async fn run(socket: TcpStream, peer: SocketAddr, id: i64, front: Arc<Front>) {
    let _ = socket.set_nodelay(true);
    let Some(acceptor) = front.security.tls().cloned() else {
        // Plain TCP: the threads that answer write the socket through a second descriptor
        // of it (`outbox.rs`). Without one (out of descriptors) the writer task writes all.
        let direct = socket.as_fd().try_clone_to_owned().ok().map(std::net::TcpStream::from);
        let (reader, writer) = socket.into_split();
        return serve(reader, writer, direct, peer, id, front).await;
    };
    // TLS on the client port: the handshake comes first (VoltDB's SSL mode), within the
    // login time. A client that does not speak TLS fails here and only its socket closes.
    match tokio::time::timeout(LOGIN_TIMEOUT, acceptor.accept(socket)).await {
        Ok(Ok(tls)) => {
            let (reader, writer) = tokio::io::split(tls);
            serve(reader, writer, None, peer, id, front).await
        }
        Ok(Err(e)) => log_closed(peer, id, &format!("TLS handshake failed (the client port requires TLS): {e}")),
        Err(_) => log_closed(peer, id, "TLS handshake timed out"),
    }
}

/// Logs the client in, then reads and answers its calls until it leaves. `direct` is a
/// second descriptor of a plain TCP socket, for the answering threads to write to.
async fn serve<R, W>(mut reader: R, mut writer: W, direct: Option<std::net::TcpStream>, peer: SocketAddr, id: i64, front: Arc<Front>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let principal = match tokio::time::timeout(LOGIN_TIMEOUT, login(&mut reader, &mut writer, &mut buf, id, &front)).await {
        Ok(Ok(p)) => p,
        Ok(Err(reason)) => {
            let _ = writer.shutdown().await;
            return log_closed(peer, id, &format!("login failed: {reason}"));
        }
        Err(_) => return log_closed(peer, id, "login timed out"),
    };
    let in_flight = InFlight::new(front.config.in_flight_per_connection, IN_FLIGHT_REQUEST_KIB_MAX, UNREAD_ANSWER_BYTES_MAX);
    let calls = Calls { reader, buf, in_flight, peer, id, principal, front };
    match direct {
        Some(socket) => {
            let (outbox, tx) = Outbox::new(socket, calls.in_flight.clone());
            let writer_task = tokio::spawn(outbox::write_answers(writer, outbox, calls.front.clone()));
            calls.serve(tx, writer_task).await
        }
        None => {
            let (tx, rx) = mpsc::unbounded_channel::<Answer>();
            let writer_task = tokio::spawn(write_answers(writer, rx, calls.in_flight.clone(), calls.front.clone()));
            calls.serve(tx, writer_task).await
        }
    }
}

/// Where a connection's answers go: the channel to its writer task, or its outbox.
pub(crate) trait Answers: PushSink + Clone + Send + 'static {
    fn answer(&self, a: Answer);
}

impl Answers for mpsc::UnboundedSender<Answer> {
    fn answer(&self, a: Answer) {
        let _ = self.send(a);
    }
}

impl Answers for outbox::Sender {
    fn answer(&self, a: Answer) {
        self.send(a);
    }
}

/// A logged-in connection, before its calls are read.
struct Calls<R> {
    reader: R,
    buf: BytesMut,
    in_flight: Arc<InFlight>,
    peer: SocketAddr,
    id: i64,
    principal: Option<Arc<Principal>>,
    front: Arc<Front>,
}

impl<R: AsyncRead + Unpin> Calls<R> {
    /// Reads calls and hands their answers to `tx` until the client leaves or the writer
    /// task gives up on it; then waits for the writer to finish.
    async fn serve(self, tx: impl Answers, mut writer_task: tokio::task::JoinHandle<String>) {
        let Calls { reader, buf, in_flight, peer, id, principal, front } = self;
        front.live.add(id, Window { peer, in_flight: in_flight.clone() });
        let reason = tokio::select! {
            reason = read_calls(reader, buf, &in_flight, id, principal.as_ref(), &tx, &front) => reason,
            // The writer gave up on a client that does not read: stop reading it too.
            hung_up = &mut writer_task => hung_up.unwrap_or_else(|e| format!("the writer failed: {e}")),
        };
        if !reason.is_empty() {
            log_closed(peer, id, &reason);
        }
        front.subscribers.remove(id);
        front.live.remove(id);
        drop(tx);
        if !writer_task.is_finished() {
            let _ = writer_task.await;
        }
    }
}

/// Reads calls until the client closes the connection or breaks a rule; returns why (empty
/// for a plain close).
async fn read_calls(
    mut reader: impl AsyncRead + Unpin,
    mut buf: BytesMut,
    in_flight: &Arc<InFlight>,
    id: i64,
    principal: Option<&Arc<Principal>>,
    tx: &impl Answers,
    front: &Arc<Front>,
) -> String {
    let idle_timeout = (front.config.idle_timeout_s > 0).then(|| Duration::from_secs(front.config.idle_timeout_s));
    // A frame that has begun must be complete within this time: a client that trickles a
    // byte a second is closed, not kept forever.
    let frame_timeout = Duration::from_secs(front.config.client_timeout_s);
    // When the frame now in `buf` began to arrive, and its share of the large-request budget.
    let mut frame_started: Option<Instant> = None;
    let mut large: Option<OwnedSemaphorePermit> = None;
    // What this connection's `@Statistics … 1` calls measure from.
    let baselines = Arc::new(IntervalBaselines::default());
    let mut received = Instant::now();
    loop {
        match decode_frame(&mut buf) {
            Ok(Some(frame)) => {
                // The next frame's clock starts when it is waited for (below), not here:
                // one clock read less per call in a stream of calls.
                frame_started = None;
                // Backpressure: wait for slots before taking on more work; meanwhile the
                // socket is not read, so TCP slows the client down.
                let mut slot = in_flight.take(frame.len() / 1024 + 1).await;
                slot.hold(large.take());
                let caller = Caller { id, principal, baselines: &baselines, received };
                if let Err(reason) = dispatch(&frame, slot, caller, tx, front) {
                    return reason;
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => return format!("malformed frame: {e}"),
        }
        if !buf.is_empty() && frame_started.is_none() {
            frame_started = Some(Instant::now());
        }
        let deadline = match frame_started {
            Some(t) => Some(t + frame_timeout),
            None => idle_timeout.map(|d| Instant::now() + d),
        };
        let late = || match frame_started {
            Some(_) => format!("a frame was not complete {} s after it began", frame_timeout.as_secs()),
            None => format!("idle for {} s (--idle-timeout)", front.config.idle_timeout_s),
        };
        if large.is_none() {
            if let Some(len) = announced_len(&buf).filter(|len| *len > LARGE_FRAME_BYTES) {
                let kib = len.div_ceil(1024).min(LARGE_REQUESTS_KIB_MAX) as u32;
                match until(deadline, front.large_requests.clone().acquire_many_owned(kib)).await {
                    Some(Ok(permit)) => large = Some(permit),
                    Some(Err(_)) => return "the server is stopping".into(),
                    None => return late(),
                }
                buf.reserve(len + 4 - buf.len().min(len + 4));
            }
        }
        match until(deadline, reader.read_buf(&mut buf)).await {
            None => return late(),
            Some(Ok(0)) => return String::new(),
            Some(Ok(_)) => received = Instant::now(),
            // TLS: a client that leaves without close_notify has still just left.
            Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return String::new(),
            Some(Err(e)) => return format!("read failed: {e}"),
        }
    }
}

/// The length a frame's prefix announces, once the prefix is there.
fn announced_len(buf: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    usize::try_from(i32::from_be_bytes(prefix)).ok()
}

/// Runs `f` until `deadline` (forever without one); None if the deadline came first.
async fn until<T>(deadline: Option<Instant>, f: impl std::future::Future<Output = T>) -> Option<T> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d.into(), f).await.ok(),
        None => Some(f.await),
    }
}

/// Answers a connection over the limit with VoltDB's "Server has too many connections"
/// (after its login frame, so the client reads the answer rather than a reset).
pub async fn refuse(mut socket: TcpStream) {
    let mut buf = BytesMut::with_capacity(LOGIN_FRAME_MAX_BYTES);
    let read_login = async {
        loop {
            match decode_frame_with_limit(&mut buf, LOGIN_FRAME_MAX_BYTES) {
                Ok(None) => {}
                Ok(Some(_)) | Err(_) => return,
            }
            if !matches!(socket.read_buf(&mut buf).await, Ok(n) if n > 0) {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, read_login).await;
    let mut out = Vec::new();
    encode_login_response(&LoginResponse::Failure(LoginCode::TooManyConnections), &mut out);
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, socket.write_all(&out)).await;
    let _ = socket.shutdown().await;
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
            let (cluster_start_ms, leader_ipv4) = front
                .cluster
                .get()
                .map_or((front.engine.shared().started_ms, u32::from(std::net::Ipv4Addr::LOCALHOST)), |c| c.instance_id());
            let ok = LoginSuccess {
                host_id: front.engine.host_id(),
                connection_id: id,
                cluster_start_ms,
                leader_ipv4,
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

/// Who sends an invocation: the connection's id, login and interval-statistics baselines.
struct Caller<'a> {
    id: i64,
    principal: Option<&'a Arc<Principal>>,
    baselines: &'a Arc<IntervalBaselines>,
    /// When the bytes of the call were read: every call in one read shares the reading.
    received: Instant,
}

/// Decodes one invocation and starts it. An Err closes the connection.
fn dispatch(frame: &[u8], slot: Slot, caller: Caller<'_>, tx: &impl Answers, front: &Arc<Front>) -> Result<(), String> {
    let Caller { id, principal, baselines, received } = caller;
    let inv = decode_invocation(frame).map_err(|e| format!("bad invocation: {e}"))?;
    let handle = inv.handle;
    let call = Call {
        procedure: inv.procedure,
        params: inv.params,
        partition_destination: inv.partition_destination,
        all_partition: inv.all_partition,
        timeout_ms: inv.timeout_ms,
        principal: principal.cloned(),
    };
    let subscribe = |params: &[Value]| subscribe(params, id, tx, front);
    let answers = tx.clone();
    dispatch::start(
        front,
        call,
        dispatch::Caller { started: received, baselines: Some(baselines), subscribe },
        move |a: dispatch::Answered| {
            answers.answer(Answer {
                handle,
                outcome: a.outcome,
                round_trip: a.round_trip,
                _slot: Some(slot),
                then_shutdown: a.then_shutdown,
            });
        },
    );
    Ok(())
}

/// `@Subscribe("TOPOLOGY")`: this connection gets procedure pushes from now on.
fn subscribe(params: &[Value], id: i64, tx: &impl Answers, front: &Front) -> Outcome {
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

/// Encodes an answer, counting its bytes as unread; returns whether it asks for the server to stop.
pub(crate) fn encode_answer(a: Answer, out: &mut Vec<u8>, window: &InFlight) -> bool {
    let before = out.len();
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
    // No client accepts a frame over the protocol's limit: say so instead of sending one.
    let size = out.len() - before;
    if size > FRAME_SIZE_MAX_BYTES + 4 {
        out.truncate(before);
        let e = Error::graceful(format!(
            "the answer is {size} bytes, more than the {FRAME_SIZE_MAX_BYTES}-byte limit of a message: ask for fewer rows or smaller values"
        ));
        let o = Outcome::error(e);
        let r = Response {
            handle: r.handle,
            status: o.status,
            status_string: o.status_string,
            app_status: o.app_status,
            app_status_string: None,
            cluster_round_trip_ms: r.cluster_round_trip_ms,
            tables: Vec::new(),
        };
        encode_response(&r, out);
    }
    window.answers_encoded(out.len() - before);
    then_shutdown
}

/// A TLS connection's writer (or a plain one's without a second descriptor): writes
/// answers as they come, gathering whatever is ready into one write, and keeps taking
/// answers while a write is blocked, up to `UNREAD_ANSWER_BYTES_MAX` (the reader stops
/// taking calls from then on). Returns why it stopped early: a client whose unread
/// answers make no progress for `client_timeout_s` is let go.
async fn write_answers(
    mut writer: impl AsyncWrite + Unpin,
    mut rx: mpsc::UnboundedReceiver<Answer>,
    window: Arc<InFlight>,
    front: Arc<Front>,
) -> String {
    // Encoded answers; `out[sent..]` is not written yet.
    let mut out: Vec<u8> = Vec::with_capacity(WRITE_BATCH_MAX_BYTES);
    let mut sent = 0;
    let mut shutdown = false;
    let mut open = true;
    // A client whose unread answers make no progress for this long has hung up in all but
    // name (VoltDB's client hang-up timeout): the connection is closed.
    let hangup_timeout = Duration::from_secs(front.config.client_timeout_s);
    let mut progress = Instant::now();
    let mut unflushed = false;
    loop {
        // Everything ready, without waiting.
        while open && out.len() - sent < UNREAD_ANSWER_BYTES_MAX {
            match rx.try_recv() {
                Ok(a) => shutdown |= encode_answer(a, &mut out, &window),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => open = false,
            }
        }
        if sent == out.len() {
            out.clear();
            sent = 0;
            // A no-op on TCP; TLS may hold the tail of a record until it.
            if unflushed {
                unflushed = false;
                match tokio::time::timeout(hangup_timeout, writer.flush()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return String::new(),
                    Err(_) => return format!("the client left answers unread for {} s", hangup_timeout.as_secs()),
                }
            }
            if shutdown {
                // The caller has its answer (if it is still there): now stop the server.
                shutdown = false;
                front.shutdown.notify_one();
            }
            if !open {
                let _ = writer.shutdown().await;
                return String::new();
            }
            match rx.recv().await {
                Some(a) => shutdown |= encode_answer(a, &mut out, &window),
                None => open = false,
            }
            progress = Instant::now();
            continue;
        }
        let unsent = out.len() - sent;
        let room = open && unsent < UNREAD_ANSWER_BYTES_MAX;
        tokio::select! {
            biased;
            written = writer.write(&out[sent..sent + unsent.min(WRITE_BATCH_MAX_BYTES)]) => match written {
                Ok(0) | Err(_) => return String::new(),
                Ok(n) => {
                    sent += n;
                    unflushed = true;
                    window.answers_written(n);
                    progress = Instant::now();
                    // Drop what is written once it is most of the buffer (amortised copies).
                    if sent > WRITE_BATCH_MAX_BYTES && sent * 2 > out.len() {
                        out.drain(..sent);
                        sent = 0;
                    }
                }
            },
            a = rx.recv(), if room => match a {
                Some(a) => shutdown |= encode_answer(a, &mut out, &window),
                None => open = false,
            },
            _ = tokio::time::sleep_until((progress + hangup_timeout).into()) => {
                return format!("the client left {unsent} bytes of answers unread for {} s", hangup_timeout.as_secs());
            }
        }
    }
}
