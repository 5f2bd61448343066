//! Security at the front door: the users (from the server's configuration), checking a
//! login against them, and the TLS acceptor of the client port.
//!
//! A user is stored as VoltDB's server stores one: per hash scheme, the digest of the digest
//! of the password (`H(H(pw))`, hex). A client sends `H(pw)`; the server hashes that once more
//! and compares in constant time, so the configuration file never holds what a client sends.
//! With security off every login is accepted (the digest length is still checked by the
//! wire decoder) and calls carry no principal: everything is allowed.
//!
//! For the PostgreSQL port a user may also hold a SCRAM-SHA-256 verifier, in PostgreSQL's
//! own format: the salt and iteration count of PBKDF2 and the StoredKey and ServerKey derived
//! from the password (RFC 5802). Those check a client's SCRAM proof without being enough to
//! log in with (the client proof needs ClientKey, which StoredKey is a hash of).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lockstep_core::{Catalog, Permissions};
use lockstep_engine::auth::resolve;
use lockstep_engine::Principal;
use lockstep_wire::{from_hex, HashScheme, LoginCode, LoginRequest};
use serde::Deserialize;
use subtle::ConstantTimeEq;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

/// Most users a configuration may list.
pub const USERS_MAX: usize = 10_000;
/// Longest user or role name, in bytes.
pub const NAME_MAX_BYTES: usize = 256;

/// PBKDF2 iterations of the SCRAM verifiers `lockstep user add` writes (PostgreSQL's default).
pub const SCRAM_ITERATIONS: u32 = 4096;
/// Most PBKDF2 iterations a configured verifier may ask of a client: each login costs the
/// client that many HMACs, and ten million already take seconds.
pub const SCRAM_ITERATIONS_MAX: u32 = 10_000_000;
/// Bytes of random salt in the verifiers `lockstep user add` writes (PostgreSQL's length).
pub const SCRAM_SALT_BYTES: usize = 16;
/// Longest salt a configured verifier may hold, in bytes.
pub const SCRAM_SALT_MAX_BYTES: usize = 1024;
/// Bytes of a SHA-256 digest: the length of StoredKey and ServerKey.
pub const SCRAM_KEY_BYTES: usize = 32;
/// The SCRAM mechanism the verifiers are for, as PostgreSQL names it in one.
const SCRAM_PREFIX: &str = "SCRAM-SHA-256";

/// One `[[users]]` entry of the configuration file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    pub name: String,
    #[serde(default)]
    pub roles: Vec<String>,
    /// SHA-256(SHA-256(password)), hex.
    pub password_sha256: String,
    /// SHA-1(SHA-1(password)), hex.
    pub password_sha1: String,
    /// The SCRAM-SHA-256 verifier of the PostgreSQL port,
    /// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64). Entries written
    /// before it existed lack it: such a user logs in to that port with the password itself.
    #[serde(default)]
    pub scram: Option<String>,
}

impl UserEntry {
    /// The entry for `password`, as `lockstep user add` writes it, with a fresh random salt
    /// for its SCRAM verifier.
    pub fn new(name: &str, roles: &[String], password: &str) -> Result<UserEntry, String> {
        let mut salt = [0u8; SCRAM_SALT_BYTES];
        getrandom::fill(&mut salt).map_err(|e| format!("cannot draw a random salt from the operating system: {e}"))?;
        Ok(UserEntry::with_salt(name, roles, password, &salt))
    }

    /// The entry for `password` with the given SCRAM salt (the same entry for the same
    /// arguments).
    pub fn with_salt(name: &str, roles: &[String], password: &str, salt: &[u8]) -> UserEntry {
        UserEntry {
            name: name.to_string(),
            roles: roles.to_vec(),
            password_sha256: HashScheme::Sha256.stored_hex(password),
            password_sha1: HashScheme::Sha1.stored_hex(password),
            scram: Some(ScramVerifier::derive(password, salt, SCRAM_ITERATIONS).to_string()),
        }
    }
}

/// A SCRAM-SHA-256 verifier: what a server keeps to check a client's proof of a password
/// (RFC 5802 section 3, RFC 7677).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramVerifier {
    pub iterations: u32,
    pub salt: Vec<u8>,
    /// H(ClientKey): a client proof is checked against it.
    pub stored_key: [u8; SCRAM_KEY_BYTES],
    /// HMAC(SaltedPassword, "Server Key"): signs the server's final message.
    pub server_key: [u8; SCRAM_KEY_BYTES],
}

