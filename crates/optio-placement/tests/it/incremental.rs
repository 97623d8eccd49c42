//! Proves, for Optio's incremental balanced placement (`balanced = "incremental"`): on random
//! clusters, and after random single-device changes made through `ClusterMap::apply`, it is
//! deterministic (recomputed, rebuilt map, through `Placement`), keeps replicas on distinct
//! devices in distinct hosts, never uses an out, down, zero-weight or zero-reweight device,
//! reports its loads truthfully and keeps every device within its band when the map has room;
//! a rebalance of a state that matches the map keeps it (idempotence); on the paper's 40-OSD
//! cluster a single-OSD add, remove or reweight moves at most 1.5 times the minimum; its
//! output (which depends on the history of the map) is pinned by a golden test; invalid
//! settings and states are clear errors.

use optio_placement::change::MapChange;
use optio_placement::engine::balanced::Balanced;
use optio_placement::engine::balanced::incremental::{
    BalanceState, place, prepare_rebalance, rebalance,
};
use optio_placement::{
    BalanceMethod, ClusterMap, ClusterMapBuilder, CrushSpec, DeviceId, DeviceSpec, EngineRef,
    ItemRef, MapErrorKind, Placement, PoolId, PoolSpec, ReplicaSet, RingSpec, RuleId, RuleKind,
    RuleRef, RuleSpec, StepSpec, Subject, Weight,
};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use crate::balanced::{self, build_refused, moved, shape_map_with};
use crate::strategies::{Shape, shape};

/// The pool of these tests: incremental balanced, replicated across hosts.
fn incremental_pool(id: u32, pg_num: u32, size: u32) -> PoolSpec {
    let mut pool = PoolSpec::crush(id, "incremental", pg_num, size);
    pool.balance.balanced = BalanceMethod::Incremental;
    pool
}

fn shape_map(shape: &Shape, size: u32, pg_num: u32) -> ClusterMap {
    shape_map_with(shape, size, pg_num, incremental_pool)
}

fn cluster(racks: u32, hosts: u32, osds: u32, pool: PoolSpec) -> ClusterMap {
    balanced::cluster(racks, hosts, osds, false, pool)
}

fn state(map: &ClusterMap) -> &BalanceState {
    map.pool(PoolId(1)).and_then(|p| p.balance_state()).expect("the builder computed it")
}

/// Every property of one map's placement; returns it.
fn check(map: &ClusterMap) -> Result<Balanced, TestCaseError> {
    let pool = map.pool(PoolId(1)).expect("pool");
    let first = place(map, pool).expect("places");
    prop_assert_eq!(&place(map, pool).expect("places"), &first, "recomputed");
    // Rebuilding the map keeps the state (idempotence) and so the placement.
    let rebuilt = map.to_builder().build().expect("rebuilds");
    prop_assert_eq!(state(&rebuilt), state(map));
    prop_assert_eq!(&place(&rebuilt, rebuilt.pool(PoolId(1)).expect("pool")).expect("ok"), &first);
    let (again, report) = rebalance(map, pool, Some(state(map))).expect("rebalances");
    prop_assert!(report.kept && report.moved == 0, "{:?}", report);
    prop_assert_eq!(&again, state(map));
    prop_assert_eq!(first.sets.len(), pool.pgp_num as usize);
    // Through Placement: the same sets.
    let placement = Placement::new(map).expect("compiles");
    let pool_placement = placement.pool(PoolId(1)).expect("pool");
    prop_assert!(pool_placement.is_balanced());
    let (mut scratch, mut out) = (placement.scratch(), ReplicaSet::new());
    for (seed, set) in first.sets.iter().enumerate() {
        pool_placement.place(
            pool_placement.pg_key(u32::try_from(seed).expect("a PG seed")),
            &mut scratch,
            &mut out,
        );
        prop_assert_eq!(out.as_slice(), set.as_slice(), "seed {}", seed);
    }
    // Distinct usable devices in distinct hosts, as many as the usable hosts allow.
    let host_type = map.type_by_name("host").expect("host");
    let mut usable_hosts: Vec<_> = map
        .devices()
        .iter()
        .filter(|d| d.is_usable() && d.weight.0 > 0 && d.reweight.0 > 0)
        .filter_map(|d| map.ancestor_of_type(d.id.into(), host_type).map(|b| b.id))
        .collect();
    usable_hosts.sort_unstable();
    usable_hosts.dedup();
    let mut loads = vec![0u64; map.max_devices() as usize];
    for (seed, set) in first.sets.iter().enumerate() {
        let devices: Vec<DeviceId> = set.devices().collect();
        prop_assert_eq!(devices.len(), (pool.size as usize).min(usable_hosts.len()), "{}", seed);
        let mut hosts = Vec::new();
        for device in &devices {
            let d = map.device(*device).expect("exists");
            prop_assert!(
                d.is_usable() && d.weight.0 > 0 && d.reweight.0 > 0,
                "seed {}: unusable {:?}",
                seed,
                d
            );
            let host = map.ancestor_of_type((*device).into(), host_type).expect("in a host").id;
            prop_assert!(!hosts.contains(&host), "seed {}: one host twice: {:?}", seed, set);
            hosts.push(host);
            loads[device.0 as usize] += 1;
        }
    }
    // Loads: what the result reports, and `unresolved` is what lies outside the bands.
    let mut outside = 0;
    for device in &first.devices {
        prop_assert_eq!(loads[device.id.0 as usize], device.load);
        outside +=
            device.lower.saturating_sub(device.load) + device.load.saturating_sub(device.upper);
    }
    prop_assert_eq!(outside, first.unresolved);
    Ok(first)
}

