//! Parsing `etcd://HOST[:PORT][/prefix]`.

use super::{DEFAULT_PORT, DEFAULT_PREFIX, HOST_BYTES_MAX, PREFIX_BYTES_MAX};

/// Splits `HOST[:PORT]` (an IPv6 host in brackets).
pub(super) fn split_host_port(authority: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']').ok_or("an IPv6 host needs its closing `]`")?;
        let host = &authority[..end + 2];
        let after = &rest[end + 1..];
        if !rest[..end].chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
            return Err(format!("`{host}` is not an IPv6 address"));
        }
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(format!("unexpected `{after}` after the host")),
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
        return Err("the host is missing: use etcd://HOST:PORT[/prefix]".into());
    }
    if host.len() > HOST_BYTES_MAX || !plain {
        return Err(format!("`{host}` is not a host name or address"));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => return Err(format!("`{port}` is not a port (1 to 65535)")),
        },
    };
    Ok((host, port))
}

/// Checks the URL's path and makes it a prefix: `""` or `"/"` → [`DEFAULT_PREFIX`], a
/// trailing `/` dropped.
pub(super) fn parse_prefix(path: &str) -> Result<String, String> {
    let path = path.strip_suffix('/').unwrap_or(path);
    if path.is_empty() {
        return Ok(DEFAULT_PREFIX.to_string());
    }
    if path.len() > PREFIX_BYTES_MAX {
        return Err(format!("the prefix is longer than {PREFIX_BYTES_MAX} bytes"));
    }
    if path[1..].split('/').any(str::is_empty) {
        return Err(format!("the prefix `{path}` has an empty segment (`//`)"));
    }
    if let Some(c) = path.chars().find(|c| !c.is_ascii_graphic() || matches!(c, '?' | '#' | '%')) {
        return Err(format!(
            "the prefix `{path}` contains {c:?}: use letters, digits and punctuation \
             other than ? # %"
        ));
    }
    Ok(path.to_string())
}
