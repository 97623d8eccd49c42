//! Who Optio is to etcd, and how the traffic is protected.
//!
//! * **User and password** (etcd's own authentication): the URL names the user,
//!   `etcd://USER@HOST:PORT/prefix`; the password comes from [`PASSWORD_ENV`] or the file
//!   [`PASSWORD_FILE_ENV`] names — never from the command line. `auth/authenticate` trades them
//!   for a token sent in `Authorization` with every request; a token etcd has expired (its
//!   `--auth-token-ttl`, 5 minutes of disuse by default) is replaced once and the request
//!   retried.
//! * **TLS**: the scheme `etcds://` speaks HTTPS to etcd, trusting the CA in [`CA_ENV`]; with
//!   [`CERT_ENV`] and [`KEY_ENV`] it shows that client certificate (etcd's
//!   `--client-cert-auth`; with authentication enabled in etcd, the certificate's common name is
//!   the user, and no password is needed).
//!
//! Environment variables rather than flags, because every command that takes a map source
//! (`--map`, `--cluster`) then reaches the same etcd the same way, and servers started by
//! `optio up` inherit them.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::secret::AccessError;

/// The environment variable holding the etcd user's password.
pub const PASSWORD_ENV: &str = "OPTIO_ETCD_PASSWORD";
/// The environment variable naming a file holding it.
pub const PASSWORD_FILE_ENV: &str = "OPTIO_ETCD_PASSWORD_FILE";
/// The environment variable naming the CA certificate (PEM) an `etcds://` etcd is checked with.
pub const CA_ENV: &str = "OPTIO_ETCD_CA";
/// The environment variable naming the client certificate (PEM) shown to an `etcds://` etcd.
pub const CERT_ENV: &str = "OPTIO_ETCD_CERT";
/// The environment variable naming that certificate's private key (PEM).
pub const KEY_ENV: &str = "OPTIO_ETCD_KEY";
/// Longest etcd user name, in bytes.
const USER_BYTES_MAX: usize = 128;

/// A user and the password read for it (the password is never shown).
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Login {
    pub(super) user: String,
    pub(super) password: String,
}

impl fmt::Debug for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Login").field("user", &self.user).finish_non_exhaustive()
    }
}

impl Login {
    /// The login of `user` with the password `access` holds.
    pub(super) fn new(user: &str, access: &EtcdAccess) -> Result<Login, AccessError> {
        check_user(user)?;
        let password = access
            .password
            .clone()
            .ok_or_else(|| AccessError::NoPassword { user: user.to_string(), vars: &VARS })?;
        Ok(Login { user: user.to_string(), password })
    }
}

/// The credentials an etcd source is reached with, besides its URL: the password of the URL's
/// user, and for `etcds://` the CA and an optional client certificate (for etcd's
/// `--client-cert-auth`).
pub type EtcdAccess = crate::secret::Access;

/// The variables etcd's credentials come from.
pub const VARS: crate::secret::AccessVars = crate::secret::AccessVars {
    password: PASSWORD_ENV,
    password_file: PASSWORD_FILE_ENV,
    ca: CA_ENV,
    cert: CERT_ENV,
    key: KEY_ENV,
};

/// The files of an `etcds://` connection.
pub(super) fn tls_files(access: &EtcdAccess) -> Result<TlsFiles, AccessError> {
    let ca = access.ca.clone().ok_or(AccessError::NoCa(&VARS))?;
    Ok(TlsFiles { ca, identity: access.identity.clone() })
}

fn check_user(user: &str) -> Result<(), AccessError> {
    if user.is_empty() {
        return Err(AccessError::EmptyUser);
    }
    if user.len() > USER_BYTES_MAX {
        return Err(AccessError::UserTooLong { limit: USER_BYTES_MAX });
    }
    if user.contains(':') {
        return Err(AccessError::PasswordInUrl);
    }
    if !user.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'/' | b'@' | b'?' | b'#')) {
        return Err(AccessError::BadUser { user: user.to_string() });
    }
    Ok(())
}

/// The files of an `etcds://` connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct TlsFiles {
    pub(super) ca: PathBuf,
    pub(super) identity: Option<(PathBuf, PathBuf)>,
}

impl TlsFiles {
    /// The HTTPS configuration: trust the CA, show the certificate if there is one.
    pub(super) fn client_config(&self) -> Result<rustls::ClientConfig, AccessError> {
        let identity = self.identity.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
        optio_tls::client_config(&self.ca, identity).map_err(|e| AccessError::Tls(Arc::new(e)))
    }
}

/// A hint for an error etcd gave, about what Optio's credentials should be.
pub(super) fn hint(message: &str, user: Option<&str>, prefix: &str) -> String {
    if message.contains("user name is empty") || message.contains("user name not found") {
        format!(
            " (etcd has authentication enabled: name the user in the URL, etcd://USER@HOST:PORT, \
             with the password in {PASSWORD_ENV} or a file named by {PASSWORD_FILE_ENV}; or, over \
             etcds://, a client certificate whose common name is the user)"
        )
    } else if message.contains("permission denied") {
        let user = user.unwrap_or("(the certificate's common name)");
        format!(
            " (the etcd user {user} may not do this: grant it a role with readwrite on the keys \
             from {prefix}/ to the prefix's end, e.g. `etcdctl role grant-permission ROLE \
             --prefix=true readwrite {prefix}/`)"
        )
    } else if message.contains("authentication failed") {
        format!(" (the user or the password is wrong: check {PASSWORD_ENV} / {PASSWORD_FILE_ENV})")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_names_are_checked_and_passwords_never_shown() {
        for (user, expected) in [
            ("", "empty"),
            ("a:b", "password does not go in the URL"),
            ("a b", "not an etcd user name"),
            ("a/b", "not an etcd user name"),
        ] {
            let error = check_user(user).expect_err(user);
            assert!(error.to_string().contains(expected), "{user}: {error}");
        }
        assert!(matches!(check_user(""), Err(AccessError::EmptyUser)));
        assert!(matches!(check_user("a:b"), Err(AccessError::PasswordInUrl)));
        assert!(matches!(check_user("a/b"), Err(AccessError::BadUser { user }) if user == "a/b"));
        let long = "u".repeat(USER_BYTES_MAX + 1);
        assert!(matches!(check_user(&long), Err(AccessError::UserTooLong { .. })));
        let no_password = Login::new("root", &EtcdAccess::default()).expect_err("no password");
        assert!(matches!(&no_password, AccessError::NoPassword { user, .. } if user == "root"));
        assert!(no_password.to_string().contains(PASSWORD_ENV), "{no_password}");
        assert!(matches!(tls_files(&EtcdAccess::default()), Err(AccessError::NoCa(_))));
        check_user("optio-server_1.x").expect("a plain name");
        let login = Login { user: "root".into(), password: "s3cret-pass".into() };
        let shown = format!("{login:?}");
        assert!(shown.contains("root") && !shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn hints_name_what_to_do() {
        assert!(hint("etcdserver: user name is empty", None, "/optio").contains(PASSWORD_ENV));
        assert!(hint("etcdserver: permission denied", Some("u"), "/p").contains("/p/"));
        assert!(hint("etcdserver: something else", None, "/optio").is_empty());
    }
}
