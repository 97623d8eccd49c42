//! Proves that every format reads back what it wrote: Optio TOML keeps every map exactly;
//! Ceph text and JSON keep the part of a map Ceph can hold.

use optio_mapfile::{Format, ceph_json, ceph_text, detect, optio_toml};
use optio_placement::choice::{
    CHOICES_MAX, COMPOSITE_METRICS, COMPOSITE_WEIGHT_MAX, CompositeWeights, POLICY_NAMES,
};
use optio_placement::{
    ActiveSpec, AttributedSpec, BucketAlg, BucketId, BucketSpec, BucketType, ChoiceSettings,
    ChooseArgSpec, ClusterMap, ClusterMapBuilder, CrushSpec, DeviceId, DeviceSpec, ElasticSpec,
    EngineRef, Epoch, ItemId, ItemRef, MembershipSpec, PolicySpec, PoolId, PoolSpec, RingSpec,
    RuleId, RuleKind, RuleRef, RuleSpec, Step, StepSpec, Tunables, TunablesProfile, TypeId,
    VersionSpec, Weight,
};
use proptest::prelude::*;

use crate::support::Rng;

const CLASSES: [&str; 3] = ["hdd", "ssd", "nvme"];

/// A weight that text maps hold exactly: a multiple of 1/8 (three decimals, single precision).
fn eighths(rng: &mut Rng, max: u64) -> Weight {
    Weight((rng.below(max * 8 + 1) as u32) << 13)
}

/// A random valid map (deterministic in `seed`), exercising every feature of the model.
pub fn sample_map(seed: u64) -> ClusterMap {
    let with_pools = !seed.is_multiple_of(4);
    match sample_builder(&mut Rng::new(seed), with_pools).build() {
        Ok(map) => map,
        // Random pools can ask more of a rule than the hierarchy offers; retry without.
        Err(_) => sample_builder(&mut Rng::new(seed), false)
            .build()
            .unwrap_or_else(|e| panic!("seed {seed}: the generator made an invalid map: {e}")),
    }
}

/// `count` sample maps.
pub fn sample_maps(count: u64) -> Vec<ClusterMap> {
    (0..count).map(|seed| sample_map(seed * 7919 + 1)).collect()
}

