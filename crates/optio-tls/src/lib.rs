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
//! # Ok::<(), String>(())
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

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

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read the certificates in {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{} holds an unreadable certificate: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// What a client trusts: the certificate authority in `ca` (PEM), and nothing else; and, when
/// `identity` names a certificate chain and its private key (PEM), the certificate it shows a
/// server that asks for one (mutual TLS).
pub fn client_config(
    ca: &Path,
    identity: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, String> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots(ca)?);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => builder
            .with_client_auth_cert(certificates(cert)?, private_key(key)?)
            .map_err(|e| format!("the certificate {} and its key do not fit: {e}", cert.display())),
    }
}

/// The certificates of the CA in `ca` (PEM), as trust roots.
fn roots(ca: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(ca)? {
        roots
            .add(cert)
            .map_err(|e| format!("{} is not a usable CA certificate: {e}", ca.display()))?;
    }
    Ok(roots)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("cannot read a private key from {}: {e}", path.display()))
}

/// A server's TLS: its certificate chain and private key (PEM); with `client_ca`, it also asks
/// clients for a certificate that CA signed (mutual TLS: optional, a client without one signs
/// its requests instead; one with a certificate from another CA fails the handshake).
pub fn server_config(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, String> {
    let chain = certificates(cert)?;
    let key = private_key(key)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots(ca)?),
                provider(),
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("TLS set-up (client certificates): {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("the certificate {} and its key do not fit: {e}", cert.display()))
}
