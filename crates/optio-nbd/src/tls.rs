//! TLS for NBD (`NBD_OPT_STARTTLS`): the server's TLS configuration, and who decides what a
//! client that showed a certificate may use.
//!
//! The TLS configuration decides who gets through the TLS handshake at all (typically: client
//! certificates signed by one CA, or none); [`Authorize`] then maps the certificate — or its
//! absence — to the exports that client sees (all, some, read-only) or to a refusal, which the
//! client is told in answer to its options (`NBD_REP_ERR_POLICY`).

use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::CertificateDer;

use crate::export::Exports;

/// Decides which exports a client may use from the certificate it showed.
pub trait Authorize: Send + Sync + 'static {
    /// The exports the client that showed `certificate` may use (its end-entity certificate,
    /// already verified by the TLS handshake against what the configuration trusts; `None`
    /// if it showed none), or why it may use none — a message for the client and the log.
    fn authorize(
        &self,
        certificate: Option<&CertificateDer<'static>>,
    ) -> Result<Arc<dyn Exports>, String>;
}

/// TLS required: the configuration, and who decides what each client may use.
pub struct Tls {
    /// The server's certificate and key, and how clients' certificates are verified.
    pub config: Arc<rustls::ServerConfig>,
    /// Maps a client's certificate to its exports.
    pub authorize: Arc<dyn Authorize>,
}
