//! Block volumes: a thin-provisioned range of bytes striped over objects, as RBD's images
//! and Sheepdog's VDIs are.
//!
//! A volume is a *header* object, `volume_header.{NAME}` in the volume's pool — its size,
//! object size, a unique id, features and its lock — plus *data* objects
//! `volume_data.{ID}.{INDEX:016x}`, one per `object_size` bytes, each a block object written
//! in place ([`Client::write_in_place`]) and created at its first write (CHOICE picks its
//! candidate then, by the pool's policy). A data object never written reads as zeros. Any
//! client opens a volume by name from the map alone: the header is looked up in each pool.
//!
//! One writer at a time: a read-write open takes the lock in the header — a lease, renewed
//! while held, taken over only once it has expired or with `break_lock` — by a
//! compare-and-swap of the header ([`Client::compare_and_write`]); a second read-write open
//! is refused naming the holder. Read-only opens are always allowed. A writer that loses its
//! lease (broken by another) refuses further writes.
//!
//! Writes to one data object are applied one at a time, in the order they were issued (each
//! names the version the previous one left), while writes to different objects run in
//! parallel — a queue depth becomes parallel object I/O.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::try_join_all;

use crate::{Client, ClientError, LocalFile, Patch, Written};
use optio_proto::ObjectVersion;

mod allocation;
mod as_of_files;
mod extents;
mod hold;
pub use hold::{HeldWrites, HoldWrites};
mod flattening;
mod header;
mod readers;

pub use allocation::Source;
pub use flattening::FLATTEN_RATE_DEFAULT;
pub use header::{
    Ancestor, CLONE_DEPTH_MAX, DATA_PREFIX, DEFAULT_OBJECT_SIZE, FlattenProgress, HEADER_PREFIX,
    HOLDER_POLL, HOLDER_WAIT, HolderProcess, LOCK_LEASE, LOCK_RENEW, Lock, NAME_BYTES_MAX,
    OBJECT_SIZE_MIN, Parent, Reader, Snapshot, TrimProgress, VERSION_AHEAD_MAX_MICROS, VolumeError,
    VolumeHeader, ancestors, data_key, find, header_key, validate_name, validate_sizes,
};
pub(crate) use header::{
    HEADER_BYTES, find_header, forget_child, header_when_newer, holder_is_gone, holder_name,
    now_ms, unique, update,
};

/// Creates a volume of `size` bytes in `pool`.
pub async fn create(
    client: &Client,
    name: &str,
    size: u64,
    pool: &str,
    object_size: u64,
) -> Result<VolumeHeader, VolumeError> {
    validate_name(name)?;
    validate_sizes(size, object_size)?;
    match find_header(client, name).await {
        Ok(_) => return Err(VolumeError::Exists(name.to_string())),
        Err(VolumeError::NotFound(_)) => {}
        Err(error) => return Err(error),
    }
    let header = VolumeHeader {
        format: 1,
        name: name.to_string(),
        id: format!("{:016x}", unique(name)),
        pool: pool.to_string(),
        size,
        object_size,
        features: vec!["thin".into()],
        created_unix_s: now_ms() / 1000,
        lock: None,
        removing: false,
        snap_seq: 0,
        snap_generation: 0,
        snapshots: Vec::new(),
        parent: None,
        trim: None,
        flatten: None,
    };
    create_header(client, header).await
}

/// Writes a new volume's header (the volume must not exist).
pub(crate) async fn create_header(
    client: &Client,
    header: VolumeHeader,
) -> Result<VolumeHeader, VolumeError> {
    let patch = Patch::Data(header.encode());
    let (pool, name) = (header.pool.clone(), header.name.clone());
    match client
        .write_in_place(&pool, &header_key(&name), HEADER_BYTES, 0, &patch, None, true)
        .await
    {
        Ok(_) => Ok(header),
        Err(ClientError::Exists { .. }) => Err(VolumeError::Exists(name)),
        Err(error) => Err(error.into()),
    }
}

