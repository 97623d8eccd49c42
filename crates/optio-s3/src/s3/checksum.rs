//! Content-MD5 and S3's additional checksums (`x-amz-checksum-*`): decoded, computed while a
//! body streams in, compared once it is in, and returned with the object.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{S3Result, s3_error};

use super::convert::body_stream;
use crate::format::Meta;
use crate::store::GatewayError;

pub(super) fn content_md5(sent: Option<&str>) -> S3Result<Option<[u8; 16]>> {
    let Some(sent) = sent else { return Ok(None) };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(sent.trim())
        .ok()
        .and_then(|b| <[u8; 16]>::try_from(b).ok())
        .ok_or_else(|| s3_error!(InvalidDigest, "the Content-MD5 is not a base64 MD5"))?;
    Ok(Some(bytes))
}

/// The additional checksums a PUT sent (`x-amz-checksum-*`), by algorithm.
pub(super) fn sent_checksums(checksum: Checksum) -> std::collections::BTreeMap<String, String> {
    [
        ("crc32", checksum.checksum_crc32),
        ("crc32c", checksum.checksum_crc32c),
        ("crc64nvme", checksum.checksum_crc64nvme),
        ("sha1", checksum.checksum_sha1),
        ("sha256", checksum.checksum_sha256),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|v| (name.to_string(), v)))
    .collect()
}

/// The checksums stored with an object, as S3 returns them.
pub(super) fn stored_checksums(meta: &Meta) -> Checksum {
    let get = |name: &str| meta.checksums.get(name).cloned();
    Checksum {
        checksum_crc32: get("crc32"),
        checksum_crc32c: get("crc32c"),
        checksum_crc64nvme: get("crc64nvme"),
        checksum_sha1: get("sha1"),
        checksum_sha256: get("sha256"),
        checksum_type: None,
    }
}

/// A body that also computes the checksums `sent` names, and the check that compares them
/// once the body is in.
pub(super) fn checked_body(
    body: Option<StreamingBlob>,
    sent: &std::collections::BTreeMap<String, String>,
) -> (
    impl futures_util::Stream<Item = Result<Bytes, super::convert::BodyError>> + Unpin,
    impl FnOnce() -> Result<(), GatewayError>,
) {
    use s3s::crypto::Checksum as _;
    let mut hasher = s3s::checksum::ChecksumHasher::default();
    for name in sent.keys() {
        match name.as_str() {
            "crc32" => hasher.crc32 = Some(Default::default()),
            "crc32c" => hasher.crc32c = Some(Default::default()),
            "crc64nvme" => hasher.crc64nvme = Some(Default::default()),
            "sha1" => hasher.sha1 = Some(s3s::crypto::Sha1::new()),
            "sha256" => hasher.sha256 = Some(s3s::crypto::Sha256::new()),
            _ => {}
        }
    }
    let hasher = Arc::new(std::sync::Mutex::new(Some(hasher)));
    let feeding = hasher.clone();
    let body = body_stream(body).map(move |chunk| {
        if let (Ok(bytes), Some(hasher)) = (&chunk, feeding.lock().expect("hasher lock").as_mut()) {
            hasher.update(bytes);
        }
        chunk
    });
    let sent = sent.clone();
    let check = move || {
        if sent.is_empty() {
            return Ok(());
        }
        let hasher = hasher.lock().expect("hasher lock").take().expect("checked once");
        let computed = sent_checksums(hasher.finalize());
        for (name, value) in &sent {
            if computed.get(name) != Some(value) {
                return Err(GatewayError::BadChecksum(name.clone()));
            }
        }
        Ok(())
    };
    (body, check)
}
