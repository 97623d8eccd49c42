//! A device's journal: small whole-object writes and tombstones made durable by one shared
//! `fdatasync` of an append-only log (group commit), with the object files written in place
//! behind it without syncs of their own and made durable later, in the background, before the
//! log space that describes them is reused.
//!
//! Why: a small object written the classic way costs two synchronous syncs on each replica
//! (the file's `fdatasync`, then its directory's `fsync` after the rename that publishes it),
//! and on ext4 without a journal each of them is two synchronous device writes. Concurrent
//! writers of one device now share one `fdatasync` of the log (the leader syncs what every
//! writer appended so far; the others wait for it), and the files reach the disk through the
//! kernel's writeback, in large merged writes (issue 39, docs/store.md "The journal").
//!
//! **Layout** (`journal/` in the device directory): two segments `0.seg` and `1.seg` of at
//! most [`SEGMENT_BYTES`], used in turn, and `generation` (the first generation this start
//! may use, written durably at every start). A segment holds records from offset 0:
//! `magic u32 | generation u64 | op u8 | path length u16 | data length u32 | crc32c u32 |
//! path | data`, the checksum over everything before it and the path and data. Its first
//! record's generation is the segment's; the records that follow with the same generation and
//! a good checksum are its contents, and the first that does not end them (a torn append, or
//! what an earlier use of the segment left further on). A segment is reused from offset 0
//! with a new generation; before that its first header is zeroed (durably): it is empty.
//!
//! **Records**: `PUT path data` (the object file's whole content), `WRITE_AT path parts`
//! (bytes written into an existing file at their offsets — `offset u64 | length u32 | bytes`
//! per part —: what a write in place after a volume snapshot keeps of the blocks it
//! changes, in the snapshot's clone, [`crate::store`]'s `cow`) and `FORGET path` (what
//! follows for `path` is not journaled: before a file the journal may still restore is
//! changed any other way — removed, written in place, replaced by a large object — a FORGET
//! is appended and made durable, so that a replay never brings back an older state).
//!
//! **Acknowledgement**: [`Journal::put`] returns only when its record is durable; only then
//! does the store write the object file (in place or by a rename) and index it, and the
//! server answer.
//!
//! **Checkpoint**: when the active segment is full, the other one takes the appends (once
//! it is free) and a thread makes the full one's files durable — one `syncfs` of the device's
//! file system; if that reports an error (which may be another program's), each of the
//! segment's files and their directories are fsynced one by one instead — then empties it.
//! A clean shutdown checkpoints both segments, so a start after it replays nothing.
//!
//! **Replay** (at start, before the objects are indexed): the segments' records in
//! generation order; for each path, its last PUT not followed by a FORGET is written back
//! (temporary file, fdatasync, rename, directory fsync), whatever the file holds, then the
//! WRITE_ATs after it (and after its last FORGET) are written into the file, in order.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::disk::{Disk, FILE_MODE};

/// Largest object file (header, key and data) written through the journal; larger ones are
/// written and synced on their own (the journal would write them twice, and a large write
/// is bound by the disk's bandwidth, not by its syncs).
pub const JOURNAL_OBJECT_MAX: u64 = 128 << 10;
/// Size of each of the two segments: room for about 7,800 records of 4 KiB objects, or at
/// least 255 of [`JOURNAL_OBJECT_MAX`].
pub const SEGMENT_BYTES: u64 = 32 << 20;
const SEGMENTS: usize = 2;
const MAGIC: u32 = 0x4c4e_4a4f; // "OJNL" read as little-endian bytes
const HEADER_BYTES: usize = 4 + 8 + 1 + 2 + 4 + 4;
const OP_PUT: u8 = 1;
const OP_FORGET: u8 = 2;
const OP_WRITE_AT: u8 = 3;
/// Bytes before each part of a WRITE_AT record's data: its offset (u64) and length (u32).
pub const PART_HEADER_BYTES: usize = 12;
/// Longest path a record may name (device-relative object paths are about 50 bytes).
const PATH_BYTES_MAX: usize = 1024;
/// Generations each start may use: a start takes the next block of this many, so a new
/// segment's generation is never one that an earlier start left in a segment's tail.
const GENERATIONS_PER_START: u64 = 1 << 32;

/// A record read back from a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Record {
    Put { path: PathBuf, data: Vec<u8> },
    Forget { path: PathBuf },
    WriteAt { path: PathBuf, parts: Parts },
}

/// What a WRITE_AT record writes: (offset, bytes).
type Parts = Vec<(u64, Vec<u8>)>;

