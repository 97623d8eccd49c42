//! The validating builder: the only way to make a [`ClusterMap`].
//!
//! Items can be given explicitly (Ceph style: buckets listing their items) or derived from
//! device locations (`zone=z1 rack=r1 host=h1`), or both. The builder resolves names, assigns
//! missing bucket ids (lowest free, as Ceph does), computes bucket weights bottom-up, builds
//! Ceph's per-class shadow trees, and checks every reference, weight and limit.
//!
//! Each pool's engine is resolved by the engine's own checks ([`engine`](crate::engine)),
//! which read the map being built and take only data from below them: the engines' specs
//! ([`CrushSpec`], [`RingSpec`], …) and the spec types they check ([`RuleRef`],
//! [`LinearParamSpec`], [`PoolBalanceSpec`], defined with the pool's parameters in
//! [`params`](crate::params)) are re-exported here, so the builder's API is in one place.

use std::collections::{BTreeMap, HashMap, HashSet};

pub use crate::engine::attributed::spec::AttributedSpec;
pub use crate::engine::crush::CrushSpec;
pub use crate::engine::elastic::ElasticSpec;
pub use crate::engine::ring::RingSpec;
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::{BucketId, DeviceId, Epoch, ItemId, PoolId, RuleId, TypeId, Weight};
use crate::map::*;
pub use crate::params::PoolBalanceSpec;
pub use crate::params::crush::{LinearParamSpec, RuleRef};
use crate::tunables::Tunables;

mod from_map;
mod membership;
mod pools;
mod rules;
mod topology;

use from_map::{bucket_specs, membership_spec, pool_spec, step_to_spec};
use membership::{build_membership, membership_order};
pub(crate) use pools::IncrementalPools;
use pools::{build_pools, check_erasure_width};
use rules::{build_choose_args, build_rules};
pub use topology::weight_from_capacity;
use topology::{
    add_devices, add_explicit_buckets, build_shadow_trees, build_types, check_bucket_shape,
    derive_located_buckets, link_parents, resolve_weights,
};

/// A reference to an item, by id or by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemRef {
    /// By id.
    Id(ItemId),
    /// By name.
    Name(String),
}

impl std::fmt::Display for ItemRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ItemRef::Id(id) => write!(f, "{id}"),
            ItemRef::Name(name) => f.write_str(name),
        }
    }
}

/// A device to add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// Id.
    pub id: DeviceId,
    /// Name; `osd.<id>` when empty.
    pub name: String,
    /// Device class.
    pub class: Option<String>,
    /// Capacity in bytes; defaults to weight × 1 TiB.
    pub capacity_bytes: Option<u64>,
    /// CRUSH weight; defaults to the weight in its bucket, else capacity in TiB, else 1.0.
    pub weight: Option<Weight>,
    /// Bandwidth, MB/s (0 unknown).
    pub bandwidth_mb_per_s: u32,
    /// Up.
    pub up: bool,
    /// In.
    pub is_in: bool,
    /// Reweight (≤ 1.0).
    pub reweight: Weight,
    /// Primary affinity (≤ 1.0).
    pub primary_affinity: Weight,
    /// Server address.
    pub addr: Option<String>,
    /// The epoch of the map that last marked it up ([`Device::up_from`]); at most the map's
    /// epoch.
    pub up_from: Option<Epoch>,
    /// The epoch of the map that last marked it down ([`Device::down_at`]); at most the map's
    /// epoch.
    pub down_at: Option<Epoch>,
    /// Location as (type name, bucket name) pairs in any order; the builder creates missing
    /// buckets (straw2) and hangs the top one under the root `default`.
    pub location: Vec<(String, String)>,
}

impl DeviceSpec {
    /// A device with default attributes: up, in, reweight 1.0, no location.
    pub fn new(id: u32) -> DeviceSpec {
        DeviceSpec {
            id: DeviceId(id),
            name: String::new(),
            class: None,
            capacity_bytes: None,
            weight: None,
            bandwidth_mb_per_s: 0,
            up: true,
            is_in: true,
            reweight: Weight::ONE,
            primary_affinity: Weight::ONE,
            addr: None,
            up_from: None,
            down_at: None,
            location: Vec::new(),
        }
    }