/// A single-device change of a generated map: 0 add a device to a host, 1 remove one, 2
/// reweight one to 0.5, 3 mark one out.
fn change(map: &ClusterMap, kind: u8, pick: usize) -> MapChange {
    let devices = map.devices();
    let device = devices[pick % devices.len()].id;
    match kind {
        0 => {
            let of_type = |name: &str| {
                map.ancestor_of_type(device.into(), map.type_by_name(name).expect("a type"))
                    .expect("located")
            };
            let (host, rack) = (of_type("host"), of_type("rack"));
            let id = map.max_devices();
            MapChange::AddDevice(
                DeviceSpec::new(id).at(&[("rack", &rack.name), ("host", &host.name)]),
            )
        }
        1 => MapChange::RemoveDevice(device),
        2 => MapChange::SetReweight { device, reweight: Weight(0x8000) },
        _ => MapChange::SetState { device, up: None, is_in: Some(false) },
    }
}

/// Whether every device can sit in its band: no host needs more than one copy of every PG.
fn has_room(map: &ClusterMap, size: u32) -> bool {
    let host_type = map.type_by_name("host").expect("host");
    let mut hosts: Vec<(i32, u64)> = Vec::new();
    for d in map.devices().iter().filter(|d| d.is_usable()) {
        let weight = d.balance_weight();
        let host = map.ancestor_of_type(d.id.into(), host_type).expect("in a host").id.0;
        match hosts.iter_mut().find(|(h, _)| *h == host) {
            Some((_, w)) => *w += weight,
            None => hosts.push((host, weight)),
        }
    }
    let total: u64 = hosts.iter().map(|(_, w)| w).sum();
    hosts.iter().all(|(_, w)| w * u64::from(size) * 5 <= total * 4)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 40,
        rng_seed: RngSeed::Fixed(0x1c4e_0001),
        ..ProptestConfig::default()
    })]

    #[test]
    fn incremental_placement_is_deterministic_and_keeps_domains(
        shape in shape(false),
        size in 1u32..=3,
        pg_num in prop_oneof![Just(1u32), 7u32..200],
        kind in 0u8..4,
        pick in any::<usize>(),
    ) {
        let map = shape_map(&shape, size, pg_num);
        check(&map)?;
        // A change through `apply` rebalances from the previous state; every property holds
        // after it too.
        let next = map.apply(&change(&map, kind, pick), map.epoch());
        if let Ok(next) = next {
            check(&next)?;
        }
    }

    #[test]
    fn clusters_with_room_end_within_their_bands(
        shape in shape(true),
        size in 1u32..=3,
        kind in 0u8..4,
        pick in any::<usize>(),
    ) {
        let map = shape_map(&shape, size, 256);
        let size = map.pools()[0].size;
        prop_assume!(has_room(&map, size));
        prop_assert_eq!(check(&map)?.unresolved, 0, "from scratch");
        if let Ok(next) = map.apply(&change(&map, kind, pick), map.epoch())
            && has_room(&next, size)
        {
            prop_assert_eq!(check(&next)?.unresolved, 0, "after a change");
        }
    }
}

