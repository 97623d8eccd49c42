//! The server's side of authentication (see [`optio_proto::auth`] for the keyring and the
//! signature): the keyring it verifies against, reloaded when its file changes (so `optio auth
//! add | rm | rotate` take effect without a restart) and, once in a while, when a request names
//! an entity it does not know; the replay cache; the counts of refused requests by reason, and
//! their log lines, rate-limited.
//!
//! A keyring file that changed and cannot be loaded (loose permissions, a syntax error) fails
//! closed: until a valid one loads, only `admin` and `server` entities are served — and of
//! those only the ones still named in the file, when it can be parsed at all — so that a
//! removal never leaves the removed entity working.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use optio_proto::auth::{AuthError, Cap, Keyring, Signed, WINDOW_MS};

/// Why the keyring a server authenticates with cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyringError {
    /// It cannot be read, parsed, or is open to other users.
    #[error(transparent)]
    Load(#[from] AuthError),
    /// It holds no entity.
    #[error("the keyring {} has no entity: create it with `optio auth init`", .0.display())]
    Empty(PathBuf),
}

/// How often the keyring file is checked for changes (a `stat`).
const RELOAD_INTERVAL: Duration = Duration::from_millis(200);
/// Refusals logged per second at most; the rest are counted, and the count logged with the
/// next line that is.
const REFUSAL_LOGS_PER_SECOND: u64 = 10;
/// Longest path (with its query) a refusal's log line shows.
const LOGGED_PATH_BYTES_MAX: usize = 160;
/// Shards of the replay cache (by nonce).
const REPLAY_SHARDS: usize = 16;
/// Most nonces one shard remembers; past it, the oldest are forgotten first — and requests
/// older than the newest forgotten one are refused, so a replay never gets through.
const REPLAY_SHARD_MAX: usize = 1 << 18;
/// The reasons counted, in [`AuthError::label`] order.
pub const REFUSAL_LABELS: [&str; 10] = [
    "unsigned",
    "malformed",
    "unknown_entity",
    "bad_signature",
    "expired",
    "replayed",
    "forbidden",
    "unknown_certificate",
    "wrong_target",
    "keyring_unavailable",
];

/// Who a request was authenticated as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The entity.
    pub name: String,
    /// Its capability.
    pub cap: Cap,
}

/// Why the keyring file held cannot be trusted any more (see the module's docs).
#[derive(Clone, Debug)]
struct Unloadable {
    /// Why it does not load.
    reason: String,
    /// The entities the file still names, when it parses (loose permissions); `None`: it does
    /// not parse, and every entity of the keyring held stands.
    named: Option<BTreeSet<String>>,
}

