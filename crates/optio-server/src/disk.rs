//! All file I/O of a device goes through [`Disk`], so that tests can inject faults (a full
//! disk, a failing fsync, a crash between writing and renaming) without touching the code
//! under test.
//!
//! What a device creates is private to the server's user, from the moment it exists: every
//! directory is made [`DIR_MODE`] (0700) and every file [`FILE_MODE`] (0600), by the call that
//! creates it (never a `chmod` afterwards, which would leave a window). Renames and hard links
//! keep a file's mode, so published objects, records and markers are 0600 too.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of every directory a device creates (the umask may only narrow it).
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file a device creates (the umask may only narrow it).
pub const FILE_MODE: u32 = 0o600;

/// The file operations a device needs. Whatever an implementation creates must be private
/// to the server's user ([`DIR_MODE`], [`FILE_MODE`]), as [`RealDisk`]'s is.
pub trait Disk: Send + Sync + 'static {
    /// Writes `parts` (concatenated) to a new file at `temp`, durably (fsync) when `durable`.
    fn write_temp(&self, temp: &Path, parts: &[&[u8]], durable: bool) -> io::Result<()>;
    /// Appends `bytes` to the file at `path` (created if missing) and makes them durable
    /// (fdatasync; the directory too when the file is new).
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Makes a file and its directory entry durable (fsync of both).
    fn sync(&self, path: &Path) -> io::Result<()>;
    /// Atomically moves `temp` to `path`, replacing it (rename), then makes the directory
    /// entry durable (fsync of the directory).
    fn publish(&self, temp: &Path, path: &Path) -> io::Result<()>;
    /// Atomically moves `temp` to `path` only if `path` does not exist (a hard link, then the
    /// temporary name is removed), then makes the directory entry durable. Fails with
    /// [`io::ErrorKind::AlreadyExists`] when `path` exists.
    fn publish_if_absent(&self, temp: &Path, path: &Path) -> io::Result<()>;
    /// Reads a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Reads a whole file into `out` (emptied first; its memory reused where it is large
    /// enough).
    fn read_into(&self, path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
        *out = self.read(path)?;
        Ok(())
    }
    /// Reads at most `bytes` from the start of a file.
    fn read_prefix(&self, path: &Path, bytes: usize) -> io::Result<Vec<u8>>;
    /// Removes a file and makes the removal durable.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Removes a file without making the removal durable: [`Disk::sync_dir`] of its
    /// directory does (a removal of many files syncs each directory once).
    fn remove_unsynced(&self, path: &Path) -> io::Result<()> {
        self.remove(path)
    }
    /// Makes a directory's entries durable (fsync of the directory).
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    /// Renames without durability guarantees (quarantine).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Creates a directory and its parents, durably.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory if it does not exist, not durably (sync its parent after).
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// The entries of a directory (empty when it does not exist).
    fn list(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// Creates `temp` (new) as a file of `len` bytes holding `parts` at their offsets and
    /// holes elsewhere; with `durable`, syncs it.
    fn write_sparse_temp(
        &self,
        temp: &Path,
        parts: &[(u64, &[u8])],
        len: u64,
        durable: bool,
    ) -> io::Result<()>;
    /// Writes `parts` at their offsets into the existing file `path` (in order); with
    /// `durable`, syncs its data.
    fn write_at(&self, path: &Path, parts: &[(u64, &[u8])], durable: bool) -> io::Result<()>;
    /// Replaces the content of the existing file `path` in place, not durably: `parts`
    /// (concatenated) written from its start, then the file cut to their length. No new
    /// inode, no rename: on ext4 a file replaced by a rename costs a create, the old inode's
    /// release and a writeback the rename starts (`auto_da_alloc`), 92-182 µs against 6-8
    /// for this (docs/benchmarks.md). A reader may see the file half rewritten; the store's
    /// readers that do not hold the key read again under it ([`crate::store`]).
    /// [`io::ErrorKind::NotFound`] when there is no such file (none is created).
    fn overwrite(&self, path: &Path, parts: &[&[u8]]) -> io::Result<()>;
    /// Reads exactly `len` bytes at `offset` of `path`, for each `(offset, len)` of `ranges`
    /// (one open of the file for them all).
    fn read_at(&self, path: &Path, ranges: &[(u64, usize)]) -> io::Result<Vec<Vec<u8>>>;
    /// Frees `len` bytes at `offset` of `path` (they read back as zeros; the size stays).
    fn punch(&self, path: &Path, offset: u64, len: u64) -> io::Result<()>;
    /// Opens `path` read-only (close-on-exec), for a local reader ([`crate::store`]'s
    /// `open_block_file`).
    fn open_read(&self, path: &Path) -> io::Result<File>;
    /// Makes every write to the file system holding the directory `dir` durable.
    fn sync_fs(&self, dir: &Path) -> io::Result<()>;
    /// Makes the data written to an open file durable (`fdatasync`, counted): the journal's
    /// segments ([`crate::journal`]).
    fn sync_file(&self, file: &File) -> io::Result<()> {
        sync_data(file)
    }
    /// Copies the file `from` to a new file `temp` (mode [`FILE_MODE`]), not durably: a
    /// reflink where the file system has them (`std::fs::copy` uses `copy_file_range` on
    /// Linux, which shares the blocks on Btrfs and XFS), else a copy in the kernel. Holes
    /// stay holes where the file system keeps them.
    fn copy_temp(&self, from: &Path, temp: &Path) -> io::Result<()> {
        RealDisk.copy_temp(from, temp)
    }
    /// Swaps the files `a` and `b` (both exist) in one step (`renameat2` with
    /// `RENAME_EXCHANGE`), not durably: after a crash either both names moved or neither did.
    fn exchange(&self, a: &Path, b: &Path) -> io::Result<()> {
        RealDisk.exchange(a, b)
    }
    /// The ranges `[start, end)` of `path` between `from` and `to` that hold data (not holes):
    /// what the file system allocated, or holds written in its page cache
    /// (`SEEK_DATA`/`SEEK_HOLE`). A file system that keeps no holes reports one range.
    fn data_ranges(&self, path: &Path, from: u64, to: u64) -> io::Result<Vec<(u64, u64)>> {
        RealDisk.data_ranges(path, from, to)
    }
}