impl ScramVerifier {
    /// The verifier of `password`: SaltedPassword = PBKDF2-HMAC-SHA-256(SASLprep(password),
    /// salt, iterations), ClientKey = HMAC(SaltedPassword, "Client Key"), StoredKey =
    /// SHA-256(ClientKey), ServerKey = HMAC(SaltedPassword, "Server Key").
    pub fn derive(password: &str, salt: &[u8], iterations: u32) -> ScramVerifier {
        use sha2::Digest;
        let prepared = scram_prepare(password);
        let mut salted = [0u8; SCRAM_KEY_BYTES];
        pbkdf2::pbkdf2_hmac::<sha2::Sha256>(prepared.as_bytes(), salt, iterations, &mut salted);
        let client_key = hmac_sha256(&salted, b"Client Key");
        ScramVerifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha2::Sha256::digest(client_key).into(),
            server_key: hmac_sha256(&salted, b"Server Key"),
        }
    }

    /// Reads PostgreSQL's form, `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(text: &str) -> Result<ScramVerifier, String> {
        let shape =
            || format!("a SCRAM verifier must read {SCRAM_PREFIX}$<iterations>:<base64 salt>$<base64 StoredKey>:<base64 ServerKey>");
        let mut parts = text.split('$');
        let (Some(SCRAM_PREFIX), Some(params), Some(keys), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(shape());
        };
        let (iterations, salt) = params.split_once(':').ok_or_else(shape)?;
        let (stored_key, server_key) = keys.split_once(':').ok_or_else(shape)?;
        let iterations: u32 = iterations
            .parse()
            .ok()
            .filter(|n| (1..=SCRAM_ITERATIONS_MAX).contains(n))
            .ok_or_else(|| format!("the SCRAM verifier's iteration count must be 1 to {SCRAM_ITERATIONS_MAX}"))?;
        let salt = base64_decode(salt)
            .filter(|s| (1..=SCRAM_SALT_MAX_BYTES).contains(&s.len()))
            .ok_or_else(|| format!("the SCRAM verifier's salt must be base64 of 1 to {SCRAM_SALT_MAX_BYTES} bytes"))?;
        let key = |text: &str, what: &str| {
            base64_decode(text)
                .and_then(|k| <[u8; SCRAM_KEY_BYTES]>::try_from(k).ok())
                .ok_or_else(|| format!("the SCRAM verifier's {what} must be base64 of {SCRAM_KEY_BYTES} bytes"))
        };
        Ok(ScramVerifier { iterations, salt, stored_key: key(stored_key, "StoredKey")?, server_key: key(server_key, "ServerKey")? })
    }
}

impl std::fmt::Display for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use base64::Engine;
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        write!(f, "{SCRAM_PREFIX}${}:{}${}:{}", self.iterations, b64(&self.salt), b64(&self.stored_key), b64(&self.server_key))
    }
}

/// The keys stay out of logs.
impl std::fmt::Debug for ScramVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramVerifier").field("iterations", &self.iterations).finish_non_exhaustive()
    }
}

/// HMAC-SHA-256 of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; SCRAM_KEY_BYTES] {
    use hmac::{KeyInit, Mac};
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// The password as SCRAM hashes it: SASLprep'd (RFC 4013), or as it is when SASLprep
/// refuses it, which is what PostgreSQL and libpq do.
fn scram_prepare(password: &str) -> std::borrow::Cow<'_, str> {
    stringprep::saslprep(password).unwrap_or(std::borrow::Cow::Borrowed(password))
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

/// The security settings of `ServerConfig`: keys `security`, `tls_cert`, `tls_key`, `users`.
#[derive(Clone, Debug, Default)]
pub struct SecurityConfig {
    /// `--security on|off`; off by default (a local single node).
    pub enabled: bool,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub users: Vec<UserEntry>,
}

/// `on` or `off` (also true/false, yes/no) as a flag or config value.
pub fn parse_on_off(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        other => Err(format!("security must be on or off, not {other:?}")),
    }
}

/// The `security` key: `"on"`/`"off"`, or a TOML boolean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnOff(pub bool);

