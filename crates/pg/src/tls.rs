//! The requests a PostgreSQL client may send before its start-up message (SSLRequest,
//! GSSENCRequest), answered here rather than by pgwire (whose TLS needs crates outside the
//! workspace): with the server's TLS certificate (`--tls-cert`, the same as the VoltDB
//! port's) the connection becomes TLS, and a client that will not use TLS is refused, as
//! on the VoltDB port; without one, both requests are declined and the client goes on in
//! clear. GSSAPI encryption is always declined.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use pgwire::messages::response::ErrorResponse;
use pgwire::messages::Message;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::errors::{code, error_info};

/// The request codes of the untyped messages that may come before the start-up message.
pub const SSL_REQUEST_CODE: i32 = 80_877_103;
pub const GSSENC_REQUEST_CODE: i32 = 80_877_104;
const CANCEL_REQUEST_CODE: i32 = 80_877_102;
/// An SSLRequest or GSSENCRequest: a length and a code, four bytes each.
const REQUEST_BYTES: usize = 8;
/// A client may ask for GSSAPI and then TLS (libpq's order), no more.
const REQUESTS_MAX: usize = 2;
/// The first byte of a TLS handshake: a client that starts TLS at once (PostgreSQL 17's
/// `sslnegotiation=direct`), which this port does not take.
const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// A client's connection, in clear or in TLS.
pub enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// What the negotiation leaves: the stream, the bytes already read from it (the start of
/// the start-up message), and whether it is TLS.
pub struct Negotiated {
    pub stream: Stream,
    pub read_ahead: BytesMut,
    pub secure: bool,
}

/// Answers the requests before the start-up message. None: the connection is to close
/// (the client left, asked for what this port does not do, or refused TLS where it is
/// required; the client has been told why where the protocol lets it).
pub async fn negotiate(mut socket: TcpStream, tls: Option<&TlsAcceptor>) -> io::Result<Option<Negotiated>> {
    let mut buf = BytesMut::with_capacity(REQUEST_BYTES);
    for _ in 0..=REQUESTS_MAX {
        while buf.len() < REQUEST_BYTES {
            if socket.read_buf(&mut buf).await? == 0 {
                return Ok(None);
            }
        }
        if buf[0] == TLS_HANDSHAKE_BYTE {
            return Ok(None);
        }
        let length = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let request = i32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
        let is_request = length == REQUEST_BYTES as i32 && (request == SSL_REQUEST_CODE || request == GSSENC_REQUEST_CODE);
        if !is_request {
            // The start-up message (or a cancel request): pgwire reads it from here.
            if tls.is_some() && request != CANCEL_REQUEST_CODE {
                refuse_plain(&mut socket).await;
                return Ok(None);
            }
            return Ok(Some(Negotiated { stream: Stream::Plain(socket), read_ahead: buf, secure: false }));
        }
        buf.advance(REQUEST_BYTES);
        match tls {
            Some(acceptor) if request == SSL_REQUEST_CODE => {
                // Bytes sent after the request and before the handshake would be taken
                // as if they had come encrypted: refuse them (PostgreSQL does too).
                if !buf.is_empty() {
                    return Ok(None);
                }
                socket.write_all(b"S").await?;
                let stream = acceptor.accept(socket).await?;
                return Ok(Some(Negotiated { stream: Stream::Tls(Box::new(stream)), read_ahead: buf, secure: true }));
            }
            _ => socket.write_all(b"N").await?,
        }
    }
    Ok(None)
}

/// Tells a client that starts without TLS, where TLS is required, what to do.
async fn refuse_plain(socket: &mut TcpStream) {
    let mut info = error_info(
        code::INVALID_AUTHORIZATION,
        "this server takes PostgreSQL clients over TLS only (--tls-cert): connect with sslmode=require (or verify-full)",
    );
    info.severity = pgwire::error::SEVERITY_FATAL.to_owned();
    let mut out = BytesMut::new();
    if ErrorResponse::from(*info).encode(&mut out).is_ok() {
        let _ = socket.write_all(&out).await;
    }
    let _ = socket.shutdown().await;
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A connected pair: the server's end and the client's.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (server, client)
    }

    fn request(code: i32) -> Vec<u8> {
        let mut m = (REQUEST_BYTES as i32).to_be_bytes().to_vec();
        m.extend(code.to_be_bytes());
        m
    }

    #[tokio::test]
    async fn without_a_certificate_both_requests_are_declined_and_the_startup_passes_on() {
        let (server, mut client) = pair().await;
        let talk = tokio::spawn(async move {
            let mut answer = [0u8; 1];
            client.write_all(&request(GSSENC_REQUEST_CODE)).await.unwrap();
            client.read_exact(&mut answer).await.unwrap();
            assert_eq!(&answer, b"N");
            client.write_all(&request(SSL_REQUEST_CODE)).await.unwrap();
            client.read_exact(&mut answer).await.unwrap();
            assert_eq!(&answer, b"N");
            client.write_all(&[0, 0, 0, 9, 0, 3, 0, 0, 0]).await.unwrap();
            client
        });
        let negotiated = negotiate(server, None).await.unwrap().expect("goes on in clear");
        let _client = talk.await.unwrap();
        assert!(!negotiated.secure && matches!(negotiated.stream, Stream::Plain(_)));
        // The start-up message is left for pgwire, whole once the rest arrives.
        assert!([0u8, 0, 0, 9, 0, 3, 0, 0, 0].starts_with(&negotiated.read_ahead));
        assert!(negotiated.read_ahead.len() >= REQUEST_BYTES);
    }

    #[tokio::test]
    async fn direct_tls_and_endless_requests_close_the_connection() {
        let (server, mut client) = pair().await;
        client.write_all(&[TLS_HANDSHAKE_BYTE, 3, 1, 0, 0, 0, 0, 0]).await.unwrap();
        assert!(negotiate(server, None).await.unwrap().is_none());
        let (server, mut client) = pair().await;
        let talk = tokio::spawn(async move {
            for _ in 0..=REQUESTS_MAX {
                client.write_all(&request(SSL_REQUEST_CODE)).await.unwrap();
                let mut answer = [0u8; 1];
                client.read_exact(&mut answer).await.unwrap();
            }
            client
        });
        assert!(negotiate(server, None).await.unwrap().is_none());
        let _client = talk.await.unwrap();
    }
}
