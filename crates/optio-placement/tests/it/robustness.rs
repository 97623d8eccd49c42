//! Proves: the builder never panics, whatever it is given — it returns a map or an error —
//! and a map it accepts never makes anything downstream panic: compiling it, placing keys and
//! names in every pool, running every rule with any result size, reweight vector and
//! choose_args set, and rebuilding it through `to_builder()` (which gives back an equal map).
//! Also: every one of a set of certainly-invalid edits of a valid map is refused.

use optio_placement::choice::{
    Candidates, ChoiceRequest, CompositeWeights, DeviceMetrics, Location, MetricsTable,
};
use optio_placement::crush::{CrushMap, CrushWork};
use optio_placement::{
    ActiveSpec, AttributedSpec, BalanceMethod, BucketAlg, BucketId, BucketSpec, BucketType,
    ChoiceSettings, ChooseArgSpec, ClusterMap, ClusterMapBuilder, CrushSpec, DeviceId, DeviceSpec,
    ElasticSpec, EngineRef, ItemId, ItemRef, LINEAR_PARAM_ONE, LinearParamSpec, MembershipSpec,
    Placement, PolicySpec, PoolBalanceSpec, PoolId, PoolSpec, PpsGenerator, ReplicaSet, RingSpec,
    RuleId, RuleKind, RuleRef, RuleSpec, Step, StepSpec, Tunables, TypeId, VersionSpec, Weight,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestRunner};

use crate::strategies::{key, shape, with_pools};

const NAMES: [&str; 10] = ["a", "b", "h1", "h2", "r1", "default", "osd.1", "osd.3", "x y", ""];
const TYPES: [&str; 6] = ["osd", "host", "rack", "root", "shelf", "row"];
const CLASSES: [&str; 3] = ["hdd", "ssd", "no such"];

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(&NAMES[..]).prop_map(String::from)
}

fn type_name() -> impl Strategy<Value = String> {
    prop::sample::select(&TYPES[..]).prop_map(String::from)
}

fn weight() -> impl Strategy<Value = Weight> {
    prop_oneof![
        12 => (0u32..=0x40000).prop_map(Weight),
        4 => Just(Weight::ZERO),
        4 => Just(Weight::ONE),
        1 => Just(Weight(u32::MAX)),
    ]
}

/// A reweight or primary affinity: rarely above 1.0.
fn fraction() -> impl Strategy<Value = Weight> {
    prop_oneof![
        12 => Just(Weight::ONE),
        6 => (0u32..=0x10000).prop_map(Weight),
        2 => Just(Weight::ZERO),
        1 => Just(Weight(0x10001)),
    ]
}

fn item_ref() -> impl Strategy<Value = ItemRef> {
    prop_oneof![name().prop_map(ItemRef::Name), (-12i32..12).prop_map(|id| ItemRef::Id(ItemId(id))),]
}

/// A device: usually a fresh id, a default name and a host/rack location; sometimes not.
fn device() -> impl Strategy<Value = DeviceSpec> {
    let location = prop_oneof![
        // Host hN always sits in rack r(N mod 2): consistent locations.
        8 => (0u8..5).prop_map(|h| vec![("host".to_string(), format!("h{h}")), ("rack".to_string(), format!("r{}", h % 2))]),
        2 => (0u8..3).prop_map(|h| vec![("host".to_string(), format!("solo{h}"))]),
        1 => Just(Vec::new()),
        1 => prop::collection::vec((type_name(), name()), 0..3),
    ];
    (
        prop_oneof![9 => Just(None), 1 => (0u32..16).prop_map(Some)],
        prop_oneof![9 => Just(String::new()), 1 => name()],
        (
            prop::option::of(weight()),
            prop::option::of(prop_oneof![Just(0u64), 1u64..1 << 42, Just(u64::MAX)]),
        ),
        (prop::bool::weighted(0.85), prop::bool::weighted(0.85), fraction(), fraction()),
        prop::option::of(prop::sample::select(&CLASSES[..2])),
        location,
    )
        .prop_map(
            |(id, name, (weight, capacity), (up, is_in, reweight, affinity), class, location)| {
                // `None` ids are filled in with fresh ones by `wild`.
                let mut device = DeviceSpec::new(id.unwrap_or(u32::MAX));
                device.name = name;
                device.weight = weight;
                device.capacity_bytes = capacity;
                device.up = up;
                device.is_in = is_in;
                device.reweight = Weight(reweight.0.min(0x10001));
                device.primary_affinity = Weight(affinity.0.min(0x10001));
                device.class = class.map(String::from);
                device.location = location;
                device
            },
        )
}

