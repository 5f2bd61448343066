//! The server side of a SCRAM-SHA-256 exchange (RFC 5802, RFC 7677) as PostgreSQL runs it:
//! no channel binding, no authorization identity, the user named at start-up (the SCRAM user
//! name is ignored). The server holds only the user's verifier (StoredKey, ServerKey): it
//! checks the client's proof by recovering ClientKey and hashing it, and signs its final
//! message with ServerKey, so what it stores is not enough to log in with.
//!
//! Messages, in order (RFC 5802 section 7):
//! client-first `n,,n=user,r=<client nonce>`; server-first `r=<client nonce><server nonce>,
//! s=<salt>,i=<iterations>`; client-final `c=biws,r=<both nonces>,p=<proof>`; server-final
//! `v=<server signature>`.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use lockstep_server::security::{hmac_sha256, ScramVerifier, SCRAM_ITERATIONS, SCRAM_KEY_BYTES, SCRAM_SALT_BYTES};
use sha2::Digest;
use subtle::ConstantTimeEq;

/// The SASL mechanism offered, as PostgreSQL names it.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// Longest client SCRAM message taken, in bytes (a real one is under 200).
pub const CLIENT_MESSAGE_MAX_BYTES: usize = 4096;
/// Random bytes in a server nonce (PostgreSQL's length), sent as base64.
pub const SERVER_NONCE_BYTES: usize = 18;

/// Why an exchange stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// The client's message breaks the protocol: what was wrong.
    Malformed(String),
    /// The proof does not match the verifier: the password is wrong (or the user unknown).
    WrongPassword,
}

fn malformed(what: &str) -> Failure {
    Failure::Malformed(format!("malformed SCRAM message: {what}"))
}

/// The exchange after the server's first message: what the client's final message must
/// match and what checks its proof.
pub struct AwaitingFinal {
    /// The gs2 header of the client's first message, which its final one must echo.
    gs2_header: String,
    /// Client nonce and server nonce.
    nonce: String,
    /// client-first-message-bare "," server-first-message: the start of AuthMessage.
    auth_start: String,
    verifier: ScramVerifier,
    /// An exchange run for a user that does not exist: no proof matches.
    mock: bool,
}