/// Whether and how requests are authenticated.
pub struct Auth {
    /// `None`: authentication is off (`optio server --no-auth`).
    path: Option<PathBuf>,
    keyring: RwLock<Arc<Keyring>>,
    stamp: Mutex<Option<(u64, SystemTime, u64)>>,
    replay: ReplayCache,
    window_ms: u64,
    metrics_public: bool,
    refused: [AtomicU64; REFUSAL_LABELS.len()],
    /// Set while the keyring file changed and cannot be loaded.
    unloadable: RwLock<Option<Unloadable>>,
    /// Held while the keyring file is looked at and loaded: a request for an unknown entity
    /// and the periodic check never both load, nor does one see the file as looked at while
    /// the other is still loading it.
    reloading: Mutex<()>,
    /// The BLAKE3 hash of the keyring file's bytes as last loaded (`/health` shows its first
    /// 16 hex digits, so that `optio auth` can wait until every server holds its change).
    digest: RwLock<String>,
    log_limit: LogLimit,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Auth {
    /// No authentication: every request is served.
    pub fn off() -> Auth {
        Auth::new(None, Keyring::new(), true)
    }

    /// Authentication against the keyring at `path` (read now: a missing, unreadable or loose
    /// file is an error at start-up); `/metrics` unauthenticated when `metrics_public`.
    pub fn from_file(path: PathBuf, metrics_public: bool) -> Result<Auth, KeyringError> {
        let keyring = optio_cluster::keyring::load(&path)?;
        if keyring.is_empty() {
            return Err(KeyringError::Empty(path));
        }
        let auth = Auth::new(Some(path.clone()), keyring, metrics_public);
        *auth.stamp.lock().expect("stamp lock") = stamp(&path);
        *auth.digest.write().expect("digest lock") = file_digest(&path);
        Ok(auth)
    }

    fn new(path: Option<PathBuf>, keyring: Keyring, metrics_public: bool) -> Auth {
        Auth {
            path,
            keyring: RwLock::new(Arc::new(keyring)),
            stamp: Mutex::new(None),
            replay: ReplayCache::new(),
            window_ms: WINDOW_MS,
            metrics_public,
            refused: Default::default(),
            unloadable: RwLock::new(None),
            reloading: Mutex::new(()),
            digest: RwLock::new(String::new()),
            log_limit: LogLimit::default(),
        }
    }

    /// The first 16 hex digits of the BLAKE3 hash of the keyring file as last loaded (empty
    /// with authentication off): what `/health` shows.
    pub fn keyring_digest(&self) -> String {
        self.digest.read().expect("digest lock").clone()
    }

    /// Whether requests must be signed.
    pub fn enabled(&self) -> bool {
        self.path.is_some()
    }

    /// Whether `/metrics` is served without a signature.
    pub fn metrics_public(&self) -> bool {
        self.metrics_public || !self.enabled()
    }

    /// Checks a request of `method` to `path` (with its query) with `headers` (name, value)
    /// that needs `need`: its signature, its timestamp, its target (`is_own_target` says
    /// whether the server named in [`optio_proto::wire::TARGET`] is this one), its nonce (once
    /// only) and the entity's capability. An unsigned request that came over mutual TLS with
    /// the client certificate `peer` (the CA checked it in the handshake) is the entity it
    /// names instead, if the keyring records that certificate for the entity. Returns who it
    /// is, or `None` with authentication off.
    pub fn check(
        &self,
        request: Request<'_>,
        need: Cap,
        peer: Option<&crate::conn::PeerCertificate>,
        is_own_target: &dyn Fn(&str) -> bool,
    ) -> Result<Option<Caller>, AuthError> {
        if !self.enabled() {
            return Ok(None);
        }
        let signed = request
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(optio_proto::auth::AUTH_HEADER));
        let result = match peer {
            Some(peer) if !signed => self.allow_peer(peer, need),
            _ => self.verify(request, need, is_own_target),
        };
        if let Err(error) = &result {
            self.refusal(error, Some(request));
        }
        result.map(Some)
    }

    /// Records the nonce of a genuinely signed request that is refused for another reason than
    /// its signature (plain HTTP to a server that takes TLS), so that it cannot be sent again
    /// within the window (over TLS, say). A request whose signature does not verify is left
    /// alone (a forger cannot fill the cache).
    pub fn spend(&self, request: Request<'_>) {
        if !self.enabled() {
            return;
        }
        let Some(value) = auth_header(request.headers) else { return };
        let Ok(signed) = Signed::parse(value) else { return };
        let keyring = self.keyring.read().expect("keyring lock").clone();
        let now_ms = now_ms();
        if let Ok(entity) = signed.verify(
            &keyring,
            request.method,
            request.path,
            request.headers,
            now_ms,
            self.window_ms,
        ) {
            let expires = signed.ts_ms.saturating_add(self.window_ms);
            self.replay.first_sighting(&entity.name, &signed.nonce, signed.ts_ms, expires, now_ms);
        }
    }

