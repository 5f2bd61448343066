//! One PostgreSQL connection: pgwire's message loop, run over a stream that checks each
//! message's length as its header arrives, so that no message over `MESSAGE_MAX_BYTES` is
//! ever buffered (pgwire's own bound is 1 GiB).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use pgwire::api::cancel::DefaultCancelHandler;
use pgwire::api::DefaultClient;
use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState};
use pgwire::error::PgWireError;
use pgwire::messages::PgWireFrontendMessage;
use pgwire::tokio::server::{process_error, process_message, PgWireMessageServerCodec};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};

use crate::errors::{code, error_info};
use crate::handler::Statement;
use crate::tls::{Stream, GSSENC_REQUEST_CODE, SSL_REQUEST_CODE};

/// The longest message a client may send: as long as a VoltDB frame may be, and at most
/// what a COPY row or a statement needs.
pub const MESSAGE_MAX_BYTES: usize = 50 * 1024 * 1024;
/// A client must have logged in this long after it connected.
const STARTUP_TIMEOUT_MS: u64 = 60_000;

/// Serves one client until it leaves, breaks a rule, or the server stops.
pub async fn run(socket: TcpStream, handlers: &crate::Handlers) -> io::Result<()> {
    let startup = tokio::time::sleep(Duration::from_millis(STARTUP_TIMEOUT_MS));
    tokio::pin!(startup);
    let peer = socket.peer_addr()?;
    let negotiated = tokio::select! {
        _ = &mut startup => return Ok(()),
        n = crate::tls::negotiate(socket, handlers.pg.front.security.tls()) => n?,
    };
    let Some(negotiated) = negotiated else { return Ok(()) };
    let mut limit = MessageLimit::new(MESSAGE_MAX_BYTES);
    // What was read ahead during the negotiation is checked like the rest.
    limit.observe(&negotiated.read_ahead).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let codec = PgWireMessageServerCodec::<Statement>::new(DefaultClient::new(peer, negotiated.secure));
    let mut parts = FramedParts::new(Bounded { inner: negotiated.stream, limit }, codec);
    parts.read_buf = negotiated.read_ahead;
    let mut socket = Framed::from_parts(parts);
    socket.set_state(PgWireConnectionState::AwaitingStartup);

    // The handlers by their own types (the trait's methods hide the statement type).
    let pg = handlers.pg.clone();
    let cancel = Arc::new(DefaultCancelHandler::new(handlers.cancels.clone()));
    let errors = crate::handler::Errors;
    loop {
        let logging_in = matches!(socket.state(), PgWireConnectionState::AwaitingStartup | PgWireConnectionState::AuthenticationInProgress);
        let next = if logging_in {
            tokio::select! {
                _ = &mut startup => None,
                m = socket.next() => m,
            }
        } else {
            socket.next().await
        };
        let msg = match next {
            Some(Ok(msg)) => msg,
            // A message over the limit (or a broken one): say why, then close.
            Some(Err(e)) => {
                let state = if socket.get_ref().limit.refused { code::PROGRAM_LIMIT } else { code::PROTOCOL_VIOLATION };
                let mut info = error_info(state, e.to_string());
                info.severity = pgwire::error::SEVERITY_FATAL.to_owned();
                let _ = process_error(&mut socket, PgWireError::UserError(info), false).await;
                break;
            }
            None => break,
        };
        // Terminate: the client is leaving, and some wait for the socket to close.
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let in_extended_query = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let is_cancel = matches!(msg, PgWireFrontendMessage::CancelRequest(_));
        let outcome = process_message(msg, &mut socket, pg.clone(), pg.clone(), pg.clone(), pg.clone(), cancel.clone()).await;
        if let Err(mut e) = outcome {
            errors.on_error(&socket, &mut e);
            let fatal = e.is_fatal();
            process_error(&mut socket, e, in_extended_query).await?;
            if fatal {
                break;
            }
        }
        // A cancel request comes on a connection of its own, which then ends.
        if is_cancel {
            break;
        }
    }
    Ok(())
}

/// The stream under pgwire's framing: every byte read goes through `MessageLimit`.
struct Bounded {
    inner: Stream,
    limit: MessageLimit,
}

impl AsyncRead for Bounded {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                Poll::Ready(this.limit.observe(&buf.filled()[before..]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)))
            }
            other => other,
        }
    }
}

