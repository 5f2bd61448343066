//! One logged-in connection: a writer task that batches frames into few writes and a reader
//! task that hands each response to the call waiting for its handle.

use foldhash::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lockstep_wire::{
    decode_frame, decode_login_response, encode_invocation, encode_login_request, response_handle, Invocation, LoginRequest, LoginResponse,
    LoginSuccess,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::client::ClientConfig;
use crate::error::ClientError;

/// How long connecting plus login may take.
pub const LOGIN_TIMEOUT_MS: u64 = 30_000;
/// Largest login response we read (it is 34 bytes plus a build string).
const LOGIN_RESPONSE_MAX_BYTES: usize = 64 * 1024;
/// The first byte of a TLS alert record.
const TLS_ALERT_RECORD: u8 = 21;
/// Frames gathered into one socket write, at most this many bytes (one syscall, many calls).
const WRITE_BATCH_MAX_BYTES: usize = 256 * 1024;
/// An idle connection is pinged this often, as VoltDB's client does, so a server's idle
/// timeout never closes a connection that is only waiting (a shell at its prompt).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(60);
/// The handle of keep-alive pings; calls take handles from 0 up, and the answer is dropped.
const KEEPALIVE_HANDLE: i64 = i64::MIN + 1;
/// Read buffer growth step.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Most room reserved at once for the rest of a large answer: a server announcing a huge
/// frame and sending little does not get that much memory reserved up front.
const READ_RESERVE_MAX_BYTES: usize = 1024 * 1024;

/// A response's payload, decoded by the call that waits for it (eagerly, or in place).
type Reply = oneshot::Sender<Result<Bytes, ClientError>>;

/// Calls waiting for an answer, by handle; once the connection dies, the reason.
#[derive(Default)]
struct Pending {
    calls: HashMap<i64, Reply>,
    closed: Option<ClientError>,
}

/// What the connection's tasks share: the waiting calls, and whether the connection closed
/// (readable without the lock, as every call asks it).
#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    closed: AtomicBool,
}

/// A live connection to one server.
pub struct Connection {
    /// The server's host id from the login answer (ties the connection to TOPO rows).
    pub login: LoginSuccess,
    frames: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Shared>,
}

impl Connection {
    /// Connects (over TLS when configured) and logs in with the configured digest of the password.
    pub async fn open(addr: &str, config: &ClientConfig) -> Result<Connection, ClientError> {
        let timeout = Duration::from_millis(LOGIN_TIMEOUT_MS);
        let timed_out = |_| ClientError::Io(format!("connecting to {addr} timed out"));
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr)).await.map_err(timed_out)??;
        stream.set_nodelay(true)?;
        let Some(tls) = &config.tls else {
            let (mut read, mut write) = stream.into_split();
            let login = tokio::time::timeout(timeout, login(&mut read, &mut write, config)).await.map_err(timed_out)??;
            return Ok(Self::start(login, read, write));
        };
        let name = crate::tls::server_name(addr)?;
        let connector = tokio_rustls::TlsConnector::from(tls.clone());
        let handshake =
            async { connector.connect(name, stream).await.map_err(|e| ClientError::Io(format!("TLS handshake with {addr} failed: {e}"))) };
        let stream = tokio::time::timeout(timeout, handshake).await.map_err(timed_out)??;
        let (mut read, mut write) = tokio::io::split(stream);
        let login = tokio::time::timeout(timeout, login(&mut read, &mut write, config)).await.map_err(timed_out)??;
        Ok(Self::start(login, read, write))
    }

    /// Starts the writer and reader tasks of a logged-in connection.
    fn start<R, W>(login: LoginSuccess, read: R, write: W) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let pending = Arc::new(Shared::default());
        let (frames, rx) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(write, rx, pending.clone()));
        tokio::spawn(read_loop(read, pending.clone()));
        Connection { login, frames, pending }
    }

    /// Whether the connection is still usable.
    pub fn is_open(&self) -> bool {
        !self.pending.closed.load(Ordering::Acquire)
    }

    /// Registers the call under `handle` and queues its encoded frame; the receiver gets the
    /// response's payload, or the error that closed the connection.
    pub fn send(&self, handle: i64, frame: Vec<u8>) -> Result<oneshot::Receiver<Result<Bytes, ClientError>>, ClientError> {
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if let Some(e) = &p.closed {
                return Err(e.clone());
            }
            p.calls.insert(handle, tx);
        }
        if self.frames.send(frame).is_err() {
            lock(&self.pending).calls.remove(&handle);
            return Err(ClientError::ConnectionLost("the connection's writer has stopped".into()));
        }
        Ok(rx)
    }
}

/// The pending map is only held for a few instructions and never across an await; a panic
/// while holding it would be a bug in this file, so a poisoned lock is still usable.
fn lock(p: &Shared) -> std::sync::MutexGuard<'_, Pending> {
    p.pending.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fails every waiting call with `err` and refuses new ones.
fn close(pending: &Shared, err: ClientError) {
    let calls = {
        let mut p = lock(pending);
        if p.closed.is_none() {
            p.closed = Some(err.clone());
            pending.closed.store(true, Ordering::Release);
        }
        std::mem::take(&mut p.calls)
    };
    for (_, reply) in calls {
        let _ = reply.send(Err(err.clone()));
    }
}

