//! The login handshake (§1.2): the client's request and the server's answer.

use lockstep_core::{Error, Result};

use crate::codec::{begin_len, malformed, patch_len, put_i32, put_i64, put_i8, put_string, Reader};

/// The only service name we serve ("kerberos" would need GSS, which we do not support).
pub const SERVICE_DATABASE: &str = "database";
/// Longest username we accept.
pub const USERNAME_MAX_BYTES: usize = 4096;
/// Longest service name we accept.
pub const SERVICE_NAME_MAX_BYTES: usize = 256;
/// Longest build string we accept in a login response.
pub const BUILD_STRING_MAX_BYTES: usize = 4096;

/// How the password digest was computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashScheme {
    Sha1,
    Sha256,
}

impl HashScheme {
    /// Digest length in bytes.
    pub fn digest_len(self) -> usize {
        match self {
            HashScheme::Sha1 => 20,
            HashScheme::Sha256 => 32,
        }
    }

    fn code(self) -> i8 {
        match self {
            HashScheme::Sha1 => 0,
            HashScheme::Sha256 => 1,
        }
    }

    /// The scheme's name, as in configuration files and messages.
    pub fn name(self) -> &'static str {
        match self {
            HashScheme::Sha1 => "sha1",
            HashScheme::Sha256 => "sha256",
        }
    }

    /// H(data): what a client sends for the password `data` (`digest_len` bytes).
    pub fn hash(self, data: &[u8]) -> Vec<u8> {
        use sha1::Digest as _;
        match self {
            HashScheme::Sha1 => sha1::Sha1::digest(data).to_vec(),
            HashScheme::Sha256 => sha2::Sha256::digest(data).to_vec(),
        }
    }

    /// What a server keeps for `password`, as VoltDB's does: H(H(password)), in lower-case
    /// hex. It is not what a client sends, so a stolen file does not log anyone in.
    pub fn stored_hex(self, password: &str) -> String {
        to_hex(&self.hash(&self.hash(password.as_bytes())))
    }
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// The bytes of a hex string (either case); None if it is not hex.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = text.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks_exact(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

/// A decoded login request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginRequest {
    /// Login protocol version: 0 (legacy, SHA-1, no scheme byte) or 1.
    pub version: u8,
    pub scheme: HashScheme,
    pub service: String,
    pub username: String,
    /// H(password), raw.
    pub digest: Vec<u8>,
}

/// Result codes of the login response (unknown codes read as `AuthFailed`, as the client does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginCode {
    Success,
    AuthFailed,
    TooManyConnections,
    Timeout,
    ProtocolViolation,
    RejoinFailed,
    UnknownService,
}

impl LoginCode {
    pub fn code(self) -> i8 {
        match self {
            LoginCode::Success => 0,
            LoginCode::AuthFailed => -1,
            LoginCode::TooManyConnections => 1,
            LoginCode::Timeout => 2,
            LoginCode::ProtocolViolation => 3,
            LoginCode::RejoinFailed => 4,
            LoginCode::UnknownService => 5,
        }
    }

    pub fn from_code(code: i8) -> LoginCode {
        match code {
            0 => LoginCode::Success,
            1 => LoginCode::TooManyConnections,
            2 => LoginCode::Timeout,
            3 => LoginCode::ProtocolViolation,
            4 => LoginCode::RejoinFailed,
            5 => LoginCode::UnknownService,
            _ => LoginCode::AuthFailed,
        }
    }

    /// The client's message for a failure code.
    pub fn describe(self) -> &'static str {
        match self {
            LoginCode::Success => "success",
            LoginCode::AuthFailed => "Authentication rejected",
            LoginCode::TooManyConnections => "Server has too many connections",
            LoginCode::Timeout => "Connection timed out during authentication",
            LoginCode::ProtocolViolation => "Wire protocol format violation error",
            LoginCode::RejoinFailed => "Failed to authenticate to rejoining node",
            LoginCode::UnknownService => "Export not enabled for server",
        }
    }
}

/// A rejected login: the code to answer with before closing, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginError {
    pub code: LoginCode,
    pub error: Error,
}

