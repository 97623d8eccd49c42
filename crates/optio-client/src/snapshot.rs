//! Volume snapshots (`docs/volumes.md`, "Snapshots and clones"): kept in the volume's header,
//! taken by the lock holder, trimmed by the client that removes them.
//!
//! A snapshot is a header entry — id (from the volume's sequence), name, *mark*, size,
//! protected flag — and costs nothing until a data object changes: each write carries the
//! newest mark, and the servers keep what a snapshot sees as a clone before changing it
//! ([`optio_proto::snap`]). Taking one is a compare-and-swap of the header:
//!
//! * **No writer holds the lock**: the snapshot is recorded with a mark of now plus the
//!   servers' clock bound ([`VERSION_AHEAD_MAX_MICROS`]), above every version any past
//!   writer could have written; the next writer raises its clock past it when it opens.
//! * **A writer holds it** (`optio nbd`): the snapshot is recorded without a mark and the
//!   header's snapshot generation bumped. The holder watches the header (a read its server
//!   holds until the header changes, [`crate::Client::get_when_newer`]; else every
//!   [`HOLDER_POLL`]); it stops its writes, waits for those in flight, picks the mark (its
//!   clock's next tick, so above every write it acknowledged and below every write it will
//!   issue), records it with the generation it has seen, and writes again with the new
//!   context. The command waits [`HOLDER_WAIT`] for the mark; a holder that does not answer
//!   makes it take the unmarked snapshot back and fail, so a snapshot is whole or absent,
//!   never torn.

pub use crate::volume::{
    Ancestor, CLONE_DEPTH_MAX, HOLDER_POLL, HOLDER_WAIT, Parent, Reader, Snapshot,
    VERSION_AHEAD_MAX_MICROS, ancestors, find,
};
use crate::volume::{
    Volume, VolumeError, VolumeHeader, find_header, forget_child, header_when_newer,
    holder_is_gone, now_ms, update, validate_name,
};
use crate::{Client, ClientError};
use optio_proto::ObjectVersion;
use optio_proto::snap::parse_clone_key;

/// Splits `VOL@SNAP`.
pub fn parse_spec(spec: &str) -> Result<(&str, &str), VolumeError> {
    let Some((volume, snap)) = spec.split_once('@') else {
        return Err(VolumeError::Snapshot(format!(
            "'{spec}' names no snapshot: write VOLUME@SNAPSHOT"
        )));
    };
    validate_name(volume)?;
    validate_name(snap).map_err(|_| {
        VolumeError::Snapshot(format!(
            "bad snapshot name '{snap}': use 1 to 200 letters, digits, '-', '_' or '.', not starting with '.'"
        ))
    })?;
    Ok((volume, snap))
}

/// The live lock holder of a header, if any (a lease not run out, a holder not known gone).
fn live_holder(header: &VolumeHeader) -> Option<&crate::volume::Lock> {
    header.lock.as_ref().filter(|lock| lock.expires_unix_ms > now_ms() && !holder_is_gone(lock))
}

