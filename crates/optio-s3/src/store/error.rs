//! What went wrong, in S3's terms.

use optio_client::ClientError;

use crate::format;

/// What went wrong, in S3's terms.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the bucket '{0}' does not exist")]
    /// No such bucket.
    NoSuchBucket(String),
    #[error("the bucket '{0}' exists already")]
    /// Bucket exists.
    BucketExists(String),
    #[error("the bucket '{0}' is not empty")]
    /// Bucket not empty.
    BucketNotEmpty(String),
    #[error("no object '{0}'")]
    /// No such key.
    NoSuchKey(String),
    #[error("no multipart upload '{0}'")]
    /// No such upload.
    NoSuchUpload(String),
    #[error("{0}")]
    /// Invalid part.
    InvalidPart(String),
    #[error("the parts are not in ascending order of part number")]
    /// Invalid part order.
    InvalidPartOrder,
    #[error("part {part} is {size} bytes; every part but the last must be at least 5 MiB")]
    /// Entity too small.
    EntityTooSmall {
        /// The part number.
        part: i32,
        /// Its size.
        size: u64,
    },
    #[error("{0} bytes is more than S3 allows here ({1} bytes)")]
    /// A body or object above S3's limit (its size, the limit).
    EntityTooLarge(u64, u64),
    #[error("the key is too long: {0}")]
    /// Key too long.
    KeyTooLong(String),
    #[error("{0}")]
    /// Invalid argument.
    InvalidArgument(String),
    #[error("the Content-MD5 does not match the data received")]
    /// Bad digest.
    BadDigest,
    #[error("the {0} checksum sent does not match the data received")]
    /// An additional checksum (`x-amz-checksum-*`) that does not match.
    BadChecksum(String),
    #[error("no user '{0}'")]
    /// No such user.
    NoSuchUser(String),
    #[error("the user '{0}' exists already")]
    /// User exists.
    UserExists(String),
    #[error("the request body could not be read: {0}")]
    /// The request's body failed while it was read.
    Body(String),
    #[error("{0}")]
    /// What the cluster holds does not decode (damaged, or not the gateway's).
    Corrupt(String),
    #[error(transparent)]
    /// The cluster refused or failed.
    Client(ClientError),
}

impl From<ClientError> for GatewayError {
    fn from(error: ClientError) -> GatewayError {
        GatewayError::Client(error)
    }
}

impl From<format::FormatError> for GatewayError {
    fn from(error: format::FormatError) -> GatewayError {
        GatewayError::Corrupt(error.to_string())
    }
}

pub(super) type Result<T, E = GatewayError> = std::result::Result<T, E>;
