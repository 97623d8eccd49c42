//! Parsing `etcd://HOST[:PORT][/prefix]`.

use super::{DEFAULT_PORT, DEFAULT_PREFIX, HOST_BYTES_MAX, PREFIX_BYTES_MAX};

/// What is wrong with the host, port or prefix of an `etcd://` URL
/// ([`ClusterError::BadSource`](crate::ClusterError::BadSource) says which URL).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum EtcdUrlError {
    /// `[` without `]`.
    #[error("an IPv6 host needs its closing `]`")]
    UnclosedIpv6,
    /// Brackets around something other than an IPv6 address.
    #[error("`{host}` is not an IPv6 address")]
    NotIpv6 {
        /// The host given.
        host: String,
    },
    /// Text between the bracketed host and the port.
    #[error("unexpected `{after}` after the host")]
    AfterHost {
        /// The text after the host.
        after: String,
    },
    /// No host.
    #[error("the host is missing: use etcd://HOST:PORT[/prefix]")]
    NoHost,
    /// A host with characters no host name has, or too long.
    #[error("`{host}` is not a host name or address")]
    BadHost {
        /// The host given.
        host: String,
    },
    /// A port that is not 1 to 65535.
    #[error("`{port}` is not a port (1 to 65535)")]
    BadPort {
        /// The port given.
        port: String,
    },
    /// A prefix over [`PREFIX_BYTES_MAX`] bytes.
    #[error("the prefix is longer than {PREFIX_BYTES_MAX} bytes")]
    PrefixTooLong,
    /// A prefix with `//`.
    #[error("the prefix `{prefix}` has an empty segment (`//`)")]
    EmptySegment {
        /// The prefix given.
        prefix: String,
    },
    /// A prefix with a character keys should not hold.
    #[error(
        "the prefix `{prefix}` contains {character:?}: use letters, digits and punctuation \
         other than ? # %"
    )]
    PrefixCharacter {
        /// The prefix given.
        prefix: String,
        /// The character.
        character: char,
    },
}

/// Splits `HOST[:PORT]` (an IPv6 host in brackets).
pub(super) fn split_host_port(authority: &str) -> Result<(&str, u16), EtcdUrlError> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']').ok_or(EtcdUrlError::UnclosedIpv6)?;
        let host = &authority[..end + 2];
        let after = &rest[end + 1..];
        if !rest[..end].chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
            return Err(EtcdUrlError::NotIpv6 { host: host.to_string() });
        }
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(EtcdUrlError::AfterHost { after: after.to_string() }),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let plain = host.starts_with('[')
        || host.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_');
    if host.is_empty() || host == "[]" {
        return Err(EtcdUrlError::NoHost);
    }
    if host.len() > HOST_BYTES_MAX || !plain {
        return Err(EtcdUrlError::BadHost { host: host.to_string() });
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => return Err(EtcdUrlError::BadPort { port: port.to_string() }),
        },
    };
    Ok((host, port))
}

/// Checks the URL's path and makes it a prefix: `""` or `"/"` → [`DEFAULT_PREFIX`], a
/// trailing `/` dropped.
pub(super) fn parse_prefix(path: &str) -> Result<String, EtcdUrlError> {
    let path = path.strip_suffix('/').unwrap_or(path);
    if path.is_empty() {
        return Ok(DEFAULT_PREFIX.to_string());
    }
    if path.len() > PREFIX_BYTES_MAX {
        return Err(EtcdUrlError::PrefixTooLong);
    }
    if path[1..].split('/').any(str::is_empty) {
        return Err(EtcdUrlError::EmptySegment { prefix: path.to_string() });
    }
    if let Some(character) =
        path.chars().find(|c| !c.is_ascii_graphic() || matches!(c, '?' | '#' | '%'))
    {
        return Err(EtcdUrlError::PrefixCharacter { prefix: path.to_string(), character });
    }
    Ok(path.to_string())
}