fn bucket() -> impl Strategy<Value = BucketSpec> {
    (
        prop::option::of(prop_oneof![(-24i32..=-1).prop_map(BucketId), Just(BucketId(3))]),
        (name(), type_name()),
        prop::sample::select(
            &[
                BucketAlg::Uniform,
                BucketAlg::List,
                BucketAlg::Tree,
                BucketAlg::Straw,
                BucketAlg::Straw2,
            ][..],
        ),
        prop_oneof![9 => Just(0u8), 1 => Just(1u8)],
        prop::collection::vec((item_ref(), prop::option::of(weight())), 0..5),
        prop::collection::vec(
            (
                prop::sample::select(&CLASSES[..]).prop_map(String::from),
                (-40i32..=-25).prop_map(BucketId),
            ),
            0..2,
        ),
    )
        .prop_map(|(id, (name, type_name), alg, hash, items, class_ids)| BucketSpec {
            id,
            name,
            type_name,
            alg,
            hash,
            items,
            class_ids,
        })
}

fn step() -> impl Strategy<Value = StepSpec> {
    prop_oneof![
        2 => (item_ref(), prop::option::of(prop::sample::select(&CLASSES[..]).prop_map(String::from)))
            .prop_map(|(item, class)| StepSpec::Take { item, class }),
        3 => (any::<bool>(), any::<bool>(), -3i32..7, type_name())
            .prop_map(|(leaf, indep, num, type_name)| StepSpec::Choose { leaf, indep, num, type_name }),
        2 => Just(StepSpec::Emit),
        1 => Just(StepSpec::Noop),
        2 => (0usize..6, prop_oneof![-3i32..40, Just(1000), Just(1001), Just(i32::MAX)]).prop_map(|(op, v)| StepSpec::Set(match op {
            0 => Step::SetChooseTries(v),
            1 => Step::SetChooseleafTries(v),
            2 => Step::SetChooseLocalTries(v),
            3 => Step::SetChooseLocalFallbackTries(v),
            4 => Step::SetChooseleafVaryR(v),
            _ => Step::SetChooseleafStable(v),
        })),
    ]
}

/// A rule: usually take default (maybe a class), one or two choices, emit; sometimes anything.
fn rule() -> impl Strategy<Value = RuleSpec> {
    let sane = (
        prop::option::of(prop::sample::select(&CLASSES[..2]).prop_map(String::from)),
        prop::collection::vec(
            (
                any::<bool>(),
                any::<bool>(),
                -1i32..4,
                prop::sample::select(&["host", "rack", "osd"][..]),
            ),
            1..3,
        ),
        prop::collection::vec(
            step().prop_filter("a set step", |s| matches!(s, StepSpec::Set(_))),
            0..2,
        ),
    )
        .prop_map(|(class, choices, sets)| {
            let mut steps = sets;
            steps.push(StepSpec::Take { item: ItemRef::Name("default".into()), class });
            for (leaf, indep, num, type_name) in choices {
                steps.push(StepSpec::Choose { leaf, indep, num, type_name: type_name.into() });
            }
            steps.push(StepSpec::Emit);
            steps
        });
    let steps = prop_oneof![4 => sane, 1 => prop::collection::vec(step(), 0..7)];
    (0u32..4, any::<bool>(), steps).prop_map(|(id, erasure, steps)| RuleSpec {
        id: RuleId(id),
        name: format!("rule{id}"),
        kind: if erasure { RuleKind::Erasure } else { RuleKind::Replicated },
        min_size: 1,
        max_size: 10,
        steps,
    })
}

