//! Reading an object: its head (a small object's data with it, in one request), then the
//! ranges asked, from the head's inline data or the stripes' data objects, as chunks.

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt, TryStreamExt};
use optio_client::ClientError;
use optio_client::transport::Chunks;

use super::error::{GatewayError, Result};
use super::gateway::Gateway;
use super::layout::Bucket;
use crate::format::{self, Head, STRIPE_OBJECT_BYTES, Summary, decode_head, head_bytes_needed};

/// The first read of a head whose size is not known: enough for any head's metadata of a
/// few parts, and for small objects whole.
const HEAD_READ_BYTES: u64 = 64 << 10;

/// An object read: its head, when it was written, and how to fetch its bytes.
#[derive(Debug)]
pub struct Opened {
    /// The head.
    pub head: Head,
    /// When it was written (its version: microseconds since the Unix epoch).
    pub modified_micros: u64,
    /// Bytes of the head already read (its inline data may be among them), in the chunks they
    /// arrived in.
    first: Chunks,
    bucket: Bucket,
    head_key: String,
}

impl Opened {
    /// The summary.
    pub fn summary(&self) -> &Summary {
        &self.head.summary
    }

    /// The bytes `range` of the object if they were read with its head (a small object read
    /// whole): no further request is needed.
    pub fn already_read(&self, range: &std::ops::Range<u64>) -> Option<Chunks> {
        if self.head.summary.striped {
            return None;
        }
        let start = self.head.data_offset + range.start as usize;
        let end = self.head.data_offset + range.end as usize;
        (end <= self.first.len()).then(|| self.first.slice(start, end))
    }
}

impl Gateway {
    /// Reads an object's head (and, for a small object, its data with it).
    pub async fn open(&self, bucket: &Bucket, key: &str, whole: bool) -> Result<Opened> {
        let head_key = bucket.head_key(key)?;
        if whole {
            let (info, chunks) = match self.client.get_chunks(&bucket.pool, &head_key, None).await {
                Ok(found) => found,
                Err(ClientError::NotFound { .. }) => {
                    return Err(GatewayError::NoSuchKey(key.to_string()));
                }
                Err(error) => return Err(error.into()),
            };
            // The head (magic, summary, metadata) in one buffer; the data stays in its chunks.
            let fixed = chunks.slice(0, format::FIXED_BYTES).to_bytes();
            let needed = head_bytes_needed(&fixed)?;
            let head = decode_head(&chunks.slice(0, needed).to_bytes())?;
            let inline = chunks.len() - head.data_offset;
            if !head.summary.striped && inline as u64 != head.summary.size {
                return Err(GatewayError::Corrupt(format!(
                    "the head of {key} holds {inline} bytes of data where its summary says {}",
                    head.summary.size
                )));
            }
            return Ok(Opened {
                head,
                modified_micros: info.version.0,
                first: chunks,
                bucket: bucket.clone(),
                head_key,
            });
        }
        self.read_head(bucket, &head_key).await.map_err(|e| match e {
            GatewayError::NoSuchKey(_) => GatewayError::NoSuchKey(key.to_string()),
            other => other,
        })
    }

    pub(super) async fn read_head(&self, bucket: &Bucket, head_key: &str) -> Result<Opened> {
        let first = self.client.get_range(&bucket.pool, head_key, Some((0, HEAD_READ_BYTES - 1)));
        let (info, mut bytes) = match first.await {
            Ok(found) => found,
            Err(ClientError::NotFound { .. }) => {
                return Err(GatewayError::NoSuchKey(head_key.to_string()));
            }
            Err(error) => return Err(error.into()),
        };
        let needed = head_bytes_needed(&bytes)?;
        if needed > bytes.len() && (bytes.len() as u64) < info.size_bytes {
            let (_, rest) = self
                .client
                .get_range(&bucket.pool, head_key, Some((bytes.len() as u64, needed as u64 - 1)))
                .await?;
            let mut all = BytesMut::from(&bytes[..]);
            all.extend_from_slice(&rest);
            bytes = all.freeze();
        }
        let head = decode_head(&bytes)?;
        Ok(Opened {
            head,
            modified_micros: info.version.0,
            first: bytes.into(),
            bucket: bucket.clone(),
            head_key: head_key.to_string(),
        })
    }

    /// The bytes `range` (end exclusive) of an opened object, as a stream of chunks.
    pub fn read(
        &self,
        opened: Opened,
        range: std::ops::Range<u64>,
    ) -> impl Stream<Item = Result<Bytes>> + Send + '_ {
        let Opened { head, first, bucket, head_key, .. } = opened;
        // (Each piece is read in the chunks it arrives in, and they are passed on as they are.)
        let stripes = head.meta.stripes.clone();
        let data_offset = head.data_offset as u64;
        enum Piece {
            Ready(Chunks),
            Inline(u64, u64),
            Data(String, u64, u64),
        }
        let mut pieces = Vec::new();
        if stripes.is_empty() {
            let (start, end) = (data_offset + range.start, data_offset + range.end);
            if end <= first.len() as u64 {
                pieces.push(Piece::Ready(first.slice(start as usize, end as usize)));
            } else if start < end {
                pieces.push(Piece::Inline(start, end));
            }
        } else {
            let mut base = 0u64;
            for stripe in &stripes {
                let (lo, hi) = (range.start.max(base), range.end.min(base + stripe.size));
                if lo < hi {
                    for (index, within, len) in
                        optio_client::volume::split(lo - base, hi - lo, STRIPE_OBJECT_BYTES)
                    {
                        pieces.push(Piece::Data(bucket.data_key(&stripe.id, index), within, len));
                    }
                }
                base += stripe.size;
            }
        }
        let pool = bucket.pool.clone();
        futures_util::stream::iter(pieces)
            .map(move |piece| {
                let pool = pool.clone();
                let head_key = head_key.clone();
                async move {
                    let (key, start, len) = match piece {
                        Piece::Ready(bytes) => return Ok(bytes),
                        Piece::Inline(start, end) => (head_key, start, end - start),
                        Piece::Data(key, start, len) => (key, start, len),
                    };
                    let range = Some((start, start + len - 1));
                    let (_, bytes) = self.client.get_chunks(&pool, &key, range).await.map_err(
                        |e| match e {
                            ClientError::NotFound { .. } => GatewayError::Corrupt(format!(
                                "the data object {key} is missing (the object was overwritten or deleted while it was read)"
                            )),
                            other => other.into(),
                        },
                    )?;
                    if bytes.len() as u64 != len {
                        return Err(GatewayError::Corrupt(format!(
                            "the data object {key} holds {} bytes at {start}, {len} expected",
                            bytes.len()
                        )));
                    }
                    Ok(bytes)
                }
            })
            .buffered(2)
            .map_ok(|chunks| futures_util::stream::iter(chunks.into_chunks().into_iter().map(Ok)))
            .try_flatten()
    }
}
