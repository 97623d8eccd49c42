//! Proves, for Optio's balanced placement (no exception tables): on random clusters it is
//! deterministic (recomputed, rebuilt map, through `Placement`), keeps replicas on distinct
//! devices in distinct hosts, never uses an out, down, zero-weight or zero-reweight device,
//! keeps every device within its band when the map has room; on the paper's and the large
//! cluster it reaches stdev ≤ 1; its output is pinned by a golden test; a single-OSD change
//! moves a bounded multiple of the minimum; unsupported settings are clear errors.

use optio_placement::engine::balanced::{Balanced, balance};
use optio_placement::{
    BalanceMethod, ClusterMap, ClusterMapBuilder, CrushSpec, DeviceId, DeviceSpec, EngineRef,
    ItemRef, MapErrorKind, Placement, PoolId, PoolSpec, ReplicaSet, RingSpec, RuleId, RuleKind,
    RuleRef, RuleSpec, StepSpec, Subject, Weight,
};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use crate::strategies::{Shape, shape};

/// The pool of these tests: balanced, replicated across hosts.
fn balanced_pool(id: u32, pg_num: u32, size: u32) -> PoolSpec {
    let mut pool = PoolSpec::crush(id, "balanced", pg_num, size);
    pool.balance.balanced = BalanceMethod::HistoryFree;
    pool
}

fn shape_map(shape: &Shape, size: u32, pg_num: u32) -> ClusterMap {
    shape_map_with(shape, size, pg_num, balanced_pool)
}

/// A generated cluster with one replicated pool made by `pool` (id 1), its size capped by the
/// hosts with weight (shared with the incremental method's tests).
pub(crate) fn shape_map_with(
    shape: &Shape,
    size: u32,
    pg_num: u32,
    pool: fn(u32, u32, u32) -> PoolSpec,
) -> ClusterMap {
    let size = size.min(shape.weighted_hosts()).max(1);
    shape
        .builder()
        .replicated_rule(0, "replicated", "default", "host")
        .pool(pool(1, pg_num, size))
        .build()
        .expect("a valid generated map")
}

/// Racks × hosts × OSDs of equal weight, optionally one OSD added to host 0.
pub(crate) fn cluster(
    racks: u32,
    hosts: u32,
    osds: u32,
    extra: bool,
    pool: PoolSpec,
) -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    let mut add = |id: u32, host: u32| {
        let host_name = format!("host{host}");
        let rack_name = format!("rack{}", host / hosts);
        let location: Vec<(&str, &str)> = if racks > 0 {
            vec![("host", &host_name), ("rack", &rack_name)]
        } else {
            vec![("host", &host_name)]
        };
        builder.devices.push(DeviceSpec::new(id).at(&location));
    };
    let total = racks.max(1) * hosts * osds;
    for id in 0..total {
        add(id, id / osds);
    }
    if extra {
        add(total, 0);
    }
    builder
        .replicated_rule(0, "replicated_rule", "default", "host")
        .pool(pool)
        .build()
        .expect("valid")
}

fn loads(map: &ClusterMap, balanced: &Balanced) -> Vec<u64> {
    let mut loads = vec![0u64; map.max_devices() as usize];
    for set in &balanced.sets {
        for device in set.devices() {
            loads[device.0 as usize] += 1;
        }
    }
    loads
}

fn stdev(values: &[f64]) -> f64 {
    optio_placement::stats::Summary::of(values).stdev
}