/// The real file system; directories are created 0700 and files 0600.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealDisk;

/// The syncs (fsync, fdatasync, syncfs) this process's [`RealDisk`] made: what a write
/// costs the disk, in `/v1/status` (`syncs`) and `/metrics` (`optio_disk_syncs_total`).
static SYNCS: AtomicU64 = AtomicU64::new(0);

/// The syncs this process made so far.
pub fn syncs() -> u64 {
    SYNCS.load(Ordering::Relaxed)
}

/// `fdatasync`, counted.
fn sync_data(file: &File) -> io::Result<()> {
    SYNCS.fetch_add(1, Ordering::Relaxed);
    file.sync_data()
}

/// `fsync`, counted.
fn sync_all(file: &File) -> io::Result<()> {
    SYNCS.fetch_add(1, Ordering::Relaxed);
    file.sync_all()
}

fn sync_dir(path: &Path) -> io::Result<()> {
    sync_all(&File::open(path)?)
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// The largest piece object files are written in. Linux (6.x, ext4 with large folios) caches
/// a file in folios as large as the writes that made them — up to 2 MiB for a 4 MiB object
/// written at once — and ext4 walks every 4 KiB block of a folio on each write into it: a
/// 4 KiB write into such a file took 11.0–13.1 µs against 3.5 µs into one written in 64 KiB
/// pieces (`scripts/bench-pwrite-folios.py`, docs/benchmarks.md), and a volume's random
/// writes are exactly that, twice on each replica. Whole 4 MiB objects write no slower.
pub const WRITE_PIECE_BYTES: usize = 64 << 10;

/// Files from this size on are written whole and read whole with `O_DIRECT`: from and into
/// the process's own buffers, past the page cache. On this project's machines (virtual, with
/// free page reporting) a page of the cache is a page the host takes back once freed and
/// must hand out again at its next use: a buffered write of 4 MiB and its `fdatasync` cost
/// 10.7–16.3 ms of CPU, 1.4–2.6 ms direct; a 4 MiB read 2.6 ms from the cache, 15.5 ms from
/// the disk through it, 0.8 ms direct (fio, docs/benchmarks.md). Ceph's BlueStore writes
/// and reads its data direct too. Smaller files, and writes in place (volumes' blocks),
/// stay in the cache.
pub const DIRECT_FROM_BYTES: usize = 1 << 20;

/// What `O_DIRECT` transfers are aligned to: their memory, offset and length (the logical
/// block size of every device here is 512 or 4,096 bytes).
const DIRECT_ALIGN: usize = 4096;

/// Whether large files are written past the page cache (`OPTIO_DIRECT_IO=0`: they are not).
fn direct_io() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("OPTIO_DIRECT_IO").map_or(true, |v| v != "0"))
}