    /// Sets the location (builder style).
    pub fn at(mut self, location: &[(&str, &str)]) -> DeviceSpec {
        self.location = location.iter().map(|(t, n)| (t.to_string(), n.to_string())).collect();
        self
    }

    /// Sets the CRUSH weight (builder style).
    pub fn weight(mut self, weight: Weight) -> DeviceSpec {
        self.weight = Some(weight);
        self
    }

    /// Sets the capacity (builder style).
    pub fn capacity(mut self, bytes: u64) -> DeviceSpec {
        self.capacity_bytes = Some(bytes);
        self
    }
}

/// An explicit bucket to add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketSpec {
    /// Id; the lowest free id when `None`.
    pub id: Option<BucketId>,
    /// Name.
    pub name: String,
    /// Type name.
    pub type_name: String,
    /// Algorithm.
    pub alg: BucketAlg,
    /// Hash (0 = rjenkins1, the only one supported).
    pub hash: u8,
    /// Items with their weights; a missing weight is the item's own (a device's weight or a
    /// child bucket's total).
    pub items: Vec<(ItemRef, Option<Weight>)>,
    /// Ids of this bucket's per-class shadow copies (Ceph's `id -5 class hdd`).
    pub class_ids: Vec<(String, BucketId)>,
}

/// A rule step, with names unresolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepSpec {
    /// No-op.
    Noop,
    /// `take ITEM [class CLASS]`.
    Take {
        /// Item.
        item: ItemRef,
        /// Class: take the item's shadow copy for this class.
        class: Option<String>,
    },
    /// `choose|chooseleaf firstn|indep N type T`.
    Choose {
        /// chooseleaf?
        leaf: bool,
        /// indep (positional) rather than firstn?
        indep: bool,
        /// N.
        num: i32,
        /// T.
        type_name: String,
    },
    /// `emit`.
    Emit,
    /// A `set_*` step, already resolved.
    Set(Step),
}

/// A rule to add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    /// Id.
    pub id: RuleId,
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: RuleKind,
    /// Legacy min size.
    pub min_size: u32,
    /// Legacy max size.
    pub max_size: u32,
    /// Steps.
    pub steps: Vec<StepSpec>,
}

/// The engine of a pool to add, with names unresolved: one spec per engine, each owned by
/// its engine module.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EngineRef {
    /// CRUSH; the rule defaults to the map's only (or first) rule.
    Crush(CrushSpec),
    /// Consistent hashing.
    Ring(RingSpec),
    /// Attributed consistent hashing (see [`attributed`](crate::engine::attributed)).
    Attributed(AttributedSpec),
    /// Elastic consistent hashing (see [`elastic`](crate::engine::elastic)).
    Elastic(ElasticSpec),
}

impl EngineRef {
    /// An attributed engine with every parameter at its default.
    pub fn attributed() -> EngineRef {
        EngineRef::Attributed(AttributedSpec::default())
    }

    /// An elastic engine with every parameter at its default.
    pub fn elastic() -> EngineRef {
        EngineRef::Elastic(ElasticSpec::default())
    }
}

/// Which servers a membership version makes active, with devices unresolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActiveSpec {
    /// Every ranked server (full power).
    All,
    /// The servers of ranks 1..=k.
    FirstRanks(u32),
    /// These devices.
    Devices(Vec<ItemRef>),
}

/// One membership version to add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionSpec {
    /// Its number; default: one more than the previous version's (1 for the first).
    pub version: Option<u64>,
    /// The active servers.
    pub active: ActiveSpec,
}

/// Server ranks and membership versions (for `elastic` pools), with devices unresolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipSpec {
    /// Devices in rank order (rank 1 first); devices not listed follow, by id.
    pub order: Vec<ItemRef>,
    /// Versions, oldest first; default: one version, number 1, with every server active
    /// ([`ActiveSpec::All`]).
    pub versions: Vec<VersionSpec>,
}

