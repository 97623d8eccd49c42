//! Copying an object (or a range of it) into a new single-part object: read as a GET reads,
//! received as a PUT receives.

use super::PUT_BYTES_MAX;
use super::error::Result;
use super::gateway::Gateway;
use super::get::Opened;
use super::layout::Bucket;
use crate::format::{Meta, Summary, encode_head};

impl Gateway {
    /// Copies an opened object's bytes `range` to `key` in `to` with `meta`, as a single-part
    /// object.
    pub async fn copy_object(
        &self,
        opened: Opened,
        range: std::ops::Range<u64>,
        to: &Bucket,
        key: &str,
        meta: Meta,
    ) -> Result<(Summary, u64)> {
        let head_key = to.head_key(key)?;
        let stream = Box::pin(self.read(opened, range));
        let head = encode_head(&Summary::default(), &meta);
        let received = self.receive(to, stream, PUT_BYTES_MAX, Some(&head), None).await?;
        let summary = Summary {
            md5: received.md5,
            parts: 0,
            size: received.size,
            striped: !received.stripes.is_empty(),
        };
        let meta = Meta { stripes: received.stripes, ..meta };
        self.publish(to, &head_key, summary, &meta, received.inline, None).await
    }
}