    fn verify(
        &self,
        request: Request<'_>,
        need: Cap,
        is_own_target: &dyn Fn(&str) -> bool,
    ) -> Result<Caller, AuthError> {
        let value = auth_header(request.headers).ok_or(AuthError::Missing)?;
        let signed = Signed::parse(value)?;
        let mut keyring = self.keyring.read().expect("keyring lock").clone();
        if keyring.get(&signed.id).is_none() {
            // (Another request may have loaded it meanwhile: read the keyring again anyway.)
            self.reload_on_demand();
            keyring = self.keyring.read().expect("keyring lock").clone();
        }
        let now_ms = now_ms();
        let entity = signed.verify(
            &keyring,
            request.method,
            request.path,
            request.headers,
            now_ms,
            self.window_ms,
        )?;
        let target = request
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(optio_proto::wire::TARGET))
            .map(|(_, value)| *value);
        if !target.is_some_and(is_own_target) {
            return Err(AuthError::WrongTarget {
                id: entity.name.clone(),
                target: target.unwrap_or_default().to_string(),
            });
        }
        self.check_unloadable(&entity.name, entity.cap)?;
        if !entity.cap.allows(need) {
            return Err(AuthError::Forbidden {
                id: entity.name.clone(),
                has: entity.cap,
                needs: need,
            });
        }
        // Only a genuine request reaches the replay cache (a forger cannot fill it).
        let expires = signed.ts_ms.saturating_add(self.window_ms);
        if !self.replay.first_sighting(&entity.name, &signed.nonce, signed.ts_ms, expires, now_ms) {
            return Err(AuthError::Replayed(entity.name.clone()));
        }
        Ok(Caller { name: entity.name.clone(), cap: entity.cap })
    }

    /// The entity a client certificate names, if the keyring has it, records the certificate
    /// for it (rotating or removing the entity revokes its certificates) and it may do `need`.
    fn allow_peer(
        &self,
        peer: &crate::conn::PeerCertificate,
        need: Cap,
    ) -> Result<Caller, AuthError> {
        let mut keyring = self.keyring.read().expect("keyring lock").clone();
        if keyring.get(&peer.entity).is_none() {
            self.reload_on_demand();
            keyring = self.keyring.read().expect("keyring lock").clone();
        }
        let now_secs = now_ms() / 1000;
        let entity = keyring.check_certificate(&peer.entity, &peer.fingerprint, now_secs)?;
        self.check_unloadable(&entity.name, entity.cap)?;
        if !entity.cap.allows(need) {
            return Err(AuthError::Forbidden {
                id: entity.name.clone(),
                has: entity.cap,
                needs: need,
            });
        }
        Ok(Caller { name: entity.name.clone(), cap: entity.cap })
    }

    /// Refuses all but the `admin` and `server` entities still named in the keyring file
    /// while it cannot be loaded.
    fn check_unloadable(&self, name: &str, cap: Cap) -> Result<(), AuthError> {
        let unloadable = self.unloadable.read().expect("unloadable lock");
        let Some(unloadable) = unloadable.as_ref() else { return Ok(()) };
        let privileged = matches!(cap, Cap::Admin | Cap::Server);
        let still_named = unloadable.named.as_ref().is_none_or(|named| named.contains(name));
        if privileged && still_named {
            Ok(())
        } else {
            Err(AuthError::KeyringUnavailable(unloadable.reason.clone()))
        }
    }

    /// Reloads the keyring now if its file changed: a request for an entity `optio auth add`
    /// has just written is then served rather than refused until the next periodic check.
    /// (It costs a `stat` when nothing changed; an unknown entity cannot change the file, so
    /// a flood of them causes no reloads.)
    fn reload_on_demand(&self) {
        if let Some(path) = &self.path {
            self.reload_if_changed(path);
        }
    }

    /// Loads the keyring file if it changed since it was last looked at (or, while it does
    /// not load, again: a `chmod 600` changes no content); whether the keyring held changed.
    fn reload_if_changed(&self, path: &std::path::Path) -> bool {
        let _reloading = self.reloading.lock().expect("reloading lock");
        let now = stamp(path);
        {
            let mut held = self.stamp.lock().expect("stamp lock");
            let retrying = self.unloadable.read().expect("unloadable lock").is_some();
            if now == *held && !retrying {
                return false;
            }
            *held = now;
        }
        match optio_cluster::keyring::load(path) {
            Ok(keyring) => {
                tracing::info!(path = %path.display(), entities = keyring.len(), "keyring reloaded");
                *self.keyring.write().expect("keyring lock") = Arc::new(keyring);
                *self.digest.write().expect("digest lock") = file_digest(path);
                if self.unloadable.write().expect("unloadable lock").take().is_some() {
                    tracing::warn!(path = %path.display(), "the keyring loads again: every entity is served");
                }
                true
            }
            Err(error) => {
                // Fail closed: a removal written in a file that does not load must still
                // take effect.
                let named = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|text| Keyring::parse(&text, "").ok())
                    .map(|k| k.entities().map(|e| e.name.clone()).collect());
                let reason = error.to_string();
                let mut unloadable = self.unloadable.write().expect("unloadable lock");
                if unloadable.as_ref().is_none_or(|u| u.reason != reason || u.named != named) {
                    tracing::error!(
                        %error,
                        path = %path.display(),
                        "cannot load the changed keyring: only admin and server entities still in it are served until it loads"
                    );
                    *unloadable = Some(Unloadable { reason, named });
                    return true;
                }
                false
            }
        }
    }

    /// Counts a refusal and logs it (rate-limited, the path cut short).
    fn refusal(&self, error: &AuthError, request: Option<Request<'_>>) {
        let label = error.label();
        if let Some(i) = REFUSAL_LABELS.iter().position(|l| *l == label) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
        let Some(suppressed) = self.log_limit.admit() else { return };
        match request {
            Some(request) => tracing::warn!(
                reason = label,
                %error,
                method = request.method,
                path = %shortened(request.path),
                suppressed,
                "refused a request"
            ),
            None => tracing::warn!(reason = label, %error, suppressed, "refused a request"),
        }
    }

    /// Refused requests since start, by reason.
    pub fn refusals(&self) -> Vec<(&'static str, u64)> {
        REFUSAL_LABELS
            .iter()
            .zip(&self.refused)
            .map(|(label, count)| (*label, count.load(Ordering::Relaxed)))
            .collect()
    }

    /// Counts a refusal found outside [`check`](Self::check) (a body that does not match its
    /// signed hash).
    pub fn count_refusal(&self, error: &AuthError) {
        self.refusal(error, None);
    }

    /// Reloads the keyring whenever its file changes, until the process ends (a file that
    /// cannot be loaded fails closed: see the module's docs). When this server's own key was
    /// rotated, `signer` (the transport its requests to other servers go through) signs with
    /// the new key from then on: its peers take both keys during the rotation's grace.
    pub async fn follow(self: Arc<Self>, signer: Option<optio_net::HttpTransport>) {
        let Some(path) = self.path.clone() else { return };
        loop {
            tokio::time::sleep(RELOAD_INTERVAL).await;
            let auth = self.clone();
            let path = path.clone();
            let changed = tokio::task::spawn_blocking(move || auth.reload_if_changed(&path)).await;
            if !matches!(changed, Ok(true)) {
                continue;
            }
            let keyring = self.keyring.read().expect("keyring lock").clone();
            if let Some(transport) = &signer
                && let Some(own) = transport.credentials()
                && let Some(entity) = keyring.get(&own.id)
                && entity.key != own.key
            {
                tracing::info!(id = %own.id, "this server's key was rotated: signing with the new one");
                transport.rekey(entity.key.clone());
            }
        }
    }
}

