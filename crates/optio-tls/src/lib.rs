//! # optio-tls
//!
//! TLS for the traffic between clients and servers and between servers (rustls, with the
//! `ring` provider): the server's certificate and key, and the certificate authority a client
//! trusts. A server given a certificate takes TLS connections and, on the same port, plain
//! ones only for `/health` (the monitors' checks) and a public `/metrics`.
//!
//! A crate of its own because three layers need it and none should pull in another for it:
//! the HTTP transport (`optio-net`), the cluster's etcd and Redis clients (`optio-cluster`)
//! and the servers and gateways. It reads PEM files and builds rustls configurations; it
//! opens no connection.
//!
//! ```no_run
//! use std::path::Path;
//! optio_tls::install_crypto_provider();
//! let client = optio_tls::client_config(Path::new("tls/ca.pem"), None)?;
//! let server = optio_tls::server_config(
//!     Path::new("tls/server.pem"),
//!     Path::new("tls/server.key"),
//!     Some(Path::new("tls/ca.pem")),
//! )?;
//! # let _ = (client, server);
//! # Ok::<(), optio_tls::TlsError>(())
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS configuration could not be built: which file, and what was wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A PEM file of certificates could not be read.
    #[error("cannot read the certificates in {}: {source}", path.display())]
    ReadCertificates {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// A certificate in a PEM file could not be parsed.
    #[error("{} holds an unreadable certificate: {source}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// A PEM file holds no certificate at all.
    #[error("{} holds no PEM certificate", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A certificate authority's certificate cannot serve as a trust root.
    #[error("{} is not a usable CA certificate: {source}", path.display())]
    BadCa {
        /// The CA's file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// No private key could be read from a file.
    #[error("cannot read a private key from {}: {source}", path.display())]
    ReadKey {
        /// The key's file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls_pki_types::pem::Error,
    },
    /// A certificate and the private key given with it do not belong together.
    #[error("the certificate {} and its key do not fit: {source}", path.display())]
    KeyMismatch {
        /// The certificate's file.
        path: PathBuf,
        /// Why.
        #[source]
        source: rustls::Error,
    },
    /// rustls refused the protocol versions or the provider (a build problem, not a file's).
    #[error("TLS set-up: {0}")]
    Setup(#[source] rustls::Error),
    /// The verifier of client certificates could not be built from the CA.
    #[error("TLS set-up (client certificates): {0}")]
    ClientVerifier(#[source] rustls::server::VerifierBuilderError),
}

/// Makes `ring` the process's default TLS crypto provider (once; a provider already installed
/// stays). Every HTTP client needs one, TLS or not, so this runs before any is built.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// `ring`'s suites with AES-128-GCM first: as safe as AES-256 for this use and, with fewer
/// rounds per block, a little cheaper (`cargo bench -p optio-tls --bench tls`: 1.49 against
/// 1.53 ms to seal and open 4 MiB here).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites.sort_by_key(|suite| match suite.suite() {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => 0,
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => 1,
        _ => 2,
    });
    Arc::new(provider)
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|source| TlsError::ReadCertificates { path: path.into(), source })?
        .collect::<Result<_, _>>()
        .map_err(|source| TlsError::BadCertificate { path: path.into(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.into() });
    }
    Ok(certs)
}

/// What a client trusts: the certificate authority in `ca` (PEM), and nothing else; and, when
/// `identity` names a certificate chain and its private key (PEM), the certificate it shows a
/// server that asks for one (mutual TLS).
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .with_root_certificates(roots(ca)?);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(certificates(cert)?, private_key(key)?)
            .map_err(|source| TlsError::KeyMismatch { path: cert.into(), source }),
    }
}

/// The certificates of the CA in `ca` (PEM), as trust roots.
fn roots(ca: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca)? {
        roots.add(cert).map_err(|source| TlsError::BadCa { path: ca.into(), source })?;
    }
    Ok(roots)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|source| TlsError::ReadKey { path: path.into(), source })
}

/// A server's TLS: its certificate chain and private key (PEM); with `client_ca`, it also asks
/// clients for a certificate that CA signed (mutual TLS: optional, a client without one signs
/// its requests instead; one with a certificate from another CA fails the handshake).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, TlsError> {
    let chain = certificates(cert)?;
    let key = private_key(key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(ca)?),
                provider(),
            )
            .allow_unauthenticated()
            .build()
            .map_err(TlsError::ClientVerifier)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|source| TlsError::KeyMismatch { path: cert.into(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_certificate_file_is_a_read_error_naming_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let missing = dir.path().join("absent.pem");
        let error = client_config(&missing, None).expect_err("no such file");
        assert!(
            matches!(&error, TlsError::ReadCertificates { path, .. } if *path == missing),
            "{error:?}"
        );
        assert!(error.to_string().contains("absent.pem"), "{error}");
    }

    #[test]
    fn a_file_without_certificates_is_no_certificate() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a PEM file\n").expect("written");
        let error = client_config(&empty, None).expect_err("no certificate in it");
        assert!(matches!(&error, TlsError::NoCertificate { path } if *path == empty), "{error:?}");
        assert_eq!(error.to_string(), format!("{} holds no PEM certificate", empty.display()));
    }

    #[test]
    fn a_key_of_another_certificate_is_a_mismatch() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let one = rcgen::generate_simple_self_signed(vec!["one".into()]).expect("a certificate");
        let other =
            rcgen::generate_simple_self_signed(vec!["other".into()]).expect("a certificate");
        let (cert, key) = (dir.path().join("one.pem"), dir.path().join("other.key"));
        std::fs::write(&cert, one.cert.pem()).expect("written");
        std::fs::write(&key, other.key_pair.serialize_pem()).expect("written");
        let error = server_config(&cert, &key, None).expect_err("the key is another's");
        assert!(matches!(&error, TlsError::KeyMismatch { path, .. } if *path == cert), "{error:?}");
    }
}
