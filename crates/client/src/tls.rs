//! TLS for the client (VoltDB's SSL mode): the handshake comes first, then the framed
//! protocol inside it. The server's certificate is checked against a CA file given by the
//! user (a self-signed server certificate is its own CA), or the system's trusted roots.

use std::path::Path;
use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::ServerName;

use crate::error::ClientError;

/// A TLS configuration that trusts the certificates in the PEM file `ca_file`, or the
/// system's trusted roots when there is none.
pub fn client_tls_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, ClientError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            use rustls::pki_types::pem::PemObject;
            let certs = rustls::pki_types::CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| ClientError::Io(format!("cannot read the TLS CA file {}: {e}", path.display())))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(ClientError::Io(format!("the TLS CA file {} holds no usable certificate (expected PEM)", path.display())));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(ClientError::Io(
                    "no trusted root certificates found on this system: give the server's CA with --tls-ca FILE".into(),
                ));
            }
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Io(format!("TLS setup failed: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The name the server's certificate must carry: the host part of `host:port`.
pub(crate) fn server_name(addr: &str) -> Result<ServerName<'static>, ClientError> {
    let host = match addr.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => addr,
    };
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    ServerName::try_from(host.to_string()).map_err(|e| ClientError::Io(format!("{host} cannot be checked against a TLS certificate: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_come_from_the_address() {
        assert_eq!(server_name("127.0.0.1:21212").unwrap(), ServerName::try_from("127.0.0.1").unwrap());
        assert_eq!(server_name("db.example.com:1").unwrap(), ServerName::try_from("db.example.com").unwrap());
        assert_eq!(server_name("[::1]:21212").unwrap(), ServerName::try_from("::1").unwrap());
        assert_eq!(server_name("localhost").unwrap(), ServerName::try_from("localhost").unwrap());
        assert!(client_tls_config(Some(Path::new("/nonexistent/ca.pem"))).is_err());
    }
}