/// A request as authentication sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The method.
    pub method: &'a str,
    /// The path with its query.
    pub path: &'a str,
    /// The headers (name, value) whose values are text.
    pub headers: &'a [(&'a str, &'a str)],
}

fn auth_header<'a>(headers: &[(&'a str, &'a str)]) -> Option<&'a str> {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(optio_proto::auth::AUTH_HEADER))
        .map(|(_, value)| *value)
}

/// `path` cut to [`LOGGED_PATH_BYTES_MAX`] bytes (at a character boundary), marked when cut.
fn shortened(path: &str) -> std::borrow::Cow<'_, str> {
    if path.len() <= LOGGED_PATH_BYTES_MAX {
        return path.into();
    }
    let mut end = LOGGED_PATH_BYTES_MAX;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &path[..end], path.len()).into()
}

/// At most [`REFUSAL_LOGS_PER_SECOND`] log lines a second.
#[derive(Default)]
struct LogLimit {
    state: Mutex<LogWindow>,
}

#[derive(Default)]
struct LogWindow {
    /// The second (since the Unix epoch) counted.
    second: u64,
    /// Lines logged in it.
    logged: u64,
    /// Lines not logged since the last one that was.
    suppressed: u64,
}

impl LogLimit {
    /// `Some(lines suppressed since the last one logged)` when this one may be logged.
    fn admit(&self) -> Option<u64> {
        let second = now_ms() / 1000;
        let mut window = self.state.lock().expect("log limit lock");
        if window.second != second {
            window.second = second;
            window.logged = 0;
        }
        if window.logged >= REFUSAL_LOGS_PER_SECOND {
            window.suppressed += 1;
            return None;
        }
        window.logged += 1;
        Some(std::mem::take(&mut window.suppressed))
    }
}

fn file_digest(path: &std::path::Path) -> String {
    std::fs::read(path)
        .map(|bytes| blake3::hash(&bytes).to_hex()[..16].to_string())
        .unwrap_or_default()
}

