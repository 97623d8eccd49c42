//! The server's side of authentication (see [`optio_proto::auth`] for the keyring and the
//! signature): the keyring it verifies against, reloaded when its file changes (so `optio auth
//! add | rm | rotate` take effect without a restart), the replay cache, and the counts of
//! refused requests by reason.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use optio_proto::auth::{AuthError, Cap, Keyring, Signed, WINDOW_MS};

/// How often the keyring file is checked for changes.
const RELOAD_INTERVAL: Duration = Duration::from_secs(1);
/// Shards of the replay cache (by nonce).
const REPLAY_SHARDS: usize = 16;
/// Most nonces one shard remembers; past it, the oldest are forgotten first — and requests
/// older than the newest forgotten one are refused, so a replay never gets through.
const REPLAY_SHARD_MAX: usize = 1 << 18;
/// The reasons counted, in [`AuthError::label`] order.
pub const REFUSAL_LABELS: [&str; 8] = [
    "unsigned",
    "malformed",
    "unknown_entity",
    "bad_signature",
    "expired",
    "replayed",
    "forbidden",
    "unknown_certificate",
];

/// Whether and how requests are authenticated.
pub struct Auth {
    /// `None`: authentication is off (`optio server --no-auth`).
    path: Option<PathBuf>,
    keyring: RwLock<Arc<Keyring>>,
    stamp: Mutex<Option<(SystemTime, u64)>>,
    replay: ReplayCache,
    window_ms: u64,
    metrics_public: bool,
    refused: [AtomicU64; REFUSAL_LABELS.len()],
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
    pub fn from_file(path: PathBuf, metrics_public: bool) -> Result<Auth, String> {
        let keyring = Keyring::load(&path).map_err(|e| e.to_string())?;
        if keyring.is_empty() {
            return Err(format!(
                "the keyring {} has no entity: create it with `optio auth init`",
                path.display()
            ));
        }
        let auth = Auth::new(Some(path.clone()), keyring, metrics_public);
        *auth.stamp.lock().expect("stamp lock") = stamp(&path);
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
        }
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
    /// that needs `need`: its signature, its timestamp, its nonce (once only) and the
    /// entity's capability. An unsigned request that came over mutual TLS with the client
    /// certificate `peer` (the CA checked it in the handshake) is the entity it names instead,
    /// if the keyring records that certificate for the entity.
    /// Returns the entity, or `None` with authentication off.
    pub fn check(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        need: Cap,
        peer: Option<&crate::conn::PeerCertificate>,
    ) -> Result<Option<String>, AuthError> {
        if !self.enabled() {
            return Ok(None);
        }
        let signed = headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case(optio_proto::auth::AUTH_HEADER));
        let result = match peer {
            Some(peer) if !signed => self.allow_peer(peer, need),
            _ => self.verify(method, path, headers, need),
        };
        if let Err(error) = &result {
            let label = error.label();
            if let Some(i) = REFUSAL_LABELS.iter().position(|l| *l == label) {
                self.refused[i].fetch_add(1, Ordering::Relaxed);
            }
            tracing::warn!(reason = label, %error, method, path, "refused a request");
        }
        result.map(Some)
    }

    fn verify(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        need: Cap,
    ) -> Result<String, AuthError> {
        let value = headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(optio_proto::auth::AUTH_HEADER))
            .map(|(_, value)| *value)
            .ok_or(AuthError::Missing)?;
        let signed = Signed::parse(value)?;
        let keyring = self.keyring.read().expect("keyring lock").clone();
        let now_ms = now_ms();
        let entity = signed.verify(&keyring, method, path, headers, now_ms, self.window_ms)?;
        if !entity.cap.allows(need) {
            return Err(AuthError::Forbidden {
                id: entity.name.clone(),
                has: entity.cap,
                needs: need,
            });
        }
        // Only a genuine request reaches the replay cache (a forger cannot fill it).
        let expires = signed.ts_ms.saturating_add(self.window_ms);
        if !self.replay.first_sighting(&signed.nonce, signed.ts_ms, expires, now_ms) {
            return Err(AuthError::Replayed(entity.name.clone()));
        }
        Ok(entity.name.clone())
    }

    /// The entity a client certificate names, if the keyring has it, records the certificate
    /// for it (rotating or removing the entity revokes its certificates) and it may do `need`.
    fn allow_peer(
        &self,
        peer: &crate::conn::PeerCertificate,
        need: Cap,
    ) -> Result<String, AuthError> {
        let keyring = self.keyring.read().expect("keyring lock").clone();
        let now_secs = now_ms() / 1000;
        let entity = keyring.check_certificate(&peer.entity, &peer.fingerprint, now_secs)?;
        if !entity.cap.allows(need) {
            return Err(AuthError::Forbidden {
                id: entity.name.clone(),
                has: entity.cap,
                needs: need,
            });
        }
        Ok(entity.name.clone())
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
        if let Some(i) = REFUSAL_LABELS.iter().position(|l| *l == error.label()) {
            self.refused[i].fetch_add(1, Ordering::Relaxed);
        }
        tracing::warn!(reason = error.label(), %error, "refused a request");
    }

    /// Reloads the keyring whenever its file changes, until the process ends. A file that
    /// cannot be read or parsed is logged and the keyring held is kept. When this server's own
    /// key was rotated, `signer` (the transport its requests to other servers go through) signs
    /// with the new key from then on: its peers take both keys during the rotation's grace.
    pub async fn follow(self: Arc<Self>, signer: Option<optio_net::HttpTransport>) {
        let Some(path) = self.path.clone() else { return };
        loop {
            tokio::time::sleep(RELOAD_INTERVAL).await;
            let now = stamp(&path);
            if now == *self.stamp.lock().expect("stamp lock") {
                continue;
            }
            let loaded = {
                let path = path.clone();
                tokio::task::spawn_blocking(move || Keyring::load(&path)).await
            };
            match loaded {
                Ok(Ok(keyring)) => {
                    tracing::info!(path = %path.display(), entities = keyring.len(), "keyring reloaded");
                    if let Some(transport) = &signer
                        && let Some(own) = transport.credentials()
                        && let Some(entity) = keyring.get(&own.id)
                        && entity.key != own.key
                    {
                        tracing::info!(id = %own.id, "this server's key was rotated: signing with the new one");
                        transport.rekey(entity.key.clone());
                    }
                    *self.keyring.write().expect("keyring lock") = Arc::new(keyring);
                    *self.stamp.lock().expect("stamp lock") = now;
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "cannot reload the keyring; keeping the one held");
                    *self.stamp.lock().expect("stamp lock") = now;
                }
                Err(_) => {}
            }
        }
    }
}

fn stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
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

    /// Records `nonce` (of a request stamped `ts_ms`, kept until `expires`); false when it was
    /// seen before, or is too old to tell.
    fn first_sighting(&self, nonce: &str, ts_ms: u64, expires: u64, now_ms: u64) -> bool {
        let Ok(value) = u128::from_str_radix(nonce, 16) else { return false };
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
    fn a_nonce_is_accepted_once() {
        let cache = ReplayCache::new();
        let nonce = "0123456789abcdef0123456789abcdef";
        assert!(cache.first_sighting(nonce, 1000, 31_000, 1000));
        assert!(!cache.first_sighting(nonce, 1000, 31_000, 1001));
        assert!(cache.first_sighting("f123456789abcdef0123456789abcdef", 1000, 31_000, 1001));
    }
}