/// Every volume, by name.
pub async fn list(client: &Client) -> Result<Vec<VolumeHeader>, VolumeError> {
    let mut out = Vec::new();
    for pool in client.map().pools() {
        if pool.erasure.is_some() {
            // Volume headers live in replicated pools only.
            continue;
        }
        for info in client.list(&pool.name, HEADER_PREFIX).await? {
            let name = &info.key[HEADER_PREFIX.len()..];
            match client.get(&pool.name, &info.key).await {
                Ok(data) => out.push(VolumeHeader::decode(name, &data)?),
                Err(ClientError::NotFound { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The data objects of a volume that are stored (allocated), by index.
pub async fn allocated(client: &Client, header: &VolumeHeader) -> Result<Vec<u64>, VolumeError> {
    let prefix = format!("{DATA_PREFIX}{}.", header.id);
    let mut out: Vec<u64> = client
        .list(&header.pool, &prefix)
        .await?
        .iter()
        .filter_map(|info| u64::from_str_radix(&info.key[prefix.len()..], 16).ok())
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// How a volume is opened.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    /// No writes; no lock taken.
    pub read_only: bool,
    /// Take the lock even if another client's lease has not expired.
    pub break_lock: bool,
    /// Read data objects that have a replica on this machine from their files (see
    /// [`Client::open_local`]): a writer's own objects, and what a clone or a snapshot reads
    /// as of a snapshot, while the file holds a version from before it.
    pub local_reads: bool,
}

/// What this client knows of one data object.
#[derive(Clone)]
enum Known {
    /// Never written (as of this writer's last look).
    Absent,
    /// Where and at which version this writer left it.
    At(Written),
}

/// One data object, as this client knows it.
#[derive(Default)]
struct ObjectState {
    /// What this writer knows of it (read-write opens only).
    known: Option<Known>,
    /// Its file, for local reads.
    local: Option<LocalSlot>,
    /// Writes of it begun by this writer: a read that found it absent records that only if
    /// no write began meanwhile.
    writes_begun: u64,
}

/// A data object's local file, or why there is none.
#[derive(Clone)]
enum LocalSlot {
    /// Open: read while it holds the version expected.
    Open(Arc<LocalFile>),
    /// No replica here could serve the version expected: not asked again before `retry`
    /// unless the version expected changes.
    Unusable { expected: Option<ObjectVersion>, retry: Instant },
}

/// How long a data object no local replica could serve is read through the servers before
/// a local replica is asked again (at the same version: a replica catching up).
const LOCAL_RETRY: Duration = Duration::from_secs(1);

/// Reads of at most this many bytes are read from a local file on the request's own task
/// (page-cache work of microseconds); larger ones on the blocking pool.
const LOCAL_INLINE_BYTES_MAX: u64 = 64 << 10;

/// The most local files one volume holds open: a quarter of the limit on open files, from 64
/// to 4,096. Past it, the files opened longest ago are closed first.
fn local_files_max() -> usize {
    let soft = optio_net::local::open_files_soft_limit().unwrap_or(u64::MAX);
    usize::try_from(soft / 4).unwrap_or(usize::MAX).clamp(64, 4096)
}

/// An open volume.
pub struct Volume {
    client: Client,
    header: Mutex<VolumeHeader>,
    header_version: Mutex<optio_proto::ObjectVersion>,
    read_only: bool,
    token: u64,
    lost: AtomicBool,
    /// Per data object: a writer's knowledge (read-write opens only), its local file, and a
    /// lock ordering its writes.
    objects: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<ObjectState>>>>,
    /// Local reads: the data objects holding a local file open, oldest first, and how many
    /// may ([`local_files_max`]; past it, the oldest are closed); `None`: local reads off.
    local_open: Option<(Mutex<VecDeque<u64>>, usize)>,
    /// Local reads as of a snapshot (a clone's ancestors, `VOL@SNAP`); `None`: local reads
    /// off.
    as_of_files: Option<as_of_files::AsOfFiles>,
    /// Devices written since the last flush.
    dirty: Mutex<BTreeSet<u32>>,
    writes: AtomicU64,
    /// Data objects read (a read spanning two objects counts two), and those read locally.
    object_reads: AtomicU64,
    local_reads: AtomicU64,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The snapshot read (`VOL@SNAP`, read-only): its mark.
    as_of: Option<ObjectVersion>,
    /// Held shared by every write, exclusively while a snapshot is taken: the snapshot's
    /// mark is then above every write acknowledged and below every write to come.
    quiesce: tokio::sync::RwLock<()>,
    /// Follows the header's snapshots while the volume is open read-write.
    watcher: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// A write-back cache above the volume ([`Volume::set_hold_writes`]): emptied before a
    /// snapshot is taken, new writes kept out until it is.
    pub(crate) hold_writes: Mutex<Option<HoldWrites>>,
    /// A clone's ancestors, nearest first: where its never-written objects read from.
    ancestors: Vec<Ancestor>,
    /// Which data objects are stored (block status).
    allocation: allocation::Allocation,
    /// The snapshot this reader is recorded as reading (volume, snapshot).
    pinned: Option<(String, String)>,
    /// A flatten runs in this writer ([`crate::flatten`]).
    pub(crate) flattening: AtomicBool,
    /// The holder's flatten task: stopped when the volume is closed (its lock released, it
    /// may not write any more).
    flattener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Volume {
    /// Opens volume `name`; read-write takes its lock (see the module).
    pub async fn open(
        client: &Client,
        name: &str,
        options: OpenOptions,
    ) -> Result<Arc<Volume>, VolumeError> {
        let (volume_name, snap_name) = match name.split_once('@') {
            Some((volume, snap)) => (volume, Some(snap)),
            None => (name, None),
        };
        let (mut header, version) = find_header(client, volume_name).await?;
        if header.removing {
            return Err(VolumeError::NotFound(volume_name.to_string()));
        }
        let ancestors = ancestors(client, &header).await?;
        let mut as_of = None;
        let mut pinned = None;
        if let Some(snap_name) = snap_name {
            let snapshot = find(&header, snap_name)?;
            if !options.read_only {
                return Err(VolumeError::Snapshot(format!(
                    "snapshot '{name}' is read-only: open it read-only (optio nbd --read-only), or clone it"
                )));
            }
            as_of = snapshot.mark.map(ObjectVersion);
            if as_of.is_none() {
                return Err(VolumeError::Snapshot(format!(
                    "snapshot '{name}' is being taken and cannot be read yet: try again in a moment"
                )));
            }
            header.size = snapshot.size;
            header.name = name.to_string();
            pinned = Some((volume_name.to_string(), snap_name.to_string()));
        }
        let volume = Arc::new(Volume {
            client: client.clone(),
            header: Mutex::new(header),
            header_version: Mutex::new(version),
            read_only: options.read_only,
            token: unique(name) | 1,
            lost: AtomicBool::new(false),
            objects: Mutex::new(HashMap::new()),
            // A read-only client knows no version to expect: it reads through the servers.
            local_open: (options.local_reads && !options.read_only)
                .then(|| (Mutex::default(), local_files_max())),
            as_of_files: options
                .local_reads
                .then(|| as_of_files::AsOfFiles::new(local_files_max())),
            dirty: Mutex::new(BTreeSet::new()),
            writes: AtomicU64::new(0),
            object_reads: AtomicU64::new(0),
            local_reads: AtomicU64::new(0),
            renewer: Mutex::new(None),
            as_of,
            quiesce: tokio::sync::RwLock::new(()),
            watcher: Mutex::new(None),
            hold_writes: Mutex::new(None),
            ancestors,
            allocation: Default::default(),
            pinned: pinned.clone(),
            flattening: AtomicBool::new(false),
            flattener: Mutex::new(None),
        });
        if let Some((volume_name, snap)) = pinned {
            // A reader of a snapshot: `snap rm` refuses while the lease runs. One that may
            // not write headers (a read-only identity) reads unpinned.
            let token = volume.token;
            if let Err(error) = readers::pin(client, &volume_name, &snap, token).await {
                match error {
                    VolumeError::Snapshot(_) | VolumeError::NotFound(_) => return Err(error),
                    error => tracing::warn!("cannot record this reader of {name}: {error}"),
                }
            }
            let weak = Arc::downgrade(&volume);
            let task = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(LOCK_RENEW).await;
                    let Some(volume) = weak.upgrade() else { return };
                    let client = volume.client.clone();
                    drop(volume);
                    if let Err(error) = readers::pin(&client, &volume_name, &snap, token).await {
                        tracing::warn!(
                            "cannot renew the reader lease of {volume_name}@{snap}: {error}"
                        );
                    }
                }
            });
            *volume.renewer.lock().expect("renewer lock") = Some(task);
        }
        if !options.read_only {
            volume.take_lock(options.break_lock).await?;
            volume.follow_snapshots().await?;
            let weak = Arc::downgrade(&volume);
            let watcher = tokio::spawn(async move {
                // The header is watched: each read is held by its server until the header
                // changes (a `snap create` asking for a snapshot, a flatten started, the
                // lock's own renewals) or about a second has passed, so a snapshot is taken
                // as soon as it is asked for. The volume is not held during the wait.
                let mut seen = ObjectVersion(0);
                loop {
                    let started = tokio::time::Instant::now();
                    let Some(volume) = weak.upgrade() else { return };
                    if volume.lost.load(Ordering::Acquire) {
                        return;
                    }
                    let (client, name) = (volume.client.clone(), volume.name());
                    let pool = volume.header().pool;
                    drop(volume);
                    let polled = header_when_newer(&client, &pool, &name, seen).await;
                    let Some(volume) = weak.upgrade() else { return };
                    if volume.lost.load(Ordering::Acquire) {
                        return;
                    }
                    let changed = match polled {
                        Ok((header, version)) => {
                            let changed = version > seen;
                            seen = version;
                            match volume.on_header_polled(header, version).await {
                                Ok(true) => volume.start_flatten_as_holder(),
                                Ok(false) => {}
                                Err(error) => {
                                    tracing::debug!(volume = %name, "snapshot poll: {error}");
                                }
                            }
                            changed
                        }
                        Err(error) => {
                            tracing::debug!(volume = %name, "snapshot poll: {error}");
                            false
                        }
                    };
                    drop(volume);
                    // A server that answered at once with nothing new (it cannot wait, data
                    // is moving, an error): the holder paces itself.
                    if !changed {
                        tokio::time::sleep_until(started + HOLDER_POLL).await;
                    }
                }
            });
            *volume.watcher.lock().expect("watcher lock") = Some(watcher);
            let weak = Arc::downgrade(&volume);
            let task = tokio::spawn(async move {
                loop {
                    tokio::time::sleep(LOCK_RENEW).await;
                    let Some(volume) = weak.upgrade() else { return };
                    if let Err(error) = volume.renew().await {
                        tracing::warn!(volume = %volume.name(), "cannot renew the lock: {error}");
                        if matches!(error, VolumeError::LockLost(_)) {
                            return;
                        }
                    }
                }
            });
            *volume.renewer.lock().expect("renewer lock") = Some(task);
        }
        Ok(volume)
    }

    /// The client it goes through.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// A clone's ancestors, nearest first.
    pub(crate) fn ancestors(&self) -> &[Ancestor] {
        &self.ancestors
    }

    /// This opener's lock token.
    pub(crate) fn lock_token(&self) -> u64 {
        self.token
    }

    /// Holds every write off until the guard goes (in-flight writes finish first).
    pub(crate) async fn quiesce_writes(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        self.quiesce.write().await
    }

    /// The header as last read or written.
    pub fn header(&self) -> VolumeHeader {
        self.header.lock().expect("header lock").clone()
    }

    /// The volume's name.
    pub fn name(&self) -> String {
        self.header().name
    }

    /// Bytes in the volume.
    pub fn size(&self) -> u64 {
        self.header().size
    }

    /// Whether writes are refused.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Data objects read since the volume was opened (a read spanning two objects counts two),
    /// and how many of those were read from a local file.
    pub fn object_reads(&self) -> (u64, u64) {
        (self.object_reads.load(Ordering::Relaxed), self.local_reads.load(Ordering::Relaxed))
    }

    /// Writes done since the volume was opened.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Replaces the header by `change(header)` with a compare-and-swap, re-reading and
    /// retrying when another client changed it.
    pub(crate) async fn update_header(
        &self,
        change: impl FnMut(&mut VolumeHeader) -> Result<(), VolumeError>,
    ) -> Result<(), VolumeError> {
        self.update_header_seen(None, change).await
    }

    /// [`Volume::update_header`], trying first from `seen`, the header and its version as
    /// just read (one read fewer when nobody wrote it since).
    pub(crate) async fn update_header_seen(
        &self,
        mut seen: Option<(VolumeHeader, ObjectVersion)>,
        mut change: impl FnMut(&mut VolumeHeader) -> Result<(), VolumeError>,
    ) -> Result<(), VolumeError> {
        let name = self.name();
        for _ in 0..8 {
            let (mut header, version) = match seen.take() {
                Some(seen) => seen,
                None => find_header(&self.client, &name).await?,
            };
            change(&mut header)?;
            if !header.fits() {
                return Err(VolumeError::Snapshot(format!(
                    "the header of volume '{name}' would outgrow its 4 KiB: remove snapshots (`optio volume snap rm`) first"
                )));
            }
            let key = header_key(&name);
            match self
                .client
                .compare_and_write(&header.pool, &key, 0, header.encode(), version)
                .await
            {
                Ok(written) => {
                    *self.header.lock().expect("header lock") = header;
                    *self.header_version.lock().expect("header lock") = written.version;
                    return Ok(());
                }
                Err(ClientError::Changed { .. }) => {
                    tokio::time::sleep(Duration::from_millis(20 + unique(&name) % 80)).await;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(VolumeError::Client(ClientError::Changed { key: header_key(&name) }))
    }

    async fn take_lock(&self, break_lock: bool) -> Result<(), VolumeError> {
        let token = self.token;
        let holder = holder_name();
        let process = HolderProcess::current();
        self.update_header(|header| {
            let now = now_ms();
            if let Some(lock) = &header.lock
                && lock.token != token
                && lock.expires_unix_ms > now
                && !break_lock
            {
                if !holder_is_gone(lock) {
                    return Err(VolumeError::Locked {
                        name: header.name.clone(),
                        holder: lock.holder.clone(),
                        expires_in_s: (lock.expires_unix_ms - now).div_ceil(1000),
                    });
                }
                tracing::info!(
                    volume = %header.name,
                    "taking the lock of {}, which is no longer running on this machine",
                    lock.holder
                );
            }
            header.lock = Some(Lock {
                holder: holder.clone(),
                token,
                expires_unix_ms: now + LOCK_LEASE.as_millis() as u64,
                process: process.clone(),
                taken_unix_ms: now,
                generation_seen: header.snap_generation,
            });
            Ok(())
        })
        .await
    }

    async fn renew(&self) -> Result<(), VolumeError> {
        let token = self.token;
        let result = self
            .update_header(|header| match &mut header.lock {
                Some(lock) if lock.token == token => {
                    lock.expires_unix_ms = now_ms() + LOCK_LEASE.as_millis() as u64;
                    Ok(())
                }
                _ => Err(VolumeError::LockLost(header.name.clone())),
            })
            .await;
        if matches!(result, Err(VolumeError::LockLost(_))) {
            self.lost.store(true, Ordering::Release);
        }
        result
    }

    /// Flushes, releases the lock and stops renewing it.
    pub async fn close(&self) -> Result<(), VolumeError> {
        if let Some(task) = self.renewer.lock().expect("renewer lock").take() {
            task.abort();
        }
        if let Some(task) = self.watcher.lock().expect("watcher lock").take() {
            task.abort();
        }
        if let Some(task) = self.flattener.lock().expect("flattener lock").take() {
            task.abort();
        }
        if let Some((volume, snap)) = &self.pinned {
            return match readers::unpin(&self.client, volume, snap, self.token).await {
                Ok(()) | Err(VolumeError::NotFound(_)) => Ok(()),
                Err(error) => Err(error),
            };
        }
        if self.read_only || self.lost.load(Ordering::Acquire) {
            return Ok(());
        }
        self.flush().await?;
        let token = self.token;
        self.update_header(|header| {
            if header.lock.as_ref().is_some_and(|l| l.token == token) {
                header.lock = None;
            }
            Ok(())
        })
        .await
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<VolumeHeader, VolumeError> {
        let header = self.header();
        if offset.checked_add(len).is_none_or(|end| end > header.size) {
            return Err(VolumeError::OutOfRange {
                name: header.name,
                offset,
                len,
                size: header.size,
            });
        }
        Ok(header)
    }

    fn check_writable(&self) -> Result<(), VolumeError> {
        if self.read_only {
            return Err(VolumeError::ReadOnly(self.name()));
        }
        if self.lost.load(Ordering::Acquire) {
            return Err(VolumeError::LockLost(self.name()));
        }
        Ok(())
    }

    fn object(&self, index: u64) -> Arc<tokio::sync::Mutex<ObjectState>> {
        self.objects.lock().expect("objects lock").entry(index).or_default().clone()
    }

    /// `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes, VolumeError> {
        let header = self.check_range(offset, len)?;
        let pieces = split(offset, len, header.object_size);
        let reads = pieces.iter().map(|&(index, within, n)| {
            let header = &header;
            async move {
                self.object_reads.fetch_add(1, Ordering::Relaxed);
                if !self.read_only {
                    let object = self.object(index);
                    let (known, slot, writes_begun) = {
                        let state = object.lock().await;
                        (state.known.clone(), state.local.clone(), state.writes_begun)
                    };
                    let known = match known {
                        // This writer knows the objects it never wrote, and sends no probe.
                        Some(Known::Absent) => return Ok::<_, VolumeError>(None),
                        Some(Known::At(written)) => Some(written),
                        None => None,
                    };
                    let unknown = known.is_none();
                    let read = self.read_local(header, index, &object, slot, known, within, n);
                    if let Some(data) = read.await {
                        self.local_reads.fetch_add(1, Ordering::Relaxed);
                        return Ok(Some(data));
                    }
                    let key = header.data_key(index);
                    let read = self.client.read_in_place(&header.pool, &key, within, n).await?;
                    if read.is_none() && unknown {
                        // Not stored: this writer (the only one) knows it from now on, until
                        // it writes it — unless a write of it began meanwhile.
                        let mut state = object.lock().await;
                        if state.known.is_none() && state.writes_begun == writes_begun {
                            state.known = Some(Known::Absent);
                        }
                    }
                    return Ok(read);
                }
                if let Some(mark) = self.as_of {
                    let range = Some((within, within + n - 1));
                    let key = header.data_key(index);
                    if let Some(data) =
                        self.read_local_as_of(&header.pool, &key, mark, within, n).await
                    {
                        return Ok(Some(data));
                    }
                    return match self.client.get_range_as_of(&header.pool, &key, range, mark).await
                    {
                        Ok((_, data)) if data.len() as u64 == n => Ok(Some(data)),
                        Ok((_, data)) => Err(VolumeError::Client(ClientError::Unreadable {
                            key,
                            failures: format!("{n} bytes asked, {} answered", data.len()),
                        })),
                        Err(ClientError::NotFound { .. }) => Ok(None),
                        Err(error) => Err(error.into()),
                    };
                }
                Ok(self
                    .client
                    .read_in_place(&header.pool, &header.data_key(index), within, n)
                    .await?)
            }
        });
        let mut parts = try_join_all(reads).await?;
        if !self.ancestors.is_empty() {
            for (part, &(index, within, n)) in parts.iter_mut().zip(&pieces) {
                if part.is_none() {
                    *part = self.read_ancestors(&header, index, within, n).await?;
                }
            }
        }
        if let [Some(_)] = parts.as_slice() {
            // One object's bytes: as they came, not copied.
            return Ok(parts.pop().flatten().expect("one part"));
        }
        let mut out = BytesMut::with_capacity(len as usize);
        for (part, (_, _, n)) in parts.into_iter().zip(&pieces) {
            match part {
                Some(data) => out.extend_from_slice(&data),
                None => out.resize(out.len() + *n as usize, 0),
            }
        }
        Ok(out.freeze())
    }

    /// Writes `data` at `offset` (durable on every replica before answering with `fua`).
    pub async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), VolumeError> {
        self.check_writable()?;
        let _quiesce = self.quiesce.read().await;
        let header = self.check_range(offset, data.len() as u64)?;
        let pieces = split(offset, data.len() as u64, header.object_size);
        let mut at = 0usize;
        let writes = pieces.iter().map(|&(index, within, n)| {
            let part = data.slice(at..at + n as usize);
            at += n as usize;
            self.write_object(&header, index, within, Patch::Data(part), fua)
        });
        try_join_all(writes).await?;
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes `len` zero bytes at `offset` (whole blocks freed; objects never written stay
    /// unwritten).
    pub async fn write_zeroes(&self, offset: u64, len: u64, fua: bool) -> Result<(), VolumeError> {
        self.check_writable()?;
        let _quiesce = self.quiesce.read().await;
        let header = self.check_range(offset, len)?;
        let pieces = split(offset, len, header.object_size);
        let writes = pieces.iter().map(|&(index, within, n)| {
            self.write_object(&header, index, within, Patch::Zeroes(n), fua)
        });
        try_join_all(writes).await?;
        Ok(())
    }

    /// Makes a clone's object `index` its own, copied whole from its ancestors, if it still
    /// reads from them; whether it copied. Under the object's lock, as a write is: a write of
    /// the object racing it either comes first (and copies up itself) or after.
    pub(crate) async fn copy_up(&self, index: u64) -> Result<bool, VolumeError> {
        self.check_writable()?;
        let _quiesce = self.quiesce.read().await;
        let header = self.header();
        if self.ancestors.is_empty() || index >= header.objects() {
            return Ok(false);
        }
        let object = self.object(index);
        let mut state = object.lock().await;
        if matches!(state.known, Some(Known::At(_))) {
            return Ok(false);
        }
        state.writes_begun += 1;
        let key = header.data_key(index);
        match self.client.stat(&header.pool, &key).await {
            Ok(_) => return Ok(false),
            Err(ClientError::NotFound { .. }) => {}
            Err(error) => return Err(error.into()),
        }
        let size = header.object_size;
        let Some(parent) = self.read_ancestors(&header, index, 0, size).await? else {
            state.known = Some(Known::Absent);
            return Ok(false);
        };
        self.allocation.writing(index);
        let patch = Patch::Data(parent);
        match self.client.write_in_place(&header.pool, &key, size, 0, &patch, None, false).await {
            Ok(written) => {
                self.dirty.lock().expect("dirty lock").extend(written.devices.iter().copied());
                state.known = Some(Known::At(written));
                Ok(true)
            }
            Err(error) => {
                state.known = None;
                state.local = None;
                Err(error.into())
            }
        }
    }

    async fn write_object(
        &self,
        header: &VolumeHeader,
        index: u64,
        within: u64,
        patch: Patch,
        fua: bool,
    ) -> Result<(), VolumeError> {
        let object = self.object(index);
        let mut state = object.lock().await;
        state.writes_begun += 1;
        let known = &mut state.known;
        let key = header.data_key(index);
        // Every data object is object_size bytes, the last one too (its bytes past the end
        // of the volume are never addressed), so that resizing rewrites no object.
        let size = header.object_size;
        let mut patch = patch;
        let mut within = within;
        if !self.ancestors.is_empty() && !matches!(known, Some(Known::At(_))) {
            let absent = match known {
                Some(Known::Absent) => true,
                _ => match self.client.stat(&header.pool, &key).await {
                    Err(ClientError::NotFound { .. }) => true,
                    Err(error) => return Err(error.into()),
                    Ok(_) => false,
                },
            };
            if absent && let Some(parent) = self.read_ancestors(header, index, 0, size).await? {
                // Copy-up: the object is created whole, from the parent's, with the write in.
                let mut whole = parent.to_vec();
                let range = within as usize..(within + patch.len()) as usize;
                match &patch {
                    Patch::Data(data) => whole[range].copy_from_slice(data),
                    Patch::Zeroes(_) => whole[range].fill(0),
                }
                patch = Patch::Data(Bytes::from(whole));
                within = 0;
                *known = None;
            } else if absent {
                *known = Some(Known::Absent);
            }
        }
        if let Patch::Zeroes(_) = patch {
            // Zeroes on an object never written change nothing.
            if matches!(known, Some(Known::Absent)) {
                return Ok(());
            }
            if known.is_none() {
                match self.client.stat(&header.pool, &key).await {
                    Err(ClientError::NotFound { .. }) => {
                        *known = Some(Known::Absent);
                        return Ok(());
                    }
                    Err(error) => return Err(error.into()),
                    Ok(_) => {}
                }
            }
        }
        let previous = match known {
            Some(Known::At(written)) => Some(written.clone()),
            _ => None,
        };
        if previous.is_none() {
            // Noted once per object: an object this writer already wrote (`Known::At`) is
            // noted since then.
            self.allocation.writing(index);
        }
        let result = self
            .client
            .write_in_place(&header.pool, &key, size, within, &patch, previous.as_ref(), fua)
            .await;
        match result {
            Ok(written) => {
                self.dirty.lock().expect("dirty lock").extend(written.devices.iter().copied());
                *known = Some(Known::At(written));
                Ok(())
            }
            Err(error) => {
                // Some replicas may hold the write: look again next time, and read through
                // the servers until then (the local file's version may be either).
                *known = None;
                state.local = None;
                Err(error.into())
            }
        }
    }

    /// Object `index`'s bytes `[within, within + n)` from its local file, if a replica on this
    /// machine holds the version this writer expects — `known`, what its last write left, or
    /// with none, the version the object's primary replica had when it was opened (only the
    /// primary is opened then, the replica a read through the servers reads first; this writer
    /// has not written the object since, and no other may). `slot` is the object's local file
    /// as read with `known`. `None`: read through the servers.
    #[allow(clippy::too_many_arguments)]
    async fn read_local(
        &self,
        header: &VolumeHeader,
        index: u64,
        object: &Arc<tokio::sync::Mutex<ObjectState>>,
        slot: Option<LocalSlot>,
        known: Option<Written>,
        within: u64,
        n: u64,
    ) -> Option<Bytes> {
        let (open, max) = self.local_open.as_ref()?;
        let expected = known.as_ref().map(|written| written.version);
        let key = header.data_key(index);
        let file = match slot {
            // A new map may have moved the object: open it again where it is now.
            Some(LocalSlot::Open(file)) if file.epoch == self.client.epoch() => file,
            Some(LocalSlot::Unusable { expected: then, retry })
                if then == expected && Instant::now() < retry =>
            {
                return None;
            }
            _ => {
                let devices = known.as_ref().map(|written| written.devices.as_slice());
                let opened = self.client.open_local(&header.pool, &key, devices).await;
                let usable = opened
                    .filter(|file| expected.is_none_or(|version| version == file.version))
                    .map(Arc::new);
                let mut state = object.lock().await;
                let now_expected = match &state.known {
                    Some(Known::At(written)) => Some(written.version),
                    Some(Known::Absent) => return None,
                    None => None,
                };
                if now_expected != expected {
                    return None; // written meanwhile: the next read looks again
                }
                state.local = Some(match &usable {
                    Some(file) => LocalSlot::Open(file.clone()),
                    None => LocalSlot::Unusable { expected, retry: Instant::now() + LOCAL_RETRY },
                });
                drop(state);
                if usable.is_some() {
                    self.close_oldest_local(open, *max, index);
                }
                usable?
            }
        };
        let version = expected.unwrap_or(file.version);
        let read = if n <= LOCAL_INLINE_BYTES_MAX {
            file.read(&key, version, within, n)
        } else {
            let (file, key) = (file.clone(), key.clone());
            tokio::task::spawn_blocking(move || file.read(&key, version, within, n)).await.ok()?
        };
        match read {
            Ok(data) => Some(Bytes::from(data)),
            Err(miss) => {
                tracing::debug!(key, %miss, "local read missed: read through the servers");
                let mut state = object.lock().await;
                if matches!(&state.local, Some(LocalSlot::Open(f)) if Arc::ptr_eq(f, &file)) {
                    state.local = None;
                }
                None
            }
        }
    }

    /// `n` bytes at `within` of `key` as of the snapshot `mark`, from a replica's file on this
    /// machine if one holds a version below the mark (see [`as_of_files`]); `None`: read
    /// through the servers.
    pub(crate) async fn read_local_as_of(
        &self,
        pool: &str,
        key: &str,
        mark: ObjectVersion,
        within: u64,
        n: u64,
    ) -> Option<Bytes> {
        use as_of_files::Lookup;
        let files = self.as_of_files.as_ref()?;
        let file = match files.lookup(key, self.client.epoch()) {
            Lookup::Open(file) => file,
            Lookup::Unusable => return None,
            Lookup::Ask => {
                let opened = self.client.open_local(pool, key, None).await;
                let usable = opened.filter(|file| file.version < mark).map(Arc::new);
                files.opened(key, usable.clone());
                usable?
            }
        };
        let version = file.version;
        let read = if n <= LOCAL_INLINE_BYTES_MAX {
            file.read(key, version, within, n)
        } else {
            let (file, key) = (file.clone(), key.to_string());
            tokio::task::spawn_blocking(move || file.read(&key, version, within, n)).await.ok()?
        };
        match read {
            Ok(data) => {
                self.local_reads.fetch_add(1, Ordering::Relaxed);
                Some(Bytes::from(data))
            }
            Err(miss) => {
                tracing::debug!(key, %miss, "local read as of a snapshot missed: read through the servers");
                files.missed(key, &file);
                None
            }
        }
    }

    /// Notes that object `index` holds a local file open, and closes the files opened longest
    /// ago while more than `max` are (those of objects being written stay open).
    fn close_oldest_local(&self, open: &Mutex<VecDeque<u64>>, max: usize, index: u64) {
        let mut open = open.lock().expect("local files lock");
        open.push_back(index);
        let mut tries = open.len();
        while open.len() > max && tries > 0 {
            tries -= 1;
            let Some(oldest) = open.pop_front() else { break };
            let object = self.objects.lock().expect("objects lock").get(&oldest).cloned();
            let Some(object) = object else { continue };
            match object.try_lock() {
                Ok(mut state) => state.local = None,
                Err(_) => open.push_back(oldest),
            }
        }
    }

    /// Makes every write acknowledged so far durable on every replica.
    pub async fn flush(&self) -> Result<(), VolumeError> {
        let devices: Vec<u32> =
            std::mem::take(&mut *self.dirty.lock().expect("dirty lock")).into_iter().collect();
        if devices.is_empty() {
            return Ok(());
        }
        let pool = self.header().pool;
        if let Err(error) = self.client.sync_devices(&pool, &devices).await {
            self.dirty.lock().expect("dirty lock").extend(devices);
            return Err(error.into());
        }
        Ok(())
    }

    /// Changes the volume's size: growing adds zeros; shrinking (only with `allow_shrink`)
    /// discards what lies beyond, deleting the objects past the new end.
    pub async fn resize(&self, size: u64, allow_shrink: bool) -> Result<(), VolumeError> {
        self.check_writable()?;
        let old = self.header();
        validate_sizes(size, old.object_size)?;
        if size < old.size && !allow_shrink {
            return Err(VolumeError::WouldShrink { size, current: old.size });
        }
        if size < old.size {
            // Zero the tail of the last object kept (a later growth reads zeros there), then
            // delete the objects past the end.
            let keep = size.div_ceil(old.object_size);
            let tail = size % old.object_size;
            if tail != 0 {
                let end = (keep * old.object_size).min(old.size);
                self.write_zeroes(size, end - size, true).await?;
            }
            for index in allocated(&self.client, &old).await? {
                if index >= keep {
                    delete_data(&self.client, &old, index).await?;
                    self.objects.lock().expect("objects lock").remove(&index);
                }
            }
        }
        self.update_header(|header| {
            header.size = size;
            Ok(())
        })
        .await
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        if let Some(task) = self.renewer.lock().expect("renewer lock").take() {
            task.abort();
        }
        if let Some(task) = self.watcher.lock().expect("watcher lock").take() {
            task.abort();
        }
    }
}

async fn delete_data(
    client: &Client,
    header: &VolumeHeader,
    index: u64,
) -> Result<(), VolumeError> {
    match client.delete(&header.pool, &header.data_key(index)).await {
        Ok(()) | Err(ClientError::NotFound { .. }) => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Now, in Unix seconds.
pub fn now_unix_s() -> u64 {
    now_ms() / 1000
}

/// How a removal went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    /// The volume is gone: the data objects deleted.
    Now(u64),
    /// The volume had snapshots: it is marked removed (it cannot be opened, and its name is
    /// taken until the end), and its data and the snapshots' copies are deleted by a
    /// background job ([`crate::trim`]).
    InBackground,
}

/// Removes a volume: marks it being removed, deletes every data object, then the header. A
/// removal that stops half-way is finished by running it again. A volume open read-write
/// elsewhere is refused unless `break_lock`. A volume with snapshots (none with clones) is
/// marked, its snapshots dropped, and the rest left to a background job.
pub async fn remove(client: &Client, name: &str, break_lock: bool) -> Result<Removed, VolumeError> {
    let (header, version) = find_header(client, name).await?;
    let protected: Vec<String> = header
        .snapshots
        .iter()
        .filter(|s| s.protected)
        .map(|s| format!("{name}@{}", s.name))
        .collect();
    if !protected.is_empty() {
        return Err(VolumeError::Snapshot(format!(
            "volume '{name}' has protected snapshots ({}): unprotect them first (`optio volume snap unprotect`)",
            protected.join(", ")
        )));
    }
    let mut cloned = Vec::new();
    for snapshot in &header.snapshots {
        for child in &snapshot.children {
            match find_header(client, child).await {
                Ok(_) => cloned.push(format!("{name}@{} (clone {child})", snapshot.name)),
                Err(VolumeError::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
        }
    }
    if !cloned.is_empty() {
        return Err(VolumeError::Snapshot(format!(
            "volume '{name}' has snapshots with clones: {}; flatten or remove the clones first",
            cloned.join(", ")
        )));
    }
    let now = now_ms();
    if let Some(lock) = &header.lock
        && lock.expires_unix_ms > now
        && !break_lock
        && !header.removing
        && !holder_is_gone(lock)
    {
        return Err(VolumeError::Locked {
            name: name.to_string(),
            holder: lock.holder.clone(),
            expires_in_s: (lock.expires_unix_ms - now).div_ceil(1000),
        });
    }
    if header.trim.is_some() && header.removing {
        return Ok(Removed::InBackground);
    }
    let background = !header.snapshots.is_empty() || header.trim.is_some();
    if !header.removing || background {
        let mut marked = header.clone();
        marked.removing = true;
        marked.lock = None;
        if background {
            marked.snapshots.clear();
            marked.snap_generation += 1;
            marked.ask_trim();
        }
        client
            .compare_and_write(&header.pool, &header_key(name), 0, marked.encode(), version)
            .await?;
    }
    if background {
        return Ok(Removed::InBackground);
    }
    finish_removal(client, &header).await.map(Removed::Now)
}

/// Deletes a volume marked removed: its data objects, then its header; then its parent
/// snapshot forgets it. How many data objects were deleted.
pub(crate) async fn finish_removal(
    client: &Client,
    header: &VolumeHeader,
) -> Result<u64, VolumeError> {
    let name = &header.name;
    let mut removed = 0;
    for index in allocated(client, header).await? {
        delete_data(client, header, index).await?;
        removed += 1;
    }
    match client.delete(&header.pool, &header_key(name)).await {
        Ok(()) | Err(ClientError::NotFound { .. }) => {}
        Err(error) => return Err(error.into()),
    }
    if let Some(parent) = &header.parent {
        match forget_child(client, &parent.volume, &parent.snapshot, name).await {
            Ok(()) | Err(VolumeError::NotFound(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(removed)
}

/// Splits `[offset, offset + len)` into (object index, offset within it, length) pieces.
pub fn split(offset: u64, len: u64, object_size: u64) -> Vec<(u64, u64, u64)> {
    let mut out = Vec::new();
    let mut at = offset;
    let end = offset + len;
    while at < end {
        let index = at / object_size;
        let within = at % object_size;
        let n = (object_size - within).min(end - at);
        out.push((index, within, n));
        at += n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::header::{parse_stat, read_stat};
    use super::*;

    #[test]
    fn requests_split_at_object_boundaries() {
        assert_eq!(split(0, 10, 4), vec![(0, 0, 4), (1, 0, 4), (2, 0, 2)]);
        assert_eq!(split(5, 2, 4), vec![(1, 1, 2)]);
        assert_eq!(split(3, 2, 4), vec![(0, 3, 1), (1, 0, 1)]);
        assert!(split(3, 0, 4).is_empty());
    }

    #[test]
    fn names_and_sizes_are_checked() {
        assert!(validate_name("vm-1.disk_0").is_ok());
        for bad in ["", ".x", "a/b", "a b", &"x".repeat(201)] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        assert!(validate_sizes(1 << 30, 4 << 20).is_ok());
        assert!(validate_sizes(0, 4 << 20).is_err());
        assert!(validate_sizes(1000, 4 << 20).is_err());
        assert!(validate_sizes(1 << 30, 3 << 20).is_err());
        assert!(validate_sizes(1 << 30, 128 << 20).is_err());
    }

    /// A `/proc/PID/stat` line with a command name holding spaces and parentheses.
    fn stat_line(state: char, start_ticks: u64) -> String {
        let middle = (4..=21).map(|i| i.to_string()).collect::<Vec<_>>().join(" ");
        format!("4242 (optio (nbd) x) {state} {middle} {start_ticks} 23 24 25")
    }

    #[test]
    fn a_holder_is_gone_only_when_this_machine_says_so() {
        assert_eq!(parse_stat(&stat_line('S', 777)), Some(('S', 777)));
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
        let here = HolderProcess {
            boot_id: "boot-a".into(),
            pid_namespace: "pid:[1]".into(),
            pid: 100,
            start_ticks: 5,
        };
        let holder = HolderProcess { pid: 4242, start_ticks: 777, ..here.clone() };
        let missing = |_| Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        let denied = |_| Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        let running = |_| Ok(stat_line('S', 777));
        // Here, and its pid is not running, or runs another process, or is a zombie: gone.
        assert!(holder.is_gone(&here, missing));
        assert!(holder.is_gone(&here, |_| Ok(stat_line('R', 778))));
        assert!(holder.is_gone(&here, |_| Ok(stat_line('Z', 777))));
        // Still running, or its state unreadable: not known to be gone.
        assert!(!holder.is_gone(&here, running));
        assert!(!holder.is_gone(&here, denied));
        assert!(!holder.is_gone(&here, |_| Ok("garbage".to_string())));
        // Another machine (or boot), or another pid namespace: its lease holds, whatever this
        // machine's pid says.
        let elsewhere = HolderProcess { boot_id: "boot-b".into(), ..holder.clone() };
        assert!(!elsewhere.is_gone(&here, missing));
        let container = HolderProcess { pid_namespace: "pid:[2]".into(), ..holder.clone() };
        assert!(!container.is_gone(&here, missing));
    }

    #[test]
    fn this_process_is_running_and_its_record_says_so() {
        let here = HolderProcess::current().expect("Linux's /proc");
        assert_eq!(here.pid, std::process::id());
        assert_eq!(here.boot_id.len(), 36, "{here:?}");
        assert!(!here.is_gone(&here, read_stat));
        // A pid reused by another process: this one, but started at another time.
        let reused = HolderProcess { start_ticks: here.start_ticks + 1, ..here.clone() };
        assert!(reused.is_gone(&here, read_stat));
    }

    #[test]
    fn headers_without_a_holder_process_still_decode() {
        let mut json = serde_json::json!({
            "format": 1, "name": "v", "id": "0123456789abcdef", "pool": "data",
            "size": 1 << 20, "object_size": 4 << 20, "features": ["thin"], "created_unix_s": 1,
            "lock": {"holder": "h pid 1", "token": 3, "expires_unix_ms": 9},
        })
        .to_string()
        .into_bytes();
        json.resize(HEADER_BYTES as usize, b' ');
        let header = VolumeHeader::decode("v", &json).expect("an older header");
        let lock = header.lock.expect("its lock");
        assert_eq!(lock.process, None);
        assert!(!holder_is_gone(&lock), "a lock without a process waits for its lease");
    }

    #[test]
    fn headers_fit_their_object_and_round_trip() {
        let header = VolumeHeader {
            format: 1,
            name: "x".repeat(NAME_BYTES_MAX),
            id: "0123456789abcdef".into(),
            pool: "p".repeat(100),
            size: u64::MAX,
            object_size: 4 << 20,
            features: vec!["thin".into()],
            created_unix_s: 1,
            lock: Some(Lock {
                holder: "h".repeat(300),
                token: u64::MAX,
                expires_unix_ms: u64::MAX,
                process: Some(HolderProcess {
                    boot_id: "b".repeat(36),
                    pid_namespace: "pid:[4026531836]".into(),
                    pid: u32::MAX,
                    start_ticks: u64::MAX,
                }),
                taken_unix_ms: u64::MAX,
                generation_seen: u64::MAX,
            }),
            removing: true,
            snap_seq: u64::MAX,
            snap_generation: u64::MAX,
            snapshots: Vec::new(),
            parent: None,
            trim: Some(TrimProgress { generation: u64::MAX, next: u64::MAX, ..Default::default() }),
            flatten: Some(FlattenProgress {
                objects: 3,
                by: Some("h".into()),
                ..Default::default()
            }),
        };
        let bytes = header.encode();
        assert_eq!(bytes.len() as u64, HEADER_BYTES);
        assert_eq!(VolumeHeader::decode("x", &bytes).unwrap(), header);
        assert!(VolumeHeader::decode("x", b"{not json").is_err());
    }
}