fn check(shape: &Shape, size: u32, pg_num: u32) -> Result<(), TestCaseError> {
    let map = shape_map(shape, size, pg_num);
    let pool = map.pool(PoolId(1)).expect("pool");
    let first = balance(&map, pool).expect("balances");
    let again = balance(&map, pool).expect("balances");
    prop_assert_eq!(&first, &again, "recomputed");
    let rebuilt = map.to_builder().build().expect("rebuilds");
    prop_assert_eq!(
        &balance(&rebuilt, rebuilt.pool(PoolId(1)).expect("pool")).expect("ok"),
        &first
    );
    prop_assert_eq!(first.sets.len(), pg_num as usize);
    // Through Placement: the same sets, by PG seed and by object name.
    let placement = Placement::new(&map).expect("compiles");
    let pool_placement = placement.pool(PoolId(1)).expect("pool");
    prop_assert!(pool_placement.is_balanced());
    let mut scratch = placement.scratch();
    let mut out = ReplicaSet::new();
    for (seed, set) in first.sets.iter().enumerate() {
        pool_placement.place(
            pool_placement.pg_key(u32::try_from(seed).expect("a PG seed")),
            &mut scratch,
            &mut out,
        );
        prop_assert_eq!(out.as_slice(), set.as_slice(), "seed {}", seed);
    }
    let usable_hosts: usize =
        shape.racks.iter().flatten().filter(|host| host.iter().any(|d| d.usable())).count();
    let host_type = map.type_by_name("host").expect("host");
    for (seed, set) in first.sets.iter().enumerate() {
        let devices: Vec<DeviceId> = set.devices().collect();
        prop_assert_eq!(
            devices.len(),
            (pool.size as usize).min(usable_hosts),
            "seed {}: {:?}",
            seed,
            set
        );
        let mut hosts = Vec::new();
        for device in &devices {
            let d = map.device(*device).expect("exists");
            prop_assert!(d.is_usable(), "seed {}: unusable {:?}", seed, d);
            let host = map.ancestor_of_type((*device).into(), host_type).expect("in a host").id;
            prop_assert!(
                !hosts.contains(&host),
                "seed {}: two copies in one host: {:?}",
                seed,
                set
            );
            hosts.push(host);
        }
    }
    // Loads: what the result reports, and within every band unless it says otherwise.
    let loads = loads(&map, &first);
    let mut outside = 0;
    for device in &first.devices {
        prop_assert_eq!(loads[device.id.0 as usize], device.load);
        outside +=
            device.lower.saturating_sub(device.load) + device.load.saturating_sub(device.upper);
    }
    prop_assert_eq!(outside, first.unresolved);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        rng_seed: RngSeed::Fixed(0xba1a_0001),
        ..ProptestConfig::default()
    })]

    #[test]
    fn balanced_placement_is_deterministic_and_keeps_domains(
        shape in shape(false),
        size in 1u32..=3,
        pg_num in prop_oneof![Just(1u32), 7u32..200],
    ) {
        check(&shape, size, pg_num)?;
    }

    #[test]
    fn healthy_clusters_end_within_their_bands(shape in shape(true), size in 1u32..=3) {
        let map = shape_map(&shape, size, 256);
        let result = balance(&map, map.pool(PoolId(1)).expect("pool")).expect("ok");
        // Equal-weight hosts are not guaranteed (random weights can make a domain's share
        // unreachable), so only the report is checked against the loads here; the headline
        // clusters below assert the bands.
        let loads = loads(&map, &result);
        for device in &result.devices {
            prop_assert_eq!(device.load, loads[device.id.0 as usize]);
            prop_assert!(device.lower <= device.upper);
        }
    }
}

#[test]
fn headline_clusters_are_within_one_pg_of_target() {
    for (racks, hosts, pg_num, size) in
        [(0, 4, 2048, 2), (0, 4, 2048, 3), (0, 4, 32768, 3), (10, 10, 2048, 2), (10, 10, 2048, 3)]
    {
        let map = cluster(racks, hosts, 10, false, balanced_pool(1, pg_num, size));
        let result = balance(&map, &map.pools()[0]).expect("balances");
        assert_eq!(result.unresolved, 0, "{racks}x{hosts} {pg_num}/{size}");
        let values: Vec<f64> = result.devices.iter().map(|d| d.load as f64).collect();
        let sd = stdev(&values);
        assert!(sd <= 1.0, "{racks}x{hosts} {pg_num}/{size}: stdev {sd}");
        for device in &result.devices {
            assert!((device.load as f64 - device.target).abs() < 2.5, "{device:?}");
        }
    }
}

#[test]
fn weights_are_honoured() {
    // Host 0's devices weigh twice as much: they get twice the PGs, within their bands.
    let mut builder = ClusterMapBuilder::new();
    for id in 0..12u32 {
        let host = format!("host{}", id / 3);
        let weight = if id < 3 { Weight(0x20000) } else { Weight::ONE };
        builder = builder.device(DeviceSpec::new(id).weight(weight).at(&[("host", &host)]));
    }
    let map = builder
        .replicated_rule(0, "r", "default", "host")
        .pool(balanced_pool(1, 600, 2))
        .build()
        .expect("valid");
    let result = balance(&map, &map.pools()[0]).expect("balances");
    assert_eq!(result.unresolved, 0);
    for device in &result.devices {
        assert!(device.lower <= device.load && device.load <= device.upper, "{device:?}");
    }
    // 1200 copies, weights 2,2,2 and 1×9: targets 1200·2/15 = 160 and 80.
    assert_eq!(result.devices[0].target, 160.0);
    assert_eq!(result.devices[5].target, 80.0);
}

