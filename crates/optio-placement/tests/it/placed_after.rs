//! Proves: a pool placed after a device was marked out, from its placement before
//! ([`PlacedPool::place_after`]: only the PGs that held the device placed again), is exactly
//! the pool placed afresh — on every generated cluster (devices of any weight and state),
//! for replicated (`firstn`) and erasure-coded (`indep`) rules and a two-step rule whose
//! result CRUSH truncates; and it applies whenever the device was in, up and at full
//! reweight.

use optio_placement::analysis::PlacedPool;
use optio_placement::{
    ClusterMap, DeviceId, MapChange, Placement, PoolSpec, RuleId, RuleKind, RuleSpec, StepSpec,
    Weight,
};
use proptest::prelude::*;

use crate::strategies::{Shape, shape, with_pools};

const OBJECTS: u64 = 300;

/// The standard pools, and pool 5: a rule taking every rack, then two hosts' devices in each
/// (more than the pool's size when there are two racks or more: CRUSH keeps the first).
fn map_of(shape: &Shape, size: u32) -> Option<ClusterMap> {
    let size = size.min(shape.weighted_hosts()).max(1);
    let two_per_rack = RuleSpec {
        id: RuleId(2),
        name: "two-per-rack".into(),
        kind: RuleKind::Replicated,
        min_size: 1,
        max_size: 10,
        steps: vec![
            StepSpec::Take { item: optio_placement::ItemRef::Name("default".into()), class: None },
            StepSpec::Choose { leaf: false, indep: false, num: 0, type_name: "rack".into() },
            StepSpec::Choose { leaf: true, indep: false, num: 2, type_name: "host".into() },
            StepSpec::Emit,
        ],
    };
    let mut pool = PoolSpec::crush(5, "two-per-rack", 128, size);
    pool.engine = optio_placement::EngineRef::Crush(optio_placement::CrushSpec {
        rule: Some(optio_placement::RuleRef::Id(RuleId(2))),
    });
    let with_rule = with_pools(shape.builder(), size).rule(two_per_rack.clone()).pool(pool);
    // A shape the two-step rule cannot serve is refused by the builder: the standard pools
    // alone then.
    with_rule.build().ok().or_else(|| with_pools(shape.builder(), size).build().ok())
}

/// For device `n` (modulo the count) marked out: every pool placed after it, from its
/// placement before, against placed afresh. Returns how many pools took the shortcut.
fn check(map: &ClusterMap, n: usize) -> Result<usize, TestCaseError> {
    let devices: Vec<DeviceId> = map.devices().iter().map(|d| d.id).collect();
    let device = devices[n % devices.len()];
    let change = MapChange::SetState { device, up: None, is_in: Some(false) };
    let next = map.apply(&change, map.epoch()).expect("marking a device out applies");
    let (before, after) =
        (Placement::new(map).expect("compiles"), Placement::new(&next).expect("compiles"));
    let mut shortcuts = 0;
    for pool in map.pools() {
        let old = before.pool(pool.id).expect("placed");
        let new = after.pool(pool.id).expect("placed");
        let previous = PlacedPool::place(&before, old, OBJECTS, &mut |_| {});
        let fresh = PlacedPool::place(&after, new, OBJECTS, &mut |_| {});
        let was = map.device(device).expect("exists");
        let expected =
            new.is_crush() && new.has_pgs() && was.is_in && was.up && was.reweight == Weight::ONE;
        match PlacedPool::place_after(&after, new, OBJECTS, map, device, &previous) {
            Some(shortcut) => {
                prop_assert!(expected, "pool {} took the shortcut for {device:?}", pool.name);
                prop_assert_eq!(&shortcut, &fresh, "pool {} with {:?} out", pool.name, device);
                shortcuts += 1;
            }
            None => {
                prop_assert!(!expected, "pool {} refused the shortcut for {device:?}", pool.name)
            }
        }
    }
    Ok(shortcuts)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_device_marked_out_changes_only_the_pgs_that_held_it(
        shape in shape(false), size in 1u32..=4, n in any::<usize>()
    ) {
        if let Some(map) = map_of(&shape, size) {
            check(&map, n)?;
        }
    }
}

/// On a healthy cluster the shortcut applies to every crush pool, whichever device goes out.
#[test]
fn on_a_healthy_cluster_every_crush_pool_takes_the_shortcut() {
    let shape = Shape {
        racks: (0..3)
            .map(|_| {
                (0..3)
                    .map(|h| {
                        (0..2)
                            .map(|d| crate::strategies::DeviceGen {
                                weight: 0x10000 + 0x4000 * (h + d),
                                capacity_gib: 1000,
                                up: true,
                                is_in: true,
                                reweight: 0x10000,
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect(),
    };
    let map = map_of(&shape, 3).expect("builds");
    assert!(map.pool(optio_placement::PoolId(5)).is_some(), "the two-step rule's pool is there");
    for n in 0..18 {
        // Pools 1, 2 and 5 are crush pools with PGs; 3 and 4 are rings.
        assert_eq!(check(&map, n).expect("the same"), 3, "device {n}");
    }
}