/// What tells a keyring file's versions apart: its inode (a keyring is replaced by a rename),
/// modification time and length.
fn stamp(path: &std::path::Path) -> Option<(u64, SystemTime, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.modified().ok()?, meta.len()))
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The nonces of recent requests, each kept until its request's timestamp leaves the window.
struct ReplayCache {
    shards: Vec<Mutex<Shard>>,
}

#[derive(Default)]
struct Shard {
    /// Nonce → when it may be forgotten (ms).
    seen: HashMap<u128, u64>,
    /// Requests with a timestamp at or before this are refused: their nonces may have been
    /// forgotten to bound the memory.
    floor_ms: u64,
}

impl ReplayCache {
    fn new() -> ReplayCache {
        ReplayCache { shards: (0..REPLAY_SHARDS).map(|_| Mutex::new(Shard::default())).collect() }
    }

    /// Records `entity`'s `nonce` (of a request stamped `ts_ms`, kept until `expires`); false
    /// when it was seen before, or is too old to tell. Keyed by entity and nonce together, so
    /// that one entity's nonces never collide with another's: whoever sees a nonce cannot
    /// spend it first under their own name.
    fn first_sighting(
        &self,
        entity: &str,
        nonce: &str,
        ts_ms: u64,
        expires: u64,
        now_ms: u64,
    ) -> bool {
        if u128::from_str_radix(nonce, 16).is_err() {
            return false;
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(entity.as_bytes());
        hasher.update(b"\n");
        hasher.update(nonce.as_bytes());
        let digest = hasher.finalize();
        let value = u128::from_le_bytes(digest.as_bytes()[..16].try_into().expect("16 bytes"));
        let mut shard = self.shards[(value as usize) % REPLAY_SHARDS].lock().expect("replay lock");
        if ts_ms <= shard.floor_ms {
            return false;
        }
        if shard.seen.len() >= REPLAY_SHARD_MAX {
            shard.seen.retain(|_, until| *until > now_ms);
            if shard.seen.len() >= REPLAY_SHARD_MAX / 2 {
                // Still full of live nonces: forget the older half and refuse anything as old.
                let mut expiries: Vec<u64> = shard.seen.values().copied().collect();
                let (_, median, _) = expiries.select_nth_unstable(REPLAY_SHARD_MAX / 4);
                let cut = *median;
                shard.seen.retain(|_, until| *until > cut);
                shard.floor_ms = shard.floor_ms.max(cut.saturating_sub(WINDOW_MS));
                if ts_ms <= shard.floor_ms {
                    return false;
                }
            }
        }
        shard.seen.insert(value, expires).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_accepted_once_per_entity() {
        let cache = ReplayCache::new();
        let nonce = "0123456789abcdef0123456789abcdef";
        assert!(cache.first_sighting("client.a", nonce, 1000, 31_000, 1000));
        assert!(!cache.first_sighting("client.a", nonce, 1000, 31_000, 1001));
        assert!(cache.first_sighting(
            "client.a",
            "f123456789abcdef0123456789abcdef",
            1000,
            31_000,
            1001
        ));
        // Another entity's request with the same nonce is its own (it cannot spend client.a's).
        assert!(cache.first_sighting("client.b", nonce, 1000, 31_000, 1001));
    }

    #[test]
    fn refusal_logs_are_rate_limited_and_count_what_they_drop() {
        let limit = LogLimit::default();
        let admitted: Vec<Option<u64>> = (0..100).map(|_| limit.admit()).collect();
        let logged = admitted.iter().filter(|a| a.is_some()).count() as u64;
        // Within one second (or two, if the clock ticked over): at most twice the rate.
        assert!(logged <= 2 * REFUSAL_LOGS_PER_SECOND, "{logged} lines logged");
        assert!(logged >= REFUSAL_LOGS_PER_SECOND.min(100));
    }

    #[test]
    fn long_paths_are_cut_short_in_logs() {
        let path = format!("/v1/dev/1/objects/1/{}", "é".repeat(8000));
        let short = shortened(&path);
        assert!(short.len() < LOGGED_PATH_BYTES_MAX + 40, "{}", short.len());
        assert!(short.ends_with(&format!("({} bytes)", path.len())));
        assert_eq!(shortened("/v1/status"), "/v1/status");
    }
}