/// A pool to add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    /// Id.
    pub id: PoolId,
    /// Name.
    pub name: String,
    /// PGs (0 = object-level placement, not allowed for crush).
    pub pg_num: u32,
    /// PGs for placement (defaults to pg_num).
    pub pgp_num: Option<u32>,
    /// Replicas.
    pub size: u32,
    /// Replicas needed to acknowledge a write (defaults to size).
    pub min_size: Option<u32>,
    /// Engine.
    pub engine: EngineRef,
    /// HASHPSPOOL (default true).
    pub hashpspool: bool,
    /// Choices (default: 1 candidate, policy `first`, full at 95 %).
    pub choice: crate::choice::ChoiceSettings,
    /// Optio's balance extensions (none by default; crush pools only).
    pub balance: PoolBalanceSpec,
    /// Erasure coding (`None`: replicated). When set, `size` must be K + M, `min_size`
    /// defaults to K + 1, and the pool's engine must be able to place K + M distinct failure
    /// domains.
    pub erasure: Option<crate::params::erasure::ErasureParams>,
}

impl PoolSpec {
    /// A replicated crush pool with the map's default rule.
    pub fn crush(id: u32, name: &str, pg_num: u32, size: u32) -> PoolSpec {
        PoolSpec {
            id: PoolId(id),
            name: name.to_string(),
            pg_num,
            pgp_num: None,
            size,
            min_size: None,
            engine: EngineRef::Crush(CrushSpec { rule: None }),
            hashpspool: true,
            choice: crate::choice::ChoiceSettings::default(),
            balance: PoolBalanceSpec::default(),
            erasure: None,
        }
    }
}

/// One bucket's choose_args, with the bucket unresolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChooseArgSpec {
    /// The bucket.
    pub bucket: ItemRef,
    /// Replacement ids.
    pub ids: Option<Vec<i32>>,
    /// Weight set.
    pub weight_set: Vec<Vec<Weight>>,
}

/// Builds and validates a [`ClusterMap`].
#[derive(Clone, Debug, Default)]
pub struct ClusterMapBuilder {
    /// Epoch.
    pub epoch: Epoch,
    /// Tunables (optimal by default).
    pub tunables: Tunables,
    /// Bucket types; Ceph's default list when empty.
    pub types: Vec<BucketType>,
    /// Devices.
    pub devices: Vec<DeviceSpec>,
    /// Explicit buckets.
    pub buckets: Vec<BucketSpec>,
    /// Rules.
    pub rules: Vec<RuleSpec>,
    /// Pools.
    pub pools: Vec<PoolSpec>,
    /// Weight sets by id (-1 = default).
    pub choose_args: Vec<(i64, Vec<ChooseArgSpec>)>,
    /// Device classes in class-id order. Classes not listed here are numbered after these, in
    /// order of first appearance on devices (by id), then on buckets' class ids.
    pub classes: Vec<String>,
    /// Server ranks and membership versions; made with defaults when a pool is `elastic`.
    pub membership: Option<MembershipSpec>,
}

/// Ceph's default bucket types.
pub const DEFAULT_TYPES: [(u16, &str); 12] = [
    (0, "osd"),
    (1, "host"),
    (2, "chassis"),
    (3, "rack"),
    (4, "row"),
    (5, "pdu"),
    (6, "pod"),
    (7, "room"),
    (8, "datacenter"),
    (9, "zone"),
    (10, "region"),
    (11, "root"),
];

/// Most tries (total, local, fallback, leaf) a tunable or a rule's `set_*` step may ask for.
pub const TRIES_MAX: u32 = 1000;
/// Largest `chooseleaf_vary_r`: the mapper shifts a 32-bit `r` right by `vary_r - 1`.
pub const VARY_R_MAX: u32 = 32;

/// Name of the root that derived locations hang under.
pub const DEFAULT_ROOT: &str = "default";