/// A WRITE_AT record's data: each part's offset and length, then its bytes.
fn encode_parts(parts: &[(u64, &[u8])]) -> Vec<u8> {
    let len = parts.iter().map(|(_, bytes)| PART_HEADER_BYTES + bytes.len()).sum();
    let mut out = Vec::with_capacity(len);
    for (offset, bytes) in parts {
        out.extend_from_slice(&offset.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// The parts of a WRITE_AT record's data, or none when they do not fill it exactly.
fn decode_parts(mut data: &[u8]) -> Option<Parts> {
    let mut parts = Vec::new();
    while !data.is_empty() {
        let head = data.get(..PART_HEADER_BYTES)?;
        let offset = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(head[8..].try_into().expect("4 bytes")) as usize;
        let bytes = data.get(PART_HEADER_BYTES..PART_HEADER_BYTES.checked_add(len)?)?;
        offset.checked_add(len as u64)?;
        parts.push((offset, bytes.to_vec()));
        data = &data[PART_HEADER_BYTES + len..];
    }
    Some(parts)
}

fn encode(generation: u64, op: u8, path: &Path, parts: &[&[u8]]) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    let path = path.as_os_str().as_bytes();
    let data_len: usize = parts.iter().map(|p| p.len()).sum();
    let mut out = Vec::with_capacity(HEADER_BYTES + path.len() + data_len);
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.push(op);
    out.extend_from_slice(&(path.len() as u16).to_le_bytes());
    out.extend_from_slice(&(data_len as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the checksum, below
    out.extend_from_slice(path);
    for part in parts {
        out.extend_from_slice(part);
    }
    let crc = crc_of(&out);
    out[HEADER_BYTES - 4..HEADER_BYTES].copy_from_slice(&crc.to_le_bytes());
    out
}

/// crc32c of a record with its checksum field taken as zero.
fn crc_of(record: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&record[..HEADER_BYTES - 4]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &record[HEADER_BYTES..])
}

/// A path a record may name: relative, under `objects/`, no `..`, not too long. What the
/// disk holds is not trusted: anything else ends the segment's replay.
fn valid_path(path: &Path) -> bool {
    let mut components = path.components();
    components.next() == Some(Component::Normal("objects".as_ref()))
        && components.all(|c| matches!(c, Component::Normal(_)))
        && path.as_os_str().len() <= PATH_BYTES_MAX
}

/// The records of one segment's bytes, and its generation (none when it is empty).
fn parse(bytes: &[u8]) -> (Option<u64>, Vec<Record>) {
    use std::os::unix::ffi::OsStrExt;
    let mut records = Vec::new();
    let mut generation = None;
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + HEADER_BYTES) {
        let u32_at = |i: usize| u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes"));
        let this_generation = u64::from_le_bytes(head[4..12].try_into().expect("8 bytes"));
        let op = head[12];
        let path_len = usize::from(u16::from_le_bytes([head[13], head[14]]));
        let data_len = u32_at(15) as usize;
        let crc = u32_at(19);
        if u32_at(0) != MAGIC
            || generation.is_some_and(|g| g != this_generation)
            || path_len > PATH_BYTES_MAX
            || data_len as u64 > JOURNAL_OBJECT_MAX
        {
            break;
        }
        let end = at + HEADER_BYTES + path_len + data_len;
        let Some(record) = bytes.get(at..end) else { break };
        if crc_of(record) != crc {
            break;
        }
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(
            &record[HEADER_BYTES..HEADER_BYTES + path_len],
        ));
        if !valid_path(&path) {
            break;
        }
        let data = &record[HEADER_BYTES + path_len..];
        match op {
            OP_PUT => records.push(Record::Put { path, data: data.to_vec() }),
            OP_FORGET if data.is_empty() => records.push(Record::Forget { path }),
            OP_WRITE_AT => match decode_parts(data) {
                Some(parts) => records.push(Record::WriteAt { path, parts }),
                None => break,
            },
            _ => break,
        }
        generation = Some(this_generation);
        at = end;
    }
    (generation, records)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Use {
    /// Empty: may become the active segment.
    Free,
    /// Takes the appends.
    Active,
    /// Full and synced: waits for its checkpoint.
    Full,
}

struct Segment {
    file: Arc<File>,
    generation: u64,
    used: u64,
    last_seq: u64,
    /// The paths its PUT records name (for the fallback of a failed `syncfs`).
    paths: Vec<PathBuf>,
    /// Its PUTs durable in the journal whose files are not written yet
    /// ([`Applying`] guards alive).
    applying: usize,
    state: Use,
}

struct State {
    segments: Vec<Segment>,
    active: usize,
    next_generation: u64,
    /// The last record appended.
    seq: u64,
    /// Paths whose last record is a PUT or a WRITE_AT in a segment not yet checkpointed, and
    /// its seq.
    pending: HashMap<PathBuf, u64>,
    /// Why the journal stopped taking records (a failed sync or checkpoint).
    failed: Option<String>,
    closing: bool,
}

impl State {
    /// Starts segment `index` over, empty, under the next generation.
    fn reuse(&mut self, index: usize) {
        let generation = self.next_generation;
        self.next_generation += 1;
        let segment = &mut self.segments[index];
        segment.generation = generation;
        segment.used = 0;
        segment.last_seq = 0;
        segment.paths.clear();
    }
}

#[derive(Default)]
struct Synced {
    seq: u64,
    syncing: bool,
    failed: Option<String>,
}

struct Inner {
    root: PathBuf,
    segment_bytes: u64,
    disk: Arc<dyn Disk>,
    state: Mutex<State>,
    /// Signalled when a segment becomes full (for the checkpointer) or free (for appenders),
    /// and on close.
    changed: Condvar,
    synced: Mutex<Synced>,
    synced_changed: Condvar,
}

/// The journal of one device (see the module's documentation).
pub struct Journal {
    inner: Arc<Inner>,
    checkpointer: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("root", &self.inner.root).finish_non_exhaustive()
    }
}

/// What a start found in the journal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Object files written back from it.
    pub restored: usize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn journal_failed(why: &str) -> io::Error {
    io::Error::other(format!(
        "the device's journal stopped after an error ({why}); restart the server, which \
         replays it"
    ))
}

impl Journal {
    /// Opens the journal of the device directory `root` (creating it), writes back what the
    /// last run left in it, and empties it. Call before the objects are indexed.
    pub fn open(root: &Path, disk: Arc<dyn Disk>) -> io::Result<(Journal, Replayed)> {
        Journal::open_sized(root, disk, SEGMENT_BYTES)
    }

    /// [`open`](Self::open) with segments of `segment_bytes` (at most [`SEGMENT_BYTES`];
    /// tests use small ones to switch often).
    pub fn open_sized(
        root: &Path,
        disk: Arc<dyn Disk>,
        segment_bytes: u64,
    ) -> io::Result<(Journal, Replayed)> {
        let segment_bytes = segment_bytes.min(SEGMENT_BYTES);
        let dir = root.join("journal");
        disk.create_dir_all(&dir)?;
        let base = next_generation(root, &dir, disk.as_ref())?;
        let mut files = Vec::with_capacity(SEGMENTS);
        let mut found = Vec::new();
        for i in 0..SEGMENTS {
            let path = dir.join(format!("{i}.seg"));
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(FILE_MODE)
                .open(&path)?;
            let len = file.metadata()?.len().min(SEGMENT_BYTES);
            let mut bytes = vec![0u8; len as usize];
            file.read_exact_at(&mut bytes, 0)?;
            let (generation, records) = parse(&bytes);
            if let Some(generation) = generation {
                found.push((generation, records));
            }
            files.push(Arc::new(file));
        }
        found.sort_by_key(|(generation, _)| *generation);
        // For each path: its last PUT, if any, and the writes in place after it, in order;
        // nothing before its last FORGET.
        let mut last: HashMap<PathBuf, (Option<Vec<u8>>, Vec<Parts>)> = HashMap::new();
        for record in found.into_iter().flat_map(|(_, records)| records) {
            match record {
                Record::Put { path, data } => last.insert(path, (Some(data), Vec::new())),
                Record::Forget { path } => last.remove(&path),
                Record::WriteAt { path, parts } => {
                    last.entry(path).or_default().1.push(parts);
                    None
                }
            };
        }
        let mut restored = 0;
        let tmp = root.join("tmp");
        for (n, (relative, (data, writes))) in last.into_iter().enumerate() {
            let path = root.join(&relative);
            let mut wrote = data.is_some();
            if let Some(data) = data {
                let parent = path.parent().expect("journal paths have parents");
                disk.create_dir_all(parent)?;
                let temp = tmp.join(format!("journal.{n}"));
                disk.write_temp(&temp, &[&data], true)?;
                disk.publish(&temp, &path)?;
            }
            for parts in &writes {
                let parts: Vec<(u64, &[u8])> = parts.iter().map(|(o, b)| (*o, &b[..])).collect();
                match disk.write_at(&path, &parts, true) {
                    Ok(()) => wrote = true,
                    // Removed since, without a FORGET (quarantined): nothing to write into.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) => return Err(e),
                }
            }
            restored += usize::from(wrote);
        }
        if restored > 0 {
            tracing::info!(device = %root.display(), restored, "wrote back the journal's objects");
        }
        for file in &files {
            empty(file, disk.as_ref())?;
        }
        let segments = files
            .into_iter()
            .enumerate()
            .map(|(i, file)| Segment {
                file,
                generation: base,
                used: 0,
                last_seq: 0,
                paths: Vec::new(),
                applying: 0,
                state: if i == 0 { Use::Active } else { Use::Free },
            })
            .collect();
        let inner = Arc::new(Inner {
            root: root.to_path_buf(),
            segment_bytes,
            disk,
            state: Mutex::new(State {
                segments,
                active: 0,
                next_generation: base + 1,
                seq: 0,
                pending: HashMap::new(),
                failed: None,
                closing: false,
            }),
            changed: Condvar::new(),
            synced: Mutex::new(Synced::default()),
            synced_changed: Condvar::new(),
        });
        let worker = Arc::clone(&inner);
        let checkpointer = std::thread::Builder::new()
            .name("optio-journal".into())
            .spawn(move || worker.checkpoint_loop())?;
        Ok((Journal { inner, checkpointer: Some(checkpointer) }, Replayed { restored }))
    }

    /// Journals the whole new content of the object file `path` (under the device directory)
    /// and returns once that is durable (blocking). Keep the guard until the file is written
    /// into place (or that failed): no checkpoint of its segment starts before.
    pub fn put(&self, path: &Path, parts: &[&[u8]]) -> io::Result<Applying<'_>> {
        let (guard, seq) = self.append_put(path, parts, true)?.expect("an append that waits");
        self.wait_durable(seq)?;
        Ok(guard)
    }

    /// [`put`](Self::put) without the wait: appends the record and returns its guard and its
    /// sequence number, which must be passed to [`wait_durable`](Self::wait_durable) before
    /// the file is written. So a writer of many objects appends them all, then waits once.
    ///
    /// With `wait` false, none when the append would have to wait for a segment to be
    /// checkpointed: a caller that holds guards of its own must drop them first (the
    /// checkpoint waits for them), then append again with `wait`.
    pub fn append_put(
        &self,
        path: &Path,
        parts: &[&[u8]],
        wait: bool,
    ) -> io::Result<Option<(Applying<'_>, u64)>> {
        let relative = self.inner.relative(path)?;
        let Some((seq, segment)) = self.inner.append(OP_PUT, relative, parts, wait)? else {
            return Ok(None);
        };
        Ok(Some((Applying { inner: &self.inner, segment }, seq)))
    }

    /// Returns once every record up to sequence number `seq` is durable (blocking; one
    /// shared sync for the records of every writer waiting meanwhile).
    pub fn wait_durable(&self, seq: u64) -> io::Result<()> {
        self.inner.wait_durable(seq)
    }

    /// Journals `parts` (offset, bytes) written into the existing file `path` and returns
    /// once that is durable (blocking); then write them into the file, not durably, and drop
    /// the guard. A replay writes them again, in order, after the file's last PUT.
    pub fn write_at(&self, path: &Path, parts: &[(u64, &[u8])]) -> io::Result<Applying<'_>> {
        let relative = self.inner.relative(path)?;
        let data = encode_parts(parts);
        if data.len() as u64 > JOURNAL_OBJECT_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} bytes written in place are more than a journal record", data.len()),
            ));
        }
        let (seq, segment) = self
            .inner
            .append(OP_WRITE_AT, relative, &[&data], true)?
            .expect("an append that waits");
        let guard = Applying { inner: &self.inner, segment };
        self.inner.wait_durable(seq)?;
        Ok(guard)
    }

    /// Before `path` changes other than through [`put`](Self::put): makes sure no replay
    /// restores an older state of it (a durable FORGET record when it has a PUT not yet
    /// checkpointed; nothing otherwise). Blocking.
    pub fn forget(&self, path: &Path) -> io::Result<()> {
        let relative = self.inner.relative(path)?;
        if !lock(&self.inner.state).pending.contains_key(relative) {
            return Ok(());
        }
        let (seq, _) =
            self.inner.append(OP_FORGET, relative, &[], true)?.expect("an append that waits");
        self.inner.wait_durable(seq)
    }

    /// Checkpoints everything, so that a start after this replays nothing (a clean
    /// shutdown; appends wait meanwhile). Blocking.
    pub fn checkpoint_all(&self) -> io::Result<()> {
        let mut state = lock(&self.inner.state);
        loop {
            if let Some(why) = &state.failed {
                return Err(journal_failed(why));
            }
            let active = &state.segments[state.active];
            let busy = active.applying > 0 || state.segments.iter().any(|s| s.state == Use::Full);
            if !busy {
                break;
            }
            state = self.inner.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        let active = state.active;
        if state.segments[active].last_seq == 0 {
            return Ok(());
        }
        let paths = std::mem::take(&mut state.segments[active].paths);
        let file = Arc::clone(&state.segments[active].file);
        let result = self
            .inner
            .disk
            .sync_file(&file)
            .and_then(|()| self.inner.make_durable(&paths))
            .and_then(|()| empty(&file, self.inner.disk.as_ref()));
        if let Err(error) = result {
            state.failed = Some(format!("checkpoint: {error}"));
            return Err(error);
        }
        state.reuse(active);
        state.pending.clear();
        Ok(())
    }

    /// Records appended and not yet checkpointed (their object files may not be durable
    /// yet), for tests and status.
    pub fn pending(&self) -> usize {
        lock(&self.inner.state).pending.len()
    }
}

