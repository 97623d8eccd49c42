//! What an NBD server serves: exports, each a range of bytes with async operations.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::proto;

/// The future of an export operation.
pub type IoFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, Errno>> + Send + 'a>>;

/// Why an operation failed, as the NBD error it is answered with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Errno {
    /// Not permitted (a write to a read-only export).
    Perm,
    /// The data could not be read or written.
    Io,
    /// Out of memory.
    NoMem,
    /// An invalid request (out of range, too large, unknown flags).
    Invalid,
    /// No space left (or a write beyond the end).
    NoSpace,
    /// Not supported.
    NotSupported,
    /// The server is shutting down.
    Shutdown,
}

impl Errno {
    /// The protocol's number for it.
    pub fn code(self) -> u32 {
        match self {
            Errno::Perm => proto::EPERM,
            Errno::Io => proto::EIO,
            Errno::NoMem => proto::ENOMEM,
            Errno::Invalid => proto::EINVAL,
            Errno::NoSpace => proto::ENOSPC,
            Errno::NotSupported => proto::ENOTSUP,
            Errno::Shutdown => proto::ESHUTDOWN,
        }
    }

    /// What it means, for people (the message of a structured error chunk).
    pub fn message(self) -> &'static str {
        match self {
            Errno::Perm => "not permitted: the export is read-only",
            Errno::Io => "input/output error",
            Errno::NoMem => "out of memory",
            Errno::Invalid => "invalid request",
            Errno::NoSpace => "no space left, or beyond the end of the export",
            Errno::NotSupported => "not supported",
            Errno::Shutdown => "the server is shutting down",
        }
    }
}

/// One extent of a block-status answer ([`Export::block_status`]): `length` bytes, where
/// they come from, and whether they read as zeros.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Bytes in the extent (not zero).
    pub length: u32,
    /// Not allocated (`NBD_STATE_HOLE` of `base:allocation`).
    pub hole: bool,
    /// Reads as zeros (`NBD_STATE_ZERO`). Saying so of bytes that are not zeros loses data
    /// in every client that copies what is not zero: when unsure, say `false`.
    pub zero: bool,
    /// The layer the bytes come from, for `qemu:allocation-depth`: 0 nowhere (zeros), 1 the
    /// export itself, 2 its backing image (a clone's parent), 3 that one's parent, …
    pub depth: u32,
}

impl Extent {
    /// `length` bytes of data of the export's own (what an export that knows nothing better
    /// answers).
    pub fn data(length: u32) -> Extent {
        Extent { length, hole: false, zero: false, depth: 1 }
    }

    /// `length` bytes allocated nowhere, reading as zeros.
    pub fn hole(length: u32) -> Extent {
        Extent { length, hole: true, zero: true, depth: 0 }
    }

    /// Its flags in `base:allocation`.
    pub fn allocation_flags(&self) -> u32 {
        (if self.hole { proto::STATE_HOLE } else { 0 })
            | if self.zero { proto::STATE_ZERO } else { 0 }
    }
}

/// One export: its size and its operations. The server checks every request against
/// [`size`](Export::size) and [`read_only`](Export::read_only) before calling these, so an
/// export sees only in-range requests.
///
/// Semantics the server relies on: a write's future completes when the write is as durable as
/// the export promises for an acknowledged write (with `fua`, durable on stable storage);
/// [`flush`](Export::flush) makes every write that completed before it was called durable.
pub trait Export: Send + Sync + 'static {
    /// Bytes in the export.
    fn size(&self) -> u64;
    /// Whether writes are refused.
    fn read_only(&self) -> bool;
    /// Whether several connections to this export see each other's writes at once (then the
    /// server advertises `NBD_FLAG_CAN_MULTI_CONN`).
    fn multi_conn(&self) -> bool {
        false
    }
    /// `length` bytes at `offset` (exactly that many).
    fn read(&self, offset: u64, length: u32) -> IoFuture<'_, Bytes>;
    /// Writes `data` at `offset`.
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> IoFuture<'_, ()>;
    /// Makes completed writes durable.
    fn flush(&self) -> IoFuture<'_, ()>;
    /// Discards `length` bytes at `offset` (they may read back as anything until written;
    /// Optio's exports read them as zeros).
    fn trim(&self, offset: u64, length: u32, fua: bool) -> IoFuture<'_, ()>;
    /// Writes `length` zero bytes at `offset` (`may_trim`: a hole may be punched instead).
    fn write_zeroes(&self, offset: u64, length: u32, may_trim: bool, fua: bool)
    -> IoFuture<'_, ()>;
    /// The extents of `[offset, offset + length)`, consecutive from `offset`, for
    /// `NBD_CMD_BLOCK_STATUS` (`base:allocation`, and `qemu:allocation-depth` if
    /// [`allocation_depth`](Export::allocation_depth)). They may cover less than asked (the
    /// client asks again for the rest), not more: the server cuts what lies beyond, and
    /// answers an empty list as one extent of data. By default: all data, the export's own.
    fn block_status(&self, _offset: u64, length: u32) -> IoFuture<'_, Vec<Extent>> {
        Box::pin(async move { Ok(vec![Extent::data(length)]) })
    }
    /// Whether [`block_status`](Export::block_status) knows the layers of a chain (then
    /// `qemu:allocation-depth` is offered).
    fn allocation_depth(&self) -> bool {
        false
    }
}

/// The named exports a server offers.
pub trait Exports: Send + Sync + 'static {
    /// Their names, for `NBD_OPT_LIST`.
    fn names(&self) -> Vec<String>;
    /// Opens the export `name` (an empty name: the default export, if there is one); `Err`
    /// with a message for the client (no such export, held by another writer…).
    fn open(&self, name: &str) -> Result<Arc<dyn Export>, String>;
}

