//! Writing an object: its body received after the encoded head while it fits inline, else
//! into a stripe of data objects written [`STRIPE_PARALLEL`] at a time; then its head
//! published, and the stripes of the object it replaced deleted.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use md5::{Digest, Md5};
use optio_client::ClientError;

use super::PUT_BYTES_MAX;
use super::error::{GatewayError, Result};
use super::gateway::Gateway;
use super::layout::{Bucket, summary_of};
use crate::format::{
    self, INLINE_BYTES_MAX, Meta, STRIPE_OBJECT_BYTES, Stripe, Summary, encode_head, random_id,
};

/// Data objects written or read at once for one request.
const STRIPE_PARALLEL: usize = 4;

impl Gateway {
    /// Stores an object from `body` (at most [`PUT_BYTES_MAX`] bytes), placed by `policy` if
    /// given; `check` is given the data's MD5 once the body is in, before anything is
    /// published, and may refuse it (Content-MD5, S3's additional checksums). Returns its
    /// summary and version.
    pub async fn put_object<S, E>(
        &self,
        bucket: &Bucket,
        key: &str,
        body: S,
        meta: Meta,
        policy: Option<&str>,
        check: impl FnOnce(&[u8; 16]) -> Result<()>,
    ) -> Result<(Summary, u64)>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let head_key = bucket.head_key(key)?;
        let head = encode_head(&Summary::default(), &meta);
        let received = self.receive(bucket, body, PUT_BYTES_MAX, Some(&head), policy).await?;
        let (md5, size) = (received.md5, received.size);
        if let Err(error) = check(&md5) {
            self.drop_stripes(bucket, &received.stripes).await;
            return Err(error);
        }
        let summary = Summary { md5, parts: 0, size, striped: !received.stripes.is_empty() };
        let meta = Meta { stripes: received.stripes, ..meta };
        self.publish(bucket, &head_key, summary, &meta, received.inline, policy).await
    }

    /// Writes a head, replacing whatever the key held (the stripes of a striped object it
    /// replaces are deleted after).
    pub(super) async fn publish(
        &self,
        bucket: &Bucket,
        head_key: &str,
        summary: Summary,
        meta: &Meta,
        inline: Option<BytesMut>,
        policy: Option<&str>,
    ) -> Result<(Summary, u64)> {
        let old = self.old_stripes(bucket, head_key).await?;
        let data = match inline {
            // The head was encoded before the data came (its summary is filled in now), and
            // the data received after it: no copy.
            Some(mut head_and_data) => {
                format::patch_summary(&mut head_and_data, &summary);
                head_and_data.freeze()
            }
            None => Bytes::from(encode_head(&summary, meta)),
        };
        let report = match self.put_placed(&bucket.pool, head_key, data, policy).await {
            Ok(report) => report,
            Err(error) => {
                self.drop_stripes(bucket, &meta.stripes).await;
                return Err(error.into());
            }
        };
        self.drop_stripes(bucket, &old).await;
        Ok((summary, report.version.0))
    }

    /// The stripes of the striped object at `head_key`, if one is stored there.
    pub(super) async fn old_stripes(&self, bucket: &Bucket, head_key: &str) -> Result<Vec<Stripe>> {
        let info = match self.client.stat(&bucket.pool, head_key).await {
            Ok(location) => location.info,
            Err(ClientError::NotFound { .. }) => return Ok(Vec::new()),
            Err(error) => return Err(error.into()),
        };
        if !summary_of(&info).is_some_and(|s| s.striped) {
            return Ok(Vec::new());
        }
        match self.read_head(bucket, head_key).await {
            Ok(opened) => Ok(opened.head.meta.stripes),
            Err(GatewayError::NoSuchKey(_)) => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }

    /// Deletes stripes' data objects; failures are logged and left for a later sweep.
    pub(super) async fn drop_stripes(&self, bucket: &Bucket, stripes: &[Stripe]) {
        let keys: Vec<String> = stripes
            .iter()
            .flat_map(|s| (0..s.objects()).map(|i| bucket.data_key(&s.id, i)))
            .collect();
        let pool = bucket.pool.as_str();
        futures_util::stream::iter(keys)
            .map(|key| self.delete_logged(pool, key))
            .buffer_unordered(STRIPE_PARALLEL * 2)
            .collect::<Vec<()>>()
            .await;
    }

    async fn delete_logged(&self, pool: &str, key: String) {
        if let Err(error) = self.delete_quiet(pool, &key).await {
            tracing::warn!(key, %error, "could not delete a stripe's data object");
        }
    }

    /// Writes an object placed by `policy` if given, else by the pool's.
    async fn put_placed(
        &self,
        pool: &str,
        key: &str,
        data: Bytes,
        policy: Option<&str>,
    ) -> Result<optio_client::PutReport, ClientError> {
        match policy {
            Some(policy) => self.client.put_with_policy(pool, key, data, policy).await,
            None => self.client.put(pool, key, data).await,
        }
    }

    /// Writes one data object of a stripe, placed as its object's head is.
    async fn put_piece(
        &self,
        pool: &str,
        key: String,
        piece: Bytes,
        policy: Option<&str>,
    ) -> Result<(), ClientError> {
        self.put_placed(pool, &key, piece, policy).await.map(|_| ())
    }

    /// Reads a request body: after `head` (the encoded head, its summary to be filled in)
    /// when it fits inline, else — and always without a head — into a new stripe, whose data
    /// objects `policy` places if given.
    pub(super) async fn receive<S, E>(
        &self,
        bucket: &Bucket,
        mut body: S,
        max: u64,
        head: Option<&[u8]>,
        policy: Option<&str>,
    ) -> Result<Received>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut md5 = Md5::new();
        let mut buffer = BytesMut::new();
        let mut size = 0u64;
        let mut stripe: Option<(String, u64)> = head.is_none().then(|| (random_id(16), 0));
        // Bytes of `buffer` that are the head, not data.
        let mut skip = 0;
        if let Some(head) = head {
            buffer.reserve(head.len() + 64 * 1024);
            buffer.extend_from_slice(head);
            skip = head.len();
        }
        let mut writes = futures_util::stream::FuturesUnordered::new();
        let mut failed: Option<GatewayError> = None;
        loop {
            let chunk = match body.next().await {
                Some(Ok(chunk)) => chunk,
                Some(Err(error)) => {
                    failed = Some(GatewayError::Body(error.to_string()));
                    break;
                }
                None => break,
            };
            size += chunk.len() as u64;
            if size > max {
                failed = Some(GatewayError::EntityTooLarge(size, max));
                break;
            }
            md5.update(&chunk);
            buffer.extend_from_slice(&chunk);
            if stripe.is_none() && buffer.len() - skip > INLINE_BYTES_MAX {
                stripe = Some((random_id(16), 0));
                let _ = buffer.split_to(skip);
                skip = 0;
            }
            while let Some((id, next)) = &mut stripe
                && buffer.len() as u64 >= STRIPE_OBJECT_BYTES
            {
                let piece = buffer.split_to(STRIPE_OBJECT_BYTES as usize).freeze();
                let key = bucket.data_key(id, *next);
                *next += 1;
                writes.push(self.put_piece(&bucket.pool, key, piece, policy));
                while writes.len() >= STRIPE_PARALLEL {
                    if let Some(Err(error)) = writes.next().await {
                        failed = Some(error.into());
                    }
                }
                if failed.is_some() {
                    break;
                }
            }
            if failed.is_some() {
                break;
            }
        }
        if failed.is_none()
            && let Some((id, next)) = &stripe
            && !buffer.is_empty()
        {
            let key = bucket.data_key(id, *next);
            let piece = std::mem::take(&mut buffer).freeze();
            writes.push(self.put_piece(&bucket.pool, key, piece, policy));
        }
        while let Some(result) = writes.next().await {
            if let Err(error) = result
                && failed.is_none()
            {
                failed = Some(error.into());
            }
        }
        let stripes = match stripe {
            Some((id, _)) => vec![Stripe { id, size }],
            None => Vec::new(),
        };
        if let Some(error) = failed {
            self.drop_stripes(bucket, &stripes).await;
            return Err(error);
        }
        let inline = stripes.is_empty().then_some(buffer);
        Ok(Received { md5: md5.finalize().into(), size, stripes, inline })
    }
}

/// A body received.
pub(super) struct Received {
    pub(super) md5: [u8; 16],
    pub(super) size: u64,
    pub(super) stripes: Vec<Stripe>,
    /// The head and the data after it, when the data is inline.
    pub(super) inline: Option<BytesMut>,
}