/// A pool: usually a small crush pool on the default rule or a ring; sometimes anything.
fn pool() -> impl Strategy<Value = PoolSpec> {
    (
        0u32..4,
        (prop_oneof![1 => Just(0u32), 8 => 1u32..300], prop::option::of(0u32..300), prop_oneof![8 => 1u32..4, 1 => 0u32..7], prop::option::of(0u32..4)),
        prop_oneof![
            3 => prop::option::of(prop_oneof![(0u32..5).prop_map(|id| RuleRef::Id(RuleId(id))), name().prop_map(RuleRef::Name)])
                .prop_map(|rule| EngineRef::Crush(CrushSpec { rule })),
            2 => (prop::option::of(prop_oneof![1 => Just(0u64), 3 => Just(1u64 << 30), 3 => Just(1u64 << 33)]), prop::option::of(prop::sample::select(&["host", "rack", "shelf"][..]).prop_map(String::from)))
                .prop_map(|(vnode_bytes, failure_domain)| EngineRef::Ring(RingSpec { vnode_bytes, failure_domain })),
            1 => (
                prop::option::of(prop_oneof![1 => Just(0u64), 1 => Just(1u64), 3 => Just(1u64 << 30), 3 => Just(1u64 << 36)]),
                prop::option::of(0u32..7),
                prop::option::of(prop::sample::select(&["host", "rack", "zone", "shelf", "osd"][..]).prop_map(String::from)),
                (any::<bool>(), prop::option::of(prop_oneof![0u32..300, Just(u32::MAX)])),
                prop::option::of(prop::collection::vec((0u32..24, 0u32..70_000).prop_map(|(d, c)| (DeviceId(d), c)), 0..5)),
            )
                .prop_map(|(throttle_bytes, sector_size, zone_type, (distinct_zones, bandwidth_tolerance_percent), sector_base)| EngineRef::Attributed(AttributedSpec {
                    throttle_bytes, sector_size, zone_type, distinct_zones, bandwidth_tolerance_percent,
                    selection: (bandwidth_tolerance_percent.unwrap_or(0) % 2 == 1).then_some(optio_placement::SectorSelection::Rendezvous),
                    sector_base,
                })),
            1 => (prop::option::of(0u32..8), prop::option::of(prop_oneof![Just(0u32), Just(1u32), 2u32..5000, Just(1u32 << 16), Just(u32::MAX)]))
                .prop_map(|(primaries, scale)| EngineRef::Elastic(ElasticSpec { primaries, scale })),
        ],
        any::<bool>(),
        (prop_oneof![1 => Just(0u32), 8 => 1u32..5, 1 => 5u32..12], 0usize..10, prop_oneof![8 => Just(950_000u32), 1 => Just(0u32), 1 => 0u32..1_100_000]),
    )
        .prop_map(|(id, (pg_num, pgp_num, size, min_size), engine, hashpspool, (choices, policy, full_ppm))| PoolSpec {
            id: PoolId(id),
            name: format!("pool{id}"),
            pg_num: if matches!(engine, EngineRef::Crush(CrushSpec { .. })) { pg_num.max(u32::from(pg_num == 0 && id % 2 == 0)) } else { pg_num },
            pgp_num: pgp_num.filter(|_| id == 3),
            size,
            min_size: min_size.filter(|m| *m <= size),
            engine,
            hashpspool,
            // Some pools erasure-coded: K = size - 1 data chunks and one parity chunk.
            erasure: (id % 5 == 4 && size >= 2).then(|| optio_placement::ErasureParams { k: size - 1, m: 1, stripe_unit_bytes: 4096 }),
            choice: ChoiceSettings {
                choices,
                policy: match optio_placement::choice::POLICY_NAMES.get(policy) {
                    Some(&"composite") => PolicySpec::Composite(CompositeWeights { space: id % 2, latency: 1, ..CompositeWeights::default() }),
                    Some(name) => PolicySpec::from_name(name).expect("a known name"),
                    None => PolicySpec::First,
                },
                full_ppm,
            },
            balance: PoolBalanceSpec {
                pps: if id % 3 == 0 { PpsGenerator::Congruential } else { PpsGenerator::Ceph },
                linear_param: LinearParamSpec::Fixed(LINEAR_PARAM_ONE),
                balanced: match id % 4 {
                    1 => BalanceMethod::HistoryFree,
                    3 => BalanceMethod::Incremental,
                    _ => BalanceMethod::Off,
                },
                state: None,
            },
        })
}

