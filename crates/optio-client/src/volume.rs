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

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures_util::future::try_join_all;
use serde::{Deserialize, Serialize};

use crate::{Client, ClientError, Patch, Written};

/// The header object's size: a block object, so that its lock is taken by compare-and-swap.
const HEADER_BYTES: u64 = 4096;
/// The prefix of header keys.
pub const HEADER_PREFIX: &str = "volume_header.";
/// The prefix of data keys.
pub const DATA_PREFIX: &str = "volume_data.";
/// The default object size (4 MiB, as RBD's).
pub const DEFAULT_OBJECT_SIZE: u64 = 4 << 20;
/// The smallest object size.
pub const OBJECT_SIZE_MIN: u64 = 4096;
/// The longest volume name.
pub const NAME_BYTES_MAX: usize = 200;
/// How long a lock lasts unless renewed.
pub const LOCK_LEASE: Duration = Duration::from_secs(30);
/// How often a held lock is renewed.
pub const LOCK_RENEW: Duration = Duration::from_secs(10);

/// Why a volume operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// No volume of that name.
    #[error("no volume '{0}'; `optio volume ls` lists them")]
    NotFound(String),
    /// A volume of that name exists.
    #[error("a volume '{0}' exists already; pick another name or `optio volume rm` it")]
    Exists(String),
    /// The name cannot be used.
    #[error(
        "bad volume name '{0}': use 1 to {NAME_BYTES_MAX} letters, digits, '-', '_' or '.', not starting with '.'"
    )]
    BadName(String),
    /// A size or object size that cannot be used.
    #[error("{0}")]
    BadSize(String),
    /// Another client holds the volume open read-write.
    #[error(
        "volume '{name}' is open read-write by {holder} (lease for {expires_in_s} s more): open it read-only, stop that client, or pass --break-lock if it is gone"
    )]
    Locked {
        /// Volume.
        name: String,
        /// Who holds it.
        holder: String,
        /// Seconds left on its lease.
        expires_in_s: u64,
    },
    /// This writer's lock was broken by another client: it writes no more.
    #[error(
        "the lock on volume '{0}' was taken over by another client; this one writes no more (reopen it)"
    )]
    LockLost(String),
    /// A write to a volume opened read-only.
    #[error("volume '{0}' is open read-only")]
    ReadOnly(String),
    /// A request beyond the end of the volume.
    #[error("{len} bytes at offset {offset} are beyond the end of volume '{name}' ({size} bytes)")]
    OutOfRange {
        /// Volume.
        name: String,
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// The volume's size.
        size: u64,
    },
    /// The header cannot be read.
    #[error("the header of volume '{name}' is damaged: {reason}")]
    BadHeader {
        /// Volume.
        name: String,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// A volume's lock: who holds it and until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// The holder, for people (`host pid N`).
    pub holder: String,
    /// A number only the holder knows.
    pub token: u64,
    /// When the lease ends (Unix milliseconds).
    pub expires_unix_ms: u64,
}

/// What a volume's header holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeHeader {
    /// Header format.
    pub format: u32,
    /// Name.
    pub name: String,
    /// Unique id (hex), naming the data objects.
    pub id: String,
    /// The pool of the header and data objects.
    pub pool: String,
    /// Bytes in the volume.
    pub size: u64,
    /// Bytes per data object.
    pub object_size: u64,
    /// Features (`thin`: never-written objects read as zeros, and are not stored).
    pub features: Vec<String>,
    /// Creation time (Unix seconds).
    pub created_unix_s: u64,
    /// The read-write lock, if held.
    pub lock: Option<Lock>,
    /// A removal in progress: the data objects are being deleted.
    #[serde(default)]
    pub removing: bool,
}

impl VolumeHeader {
    /// The key of data object `index`.
    pub fn data_key(&self, index: u64) -> String {
        data_key(&self.id, index)
    }

    /// Data objects the volume spans.
    pub fn objects(&self) -> u64 {
        self.size.div_ceil(self.object_size)
    }

    /// The header object's bytes (JSON, padded to 4 KiB).
    pub fn encode(&self) -> Bytes {
        let mut json = serde_json::to_vec(self).expect("headers serialize");
        json.resize(HEADER_BYTES as usize, b' ');
        Bytes::from(json)
    }

    /// Parses a header object's bytes (volume `name`'s, for messages).
    pub fn decode(name: &str, bytes: &[u8]) -> Result<VolumeHeader, VolumeError> {
        let header: VolumeHeader = serde_json::from_slice(bytes)
            .map_err(|e| VolumeError::BadHeader { name: name.into(), reason: e.to_string() })?;
        if header.object_size < OBJECT_SIZE_MIN || !header.object_size.is_power_of_two() {
            return Err(VolumeError::BadHeader {
                name: name.into(),
                reason: format!("object size {} is not a power of two", header.object_size),
            });
        }
        Ok(header)
    }
}

