//! The local dirty log: the embedded default (one machine), and the Redis backend's spill.
//!
//! A directory holds three files:
//!
//! * `log`: a 32-byte header (magic, format, *generation*) then records, each
//!   `length | crc32c | entry` (see [`super::codec`]), appended and never changed in place;
//! * `head`: where the unpopped entries start: (generation, byte offset, record index),
//!   replaced atomically (write, fsync, rename, fsync the directory) by `pop_front`;
//! * `lock`: never written; every operation holds a `flock` on it, shared for `range` and
//!   `len`, exclusive for appends, pops and compaction. `flock` locks conflict between
//!   separate opens even inside one process, so the same lock orders threads and processes.
//!
//! **Appends.** Under the exclusive lock an appender reads the records written by others since
//! it last looked (checking their checksums), cuts off any torn tail (a writer that died in
//! the middle of `write`: no live writer can be writing, since writers hold the lock), writes
//! its records with one `pwrite` at the end of the valid records, and drops the lock; then it
//! `fdatasync`s and only then answers. Writing under the lock but syncing after it lets the
//! next appender (of this or another process) write while this one syncs. Pushes from tasks
//! of one process are *group-committed*: while one round writes and syncs, later pushes queue,
//! and the next round writes them all with one `pwrite` and one `fdatasync`.
//!
//! **Crashes.** A push is acknowledged after an `fdatasync` that covers every record before
//! it, so after a machine crash the first record that fails its checksum (torn, or never
//! written back) and everything after it were never acknowledged; `open` and every append cut
//! the log there (with a warning). A reader holding the shared lock only stops there.
//!
//! **Compaction.** `pop_front` only moves the head. When the popped prefix is at least
//! [`COMPACT_POPPED_BYTES_MIN`] and half the log, the remaining records are copied under the
//! exclusive lock into `log.compact` with the next generation, synced and renamed over `log`;
//! then the head is reset. A crash between the rename and the head update leaves a head of an
//! older generation, which means "from the start of the file". Every operation opens `log` by
//! name under the lock, so no process appends to a replaced file.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;

use super::check::check_entries;
use super::codec::{self, HEADER_BYTES, Head, RECORD_PREFIX_BYTES, RecordPrefix};
use super::{DirtyEntry, DirtyError, RANGE_ENTRIES_MAX};
use crate::durable;

/// The largest log file; an append past it fails with [`DirtyError::Full`].
pub const LOG_BYTES_MAX: u64 = 4 << 30;
/// Compaction runs when at least this many bytes have been popped …
pub const COMPACT_POPPED_BYTES_MIN: u64 = 8 << 20;
/// The most bytes one group-commit round writes (more waits for the next round).
pub const GROUP_BYTES_MAX: usize = 4 << 20;
/// One record position in every this many is remembered, so that `range` from any position
/// reads at most this many records before the first one it returns.
const CHECKPOINT_STRIDE: u64 = 256;
/// Read buffer for scans.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// The log file's name in the directory.
const LOG_FILE: &str = "log";
/// The head file's name.
const HEAD_FILE: &str = "head";
/// The lock file's name.
const LOCK_FILE: &str = "lock";
/// Compaction's temporary file.
const COMPACT_FILE: &str = "log.compact";
/// The head's temporary file.
const HEAD_TEMP_FILE: &str = "head.tmp";

/// The local dirty log in one directory. Cheap to clone; every clone shares one group-commit
/// queue. Needs a Tokio runtime (the file work runs on its blocking pool).
#[derive(Clone)]
pub struct LocalDirtyLog {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for LocalDirtyLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalDirtyLog").field("dir", &self.inner.dir).finish()
    }
}

/// What every clone shares.
struct Inner {
    /// The directory.
    dir: PathBuf,
    /// What this process knows of the log's valid records.
    scan: Mutex<Scan>,
    /// Pushes waiting for the next group-commit round.
    queue: Mutex<AppendQueue>,
}

/// The valid records of one generation of the log file, as far as this process has read them.
/// Records are never changed once valid, so what was read stays true for the generation.
struct Scan {
    /// The generation read.
    generation: u64,
    /// Byte offset of record `i * CHECKPOINT_STRIDE`.
    checkpoints: Vec<u64>,
    /// End of the last valid record read.
    end_offset: u64,
    /// Valid records read.
    end_index: u64,
}

