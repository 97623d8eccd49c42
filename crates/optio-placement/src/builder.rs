//! The validating builder: the only way to make a [`ClusterMap`].
//!
//! Items can be given explicitly (Ceph style: buckets listing their items) or derived from
//! device locations (`zone=z1 rack=r1 host=h1`), or both. The builder resolves names, assigns
//! missing bucket ids (lowest free, as Ceph does), computes bucket weights bottom-up, builds
//! Ceph's per-class shadow trees, and checks every reference, weight and limit.

use std::collections::{BTreeMap, HashMap, HashSet};

pub use crate::engine::attributed::spec::AttributedSpec;
pub use crate::engine::crush::CrushSpec;
pub use crate::engine::elastic::ElasticSpec;
pub use crate::engine::ring::RingSpec;
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::{BucketId, DeviceId, Epoch, ItemId, PoolId, RuleId, TypeId, Weight};
use crate::map::*;
use crate::tunables::Tunables;

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

/// A rule referenced by id or name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleRef {
    /// By id.
    Id(RuleId),
    /// By name.
    Name(String),
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
}

/// The balance parameter of a pool's `linear` buckets, as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinearParamSpec {
    /// This value (16.16 fixed point, at least 1.0 = [`LINEAR_PARAM_ONE`]).
    Fixed(u32),
    /// Chosen when the map is built by seed 002's adaptive search
    /// ([`crate::change::linear::tune_linear_param`]) and stored with the pool.
    Auto,
}

/// Optio's balance extensions of a pool to add (see [`PoolBalance`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolBalanceSpec {
    /// How PGs become CRUSH inputs.
    pub pps: PpsGenerator,
    /// The balance parameter of `linear` buckets.
    pub linear_param: LinearParamSpec,
    /// Optio's balanced placement, and which one.
    pub balanced: crate::map::BalanceMethod,
    /// For an incremental pool: the state to rebalance from (the previous map's); the
    /// builder computes the pool's state from it and the map (from scratch without one).
    pub state: Option<crate::engine::balanced::incremental::BalanceState>,
}

impl Default for PoolBalanceSpec {
    fn default() -> PoolBalanceSpec {
        PoolBalanceSpec::from(PoolBalance::default())
    }
}

impl From<PoolBalance> for PoolBalanceSpec {
    fn from(balance: PoolBalance) -> PoolBalanceSpec {
        PoolBalanceSpec {
            pps: balance.pps,
            linear_param: LinearParamSpec::Fixed(balance.linear_param),
            balanced: balance.balanced,
            state: None,
        }
    }
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
        add_devices(&mut build, &self.devices)?;
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
        let map_for_rules = PartialMap { build: &build, buckets: &buckets };
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

/// The specs of `map`'s buckets (shadow buckets become their originals' class ids); a child
/// bucket's weight stays implicit when it is the child's total.
fn bucket_specs(map: &ClusterMap) -> Vec<BucketSpec> {
    let mut shadow_ids: BTreeMap<BucketId, Vec<(String, BucketId)>> = BTreeMap::new();
    for bucket in map.buckets() {
        if let Some((original, class)) = &bucket.shadow_of {
            shadow_ids.entry(*original).or_default().push((class.clone(), bucket.id));
        }
    }
    let mut buckets: Vec<BucketSpec> = Vec::new();
    for bucket in map.buckets().filter(|b| b.shadow_of.is_none()) {
        let items = bucket
            .items
            .iter()
            .zip(&bucket.weights)
            .map(|(item, weight)| {
                // Keep a child bucket's weight implicit when it is the child's total, so
                // that edits below it propagate up as in Ceph.
                let implicit = match item.bucket() {
                    Some(child) => map.bucket(child).is_some_and(|c| c.weight() == *weight),
                    None => false,
                };
                (ItemRef::Id(*item), (!implicit).then_some(*weight))
            })
            .collect();
        let mut class_ids = shadow_ids.remove(&bucket.id).unwrap_or_default();
        class_ids.sort_by_key(|(class, _)| map.classes.iter().position(|c| c == class));
        buckets.push(BucketSpec {
            id: Some(bucket.id),
            name: bucket.name.clone(),
            type_name: map.type_name(bucket.type_id).unwrap_or_default().to_string(),
            alg: bucket.alg,
            hash: bucket.hash,
            items,
            class_ids,
        });
    }
    buckets
}

/// The spec of one of `map`'s pools, everything explicit.
fn pool_spec(map: &ClusterMap, pool: &Pool) -> PoolSpec {
    PoolSpec {
        id: pool.id,
        name: pool.name.clone(),
        pg_num: pool.pg_num,
        pgp_num: Some(pool.pgp_num),
        size: pool.size,
        min_size: Some(pool.min_size),
        engine: match pool.engine_spec() {
            EngineSpec::Crush { rule } => {
                EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(rule)) })
            }
            EngineSpec::Ring(params) => EngineRef::Ring(RingSpec {
                vnode_bytes: Some(params.vnode_bytes),
                failure_domain: params
                    .failure_domain
                    .and_then(|t| map.type_name(t))
                    .map(str::to_string),
            }),
            EngineSpec::Attributed(params) => EngineRef::Attributed(AttributedSpec {
                throttle_bytes: Some(params.throttle_bytes),
                sector_size: Some(params.sector_size),
                zone_type: map.type_name(params.zone_type).map(str::to_string),
                distinct_zones: params.distinct_zones,
                bandwidth_tolerance_percent: Some(params.bandwidth_tolerance_percent),
                sector_base: Some(pool.sector_base().to_vec()),
                selection: Some(params.selection),
            }),
            EngineSpec::Elastic(params) => EngineRef::Elastic(ElasticSpec {
                primaries: Some(params.primaries),
                scale: Some(params.scale),
            }),
        },
        hashpspool: pool.hashpspool,
        choice: pool.choice,
        balance: PoolBalanceSpec {
            state: pool.balance_state().cloned(),
            ..PoolBalanceSpec::from(pool.balance())
        },
    }
}

/// The spec of a membership, every version numbered.
fn membership_spec(m: &Membership) -> MembershipSpec {
    MembershipSpec {
        order: m.order.iter().map(|d| ItemRef::Id(ItemId::from(*d))).collect(),
        versions: m
            .versions
            .iter()
            .map(|v| VersionSpec {
                version: Some(v.version),
                active: match &v.active {
                    ActiveSet::All => ActiveSpec::All,
                    ActiveSet::FirstRanks(k) => ActiveSpec::FirstRanks(*k),
                    ActiveSet::Devices(devices) => ActiveSpec::Devices(
                        devices.iter().map(|d| ItemRef::Id(ItemId::from(*d))).collect(),
                    ),
                },
            })
            .collect(),
    }
}

