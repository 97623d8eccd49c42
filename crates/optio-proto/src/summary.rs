//! Object summaries: a few bytes at the start of an object's data that the servers keep in
//! memory and show in listings, so that a front end can list what it stored without reading
//! each object (the S3 gateway keeps an object's ETag and size there).
//!
//! An object whose data begins with [`SUMMARY_MAGIC`] has a summary: the
//! [`SUMMARY_BYTES`] bytes that follow the magic. The summary is data like any other — covered
//! by the object's checksum, copied by rebalancing, repair and migration with the rest — so no
//! index can disagree with the objects after a crash: the server rebuilds its in-memory
//! summaries from the objects when it starts.

/// The bytes an object's data begins with when it carries a summary.
pub const SUMMARY_MAGIC: &[u8; 8] = b"OPTIOSUM";
/// Length of a summary.
pub const SUMMARY_BYTES: usize = 32;
/// Bytes of data a reader needs to find a summary: the magic and the summary.
pub const SUMMARY_PREFIX_BYTES: usize = SUMMARY_MAGIC.len() + SUMMARY_BYTES;

/// The summary of an object whose data begins with `data`, if it has one.
pub fn summary_of(data: &[u8]) -> Option<[u8; SUMMARY_BYTES]> {
    let rest = data.strip_prefix(&SUMMARY_MAGIC[..])?;
    rest.get(..SUMMARY_BYTES)?.try_into().ok()
}

/// A summary as it travels in a listing: lower-case hexadecimal.
pub fn summary_hex(summary: &[u8; SUMMARY_BYTES]) -> String {
    crate::hex::hex_bytes(summary)
}

/// Decodes a summary from a listing; `None` when it is not [`SUMMARY_BYTES`] bytes of hex.
pub fn summary_from_hex(text: &str) -> Option<[u8; SUMMARY_BYTES]> {
    crate::hex::bytes_from_hex(text)
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation, reason = "test data: small values, or truncation wanted")]
mod tests {
    use super::*;

    #[test]
    fn found_only_behind_the_magic_and_whole() {
        let mut data = SUMMARY_MAGIC.to_vec();
        data.extend((0..SUMMARY_BYTES as u8).collect::<Vec<_>>());
        data.extend_from_slice(b"payload");
        let summary = summary_of(&data).expect("a summary");
        assert_eq!(summary[31], 31);
        assert_eq!(summary_from_hex(&summary_hex(&summary)), Some(summary));
        assert_eq!(summary_of(&data[..SUMMARY_PREFIX_BYTES - 1]), None);
        assert_eq!(summary_of(b"OPTIOSUX and more bytes than a summary needs......"), None);
        assert_eq!(summary_of(b""), None);
        assert_eq!(summary_from_hex("zz"), None);
        assert_eq!(summary_from_hex(&"é".repeat(32)), None);
    }
}
