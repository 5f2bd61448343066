//! The HTTP port (`--http`, 127.0.0.1:8080 by default): VoltDB's JSON API at `/api/1.0/`
//! and `/api/2.0/`, Prometheus' `/metrics`, and the web console at `/` with its files and
//! data under `/console/` (`console.rs`). Anything else is 404.
//!
//! A request names the procedure and its JSON parameters in the query string or in a
//! form-encoded POST body (`Procedure`, `Parameters`, `User`, `Password` or `Hashedpassword`,
//! `admin`, `jsonp`, `Querytimeout`), is logged in against the same users as the wire
//! protocol, and runs through the same path as a wire call (`dispatch.rs`). Refusals are
//! answered as VoltDB answers them: the HTTP status VoltDB uses, and a JSON body with
//! status -3 (UNEXPECTED_FAILURE) and the reason. Connections are kept alive; request
//! bodies, open connections and calls in flight are bounded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use lockstep_core::throttle::Throttle;
use lockstep_core::Error;
use lockstep_engine::{Call, Outcome, Principal};
use lockstep_wire::{from_hex, HashScheme, LoginRequest};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::json::{self, Layout};
use crate::{dispatch, Front};

/// Largest request body (and query string) accepted, as VoltDB's HTTP API (2 MiB).
pub const REQUEST_BODY_MAX_BYTES: usize = 2 * 1024 * 1024;
/// A body over `REQUEST_BODY_MAX_BYTES` is read and dropped up to this size before it is
/// refused (so the client reads the refusal); a larger one is refused unread.
pub const OVERSIZED_BODY_DRAIN_MAX_BYTES: usize = 16 * 1024 * 1024;
/// HTTP connections open at once; more are closed as soon as they are accepted.
pub const HTTP_CONNECTIONS_MAX: usize = 1024;
/// Calls from the HTTP port running at once; further requests wait for one to finish.
pub const HTTP_CALLS_IN_FLIGHT_MAX: usize = 256;
/// A request's headers must arrive within this time (also how long an idle kept-alive
/// connection stays open).
pub const HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// A request's body must arrive within this time.
pub const BODY_READ_TIMEOUT_MS: u64 = 30_000;
/// Time between answering `@Shutdown` and stopping, so the answer reaches the caller.
const SHUTDOWN_AFTER_ANSWER_MS: u64 = 200;
/// Most form fields one request may carry (VoltDB's limit).
const FORM_FIELDS_MAX: usize = 512;
/// VoltDB's JSON content type.
const JSON_CONTENT_TYPE: &str = "application/json;charset=utf-8";
/// Prometheus' text exposition format.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Refused HTTP connections and failed logins logged per window; the rest are counted.
static HTTP_LOG: Throttle = Throttle::new(20, Duration::from_secs(60));

type Body = Full<Bytes>;

/// What every HTTP connection shares.
struct HttpState {
    front: Arc<Front>,
    calls: Arc<Semaphore>,
    /// The console's cached figures (those it must ask the sites or the disk for).
    console: Arc<crate::console::Console>,
}

/// Accepts HTTP connections on `listener` until the task is dropped (the server stops).
pub async fn serve(listener: TcpListener, front: Arc<Front>) {
    let state = Arc::new(HttpState {
        front,
        calls: Arc::new(Semaphore::new(HTTP_CALLS_IN_FLIGHT_MAX)),
        console: Arc::new(crate::console::Console::default()),
    });
    let connections = Arc::new(Semaphore::new(HTTP_CONNECTIONS_MAX));
    loop {
        let (socket, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("HTTP accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            log_throttled(&format!("HTTP connection from {peer} refused: {HTTP_CONNECTIONS_MAX} are open"));
            continue;
        };
        state.front.metrics.http_connections.fetch_add(1, Ordering::Relaxed);
        let _ = socket.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(req, peer, &state).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_millis(HEADER_READ_TIMEOUT_MS))
                .keep_alive(true)
                .serve_connection(TokioIo::new(socket), service)
                .await;
            if let Err(e) = served {
                if !e.is_incomplete_message() && !e.is_timeout() {
                    tracing::debug!(%peer, "HTTP connection ended: {e}");
                }
            }
            drop(permit);
        });
    }
}

fn log_throttled(line: &str) {
    if let Some(suppressed) = HTTP_LOG.admit() {
        tracing::warn!(suppressed, "{line}");
    }
}

