//! The JSON bodies of the HTTP API: a listing and its query, a server's status.

use serde::{Deserialize, Serialize};

use crate::wire::percent_encode;
use crate::{DeviceMetrics, MigrationStatus, ObjectInfo};

/// The query of a listing (`GET /v1/dev/{device}/objects/{pool}?…`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ListQuery {
    /// Only keys starting with this.
    pub prefix: Option<String>,
    /// Only objects placed in the PG of this seed.
    pub pg: Option<u32>,
    /// Only keys after this one (the last key of the previous page).
    pub after: Option<String>,
    /// At most this many objects.
    pub limit: Option<usize>,
    /// List tombstones too (in [`Listing::deleted`]; they count towards the limit): what a
    /// device catching up on missed writes asks its peers.
    pub tombstones: Option<bool>,
}

impl ListQuery {
    /// The query string (without `?`): the fields set, in the order prefix, pg, limit, after.
    pub fn to_query(&self) -> String {
        let mut fields = Vec::new();
        if let Some(prefix) = &self.prefix {
            fields.push(format!("prefix={}", percent_encode(prefix)));
        }
        if let Some(pg) = self.pg {
            fields.push(format!("pg={pg}"));
        }
        if let Some(limit) = self.limit {
            fields.push(format!("limit={limit}"));
        }
        if let Some(after) = &self.after {
            fields.push(format!("after={}", percent_encode(after)));
        }
        if let Some(tombstones) = self.tombstones {
            fields.push(format!("tombstones={tombstones}"));
        }
        fields.join("&")
    }
}

/// The body of a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// Objects, in key order.
    pub objects: Vec<ObjectInfo>,
    /// Whether more follow (ask again with `after` = [`last_key`](Listing::last_key)).
    pub truncated: bool,
    /// Tombstones (deleted keys), in key order, when the query asked for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deleted: Vec<Deleted>,
}

impl Listing {
    /// The last key of this page (objects and tombstones alike): the `after` of the next.
    pub fn last_key(&self) -> Option<&str> {
        let object = self.objects.last().map(|o| o.key.as_str());
        let deleted = self.deleted.last().map(|d| d.key.as_str());
        object.max(deleted)
    }
}

/// A tombstone in a listing: the key was deleted at `version`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    /// The key.
    pub key: String,
    /// The version of the delete.
    pub version: crate::ObjectVersion,
    /// The placement group (seed) the object was placed in, if the pool has PGs.
    pub pg_seed: Option<u32>,
}

/// One device in `/v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceStatus {
    /// Metrics.
    pub metrics: DeviceMetrics,
    /// Objects stored.
    pub objects: u64,
    /// Choice records held.
    pub records: u64,
    /// Corrupt files found since start.
    pub corrupt_found: u64,
    /// Catching up on writes it missed (serving no reads meanwhile).
    #[serde(default)]
    pub recovering: bool,
    /// Versions fetched from peers while catching up, since the server started.
    #[serde(default)]
    pub caught_up: u64,
    /// The last scrub pass of the device, if one ran since the server started.
    #[serde(default)]
    pub scrub: Option<ScrubReport>,
    /// The scrub pass of the device under way, if one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrubbing: Option<ScrubProgress>,
    /// Damaged or stale replicas scrubbing repaired, since the server started.
    #[serde(default)]
    pub scrub_repaired: u64,
    /// Damaged replicas scrubbing could not repair (no good replica), since the start.
    #[serde(default)]
    pub scrub_unrepairable: u64,
    /// What each pool holds on the device, by pool id (ascending; pools it holds nothing of
    /// are left out): raw space, every replica, chunk and kept version a file. Empty from a
    /// server too old to say.
    #[serde(default)]
    pub pools: Vec<PoolSpace>,
}

/// What one pool holds on one device ([`DeviceStatus::pools`]): the raw space its files take
/// there. Logical space (what clients stored) is an estimate made from it and the map
/// (`optio status`: raw divided by the pool's copy factor).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpace {
    /// The pool's id.
    pub pool: u32,
    /// Objects (replicas, erasure-coded chunks and kept versions alike; tombstones not
    /// counted).
    pub objects: u64,
    /// Bytes their files take (headers included).
    pub bytes: u64,
}