fn reject(code: LoginCode, reason: impl std::fmt::Display) -> LoginError {
    LoginError { code, error: Error::graceful(format!("login rejected: {reason}")) }
}

/// Decodes a login frame's payload, following the real server's rules (§1.2.1).
pub fn decode_login_request(payload: &[u8]) -> std::result::Result<LoginRequest, LoginError> {
    let violation = |e: Error| LoginError { code: LoginCode::ProtocolViolation, error: e };
    let mut r = Reader::new(payload);
    let version = r.u8("login version").map_err(violation)?;
    let scheme = match version {
        0 => HashScheme::Sha1,
        1 => match r.i8("hash scheme").map_err(violation)? {
            0 => HashScheme::Sha1,
            1 => HashScheme::Sha256,
            2 => return Err(reject(LoginCode::AuthFailed, "Kerberos (SPNEGO) login is not supported")),
            other => return Err(reject(LoginCode::ProtocolViolation, format!("unknown hash scheme {other}"))),
        },
        other => return Err(reject(LoginCode::ProtocolViolation, format!("unknown login version {other}"))),
    };
    let service = r.required_string("service name").map_err(violation)?;
    if service.len() > SERVICE_NAME_MAX_BYTES {
        return Err(reject(LoginCode::ProtocolViolation, "service name too long"));
    }
    let username = r.string("username").map_err(violation)?.unwrap_or_default();
    if username.len() > USERNAME_MAX_BYTES {
        return Err(reject(LoginCode::ProtocolViolation, format!("username longer than {USERNAME_MAX_BYTES} bytes")));
    }
    if r.remaining() != scheme.digest_len() {
        return Err(reject(LoginCode::AuthFailed, format!("password digest is {} bytes, expected {}", r.remaining(), scheme.digest_len())));
    }
    let digest = r.bytes(scheme.digest_len(), "password digest").map_err(violation)?.to_vec();
    if service != SERVICE_DATABASE {
        return Err(reject(LoginCode::UnknownService, format!("unknown service {service:?}")));
    }
    Ok(LoginRequest { version, scheme, service, username, digest })
}

/// Appends a login request frame. Version 0 implies SHA-1 and has no scheme byte.
pub fn encode_login_request(req: &LoginRequest, out: &mut Vec<u8>) {
    let at = begin_len(out);
    put_i8(out, req.version as i8);
    if req.version != 0 {
        put_i8(out, req.scheme.code());
    }
    put_string(out, &req.service);
    put_string(out, &req.username);
    out.extend_from_slice(&req.digest);
    patch_len(out, at);
}

/// What a successful login tells the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginSuccess {
    pub host_id: i32,
    pub connection_id: i64,
    /// Cluster start time (ms since the epoch); with `leader_ipv4` the cluster instance id.
    pub cluster_start_ms: i64,
    /// IPv4 address of the cluster leader, as a big-endian integer.
    pub leader_ipv4: u32,
    pub build: String,
}

/// The server's answer to a login.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoginResponse {
    Success(LoginSuccess),
    /// Never `LoginCode::Success`.
    Failure(LoginCode),
}

/// Appends a login response frame: 34+B bytes on success, 6 bytes on failure.
pub fn encode_login_response(resp: &LoginResponse, out: &mut Vec<u8>) {
    let at = begin_len(out);
    put_i8(out, 0);
    match resp {
        LoginResponse::Success(s) => {
            put_i8(out, 0);
            put_i32(out, s.host_id);
            put_i64(out, s.connection_id);
            put_i64(out, s.cluster_start_ms);
            put_i32(out, s.leader_ipv4 as i32);
            put_string(out, &s.build);
        }
        LoginResponse::Failure(code) => {
            // A failure must never read as success on the other side.
            let code = if *code == LoginCode::Success { LoginCode::AuthFailed } else { *code };
            put_i8(out, code.code());
        }
    }
    patch_len(out, at);
}