async fn handle(req: Request<Incoming>, peer: SocketAddr, state: &HttpState) -> Response<Body> {
    state.front.metrics.http_requests.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path();
    if crate::console::serves(path) {
        let authorization = req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let login = || authenticate(&Form(Vec::new()), authorization, peer, &state.front);
        return crate::console::handle(req.method(), path, login, &state.front, &state.console);
    }
    let layout = match path {
        "/metrics" => return metrics(req, state).await,
        "/api/1.0/" | "/api/1.0" => Layout::V1,
        "/api/2.0/" | "/api/2.0" => Layout::V2,
        _ => return plain(StatusCode::NOT_FOUND, "Resource not found\n"),
    };
    if req.method() != Method::GET && req.method() != Method::POST {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "Use GET or POST\n");
    }
    api(req, peer, layout, state).await.unwrap_or_else(Refusal::into_response)
}

async fn metrics(req: Request<Incoming>, state: &HttpState) -> Response<Body> {
    if req.method() != Method::GET {
        return plain(StatusCode::METHOD_NOT_ALLOWED, "Use GET\n");
    }
    let text = crate::metrics::render(&state.front).await;
    respond(StatusCode::OK, METRICS_CONTENT_TYPE, text)
}

/// The fields of a request: query string first, then a POST body (as a servlet reads
/// them; the first of a repeated name wins).
struct Form(Vec<(String, String)>);

impl Form {
    fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// One JSON API request, start to answer.
async fn api(req: Request<Incoming>, peer: SocketAddr, layout: Layout, state: &HttpState) -> Result<Response<Body>, Refusal> {
    let started = Instant::now();
    // VoltDB reads the JSONP callback from a header first, then from the fields.
    let mut jsonp = match req.headers().get("jsonp").map(|v| v.to_str()) {
        Some(Ok(cb)) => Some(checked_jsonp(cb)?.to_string()),
        Some(Err(_)) => return Err(refusal(None, StatusCode::BAD_REQUEST, "Invalid jsonp callback function name")),
        None => None,
    };
    let authorization = req.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut form = Form(Vec::new());
    if let Some(q) = req.uri().query() {
        parse_form(q.as_bytes(), &mut form).map_err(|e| refusal(jsonp.as_deref(), StatusCode::BAD_REQUEST, &e))?;
    }
    if req.method() == Method::POST {
        let body = read_body(req, jsonp.as_deref()).await?;
        parse_form(&body, &mut form).map_err(|e| refusal(jsonp.as_deref(), StatusCode::BAD_REQUEST, &e))?;
    }
    if jsonp.is_none() {
        if let Some(cb) = form.get("jsonp") {
            jsonp = Some(checked_jsonp(cb)?.to_string());
        }
    }
    let jsonp = jsonp.as_deref();
    let Some(procedure) = form.get("Procedure") else {
        return Err(refusal(jsonp, StatusCode::BAD_REQUEST, "Procedure parameter is missing"));
    };
    let timeout_ms = match form.get("Querytimeout") {
        None => None,
        Some(t) => match t.parse::<i32>() {
            Ok(ms) if ms > 0 => Some(ms),
            _ => return Err(refusal(jsonp, StatusCode::BAD_REQUEST, &format!("invalid query timeout: {t}"))),
        },
    };
    let principal =
        authenticate(&form, authorization.as_deref(), peer, &state.front).map_err(|e| refusal(jsonp, StatusCode::UNAUTHORIZED, &e))?;
    let params = match form.get("Parameters") {
        None => Vec::new(),
        Some(text) => json::parse_parameters(text)
            .map_err(|e| refusal(jsonp, StatusCode::BAD_REQUEST, &format!("failed to parse invocation parameters: {e}")))?,
    };
    let call = Call { procedure: procedure.to_string(), params, partition_destination: None, all_partition: false, timeout_ms, principal };
    let answered = run(call, started, state).await;
    if answered.then_shutdown {
        let front = state.front.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(SHUTDOWN_AFTER_ANSWER_MS)).await;
            front.shutdown.notify_one();
        });
    }
    Ok(respond(StatusCode::OK, JSON_CONTENT_TYPE, with_jsonp(jsonp, json::encode_outcome(&answered.outcome, layout))))
}

