//! Security at the front door: the users (from the server's configuration), checking a
//! login against them, and the TLS acceptor of the client port.
//!
//! A user is stored as VoltDB's server stores one: per hash scheme, the digest of the digest
//! of the password (`H(H(pw))`, hex). A client sends `H(pw)`; the server hashes that once more
//! and compares in constant time, so the configuration file never holds what a client sends.
//! With security off every login is accepted (the digest length is still checked by the
//! wire decoder) and calls carry no principal: everything is allowed.

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
}

impl UserEntry {
    /// The entry for `password`, as `lockstep user add` writes it.
    pub fn new(name: &str, roles: &[String], password: &str) -> UserEntry {
        UserEntry {
            name: name.to_string(),
            roles: roles.to_vec(),
            password_sha256: HashScheme::Sha256.stored_hex(password),
            password_sha1: HashScheme::Sha1.stored_hex(password),
        }
    }
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
        let s = secured(&[UserEntry::new("alice", &["Administrator".into()], "s3cret")]);
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
        let plain = secured(&[UserEntry::new("u", &["user".into()], "p")]);
        assert!(plain.check_can_start(&c).unwrap_err().contains("ADMIN permission"));
        let mut with_role = c.clone();
        with_role.add_role("ops", Permissions::ADMIN).unwrap();
        assert!(secured(&[UserEntry::new("u", &["ops".into()], "p")]).check_can_start(&with_role).is_ok());
        assert!(secured(&[UserEntry::new("a", &["administrator".into()], "p")]).check_can_start(&c).is_ok());
    }

    #[test]
    fn bad_user_entries_are_refused_with_the_reason() {
        let mut u = UserEntry::new("a", &[], "p");
        u.password_sha1 = "abc".into();
        let e = Security::from_config(&SecurityConfig { users: vec![u], ..Default::default() }).err().unwrap();
        assert!(e.contains("password_sha1 must be 40 hex digits"), "{e}");
        let twice = vec![UserEntry::new("a", &[], "p"), UserEntry::new("a", &[], "q")];
        assert!(Security::from_config(&SecurityConfig { users: twice, ..Default::default() }).err().unwrap().contains("twice"));
        let half = SecurityConfig { tls_cert: Some("c.pem".into()), ..Default::default() };
        assert!(Security::from_config(&half).err().unwrap().contains("both a certificate and its key"));
        assert!(parse_on_off("ON").unwrap() && !parse_on_off("off").unwrap() && parse_on_off("maybe").is_err());
    }
}
