//! Listings: every device's, merged (the newest version of each key), whole or a page at a
//! time through a [`ListCursor`].

use std::collections::{BTreeMap, VecDeque};

use futures_util::future::join_all;
use optio_placement::PoolId;
use optio_proto::{ErrorKind, ListQuery, Listing, ObjectInfo, ObjectVersion};

use crate::error::ClientError;
use crate::transport::{Endpoint, Failure, Op};

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
        Ok(self.list_missing(pool_name, prefix).await?.0)
    }

    /// [`list`](Self::list), and the devices in the map that it could not list (down, or not
    /// answering): a copy only they hold is not in the listing.
    pub async fn list_missing(
        &self,
        pool_name: &str,
        prefix: &str,
    ) -> Result<(Vec<ObjectInfo>, Vec<u32>), ClientError> {
        let view = self.view();
        if let Some(coded) = view.erasure_pool(pool_name)? {
            return self.list_erasure(&view, &coded, prefix).await;
        }
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
        let mut missing = Missing::new(&view, pool);
        for (endpoint, result) in endpoints.iter().zip(join_all(lists).await) {
            let infos = match result {
                Ok(infos) => infos,
                Err(failure) => {
                    missing.tolerate(endpoint, failure)?;
                    continue;
                }
            };
            for info in infos {
                match merged.get(&info.key) {
                    Some(old) if old.version >= info.version => {}
                    _ => {
                        merged.insert(info.key.clone(), info);
                    }
                }
            }
        }
        let mut not_listed: Vec<u32> = view
            .map
            .devices()
            .iter()
            .filter(|d| d.is_in && !(d.up && d.addr.is_some()))
            .map(|d| d.id.0)
            .collect();
        not_listed.extend(missing.unreachable);
        Ok((merged.into_values().collect(), not_listed))
    }

    /// Every object and tombstone of `pool` on one device whose key starts with `prefix`.
    pub(super) async fn list_device_all(
        &self,
        view: &View,
        pool: PoolId,
        endpoint: &Endpoint,
        prefix: &str,
    ) -> Result<(Vec<ObjectInfo>, Vec<optio_proto::Deleted>), Failure> {
        let (mut objects, mut deleted) = (Vec::new(), Vec::new());
        let mut after: Option<String> = None;
        for _page in 0..LIST_PAGES_MAX {
            let query = ListQuery {
                prefix: Some(prefix.to_string()),
                after: after.clone(),
                tombstones: Some(true),
                ..ListQuery::default()
            };
            let listing = self.list_page(view, pool, endpoint, query).await?;
            after = listing.last_key().map(str::to_string);
            objects.extend(listing.objects);
            deleted.extend(listing.deleted);
            if !listing.truncated || after.is_none() {
                break;
            }
        }
        Ok((objects, deleted))
    }

    pub(super) async fn list_device(
        &self,
        view: &View,
        pool: PoolId,
        endpoint: &Endpoint,
        prefix: &str,
    ) -> Result<Vec<ObjectInfo>, Failure> {
        let mut out = Vec::new();
        let mut after: Option<String> = None;
        for _page in 0..LIST_PAGES_MAX {
            let query = ListQuery {
                prefix: Some(prefix.to_string()),
                after: after.clone(),
                ..ListQuery::default()
            };
            let listing = self.list_page(view, pool, endpoint, query).await?;
            after = listing.objects.last().map(|o| o.key.clone());
            out.extend(listing.objects);
            if !listing.truncated || after.is_none() {
                break;
            }
        }
        Ok(out)
    }

    async fn list_page(
        &self,
        view: &View,
        pool: PoolId,
        endpoint: &Endpoint,
        query: ListQuery,
    ) -> Result<Listing, Failure> {
        let call = self.object_call(view, endpoint, pool, Op::List(query));
        let answer = self.call(call).await?;
        answer
            .listing
            .ok_or_else(|| Failure::Malformed("a listing's answer without a listing".to_string()))
    }

    /// A cursor over the objects of `pool` whose keys start with `prefix` and come after
    /// `after`, in key order, read from every device a page at a time (about `want` objects
    /// in all per round). Replicas are merged — the newest version of a key wins, and a
    /// newer tombstone hides older copies — so an object is listed once, and a deleted one
    /// is not, wherever its copies are (while data moves, on old and new devices alike).
    pub fn list_cursor(
        &self,
        pool_name: &str,
        prefix: &str,
        after: Option<&str>,
        want: usize,
    ) -> Result<ListCursor, ClientError> {
        let view = self.view();
        let pool = view.pool(pool_name)?;
        let mut devices = Vec::new();
        for device in view.map.devices() {
            if device.up && device.addr.is_some() {
                devices.push(DeviceCursor {
                    endpoint: view.endpoint(device.id)?,
                    rows: VecDeque::new(),
                    after: after.map(str::to_string),
                    done: false,
                });
            }
        }
        let replicas = view.map.pool(pool).map(|p| p.size as usize).unwrap_or(1).max(1);
        // Each device holds about replicas/devices of the keys: ask for a little more than
        // its share of `want`, so that one round usually fills the page.
        let page = (want.saturating_add(1).saturating_mul(replicas) * 5 / 4 / devices.len().max(1))
            .clamp(16, LIST_PAGE_MAX);
        let missing = Missing::new(&view, pool);
        Ok(ListCursor { pool, prefix: prefix.to_string(), page, devices, missing })
    }
}

