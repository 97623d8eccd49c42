//! A throwaway certificate authority for a local cluster (`optio up --tls`) and for tests:
//! it signs the servers' certificate, client certificates whose common name is an Optio
//! entity (mutual TLS) and, in tests, certificates for etcd and Redis.
//!
//! **Bounded and constrained.** The authority is valid for [`CA_VALIDITY`], may sign only
//! end-entity certificates (`basicConstraints` CA, `pathlen:0`) and its key only signs
//! certificates and revocation lists (`keyCertSign`, `cRLSign`). What it issues is valid for
//! [`LEAF_VALIDITY`] (never past the authority's own end), is no authority
//! (`basicConstraints` CA:false), signs only (`digitalSignature`: the keys are ECDSA P-256,
//! which encipher nothing) and serves one purpose: `serverAuth` for a server's certificate,
//! `clientAuth` for a client's. Every validity starts [`CLOCK_SKEW_BACKDATE`] in the past, so
//! a peer whose clock is a little behind still accepts a certificate made a moment ago.
//!
//! **Renewal.** [`Ca::open_or_create`] replaces an authority that has expired, ends within
//! [`LEAF_VALIDITY`] or is from before these bounds (valid for more than [`CA_VALIDITY`], or
//! unconstrained); [`CertInfo::needs_renewal`] tells a certificate to reissue.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use optio_proto::auth::CertFingerprint;

use crate::LocalError;

/// How long the authority is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);
/// How long a server or client certificate is valid (at most: never past the authority's end).
pub const LEAF_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);
/// How far in the past every validity starts (clocks a little behind still accept it).
pub const CLOCK_SKEW_BACKDATE: Duration = Duration::from_secs(3600);
/// A certificate this close to its end is reissued when `optio up` starts.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Slack allowed on a certificate's lifetime before it counts as one from before the bounds.
const LIFETIME_SLACK: Duration = Duration::from_secs(24 * 3600);

const CA_COMMON_NAME: &str = "Optio local cluster CA";
/// The authority's certificate in its directory.
pub const CA_CERT_FILE: &str = "ca.pem";
/// Its private key (0600).
pub const CA_KEY_FILE: &str = "ca-key.pem";

/// What a certificate is for (its extended key usage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A server's certificate (`serverAuth`).
    Server,
    /// A client's certificate (`clientAuth`): mutual TLS, its common name an entity.
    Client,
}

/// A CA: its certificate (`ca.pem`) and its private key (`ca-key.pem`, 0600) in a directory.
pub struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// Where `ca.pem` is.
    pub cert_path: PathBuf,
    /// The end of its validity (Unix seconds).
    not_after_unix: u64,
    /// Whether it was made (or replaced) by this open.
    renewed: bool,
}

/// A certificate and its private key, written as PEM files.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM, 0600).
    pub key: PathBuf,
    /// The SHA-256 fingerprint of the certificate (what a keyring records).
    pub fingerprint: CertFingerprint,
}

/// What [`inspect`] reads from a certificate.
#[derive(Clone, Debug)]
pub struct CertInfo {
    /// The SHA-256 hash of its DER encoding.
    pub fingerprint: CertFingerprint,
    /// Its subject's common name, if it has one.
    pub common_name: Option<String>,
    /// Valid from (Unix seconds).
    pub not_before_unix: i64,
    /// Valid until (Unix seconds).
    pub not_after_unix: i64,
    /// Whether it is an authority (`basicConstraints` CA:true).
    pub is_ca: bool,
    /// Its `pathlen` constraint, if an authority with one.
    pub path_len: Option<u32>,
}

