//! A volume's answer to "where do these bytes come from" ([`Volume::allocation`]), from the
//! listings and notes kept in [`super::allocation`] (whose module says how each source is
//! known and why every answer errs towards "stored").

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use optio_proto::ObjectVersion;

use super::allocation::{Listing, Source, stored};
use super::{Volume, VolumeError, split};
use crate::Client;

/// The indices of the data objects under `prefix` in `pool`: the heads stored now
/// (`as_of` none), or those with a content below the mark `as_of` (head or clone).
async fn listed(
    client: &Client,
    pool: &str,
    prefix: &str,
    as_of: Option<ObjectVersion>,
) -> Result<BTreeSet<u64>, VolumeError> {
    let infos = client.list(pool, prefix).await?;
    Ok(stored(infos.iter().map(|info| (info.key.as_str(), info.version)), prefix, as_of))
}

impl Volume {
    /// Where the bytes `[offset, offset + len)` come from, at data-object granularity: runs
    /// of (bytes, source), consecutive from `offset`, adding up to `len` (see the module for
    /// how it is known, and why it errs towards [`Source::Own`]).
    pub async fn allocation(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<Vec<(u64, Source)>, VolumeError> {
        let header = self.check_range(offset, len)?;
        let own = self.own_objects().await?;
        let ancestors: &[BTreeSet<u64>] = if self.ancestors.is_empty() {
            &[]
        } else {
            self.allocation
                .ancestors
                .get_or_try_init(|| async {
                    let mut out = Vec::new();
                    for ancestor in &self.ancestors {
                        let prefix = format!("{}{}.", super::DATA_PREFIX, ancestor.id);
                        let mark = Some(ancestor.mark);
                        out.push(listed(&self.client, &ancestor.pool, &prefix, mark).await?);
                    }
                    Ok::<_, VolumeError>(out)
                })
                .await?
        };
        let written = self.allocation.written.lock().expect("allocation lock");
        let mut out: Vec<(u64, Source)> = Vec::new();
        for (index, _, n) in split(offset, len, header.object_size) {
            let start = index * header.object_size;
            let source = if own.contains(&index) || written.contains(&index) {
                Source::Own
            } else {
                let mut source = Source::Nowhere;
                for (i, (ancestor, objects)) in self.ancestors.iter().zip(ancestors).enumerate() {
                    if start >= ancestor.overlap {
                        break;
                    }
                    if objects.contains(&index) {
                        source = Source::Ancestor(i);
                        break;
                    }
                }
                source
            };
            match out.last_mut() {
                Some((bytes, last)) if *last == source => *bytes += n,
                _ => out.push((n, source)),
            }
        }
        Ok(out)
    }

    /// The volume's own data objects: listed once for a writer and for a snapshot; for a
    /// read-only open of a live volume, listed again unless no writer can have written since
    /// the last listing (see the module), or that listing began after the question did.
    async fn own_objects(&self) -> Result<Arc<BTreeSet<u64>>, VolumeError> {
        let asked = Instant::now();
        let mut own = self.allocation.own.lock().await;
        let others_may_write = self.read_only && self.as_of.is_none();
        let mut quiet = None;
        if others_may_write {
            let (header, version) = super::find_header(&self.client, &self.name()).await?;
            if let Some(listing) = &*own
                && (listing.quiet == Some(version) || listing.began >= asked)
            {
                return Ok(listing.objects.clone());
            }
            quiet = header.lock.is_none().then_some(version);
        } else if let Some(listing) = &*own {
            return Ok(listing.objects.clone());
        }
        let began = Instant::now();
        let header = self.header();
        let objects =
            Arc::new(listed(&self.client, &header.pool, &header.data_prefix(), self.as_of).await?);
        *own = Some(Listing { began, quiet, objects: objects.clone() });
        Ok(objects)
    }
}
