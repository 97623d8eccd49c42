//! Proves seed 002's optimised CRUSH (an Optio extension): a linear bucket picks
//! `(⌊pps / p⌋ + retries) mod size` exactly; maps without linear buckets map exactly as Ceph
//! whatever the parameter; the adaptive search beats the paper's numbers on its cluster
//! (40 OSDs in 4 hosts, 2048 PGs: ≤ 6.50 with 2 replicas, ≤ 5.17 with 3) and is stored with
//! the pool; out devices are never chosen; invalid settings are clear errors; outputs are
//! pinned by golden tests.

use optio_placement::change::linear::{pg_counts, tune_linear_param};
use optio_placement::crush::{CrushMap, CrushWork};
use optio_placement::pg::congruential_pps;
use optio_placement::{
    BucketAlg, ClusterMap, ClusterMapBuilder, DeviceSpec, EngineRef, ItemRef, LINEAR_PARAM_ONE,
    LinearParamSpec, Placement, PoolId, PoolSpec, PpsGenerator, ReplicaSet, RingSpec, RuleId,
    RuleKind, RuleSpec, StepSpec, Weight,
};
use proptest::prelude::*;

/// 4 hosts × 10 OSDs, the hosts `linear`, pool 1 with the congruential generator and
/// `param`.
fn paper_cluster(size: u32, param: LinearParamSpec) -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..40u32 {
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &format!("host{}", id / 10))]));
    }
    let base =
        builder.replicated_rule(0, "replicated_rule", "default", "host").build().expect("valid");
    let mut builder = base.to_builder();
    for bucket in &mut builder.buckets {
        if bucket.type_name == "host" {
            bucket.alg = BucketAlg::Linear;
        }
    }
    let mut pool = PoolSpec::crush(1, "rbd", 2048, size);
    pool.balance.pps = PpsGenerator::Congruential;
    pool.balance.linear_param = param;
    builder.pool(pool).build().expect("valid")
}

fn stdev(counts: &[u64]) -> f64 {
    let values: Vec<f64> = counts.iter().map(|&c| c as f64).collect();
    optio_placement::stats::Summary::of(&values).stdev
}

#[test]
fn the_search_beats_the_papers_numbers_and_is_stored_with_the_pool() {
    for (size, paper) in [(2, 6.50), (3, 5.17)] {
        let map = paper_cluster(size, LinearParamSpec::Auto);
        let pool = &map.pools()[0];
        let param = pool.balance().linear_param;
        assert!(param >= LINEAR_PARAM_ONE);
        let crush = CrushMap::new(&map);
        let sd = stdev(&pg_counts(&map, &crush, pool, param));
        assert!(sd <= paper, "{size} replicas: stdev {sd} with p = {}", f64::from(param) / 65536.0);
        // The search result is what the builder stored, and it is the best it tried.
        let tuning = tune_linear_param(&map, pool);
        assert_eq!(tuning.param, param);
        assert!((tuning.stdev - sd).abs() < 1e-9);
        assert!(tuning.stdev <= tuning.stdev_at_one);
        // A changed map keeps the stored parameter (no new search: placement stays put).
        let mut builder = map.to_builder();
        builder.devices[7].reweight = Weight(0x8000);
        let changed = builder.build().expect("valid");
        assert_eq!(changed.pools()[0].balance().linear_param, param);
        // Stock CRUSH on the same cluster spreads like random placement.
        let mut builder = ClusterMapBuilder::new();
        for id in 0..40u32 {
            builder =
                builder.device(DeviceSpec::new(id).at(&[("host", &format!("host{}", id / 10))]));
        }
        let stock = builder
            .replicated_rule(0, "r", "default", "host")
            .pool(PoolSpec::crush(1, "rbd", 2048, size))
            .build()
            .expect("valid");
        let stock_sd =
            stdev(&pg_counts(&stock, &CrushMap::new(&stock), &stock.pools()[0], LINEAR_PARAM_ONE));
        assert!(stock_sd > 8.0, "{size}: stock {stock_sd}");
    }
}

#[test]
fn a_linear_bucket_takes_consecutive_items_from_the_quotient() {
    // take host0; choose firstn 3 type osd: the first try of every replica is the same
    // residue, so collisions step to the next items: i, i+1, i+2 (mod 5).
    let mut builder = ClusterMapBuilder::new();
    for id in 0..10u32 {
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &format!("host{}", id / 5))]));
    }
    let base = builder.replicated_rule(0, "r", "default", "host").build().expect("valid");
    let mut builder = base.to_builder();
    for bucket in &mut builder.buckets {
        if bucket.name == "host1" {
            bucket.alg = BucketAlg::Linear;
        }
    }
    builder.rules.push(RuleSpec {
        id: RuleId(1),
        name: "in_host1".into(),
        kind: RuleKind::Replicated,
        min_size: 1,
        max_size: 10,
        steps: vec![
            StepSpec::Take { item: ItemRef::Name("host1".into()), class: None },
            StepSpec::Choose { leaf: false, indep: false, num: 0, type_name: "osd".into() },
            StepSpec::Emit,
        ],
    });
    let map = builder.build().expect("valid");
    let crush = CrushMap::new(&map);
    let host1 = map.bucket_by_name("host1").expect("host1");
    let items: Vec<i32> = host1.items.iter().map(|i| i.0).collect();
    let weights = map.reweight_vector();
    let mut work = CrushWork::new(&crush);
    let mut out = [0i32; 3];
    for (x, param) in [(0u32, 0x10000u32), (7, 0x10000), (12345, 0x28000), (999_999, 0x31234)] {
        let n = crush.do_rule_linear(RuleId(1), x, &mut out, &weights, None, param, &mut work);
        assert_eq!(n, 3);
        let first = (((u64::from(x) << 16) / u64::from(param)) % 5) as usize;
        let expected: Vec<i32> = (0..3).map(|k| items[(first + k) % 5]).collect();
        assert_eq!(out.to_vec(), expected, "x {x} p {param:#x}");
    }
}