/// A membership: usually none; else ranks and versions naming mostly existing devices.
fn membership() -> impl Strategy<Value = Option<MembershipSpec>> {
    let device = prop_oneof![
        6 => (16i32..20).prop_map(|id| ItemRef::Id(ItemId(id))),
        1 => item_ref(),
    ];
    let active = prop_oneof![
        2 => (0u32..10).prop_map(ActiveSpec::FirstRanks),
        1 => prop::collection::vec(device.clone(), 0..5).prop_map(ActiveSpec::Devices),
    ];
    let version = (prop::option::of(0u64..12), active)
        .prop_map(|(version, active)| VersionSpec { version, active });
    let membership = (prop::collection::vec(device, 0..4), prop::collection::vec(version, 0..4))
        .prop_map(|(order, versions)| MembershipSpec { order, versions });
    prop_oneof![5 => Just(None), 1 => membership.prop_map(Some)]
}

fn tunables() -> impl Strategy<Value = Tunables> {
    prop_oneof![
        3 => Just(Tunables::optimal()),
        2 => Just(Tunables::legacy()),
        1 => (0u32..1002, 0u32..1002, 0u32..1002, 0u32..3, 0u8..34, 0u8..3, 0u8..3).prop_map(|(lt, lf, tt, d, v, s, c)| Tunables {
            choose_local_tries: lt,
            choose_local_fallback_tries: lf,
            choose_total_tries: tt,
            chooseleaf_descend_once: d,
            chooseleaf_vary_r: v,
            chooseleaf_stable: s,
            straw_calc_version: c,
            allowed_bucket_algs: 54,
        }),
    ]
}

fn choose_args() -> impl Strategy<Value = Vec<(i64, Vec<ChooseArgSpec>)>> {
    let arg = (
        item_ref(),
        prop::option::of(prop::collection::vec(-20i32..20, 0..4)),
        prop::collection::vec(prop::collection::vec(weight(), 0..4), 0..3),
    )
        .prop_map(|(bucket, ids, weight_set)| ChooseArgSpec { bucket, ids, weight_set });
    prop::collection::vec(
        (prop_oneof![Just(-1i64), 0i64..3], prop::collection::vec(arg, 0..3)),
        0..2,
    )
}

fn types() -> impl Strategy<Value = Vec<BucketType>> {
    prop_oneof![
        4 => Just(Vec::new()),
        1 => prop::collection::vec((0u16..5, type_name()), 1..5)
            .prop_map(|types| types.into_iter().map(|(id, name)| BucketType { id: TypeId(id), name }).collect()),
    ]
}

/// Anything at all, biased towards maps that are valid (a third or so) so that the
/// downstream checks see many accepted maps; the rest exercises the builder's refusals.
fn wild() -> impl Strategy<Value = ClusterMapBuilder> {
    (
        types(),
        tunables(),
        prop::collection::vec(device(), 0..12),
        prop_oneof![3 => Just(Vec::new()), 1 => prop::collection::vec(bucket(), 1..4)],
        prop::collection::vec(rule(), 0..3),
        prop::collection::vec(pool(), 0..3),
        (prop_oneof![3 => Just(Vec::new()), 1 => choose_args()], membership()),
    )
        .prop_map(
            |(
                types,
                tunables,
                mut devices,
                buckets,
                mut rules,
                pools,
                (choose_args, membership),
            )| {
                // Fresh ids for devices without one; rules and pools keep their first id only.
                let mut next = 16;
                for device in &mut devices {
                    if device.id.0 == u32::MAX {
                        device.id = DeviceId(next);
                        next += 1;
                    }
                }
                rules.dedup_by_key(|r| r.id);
                ClusterMapBuilder {
                    types,
                    tunables,
                    devices,
                    buckets,
                    rules,
                    pools,
                    choose_args,
                    membership,
                    ..ClusterMapBuilder::default()
                }
            },
        )
}