/// What one scrub pass of one device found and did (`POST /v1/scrub`, `optio scrub`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScrubReport {
    /// The device.
    pub device: u32,
    /// A deep pass (every replica re-read and its checksums verified), or a light one
    /// (versions compared with the other replicas only).
    pub deep: bool,
    /// Objects and tombstones looked at.
    pub objects: u64,
    /// Bytes re-read (deep passes).
    pub bytes_read: u64,
    /// Replicas found damaged: a checksum or header that does not verify, a truncated or
    /// missing file, a file of another key (quarantined, or forgotten when missing).
    pub damaged: u64,
    /// Replicas older than another replica of their set.
    pub stale: u64,
    /// Damaged or stale replicas brought back to the newest version from a good replica.
    pub repaired: u64,
    /// Damaged replicas no other replica could repair (left quarantined).
    pub unrepairable: u64,
    /// Objects some of whose other replicas did not answer (compared with the others only).
    pub unreachable: u64,
    /// Tombstones removed: older than the grace, held by every replica of their set, every
    /// device up and no data moving.
    #[serde(default)]
    pub tombstones_collected: u64,
    /// How long the pass took, in seconds.
    pub seconds: f64,
    /// The first problems found, for people (at most 20).
    pub problems: Vec<String>,
}

/// A scrub pass of one device under way (`/v1/status`): how far it is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ScrubProgress {
    /// A deep pass (replicas re-read), or a light one.
    pub deep: bool,
    /// Objects and tombstones looked at so far.
    pub objects: u64,
    /// Objects and tombstones the pass looks at in all (those held when it started).
    pub objects_total: u64,
    /// Bytes re-read so far (deep passes).
    pub bytes_read: u64,
    /// Seconds since the pass of this device started.
    pub seconds: f64,
}

/// The body of `/v1/status`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ServerStatus {
    /// The epoch held.
    pub epoch: u64,
    /// Devices, by id.
    pub devices: Vec<DeviceStatus>,
    /// Rebalancing progress.
    #[serde(default)]
    pub migration: MigrationStatus,
    /// The server holds no fencing lease and serves nothing (see `optio-server`'s `fence`).
    #[serde(default)]
    pub fenced: bool,
    /// Where a client on the same machine can open block objects' files for reading (local
    /// reads); none: the server has no local socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalSocket>,
    /// The CPU time the server process has used since it started (user and system), in
    /// seconds (none: unknown, or a server too old to say): with [`ServerStatus::syncs`], what
    /// an operation costs (`optio bench`'s cost per operation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// The syncs (fsync, fdatasync, syncfs) the server process has made since it started.
    #[serde(default)]
    pub syncs: u64,
}

/// The answer of `/health` (liveness, open to all): what `optio up`, `optio auth` and the
/// monitor wait on. The fields keep this order on the wire (`epoch` last: old readers that
/// split the text expect it so).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerHealth {
    /// `ok`: the server answers.
    #[serde(default)]
    pub status: String,
    /// Its devices that serve no reads (catching up, or marked down).
    #[serde(default)]
    pub recovering: u32,
    /// The server holds no fencing lease and serves nothing.
    #[serde(default)]
    pub fenced: bool,
    /// The first hex digits of the hash of the keyring file it holds (empty with
    /// authentication off; none from a server too old to say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyring: Option<String>,
    /// The map epoch it holds.
    pub epoch: u64,
}

/// A server's local socket: a Unix socket where a client on the same machine asks for open
/// descriptors of block objects' files ([`crate::wire::OPEN`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalSocket {
    /// The socket's path.
    pub path: String,
    /// The machine's boot id (`/proc/sys/kernel/random/boot_id`): a client whose own differs
    /// is on another machine (or another boot of it) and does not try the path.
    pub boot_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_list_the_fields_set() {
        assert_eq!(ListQuery::default().to_query(), "");
        let query = ListQuery {
            prefix: Some("a b".into()),
            after: Some("k/1".into()),
            ..ListQuery::default()
        };
        assert_eq!(query.to_query(), "prefix=a%20b&after=k%2F1");
        let query = ListQuery { limit: Some(10), after: Some("x".into()), ..ListQuery::default() };
        assert_eq!(query.to_query(), "limit=10&after=x");
        let query = ListQuery { tombstones: Some(true), ..ListQuery::default() };
        assert_eq!(query.to_query(), "tombstones=true");
    }

    #[test]
    fn the_last_key_counts_tombstones() {
        let deleted = |key: &str| Deleted {
            key: key.into(),
            version: crate::ObjectVersion(1),
            pg_seed: None,
        };
        let listing = Listing { objects: Vec::new(), truncated: true, deleted: vec![deleted("b")] };
        assert_eq!(listing.last_key(), Some("b"));
        let empty = Listing { objects: Vec::new(), truncated: false, deleted: Vec::new() };
        assert_eq!(empty.last_key(), None);
        // An old server's listing (no `deleted` field) still decodes.
        let old: Listing = serde_json::from_str(r#"{"objects":[],"truncated":false}"#).unwrap();
        assert!(old.deleted.is_empty());
    }
}