fn err(subject: Subject, kind: Kind) -> MapError {
    MapError::new(subject, kind)
}

fn check_name(subject: &Subject, name: &str) -> Result<(), MapError> {
    let bad = |reason: &str| {
        err(
            subject.clone(),
            Kind::OutOfRange {
                field: "name",
                value: format!("{name:?}"),
                reason: reason.to_string(),
            },
        )
    };
    if name.is_empty() {
        return Err(bad("names must not be empty"));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(bad(&format!("names are at most {NAME_BYTES_MAX} bytes")));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control() || "{}[]#\"'".contains(c)) {
        return Err(bad("names may not contain spaces, quotes, braces, brackets or '#'"));
    }
    Ok(())
}

/// Working state of one build.
struct Build {
    types: Vec<BucketType>,
    devices: Vec<Device>,
    device_slots: Vec<u32>,
    /// Buckets under construction, dense by index. Items hold `None` weights until resolved.
    buckets: Vec<Option<PendingBucket>>,
    names: HashMap<String, ItemId>,
    reserved: HashSet<i32>,
    next_free: i32,
    classes: Vec<String>,
}

struct PendingBucket {
    bucket: Bucket,
    item_weights: Vec<Option<Weight>>,
    class_ids: Vec<(String, BucketId)>,
}

impl Build {
    fn type_by_name(&self, name: &str) -> Option<TypeId> {
        self.types.iter().find(|t| t.name == name).map(|t| t.id)
    }

    fn lowest_free_bucket_id(&mut self) -> BucketId {
        loop {
            let id = self.next_free;
            self.next_free -= 1;
            let index = BucketId(id).index();
            let taken = self.buckets.get(index).is_some_and(Option::is_some);
            if !taken && !self.reserved.contains(&id) {
                return BucketId(id);
            }
        }
    }

    fn insert_bucket(&mut self, pending: PendingBucket) -> Result<(), MapError> {
        let id = pending.bucket.id;
        let index = id.index();
        if index >= BUCKETS_MAX {
            return Err(err(
                Subject::Bucket(pending.bucket.name.clone()),
                Kind::IdOutOfRange { id: id.0.into(), reason: "bucket ids go down to -1048576" },
            ));
        }
        if self.buckets.len() <= index {
            self.buckets.resize_with(index + 1, || None);
        }
        if let Some(other) = &self.buckets[index] {
            return Err(err(
                Subject::Bucket(pending.bucket.name.clone()),
                Kind::DuplicateId {
                    id: id.0.into(),
                    other: format!("bucket '{}'", other.bucket.name),
                },
            ));
        }
        if self.names.insert(pending.bucket.name.clone(), ItemId(id.0)).is_some() {
            return Err(err(Subject::Bucket(pending.bucket.name.clone()), Kind::DuplicateName));
        }
        self.buckets[index] = Some(pending);
        Ok(())
    }

    fn bucket_mut(&mut self, id: BucketId) -> &mut PendingBucket {
        self.buckets[id.index()].as_mut().expect("bucket ids come from insert_bucket")
    }

    fn resolve_item(&self, subject: &Subject, item: &ItemRef) -> Result<ItemId, MapError> {
        let found = match item {
            ItemRef::Name(name) => self.names.get(name).copied(),
            ItemRef::Id(id) => match id.device() {
                Some(device) => self
                    .device_slots
                    .get(device.0 as usize)
                    .is_some_and(|slot| *slot != u32::MAX)
                    .then_some(*id),
                None => self
                    .buckets
                    .get(BucketId(id.0).index())
                    .is_some_and(Option::is_some)
                    .then_some(*id),
            },
        };
        found.ok_or_else(|| {
            err(subject.clone(), Kind::UnknownReference { what: "item", name: item.to_string() })
        })
    }

    fn item_name(&self, item: ItemId) -> String {
        match item.device() {
            Some(device) => {
                let slot = self.device_slots[device.0 as usize];
                self.devices[slot as usize].name.clone()
            }
            None => self.buckets[BucketId(item.0).index()]
                .as_ref()
                .map(|b| b.bucket.name.clone())
                .unwrap_or_default(),
        }
    }
}

