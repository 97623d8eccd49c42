//! Object keys: non-empty UTF-8 of at most [`KEY_BYTES_MAX`] bytes, without NUL, and not `.` or
//! `..` (URL dot segments, which HTTP clients drop from a path before sending it).

/// Longest key, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;

/// Keys that are the S3 gateway's own state (users and their secrets, buckets, multipart
/// uploads): only entities with the `gateway` capability (or `admin`, `server`) may read,
/// list, write or delete them, in any pool; a listing for anyone else leaves them out.
pub const GATEWAY_PREFIX: &str = ".s3/";

/// Whether `key` (or a listing prefix) names the gateway's own state ([`GATEWAY_PREFIX`]).
pub fn is_gateway_key(key: &str) -> bool {
    key.starts_with(GATEWAY_PREFIX)
}

/// Why a key is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is empty.
    #[error("the key is empty; keys are 1 to {KEY_BYTES_MAX} bytes of UTF-8")]
    Empty,
    /// The key is longer than [`KEY_BYTES_MAX`].
    #[error("the key is {bytes} bytes long; keys are at most {KEY_BYTES_MAX} bytes")]
    TooLong {
        /// Its length.
        bytes: usize,
    },
    /// The key holds a NUL character.
    #[error("the key holds a NUL character at byte {at}; keys may not contain NUL")]
    Nul {
        /// Byte offset of the first NUL.
        at: usize,
    },
    /// The key is `.` or `..`.
    #[error(
        "the key '{key}' is a URL dot segment, which HTTP clients drop from a path; pick another key (e.g. './{key}' is fine)"
    )]
    DotSegment {
        /// The key.
        key: String,
    },
    /// The key is not valid UTF-8.
    #[error("the key is not valid UTF-8 (byte {at}); keys are UTF-8 text")]
    NotUtf8 {
        /// Byte offset of the first invalid byte.
        at: usize,
    },
}

/// Checks a key.
pub fn validate_key(key: &str) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(KeyError::TooLong { bytes: key.len() });
    }
    if let Some(at) = key.bytes().position(|b| b == 0) {
        return Err(KeyError::Nul { at });
    }
    if key == "." || key == ".." {
        return Err(KeyError::DotSegment { key: key.to_string() });
    }
    Ok(())
}

/// Checks a key given as raw bytes (as decoded from a URL).
pub fn validate_key_bytes(key: &[u8]) -> Result<&str, KeyError> {
    let text = std::str::from_utf8(key).map_err(|e| KeyError::NotUtf8 { at: e.valid_up_to() })?;
    validate_key(text)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert_eq!(validate_key(""), Err(KeyError::Empty));
        assert!(validate_key(&"k".repeat(KEY_BYTES_MAX)).is_ok());
        assert_eq!(
            validate_key(&"k".repeat(KEY_BYTES_MAX + 1)),
            Err(KeyError::TooLong { bytes: KEY_BYTES_MAX + 1 })
        );
        assert_eq!(validate_key("a\0b"), Err(KeyError::Nul { at: 1 }));
        assert_eq!(validate_key_bytes(b"ab\xff"), Err(KeyError::NotUtf8 { at: 2 }));
        assert_eq!(validate_key_bytes("é/ü".as_bytes()), Ok("é/ü"));
        for dots in [".", ".."] {
            assert_eq!(validate_key(dots), Err(KeyError::DotSegment { key: dots.into() }));
            assert_eq!(validate_key_bytes(dots.as_bytes()).map(str::len).ok(), None);
        }
        for fine in ["...", "./.", "a/..", "./x"] {
            assert!(validate_key(fine).is_ok(), "{fine}");
        }
    }
}