/// Whether large files are read past the page cache (`OPTIO_DIRECT_IO=0` or `writes`: they
/// are not).
fn direct_reads() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("OPTIO_DIRECT_IO").map_or(true, |v| v != "0" && v != "writes"))
}

/// Buffers kept for direct writes (their pages stay the process's: a fresh buffer per write
/// would cost the faults the page cache's do).
static DIRECT_BUFFERS: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// At most this many bytes of them kept (eight 4 MiB objects' worth; a buffer that would
/// pass it — one of a 64 MiB object — is freed after its write).
const DIRECT_BUFFERS_KEPT_BYTES: usize = 8 * ((4 << 20) + 2 * DIRECT_ALIGN);

/// `O_DIRECT`'s flag for [`OpenOptionsExt::custom_flags`].
fn o_direct() -> i32 {
    rustix::fs::OFlags::DIRECT.bits() as i32
}

/// Whether `error` says the file system does not take `O_DIRECT` (or not at this alignment).
fn direct_refused(error: &io::Error) -> bool {
    error.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error())
}

/// Creates `temp` holding `parts` (`len` bytes) written with `O_DIRECT` from an aligned
/// buffer, cut to `len`, and synced. False: the file system refused `O_DIRECT`, nothing is
/// left at `temp` (write it through the cache).
fn write_direct(temp: &Path, parts: &[&[u8]], len: usize) -> io::Result<bool> {
    let padded = len.div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
    let mut buffer = {
        let mut kept = DIRECT_BUFFERS.lock().expect("direct buffers lock");
        match kept.iter().position(|b| b.len() >= padded + DIRECT_ALIGN) {
            Some(at) => kept.swap_remove(at),
            None => Vec::new(),
        }
    };
    if buffer.len() < padded + DIRECT_ALIGN {
        buffer.resize(padded + DIRECT_ALIGN, 0);
    }
    let start = buffer.as_ptr().align_offset(DIRECT_ALIGN);
    let region = &mut buffer[start..start + padded];
    let mut at = 0;
    for part in parts {
        region[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    region[len..].fill(0);
    let opened = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(o_direct())
        .open(temp);
    let result = match opened {
        Err(error) if direct_refused(&error) => Ok(false),
        Err(error) => Err(error),
        Ok(file) => {
            let written = (|| {
                file.write_all_at(region, 0)?;
                if padded != len {
                    file.set_len(len as u64)?;
                }
                sync_data(&file)
            })();
            match written {
                Ok(()) => Ok(true),
                Err(error) => {
                    let _ = fs::remove_file(temp);
                    if direct_refused(&error) { Ok(false) } else { Err(error) }
                }
            }
        }
    };
    let mut kept = DIRECT_BUFFERS.lock().expect("direct buffers lock");
    let held: usize = kept.iter().map(Vec::len).sum();
    if held + buffer.len() <= DIRECT_BUFFERS_KEPT_BYTES {
        kept.push(buffer);
    }
    result
}

/// Reads the whole file at `path` (`len` bytes when looked at) with `O_DIRECT` into `out`.
/// False: the file system refused `O_DIRECT`, or the file has grown past what was asked;
/// read it through the cache.
fn read_direct(path: &Path, len: u64, out: &mut Vec<u8>) -> io::Result<bool> {
    let Ok(len) = usize::try_from(len) else { return Ok(false) };
    // One block more than the length: a file that grew meanwhile is told by a full read.
    let asked = (len / DIRECT_ALIGN + 1) * DIRECT_ALIGN;
    let file = match OpenOptions::new().read(true).custom_flags(o_direct()).open(path) {
        Err(error) if direct_refused(&error) => return Ok(false),
        other => other?,
    };
    let need = asked + DIRECT_ALIGN;
    out.clear();
    out.try_reserve_exact(optio_net::buffers::capacity_for(need))
        .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e.to_string()))?;
    out.resize(need, 0);
    let start = out.as_ptr().align_offset(DIRECT_ALIGN);
    let mut read = 0;
    while read < asked {
        match file.read_at(&mut out[start + read..start + asked], read as u64) {
            Ok(0) => break,
            Ok(n) => read += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if direct_refused(&e) && read == 0 => return Ok(false),
            Err(e) => return Err(e),
        }
        if read % DIRECT_ALIGN != 0 {
            break; // the end of the file
        }
    }
    if read >= asked {
        return Ok(false);
    }
    out.copy_within(start..start + read, 0);
    out.truncate(read);
    Ok(true)
}