/// Takes snapshot `snap` of volume `name` (see the module): returns it once it has its mark.
pub async fn create(client: &Client, name: &str, snap: &str) -> Result<Snapshot, VolumeError> {
    let started = std::time::Instant::now();
    let mut asked_holder = false;
    // What an attempt added (id, creation second): a compare-and-swap refused as "changed"
    // may have taken on the replicas all the same (the holder, watching the header, answered
    // it before every replica had it), and the next attempt then finds its own snapshot.
    let mut added: Option<(u64, u64)> = None;
    let written = update(client, name, |header| {
        if header.removing {
            return Err(VolumeError::NotFound(name.to_string()));
        }
        if let Some(existing) = header.snapshots.iter().find(|s| s.name == snap) {
            if added == Some((existing.id, existing.created_unix_s)) {
                // Ours: written again unchanged, then followed as if the first write had
                // answered.
                asked_holder = existing.mark.is_none();
                return Ok(());
            }
            return Err(VolumeError::Snapshot(format!(
                "volume '{name}' has a snapshot '{snap}' already; pick another name"
            )));
        }
        let now = now_ms();
        asked_holder = live_holder(header).is_some();
        let mark = (!asked_holder).then(|| now * 1000 + VERSION_AHEAD_MAX_MICROS + 1);
        header.snap_seq += 1;
        header.snap_generation += 1;
        added = Some((header.snap_seq, now / 1000));
        header.snapshots.push(Snapshot {
            id: header.snap_seq,
            name: snap.to_string(),
            mark,
            size: header.size,
            protected: false,
            created_unix_s: now / 1000,
            children: Vec::new(),
            readers: Vec::new(),
        });
        Ok(())
    })
    .await?;
    let asked = started.elapsed();
    let taken = find(&written, snap)?.clone();
    if !asked_holder {
        return Ok(taken);
    }
    let holder = written.lock.as_ref().map(|l| l.holder.clone()).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + HOLDER_WAIT;
    // The header is watched (reads its server holds until it changes): the holder's mark is
    // seen as soon as it is written.
    let mut seen = ObjectVersion(0);
    while tokio::time::Instant::now() < deadline {
        let polled = tokio::time::Instant::now();
        let (header, version) = header_when_newer(client, &written.pool, name, seen).await?;
        if version <= seen {
            // Answered at once with nothing new (a server that cannot wait): paced.
            tokio::time::sleep_until(polled + TAKEN_POLL).await;
        }
        seen = version;
        match header.snapshots.iter().find(|s| s.id == taken.id) {
            Some(s) if s.mark.is_some() => {
                tracing::debug!(
                    volume = name,
                    asked_ms = asked.as_secs_f64() * 1e3,
                    total_ms = started.elapsed().as_secs_f64() * 1e3,
                    "the lock holder took the snapshot"
                );
                return Ok(s.clone());
            }
            Some(_) => {}
            None => break,
        }
    }
    // The holder did not answer: take the snapshot back unless it was taken meanwhile.
    let after = update(client, name, |header| {
        header.snapshots.retain(|s| s.id != taken.id || s.mark.is_some());
        header.snap_generation += 1;
        Ok(())
    })
    .await?;
    if let Some(s) = after.snapshots.iter().find(|s| s.id == taken.id) {
        return Ok(s.clone());
    }
    Err(VolumeError::Snapshot(format!(
        "volume '{name}' is open read-write by {holder}, which did not take snapshot '{snap}' within {} s: no snapshot was made; check that process (or stop it) and try again",
        HOLDER_WAIT.as_secs()
    )))
}

/// How often `snap create` looks whether the lock holder took the snapshot when the server
/// answers its watch of the header at once.
const TAKEN_POLL: std::time::Duration = std::time::Duration::from_millis(4);

/// The snapshots of volume `name`, oldest first.
pub async fn list(client: &Client, name: &str) -> Result<Vec<Snapshot>, VolumeError> {
    Ok(find_header(client, name).await?.0.snapshots)
}

/// Sets or clears the protected flag of `snap`.
pub async fn protect(
    client: &Client,
    name: &str,
    snap: &str,
    protected: bool,
) -> Result<(), VolumeError> {
    update(client, name, |header| {
        let found = header.snapshots.iter_mut().find(|s| s.name == snap);
        let Some(found) = found else {
            return Err(find(header, snap).expect_err("not there"));
        };
        found.protected = protected;
        Ok(())
    })
    .await?;
    Ok(())
}

/// [`protect`], refusing to unprotect a snapshot that has clones (named in the error).
pub async fn set_protected(
    client: &Client,
    name: &str,
    snap: &str,
    protected: bool,
) -> Result<(), VolumeError> {
    if !protected {
        let (header, _) = find_header(client, name).await?;
        let children = live_children(client, name, find(&header, snap)?).await?;
        if !children.is_empty() {
            return Err(VolumeError::Snapshot(format!(
                "snapshot '{name}@{snap}' has clones ({}): flatten or remove them first",
                children.join(", ")
            )));
        }
    }
    protect(client, name, snap, protected).await
}

