//! A volume's header object, `volume_header.{NAME}`: its record ([`VolumeHeader`]: size,
//! object size, id, lock, snapshots, parent), the lock's holder, the keys of a volume's
//! objects, and reading and updating the header (a compare-and-swap); with what the volume
//! and its snapshots both need of the snapshots' bookkeeping (`docs/volumes.md`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Client, ClientError};
use optio_proto::ObjectVersion;
use optio_proto::snap::SnapContext;

/// The header object's size: a block object, so that its lock is taken by compare-and-swap.
pub(crate) const HEADER_BYTES: u64 = 4096;
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
    /// A resize to a smaller size without the permission to discard what lies beyond it.
    #[error(
        "{size} bytes is smaller than the volume's {current} bytes: shrinking discards the data beyond it; pass --allow-shrink to do so"
    )]
    WouldShrink {
        /// The size asked for.
        size: u64,
        /// The volume's size.
        current: u64,
    },
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
    /// A snapshot operation that cannot be done (the message says why and what to do).
    #[error("{0}")]
    Snapshot(String),
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
    /// The holder's process, when it could tell (Linux): a lock whose holder died on the same
    /// machine is taken at once instead of after its lease ([`HolderProcess::is_gone`]).
    /// Absent in headers written before it existed; those locks wait for their lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<HolderProcess>,
    /// When the holder took the lock (Unix milliseconds; 0 in headers from before).
    #[serde(default)]
    pub taken_unix_ms: u64,
    /// The header's snapshot generation the holder's writes follow
    /// ([`VolumeHeader::snap_generation`]): a snapshot taken or removed while it writes is
    /// done when this reaches the header's.
    #[serde(default)]
    pub generation_seen: u64,
}

/// A lock holder's process, precisely enough to tell from the same machine whether it still
/// runs: the machine's boot, the pid namespace, the pid and the process's start time (a pid
/// alone may have been reused).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderProcess {
    /// The machine's boot id (`/proc/sys/kernel/random/boot_id`): equal only on the same
    /// machine since the same boot.
    pub boot_id: String,
    /// The pid namespace (`/proc/self/ns/pid`, e.g. `pid:[4026531836]`): pids compare only
    /// within one (containers share a boot id but not their pids).
    pub pid_namespace: String,
    /// The process id.
    pub pid: u32,
    /// When the process started, in clock ticks after boot (`/proc/PID/stat`, field 22).
    pub start_ticks: u64,
}

impl HolderProcess {
    /// This process, or `None` where `/proc` does not say (then locks carry no process, and a
    /// dead holder's lock waits for its lease as before).
    pub fn current() -> Option<HolderProcess> {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let pid_namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
        let pid = std::process::id();
        let (_, start_ticks) = parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)?;
        Some(HolderProcess {
            boot_id: boot_id.trim().to_string(),
            pid_namespace: pid_namespace.to_string_lossy().into_owned(),
            pid,
            start_ticks,
        })
    }

    /// Whether this holder is known to be gone, as seen from `here` (this process):
    /// on the same machine and boot, in the same pid namespace, and its pid is not running, or
    /// is running another process (another start time), or is a zombie. A holder elsewhere,
    /// or one whose state cannot be read, is not known to be gone: its lease holds.
    /// `stat` reads `/proc/PID/stat` (a parameter for tests).
    pub fn is_gone(
        &self,
        here: &HolderProcess,
        stat: impl Fn(u32) -> std::io::Result<String>,
    ) -> bool {
        if self.boot_id != here.boot_id || self.pid_namespace != here.pid_namespace {
            return false;
        }
        match stat(self.pid) {
            Err(error) => error.kind() == std::io::ErrorKind::NotFound,
            Ok(text) => match parse_stat(&text) {
                Some((state, start_ticks)) => {
                    matches!(state, 'Z' | 'X' | 'x') || start_ticks != self.start_ticks
                }
                None => false,
            },
        }
    }
}

