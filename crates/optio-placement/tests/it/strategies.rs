//! Harness, not a test: proptest strategies for clusters (racks → hosts → devices with random
//! weights, capacities and states) and the pools every property runs on.

use optio_placement::crush::hash::hash32_2;
use optio_placement::{
    ClusterMap, ClusterMapBuilder, CrushSpec, DeviceSpec, EngineRef, PoolSpec, RingSpec, RuleId,
    RuleKind, RuleRef, RuleSpec, Step, StepSpec, Weight,
};
use proptest::prelude::*;

/// One generated device.
#[derive(Clone, Debug)]
pub struct DeviceGen {
    /// CRUSH weight (16.16); 0 for some.
    pub weight: u32,
    /// Capacity in GiB.
    pub capacity_gib: u64,
    /// Up.
    pub up: bool,
    /// In.
    pub is_in: bool,
    /// Reweight (16.16, ≤ 1.0).
    pub reweight: u32,
}

impl DeviceGen {
    /// Whether any engine may choose it.
    pub fn usable(&self) -> bool {
        self.weight > 0 && self.up && self.is_in && self.reweight > 0
    }
}

/// Racks → hosts → devices.
#[derive(Clone, Debug)]
pub struct Shape {
    /// The devices, by rack and host; ids are assigned in this order.
    pub racks: Vec<Vec<Vec<DeviceGen>>>,
}

/// A device with any weight and state (`healthy`: weight > 0, up, in, reweight 1.0).
pub fn device(healthy: bool) -> BoxedStrategy<DeviceGen> {
    if healthy {
        (0x2000u32..=0x80000, 100u64..=4000)
            .prop_map(|(weight, capacity_gib)| DeviceGen {
                weight,
                capacity_gib,
                up: true,
                is_in: true,
                reweight: 0x10000,
            })
            .boxed()
    } else {
        (
            prop_oneof![1 => Just(0u32), 6 => 0x1000u32..=0x80000],
            100u64..=4000,
            prop::bool::weighted(0.9),
            prop::bool::weighted(0.9),
            prop_oneof![6 => Just(0x10000u32), 1 => Just(0u32), 2 => 1u32..0x10000],
        )
            .prop_map(|(weight, capacity_gib, up, is_in, reweight)| DeviceGen {
                weight,
                capacity_gib,
                up,
                is_in,
                reweight,
            })
            .boxed()
    }
}

/// 1–3 racks of 1–4 hosts of 1–4 devices, at least one of positive weight (a map whose
/// every weight is 0 cannot have a crush pool).
pub fn shape(healthy: bool) -> impl Strategy<Value = Shape> {
    prop::collection::vec(
        prop::collection::vec(prop::collection::vec(device(healthy), 1..=4), 1..=4),
        1..=3,
    )
    .prop_map(|racks| Shape { racks })
    .prop_filter("some weight", |shape| shape.weighted_hosts() > 0)
}

/// Capacity one ring vnode stands for in these tests: 100 GiB devices get 4 vnodes, 4 TiB
/// devices 160.
pub const VNODE_BYTES: u64 = 25 << 30;

impl Shape {
    /// Every device with its id, rack and host numbers.
    pub fn devices(&self) -> impl Iterator<Item = (u32, usize, usize, &DeviceGen)> {
        self.racks
            .iter()
            .enumerate()
            .flat_map(|(r, hosts)| hosts.iter().enumerate().map(move |(h, d)| (r, h, d)))
            .flat_map(|(r, h, devices)| devices.iter().map(move |d| (r, h, d)))
            .enumerate()
            .map(|(id, (r, h, d))| (u32::try_from(id).expect("few devices"), r, h, d))
    }

    /// Hosts with a device of positive weight: the most replicas a rule across hosts can
    /// place (the builder's check).
    pub fn weighted_hosts(&self) -> u32 {
        let hosts = self.racks.iter().flatten().filter(|host| host.iter().any(|d| d.weight > 0));
        u32::try_from(hosts.count()).expect("a generated shape has few hosts")
    }

    /// The devices as builder input (names `osd.N`, location `rack=rR host=rRhH`).
    pub fn builder(&self) -> ClusterMapBuilder {
        let mut builder = ClusterMapBuilder::new();
        for (id, r, h, d) in self.devices() {
            let (rack, host) = (format!("r{r}"), format!("r{r}h{h}"));
            let mut spec = DeviceSpec::new(id)
                .weight(Weight(d.weight))
                .capacity(d.capacity_gib << 30)
                .at(&[("rack", &rack), ("host", &host)]);
            spec.up = d.up;
            spec.is_in = d.is_in;
            spec.reweight = Weight(d.reweight);
            builder = builder.device(spec);
        }
        builder
    }

    /// The map with the standard pools of [`with_pools`], replicas capped to what the rules
    /// can place.
    pub fn map(&self, size: u32) -> ClusterMap {
        let size = size.min(self.weighted_hosts()).max(1);
        with_pools(self.builder(), size).build().expect("a valid generated map")
    }
}

/// Pool 1: crush, replicated across hosts. Pool 2: crush, erasure-coded (indep) across
/// hosts. Pool 3: ring with hosts as failure domain. Pool 4: ring without failure domain,
/// objects placed one by one. All of `size` replicas.
pub fn with_pools(builder: ClusterMapBuilder, size: u32) -> ClusterMapBuilder {
    let erasure = RuleSpec {
        id: RuleId(1),
        name: "erasure".into(),
        kind: RuleKind::Erasure,
        min_size: 1,
        max_size: 10,
        steps: vec![
            StepSpec::Set(Step::SetChooseleafTries(5)),
            StepSpec::Set(Step::SetChooseTries(100)),
            StepSpec::Take { item: optio_placement::ItemRef::Name("default".into()), class: None },
            StepSpec::Choose { leaf: true, indep: true, num: 0, type_name: "host".into() },
            StepSpec::Emit,
        ],
    };
    let mut ec = PoolSpec::crush(2, "ec", 64, size);
    ec.engine = EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(RuleId(1))) });
    let mut ring = PoolSpec::crush(3, "ring", 64, size);
    ring.engine = EngineRef::Ring(RingSpec {
        vnode_bytes: Some(VNODE_BYTES),
        failure_domain: Some("host".into()),
    });
    let mut objects = PoolSpec::crush(4, "objects", 0, size);
    objects.engine =
        EngineRef::Ring(RingSpec { vnode_bytes: Some(VNODE_BYTES), failure_domain: None });
    builder
        .replicated_rule(0, "replicated", "default", "host")
        .rule(erasure)
        .pool(PoolSpec::crush(1, "rbd", 64, size))
        .pool(ec)
        .pool(ring)
        .pool(objects)
}

/// The `i`-th key of a run seeded by `seed`: spread over the whole 32-bit space.
pub fn key(seed: u32, i: u32) -> u32 {
    hash32_2(i, seed)
}
