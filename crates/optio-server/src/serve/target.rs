//! What a handler is given and what it answers.

use std::sync::Arc;

use bytes::Bytes;
use optio_placement::{Epoch, PoolId};
use optio_proto::ErrorKind;
use optio_proto::answer::{Answer, Refusal};

use crate::store::DeviceStore;

/// What a handler answers.
pub(crate) type Handled = Result<Answer<Bytes>, Refusal>;

/// The device and pool a request is for, and the epoch its writes are stamped with (the
/// sender's, or this server's when it names none).
pub(crate) struct Target {
    pub(crate) store: Arc<DeviceStore>,
    pub(crate) pool: PoolId,
    pub(crate) epoch: Epoch,
    /// A write's snapshot context ([`optio_proto::snap`]).
    pub(crate) snap: Option<optio_proto::snap::SnapContext>,
    /// A read's snapshot mark.
    pub(crate) as_of: Option<optio_proto::ObjectVersion>,
    /// A whole read that waits for a version above this one ([`optio_proto::wire::WAIT_NEWER`]).
    pub(crate) wait_newer: Option<optio_proto::ObjectVersion>,
}

/// A refusal of `kind` for `reason`.
pub(crate) fn fail(kind: ErrorKind, reason: impl Into<String>) -> Refusal {
    Refusal::new(kind, reason)
}