fn sample_builder(rng: &mut Rng, with_pools: bool) -> ClusterMapBuilder {
    let mut builder = ClusterMapBuilder::new();
    builder.epoch = Epoch(rng.below(1000));
    builder.tunables = match rng.below(3) {
        0 => TunablesProfile::ALL[rng.below(5) as usize].tunables(),
        1 => Tunables {
            choose_local_tries: rng.below(4) as u32,
            choose_local_fallback_tries: rng.below(6) as u32,
            choose_total_tries: rng.below(100) as u32,
            chooseleaf_descend_once: rng.below(2) as u32,
            chooseleaf_vary_r: rng.below(3) as u8,
            chooseleaf_stable: rng.below(2) as u8,
            straw_calc_version: rng.below(2) as u8,
            allowed_bucket_algs: rng.below(64) as u32,
        },
        _ => Tunables::optimal(),
    };
    let custom_types = rng.below(2) == 0;
    if custom_types {
        builder.types = [(0, "osd"), (1, "host"), (3, "rack"), (10, "root")]
            .iter()
            .map(|(id, name)| BucketType { id: TypeId(*id), name: name.to_string() })
            .collect();
    }
    let (host, rack, root) = ("host", "rack", "root");
    let device_count = rng.below(30);
    let mut next_id = 0u32;
    let located = rng.below(2) == 0;
    let host_count = 1 + rng.below(5);
    let mut host_items: Vec<Vec<(ItemRef, Option<Weight>)>> = vec![Vec::new(); host_count as usize];
    for _ in 0..device_count {
        next_id += 1 + rng.below(3) as u32;
        let mut device = DeviceSpec::new(next_id);
        if rng.below(4) == 0 {
            device.name = format!("disk{next_id}");
        }
        if rng.below(3) != 0 {
            device.class = Some(CLASSES[rng.below(3) as usize].to_string());
        }
        device.weight = Some(eighths(rng, 20));
        if rng.below(3) == 0 {
            device.capacity_bytes = Some(rng.below(1 << 45));
        }
        device.bandwidth_mb_per_s = rng.below(3000) as u32;
        device.up = rng.below(5) != 0;
        device.is_in = rng.below(5) != 0;
        device.reweight = Weight(rng.below(0x10001) as u32);
        device.primary_affinity = Weight(rng.below(0x10001) as u32);
        if rng.below(2) == 0 {
            device.addr = Some(format!("10.0.0.{}:{}", rng.below(256), 6800 + rng.below(100)));
        }
        // The epochs that marked it up and down, when recorded (derived without drawing from
        // `rng`, so that the other maps stay as they were): at most the map's epoch.
        let epoch = builder.epoch.0;
        match next_id % 4 {
            1 => device.up_from = Some(Epoch(epoch / 2)),
            2 => (device.up_from, device.down_at) = (Some(Epoch(epoch)), Some(Epoch(epoch / 3))),
            3 => device.down_at = Some(Epoch(epoch)),
            _ => {}
        }
        let placed = rng.below(8) != 0;
        let host_index = rng.below(host_count) as usize;
        if placed && located {
            device.location = vec![
                (host.to_string(), format!("h{host_index}")),
                (rack.to_string(), format!("r{}", host_index % 2)),
            ];
        } else if placed {
            host_items[host_index].push((ItemRef::Name(device_name(&device)), None));
        }
        builder.devices.push(device);
    }
    if !located {
        let algs = [
            BucketAlg::Straw2,
            BucketAlg::Straw2,
            BucketAlg::Straw,
            BucketAlg::List,
            BucketAlg::Tree,
            BucketAlg::Uniform,
        ];
        let mut rack_items: Vec<Vec<(ItemRef, Option<Weight>)>> = vec![Vec::new(); 2];
        for (index, items) in host_items.into_iter().enumerate() {
            let alg = algs[rng.below(algs.len() as u64) as usize];
            let items = if alg == BucketAlg::Uniform {
                let weight = eighths(rng, 4);
                items.into_iter().map(|(item, _)| (item, Some(weight))).collect()
            } else {
                items
            };
            let name = format!("h{index}");
            let weight = (rng.below(4) == 0).then(|| eighths(rng, 100));
            rack_items[index % 2].push((ItemRef::Name(name.clone()), weight));
            builder.buckets.push(BucketSpec {
                id: (rng.below(3) != 0).then(|| BucketId(-1 - index as i32 * 2)),
                name,
                type_name: host.to_string(),
                alg,
                hash: 0,
                items,
                class_ids: Vec::new(),
            });
        }
        for (index, items) in rack_items.into_iter().enumerate() {
            builder.buckets.push(BucketSpec {
                id: None,
                name: format!("r{index}"),
                type_name: rack.to_string(),
                alg: BucketAlg::Straw2,
                hash: 0,
                items,
                class_ids: Vec::new(),
            });
        }
        builder.buckets.push(BucketSpec {
            id: None,
            name: "default".to_string(),
            type_name: root.to_string(),
            alg: BucketAlg::Straw2,
            hash: 0,
            items: vec![(ItemRef::Name("r0".into()), None), (ItemRef::Name("r1".into()), None)],
            class_ids: Vec::new(),
        });
    }
    let has_root = !located || builder.devices.iter().any(|d| !d.location.is_empty());
    if has_root {
        builder.rules.push(RuleSpec {
            id: RuleId(0),
            name: "replicated_rule".into(),
            kind: RuleKind::Replicated,
            min_size: 1,
            max_size: 10,
            steps: vec![
                StepSpec::Take { item: ItemRef::Name("default".into()), class: None },
                StepSpec::Choose { leaf: true, indep: false, num: 0, type_name: host.into() },
                StepSpec::Emit,
            ],
        });
        let class = builder.devices.iter().find_map(|d| d.class.clone());
        if let Some(class) = class {
            builder.rules.push(RuleSpec {
                id: RuleId(2 + rng.below(5) as u32),
                name: format!("ec_{class}"),
                kind: if rng.below(4) == 0 { RuleKind::Other(7) } else { RuleKind::Erasure },
                min_size: rng.below(4) as u32,
                max_size: rng.below(20) as u32,
                steps: vec![
                    StepSpec::Set(Step::SetChooseleafTries(5)),
                    StepSpec::Set(Step::SetChooseTries(100)),
                    StepSpec::Set(Step::SetChooseLocalTries(rng.below(3) as i32)),
                    StepSpec::Set(Step::SetChooseLocalFallbackTries(0)),
                    StepSpec::Set(Step::SetChooseleafVaryR(1)),
                    StepSpec::Set(Step::SetChooseleafStable(1)),
                    StepSpec::Noop,
                    StepSpec::Take { item: ItemRef::Name("default".into()), class: Some(class) },
                    StepSpec::Choose { leaf: true, indep: true, num: 0, type_name: host.into() },
                    StepSpec::Emit,
                ],
            });
        }
        if rng.below(2) == 0 {
            let bucket = ItemRef::Name("default".into());
            let positions = rng.below(3) as usize;
            let set = ChooseArgSpec {
                bucket,
                ids: (rng.below(2) == 0).then(|| vec![-100, -101]),
                weight_set: (0..positions)
                    .map(|_| vec![eighths(rng, 50), eighths(rng, 50)])
                    .collect(),
            };
            let id = if rng.below(2) == 0 { -1 } else { rng.below(5) as i64 };
            // The located root has as many items as racks with devices; keep sizes right.
            if !located {
                builder.choose_args.push((id, vec![set]));
            }
        }
        if with_pools {
            let pg_num = 1 + rng.below(256) as u32;
            builder.pools.push(PoolSpec {
                id: PoolId(1 + rng.below(10) as u32),
                name: "rbd".into(),
                pg_num,
                pgp_num: None,
                size: 1,
                min_size: None,
                engine: EngineRef::Crush(CrushSpec {
                    rule: Some(RuleRef::Name("replicated_rule".into())),
                }),
                hashpspool: rng.below(4) != 0,
                choice: choice(rng, pg_num),
                balance: Default::default(),
                erasure: None,
            });
        }
    }
    if with_pools {
        builder.pools.push(PoolSpec {
            id: PoolId(20),
            name: "ring".into(),
            pg_num: rng.below(3) as u32 * 16,
            pgp_num: None,
            size: 1,
            min_size: None,
            engine: EngineRef::Ring(RingSpec {
                vnode_bytes: (rng.below(2) == 0).then(|| 1 + rng.below(1 << 40)),
                failure_domain: (rng.below(2) == 0).then(|| host.to_string()),
            }),
            hashpspool: true,
            choice: choice(rng, 0),
            balance: Default::default(),
            erasure: None,
        });
        add_attributed_and_elastic(rng, &mut builder);
    }
    builder
}