/// Decodes a login response frame's payload.
pub fn decode_login_response(payload: &[u8]) -> Result<LoginResponse> {
    let mut r = Reader::new(payload);
    let version = r.i8("login response version")?;
    if version == 2 {
        return Err(malformed("server asked for Kerberos authentication, which is not supported"));
    }
    let code = r.i8("login result code")?;
    if code != 0 {
        return Ok(LoginResponse::Failure(LoginCode::from_code(code)));
    }
    let host_id = r.i32("host id")?;
    let connection_id = r.i64("connection id")?;
    let cluster_start_ms = r.i64("cluster start timestamp")?;
    let leader_ipv4 = r.i32("leader address")? as u32;
    let build = r.string("build string")?.unwrap_or_default();
    if build.len() > BUILD_STRING_MAX_BYTES {
        return Err(malformed("build string too long"));
    }
    Ok(LoginResponse::Success(LoginSuccess { host_id, connection_id, cluster_start_ms, leader_ipv4, build }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(req: &LoginRequest) -> Vec<u8> {
        let mut out = Vec::new();
        encode_login_request(req, &mut out);
        out.split_off(4)
    }

    fn request(version: u8, scheme: HashScheme) -> LoginRequest {
        LoginRequest { version, scheme, service: "database".into(), username: "alice".into(), digest: vec![7; scheme.digest_len()] }
    }

    #[test]
    fn both_versions_and_schemes_round_trip() {
        for (v, s) in [(0, HashScheme::Sha1), (1, HashScheme::Sha1), (1, HashScheme::Sha256)] {
            let req = request(v, s);
            assert_eq!(decode_login_request(&payload(&req)).unwrap(), req);
        }
    }

    #[test]
    fn digest_length_must_match_the_scheme() {
        let mut req = request(1, HashScheme::Sha256);
        req.digest = vec![1; 20];
        assert_eq!(decode_login_request(&payload(&req)).unwrap_err().code, LoginCode::AuthFailed);
    }

    #[test]
    fn unknown_scheme_version_and_service_have_their_codes() {
        let mut p = payload(&request(1, HashScheme::Sha256));
        p[1] = 9;
        assert_eq!(decode_login_request(&p).unwrap_err().code, LoginCode::ProtocolViolation);
        p[0] = 4;
        assert_eq!(decode_login_request(&p).unwrap_err().code, LoginCode::ProtocolViolation);
        let mut req = request(1, HashScheme::Sha256);
        req.service = "export".into();
        assert_eq!(decode_login_request(&payload(&req)).unwrap_err().code, LoginCode::UnknownService);
        assert_eq!(decode_login_request(&[]).unwrap_err().code, LoginCode::ProtocolViolation);
    }

    fn hex(d: &[u8]) -> String {
        to_hex(d)
    }

    #[test]
    fn digests_are_the_known_ones() {
        assert_eq!(hex(&HashScheme::Sha256.hash(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex(&HashScheme::Sha256.hash(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hex(&HashScheme::Sha1.hash(b"abc")), "a9993e364706816aba3e25717850c26c9cd0d89d");
        for s in [HashScheme::Sha1, HashScheme::Sha256] {
            assert_eq!(s.hash(b"x").len(), s.digest_len());
        }
    }

    #[test]
    fn the_stored_form_is_the_digest_of_the_digest() {
        for s in [HashScheme::Sha1, HashScheme::Sha256] {
            let sent = s.hash(b"secret");
            assert_eq!(s.stored_hex("secret"), hex(&s.hash(&sent)));
            assert_ne!(s.stored_hex("secret"), hex(&sent));
        }
    }

    #[test]
    fn hex_round_trips_and_rejects_non_hex() {
        assert_eq!(from_hex(&to_hex(&[0, 0xab, 0xff])).unwrap(), vec![0, 0xab, 0xff]);
        assert_eq!(from_hex("ABcd").unwrap(), vec![0xab, 0xcd]);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
    }

    #[test]
    fn failure_response_is_six_bytes() {
        let mut out = Vec::new();
        encode_login_response(&LoginResponse::Failure(LoginCode::TooManyConnections), &mut out);
        assert_eq!(out, vec![0, 0, 0, 2, 0, 1]);
        assert_eq!(decode_login_response(&out[4..]).unwrap(), LoginResponse::Failure(LoginCode::TooManyConnections));
    }
}