/// `/proc/PID/stat`: the process's state (field 3) and start time in clock ticks after boot
/// (field 22). The command name (field 2) is in parentheses and may hold spaces or
/// parentheses itself: the fields after it are counted from the last `)`.
pub(super) fn parse_stat(text: &str) -> Option<(char, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // Fields 4 to 21 lie between the state and the start time.
    let start_ticks = fields.nth(18)?.parse().ok()?;
    Some((state, start_ticks))
}

/// Reads `/proc/PID/stat`.
pub(super) fn read_stat(pid: u32) -> std::io::Result<String> {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
}

/// Whether `lock`'s holder is known to have died on this machine (see
/// [`HolderProcess::is_gone`]).
pub(crate) fn holder_is_gone(lock: &Lock) -> bool {
    match (&lock.process, HolderProcess::current()) {
        (Some(holder), Some(here)) => holder.is_gone(&here, read_stat),
        _ => false,
    }
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
    /// The last snapshot id given (ids are never reused).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub snap_seq: u64,
    /// Bumped by every change of the snapshots; a lock holder follows it
    /// ([`Lock::generation_seen`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub snap_generation: u64,
    /// The snapshots, oldest first ([`crate::snapshot`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<Snapshot>,
    /// A clone's parent snapshot: data objects the clone never wrote read from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Parent>,
    /// A trim of the copies kept for removed snapshots, in the background
    /// ([`crate::trim`]): set by `snap rm` (and by the removal of a volume with snapshots),
    /// cleared when done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trim: Option<TrimProgress>,
    /// A flatten under way ([`crate::flatten`]): set by `optio volume flatten`, carried out by
    /// the lock holder (or the command), cleared with `parent` when done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flatten: Option<FlattenProgress>,
}

/// How far a flatten has come (kept in the header: it resumes there).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlattenProgress {
    /// When it was asked for (Unix seconds).
    pub started_unix_s: u64,
    /// Data objects the clone spans.
    pub objects: u64,
    /// The index of the next data object to look at.
    pub next: u64,
    /// Objects copied from the parent so far.
    pub copied: u64,
    /// Objects copied per second at most (0: no limit).
    pub rate: u32,
    /// Who carries it out (`host pid N`), once someone does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// How far a background trim has come (kept in the header, so that it resumes where it
/// stopped after a crash).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrimProgress {
    /// The snapshot generation it trims for: a later `snap rm` sets a new one, and the trim
    /// starts again from the first object.
    pub generation: u64,
    /// When it was asked for (Unix seconds).
    pub started_unix_s: u64,
    /// Data objects with kept copies, as last listed (0: not listed yet).
    #[serde(default)]
    pub objects: u64,
    /// Of them, those looked at (the trim resumes past them).
    #[serde(default)]
    pub done: u64,
    /// The index of the next data object to look at.
    #[serde(default)]
    pub next: u64,
    /// Copies removed so far.
    #[serde(default)]
    pub removed: u64,
    /// The runner carrying it out: a lease renewed with each record of its progress; other
    /// runners leave the job to it while it runs (one runner's requests, not several's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<Lock>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
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
        assert!(json.len() <= HEADER_BYTES as usize, "checked by fits() before it is written");
        json.resize(HEADER_BYTES as usize, b' ');
        Bytes::from(json)
    }

    /// Whether the header fits its 4 KiB object (snapshots make it grow).
    pub fn fits(&self) -> bool {
        serde_json::to_vec(self).is_ok_and(|json| json.len() <= HEADER_BYTES as usize)
    }

    /// The newest snapshot with a mark: what writes of the volume's data carry.
    pub fn snap_context(&self) -> Option<optio_proto::snap::SnapContext> {
        self.snapshots.iter().filter_map(|s| s.context()).max_by_key(|c| c.mark)
    }

    /// Records a trim job for the current snapshots (after a `snap rm`, or a removal with
    /// snapshots): [`crate::trim`] carries it out.
    pub(crate) fn ask_trim(&mut self) {
        self.trim = Some(TrimProgress {
            generation: self.snap_generation,
            started_unix_s: now_ms() / 1000,
            ..TrimProgress::default()
        });
    }

    /// The prefix of the volume's data keys (and of their clones).
    pub fn data_prefix(&self) -> String {
        format!("{DATA_PREFIX}{}.", self.id)
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

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

pub(crate) fn unique(seed: &str) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let text = format!("{seed}/{nanos}/{}/{:p}", std::process::id(), &nanos);
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

pub(crate) fn holder_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host} pid {}", std::process::id())
}