#[test]
fn single_osd_changes_move_at_most_one_and_a_half_times_the_minimum() {
    // Issue 4's target on the paper's cluster (40 OSDs in 4 hosts), each change on three
    // OSDs; measured 1.0–1.4× (docs/balance.md). The history-free method moves 1.2–3.2×.
    for size in [2, 3] {
        let map = cluster(0, 4, 10, incremental_pool(1, 2048, size));
        let pool = &map.pools()[0];
        let placed = place(&map, pool).expect("places");
        assert_eq!(placed.unresolved, 0, "size {size}");
        for device in &placed.devices {
            assert!((device.load as f64 - device.target).abs() <= 1.5, "{device:?}");
        }
        for trial in 0..3u32 {
            let device = DeviceId(trial * 13 + 2);
            let changes = [
                MapChange::AddDevice(
                    DeviceSpec::new(40).at(&[("host", &format!("host{}", trial % 4))]),
                ),
                MapChange::RemoveDevice(device),
                MapChange::SetReweight { device, reweight: Weight(0x8000) },
            ];
            for change in changes {
                let next = map.apply(&change, map.epoch()).expect("applies");
                let (moved, minimum) = moved(&map, &next);
                assert!(
                    moved as f64 <= 1.5 * minimum,
                    "size {size} {change:?}: moved {moved}, minimum {minimum:.1}"
                );
                let after = place(&next, &next.pools()[0]).expect("places");
                assert_eq!(after.unresolved, 0, "size {size} {change:?}");
            }
        }
    }
}

/// A rebalance from a state the process judged before (the console's what-if, after
/// `prepare_rebalance`) takes the previous placement it remembered instead of computing it
/// again, and gives exactly what computing it gives.
#[test]
fn a_remembered_previous_placement_changes_nothing() {
    // A shape no other test uses, so that the first rebalance from its state computes.
    let map = cluster(2, 5, 3, incremental_pool(1, 640, 3));
    let pool = map.pool(PoolId(1)).expect("pool");
    let changes = [
        MapChange::SetState { device: DeviceId(4), up: None, is_in: Some(false) },
        MapChange::SetReweight { device: DeviceId(7), reweight: Weight(0x8000) },
        MapChange::RemoveDevice(DeviceId(11)),
    ];
    let next: Vec<ClusterMap> = changes
        .iter()
        .map(|c| {
            let mut builder = map.apply(c, map.epoch()).expect("applies").to_builder();
            // The next map without its state: rebalanced below, from the previous one.
            for p in &mut builder.pools {
                p.balance.state = None;
            }
            builder.build().expect("builds")
        })
        .collect();
    let pool_of = |m: &ClusterMap| m.pool(PoolId(1)).expect("pool").clone();
    // Other states to remember, as many as a process keeps: after them, this map's previous
    // placement is forgotten and computed again.
    let others: Vec<ClusterMap> =
        (0..4u32).map(|i| cluster(1, 3, 2, incremental_pool(1, 96 + 16 * i, 2))).collect();
    for (n, c) in next.iter().zip(&changes) {
        for other in &others {
            prepare_rebalance(other, &pool_of(other)).expect("prepares");
        }
        let (computed, report) = rebalance(n, &pool_of(n), Some(state(&map))).expect("ok");
        assert!(!report.home_remembered, "{c:?}: forgotten, so computed");
        let mut remembered = None;
        for _ in 0..10 {
            // Other tests of the process may have pushed it out again: then once more.
            prepare_rebalance(&map, pool).expect("prepares");
            let (state_now, report_now) = rebalance(n, &pool_of(n), Some(state(&map))).expect("ok");
            if report_now.home_remembered {
                remembered = Some((state_now, report_now));
                break;
            }
        }
        let (state_now, report_now) = remembered.expect("prepare_rebalance remembered it");
        assert_eq!(state_now, computed, "{c:?}");
        assert_eq!(report_now.moved, report.moved, "{c:?}");
        assert_eq!(report_now.steps, report.steps, "{c:?}");
        assert_eq!(report_now.unresolved, report.unresolved, "{c:?}");
        // And the applied map has that state too.
        assert_eq!(state(&map.apply(c, map.epoch()).expect("applies")), &computed, "{c:?}");
    }
}

