//! One client connection: login, then a reader that decodes invocations and submits them,
//! and a writer that batches answers into few socket writes. A connection with too many
//! calls in flight is not read until answers drain (backpressure through TCP); a malformed
//! frame closes only this connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use lockstep_engine::{sysprocs, Call, Outcome};
use lockstep_wire::{
    decode_frame, decode_frame_with_limit, decode_invocation, decode_login_request, encode_login_response, encode_response, LoginResponse,
    LoginSuccess, Response,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use crate::Front;

/// A client must finish logging in within this time (as VoltDB's server).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Login frames are small; anything bigger is not a login.
const LOGIN_FRAME_MAX_BYTES: usize = 16 * 1024;
/// Answers gathered into one write at most.
const WRITE_BATCH_MAX_BYTES: usize = 256 * 1024;
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// An answer on its way to the writer; the permit frees an in-flight slot once written.
struct Answer {
    handle: i64,
    outcome: Outcome,
    started: Instant,
    _permit: Option<OwnedSemaphorePermit>,
}

pub async fn run(mut socket: TcpStream, peer: SocketAddr, id: i64, front: Arc<Front>) {
    let _ = socket.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    match tokio::time::timeout(LOGIN_TIMEOUT, login(&mut socket, &mut buf, id, &front)).await {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => {
            tracing::info!(%peer, "login failed: {reason}");
            return;
        }
        Err(_) => {
            tracing::info!(%peer, "login timed out");
            return;
        }
    }
    let (mut reader, writer) = socket.into_split();
    let (tx, rx) = mpsc::unbounded_channel::<Answer>();
    let writer_task = tokio::spawn(write_answers(writer, rx));
    let in_flight = Arc::new(Semaphore::new(front.config.in_flight_per_connection));
    let reason = loop {
        match decode_frame(&mut buf) {
            Ok(Some(frame)) => {
                // Backpressure: wait for a slot before taking on more work.
                let Ok(permit) = in_flight.clone().acquire_owned().await else { break "shutting down".to_string() };
                if let Err(reason) = dispatch(&frame, permit, &tx, &front) {
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
            Err(e) => break format!("read failed: {e}"),
        }
    };
    if !reason.is_empty() {
        tracing::warn!(%peer, connection = id, "closing connection: {reason}");
    }
    drop(tx);
    let _ = writer_task.await;
}

/// Reads and answers the login frame.
async fn login(socket: &mut TcpStream, buf: &mut BytesMut, id: i64, front: &Front) -> Result<(), String> {
    let frame = loop {
        match decode_frame_with_limit(buf, LOGIN_FRAME_MAX_BYTES) {
            Ok(Some(f)) => break f,
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
        if socket.read_buf(buf).await.map_err(|e| e.to_string())? == 0 {
            return Err("closed before logging in".into());
        }
    };
    let mut out = Vec::new();
    let result = match decode_login_request(&frame) {
        Ok(_) => {
            let ok = LoginSuccess {
                host_id: sysprocs::HOST_ID,
                connection_id: id,
                cluster_start_ms: front.engine.shared().started_ms,
                leader_ipv4: u32::from(std::net::Ipv4Addr::LOCALHOST),
                build: sysprocs::BUILD_STRING.to_string(),
            };
            encode_login_response(&LoginResponse::Success(ok), &mut out);
            Ok(())
        }
        Err(e) => {
            encode_login_response(&LoginResponse::Failure(e.code), &mut out);
            Err(e.error.message)
        }
    };
    socket.write_all(&out).await.map_err(|e| e.to_string())?;
    result
}

/// Decodes one invocation and starts it. An Err closes the connection.
fn dispatch(frame: &[u8], permit: OwnedSemaphorePermit, tx: &mpsc::UnboundedSender<Answer>, front: &Arc<Front>) -> Result<(), String> {
    let inv = decode_invocation(frame).map_err(|e| format!("bad invocation: {e}"))?;
    let started = Instant::now();
    let handle = inv.handle;
    let answer = |outcome: Outcome, permit: Option<OwnedSemaphorePermit>| Answer { handle, outcome, started, _permit: permit };
    match inv.procedure.to_ascii_lowercase().as_str() {
        // Topology never changes on one node, so a subscription needs no pushes yet.
        "@subscribe" => {
            let _ = tx.send(answer(Outcome::tables(Vec::new()), Some(permit)));
            return Ok(());
        }
        "@shutdown" => {
            let _ = tx.send(answer(Outcome::tables(Vec::new()), Some(permit)));
            front.shutdown.notify_one();
            return Ok(());
        }
        _ => {}
    }
    let tx = tx.clone();
    let call = Call {
        procedure: inv.procedure,
        params: inv.params,
        partition_destination: inv.partition_destination,
        all_partition: inv.all_partition,
    };
    front.engine.submit(
        call,
        Box::new(move |outcome| {
            let _ = tx.send(Answer { handle, outcome, started, _permit: Some(permit) });
        }),
    );
    Ok(())
}

fn encode_answer(a: Answer, out: &mut Vec<u8>) {
    let o = a.outcome;
    let r = Response {
        handle: a.handle,
        status: o.status,
        status_string: o.status_string,
        app_status: o.app_status,
        app_status_string: o.app_status_string,
        cluster_round_trip_ms: a.started.elapsed().as_millis().min(i32::MAX as u128) as i32,
        tables: o.tables,
    };
    encode_response(&r, out);
}

/// Writes answers as they come, gathering whatever is ready into one write.
async fn write_answers(mut writer: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Answer>) {
    let mut out = Vec::with_capacity(WRITE_BATCH_MAX_BYTES);
    while let Some(first) = rx.recv().await {
        encode_answer(first, &mut out);
        while out.len() < WRITE_BATCH_MAX_BYTES {
            match rx.try_recv() {
                Ok(a) => encode_answer(a, &mut out),
                Err(_) => break,
            }
        }
        if writer.write_all(&out).await.is_err() {
            return;
        }
        out.clear();
    }
    let _ = writer.shutdown().await;
}