/// Writes `bytes` at `offset` of `file` in pieces of at most [`WRITE_PIECE_BYTES`].
fn write_in_pieces(file: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    let mut at = offset;
    for piece in bytes.chunks(WRITE_PIECE_BYTES) {
        file.write_all_at(piece, at)?;
        at += piece.len() as u64;
    }
    Ok(())
}

/// Writes `parts`, one after the other, from the start of `file` in pieces of
/// [`WRITE_PIECE_BYTES`] at multiples of it (one `writev` each, whatever the parts' sizes:
/// a body arrives in pieces of any size, and writes of those sizes would cache the file in
/// small folios, which made reading a 4 MiB object cost half as much again).
fn write_parts_in_pieces(file: &mut File, parts: &[&[u8]]) -> io::Result<()> {
    let mut parts = parts.iter().copied().filter(|part| !part.is_empty()).peekable();
    let mut rest: &[u8] = &[];
    loop {
        let mut window = Vec::new();
        let mut room = WRITE_PIECE_BYTES;
        while room > 0 {
            if rest.is_empty() {
                match parts.next() {
                    Some(part) => rest = part,
                    None => break,
                }
            }
            let (take, left) = rest.split_at(room.min(rest.len()));
            window.push(io::IoSlice::new(take));
            room -= take.len();
            rest = left;
        }
        if window.is_empty() {
            return Ok(());
        }
        let mut slices = &mut window[..];
        while !slices.is_empty() {
            match file.write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => io::IoSlice::advance_slices(&mut slices, written),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl Disk for RealDisk {
    fn write_sparse_temp(
        &self,
        temp: &Path,
        parts: &[(u64, &[u8])],
        len: u64,
        durable: bool,
    ) -> io::Result<()> {
        let file = OpenOptions::new().write(true).create_new(true).mode(FILE_MODE).open(temp)?;
        let result = (|| {
            file.set_len(len)?;
            for (offset, bytes) in parts {
                write_in_pieces(&file, bytes, *offset)?;
            }
            if durable { sync_data(&file) } else { Ok(()) }
        })();
        if result.is_err() {
            let _ = fs::remove_file(temp);
        }
        result
    }

    fn write_at(&self, path: &Path, parts: &[(u64, &[u8])], durable: bool) -> io::Result<()> {
        let file = OpenOptions::new().write(true).open(path)?;
        for (offset, bytes) in parts {
            write_in_pieces(&file, bytes, *offset)?;
        }
        if durable { sync_data(&file) } else { Ok(()) }
    }

    fn overwrite(&self, path: &Path, parts: &[&[u8]]) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)?;
        write_parts_in_pieces(&mut file, parts)?;
        file.set_len(parts.iter().map(|part| part.len() as u64).sum())
    }

    fn open_read(&self, path: &Path) -> io::Result<File> {
        // Rust opens every file close-on-exec.
        File::open(path)
    }

    fn copy_temp(&self, from: &Path, temp: &Path) -> io::Result<()> {
        // Created 0600 first, so the copy is never readable by others, whatever `from` is.
        OpenOptions::new().write(true).create_new(true).mode(FILE_MODE).open(temp)?;
        let result = fs::copy(from, temp).map(|_| ());
        if result.is_err() {
            let _ = fs::remove_file(temp);
        }
        result
    }

    fn read_at(&self, path: &Path, ranges: &[(u64, usize)]) -> io::Result<Vec<Vec<u8>>> {
        let file = File::open(path)?;
        ranges
            .iter()
            .map(|&(offset, len)| {
                let mut out = vec![0u8; len];
                file.read_exact_at(&mut out, offset)?;
                Ok(out)
            })
            .collect()
    }

    fn exchange(&self, a: &Path, b: &Path) -> io::Result<()> {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
    }

    fn data_ranges(&self, path: &Path, from: u64, to: u64) -> io::Result<Vec<(u64, u64)>> {
        use rustix::fs::{SeekFrom, seek};
        let file = File::open(path)?;
        let mut ranges = Vec::new();
        let mut at = from;
        while at < to {
            let start = match seek(&file, SeekFrom::Data(at)) {
                Ok(start) => start,
                // No data after `at`.
                Err(rustix::io::Errno::NXIO) => break,
                Err(error) => return Err(error.into()),
            };
            if start >= to {
                break;
            }
            let end = seek(&file, SeekFrom::Hole(start)).map_err(io::Error::from)?.min(to);
            ranges.push((start, end));
            at = end;
        }
        Ok(ranges)
    }

    fn punch(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        use rustix::fs::{FallocateFlags, fallocate};
        let file = OpenOptions::new().write(true).open(path)?;
        match fallocate(&file, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, offset, len)
        {
            Ok(()) => Ok(()),
            // A file system without hole punching: write the zeros.
            Err(rustix::io::Errno::OPNOTSUPP) => {
                let zeros = vec![0u8; len.min(1 << 20) as usize];
                let mut at = offset;
                while at < offset + len {
                    let n = (offset + len - at).min(zeros.len() as u64) as usize;
                    file.write_all_at(&zeros[..n], at)?;
                    at += n as u64;
                }
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn sync_fs(&self, dir: &Path) -> io::Result<()> {
        SYNCS.fetch_add(1, Ordering::Relaxed);
        rustix::fs::syncfs(File::open(dir)?).map_err(io::Error::from)
    }

    fn write_temp(&self, temp: &Path, parts: &[&[u8]], durable: bool) -> io::Result<()> {
        let len: usize = parts.iter().map(|part| part.len()).sum();
        if durable && len >= DIRECT_FROM_BYTES && direct_io() && write_direct(temp, parts, len)? {
            return Ok(());
        }
        let mut file =
            OpenOptions::new().write(true).create_new(true).mode(FILE_MODE).open(temp)?;
        let result = (|| {
            write_parts_in_pieces(&mut file, parts)?;
            if durable { sync_data(&file) } else { Ok(()) }
        })();
        if result.is_err() {
            let _ = fs::remove_file(temp);
        }
        result
    }

    fn sync(&self, path: &Path) -> io::Result<()> {
        sync_all(&File::open(path)?)?;
        sync_dir(parent(path))
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let existed = path.exists();
        let mut file = OpenOptions::new().append(true).create(true).mode(FILE_MODE).open(path)?;
        file.write_all(bytes)?;
        sync_data(&file)?;
        if !existed {
            sync_dir(parent(path))?;
        }
        Ok(())
    }

    fn publish(&self, temp: &Path, path: &Path) -> io::Result<()> {
        fs::rename(temp, path)?;
        sync_dir(parent(path))
    }

    fn publish_if_absent(&self, temp: &Path, path: &Path) -> io::Result<()> {
        let linked = fs::hard_link(temp, path);
        let _ = fs::remove_file(temp);
        linked?;
        sync_dir(parent(path))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn read_into(&self, path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
        out.clear();
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        if len >= DIRECT_FROM_BYTES as u64 && direct_reads() && read_direct(path, len, out)? {
            return Ok(());
        }
        out.clear();
        // (A file that grew since is read whole all the same: read_to_end goes on to its end.)
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        out.try_reserve_exact(optio_net::buffers::capacity_for(len))
            .map_err(|e| io::Error::new(io::ErrorKind::OutOfMemory, e.to_string()))?;
        file.read_to_end(out)?;
        Ok(())
    }

    fn read_prefix(&self, path: &Path, bytes: usize) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(bytes.min(1 << 16));
        File::open(path)?.take(bytes as u64).read_to_end(&mut out)?;
        Ok(out)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)?;
        sync_dir(parent(path))
    }

    fn remove_unsynced(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        sync_dir(dir)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        if path.is_dir() {
            return Ok(());
        }
        // Parents made on the way are private too.
        DirBuilder::new().recursive(true).mode(DIR_MODE).create(path)?;
        sync_dir(parent(path))
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        match DirBuilder::new().mode(DIR_MODE).create(path) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            other => other,
        }
    }

    fn list(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        match fs::read_dir(path) {
            Ok(entries) => entries.map(|e| e.map(|e| e.path())).collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e),
        }
    }
}

/// A fault to inject with [`FaultyDisk`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Writes fail with "no space left on device" (ENOSPC).
    Full,
    /// Writes fail with an I/O error.
    WriteError,
    /// The temporary file is written, then the "machine dies" before the rename: the write
    /// fails and the temporary file stays behind, as after a crash.
    CrashBeforeRename,
    /// Syncs of the journal's segments (`fdatasync`) fail; writes succeed.
    SyncError,
    /// `syncfs` fails (as it does for a writeback error anywhere on the file system, even
    /// another program's); everything else works.
    SyncFsError,
}