/// Valid choice settings, defaults half of the time: any policy (composites with random
/// weights), any full ratio in ppm.
fn choice(rng: &mut Rng, pg_num: u32) -> ChoiceSettings {
    if rng.below(2) == 0 {
        return ChoiceSettings::default();
    }
    let most = if pg_num == 0 { CHOICES_MAX } else { pg_num.min(CHOICES_MAX) };
    let name = POLICY_NAMES[rng.below(POLICY_NAMES.len() as u64) as usize];
    let policy = match PolicySpec::from_name(name).expect("a known name") {
        PolicySpec::Composite(_) => {
            let mut weights = CompositeWeights { local: 1, ..CompositeWeights::default() };
            for metric in COMPOSITE_METRICS {
                *weights.get_mut(metric).expect("known") = rng.below(4) as u32;
            }
            weights.space = 1 + rng.below(COMPOSITE_WEIGHT_MAX as u64) as u32;
            PolicySpec::Composite(weights)
        }
        other => other,
    };
    ChoiceSettings {
        choices: 1 + rng.below(most as u64) as u32,
        policy,
        full_ppm: 1 + rng.below(1_000_000) as u32,
    }
}

/// An attributed pool and, with devices, an elastic pool with a membership of ranks and
/// versions.
fn add_attributed_and_elastic(rng: &mut Rng, builder: &mut ClusterMapBuilder) {
    let base = (rng.below(3) == 0).then(|| {
        let mut base: Vec<(DeviceId, u32)> =
            builder.devices.iter().map(|d| (d.id, 1 + rng.below(40) as u32)).collect();
        base.push((DeviceId(500 + rng.below(100) as u32), 3)); // a device since removed
        base
    });
    builder.pools.push(PoolSpec {
        id: PoolId(21),
        name: "hetero".into(),
        pg_num: 0,
        pgp_num: None,
        size: 1 + rng.below(3) as u32,
        min_size: None,
        engine: EngineRef::Attributed(AttributedSpec {
            throttle_bytes: (rng.below(2) == 0).then(|| 1 + rng.below(1 << 42)),
            sector_size: (rng.below(2) == 0).then(|| 1 + rng.below(10) as u32),
            zone_type: (rng.below(3) == 0).then(|| "host".to_string()),
            distinct_zones: rng.below(2) == 0,
            bandwidth_tolerance_percent: (rng.below(2) == 0).then(|| rng.below(100) as u32),
            sector_base: base,
            selection: (rng.below(2) == 0).then_some(optio_placement::SectorSelection::Rendezvous),
        }),
        hashpspool: true,
        choice: choice(rng, 0),
        balance: Default::default(),
        erasure: None,
    });
    let n = builder.devices.len() as u64;
    if n == 0 {
        return;
    }
    let primaries = (rng.below(2) == 0).then(|| 1 + rng.below(n) as u32);
    builder.pools.push(PoolSpec {
        id: PoolId(22),
        name: "elastic".into(),
        pg_num: 0,
        pgp_num: None,
        size: 1 + rng.below(3) as u32,
        min_size: None,
        engine: EngineRef::Elastic(ElasticSpec {
            primaries,
            scale: (rng.below(2) == 0).then(|| 1 + rng.below(5000) as u32),
        }),
        hashpspool: true,
        choice: choice(rng, 0),
        balance: Default::default(),
        erasure: None,
    });
    if rng.below(3) == 0 {
        return; // the builder makes the default membership
    }
    // Ranks: the devices in a shuffled order (sometimes only some listed).
    let mut order: Vec<DeviceId> = builder.devices.iter().map(|d| d.id).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    order.truncate(rng.below(n + 1) as usize);
    let mut membership = MembershipSpec {
        order: order.iter().map(|d| ItemRef::Id(ItemId(d.0 as i32))).collect(),
        versions: Vec::new(),
    };
    // Every version keeps the primaries (at most all servers) active.
    let keep = u64::from(
        primaries.unwrap_or_else(|| optio_placement::engine::elastic::default_primaries(n as u32)),
    );
    let mut version = rng.below(10);
    for _ in 0..rng.below(4) {
        version += 1 + rng.below(3);
        let active = if rng.below(2) == 0 {
            ActiveSpec::FirstRanks((keep + rng.below(n - keep + 1)) as u32)
        } else {
            let mut ranked = order.clone();
            ranked.extend(builder.devices.iter().map(|d| d.id).filter(|d| !order.contains(d)));
            let extra = rng.below(n - keep + 1) as usize;
            let mut active: Vec<ItemRef> = ranked[..keep as usize + extra]
                .iter()
                .map(|d| {
                    ItemRef::Name(
                        builder
                            .devices
                            .iter()
                            .find(|s| s.id == *d)
                            .map(device_name)
                            .expect("listed"),
                    )
                })
                .collect();
            active.reverse();
            ActiveSpec::Devices(active)
        };
        membership
            .versions
            .push(VersionSpec { version: (rng.below(3) != 0).then_some(version), active });
    }
    builder.membership = Some(membership);
}

