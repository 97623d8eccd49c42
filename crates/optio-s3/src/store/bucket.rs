//! Buckets: made (owned by a user, or by every user), looked up (remembered for
//! [`CACHE_TTL`]), listed, given PublicAccessBlock settings, and removed when empty.

use std::time::Instant;

use optio_proto::validate_key;

use super::error::{GatewayError, Result};
use super::gateway::{CACHE_TTL, Gateway};
use super::layout::{BUCKET_PREFIX, Bucket, json, parse};
use crate::format::random_id;

impl Gateway {
    /// Makes a bucket in `pool` (default: the metadata pool), owned by `owner` (`None`: every
    /// user's). Making again a bucket one owns changes nothing and succeeds, as in S3's
    /// `us-east-1`; another's is [`GatewayError::BucketExists`].
    pub async fn create_bucket(
        &self,
        name: &str,
        pool: Option<&str>,
        owner: Option<&str>,
    ) -> Result<Bucket> {
        let pool = pool.unwrap_or(&self.meta_pool);
        match self.client.map().pool_by_name(pool) {
            None => {
                return Err(GatewayError::InvalidArgument(format!(
                    "the cluster has no pool '{pool}' (x-optio-pool)"
                )));
            }
            Some(p) if p.erasure.is_some() => {
                // Listings of erasure-coded pools are not served yet (docs/erasure.md).
                return Err(GatewayError::InvalidArgument(format!(
                    "pool '{pool}' is erasure-coded; buckets on erasure-coded pools are not served yet (x-optio-pool: use a replicated pool)"
                )));
            }
            Some(_) => {}
        }
        let key = format!("{BUCKET_PREFIX}{name}");
        validate_key(&key).map_err(|e| GatewayError::InvalidArgument(e.to_string()))?;
        if let Some(existing) = self.bucket_record(name).await? {
            if owner.is_some() && existing.owner.as_deref() == owner {
                return Ok(existing);
            }
            return Err(GatewayError::BucketExists(name.to_string()));
        }
        let bucket = Bucket {
            name: name.to_string(),
            id: random_id(6),
            pool: pool.to_string(),
            owner: owner.map(str::to_string),
            public_access_block: None,
        };
        self.client.put(&self.meta_pool, &key, json(&bucket)).await?;
        Ok(self.remember(bucket))
    }

    /// A bucket's record as stored (`None`: no such bucket; the name is not checked).
    async fn bucket_record(&self, name: &str) -> Result<Option<Bucket>> {
        let key = format!("{BUCKET_PREFIX}{name}");
        match self.get_opt(&self.meta_pool, &key).await? {
            Some((_, bytes)) => Ok(Some(parse("a bucket record", &bytes)?)),
            None => {
                self.buckets.lock().expect("buckets lock").remove(name);
                Ok(None)
            }
        }
    }

    /// Keeps a bucket in memory for [`CACHE_TTL`].
    fn remember(&self, bucket: Bucket) -> Bucket {
        self.buckets
            .lock()
            .expect("buckets lock")
            .insert(bucket.name.clone(), (bucket.clone(), Instant::now()));
        bucket
    }

    /// A bucket by name.
    pub async fn bucket(&self, name: &str) -> Result<Bucket> {
        if let Some((bucket, at)) = self.buckets.lock().expect("buckets lock").get(name)
            && at.elapsed() < CACHE_TTL
        {
            return Ok(bucket.clone());
        }
        if validate_key(&format!("{BUCKET_PREFIX}{name}")).is_err() {
            return Err(GatewayError::NoSuchBucket(name.to_string()));
        }
        match self.bucket_record(name).await? {
            Some(bucket) => Ok(self.remember(bucket)),
            None => Err(GatewayError::NoSuchBucket(name.to_string())),
        }
    }

    /// Every bucket, with its creation time (microseconds), in name order.
    pub async fn buckets(&self) -> Result<Vec<(String, u64)>> {
        Ok(self
            .list_all(&self.meta_pool, BUCKET_PREFIX)
            .await?
            .into_iter()
            .map(|info| (info.key[BUCKET_PREFIX.len()..].to_string(), info.version.0))
            .collect())
    }

    /// Sets (or, with `None`, removes) a bucket's PublicAccessBlock settings.
    pub async fn set_public_access_block(
        &self,
        name: &str,
        settings: Option<[bool; 4]>,
    ) -> Result<Bucket> {
        let Some(mut bucket) = self.bucket_record(name).await? else {
            return Err(GatewayError::NoSuchBucket(name.to_string()));
        };
        bucket.public_access_block = settings;
        let key = format!("{BUCKET_PREFIX}{name}");
        self.client.put(&self.meta_pool, &key, json(&bucket)).await?;
        Ok(self.remember(bucket))
    }

    /// Removes an empty bucket (multipart uploads in progress are aborted).
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        let bucket = self.bucket(name).await?;
        let mut objects =
            self.client.list_cursor(&bucket.pool, &bucket.objects_prefix(), None, 1)?;
        if objects.next(&self.client).await?.is_some() {
            return Err(GatewayError::BucketNotEmpty(name.to_string()));
        }
        for upload in self.list_uploads(&bucket, "", None, usize::MAX).await?.0 {
            self.abort_upload(&bucket, &upload.key, &upload.upload_id).await?;
        }
        self.delete_quiet(&self.meta_pool, &format!("{BUCKET_PREFIX}{name}")).await?;
        self.buckets.lock().expect("buckets lock").remove(name);
        Ok(())
    }
}
