//! What listings share: a page's parameters and continuation tokens, keys encoded as asked,
//! and the objects and common prefixes of an answer.

use base64::Engine;
use s3s::dto::*;
use s3s::{S3Result, s3_error};

use super::convert::{etag_of, timestamp};
use crate::store::Bucket;

/// Most keys a listing page holds.
pub(super) const MAX_KEYS: usize = 1000;

/// A listing's page and what it was asked with.
pub(super) struct Page {
    pub(super) bucket: Bucket,
    pub(super) max: usize,
    pub(super) prefix: String,
    pub(super) delimiter: Option<String>,
    pub(super) page: crate::store::ListPage,
    /// Keys are URL-encoded in the answer (`encoding-type=url`).
    pub(super) url: bool,
}

pub(super) fn page_token(after: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(after.as_bytes())
}

pub(super) fn token_after(token: &str) -> S3Result<String> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| {
            s3_error!(InvalidArgument, "the continuation token is not one this gateway gave")
        })
}

pub(super) fn max_keys_of(asked: Option<i32>) -> S3Result<usize> {
    match asked {
        None => Ok(MAX_KEYS),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys is negative")),
        Some(n) => Ok((n as usize).min(MAX_KEYS)),
    }
}

/// Keys, prefixes and markers as S3 sends them with `encoding-type=url`.
pub(super) fn encoded(url: bool, text: String) -> String {
    if !url {
        return text;
    }
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(super) fn listed(
    url: bool,
    objects: Vec<crate::store::Listed>,
    shown: Option<Owner>,
) -> Vec<Object> {
    objects
        .into_iter()
        .map(|o| Object {
            key: Some(encoded(url, o.key)),
            owner: shown.clone(),
            size: Some(o.summary.size as i64),
            e_tag: Some(etag_of(&o.summary)),
            last_modified: Some(timestamp(o.modified_micros)),
            storage_class: Some(ObjectStorageClass::from_static(ObjectStorageClass::STANDARD)),
            ..Default::default()
        })
        .collect()
}

pub(super) fn prefixes(url: bool, prefixes: Vec<String>) -> Vec<CommonPrefix> {
    prefixes.into_iter().map(|p| CommonPrefix { prefix: Some(encoded(url, p)) }).collect()
}
