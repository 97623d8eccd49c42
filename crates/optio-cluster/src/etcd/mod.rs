//! The map in etcd, through etcd's v3 JSON gateway.
//!
//! # Why the JSON gateway
//!
//! The `etcd-client` crate speaks gRPC and runs `protoc` at build time, which a fresh machine
//! does not have: it would break the README's first command (`cargo run --release -- demo`).
//! etcd also serves its v3 API as JSON over plain HTTP on the client port (the "gRPC
//! gateway", documented in etcd's API guide): `POST /v3/kv/range`, `/v3/kv/put`, `/v3/kv/txn`
//! and `/v3/watch`, keys and values base64-encoded, 64-bit integers as decimal strings, fields
//! equal to their zero value left out (`"succeeded"` is absent when a transaction failed,
//! `"kvs"` when nothing matched). It needs nothing at build time and works with the workspace's
//! HTTP client. etcd 3.4 (Debian bookworm's `etcd-server` 3.4.23) serves the gateway under
//! `/v3/` and `/v3beta/`; 3.5 and later only under `/v3/`, which is what this client uses.
//!
//! # Layout
//!
//! Under a prefix (`/optio` unless the URL gives one):
//!
//! | key | value |
//! |---|---|
//! | `{prefix}/map` | the map as Optio TOML (readable with `etcdctl get /optio/map`) |
//! | `{prefix}/epoch` | the map's epoch, in decimal |
//! | `{prefix}/status/{member}` | a member's status document, JSON |
//! | `{prefix}/manager` | the acting monitor's name, attached to its lease |
//! | `{prefix}/fence/{device}`, `{prefix}/fenced/{device}` | fencing leases (see `fence.rs`) |
//!
//! The map and its epoch are always written together, in one transaction.
//!
//! # Compare-and-swap
//!
//! A compare-and-swap is one transaction: *if* `{prefix}/epoch` holds the expected epoch,
//! *then* put the map and the new epoch, *else* read the map (to report the epoch found). The
//! epoch key is thus the map's lock word. If the epoch key is missing or out of step with the
//! map (someone put `{prefix}/map` by hand with `etcdctl`), and the map itself is at the
//! expected epoch, the swap falls back to a second transaction comparing the map key's
//! `mod_revision` with the one just read, which writes both keys and so heals the pair.
//!
//! # Watch
//!
//! A watcher reads the map key (learning the store's revision R), then opens a watch stream on
//! the key from revision R + 1, so nothing committed between the read and the watch is missed.
//! The stream is one long HTTP response of newline-separated JSON messages, each
//! `{"result": {...}}`: first a `"created": true` notice, then messages with `"events"` (a
//! put's event has no `"type"`, PUT being the zero value; a delete's is `"DELETE"`), or
//! `"canceled": true` (with `"compact_revision"` when the start revision was compacted);
//! errors arrive as `{"error": {...}}`. When the stream breaks, etcd cannot be reached or the
//! watch is cancelled, the watcher logs a warning and starts over — read, then watch from the
//! read's revision + 1 — with a backoff from [`RECONNECT_BACKOFF_MIN`] doubling up to
//! [`RECONNECT_BACKOFF_MAX`]; it never gives up. Maps written while it was disconnected are
//! thus not lost, but only the newest is delivered (epochs only move forward). A stream silent
//! for [`WATCH_IDLE_CHECK`] is checked with a read: if the map changed without the stream
//! saying so (a connection that died silently), the watch is re-established.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use optio_placement::{ClusterMap, Epoch};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::ClusterError;
use crate::codec;
use crate::secret::AccessError;

mod access;
mod fence;
mod gateway;
mod url;
mod watch;

pub use access::{CA_ENV, CERT_ENV, EtcdAccess, KEY_ENV, PASSWORD_ENV, PASSWORD_FILE_ENV};
use access::{Login, TlsFiles};
pub use fence::FenceRefusal;
use gateway::*;
use url::{parse_prefix, split_host_port};
pub use watch::EtcdWatcher;
use watch::WatchStream;