/// A journaled PUT whose file is being written (see [`Journal::put`]).
pub struct Applying<'a> {
    inner: &'a Inner,
    segment: usize,
}

impl Drop for Applying<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.inner.state);
        let segment = &mut state.segments[self.segment];
        segment.applying -= 1;
        // Only a segment with no write left to apply matters to anyone waiting (the
        // checkpointer, a clean shutdown): a wake-up for every write cost a context switch
        // of the checkpointer each.
        if segment.applying == 0 {
            self.inner.changed.notify_all();
        }
    }
}

impl Drop for Journal {
    /// Stops the checkpointer without checkpointing (as a crash would leave the journal).
    fn drop(&mut self) {
        {
            let mut state = lock(&self.inner.state);
            state.closing = true;
            self.inner.changed.notify_all();
        }
        if let Some(thread) = self.checkpointer.take() {
            let _ = thread.join();
        }
    }
}

/// Reads `journal/generation`, and durably records the block of generations after the one
/// this start takes; returns the first of this start's.
fn next_generation(root: &Path, dir: &Path, disk: &dyn Disk) -> io::Result<u64> {
    let path = dir.join("generation");
    let stored = match disk.read(&path) {
        Ok(bytes) if bytes.len() == 12 => {
            let value = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
            let crc = u32::from_le_bytes(bytes[8..].try_into().expect("4 bytes"));
            if crc32c::crc32c(&bytes[..8]) != crc {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: checksum mismatch; the journal cannot be trusted", path.display()),
                ));
            }
            value
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not 12 bytes; the journal cannot be trusted", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
        Err(e) => return Err(e),
    };
    let base = stored.checked_add(GENERATIONS_PER_START).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: exhausted", path.display()))
    })?;
    let mut bytes = base.to_le_bytes().to_vec();
    bytes.extend_from_slice(&crc32c::crc32c(&bytes).to_le_bytes());
    let temp = root.join("tmp").join("journal.generation");
    disk.write_temp(&temp, &[&bytes], true)?;
    disk.publish(&temp, &path)?;
    Ok(base)
}

