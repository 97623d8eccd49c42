//! Proves, for both engines (`crush` replicated and erasure-coded, `ring` with and without a
//! failure domain) on random clusters: placement is deterministic (across compilations, a
//! rebuilt map and reused scratch); replicas are distinct devices in distinct hosts; no out,
//! down, zero-weight or zero-reweight device is ever chosen; a ring always finds as many
//! replicas as there are usable hosts (or devices, without a failure domain); `locate` of a
//! name agrees with `place` of its key.

use optio_placement::{ITEM_NONE, ItemId, Placement, ReplicaSet};
use proptest::prelude::*;

use crate::strategies::{Shape, key, shape};

const KEYS: u32 = 300;

fn check_pools(shape: &Shape, size: u32, seed: u32) -> Result<(), TestCaseError> {
    let map = shape.map(size);
    let placement = Placement::new(&map).expect("compiles");
    let rebuilt = map.to_builder().build().expect("a map rebuilds");
    prop_assert_eq!(&rebuilt, &map);
    let again = Placement::new(&rebuilt).expect("compiles");
    let host_type = map.type_by_name("host").expect("host type");
    let mut scratch = placement.scratch();
    let mut other_scratch = again.scratch();
    let (mut out, mut twice, mut other) = (ReplicaSet::new(), ReplicaSet::new(), ReplicaSet::new());
    // Hosts holding a device the ring can use.
    let ring_hosts =
        shape.racks.iter().flatten().filter(|host| host.iter().any(|d| d.usable())).count();
    let ring_devices = shape.devices().filter(|(_, _, _, d)| d.usable()).count();
    for pool in placement.pools() {
        let id = pool.pool().id;
        let size = pool.pool().size as usize;
        for i in 0..KEYS {
            let k = key(seed, i);
            pool.place(k, &mut scratch, &mut out);
            pool.place(k, &mut scratch, &mut twice);
            again.pool(id).expect("same pools").place(k, &mut other_scratch, &mut other);
            prop_assert_eq!(out, twice, "pool {} key {:#x}: reused scratch", id, k);
            prop_assert_eq!(out, other, "pool {} key {:#x}: rebuilt map", id, k);
            prop_assert!(out.len() <= size);
            let devices: Vec<i32> =
                out.as_slice().iter().copied().filter(|&d| d != ITEM_NONE).collect();
            for (n, &d) in devices.iter().enumerate() {
                prop_assert!(
                    !devices[..n].contains(&d),
                    "pool {} key {:#x}: {:?} repeats",
                    id,
                    k,
                    out
                );
                let device = map.device(optio_placement::DeviceId(d as u32)).expect("a device");
                prop_assert!(
                    device.up && device.is_in && device.weight.0 > 0 && device.reweight.0 > 0,
                    "pool {} key {:#x}: chose unusable {:?}",
                    id,
                    k,
                    device
                );
            }
            if pool.pool().name != "objects" {
                let mut hosts: Vec<i32> = devices
                    .iter()
                    .map(|&d| map.ancestor_of_type(ItemId(d), host_type).expect("located").id.0)
                    .collect();
                hosts.sort_unstable();
                hosts.dedup();
                prop_assert_eq!(
                    hosts.len(),
                    devices.len(),
                    "pool {} key {:#x}: {:?} shares a host",
                    id,
                    k,
                    out
                );
            }
            // A ring walks until it has enough: as many replicas as usable hosts (or devices).
            if pool.pool().name == "ring" {
                prop_assert_eq!(devices.len(), size.min(ring_hosts), "pool ring key {:#x}", k);
            }
            if pool.pool().name == "objects" {
                prop_assert_eq!(devices.len(), size.min(ring_devices), "pool objects key {:#x}", k);
            }
        }
        // Objects by name go through the same path.
        for name in ["a", "object-17", "rbd_data.5e7a.0000000000000001"] {
            let location = pool.locate(name);
            pool.place(location.key, &mut scratch, &mut out);
            prop_assert_eq!(location.devices, out);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn placements_are_deterministic_distinct_and_usable(
        shape in shape(false),
        size in 1u32..=4,
        seed in any::<u32>(),
    ) {
        check_pools(&shape, size, seed)?;
    }

    #[test]
    fn healthy_clusters_too(shape in shape(true), size in 1u32..=4, seed in any::<u32>()) {
        check_pools(&shape, size, seed)?;
    }
}