impl Scan {
    fn new(generation: u64) -> Scan {
        Scan { generation, checkpoints: Vec::new(), end_offset: HEADER_BYTES, end_index: 0 }
    }

    /// Notes a valid record of `bytes` at the end.
    fn add(&mut self, bytes: u64) {
        if self.end_index.is_multiple_of(CHECKPOINT_STRIDE) {
            self.checkpoints.push(self.end_offset);
        }
        self.end_offset += bytes;
        self.end_index += 1;
    }
}

/// Pushes waiting to be written.
struct AppendQueue {
    /// In arrival order.
    pending: VecDeque<PendingAppend>,
    /// Whether a flusher thread is running (it takes whatever is pending until none is).
    flushing: bool,
}

/// One push's records and where to answer.
struct PendingAppend {
    records: Vec<u8>,
    done: oneshot::Sender<Result<(), DirtyError>>,
}

/// Whether an operation may change the files.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
}

fn lock_mutex<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs file work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, DirtyError> + Send + 'static,
) -> Result<T, DirtyError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| DirtyError::Background { task: "file worker", reason: e.to_string() })?
}

impl LocalDirtyLog {
    /// Opens the log in `dir`, creating the directory and an empty log if needed, and repairs
    /// a torn tail (with a warning).
    pub async fn open(dir: &Path) -> Result<LocalDirtyLog, DirtyError> {
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            scan: Mutex::new(Scan::new(0)),
            queue: Mutex::new(AppendQueue { pending: VecDeque::new(), flushing: false }),
        });
        let opened = inner.clone();
        blocking(move || opened.open_blocking()).await?;
        Ok(LocalDirtyLog { inner })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The log file (for tools and tests).
    pub fn log_path(&self) -> PathBuf {
        self.inner.path(LOG_FILE)
    }

    /// Appends `entries` at the tail, in order; durable (fdatasync'd) when it returns.
    pub async fn push(&self, entries: &[DirtyEntry]) -> Result<(), DirtyError> {
        check_entries(entries)?;
        if entries.is_empty() {
            return Ok(());
        }
        let mut records = Vec::with_capacity(entries.len() * 48);
        for entry in entries {
            codec::encode_record(entry, &mut records);
        }
        let (done, answer) = oneshot::channel();
        let start_flusher = {
            let mut queue = lock_mutex(&self.inner.queue);
            queue.pending.push_back(PendingAppend { records, done });
            !std::mem::replace(&mut queue.flushing, true)
        };
        if start_flusher {
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || inner.flush_loop());
        }
        answer.await.map_err(|_| DirtyError::Background {
            task: "group commit",
            reason: "it stopped without answering (a panic: see the log)".to_string(),
        })?
    }

    /// Up to `count` entries from position `start` (0 = the oldest unpopped), oldest first.
    pub async fn range(&self, start: u64, count: usize) -> Result<Vec<DirtyEntry>, DirtyError> {
        if count > RANGE_ENTRIES_MAX {
            return Err(DirtyError::TooMany {
                operation: "range",
                count: count as u64,
                max: RANGE_ENTRIES_MAX as u64,
            });
        }
        if count == 0 {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        blocking(move || inner.range_blocking(start, count)).await
    }

    /// Removes up to `count` oldest entries; returns how many were removed. Compacts the log
    /// when the popped prefix is large.
    pub async fn pop_front(&self, count: u64) -> Result<u64, DirtyError> {
        if count > RANGE_ENTRIES_MAX as u64 {
            return Err(DirtyError::TooMany {
                operation: "pop_front",
                count,
                max: RANGE_ENTRIES_MAX as u64,
            });
        }
        if count == 0 {
            return Ok(0);
        }
        let inner = self.inner.clone();
        blocking(move || inner.pop_front_blocking(count)).await
    }

    /// How many entries are in the log (unpopped).
    pub async fn len(&self) -> Result<u64, DirtyError> {
        let inner = self.inner.clone();
        blocking(move || inner.len_blocking()).await
    }

    /// Whether the log holds no unpopped entry.
    pub async fn is_empty(&self) -> Result<bool, DirtyError> {
        Ok(self.len().await? == 0)
    }

    /// Rewrites the log without its popped prefix now, whatever its size; returns whether
    /// there was anything to drop.
    pub async fn compact(&self) -> Result<bool, DirtyError> {
        let inner = self.inner.clone();
        blocking(move || inner.compact_blocking()).await
    }
}