/// Reads a volume's header and its version: looked up in every pool.
pub(crate) async fn find_header(
    client: &Client,
    name: &str,
) -> Result<(VolumeHeader, optio_proto::ObjectVersion), VolumeError> {
    validate_name(name)?;
    let key = header_key(name);
    for pool in client.map().pools() {
        if pool.erasure.is_some() {
            // Volume headers live in replicated pools only.
            continue;
        }
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

/// The header of volume `name` (in `pool`) once it is stored above version `newer_than`, or
/// after the server's bound of about a second (a long poll, [`Client::get_when_newer`]); what
/// is stored then, with its version (possibly `newer_than` itself).
pub(crate) async fn header_when_newer(
    client: &Client,
    pool: &str,
    name: &str,
    newer_than: optio_proto::ObjectVersion,
) -> Result<(VolumeHeader, optio_proto::ObjectVersion), VolumeError> {
    let key = header_key(name);
    match client.get_when_newer(pool, &key, newer_than).await {
        Ok((info, data)) => Ok((VolumeHeader::decode(name, &data)?, info.version)),
        Err(ClientError::NotFound { .. }) => Err(VolumeError::NotFound(name.to_string())),
        Err(error) => Err(error.into()),
    }
}

/// How often a lock holder looks at the header for snapshots to take when its server answers
/// a watch at once (one that cannot wait, or data moving); otherwise it watches the header
/// (a read the server holds until the header changes: [`Client::get_when_newer`]).
pub const HOLDER_POLL: Duration = Duration::from_millis(20);
/// How long `snap create` waits for the lock holder to take the snapshot.
pub const HOLDER_WAIT: Duration = Duration::from_secs(5);
/// How far ahead of a server's clock a version may be (the servers' bound; a mark taken
/// without a holder is this far ahead of now).
pub const VERSION_AHEAD_MAX_MICROS: u64 = 10_000_000;

/// One snapshot of a volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Id, from the volume's sequence.
    pub id: u64,
    /// Name.
    pub name: String,
    /// The mark (none: being taken by the lock holder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<u64>,
    /// The volume's size when it was taken.
    pub size: u64,
    /// Protected: cannot be removed.
    #[serde(default)]
    pub protected: bool,
    /// When it was asked for (Unix seconds).
    pub created_unix_s: u64,
    /// The volumes cloned from it (it cannot be unprotected or removed while they are).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<String>,
    /// Who reads it now (`optio nbd VOL@SNAP`, `optio volume export VOL@SNAP`): it cannot be
    /// removed while a reader's lease runs and its process lives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<Reader>,
}

/// A reader of a snapshot, with a lease it renews as a lock holder does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reader {
    /// The reader, for people (`host pid N`).
    pub holder: String,
    /// A number only the reader knows.
    pub token: u64,
    /// When the lease ends (Unix milliseconds).
    pub expires_unix_ms: u64,
    /// The reader's process, when it could tell ([`HolderProcess::is_gone`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<HolderProcess>,
}

impl Reader {
    /// Whether the reader may still be reading: its lease runs and its process is not known
    /// to be gone.
    pub fn is_live(&self) -> bool {
        self.expires_unix_ms > now_ms()
            && !match (&self.process, HolderProcess::current()) {
                (Some(reader), Some(here)) => reader.is_gone(&here, read_stat),
                _ => false,
            }
    }
}

/// A clone's parent: a protected snapshot of another volume.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parent {
    /// The parent volume's name.
    pub volume: String,
    /// Its snapshot.
    pub snapshot: String,
    /// The snapshot's mark.
    pub mark: u64,
    /// Bytes of the clone that may read from the parent (the snapshot's size).
    pub overlap: u64,
}

