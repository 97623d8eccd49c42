//! Whether a device can leave the map without losing data: what it holds, asked from its
//! server, and for each object whether another device of its placement holds that version or
//! a newer one. `optio map remove-device` refuses while anything has its last copy there.

use futures_util::StreamExt;
use optio_net::{Call, Endpoint, Failure, Op, Transport};
use optio_placement::{ClusterMap, DeviceId, MapError, Placement, PoolId, ReplicaSet};
use optio_proto::{ListQuery, ObjectInfo};

/// Objects listed per request.
const LIST_LIMIT: usize = 10_000;
/// Probes of other replicas in flight.
const PROBES_IN_FLIGHT: usize = 32;

/// Why a device cannot be removed (or why that could not be told).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemovalRefused {
    /// The map does not compile.
    #[error("the map cannot be placed")]
    Map(#[source] MapError),
    /// The device's server did not say what it holds.
    #[error(
        "cannot ask the server of device {device} at {addr} what it holds ({failure}): bring it up, or pass --force (what only it holds is then lost)"
    )]
    Unreachable {
        /// The device.
        device: u32,
        /// Its server.
        addr: String,
        /// What went wrong.
        failure: Failure,
    },
    /// The server's listing could not be read.
    #[error("{0}")]
    Malformed(String),
    /// Some objects have no copy elsewhere.
    #[error(
        "device {device} holds the only copy of {count} object(s) (e.g. '{key}' in pool '{pool}'): mark it out first (`optio map set-state {device} --out`), wait until `optio status` shows every server done, then remove it; or pass --force to lose them"
    )]
    LastCopies {
        /// The device.
        device: u32,
        /// How many objects only it holds.
        count: usize,
        /// One of them.
        key: String,
        /// Its pool's name.
        pool: String,
    },
}

/// Refuses when `device` holds an object of which no other device of its placement holds this
/// version or a newer one: removing the device would lose it. A device no server serves holds
/// nothing a client could have written.
pub async fn check_not_last_copy(
    transport: &dyn Transport,
    map: &ClusterMap,
    device: DeviceId,
) -> Result<(), RemovalRefused> {
    let Some(addr) = map.device(device).and_then(|d| d.addr.clone()) else {
        return Ok(());
    };
    let placement = Placement::new(map).map_err(RemovalRefused::Map)?;
    let held = held_by(transport, map, device, &addr).await?;
    let placement = &placement;
    let last = futures_util::stream::iter(held.iter())
        .map(|(pool, info)| async move {
            let copied = copied_elsewhere(transport, map, placement, device, *pool, info).await;
            (!copied).then(|| (*pool, info.key.clone()))
        })
        .buffer_unordered(PROBES_IN_FLIGHT)
        .filter_map(|last| async move { last })
        .collect::<Vec<_>>()
        .await;
    match last.first() {
        None => Ok(()),
        Some((pool, key)) => Err(RemovalRefused::LastCopies {
            device: device.0,
            count: last.len(),
            key: key.clone(),
            pool: map.pool(*pool).map_or_else(|| pool.0.to_string(), |p| p.name.clone()),
        }),
    }
}

/// Every object and tombstone the device's server lists for it, in every pool.
async fn held_by(
    transport: &dyn Transport,
    map: &ClusterMap,
    device: DeviceId,
    addr: &str,
) -> Result<Vec<(PoolId, ObjectInfo)>, RemovalRefused> {
    let endpoint = Endpoint { device: device.0, addr: addr.to_string() };
    let mut held = Vec::new();
    for pool in map.pools() {
        let mut after: Option<String> = None;
        loop {
            let query =
                ListQuery { limit: Some(LIST_LIMIT), after: after.clone(), ..ListQuery::default() };
            let listing = match transport.list(&endpoint, pool.id, map.epoch().0, query).await {
                Ok((_, listing)) => listing,
                Err(Failure::Malformed(reason)) => return Err(RemovalRefused::Malformed(reason)),
                Err(failure) => {
                    return Err(RemovalRefused::Unreachable {
                        device: device.0,
                        addr: addr.to_string(),
                        failure,
                    });
                }
            };
            after = listing.objects.last().map(|o| o.key.clone());
            held.extend(listing.objects.into_iter().map(|o| (pool.id, o)));
            if !listing.truncated {
                break;
            }
        }
    }
    Ok(held)
}

/// Whether another device of the object's placement (at full power) holds this version of it
/// or a newer one. An object without a placement seed, or in a pool the map lacks, counts as
/// copied: nothing can be told about it.
async fn copied_elsewhere(
    transport: &dyn Transport,
    map: &ClusterMap,
    placement: &Placement,
    device: DeviceId,
    pool: PoolId,
    info: &ObjectInfo,
) -> bool {
    let (Some(pool_placement), Some(seed)) = (placement.pool(pool), info.pg_seed) else {
        return true;
    };
    let mut scratch = placement.scratch();
    let mut set = ReplicaSet::new();
    pool_placement.place_full_power(pool_placement.key_of_seed(seed), &mut scratch, &mut set);
    for other in set.devices().filter(|d| *d != device) {
        let Some(addr) = map.device(other).and_then(|d| d.addr.clone()) else { continue };
        let endpoint = Endpoint { device: other.0, addr };
        let probe = Op::Probe { key: &info.key, want_choice: false };
        if let Ok(answer) = transport.send(Call::new(&endpoint, pool, map.epoch().0, probe)).await
            && answer.info.is_some_and(|i| i.version >= info.version)
        {
            return true;
        }
    }
    false
}