fn device_name(device: &DeviceSpec) -> String {
    if device.name.is_empty() { format!("osd.{}", device.id.0) } else { device.name.clone() }
}

/// `map` without what crushtool cannot compile: rule types other than replicated and erasure,
/// `step noop` (both of which `crushtool -d` writes), and empty uniform buckets, on which
/// crushtool 16 aborts (`ceph_assert(b)` in `add_bucket`) — shadow copies included.
pub fn crushtool_compatible(map: &ClusterMap) -> ClusterMap {
    let mut builder = ClusterMapBuilder::from_map(map);
    for bucket in &mut builder.buckets {
        if bucket.alg == BucketAlg::Uniform
            && (bucket.items.is_empty() || !map.classes().is_empty())
        {
            bucket.alg = BucketAlg::Straw2;
        }
    }
    for rule in &mut builder.rules {
        if matches!(rule.kind, RuleKind::Other(_)) {
            rule.kind = RuleKind::Erasure;
        }
        rule.steps.retain(|step| *step != StepSpec::Noop);
    }
    builder.build().expect("still valid")
}

/// What a Ceph format keeps of `map`: no pools, epoch or device attributes beyond class and
/// the weight a device has in its bucket; no empty choose_args entries.
pub fn ceph_part(map: &ClusterMap) -> ClusterMap {
    let mut builder = ClusterMapBuilder::from_map(map);
    builder.epoch = Epoch(0);
    builder.pools.clear();
    builder.membership = None;
    for device in &mut builder.devices {
        let placed = map.parent(ItemId(device.id.0 as i32)).is_some();
        *device = DeviceSpec {
            name: device.name.clone(),
            class: device.class.clone(),
            weight: Some(if placed { device.weight.unwrap_or(Weight::ONE) } else { Weight::ONE }),
            ..DeviceSpec::new(device.id.0)
        };
    }
    for (_, args) in &mut builder.choose_args {
        args.retain(|arg| {
            !arg.weight_set.is_empty() || arg.ids.as_ref().is_some_and(|i| !i.is_empty())
        });
        for arg in args.iter_mut() {
            if arg.ids.as_ref().is_some_and(Vec::is_empty) {
                arg.ids = None;
            }
        }
    }
    builder.build().expect("the Ceph part of a valid map is valid")
}

