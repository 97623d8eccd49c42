//! Objects of erasure-coded pools (docs/erasure.md): K data and M parity chunks, chunk `i` on
//! the `i`-th device of the object's placement, written without a write hole and read back from
//! any K of them.
//!
//! - **Writes** encode the object and send chunk `i` to its device at one version, asking the
//!   device to keep what it replaces (a clone of the earlier chunk under `KEY@VERSION`, the
//!   snapshot mechanism's, [`optio_proto::snap`]). The write is acknowledged when at least the
//!   pool's `min_size` chunks (K + 1 by default) are durable; then each device that took it is
//!   told the version is committed ([`Op::Commit`]) and drops what it kept. A writer killed
//!   between chunk writes leaves the new version on fewer than K devices and the previous one
//!   whole (heads and kept clones): reads return the previous one.
//! - **Reads** fetch the K data chunks and probe the M parity devices. When every data chunk
//!   holds the newest version there is, the object is the data chunks put together (no
//!   decoding). Otherwise parity chunks of that version are fetched and the object decoded
//!   from any K intact chunks; chunks found damaged, missing or older are rewritten from the
//!   decoded object (a read repair). A newest version on fewer than K devices (a write that
//!   did not complete) is passed over for the newest one below it, read as of that version from
//!   every device (heads or kept clones). More than M chunks unusable is a clear error, never
//!   wrong bytes: every chunk is checked against its checksum and its position.
//! - **Deletes** write a tombstone on every chunk's device the same way (the chunk kept until
//!   the delete is committed); a tombstone as the newest version means the object is gone.
//!
//! Not yet (docs/erasure.md, "Order of work"): CHOICE's other candidates (objects of an
//! erasure-coded pool live on its home candidate), reads of a range without the whole object,
//! moving chunks when the map changes, catching up and scrubbing chunks, volumes.

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::join_all;
use optio_erasure::Profile;
use optio_placement::{DeviceId, ITEM_NONE, PoolId};
use optio_proto::snap::{CLONED_KEY_BYTES_MAX, SnapContext, parse_clone_key_any};
use optio_proto::{ErrorKind, ObjectInfo, ObjectVersion, checksum, validate_key};

use crate::error::ClientError;
use crate::transport::{Answer, Call, Chunks, Endpoint, Failure, Op};

use super::write::PutReport;
use super::{Client, RETRIES_MAX, View};

/// An erasure-coded pool, as a client codes for it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Coded {
    pool: PoolId,
    profile: Profile,
    /// Chunks that must be durable before a write or delete is acknowledged.
    min_size: usize,
}

impl Coded {
    fn k(&self) -> usize {
        usize::from(self.profile.k())
    }

    fn chunks(&self) -> usize {
        usize::from(self.profile.chunks())
    }
}

/// Rounds of reads as of an older version when the newest ones do not decode (writers killed
/// one after the other, each leaving a version on fewer than K devices).
const OLDER_ROUNDS_MAX: usize = 4;

impl View {
    /// The pool `name` if it is erasure-coded (none: a replicated pool).
    pub(super) fn erasure_pool(&self, name: &str) -> Result<Option<Coded>, ClientError> {
        let pool = self.find_pool(name)?;
        let Some(params) = pool.erasure else { return Ok(None) };
        let profile = Profile::new(params.k, params.m, u64::from(params.stripe_unit_bytes))
            .map_err(|e| ClientError::Config(format!("pool '{}': {e}", pool.name)))?;
        let chunks = usize::from(profile.chunks());
        let min_size = usize::try_from(pool.min_size).unwrap_or(chunks).clamp(1, chunks);
        Ok(Some(Coded { pool: pool.id, profile, min_size }))
    }
}

/// What one device had for one chunk.
#[derive(Clone, Debug)]
enum Seen {
    /// The chunk of `version`, fetched and checked (checksum, position, profile).
    Chunk { version: ObjectVersion, bytes: Bytes, info: ObjectInfo },
    /// A live chunk of this version, probed but not fetched.
    Live(ObjectVersion),
    /// A tombstone of this version.
    Deleted(ObjectVersion),
    /// Nothing (as of a version: nothing live below it).
    Absent,
    /// A chunk that failed its checks (checksum, position, profile): why. Rewritten by a read
    /// that decodes its version.
    Damaged(String),
    /// No usable answer, and why; the failure itself when the device answered one.
    Failed(String, Option<Failure>),
}