#[test]
fn out_and_down_devices_get_nothing_and_their_share_goes_elsewhere() {
    let mut map = cluster(0, 4, 10, false, balanced_pool(1, 1024, 3));
    let mut builder = map.to_builder();
    builder.devices[3].is_in = false;
    builder.devices[17].up = false;
    builder.devices[25].reweight = Weight::ZERO;
    map = builder.build().expect("valid");
    let result = balance(&map, &map.pools()[0]).expect("balances");
    let loads = loads(&map, &result);
    for id in [3usize, 17, 25] {
        assert_eq!(loads[id], 0, "device {id}");
    }
    assert_eq!(result.devices.len(), 37);
    assert_eq!(result.sets.iter().map(|s| s.devices().count()).sum::<usize>(), 1024 * 3);
    assert_eq!(result.unresolved, 0);
}

#[test]
fn too_few_hosts_give_short_sets_not_errors() {
    // Three hosts, size 3; two hosts go down: every PG keeps one copy.
    let map = cluster(0, 3, 2, false, balanced_pool(1, 64, 3));
    let mut builder = map.to_builder();
    for device in &mut builder.devices[..4] {
        device.up = false;
    }
    let map = builder.build().expect("valid");
    let result = balance(&map, &map.pools()[0]).expect("balances");
    for set in &result.sets {
        assert_eq!(set.devices().count(), 1);
    }
}

/// PG copies moved between two balanced placements, and the minimum for the change.
pub(crate) fn moved(a: &ClusterMap, b: &ClusterMap) -> (u64, f64) {
    let (pa, pb) = (Placement::new(a).expect("ok"), Placement::new(b).expect("ok"));
    let m = optio_placement::analysis::movement(
        a,
        &pa,
        b,
        &pb,
        pa.pool(PoolId(1)).expect("pool"),
        pb.pool(PoolId(1)).expect("pool"),
        0,
        1,
        &mut |_| {},
    );
    (m.moved, m.minimum_copies())
}

#[test]
fn adding_a_device_moves_a_bounded_multiple_of_the_minimum() {
    // Measured 1.3–2.1× on this cluster (docs/balance.md); a regression to the 4–45× of the
    // min-cost-flow formulation, or to reshuffling everything, fails.
    for size in [2, 3] {
        let a = cluster(0, 4, 10, false, balanced_pool(1, 2048, size));
        let b = cluster(0, 4, 10, true, balanced_pool(1, 2048, size));
        let (moved, minimum) = moved(&a, &b);
        assert!(moved as f64 <= 2.5 * minimum, "size {size}: moved {moved}, minimum {minimum}");
        assert!(moved as f64 >= minimum * 0.99, "size {size}: moved {moved} < minimum {minimum}");
    }
}

/// Pinned output: a change here is a placement change (a new placement version).
#[test]
fn golden_balanced_sets() {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..9u32 {
        let host = format!("host{}", id / 3);
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
    }
    let map = builder
        .replicated_rule(0, "r", "default", "host")
        .pool(balanced_pool(7, 32, 2))
        .build()
        .expect("valid");
    let result = balance(&map, &map.pools()[0]).expect("balances");
    let sets: Vec<Vec<i32>> = result.sets.iter().map(|s| s.as_slice().to_vec()).collect();
    let golden: Vec<Vec<i32>> = GOLDEN.iter().map(|s| s.to_vec()).collect();
    assert_eq!(sets, golden, "got {sets:?}");
    let loads: Vec<u64> = result.devices.iter().map(|d| d.load).collect();
    assert_eq!(loads, GOLDEN_LOADS);
}

