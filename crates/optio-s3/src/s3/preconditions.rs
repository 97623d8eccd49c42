//! A read's preconditions (If-Match, If-None-Match, If-Modified-Since, If-Unmodified-Since)
//! evaluated against the object stored.

use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};

use super::convert::{timestamp, unix_seconds};
use crate::format::Summary;

/// A read's preconditions on the object it reads (a GET's and HEAD's own, or a copy's on its
/// source), and the error an unchanged object gets (304 for reads; 412 for copies).
pub(super) struct Preconditions<'a> {
    pub(super) if_match: Option<&'a ETagCondition>,
    pub(super) if_unmodified_since: Option<&'a Timestamp>,
    pub(super) if_none_match: Option<&'a ETagCondition>,
    pub(super) if_modified_since: Option<&'a Timestamp>,
    pub(super) not_modified: S3ErrorCode,
}

/// Evaluates a read's preconditions against what is stored (RFC 9110 order: If-Match, else
/// If-Unmodified-Since; then If-None-Match, else If-Modified-Since).
pub(super) fn check_preconditions(
    summary: &Summary,
    modified_micros: u64,
    conditions: Preconditions<'_>,
) -> S3Result<()> {
    let Preconditions {
        if_match,
        if_unmodified_since,
        if_none_match,
        if_modified_since,
        not_modified,
    } = conditions;
    let etag = summary.etag();
    let matches = |condition: &ETagCondition| match condition {
        ETagCondition::Any => true,
        ETagCondition::ETag(tag) => tag.value() == etag,
    };
    let modified = (modified_micros / 1_000_000) as i64;
    match (if_match, if_unmodified_since) {
        (Some(condition), _) if !matches(condition) => return Err(s3_error!(PreconditionFailed)),
        (None, Some(time)) if modified > unix_seconds(time) => {
            return Err(s3_error!(PreconditionFailed));
        }
        _ => {}
    }
    let unchanged = match (if_none_match, if_modified_since) {
        (Some(condition), _) => matches(condition),
        (None, Some(time)) => modified <= unix_seconds(time),
        _ => false,
    };
    if !unchanged {
        return Ok(());
    }
    if not_modified != S3ErrorCode::NotModified {
        return Err(S3Error::new(not_modified));
    }
    // A 304 carries the validators, as a 200 would.
    let mut error = S3Error::with_message(S3ErrorCode::NotModified, "Not Modified");
    let mut headers = http::HeaderMap::new();
    if let Ok(value) = http::HeaderValue::from_str(&format!("\"{etag}\"")) {
        headers.insert(http::header::ETAG, value);
    }
    let mut date = Vec::new();
    if timestamp(modified_micros).format(TimestampFormat::HttpDate, &mut date).is_ok()
        && let Ok(value) = http::HeaderValue::from_bytes(&date)
    {
        headers.insert(http::header::LAST_MODIFIED, value);
    }
    error.set_headers(headers);
    Err(error)
}