/// The prefix of Optio's keys when the URL gives none.
pub const DEFAULT_PREFIX: &str = "/optio";
/// etcd's client port when the URL gives none.
pub const DEFAULT_PORT: u16 = 2379;
/// The URL scheme of an etcd map source.
pub const SCHEME: &str = "etcd://";
/// The URL scheme of an etcd map source reached over TLS (see `access.rs`).
pub const TLS_SCHEME: &str = "etcds://";
/// How long one request (range, put, transaction, opening a watch) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a TCP connection to etcd may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The first pause before a watcher retries after a failure.
pub const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest pause between two retries of a watcher (the backoff doubles up to this).
pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(2);
/// After this long without a message on a watch stream, the watcher checks with a read that
/// it missed nothing.
pub const WATCH_IDLE_CHECK: Duration = Duration::from_secs(10);
/// Largest response (or watch message) read from etcd, in bytes. etcd's own request limit is
/// 1.5 MiB by default; base64 adds a third.
pub const RESPONSE_BYTES_MAX: usize = 64 << 20;
/// The request limit Optio gives the etcd it starts (`--max-request-bytes`, 10 MiB; etcd's
/// default 1.5 MiB, base64 included, holds a map of about 3,500 devices with an incremental
/// balance state).
pub const ETCD_REQUEST_BYTES: usize = 10 << 20;
/// Most status documents read at once.
pub const STATUSES_MAX: u64 = 10_000;
/// Longest key prefix, in bytes.
pub const PREFIX_BYTES_MAX: usize = 256;
/// Longest host name, in bytes.
const HOST_BYTES_MAX: usize = 253;
/// The gateway's path.
const GATEWAY: &str = "/v3";

/// An etcd holding Optio's map under a prefix.
#[derive(Clone, Debug)]
pub struct EtcdStore {
    /// `http://HOST:PORT` (`https://` over TLS).
    endpoint: String,
    /// `HOST:PORT` as given (for [`EtcdStore::describe`]).
    authority: String,
    /// `/optio`: starts with `/`, no trailing `/`.
    prefix: String,
    /// The user and password, when etcd's authentication is used.
    login: Option<Login>,
    /// The token `auth/authenticate` gave for `login` (shared by the clones of a store).
    token: std::sync::Arc<tokio::sync::Mutex<Option<String>>>,
    client: reqwest::Client,
}

impl PartialEq for EtcdStore {
    fn eq(&self, other: &EtcdStore) -> bool {
        self.endpoint == other.endpoint && self.prefix == other.prefix
    }
}

/// `spec` with anything after a `:` in its user part (a password given by mistake) hidden.
fn redact(spec: &str) -> String {
    let Some((scheme, rest)) = spec.split_once("://") else { return spec.to_string() };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((user, host)) if user.contains(':') => {
            let name = user.split(':').next().unwrap_or_default();
            format!("{scheme}://{name}:***@{host}{}", &rest[authority_end..])
        }
        _ => spec.to_string(),
    }
}

impl EtcdStore {
    /// Parses `etcd://[USER@]HOST[:PORT][/prefix]` or `etcds://…` (TLS) — port
    /// [`DEFAULT_PORT`], prefix [`DEFAULT_PREFIX`] when absent; a user's password, the TLS
    /// CA and client certificate come from the environment ([`PASSWORD_ENV`], [`CA_ENV`]…).
    /// Makes no connection.
    pub fn parse(spec: &str) -> Result<EtcdStore, ClusterError> {
        let access = EtcdAccess::from_env(&access::VARS)
            .map_err(|source| ClusterError::BadAccess { spec: redact(spec), source })?;
        EtcdStore::parse_with(spec, &access)
    }

    /// Parses `spec` as [`EtcdStore::parse`] does, with the credentials in `access` rather
    /// than the environment's.
    pub fn parse_with(spec: &str, access: &EtcdAccess) -> Result<EtcdStore, ClusterError> {
        let bad = |reason: String| ClusterError::BadSource { spec: redact(spec), reason };
        let bad_access =
            |source: AccessError| ClusterError::BadAccess { spec: redact(spec), source };
        let (rest, tls) = match (spec.strip_prefix(SCHEME), spec.strip_prefix(TLS_SCHEME)) {
            (Some(rest), _) => (rest, None),
            (None, Some(rest)) => (rest, Some(access::tls_files(access).map_err(bad_access)?)),
            (None, None) => {
                return Err(bad(format!("an etcd source starts with {SCHEME} or {TLS_SCHEME}")));
            }
        };
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        let (user, authority) = match authority.rsplit_once('@') {
            Some((user, host)) => (Some(user), host),
            None => (None, authority),
        };
        let (host, port) = split_host_port(authority).map_err(|e| bad(e.to_string()))?;
        let prefix = parse_prefix(path).map_err(|e| bad(e.to_string()))?;
        let login = user.map(|user| Login::new(user, access)).transpose().map_err(bad_access)?;
        let authority = format!("{host}:{port}");
        EtcdStore::new(&authority, &prefix, login, tls.as_ref()).map_err(bad_access)
    }