async fn login<R, W>(read: &mut R, write: &mut W, config: &ClientConfig) -> Result<LoginSuccess, ClientError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let scheme = config.hash_scheme;
    let req = LoginRequest {
        version: 1,
        scheme,
        service: "database".into(),
        username: config.username.clone(),
        digest: scheme.hash(config.password.as_bytes()),
    };
    let mut out = Vec::new();
    encode_login_request(&req, &mut out);
    write.write_all(&out).await?;
    write.flush().await?;
    let mut len = [0u8; 4];
    read.read_exact(&mut len).await?;
    // A TLS alert record (type 21, version 3.x) where a length should be: a TLS-only port.
    if len[0] == TLS_ALERT_RECORD && len[1] == 3 {
        return Err(ClientError::Login("the server requires TLS on this port: connect with TLS (--tls, or --tls-ca FILE)".into()));
    }
    let len = i32::from_be_bytes(len);
    if len < 1 || len as usize > LOGIN_RESPONSE_MAX_BYTES {
        return Err(ClientError::Protocol(format!("login response length {len} is out of range")));
    }
    let mut payload = vec![0u8; len as usize];
    read.read_exact(&mut payload).await?;
    match decode_login_response(&payload).map_err(|e| ClientError::Protocol(e.message))? {
        LoginResponse::Success(s) => Ok(s),
        LoginResponse::Failure(code) => Err(ClientError::Login(code.describe().to_string())),
    }
}

/// Writes queued frames, gathering whatever is already queued into one write; pings the
/// server when there has been nothing to write for `KEEPALIVE_INTERVAL`.
async fn write_loop<W: AsyncWrite + Unpin>(mut write: W, mut rx: mpsc::UnboundedReceiver<Vec<u8>>, pending: Arc<Shared>) {
    let mut batch = Vec::with_capacity(WRITE_BATCH_MAX_BYTES);
    loop {
        let first = match rx.try_recv() {
            Ok(frame) => frame,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => match tokio::time::timeout(KEEPALIVE_INTERVAL, rx.recv()).await {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => keepalive_frame(),
            },
        };
        // Let the other ready tasks run first: a call wakes this task at once (tokio runs a
        // woken task next), so without the yield every call would cost its own write, and on
        // loopback a write also wakes the server. After it, one write carries many calls.
        tokio::task::yield_now().await;
        batch.clear();
        batch.extend_from_slice(&first);
        while batch.len() < WRITE_BATCH_MAX_BYTES {
            match rx.try_recv() {
                Ok(frame) => batch.extend_from_slice(&frame),
                Err(_) => break,
            }
        }
        // The flush is a no-op on TCP; TLS may hold the tail of a record until it.
        if let Err(e) = async {
            write.write_all(&batch).await?;
            write.flush().await
        }
        .await
        {
            close(&pending, ClientError::ConnectionLost(format!("write failed: {e}")));
            return;
        }
    }
    // Every sender is gone: the client was dropped. Closing our half lets the server hang up.
    let _ = write.shutdown().await;
}

/// A `@Ping` whose answer nobody waits for (its handle is never a call's).
fn keepalive_frame() -> Vec<u8> {
    let mut frame = Vec::new();
    // A fixed, valid invocation: encoding it cannot fail.
    let _ = encode_invocation(&Invocation::new("@Ping", KEEPALIVE_HANDLE, Vec::new()), &mut frame);
    frame
}

/// Bytes still to come of the frame at the front of `buf`, once its length prefix is in
/// (`decode_frame` has checked that length against the frame limit).
fn frame_rest(buf: &[u8]) -> usize {
    match buf.first_chunk::<4>() {
        Some(len) => (4 + i32::from_be_bytes(*len).max(0) as usize).saturating_sub(buf.len()),
        None => 0,
    }
}

/// Reads responses and hands each to the call waiting for its handle, undecoded: the call
/// decodes it, all at once or in place. On EOF or a bad frame fails every call.
async fn read_loop<R: AsyncRead + Unpin>(mut read: R, pending: Arc<Shared>) {
    let mut buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let err = loop {
        match decode_frame(&mut buf) {
            Ok(Some(frame)) => {
                let handle = match response_handle(&frame) {
                    Ok(h) => h,
                    Err(e) => break ClientError::Protocol(e.message),
                };
                // Unknown handles (server pushes, answers to abandoned calls) are dropped.
                if let Some(reply) = lock(&pending).calls.remove(&handle) {
                    let _ = reply.send(Ok(frame.freeze()));
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => break ClientError::Protocol(e.message),
        }
        // Room for the rest of the answer being read (up to a bound), and a chunk at least.
        // Earlier answers may still hold the buffer (they are handed over in place), and a
        // held buffer is moved to a new one on every reserve: without room for the whole
        // answer, a large one would be moved again on every read.
        buf.reserve(frame_rest(&buf).clamp(READ_CHUNK_BYTES, READ_RESERVE_MAX_BYTES));
        match read.read_buf(&mut buf).await {
            Ok(0) => break ClientError::ConnectionLost("the server closed the connection".into()),
            Ok(_) => {}
            Err(e) => break ClientError::ConnectionLost(format!("read failed: {e}")),
        }
    };
    close(&pending, err);
}