/// Runs a call through the path every front end shares, within the bound on calls in flight.
async fn run(call: Call, started: Instant, state: &HttpState) -> dispatch::Answered {
    let unavailable = |why: &str| dispatch::Answered {
        outcome: Outcome::error(Error::unavailable(why)),
        round_trip: started.elapsed(),
        then_shutdown: false,
    };
    let Ok(_permit) = state.calls.clone().acquire_owned().await else {
        return unavailable("the server is stopping");
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let subscribe = |_: &[lockstep_core::Value]| {
        Outcome::error(Error::graceful("@Subscribe needs a wire-protocol connection: the HTTP API cannot push"))
    };
    dispatch::start(&state.front, call, dispatch::Caller { started, baselines: None, subscribe }, move |a| {
        let _ = tx.send(a);
    });
    rx.await.unwrap_or_else(|_| unavailable("the call was dropped before it was answered"))
}

/// Reads a POST body of at most `REQUEST_BODY_MAX_BYTES`, answering as VoltDB does when it
/// is too large or empty. A body over the limit is still read (and dropped) up to
/// `OVERSIZED_BODY_DRAIN_MAX_BYTES`, so the client, still sending, reads the refusal rather
/// than a reset; a larger one is refused at once and the connection closed.
async fn read_body(req: Request<Incoming>, jsonp: Option<&str>) -> Result<Bytes, Refusal> {
    let declared = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let too_large = |n: u64| refusal(jsonp, StatusCode::OK, &format!("Query string too large: {n}"));
    match declared {
        Some(n) if n > OVERSIZED_BODY_DRAIN_MAX_BYTES as u64 => return Err(too_large(n)),
        Some(0) => return Err(refusal(jsonp, StatusCode::OK, "Received POST with no parameters in the body.")),
        _ => {}
    }
    let read = tokio::time::timeout(Duration::from_millis(BODY_READ_TIMEOUT_MS), bounded_body(req.into_body())).await;
    match read {
        Err(_) => {
            Err(refusal(jsonp, StatusCode::REQUEST_TIMEOUT, &format!("the request body did not arrive within {BODY_READ_TIMEOUT_MS} ms")))
        }
        Ok(Err(BodyProblem::TooLarge(n))) => Err(too_large(n)),
        Ok(Err(BodyProblem::Read(e))) => Err(refusal(jsonp, StatusCode::BAD_REQUEST, &format!("cannot read the request body: {e}"))),
        Ok(Ok(bytes)) if bytes.is_empty() => Err(refusal(jsonp, StatusCode::OK, "Received POST with no parameters in the body.")),
        Ok(Ok(bytes)) => Ok(bytes),
    }
}

/// Why a body was not taken.
enum BodyProblem {
    /// Bytes seen, over `REQUEST_BODY_MAX_BYTES`.
    TooLarge(u64),
    Read(hyper::Error),
}

/// The body, if it is within `REQUEST_BODY_MAX_BYTES`; past that its bytes are counted and
/// dropped, up to `OVERSIZED_BODY_DRAIN_MAX_BYTES`.
async fn bounded_body(mut body: Incoming) -> Result<Bytes, BodyProblem> {
    let mut kept = Vec::new();
    let mut seen: u64 = 0;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(BodyProblem::Read)?.into_data() else { continue };
        seen += data.len() as u64;
        if seen > OVERSIZED_BODY_DRAIN_MAX_BYTES as u64 {
            return Err(BodyProblem::TooLarge(seen));
        }
        if seen <= REQUEST_BODY_MAX_BYTES as u64 {
            kept.extend_from_slice(&data);
        }
    }
    if seen > REQUEST_BODY_MAX_BYTES as u64 {
        return Err(BodyProblem::TooLarge(seen));
    }
    Ok(Bytes::from(kept))
}

/// The user a request logs in as: `Authorization: Basic …` (or VoltDB's `Hashed
/// user:hexdigest`), else the `User` and `Password`/`Hashedpassword` fields. With security
/// off everyone is let in without a principal, as on the wire.
fn authenticate(form: &Form, authorization: Option<&str>, peer: SocketAddr, front: &Front) -> Result<Option<Arc<Principal>>, String> {
    let (user, password, hashed) = match authorization.and_then(credentials_from_header) {
        Some(c) => c,
        None => {
            (form.get("User").map(str::to_string), form.get("Password").map(str::to_string), form.get("Hashedpassword").map(str::to_string))
        }
    };
    let user = user.unwrap_or_default();
    // Hashedpassword wins over Password, as in VoltDB.
    let (scheme, digest) = match (hashed, password) {
        (Some(hex), _) => {
            let digest = from_hex(&hex).ok_or_else(hashed_password_error)?;
            match digest.len() {
                20 => (HashScheme::Sha1, digest),
                32 => (HashScheme::Sha256, digest),
                _ => return Err(hashed_password_error()),
            }
        }
        (None, Some(pw)) => (HashScheme::Sha256, HashScheme::Sha256.hash(pw.as_bytes())),
        (None, None) => (HashScheme::Sha256, Vec::new()),
    };
    let request = LoginRequest { version: 1, scheme, service: "database".into(), username: user.clone(), digest };
    front.security.login(&request).map_err(|_| {
        let message = format!("User {user} from {} failed to authenticate", peer.ip());
        log_throttled(&format!("HTTP login refused: {message}"));
        message
    })
}