impl Inner {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Takes the directory's lock, shared or exclusive; released when the file is dropped.
    fn lock(&self, access: Access) -> Result<File, DirtyError> {
        let path = self.path(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(crate::private::FILE_MODE)
            .open(&path)
            .map_err(|e| DirtyError::io("open the lock file", &path, e))?;
        let locked = match access {
            Access::Read => file.lock_shared(),
            Access::Write => file.lock(),
        };
        locked.map_err(|e| DirtyError::io("flock", &path, e))?;
        Ok(file)
    }

    /// Opens the log file and reads its generation.
    fn open_log(&self, access: Access) -> Result<(File, u64), DirtyError> {
        let path = self.path(LOG_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(access == Access::Write)
            .open(&path)
            .map_err(|e| DirtyError::io("open", &path, e))?;
        let mut header = [0u8; HEADER_BYTES as usize];
        let read =
            read_at_most(&file, &mut header, 0).map_err(|e| DirtyError::io("read", &path, e))?;
        let generation = codec::decode_header(&header[..read]).map_err(|reason| {
            DirtyError::Corrupt { path: path.clone(), offset: 0, reason: reason.to_string() }
        })?;
        Ok((file, generation))
    }

    /// Reads the head file; `None` when there is none.
    fn read_head(&self) -> Result<Option<Head>, DirtyError> {
        let path = self.path(HEAD_FILE);
        match fs::read(&path) {
            Ok(bytes) => codec::decode_head(&bytes).map(Some).map_err(|reason| {
                DirtyError::Corrupt { path, offset: 0, reason: reason.to_string() }
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(DirtyError::io("read", &path, e)),
        }
    }

    /// The head for the log of `generation`: a head of an older generation (a crash after a
    /// compaction's rename) means the start of the file.
    fn head_for(&self, generation: u64) -> Result<Head, DirtyError> {
        match self.read_head()? {
            Some(head) if head.generation == generation => Ok(head),
            Some(head) if head.generation < generation => Ok(Head::start(generation)),
            Some(head) => Err(DirtyError::Corrupt {
                path: self.path(HEAD_FILE),
                offset: 0,
                reason: format!(
                    "the head is of generation {} but the log only of generation {generation}",
                    head.generation
                ),
            }),
            None => Ok(Head::start(generation)),
        }
    }

    /// Replaces the head file atomically and durably.
    fn write_head(&self, head: Head) -> Result<(), DirtyError> {
        let temp = self.path(HEAD_TEMP_FILE);
        write_file_durably(&temp, &[&codec::encode_head(head)])?;
        let path = self.path(HEAD_FILE);
        durable::rename_over(&temp, &path).map_err(|e| DirtyError::io("rename over", &path, e))
    }

    /// Brings `scan` up to date with the log file of `generation`: reads (and checks) records
    /// written since. Returns the file's length; `scan.end_offset` is less when a torn or
    /// damaged tail follows the valid records.
    fn refresh(&self, scan: &mut Scan, file: &File, generation: u64) -> Result<u64, DirtyError> {
        let path = self.path(LOG_FILE);
        if scan.generation != generation {
            *scan = Scan::new(generation);
        }
        let file_bytes = file.metadata().map_err(|e| DirtyError::io("stat", &path, e))?.len();
        if file_bytes < scan.end_offset {
            // Valid records are never cut: the file was replaced behind the log's back.
            tracing::warn!(log = %path.display(), "dirty log: the file shrank; reading it again");
            *scan = Scan::new(generation);
        }
        if file_bytes <= scan.end_offset {
            return Ok(file_bytes);
        }
        let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, file);
        reader
            .seek(SeekFrom::Start(scan.end_offset))
            .map_err(|e| DirtyError::io("seek", &path, e))?;
        let mut payload = Vec::new();
        while scan.end_offset < file_bytes {
            match read_record(&mut reader, &mut payload)
                .map_err(|e| DirtyError::io("read", &path, e))?
            {
                Some((bytes, _entry)) => scan.add(bytes),
                None => break,
            }
        }
        Ok(file_bytes)
    }

    /// Reads `take` entries after skipping `skip` valid records from the record at `offset`
    /// (collecting nothing when `out` is `None`); returns the offset after the last one.
    fn walk(
        &self,
        file: &File,
        offset: u64,
        skip: u64,
        take: u64,
        mut out: Option<&mut Vec<DirtyEntry>>,
    ) -> Result<u64, DirtyError> {
        let path = self.path(LOG_FILE);
        let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, file);
        reader.seek(SeekFrom::Start(offset)).map_err(|e| DirtyError::io("seek", &path, e))?;
        let mut payload = Vec::new();
        let mut at = offset;
        for i in 0..skip + take {
            let record = read_record(&mut reader, &mut payload)
                .map_err(|e| DirtyError::io("read", &path, e))?;
            let Some((bytes, entry)) = record else {
                return Err(DirtyError::Corrupt {
                    path,
                    offset: at,
                    reason: "a record checked before no longer reads back: was the file \
                             changed by another program?"
                        .to_string(),
                });
            };
            at += bytes;
            if let Some(out) = out.as_deref_mut()
                && i >= skip
            {
                out.push(entry);
            }
        }
        Ok(at)
    }

    /// The byte offset of valid record `index` (`scan.end_offset` for `scan.end_index`).
    fn offset_of(&self, scan: &Scan, file: &File, index: u64) -> Result<u64, DirtyError> {
        debug_assert!(index <= scan.end_index);
        if index == scan.end_index {
            return Ok(scan.end_offset);
        }
        let checkpoint = index / CHECKPOINT_STRIDE;
        let from = scan.checkpoints[checkpoint as usize];
        self.walk(file, from, index - checkpoint * CHECKPOINT_STRIDE, 0, None)
    }

    fn open_blocking(&self) -> Result<(), DirtyError> {
        // The table names object keys: its directory and files are the owner's only.
        crate::private::create_dir_all(&self.dir)
            .map_err(|e| DirtyError::io("create", &self.dir, e))?;
        let _lock = self.lock(Access::Write)?;
        let log_path = self.path(LOG_FILE);
        if !log_path.exists() {
            // From the clock, so that a log re-created after its directory was deleted never
            // takes the generation of one a running process still remembers.
            let clock = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |since| since.as_nanos() as u64);
            let generation = self.read_head()?.map_or(clock, |head| clock.max(head.generation + 1));
            let temp = self.path(COMPACT_FILE);
            write_file_durably(&temp, &[&codec::encode_header(generation)])?;
            durable::rename_over(&temp, &log_path)
                .map_err(|e| DirtyError::io("rename over", &log_path, e))?;
        }
        match fs::remove_file(self.path(COMPACT_FILE)) {
            Ok(()) => tracing::warn!(dir = %self.dir.display(), "removed an unfinished compaction"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(DirtyError::io("remove", self.path(COMPACT_FILE), e)),
        }
        let (file, generation) = self.open_log(Access::Write)?;
        let head = self.head_for(generation)?;
        if self.read_head()? != Some(head) {
            self.write_head(head)?;
        }
        let mut scan = lock_mutex(&self.scan);
        self.cut_torn_tail(&mut scan, &file, generation)?;
        if head.index > scan.end_index || self.offset_of(&scan, &file, head.index)? != head.offset {
            return Err(DirtyError::Corrupt {
                path: self.path(HEAD_FILE),
                offset: 0,
                reason: format!(
                    "the head (record {} at byte {}) is not a record of the log's {} records",
                    head.index, head.offset, scan.end_index
                ),
            });
        }
        Ok(())
    }

    /// Under the exclusive lock: refreshes `scan` and cuts the file after the valid records.
    fn cut_torn_tail(
        &self,
        scan: &mut Scan,
        file: &File,
        generation: u64,
    ) -> Result<(), DirtyError> {
        let file_bytes = self.refresh(scan, file, generation)?;
        if scan.end_offset < file_bytes {
            let path = self.path(LOG_FILE);
            tracing::warn!(
                log = %path.display(),
                offset = scan.end_offset,
                bytes = file_bytes - scan.end_offset,
                "dirty log: cutting a torn tail (records never acknowledged, left by a crash)"
            );
            file.set_len(scan.end_offset).map_err(|e| DirtyError::io("truncate", &path, e))?;
            file.sync_data().map_err(|e| DirtyError::io("fdatasync", &path, e))?;
        }
        Ok(())
    }

    /// Writes `records` at the end of the log under the exclusive lock, then syncs them.
    fn append_durably(&self, records: &[u8]) -> Result<(), DirtyError> {
        let path = self.path(LOG_FILE);
        let file = {
            let _lock = self.lock(Access::Write)?;
            let (file, generation) = self.open_log(Access::Write)?;
            let mut scan = lock_mutex(&self.scan);
            self.cut_torn_tail(&mut scan, &file, generation)?;
            let end = scan.end_offset;
            let bytes = end + records.len() as u64;
            if bytes > LOG_BYTES_MAX {
                return Err(DirtyError::Full { path, bytes, max: LOG_BYTES_MAX });
            }
            if let Err(e) = file.write_all_at(records, end) {
                // Leave no partial record behind for the next appender to cut.
                let _ = file.set_len(end);
                return Err(DirtyError::io("append to", &path, e));
            }
            let mut at = 0;
            while at < records.len() {
                let length = u32::from_le_bytes(
                    records[at..at + 4].try_into().expect("records were encoded whole"),
                );
                let record_bytes = RECORD_PREFIX_BYTES + length as usize;
                scan.add(record_bytes as u64);
                at += record_bytes;
            }
            file
        };
        // Synced after the lock is dropped: a compaction that ran since copied these records
        // from the page cache and synced its copy before renaming it over this file.
        file.sync_data().map_err(|e| DirtyError::io("fdatasync", &path, e))
    }

    /// The group-commit flusher: writes whatever is pending, round after round, until nothing
    /// is.
    fn flush_loop(self: Arc<Self>) {
        /// Lets a later push start a new flusher if this one panics.
        struct Guard<'a>(&'a Inner);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    lock_mutex(&self.0.queue).flushing = false;
                }
            }
        }
        let _guard = Guard(&self);
        loop {
            let round = {
                let mut queue = lock_mutex(&self.queue);
                let mut round = Vec::new();
                let mut bytes = 0;
                while let Some(next) = queue.pending.front() {
                    if !round.is_empty() && bytes + next.records.len() > GROUP_BYTES_MAX {
                        break;
                    }
                    bytes += next.records.len();
                    round.push(queue.pending.pop_front().expect("front was Some"));
                }
                if round.is_empty() {
                    queue.flushing = false;
                    return;
                }
                round
            };
            let result = if round.len() == 1 {
                self.append_durably(&round[0].records)
            } else {
                let batch: Vec<u8> = round.iter().flat_map(|p| p.records.iter().copied()).collect();
                self.append_durably(&batch)
            };
            for pending in round {
                // A push whose caller went away needs no answer.
                let _ = pending.done.send(result.clone());
            }
        }
    }

    fn range_blocking(&self, start: u64, count: usize) -> Result<Vec<DirtyEntry>, DirtyError> {
        let _lock = self.lock(Access::Read)?;
        let (file, generation) = self.open_log(Access::Read)?;
        let head = self.head_for(generation)?;
        let mut scan = lock_mutex(&self.scan);
        self.refresh(&mut scan, &file, generation)?;
        let Some(first) = head.index.checked_add(start).filter(|&i| i < scan.end_index) else {
            return Ok(Vec::new());
        };
        let take = (count as u64).min(scan.end_index - first);
        let checkpoint = first / CHECKPOINT_STRIDE;
        let from = scan.checkpoints[checkpoint as usize];
        let mut out = Vec::with_capacity(take as usize);
        self.walk(&file, from, first - checkpoint * CHECKPOINT_STRIDE, take, Some(&mut out))?;
        Ok(out)
    }

    fn len_blocking(&self) -> Result<u64, DirtyError> {
        let _lock = self.lock(Access::Read)?;
        let (file, generation) = self.open_log(Access::Read)?;
        let head = self.head_for(generation)?;
        let mut scan = lock_mutex(&self.scan);
        self.refresh(&mut scan, &file, generation)?;
        Ok(scan.end_index.saturating_sub(head.index))
    }

    fn pop_front_blocking(&self, count: u64) -> Result<u64, DirtyError> {
        let _lock = self.lock(Access::Write)?;
        let (file, generation) = self.open_log(Access::Read)?;
        let head = self.head_for(generation)?;
        let mut scan = lock_mutex(&self.scan);
        self.refresh(&mut scan, &file, generation)?;
        let popped = count.min(scan.end_index.saturating_sub(head.index));
        if popped == 0 {
            return Ok(0);
        }
        let index = head.index + popped;
        let offset = self.offset_of(&scan, &file, index)?;
        let head = Head { generation, offset, index };
        self.write_head(head)?;
        let popped_bytes = offset - HEADER_BYTES;
        if popped_bytes >= COMPACT_POPPED_BYTES_MIN && popped_bytes >= scan.end_offset - offset {
            self.compact_locked(&mut scan, &file, head)?;
        }
        Ok(popped)
    }

    fn compact_blocking(&self) -> Result<bool, DirtyError> {
        let _lock = self.lock(Access::Write)?;
        let (file, generation) = self.open_log(Access::Write)?;
        let head = self.head_for(generation)?;
        let mut scan = lock_mutex(&self.scan);
        self.cut_torn_tail(&mut scan, &file, generation)?;
        if head.offset == HEADER_BYTES {
            return Ok(false);
        }
        self.compact_locked(&mut scan, &file, head)?;
        Ok(true)
    }

    /// Under the exclusive lock, with `scan` up to date: replaces the log by its records from
    /// `head` on, in a file of the next generation, and resets the head.
    fn compact_locked(&self, scan: &mut Scan, file: &File, head: Head) -> Result<(), DirtyError> {
        let log_path = self.path(LOG_FILE);
        let temp = self.path(COMPACT_FILE);
        let generation = head.generation + 1;
        let kept_bytes = scan.end_offset - head.offset;
        let mut output =
            crate::private::create(&temp).map_err(|e| DirtyError::io("create", &temp, e))?;
        let write = |output: &mut File| -> io::Result<()> {
            io::Write::write_all(output, &codec::encode_header(generation))?;
            let mut input = file.try_clone()?;
            input.seek(SeekFrom::Start(head.offset))?;
            let copied = io::copy(&mut input.take(kept_bytes), output)?;
            if copied != kept_bytes {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the log shrank"));
            }
            output.sync_all()
        };
        write(&mut output).map_err(|e| DirtyError::io("write", &temp, e))?;
        durable::rename_over(&temp, &log_path)
            .map_err(|e| DirtyError::io("rename over", &log_path, e))?;
        self.write_head(Head::start(generation))?;
        tracing::debug!(
            log = %log_path.display(),
            generation,
            dropped_bytes = head.offset - HEADER_BYTES,
            kept_bytes,
            "dirty log compacted"
        );
        *scan = Scan::new(generation);
        Ok(())
    }
}