impl AsyncWrite for Bounded {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Follows the protocol's framing byte by byte and refuses a message whose header claims
/// more than `max` bytes. Until the start-up message, messages have no type byte (the
/// SSL and GSSAPI requests before it neither).
pub struct MessageLimit {
    max: usize,
    typed: bool,
    header: [u8; 5],
    have: usize,
    /// Body bytes of the current message still to come.
    remaining: usize,
    /// The first four body bytes of an untyped message: its request code.
    code: [u8; 4],
    code_have: usize,
    /// Set once a message was refused for its length.
    pub refused: bool,
}

impl MessageLimit {
    pub fn new(max: usize) -> MessageLimit {
        MessageLimit { max, typed: false, header: [0; 5], have: 0, remaining: 0, code: [0; 4], code_have: 0, refused: false }
    }

    /// Takes the next bytes of the stream; an Err says what was wrong.
    pub fn observe(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = self.remaining.min(data.len());
                if !self.typed {
                    let take = n.min(4 - self.code_have);
                    self.code[self.code_have..self.code_have + take].copy_from_slice(&data[..take]);
                    self.code_have += take;
                }
                self.remaining -= n;
                data = &data[n..];
                if self.remaining == 0 {
                    self.message_ended();
                }
                continue;
            }
            let header_len = if self.typed { 5 } else { 4 };
            let take = (header_len - self.have).min(data.len());
            self.header[self.have..self.have + take].copy_from_slice(&data[..take]);
            self.have += take;
            data = &data[take..];
            if self.have == header_len {
                self.have = 0;
                let len_bytes =
                    [self.header[header_len - 4], self.header[header_len - 3], self.header[header_len - 2], self.header[header_len - 1]];
                let len = i32::from_be_bytes(len_bytes);
                let body = usize::try_from(len)
                    .ok()
                    .and_then(|l| l.checked_sub(4))
                    .ok_or_else(|| format!("a message claims a length of {len} bytes"))?;
                if body > self.max {
                    self.refused = true;
                    return Err(format!("a message of {body} bytes is over the limit of {} bytes", self.max));
                }
                self.remaining = body;
                self.code_have = 0;
                if body == 0 {
                    self.message_ended();
                }
            }
        }
        Ok(())
    }

    /// After an untyped message: the start-up message (anything but an SSL or GSSAPI
    /// request) makes the messages after it typed.
    fn message_ended(&mut self) {
        if !self.typed {
            let code = if self.code_have == 4 { i32::from_be_bytes(self.code) } else { 0 };
            if code != SSL_REQUEST_CODE && code != GSSENC_REQUEST_CODE {
                self.typed = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn untyped(code: i32, rest: &[u8]) -> Vec<u8> {
        let mut m = ((8 + rest.len()) as i32).to_be_bytes().to_vec();
        m.extend(code.to_be_bytes());
        m.extend(rest);
        m
    }

    fn typed(kind: u8, body_len: usize) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend(((body_len + 4) as i32).to_be_bytes());
        m.extend(vec![b'x'; body_len]);
        m
    }

    #[test]
    fn messages_under_the_limit_pass_in_any_pieces() {
        let mut stream = untyped(SSL_REQUEST_CODE, b"");
        stream.extend(untyped(196_608, b"user\0me\0\0"));
        stream.extend(typed(b'Q', 100));
        stream.extend(typed(b'S', 0));
        stream.extend(typed(b'Q', 100));
        for piece in [1, 3, 7, 1000] {
            let mut limit = MessageLimit::new(100);
            for chunk in stream.chunks(piece) {
                limit.observe(chunk).unwrap();
            }
            assert!(limit.typed && limit.remaining == 0 && limit.have == 0, "piece {piece}");
        }
    }

    #[test]
    fn a_header_over_the_limit_is_refused_before_its_body() {
        let mut limit = MessageLimit::new(100);
        limit.observe(&untyped(196_608, b"user\0me\0\0")).unwrap();
        let header = &typed(b'Q', 101)[..5];
        let e = limit.observe(header).unwrap_err();
        assert!(e.contains("101 bytes is over the limit of 100") && limit.refused, "{e}");
        let mut limit = MessageLimit::new(100);
        assert!(limit.observe(&untyped(196_608, &[0u8; 200])).is_err(), "the start-up message is bounded too");
        let mut limit = MessageLimit::new(100);
        assert!(limit.observe(&[0, 0, 0, 2]).is_err(), "a length under its own four bytes");
    }
}
