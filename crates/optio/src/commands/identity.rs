//! Who a command acts as: `--id client.NAME` (or `OPTIO_ID`; default `client.admin`) with the
//! key from `--keyring FILE` (or `OPTIO_KEYRING`; default the cluster directory's `keyring`),
//! as Ceph's tools take `--id` and `--keyring`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use optio_proto::auth::Credentials;

/// The name of the keyring file in a cluster directory.
pub const KEYRING_FILE: &str = "keyring";
/// The CA certificate `optio up --tls` makes, in a cluster directory.
pub const TLS_CA_FILE: &str = "tls/ca.pem";

/// Who a command acts as.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Identity {
    /// The entity to sign requests as (`client.NAME`).
    #[arg(long = "id", env = "OPTIO_ID", value_name = "ENTITY", global = true)]
    pub id: Option<String>,
    /// The keyring or key file holding the entity's key (default: the cluster directory's
    /// `keyring`).
    #[arg(long, env = "OPTIO_KEYRING", value_name = "FILE", global = true)]
    pub keyring: Option<PathBuf>,
    /// The certificate authority to trust: talk TLS to the servers (default: the cluster
    /// directory's `tls/ca.pem` when it has one — `optio up --tls`).
    #[arg(long, env = "OPTIO_TLS_CA", value_name = "FILE", global = true)]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) to show the servers (mutual TLS, with --tls-key): without
    /// --id/--keyring, the certificate's common name is the entity and requests go unsigned.
    #[arg(long, env = "OPTIO_TLS_CERT", value_name = "FILE", global = true, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "OPTIO_TLS_KEY", value_name = "FILE", global = true, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl Identity {
    /// The client certificate and key, if given.
    pub fn tls_identity(&self) -> Option<(PathBuf, PathBuf)> {
        self.tls_cert.clone().zip(self.tls_key.clone())
    }

    /// The CA to trust: `--tls-ca`, else the cluster directory's `tls/ca.pem` if present.
    pub fn tls_ca(&self, cluster_dir: Option<&Path>) -> Option<PathBuf> {
        self.tls_ca
            .clone()
            .or_else(|| cluster_dir.map(|d| d.join(TLS_CA_FILE)).filter(|p| p.exists()))
    }

    /// The credentials to sign with: the entity's key from `--keyring`, else from the cluster
    /// directory's keyring when it has one; `None` (unsigned requests) when neither exists, or
    /// when a client certificate is the identity (`--tls-cert` without `--id`/`--keyring`).
    pub fn credentials(&self, cluster_dir: Option<&Path>) -> Result<Option<Credentials>> {
        if self.tls_cert.is_some() && self.id.is_none() && self.keyring.is_none() {
            return Ok(None);
        }
        let id = self.id.as_deref().unwrap_or(optio_proto::auth::ADMIN);
        let path = match (&self.keyring, cluster_dir) {
            (Some(path), _) => path.clone(),
            (None, Some(dir)) if dir.join(KEYRING_FILE).exists() => dir.join(KEYRING_FILE),
            (None, _) if self.id.is_some() => {
                anyhow::bail!("--id {id} needs a key: pass --keyring FILE (or set OPTIO_KEYRING)")
            }
            (None, _) => return Ok(None),
        };
        let credentials = optio_cluster::keyring::credentials(&path, id)
            .with_context(|| format!("cannot use the identity {id}"))?;
        Ok(Some(credentials))
    }

    /// An HTTP transport signing as [`credentials`](Self::credentials).
    pub fn transport(&self, cluster_dir: Option<&Path>) -> Result<optio_net::HttpTransport> {
        let ca = self.tls_ca(cluster_dir);
        let identity = self.tls_identity();
        let identity = identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        optio_net::HttpTransport::with_options(
            self.credentials(cluster_dir)?,
            ca.as_deref(),
            identity,
        )
        .map_err(anyhow::Error::from)
    }
}

/// [`Identity`] for the commands that edit or watch the live map (`status`, `scrub`, `map …`),
/// where `--id` already names a device: the entity is `--entity` (or `OPTIO_ID`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct AdminIdentity {
    /// The entity to sign requests as (default: client.admin).
    #[arg(long = "entity", env = "OPTIO_ID", value_name = "ENTITY")]
    pub entity: Option<String>,
    /// The keyring or key file holding the entity's key (default: the cluster directory's
    /// `keyring`).
    #[arg(long = "keyring", env = "OPTIO_KEYRING", value_name = "FILE")]
    pub keyring: Option<PathBuf>,
    /// The certificate authority to trust (default: the cluster directory's `tls/ca.pem`).
    #[arg(long = "tls-ca", env = "OPTIO_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) to show the servers (mutual TLS, with --tls-key).
    #[arg(long = "tls-cert", env = "OPTIO_TLS_CERT", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long = "tls-key", env = "OPTIO_TLS_KEY", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl AdminIdentity {
    /// As an [`Identity`].
    pub fn identity(&self) -> Identity {
        Identity {
            id: self.entity.clone(),
            keyring: self.keyring.clone(),
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
        }
    }
}