/// Placing an incremental pool (what a server or the console does with every map) remembers
/// that placement as the previous one a rebalance from the pool's state starts from: the next
/// rebalance (a what-if, the next map) takes it instead of computing it, and gives exactly
/// what computing it gives.
#[test]
fn a_placed_pool_is_the_previous_placement_of_the_next_rebalance() {
    // A shape no other test uses.
    let map = cluster(3, 4, 3, incremental_pool(1, 704, 3));
    let pool = map.pool(PoolId(1)).expect("pool");
    let change = MapChange::SetState { device: DeviceId(5), up: None, is_in: Some(false) };
    let mut builder = map.apply(&change, map.epoch()).expect("applies").to_builder();
    for p in &mut builder.pools {
        p.balance.state = None;
    }
    let next = builder.build().expect("builds");
    let next_pool = next.pool(PoolId(1)).expect("pool").clone();
    let others: Vec<ClusterMap> =
        (0..4u32).map(|i| cluster(1, 3, 2, incremental_pool(1, 112 + 16 * i, 2))).collect();
    for other in &others {
        prepare_rebalance(other, other.pool(PoolId(1)).expect("pool")).expect("prepares");
    }
    let (computed, report) = rebalance(&next, &next_pool, Some(state(&map))).expect("ok");
    assert!(!report.home_remembered, "forgotten, so computed");
    let mut remembered = None;
    for _ in 0..10 {
        // Forgotten (the rebalance above remembered it), then placed; other tests of the
        // process may push it out in between: then once more.
        for other in &others {
            prepare_rebalance(other, other.pool(PoolId(1)).expect("pool")).expect("prepares");
        }
        place(&map, pool).expect("places");
        let (state_now, report_now) = rebalance(&next, &next_pool, Some(state(&map))).expect("ok");
        if report_now.home_remembered {
            remembered = Some((state_now, report_now));
            break;
        }
    }
    let (state_now, report_now) = remembered.expect("placing the pool remembered its placement");
    assert_eq!(state_now, computed);
    assert_eq!(report_now.moved, report.moved);
    assert_eq!(report_now.steps, report.steps);
    assert_eq!(report_now.unresolved, report.unresolved);
}

#[test]
fn a_sequence_of_changes_stays_balanced_and_moves_little() {
    // Ten changes in a row, each from the previous map's state: the state does not drift
    // into imbalance, and every step stays within the bound.
    let mut map = cluster(0, 4, 10, incremental_pool(1, 1024, 3));
    for step in 0..10u32 {
        let change = match step % 3 {
            0 => MapChange::AddDevice(
                DeviceSpec::new(40 + step).at(&[("host", &format!("host{}", step % 4))]),
            ),
            1 => MapChange::RemoveDevice(DeviceId(step * 3)),
            _ => {
                MapChange::SetReweight { device: DeviceId(step * 3 + 1), reweight: Weight(0xc000) }
            }
        };
        let next = map.apply(&change, map.epoch()).expect("applies");
        let (moved, minimum) = moved(&map, &next);
        assert!(moved as f64 <= 1.5 * minimum, "step {step}: moved {moved}, minimum {minimum:.1}");
        let placed = place(&next, &next.pools()[0]).expect("places");
        assert_eq!(placed.unresolved, 0, "step {step}");
        map = next;
    }
}

#[test]
fn the_placement_depends_on_the_history() {
    // Two maps with the same devices, one reached by a change, one built from scratch: both
    // balanced, placed differently. Removing the state balances from scratch again.
    let base = cluster(0, 4, 10, incremental_pool(1, 512, 3));
    let grown = base
        .apply(&MapChange::AddDevice(DeviceSpec::new(40).at(&[("host", "host2")])), base.epoch())
        .expect("adds");
    let mut fresh = grown.to_builder();
    fresh.pools[0].balance.state = None;
    let fresh = fresh.build().expect("valid");
    let (history, scratch) = (
        place(&grown, &grown.pools()[0]).expect("places"),
        place(&fresh, &fresh.pools()[0]).expect("places"),
    );
    assert_eq!((history.unresolved, scratch.unresolved), (0, 0));
    assert_ne!(history.sets, scratch.sets);
    let (_, report) = rebalance(&fresh, &fresh.pools()[0], None).expect("rebalances");
    assert!(report.from_scratch);
    assert_eq!(state(&fresh), &rebalance(&fresh, &fresh.pools()[0], None).expect("ok").0);
    // A changed pg_num or size cannot use the state: balanced from scratch.
    let mut resized = grown.to_builder();
    resized.pools[0].pg_num = 256;
    resized.pools[0].pgp_num = None;
    let resized = resized.build().expect("valid");
    assert_eq!(state(&resized).units, 256);
}