/// Removes `snap` from volume `name` and asks for a trim of the copies no snapshot sees any
/// more: a job in the header that [`crate::trim::run`] carries out (the command with
/// `--wait`, or the background worker). A protected snapshot, or one with clones, is refused.
pub async fn remove(client: &Client, name: &str, snap: &str) -> Result<VolumeHeader, VolumeError> {
    // Children that no longer read from the snapshot (removed, flattened, or never made by
    // a clone that was interrupted) do not hold it; a child named since is looked at again.
    let (header, _) = find_header(client, name).await?;
    let found = find(&header, snap)?;
    let live = live_children(client, name, found).await?;
    if !live.is_empty() {
        return Err(VolumeError::Snapshot(format!(
            "snapshot '{name}@{snap}' has clones ({}): flatten or remove them first",
            live.join(", ")
        )));
    }
    let gone = found.children.clone();
    // An attempt refused as "changed" may have taken all the same (see `create`): the next
    // one then finds the snapshot gone, by its own hand.
    let mut removed = false;
    update(client, name, |header| {
        let found = match find(header, snap) {
            Ok(found) => found,
            Err(_) if removed => return Ok(()),
            Err(error) => return Err(error),
        };
        if found.children.iter().any(|c| !gone.contains(c)) {
            return Err(VolumeError::Snapshot(format!(
                "snapshot '{name}@{snap}' was cloned meanwhile ({}): flatten or remove the clones first",
                found.children.join(", ")
            )));
        }
        if found.protected {
            return Err(VolumeError::Snapshot(format!(
                "snapshot '{name}@{snap}' is protected: `optio volume snap unprotect {name}@{snap}` first"
            )));
        }
        let readers: Vec<&str> =
            found.readers.iter().filter(|r| r.is_live()).map(|r| r.holder.as_str()).collect();
        if !readers.is_empty() {
            return Err(VolumeError::Snapshot(format!(
                "snapshot '{name}@{snap}' is being read by {}: stop that (optio nbd, export) first",
                readers.join(", ")
            )));
        }
        header.snapshots.retain(|s| s.name != snap);
        header.snap_generation += 1;
        header.ask_trim();
        removed = true;
        Ok(())
    })
    .await
}

/// One data object of a volume as its pool stores it: the head's version and bytes (none:
/// never written, or deleted — listings leave tombstones out) and every clone's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// The head: version and bytes.
    pub head: Option<(ObjectVersion, u64)>,
    /// The clones kept for snapshots: version and bytes each.
    pub clones: Vec<(ObjectVersion, u64)>,
    /// The placement seed the listing gave for the object's copies (its clones are placed by
    /// its head's): in a pool of several candidates, which one holds them.
    pub seed: Option<u32>,
}

/// The data objects (heads and clones) stored under `prefix` (a volume's
/// [`VolumeHeader::data_prefix`], or an ancestor's) in `pool`, by object index. One listing
/// of the pool; what trim, rollback, diff and du all start from.
pub async fn stored_objects(
    client: &Client,
    pool: &str,
    prefix: &str,
) -> Result<std::collections::BTreeMap<u64, Stored>, VolumeError> {
    Ok(stored_objects_missing(client, pool, prefix).await?.0)
}

/// [`stored_objects`], and the devices the listing could not reach
/// ([`Client::list_missing`]): what only they hold is not in it.
pub async fn stored_objects_missing(
    client: &Client,
    pool: &str,
    prefix: &str,
) -> Result<(std::collections::BTreeMap<u64, Stored>, Vec<u32>), VolumeError> {
    let (listed, missing) = client.list_missing(pool, prefix).await?;
    let mut objects: std::collections::BTreeMap<u64, Stored> = std::collections::BTreeMap::new();
    for info in &listed {
        let (head, clone) = match parse_clone_key(&info.key) {
            Some((head, version)) => (head, Some(version)),
            None => (info.key.as_str(), None),
        };
        let Some(index) =
            head.strip_prefix(prefix).and_then(|hex| u64::from_str_radix(hex, 16).ok())
        else {
            continue;
        };
        let entry = objects.entry(index).or_default();
        entry.seed = entry.seed.or(info.pg_seed);
        match clone {
            Some(version) => entry.clones.push((version, info.size_bytes)),
            None => entry.head = Some((info.version, info.size_bytes)),
        }
    }
    Ok((objects, missing))
}