impl CertInfo {
    /// Whether to reissue it at `now_unix`, given the longest life its kind gets: it has
    /// ended or ends within [`RENEW_BEFORE`], starts in the future, or lives longer than
    /// `lifetime` (a certificate from before the bounds).
    pub fn needs_renewal(&self, now_unix: u64, lifetime: Duration) -> bool {
        let now = i64::try_from(now_unix).unwrap_or(i64::MAX);
        let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        let longest = secs(lifetime).saturating_add(secs(CLOCK_SKEW_BACKDATE + LIFETIME_SLACK));
        self.not_after_unix.saturating_sub(now) < secs(RENEW_BEFORE)
            || self.not_before_unix > now
            || self.not_after_unix.saturating_sub(self.not_before_unix) > longest
    }
}

fn error(e: rcgen::Error) -> LocalError {
    LocalError::Spec(format!("cannot make TLS certificates: {e}"))
}

fn write(path: &Path, text: &str) -> Result<(), LocalError> {
    optio_cluster::keyring::write_private(path, text.as_bytes())
        .map_err(|e| LocalError::Spec(e.to_string()))
}

/// Now, in Unix seconds.
pub fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Sets `params`' validity: from `from_unix` to `until_unix` (Unix seconds).
fn set_validity(params: &mut rcgen::CertificateParams, from_unix: u64, until_unix: u64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    params.not_before = epoch + Duration::from_secs(from_unix);
    params.not_after = epoch + Duration::from_secs(until_unix);
}

/// Reads the first certificate of the PEM file at `path`.
pub fn inspect(path: &Path) -> Result<CertInfo, LocalError> {
    let bytes =
        std::fs::read(path).map_err(LocalError::io(format!("cannot read {}", path.display())))?;
    let invalid = |why: String| {
        LocalError::Spec(format!("{} is not a usable PEM certificate: {why}", path.display()))
    };
    let (_, pem) = x509_parser::pem::parse_x509_pem(&bytes).map_err(|e| invalid(e.to_string()))?;
    if pem.label != "CERTIFICATE" {
        return Err(invalid(format!("it holds a {}", pem.label)));
    }
    let (_, cert) =
        x509_parser::parse_x509_certificate(&pem.contents).map_err(|e| invalid(e.to_string()))?;
    let common_name = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string);
    let constraints = cert.basic_constraints().map_err(|e| invalid(e.to_string()))?;
    let (is_ca, path_len) =
        constraints.map_or((false, None), |c| (c.value.ca, c.value.path_len_constraint));
    Ok(CertInfo {
        fingerprint: CertFingerprint::of_der(&pem.contents),
        common_name,
        not_before_unix: cert.validity().not_before.timestamp(),
        not_after_unix: cert.validity().not_after.timestamp(),
        is_ca,
        path_len,
    })
}

fn ca_params(now_unix: u64) -> Result<rcgen::CertificateParams, LocalError> {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(error)?;
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    params.distinguished_name.push(rcgen::DnType::CommonName, CA_COMMON_NAME);
    let from = now_unix.saturating_sub(CLOCK_SKEW_BACKDATE.as_secs());
    set_validity(&mut params, from, now_unix + CA_VALIDITY.as_secs());
    Ok(params)
}

