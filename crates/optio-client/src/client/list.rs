//! Listings: every device's, merged (the newest version of each key).

use std::collections::BTreeMap;

use futures_util::future::join_all;
use optio_placement::PoolId;
use optio_proto::{ErrorKind, ListQuery, Listing, ObjectInfo};

use crate::error::ClientError;
use crate::transport::{Endpoint, Op};

use super::{Client, View};

/// Most pages of one device's listing.
pub(super) const LIST_PAGES_MAX: usize = 10_000;

impl Client {
    /// Objects in a pool whose keys start with `prefix`, from every device (replicas merged,
    /// newest version shown), in key order.
    pub async fn list(
        &self,
        pool_name: &str,
        prefix: &str,
    ) -> Result<Vec<ObjectInfo>, ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let mut endpoints = Vec::new();
        for device in view.map.devices() {
            if device.up && device.addr.is_some() {
                endpoints.push(view.endpoint(device.id)?);
            }
        }
        let lists =
            endpoints.iter().map(|endpoint| self.list_device(&view, pool, endpoint, prefix));
        let mut merged: BTreeMap<String, ObjectInfo> = BTreeMap::new();
        for result in join_all(lists).await {
            for info in result? {
                match merged.get(&info.key) {
                    Some(old) if old.version >= info.version => {}
                    _ => {
                        merged.insert(info.key.clone(), info);
                    }
                }
            }
        }
        Ok(merged.into_values().collect())
    }

    pub(super) async fn list_device(
        &self,
        view: &View,
        pool: PoolId,
        endpoint: &Endpoint,
        prefix: &str,
    ) -> Result<Vec<ObjectInfo>, ClientError> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        for _page in 0..LIST_PAGES_MAX {
            let query = ListQuery {
                prefix: Some(prefix.to_string()),
                after: after.clone(),
                ..ListQuery::default()
            };
            let call = self.object_call(view, endpoint, pool, Op::List(query));
            let answer = self.call(call).await.map_err(|f| ClientError::Refused {
                device: endpoint.device,
                kind: f.kind().unwrap_or(ErrorKind::Io),
                reason: f.to_string(),
            })?;
            let listing: Listing =
                serde_json::from_slice(&answer.body).map_err(|e| ClientError::Refused {
                    device: endpoint.device,
                    kind: ErrorKind::Io,
                    reason: format!("bad listing: {e}"),
                })?;
            after = listing.objects.last().map(|o| o.key.clone());
            out.extend(listing.objects);
            if !listing.truncated || after.is_none() {
                break;
            }
        }
        Ok(out)
    }
}
