//! Proves: adding, removing, reweighting or re-capacitating one device moves data near the
//! minimum that the change of the distribution requires (`stats::minimum_movement_share` of
//! the per-device loads before and after): exactly the minimum for the ring, within the
//! per-level bound of straw2 for CRUSH.
//!
//! Changes are made as an operator makes them — `map.to_builder()`, edit, `build()` — so
//! bucket ids stay put. (Deriving a map afresh from device locations renumbers the buckets
//! after a removed host, and CRUSH hashes bucket ids: nearly everything would move.)

use optio_placement::stats::minimum_movement_share;
use optio_placement::{
    ClusterMap, ClusterMapBuilder, DeviceSpec, ItemId, ItemRef, Placement, PoolId, ReplicaSet,
    Weight,
};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use crate::strategies::{Shape, key, shape, with_pools};

const KEYS: u32 = 10_000;

/// One change to one device.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// A new 1.0 / 1 TiB device in an existing host.
    AddToHost,
    /// A new 1.0 / 1 TiB device in a new host.
    AddWithNewHost,
    /// Remove device `n` (modulo the count).
    Remove(usize),
    /// Halve the CRUSH weight and capacity of device `n`.
    Halve(usize),
    /// Set the reweight of device `n` to 0.5.
    Reweight(usize),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        Just(Change::AddToHost),
        Just(Change::AddWithNewHost),
        any::<usize>().prop_map(Change::Remove),
        any::<usize>().prop_map(Change::Halve),
        any::<usize>().prop_map(Change::Reweight),
    ]
}

fn apply(map: &ClusterMap, change: Change) -> ClusterMapBuilder {
    let mut builder = map.to_builder();
    let count = builder.devices.len();
    let new_id = map.max_devices();
    let new_device = DeviceSpec::new(new_id).weight(Weight::ONE).capacity(1 << 40);
    match change {
        Change::AddToHost => {
            builder = builder.device(new_device.at(&[("rack", "r0"), ("host", "r0h0")]))
        }
        Change::AddWithNewHost => {
            builder = builder.device(new_device.at(&[("rack", "r0"), ("host", "new")]))
        }
        Change::Remove(n) => {
            let id = builder.devices.remove(n % count).id;
            for bucket in &mut builder.buckets {
                bucket.items.retain(|(item, _)| *item != ItemRef::Id(ItemId(id.0 as i32)));
            }
        }
        Change::Halve(n) => {
            let device = &mut builder.devices[n % count];
            let (id, half) = (device.id, Weight(device.weight.expect("explicit").0 / 2 + 1));
            device.weight = Some(half);
            device.capacity_bytes = device.capacity_bytes.map(|c| c / 2 + 1);
            for bucket in &mut builder.buckets {
                for (item, weight) in &mut bucket.items {
                    if *item == ItemRef::Id(ItemId(id.0 as i32)) {
                        *weight = Some(half);
                    }
                }
            }
        }
        Change::Reweight(n) => builder.devices[n % count].reweight = Weight(0x8000),
    }
    builder
}

/// (share of replica slots that changed device, minimum share the load change requires,
/// whether the number of placed slots changed).
fn moved(before: &Placement, after: &Placement, pool: PoolId) -> (f64, f64, bool) {
    let (a, b) = (before.pool(pool).expect("pool"), after.pool(pool).expect("pool"));
    let (mut sa, mut sb) = (before.scratch(), after.scratch());
    let (mut old, mut new) = (ReplicaSet::new(), ReplicaSet::new());
    let (mut load_before, mut load_after) = (vec![0f64; 64], vec![0f64; 64]);
    let (mut changed, mut slots, mut slots_after) = (0usize, 0usize, 0usize);
    for i in 0..KEYS {
        let k = key(0xabcd, i);
        a.place(k, &mut sa, &mut old);
        b.place(k, &mut sb, &mut new);
        old.devices().for_each(|d| load_before[d.0 as usize] += 1.0);
        new.devices().for_each(|d| load_after[d.0 as usize] += 1.0);
        slots += old.devices().count();
        slots_after += new.devices().count();
        changed += old.devices().filter(|d| !new.contains(*d)).count();
    }
    let minimum = minimum_movement_share(&load_before, &load_after);
    (changed as f64 / slots as f64, minimum, slots_after != slots)
}

