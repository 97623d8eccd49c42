//! How the gateway lays S3 objects out in Optio's objects.
//!
//! Every S3 object has a *head*: the Optio object `{bucket id}/{key}`. Its data is
//!
//! | bytes | what |
//! |---|---|
//! | 0..8 | [`SUMMARY_MAGIC`] — the servers keep the next 32 bytes in memory and list them |
//! | 8..24 | MD5 (single part) or the MD5 of the parts' MD5s (multipart) |
//! | 24..28 | number of parts (0: a single-part object), little-endian |
//! | 28..36 | size of the S3 object in bytes |
//! | 36..40 | flags (bit 0: the data is striped, not inline) |
//! | 40..44 | length of the metadata that follows |
//! | 44.. | metadata (JSON: content headers, user metadata, the stripes) |
//! | then | the data itself, for an object stored inline |
//!
//! Objects up to [`INLINE_BYTES_MAX`] are stored inline: one Optio write per PUT. Larger ones,
//! and every multipart upload, are striped: each part's bytes go to data objects
//! `{bucket id}~d/{stripe id}.{index}` of [`STRIPE_OBJECT_BYTES`] each (the last shorter), named
//! by a random stripe id so an upload never overwrites another's data, and the head lists the
//! stripes. The split of a byte range over a stripe's objects is the one block volumes use
//! ([`optio_client::volume::split`]).
//!
//! Because the summary is part of the head, a listing (every device's ordered index, merged)
//! shows each object's ETag and size without reading it, and an object is listed exactly when
//! its head exists: there is no separate index entry for a crash to leave behind.

use std::collections::BTreeMap;

use optio_proto::hex::hex_bytes;
use optio_proto::summary::{SUMMARY_BYTES, SUMMARY_MAGIC, SUMMARY_PREFIX_BYTES, summary_from_hex};
use serde::{Deserialize, Serialize};

/// Largest object stored inline in its head.
pub const INLINE_BYTES_MAX: usize = 8 << 20;
/// Size of the data objects of a stripe.
pub const STRIPE_OBJECT_BYTES: u64 = 8 << 20;
/// Bytes before the metadata.
pub(crate) const FIXED_BYTES: usize = SUMMARY_PREFIX_BYTES + 4;
/// Longest metadata a head may hold (10,000 parts' stripes fit with room to spare).
pub const META_BYTES_MAX: usize = 4 << 20;
const FLAG_STRIPED: u32 = 1;

/// What a listing shows of an object: its ETag, size and layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// MD5 of the data, or of the parts' MD5s.
    pub md5: [u8; 16],
    /// Parts (0: single part).
    pub parts: u32,
    /// Size in bytes.
    pub size: u64,
    /// The data is in stripes, not inline.
    pub striped: bool,
}

impl Summary {
    /// The S3 ETag (without quotes): the MD5 in hex, with `-{parts}` for a multipart object.
    pub fn etag(&self) -> String {
        let hex = hex_bytes(&self.md5);
        if self.parts == 0 { hex } else { format!("{hex}-{}", self.parts) }
    }

    fn encode(&self) -> [u8; SUMMARY_BYTES] {
        let mut out = [0u8; SUMMARY_BYTES];
        out[..16].copy_from_slice(&self.md5);
        out[16..20].copy_from_slice(&self.parts.to_le_bytes());
        out[20..28].copy_from_slice(&self.size.to_le_bytes());
        let flags = if self.striped { FLAG_STRIPED } else { 0 };
        out[28..32].copy_from_slice(&flags.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8; SUMMARY_BYTES]) -> Summary {
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        Summary {
            md5: bytes[..16].try_into().expect("16 bytes"),
            parts: u32_at(16),
            size: u64::from_le_bytes(bytes[20..28].try_into().expect("8 bytes")),
            striped: u32_at(28) & FLAG_STRIPED != 0,
        }
    }

    /// The summary a listing row or probe carries (hexadecimal), if it is one of ours.
    pub fn from_hex(text: &str) -> Option<Summary> {
        summary_from_hex(text).map(|bytes| Summary::decode(&bytes))
    }
}

/// The content headers and user metadata of an object, and where its data is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The content type.
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The content encoding.
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The content disposition.
    pub content_disposition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The content language.
    pub content_language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The cache control.
    pub cache_control: Option<String>,
    /// `Expires`, as an HTTP date.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// User metadata (`x-amz-meta-*`), names in lower case.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user: BTreeMap<String, String>,
    /// S3's additional checksums of the data, as the client gave them (base64), by
    /// algorithm: `crc32`, `crc32c`, `crc64nvme`, `sha1`, `sha256`. Verified when received.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checksums: BTreeMap<String, String>,
    /// The stripes holding the data, in order (empty: inline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stripes: Vec<Stripe>,
}

/// One run of data objects: a part of a multipart upload, or a large single PUT.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stripe {
    /// The random id naming its data objects.
    pub id: String,
    /// Its size in bytes.
    pub size: u64,
}

impl Stripe {
    /// Number of data objects.
    pub fn objects(&self) -> u64 {
        self.size.div_ceil(STRIPE_OBJECT_BYTES)
    }
}

/// Why a head could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Not a head the gateway wrote.
    #[error("not an S3 object head ({0})")]
    NotAHead(&'static str),
    /// The metadata does not parse.
    #[error("the metadata of an S3 object head does not parse: {0}")]
    Meta(#[from] serde_json::Error),
}

/// A decoded head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// The summary.
    pub summary: Summary,
    /// The meta.
    pub meta: Meta,
    /// Offset of the inline data in the head's bytes.
    pub data_offset: usize,
}

