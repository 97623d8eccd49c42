//! Proves, for the `attributed` (both selections) and `elastic` engines on random clusters (any weights and
//! states): placement is deterministic (across compilations, a rebuilt map and batches);
//! replicas are distinct devices (distinct hosts when the attributed pool asks for distinct
//! zones), never down, out, zero-weight or inactive; as many as the usable devices (zones,
//! active servers) allow. Attributed: a key's replicas move, when a device is added or marked
//! out, only if a sector their search went through changed (the number of replicas may change
//! with the number of usable devices). Elastic: exactly one replica on a primary
//! whenever a primary and r − 1 secondaries are active; re-activating a server, or adding one,
//! moves exactly the copies the server takes (nothing else moves, the primary copy stays).

use optio_placement::engine::attributed::{AttributedRing, Strategy as Pick};
use optio_placement::engine::elastic::default_primaries;
use optio_placement::{
    ActiveSpec, AttributedSpec, ClusterMap, ClusterMapBuilder, DeviceId, DeviceSpec, ElasticSpec,
    EngineRef, ItemId, MembershipSpec, Placement, PoolId, PoolSpec, ReplicaSet, SectorSelection,
    VersionSpec,
};
use proptest::prelude::*;

use crate::strategies::{Shape, VNODE_BYTES, key, shape};

const KEYS: u32 = 400;

/// The shape's devices with the paper's two bandwidths and classes (every third an SSD).
fn devices(shape: &Shape) -> ClusterMapBuilder {
    let mut builder = shape.builder();
    for device in &mut builder.devices {
        let ssd = device.id.0 % 3 == 0;
        device.class = Some(if ssd { "ssd" } else { "hdd" }.into());
        device.bandwidth_mb_per_s = if ssd { 540 } else { 146 + device.id.0 % 7 };
    }
    builder
}

/// Pool 1: attributed, one replica per host. Pool 2: attributed, distinct devices, sector size
/// `s`. Pool 3: elastic (B = 4096) with versions of `actives` first ranks (then full power).
/// Pool 4: attributed with the rendezvous selection, one replica per host, sector size `s`.
fn with_engines(
    mut builder: ClusterMapBuilder,
    size: u32,
    s: u32,
    actives: &[u32],
) -> ClusterMapBuilder {
    let attributed = |distinct_zones, sector_size, selection| {
        EngineRef::Attributed(AttributedSpec {
            throttle_bytes: Some(VNODE_BYTES),
            sector_size: Some(sector_size),
            zone_type: Some("host".into()),
            distinct_zones,
            bandwidth_tolerance_percent: None,
            sector_base: None,
            selection: Some(selection),
        })
    };
    let pool = |id, name: &str, engine| PoolSpec { engine, ..PoolSpec::crush(id, name, 0, size) };
    let n = u32::try_from(builder.devices.len()).expect("few devices");
    let p = default_primaries(n);
    let mut versions: Vec<VersionSpec> = actives
        .iter()
        .map(|k| VersionSpec { version: None, active: ActiveSpec::FirstRanks(p + k % (n - p + 1)) })
        .collect();
    versions.push(VersionSpec { version: None, active: ActiveSpec::FirstRanks(n) });
    builder.membership = Some(MembershipSpec { order: Vec::new(), versions });
    builder
        .pool(pool(1, "attributed_hosts", attributed(true, 4, SectorSelection::Paper)))
        .pool(pool(2, "attributed_devices", attributed(false, s, SectorSelection::Paper)))
        .pool(pool(
            3,
            "elastic",
            EngineRef::Elastic(ElasticSpec { primaries: None, scale: Some(4096) }),
        ))
        .pool(pool(4, "rendezvous_hosts", attributed(true, s, SectorSelection::Rendezvous)))
}

fn usable(map: &ClusterMap, device: i32) -> bool {
    map.device(DeviceId(device as u32)).is_some_and(|d| d.is_usable())
}

fn host_of(map: &ClusterMap, device: i32) -> i32 {
    let host = map.type_by_name("host").expect("host type");
    map.ancestor_of_type(ItemId(device), host).expect("located").id.0
}

fn distinct(values: &mut Vec<i32>) -> usize {
    values.sort_unstable();
    values.dedup();
    values.len()
}