/// [`wild`] inputs, three in five of them tamed: device fields and tunables made valid, so
/// that the parts that remain random (hierarchy, rules, pools, choose_args) decide.
fn inputs() -> impl Strategy<Value = ClusterMapBuilder> {
    (wild(), prop::bool::weighted(0.6)).prop_map(|(mut builder, tame)| {
        if tame {
            builder.types.clear();
            builder.tunables = Tunables::optimal();
            for device in &mut builder.devices {
                device.name.clear();
                device.reweight = Weight(device.reweight.0.min(0x10000));
                device.primary_affinity = Weight(device.primary_affinity.0.min(0x10000));
                device.capacity_bytes = device.capacity_bytes.filter(|c| *c < 1 << 50);
                device.weight = device.weight.filter(|w| w.0 < 0x100_0000);
                device
                    .location
                    .retain(|(t, n)| t != "osd" && t != "shelf" && !n.is_empty() && n != "x y");
            }
            builder.devices.sort_by_key(|d| d.id);
            builder.devices.dedup_by_key(|d| d.id);
            builder.buckets.retain(|b| b.id.is_none_or(|id| id.0 < 0) && b.hash == 0);
        }
        builder
    })
}

/// Everything a caller can do with an accepted map, none of which may panic.
fn exercise(map: &ClusterMap, seed: u32) {
    let rebuilt = map.to_builder().build().expect("an accepted map rebuilds");
    assert_eq!(&rebuilt, map, "to_builder().build() gives back an equal map");
    let placement = Placement::new(map).expect("an accepted map compiles");
    let mut scratch = placement.scratch();
    let mut out = ReplicaSet::new();
    let mut candidates = Candidates::new();
    let mut metrics = MetricsTable::new(map.max_devices());
    for (i, device) in map.devices().iter().enumerate() {
        let space_ppm = key(seed, u32::try_from(i).expect("few devices")) % 1_100_000;
        let _ = metrics.set(
            device.id,
            DeviceMetrics { space_ppm, up: i % 7 != 3, ..DeviceMetrics::default() },
        );
    }
    for pool in placement.pools() {
        for i in 0..32 {
            pool.place(key(seed, i), &mut scratch, &mut out);
            assert!(out.len() <= pool.pool().size as usize);
            pool.place_raw(key(seed, i), &mut scratch, &mut out);
        }
        for name in ["", "a", "obj-1", "\u{1f600}"] {
            let _ = pool.locate(name);
            pool.candidates(name, &mut scratch, &mut candidates);
            assert!(candidates.len() <= pool.choice().choices as usize);
            let client: Location = "host=h1".parse().expect("valid");
            let request = ChoiceRequest { policy: None, client: Some(&client) };
            if let Ok(chosen) = pool.choose(&candidates, &metrics, &request) {
                assert!(usize::from(chosen.key.index) < candidates.len());
            }
        }
        // Elastic pools: as of every version; attributed pools: batches.
        for version in map.membership().map(|m| m.versions.clone()).unwrap_or_default() {
            pool.place_as_of(version.version, key(seed, 0), &mut out);
            assert!(out.len() <= pool.pool().size as usize);
        }
        if let Some(ring) = pool.attributed() {
            let keys: Vec<u32> = (0..40).map(|i| key(seed, i)).collect();
            let mut sets = vec![ReplicaSet::new(); keys.len()];
            ring.place_batch(&keys, pool.pool().size as usize, &mut sets);
            for (k, set) in keys.iter().zip(&sets) {
                pool.place(*k, &mut scratch, &mut out);
                assert_eq!(&out, set, "key {k:#x}: batch and single lookups differ");
            }
        }
    }
    let crush = CrushMap::new(map);
    let mut work = CrushWork::default();
    let full = map.reweight_vector();
    let short = vec![0x8000u32; (map.max_devices() / 2) as usize];
    let ids: Vec<i64> = map.choose_args().iter().map(|c| c.id).chain([5]).collect();
    for rule in map.rules() {
        for size in [0usize, 1, 3, 8] {
            let mut result = vec![0i32; size];
            for weights in [&full, &short] {
                for id in &ids {
                    for x in 0..8 {
                        let n = crush.do_rule(
                            rule.id,
                            key(seed, x),
                            &mut result,
                            weights,
                            crush.choose_args_exact(*id),
                            &mut work,
                        );
                        assert!(n <= size);
                        for &item in &result[..n] {
                            assert!(
                                item == optio_placement::ITEM_NONE
                                    || map.item_name(ItemId(item)).is_some()
                            );
                        }
                    }
                }
            }
        }
    }
    let _ = map.device(DeviceId(u32::MAX));
    let _ = map.bucket(BucketId(i32::MIN));
}

