//! What both map stores share, below them: the map's encoding (Optio TOML), the limits on what
//! is read back, and the rules for member names. The file and etcd back ends both build on
//! this module, and [`crate::source`] on them; nothing here knows where a map is kept.

use optio_placement::ClusterMap;

use crate::ClusterError;

/// Largest status document stored or read, in bytes.
pub const STATUS_BYTES_MAX: u64 = 1 << 20;
/// Longest member name, in bytes.
pub const MEMBER_BYTES_MAX: usize = 128;

/// The map as it is stored, in either back end: Optio TOML.
pub fn encode_map(map: &ClusterMap) -> String {
    optio_mapfile::optio_toml::write(map)
}

/// Parses map text read from `source_name` (a file path, or an etcd key and revision).
pub fn decode_map(text: &str, source_name: &str) -> Result<ClusterMap, ClusterError> {
    optio_mapfile::parse(text).map_err(|source| ClusterError::Map {
        what: format!("cannot parse the map at {source_name}"),
        source: Box::new(source),
    })
}

/// Checks a member name (`z1-h1`, `server-3`): 1 to [`MEMBER_BYTES_MAX`] bytes of ASCII
/// letters, digits, `-`, `_`, `.` and `:`, not starting with `.`. It names a file and an etcd
/// key, so no `/`, no spaces, no hidden files.
pub fn validate_member(name: &str) -> Result<(), ClusterError> {
    let bad = |reason: String| ClusterError::BadMember { name: name.to_string(), reason };
    if name.is_empty() {
        return Err(bad("it is empty".into()));
    }
    if name.len() > MEMBER_BYTES_MAX {
        return Err(bad(format!("it is longer than {MEMBER_BYTES_MAX} bytes")));
    }
    if name.starts_with('.') {
        return Err(bad("it starts with `.`".into()));
    }
    if let Some(c) =
        name.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')))
    {
        return Err(bad(format!("it contains {c:?}: use letters, digits, `-`, `_`, `.` and `:`")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names_are_checked() {
        for good in ["z1-h1", "server-3", "a", "host.example:7000", &"x".repeat(128)] {
            validate_member(good).expect(good);
        }
        for (bad, says) in [
            ("", "empty"),
            ("a/b", "'/'"),
            ("..", "starts with"),
            (".hidden", "starts with"),
            ("a b", "' '"),
            ("é", "'é'"),
            (&"x".repeat(129), "longer than 128"),
        ] {
            let error = validate_member(bad).expect_err(bad).to_string();
            assert!(error.contains(says), "{bad}: {error}");
        }
    }

    #[test]
    fn a_map_survives_its_encoding_and_bad_text_names_its_source() {
        let map = optio_placement::ClusterMapBuilder::new()
            .device(optio_placement::DeviceSpec::new(0))
            .build()
            .expect("a valid map");
        assert_eq!(decode_map(&encode_map(&map), "here").expect("decodes"), map);
        let error = decode_map("not = [a map", "etcd://x/optio/map").expect_err("bad text");
        assert!(error.to_string().contains("etcd://x/optio/map"), "{error}");
        assert!(std::error::Error::source(&error).is_some(), "the parse error is kept");
    }
}