fn check_toml(map: &ClusterMap) {
    let text = optio_toml::write(map);
    assert_eq!(detect(&text), Format::OptioToml);
    let parsed = optio_toml::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(parsed, *map, "TOML round trip differs:\n{text}");
}

/// JSON keeps the Ceph part exactly. Text keeps it exactly when every weight is a multiple of
/// 1/8 (`exact_text`); otherwise its three decimals change weights once, and then no more.
fn check_ceph(map: &ClusterMap, exact_text: bool) {
    let expected = ceph_part(map);
    let json = ceph_json::write(map).expect("a Ceph-compatible map");
    assert_eq!(detect(&json), Format::CephJson);
    let from_json = ceph_json::parse(&json).unwrap_or_else(|e| panic!("{e}\n{json}"));
    assert_eq!(from_json, expected, "JSON round trip differs:\n{json}");
    let text = ceph_text::write(map).expect("a Ceph-compatible map");
    assert_eq!(detect(&text), Format::CephText);
    let from_text = ceph_text::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    if exact_text {
        assert_eq!(from_text, expected, "text round trip differs:\n{text}");
    } else {
        // Once weights are in the text's precision, text keeps them exactly.
        let again = ceph_text::parse(&ceph_text::write(&from_text).expect("a Ceph-compatible map"))
            .expect("reads back");
        assert_eq!(again, from_text, "text round trip is not stable:\n{text}");
        assert_eq!(from_text.rules(), expected.rules());
        assert_eq!(from_text.classes(), expected.classes());
    }
}

#[test]
fn sample_maps_round_trip_through_every_format() {
    let (mut attributed, mut versions) = (0, 0);
    for map in sample_maps(60) {
        check_toml(&map);
        check_ceph(&map, true);
        attributed += usize::from(map.pools().iter().any(|p| p.engine.name() == "attributed"));
        versions += usize::from(map.membership().is_some_and(|m| m.versions.len() > 1));
    }
    // The attributed and elastic engines' keys and the membership section are exercised.
    assert!(attributed >= 20 && versions >= 5, "{attributed} attributed, {versions} versioned");
}

#[test]
fn examples_round_trip_through_every_format() {
    for (name, text) in crate::support::examples() {
        let map = optio_mapfile::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        check_toml(&map);
        check_ceph(&map, false);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn any_sample_map_round_trips(seed in any::<u64>()) {
        let map = sample_map(seed);
        check_toml(&map);
        check_ceph(&map, true);
    }

    /// Any 16.16 weight survives TOML (Ceph text keeps only three decimals).
    #[test]
    fn toml_keeps_exact_weights(raw in any::<u32>(), reweight in 0u32..=0x10000) {
        let mut device = DeviceSpec::new(0).at(&[("host", "h0")]);
        device.weight = Some(Weight(raw));
        device.reweight = Weight(reweight);
        let map = ClusterMapBuilder::new().device(device).build().expect("valid");
        check_toml(&map);
    }
}