#[test]
fn the_builder_never_panics_and_accepted_maps_are_safe() {
    let config = Config { cases: 1500, rng_seed: RngSeed::Random, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let accepted = std::cell::Cell::new(0u32);
    let refusals = std::cell::RefCell::new(std::collections::BTreeMap::<String, u32>::new());
    runner
        .run(&(inputs(), any::<u32>()), |(builder, seed)| {
            match builder.build() {
                Ok(map) => {
                    accepted.set(accepted.get() + 1);
                    exercise(&map, seed);
                }
                Err(error) => {
                    let kind = match &error.kind {
                        optio_placement::MapErrorKind::OutOfRange { field, .. } => {
                            format!("OutOfRange {field}")
                        }
                        other => format!("{other:?}")
                            .split([' ', '(', '{'])
                            .next()
                            .unwrap_or("")
                            .to_string(),
                    };
                    *refusals.borrow_mut().entry(kind).or_default() += 1;
                }
            }
            Ok(())
        })
        .expect("no panics");
    eprintln!("accepted {}, refused {:?}", accepted.get(), refusals.borrow());
    // Not vacuous: a fair share of the wild inputs are valid maps, and refusals are varied.
    assert!(accepted.get() >= 100, "only {} of 1500 inputs were accepted", accepted.get());
    assert!(refusals.borrow().len() >= 8, "refusals of few kinds: {:?}", refusals.borrow());
}

/// Edits that make any valid map invalid.
#[derive(Clone, Copy, Debug)]
enum Corruption {
    DuplicateDeviceId,
    DuplicateDeviceName,
    DeviceNamedLikeABucket,
    UnknownItemInBucket,
    BucketCycle,
    DeviceWithTwoParents,
    WeightOverflow,
    ReweightAboveOne,
    PoolTooLarge,
    UnknownRule,
    UnknownClass,
    UnsupportedHash,
    UnequalUniform,
    CrushPoolWithoutPgs,
    PgpAbovePg,
    ZeroVnodeBytes,
    DuplicatePoolId,
    DuplicateRuleName,
    VaryRTooLarge,
    TunableTooLarge,
    ChooseArgsWrongLength,
}

const CORRUPTIONS: [Corruption; 21] = [
    Corruption::DuplicateDeviceId,
    Corruption::DuplicateDeviceName,
    Corruption::DeviceNamedLikeABucket,
    Corruption::UnknownItemInBucket,
    Corruption::BucketCycle,
    Corruption::DeviceWithTwoParents,
    Corruption::WeightOverflow,
    Corruption::ReweightAboveOne,
    Corruption::PoolTooLarge,
    Corruption::UnknownRule,
    Corruption::UnknownClass,
    Corruption::UnsupportedHash,
    Corruption::UnequalUniform,
    Corruption::CrushPoolWithoutPgs,
    Corruption::PgpAbovePg,
    Corruption::ZeroVnodeBytes,
    Corruption::DuplicatePoolId,
    Corruption::DuplicateRuleName,
    Corruption::VaryRTooLarge,
    Corruption::TunableTooLarge,
    Corruption::ChooseArgsWrongLength,
];

fn corrupt(map: &ClusterMap, corruption: Corruption, pick: usize) -> ClusterMapBuilder {
    let mut b = map.to_builder();
    let device = pick % b.devices.len();
    let device_id = b.devices[device].id;
    let host = b.buckets.iter().position(|x| x.type_name == "host").expect("a host");
    let empty = |name: &str, type_name: &str, items: Vec<(ItemRef, Option<Weight>)>| BucketSpec {
        id: None,
        name: name.into(),
        type_name: type_name.into(),
        alg: BucketAlg::Straw2,
        hash: 0,
        items,
        class_ids: Vec::new(),
    };
    match corruption {
        Corruption::DuplicateDeviceId => {
            let mut copy = b.devices[device].clone();
            copy.name = "copy".into();
            b.devices.push(copy);
        }
        Corruption::DuplicateDeviceName => {
            let mut other = DeviceSpec::new(map.max_devices() + 1);
            other.name = b.devices[device].name.clone();
            b.devices.push(other);
        }
        Corruption::DeviceNamedLikeABucket => {
            let mut other = DeviceSpec::new(map.max_devices() + 1);
            other.name = b.buckets[host].name.clone();
            b.devices.push(other);
        }
        Corruption::UnknownItemInBucket => {
            b.buckets[host].items.push((ItemRef::Name("nowhere".into()), None))
        }
        Corruption::BucketCycle => {
            let root = ItemRef::Name("default".into());
            b.buckets[host].items.push((root, None));
        }
        Corruption::DeviceWithTwoParents => {
            b.buckets.push(empty(
                "second",
                "rack",
                vec![(ItemRef::Id(ItemId(device_id.0 as i32)), None)],
            ));
        }
        Corruption::WeightOverflow => {
            // Any two devices now add up to more than 16.16 can hold.
            for d in &mut b.devices {
                d.weight = Some(Weight(0x8000_0001));
            }
            for bucket in &mut b.buckets {
                for (item, weight) in &mut bucket.items {
                    if matches!(item, ItemRef::Id(ItemId(id)) if *id >= 0) {
                        *weight = Some(Weight(0x8000_0001));
                    }
                }
            }
        }
        Corruption::ReweightAboveOne => b.devices[device].reweight = Weight(0x10001),
        Corruption::PoolTooLarge => b.pools[0].size = 5, // at most 4 hosts
        Corruption::UnknownRule => {
            b.pools[0].engine = EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(RuleId(77))) })
        }
        Corruption::UnknownClass => {
            b.rules[0].steps[0] =
                StepSpec::Take { item: ItemRef::Name("default".into()), class: Some("nvme".into()) }
        }
        Corruption::UnsupportedHash => b.buckets[host].hash = 3,
        Corruption::UnequalUniform => {
            b.buckets[host].alg = BucketAlg::Uniform;
            b.buckets[host]
                .items
                .push((ItemRef::Id(ItemId(map.max_devices() as i32)), Some(Weight(0x1234))));
            b.devices.push(DeviceSpec::new(map.max_devices()).weight(Weight(0x1234)));
        }
        Corruption::CrushPoolWithoutPgs => b.pools[0].pg_num = 0,
        Corruption::PgpAbovePg => b.pools[0].pgp_num = Some(b.pools[0].pg_num + 1),
        Corruption::ZeroVnodeBytes => {
            b.pools[2].engine =
                EngineRef::Ring(RingSpec { vnode_bytes: Some(0), failure_domain: None })
        }
        Corruption::DuplicatePoolId => {
            let mut pool = b.pools[1].clone();
            pool.name = "again".into();
            pool.id = b.pools[0].id;
            b.pools.push(pool);
        }
        Corruption::DuplicateRuleName => {
            let mut rule = b.rules[0].clone();
            rule.id = RuleId(9);
            b.rules.push(rule);
        }
        Corruption::VaryRTooLarge => {
            b.rules[0].steps.insert(0, StepSpec::Set(Step::SetChooseleafVaryR(40)))
        }
        Corruption::TunableTooLarge => b.tunables.choose_total_tries = 5000,
        Corruption::ChooseArgsWrongLength => {
            let bucket = ItemRef::Name(b.buckets[host].name.clone());
            let size = b.buckets[host].items.len();
            b.choose_args.push((
                0,
                vec![ChooseArgSpec {
                    bucket,
                    ids: None,
                    weight_set: vec![vec![Weight::ONE; size + 1]],
                }],
            ));
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn certainly_invalid_edits_are_refused(
        // At most 4 hosts (so size 5 is too large), at least 2 with weight (size 2 fits).
        shape in shape(false).prop_filter("2 to 4 hosts", |s| {
            s.weighted_hosts() >= 2 && s.racks.iter().flatten().count() <= 4
        }),
        corruption in prop::sample::select(&CORRUPTIONS[..]),
        pick in any::<usize>(),
    ) {
        let map = with_pools(shape.builder(), 2).build().expect("a valid map");
        // The pick's low 32 bits seed the lookups.
        exercise(&map, u32::try_from(pick & 0xffff_ffff).expect("masked to 32 bits"));
        let result = corrupt(&map, corruption, pick).build();
        prop_assert!(result.is_err(), "{:?} was accepted", corruption);
    }
}