impl Ca {
    /// The CA in `dir` (`ca.pem`, `ca-key.pem`), which must be there and valid for longer
    /// than [`RENEW_BEFORE`] (what `optio auth` issues certificates with).
    pub fn open(dir: &Path) -> Result<Ca, LocalError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if !cert_path.exists() || !key_path.exists() {
            return Err(LocalError::Spec(format!(
                "no certificate authority in {} ({CA_CERT_FILE} and {CA_KEY_FILE}): `optio up \
                 --tls` makes one in its directory's tls/",
                dir.display()
            )));
        }
        let info = inspect(&cert_path)?;
        if info.needs_renewal(now_unix(), CA_VALIDITY) {
            return Err(LocalError::Spec(format!(
                "the certificate authority {} has expired, is about to, or is from before \
                 certificates were bounded: restart `optio up --tls` to replace it",
                cert_path.display()
            )));
        }
        Ca::load(&cert_path, &key_path, &info)
    }

    /// The CA in `dir` (`ca.pem`, `ca-key.pem`), made there if it is not yet, or replaced if
    /// it [needs renewal](CertInfo::needs_renewal) or ends within [`LEAF_VALIDITY`];
    /// [`renewed`](Self::renewed) then says so (reissue what it signed).
    pub fn open_or_create(dir: &Path) -> Result<Ca, LocalError> {
        create_private_dir(dir)?;
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        let now = now_unix();
        if key_path.exists() && cert_path.exists() {
            let info = inspect(&cert_path)?;
            let ends_soon = info.not_after_unix
                < i64::try_from(now + LEAF_VALIDITY.as_secs()).unwrap_or(i64::MAX);
            let constrained = info.is_ca && info.path_len == Some(0);
            if !info.needs_renewal(now, CA_VALIDITY) && !ends_soon && constrained {
                return Ca::load(&cert_path, &key_path, &info);
            }
        }
        let key = rcgen::KeyPair::generate().map_err(error)?;
        write(&key_path, &key.serialize_pem())?;
        let cert = ca_params(now)?.self_signed(&key).map_err(error)?;
        write(&cert_path, &cert.pem())?;
        let not_after_unix = now + CA_VALIDITY.as_secs();
        Ok(Ca { cert, key, cert_path, not_after_unix, renewed: true })
    }

    fn load(cert_path: &Path, key_path: &Path, info: &CertInfo) -> Result<Ca, LocalError> {
        optio_cluster::keyring::check_private(key_path)
            .map_err(|e| LocalError::Spec(e.to_string()))?;
        let pem = std::fs::read_to_string(key_path)
            .map_err(LocalError::io(format!("cannot read {}", key_path.display())))?;
        let key = rcgen::KeyPair::from_pem(&pem).map_err(error)?;
        // The same subject and key as the certificate on disk: what it signs verifies
        // against `ca.pem`.
        let cert = ca_params(now_unix())?.self_signed(&key).map_err(error)?;
        let not_after_unix = u64::try_from(info.not_after_unix).unwrap_or(0);
        Ok(Ca { cert, key, cert_path: cert_path.to_path_buf(), not_after_unix, renewed: false })
    }

    /// Whether [`open_or_create`](Self::open_or_create) made this CA (the certificates the
    /// old one signed no longer verify).
    pub fn renewed(&self) -> bool {
        self.renewed
    }

    /// Signs a server's certificate for `common_name`, valid for the host names and addresses
    /// in `names` (`serverAuth`), and writes it with its key as `dir/STEM.pem` and
    /// `dir/STEM-key.pem`.
    pub fn issue_server(
        &self,
        dir: &Path,
        stem: &str,
        common_name: &str,
        names: &[&str],
    ) -> Result<Issued, LocalError> {
        self.issue(dir, stem, common_name, names, &[Role::Server])
    }

    /// Signs a client certificate whose common name is `entity` (mutual TLS; `clientAuth`),
    /// and writes it with its key as `dir/STEM.pem` and `dir/STEM-key.pem`. A server takes it
    /// only once its keyring records [`Issued::fingerprint`] for the entity.
    pub fn issue_client(&self, dir: &Path, stem: &str, entity: &str) -> Result<Issued, LocalError> {
        self.issue(dir, stem, entity, &[], &[Role::Client])
    }

    /// Signs a certificate for `common_name` and the host names and addresses in `names`,
    /// for each of `roles`, and writes it with its key as `dir/STEM.pem` and
    /// `dir/STEM-key.pem`. Optio's own certificates have one role each
    /// ([`issue_server`](Self::issue_server), [`issue_client`](Self::issue_client)); a
    /// service that connects to itself with its server certificate (etcd's gateway) needs
    /// both.
    pub fn issue(
        &self,
        dir: &Path,
        stem: &str,
        common_name: &str,
        names: &[&str],
        roles: &[Role],
    ) -> Result<Issued, LocalError> {
        let key = rcgen::KeyPair::generate().map_err(error)?;
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = rcgen::CertificateParams::new(names).map_err(error)?;
        params.distinguished_name.push(rcgen::DnType::CommonName, common_name);
        params.is_ca = rcgen::IsCa::ExplicitNoCa;
        // keyEncipherment too, although these keys (ECDSA) sign only: GnuTLS clients (qemu's
        // NBD client) refuse a certificate whose critical keyUsage lacks it.
        params.key_usages =
            vec![rcgen::KeyUsagePurpose::DigitalSignature, rcgen::KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = roles
            .iter()
            .map(|role| match role {
                Role::Server => rcgen::ExtendedKeyUsagePurpose::ServerAuth,
                Role::Client => rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            })
            .collect();
        params.use_authority_key_identifier_extension = true;
        let now = now_unix();
        let from = now.saturating_sub(CLOCK_SKEW_BACKDATE.as_secs());
        set_validity(&mut params, from, (now + LEAF_VALIDITY.as_secs()).min(self.not_after_unix));
        let cert = params.signed_by(&key, &self.cert, &self.key).map_err(error)?;
        let issued = Issued {
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}-key.pem")),
            fingerprint: CertFingerprint::of_der(cert.der()),
        };
        write(&issued.key, &key.serialize_pem())?;
        write(&issued.cert, &cert.pem())?;
        Ok(issued)
    }
}

