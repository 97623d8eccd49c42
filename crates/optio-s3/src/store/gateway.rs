//! The gateway: an Optio client, and the buckets and secrets it remembers for a while.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use optio_client::{Client, ClientError};
use optio_proto::ObjectInfo;

use super::error::{GatewayError, Result};
use super::layout::{Bucket, KeyRecord};

/// How long a bucket or a user's secret is trusted from memory.
pub(super) const CACHE_TTL: Duration = Duration::from_secs(5);

/// The gateway: an Optio client and what it remembers.
pub struct Gateway {
    pub(super) client: Client,
    pub(super) meta_pool: String,
    pub(super) buckets: Mutex<HashMap<String, (Bucket, Instant)>>,
    pub(super) secrets: Mutex<HashMap<String, (KeyRecord, Instant)>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("meta_pool", &self.meta_pool).finish_non_exhaustive()
    }
}

impl Gateway {
    /// A gateway on `client`, keeping users and buckets in `meta_pool`.
    pub fn new(client: Client, meta_pool: &str) -> Result<Gateway> {
        client.map().pool_by_name(meta_pool).ok_or_else(|| {
            GatewayError::InvalidArgument(format!(
                "the cluster has no pool '{meta_pool}' for the gateway's users and buckets"
            ))
        })?;
        Ok(Gateway {
            client,
            meta_pool: meta_pool.to_string(),
            buckets: Mutex::new(HashMap::new()),
            secrets: Mutex::new(HashMap::new()),
        })
    }

    /// The Optio client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    pub(super) async fn get_opt(
        &self,
        pool: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, Bytes)>> {
        match self.client.get_range(pool, key, None).await {
            Ok(found) => Ok(Some(found)),
            Err(ClientError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    pub(super) async fn delete_quiet(&self, pool: &str, key: &str) -> Result<()> {
        match self.client.delete(pool, key).await {
            Ok(()) | Err(ClientError::NotFound { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Every object of `pool` under `prefix` (for small namespaces: users, buckets, parts).
    pub(super) async fn list_all(&self, pool: &str, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let mut cursor = self.client.list_cursor(pool, prefix, None, 1000)?;
        let mut out = Vec::new();
        while let Some(info) = cursor.next(&self.client).await? {
            out.push(info);
        }
        Ok(out)
    }
}
