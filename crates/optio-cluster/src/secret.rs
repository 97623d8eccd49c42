//! Secrets that Optio reads for the services it uses (etcd's and Redis's passwords): from an
//! environment variable, or from a file another variable names — never from the command line,
//! where any local user can read them in `ps`.

use std::path::PathBuf;
use std::sync::Arc;

/// Why the credentials of a service (etcd, Redis) could not be had: a variable, a file or a
/// user name that is wrong, and what to set instead. `Clone` (I/O and TLS errors are shared
/// behind an [`Arc`]) so that errors that carry it stay `Clone`.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// The file a `…_FILE` variable names could not be read.
    #[error("cannot read {var} ({}): {source}", path.display())]
    SecretFile {
        /// The variable naming the file.
        var: String,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// Only one of a client certificate and its key was set.
    #[error("set both {cert} and {key}, or neither")]
    HalfIdentity {
        /// The certificate's variable.
        cert: &'static str,
        /// The key's variable.
        key: &'static str,
    },
    /// A certificate or key file (PEM) could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The user in an etcd URL needs a password, and none was given.
    #[error(
        "the etcd user `{user}` needs a password: set {}, or {} \
         to a file holding it (a password is never taken from the command line)",
        vars.password,
        vars.password_file
    )]
    NoPassword {
        /// The user.
        user: String,
        /// The variables the credentials come from.
        vars: &'static AccessVars,
    },
    /// `etcds://` without the CA to check etcd's certificate with.
    #[error(
        "etcds:// needs the CA that signed etcd's certificate: set {} to its PEM \
         file (and {}, {} for a client certificate)",
        .0.ca,
        .0.cert,
        .0.key
    )]
    NoCa(&'static AccessVars),
    /// The user before `@` in an etcd URL is empty.
    #[error("the user before `@` is empty: use etcd://USER@HOST:PORT")]
    EmptyUser,
    /// The user name in an etcd URL is too long.
    #[error("the etcd user name is longer than {limit} bytes")]
    UserTooLong {
        /// The limit, bytes.
        limit: usize,
    },
    /// The etcd URL holds a password (`USER:PASSWORD@`).
    #[error(
        "a password does not go in the URL: give etcd://USER@HOST and the password \
         in OPTIO_ETCD_PASSWORD or a file named by OPTIO_ETCD_PASSWORD_FILE"
    )]
    PasswordInUrl,
    /// The user name has characters etcd URLs cannot carry.
    #[error("`{user}` is not an etcd user name (printable ASCII, no / @ ? #)")]
    BadUser {
        /// The name given.
        user: String,
    },
    /// The CA, certificate or key cannot make a TLS configuration.
    #[error(transparent)]
    Tls(Arc<optio_tls::TlsError>),
    /// The HTTP client library could not build a client.
    #[error("cannot make an HTTP client: {0}")]
    HttpClient(#[source] Arc<reqwest::Error>),
}

/// The secret in `var`, or the first line of the file `file_var` names (a trailing newline
/// dropped); `None` when neither is set. `var` wins when both are.
pub fn from_env(var: &str, file_var: &str) -> Result<Option<String>, AccessError> {
    match (std::env::var(var), std::env::var_os(file_var)) {
        (Ok(secret), _) => Ok(Some(secret)),
        (Err(_), Some(path)) => read_secret_file(file_var, path.into()).map(Some),
        (Err(_), None) => Ok(None),
    }
}

/// The first line of the file `path` (named by the variable `file_var`), a trailing newline
/// dropped.
fn read_secret_file(file_var: &str, path: PathBuf) -> Result<String, AccessError> {
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.trim_end_matches(['\n', '\r']).to_string()),
        Err(e) => {
            Err(AccessError::SecretFile { var: file_var.to_string(), path, source: Arc::new(e) })
        }
    }
}

/// The environment variables a service's credentials are read from.
#[derive(Clone, Copy, Debug)]
pub struct AccessVars {
    /// The password.
    pub password: &'static str,
    /// A file holding the password.
    pub password_file: &'static str,
    /// The CA certificate (PEM) the service's certificate is checked with.
    pub ca: &'static str,
    /// A client certificate (PEM) shown to the service.
    pub cert: &'static str,
    /// That certificate's private key (PEM).
    pub key: &'static str,
}

/// How Optio reaches a service that checks who calls (etcd, Redis), besides its URL: a
/// password, and for TLS the CA and an optional client certificate. The password is never
/// shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Access {
    /// The password (of the user the URL names, or AUTH's).
    pub password: Option<String>,
    /// The CA certificate (PEM) the service's certificate is checked with.
    pub ca: Option<std::path::PathBuf>,
    /// A client certificate chain and its private key (PEM).
    pub identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("password", &self.password.as_ref().map(|_| "…"))
            .field("ca", &self.ca)
            .field("identity", &self.identity)
            .finish()
    }
}

impl Access {
    /// What the variables `vars` names say (a password from `password`, else from the file
    /// `password_file` names; `cert` and `key` both or neither).
    pub fn from_env(vars: &AccessVars) -> Result<Access, AccessError> {
        let path = |var: &str| {
            std::env::var_os(var).filter(|v| !v.is_empty()).map(std::path::PathBuf::from)
        };
        let identity = match (path(vars.cert), path(vars.key)) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(AccessError::HalfIdentity { cert: vars.cert, key: vars.key }),
        };
        Ok(Access {
            password: from_env(vars.password, vars.password_file)?,
            ca: path(vars.ca),
            identity,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_secret_file_names_its_variable_and_path() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let missing = dir.path().join("absent-password");
        let error = read_secret_file("X_FILE", missing.clone()).expect_err("no such file");
        assert!(
            matches!(&error, AccessError::SecretFile { var, path, .. } if var == "X_FILE" && *path == missing),
            "{error:?}"
        );
        assert!(error.to_string().starts_with("cannot read X_FILE ("), "{error}");
        let present = dir.path().join("password");
        std::fs::write(&present, "s3cret\r\n").expect("written");
        assert_eq!(read_secret_file("X_FILE", present).expect("read"), "s3cret");
    }
}