proptest! {
    /// Linear buckets are the only thing the parameter changes: a Ceph map maps the same
    /// with any parameter (so Ceph-compatible pools stay bit-exact).
    #[test]
    fn maps_without_linear_buckets_ignore_the_parameter(x in any::<u32>(), param in any::<u32>()) {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..12u32 {
            builder = builder.device(DeviceSpec::new(id).at(&[("host", &format!("host{}", id / 3))]));
        }
        let map = builder.replicated_rule(0, "r", "default", "host").build().expect("valid");
        let crush = CrushMap::new(&map);
        let weights = map.reweight_vector();
        let mut work = CrushWork::new(&crush);
        let (mut a, mut b) = ([0i32; 3], [0i32; 3]);
        let na = crush.do_rule(RuleId(0), x, &mut a, &weights, None, &mut work);
        let nb = crush.do_rule_linear(RuleId(0), x, &mut b, &weights, None, param, &mut work);
        prop_assert_eq!((na, a), (nb, b));
    }

    /// Out and zero-reweight devices of linear hosts are never chosen; sets stay distinct.
    #[test]
    fn out_devices_in_linear_hosts_are_never_chosen(
        out in prop::collection::vec(0u32..40, 1..6),
        param in 0x10000u32..0x50000,
        size in 2u32..=3,
    ) {
        let map = paper_cluster(size, LinearParamSpec::Fixed(param));
        let mut builder = map.to_builder();
        for &id in &out {
            builder.devices[id as usize].is_in = false;
        }
        let map = builder.build().expect("valid");
        let placement = Placement::new(&map).expect("compiles");
        let pool = placement.pool(PoolId(1)).expect("pool");
        let mut scratch = placement.scratch();
        let mut set = ReplicaSet::new();
        for seed in 0..256 {
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            let devices: Vec<u32> = set.devices().map(|d| d.0).collect();
            for (n, d) in devices.iter().enumerate() {
                prop_assert!(!out.contains(d), "seed {}: out device {} in {:?}", seed, d, devices);
                prop_assert!(!devices[..n].contains(d));
            }
        }
    }
}

/// Pinned placements of the paper's cluster with a fixed parameter.
#[test]
fn golden_seed002_placements() {
    let map = paper_cluster(3, LinearParamSpec::Fixed(0x24000));
    let placement = Placement::new(&map).expect("compiles");
    let pool = placement.pool(PoolId(1)).expect("pool");
    let mut scratch = placement.scratch();
    let mut set = ReplicaSet::new();
    let got: Vec<Vec<i32>> = (0..8)
        .map(|seed| {
            assert_eq!(pool.pg_key(seed), congruential_pps(PoolId(1), seed, 2048));
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            set.as_slice().to_vec()
        })
        .collect();
    let golden: Vec<Vec<i32>> = GOLDEN.iter().map(|s| s.to_vec()).collect();
    assert_eq!(got, golden, "got {got:?}");
}

const GOLDEN: [[i32; 3]; 8] = [
    [26, 36, 6],
    [14, 24, 34],
    [28, 18, 8],
    [5, 25, 15],
    [2, 32, 22],
    [39, 9, 19],
    [28, 18, 38],
    [14, 34, 4],
];

fn error_of(builder: ClusterMapBuilder) -> String {
    builder.build().expect_err("refused").to_string()
}

#[test]
fn invalid_settings_are_clear_errors() {
    // A linear bucket of unequal weights.
    let map = paper_cluster(2, LinearParamSpec::Fixed(LINEAR_PARAM_ONE));
    let mut builder = map.to_builder();
    builder.devices[0].weight = Some(Weight(0x20000));
    let host0 = builder.buckets.iter_mut().find(|b| b.name == "host0").expect("host0");
    host0.items[0].1 = Some(Weight(0x20000));
    let text = error_of(builder);
    assert!(text.contains("linear bucket") && text.contains("equal weight"), "{text}");
    // A parameter below 1.0.
    let mut builder = map.to_builder();
    builder.pools[0].balance.linear_param = LinearParamSpec::Fixed(0x8000);
    let text = error_of(builder);
    assert!(text.contains("balance_param") && text.contains("at least 1.0"), "{text}");
    // A parameter on a pool whose rule reaches no linear bucket.
    let mut builder = ClusterMapBuilder::new();
    for id in 0..8u32 {
        builder = builder.device(DeviceSpec::new(id).at(&[("host", &format!("host{}", id / 2))]));
    }
    let mut pool = PoolSpec::crush(1, "plain", 64, 2);
    pool.balance.linear_param = LinearParamSpec::Auto;
    let text = error_of(builder.clone().replicated_rule(0, "r", "default", "host").pool(pool));
    assert!(text.contains("reaches none"), "{text}");
    // Optio's settings on a ring pool.
    let mut ring = PoolSpec::crush(2, "ring", 0, 2);
    ring.engine = EngineRef::Ring(RingSpec { vnode_bytes: None, failure_domain: None });
    ring.balance.pps = PpsGenerator::Congruential;
    let text = error_of(builder.replicated_rule(0, "r", "default", "host").pool(ring));
    assert!(text.contains("crush pools only"), "{text}");
}