impl ClusterMapBuilder {
    /// An empty builder: epoch 0, optimal tunables, Ceph's default types.
    pub fn new() -> ClusterMapBuilder {
        ClusterMapBuilder::default()
    }

    /// Adds a device (builder style).
    pub fn device(mut self, device: DeviceSpec) -> ClusterMapBuilder {
        self.devices.push(device);
        self
    }

    /// Adds a pool (builder style).
    pub fn pool(mut self, pool: PoolSpec) -> ClusterMapBuilder {
        self.pools.push(pool);
        self
    }

    /// Adds a rule (builder style).
    pub fn rule(mut self, rule: RuleSpec) -> ClusterMapBuilder {
        self.rules.push(rule);
        self
    }

    /// Adds the usual replicated rule: take `root`, chooseleaf firstn 0 across `failure_domain`.
    pub fn replicated_rule(
        self,
        id: u32,
        name: &str,
        root: &str,
        failure_domain: &str,
    ) -> ClusterMapBuilder {
        self.rule(RuleSpec {
            id: RuleId(id),
            name: name.to_string(),
            kind: RuleKind::Replicated,
            min_size: 1,
            max_size: 10,
            steps: vec![
                StepSpec::Take { item: ItemRef::Name(root.to_string()), class: None },
                StepSpec::Choose {
                    leaf: true,
                    indep: false,
                    num: 0,
                    type_name: failure_domain.to_string(),
                },
                StepSpec::Emit,
            ],
        })
    }

    /// A builder holding `map`'s contents; `build()` gives back an equal map.
    pub fn from_map(map: &ClusterMap) -> ClusterMapBuilder {
        let devices = map
            .devices
            .iter()
            .map(|d| DeviceSpec {
                id: d.id,
                name: d.name.clone(),
                class: d.class.clone(),
                capacity_bytes: Some(d.capacity_bytes),
                weight: Some(d.weight),
                bandwidth_mb_per_s: d.bandwidth_mb_per_s,
                up: d.up,
                is_in: d.is_in,
                reweight: d.reweight,
                primary_affinity: d.primary_affinity,
                addr: d.addr.clone(),
                up_from: d.up_from,
                down_at: d.down_at,
                location: Vec::new(),
            })
            .collect();
        let buckets = bucket_specs(map);
        // Children before parents is not required; ids are explicit.
        let rules = map
            .rules
            .iter()
            .map(|rule| RuleSpec {
                id: rule.id,
                name: rule.name.clone(),
                kind: rule.kind,
                min_size: rule.min_size,
                max_size: rule.max_size,
                steps: rule.steps.iter().map(|step| step_to_spec(map, step)).collect(),
            })
            .collect();
        let pools = map.pools.iter().map(|pool| pool_spec(map, pool)).collect();
        let membership = map.membership.as_ref().map(membership_spec);
        let choose_args = map
            .choose_args
            .iter()
            .map(|set| {
                let args = set
                    .args
                    .iter()
                    .map(|arg| ChooseArgSpec {
                        bucket: ItemRef::Id(ItemId(arg.bucket.0)),
                        ids: arg.ids.clone(),
                        weight_set: arg.weight_set.clone(),
                    })
                    .collect();
                (set.id, args)
            })
            .collect();
        ClusterMapBuilder {
            epoch: map.epoch,
            tunables: map.tunables,
            types: map.types.clone(),
            devices,
            buckets,
            rules,
            pools,
            choose_args,
            classes: map.classes.clone(),
            membership,
        }
    }