impl ClusterMap {
    /// A builder holding this map's contents, to derive a changed map from.
    pub fn to_builder(&self) -> ClusterMapBuilder {
        ClusterMapBuilder::from_map(self)
    }
}

fn step_to_spec(map: &ClusterMap, step: &Step) -> StepSpec {
    let type_name = |t: &TypeId| map.type_name(*t).unwrap_or_default().to_string();
    match step {
        Step::Noop => StepSpec::Noop,
        Step::Take(item) => match item.bucket().and_then(|b| map.bucket(b)) {
            Some(Bucket { shadow_of: Some((original, class)), .. }) => {
                StepSpec::Take { item: ItemRef::Id(ItemId(original.0)), class: Some(class.clone()) }
            }
            _ => StepSpec::Take { item: ItemRef::Id(*item), class: None },
        },
        Step::ChooseFirstn { num, type_id } => {
            StepSpec::Choose { leaf: false, indep: false, num: *num, type_name: type_name(type_id) }
        }
        Step::ChooseIndep { num, type_id } => {
            StepSpec::Choose { leaf: false, indep: true, num: *num, type_name: type_name(type_id) }
        }
        Step::ChooseleafFirstn { num, type_id } => {
            StepSpec::Choose { leaf: true, indep: false, num: *num, type_name: type_name(type_id) }
        }
        Step::ChooseleafIndep { num, type_id } => {
            StepSpec::Choose { leaf: true, indep: true, num: *num, type_name: type_name(type_id) }
        }
        Step::Emit => StepSpec::Emit,
        other => StepSpec::Set(*other),
    }
}

fn build_types(types: &[BucketType]) -> Result<Vec<BucketType>, MapError> {
    let mut types: Vec<BucketType> = if types.is_empty() {
        DEFAULT_TYPES
            .iter()
            .map(|(id, name)| BucketType { id: TypeId(*id), name: name.to_string() })
            .collect()
    } else {
        types.to_vec()
    };
    types.sort_by_key(|t| t.id);
    for pair in types.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(err(
                Subject::Type(pair[1].name.clone()),
                Kind::DuplicateId {
                    id: pair[1].id.0.into(),
                    other: format!("type '{}'", pair[0].name),
                },
            ));
        }
    }
    let mut seen = HashSet::new();
    for t in &types {
        check_name(&Subject::Type(t.name.clone()), &t.name)?;
        if !seen.insert(t.name.as_str()) {
            return Err(err(Subject::Type(t.name.clone()), Kind::DuplicateName));
        }
    }
    if types.first().map(|t| t.id) != Some(TypeId(0)) {
        return Err(err(
            Subject::Map,
            Kind::UnknownReference { what: "type", name: "0 (the device level)".to_string() },
        ));
    }
    Ok(types)
}

fn add_devices(build: &mut Build, specs: &[DeviceSpec]) -> Result<(), MapError> {
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&i| specs[i].id);
    let max_id = specs.iter().map(|d| d.id.0).max();
    if let Some(max_id) = max_id {
        if max_id >= DEVICE_ID_LIMIT {
            let spec = specs.iter().find(|d| d.id.0 == max_id).expect("max exists");
            return Err(err(
                Subject::Device(device_name(spec)),
                Kind::IdOutOfRange { id: max_id.into(), reason: "device ids are below 16777216" },
            ));
        }
        build.device_slots = vec![u32::MAX; max_id as usize + 1];
    }
    build.devices.reserve(specs.len());
    build.names.reserve(specs.len());
    for index in order {
        let spec = &specs[index];
        let name = device_name(spec);
        let subject = Subject::Device(name.clone());
        check_name(&subject, &name)?;
        let slot = &mut build.device_slots[spec.id.0 as usize];
        if *slot != u32::MAX {
            let other = build.devices[*slot as usize].name.clone();
            return Err(err(
                subject,
                Kind::DuplicateId { id: spec.id.0.into(), other: format!("device '{other}'") },
            ));
        }
        *slot = build.devices.len() as u32;
        if build.names.insert(name.clone(), ItemId(spec.id.0 as i32)).is_some() {
            return Err(err(subject, Kind::DuplicateName));
        }
        for (field, value) in
            [("reweight", spec.reweight), ("primary_affinity", spec.primary_affinity)]
        {
            if value.0 > 0x10000 {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field,
                        value: format!("{:.5}", value.as_f64()),
                        reason: "must be between 0 and 1".to_string(),
                    },
                ));
            }
        }
        if let Some(class) = &spec.class {
            check_name(&subject, class)?;
            if !build.classes.contains(class) {
                build.classes.push(class.clone());
            }
        }
        let weight = match (spec.weight, spec.capacity_bytes) {
            (Some(weight), _) => weight,
            (None, Some(bytes)) => weight_from_capacity(bytes).ok_or_else(|| {
                err(
                    subject.clone(),
                    Kind::InvalidWeight {
                        value: format!("{bytes} bytes"),
                        reason: "the capacity in TiB does not fit a 16.16 weight",
                    },
                )
            })?,
            (None, None) => Weight::ONE,
        };
        let capacity_bytes = spec
            .capacity_bytes
            .unwrap_or_else(|| ((u128::from(weight.0) * u128::from(TIB)) >> 16) as u64);
        build.devices.push(Device {
            id: spec.id,
            name,
            class: spec.class.clone(),
            capacity_bytes,
            weight,
            bandwidth_mb_per_s: spec.bandwidth_mb_per_s,
            up: spec.up,
            is_in: spec.is_in,
            reweight: spec.reweight,
            primary_affinity: spec.primary_affinity,
            addr: spec.addr.clone(),
        });
    }
    Ok(())
}

fn device_name(spec: &DeviceSpec) -> String {
    if spec.name.is_empty() { format!("osd.{}", spec.id.0) } else { spec.name.clone() }
}

/// The 16.16 weight for a capacity, with 1.0 = 1 TiB (Ceph's convention).
pub fn weight_from_capacity(bytes: u64) -> Option<Weight> {
    let fixed = (u128::from(bytes) << 16) / u128::from(TIB);
    u32::try_from(fixed).ok().map(Weight)
}