impl Seen {
    /// The version seen and whether it is a deletion.
    fn version(&self) -> Option<(ObjectVersion, bool)> {
        match self {
            Seen::Chunk { version, .. } | Seen::Live(version) => Some((*version, false)),
            Seen::Deleted(version) => Some((*version, true)),
            Seen::Absent | Seen::Damaged(_) | Seen::Failed(..) => None,
        }
    }

    fn stale_epoch(&self) -> bool {
        matches!(self, Seen::Failed(_, Some(f))
            if matches!(f.kind(), Some(ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch)))
    }
}

/// Keys of an erasure-coded pool that cannot be written: too long to keep a clone of, or in
/// the form of a clone's key.
fn check_erasure_key(key: &str) -> Result<(), ClientError> {
    validate_key(key)?;
    let reason = if key.len() > CLONED_KEY_BYTES_MAX {
        format!(
            "is {} bytes; keys of an erasure-coded pool are at most {CLONED_KEY_BYTES_MAX} bytes (a chunk keeps its previous version under KEY@VERSION while it is replaced)",
            key.len()
        )
    } else if parse_clone_key_any(key).is_some() {
        "ends in '@' and 16 hex digits, the form of a kept chunk's key in an erasure-coded pool: choose another key".to_string()
    } else {
        return Ok(());
    };
    Err(ClientError::ErasureKey { key: key.to_string(), reason })
}

/// The context a chunk write or delete carries so that its device keeps what it replaces.
fn keep(version: ObjectVersion) -> SnapContext {
    SnapContext { seq: 0, mark: version }
}

fn describe(failure: &Failure) -> String {
    failure.to_string()
}

impl Client {
    /// The pool `name` if it is erasure-coded.
    pub(super) fn erasure_pool(&self, name: &str) -> Result<Option<Coded>, ClientError> {
        self.view().erasure_pool(name)
    }

    /// The devices of `key`'s chunks, by position (none: a hole, or no address), and the
    /// placement seed its chunks are stored with.
    fn chunk_slots(
        &self,
        view: &View,
        coded: &Coded,
        key: &str,
    ) -> Result<(u32, Vec<Option<Endpoint>>), ClientError> {
        let placement = view.placement.pool(coded.pool).expect("pool ids come from this map");
        let mut scratch = view.placement.scratch();
        let mut set = optio_placement::choice::Candidates::new();
        placement.candidates(key, &mut scratch, &mut set);
        let Some((home, devices)) = set.iter().next() else {
            return Err(ClientError::NoDevices { key: key.to_string() });
        };
        let seed = home.pg.map(|pg| pg.seed).unwrap_or(home.key);
        let mut slots: Vec<Option<Endpoint>> = devices
            .as_slice()
            .iter()
            .map(|&item| {
                (item >= 0 && item != ITEM_NONE)
                    .then(|| view.endpoint(DeviceId(item as u32)).ok())
                    .flatten()
            })
            .collect();
        slots.resize(coded.chunks(), None);
        if slots.iter().all(Option::is_none) {
            return Err(ClientError::NoDevices { key: key.to_string() });
        }
        Ok((seed, slots))
    }

