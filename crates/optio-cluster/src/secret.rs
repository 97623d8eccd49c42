//! Secrets that Optio reads for the services it uses (etcd's and Redis's passwords): from an
//! environment variable, or from a file another variable names — never from the command line,
//! where any local user can read them in `ps`.

/// The secret in `var`, or the first line of the file `file_var` names (a trailing newline
/// dropped); `None` when neither is set. `var` wins when both are.
pub fn from_env(var: &str, file_var: &str) -> Result<Option<String>, String> {
    match (std::env::var(var), std::env::var_os(file_var)) {
        (Ok(secret), _) => Ok(Some(secret)),
        (Err(_), Some(path)) => Ok(Some(
            std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {file_var} ({}): {e}", path.to_string_lossy()))?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        )),
        (Err(_), None) => Ok(None),
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
    pub fn from_env(vars: &AccessVars) -> Result<Access, String> {
        let path = |var: &str| {
            std::env::var_os(var).filter(|v| !v.is_empty()).map(std::path::PathBuf::from)
        };
        let identity = match (path(vars.cert), path(vars.key)) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            _ => return Err(format!("set both {} and {}, or neither", vars.cert, vars.key)),
        };
        Ok(Access {
            password: from_env(vars.password, vars.password_file)?,
            ca: path(vars.ca),
            identity,
        })
    }
}