fn add_explicit_buckets(build: &mut Build, specs: &[BucketSpec]) -> Result<(), MapError> {
    for spec in specs {
        if let Some(id) = spec.id {
            build.reserved.insert(id.0);
        }
        for (_, id) in &spec.class_ids {
            build.reserved.insert(id.0);
        }
    }
    // First create every bucket (so items can refer to buckets defined later), then items.
    let mut ids = Vec::with_capacity(specs.len());
    for spec in specs {
        let subject = Subject::Bucket(spec.name.clone());
        check_name(&subject, &spec.name)?;
        let type_id = build.type_by_name(&spec.type_name).ok_or_else(|| {
            err(
                subject.clone(),
                Kind::UnknownReference { what: "type", name: spec.type_name.clone() },
            )
        })?;
        if type_id == TypeId(0) {
            return Err(err(
                subject,
                Kind::OutOfRange {
                    field: "type",
                    value: spec.type_name.clone(),
                    reason: "type 0 is the device level; buckets need a higher type".to_string(),
                },
            ));
        }
        if spec.hash != 0 {
            return Err(err(
                subject,
                Kind::Unsupported {
                    feature: format!("hash {}", spec.hash),
                    hint: "use hash 0 (rjenkins1), the only hash Ceph defines",
                },
            ));
        }
        for (class, class_id) in &spec.class_ids {
            check_name(&subject, class)?;
            if class_id.0 >= 0 {
                return Err(err(
                    subject,
                    Kind::IdOutOfRange { id: class_id.0.into(), reason: "bucket ids are negative" },
                ));
            }
            if !build.classes.contains(class) {
                build.classes.push(class.clone());
            }
        }
        let id = match spec.id {
            Some(id) if id.0 >= 0 => {
                return Err(err(
                    subject,
                    Kind::IdOutOfRange { id: id.0.into(), reason: "bucket ids are negative" },
                ));
            }
            Some(id) => id,
            None => build.lowest_free_bucket_id(),
        };
        if spec.items.len() > BUCKET_ITEMS_MAX {
            return Err(err(
                subject,
                Kind::TooMany { what: "items in a bucket", limit: BUCKET_ITEMS_MAX },
            ));
        }
        build.insert_bucket(PendingBucket {
            bucket: Bucket {
                id,
                name: spec.name.clone(),
                type_id,
                alg: spec.alg,
                hash: spec.hash,
                items: Vec::with_capacity(spec.items.len()),
                weights: Vec::new(),
                shadow_of: None,
            },
            item_weights: Vec::with_capacity(spec.items.len()),
            class_ids: spec.class_ids.clone(),
        })?;
        ids.push(id);
    }
    for (spec, id) in specs.iter().zip(ids) {
        let subject = Subject::Bucket(spec.name.clone());
        let mut resolved = Vec::with_capacity(spec.items.len());
        for (item, weight) in &spec.items {
            let item_id = build.resolve_item(&subject, item)?;
            resolved.push((item_id, *weight));
        }
        let pending = build.bucket_mut(id);
        for (item, weight) in resolved {
            if pending.bucket.items.contains(&item) {
                return Err(err(
                    subject.clone(),
                    Kind::DuplicateId {
                        id: item.0.into(),
                        other: "another item of the same bucket".to_string(),
                    },
                ));
            }
            pending.bucket.items.push(item);
            pending.item_weights.push(weight);
        }
    }
    Ok(())
}

/// Creates the buckets named by device locations and links devices and buckets into them.
fn derive_located_buckets(build: &mut Build, specs: &[DeviceSpec]) -> Result<(), MapError> {
    let root_type = build.types.last().map(|t| t.id).expect("types are never empty");
    let mut linked: HashMap<ItemId, BucketId> = HashMap::new();
    for spec in specs.iter().filter(|d| !d.location.is_empty()) {
        let name = device_name(spec);
        let subject = Subject::Device(name.clone());
        let mut path: Vec<(TypeId, &str)> = Vec::with_capacity(spec.location.len() + 1);
        for (type_name, bucket_name) in &spec.location {
            let type_id = build.type_by_name(type_name).ok_or_else(|| {
                err(
                    subject.clone(),
                    Kind::UnknownReference { what: "type", name: type_name.clone() },
                )
            })?;
            if type_id == TypeId(0) {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field: "location",
                        value: type_name.clone(),
                        reason: "a location names buckets, not the device level".to_string(),
                    },
                ));
            }
            if path.iter().any(|(t, _)| *t == type_id) {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field: "location",
                        value: type_name.clone(),
                        reason: "each type may appear once in a location".to_string(),
                    },
                ));
            }
            check_name(&subject, bucket_name)?;
            path.push((type_id, bucket_name));
        }
        path.sort_by_key(|(t, _)| *t);
        if path.last().map(|(t, _)| *t) != Some(root_type) {
            path.push((root_type, DEFAULT_ROOT));
        }
        // Create missing buckets top-down so that the root gets the first free id.
        let mut ids = vec![BucketId(0); path.len()];
        for (level, (type_id, bucket_name)) in path.iter().enumerate().rev() {
            ids[level] = match build.names.get(*bucket_name) {
                Some(item) => {
                    let existing = item.bucket().ok_or_else(|| {
                        err(Subject::Bucket(bucket_name.to_string()), Kind::DuplicateName)
                    })?;
                    let existing_type = build.bucket_mut(existing).bucket.type_id;
                    if existing_type != *type_id {
                        return Err(err(
                            subject.clone(),
                            Kind::OutOfRange {
                                field: "location",
                                value: bucket_name.to_string(),
                                reason: format!(
                                    "bucket '{bucket_name}' already exists with type '{}'",
                                    build
                                        .types
                                        .iter()
                                        .find(|t| t.id == existing_type)
                                        .map_or("?", |t| t.name.as_str())
                                ),
                            },
                        ));
                    }
                    existing
                }
                None => {
                    let id = build.lowest_free_bucket_id();
                    build.insert_bucket(PendingBucket {
                        bucket: Bucket {
                            id,
                            name: bucket_name.to_string(),
                            type_id: *type_id,
                            alg: BucketAlg::Straw2,
                            hash: 0,
                            items: Vec::new(),
                            weights: Vec::new(),
                            shadow_of: None,
                        },
                        item_weights: Vec::new(),
                        class_ids: Vec::new(),
                    })?;
                    id
                }
            };
        }
        let mut child = ItemId(spec.id.0 as i32);
        for &parent in &ids {
            match linked.get(&child) {
                Some(existing) if *existing == parent => break,
                Some(existing) => {
                    let first = build.bucket_mut(*existing).bucket.name.clone();
                    let second = build.bucket_mut(parent).bucket.name.clone();
                    let who = build.item_name(child);
                    let subject =
                        if child.0 >= 0 { Subject::Device(who) } else { Subject::Bucket(who) };
                    return Err(err(subject, Kind::MultipleParents { first, second }));
                }
                None => {
                    linked.insert(child, parent);
                    let pending = build.bucket_mut(parent);
                    if !pending.bucket.items.contains(&child) {
                        pending.bucket.items.push(child);
                        pending.item_weights.push(None);
                    }
                }
            }
            child = ItemId(parent.0);
        }
    }
    Ok(())
}