/// Pinned output, before and after a change: a difference here is a placement change (a new
/// placement version, or a new state format).
#[test]
fn golden_incremental_sets() {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..9u32 {
        let host = format!("host{}", id / 3);
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
    }
    let map = builder
        .replicated_rule(0, "r", "default", "host")
        .pool(incremental_pool(7, 32, 2))
        .build()
        .expect("valid");
    let sets = |map: &ClusterMap| -> Vec<Vec<i32>> {
        place(map, &map.pools()[0])
            .expect("places")
            .sets
            .iter()
            .map(|s| s.as_slice().to_vec())
            .collect()
    };
    let before = sets(&map);
    let grown = map
        .apply(&MapChange::AddDevice(DeviceSpec::new(9).at(&[("host", "host1")])), map.epoch())
        .expect("adds");
    let after = sets(&grown);
    let golden = |rows: &[[i32; 2]]| rows.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
    assert_eq!(before, golden(&GOLDEN_BEFORE), "before: {before:?}");
    assert_eq!(after, golden(&GOLDEN_AFTER), "after: {after:?}");
}

const GOLDEN_BEFORE: [[i32; 2]; 32] = [
    [3, 2],
    [0, 3],
    [7, 3],
    [1, 5],
    [8, 2],
    [8, 3],
    [5, 1],
    [4, 7],
    [4, 2],
    [7, 3],
    [8, 4],
    [0, 3],
    [2, 6],
    [8, 0],
    [1, 6],
    [2, 4],
    [6, 4],
    [1, 5],
    [3, 6],
    [0, 7],
    [6, 2],
    [5, 7],
    [4, 8],
    [0, 7],
    [2, 7],
    [5, 1],
    [4, 7],
    [5, 1],
    [1, 6],
    [5, 8],
    [0, 8],
    [6, 0],
];
/// The new device 9 (target 6.4 of 64 copies) takes six copies; nothing else moves.
const GOLDEN_AFTER: [[i32; 2]; 32] = [
    [3, 2],
    [0, 3],
    [7, 3],
    [1, 5],
    [8, 9],
    [8, 3],
    [5, 1],
    [4, 7],
    [4, 2],
    [7, 3],
    [8, 4],
    [0, 3],
    [2, 6],
    [8, 0],
    [1, 9],
    [2, 4],
    [6, 4],
    [1, 5],
    [3, 6],
    [0, 7],
    [6, 2],
    [5, 7],
    [4, 8],
    [0, 7],
    [2, 9],
    [5, 1],
    [4, 7],
    [5, 1],
    [1, 6],
    [5, 8],
    [0, 9],
    [6, 9],
];

fn build_error(pool: PoolSpec, rule: Option<RuleSpec>) -> String {
    let error = build_refused(pool, rule);
    assert_eq!(error.subject, Subject::Pool("incremental".into()), "{error}");
    assert!(matches!(error.kind, MapErrorKind::OutOfRange { .. }), "{error}");
    error.kind.to_string()
}

#[test]
fn invalid_settings_and_states_are_clear_errors() {
    // An erasure-coded rule cannot be balanced.
    let take = StepSpec::Take { item: ItemRef::Name("default".into()), class: None };
    let choose =
        StepSpec::Choose { leaf: true, indep: true, num: 0, type_name: "host".to_string() };
    let erasure = RuleSpec {
        id: RuleId(1),
        name: "ec".into(),
        kind: RuleKind::Erasure,
        min_size: 1,
        max_size: 10,
        steps: vec![take, choose, StepSpec::Emit],
    };
    let mut pool = incremental_pool(1, 64, 2);
    pool.engine = EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(RuleId(1))) });
    let text = build_error(pool, Some(erasure));
    assert!(text.contains("cannot be balanced") && text.contains("erasure-coded"), "{text}");
    // Ring pools have no PGs to balance.
    let mut ring = incremental_pool(1, 0, 2);
    ring.engine = EngineRef::Ring(RingSpec { vnode_bytes: None, failure_domain: None });
    let text = build_error(ring, None);
    assert!(text.contains("crush pools only"), "{text}");
    // The linear parameter means nothing to a balanced pool.
    let mut linear = incremental_pool(1, 64, 2);
    linear.balance.linear_param = optio_placement::LinearParamSpec::Auto;
    assert!(build_error(linear, None).contains("balance_param"));
    // A state on a pool that is not incremental, and a damaged state.
    let valid = cluster(0, 4, 2, incremental_pool(1, 64, 2));
    let mut stray = PoolSpec::crush(1, "incremental", 64, 2);
    stray.balance.state = Some(state(&valid).clone());
    assert!(build_error(stray, None).contains("only incremental balanced pools"));
    let mut damaged = state(&valid).clone();
    damaged.devices.swap(0, 1);
    let mut pool = incremental_pool(1, 64, 2);
    pool.balance.state = Some(damaged);
    let text = build_error(pool, None);
    assert!(text.contains("sorted by id") && text.contains("from scratch"), "{text}");
}