/// Each device's CRUSH weight × reweight: the share CRUSH aims at.
fn targets(map: &ClusterMap) -> Vec<f64> {
    let mut targets = vec![0f64; 64];
    for device in map.devices() {
        targets[device.id.0 as usize] =
            device.weight.as_f64() * device.effective_reweight().as_f64();
    }
    targets
}

fn check(shape: &Shape, size: u32, change: Change) -> Result<(), TestCaseError> {
    let size = size.min(shape.weighted_hosts()).max(1);
    let map = with_pools(shape.builder(), size).build().expect("valid");
    prop_assume!(!matches!(change, Change::Remove(_)) || map.devices().len() > 1);
    let Ok(changed) = apply(&map, change).build() else {
        // Removing or halving the last weight of a host can leave too few hosts for the
        // pool: the builder refuses, which is its job (tested in builder_errors).
        return Err(TestCaseError::reject("the pool no longer fits"));
    };
    let (before, after) =
        (Placement::new(&map).expect("compiles"), Placement::new(&changed).expect("compiles"));
    for pool in [PoolId(3), PoolId(4)] {
        // Ring: a change only moves keys to or from the changed device, so the movement is
        // exactly the minimum of the loads it produces.
        let (observed, minimum, _) = moved(&before, &after, pool);
        prop_assert!(
            (observed - minimum).abs() < 1e-9,
            "ring pool {}: moved {} > minimum {}",
            pool,
            observed,
            minimum
        );
    }
    // CRUSH is not minimal. straw2 moves at most the weight change at each of the 3 levels
    // a choice goes through (rack, host, device): up to 3x the minimum. With several
    // replicas, a host's weight change also reorders which replica rank lands on which host,
    // and the rank decides the draw inside the host: data moves even when no device's load
    // does (2 hosts, size 2, halve the only device of one host: loads unchanged, 4% moved).
    // So the minimum is taken of the loads and of the CRUSH weights (× reweight), whichever
    // is larger, and 4x is allowed for 3 replicas; plus noise from 10,000 keys. Measured
    // worst over thousands of random clusters: 2.3x (1 replica), 2.8x (3 replicas).
    let (observed, load_minimum, placed_differently) = moved(&before, &after, PoolId(1));
    // CRUSH may fail to place a replica (every retry rejected): a reweight with no
    // alternative leaves slots unplaced, a new device lets failed ones be placed. Loads then
    // change without data moving; normalised loads cannot tell, so such cases are skipped.
    prop_assume!(!placed_differently);
    let minimum = load_minimum.max(minimum_movement_share(&targets(&map), &targets(&changed)));
    let factor = if size == 1 { 3.0 } else { 4.0 };
    let noise = 3.0 * (minimum.max(1e-4) / f64::from(KEYS)).sqrt();
    prop_assert!(
        observed <= factor * minimum + noise,
        "crush, {} replicas, {:?}: moved {:.4}, minimum {:.4}",
        size,
        change,
        observed,
        minimum
    );
    prop_assert!(
        observed + noise >= load_minimum,
        "moved {} below the minimum {}",
        observed,
        load_minimum
    );
    Ok(())
}

proptest! {
    // A fixed seed: the CRUSH bound is statistical, and a test must not fail at random.
    #![proptest_config(ProptestConfig {
        cases: 60,
        rng_seed: RngSeed::Fixed(0x6d6f76),
        ..ProptestConfig::default()
    })]

    #[test]
    fn one_device_changes_move_near_the_minimum(shape in shape(true), size in prop_oneof![Just(1u32), Just(3)], change in change()) {
        check(&shape, size, change)?;
    }
}
