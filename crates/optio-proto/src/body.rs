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
        fields.join("&")
    }
}

/// The body of a listing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// Objects, in key order.
    pub objects: Vec<ObjectInfo>,
    /// Whether more follow (ask again with `after` = the last key).
    pub truncated: bool,
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
    }
}
