//! Following the map through the gateway's watch stream, re-established after failures.

use std::collections::VecDeque;
use std::time::Duration;

use optio_placement::{ClusterMap, Epoch};

use super::gateway::{KeyValue, WatchMessage, reason, snippet};
use super::{
    EtcdStore, RECONNECT_BACKOFF_MAX, RECONNECT_BACKOFF_MIN, RESPONSE_BYTES_MAX, WATCH_IDLE_CHECK,
};
use crate::ClusterError;

/// An open watch: the streaming response and the bytes of a message not yet complete.
pub(super) struct WatchStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl WatchStream {
    /// The stream of a watch the gateway accepted.
    pub(super) fn new(response: reqwest::Response) -> WatchStream {
        WatchStream { response, buffer: Vec::new() }
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchStream").field("buffered_bytes", &self.buffer.len()).finish()
    }
}

impl WatchStream {
    /// The next message; `None` when the stream ended. Cancel-safe: a partial message stays
    /// in the buffer.
    pub(super) async fn next_message(&mut self) -> Result<Option<WatchMessage>, String> {
        loop {
            if let Some(newline) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=newline).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line)
                    .map(Some)
                    .map_err(|e| format!("an unexpected watch message ({e}): {}", snippet(&line)));
            }
            if self.buffer.len() > RESPONSE_BYTES_MAX {
                return Err(format!("a watch message longer than {RESPONSE_BYTES_MAX} bytes"));
            }
            match self.response.chunk().await.map_err(|e| reason(&e))? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None if self.buffer.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                // A last message without its newline.
                None => self.buffer.push(b'\n'),
            }
        }
    }
}

/// Delivers each newer map stored in etcd; see the module docs for reconnections.
#[derive(Debug)]
pub struct EtcdWatcher {
    store: EtcdStore,
    /// The epoch of the last map delivered (or the one the watcher started after).
    last: Option<Epoch>,
    /// The highest `mod_revision` of the map key looked at.
    seen_revision: u64,
    stream: Option<WatchStream>,
    pending: VecDeque<Result<ClusterMap, ClusterError>>,
    backoff: Duration,
    connected_once: bool,
    reconnects: u64,
}

/// What a watch message asks the watcher to do next.
pub(super) enum Next {
    Continue,
    Reconnect,
}

impl EtcdWatcher {
    /// A watcher of maps newer than `after`; it connects on its first [`EtcdWatcher::next`].
    pub(super) fn new(store: EtcdStore, after: Option<Epoch>) -> EtcdWatcher {
        EtcdWatcher {
            store,
            last: after,
            seen_revision: 0,
            stream: None,
            pending: VecDeque::new(),
            backoff: RECONNECT_BACKOFF_MIN,
            connected_once: false,
            reconnects: 0,
        }
    }

    /// The next map whose epoch is newer than the last one delivered. Waits as long as it
    /// takes, retrying when etcd cannot be reached; returns an error only for a stored map it
    /// cannot parse (and can be called again after one). Cancel-safe.
    pub async fn next(&mut self) -> Result<ClusterMap, ClusterError> {
        loop {
            if let Some(result) = self.pending.pop_front() {
                return result;
            }
            let Some(stream) = self.stream.as_mut() else {
                if let Err(error) = self.connect().await {
                    tracing::warn!(
                        source = %self.store.describe(),
                        %error,
                        retry_in_ms = self.backoff.as_millis() as u64,
                        "cannot watch the map; retrying"
                    );
                    self.pause().await;
                }
                continue;
            };
            let received = tokio::time::timeout(WATCH_IDLE_CHECK, stream.next_message()).await;
            let next = match received {
                Err(_idle) => self.check_idle().await,
                Ok(Ok(Some(message))) => self.handle(message),
                Ok(Ok(None)) => {
                    tracing::warn!(
                        source = %self.store.describe(),
                        "etcd ended the watch stream; watching again"
                    );
                    Next::Reconnect
                }
                Ok(Err(error)) => {
                    tracing::warn!(
                        source = %self.store.describe(),
                        %error,
                        "the watch stream broke; watching again"
                    );
                    Next::Reconnect
                }
            };
            if let Next::Reconnect = next {
                self.stream = None;
                self.pause().await;
            }
        }
    }

    /// The epoch of the last map delivered, or the one the watcher started after.
    pub fn last_epoch(&self) -> Option<Epoch> {
        self.last
    }

    /// How many times the watch was re-established after the first time.
    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Reads the map, then watches from the read's revision + 1. Changes no state until both
    /// succeeded (so a cancelled call loses nothing).
    async fn connect(&mut self) -> Result<(), ClusterError> {
        let key = self.store.map_key();
        let (revision, kv) = self.store.get(&key).await?;
        let stream = self.store.open_watch(&key, revision + 1).await?;
        if self.connected_once {
            self.reconnects += 1;
            tracing::info!(source = %self.store.describe(), revision, "watching the map again");
        }
        self.connected_once = true;
        self.stream = Some(stream);
        self.backoff = RECONNECT_BACKOFF_MIN;
        if let Some(kv) = kv {
            self.consider(&kv);
        }
        Ok(())
    }

    async fn pause(&mut self) {
        tokio::time::sleep(self.backoff).await;
        self.backoff = (self.backoff * 2).min(RECONNECT_BACKOFF_MAX);
    }

    /// A silent stream: read the key; if it changed after what the stream delivered (or etcd
    /// does not answer), the stream is dead.
    async fn check_idle(&mut self) -> Next {
        match self.store.get(&self.store.map_key()).await {
            Ok((_, Some(kv))) if kv.mod_revision > self.seen_revision => {
                tracing::warn!(
                    source = %self.store.describe(),
                    "the watch stream missed a change; watching again"
                );
                Next::Reconnect
            }
            Ok(_) => Next::Continue,
            Err(error) => {
                tracing::warn!(
                    source = %self.store.describe(),
                    %error,
                    "etcd does not answer; watching again"
                );
                Next::Reconnect
            }
        }
    }

    fn handle(&mut self, message: WatchMessage) -> Next {
        if let Some(error) = message.error {
            tracing::warn!(source = %self.store.describe(), %error, "etcd sent a watch error");
            return Next::Reconnect;
        }
        let Some(result) = message.result else { return Next::Continue };
        for event in &result.events {
            let Some(kv) = &event.kv else { continue };
            if event.kind == "DELETE" {
                tracing::warn!(
                    source = %self.store.describe(),
                    "the map was deleted from etcd; keeping the last one"
                );
                self.seen_revision = self.seen_revision.max(kv.mod_revision);
            } else {
                self.consider(kv);
            }
        }
        if result.canceled {
            tracing::warn!(
                source = %self.store.describe(),
                reason = %result.cancel_reason,
                compact_revision = result.compact_revision,
                "etcd cancelled the watch; watching again"
            );
            return Next::Reconnect;
        }
        Next::Continue
    }

    /// Queues the map in `kv` if it is newer than what was delivered.
    fn consider(&mut self, kv: &KeyValue) {
        if kv.mod_revision <= self.seen_revision {
            return;
        }
        self.seen_revision = kv.mod_revision;
        match self.store.parse_kv(kv) {
            Err(error) => self.pending.push_back(Err(error)),
            Ok(map) if self.last.is_none_or(|last| map.epoch() > last) => {
                self.last = Some(map.epoch());
                self.pending.push_back(Ok(map));
            }
            Ok(map) => tracing::debug!(
                source = %self.store.describe(),
                epoch = map.epoch().0,
                last = self.last.map(|e| e.0),
                "skipping a map that is not newer"
            ),
        }
    }
}