    /// Writes an object of an erasure-coded pool: its chunks at one version, acknowledged at
    /// `min_size` durable chunks, then committed.
    pub(super) async fn put_erasure(
        &self,
        pool_name: &str,
        key: &str,
        data: Bytes,
    ) -> Result<PutReport, ClientError> {
        check_erasure_key(key)?;
        let mut attempts = 0;
        loop {
            let view = self.view();
            let Some(coded) = view.erasure_pool(pool_name)? else {
                // The pool became replicated under us (a map edit): write it as such.
                return Box::pin(self.put(pool_name, key, data)).await;
            };
            let (seed, slots) = self.chunk_slots(&view, &coded, key)?;
            let profile = coded.profile;
            let object = data.clone();
            let chunks: Vec<Bytes> = tokio::task::spawn_blocking(move || {
                optio_erasure::encode(profile, &object)
                    .map(|chunks| chunks.iter().map(|c| Bytes::from(c.to_bytes())).collect())
            })
            .await
            .map_err(|e| ClientError::Config(format!("the encoding task failed: {e}")))?
            .map_err(|e| ClientError::Config(format!("cannot encode '{key}': {e}")))?;
            let version = self.next_version();
            let results = join_all(slots.iter().zip(&chunks).map(|(slot, chunk)| {
                let view = &view;
                async move {
                    let endpoint = slot.as_ref()?;
                    let op = Op::Put {
                        key,
                        data: chunk.clone(),
                        version,
                        checksum: checksum(chunk),
                        pg_seed: Some(seed),
                    };
                    let mut call = Call::new(endpoint, coded.pool, view.epoch(), op);
                    call.snap = Some(keep(version));
                    Some(self.call(call).await)
                }
            }))
            .await;
            let written: Vec<&Endpoint> = slots
                .iter()
                .zip(&results)
                .filter_map(|(slot, result)| match result {
                    Some(Ok(_)) => slot.as_ref(),
                    _ => None,
                })
                .collect();
            if written.len() >= coded.min_size {
                self.commit_chunks(&view, coded.pool, key, version, &written).await;
                if written.len() < coded.chunks() {
                    self.inner
                        .counters
                        .degraded_writes
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                return Ok(PutReport {
                    candidate: 0,
                    devices: written.iter().map(|e| e.device).collect(),
                    version,
                    probes: 0,
                });
            }
            let failures = chunk_failures(&slots, &results);
            if any_stale_epoch(&results) && attempts < RETRIES_MAX {
                attempts += 1;
                self.refresh().await?;
                continue;
            }
            // Taken back where it landed: each device makes what it kept its head again (a
            // version on K or more devices would otherwise read back although refused).
            self.undo_chunks(&view, coded.pool, key, version, &written).await;
            return Err(ClientError::NotEnoughChunks {
                key: key.to_string(),
                acked: written.len(),
                needed: coded.min_size,
                chunks: coded.chunks(),
                failures,
            });
        }
    }

    /// Tells each device in `endpoints` that `version` of `key` is committed: what it kept
    /// while the version was written goes. A device that does not hear it keeps it until the
    /// next commit of the key.
    async fn commit_chunks(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
        endpoints: &[&Endpoint],
    ) {
        let results = join_all(endpoints.iter().map(|endpoint| {
            self.call(Call::new(endpoint, pool, view.epoch(), Op::Commit { key, version }))
        }))
        .await;
        for (endpoint, result) in endpoints.iter().zip(results) {
            if let Err(failure) = result {
                tracing::debug!(device = endpoint.device, key, %failure, "a commit was not heard");
            }
        }
    }

    /// Takes back `version` of `key` on `endpoints` (a write or delete that reached fewer
    /// than `min_size` devices): each makes the version it kept its head again. A device
    /// that does not hear it keeps the version, which reads pass over while it is on fewer
    /// than K devices.
    async fn undo_chunks(
        &self,
        view: &View,
        pool: PoolId,
        key: &str,
        version: ObjectVersion,
        endpoints: &[&Endpoint],
    ) {
        let results = join_all(endpoints.iter().map(|endpoint| {
            self.call(Call::new(endpoint, pool, view.epoch(), Op::Undo { key, version }))
        }))
        .await;
        for (endpoint, result) in endpoints.iter().zip(results) {
            if let Err(failure) = result {
                tracing::warn!(device = endpoint.device, key, %failure, "a chunk write could not be taken back");
            }
        }
    }

    /// Deletes an object of an erasure-coded pool: a tombstone on every chunk's device.
    pub(super) async fn delete_erasure(
        &self,
        pool_name: &str,
        key: &str,
    ) -> Result<(), ClientError> {
        check_erasure_key(key)?;
        let mut attempts = 0;
        loop {
            let view = self.view();
            let Some(coded) = view.erasure_pool(pool_name)? else {
                return Box::pin(self.delete(pool_name, key)).await;
            };
            let (seed, slots) = self.chunk_slots(&view, &coded, key)?;
            let version = self.next_version();
            let results = join_all(slots.iter().map(|slot| {
                let view = &view;
                async move {
                    let endpoint = slot.as_ref()?;
                    let op = Op::Delete {
                        key,
                        version: Some(version),
                        purge: false,
                        pg_seed: Some(seed),
                    };
                    let mut call = Call::new(endpoint, coded.pool, view.epoch(), op);
                    call.snap = Some(keep(version));
                    Some(self.call(call).await)
                }
            }))
            .await;
            // "No such object" still leaves the tombstone of this version.
            let absent = |f: &Failure| f.kind() == Some(ErrorKind::NotFound);
            let mut found_live = false;
            let mut written: Vec<&Endpoint> = Vec::new();
            for (slot, result) in slots.iter().zip(&results) {
                match (slot, result) {
                    (Some(endpoint), Some(Ok(_))) => {
                        found_live = true;
                        written.push(endpoint);
                    }
                    (Some(endpoint), Some(Err(f))) if absent(f) => written.push(endpoint),
                    _ => {}
                }
            }
            if written.len() >= coded.min_size {
                self.commit_chunks(&view, coded.pool, key, version, &written).await;
                if !found_live {
                    return Err(ClientError::NotFound {
                        pool: pool_name.to_string(),
                        key: key.to_string(),
                    });
                }
                return Ok(());
            }
            if any_stale_epoch(&results) && attempts < RETRIES_MAX {
                attempts += 1;
                self.refresh().await?;
                continue;
            }
            self.undo_chunks(&view, coded.pool, key, version, &written).await;
            return Err(ClientError::NotEnoughChunks {
                key: key.to_string(),
                acked: written.len(),
                needed: coded.min_size,
                chunks: coded.chunks(),
                failures: chunk_failures(&slots, &results),
            });
        }
    }

    /// Reads an object of an erasure-coded pool, or the inclusive byte range `range` of it.
    pub(super) async fn get_erasure(
        &self,
        pool_name: &str,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<(ObjectInfo, Chunks), ClientError> {
        validate_key(key)?;
        let mut attempts = 0;
        loop {
            let view = self.view();
            let Some(coded) = view.erasure_pool(pool_name)? else {
                return Box::pin(self.get_chunks(pool_name, key, range)).await;
            };
            let (_, slots) = self.chunk_slots(&view, &coded, key)?;
            match self.read_coded(&view, &coded, pool_name, key, &slots).await {
                Err(ClientError::EpochRetries { .. }) if attempts < RETRIES_MAX => {
                    attempts += 1;
                    self.refresh().await?;
                }
                Err(error) => return Err(error),
                Ok((info, object)) => return slice(info, object, range, key),
            }
        }
    }

    /// One attempt of [`get_erasure`](Self::get_erasure) under `view`: the whole object.
    async fn read_coded(
        &self,
        view: &View,
        coded: &Coded,
        pool_name: &str,
        key: &str,
        slots: &[Option<Endpoint>],
    ) -> Result<(ObjectInfo, Bytes), ClientError> {
        let k = coded.k();
        // K chunks fetched — the data chunks, unless a device refused connections lately
        // (its server is down: a parity chunk is fetched in its place) — and the other
        // devices probed.
        let mut fetch = vec![false; slots.len()];
        let mut fetching = 0;
        for (i, slot) in slots.iter().enumerate() {
            if fetching < k && slot.as_ref().is_some_and(|e| !self.refused_lately(e.device)) {
                fetch[i] = true;
                fetching += 1;
            }
        }
        let fetch = &fetch;
        let mut seen: Vec<Seen> = join_all(slots.iter().enumerate().map(|(i, slot)| async move {
            match slot {
                None => Seen::Failed("no device (a hole in the placement)".into(), None),
                Some(endpoint) if fetch[i] => {
                    self.fetch_chunk(view, coded, key, i, endpoint, None).await
                }
                Some(endpoint) => self.probe_chunk(view, coded, key, endpoint).await,
            }
        }))
        .await;
        let mut below: Option<ObjectVersion> = None;
        for _round in 0..=OLDER_ROUNDS_MAX {
            if seen.iter().any(Seen::stale_epoch) {
                return Err(ClientError::EpochRetries { attempts: 0 });
            }
            let newest = seen.iter().filter_map(Seen::version).max();
            // (A damaged chunk's version is unknown too: it may be of a newer one.)
            let unknown =
                seen.iter().filter(|s| matches!(s, Seen::Failed(..) | Seen::Damaged(_))).count();
            let Some((version, deleted)) = newest else {
                if unknown == 0 {
                    // Nowhere, or only a write that never completed over nothing.
                    return Err(not_found(pool_name, key));
                }
                return Err(undecodable(key, coded, &seen, below));
            };
            if deleted {
                return Err(not_found(pool_name, key));
            }
            let holders = seen.iter().filter(|s| s.version() == Some((version, false))).count();
            if holders >= k {
                // Fetch the chunks of this version only probed so far, if those fetched do
                // not do.
                let fetched = seen.iter().filter(|s| is_chunk_of(s, version)).count();
                if fetched < k {
                    let refetch: Vec<usize> = (0..seen.len())
                        .filter(|&i| matches!(seen[i], Seen::Live(v) if v == version))
                        .collect();
                    let answers = join_all(refetch.iter().map(|&i| {
                        let endpoint = slots[i].as_ref().expect("a probed slot has a device");
                        self.fetch_chunk(view, coded, key, i, endpoint, below)
                    }))
                    .await;
                    for (i, answer) in refetch.into_iter().zip(answers) {
                        seen[i] = answer;
                    }
                }
                if seen.iter().filter(|s| is_chunk_of(s, version)).count() >= k {
                    return self
                        .decode_and_repair(view, coded, key, slots, &seen, version, below)
                        .await;
                }
            }
            if holders + unknown >= k {
                // The devices that did not answer may hold this version: an older one read
                // now could be older than what was acknowledged.
                return Err(undecodable(key, coded, &seen, below));
            }
            // This version is on too few devices to have been acknowledged (a write that did
            // not complete): read every device as of it — its newest content below it.
            below = Some(version);
            seen = join_all(slots.iter().enumerate().map(|(i, slot)| async move {
                match slot {
                    None => Seen::Failed("no device (a hole in the placement)".into(), None),
                    Some(endpoint) => {
                        self.fetch_chunk(view, coded, key, i, endpoint, Some(version)).await
                    }
                }
            }))
            .await;
        }
        Err(undecodable(key, coded, &seen, below))
    }

    /// Decodes `version` from the chunks in `seen` and rewrites the chunks of devices that
    /// answered without a good chunk of it (when it is the newest version: `below` none).
    #[allow(clippy::too_many_arguments)]
    async fn decode_and_repair(
        &self,
        view: &View,
        coded: &Coded,
        key: &str,
        slots: &[Option<Endpoint>],
        seen: &[Seen],
        version: ObjectVersion,
        below: Option<ObjectVersion>,
    ) -> Result<(ObjectInfo, Bytes), ClientError> {
        let stored: Vec<Option<Bytes>> = seen
            .iter()
            .map(|s| match s {
                Seen::Chunk { version: v, bytes, .. } if *v == version => Some(bytes.clone()),
                _ => None,
            })
            .collect();
        let first_info = seen
            .iter()
            .find_map(|s| match s {
                Seen::Chunk { version: v, info, .. } if *v == version => Some(info.clone()),
                _ => None,
            })
            .expect("at least K chunks of the version");
        let profile = coded.profile;
        let decoded = tokio::task::spawn_blocking(move || {
            let refs: Vec<Option<&[u8]>> = stored.iter().map(|s| s.as_deref()).collect();
            optio_erasure::decode_stored(profile, &refs)
        })
        .await
        .map_err(|e| ClientError::Config(format!("the decoding task failed: {e}")))?
        .map_err(|e| ClientError::Undecodable {
            key: key.to_string(),
            reason: format!("version {}: {e}", version.0),
        })?;
        let object = Bytes::from(decoded.object);
        let info = ObjectInfo {
            key: key.to_string(),
            size_bytes: object.len() as u64,
            version,
            checksum: checksum(&object),
            pg_seed: first_info.pg_seed,
            epoch: first_info.epoch,
            summary: None,
        };
        // Repair: devices that answered (so are reachable) without a good chunk of the newest
        // version get theirs again. Under a version that did not complete (`below`), the
        // devices holding it are left alone: rolling it back is recovery's (docs/erasure.md).
        let repair: Vec<usize> = (0..seen.len())
            .filter(|&i| slots[i].is_some() && !is_chunk_of(&seen[i], version))
            .filter(|&i| match &seen[i] {
                Seen::Live(v) => *v < version,
                Seen::Chunk { version: v, .. } | Seen::Deleted(v) => *v < version,
                Seen::Absent => true,
                Seen::Damaged(_) => true,
                Seen::Failed(_, failure) => failure.as_ref().is_some_and(|f| {
                    matches!(f.kind(), Some(ErrorKind::Corrupt | ErrorKind::NotFound))
                }),
            })
            .collect();
        if below.is_none() && !repair.is_empty() {
            self.repair_chunks(view, coded, key, slots, &object, &info, &repair).await;
        }
        Ok((info, object))
    }

    /// Rewrites chunks `indices` of `object` (version `info.version`) on their devices.
    #[allow(clippy::too_many_arguments)]
    async fn repair_chunks(
        &self,
        view: &View,
        coded: &Coded,
        key: &str,
        slots: &[Option<Endpoint>],
        object: &Bytes,
        info: &ObjectInfo,
        indices: &[usize],
    ) {
        let profile = coded.profile;
        let whole = object.clone();
        let Ok(Ok(chunks)) =
            tokio::task::spawn_blocking(move || optio_erasure::encode(profile, &whole)).await
        else {
            return;
        };
        let version = info.version;
        let results = join_all(indices.iter().map(|&i| {
            let endpoint = slots[i].as_ref().expect("repaired slots have a device");
            let bytes = Bytes::from(chunks[i].to_bytes());
            let op = Op::Put {
                key,
                data: bytes.clone(),
                version,
                checksum: checksum(&bytes),
                pg_seed: info.pg_seed,
            };
            let mut call = Call::new(endpoint, coded.pool, view.epoch(), op);
            call.snap = Some(keep(version));
            self.call(call)
        }))
        .await;
        let mut repaired: Vec<&Endpoint> = Vec::new();
        for (&i, result) in indices.iter().zip(results) {
            let endpoint = slots[i].as_ref().expect("repaired slots have a device");
            match result {
                Ok(_) => {
                    repaired.push(endpoint);
                    self.inner.counters.repairs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::info!(
                        key,
                        chunk = i,
                        device = endpoint.device,
                        version = version.0,
                        "rewrote a chunk a read found missing, damaged or old"
                    );
                }
                Err(failure) => {
                    tracing::debug!(key, chunk = i, device = endpoint.device, %failure, "could not rewrite a chunk");
                }
            }
        }
        if !repaired.is_empty() {
            self.commit_chunks(view, coded.pool, key, version, &repaired).await;
        }
    }

    /// Fetches chunk `index` from `endpoint` (as of `as_of`, when given: the newest content
    /// below it) and checks it.
    async fn fetch_chunk(
        &self,
        view: &View,
        coded: &Coded,
        key: &str,
        index: usize,
        endpoint: &Endpoint,
        as_of: Option<ObjectVersion>,
    ) -> Seen {
        let mut call = Call::new(endpoint, coded.pool, view.epoch(), Op::Get { key, range: None });
        call.as_of = as_of;
        let answer = match self.call(call).await {
            Ok(answer) => answer,
            Err(failure) if failure.kind() == Some(ErrorKind::NotFound) => {
                if as_of.is_some() {
                    return Seen::Absent;
                }
                // A tombstone, or nothing: the probe says which.
                return self.probe_chunk(view, coded, key, endpoint).await;
            }
            Err(failure) => return Seen::Failed(describe(&failure), Some(failure)),
        };
        self.check_chunk(coded, index, endpoint, answer)
    }

    /// Checks a fetched chunk: the transfer's checksum, the chunk's own, its position and
    /// its profile.
    fn check_chunk(
        &self,
        coded: &Coded,
        index: usize,
        endpoint: &Endpoint,
        answer: Answer,
    ) -> Seen {
        let Some(info) = answer.info.clone() else {
            return Seen::Failed("an answer without the object's headers".into(), None);
        };
        let bytes = answer.body.to_bytes();
        let damaged = |why: String| {
            self.inner.counters.corrupt_replicas.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(device = endpoint.device, key = info.key, chunk = index, "{why}");
            Seen::Damaged(why)
        };
        // The chunk's own checksums (its header's and its data's) cover what the transfer's
        // would: one pass over the bytes, not two.
        match optio_erasure::Chunk::parse(&bytes) {
            Ok(chunk) if usize::from(chunk.index()) != index => {
                damaged(format!("device holds chunk {} where chunk {index} belongs", chunk.index()))
            }
            Ok(chunk) if chunk.header().profile() != coded.profile => damaged(format!(
                "the chunk is of profile {} (stripe unit {} B), the pool's is {}",
                chunk.header().profile(),
                chunk.header().profile().stripe_unit_bytes(),
                coded.profile
            )),
            Ok(_) => Seen::Chunk { version: info.version, bytes, info },
            Err(error) => damaged(format!("not a chunk: {error}")),
        }
    }

    /// Probes `key` on `endpoint`: the version it holds, or its tombstone's.
    async fn probe_chunk(
        &self,
        view: &View,
        coded: &Coded,
        key: &str,
        endpoint: &Endpoint,
    ) -> Seen {
        let call =
            Call::new(endpoint, coded.pool, view.epoch(), Op::Probe { key, want_choice: false });
        match self.call(call).await {
            Ok(answer) => match (answer.status, &answer.info, answer.deleted) {
                (200, Some(info), _) => Seen::Live(info.version),
                (_, _, Some(version)) => Seen::Deleted(version),
                _ => Seen::Absent,
            },
            Err(failure) => Seen::Failed(describe(&failure), Some(failure)),
        }
    }
}

/// What the devices' listings hold of one key at one version.
#[derive(Default)]
struct Listed {
    /// Live chunks (heads or kept clones).
    live: usize,
    /// Tombstones.
    deleted: usize,
    /// A device holding a live chunk of it, and the key it is stored under there.
    holder: Option<(Endpoint, String, ObjectInfo)>,
}

impl Client {
    /// The objects of an erasure-coded pool whose keys start with `prefix`, from every
    /// device's listing: a key is listed at its newest version when that version is not a
    /// deletion and is on K devices (or could be, counting the devices that did not answer);
    /// a newer version on fewer (a write that did not complete) is passed over, as reads do.
    /// Sizes are the objects' own, read from a chunk's header; the checksum is that chunk's
    /// (the object's is known only once it is read).
    pub(super) async fn list_erasure(
        &self,
        view: &View,
        coded: &Coded,
        prefix: &str,
    ) -> Result<(Vec<ObjectInfo>, Vec<u32>), ClientError> {
        let mut endpoints = Vec::new();
        for device in view.map.devices() {
            if device.up && device.addr.is_some() {
                endpoints.push(view.endpoint(device.id)?);
            }
        }
        let lists =
            join_all(endpoints.iter().map(|e| self.list_device_all(view, coded.pool, e, prefix)))
                .await;
        let mut missing = super::list::Missing::erasure(view, usize::from(coded.profile.m()));
        let mut keys: std::collections::BTreeMap<
            String,
            std::collections::BTreeMap<ObjectVersion, Listed>,
        > = Default::default();
        for (endpoint, result) in endpoints.iter().zip(lists) {
            let (objects, deleted) = match result {
                Ok(listed) => listed,
                Err(failure) => {
                    missing.tolerate(endpoint, failure)?;
                    continue;
                }
            };
            for info in objects {
                let (head, version) = match parse_clone_key_any(&info.key) {
                    Some((head, version)) => (head.to_string(), version),
                    None => (info.key.clone(), info.version),
                };
                let listed = keys.entry(head).or_default().entry(version).or_default();
                listed.live += 1;
                if listed.holder.is_none() {
                    listed.holder = Some((endpoint.clone(), info.key.clone(), info));
                }
            }
            for tombstone in deleted {
                let (head, version) = match parse_clone_key_any(&tombstone.key) {
                    Some((head, version)) => (head.to_string(), version),
                    None => (tombstone.key.clone(), tombstone.version),
                };
                keys.entry(head).or_default().entry(version).or_default().deleted += 1;
            }
        }
        let unknown = missing.count();
        let mut found = Vec::new();
        for (key, versions) in keys {
            for listed in versions.into_values().rev() {
                if listed.deleted > 0 {
                    break;
                }
                if listed.live + unknown >= coded.k()
                    && let Some(holder) = listed.holder
                {
                    found.push((key, holder));
                    break;
                }
            }
        }
        let sized: Vec<Result<ObjectInfo, ClientError>> = futures_util::stream::iter(found)
            .map(|(key, (endpoint, stored, info))| async move {
                self.object_size(view, coded, key, &endpoint, &stored, info).await
            })
            .buffered(LIST_SIZES_IN_FLIGHT)
            .collect()
            .await;
        let mut objects = Vec::with_capacity(sized.len());
        for info in sized {
            objects.push(info?);
        }
        let mut not_listed: Vec<u32> = view
            .map
            .devices()
            .iter()
            .filter(|d| d.is_in && !(d.up && d.addr.is_some()))
            .map(|d| d.id.0)
            .collect();
        not_listed.extend(missing.unreachable());
        Ok((objects, not_listed))
    }

    /// `info` of a listed chunk (stored under `stored` on `endpoint`) as the object's: its
    /// key, and its size from the chunk's header.
    async fn object_size(
        &self,
        view: &View,
        coded: &Coded,
        key: String,
        endpoint: &Endpoint,
        stored: &str,
        mut info: ObjectInfo,
    ) -> Result<ObjectInfo, ClientError> {
        let range = Some((0, optio_erasure::CHUNK_HEADER_BYTES as u64 - 1));
        let call = Call::new(endpoint, coded.pool, view.epoch(), Op::Get { key: stored, range });
        let answer = self.call(call).await.map_err(|failure| ClientError::Refused {
            device: endpoint.device,
            kind: failure.kind().unwrap_or(ErrorKind::Io),
            reason: format!("reading the chunk header of '{key}': {failure}"),
        })?;
        let header = optio_erasure::ChunkHeader::parse(&answer.body.to_bytes()).map_err(|e| {
            ClientError::Undecodable {
                key: key.clone(),
                reason: format!(
                    "device {} holds a chunk header that does not parse: {e}",
                    endpoint.device
                ),
            }
        })?;
        info.key = key;
        info.size_bytes = header.object_bytes();
        info.summary = None;
        Ok(info)
    }
}

/// Chunk headers a listing reads at once (for the objects' sizes).
const LIST_SIZES_IN_FLIGHT: usize = 32;

/// Whether `seen` is a fetched, checked chunk of `version`.
fn is_chunk_of(seen: &Seen, version: ObjectVersion) -> bool {
    matches!(seen, Seen::Chunk { version: v, .. } if *v == version)
}

fn not_found(pool: &str, key: &str) -> ClientError {
    ClientError::NotFound { pool: pool.to_string(), key: key.to_string() }
}

/// The error of a read that found no version on K devices: what each device had.
fn undecodable(
    key: &str,
    coded: &Coded,
    seen: &[Seen],
    below: Option<ObjectVersion>,
) -> ClientError {
    let what: Vec<String> = seen
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let had = match s {
                Seen::Chunk { version, .. } | Seen::Live(version) => {
                    format!("version {}", version.0)
                }
                Seen::Deleted(version) => format!("deleted at {}", version.0),
                Seen::Absent => "nothing".to_string(),
                Seen::Damaged(why) => format!("damaged: {why}"),
                Seen::Failed(why, _) => why.clone(),
            };
            format!("chunk {i}: {had}")
        })
        .collect();
    let scope = below.map(|v| format!(" below version {}", v.0)).unwrap_or_default();
    ClientError::Undecodable {
        key: key.to_string(),
        reason: format!(
            "no version{scope} has {} intact chunks of {} ({}); more than {} chunks are lost or unreachable",
            coded.k(),
            coded.chunks(),
            what.join("; "),
            coded.profile.m()
        ),
    }
}