fn check_placements(map: &ClusterMap, seed: u32) -> Result<(), TestCaseError> {
    let placement = Placement::new(map).expect("compiles");
    let rebuilt = map.to_builder().build().expect("rebuilds");
    prop_assert_eq!(&rebuilt, map);
    let again = Placement::new(&rebuilt).expect("compiles");
    let mut scratch = placement.scratch();
    let (mut out, mut other) = (ReplicaSet::new(), ReplicaSet::new());
    let devices: Vec<i32> = map
        .devices()
        .iter()
        .filter(|d| d.is_usable() && d.capacity_bytes > 0)
        .map(|d| d.id.0 as i32)
        .collect();
    let usable_hosts = distinct(&mut devices.iter().map(|d| host_of(map, *d)).collect());
    let membership = map.membership().expect("an elastic pool has a membership");
    let current = membership.current();
    for pool in placement.pools() {
        let size = pool.pool().size as usize;
        let keys: Vec<u32> = (0..KEYS).map(|i| key(seed, i)).collect();
        let mut batch = vec![ReplicaSet::new(); keys.len()];
        if let Some(ring) = pool.attributed() {
            ring.place_batch(&keys, size, &mut batch);
        }
        for (i, k) in keys.iter().enumerate() {
            pool.place(*k, &mut scratch, &mut out);
            again.pool(pool.pool().id).expect("same pools").place(*k, &mut scratch, &mut other);
            prop_assert_eq!(out, other, "pool {} key {:#x}: rebuilt map", pool.pool().name, k);
            if pool.attributed().is_some() {
                prop_assert_eq!(out, batch[i], "pool {} key {:#x}: batch", pool.pool().name, k);
            }
            let set = out.as_slice().to_vec();
            prop_assert!(set.len() <= size);
            prop_assert_eq!(distinct(&mut set.clone()), set.len(), "{:?} repeats", set);
            for d in &set {
                prop_assert!(usable(map, *d), "pool {}: chose unusable {}", pool.pool().name, d);
            }
            match pool.pool().name.as_str() {
                "attributed_hosts" | "rendezvous_hosts" => {
                    let hosts = distinct(&mut set.iter().map(|d| host_of(map, *d)).collect());
                    prop_assert_eq!(hosts, set.len(), "{:?} shares a host", set);
                    prop_assert_eq!(set.len(), size.min(usable_hosts));
                }
                "attributed_devices" => prop_assert_eq!(set.len(), size.min(devices.len())),
                _ => {
                    let ring = pool.elastic().expect("elastic");
                    let active_now = |d: &i32| {
                        let rank = ring.rank_of(DeviceId(*d as u32)).expect("ranked");
                        usable(map, *d) && membership.is_active(current, rank)
                    };
                    let all: Vec<i32> = map.devices().iter().map(|d| d.id.0 as i32).collect();
                    let primaries = all
                        .iter()
                        .filter(|d| active_now(d) && ring.is_primary(DeviceId(**d as u32)))
                        .count();
                    let secondaries = all.iter().filter(|d| active_now(d)).count() - primaries;
                    prop_assert!(set.iter().all(active_now), "{:?}: an inactive server", set);
                    prop_assert_eq!(set.len(), size.min(primaries + secondaries));
                    if primaries > 0 && secondaries + 1 >= size {
                        let on_primaries =
                            set.iter().filter(|d| ring.is_primary(DeviceId(**d as u32))).count();
                        prop_assert_eq!(on_primaries, 1, "{:?}: not exactly one primary copy", set);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether `key` moved between two attributed rings although every sector its search went
/// through (in `before`) is unchanged.
fn moved_outside_changed_sectors(
    before: &AttributedRing,
    after: &AttributedRing,
    key: u32,
    size: usize,
) -> bool {
    let sectors = before.sector_count();
    let changed = |k: usize| before.sector_slots(k) != after.sector_slots(k);
    let first = before.sector_of(key);
    let (mut touched, mut replica) = (false, 0);
    let (mut x, mut y) = (ReplicaSet::new(), ReplicaSet::new());
    before.place_traced(key, size, &mut x, &mut |landed, pick| {
        let start = (first + replica) % sectors;
        let span = (landed + sectors - start) % sectors;
        touched |= pick == Pick::Walk || (0..=span).any(|step| changed((start + step) % sectors));
        replica += 1;
    });
    after.place(key, size, &mut y);
    // More (or fewer) usable devices change how many replicas there are, not the others.
    let common = x.len().min(y.len());
    x.as_slice()[..common] != y.as_slice()[..common] && !touched
}

fn check_attributed_change(
    shape: &Shape,
    size: u32,
    s: u32,
    victim: usize,
) -> Result<(), TestCaseError> {
    let map = with_engines(devices(shape), size, s, &[]).build().expect("valid");
    // A device added to a host; then a device marked out.
    let mut grown = map.to_builder();
    let new_id = map.max_devices();
    let mut device =
        DeviceSpec::new(new_id).capacity(600 << 30).at(&[("rack", "r0"), ("host", "r0h0")]);
    device.bandwidth_mb_per_s = 540;
    device.class = Some("ssd".into());
    grown = grown.device(device);
    let mut marked = map.to_builder();
    let count = marked.devices.len();
    marked.devices[victim % count].is_in = false;
    let before = Placement::new(&map).expect("compiles");
    for changed in [grown.build(), marked.build()] {
        let Ok(changed) = changed else { continue };
        let after = Placement::new(&changed).expect("compiles");
        for id in [PoolId(1), PoolId(2), PoolId(4)] {
            let (a, b) = (before.pool(id).expect("pool"), after.pool(id).expect("pool"));
            let (a, b) = (a.attributed().expect("attributed"), b.attributed().expect("attributed"));
            prop_assert_eq!(
                a.sector_count(),
                b.sector_count(),
                "sectors are never added or removed"
            );
            for k in 0..a.sector_count() {
                prop_assert_eq!(a.sector_position(k), b.sector_position(k));
            }
            for i in 0..KEYS {
                let k = key(0x5eed, i);
                prop_assert!(
                    !moved_outside_changed_sectors(a, b, k, size as usize),
                    "pool {} key {:#x}",
                    id,
                    k
                );
            }
        }
    }
    Ok(())
}

/// Elastic: from each version to the next with more active servers (as of the versions'
/// tables), and from the map to one with a server added and activated, only the woken or added
/// servers gain copies and the primary copy stays.
fn check_elastic_growth(shape: &Shape, size: u32, actives: &[u32]) -> Result<(), TestCaseError> {
    let map = with_engines(devices(shape), size, 4, actives).build().expect("valid");
    let placement = Placement::new(&map).expect("compiles");
    let pool = placement.pool(PoolId(3)).expect("elastic pool");
    let ring = pool.elastic().expect("elastic");
    let membership = map.membership().expect("membership");
    let primaries = ring.primaries();
    let (mut old, mut new) = (ReplicaSet::new(), ReplicaSet::new());
    let primary_copy =
        |set: &ReplicaSet| set.devices().filter(|d| ring.is_primary(*d)).collect::<Vec<_>>();
    for pair in membership.versions.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (ka, kb) = (membership.active_count(a), membership.active_count(b));
        // Growth with the rule in force on both sides (r − 1 active secondaries).
        if kb <= ka || ka < primaries + size - 1 {
            continue;
        }
        for i in 0..KEYS {
            let k = key(0xe1a5, i);
            pool.place_as_of(a.version, k, &mut old);
            pool.place_as_of(b.version, k, &mut new);
            for d in new.devices().filter(|d| !old.contains(*d)) {
                let rank = ring.rank_of(d).expect("ranked");
                prop_assert!(
                    rank > ka && rank <= kb,
                    "{:?} → {:?}: {:?} was active before",
                    old,
                    new,
                    d
                );
            }
            prop_assert_eq!(primary_copy(&old), primary_copy(&new));
        }
    }
    // A new server: ranked last, activated by a new version; p stays pinned.
    let n = u32::try_from(map.devices().len()).expect("few devices");
    if n < primaries + size - 1 {
        return Ok(());
    }
    let mut grown = map.to_builder();
    let new_id = map.max_devices();
    grown = grown.device(DeviceSpec::new(new_id).at(&[("rack", "r0"), ("host", "new")]));
    if let Some(m) = grown.membership.as_mut() {
        m.versions.push(VersionSpec { version: None, active: ActiveSpec::FirstRanks(n + 1) });
    }
    let grown = grown.build().expect("valid");
    let after = Placement::new(&grown).expect("compiles");
    let grown_pool = after.pool(PoolId(3)).expect("pool");
    prop_assert_eq!(grown_pool.elastic().expect("elastic").primaries(), primaries, "p is pinned");
    let last = membership.current().version;
    let now = grown.membership().expect("membership").current().version;
    for i in 0..KEYS {
        let k = key(0xadd, i);
        pool.place_as_of(last, k, &mut old);
        grown_pool.place_as_of(now, k, &mut new);
        for d in new.devices().filter(|d| !old.contains(*d)) {
            prop_assert_eq!(d, DeviceId(new_id), "{:?} → {:?}", old, new);
        }
        prop_assert_eq!(primary_copy(&old), primary_copy(&new));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn attributed_and_elastic_placements_are_deterministic_distinct_and_usable(
        shape in shape(false),
        size in 1u32..=4,
        s in 1u32..=6,
        actives in prop::collection::vec(any::<u32>(), 0..3),
        seed in any::<u32>(),
    ) {
        let map = with_engines(devices(&shape), size, s, &actives).build().expect("a valid map");
        check_placements(&map, seed)?;
    }

    #[test]
    fn attributed_moves_only_keys_of_changed_sectors(
        shape in shape(true),
        size in 1u32..=3,
        s in 1u32..=6,
        victim in any::<usize>(),
    ) {
        check_attributed_change(&shape, size, s, victim)?;
    }

    #[test]
    fn elastic_growth_moves_only_onto_woken_or_added_servers(
        shape in shape(true),
        size in 1u32..=3,
        actives in prop::collection::vec(any::<u32>(), 1..4),
    ) {
        let mut sorted = actives.clone();
        sorted.sort_unstable();
        check_elastic_growth(&shape, size, &sorted)?;
    }
}