const GOLDEN: [[i32; 2]; 32] = [
    [3, 8],
    [3, 8],
    [7, 3],
    [2, 5],
    [8, 2],
    [8, 3],
    [5, 1],
    [4, 1],
    [4, 2],
    [7, 3],
    [8, 2],
    [0, 3],
    [2, 6],
    [0, 4],
    [1, 4],
    [2, 4],
    [6, 4],
    [1, 5],
    [3, 6],
    [0, 7],
    [6, 2],
    [5, 7],
    [4, 8],
    [0, 6],
    [2, 7],
    [5, 1],
    [4, 7],
    [5, 7],
    [1, 6],
    [5, 8],
    [0, 8],
    [6, 0],
];
const GOLDEN_LOADS: [u64; 9] = [6, 6, 8, 7, 8, 7, 7, 7, 8];

fn build_error(pool: PoolSpec, rule: Option<RuleSpec>) -> MapErrorKind {
    let error = build_refused(pool, rule);
    assert_eq!(error.subject, Subject::Pool("balanced".into()), "{error}");
    error.kind
}

/// The builder's refusal of `pool` (and `rule`, if given) on 8 devices in 4 hosts.
pub(crate) fn build_refused(pool: PoolSpec, rule: Option<RuleSpec>) -> optio_placement::MapError {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..8u32 {
        let host = format!("host{}", id / 2);
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &host)]));
    }
    builder = builder.replicated_rule(0, "replicated", "default", "host");
    if let Some(rule) = rule {
        builder = builder.rule(rule);
    }
    builder.pool(pool).build().expect_err("refused")
}

fn rule(id: u32, kind: RuleKind, steps: Vec<StepSpec>) -> RuleSpec {
    RuleSpec { id: RuleId(id), name: format!("rule{id}"), kind, min_size: 1, max_size: 10, steps }
}

#[test]
fn unsupported_settings_are_clear_errors() {
    let take = || StepSpec::Take { item: ItemRef::Name("default".into()), class: None };
    let choose =
        |leaf, indep, num, t: &str| StepSpec::Choose { leaf, indep, num, type_name: t.to_string() };
    let with_rule = |id: u32| {
        let mut pool = balanced_pool(1, 64, 2);
        pool.engine = EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(RuleId(id))) });
        pool
    };
    let cases = [
        (
            rule(1, RuleKind::Erasure, vec![take(), choose(true, true, 0, "host"), StepSpec::Emit]),
            "erasure-coded",
        ),
        (
            rule(
                1,
                RuleKind::Replicated,
                vec![take(), choose(false, false, 0, "host"), StepSpec::Emit],
            ),
            "must pick devices",
        ),
        (
            rule(
                1,
                RuleKind::Replicated,
                vec![
                    take(),
                    choose(false, false, 2, "host"),
                    choose(true, false, 1, "osd"),
                    StepSpec::Emit,
                ],
            ),
            "exactly one take",
        ),
    ];
    for (rule, expected) in cases {
        let kind = build_error(with_rule(1), Some(rule));
        let text = kind.to_string();
        assert!(text.contains("cannot be balanced") && text.contains(expected), "{text}");
    }
    // Ring pools have no PGs to balance.
    let mut ring = balanced_pool(1, 0, 2);
    ring.engine = EngineRef::Ring(RingSpec { vnode_bytes: None, failure_domain: None });
    let text = build_error(ring, None).to_string();
    assert!(text.contains("crush pools only"), "{text}");
    // The linear parameter means nothing to a balanced pool.
    let mut both = balanced_pool(1, 64, 2);
    both.balance.linear_param = optio_placement::LinearParamSpec::Auto;
    let text = build_error(both, None).to_string();
    assert!(text.contains("balance_param"), "{text}");
}

#[test]
fn keys_beyond_the_pool_place_nothing() {
    let map = cluster(0, 4, 2, false, balanced_pool(1, 16, 2));
    let placement = Placement::new(&map).expect("ok");
    let pool = placement.pool(PoolId(1)).expect("pool");
    let mut out = ReplicaSet::new();
    pool.place(16, &mut placement.scratch(), &mut out);
    assert!(out.is_empty());
    pool.place(u32::MAX, &mut placement.scratch(), &mut out);
    assert!(out.is_empty());
    // Objects reach their PG's set.
    let location = pool.locate("some-object");
    let seed = location.pg.expect("a PG").seed;
    assert_eq!(location.key, pool.pg_key(seed));
    assert_eq!(location.devices.devices().count(), 2);
}
