//! The `http` export target: POSTs each batch as a JSON array of row records to a URL over
//! plain HTTP/1.1 (one connection per batch); any 2xx answer acknowledges the batch.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::deliver::Sink;

/// Connecting, sending and waiting for the answer each give up after this long.
pub const HTTP_TIMEOUT_MS: u64 = 10_000;
/// Bytes of an answer's status line and headers read at most.
const ANSWER_HEAD_BYTES_MAX: u64 = 64 * 1024;

pub struct HttpSink {
    url: String,
}

/// `http://host:port/path` split into the address and the path.
fn split_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("export target url {url:?} is not supported: give http://host:port/path (https is not supported yet)"))?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let host = if host.contains(':') { host.to_string() } else { format!("{host}:80") };
    Ok((host, path.to_string()))
}

impl HttpSink {
    pub fn new(url: &str) -> Self {
        HttpSink { url: url.to_string() }
    }

    fn post(&self, body: &[u8]) -> Result<u16, String> {
        let (host, path) = split_url(&self.url)?;
        let timeout = Duration::from_millis(HTTP_TIMEOUT_MS);
        let addr = host
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host} has no address"))?;
        let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("cannot connect to {host}: {e}"))?;
        s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        s.write_all(head.as_bytes()).and_then(|_| s.write_all(body)).map_err(|e| format!("cannot send to {host}: {e}"))?;
        let mut status = String::new();
        BufReader::new(s.take(ANSWER_HEAD_BYTES_MAX)).read_line(&mut status).map_err(|e| format!("no answer from {host}: {e}"))?;
        // "HTTP/1.1 204 No Content"
        status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{host} answered something that is not HTTP: {:?}", status.trim()))
    }
}

impl Sink for HttpSink {
    fn send(&mut self, rows: &[serde_json::Value]) -> Result<(), String> {
        let body = serde_json::to_vec(rows).map_err(|e| e.to_string())?;
        match self.post(&body)? {
            200..=299 => Ok(()),
            code => Err(format!("{} answered HTTP {code}", self.url)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_address_and_path() {
        assert_eq!(split_url("http://h:81/a/b").unwrap(), ("h:81".into(), "/a/b".into()));
        assert_eq!(split_url("http://h").unwrap(), ("h:80".into(), "/".into()));
        assert!(split_url("https://h/").unwrap_err().contains("https"));
    }
}