type Parents = (Vec<Option<BucketId>>, Vec<Option<BucketId>>);

/// Finds each item's parent, refusing items with two parents and cycles.
fn link_parents(build: &Build) -> Result<Parents, MapError> {
    let mut device_parent: Vec<Option<BucketId>> = vec![None; build.device_slots.len()];
    let mut bucket_parent: Vec<Option<BucketId>> = vec![None; build.buckets.len()];
    for pending in build.buckets.iter().flatten() {
        let parent = pending.bucket.id;
        for &item in &pending.bucket.items {
            let slot = match item.device() {
                Some(device) => &mut device_parent[device.0 as usize],
                None => &mut bucket_parent[BucketId(item.0).index()],
            };
            if let Some(first) = *slot {
                let who = build.item_name(item);
                let subject = if item.0 >= 0 { Subject::Device(who) } else { Subject::Bucket(who) };
                let first = build.item_name(ItemId(first.0));
                let second = pending.bucket.name.clone();
                let (first, second) =
                    if first <= second { (first, second) } else { (second, first) };
                return Err(err(subject, Kind::MultipleParents { first, second }));
            }
            *slot = Some(parent);
        }
    }
    // With one parent each, a cycle is a chain of parents that returns to its start.
    let mut state = vec![0u8; build.buckets.len()]; // 0 unvisited, 1 on path, 2 done
    for start in 0..build.buckets.len() {
        if build.buckets[start].is_none() || state[start] != 0 {
            continue;
        }
        let mut path = Vec::new();
        let mut current = Some(start);
        while let Some(index) = current {
            match state[index] {
                2 => break,
                1 => {
                    let cycle_start = path.iter().position(|&i| i == index).unwrap_or(0);
                    let names: Vec<String> = path[cycle_start..]
                        .iter()
                        .map(|&i| build.item_name(ItemId(BucketId::from_index(i).0)))
                        .collect();
                    return Err(err(
                        Subject::Bucket(names[0].clone()),
                        Kind::Cycle { path: names.join(" → ") },
                    ));
                }
                _ => {
                    state[index] = 1;
                    path.push(index);
                    current = bucket_parent[index].map(BucketId::index);
                }
            }
        }
        for index in path {
            state[index] = 2;
        }
    }
    check_depth(build, &bucket_parent)?;
    Ok((device_parent, bucket_parent))
}

/// Refuses hierarchies deeper than [`HIERARCHY_DEPTH_MAX`] (the parent links are acyclic).
fn check_depth(build: &Build, bucket_parent: &[Option<BucketId>]) -> Result<(), MapError> {
    let mut depth: Vec<usize> = vec![0; bucket_parent.len()]; // 0: not computed yet
    for start in 0..bucket_parent.len() {
        if build.buckets[start].is_none() || depth[start] != 0 {
            continue;
        }
        // Walk up to a bucket whose depth is known (or a root), then assign on the way down.
        let mut path = vec![start];
        let mut known = 0;
        while let Some(parent) = bucket_parent[*path.last().expect("not empty")] {
            let index = parent.index();
            if depth[index] != 0 {
                known = depth[index];
                break;
            }
            path.push(index);
        }
        for (offset, index) in path.iter().rev().enumerate() {
            depth[*index] = known + offset + 1;
            if depth[*index] > HIERARCHY_DEPTH_MAX {
                return Err(err(
                    Subject::Bucket(build.item_name(ItemId(BucketId::from_index(*index).0))),
                    Kind::TooMany {
                        what: "levels in the bucket hierarchy",
                        limit: HIERARCHY_DEPTH_MAX,
                    },
                ));
            }
        }
    }
    Ok(())
}

/// Fills in missing item weights bottom-up and checks sums.
fn resolve_weights(build: &mut Build, device_parent: &[Option<BucketId>]) -> Result<(), MapError> {
    // Devices take the weight given to them in their bucket, when one is given.
    for pending in build.buckets.iter().flatten() {
        for (item, weight) in pending.bucket.items.iter().zip(&pending.item_weights) {
            if let (Some(device), Some(weight)) = (item.device(), weight)
                && device_parent[device.0 as usize] == Some(pending.bucket.id)
            {
                let slot = build.device_slots[device.0 as usize] as usize;
                build.devices[slot].weight = *weight;
            }
        }
    }
    // Post-order over buckets: an explicit stack, as hierarchies can be deep.
    let count = build.buckets.len();
    let mut total: Vec<Option<Weight>> = vec![None; count];
    for start in 0..count {
        if build.buckets[start].is_none() || total[start].is_some() {
            continue;
        }
        let mut stack = vec![(start, false)];
        while let Some((index, children_done)) = stack.pop() {
            if total[index].is_some() {
                continue;
            }
            let pending = build.buckets[index].as_ref().expect("only existing buckets are pushed");
            if !children_done {
                stack.push((index, true));
                for (item, weight) in pending.bucket.items.iter().zip(&pending.item_weights) {
                    if let (Some(child), None) = (item.bucket(), weight)
                        && total[child.index()].is_none()
                    {
                        stack.push((child.index(), false));
                    }
                }
                continue;
            }
            let mut weights = Vec::with_capacity(pending.bucket.items.len());
            let mut sum: u64 = 0;
            for (item, weight) in pending.bucket.items.iter().zip(&pending.item_weights) {
                let weight = match (weight, item.device(), item.bucket()) {
                    (Some(weight), _, _) => *weight,
                    (None, Some(device), _) => {
                        build.devices[build.device_slots[device.0 as usize] as usize].weight
                    }
                    (None, None, Some(child)) => total[child.index()].expect("children first"),
                    (None, None, None) => unreachable!("an item is a device or a bucket"),
                };
                sum += u64::from(weight.0);
                weights.push(weight);
            }
            let name = pending.bucket.name.clone();
            let sum =
                u32::try_from(sum).map_err(|_| err(Subject::Bucket(name), Kind::WeightOverflow))?;
            total[index] = Some(Weight(sum));
            build.buckets[index].as_mut().expect("exists").bucket.weights = weights;
        }
    }
    Ok(())
}

