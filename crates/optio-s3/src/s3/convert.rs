//! Between S3's terms and the gateway's: errors, times, ETags, owners, metadata, and bodies as
//! streams.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode};

use crate::format::{Meta, Summary};
use crate::store::{Bucket, Gateway, GatewayError, Opened};

/// The owner shown in listings.
pub(super) fn owner(user: &str) -> Owner {
    Owner { display_name: Some(user.to_string()), id: Some(user.to_string()) }
}

/// An S3 error for a gateway error.
pub fn to_s3(error: GatewayError) -> S3Error {
    use GatewayError as G;
    let code = match &error {
        G::NoSuchBucket(_) => S3ErrorCode::NoSuchBucket,
        G::BucketExists(_) => S3ErrorCode::BucketAlreadyExists,
        G::BucketNotEmpty(_) => S3ErrorCode::BucketNotEmpty,
        G::NoSuchKey(_) => S3ErrorCode::NoSuchKey,
        G::NoSuchUpload(_) => S3ErrorCode::NoSuchUpload,
        G::InvalidPart(_) => S3ErrorCode::InvalidPart,
        G::InvalidPartOrder => S3ErrorCode::InvalidPartOrder,
        G::EntityTooSmall { .. } => S3ErrorCode::EntityTooSmall,
        G::EntityTooLarge(..) => S3ErrorCode::EntityTooLarge,
        G::KeyTooLong(_) => S3ErrorCode::KeyTooLongError,
        G::InvalidArgument(_) | G::NoSuchUser(_) | G::UserExists(_) => S3ErrorCode::InvalidArgument,
        G::BadDigest | G::BadChecksum(_) => S3ErrorCode::BadDigest,
        G::Body(_) => S3ErrorCode::IncompleteBody,
        G::Corrupt(_) => S3ErrorCode::InternalError,
        G::Client(optio_client::ClientError::NotFound { .. }) => S3ErrorCode::NoSuchKey,
        G::Client(optio_client::ClientError::Config(_)) => S3ErrorCode::InvalidArgument,
        G::Client(_) => S3ErrorCode::ServiceUnavailable,
    };
    if matches!(code, S3ErrorCode::InternalError | S3ErrorCode::ServiceUnavailable) {
        tracing::warn!(%error, "an S3 request failed");
    }
    S3Error::with_message(code, error.to_string())
}

pub(super) fn timestamp(micros: u64) -> Timestamp {
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
}

pub(super) fn unix_seconds(time: &Timestamp) -> i64 {
    time::OffsetDateTime::from(time.clone()).unix_timestamp()
}

pub(super) fn etag_of(summary: &Summary) -> ETag {
    ETag::Strong(summary.etag())
}

pub(super) fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(super) fn expires_text(expires: Option<Timestamp>) -> Option<String> {
    let expires = expires?;
    let mut out = Vec::new();
    expires.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

pub(super) fn expires_of(meta: &Meta) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, meta.expires.as_deref()?).ok()
}

pub(super) fn user_metadata(
    metadata: Option<Metadata>,
) -> std::collections::BTreeMap<String, String> {
    metadata.unwrap_or_default().into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).collect()
}

pub(super) fn metadata_of(meta: &Meta) -> Option<Metadata> {
    (!meta.user.is_empty()).then(|| meta.user.clone().into_iter().collect())
}

pub(super) fn meta_from(
    content_type: Option<String>,
    content_encoding: Option<String>,
    content_disposition: Option<String>,
    content_language: Option<String>,
    cache_control: Option<String>,
    expires: Option<Timestamp>,
    metadata: Option<Metadata>,
) -> Meta {
    // `aws-chunked` names how the body was sent, not how the object is encoded.
    let content_encoding = content_encoding.and_then(|text| {
        let kept: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
            .collect();
        (!kept.is_empty()).then(|| kept.join(", "))
    });
    Meta {
        content_type,
        content_encoding,
        content_disposition,
        content_language,
        cache_control,
        expires: expires_text(expires),
        user: user_metadata(metadata),
        checksums: Default::default(),
        stripes: Vec::new(),
    }
}

/// A request body that broke off while it was read (the client's connection, or a malformed
/// chunked or signed body); the message is the cause's.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(super) struct BodyError(s3s::StdError);

pub(super) fn body_stream(
    body: Option<StreamingBlob>,
) -> impl futures_util::Stream<Item = Result<Bytes, BodyError>> + Unpin {
    match body {
        Some(body) => body.map(|r| r.map_err(BodyError)).left_stream(),
        None => futures_util::stream::empty().right_stream(),
    }
}

/// The owner a listing shows for a bucket's objects.
pub(super) fn owner_of(bucket: &Bucket) -> Owner {
    owner(bucket.owner.as_deref().unwrap_or("optio"))
}

/// The body of a GET: the gateway's read stream, owning what it borrows.
pub(super) fn async_stream(
    gateway: Arc<Gateway>,
    opened: Opened,
    range: std::ops::Range<u64>,
) -> impl futures_util::Stream<Item = Result<Bytes, GatewayError>> + Send + Sync + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let mut stream = Box::pin(gateway.read(opened, range));
        while let Some(item) = stream.next().await {
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

#[cfg(test)]
mod body_tests {
    use super::*;

    #[tokio::test]
    async fn a_body_that_breaks_off_yields_its_cause() {
        let broken = futures_util::stream::iter(vec![
            Ok(Bytes::from_static(b"abc")),
            Err(std::io::Error::other("connection reset")),
        ]);
        let mut body = body_stream(Some(StreamingBlob::wrap(broken)));
        assert_eq!(body.next().await.map(|r| r.ok()), Some(Some(Bytes::from_static(b"abc"))));
        let error = body.next().await.expect("an item").expect_err("the break");
        assert_eq!(error.to_string(), "connection reset");
        assert!(error.0.downcast_ref::<std::io::Error>().is_some(), "{error:?}");
        assert!(body_stream(None).next().await.is_none());
    }
}
