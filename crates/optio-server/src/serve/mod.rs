//! The server's core: [`serve`] takes one request, decoded once ([`Asked`]: a device request,
//! [`optio_proto::request::Request`], or one of the server's own routes,
//! [`optio_proto::own::OwnRequest`]), with its head as its signature covers it ([`Head`]),
//! what the connection says of its sender ([`Connection`]) and its body ([`Incoming`]), and
//! gives back a typed answer ([`Served`]). Everything a request goes through happens here,
//! from that one value: authentication and the capability check ([`crate::auth`]), the
//! device checked, fencing, epochs, dispatch to a handler, the request metrics. Transports
//! are thin adapters around it: [`crate::http`] for HTTP/1.1, and through it frames and the
//! local socket ([`crate::conn`]).
//!
//! Handlers by area — `objects` (probe, read, write, delete, list), `choices` (choice
//! records), `own` (`/health`, `/v1/status`, `/metrics`, `/v1/scrub`) — return answers and
//! refusals as values; no transport type reaches them.

mod admitted;
mod choices;
mod incoming;
mod metrics;
mod objects;
mod own;
mod state;
mod target;

pub use state::AppState;

pub(crate) use incoming::Incoming;
pub(crate) use metrics::ServerMetrics;

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use optio_proto::answer::{Answer, Refusal};
use optio_proto::auth::{AuthError, Cap};
use optio_proto::own::{OwnAnswer, OwnRequest};
use optio_proto::request::{self as device, DecodeError, Op, OpKind};
use optio_proto::{ErrorKind, Route};

use crate::conn::{LocalFile, PeerCertificate};
use crate::store::DeviceStore;

use choices::{delete_record, get_record, put_record, wait_durable};
use metrics::Operation;
use objects::{
    commit_chunk, delete_object, get_object, list, open_object, probe, put_object, sync_device,
    write_in_place,
};
use target::{Target, fail};

/// A request, decoded once.
#[derive(Clone, Debug)]
pub(crate) enum Asked {
    /// One of the server's own routes, or why it does not decode.
    Own(Result<OwnRequest, DecodeError>),
    /// A device request, or why it does not decode.
    Device(Result<device::Request<'static>, DecodeError>),
}

impl Asked {
    /// Decodes a request of `method` to `path_and_query` with `header` (a header's value by
    /// its lower-case name): the one decoding every transport uses.
    pub(crate) fn decode<'h>(
        method: &str,
        path_and_query: &str,
        header: impl Fn(&'static str) -> Option<&'h [u8]>,
        metrics_public: bool,
    ) -> Asked {
        match OwnRequest::decode(method, path_and_query, metrics_public) {
            Some(own) => Asked::Own(own),
            None => Asked::Device(device::Request::decode(method, path_and_query, header)),
        }
    }

    /// The capability the request needs (none: open to all).
    fn needed(&self, metrics_public: bool) -> Option<Cap> {
        match self {
            Asked::Own(Ok(request)) => request.needed_cap(metrics_public),
            Asked::Own(Err(error)) | Asked::Device(Err(error)) => Some(error.needed),
            Asked::Device(Ok(request)) => Some(request.needed_cap()),
        }
    }

    /// What the request metrics count it as (device requests only).
    fn operation(&self) -> Option<Operation> {
        match self {
            Asked::Own(_) => None,
            // A read that waits for a change (a long poll) lasts as long as nothing changes:
            // not a request duration to observe.
            Asked::Device(Ok(request)) if request.wait_newer.is_some() => None,
            Asked::Device(Ok(request)) => Some(Some(request.op.kind())),
            Asked::Device(Err(error)) => Some(error.kind_of_op),
        }
    }