    fn new(
        authority: &str,
        prefix: &str,
        login: Option<Login>,
        tls: Option<&TlsFiles>,
    ) -> Result<EtcdStore, AccessError> {
        optio_tls::install_crypto_provider();
        let builder = reqwest::Client::builder().connect_timeout(CONNECT_TIMEOUT).no_proxy();
        let (builder, scheme) = match tls {
            None => (builder, "http"),
            Some(files) => (builder.use_preconfigured_tls(files.client_config()?), "https"),
        };
        let client =
            builder.build().map_err(|e| AccessError::HttpClient(std::sync::Arc::new(e)))?;
        Ok(EtcdStore {
            endpoint: format!("{scheme}://{authority}"),
            authority: authority.to_string(),
            prefix: prefix.to_string(),
            login,
            token: Default::default(),
            client,
        })
    }

    /// `etcd://HOST:PORT/prefix`, which [`EtcdStore::parse`] reads back.
    pub fn describe(&self) -> String {
        let scheme = if self.endpoint.starts_with("https") { TLS_SCHEME } else { SCHEME };
        let user = self.login.as_ref().map(|l| format!("{}@", l.user)).unwrap_or_default();
        format!("{scheme}{user}{}{}", self.authority, self.prefix)
    }

    /// `http://HOST:PORT` (`https://` over TLS).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The key prefix (`/optio`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The key holding the map.
    pub fn map_key(&self) -> String {
        format!("{}/map", self.prefix)
    }

    /// The key holding the map's epoch.
    pub fn epoch_key(&self) -> String {
        format!("{}/epoch", self.prefix)
    }

    /// The key holding `member`'s status document.
    pub fn status_key(&self, member: &str) -> String {
        format!("{}{member}", self.status_prefix())
    }

    fn status_prefix(&self) -> String {
        format!("{}/status/", self.prefix)
    }

    /// Reads the map; [`ClusterError::NoMap`] if none is stored.
    pub async fn load(&self) -> Result<ClusterMap, ClusterError> {
        self.load_if_present()
            .await?
            .ok_or_else(|| ClusterError::NoMap { source_name: self.describe() })
    }

    /// Reads the map, if one is stored.
    pub async fn load_if_present(&self) -> Result<Option<ClusterMap>, ClusterError> {
        let (_, kv) = self.get(&self.map_key()).await?;
        kv.map(|kv| self.parse_kv(&kv)).transpose()
    }

    /// Stores `map` if none is stored (create-if-absent on the map key); returns whether it
    /// did. The devices' state epochs it lacks are its own.
    pub async fn initialize(&self, map: &ClusterMap) -> Result<bool, ClusterError> {
        let map = &map.clone().with_state_epochs(None);
        let body = json!({
            "compare": [{
                "key": encode(&self.map_key()),
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": "0",
            }],
            "success": self.put_map_ops(map),
        });
        let response: TxnResponse = self.call("kv/txn", &body).await?;
        Ok(response.succeeded)
    }

    /// Stores `map`, whatever is stored, its devices' state epochs recorded against the map
    /// it replaces (read first; if that cannot be read, as if there were none).
    pub async fn replace(&self, map: &ClusterMap) -> Result<(), ClusterError> {
        let previous = self.load_if_present().await.ok().flatten();
        let map = &map.clone().with_state_epochs(previous.as_ref());
        let body = json!({ "success": self.put_map_ops(map) });
        let response: TxnResponse = self.call("kv/txn", &body).await?;
        if !response.succeeded {
            return Err(self.error("did not apply an unconditional transaction"));
        }
        Ok(())
    }