/// The key of data object `index` of the volume with id `id`.
pub fn data_key(id: &str, index: u64) -> String {
    format!("{DATA_PREFIX}{id}.{index:016x}")
}

/// The key of the header of volume `name`.
pub fn header_key(name: &str) -> String {
    format!("{HEADER_PREFIX}{name}")
}

/// Checks a volume name.
pub fn validate_name(name: &str) -> Result<(), VolumeError> {
    let ok = !name.is_empty()
        && name.len() <= NAME_BYTES_MAX
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok { Ok(()) } else { Err(VolumeError::BadName(name.to_string())) }
}

/// Checks a volume size and object size.
pub fn validate_sizes(size: u64, object_size: u64) -> Result<(), VolumeError> {
    let max = optio_proto::blocks::BLOCK_OBJECT_BYTES_MAX;
    if !object_size.is_power_of_two() || !(OBJECT_SIZE_MIN..=max).contains(&object_size) {
        return Err(VolumeError::BadSize(format!(
            "object size {object_size} is not a power of two from 4KiB to {}MiB",
            max >> 20
        )));
    }
    if size == 0 || !size.is_multiple_of(512) {
        return Err(VolumeError::BadSize(format!(
            "volume size {size} is not a positive multiple of 512 bytes"
        )));
    }
    Ok(())
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn unique(seed: &str) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let text = format!("{seed}/{nanos}/{}/{:p}", std::process::id(), &nanos);
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

fn holder_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host} pid {}", std::process::id())
}

/// Reads a volume's header and its version: looked up in every pool.
async fn find_header(
    client: &Client,
    name: &str,
) -> Result<(VolumeHeader, optio_proto::ObjectVersion), VolumeError> {
    validate_name(name)?;
    let key = header_key(name);
    for pool in client.map().pools() {
        match client.get_range(&pool.name, &key, None).await {
            Ok((info, data)) => {
                let header = VolumeHeader::decode(name, &data)?;
                return Ok((header, info.version));
            }
            Err(ClientError::NotFound { .. }) => continue,
            Err(error) => return Err(error.into()),
        }
    }
    Err(VolumeError::NotFound(name.to_string()))
}

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
    };
    let patch = Patch::Data(header.encode());
    match client.write_in_place(pool, &header_key(name), HEADER_BYTES, 0, &patch, None, true).await
    {
        Ok(_) => Ok(header),
        Err(ClientError::Exists { .. }) => Err(VolumeError::Exists(name.to_string())),
        Err(error) => Err(error.into()),
    }
}

