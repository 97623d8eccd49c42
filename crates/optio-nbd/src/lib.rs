//! # optio-nbd
//!
//! The Network Block Device protocol (the NBD project's `doc/proto.md`), server side, written
//! on tokio: what `fio --ioengine=nbd`, qemu (`nbd://`), `qemu-img`, `nbdcopy`, `nbdfuse` and
//! the Linux kernel speak to a block device over a socket.
//!
//! * [`proto`]: the wire format — magics, flags, option and command numbers, and the pure
//!   parsers of what a client sends (fuzzed: they see untrusted bytes).
//! * [`export`]: what is served — the [`Export`] trait (size, read, write, flush, trim,
//!   write-zeroes, each async) and [`Exports`] (the named exports a server offers), with
//!   [`MemoryExport`] for tests.
//! * [`server`]: one connection — the fixed-newstyle handshake (`NBD_OPT_GO`, `INFO`, `LIST`,
//!   `EXPORT_NAME`, `ABORT`; block-size information; everything else `NBD_REP_ERR_UNSUP`), then
//!   transmission with up to [`Limits::max_in_flight`] requests in flight, each answered when
//!   its export says so (out of order: a queue depth becomes parallel I/O). A client that breaks
//!   the protocol is disconnected with a log line; requests outside the export or too large get
//!   NBD error codes.
//! * [`testing`]: a minimal blocking client for tests that send exact bytes.
//!
//! Only simple replies are sent (structured replies are refused in negotiation, which every
//! client accepts), and TLS is not offered.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod export;
pub mod proto;
pub mod server;
pub mod testing;

pub use export::{Errno, Export, Exports, IoFuture, MemoryExport};
pub use server::{Limits, NbdError, serve};
