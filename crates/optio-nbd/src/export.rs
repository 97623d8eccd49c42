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
}