    /// The device the request's path names, if it names one (what the request metrics count
    /// it under; one not served here is counted as [`metrics::NO_DEVICE`]).
    fn device(&self, path_and_query: &str) -> Option<u32> {
        match self {
            Asked::Own(_) => None,
            Asked::Device(Ok(request)) => Some(request.device),
            Asked::Device(Err(error)) => routed_device(Some(error), path_and_query),
        }
    }
}

/// A request's head as its signature covers it: the method, the path with its query, and
/// the headers whose values are text (name, value).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head<'a> {
    /// The method.
    pub(crate) method: &'a str,
    /// The path, with its query.
    pub(crate) path_and_query: &'a str,
    /// The headers whose values are text.
    pub(crate) headers: &'a [(&'a str, &'a str)],
    /// A signed header whose value is not visible ASCII, if there is one: it would be left
    /// out of the signature (it has no text form) yet act by its presence, so the request is
    /// refused.
    pub(crate) unprintable_signed: Option<&'a str>,
}

/// What the connection says of a request's sender.
#[derive(Clone, Debug, Default)]
pub(crate) struct Connection {
    /// It came over the local socket (opens are answered there only).
    pub(crate) local: bool,
    /// It came in plain HTTP to a server that takes TLS.
    pub(crate) plaintext: bool,
    /// The certificate the sender presented (mutual TLS).
    pub(crate) peer: Option<Arc<PeerCertificate>>,
}

/// What a request is answered.
pub(crate) enum Said {
    /// A device request's answer, or any refusal.
    Device(Answer<Bytes>),
    /// An own route's answer.
    Own(OwnAnswer),
}

/// What the core answers: the answer, the device whose metrics go with it, and the open file
/// an open answers with (the local socket sends it).
pub(crate) struct Served {
    pub(crate) said: Said,
    pub(crate) store: Option<Arc<DeviceStore>>,
    pub(crate) file: Option<LocalFile>,
}

impl Served {
    fn refused(refusal: Refusal, store: Option<Arc<DeviceStore>>) -> Served {
        Served { said: Said::Device(Answer::Refused(refusal)), store, file: None }
    }

    /// The refusal, if the request was refused.
    pub(crate) fn refusal(&self) -> Option<&Refusal> {
        match &self.said {
            Said::Device(answer) => answer.refusal(),
            Said::Own(_) => None,
        }
    }
}

/// What authentication found of the sender.
#[derive(Clone, Copy, Debug)]
struct Caller {
    /// Whether it came over the local socket (opens are answered there only).
    local: bool,
    /// Whether it may see the gateway's own keys in a listing.
    sees_gateway_state: bool,
}

/// Serves one request that arrived at `started`: authenticated and authorised first (401
/// `unauthorized` or 403 `forbidden` with the reason, counted and logged; the request has no
/// effect), then served. A device request is counted in the request metrics whatever its
/// answer. A refused request's body is left unread: the adapter throws it away
/// ([`Incoming::discard`]).
pub(crate) async fn serve(
    state: &Arc<AppState>,
    asked: Asked,
    head: Head<'_>,
    connection: &Connection,
    body: &mut Incoming,
    started: Instant,
) -> Served {
    let operation = asked.operation();
    let device = asked.device(head.path_and_query);
    let served = match authenticate(state, &asked, head, connection) {
        Ok(caller) => match asked {
            Asked::Own(Ok(request)) => Served {
                said: Said::Own(own::serve_own(state, request).await),
                store: None,
                file: None,
            },
            Asked::Own(Err(error)) => Served::refused(fail(error.kind, error.reason), None),
            Asked::Device(decoded) => {
                let routed = routed_device(decoded.as_ref().err(), head.path_and_query);
                serve_device(state, decoded, routed, caller, body, started).await
            }
        },
        Err(refusal) => Served::refused(refusal, None),
    };
    if let Some(op) = operation {
        let refused = served.refusal().map(|refusal| refusal.kind);
        // A refused request's body is thrown away unread: not counted as received.
        let received = if refused.is_none() { body.declared_bytes() } else { 0 };
        let sent = match &served.said {
            Said::Device(Answer::Object { body, .. }) => body.len() as u64,
            _ => 0,
        };
        state.telemetry.observe(device, op, refused, started.elapsed(), received, sent);
    }
    served
}