impl<'de> Deserialize<'de> for OnOff {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OnOff, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bool(b) => Ok(OnOff(b)),
            Raw::Text(t) => parse_on_off(&t).map(OnOff).map_err(serde::de::Error::custom),
        }
    }
}

/// A configured user, ready for logins.
struct User {
    roles: Vec<String>,
    sha256: Vec<u8>,
    sha1: Vec<u8>,
    scram: Option<ScramVerifier>,
}

/// How the PostgreSQL port checks a user's password.
#[derive(Debug)]
pub enum PasswordCheck<'a> {
    /// With a SCRAM-SHA-256 exchange against the user's verifier.
    Scram(&'a ScramVerifier),
    /// The entry has no verifier: the password itself, checked against the digests.
    Digests,
    /// No such user: no password logs in.
    UnknownUser,
}

impl User {
    fn stored(&self, scheme: HashScheme) -> &[u8] {
        match scheme {
            HashScheme::Sha1 => &self.sha1,
            HashScheme::Sha256 => &self.sha256,
        }
    }
}

/// The server's security: whether it is on, its users, and TLS on the client port.
pub struct Security {
    enabled: bool,
    users: HashMap<String, User>,
    tls: Option<TlsAcceptor>,
}

impl Security {
    /// Security off, no TLS: every login is accepted and every call allowed.
    pub fn off() -> Security {
        Security { enabled: false, users: HashMap::new(), tls: None }
    }

    /// Checks the settings and loads the users and the TLS certificate and key.
    pub fn from_config(c: &SecurityConfig) -> Result<Security, String> {
        if c.users.len() > USERS_MAX {
            return Err(format!("{} users are configured; at most {USERS_MAX} are supported", c.users.len()));
        }
        let mut users = HashMap::new();
        for u in &c.users {
            let user = check_user(u)?;
            if users.insert(u.name.clone(), user).is_some() {
                return Err(format!("user {} is configured twice: keep one [[users]] entry per name", u.name));
            }
        }
        let tls = match (&c.tls_cert, &c.tls_key) {
            (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
            (None, None) => None,
            _ => return Err("TLS needs both a certificate and its key: give --tls-cert and --tls-key (or tls_cert and tls_key)".into()),
        };
        Ok(Security { enabled: c.enabled, users, tls })
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn tls(&self) -> Option<&TlsAcceptor> {
        self.tls.as_ref()
    }

    /// With security on, some user must be able to administer the database (roles are
    /// resolved against the catalog the server starts with).
    pub fn check_can_start(&self, catalog: &Catalog) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        let hint = "add one with `lockstep user add NAME --roles administrator --config FILE` and start the server with --config FILE";
        if self.users.is_empty() {
            return Err(format!("security is on but no users are configured, so nobody could log in: {hint}"));
        }
        if !self.users.values().any(|u| resolve(&u.roles, catalog).contains(Permissions::ADMIN)) {
            return Err(format!(
                "security is on but no configured user has the ADMIN permission (role administrator, or a role created WITH ADMIN): {hint}"
            ));
        }
        Ok(())
    }

    /// How the PostgreSQL port must check `name`'s password (security on).
    pub fn password_check(&self, name: &str) -> PasswordCheck<'_> {
        match self.users.get(name) {
            Some(User { scram: Some(v), .. }) => PasswordCheck::Scram(v),
            Some(_) => PasswordCheck::Digests,
            None => PasswordCheck::UnknownUser,
        }
    }

    /// The principal of a configured user whose password was checked by other means (the
    /// PostgreSQL port's SCRAM exchange); None for an unknown name.
    pub fn principal_of(&self, name: &str) -> Option<Arc<Principal>> {
        self.users.get(name).map(|u| Arc::new(Principal::new(name, &u.roles)))
    }

    /// Checks a decoded login: the principal to carry into calls (None with security off),
    /// or the code to answer before closing.
    pub fn login(&self, req: &LoginRequest) -> Result<Option<Arc<Principal>>, LoginCode> {
        if !self.enabled {
            return Ok(None);
        }
        let user = self.users.get(&req.username);
        // The same work for an unknown user, so timing does not tell which names exist.
        let stored = user.map_or(&[0u8; 32][..req.scheme.digest_len()], |u| u.stored(req.scheme));
        let matches: bool = req.scheme.hash(&req.digest).ct_eq(stored).into();
        match user {
            Some(u) if matches => Ok(Some(Arc::new(Principal::new(&req.username, &u.roles)))),
            _ => Err(LoginCode::AuthFailed),
        }
    }
}