    /// Validates everything and returns the valid map, with the pools whose parameters are
    /// computed once it is valid ([`build`](Self::build), in `change/tune.rs`, computes them).
    pub(crate) fn validate(self) -> Result<Validated, MapError> {
        let mut build = Build {
            types: Vec::new(),
            devices: Vec::new(),
            device_slots: Vec::new(),
            buckets: Vec::new(),
            names: HashMap::new(),
            reserved: HashSet::new(),
            next_free: -1,
            classes: Vec::new(),
        };
        build.types = build_types(&self.types)?;
        // Listed classes come first, so that a parser can reproduce Ceph's class numbering.
        for class in &self.classes {
            check_name(&Subject::Map, class)?;
            if !build.classes.contains(class) {
                build.classes.push(class.clone());
            }
        }
        add_devices(&mut build, &self.devices, self.epoch)?;
        add_explicit_buckets(&mut build, &self.buckets)?;
        derive_located_buckets(&mut build, &self.devices)?;
        let (device_parent, bucket_parent) = link_parents(&build)?;
        resolve_weights(&mut build, &device_parent)?;
        let mut buckets: Vec<Option<Bucket>> = Vec::with_capacity(build.buckets.len());
        let mut class_ids: BTreeMap<BucketId, Vec<(String, BucketId)>> = BTreeMap::new();
        for slot in std::mem::take(&mut build.buckets) {
            match slot {
                Some(pending) => {
                    if !pending.class_ids.is_empty() {
                        class_ids.insert(pending.bucket.id, pending.class_ids);
                    }
                    buckets.push(Some(pending.bucket));
                }
                None => buckets.push(None),
            }
        }
        for bucket in buckets.iter().flatten() {
            check_bucket_shape(bucket)?;
        }
        build_shadow_trees(&mut build, &mut buckets, &bucket_parent, &class_ids)?;
        let map_for_rules = PartialMap {
            types: &build.types,
            devices: &build.devices,
            device_slots: &build.device_slots,
            buckets: &buckets,
            names: &build.names,
        };
        let rules = build_rules(&map_for_rules, &self.rules)?;
        let choose_args = build_choose_args(&map_for_rules, &self.choose_args)?;
        let order = membership_order(&build, self.membership.as_ref())?;
        let (pools, auto_linear, incremental) =
            build_pools(&map_for_rules, &rules, &self.pools, order.len())?;
        let membership = build_membership(&build, order, self.membership.as_ref(), &pools)?;
        check_tunables(&self.tunables)?;
        let Build { types, devices, device_slots, classes, .. } = build;
        let map = ClusterMap {
            epoch: self.epoch,
            types,
            devices,
            device_slots,
            buckets,
            rules,
            pools,
            tunables: self.tunables,
            choose_args,
            classes,
            device_parent,
            bucket_parent,
            membership,
        };
        check_erasure_width(&map)?;
        Ok(Validated { map, auto_linear, incremental })
    }
}

/// A valid map and what remains to compute for it: the pools whose `linear` parameter is
/// `auto`, and the incremental pools with the state to rebalance from.
pub(crate) struct Validated {
    pub(crate) map: ClusterMap,
    pub(crate) auto_linear: Vec<PoolId>,
    pub(crate) incremental: IncrementalPools,
}

fn check_tunables(tunables: &Tunables) -> Result<(), MapError> {
    let limit = |name: &str, value: u32, max: u32| {
        if value > max {
            Err(err(
                Subject::Tunable(name.to_string()),
                Kind::OutOfRange {
                    field: "value",
                    value: value.to_string(),
                    reason: format!("at most {max}"),
                },
            ))
        } else {
            Ok(())
        }
    };
    limit("choose_total_tries", tunables.choose_total_tries, TRIES_MAX)?;
    limit("choose_local_tries", tunables.choose_local_tries, TRIES_MAX)?;
    limit("choose_local_fallback_tries", tunables.choose_local_fallback_tries, TRIES_MAX)?;
    limit("chooseleaf_descend_once", tunables.chooseleaf_descend_once, 1)?;
    limit("chooseleaf_vary_r", u32::from(tunables.chooseleaf_vary_r), VARY_R_MAX)?;
    limit("chooseleaf_stable", u32::from(tunables.chooseleaf_stable), 1)?;
    limit("straw_calc_version", u32::from(tunables.straw_calc_version), 1)?;
    Ok(())
}
