//! # optio-nbd
//!
//! The Network Block Device protocol (the NBD project's `doc/proto.md`), server side, written
//! on tokio: what `fio --ioengine=nbd`, qemu (`nbd://`, `nbds://`), `qemu-img`, `nbdcopy`,
//! `nbdfuse` and the Linux kernel speak to a block device over a socket.
//!
//! * [`proto`]: the wire format — magics, flags, option and command numbers, and the pure
//!   parsers of what a client sends (fuzzed: they see untrusted bytes).
//! * [`export`]: what is served — the [`Export`] trait (size, read, write, flush, trim,
//!   write-zeroes, block status, each async) and [`Exports`] (the named exports a server offers), with
//!   [`MemoryExport`] for tests and [`ReadOnlyExports`] for clients allowed only to read.
//! * [`server`]: a [`Server`] — its [`Limits`] and the budgets its connections share — and one
//!   connection: the fixed-newstyle handshake (`NBD_OPT_GO`, `INFO`, `LIST`, `EXPORT_NAME`,
//!   `ABORT`, `STARTTLS`, `STRUCTURED_REPLY`, `LIST_META_CONTEXT`, `SET_META_CONTEXT`;
//!   block-size information; everything else `NBD_REP_ERR_UNSUP`), then
//!   transmission with up to [`Limits::max_in_flight`] requests in flight, each answered when
//!   its export says so (out of order: a queue depth becomes parallel I/O). A client that
//!   breaks the protocol is disconnected with the reason returned; requests outside the export
//!   or too large get NBD error codes.
//! * [`tls`]: TLS (`NBD_OPT_STARTTLS`, the protocol's "FORCEDTLS" mode): rustls, and an
//!   [`Authorize`] that maps each client's certificate to the exports it may use.
//! * [`listen`]: the accept loop for TCP and Unix sockets ([`UnixSocket`]: mode 0600, its
//!   owner only), with the connection limit and a pause after accept errors.
//! * [`testing`]: a minimal blocking client for tests that send exact bytes.
//! * [`writeback`]: [`WriteBack`], a write-back cache in front of any export (writes
//!   acknowledged from memory, written behind, durable at a flush).
//!
//! Memory is bounded: the bytes of reads and writes in flight — executing, or replies the
//! client has not taken yet — are held in a per-connection and a per-server budget, and a
//! connection whose budget is spent is not read from until its replies drain (a client that
//! pipelines reads and never reads the answers stalls itself, not the server).
//!
//! Structured replies (`NBD_OPT_STRUCTURED_REPLY`) are offered: a client that asks for them
//! gets reads as one `OFFSET_DATA` chunk (or one `OFFSET_HOLE` chunk when the bytes read are
//! all zeros) and errors as error chunks; other commands' successes stay simple replies, as
//! the protocol allows. With them, metadata contexts (`NBD_OPT_LIST_META_CONTEXT`,
//! `NBD_OPT_SET_META_CONTEXT`) and `NBD_CMD_BLOCK_STATUS` (with `NBD_CMD_FLAG_REQ_ONE`):
//! `base:allocation` for every export, `qemu:allocation-depth` for exports that know their
//! layers ([`Export::block_status`], [`Export::allocation_depth`]). Extended (64-bit) headers
//! and `NBD_CMD_FLAG_DF` are not offered.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use optio_nbd::{Access, Export, Exports, Limits, MemoryExport, Server};
//! let exports: Vec<(String, Arc<dyn Export>)> =
//!     vec![("disk".into(), Arc::new(MemoryExport::new(64 << 20, false)))];
//! let exports: Arc<dyn Exports> = Arc::new(exports);
//! let server = Arc::new(Server::new(Limits::default())?);
//! let socket = optio_nbd::UnixSocket::bind("/tmp/disk.sock".as_ref())?;
//! // Serves nbd+unix:///disk?socket=/tmp/disk.sock to this user, for ever.
//! optio_nbd::listen::run(server, socket, Arc::new(Access::Open(exports))).await;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod export;
mod handshake;
pub mod listen;
pub mod proto;
pub mod server;
pub mod testing;
pub mod tls;
mod transmission;
pub mod writeback;

pub use export::{Errno, Export, Exports, Extent, IoFuture, MemoryExport, ReadOnlyExports};
pub use listen::{Listener, SocketError, UnixSocket};
pub use server::{Access, Limits, NbdError, Server, serve};
pub use tls::{Authorize, Tls};
/// The TLS library the [`Tls`] configuration is built with.
pub use tokio_rustls::rustls;
pub use writeback::WriteBack;