/// For a device request that does not decode: the device its path names, if it parses (the
/// refusal carries that device's metrics, or is `misdirected`).
fn routed_device(error: Option<&DecodeError>, path_and_query: &str) -> Option<u32> {
    error?;
    let path = path_and_query.split_once('?').map_or(path_and_query, |(path, _)| path);
    Route::parse(path).ok().map(|route| route.device)
}

/// Authenticates and authorises a request (see [`crate::auth`]).
fn authenticate(
    state: &AppState,
    asked: &Asked,
    head: Head<'_>,
    connection: &Connection,
) -> Result<Caller, Refusal> {
    let mut caller = Caller { local: connection.local, sees_gateway_state: true };
    let seen = crate::auth::Request {
        method: head.method,
        path: head.path_and_query,
        headers: head.headers,
    };
    if let Some(name) = head.unprintable_signed {
        let reason = format!("the header {name} holds bytes other than visible ASCII");
        if state.auth.enabled() {
            state.auth.count_refusal(&AuthError::Malformed(reason.clone()));
        }
        return Err(fail(ErrorKind::BadRequest, reason));
    }
    let need = asked.needed(state.auth.metrics_public());
    if connection.plaintext && need.is_some() {
        // Its nonce is spent: refused here, it cannot be sent again over TLS.
        state.auth.spend(seen);
        return Err(fail(
            ErrorKind::Forbidden,
            "this server takes TLS: connect with https (the client's --tls-ca, or OPTIO_TLS_CA); \
             plain HTTP serves /health only",
        ));
    }
    let (true, Some(need)) = (state.auth.enabled(), need) else { return Ok(caller) };
    let is_own_target = |target: &str| state.is_own_target(target);
    match state.auth.check(seen, need, connection.peer.as_deref(), &is_own_target) {
        Ok(found) => {
            if let Some(found) = found {
                caller.sees_gateway_state = found.cap.allows(Cap::Gateway);
            }
            Ok(caller)
        }
        Err(error) => {
            let kind = match error {
                AuthError::Forbidden { .. } => ErrorKind::Forbidden,
                _ => ErrorKind::Unauthorized,
            };
            Err(fail(kind, error.to_string()))
        }
    }
}

