//! Why an [`HttpTransport`](crate::HttpTransport) could not be built.

/// Why an [`HttpTransport`](crate::HttpTransport) could not be built: its options do not go
/// together, its TLS files are unusable, or the HTTP client library refused the configuration.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// A client certificate was given without the CA to trust the servers by.
    #[error("a client certificate needs TLS: give the CA too (--tls-ca)")]
    IdentityWithoutCa,
    /// The CA, certificate or key files could not make a TLS configuration.
    #[error(transparent)]
    Tls(#[from] optio_tls::TlsError),
    /// The HTTP client library could not build a client.
    #[error("cannot build the {scheme} client: {source}")]
    Build {
        /// `HTTP` or `HTTPS`.
        scheme: &'static str,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::HttpTransport;

    #[test]
    fn a_certificate_without_a_ca_is_refused_as_such() {
        let identity = (Path::new("client.pem"), Path::new("client.key"));
        let refused = HttpTransport::with_options(None, None, Some(identity)).err();
        assert!(matches!(refused, Some(TransportError::IdentityWithoutCa)), "{refused:?}");
    }

    #[test]
    fn an_unreadable_ca_is_a_tls_error() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let ca = dir.path().join("absent-ca.pem");
        let refused = HttpTransport::with_options(None, Some(&ca), None).err();
        assert!(
            matches!(
                refused,
                Some(TransportError::Tls(optio_tls::TlsError::ReadCertificates { .. }))
            ),
            "{refused:?}"
        );
    }
}