/// A configured user, checked: names of sane length, both digests well-formed hex.
fn check_user(u: &UserEntry) -> Result<User, String> {
    if u.name.is_empty() || u.name.len() > NAME_MAX_BYTES {
        return Err(format!("user name {:?} must be 1 to {NAME_MAX_BYTES} bytes", u.name));
    }
    for r in &u.roles {
        if r.is_empty() || r.len() > NAME_MAX_BYTES {
            return Err(format!("user {}: role name {r:?} must be 1 to {NAME_MAX_BYTES} bytes", u.name));
        }
    }
    let digest = |scheme: HashScheme, hex: &str, key: &str| {
        from_hex(hex).filter(|d| d.len() == scheme.digest_len()).ok_or_else(|| {
            format!(
                "user {}: {key} must be {} hex digits ({}({}(password))); set the password again with `lockstep user add`",
                u.name,
                scheme.digest_len() * 2,
                scheme.name(),
                scheme.name()
            )
        })
    };
    Ok(User {
        roles: u.roles.iter().map(|r| r.to_ascii_lowercase()).collect(),
        sha256: digest(HashScheme::Sha256, &u.password_sha256, "password_sha256")?,
        sha1: digest(HashScheme::Sha1, &u.password_sha1, "password_sha1")?,
        scram: match &u.scram {
            Some(text) => Some(
                ScramVerifier::parse(text)
                    .map_err(|e| format!("user {}: {e} (the key scram); set the password again with `lockstep user add`", u.name))?,
            ),
            None => None,
        },
    })
}

