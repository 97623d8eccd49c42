//! A throwaway certificate authority for a local cluster (`optio up --tls`) and for tests:
//! it signs the servers' certificate, client certificates whose common name is an Optio
//! entity (mutual TLS) and, in tests, certificates for etcd and Redis.

use std::path::{Path, PathBuf};

use crate::LocalError;

/// A CA: its certificate (`ca.pem`) and its private key (`ca-key.pem`, 0600) in a directory.
pub struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// Where `ca.pem` is.
    pub cert_path: PathBuf,
}

/// A certificate and its private key, written as PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, 0600).
    pub key: PathBuf,
}

const CA_COMMON_NAME: &str = "Optio local cluster CA";

fn error(e: rcgen::Error) -> LocalError {
    LocalError::Spec(format!("cannot make TLS certificates: {e}"))
}

fn write(path: &Path, text: &str) -> Result<(), LocalError> {
    optio_proto::auth::write_private(path, text.as_bytes())
        .map_err(|e| LocalError::Spec(e.to_string()))
}

fn ca_params() -> Result<rcgen::CertificateParams, LocalError> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(error)?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, CA_COMMON_NAME);
    Ok(params)
}

impl Ca {
    /// The CA in `dir` (`ca.pem`, `ca-key.pem`), made there if it is not yet.
    pub fn open_or_create(dir: &Path) -> Result<Ca, LocalError> {
        std::fs::create_dir_all(dir)
            .map_err(LocalError::io(format!("cannot create {}", dir.display())))?;
        let cert_path = dir.join("ca.pem");
        let key_path = dir.join("ca-key.pem");
        let key = if key_path.exists() && cert_path.exists() {
            optio_proto::auth::check_private(&key_path)
                .map_err(|e| LocalError::Spec(e.to_string()))?;
            let pem = std::fs::read_to_string(&key_path)
                .map_err(LocalError::io(format!("cannot read {}", key_path.display())))?;
            rcgen::KeyPair::from_pem(&pem).map_err(error)?
        } else {
            let key = rcgen::KeyPair::generate().map_err(error)?;
            write(&key_path, &key.serialize_pem())?;
            let cert = ca_params()?.self_signed(&key).map_err(error)?;
            write(&cert_path, &cert.pem())?;
            key
        };
        // The same subject and key as the certificate on disk: what it signs verifies
        // against `ca.pem`.
        let cert = ca_params()?.self_signed(&key).map_err(error)?;
        Ok(Ca { cert, key, cert_path })
    }

    /// Signs a certificate for `common_name` (an entity such as `client.admin` for mutual TLS,
    /// or a server's name) valid for the host names and addresses in `names`, and writes it
    /// with its key as `dir/STEM.pem` and `dir/STEM-key.pem`.
    pub fn issue(
        &self,
        dir: &Path,
        stem: &str,
        common_name: &str,
        names: &[&str],
    ) -> Result<Issued, LocalError> {
        let key = rcgen::KeyPair::generate().map_err(error)?;
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).map_err(error)?;
        params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
        let cert = params.signed_by(&key, &self.cert, &self.key).map_err(error)?;
        let issued = Issued {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}-key.pem")),
        };
        write(&issued.cert, &cert.pem())?;
        write(&issued.key, &key.serialize_pem())?;
        Ok(issued)
    }
}