/// [`RealDisk`] with faults injected on demand (for tests).
#[derive(Debug, Default)]
pub struct FaultyDisk {
    fault: Mutex<Option<Fault>>,
}

impl FaultyDisk {
    /// A disk with no fault.
    pub fn new() -> FaultyDisk {
        FaultyDisk::default()
    }

    /// Injects `fault` (or none) from now on.
    pub fn set_fault(&self, fault: Option<Fault>) {
        *self.fault.lock().expect("fault lock is never poisoned") = fault;
    }

    fn fault(&self) -> Option<Fault> {
        *self.fault.lock().expect("fault lock is never poisoned")
    }

    fn check_write(&self) -> io::Result<()> {
        match self.fault() {
            Some(Fault::Full) => Err(io::Error::from(io::ErrorKind::StorageFull)),
            Some(Fault::WriteError) => Err(io::Error::other("injected write error")),
            _ => Ok(()),
        }
    }
}

impl Disk for FaultyDisk {
    fn sync_file(&self, file: &File) -> io::Result<()> {
        match self.fault() {
            Some(Fault::WriteError | Fault::SyncError) => {
                Err(io::Error::other("injected sync error"))
            }
            _ => RealDisk.sync_file(file),
        }
    }
    fn copy_temp(&self, from: &Path, temp: &Path) -> io::Result<()> {
        self.check_write()?;
        RealDisk.copy_temp(from, temp)
    }
    fn write_temp(&self, temp: &Path, parts: &[&[u8]], durable: bool) -> io::Result<()> {
        match self.fault() {
            Some(Fault::Full) => Err(io::Error::from(io::ErrorKind::StorageFull)),
            Some(Fault::WriteError) => Err(io::Error::other("injected write error")),
            _ => RealDisk.write_temp(temp, parts, durable),
        }
    }
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        match self.fault() {
            Some(Fault::Full) => Err(io::Error::from(io::ErrorKind::StorageFull)),
            Some(Fault::WriteError) => Err(io::Error::other("injected write error")),
            _ => RealDisk.append(path, bytes),
        }
    }
    fn sync(&self, path: &Path) -> io::Result<()> {
        match self.fault() {
            Some(Fault::WriteError) => Err(io::Error::other("injected sync error")),
            _ => RealDisk.sync(path),
        }
    }
    fn publish(&self, temp: &Path, path: &Path) -> io::Result<()> {
        match self.fault() {
            Some(Fault::CrashBeforeRename) => Err(io::Error::other("injected crash")),
            _ => RealDisk.publish(temp, path),
        }
    }
    fn publish_if_absent(&self, temp: &Path, path: &Path) -> io::Result<()> {
        match self.fault() {
            Some(Fault::CrashBeforeRename) => Err(io::Error::other("injected crash")),
            _ => RealDisk.publish_if_absent(temp, path),
        }
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        RealDisk.read(path)
    }
    fn read_into(&self, path: &Path, out: &mut Vec<u8>) -> io::Result<()> {
        RealDisk.read_into(path, out)
    }
    fn read_prefix(&self, path: &Path, bytes: usize) -> io::Result<Vec<u8>> {
        RealDisk.read_prefix(path, bytes)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        RealDisk.remove(path)
    }
    fn remove_unsynced(&self, path: &Path) -> io::Result<()> {
        RealDisk.remove_unsynced(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match self.fault() {
            Some(Fault::WriteError) => Err(io::Error::other("injected sync error")),
            _ => RealDisk.sync_dir(dir),
        }
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match self.fault() {
            Some(Fault::CrashBeforeRename) => Err(io::Error::other("injected crash")),
            _ => RealDisk.rename(from, to),
        }
    }
    fn exchange(&self, a: &Path, b: &Path) -> io::Result<()> {
        match self.fault() {
            Some(Fault::CrashBeforeRename) => Err(io::Error::other("injected crash")),
            _ => RealDisk.exchange(a, b),
        }
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
        self.check_write()?;
        RealDisk.write_sparse_temp(temp, parts, len, durable)
    }
    fn overwrite(&self, path: &Path, parts: &[&[u8]]) -> io::Result<()> {
        self.check_write()?;
        RealDisk.overwrite(path, parts)
    }
    fn write_at(&self, path: &Path, parts: &[(u64, &[u8])], durable: bool) -> io::Result<()> {
        self.check_write()?;
        RealDisk.write_at(path, parts, durable)
    }
    fn read_at(&self, path: &Path, ranges: &[(u64, usize)]) -> io::Result<Vec<Vec<u8>>> {
        RealDisk.read_at(path, ranges)
    }
    fn open_read(&self, path: &Path) -> io::Result<File> {
        RealDisk.open_read(path)
    }
    fn punch(&self, path: &Path, offset: u64, len: u64) -> io::Result<()> {
        self.check_write()?;
        RealDisk.punch(path, offset, len)
    }
    fn sync_fs(&self, dir: &Path) -> io::Result<()> {
        match self.fault() {
            Some(Fault::WriteError) => Err(io::Error::other("injected sync error")),
            Some(Fault::SyncFsError) => Err(io::Error::other("injected syncfs error")),
            _ => RealDisk.sync_fs(dir),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes longer than a piece, at offsets that are not multiples of it, land whole:
    /// every byte where it belongs, the file's length what the parts make it.
    #[test]
    fn writes_in_pieces_land_whole() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3 * WRITE_PIECE_BYTES + 777).map(|i| (i % 251) as u8).collect();
        let head = b"head".as_slice();
        let temp = dir.path().join("t");
        RealDisk.write_temp(&temp, &[head, &data], false).unwrap();
        let mut whole = head.to_vec();
        whole.extend_from_slice(&data);
        assert_eq!(fs::read(&temp).unwrap(), whole);
        // A body in pieces of any size (empty ones too), as a request's arrives.
        let mut parts: Vec<&[u8]> = vec![head, &[]];
        let mut rest = &data[..];
        for len in [1usize, 4095, 0, 70_000, 3, 65_536, 17].into_iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (part, tail) = rest.split_at(len.min(rest.len()));
            parts.push(part);
            rest = tail;
        }
        let pieced = dir.path().join("p");
        RealDisk.write_temp(&pieced, &parts, true).unwrap();
        assert_eq!(fs::read(&pieced).unwrap(), whole);
        let empty = dir.path().join("e");
        RealDisk.write_temp(&empty, &[&[], &[]], false).unwrap();
        assert_eq!(fs::read(&empty).unwrap(), b"");
        let sparse = dir.path().join("s");
        let len = 5 * WRITE_PIECE_BYTES as u64;
        RealDisk.write_sparse_temp(&sparse, &[(0, head), (1001, &data)], len, false).unwrap();
        let read = fs::read(&sparse).unwrap();
        assert_eq!(read.len() as u64, len);
        assert_eq!(&read[..4], head);
        assert!(read[4..1001].iter().all(|b| *b == 0));
        assert_eq!(&read[1001..1001 + data.len()], &data[..]);
        assert!(read[1001 + data.len()..].iter().all(|b| *b == 0));
        RealDisk.write_at(&sparse, &[(7, &data[..WRITE_PIECE_BYTES + 1])], false).unwrap();
        let got = RealDisk.read_at(&sparse, &[(7, WRITE_PIECE_BYTES + 1), (0, 4)]).unwrap();
        assert_eq!(got, vec![data[..WRITE_PIECE_BYTES + 1].to_vec(), head.to_vec()]);
    }

    /// Large files go past the page cache both ways: what a direct write stores (any length,
    /// from parts of any size) reads back whole through the cache and through a direct
    /// read, whose buffer may be one kept from a larger read; a file longer than it was when
    /// looked at is left to the buffered read, which reads it to its end.
    #[test]
    fn large_files_are_written_and_read_direct_whole() {
        let dir = tempfile::tempdir().unwrap();
        for len in [DIRECT_FROM_BYTES, DIRECT_FROM_BYTES + 1, 4 << 20, (4 << 20) + 4095 + 77] {
            let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            let head = b"a header of some length".as_slice();
            let (first, rest) = data.split_at(70_001);
            let parts = [head, first, &[], rest];
            let path = dir.path().join(format!("f{len}"));
            // (This machine's file systems take O_DIRECT: the direct path is the one tested.)
            assert!(write_direct(&path, &parts, head.len() + len).unwrap(), "{len}: direct");
            let mut whole = head.to_vec();
            whole.extend_from_slice(&data);
            assert_eq!(fs::read(&path).unwrap(), whole, "{len}: through the cache");
            let mut out = vec![7u8; 9 << 20];
            assert!(read_direct(&path, whole.len() as u64, &mut out).unwrap(), "{len}");
            assert_eq!(out, whole, "{len}: direct");
            out.clear();
            RealDisk.read_into(&path, &mut out).unwrap();
            assert_eq!(out, whole, "{len}: read_into");
            // Through write_temp, durable (direct) and not (buffered), the same bytes.
            for durable in [true, false] {
                let temp = dir.path().join(format!("t{len}{durable}"));
                RealDisk.write_temp(&temp, &parts, durable).unwrap();
                assert_eq!(fs::read(&temp).unwrap(), whole, "{len}, durable {durable}");
            }
            // Grown since its length was taken: not read direct.
            let mut out = Vec::new();
            assert!(
                !read_direct(&path, (whole.len() - 2 * DIRECT_ALIGN) as u64, &mut out).unwrap()
            );
        }
        // A name taken is refused, as a buffered create_new is.
        let taken = dir.path().join("taken");
        fs::write(&taken, b"x").unwrap();
        let big = vec![1u8; DIRECT_FROM_BYTES];
        let error = write_direct(&taken, &[&big], big.len()).expect_err("it exists");
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(fs::read(&taken).unwrap(), b"x");
    }
}