fn check_bucket_shape(bucket: &Bucket) -> Result<(), MapError> {
    if bucket.alg == BucketAlg::Uniform
        && let Some(first) = bucket.weights.first()
        && bucket.weights.iter().any(|w| w != first)
    {
        return Err(err(
            Subject::Bucket(bucket.name.clone()),
            Kind::BucketShape(
                "a uniform bucket needs items of equal weight; use straw2 for mixed weights",
            ),
        ));
    }
    if bucket.alg == BucketAlg::Linear
        && let Some(first) = bucket.weights.first()
        && bucket.weights.iter().any(|w| w != first)
    {
        return Err(err(
            Subject::Bucket(bucket.name.clone()),
            Kind::BucketShape(
                "a linear bucket (seed 002) needs items of equal weight; use straw2 for mixed weights",
            ),
        ));
    }
    Ok(())
}

/// Ceph's per-class shadow trees (`CrushWrapper::populate_classes`): for every root and every
/// class, a copy of the tree keeping only devices of that class, named `bucket~class`.
fn build_shadow_trees(
    build: &mut Build,
    buckets: &mut Vec<Option<Bucket>>,
    bucket_parent: &[Option<BucketId>],
    class_ids: &BTreeMap<BucketId, Vec<(String, BucketId)>>,
) -> Result<(), MapError> {
    if build.classes.is_empty() {
        return Ok(());
    }
    let device_class: Vec<Option<usize>> = build
        .device_slots
        .iter()
        .map(|slot| {
            let device = build.devices.get(*slot as usize)?;
            let class = device.class.as_ref()?;
            build.classes.iter().position(|c| c == class)
        })
        .collect();
    let mut roots: Vec<BucketId> = buckets
        .iter()
        .flatten()
        .filter(|b| bucket_parent[b.id.index()].is_none())
        .map(|b| b.id)
        .collect();
    roots.sort();
    let classes = build.classes.clone();
    for root in roots {
        for (class_index, class) in classes.iter().enumerate() {
            clone_for_class(build, buckets, &device_class, class_ids, root, class_index, class)?;
        }
    }
    Ok(())
}

fn clone_for_class(
    build: &mut Build,
    buckets: &mut Vec<Option<Bucket>>,
    device_class: &[Option<usize>],
    class_ids: &BTreeMap<BucketId, Vec<(String, BucketId)>>,
    original: BucketId,
    class_index: usize,
    class: &str,
) -> Result<(BucketId, Weight), MapError> {
    let source = buckets[original.index()].as_ref().expect("original exists").clone();
    let name = format!("{}~{}", source.name, class);
    if let Some(existing) = build.names.get(&name) {
        let id = BucketId(existing.0);
        let weight = buckets[id.index()].as_ref().map(Bucket::weight).unwrap_or_default();
        return Ok((id, weight));
    }
    let mut items = Vec::new();
    let mut weights = Vec::new();
    for (item, weight) in source.items.iter().zip(&source.weights) {
        match item.device() {
            Some(device) => {
                if device_class.get(device.0 as usize).copied().flatten() == Some(class_index) {
                    items.push(*item);
                    weights.push(*weight);
                }
            }
            None => {
                let (clone, clone_weight) = clone_for_class(
                    build,
                    buckets,
                    device_class,
                    class_ids,
                    BucketId(item.0),
                    class_index,
                    class,
                )?;
                items.push(ItemId(clone.0));
                weights.push(clone_weight);
            }
        }
    }
    let given = class_ids
        .get(&original)
        .and_then(|ids| ids.iter().find(|(c, _)| c == class))
        .map(|(_, id)| *id);
    let id = match given {
        Some(id) => id,
        None => build.lowest_free_bucket_id(),
    };
    let bucket = Bucket {
        id,
        name: name.clone(),
        type_id: source.type_id,
        alg: source.alg,
        hash: source.hash,
        items,
        weights,
        shadow_of: Some((original, class.to_string())),
    };
    let weight = bucket.weight();
    let index = id.index();
    if index >= BUCKETS_MAX {
        return Err(err(
            Subject::Bucket(name),
            Kind::TooMany { what: "buckets", limit: BUCKETS_MAX },
        ));
    }
    if buckets.len() <= index {
        buckets.resize_with(index + 1, || None);
    }
    if let Some(other) = &buckets[index] {
        return Err(err(
            Subject::Bucket(source.name.clone()),
            Kind::DuplicateId { id: id.0.into(), other: format!("bucket '{}'", other.name) },
        ));
    }
    if build.names.insert(name.clone(), ItemId(id.0)).is_some() {
        return Err(err(Subject::Bucket(name), Kind::DuplicateName));
    }
    buckets[index] = Some(bucket);
    Ok((id, weight))
}

/// Read access to a map under construction, for rules and pools (and the engines' checks).
pub(crate) struct PartialMap<'a> {
    build: &'a Build,
    buckets: &'a [Option<Bucket>],
}

impl PartialMap<'_> {
    /// The bucket with this id.
    pub(crate) fn bucket(&self, id: BucketId) -> Option<&Bucket> {
        self.buckets.get(id.index())?.as_ref()
    }

    fn resolve(&self, subject: &Subject, item: &ItemRef) -> Result<ItemId, MapError> {
        let found = match item {
            ItemRef::Name(name) => self.build.names.get(name).copied(),
            ItemRef::Id(id) => match id.bucket() {
                Some(bucket) => self.bucket(bucket).map(|_| *id),
                None => self
                    .build
                    .device_slots
                    .get(id.0 as usize)
                    .is_some_and(|s| *s != u32::MAX)
                    .then_some(*id),
            },
        };
        found.ok_or_else(|| {
            err(subject.clone(), Kind::UnknownReference { what: "item", name: item.to_string() })
        })
    }

    /// The type named `name`, or an unknown-reference error about `subject`.
    pub(crate) fn type_id(&self, subject: &Subject, name: &str) -> Result<TypeId, MapError> {
        self.build.type_by_name(name).ok_or_else(|| {
            err(subject.clone(), Kind::UnknownReference { what: "type", name: name.to_string() })
        })
    }

    fn item_name(&self, item: ItemId) -> String {
        match item.bucket() {
            Some(bucket) => self.bucket(bucket).map(|b| b.name.clone()).unwrap_or_default(),
            None => self.build.item_name(item),
        }
    }

    /// The type named `name`, if any.
    pub(crate) fn type_by_name(&self, name: &str) -> Option<TypeId> {
        self.build.type_by_name(name)
    }

    /// The devices, by id.
    pub(crate) fn devices(&self) -> &[Device] {
        &self.build.devices
    }

    /// Whether the map has a device with this id.
    pub(crate) fn has_device(&self, id: DeviceId) -> bool {
        self.build.device_slots.get(id.0 as usize).is_some_and(|s| *s != u32::MAX)
    }

    /// The CRUSH weight of device `id` (zero for a missing device).
    pub(crate) fn device_weight(&self, id: i32) -> Weight {
        self.build
            .device_slots
            .get(id as usize)
            .and_then(|slot| self.build.devices.get(*slot as usize))
            .map(|d| d.weight)
            .unwrap_or_default()
    }
}