/// Creates `dir` (and its parents) with mode 0700 where it does not exist.
fn create_private_dir(dir: &Path) -> Result<(), LocalError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(LocalError::io(format!("cannot create {}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_authority_issues_is_bounded_and_old_certificates_are_renewed() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::open_or_create(dir.path()).unwrap();
        assert!(ca.renewed());
        let now = now_unix();
        let info = inspect(&ca.cert_path).unwrap();
        assert!(info.is_ca && info.path_len == Some(0), "{info:?}");
        assert!(!info.needs_renewal(now, CA_VALIDITY), "{info:?}");
        let server = ca.issue_server(dir.path(), "s", "optio server", &["127.0.0.1"]).unwrap();
        let client = ca.issue_client(dir.path(), "c", "client.a").unwrap();
        for issued in [&server, &client] {
            let info = inspect(&issued.cert).unwrap();
            assert!(!info.is_ca, "{info:?}");
            assert_eq!(info.fingerprint, issued.fingerprint);
            assert!(!info.needs_renewal(now, LEAF_VALIDITY), "{info:?}");
            assert!(info.needs_renewal(now + LEAF_VALIDITY.as_secs(), LEAF_VALIDITY));
        }
        assert_eq!(inspect(&client.cert).unwrap().common_name.as_deref(), Some("client.a"));
        // Opened again: the same authority, not renewed.
        let again = Ca::open_or_create(dir.path()).unwrap();
        assert!(!again.renewed());
        assert_eq!(inspect(&again.cert_path).unwrap().fingerprint, info.fingerprint);
        assert!(Ca::open(dir.path()).is_ok());
        // An authority from before the bounds (1975 to 4096, unconstrained) is replaced.
        let mut old = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        old.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        old.distinguished_name.push(rcgen::DnType::CommonName, CA_COMMON_NAME);
        let key = rcgen::KeyPair::generate().unwrap();
        write(&dir.path().join(CA_KEY_FILE), &key.serialize_pem()).unwrap();
        write(&ca.cert_path, &old.self_signed(&key).unwrap().pem()).unwrap();
        assert!(inspect(&ca.cert_path).unwrap().needs_renewal(now, CA_VALIDITY));
        let error = Ca::open(dir.path()).err().expect("an old CA is not used").to_string();
        assert!(error.contains("restart `optio up --tls`"), "{error}");
        assert!(Ca::open_or_create(dir.path()).unwrap().renewed());
        let missing = tempfile::tempdir().unwrap();
        let error = Ca::open(missing.path()).err().expect("no CA").to_string();
        assert!(error.contains("no certificate authority"), "{error}");
    }
}