    /// Stores `next` if the stored epoch is `expected` (see the module docs), its devices'
    /// state epochs recorded against the stored map: that map is read first (one more round
    /// trip per map change), and the swap then succeeds only if it is still the one stored.
    pub async fn compare_and_swap(
        &self,
        expected: Epoch,
        next: &ClusterMap,
    ) -> Result<(), ClusterError> {
        let stored = self.load().await?;
        if stored.epoch() != expected {
            return Err(ClusterError::Conflict { expected, found: stored.epoch() });
        }
        let next = &next.clone().with_state_epochs(Some(&stored));
        let body = json!({
            "compare": [{
                "key": encode(&self.epoch_key()),
                "target": "VALUE",
                "result": "EQUAL",
                "value": encode(&expected.0.to_string()),
            }],
            "success": self.put_map_ops(next),
            "failure": [{ "request_range": { "key": encode(&self.map_key()) } }],
        });
        let response: TxnResponse = self.call("kv/txn", &body).await?;
        if response.succeeded {
            return Ok(());
        }
        let kv = response
            .responses
            .into_iter()
            .find_map(|op| op.response_range)
            .and_then(|range| range.kvs.into_iter().next());
        let Some(kv) = kv else {
            return Err(ClusterError::NoMap { source_name: self.describe() });
        };
        let found = self.parse_kv(&kv)?.epoch();
        if found != expected {
            return Err(ClusterError::Conflict { expected, found });
        }
        tracing::warn!(
            source = %self.describe(),
            epoch = expected.0,
            "the epoch key is missing or disagrees with the map (was the map put by hand?): \
             swapping on the map's revision instead"
        );
        self.compare_and_swap_on_revision(expected, kv.mod_revision, next).await
    }

    async fn compare_and_swap_on_revision(
        &self,
        expected: Epoch,
        mod_revision: u64,
        next: &ClusterMap,
    ) -> Result<(), ClusterError> {
        let body = json!({
            "compare": [{
                "key": encode(&self.map_key()),
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": mod_revision.to_string(),
            }],
            "success": self.put_map_ops(next),
        });
        let response: TxnResponse = self.call("kv/txn", &body).await?;
        if response.succeeded {
            return Ok(());
        }
        let found = self.load().await?.epoch();
        Err(ClusterError::Conflict { expected, found })
    }

    /// The two puts that store a map: the map and its epoch.
    fn put_map_ops(&self, map: &ClusterMap) -> serde_json::Value {
        let text = codec::encode_map(map);
        json!([
            { "request_put": { "key": encode(&self.map_key()), "value": encode(&text) } },
            {
                "request_put": {
                    "key": encode(&self.epoch_key()),
                    "value": encode(&map.epoch().0.to_string()),
                }
            },
        ])
    }

    /// The key the cluster's acting monitor holds (`optio manager`, `optio up`).
    pub fn manager_key(&self) -> String {
        format!("{}/manager", self.prefix)
    }