fn build_rules(map: &PartialMap<'_>, specs: &[RuleSpec]) -> Result<Vec<Rule>, MapError> {
    if specs.len() > RULES_MAX {
        return Err(err(Subject::Map, Kind::TooMany { what: "rules", limit: RULES_MAX }));
    }
    let mut rules: Vec<Rule> = Vec::with_capacity(specs.len());
    for spec in specs {
        let subject = Subject::Rule(spec.name.clone());
        check_name(&subject, &spec.name)?;
        if let Some(other) = rules.iter().find(|r| r.id == spec.id) {
            return Err(err(
                subject,
                Kind::DuplicateId { id: spec.id.0.into(), other: format!("rule '{}'", other.name) },
            ));
        }
        if rules.iter().any(|r| r.name == spec.name) {
            return Err(err(subject, Kind::DuplicateName));
        }
        if spec.steps.len() > RULE_STEPS_MAX {
            return Err(err(
                subject,
                Kind::TooMany { what: "steps in a rule", limit: RULE_STEPS_MAX },
            ));
        }
        let mut steps = Vec::with_capacity(spec.steps.len());
        for step in &spec.steps {
            steps.push(match step {
                StepSpec::Noop => Step::Noop,
                StepSpec::Emit => Step::Emit,
                StepSpec::Set(set) => check_set_step(&subject, *set)?,
                StepSpec::Take { item, class } => {
                    let item = map.resolve(&subject, item)?;
                    match class {
                        None => Step::Take(item),
                        Some(class) => {
                            let name = format!("{}~{}", map.item_name(item), class);
                            let shadow = map.build.names.get(&name).copied().ok_or_else(|| {
                                err(
                                    subject.clone(),
                                    Kind::UnknownReference { what: "class", name: class.clone() },
                                )
                            })?;
                            Step::Take(shadow)
                        }
                    }
                }
                StepSpec::Choose { leaf, indep, num, type_name } => {
                    let type_id = map.type_id(&subject, type_name)?;
                    match (leaf, indep) {
                        (false, false) => Step::ChooseFirstn { num: *num, type_id },
                        (false, true) => Step::ChooseIndep { num: *num, type_id },
                        (true, false) => Step::ChooseleafFirstn { num: *num, type_id },
                        (true, true) => Step::ChooseleafIndep { num: *num, type_id },
                    }
                }
            });
        }
        rules.push(Rule {
            id: spec.id,
            name: spec.name.clone(),
            kind: spec.kind,
            min_size: spec.min_size,
            max_size: spec.max_size,
            steps,
        });
    }
    rules.sort_by_key(|r| r.id);
    Ok(rules)
}

/// Holds a rule's `set_*` steps to the limits of the tunables they override (see
/// [`check_tunables`]): a larger `set_chooseleaf_vary_r` would shift a 32-bit `r` by 32 or
/// more bits, and huge try counts make a mapping loop practically forever. Negative values
/// are kept: Ceph ignores them.
fn check_set_step(subject: &Subject, step: Step) -> Result<Step, MapError> {
    let (field, value, max) = match step {
        Step::SetChooseTries(v) => ("set_choose_tries", v, TRIES_MAX),
        Step::SetChooseleafTries(v) => ("set_chooseleaf_tries", v, TRIES_MAX),
        Step::SetChooseLocalTries(v) => ("set_choose_local_tries", v, TRIES_MAX),
        Step::SetChooseLocalFallbackTries(v) => ("set_choose_local_fallback_tries", v, TRIES_MAX),
        Step::SetChooseleafVaryR(v) => ("set_chooseleaf_vary_r", v, VARY_R_MAX),
        Step::SetChooseleafStable(v) => ("set_chooseleaf_stable", v, 1),
        other => return Ok(other),
    };
    if i64::from(value) > i64::from(max) {
        return Err(err(
            subject.clone(),
            Kind::OutOfRange { field, value: value.to_string(), reason: format!("at most {max}") },
        ));
    }
    Ok(step)
}

fn build_choose_args(
    map: &PartialMap<'_>,
    specs: &[(i64, Vec<ChooseArgSpec>)],
) -> Result<Vec<ChooseArgs>, MapError> {
    let mut sets: Vec<ChooseArgs> = Vec::with_capacity(specs.len());
    for (id, args) in specs {
        let subject = Subject::ChooseArgs(*id);
        if sets.iter().any(|s| s.id == *id) {
            return Err(err(
                subject,
                Kind::DuplicateId { id: *id, other: "another choose_args".to_string() },
            ));
        }
        let mut resolved: Vec<ChooseArg> = Vec::with_capacity(args.len());
        for arg in args {
            let item = map.resolve(&subject, &arg.bucket)?;
            let bucket_id = item.bucket().ok_or_else(|| {
                err(
                    subject.clone(),
                    Kind::UnknownReference { what: "bucket", name: arg.bucket.to_string() },
                )
            })?;
            let bucket = map.bucket(bucket_id).expect("resolved");
            let size = bucket.items.len();
            if arg.ids.as_ref().is_some_and(|ids| ids.len() != size)
                || arg.weight_set.iter().any(|ws| ws.len() != size)
            {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field: "weight_set/ids",
                        value: bucket.name.clone(),
                        reason: format!(
                            "bucket '{}' has {size} items; each weight set and id list needs exactly that many",
                            bucket.name
                        ),
                    },
                ));
            }
            if resolved.iter().any(|a| a.bucket == bucket_id) {
                return Err(err(
                    subject.clone(),
                    Kind::DuplicateId {
                        id: bucket_id.0.into(),
                        other: "another entry of this choose_args".to_string(),
                    },
                ));
            }
            resolved.push(ChooseArg {
                bucket: bucket_id,
                ids: arg.ids.clone(),
                weight_set: arg.weight_set.clone(),
            });
        }
        resolved.sort_by_key(|a| std::cmp::Reverse(a.bucket));
        sets.push(ChooseArgs { id: *id, args: resolved });
    }
    sets.sort_by_key(|s| s.id);
    Ok(sets)
}

/// The incremental balanced pools, each with the state it was given.
pub(crate) type IncrementalPools =
    Vec<(PoolId, Option<crate::engine::balanced::incremental::BalanceState>)>;