fn hashed_password_error() -> String {
    "Hashedpassword must be a 40-byte hex-encoded SHA-1 hash (20 bytes unencoded) or 64-byte hex-encoded SHA-256 hash (32 bytes unencoded)"
        .into()
}

/// (user, password, hashed password) from an `Authorization` header VoltDB understands.
fn credentials_from_header(header: &str) -> Option<(Option<String>, Option<String>, Option<String>)> {
    let (scheme, rest) = header.split_once(' ')?;
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = String::from_utf8(base64_decode(rest.trim())?).ok()?;
        let (u, p) = decoded.split_once(':')?;
        return Some((Some(u.to_string()), Some(p.to_string()), None));
    }
    if scheme.eq_ignore_ascii_case("hashed") {
        let (u, h) = rest.trim().split_once(':')?;
        return Some((Some(u.to_string()), None, Some(h.to_string())));
    }
    None
}

/// Standard base64 (with or without padding), as Basic authentication sends it.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            acc |= value(*c)? << (18 - 6 * i);
        }
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return None,
        };
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

/// Adds the fields of a form-encoded text (`a=1&b=x+y%21`) to `form`.
fn parse_form(text: &[u8], form: &mut Form) -> Result<(), String> {
    for pair in text.split(|b| *b == b'&').filter(|p| !p.is_empty()) {
        if form.0.len() >= FORM_FIELDS_MAX {
            return Err(format!("more than {FORM_FIELDS_MAX} form fields"));
        }
        let (k, v) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        form.0.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(())
}

/// Form decoding: `+` is a space, `%XX` a byte; the result must be UTF-8.
fn percent_decode(s: &[u8]) -> Result<String, String> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u8::from_str_radix(h, 16).ok());
                let Some(byte) = hex else { return Err("malformed %-escape in the request's fields".into()) };
                out.push(byte);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "the request's fields are not UTF-8".to_string())
}

/// A JSONP callback name: letters, digits, `_` and `$` only (VoltDB's rule).
fn checked_jsonp(cb: &str) -> Result<&str, Refusal> {
    if cb.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$') {
        Ok(cb)
    } else {
        Err(refusal(None, StatusCode::BAD_REQUEST, "Invalid jsonp callback function name"))
    }
}

fn with_jsonp(jsonp: Option<&str>, body: String) -> String {
    match jsonp {
        Some(cb) => format!("{cb}( {body} )"),
        None => body,
    }
}

/// A request refused before it ran, answered in VoltDB's form: the HTTP status it uses and
/// a JSON answer with status -3 and the reason.
struct Refusal {
    jsonp: Option<String>,
    status: StatusCode,
    message: String,
}

fn refusal(jsonp: Option<&str>, status: StatusCode, message: &str) -> Refusal {
    Refusal { jsonp: jsonp.map(str::to_string), status, message: message.to_string() }
}

impl Refusal {
    fn into_response(self) -> Response<Body> {
        let body = json::encode_outcome(&Outcome::error(Error::unexpected(self.message)), Layout::V1);
        respond(self.status, JSON_CONTENT_TYPE, with_jsonp(self.jsonp.as_deref(), body))
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    respond(status, "text/plain; charset=utf-8", text.to_string())
}

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_fields_decode_plus_and_percent_escapes() {
        let mut f = Form(Vec::new());
        parse_form(b"Procedure=%40AdHoc&Parameters=%5B%22select+1%22%5D&empty&x=", &mut f).unwrap();
        assert_eq!(f.get("Procedure"), Some("@AdHoc"));
        assert_eq!(f.get("Parameters"), Some("[\"select 1\"]"));
        assert_eq!((f.get("empty"), f.get("x")), (Some(""), Some("")));
        assert!(parse_form(b"a=%zz", &mut f).is_err());
        assert!(parse_form(b"a=%f", &mut f).is_err());
    }

    #[test]
    fn basic_credentials_decode() {
        assert_eq!(base64_decode("YWxpY2U6czNjcmV0").as_deref(), Some(&b"alice:s3cret"[..]));
        assert_eq!(base64_decode("YQ==").as_deref(), Some(&b"a"[..]));
        assert_eq!(credentials_from_header("Basic YWxpY2U6czNjcmV0"), Some((Some("alice".into()), Some("s3cret".into()), None)));
        assert!(base64_decode("a").is_none());
    }

    #[test]
    fn jsonp_names_are_checked_and_wrap_the_answer() {
        assert!(checked_jsonp("cb_1$").is_ok());
        assert!(checked_jsonp("alert(1)").is_err());
        assert_eq!(with_jsonp(Some("cb"), "{}".into()), "cb( {} )");
    }
}