/// An export held in memory (sparse only in that trimmed ranges are zeroed), for tests.
pub struct MemoryExport {
    data: RwLock<Vec<u8>>,
    read_only: bool,
}

impl MemoryExport {
    /// An export of `size` zero bytes.
    pub fn new(size: usize, read_only: bool) -> MemoryExport {
        MemoryExport { data: RwLock::new(vec![0; size]), read_only }
    }

    /// A copy of its bytes.
    pub fn contents(&self) -> Vec<u8> {
        self.data.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The granularity of its block status.
    pub const BLOCK: u64 = 4096;

    fn range(offset: u64, length: u64) -> std::ops::Range<usize> {
        offset as usize..(offset + length) as usize
    }

    fn fill(&self, offset: u64, length: u32, byte: u8) {
        let mut data = self.data.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        data[MemoryExport::range(offset, u64::from(length))].fill(byte);
    }
}

impl Export for MemoryExport {
    fn size(&self) -> u64 {
        self.data.read().unwrap_or_else(std::sync::PoisonError::into_inner).len() as u64
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn multi_conn(&self) -> bool {
        true
    }

    fn read(&self, offset: u64, length: u32) -> IoFuture<'_, Bytes> {
        let data = self.data.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let bytes = Bytes::copy_from_slice(&data[MemoryExport::range(offset, u64::from(length))]);
        Box::pin(async move { Ok(bytes) })
    }

    fn write(&self, offset: u64, bytes: Bytes, _fua: bool) -> IoFuture<'_, ()> {
        let mut data = self.data.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        data[MemoryExport::range(offset, bytes.len() as u64)].copy_from_slice(&bytes);
        Box::pin(async { Ok(()) })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn trim(&self, offset: u64, length: u32, _fua: bool) -> IoFuture<'_, ()> {
        self.fill(offset, length, 0);
        Box::pin(async { Ok(()) })
    }

    fn write_zeroes(
        &self,
        offset: u64,
        length: u32,
        _may_trim: bool,
        _fua: bool,
    ) -> IoFuture<'_, ()> {
        self.fill(offset, length, 0);
        Box::pin(async { Ok(()) })
    }

    /// Blocks of [`MemoryExport::BLOCK`] bytes (aligned; the first and last may be cut by
    /// the request) that are all zeros are holes; others data.
    fn block_status(&self, offset: u64, length: u32) -> IoFuture<'_, Vec<Extent>> {
        let data = self.data.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut extents: Vec<Extent> = Vec::new();
        let (mut at, end) = (offset, offset + u64::from(length));
        while at < end {
            let next = ((at / MemoryExport::BLOCK + 1) * MemoryExport::BLOCK).min(end);
            let zero = data[MemoryExport::range(at, next - at)].iter().all(|b| *b == 0);
            let extent = if zero { Extent::hole } else { Extent::data };
            let length = (next - at) as u32;
            match extents.last_mut() {
                Some(last) if last.hole == zero => last.length += length,
                _ => extents.push(extent(length)),
            }
            at = next;
        }
        Box::pin(async move { Ok(extents) })
    }
}

/// A fixed set of exports by name (the first is the default), for tests and simple servers.
impl Exports for Vec<(String, Arc<dyn Export>)> {
    fn names(&self) -> Vec<String> {
        self.iter().map(|(name, _)| name.clone()).collect()
    }

    fn open(&self, name: &str) -> Result<Arc<dyn Export>, String> {
        if name.is_empty() {
            return self.first().map(|(_, e)| e.clone()).ok_or_else(|| "no export".to_string());
        }
        self.iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| format!("no export named `{name}`"))
    }
}

/// Exports seen read-only: each one opened refuses writes, trims and write-zeroes (`EPERM`)
/// and is advertised with `NBD_FLAG_READ_ONLY` — what a client allowed only to read gets.
pub struct ReadOnlyExports(pub Arc<dyn Exports>);

impl Exports for ReadOnlyExports {
    fn names(&self) -> Vec<String> {
        self.0.names()
    }

    fn open(&self, name: &str) -> Result<Arc<dyn Export>, String> {
        let export = self.0.open(name)?;
        Ok(Arc::new(ReadOnlyExport(export)))
    }
}

/// An export seen read-only ([`ReadOnlyExports`]).
struct ReadOnlyExport(Arc<dyn Export>);

impl Export for ReadOnlyExport {
    fn size(&self) -> u64 {
        self.0.size()
    }

    fn read_only(&self) -> bool {
        true
    }

    fn multi_conn(&self) -> bool {
        self.0.multi_conn()
    }

    fn read(&self, offset: u64, length: u32) -> IoFuture<'_, Bytes> {
        self.0.read(offset, length)
    }

    fn write(&self, _offset: u64, _data: Bytes, _fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async { Err(Errno::Perm) })
    }

    fn flush(&self) -> IoFuture<'_, ()> {
        self.0.flush()
    }

    fn trim(&self, _offset: u64, _length: u32, _fua: bool) -> IoFuture<'_, ()> {
        Box::pin(async { Err(Errno::Perm) })
    }

    fn write_zeroes(
        &self,
        _offset: u64,
        _length: u32,
        _may_trim: bool,
        _fua: bool,
    ) -> IoFuture<'_, ()> {
        Box::pin(async { Err(Errno::Perm) })
    }

    fn block_status(&self, offset: u64, length: u32) -> IoFuture<'_, Vec<Extent>> {
        self.0.block_status(offset, length)
    }

    fn allocation_depth(&self) -> bool {
        self.0.allocation_depth()
    }
}