/// The bytes of a head before its inline data.
pub fn encode_head(summary: &Summary, meta: &Meta) -> Vec<u8> {
    let meta = serde_json::to_vec(meta).expect("metadata serialises");
    let mut out = Vec::with_capacity(FIXED_BYTES + meta.len());
    out.extend_from_slice(SUMMARY_MAGIC);
    out.extend_from_slice(&summary.encode());
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta);
    out
}

/// Writes `summary` into a head encoded with another (a head written before its data was
/// received, whose MD5 and size are known only at the end).
pub fn patch_summary(head: &mut [u8], summary: &Summary) {
    head[SUMMARY_MAGIC.len()..SUMMARY_PREFIX_BYTES].copy_from_slice(&summary.encode());
}

/// How many bytes of a head must be read to decode it: `Ok` with the whole length when
/// `prefix` (the head's first bytes) is enough, else `Err` with how many are needed.
pub fn head_bytes_needed(prefix: &[u8]) -> Result<usize, FormatError> {
    let fixed = prefix.get(..FIXED_BYTES).ok_or(FormatError::NotAHead("too short"))?;
    let meta_len = u32::from_le_bytes(fixed[SUMMARY_PREFIX_BYTES..].try_into().expect("4 bytes"));
    let meta_len = meta_len as usize;
    if meta_len > META_BYTES_MAX {
        return Err(FormatError::NotAHead("metadata too long"));
    }
    Ok(FIXED_BYTES + meta_len)
}

/// Decodes a head from its first bytes (at least [`head_bytes_needed`]).
pub fn decode_head(bytes: &[u8]) -> Result<Head, FormatError> {
    let rest = bytes.strip_prefix(&SUMMARY_MAGIC[..]).ok_or(FormatError::NotAHead("no magic"))?;
    let summary = rest.get(..SUMMARY_BYTES).ok_or(FormatError::NotAHead("too short"))?;
    let summary = Summary::decode(summary.try_into().expect("32 bytes"));
    let end = head_bytes_needed(bytes)?;
    let meta = bytes.get(FIXED_BYTES..end).ok_or(FormatError::NotAHead("metadata cut short"))?;
    let meta: Meta = serde_json::from_slice(meta)?;
    if summary.striped == meta.stripes.is_empty()
        || summary.striped && meta.stripes.iter().map(|s| s.size).sum::<u64>() != summary.size
    {
        return Err(FormatError::NotAHead("summary and metadata disagree"));
    }
    Ok(Head { summary, meta, data_offset: end })
}

/// A random identifier: `bytes` random bytes in hexadecimal.
pub fn random_id(bytes: usize) -> String {
    let mut raw = vec![0u8; bytes];
    getrandom::fill(&mut raw).expect("the system's random number generator works");
    hex_bytes(&raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_round_trips_and_its_summary_is_what_servers_see() {
        let summary = Summary { md5: [7; 16], parts: 3, size: 20 << 20, striped: true };
        let meta = Meta {
            content_type: Some("text/plain".into()),
            user: [("color".to_string(), "blue".to_string())].into(),
            stripes: vec![
                Stripe { id: "a".into(), size: 8 << 20 },
                Stripe { id: "b".into(), size: 8 << 20 },
                Stripe { id: "c".into(), size: 4 << 20 },
            ],
            ..Meta::default()
        };
        let mut bytes = encode_head(&Summary { md5: [0; 16], ..summary }, &meta);
        patch_summary(&mut bytes, &summary);
        assert_eq!(head_bytes_needed(&bytes).unwrap(), bytes.len());
        let head = decode_head(&bytes).unwrap();
        assert_eq!((head.summary, &head.meta, head.data_offset), (summary, &meta, bytes.len()));
        let seen = optio_proto::summary::summary_of(&bytes).expect("servers see a summary");
        assert_eq!(Summary::from_hex(&optio_proto::summary::summary_hex(&seen)), Some(summary));
        assert_eq!(summary.etag(), format!("{}-3", "07".repeat(16)));
    }

    proptest::proptest! {
        /// Whatever bytes the cluster returns for a head, decoding answers (never panics),
        /// and a head it accepts agrees with itself.
        #[test]
        fn any_bytes_decode_or_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            if let Ok(head) = decode_head(&bytes) {
                proptest::prop_assert!(head.data_offset <= bytes.len());
                proptest::prop_assert_eq!(head.summary.striped, !head.meta.stripes.is_empty());
            }
            let _ = head_bytes_needed(&bytes);
        }

        /// A real head with any flipped byte in its summary or length either decodes to a
        /// consistent head or is refused.
        #[test]
        fn damaged_real_heads_never_panic(at in 0usize..120, bit in 0u8..8) {
            let summary = Summary { md5: [3; 16], parts: 2, size: 9, striped: true };
            let meta = Meta { stripes: vec![Stripe { id: "s".into(), size: 9 }], ..Meta::default() };
            let mut bytes = encode_head(&summary, &meta);
            let at = at % bytes.len();
            bytes[at] ^= 1 << bit;
            let _ = decode_head(&bytes);
        }
    }

    #[test]
    fn damaged_heads_are_refused_not_misread() {
        let summary = Summary { md5: [1; 16], parts: 0, size: 5, striped: false };
        let mut bytes = encode_head(&summary, &Meta::default());
        bytes.extend_from_slice(b"hello");
        assert!(decode_head(&bytes).is_ok());
        assert!(decode_head(&bytes[..10]).is_err());
        assert!(decode_head(b"plain optio object").is_err());
        let mut long = bytes.clone();
        long[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_head(&long).is_err());
        let mut lying = encode_head(&Summary { striped: true, ..summary }, &Meta::default());
        lying.extend_from_slice(b"hello");
        assert!(decode_head(&lying).is_err());
    }
}