/// Most rows one device is asked for per page of a [`ListCursor`].
const LIST_PAGE_MAX: usize = 5_000;

/// A merged listing of a pool, in key order ([`Client::list_cursor`]).
#[derive(Debug)]
pub struct ListCursor {
    pool: PoolId,
    prefix: String,
    page: usize,
    devices: Vec<DeviceCursor>,
    missing: Missing,
}

/// The devices a listing goes without. Every acknowledged write (and delete) has at least the
/// pool's `min_size` copies on distinct devices, so while fewer than `min_size` of the
/// devices that should hold data are missing — down in the map, or not answering — every
/// object still has a copy on one that answers, and a listing without them is complete.
/// One more missing device and it might not be: the listing fails instead of leaving an
/// acknowledged object out.
#[derive(Debug)]
pub(super) struct Missing {
    /// Devices in the map but down.
    down: usize,
    /// Devices that did not answer.
    unreachable: Vec<u32>,
    /// The pool's `min_size`.
    min_size: usize,
}

impl Missing {
    /// For an erasure-coded pool: an object stays readable, and listable, while at most M of
    /// its devices are missing.
    pub(super) fn erasure(view: &View, m: usize) -> Missing {
        let down = view.map.devices().iter().filter(|d| d.is_in && !d.up).count();
        Missing { down, unreachable: Vec::new(), min_size: m + 1 }
    }

    /// The devices that did not answer.
    pub(super) fn unreachable(&self) -> Vec<u32> {
        self.unreachable.clone()
    }

    /// Devices missing from the listing: down in the map or not answering.
    pub(super) fn count(&self) -> usize {
        self.down + self.unreachable.len()
    }

    fn new(view: &View, pool: PoolId) -> Missing {
        let down = view.map.devices().iter().filter(|d| d.is_in && !d.up).count();
        let min_size = view.map.pool(pool).map(|p| p.min_size as usize).unwrap_or(1).max(1);
        Missing { down, unreachable: Vec::new(), min_size }
    }

    /// Goes on without the device behind `failure` if it did not answer and the listing is
    /// still complete without it; otherwise the error to return.
    pub(super) fn tolerate(
        &mut self,
        endpoint: &Endpoint,
        failure: Failure,
    ) -> Result<(), ClientError> {
        let refused = |reason: String| ClientError::Refused {
            device: endpoint.device,
            kind: failure.kind().unwrap_or(ErrorKind::Io),
            reason,
        };
        if !failure.is_unreachable() {
            return Err(refused(failure.to_string()));
        }
        if self.down + self.unreachable.len() + 1 >= self.min_size {
            return Err(refused(format!(
                "{failure}; with {} device(s) down and {} more not answering ({:?}), a listing \
                 could miss objects (the pool's min_size is {}): try again when they are back \
                 or marked down",
                self.down,
                self.unreachable.len(),
                self.unreachable,
                self.min_size
            )));
        }
        tracing::warn!(device = endpoint.device, %failure, "listing without a device that does not answer");
        self.unreachable.push(endpoint.device);
        Ok(())
    }
}