/// The pools, the ids of those whose `linear` balance parameter is to be searched for, and the
/// incremental balanced pools (whose state is computed once the map is built).
fn build_pools(
    map: &PartialMap<'_>,
    rules: &[Rule],
    specs: &[PoolSpec],
    servers: usize,
) -> Result<(Vec<Pool>, Vec<PoolId>, IncrementalPools), MapError> {
    let mut auto = Vec::new();
    let mut incremental = Vec::new();
    if specs.len() > POOLS_MAX {
        return Err(err(Subject::Map, Kind::TooMany { what: "pools", limit: POOLS_MAX }));
    }
    let mut pools: Vec<Pool> = Vec::with_capacity(specs.len());
    for spec in specs {
        let subject = Subject::Pool(spec.name.clone());
        check_name(&subject, &spec.name)?;
        if let Some(other) = pools.iter().find(|p| p.id == spec.id) {
            return Err(err(
                subject,
                Kind::DuplicateId { id: spec.id.0.into(), other: format!("pool '{}'", other.name) },
            ));
        }
        if pools.iter().any(|p| p.name == spec.name) {
            return Err(err(subject, Kind::DuplicateName));
        }
        let (min_size, pgp_num) = check_pool_sizes(&subject, spec)?;
        let (engine, sector_base) = resolve_engine(map, rules, spec, &subject, servers)?;
        spec.choice.validate(spec.pg_num).map_err(|error| {
            err(
                subject.clone(),
                Kind::OutOfRange {
                    field: error.field(),
                    value: choice_value(&spec.choice, &error),
                    reason: error.to_string(),
                },
            )
        })?;
        let balance = crate::engine::crush::check_pool_balance(map, rules, spec, &engine)?;
        if spec.balance.linear_param == LinearParamSpec::Auto {
            auto.push(spec.id);
        }
        if balance.balanced == crate::map::BalanceMethod::Incremental {
            incremental.push((spec.id, spec.balance.state.clone()));
        }
        pools.push(Pool {
            id: spec.id,
            name: spec.name.clone(),
            pg_num: spec.pg_num,
            pgp_num,
            size: spec.size,
            min_size,
            engine: engine_params(engine, balance, sector_base),
            hashpspool: spec.hashpspool,
            choice: spec.choice,
        });
    }
    pools.sort_by_key(|p| p.id);
    Ok((pools, auto, incremental))
}

/// What a pool carries for its engine, from its resolved engine, balance settings and sector
/// base (the incremental state is computed once the map is valid: `change::optimise`).
fn engine_params(
    engine: EngineSpec,
    balance: PoolBalance,
    sector_base: Vec<(DeviceId, u32)>,
) -> crate::engine::EngineParams {
    use crate::engine::EngineParams;
    match engine {
        EngineSpec::Crush { rule } if balance.balanced.is_on() => {
            EngineParams::Balanced(crate::engine::balanced::BalancedParams {
                rule,
                pps: balance.pps,
                method: balance.balanced,
                state: None,
            })
        }
        EngineSpec::Crush { rule } => EngineParams::Crush(crate::engine::crush::CrushParams {
            rule,
            pps: balance.pps,
            linear_param: balance.linear_param,
        }),
        EngineSpec::Ring(params) => EngineParams::Ring(params),
        EngineSpec::Attributed(params) => {
            EngineParams::Attributed(crate::engine::attributed::AttributedPool {
                params,
                sector_base,
            })
        }
        EngineSpec::Elastic(params) => EngineParams::Elastic(params),
    }
}

/// A pool's size, min_size, pg_num and pgp_num in range; returns (min_size, pgp_num) with
/// their defaults.
fn check_pool_sizes(subject: &Subject, spec: &PoolSpec) -> Result<(u32, u32), MapError> {
    let range = |field: &'static str, value: u32, reason: String| {
        err(subject.clone(), Kind::OutOfRange { field, value: value.to_string(), reason })
    };
    if spec.size == 0 || spec.size as usize > REPLICAS_MAX {
        return Err(range("size", spec.size, format!("between 1 and {REPLICAS_MAX}")));
    }
    let min_size = spec.min_size.unwrap_or(spec.size);
    if min_size == 0 || min_size > spec.size {
        return Err(range("min_size", min_size, format!("between 1 and size ({})", spec.size)));
    }
    if spec.pg_num > PG_NUM_MAX {
        return Err(range("pg_num", spec.pg_num, format!("at most {PG_NUM_MAX}")));
    }
    let pgp_num = spec.pgp_num.unwrap_or(spec.pg_num);
    if pgp_num > spec.pg_num || (spec.pg_num > 0 && pgp_num == 0) {
        return Err(range("pgp_num", pgp_num, format!("between 1 and pg_num ({})", spec.pg_num)));
    }
    Ok((min_size, pgp_num))
}

/// A pool's engine, resolved by its engine's checks (and, for `attributed`, its sector
/// base).
fn resolve_engine(
    map: &PartialMap<'_>,
    rules: &[Rule],
    spec: &PoolSpec,
    subject: &Subject,
    servers: usize,
) -> Result<(EngineSpec, Vec<(DeviceId, u32)>), MapError> {
    let range = |field: &'static str, value: u32, reason: String| {
        err(subject.clone(), Kind::OutOfRange { field, value: value.to_string(), reason })
    };
    let mut sector_base = Vec::new();
    let engine = match &spec.engine {
        EngineRef::Crush(CrushSpec { rule }) => {
            if spec.pg_num == 0 {
                return Err(range(
                    "pg_num",
                    0,
                    "a crush pool needs at least one placement group".to_string(),
                ));
            }
            let rule = match rule {
                Some(RuleRef::Id(id)) => rules.iter().find(|r| r.id == *id),
                Some(RuleRef::Name(name)) => rules.iter().find(|r| &r.name == name),
                None => rules.first(),
            }
            .ok_or_else(|| {
                let name = match rule {
                    Some(RuleRef::Id(id)) => id.to_string(),
                    Some(RuleRef::Name(name)) => name.clone(),
                    None => "(none: the map has no rules; add one)".to_string(),
                };
                err(subject.clone(), Kind::UnknownReference { what: "rule", name })
            })?;
            crate::engine::crush::check_rule_capacity(map, rule, spec)?;
            EngineSpec::Crush { rule: rule.id }
        }
        EngineRef::Ring(RingSpec { vnode_bytes, failure_domain }) => {
            EngineSpec::Ring(crate::engine::ring::resolve_params(
                map,
                subject,
                *vnode_bytes,
                failure_domain.as_deref(),
            )?)
        }
        EngineRef::Attributed(attributed) => {
            let (params, base) =
                crate::engine::attributed::spec::resolve(map, subject, attributed)?;
            sector_base = base;
            EngineSpec::Attributed(params)
        }
        EngineRef::Elastic(ElasticSpec { primaries, scale }) => EngineSpec::Elastic(
            crate::engine::elastic::resolve_params(subject, *primaries, *scale, servers)?,
        ),
    };
    Ok((engine, sector_base))
}

