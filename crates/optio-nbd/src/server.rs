//! An NBD server: its limits, the budgets its connections share (bytes in flight, connections),
//! and one connection served from its first byte to its last — the handshake (with TLS when
//! the [`Access`] requires it), then transmission.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::Semaphore;

use crate::export::{Export, Exports};
use crate::handshake::{self, Outcome, Session, Stage};
use crate::tls::Tls;
use crate::transmission;

/// Requests executing at once on one connection (a client's queue depth beyond this waits on
/// the socket).
pub const IN_FLIGHT_MAX: usize = 64;
/// Largest read or write (advertised as the maximum block size).
pub const REQUEST_BYTES_MAX: u32 = 32 << 20;
/// Bytes of read and write data one connection holds at once: requests executing and replies
/// not yet taken by the client (four of the largest requests; 32 of 4 MiB).
pub const CONNECTION_BYTES_IN_FLIGHT_MAX: usize = 128 << 20;
/// Bytes of read and write data all connections of one server hold at once.
pub const TOTAL_BYTES_IN_FLIGHT_MAX: usize = 512 << 20;
/// Connections served at once; more are closed as they come.
pub const CONNECTIONS_MAX: usize = 128;
/// Longest handshake (TLS included), from the connection to the export chosen.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with nothing in flight that sends no request for this long is closed, while
/// the server is crowded ([`IDLE_CLOSE_CONNECTIONS`]).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// The idle timeout applies while at least this many connections are open (half the most).
/// An idle connection costs little until it crowds out others, and closing it is not free for
/// its client: qemu's NBD client, unless given `reconnect-delay`, fails every request after
/// the server closed its idle connection (an idle virtual disk would fail), and the kernel's
/// `nbd-client` needs `-persist`.
pub const IDLE_CLOSE_CONNECTIONS: usize = CONNECTIONS_MAX / 2;
/// A request begun must arrive, and a reply must be taken by the client, at a megabyte per
/// this long at least; else the connection ends (and gives back what it held).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Most options before an export is chosen.
pub const OPTIONS_MAX: usize = 64;

/// How much one connection, and all of a server's, may hold and take.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Requests executing at once per connection.
    pub max_in_flight: usize,
    /// Largest read or write (advertised as the maximum block size); a larger write ends the
    /// connection (its data cannot be skipped safely), a larger read gets `EINVAL`.
    pub max_request_bytes: u32,
    /// Bytes of read and write data one connection holds at once (from the request read off
    /// the socket until its reply is handed to the socket).
    pub max_bytes_in_flight: usize,
    /// The same, for all of a server's connections together.
    pub max_total_bytes_in_flight: usize,
    /// Connections a server serves at once.
    pub max_connections: usize,
    /// Longest handshake.
    pub handshake_timeout: Duration,
    /// How long a connection with nothing in flight may stay silent (`None`: for ever)…
    pub idle_timeout: Option<Duration>,
    /// … while at least this many connections are open (0: always).
    pub idle_close_connections: usize,
    /// How long a piece (a megabyte) of a request begun may take to arrive.
    pub request_timeout: Duration,
    /// How long a piece (a megabyte) of a reply may wait for the client to take it.
    pub reply_timeout: Duration,
    /// Most options before an export is chosen.
    pub max_options: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_in_flight: IN_FLIGHT_MAX,
            max_request_bytes: REQUEST_BYTES_MAX,
            max_bytes_in_flight: CONNECTION_BYTES_IN_FLIGHT_MAX,
            max_total_bytes_in_flight: TOTAL_BYTES_IN_FLIGHT_MAX,
            max_connections: CONNECTIONS_MAX,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            idle_timeout: Some(IDLE_TIMEOUT),
            idle_close_connections: IDLE_CLOSE_CONNECTIONS,
            request_timeout: STALL_TIMEOUT,
            reply_timeout: STALL_TIMEOUT,
            max_options: OPTIONS_MAX,
        }
    }
}

