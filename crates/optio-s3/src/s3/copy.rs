//! What a copy names: its source (`x-amz-copy-source`) and the range of it
//! (`x-amz-copy-source-range`).

use s3s::S3Result;
use s3s::dto::*;
use s3s::s3_error;

/// The source of a copy: its bucket and key.
pub(super) fn copy_source(source: &CopySource) -> S3Result<(&str, &str)> {
    match source {
        CopySource::Bucket { bucket, key, .. } => Ok((bucket, key)),
        _ => Err(s3_error!(NotImplemented, "copies from access points are not supported")),
    }
}

/// A `bytes=first-last` copy range, checked against the source's size.
pub(super) fn copy_range(range: Option<&str>, size: u64) -> S3Result<std::ops::Range<u64>> {
    let Some(range) = range else { return Ok(0..size) };
    let parsed = range
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .and_then(|(first, last)| Some((first.parse::<u64>().ok()?, last.parse::<u64>().ok()?)));
    match parsed {
        Some((first, last)) if first <= last && last < size => Ok(first..last + 1),
        _ => Err(s3_error!(
            InvalidRange,
            "the copy range {range} is not within the source's {size} bytes"
        )),
    }
}
