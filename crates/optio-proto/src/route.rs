//! The routes of a device's objects and choice records: one builder for the senders
//! (clients, migrating servers, the CLI) and one parser for the server, so both ends agree.
//!
//! A device route is `/v1/dev/{device}/{area}/{pool}[/{key}]`, the key percent-encoded
//! ([`crate::wire::percent_encode`]); without a key it names the pool's listing.

use optio_placement::PoolId;

use crate::ErrorKind;
use crate::key::validate_key_bytes;
use crate::wire::{percent_decode, percent_encode};

/// The prefix of every device route.
pub const DEVICE_PREFIX: &str = "/v1/dev/";
/// The server's JSON status.
pub const STATUS_PATH: &str = "/v1/status";
/// The server's Prometheus metrics.
pub const METRICS_PATH: &str = "/metrics";
/// The server's liveness check.
pub const HEALTH_PATH: &str = "/health";
/// A scrub pass on demand (`POST`, query `deep=true`, `pool=ID`): answers a JSON list of
/// [`crate::ScrubReport`], one per device, when the pass is over.
pub const SCRUB_PATH: &str = "/v1/scrub";

/// What a device route addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Area {
    /// Stored objects (and their tombstones).
    Objects,
    /// Choice records.
    Choices,
}

impl Area {
    /// The path segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Area::Objects => "objects",
            Area::Choices => "choices",
        }
    }

    /// The area named by a path segment.
    pub fn from_segment(segment: &str) -> Option<Area> {
        match segment {
            "objects" => Some(Area::Objects),
            "choices" => Some(Area::Choices),
            _ => None,
        }
    }
}

/// A device route: the device, the area, the pool and the key (none: the pool's listing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// Device id.
    pub device: u32,
    /// Objects or choice records.
    pub area: Area,
    /// Pool.
    pub pool: PoolId,
    /// Key (`None`: a listing).
    pub key: Option<String>,
}

/// Why a path is not a device route: the kind the server answers with, and its reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct RouteError {
    /// Kind (`NotFound` for an unknown route, `BadRequest` for a malformed one).
    pub kind: ErrorKind,
    /// Reason, for people.
    pub reason: String,
}

fn route_error(kind: ErrorKind, reason: impl Into<String>) -> RouteError {
    RouteError { kind, reason: reason.into() }
}

/// The path (no host, no query) of `area` in `pool` on `device`, with `key` if any.
pub fn device_path(device: u32, area: Area, pool: PoolId, key: Option<&str>) -> String {
    let mut path = format!("{DEVICE_PREFIX}{device}/{}/{}", area.as_str(), pool.0);
    if let Some(key) = key {
        path.push('/');
        path.push_str(&percent_encode(key));
    }
    path
}

impl Route {
    /// The route's path.
    pub fn path(&self) -> String {
        device_path(self.device, self.area, self.pool, self.key.as_deref())
    }

    /// Parses a request's path; a key is decoded and validated.
    pub fn parse(path: &str) -> Result<Route, RouteError> {
        let rest = path.strip_prefix(DEVICE_PREFIX).ok_or_else(|| {
            route_error(
                ErrorKind::NotFound,
                format!("no route {path}; see the API in docs/store.md"),
            )
        })?;
        let mut parts = rest.splitn(4, '/');
        let device = parts.next().unwrap_or("");
        let device: u32 = device.parse().map_err(|_| {
            route_error(ErrorKind::BadRequest, format!("device '{device}' is not a number"))
        })?;
        let segment = parts.next();
        let area = segment.and_then(Area::from_segment).ok_or_else(|| {
            route_error(
                ErrorKind::NotFound,
                format!(
                    "no route '{}' under device {device}; use objects or choices",
                    segment.unwrap_or("")
                ),
            )
        })?;
        let pool = parts.next().unwrap_or("");
        let pool: u32 = pool.parse().map_err(|_| {
            route_error(ErrorKind::BadRequest, format!("pool '{pool}' is not a pool id"))
        })?;
        let key = match parts.next() {
            None => None,
            Some(encoded) => {
                let bytes = percent_decode(encoded).ok_or_else(|| {
                    route_error(ErrorKind::BadRequest, "the key has a malformed %-escape")
                })?;
                let key = validate_key_bytes(&bytes)
                    .map_err(|e| route_error(ErrorKind::BadRequest, e.to_string()))?;
                Some(key.to_string())
            }
        };
        Ok(Route { device, area, pool: PoolId(pool), key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip() {
        for key in [None, Some("a/b c%d"), Some("é€😀")] {
            for area in [Area::Objects, Area::Choices] {
                let route =
                    Route { device: 7, area, pool: PoolId(3), key: key.map(str::to_string) };
                assert_eq!(Route::parse(&route.path()), Ok(route));
            }
        }
        assert_eq!(
            device_path(2, Area::Objects, PoolId(1), Some("a b")),
            "/v1/dev/2/objects/1/a%20b"
        );
        assert_eq!(device_path(2, Area::Choices, PoolId(1), None), "/v1/dev/2/choices/1");
    }

    #[test]
    fn malformed_paths_say_why() {
        let kind = |path: &str| Route::parse(path).map_err(|e| e.kind);
        assert_eq!(kind("/v2/x"), Err(ErrorKind::NotFound));
        assert_eq!(kind("/v1/dev/x/objects/1/k"), Err(ErrorKind::BadRequest));
        assert_eq!(kind("/v1/dev/1/things/1/k"), Err(ErrorKind::NotFound));
        assert_eq!(kind("/v1/dev/1/objects/p/k"), Err(ErrorKind::BadRequest));
        assert_eq!(kind("/v1/dev/1/objects/1/%zz"), Err(ErrorKind::BadRequest));
        assert_eq!(kind("/v1/dev/1/objects/1/"), Err(ErrorKind::BadRequest));
        assert_eq!(
            Route::parse("/v1/dev/1/things/1").unwrap_err().reason,
            "no route 'things' under device 1; use objects or choices"
        );
    }
}