/// Every volume, by name.
pub async fn list(client: &Client) -> Result<Vec<VolumeHeader>, VolumeError> {
    let mut out = Vec::new();
    for pool in client.map().pools() {
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
}

/// What this client knows of one data object.
#[derive(Clone)]
enum Known {
    /// Never written (as of this writer's last look).
    Absent,
    /// Where and at which version this writer left it.
    At(Written),
}

/// An open volume.
pub struct Volume {
    client: Client,
    header: Mutex<VolumeHeader>,
    header_version: Mutex<optio_proto::ObjectVersion>,
    read_only: bool,
    token: u64,
    lost: AtomicBool,
    /// Per data object: a writer's knowledge (read-write opens only) and a lock ordering its
    /// writes.
    objects: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<Option<Known>>>>>,
    /// Devices written since the last flush.
    dirty: Mutex<BTreeSet<u32>>,
    writes: AtomicU64,
    renewer: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Volume {
    /// Opens volume `name`; read-write takes its lock (see the module).
    pub async fn open(
        client: &Client,
        name: &str,
        options: OpenOptions,
    ) -> Result<Arc<Volume>, VolumeError> {
        let (header, version) = find_header(client, name).await?;
        if header.removing {
            return Err(VolumeError::NotFound(name.to_string()));
        }
        let volume = Arc::new(Volume {
            client: client.clone(),
            header: Mutex::new(header),
            header_version: Mutex::new(version),
            read_only: options.read_only,
            token: unique(name) | 1,
            lost: AtomicBool::new(false),
            objects: Mutex::new(HashMap::new()),
            dirty: Mutex::new(BTreeSet::new()),
            writes: AtomicU64::new(0),
            renewer: Mutex::new(None),
        });
        if !options.read_only {
            volume.take_lock(options.break_lock).await?;
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

    /// Writes done since the volume was opened.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Replaces the header by `change(header)` with a compare-and-swap, re-reading and
    /// retrying when another client changed it.
    async fn update_header(
        &self,
        mut change: impl FnMut(&mut VolumeHeader) -> Result<(), VolumeError>,
    ) -> Result<(), VolumeError> {
        let name = self.name();
        for _ in 0..8 {
            let (mut header, version) = find_header(&self.client, &name).await?;
            change(&mut header)?;
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
        self.update_header(|header| {
            let now = now_ms();
            if let Some(lock) = &header.lock
                && lock.token != token
                && lock.expires_unix_ms > now
                && !break_lock
            {
                return Err(VolumeError::Locked {
                    name: header.name.clone(),
                    holder: lock.holder.clone(),
                    expires_in_s: (lock.expires_unix_ms - now).div_ceil(1000),
                });
            }
            header.lock = Some(Lock {
                holder: holder.clone(),
                token,
                expires_unix_ms: now + LOCK_LEASE.as_millis() as u64,
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

    fn object(&self, index: u64) -> Arc<tokio::sync::Mutex<Option<Known>>> {
        self.objects.lock().expect("objects lock").entry(index).or_default().clone()
    }

    /// `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: u64) -> Result<Bytes, VolumeError> {
        let header = self.check_range(offset, len)?;
        let pieces = split(offset, len, header.object_size);
        let reads = pieces.iter().map(|&(index, within, n)| {
            let header = &header;
            async move {
                if !self.read_only {
                    // This writer knows the objects it never wrote, and sends no probe.
                    let known = self.object(index);
                    if matches!(&*known.lock().await, Some(Known::Absent)) {
                        return Ok::<_, VolumeError>(None);
                    }
                }
                Ok(self
                    .client
                    .read_in_place(&header.pool, &header.data_key(index), within, n)
                    .await?)
            }
        });
        let parts = try_join_all(reads).await?;
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
        let header = self.check_range(offset, len)?;
        let pieces = split(offset, len, header.object_size);
        let writes = pieces.iter().map(|&(index, within, n)| {
            self.write_object(&header, index, within, Patch::Zeroes(n), fua)
        });
        try_join_all(writes).await?;
        Ok(())
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
        let mut known = object.lock().await;
        let key = header.data_key(index);
        // Every data object is object_size bytes, the last one too (its bytes past the end
        // of the volume are never addressed), so that resizing rewrites no object.
        let size = header.object_size;
        if let Patch::Zeroes(_) = patch {
            // Zeroes on an object never written change nothing.
            if matches!(&*known, Some(Known::Absent)) {
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
        let previous = match &*known {
            Some(Known::At(written)) => Some(written.clone()),
            _ => None,
        };
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
                // Some replicas may hold the write: look again next time.
                *known = None;
                Err(error.into())
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
            return Err(VolumeError::BadSize(format!(
                "{size} bytes is smaller than the volume's {} bytes: shrinking discards the data beyond it; pass --allow-shrink to do so",
                old.size
            )));
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

/// Removes a volume: marks it being removed, deletes every data object, then the header. A
/// removal that stops half-way is finished by running it again. A volume open read-write
/// elsewhere is refused unless `break_lock`.
pub async fn remove(client: &Client, name: &str, break_lock: bool) -> Result<u64, VolumeError> {
    let (header, version) = find_header(client, name).await?;
    let now = now_ms();
    if let Some(lock) = &header.lock
        && lock.expires_unix_ms > now
        && !break_lock
        && !header.removing
    {
        return Err(VolumeError::Locked {
            name: name.to_string(),
            holder: lock.holder.clone(),
            expires_in_s: (lock.expires_unix_ms - now).div_ceil(1000),
        });
    }
    if !header.removing {
        let mut marked = header.clone();
        marked.removing = true;
        marked.lock = None;
        client
            .compare_and_write(&header.pool, &header_key(name), 0, marked.encode(), version)
            .await?;
    }
    let mut removed = 0;
    for index in allocated(client, &header).await? {
        delete_data(client, &header, index).await?;
        removed += 1;
    }
    match client.delete(&header.pool, &header_key(name)).await {
        Ok(()) | Err(ClientError::NotFound { .. }) => Ok(removed),
        Err(error) => Err(error.into()),
    }
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
            }),
            removing: true,
        };
        let bytes = header.encode();
        assert_eq!(bytes.len() as u64, HEADER_BYTES);
        assert_eq!(VolumeHeader::decode("x", &bytes).unwrap(), header);
        assert!(VolumeHeader::decode("x", b"{not json").is_err());
    }
}