/// Empties a segment: its first header zeroed, durably.
fn empty(file: &File, disk: &dyn Disk) -> io::Result<()> {
    if file.metadata()?.len() == 0 {
        return Ok(());
    }
    file.write_all_at(&[0u8; HEADER_BYTES], 0)?;
    disk.sync_file(file)
}

impl Inner {
    fn relative<'a>(&self, path: &'a Path) -> io::Result<&'a Path> {
        path.strip_prefix(&self.root).ok().filter(|p| valid_path(p)).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not an object file of this device", path.display()),
            )
        })
    }

    /// Appends a record to the active segment (switching segments when it is full); returns
    /// its sequence number and segment (a PUT counts as applying there until its guard drops).
    /// With `wait` false, none instead of waiting for the other segment to be free.
    fn append(
        &self,
        op: u8,
        path: &Path,
        parts: &[&[u8]],
        wait: bool,
    ) -> io::Result<Option<(u64, usize)>> {
        let len = (HEADER_BYTES
            + path.as_os_str().len()
            + parts.iter().map(|p| p.len()).sum::<usize>()) as u64;
        if len > self.segment_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a journal record of {len} bytes is larger than a segment"),
            ));
        }
        let mut state = lock(&self.state);
        loop {
            if let Some(why) = &state.failed {
                return Err(journal_failed(why));
            }
            let active = state.active;
            if state.segments[active].used + len <= self.segment_bytes {
                break;
            }
            let other = (active + 1) % SEGMENTS;
            if state.segments[other].state != Use::Free {
                if !wait {
                    return Ok(None);
                }
                state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            // Every record of the full segment is durable before its checkpoint starts.
            if let Err(error) = self.disk.sync_file(&state.segments[active].file) {
                state.failed = Some(format!("sync of the journal: {error}"));
                continue;
            }
            state.segments[active].state = Use::Full;
            state.reuse(other);
            state.segments[other].state = Use::Active;
            state.active = other;
            self.changed.notify_all();
        }
        let active = state.active;
        let segment = &mut state.segments[active];
        let record = encode(segment.generation, op, path, parts);
        if let Err(error) = segment.file.write_all_at(&record, segment.used) {
            // Nothing after this record may be appended over a partial one.
            state.failed = Some(format!("write of the journal: {error}"));
            return Err(error);
        }
        segment.used += len;
        let applies = op == OP_PUT || op == OP_WRITE_AT;
        if applies {
            segment.paths.push(path.to_path_buf());
            segment.applying += 1;
        }
        state.seq += 1;
        let seq = state.seq;
        state.segments[active].last_seq = seq;
        if applies {
            state.pending.insert(path.to_path_buf(), seq);
        } else {
            state.pending.remove(path);
        }
        Ok(Some((seq, active)))
    }

    /// Returns once record `seq` is durable: the first waiter syncs the active segment for
    /// every record appended so far, the others wait for it (group commit).
    fn wait_durable(&self, seq: u64) -> io::Result<()> {
        let mut synced = lock(&self.synced);
        loop {
            if let Some(why) = &synced.failed {
                return Err(journal_failed(why));
            }
            if synced.seq >= seq {
                return Ok(());
            }
            if synced.syncing {
                synced = self.synced_changed.wait(synced).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            synced.syncing = true;
            drop(synced);
            // Records of a segment switched away from were synced by the switch.
            let (file, target) = {
                let state = lock(&self.state);
                (Arc::clone(&state.segments[state.active].file), state.seq)
            };
            let result = self.disk.sync_file(&file);
            synced = lock(&self.synced);
            synced.syncing = false;
            match result {
                Ok(()) => synced.seq = synced.seq.max(target),
                Err(error) => {
                    let why = format!("sync of the journal: {error}");
                    synced.failed = Some(why.clone());
                    lock(&self.state).failed = Some(why);
                }
            }
            self.synced_changed.notify_all();
        }
    }

    /// Makes the files `paths` (device-relative) durable: one `syncfs`, or each file and its
    /// directory when that fails (it reports the whole file system's writeback errors,
    /// which may be another program's).
    fn make_durable(&self, paths: &[PathBuf]) -> io::Result<()> {
        let Err(error) = self.disk.sync_fs(&self.root) else { return Ok(()) };
        tracing::warn!(device = %self.root.display(), %error, "syncfs failed: syncing the journal's files one by one");
        let mut done = std::collections::HashSet::new();
        for relative in paths {
            if !done.insert(relative) {
                continue;
            }
            // The file and its directory.
            match self.disk.sync(&self.root.join(relative)) {
                Ok(()) => {}
                // Removed since (a FORGET was made durable first).
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn checkpoint_loop(&self) {
        loop {
            let (index, file, paths, last_seq) = {
                let mut state = lock(&self.state);
                // A full segment whose every PUT has been applied (its file written): the
                // checkpoint must cover the renames, not only the records.
                let i = loop {
                    let full =
                        state.segments.iter().position(|s| s.state == Use::Full && s.applying == 0);
                    if let Some(i) = full {
                        break i;
                    }
                    let waiting = state.segments.iter().any(|s| s.state == Use::Full);
                    if state.closing && !waiting {
                        return;
                    }
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                };
                let segment = &state.segments[i];
                (i, Arc::clone(&segment.file), segment.paths.clone(), segment.last_seq)
            };
            let result = self.make_durable(&paths).and_then(|()| empty(&file, self.disk.as_ref()));
            let mut state = lock(&self.state);
            if let Err(error) = result {
                tracing::error!(device = %self.root.display(), %error, "journal checkpoint failed: the device takes no more small writes until a restart");
                state.failed = Some(format!("checkpoint: {error}"));
                self.changed.notify_all();
                return;
            }
            for path in &paths {
                if state.pending.get(path).is_some_and(|&seq| seq <= last_seq) {
                    state.pending.remove(path);
                }
            }
            let segment = &mut state.segments[index];
            segment.state = Use::Free;
            segment.paths.clear();
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{Fault, FaultyDisk, RealDisk};
    use std::sync::atomic::{AtomicBool, Ordering};

    fn object(root: &Path, name: &str) -> PathBuf {
        let path = root.join("objects").join("1").join("ab").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        path
    }

    fn device() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tmp")).unwrap();
        dir
    }

    #[test]
    fn records_read_back_and_a_torn_or_stale_tail_ends_a_segment() {
        let a = encode(7, OP_PUT, Path::new("objects/1/ab/x"), &[b"hello", b" world"]);
        let b = encode(7, OP_FORGET, Path::new("objects/1/ab/y"), &[]);
        let stale = encode(6, OP_PUT, Path::new("objects/1/ab/z"), &[b"old"]);
        let mut bytes = [a.clone(), b.clone(), stale].concat();
        let (generation, records) = parse(&bytes);
        assert_eq!(generation, Some(7));
        assert_eq!(
            records,
            vec![
                Record::Put { path: "objects/1/ab/x".into(), data: b"hello world".to_vec() },
                Record::Forget { path: "objects/1/ab/y".into() },
            ]
        );
        // A torn second record: only the first counts.
        bytes.truncate(a.len() + b.len() - 1);
        assert_eq!(parse(&bytes).1.len(), 1);
        // A flipped bit anywhere in the first: nothing.
        for i in 0..a.len() {
            let mut flipped = a.clone();
            flipped[i] ^= 0x10;
            assert!(parse(&flipped).1.is_empty(), "bit flip at {i} went unnoticed");
        }
        // A path outside the device's objects is refused.
        for bad in ["../etc/passwd", "/etc/passwd", "objects/../x", "tmp/x"] {
            assert!(parse(&encode(1, OP_PUT, Path::new(bad), &[b"x"])).1.is_empty(), "{bad}");
        }
    }

    /// A WRITE_AT record reads back as its parts; parts that do not fill its data exactly
    /// end the segment; a replay writes them into the file after its last PUT, in order,
    /// and not after a FORGET.
    #[test]
    fn writes_in_place_read_back_and_are_written_again_by_a_replay() {
        let parts: [(u64, &[u8]); 2] = [(4096, b"kept block"), (1552, &[0xff, 0x01])];
        let record = encode(5, OP_WRITE_AT, Path::new("objects/1/ab/c"), &[&encode_parts(&parts)]);
        let (_, records) = parse(&record);
        let want = parts.iter().map(|(o, b)| (*o, b.to_vec())).collect();
        assert_eq!(records, vec![Record::WriteAt { path: "objects/1/ab/c".into(), parts: want }]);
        for bad in [&encode_parts(&parts)[..20], &[0u8; 11][..], &[0xff; 12][..]] {
            let torn = encode(5, OP_WRITE_AT, Path::new("objects/1/ab/c"), &[bad]);
            assert!(parse(&torn).1.is_empty(), "{bad:?}");
        }
        let dir = device();
        let (kept, put_then, forgotten) =
            (object(dir.path(), "kept"), object(dir.path(), "put"), object(dir.path(), "gone"));
        std::fs::write(&kept, vec![0u8; 8]).unwrap();
        std::fs::write(&forgotten, b"as it is").unwrap();
        let (journal, _) = Journal::open(dir.path(), Arc::new(RealDisk)).unwrap();
        drop(journal.write_at(&kept, &[(0, b"ab"), (6, b"yz")]).unwrap());
        drop(journal.write_at(&kept, &[(1, b"B")]).unwrap());
        drop(journal.put(&put_then, &[b"0123456789"]).unwrap());
        drop(journal.write_at(&put_then, &[(2, b"xx")]).unwrap());
        drop(journal.write_at(&forgotten, &[(0, b"XX")]).unwrap());
        journal.forget(&forgotten).unwrap();
        drop(journal.write_at(&object(dir.path(), "missing"), &[(0, b"x")]).unwrap());
        drop(journal);
        // A crash: none of the files was written.
        let (_, replayed) = Journal::open(dir.path(), Arc::new(RealDisk)).unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), b"aB\0\0\0\0yz");
        assert_eq!(std::fs::read(&put_then).unwrap(), b"01xx456789");
        assert_eq!(std::fs::read(&forgotten).unwrap(), b"as it is");
        assert!(!object(dir.path(), "missing").exists(), "nothing is created");
        assert_eq!(replayed.restored, 2);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_replay() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let good = encode(3, OP_PUT, Path::new("objects/1/ab/x"), &[b"data"]);
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut bytes = good.clone();
            let at = (seed as usize) % bytes.len();
            bytes[at] = (seed >> 32) as u8;
            bytes.truncate((seed >> 40) as usize % (bytes.len() + 1));
            let _ = parse(&bytes);
        }
    }

    #[test]
    fn a_crash_after_the_acknowledgement_loses_nothing_and_a_forget_is_respected() {
        let dir = device();
        let root = dir.path();
        let (kept, gone) = (object(root, "kept"), object(root, "gone"));
        {
            let (journal, replayed) = Journal::open(root, Arc::new(RealDisk)).unwrap();
            assert_eq!(replayed.restored, 0);
            for (path, content) in [(&kept, b"v1".as_slice()), (&gone, b"g1"), (&kept, b"v2")] {
                let guard = journal.put(path, &[content]).unwrap();
                std::fs::write(path, content).unwrap();
                drop(guard);
            }
            journal.forget(&gone).unwrap();
            std::fs::remove_file(&gone).unwrap();
            assert_eq!(journal.pending(), 1);
            // Dropped without a checkpoint: a crash. The files' writeback never happened.
        }
        std::fs::write(&kept, b"torn").unwrap();
        let (journal, replayed) = Journal::open(root, Arc::new(RealDisk)).unwrap();
        assert_eq!(replayed.restored, 1);
        assert_eq!(std::fs::read(&kept).unwrap(), b"v2", "the last acknowledged content");
        assert!(!gone.exists(), "a forgotten path is not brought back");
        drop(journal);
        // The replay emptied the journal: a second start restores nothing.
        std::fs::write(&kept, b"changed since, not through the journal").unwrap();
        let (_journal, replayed) = Journal::open(root, Arc::new(RealDisk)).unwrap();
        assert_eq!(replayed.restored, 0);
        assert_eq!(std::fs::read(&kept).unwrap(), b"changed since, not through the journal");
    }

    #[test]
    fn full_segments_are_checkpointed_and_reused_and_a_clean_close_leaves_nothing() {
        let dir = device();
        let root = dir.path();
        let (journal, _) = Journal::open_sized(root, Arc::new(RealDisk), 64 << 10).unwrap();
        let data = vec![7u8; 4096];
        // About 15 records per segment: 200 writes switch segments a dozen times.
        for i in 0..200 {
            let path = object(root, &format!("o{i}"));
            let guard = journal.put(&path, &[&data]).unwrap();
            std::fs::write(&path, &data).unwrap();
            drop(guard);
        }
        assert!(journal.pending() < 200, "checkpoints retired records: {}", journal.pending());
        journal.checkpoint_all().unwrap();
        assert_eq!(journal.pending(), 0);
        drop(journal);
        for i in 0..200 {
            std::fs::remove_file(object(root, &format!("o{i}"))).unwrap();
        }
        let (_journal, replayed) = Journal::open(root, Arc::new(RealDisk)).unwrap();
        assert_eq!(replayed.restored, 0, "nothing to replay after a clean close");
    }

    /// An append that may not wait says so when both segments are taken — the full one
    /// waiting for a write its caller still applies — and goes in once that write is applied.
    #[test]
    fn an_append_that_may_not_wait_says_so_and_goes_in_once_its_callers_write_is_applied() {
        let dir = device();
        let root = dir.path();
        let (journal, _) = Journal::open_sized(root, Arc::new(RealDisk), 16 << 10).unwrap();
        let held = object(root, "held");
        let (guard, seq) = journal.append_put(&held, &[&[1u8; 1024]], false).unwrap().unwrap();
        journal.wait_durable(seq).unwrap();
        // Fill the first segment and the second: the first cannot be checkpointed while
        // `guard` is held.
        let mut refused = None;
        for i in 0..64 {
            let path = object(root, &format!("o{i}"));
            match journal.append_put(&path, &[&[2u8; 1024]], false).unwrap() {
                Some((applying, seq)) => {
                    journal.wait_durable(seq).unwrap();
                    std::fs::write(&path, [2u8; 1024]).unwrap();
                    drop(applying);
                }
                None => {
                    refused = Some(path);
                    break;
                }
            }
        }
        let path = refused.expect("an append was refused with both segments taken");
        std::fs::write(&held, [1u8; 1024]).unwrap();
        drop(guard);
        let (applying, seq) = journal.append_put(&path, &[&[3u8; 1024]], true).unwrap().unwrap();
        journal.wait_durable(seq).unwrap();
        drop(applying);
    }

    #[test]
    fn a_failed_syncfs_falls_back_to_syncing_each_file() {
        let dir = device();
        let root = dir.path();
        let disk = Arc::new(FaultyDisk::new());
        disk.set_fault(Some(Fault::SyncFsError));
        let (journal, _) = Journal::open_sized(root, disk.clone(), 16 << 10).unwrap();
        for i in 0..40 {
            let path = object(root, &format!("o{i}"));
            let guard = journal.put(&path, &[&[1u8; 1024]]).unwrap();
            std::fs::write(&path, [1u8; 1024]).unwrap();
            drop(guard);
        }
        journal.checkpoint_all().unwrap();
        assert_eq!(journal.pending(), 0);
    }

    #[test]
    fn a_failed_sync_fails_the_write_and_stops_the_journal() {
        let dir = device();
        let root = dir.path();
        let disk = Arc::new(FaultyDisk::new());
        let (journal, _) = Journal::open(root, disk.clone()).unwrap();
        let path = object(root, "x");
        disk.set_fault(Some(Fault::WriteError));
        let error = journal.put(&path, &[b"x"]).err().expect("the sync failed");
        assert!(error.to_string().contains("journal"), "{error}");
        disk.set_fault(None);
        let error = journal.put(&path, &[b"y"]).err().expect("the journal stopped");
        assert!(error.to_string().contains("restart the server"), "{error}");
    }

    /// A disk whose journal syncs wait for a gate: what a put returns before the gate opens
    /// was acknowledged before its sync.
    struct GatedDisk {
        open: Mutex<bool>,
        opened: Condvar,
        syncs_started: AtomicBool,
        syncs: std::sync::atomic::AtomicUsize,
    }

    impl Disk for GatedDisk {
        fn sync_file(&self, file: &File) -> io::Result<()> {
            self.syncs_started.store(true, Ordering::SeqCst);
            self.syncs.fetch_add(1, Ordering::SeqCst);
            let mut open = lock(&self.open);
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
            RealDisk.sync_file(file)
        }
        fn write_temp(&self, temp: &Path, parts: &[&[u8]], durable: bool) -> io::Result<()> {
            RealDisk.write_temp(temp, parts, durable)
        }
        fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
            RealDisk.append(path, bytes)
        }
        fn sync(&self, path: &Path) -> io::Result<()> {
            RealDisk.sync(path)
        }
        fn publish(&self, temp: &Path, path: &Path) -> io::Result<()> {
            RealDisk.publish(temp, path)
        }
        fn publish_if_absent(&self, temp: &Path, path: &Path) -> io::Result<()> {
            RealDisk.publish_if_absent(temp, path)
        }
        fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
            RealDisk.read(path)
        }
        fn read_prefix(&self, path: &Path, bytes: usize) -> io::Result<Vec<u8>> {
            RealDisk.read_prefix(path, bytes)
        }
        fn remove(&self, path: &Path) -> io::Result<()> {
            RealDisk.remove(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            RealDisk.rename(from, to)
        }
        fn create_dir_all(&self, path: &Path) -> io::Result<()> {
            RealDisk.create_dir_all(path)
        }
        fn create_dir(&self, path: &Path) -> io::Result<()> {
            RealDisk.create_dir(path)
        }
        fn list(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
            RealDisk.list(path)
        }
        fn write_sparse_temp(
            &self,
            temp: &Path,
            parts: &[(u64, &[u8])],
            len: u64,
            durable: bool,
        ) -> io::Result<()> {
            RealDisk.write_sparse_temp(temp, parts, len, durable)
        }
        fn overwrite(&self, path: &Path, parts: &[&[u8]]) -> io::Result<()> {
            RealDisk.overwrite(path, parts)
        }
        fn write_at(&self, path: &Path, parts: &[(u64, &[u8])], durable: bool) -> io::Result<()> {
            RealDisk.write_at(path, parts, durable)
        }
        fn read_at(&self, path: &Path, ranges: &[(u64, usize)]) -> io::Result<Vec<Vec<u8>>> {
            RealDisk.read_at(path, ranges)
        }
        fn punch(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
            RealDisk.punch(path, offset, len)
        }
        fn open_read(&self, path: &Path) -> io::Result<File> {
            RealDisk.open_read(path)
        }
        fn sync_fs(&self, dir: &Path) -> io::Result<()> {
            RealDisk.sync_fs(dir)
        }
    }

    #[test]
    fn a_put_returns_only_after_the_sync_of_its_record_and_concurrent_puts_share_it() {
        let dir = device();
        let root = dir.path().to_path_buf();
        // Opened with the gate open (the start empties the segments, which syncs them).
        let disk = Arc::new(GatedDisk {
            open: Mutex::new(true),
            opened: Condvar::new(),
            syncs_started: AtomicBool::new(false),
            syncs: std::sync::atomic::AtomicUsize::new(0),
        });
        let (journal, _) = Journal::open(&root, disk.clone()).unwrap();
        *lock(&disk.open) = false;
        disk.syncs_started.store(false, Ordering::SeqCst);
        let journal = Arc::new(journal);
        let returned = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let writers: Vec<_> = (0..8)
            .map(|i| {
                let (journal, returned) = (Arc::clone(&journal), Arc::clone(&returned));
                let path = object(&root, &format!("o{i}"));
                std::thread::spawn(move || {
                    journal.put(&path, &[b"data"]).map(drop).unwrap();
                    returned.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        while !disk.syncs_started.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(returned.load(Ordering::SeqCst), 0, "a put returned before its sync");
        let syncs_before = disk.syncs.load(Ordering::SeqCst);
        *lock(&disk.open) = true;
        disk.opened.notify_all();
        for writer in writers {
            writer.join().unwrap();
        }
        assert_eq!(returned.load(Ordering::SeqCst), 8);
        // The eight records waited on one or two syncs, not eight.
        let syncs = disk.syncs.load(Ordering::SeqCst) - syncs_before;
        assert!(syncs <= 3, "{syncs} syncs for 8 concurrent puts");
    }
}
