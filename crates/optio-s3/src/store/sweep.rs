//! Sweeping a bucket: deleting the stripes that no head and no part record names, once they
//! are old enough not to belong to a write still in flight.

use std::time::Duration;

use serde::Serialize;

use super::error::{GatewayError, Result};
use super::gateway::Gateway;
use super::layout::{Bucket, summary_of};

impl Gateway {
    /// Deletes the stripes of `bucket` that no head and no uploaded part names and whose data
    /// was written more than `min_age` ago: what a gateway that died between writing data and
    /// writing its head, or two gateways replacing one object at once, left behind. (Stripes
    /// younger than `min_age` may belong to a PUT or part still in flight, so they are kept.)
    /// With `dry_run`, only counts.
    pub async fn sweep(&self, bucket: &Bucket, min_age: Duration, dry_run: bool) -> Result<Sweep> {
        let mut named: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut report = Sweep::default();
        // The stripes every striped head and every part record names.
        for prefix in [bucket.objects_prefix(), bucket.all_parts_prefix()] {
            let mut cursor = self.client.list_cursor(&bucket.pool, &prefix, None, 1000)?;
            while let Some(info) = cursor.next(&self.client).await? {
                if !summary_of(&info).is_some_and(|s| s.striped) {
                    continue;
                }
                report.heads_read += 1;
                match self.read_head(bucket, &info.key).await {
                    Ok(opened) => named.extend(opened.head.meta.stripes.into_iter().map(|s| s.id)),
                    // Deleted since it was listed: its stripes go with it.
                    Err(GatewayError::NoSuchKey(_)) => {}
                    Err(error) => return Err(error),
                }
            }
        }
        let data_prefix = format!("{}~d/", bucket.id);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let young = |version: u64| now.saturating_sub(version) < min_age.as_micros() as u64;
        // Data objects by stripe, and whether any of a stripe's is young.
        let mut unnamed: std::collections::BTreeMap<String, (Vec<(String, u64)>, bool)> =
            std::collections::BTreeMap::new();
        let mut cursor = self.client.list_cursor(&bucket.pool, &data_prefix, None, 1000)?;
        while let Some(info) = cursor.next(&self.client).await? {
            report.data_objects += 1;
            let Some((stripe, _)) = info.key[data_prefix.len()..].rsplit_once('.') else {
                continue;
            };
            if named.contains(stripe) {
                continue;
            }
            let entry = unnamed.entry(stripe.to_string()).or_default();
            entry.1 |= young(info.version.0);
            entry.0.push((info.key.clone(), info.size_bytes));
        }
        for (_, (objects, is_young)) in unnamed {
            if is_young {
                report.young_kept += objects.len();
                continue;
            }
            report.stripes_deleted += 1;
            for (key, size) in objects {
                report.objects_deleted += 1;
                report.bytes_freed += size;
                if !dry_run {
                    self.delete_quiet(&bucket.pool, &key).await?;
                }
            }
        }
        Ok(report)
    }
}

/// What a [`Gateway::sweep`] found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sweep {
    /// Striped heads and part records read for the stripes they name.
    pub heads_read: usize,
    /// Data objects in the bucket.
    pub data_objects: usize,
    /// Stripes no head or part names, deleted (or, in a dry run, to delete).
    pub stripes_deleted: usize,
    /// Their data objects.
    pub objects_deleted: usize,
    /// Their bytes (each counted once, not per replica).
    pub bytes_freed: u64,
    /// Data objects of unnamed stripes kept because they are recent.
    pub young_kept: usize,
}