/// Which content of a stored object a read as of `mark` sees (`None` for the mark: the head
/// as it is now), if the listing alone tells: `Some(None)` for nothing (zeros),
/// `Some(Some(v))` for the content at version `v`; `None` when it does not — the object has
/// clones, and a listing leaves out tombstones (of the head, or kept as clones), which only
/// the servers know ([`visible_version`] asks them then).
pub fn visible_from_listing(
    stored: &Stored,
    mark: Option<ObjectVersion>,
) -> Option<Option<ObjectVersion>> {
    let head = stored.head.map(|(version, _)| version);
    let Some(mark) = mark else { return Some(head) };
    if !stored.clones.is_empty() {
        return None;
    }
    // No clone: whatever stood below the mark was never changed after it (a change would have
    // kept it as a clone), so it is the head if the head is below the mark, else nothing.
    Some(head.filter(|version| *version < mark))
}

/// The version of the content of data object `key` (stored as `stored`) that a read as of
/// `mark` sees (`None` for the mark: the head); `None` when that is nothing (zeros). From the
/// listing when it tells ([`visible_from_listing`]), else by a one-byte read as of the mark,
/// answered by the servers from the head and its clones, tombstones included.
pub async fn visible_version(
    client: &Client,
    pool: &str,
    key: &str,
    stored: &Stored,
    mark: Option<ObjectVersion>,
) -> Result<Option<ObjectVersion>, VolumeError> {
    if let Some(known) = visible_from_listing(stored, mark) {
        return Ok(known);
    }
    let mark = mark.expect("the listing tells for the head");
    match client.get_range_as_of(pool, key, Some((0, 0)), mark).await {
        Ok((info, _)) => Ok(Some(info.version)),
        Err(ClientError::NotFound { .. }) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Rolls volume `name` back to `snap`: every data object written since is written back as
/// the snapshot sees it (under the newest snapshot's context, so other snapshots keep
/// theirs), and the size set back. Takes the volume's lock, as a writer.
pub async fn rollback(client: &Client, name: &str, snap: &str) -> Result<u64, VolumeError> {
    let options = crate::volume::OpenOptions::default();
    let volume = Volume::open(client, name, options).await?;
    let result = rollback_open(client, &volume, snap).await;
    let closed = volume.close().await;
    let changed = result?;
    closed?;
    Ok(changed)
}

async fn rollback_open(client: &Client, volume: &Volume, snap: &str) -> Result<u64, VolumeError> {
    let header = volume.header();
    let snapshot = find(&header, snap)?.clone();
    let Some(mark) = snapshot.mark.map(ObjectVersion) else {
        return Err(VolumeError::Snapshot(format!("snapshot '{snap}' is not taken yet")));
    };
    if snapshot.size > header.size {
        volume.resize(snapshot.size, false).await?;
    }
    let indices: Vec<u64> =
        stored_objects(client, &header.pool, &header.data_prefix()).await?.into_keys().collect();
    let object_size = header.object_size;
    let mut changed = 0;
    for index in indices {
        let offset = index * object_size;
        if offset >= snapshot.size {
            continue;
        }
        let len = object_size.min(snapshot.size - offset);
        let key = header.data_key(index);
        let range = Some((0, len - 1));
        let then = match client.get_range_as_of(&header.pool, &key, range, mark).await {
            Ok((_, data)) => Some(data),
            Err(ClientError::NotFound { .. }) => None,
            Err(error) => return Err(error.into()),
        };
        let now = volume.read(offset, len).await?;
        match then {
            Some(data) if data != now => volume.write(offset, data, false).await?,
            None if now.iter().any(|b| *b != 0) => volume.write_zeroes(offset, len, false).await?,
            _ => continue,
        }
        changed += 1;
    }
    if snapshot.size < header.size {
        volume.resize(snapshot.size, true).await?;
    }
    volume.flush().await?;
    Ok(changed)
}

/// Clones the protected snapshot `volume@snap` into a new volume `new` (in `pool`, default the
/// parent's): a header naming its parent, nothing copied. The parent snapshot records the
/// child first, so a crash between the two leaves a child name that does not exist (ignored
/// by the checks that name children), never a clone whose parent may be removed.
pub async fn clone(
    client: &Client,
    volume: &str,
    snap: &str,
    new: &str,
    pool: Option<&str>,
) -> Result<VolumeHeader, VolumeError> {
    validate_name(new)?;
    match find_header(client, new).await {
        Ok(_) => return Err(VolumeError::Exists(new.to_string())),
        Err(VolumeError::NotFound(_)) => {}
        Err(error) => return Err(error),
    }
    let parent = update(client, volume, |header| {
        let found = header.snapshots.iter_mut().find(|s| s.name == snap);
        let Some(found) = found else { return Err(find(header, snap).expect_err("not there")) };
        if !found.protected {
            return Err(VolumeError::Snapshot(format!(
                "snapshot '{volume}@{snap}' is not protected: `optio volume snap protect {volume}@{snap}` first (a clone's parent must stay)"
            )));
        }
        if found.mark.is_none() {
            return Err(VolumeError::Snapshot(format!("snapshot '{volume}@{snap}' is being taken")));
        }
        if !found.children.iter().any(|c| c == new) {
            found.children.push(new.to_string());
        }
        Ok(())
    })
    .await?;
    let snapshot = find(&parent, snap)?.clone();
    let header = VolumeHeader {
        format: 1,
        name: new.to_string(),
        id: format!("{:016x}", crate::volume::unique(new)),
        pool: pool.unwrap_or(&parent.pool).to_string(),
        size: snapshot.size,
        object_size: parent.object_size,
        features: vec!["thin".into()],
        created_unix_s: now_ms() / 1000,
        lock: None,
        removing: false,
        snap_seq: 0,
        snap_generation: 0,
        snapshots: Vec::new(),
        parent: Some(Parent {
            volume: volume.to_string(),
            snapshot: snap.to_string(),
            mark: snapshot.mark.expect("checked above"),
            overlap: snapshot.size,
        }),
        trim: None,
        flatten: None,
    };
    match crate::volume::create_header(client, header).await {
        Ok(header) => Ok(header),
        Err(error) => {
            let _ = forget_child(client, volume, snap, new).await;
            Err(error)
        }
    }
}

/// The children of `volume@snapshot` that exist and still read from it: a name left by a
/// clone that crashed before its header was written, or by a flatten that crashed after
/// detaching the clone but before the parent forgot it, is no clone.
async fn live_children(
    client: &Client,
    volume: &str,
    snapshot: &Snapshot,
) -> Result<Vec<String>, VolumeError> {
    let mut out = Vec::new();
    for child in &snapshot.children {
        match find_header(client, child).await {
            Ok((header, _)) => {
                let parent = header.parent.as_ref();
                if parent.is_some_and(|p| p.volume == volume && p.snapshot == snapshot.name) {
                    out.push(child.clone());
                }
            }
            Err(VolumeError::NotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(out)
}

impl Volume {
    /// Object `index`'s bytes `[within, within + n)` from the nearest ancestor that has it
    /// (none: zeros).
    pub(crate) async fn read_ancestors(
        &self,
        header: &VolumeHeader,
        index: u64,
        within: u64,
        n: u64,
    ) -> Result<Option<bytes::Bytes>, VolumeError> {
        let offset = index * header.object_size + within;
        for ancestor in self.ancestors() {
            if offset >= ancestor.overlap {
                return Ok(None);
            }
            let key = crate::volume::data_key(&ancestor.id, index);
            if let Some(data) =
                self.read_local_as_of(&ancestor.pool, &key, ancestor.mark, within, n).await
            {
                return Ok(Some(data));
            }
            let range = Some((within, within + n - 1));
            match self.client().get_range_as_of(&ancestor.pool, &key, range, ancestor.mark).await {
                Ok((_, data)) if data.len() as u64 == n => return Ok(Some(data)),
                Ok((_, data)) => {
                    return Err(VolumeError::Client(ClientError::Unreadable {
                        key,
                        failures: format!("{n} bytes asked, {} answered", data.len()),
                    }));
                }
                Err(ClientError::NotFound { .. }) => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Ok(None)
    }

    /// Makes this writer's data writes carry the header's newest snapshot.
    pub(crate) async fn follow_snapshots(&self) -> Result<(), VolumeError> {
        let header = self.header();
        let context = header.snap_context();
        self.client().set_snap_context(&header.data_prefix(), context);
        if header.snapshots.iter().any(|s| s.mark.is_none())
            || header.lock.as_ref().is_some_and(|l| l.generation_seen < header.snap_generation)
        {
            self.take_snapshots(None).await?;
        }
        Ok(())
    }

    /// One look at the header the lock holder read (`version`): takes the snapshots asked
    /// for, follows removals; whether a flatten is under way (which the lock holder carries
    /// out).
    pub(crate) async fn on_header_polled(
        &self,
        header: VolumeHeader,
        version: ObjectVersion,
    ) -> Result<bool, VolumeError> {
        let seen = header.lock.as_ref().map_or(0, |l| l.generation_seen);
        let flattening = header.parent.is_some() && header.flatten.is_some();
        if header.snap_generation > seen || header.snapshots.iter().any(|s| s.mark.is_none()) {
            self.take_snapshots(Some((header, version))).await?;
        }
        Ok(flattening)
    }

    /// With writes held off: gives every snapshot asked for its mark, records the generation
    /// seen, then makes later writes carry the newest snapshot.
    async fn take_snapshots(
        &self,
        seen: Option<(VolumeHeader, ObjectVersion)>,
    ) -> Result<(), VolumeError> {
        let started = std::time::Instant::now();
        // Writes acknowledged above the volume (a write-back cache) go in first.
        let _held = self.hold_writes().await?;
        let _quiet = self.quiesce_writes().await;
        let quiesced = started.elapsed();
        let client = self.client().clone();
        let token = self.lock_token();
        let written = self
            .update_header_seen(seen, |header| {
                let Some(lock) = header.lock.as_mut().filter(|l| l.token == token) else {
                    return Err(VolumeError::LockLost(header.name.clone()));
                };
                let floor = lock.taken_unix_ms * 1000 + VERSION_AHEAD_MAX_MICROS + 1;
                lock.generation_seen = header.snap_generation;
                for snapshot in header.snapshots.iter_mut().filter(|s| s.mark.is_none()) {
                    snapshot.mark = Some(client.version_mark().0.max(floor));
                }
                Ok(())
            })
            .await;
        written?;
        let header = self.header();
        client.set_snap_context(&header.data_prefix(), header.snap_context());
        tracing::debug!(
            volume = %header.name,
            quiesce_ms = quiesced.as_secs_f64() * 1e3,
            total_ms = started.elapsed().as_secs_f64() * 1e3,
            "snapshots taken (writes held back while the mark was recorded)"
        );
        Ok(())
    }
}

impl Volume {
    /// Tells the volume that writes are acknowledged above it before they reach it (a
    /// write-back cache, `optio nbd --write-back`): before each snapshot it calls `hold`,
    /// which writes every acknowledged byte into the volume and keeps new writes out until
    /// the guard it returns is dropped, so the snapshot holds every write acknowledged
    /// before it. A `hold` that fails fails the snapshot (taken again at the next look).
    pub fn set_hold_writes(&self, hold: crate::volume::HoldWrites) {
        *self.hold_writes.lock().expect("hold lock") = Some(hold);
    }

    /// Runs [`Volume::set_hold_writes`]'s hook, if any; its guard.
    pub(crate) async fn hold_writes(
        &self,
    ) -> Result<Option<crate::volume::HeldWrites>, VolumeError> {
        let hold = self.hold_writes.lock().expect("hold lock").clone();
        match hold {
            None => Ok(None),
            Some(hold) => hold().await.map(Some).map_err(|error| {
                VolumeError::Snapshot(format!(
                    "volume '{}': the writes its holder acknowledged could not be written \
                     before the snapshot: {error}",
                    self.name()
                ))
            }),
        }
    }
}