impl Limits {
    /// Checks that the limits fit together: the largest request fits in a connection's
    /// budget, which fits in the server's.
    pub fn check(&self) -> Result<(), NbdError> {
        let bad = |reason: String| Err(NbdError::Limits(reason));
        if self.max_in_flight == 0 || self.max_connections == 0 || self.max_request_bytes == 0 {
            return bad(
                "requests in flight, connections and request bytes must be at least 1".into()
            );
        }
        if (self.max_request_bytes as usize) > self.max_bytes_in_flight {
            return bad(format!(
                "a request of {} bytes does not fit in a connection's {} bytes in flight",
                self.max_request_bytes, self.max_bytes_in_flight
            ));
        }
        if self.max_bytes_in_flight > self.max_total_bytes_in_flight {
            return bad(format!(
                "a connection's {} bytes in flight do not fit in the server's {}",
                self.max_bytes_in_flight, self.max_total_bytes_in_flight
            ));
        }
        if u32::try_from(transmission::units(self.max_total_bytes_in_flight)).is_err() {
            return bad(format!("{} bytes in flight is too many", self.max_total_bytes_in_flight));
        }
        Ok(())
    }
}

/// Why a connection ended other than by the client's `NBD_CMD_DISC` or `NBD_OPT_ABORT`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NbdError {
    /// The socket failed.
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The client sent something the protocol does not allow; it was disconnected.
    #[error("the client broke the NBD protocol: {0}")]
    Protocol(String),
    /// The client did not finish the handshake in time.
    #[error("the client did not finish the handshake within {0:?}")]
    HandshakeTimeout(Duration),
    /// The TLS handshake failed (a certificate from another CA, no TLS at all…).
    #[error("the TLS handshake failed: {0}")]
    Tls(String),
    /// The client's certificate does not allow it any export; it was told why.
    #[error("the client was refused: {0}")]
    Refused(String),
    /// The connection had nothing in flight and sent nothing for this long.
    #[error("the client was idle for {0:?}")]
    Idle(Duration),
    /// A request began and did not go on for this long.
    #[error("the client stopped sending a request for {0:?}")]
    RequestTimeout(Duration),
    /// The client did not take its replies for this long.
    #[error("the client did not read its replies for {0:?}")]
    RepliesNotRead(Duration),
    /// The limits do not fit together.
    #[error("bad NBD server limits: {0}")]
    Limits(String),
}

/// Who may use what, on one listener.
pub enum Access {
    /// Whoever connects uses these exports, without TLS (`NBD_OPT_STARTTLS` is refused with
    /// `NBD_REP_ERR_POLICY`): for a Unix socket only its owner may open, or a TCP port its
    /// operator chose to leave open.
    Open(Arc<dyn Exports>),
    /// TLS first: before it, options are answered `NBD_REP_ERR_TLS_REQD`; after it, the
    /// client's certificate decides which exports it sees ([`Tls`]).
    Tls(Tls),
}

/// An NBD server: limits and the budgets all its connections share.
pub struct Server {
    limits: Limits,
    /// The bytes in flight of all connections, in budget units.
    pub(crate) total: Arc<Semaphore>,
    /// Connections served at once.
    pub(crate) connections: Arc<Semaphore>,
}

/// A connection after the handshake: its stream (plain or inside TLS) and its export.
enum Negotiated<S> {
    Plain(BufReader<S>, Arc<dyn Export>, Session),
    Tls(Box<BufReader<tokio_rustls::server::TlsStream<S>>>, Arc<dyn Export>, Session),
    Ended,
}

/// Bytes of the buffer the handshake reads options through.
const HANDSHAKE_BUFFER_BYTES: usize = 8 << 10;

impl Server {
    /// A server with these limits.
    pub fn new(limits: Limits) -> Result<Server, NbdError> {
        limits.check()?;
        Ok(Server {
            total: Arc::new(Semaphore::new(transmission::units(limits.max_total_bytes_in_flight))),
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
        })
    }

    /// Its limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Connections open (counted by [`crate::listen::run`]).
    pub fn connections_open(&self) -> usize {
        self.limits.max_connections - self.connections.available_permits()
    }