/// Reads one record; `None` at the end of the valid records (end of file, torn or damaged
/// record). Returns the record's size and entry.
fn read_record(
    reader: &mut impl Read,
    payload: &mut Vec<u8>,
) -> io::Result<Option<(u64, DirtyEntry)>> {
    let mut prefix = [0u8; RECORD_PREFIX_BYTES];
    if !read_full(reader, &mut prefix)? {
        return Ok(None);
    }
    let RecordPrefix::Payload { bytes, crc } = codec::decode_record_prefix(&prefix) else {
        return Ok(None);
    };
    payload.resize(bytes, 0);
    if !read_full(reader, payload)? {
        return Ok(None);
    }
    Ok(codec::decode_record_payload(crc, payload)
        .map(|entry| ((RECORD_PREFIX_BYTES + bytes) as u64, entry)))
}

/// Fills `buffer`; `false` if the file ends first.
fn read_full(reader: &mut impl Read, buffer: &mut [u8]) -> io::Result<bool> {
    match reader.read_exact(buffer) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Reads up to `buffer.len()` bytes at `offset`; returns how many.
fn read_at_most(file: &File, buffer: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut read = 0;
    while read < buffer.len() {
        match file.read_at(&mut buffer[read..], offset + read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(read)
}

/// Creates (or truncates) `path`, writes `parts` and fsyncs it.
fn write_file_durably(path: &Path, parts: &[&[u8]]) -> Result<(), DirtyError> {
    let write = || -> io::Result<()> {
        let mut file = crate::private::create(path)?;
        for part in parts {
            io::Write::write_all(&mut file, part)?;
        }
        file.sync_all()
    };
    write().map_err(|e| DirtyError::io("write", path, e))
}
