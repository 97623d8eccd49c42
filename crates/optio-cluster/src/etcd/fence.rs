//! Fencing leases: a server serves only while it holds a lease in etcd, and the monitor takes
//! that lease away — and waits for it to run out — before it marks the server's devices down.
//!
//! | key | value |
//! |---|---|
//! | `{prefix}/fence/{device}` | the holding server's lease (`{"lease": ID, "ttl_ms": N}`), attached to that lease |
//! | `{prefix}/fenced/{device}` | put by the monitor when it fences the device; while present, no server may take a lease for it |
//!
//! The server side is `optio-server`'s `fence` module; the monitor side is
//! [`crate::monitor::Monitor`]. The argument: a server stops serving `3/4 × TTL` after it
//! sent its last successful renewal, measured on its own monotonic clock; the monitor marks a
//! device down only once the lease is gone (revoked, or never renewed for a TTL) and a further
//! TTL has passed on its clock since it revoked it. So by the time any client can learn that
//! a device is down and write around it, the server has stopped serving — it cannot answer a
//! reader that still holds the old map with a version that is no longer the newest. The
//! `fenced` marker keeps the server from taking a fresh lease in between.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::EtcdStore;
use super::gateway::{LeaseGrant, LeaseKeepAlive, RangeResponse, TxnResponse, encode, prefix_end};
use crate::ClusterError;

/// What a fence key holds.
#[derive(Debug, Serialize, Deserialize)]
struct FenceValue {
    lease: u64,
    ttl_ms: u64,
}

/// What a `fenced` marker holds: who fenced, and the TTL of the lease it revoked (0: none).
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    holder: String,
    ttl_ms: u64,
}

/// Why a server could not take its lease.
#[derive(Debug)]
pub enum FenceRefusal {
    /// The monitor fenced these devices: wait until it lifts the fence (it does once the
    /// server answers its health checks again).
    Fenced(Vec<u32>),
}

impl EtcdStore {
    /// The key holding `device`'s lease.
    pub fn fence_key(&self, device: u32) -> String {
        format!("{}/fence/{device}", self.prefix)
    }

    /// The key the monitor puts when it fences `device`.
    pub fn fenced_key(&self, device: u32) -> String {
        format!("{}{device}", self.fenced_prefix())
    }

    fn fenced_prefix(&self) -> String {
        format!("{}/fenced/", self.prefix)
    }

    /// Takes a lease of `ttl` for `devices` (one lease, one key per device), unless the
    /// monitor fenced one of them. Returns the lease (keep it alive with
    /// [`keep_alive`](Self::keep_alive)).
    pub async fn hold_fence(
        &self,
        devices: &[u32],
        ttl: Duration,
    ) -> Result<Result<u64, FenceRefusal>, ClusterError> {
        let seconds = ttl.as_secs().max(1);
        let grant: LeaseGrant =
            self.call("lease/grant", &json!({ "TTL": seconds.to_string() })).await?;
        if grant.id == 0 {
            return Err(self.error("granted no lease"));
        }
        let value = serde_json::to_string(&FenceValue { lease: grant.id, ttl_ms: seconds * 1000 })
            .expect("a fence value serialises");
        let compare: Vec<_> = devices
            .iter()
            .map(|&d| {
                json!({ "key": encode(&self.fenced_key(d)), "target": "CREATE",
                        "result": "EQUAL", "create_revision": "0" })
            })
            .collect();
        let success: Vec<_> = devices
            .iter()
            .map(|&d| {
                json!({ "request_put": { "key": encode(&self.fence_key(d)), "value": encode(&value),
                                          "lease": grant.id.to_string() } })
            })
            .collect();
        let prefix = self.fenced_prefix();
        let failure = [json!({ "request_range": {
            "key": encode(&prefix),
            "range_end": BASE64.encode(prefix_end(prefix.as_bytes())),
            "keys_only": true,
        } })];
        let body = json!({ "compare": compare, "success": success, "failure": failure });
        let response: TxnResponse = self.call("kv/txn", &body).await?;
        if response.succeeded {
            return Ok(Ok(grant.id));
        }
        self.revoke(grant.id).await?;
        let fenced: Vec<u32> = response
            .responses
            .into_iter()
            .filter_map(|op| op.response_range)
            .flat_map(|range| range.kvs)
            .filter_map(|kv| BASE64.decode(kv.key).ok())
            .filter_map(|key| String::from_utf8(key).ok())
            .filter_map(|key| key.strip_prefix(&prefix).and_then(|d| d.parse().ok()))
            .filter(|d| devices.contains(d))
            .collect();
        Ok(Err(FenceRefusal::Fenced(fenced)))
    }