/// The TLS acceptor for a PEM certificate chain and its PEM private key.
fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("cannot read the TLS certificate {}: {e}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("the TLS certificate file {} holds no certificate (expected PEM)", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("cannot read the TLS private key {}: {e}", key.display()))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("the TLS certificate and key do not work together: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(user: &str, scheme: HashScheme, password: &str) -> LoginRequest {
        LoginRequest { version: 1, scheme, service: "database".into(), username: user.into(), digest: scheme.hash(password.as_bytes()) }
    }

    fn secured(users: &[UserEntry]) -> Security {
        Security::from_config(&SecurityConfig { enabled: true, users: users.to_vec(), ..Default::default() }).unwrap()
    }

    #[test]
    fn logins_check_the_password_with_either_scheme() {
        let s = secured(&[UserEntry::new("alice", &["Administrator".into()], "s3cret").unwrap()]);
        for scheme in [HashScheme::Sha256, HashScheme::Sha1] {
            let p = s.login(&request("alice", scheme, "s3cret")).unwrap().unwrap();
            assert_eq!((p.name(), p.roles()), ("alice", &["administrator".to_string()][..]));
            assert_eq!(s.login(&request("alice", scheme, "wrong")).unwrap_err(), LoginCode::AuthFailed);
            assert_eq!(s.login(&request("bob", scheme, "s3cret")).unwrap_err(), LoginCode::AuthFailed);
            assert_eq!(s.login(&request("Alice", scheme, "s3cret")).unwrap_err(), LoginCode::AuthFailed);
        }
        // What the file holds is not what a client sends: sending it does not log in.
        let mut stolen = request("alice", HashScheme::Sha256, "");
        stolen.digest = from_hex(&HashScheme::Sha256.stored_hex("s3cret")).unwrap();
        assert!(s.login(&stolen).is_err());
    }

    /// The verifier of RFC 7677's example (password "pencil", its salt, 4096 iterations), as
    /// Python's hashlib computes it, in PostgreSQL's form.
    const PENCIL: &str = "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=";

    #[test]
    fn scram_verifiers_are_derived_written_and_read_in_postgresql_s_form() {
        use base64::Engine;
        let salt = base64::engine::general_purpose::STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let v = ScramVerifier::derive("pencil", &salt, SCRAM_ITERATIONS);
        assert_eq!(v.to_string(), PENCIL);
        assert_eq!(ScramVerifier::parse(PENCIL).unwrap(), v);
        assert!(!format!("{v:?}").contains("WG5d"), "the keys stay out of Debug output");
        for bad in [
            "SCRAM-SHA-1$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
            "SCRAM-SHA-256$0:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
            "SCRAM-SHA-256$4096:!!$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo:wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=",
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=",
            "",
        ] {
            assert!(ScramVerifier::parse(bad).is_err(), "{bad}");
        }
        // A fresh entry has a verifier of its password with a random salt of its own.
        let (a, b) = (UserEntry::new("a", &[], "pw").unwrap(), UserEntry::new("a", &[], "pw").unwrap());
        let (va, vb) =
            (ScramVerifier::parse(a.scram.as_deref().unwrap()).unwrap(), ScramVerifier::parse(b.scram.as_deref().unwrap()).unwrap());
        assert_eq!((va.salt.len(), va.iterations), (SCRAM_SALT_BYTES, SCRAM_ITERATIONS));
        assert_ne!(va.salt, vb.salt);
        assert_eq!(ScramVerifier::derive("pw", &va.salt, SCRAM_ITERATIONS), va);
    }

    #[test]
    fn the_postgresql_port_checks_by_scram_where_a_verifier_is_stored() {
        let mut old = UserEntry::new("old", &["user".into()], "pw").unwrap();
        old.scram = None;
        let s = secured(&[UserEntry::with_salt("new", &["administrator".into()], "pencil", b"salt"), old]);
        let PasswordCheck::Scram(v) = s.password_check("new") else { panic!("new has a verifier") };
        assert_eq!(*v, ScramVerifier::derive("pencil", b"salt", SCRAM_ITERATIONS));
        assert!(matches!(s.password_check("old"), PasswordCheck::Digests));
        assert!(matches!(s.password_check("nobody"), PasswordCheck::UnknownUser));
        assert_eq!(s.principal_of("new").unwrap().roles(), &["administrator".to_string()][..]);
        assert!(s.principal_of("nobody").is_none());
        // An entry without the key still logs in on the VoltDB port.
        assert!(s.login(&request("old", HashScheme::Sha256, "pw")).is_ok());
    }

    #[test]
    fn security_off_accepts_anyone_without_a_principal() {
        let s = Security::off();
        assert!(s.login(&request("anyone", HashScheme::Sha1, "x")).unwrap().is_none());
        assert!(s.check_can_start(&Catalog::default()).is_ok());
    }

    #[test]
    fn security_on_needs_an_administrator_to_start() {
        let c = Catalog::default();
        assert!(secured(&[]).check_can_start(&c).unwrap_err().contains("no users are configured"));
        let plain = secured(&[UserEntry::new("u", &["user".into()], "p").unwrap()]);
        assert!(plain.check_can_start(&c).unwrap_err().contains("ADMIN permission"));
        let mut with_role = c.clone();
        with_role.add_role("ops", Permissions::ADMIN).unwrap();
        assert!(secured(&[UserEntry::new("u", &["ops".into()], "p").unwrap()]).check_can_start(&with_role).is_ok());
        assert!(secured(&[UserEntry::new("a", &["administrator".into()], "p").unwrap()]).check_can_start(&c).is_ok());
    }

    #[test]
    fn bad_user_entries_are_refused_with_the_reason() {
        let mut u = UserEntry::new("a", &[], "p").unwrap();
        u.password_sha1 = "abc".into();
        let e = Security::from_config(&SecurityConfig { users: vec![u], ..Default::default() }).err().unwrap();
        assert!(e.contains("password_sha1 must be 40 hex digits"), "{e}");
        let mut u = UserEntry::new("a", &[], "p").unwrap();
        u.scram = Some("SCRAM-SHA-256$4096:c2FsdA==$x:y".into());
        let e = Security::from_config(&SecurityConfig { users: vec![u], ..Default::default() }).err().unwrap();
        assert!(e.contains("user a: the SCRAM verifier's StoredKey must be base64 of 32 bytes (the key scram)"), "{e}");
        let twice = vec![UserEntry::new("a", &[], "p").unwrap(), UserEntry::new("a", &[], "q").unwrap()];
        assert!(Security::from_config(&SecurityConfig { users: twice, ..Default::default() }).err().unwrap().contains("twice"));
        let half = SecurityConfig { tls_cert: Some("c.pem".into()), ..Default::default() };
        assert!(Security::from_config(&half).err().unwrap().contains("both a certificate and its key"));
        assert!(parse_on_off("ON").unwrap() && !parse_on_off("off").unwrap() && parse_on_off("maybe").is_err());
    }
}