#[derive(Debug)]
struct DeviceCursor {
    endpoint: Endpoint,
    /// Rows read and not yet merged: the object, or `None` for a tombstone.
    rows: VecDeque<(String, ObjectVersion, Option<ObjectInfo>)>,
    /// The last key asked for.
    after: Option<String>,
    /// The device has nothing after `after`.
    done: bool,
}

impl ListCursor {
    /// The next object in key order, or `None` at the end.
    pub async fn next(&mut self, client: &Client) -> Result<Option<ObjectInfo>, ClientError> {
        loop {
            self.fill(client).await?;
            let Some(first) =
                self.devices.iter().filter_map(|d| d.rows.front().map(|r| &r.0)).min().cloned()
            else {
                return Ok(None);
            };
            let mut best: Option<(ObjectVersion, Option<ObjectInfo>)> = None;
            for device in &mut self.devices {
                if device.rows.front().is_some_and(|r| r.0 == first) {
                    let (_, version, info) = device.rows.pop_front().expect("a front row");
                    // The newest version wins; at equal versions a tombstone does.
                    let better = match &best {
                        None => true,
                        Some((v, i)) => (version, info.is_none()) > (*v, i.is_none()),
                    };
                    if better {
                        best = Some((version, info));
                    }
                }
            }
            if let Some((_, Some(info))) = best {
                return Ok(Some(info));
            }
        }
    }

    /// Skips every key up to and including `after` (a listing that rolls keys up under a
    /// common prefix jumps past them).
    pub fn skip_to(&mut self, after: &str) {
        for device in &mut self.devices {
            while device.rows.front().is_some_and(|r| r.0.as_str() <= after) {
                device.rows.pop_front();
            }
            if device.rows.is_empty() && device.after.as_deref().is_none_or(|a| a < after) {
                device.after = Some(after.to_string());
            }
        }
    }

    /// Reads the next page of every device whose rows ran out, all at once.
    async fn fill(&mut self, client: &Client) -> Result<(), ClientError> {
        let view = client.view();
        let pool = self.pool;
        let page = self.page;
        let prefix = &self.prefix;
        let reads =
            self.devices.iter_mut().filter(|d| d.rows.is_empty() && !d.done).map(|device| {
                let query = ListQuery {
                    prefix: Some(prefix.clone()),
                    after: device.after.clone(),
                    limit: Some(page),
                    tombstones: Some(true),
                    ..ListQuery::default()
                };
                let view = &view;
                async move {
                    let listing = match client.list_page(view, pool, &device.endpoint, query).await
                    {
                        Ok(listing) => listing,
                        Err(failure) => {
                            // Asked no more; the caller decides whether to go on without it.
                            device.done = true;
                            return Err((device.endpoint.clone(), failure));
                        }
                    };
                    let mut rows: Vec<_> = listing
                        .objects
                        .into_iter()
                        .map(|o| (o.key.clone(), o.version, Some(o)))
                        .chain(listing.deleted.into_iter().map(|d| (d.key, d.version, None)))
                        .collect();
                    rows.sort_by(|a, b| a.0.cmp(&b.0));
                    device.done = !listing.truncated || rows.is_empty();
                    if let Some(last) = rows.last() {
                        device.after = Some(last.0.clone());
                    }
                    device.rows.extend(rows);
                    Ok(())
                }
            });
        for result in join_all(reads).await {
            if let Err((endpoint, failure)) = result {
                self.missing.tolerate(&endpoint, failure)?;
            }
        }
        Ok(())
    }
}