    /// Tries to become the cluster's acting monitor: grants a lease of `ttl` and puts
    /// [`manager_key`](Self::manager_key) = `holder` with it if the key is absent. Returns
    /// the lease (keep it alive with [`keep_leading`](Self::keep_leading)), or who holds the
    /// key now.
    pub async fn try_lead(
        &self,
        holder: &str,
        ttl: Duration,
    ) -> Result<Result<u64, String>, ClusterError> {
        let grant: LeaseGrant =
            self.call("lease/grant", &json!({ "TTL": ttl.as_secs().max(1).to_string() })).await?;
        if grant.id == 0 {
            return Err(self.error("granted no lease"));
        }
        let key = encode(&self.manager_key());
        let body = json!({
            "compare": [{ "key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [{ "request_put": { "key": key, "value": encode(holder), "lease": grant.id.to_string() } }],
            "failure": [{ "request_range": { "key": key } }],
        });
        let response: TxnResponse = self.call("kv/txn", &body).await?;
        if response.succeeded {
            return Ok(Ok(grant.id));
        }
        let _ = self.revoke(grant.id).await;
        let holder = response
            .responses
            .into_iter()
            .find_map(|op| op.response_range)
            .and_then(|range| range.kvs.into_iter().next())
            .map(|kv| self.decode_text(&kv.value).unwrap_or_default())
            .unwrap_or_default();
        Ok(Err(holder))
    }

    /// Keeps the lease of [`try_lead`](Self::try_lead) alive; `false` when it expired (the
    /// monitor must stop acting: another may have taken over).
    pub async fn keep_leading(&self, lease: u64) -> Result<bool, ClusterError> {
        self.keep_alive(lease).await
    }

    /// Replaces `member`'s status document (the member name is validated by the caller).
    pub async fn put_status(&self, member: &str, json: &[u8]) -> Result<(), ClusterError> {
        let body = json!({
            "key": encode(&self.status_key(member)),
            "value": BASE64.encode(json),
        });
        let _: serde_json::Value = self.call("kv/put", &body).await?;
        Ok(())
    }

    /// Every member's status document, by member name (at most [`STATUSES_MAX`]).
    pub async fn statuses(&self) -> Result<BTreeMap<String, Vec<u8>>, ClusterError> {
        let prefix = self.status_prefix();
        let body = json!({
            "key": encode(&prefix),
            "range_end": BASE64.encode(prefix_end(prefix.as_bytes())),
            "limit": STATUSES_MAX.to_string(),
        });
        let response: RangeResponse = self.call("kv/range", &body).await?;
        if response.more {
            tracing::warn!(
                source = %self.describe(),
                "more than {STATUSES_MAX} status documents; reading the first ones only"
            );
        }
        let mut statuses = BTreeMap::new();
        for kv in response.kvs {
            let key = self.decode_text(&kv.key)?;
            let Some(member) = key.strip_prefix(&prefix) else { continue };
            if codec::validate_member(member).is_err() {
                tracing::warn!(key, "ignoring a status document with an invalid member name");
                continue;
            }
            statuses.insert(member.to_string(), self.decode(&kv.value)?);
        }
        Ok(statuses)
    }

    /// A watcher delivering every stored map whose epoch is newer than `after` (any stored map
    /// when `None`), starting with the stored one if it qualifies. Makes no request: the first
    /// [`EtcdWatcher::next`] connects.
    pub fn watch_after(&self, after: Option<Epoch>) -> EtcdWatcher {
        EtcdWatcher::new(self.clone(), after)
    }

    /// The store's revision and the key's value, if any.
    async fn get(&self, key: &str) -> Result<(u64, Option<KeyValue>), ClusterError> {
        let body = json!({ "key": encode(key) });
        let response: RangeResponse = self.call("kv/range", &body).await?;
        Ok((response.header.revision, response.kvs.into_iter().next()))
    }

    fn parse_kv(&self, kv: &KeyValue) -> Result<ClusterMap, ClusterError> {
        let text = self.decode_text(&kv.value)?;
        codec::decode_map(&text, &format!("{} (revision {})", self.describe(), kv.mod_revision))
    }

    fn decode(&self, value: &str) -> Result<Vec<u8>, ClusterError> {
        BASE64.decode(value).map_err(|e| self.error(&format!("sent invalid base64: {e}")))
    }

    fn decode_text(&self, value: &str) -> Result<String, ClusterError> {
        String::from_utf8(self.decode(value)?)
            .map_err(|_| self.error("holds a map that is not UTF-8 text"))
    }

    fn error(&self, reason: &str) -> ClusterError {
        ClusterError::Etcd { url: self.endpoint.clone(), reason: reason.to_string() }
    }

    fn unreachable(&self, reason: String) -> ClusterError {
        ClusterError::EtcdUnreachable { url: self.endpoint.clone(), reason }
    }

    fn url(&self, operation: &str) -> String {
        format!("{}{GATEWAY}/{operation}", self.endpoint)
    }

    /// One request to the gateway, with [`REQUEST_TIMEOUT`] (and the login's token, renewed
    /// once if etcd says it expired).
    async fn call<R: DeserializeOwned>(
        &self,
        operation: &str,
        body: &serde_json::Value,
    ) -> Result<R, ClusterError> {
        let body = body.to_string();
        let mut renewed = false;
        loop {
            let token = self.token().await?;
            match self.send(operation, &body, token.as_deref()).await? {
                Ok(answer) => return Ok(answer),
                Err((_, message))
                    if token.is_some() && !renewed && message.contains("invalid auth token") =>
                {
                    self.forget_token(&token).await;
                    renewed = true;
                }
                Err((status, message)) => {
                    return Err(self.refused(operation, status, &message, body.len()));
                }
            }
        }
    }

    /// Sends one request: its decoded answer, or the status and message of a refusal.
    async fn send<R: DeserializeOwned>(
        &self,
        operation: &str,
        body: &str,
        token: Option<&str>,
    ) -> Result<Result<R, (reqwest::StatusCode, String)>, ClusterError> {
        let mut request = self
            .client
            .post(self.url(operation))
            .timeout(REQUEST_TIMEOUT)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(token) = token {
            request = request.header(reqwest::header::AUTHORIZATION, token);
        }
        let mut response = request.send().await.map_err(|e| self.unreachable(reason(&e)))?;
        let status = response.status();
        let bytes = read_body(&mut response).await.map_err(|e| self.unreachable(e))?;
        if !status.is_success() {
            return Ok(Err((status, error_message(&bytes))));
        }
        serde_json::from_slice(&bytes).map(Ok).map_err(|e| {
            self.error(&format!(
                "answered {operation} with something unexpected ({e}): {}",
                snippet(&bytes)
            ))
        })
    }

    /// The error for a refused request, with what to do about it.
    fn refused(
        &self,
        operation: &str,
        status: reqwest::StatusCode,
        message: &str,
        body_bytes: usize,
    ) -> ClusterError {
        let hint = if message.contains("request is too large") {
            format!(
                " (the request is {body_bytes} bytes; start etcd with a larger --max-request-bytes, \
                 default 1.5 MiB, e.g. --max-request-bytes {ETCD_REQUEST_BYTES}, as `optio up --etcd` does)"
            )
        } else {
            access::hint(message, self.login.as_ref().map(|l| l.user.as_str()), &self.prefix)
        };
        self.error(&format!("refused {operation}: HTTP {status}: {message}{hint}"))
    }

    /// The token to send: none without a login; else the one held, or a new one.
    async fn token(&self) -> Result<Option<String>, ClusterError> {
        let Some(login) = &self.login else { return Ok(None) };
        let mut token = self.token.lock().await;
        if token.is_none() {
            *token = self.authenticate(login).await?;
        }
        Ok(token.clone())
    }

    /// Drops the token `used` (etcd no longer takes it), unless another task replaced it.
    async fn forget_token(&self, used: &Option<String>) {
        let mut token = self.token.lock().await;
        if *token == *used {
            *token = None;
        }
    }

    /// Trades the login for a token (`auth/authenticate`); none if etcd does not check
    /// credentials (its authentication is not enabled).
    async fn authenticate(&self, login: &Login) -> Result<Option<String>, ClusterError> {
        #[derive(serde::Deserialize)]
        struct Authenticated {
            #[serde(default)]
            token: String,
        }
        let body = json!({ "name": login.user, "password": login.password }).to_string();
        match self.send::<Authenticated>("auth/authenticate", &body, None).await? {
            Ok(answer) if !answer.token.is_empty() => Ok(Some(answer.token)),
            Ok(_) => Err(self.error("answered auth/authenticate without a token")),
            Err((_, message)) if message.contains("authentication is not enabled") => {
                tracing::warn!(
                    etcd = %self.describe(),
                    "etcd does not have authentication enabled: the user and password are not checked"
                );
                Ok(None)
            }
            Err((status, message)) => Err(self.error(&format!(
                "refused the credentials of the etcd user `{}`: HTTP {status}: {message}{}",
                login.user,
                access::hint(&message, Some(&login.user), &self.prefix)
            ))),
        }
    }

    /// Opens a watch on `key` from `start_revision` and waits for etcd's "created" notice.
    async fn open_watch(
        &self,
        key: &str,
        start_revision: u64,
    ) -> Result<WatchStream, ClusterError> {
        let body = json!({
            "create_request": { "key": encode(key), "start_revision": start_revision.to_string() }
        });
        // No overall timeout on the request: the response is the stream and lasts; the
        // headers and the first message each get one.
        let mut request = self
            .client
            .post(self.url("watch"))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if let Some(token) = self.token().await? {
            request = request.header(reqwest::header::AUTHORIZATION, token);
        }
        let mut response = tokio::time::timeout(REQUEST_TIMEOUT, request.send())
            .await
            .map_err(|_| self.unreachable(format!("no answer within {REQUEST_TIMEOUT:?}")))?
            .map_err(|e| self.unreachable(reason(&e)))?;
        let status = response.status();
        if !status.is_success() {
            let bytes = tokio::time::timeout(REQUEST_TIMEOUT, read_body(&mut response))
                .await
                .unwrap_or_else(|_| Ok(Vec::new()))
                .unwrap_or_default();
            return Err(
                self.error(&format!("refused a watch: HTTP {status}: {}", error_message(&bytes)))
            );
        }
        let mut stream = WatchStream::new(response);
        let first = tokio::time::timeout(REQUEST_TIMEOUT, stream.next_message())
            .await
            .map_err(|_| {
                self.unreachable(format!("no watch confirmation within {REQUEST_TIMEOUT:?}"))
            })?
            .map_err(|e| self.unreachable(e))?;
        match first {
            Some(WatchMessage { result: Some(result), .. }) if result.created => {
                if result.canceled {
                    return Err(self.error(&format!(
                        "cancelled the watch at once: {} (compacted to revision {})",
                        result.cancel_reason, result.compact_revision
                    )));
                }
                Ok(stream)
            }
            Some(WatchMessage { error: Some(error), .. }) => {
                Err(self.error(&format!("refused a watch: {error}")))
            }
            Some(_) => Err(self.error("opened a watch without the \"created\" notice")),
            None => Err(self.unreachable("the watch stream ended before it started".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_defaults_and_round_trip() {
        let store = EtcdStore::parse("etcd://127.0.0.1:2379").expect("parses");
        assert_eq!(store.endpoint(), "http://127.0.0.1:2379");
        assert_eq!(store.prefix(), "/optio");
        assert_eq!(store.describe(), "etcd://127.0.0.1:2379/optio");
        assert_eq!(EtcdStore::parse(&store.describe()).expect("again"), store);
        let store = EtcdStore::parse("etcd://etcd-1.example:4001/prod/optio/").expect("parses");
        assert_eq!(store.prefix(), "/prod/optio");
        assert_eq!(store.map_key(), "/prod/optio/map");
        assert_eq!(store.epoch_key(), "/prod/optio/epoch");
        assert_eq!(store.status_key("z1-h1"), "/prod/optio/status/z1-h1");
        assert_eq!(EtcdStore::parse("etcd://h").expect("parses").endpoint(), "http://h:2379");
        assert_eq!(EtcdStore::parse("etcd://h/").expect("parses").prefix(), "/optio");
        let v6 = EtcdStore::parse("etcd://[::1]:2379/x").expect("parses");
        assert_eq!(v6.endpoint(), "http://[::1]:2379");
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (spec, says) in [
            ("etcd://", "host is missing"),
            ("etcd://:2379", "host is missing"),
            ("etcd://h:0", "not a port"),
            ("etcd://h:99999", "not a port"),
            ("etcd://h:x", "not a port"),
            ("etcd://h:1//a", "empty segment"),
            ("etcd://h:1/a b", "contains"),
            ("etcd://h:1/a?b", "contains"),
            ("etcd://us:pw@r:1", "password does not go in the URL"),
            ("etcd://@r:1", "user before `@` is empty"),
            ("etcd://a@b@r:1", "not an etcd user name"),
            ("etcd://[::1", "closing"),
        ] {
            let error = EtcdStore::parse(spec).expect_err(spec).to_string();
            assert!(error.contains(says), "{spec}: {error}");
            assert!(error.contains(&redact(spec)), "{spec}: {error}");
        }
        let error = EtcdStore::parse("etcd://us:pw@r:1/p").expect_err("a password").to_string();
        assert!(!error.contains("pw") && error.contains("etcd://us:***@r:1/p"), "{error}");
    }

    #[test]
    fn prefix_ranges_end_after_every_key_under_them() {
        assert_eq!(prefix_end(b"/optio/status/"), b"/optio/status0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }

    #[test]
    fn gateway_messages_parse_with_zero_values_left_out() {
        let text = r#"{"result":{"header":{"revision":"4"},"events":[{"kv":{"key":"ZTE=","mod_revision":"4","value":"Mg=="}},{"type":"DELETE","kv":{"key":"ZTE=","mod_revision":"5"}}]}}"#;
        let message: WatchMessage = serde_json::from_str(text).expect("parses");
        let result = message.result.expect("result");
        assert!(!result.created && !result.canceled);
        assert_eq!(result.events[0].kind, "");
        assert_eq!(result.events[1].kind, "DELETE");
        assert_eq!(result.events[0].kv.as_ref().expect("kv").mod_revision, 4);
        let txn: TxnResponse =
            serde_json::from_str(r#"{"header":{"revision":"3"},"responses":[{"response_range":{"header":{"revision":"3"}}}]}"#)
                .expect("parses");
        assert!(!txn.succeeded);
        assert!(txn.responses[0].response_range.as_ref().expect("range").kvs.is_empty());
    }
}