/// Serves a request to one of this server's devices — the device served here, the server
/// not fenced, the sender's epoch current, a listing after the writes of older epochs — and
/// dispatches it to its handler.
async fn serve_device(
    state: &Arc<AppState>,
    decoded: Result<device::Request<'static>, DecodeError>,
    routed_device: Option<u32>,
    caller: Caller,
    body: &mut Incoming,
    started: Instant,
) -> Served {
    let request = match decoded {
        Ok(request) => request,
        Err(error) => {
            let store = match routed_device.map(|device| state.device(device)) {
                Some(Err(misdirected)) => return Served::refused(misdirected, None),
                Some(Ok(store)) => Some(store),
                None => None,
            };
            return Served::refused(fail(error.kind, error.reason), store);
        }
    };
    let store = match state.device(request.device) {
        Ok(store) => store,
        Err(misdirected) => return Served::refused(misdirected, None),
    };
    if !state.fence.serving() {
        let refusal = fail(
            ErrorKind::Fenced,
            "this server holds no lease in the map store (it cannot reach it, or the monitor \
             fenced it before marking it down): it serves nothing; use the other replicas",
        );
        return Served::refused(refusal, Some(store));
    }
    let kind = request.op.kind();
    // The epoch checked, when one is (a server without a map checks none).
    let checked = request.epoch.filter(|_| state.map.checks_epochs());
    // Counted before the epoch check (see `admitted`).
    let _admitted = match (kind, checked) {
        (OpKind::Put | OpKind::Write | OpKind::Delete, Some(epoch)) => {
            Some(state.writes.admit(epoch))
        }
        _ => None,
    };
    if let Err(refusal) = state.check_epoch(request.epoch).await {
        return Served::refused(refusal, Some(store));
    }
    if let (OpKind::List, Some(epoch)) = (kind, checked)
        && let Err(older) = state.writes.settle_before(epoch, admitted::SETTLE_WAIT_MAX).await
    {
        let refusal = fail(
            ErrorKind::Unavailable,
            format!(
                "{older} write(s) of an epoch before {epoch} are still being stored here; list again shortly"
            ),
        );
        return Served::refused(refusal, Some(store));
    }
    if (request.snap.is_some()
        || request.as_of.is_some()
        || matches!(request.op, Op::Commit { .. } | Op::Undo { .. }))
        && state
            .map
            .current()
            .is_some_and(|map| map.map.pool(request.pool).is_some_and(|p| p.erasure.is_some()))
    {
        // Chunks of an erasure-coded pool keep what they replace under any key.
        store.note_erasure(request.pool);
    }
    let target = Target {
        store: store.clone(),
        pool: request.pool,
        epoch: state.epoch_of(request.epoch),
        snap: request.snap,
        as_of: request.as_of,
        wait_newer: request.wait_newer,
    };
    let handled = handle(state, target, request.op, caller, body).await;
    // (A long poll's time is its wait, not the device's latency.)
    if request.wait_newer.is_none() {
        store.record_latency(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    match handled {
        Ok((answer, file)) => Served { said: Said::Device(answer), store: Some(store), file },
        Err(refusal) => Served::refused(refusal, Some(store)),
    }
}
/// Dispatches a decoded operation to its handler.
async fn handle(
    state: &Arc<AppState>,
    target: Target,
    op: Op<'static>,
    caller: Caller,
    body: &mut Incoming,
) -> Result<(Answer<Bytes>, Option<LocalFile>), Refusal> {
    let reads = matches!(op, Op::Probe { .. } | Op::Get { .. } | Op::Open { .. });
    if reads && state.catchup.refuses_reads(target.store.id()) {
        return Err(fail(
            ErrorKind::Recovering,
            format!(
                "device {} is catching up on writes it missed (or the map marks it down); read another replica",
                target.store.id()
            ),
        ));
    }
    let answer = match op {
        Op::List(query) => list(&target, &query, caller.sees_gateway_state),
        Op::Sync => sync_device(&target).await,
        Op::Trim => objects::trim_clones(state, &target, body).await,
        Op::Probe { key, want_choice } => probe(&target, &key, want_choice),
        Op::Open { key } => {
            let (answer, file) = open_object(&target, key.into_owned(), caller.local).await?;
            return Ok((answer, Some(LocalFile(Arc::new(file)))));
        }
        Op::Get { key, range } => get_object(&target, key.into_owned(), range).await,
        Op::Fetch { key } => get_object(&target, key.into_owned(), None).await,
        Op::Put { key, version, checksum, pg_seed } => {
            let put = objects::Put { key: key.into_owned(), version, checksum, pg_seed };
            put_object(state, &target, put, body).await
        }
        Op::WriteAt(write) => write_in_place(state, &target, write, body).await,
        Op::Delete { key, version, purge, pg_seed } => {
            let removal = objects::Removal::Delete { version, purge, pg_seed };
            delete_object(&target, key.into_owned(), removal).await
        }
        Op::Undo { key, version } => {
            delete_object(&target, key.into_owned(), objects::Removal::Undo { version }).await
        }
        Op::Commit { key, version } => commit_chunk(&target, key.into_owned(), version).await,
        Op::GetRecord { key, wait_durable: wait } => {
            if wait {
                wait_durable(&target, &key).await?;
            }
            get_record(&target, &key)
        }
        Op::PutRecord { key, record, replace_if_writer, unless_contended, defer_sync } => {
            let put = choices::PutRecord {
                key: key.into_owned(),
                record,
                replace_if_writer,
                unless_contended,
                defer_sync,
            };
            put_record(state, &target, put).await
        }
        Op::DeleteRecord { key } => delete_record(&target, key.into_owned()).await,
    };
    Ok((answer?, None))
}
