//! Deleting an object: its head, then the stripes it named.

use super::error::Result;
use super::gateway::Gateway;
use super::layout::Bucket;

impl Gateway {
    /// Deletes an object (nothing if it does not exist).
    pub async fn delete_object(&self, bucket: &Bucket, key: &str) -> Result<()> {
        let head_key = bucket.head_key(key)?;
        let old = self.old_stripes(bucket, &head_key).await?;
        self.delete_quiet(&bucket.pool, &head_key).await?;
        self.drop_stripes(bucket, &old).await;
        Ok(())
    }
}
