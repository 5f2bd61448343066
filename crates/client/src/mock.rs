//! A tiny in-test server built on the wire codec: logs anyone in, answers some calls itself
//! and hands the rest to the test, which answers when and how it likes.

use std::sync::Arc;

use bytes::BytesMut;
use lockstep_wire::response::status;
use lockstep_wire::{
    decode_frame, decode_invocation, decode_login_request, encode_login_response, encode_response, Invocation, LoginResponse, LoginSuccess,
    Response,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Answers a call directly when it returns Some (the handle is filled in).
pub type Auto = Arc<dyn Fn(&Invocation) -> Option<Response> + Send + Sync>;

/// One accepted connection as the test sees it. Dropping it closes the connection.
pub struct MockConn {
    pub calls: mpsc::UnboundedReceiver<Invocation>,
    pub replies: mpsc::UnboundedSender<Response>,
    /// Bytes written to the client as they are (malformed answers, say).
    pub raw: mpsc::UnboundedSender<Vec<u8>>,
}

/// An auto-responder that fails every system procedure, as a server without them would.
pub fn no_system_procs() -> Auto {
    Arc::new(|inv: &Invocation| {
        inv.procedure.starts_with('@').then(|| Response {
            status: status::UNEXPECTED_FAILURE,
            status_string: Some(format!("Procedure {} was not found", inv.procedure)),
            ..Response::success(inv.handle, vec![])
        })
    })
}

/// Starts listening on 127.0.0.1; returns the address and the stream of accepted connections.
pub async fn start(auto: Auto) -> (String, mpsc::UnboundedReceiver<MockConn>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, auto.clone(), tx.clone()));
        }
    });
    (addr, rx)
}

async fn read_frame(rd: &mut OwnedReadHalf, buf: &mut BytesMut) -> Option<BytesMut> {
    loop {
        if let Some(f) = decode_frame(buf).unwrap() {
            return Some(f);
        }
        if rd.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
}

async fn serve(stream: TcpStream, auto: Auto, conns: mpsc::UnboundedSender<MockConn>) {
    let (mut rd, mut wr) = stream.into_split();
    let mut buf = BytesMut::new();
    let Some(login) = read_frame(&mut rd, &mut buf).await else {
        return;
    };
    decode_login_request(&login).unwrap();
    let mut out = Vec::new();
    let ok = LoginSuccess { host_id: 0, connection_id: 1, cluster_start_ms: 1, leader_ipv4: 0x7f000001, build: "mock".into() };
    encode_login_response(&LoginResponse::Success(ok), &mut out);
    wr.write_all(&out).await.unwrap();
    let (calls_tx, calls) = mpsc::unbounded_channel();
    let (replies, mut replies_rx) = mpsc::unbounded_channel();
    let (raw, mut raw_rx) = mpsc::unbounded_channel();
    conns.send(MockConn { calls, replies, raw }).unwrap();
    loop {
        let mut out = Vec::new();
        tokio::select! {
            frame = read_frame(&mut rd, &mut buf) => {
                let Some(frame) = frame else { return };
                let inv = decode_invocation(&frame).unwrap();
                match auto(&inv) {
                    Some(mut r) => {
                        r.handle = inv.handle;
                        encode_response(&r, &mut out);
                    }
                    None => {
                        if calls_tx.send(inv).is_err() {
                            return;
                        }
                    }
                }
            }
            reply = replies_rx.recv() => {
                let Some(r) = reply else { return };
                encode_response(&r, &mut out);
            }
            bytes = raw_rx.recv() => {
                let Some(bytes) = bytes else { return };
                out = bytes;
            }
        }
        if !out.is_empty() && wr.write_all(&out).await.is_err() {
            return;
        }
    }
}