/// Takes the client's first message and answers the server's first message.
/// `verifier` is None for an unknown user: the exchange then runs to the end with a salt of
/// its own for that name, so that its shape does not tell which users exist, and fails.
pub fn client_first(
    message: &[u8],
    verifier: Option<&ScramVerifier>,
    user: &str,
    server_nonce: &str,
) -> Result<(String, AwaitingFinal), Failure> {
    let text = client_text(message)?;
    // gs2-header: a channel-binding flag, then an authorization identity.
    let (flag, rest) = text.split_once(',').ok_or_else(|| malformed("no gs2 header"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => {
            return Err(Failure::Malformed("channel binding is not offered by this server: use SCRAM-SHA-256, not -PLUS".into()))
        }
        _ => return Err(malformed("unknown channel-binding flag")),
    }
    let (authzid, bare) = rest.split_once(',').ok_or_else(|| malformed("no gs2 header"))?;
    if !authzid.is_empty() {
        return Err(Failure::Malformed("an authorization identity (a=) is not supported".into()));
    }
    let gs2_header = format!("{flag},,");
    let mut attrs = bare.split(',');
    let user_attr = attrs.next().unwrap_or_default();
    if user_attr.starts_with("m=") {
        return Err(Failure::Malformed("SCRAM extensions (m=) are not supported".into()));
    }
    if !user_attr.starts_with("n=") {
        return Err(malformed("the user name (n=) must come first"));
    }
    let client_nonce = attrs.next().and_then(|a| a.strip_prefix("r=")).ok_or_else(|| malformed("no nonce (r=)"))?;
    if client_nonce.is_empty() || !client_nonce.bytes().all(|b| b.is_ascii_graphic() && b != b',') {
        return Err(malformed("the nonce must be printable characters other than ','"));
    }
    let mock = verifier.is_none();
    let verifier = verifier.cloned().unwrap_or_else(|| mock_verifier(user));
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!("r={nonce},s={},i={}", BASE64.encode(&verifier.salt), verifier.iterations);
    let auth_start = format!("{bare},{server_first}");
    Ok((server_first, AwaitingFinal { gs2_header, nonce, auth_start, verifier, mock }))
}

impl AwaitingFinal {
    /// Takes the client's final message: the server's final message when the proof is
    /// right.
    pub fn client_final(&self, message: &[u8]) -> Result<String, Failure> {
        let text = client_text(message)?;
        let (without_proof, proof) = text.rsplit_once(",p=").ok_or_else(|| malformed("no proof (p=) at the end"))?;
        let mut attrs = without_proof.split(',');
        let binding = attrs.next().and_then(|a| a.strip_prefix("c=")).ok_or_else(|| malformed("no channel binding (c=)"))?;
        if BASE64.decode(binding).ok().as_deref() != Some(self.gs2_header.as_bytes()) {
            return Err(malformed("the channel binding (c=) does not match the first message"));
        }
        let nonce = attrs.next().and_then(|a| a.strip_prefix("r=")).ok_or_else(|| malformed("no nonce (r=)"))?;
        if nonce != self.nonce {
            return Err(malformed("the nonce (r=) is not the one the server sent"));
        }
        let proof = BASE64.decode(proof).ok().and_then(|p| <[u8; SCRAM_KEY_BYTES]>::try_from(p).ok());
        let proof = proof.ok_or_else(|| malformed("the proof (p=) must be base64 of 32 bytes"))?;
        let auth_message = format!("{},{without_proof}", self.auth_start);
        let client_signature = hmac_sha256(&self.verifier.stored_key, auth_message.as_bytes());
        let mut client_key = proof;
        for (k, s) in client_key.iter_mut().zip(client_signature) {
            *k ^= s;
        }
        let stored_key: [u8; SCRAM_KEY_BYTES] = sha2::Sha256::digest(client_key).into();
        let matches: bool = stored_key.ct_eq(&self.verifier.stored_key).into();
        if !matches || self.mock {
            return Err(Failure::WrongPassword);
        }
        let server_signature = hmac_sha256(&self.verifier.server_key, auth_message.as_bytes());
        Ok(format!("v={}", BASE64.encode(server_signature)))
    }
}

/// A client message as text: bounded, UTF-8.
fn client_text(message: &[u8]) -> Result<&str, Failure> {
    if message.len() > CLIENT_MESSAGE_MAX_BYTES {
        return Err(Failure::Malformed(format!("a SCRAM message may be up to {CLIENT_MESSAGE_MAX_BYTES} bytes")));
    }
    std::str::from_utf8(message).map_err(|_| malformed("not UTF-8"))
}

/// A fresh server nonce: random bytes from the operating system, in base64 (no ',').
pub fn server_nonce() -> Result<String, String> {
    let mut bytes = [0u8; SERVER_NONCE_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot draw a random SCRAM nonce from the operating system: {e}"))?;
    Ok(BASE64.encode(bytes))
}

/// The verifier an unknown user is answered with: the same salt for the same name for the
/// life of the process (from a random key drawn once), as a real user's would be.
fn mock_verifier(user: &str) -> ScramVerifier {
    static KEY: std::sync::OnceLock<[u8; SCRAM_KEY_BYTES]> = std::sync::OnceLock::new();
    let key = KEY.get_or_init(|| {
        let mut key = [0u8; SCRAM_KEY_BYTES];
        // Without the OS's randomness the salts are still per name, just guessable, which
        // reveals nothing beyond what the refusal itself does.
        let _ = getrandom::fill(&mut key);
        key
    });
    let salt = hmac_sha256(key, user.as_bytes())[..SCRAM_SALT_BYTES].to_vec();
    ScramVerifier { iterations: SCRAM_ITERATIONS, salt, stored_key: [0; SCRAM_KEY_BYTES], server_key: [0; SCRAM_KEY_BYTES] }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677 section 3: user "user", password "pencil".
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SERVER_FIRST: &str = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn pencil() -> ScramVerifier {
        ScramVerifier::derive("pencil", &BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(), 4096)
    }

    #[test]
    fn the_rfc_7677_exchange_is_answered_byte_for_byte() {
        let (server_first, state) = client_first(CLIENT_FIRST.as_bytes(), Some(&pencil()), "user", SERVER_NONCE).unwrap();
        assert_eq!(server_first, SERVER_FIRST);
        assert_eq!(state.client_final(CLIENT_FINAL.as_bytes()).unwrap(), SERVER_FINAL);
    }

    #[test]
    fn a_proof_of_another_password_is_refused() {
        let other = ScramVerifier::derive("pencils", &pencil().salt, 4096);
        let (_, state) = client_first(CLIENT_FIRST.as_bytes(), Some(&other), "user", SERVER_NONCE).unwrap();
        assert_eq!(state.client_final(CLIENT_FINAL.as_bytes()), Err(Failure::WrongPassword));
        // One bit of the proof changed.
        let (_, state) = client_first(CLIENT_FIRST.as_bytes(), Some(&pencil()), "user", SERVER_NONCE).unwrap();
        let flipped = CLIENT_FINAL.replace("p=dHz", "p=dHy");
        assert_eq!(state.client_final(flipped.as_bytes()), Err(Failure::WrongPassword));
    }

    #[test]
    fn an_unknown_user_gets_a_stable_salt_and_is_refused() {
        let (first_a, state) = client_first(CLIENT_FIRST.as_bytes(), None, "ghost", SERVER_NONCE).unwrap();
        let (first_b, _) = client_first(CLIENT_FIRST.as_bytes(), None, "ghost", SERVER_NONCE).unwrap();
        let (first_c, _) = client_first(CLIENT_FIRST.as_bytes(), None, "other", SERVER_NONCE).unwrap();
        assert_eq!(first_a, first_b);
        assert_ne!(first_a, first_c);
        assert!(first_a.ends_with(",i=4096"), "{first_a}");
        assert_eq!(state.client_final(CLIENT_FINAL.as_bytes()), Err(Failure::WrongPassword));
    }

    #[test]
    fn messages_that_break_the_protocol_are_refused_with_the_reason() {
        let v = pencil();
        let first = |m: &str| client_first(m.as_bytes(), Some(&v), "user", SERVER_NONCE).err();
        let reason = |f: Option<Failure>| match f {
            Some(Failure::Malformed(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(reason(first("p=tls-server-end-point,,n=,r=abc")).contains("channel binding is not offered"));
        assert!(reason(first("n,a=admin,n=,r=abc")).contains("authorization identity"));
        assert!(reason(first("n,,m=x,n=,r=abc")).contains("extensions"));
        assert!(reason(first("n,,n=user")).contains("no nonce"));
        assert!(reason(first("n,,n=user,r=")).contains("nonce must be printable"));
        assert!(reason(first("x")).contains("gs2"));
        assert!(reason(first(&"n".repeat(CLIENT_MESSAGE_MAX_BYTES + 1))).contains("up to"));
        let (_, state) = client_first(CLIENT_FIRST.as_bytes(), Some(&v), "user", SERVER_NONCE).unwrap();
        let last = |m: &str| reason(state.client_final(m.as_bytes()).err());
        assert!(last(&CLIENT_FINAL.replace("c=biws", "c=eSws")).contains("channel binding"));
        assert!(last(&CLIENT_FINAL.replace("k0,p=", "k1,p=")).contains("nonce"));
        assert!(last("c=biws,r=x").contains("no proof"));
        assert!(last(&CLIENT_FINAL.replace("p=dHz", "p=!!")).contains("32 bytes"));
    }

    #[test]
    fn server_nonces_are_fresh_and_need_no_escaping() {
        let (a, b) = (server_nonce().unwrap(), server_nonce().unwrap());
        assert_ne!(a, b);
        assert!(a.len() >= SERVER_NONCE_BYTES && !a.contains(','), "{a}");
    }
}