/// Whether a device refused a write or delete for the sender's stale (or unknown) epoch.
fn any_stale_epoch(results: &[Option<Result<Answer, Failure>>]) -> bool {
    results.iter().flatten().any(|r| {
        r.as_ref().is_err_and(|f| {
            matches!(f.kind(), Some(ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch))
        })
    })
}

/// What each device's write answered, for an error.
fn chunk_failures(
    slots: &[Option<Endpoint>],
    results: &[Option<Result<Answer, Failure>>],
) -> String {
    let failures: Vec<String> = slots
        .iter()
        .zip(results)
        .enumerate()
        .filter_map(|(i, (slot, result))| match (slot, result) {
            (None, _) => Some(format!("chunk {i}: no device")),
            (Some(e), Some(Err(f))) => Some(format!("chunk {i} (device {}): {f}", e.device)),
            _ => None,
        })
        .collect();
    failures.join("; ")
}

/// The inclusive byte range `range` of a whole object read.
fn slice(
    info: ObjectInfo,
    object: Bytes,
    range: Option<(u64, u64)>,
    key: &str,
) -> Result<(ObjectInfo, Chunks), ClientError> {
    let Some((first, last)) = range else { return Ok((info, Chunks::from(object))) };
    let len = object.len() as u64;
    if first > last || first >= len {
        return Err(ClientError::BadRange {
            key: key.to_string(),
            reason: format!("bytes {first}-{last} of an object of {len} bytes"),
        });
    }
    let end = last.min(len - 1) + 1;
    Ok((info, Chunks::from(object.slice(first as usize..end as usize))))
}