    /// Keeps `lease` alive; `false` when it is gone (expired or revoked).
    pub async fn keep_alive(&self, lease: u64) -> Result<bool, ClusterError> {
        let answer: LeaseKeepAlive =
            self.call("lease/keepalive", &json!({ "ID": lease.to_string() })).await?;
        Ok(answer.result.is_some_and(|r| r.ttl > 0))
    }

    /// Revokes `lease` (a lease already gone is not an error).
    pub async fn revoke(&self, lease: u64) -> Result<(), ClusterError> {
        match self
            .call::<serde_json::Value>("lease/revoke", &json!({ "ID": lease.to_string() }))
            .await
        {
            Ok(_) => Ok(()),
            Err(ClusterError::Etcd { reason, .. }) if reason.contains("lease not found") => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Fences `device`: puts its `fenced` marker (no server can take a lease for it while
    /// the marker stays) and revokes the lease holding it. Returns how long to wait before
    /// marking the device down: the revoked lease's TTL; or, when no lease holds it but an
    /// earlier monitor fenced it (and may have revoked a lease a moment ago), the TTL that
    /// monitor recorded; `None` when no lease held it.
    pub async fn fence(&self, device: u32, holder: &str) -> Result<Option<Duration>, ClusterError> {
        let marker = encode(&self.fenced_key(device));
        let lease_key = encode(&self.fence_key(device));
        let new_marker = |ttl_ms: u64| {
            encode(
                &serde_json::to_string(&Marker { holder: holder.to_string(), ttl_ms })
                    .expect("serialises"),
            )
        };
        let body = json!({
            "compare": [{ "key": marker, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [
                { "request_put": { "key": marker, "value": new_marker(0) } },
                { "request_range": { "key": lease_key } },
            ],
            "failure": [
                { "request_range": { "key": marker } },
                { "request_range": { "key": lease_key } },
            ],
        });
        let response: TxnResponse = self.call("kv/txn", &body).await?;
        let mut ranges = response.responses.into_iter().map(|op| op.response_range);
        let earlier: Option<Marker> = if response.succeeded {
            ranges.next();
            None
        } else {
            match ranges.next().flatten().and_then(|r| r.kvs.into_iter().next()) {
                Some(kv) => serde_json::from_slice(&self.decode(&kv.value)?).ok(),
                None => None,
            }
        };
        let held = ranges.next().flatten().and_then(|r| r.kvs.into_iter().next());
        let Some(kv) = held else {
            return Ok(earlier.filter(|m| m.ttl_ms > 0).map(|m| Duration::from_millis(m.ttl_ms)));
        };
        let value: FenceValue = serde_json::from_slice(&self.decode(&kv.value)?).map_err(|e| {
            self.error(&format!("holds an unreadable fence for device {device}: {e}"))
        })?;
        // Record the TTL first: a monitor taking over after this one dies waits it too.
        let record = json!({ "key": marker, "value": new_marker(value.ttl_ms) });
        let _: serde_json::Value = self.call("kv/put", &record).await?;
        self.revoke(value.lease).await?;
        Ok(Some(Duration::from_millis(value.ttl_ms)))
    }

    /// Lifts the fence on `device` (its server may take a lease again).
    pub async fn unfence(&self, device: u32) -> Result<(), ClusterError> {
        let body = json!({ "key": encode(&self.fenced_key(device)) });
        let _: serde_json::Value = self.call("kv/deleterange", &body).await?;
        Ok(())
    }

    /// The devices the monitor fenced.
    pub async fn fenced(&self) -> Result<Vec<u32>, ClusterError> {
        let prefix = self.fenced_prefix();
        let body = json!({
            "key": encode(&prefix),
            "range_end": BASE64.encode(prefix_end(prefix.as_bytes())),
            "keys_only": true,
        });
        let response: RangeResponse = self.call("kv/range", &body).await?;
        Ok(response
            .kvs
            .into_iter()
            .filter_map(|kv| self.decode_text(&kv.key).ok())
            .filter_map(|key| key.strip_prefix(&prefix).and_then(|d| d.parse().ok()))
            .collect())
    }
}