/// Where a clone's never-written data objects read from, resolved at open: one snapshot of
/// an ancestor volume.
#[derive(Clone, Debug)]
pub struct Ancestor {
    /// The ancestor volume's pool.
    pub pool: String,
    /// Its id (naming its data objects).
    pub id: String,
    /// The snapshot's mark.
    pub mark: ObjectVersion,
    /// Bytes that may read from it (the smallest overlap on the way to it).
    pub overlap: u64,
}

/// The most levels of clones of clones.
pub const CLONE_DEPTH_MAX: usize = 16;

/// The ancestors of the volume `header` describes, nearest first.
pub async fn ancestors(
    client: &Client,
    header: &VolumeHeader,
) -> Result<Vec<Ancestor>, VolumeError> {
    let mut out: Vec<Ancestor> = Vec::new();
    let mut parent = header.parent.clone();
    let mut overlap = u64::MAX;
    while let Some(link) = parent {
        if out.len() == CLONE_DEPTH_MAX {
            return Err(VolumeError::Snapshot(format!(
                "volume '{}' is more than {CLONE_DEPTH_MAX} clones deep: flatten it",
                header.name
            )));
        }
        let (above, _) = find_header(client, &link.volume).await.map_err(|error| {
            VolumeError::Snapshot(format!(
                "the parent of volume '{}', '{}@{}', cannot be opened: {error}",
                header.name, link.volume, link.snapshot
            ))
        })?;
        overlap = overlap.min(link.overlap);
        out.push(Ancestor {
            pool: above.pool.clone(),
            id: above.id.clone(),
            mark: ObjectVersion(link.mark),
            overlap,
        });
        parent = above.parent.clone();
    }
    Ok(out)
}

impl Snapshot {
    /// The context writes carry while this is the newest snapshot.
    pub fn context(&self) -> Option<SnapContext> {
        self.mark.map(|mark| SnapContext { seq: self.id, mark: ObjectVersion(mark) })
    }
}

/// Snapshot `name` of the volume `header` describes.
pub fn find<'h>(header: &'h VolumeHeader, name: &str) -> Result<&'h Snapshot, VolumeError> {
    header.snapshots.iter().find(|s| s.name == name).ok_or_else(|| {
        VolumeError::Snapshot(format!(
            "volume '{}' has no snapshot '{name}'; `optio volume snap ls {}` lists them",
            header.name, header.name
        ))
    })
}

/// Replaces the header of `name` by `change(header)` with a compare-and-swap, retrying when
/// another client changed it; returns the header written.
pub(crate) async fn update(
    client: &Client,
    name: &str,
    mut change: impl FnMut(&mut VolumeHeader) -> Result<(), VolumeError>,
) -> Result<VolumeHeader, VolumeError> {
    for attempt in 0..16u64 {
        let (mut header, version) = find_header(client, name).await?;
        change(&mut header)?;
        if !header.fits() {
            return Err(VolumeError::Snapshot(format!(
                "volume '{name}' has as many snapshots as its 4 KiB header holds ({}): remove one first",
                header.snapshots.len().saturating_sub(1)
            )));
        }
        let key = header_key(name);
        match client.compare_and_write(&header.pool, &key, 0, header.encode(), version).await {
            Ok(_) => return Ok(header),
            Err(ClientError::Changed { .. }) => {
                tokio::time::sleep(Duration::from_millis(5 + 7 * attempt)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(VolumeError::Client(ClientError::Changed { key: header_key(name) }))
}

/// Removes `child` from the children of `volume@snap`.
pub(crate) async fn forget_child(
    client: &Client,
    volume: &str,
    snap: &str,
    child: &str,
) -> Result<(), VolumeError> {
    update(client, volume, |header| {
        if let Some(found) = header.snapshots.iter_mut().find(|s| s.name == snap) {
            found.children.retain(|c| c != child);
        }
        Ok(())
    })
    .await?;
    Ok(())
}