    /// Serves one connection: the handshake (TLS first if `access` requires it), then its
    /// requests, until the client disconnects. Every request in flight is answered before this
    /// returns. (Connections are not counted here: [`crate::listen::run`] counts them.)
    pub async fn serve<S>(&self, stream: S, access: &Access) -> Result<(), NbdError>
    where
        S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let timeout = self.limits.handshake_timeout;
        let negotiated = tokio::time::timeout(timeout, negotiate(stream, access, &self.limits))
            .await
            .map_err(|_| NbdError::HandshakeTimeout(timeout))??;
        match negotiated {
            Negotiated::Plain(stream, export, session) => {
                transmission::run(stream, export, session, self).await
            }
            Negotiated::Tls(stream, export, session) => {
                transmission::run(*stream, export, session, self).await
            }
            Negotiated::Ended => Ok(()),
        }
    }
}

/// The handshake: greeting, options, TLS if required, options inside it.
async fn negotiate<S>(
    stream: S,
    access: &Access,
    limits: &Limits,
) -> Result<Negotiated<S>, NbdError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let mut plain = BufReader::with_capacity(HANDSHAKE_BUFFER_BYTES, stream);
    let mut negotiation = handshake::greet(&mut plain, limits).await?;
    let tls = match access {
        Access::Open(exports) => {
            let stage = Stage::Open(&**exports);
            return match handshake::haggle(&mut plain, stage, &mut negotiation, limits).await? {
                Outcome::Chosen(export, session) => Ok(Negotiated::Plain(plain, export, session)),
                Outcome::Aborted => Ok(Negotiated::Ended),
                Outcome::StartTls => {
                    Err(NbdError::Protocol("TLS started where it is not offered".into()))
                }
            };
        }
        Access::Tls(tls) => tls,
    };
    if !negotiation.fixed_newstyle {
        // TLS needs fixed newstyle, and this server serves nothing without TLS.
        return Err(NbdError::Protocol(
            "the client does not speak fixed newstyle, which TLS needs".into(),
        ));
    }
    match handshake::haggle(&mut plain, Stage::BeforeTls, &mut negotiation, limits).await? {
        Outcome::StartTls => {}
        Outcome::Aborted => return Ok(Negotiated::Ended),
        Outcome::Chosen(..) => {
            return Err(NbdError::Protocol("an export chosen before TLS".into()));
        }
    }
    // Whatever the client sent after NBD_OPT_STARTTLS and before the TLS handshake would be
    // taken as if it came inside TLS (a man in the middle's injection): refused.
    if !plain.buffer().is_empty() {
        return Err(NbdError::Protocol(
            "bytes after NBD_OPT_STARTTLS, before the TLS handshake".into(),
        ));
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config.clone());
    let secure =
        acceptor.accept(plain.into_inner()).await.map_err(|e| NbdError::Tls(e.to_string()))?;
    let allowed = {
        let certificate = secure.get_ref().1.peer_certificates().and_then(|c| c.first());
        tls.authorize.authorize(certificate)
    };
    let mut secure = BufReader::with_capacity(HANDSHAKE_BUFFER_BYTES, secure);
    let stage = Stage::AfterTls(allowed.as_deref().map_err(String::as_str));
    let outcome = handshake::haggle(&mut secure, stage, &mut negotiation, limits).await;
    match (outcome, allowed) {
        (Ok(Outcome::Chosen(export, session)), Ok(_)) => {
            Ok(Negotiated::Tls(Box::new(secure), export, session))
        }
        (Ok(Outcome::Aborted), Ok(_)) => Ok(Negotiated::Ended),
        (Err(error), Ok(_)) => Err(error),
        // However a refused client leaves, the refusal is what is worth logging.
        (_, Err(reason)) => Err(NbdError::Refused(reason)),
        (Ok(Outcome::StartTls), Ok(_)) => Err(NbdError::Protocol("TLS started twice".into())),
    }
}

/// Serves one connection to `exports` without TLS, with a server of its own (tests and
/// fuzzing; a real server shares one [`Server`] between its connections).
pub async fn serve<S>(stream: S, exports: Arc<dyn Exports>, limits: Limits) -> Result<(), NbdError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    Server::new(limits)?.serve(stream, &Access::Open(exports)).await
}

#[cfg(test)]
mod tests;