/// The value of the choice setting an error is about, as a map file writes it.
fn choice_value(
    settings: &crate::choice::ChoiceSettings,
    error: &crate::choice::SettingsError,
) -> String {
    match (error.field(), settings.policy) {
        ("choices", _) => settings.choices.to_string(),
        ("full_ratio", _) => format!("{}", f64::from(settings.full_ppm) / 1e6),
        ("policy_weights", crate::choice::PolicySpec::Composite(weights)) => {
            let pairs: Vec<String> = crate::choice::COMPOSITE_METRICS
                .iter()
                .zip(weights.as_array())
                .filter(|(_, weight)| *weight > 0)
                .map(|(metric, weight)| format!("{metric} = {weight}"))
                .collect();
            if pairs.is_empty() { "{}".to_string() } else { format!("{{ {} }}", pairs.join(", ")) }
        }
        _ => settings.policy.to_string(),
    }
}

/// The rank order: the listed devices, then every other device by id.
fn membership_order(
    build: &Build,
    spec: Option<&MembershipSpec>,
) -> Result<Vec<DeviceId>, MapError> {
    let mut order: Vec<DeviceId> = Vec::with_capacity(build.devices.len());
    let mut ranked = vec![false; build.device_slots.len()];
    for item in spec.map_or(&[][..], |m| m.order.as_slice()) {
        let device = resolve_server(build, &Subject::Membership, item)?;
        if std::mem::replace(&mut ranked[device.0 as usize], true) {
            return Err(err(
                Subject::Membership,
                Kind::OutOfRange {
                    field: "order",
                    value: build.item_name(ItemId::from(device)),
                    reason: "ranks this device twice; list each server once".to_string(),
                },
            ));
        }
        order.push(device);
    }
    order.extend(build.devices.iter().map(|d| d.id).filter(|d| !ranked[d.0 as usize]));
    Ok(order)
}

/// A device named by a membership entry.
fn resolve_server(build: &Build, subject: &Subject, item: &ItemRef) -> Result<DeviceId, MapError> {
    let unknown = || {
        err(
            subject.clone(),
            Kind::UnknownReference { what: "device (server)", name: item.to_string() },
        )
    };
    let id = build.resolve_item(subject, item).map_err(|_| unknown())?;
    id.device().ok_or_else(unknown)
}

/// Resolves the membership versions; made with one full-power version when an elastic pool
/// needs ranks and the map has none.
fn build_membership(
    build: &Build,
    order: Vec<DeviceId>,
    spec: Option<&MembershipSpec>,
    pools: &[Pool],
) -> Result<Option<Membership>, MapError> {
    let elastic: Vec<(&Pool, u32)> = pools
        .iter()
        .filter_map(|p| match p.engine_spec() {
            EngineSpec::Elastic(params) => Some((p, params.primaries)),
            _ => None,
        })
        .collect();
    if spec.is_none() && elastic.is_empty() {
        return Ok(None);
    }
    let n = order.len() as u32;
    let mut versions: Vec<MembershipVersion> = Vec::new();
    let specs = spec.map_or(&[][..], |m| m.versions.as_slice());
    if specs.len() > crate::engine::elastic::VERSIONS_MAX {
        return Err(err(
            Subject::Membership,
            Kind::TooMany {
                what: "membership versions",
                limit: crate::engine::elastic::VERSIONS_MAX,
            },
        ));
    }
    for version in specs {
        let resolved = resolve_version(build, version, versions.last(), n)?;
        versions.push(resolved);
    }
    if versions.is_empty() {
        versions.push(MembershipVersion { version: 1, active: ActiveSet::All });
    }
    let membership = Membership { order, versions };
    check_primaries_active(build, &membership, &elastic)?;
    Ok(Some(membership))
}

/// One membership version as given, numbered (one more than `previous` by default) and
/// resolved against the `n` ranked servers.
fn resolve_version(
    build: &Build,
    version: &VersionSpec,
    previous: Option<&MembershipVersion>,
    n: u32,
) -> Result<MembershipVersion, MapError> {
    let number = match (version.version, previous) {
        (Some(number), _) => number,
        (None, Some(previous)) => previous.version.saturating_add(1),
        (None, None) => 1,
    };
    let subject = Subject::Version(number);
    if let Some(previous) = previous
        && number <= previous.version
    {
        return Err(err(
            subject,
            Kind::OutOfRange {
                field: "version",
                value: number.to_string(),
                reason: format!(
                    "versions must increase; the previous one is {}: renumber or reorder them",
                    previous.version
                ),
            },
        ));
    }
    let active = match &version.active {
        ActiveSpec::All => ActiveSet::All,
        ActiveSpec::FirstRanks(k) => {
            if *k > n {
                return Err(err(
                    subject,
                    Kind::OutOfRange {
                        field: "active",
                        value: k.to_string(),
                        reason: format!("the map ranks {n} servers; use at most {n}"),
                    },
                ));
            }
            ActiveSet::FirstRanks(*k)
        }
        ActiveSpec::Devices(items) => {
            let mut devices = Vec::with_capacity(items.len());
            for item in items {
                devices.push(resolve_server(build, &subject, item)?);
            }
            devices.sort_unstable();
            if let Some(pair) = devices.windows(2).find(|p| p[0] == p[1]) {
                return Err(err(
                    subject,
                    Kind::OutOfRange {
                        field: "active",
                        value: build.item_name(ItemId::from(pair[0])),
                        reason: "names this server twice; list each once".to_string(),
                    },
                ));
            }
            ActiveSet::Devices(devices)
        }
    };
    Ok(MembershipVersion { version: number, active })
}

/// Every version keeps the primaries of every elastic pool active (they hold a copy of every
/// object).
fn check_primaries_active(
    build: &Build,
    membership: &Membership,
    elastic: &[(&Pool, u32)],
) -> Result<(), MapError> {
    for version in &membership.versions {
        for (pool, primaries) in elastic {
            for rank in 1..=*primaries {
                if !membership.is_active(version, rank) {
                    let device = membership.order[rank as usize - 1];
                    return Err(err(
                        Subject::Version(version.version),
                        Kind::OutOfRange {
                            field: "active",
                            value: build.item_name(ItemId::from(device)),
                            reason: format!(
                                "leaves '{}' (rank {rank}) inactive, but it is one of the {primaries} primaries of elastic pool '{}', which hold a copy of every object and stay active: keep ranks 1 to {primaries} active",
                                build.item_name(ItemId::from(device)),
                                pool.name
                            ),
                        },
                    ));
                }
            }
        }
    }
    Ok(())
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
