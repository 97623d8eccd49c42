//! The cluster map: devices, the bucket hierarchy, rules, pools, tunables and the epoch.
//!
//! A [`ClusterMap`] is immutable and always valid: the only way to make one is
//! [`ClusterMapBuilder`](crate::ClusterMapBuilder), which checks every reference, weight and
//! limit. Changing a map means building a new one (`map.to_builder()`, edit, `build()`).

use std::collections::HashMap;

use crate::error::{MapError, MapErrorKind, Subject};
use crate::ids::{BucketId, DeviceId, Epoch, ItemId, PoolId, RuleId, TypeId, Weight};
use crate::narrow::index32;
use crate::tunables::Tunables;

/// Highest device id + 1 that a map may use (bounds the dense tables placement builds).
pub const DEVICE_ID_LIMIT: u32 = 1 << 24;
/// Most buckets a map may have (bounds the dense bucket table).
pub const BUCKETS_MAX: usize = 1 << 20;
/// Most items in one bucket.
pub const BUCKET_ITEMS_MAX: usize = 1 << 20;
/// Most rules.
pub const RULES_MAX: usize = 1 << 16;
/// Most pools.
pub const POOLS_MAX: usize = 1 << 16;
/// Most steps in one rule.
pub const RULE_STEPS_MAX: usize = 256;
/// Most weights in one `choose_args` set (each bucket's positions × items, added up): 2²⁸
/// weights take 1 GiB, and compiled offsets into them stay 32-bit.
pub const CHOOSE_ARGS_WEIGHTS_MAX: usize = 1 << 28;
/// Most levels of buckets above a device (Ceph's default types have 11; the builder and the
/// engines recurse over the hierarchy, so its depth is bounded).
pub const HIERARCHY_DEPTH_MAX: usize = 256;
pub use crate::params::attributed::{AttributedParams, SectorSelection};
pub use crate::params::balanced::BalanceMethod;
pub use crate::params::crush::{LINEAR_PARAM_ONE, PpsGenerator};
pub use crate::params::elastic::ElasticParams;
pub use crate::params::erasure::ErasureParams;
pub use crate::params::ring::RingParams;
pub use crate::params::{EngineSpec, PoolBalance};
pub use crate::replica::REPLICAS_MAX;
/// Most placement groups per pool.
pub const PG_NUM_MAX: u32 = 1 << 24;
/// Longest name of a device, bucket, type, class, rule or pool, in bytes.
pub const NAME_BYTES_MAX: usize = 256;
/// One tebibyte; a CRUSH weight of 1.0 conventionally means this much capacity.
pub const TIB: u64 = 1 << 40;

/// A storage device and its attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Id (the CRUSH item id).
    pub id: DeviceId,
    /// Unique name, e.g. `osd.7`.
    pub name: String,
    /// Device class (`hdd`, `ssd`, `nvme`, …), if any.
    pub class: Option<String>,
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// CRUSH weight (16.16): the weight of this device in its bucket.
    pub weight: Weight,
    /// Sequential bandwidth in MB/s (0 when unknown).
    pub bandwidth_mb_per_s: u32,
    /// Whether the device is up (serving).
    pub up: bool,
    /// Whether the device is in (a member that should hold data).
    pub is_in: bool,
    /// Ceph's reweight (16.16, at most 1.0): the probability that CRUSH keeps a choice of it.
    pub reweight: Weight,
    /// Ceph's primary affinity (16.16, at most 1.0).
    pub primary_affinity: Weight,
    /// The address of the server that serves this device (`host:port`), when it has one.
    pub addr: Option<String>,
    /// The epoch of the map that last marked the device up (Ceph's `osd_info::up_from`): it
    /// is up in every map from this epoch to the one that holds it. `None`: not recorded (a
    /// map written before Optio recorded state changes, or a device never up).
    pub up_from: Option<Epoch>,
    /// The epoch of the map that last marked the device down (Ceph's `osd_info::down_at`).
    /// `None`: not marked down since the map records state changes.
    pub down_at: Option<Epoch>,
}

/// A pool's `min_size` when the map does not give one: Ceph's `size - size / 2` (2 of 3
/// replicas, 1 of 2, 3 of 4 or 5).
pub fn default_min_size(size: u32) -> u32 {
    size - size / 2
}

impl Device {
    /// The value Ceph's `is_out` test uses for this device: its reweight when in, 0 when out.
    pub fn effective_reweight(&self) -> Weight {
        if self.is_in { self.reweight } else { Weight::ZERO }
    }

    /// Whether placement may choose this device at all.
    pub fn is_usable(&self) -> bool {
        self.up && self.is_in && self.reweight.0 > 0 && self.weight.0 > 0
    }

    /// Whether a map after `epoch` may have marked this device down — so that writes may have
    /// gone around it since a map of `epoch` was looked at. `false` only when the map records
    /// that the device has been up since `epoch` or before and was not marked down after it;
    /// a map that does not record it ([`up_from`](Device::up_from) unknown) answers `true`.
    /// (See [`ClusterMap::with_state_epochs`].)
    pub fn may_have_been_down_since(&self, epoch: Epoch) -> bool {
        let up_since = self.up_from.is_some_and(|up_from| up_from <= epoch);
        let down_after = self.down_at.is_some_and(|down_at| down_at > epoch);
        !self.up || !up_since || down_after
    }

    /// The weight balanced placement gives the device (16.16): CRUSH weight × reweight (capped
    /// at 1.0) when usable, else 0.
    pub fn balance_weight(&self) -> u64 {
        if !self.is_usable() {
            return 0;
        }
        (u64::from(self.weight.0) * u64::from(self.reweight.0.min(0x10000))) >> 16
    }
}

/// A level of the hierarchy (`host`, `rack`, …). Type 0 is the device level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketType {
    /// Id; larger ids are higher in the hierarchy by convention.
    pub id: TypeId,
    /// Name.
    pub name: String,
}

/// How a bucket chooses among its items (Ceph's bucket algorithms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BucketAlg {
    /// All items have equal weight; a hashed permutation.
    Uniform,
    /// A linked list, good for growing clusters.
    List,
    /// A binary tree.
    Tree,
    /// Straw (version 1): draws scaled by precomputed straw lengths.
    Straw,
    /// Straw2: exponential race, minimal movement on weight change. The default.
    Straw2,
    /// **Optio extension, not Ceph-compatible** (seed 002): item
    /// `(⌊x / p⌋ + retries) mod size`, `x` the pps, `p` the pool's
    /// [`PoolBalance::linear_param`] and `retries` the retries of the current choose step. Meant for hosts of equal devices under a pool with the
    /// [`PpsGenerator::Congruential`] generator; items must have equal weights, and like a
    /// uniform bucket it assumes its items are never added or removed. Ceph's map formats
    /// cannot hold it: their writers refuse maps that have one.
    Linear,
}

impl BucketAlg {
    /// Ceph's numeric code (`CRUSH_BUCKET_*`).
    pub fn code(self) -> u8 {
        match self {
            BucketAlg::Uniform => 1,
            BucketAlg::List => 2,
            BucketAlg::Tree => 3,
            BucketAlg::Straw => 4,
            BucketAlg::Straw2 => 5,
            // Not a Ceph algorithm: a code Ceph does not use, outside its bitmask's range.
            BucketAlg::Linear => 0x81,
        }
    }

    /// Whether Ceph knows this algorithm (every one but [`BucketAlg::Linear`]).
    pub fn is_ceph(self) -> bool {
        self != BucketAlg::Linear
    }

    /// The name used in map files.
    pub fn name(self) -> &'static str {
        match self {
            BucketAlg::Uniform => "uniform",
            BucketAlg::List => "list",
            BucketAlg::Tree => "tree",
            BucketAlg::Straw => "straw",
            BucketAlg::Straw2 => "straw2",
            BucketAlg::Linear => "linear",
        }
    }

    /// Parses a name used in map files.
    pub fn from_name(name: &str) -> Option<BucketAlg> {
        Some(match name {
            "uniform" => BucketAlg::Uniform,
            "list" => BucketAlg::List,
            "tree" => BucketAlg::Tree,
            "straw" => BucketAlg::Straw,
            "straw2" => BucketAlg::Straw2,
            "linear" => BucketAlg::Linear,
            _ => return None,
        })
    }
}

/// A bucket: an interior node of the hierarchy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Id (negative).
    pub id: BucketId,
    /// Unique name. Shadow buckets are named `original~class`, as in Ceph.
    pub name: String,
    /// Its level.
    pub type_id: TypeId,
    /// How it chooses among items.
    pub alg: BucketAlg,
    /// Hash function; 0 (rjenkins1) is the only one Ceph defines.
    pub hash: u8,
    /// Items, in order (order matters to every algorithm but straw2).
    pub items: Vec<ItemId>,
    /// The weight of each item (16.16).
    pub weights: Vec<Weight>,
    /// For a per-class shadow bucket: the bucket it shadows and the class.
    pub shadow_of: Option<(BucketId, String)>,
}

impl Bucket {
    /// Total weight of the bucket (saturating; the builder refuses overflowing maps).
    pub fn weight(&self) -> Weight {
        let sum: u64 = self.weights.iter().map(|w| u64::from(w.0)).sum();
        Weight(u32::try_from(sum).unwrap_or(u32::MAX))
    }
}

/// Rule types, with Ceph's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// Replicated pools (1).
    Replicated,
    /// Erasure-coded pools (3).
    Erasure,
    /// Any other legacy number, kept for round trips.
    Other(u8),
}

impl RuleKind {
    /// Ceph's number.
    pub fn code(self) -> u8 {
        match self {
            RuleKind::Replicated => 1,
            RuleKind::Erasure => 3,
            RuleKind::Other(code) => code,
        }
    }
    /// From Ceph's number.
    pub fn from_code(code: u8) -> RuleKind {
        match code {
            1 => RuleKind::Replicated,
            3 => RuleKind::Erasure,
            other => RuleKind::Other(other),
        }
    }
}

/// One step of a CRUSH rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Does nothing.
    Noop,
    /// Start from this item (a bucket, a shadow bucket, or a device).
    Take(ItemId),
    /// `choose firstn N type T`.
    ChooseFirstn {
        /// N: > 0 exactly, ≤ 0 relative to the pool size.
        num: i32,
        /// T.
        type_id: TypeId,
    },
    /// `choose indep N type T`.
    ChooseIndep {
        /// N.
        num: i32,
        /// T.
        type_id: TypeId,
    },
    /// `chooseleaf firstn N type T`.
    ChooseleafFirstn {
        /// N.
        num: i32,
        /// T.
        type_id: TypeId,
    },
    /// `chooseleaf indep N type T`.
    ChooseleafIndep {
        /// N.
        num: i32,
        /// T.
        type_id: TypeId,
    },
    /// Append the working set to the result.
    Emit,
    /// `set_choose_tries`.
    SetChooseTries(i32),
    /// `set_chooseleaf_tries`.
    SetChooseleafTries(i32),
    /// `set_choose_local_tries`.
    SetChooseLocalTries(i32),
    /// `set_choose_local_fallback_tries`.
    SetChooseLocalFallbackTries(i32),
    /// `set_chooseleaf_vary_r`.
    SetChooseleafVaryR(i32),
    /// `set_chooseleaf_stable`.
    SetChooseleafStable(i32),
}

/// A CRUSH rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Id.
    pub id: RuleId,
    /// Unique name.
    pub name: String,
    /// Replicated or erasure.
    pub kind: RuleKind,
    /// Legacy minimum pool size (kept for round trips).
    pub min_size: u32,
    /// Legacy maximum pool size (kept for round trips).
    pub max_size: u32,
    /// The steps.
    pub steps: Vec<Step>,
}

/// Which servers are active in one membership version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActiveSet {
    /// Every ranked server (full power, whatever their number): the default version.
    All,
    /// The servers of ranks 1..=k (the paper's resizing: servers power down in rank order).
    FirstRanks(u32),
    /// These devices (sorted by id, no duplicates).
    Devices(Vec<DeviceId>),
}

/// One membership version: a table of which servers are active (elastic CH's membership
/// table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipVersion {
    /// The version number (strictly increasing along the list).
    pub version: u64,
    /// The active servers.
    pub active: ActiveSet,
}

/// Server ranks and membership versions, for `elastic` pools: the map is the single source of
/// truth of which servers were active when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    /// Every device of the map by rank: `order[0]` has rank 1. Servers power down from the
    /// end of this list.
    pub order: Vec<DeviceId>,
    /// The versions, oldest first; the last one is in force. Never empty.
    pub versions: Vec<MembershipVersion>,
}

impl Membership {
    /// The version in force.
    pub fn current(&self) -> &MembershipVersion {
        self.versions.last().expect("the builder never makes a membership without versions")
    }

    /// The version with this number.
    pub fn version(&self, version: u64) -> Option<&MembershipVersion> {
        self.versions.iter().find(|v| v.version == version)
    }

    /// The rank (1-based) of a device.
    pub fn rank(&self, device: DeviceId) -> Option<u32> {
        self.order.iter().position(|d| *d == device).map(|i| index32(i) + 1)
    }

    /// Whether the device of rank `rank` (1-based) is active in `version`.
    pub fn is_active(&self, version: &MembershipVersion, rank: u32) -> bool {
        match &version.active {
            ActiveSet::All => rank >= 1 && rank as usize <= self.order.len(),
            ActiveSet::FirstRanks(k) => rank >= 1 && rank <= *k,
            ActiveSet::Devices(devices) => match self.order.get(rank as usize - 1) {
                Some(device) => devices.binary_search(device).is_ok(),
                None => false,
            },
        }
    }

    /// The servers active in `version`, in rank order.
    pub fn active_devices(&self, version: &MembershipVersion) -> Vec<DeviceId> {
        self.order
            .iter()
            .enumerate()
            .filter(|(i, _)| self.is_active(version, index32(*i) + 1))
            .map(|(_, d)| *d)
            .collect()
    }

    /// How many servers are active in `version`.
    pub fn active_count(&self, version: &MembershipVersion) -> u32 {
        match &version.active {
            ActiveSet::All => index32(self.order.len()),
            ActiveSet::FirstRanks(k) => (*k).min(index32(self.order.len())),
            ActiveSet::Devices(devices) => index32(devices.len()),
        }
    }

    /// Whether every server is active in `version` (full power).
    pub fn is_full_power(&self, version: &MembershipVersion) -> bool {
        self.active_count(version) as usize == self.order.len()
    }
}

/// A pool: a namespace of objects with one placement engine and redundancy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    /// Id (hashed into placement for `crush` pools).
    pub id: PoolId,
    /// Unique name.
    pub name: String,
    /// Placement groups objects hash into; 0 means objects are placed one by one.
    pub pg_num: u32,
    /// Placement groups used for placement (Ceph's pgp_num, at most pg_num).
    pub pgp_num: u32,
    /// Replicas (or shards) per object.
    pub size: u32,
    /// The fewest replicas that must be durable for a write to be acknowledged (Ceph's
    /// meaning; default [`default_min_size`]: 2 of 3). Clients write every replica that is
    /// running; a set with fewer than this many up refuses writes.
    pub min_size: u32,
    /// The engine and everything it places by.
    pub engine: crate::params::EngineParams,
    /// Ceph's HASHPSPOOL flag: placement seeds hash the pool id (on for every modern pool).
    pub hashpspool: bool,
    /// Choices: candidates per object, the policy that picks one, the full threshold.
    pub choice: crate::params::choice::ChoiceSettings,
    /// For an erasure-coded pool, its profile: objects are K data and M parity chunks,
    /// `size` is K + M, and chunk `i` goes to the `i`-th device of a placement. `None` for
    /// a replicated pool.
    pub erasure: Option<ErasureParams>,
}

impl Pool {
    /// The engine and its core parameters (a balanced pool is a `crush` pool with its rule).
    pub fn engine_spec(&self) -> EngineSpec {
        self.engine.spec()
    }

    /// Optio's balance extensions, as map files write them (Ceph's defaults for the engines
    /// other than `crush`).
    pub fn balance(&self) -> PoolBalance {
        match &self.engine {
            crate::params::EngineParams::Crush(crush) => PoolBalance {
                pps: crush.pps,
                linear_param: crush.linear_param,
                balanced: BalanceMethod::Off,
            },
            crate::params::EngineParams::Balanced(balanced) => PoolBalance {
                pps: balanced.pps,
                linear_param: LINEAR_PARAM_ONE,
                balanced: balanced.method,
            },
            _ => PoolBalance::default(),
        }
    }

    /// For `attributed` pools, the sector base (see
    /// [`AttributedPool`](crate::engine::attributed::AttributedPool)); empty for the others.
    pub fn sector_base(&self) -> &[(DeviceId, u32)] {
        match &self.engine {
            crate::params::EngineParams::Attributed(attributed) => &attributed.sector_base,
            _ => &[],
        }
    }

    /// For incremental balanced pools, the balancer's state; `None` for the others.
    pub fn balance_state(&self) -> Option<&crate::params::balanced::BalanceState> {
        match &self.engine {
            crate::params::EngineParams::Balanced(balanced) => balanced.state.as_ref(),
            _ => None,
        }
    }
}

/// Per-bucket alternative weights and ids for straw2 (Ceph's `choose_args`, "weight sets").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChooseArg {
    /// The bucket they apply to.
    pub bucket: BucketId,
    /// Ids hashed instead of the items' ids (same length as the items), if any.
    pub ids: Option<Vec<i32>>,
    /// One weight vector per replica position (each as long as the items).
    pub weight_set: Vec<Vec<Weight>>,
}

/// A set of choose_args, selected by pool id (or -1 for the default set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChooseArgs {
    /// Pool id, or -1 for the default set.
    pub id: i64,
    /// The per-bucket arguments, by bucket.
    pub args: Vec<ChooseArg>,
}

/// A validated, immutable cluster map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMap {
    pub(crate) epoch: Epoch,
    pub(crate) types: Vec<BucketType>,
    pub(crate) devices: Vec<Device>,
    /// Device id → position in `devices` (`u32::MAX` for none).
    pub(crate) device_slots: Vec<u32>,
    /// Bucket id → bucket (`BucketId::index`).
    pub(crate) buckets: Vec<Option<Bucket>>,
    pub(crate) rules: Vec<Rule>,
    pub(crate) pools: Vec<Pool>,
    pub(crate) tunables: Tunables,
    pub(crate) choose_args: Vec<ChooseArgs>,
    /// Device classes in the order Ceph numbers them.
    pub(crate) classes: Vec<String>,
    /// Parent bucket of every item outside shadow trees: devices by id, buckets by index.
    pub(crate) device_parent: Vec<Option<BucketId>>,
    pub(crate) bucket_parent: Vec<Option<BucketId>>,
    /// Ranks and membership versions (maps with `elastic` pools or a membership section).
    pub(crate) membership: Option<Membership>,
}

impl ClusterMap {
    /// The map's epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// All devices, by increasing id.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The device with this id.
    pub fn device(&self, id: DeviceId) -> Option<&Device> {
        let slot = *self.device_slots.get(id.0 as usize)?;
        self.devices.get(slot as usize)
    }

    /// The device with this name.
    pub fn device_by_name(&self, name: &str) -> Option<&Device> {
        self.devices.iter().find(|device| device.name == name)
    }

    /// One more than the highest device id (Ceph's `max_devices`).
    pub fn max_devices(&self) -> u32 {
        index32(self.device_slots.len())
    }

    /// The bucket types, by increasing id.
    pub fn types(&self) -> &[BucketType] {
        &self.types
    }

    /// The name of a type.
    pub fn type_name(&self, id: TypeId) -> Option<&str> {
        self.types.iter().find(|t| t.id == id).map(|t| t.name.as_str())
    }

    /// The type with this name.
    pub fn type_by_name(&self, name: &str) -> Option<TypeId> {
        self.types.iter().find(|t| t.name == name).map(|t| t.id)
    }

    /// All buckets (shadow buckets included), by decreasing id (-1, -2, …).
    pub fn buckets(&self) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter().flatten()
    }

    /// The bucket with this id.
    pub fn bucket(&self, id: BucketId) -> Option<&Bucket> {
        if id.0 >= 0 {
            return None;
        }
        self.buckets.get(id.index())?.as_ref()
    }

    /// The bucket with this name.
    pub fn bucket_by_name(&self, name: &str) -> Option<&Bucket> {
        self.buckets().find(|bucket| bucket.name == name)
    }

    /// One more than the highest bucket index (Ceph's `max_buckets`).
    pub fn max_buckets(&self) -> u32 {
        index32(self.buckets.len())
    }

    /// The rules, by increasing id.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The rule with this id.
    pub fn rule(&self, id: RuleId) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.id == id)
    }

    /// The rule with this name.
    pub fn rule_by_name(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|rule| rule.name == name)
    }

    /// The pools, by increasing id.
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    /// The pool with this id.
    pub fn pool(&self, id: PoolId) -> Option<&Pool> {
        self.pools.iter().find(|pool| pool.id == id)
    }

    /// The pool with this name.
    pub fn pool_by_name(&self, name: &str) -> Option<&Pool> {
        self.pools.iter().find(|pool| pool.name == name)
    }

    /// Server ranks and membership versions (for `elastic` pools).
    pub fn membership(&self) -> Option<&Membership> {
        self.membership.as_ref()
    }

    /// The tunables.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// The choose_args sets (weight sets), by id.
    pub fn choose_args(&self) -> &[ChooseArgs] {
        &self.choose_args
    }

    /// Device classes, in Ceph's class-id order.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }

    /// The name of an item (device or bucket).
    pub fn item_name(&self, item: ItemId) -> Option<&str> {
        match item.device() {
            Some(device) => self.device(device).map(|d| d.name.as_str()),
            None => self.bucket(BucketId(item.0)).map(|b| b.name.as_str()),
        }
    }

    /// The parent of an item in the (non-shadow) hierarchy.
    pub fn parent(&self, item: ItemId) -> Option<BucketId> {
        match item.device() {
            Some(device) => *self.device_parent.get(device.0 as usize)?,
            None => *self.bucket_parent.get(BucketId(item.0).index())?,
        }
    }

    /// The ancestors of an item, nearest first (its host, then its rack, …, its root).
    pub fn ancestors(&self, item: ItemId) -> impl Iterator<Item = &Bucket> {
        let mut next = self.parent(item);
        std::iter::from_fn(move || {
            let bucket = self.bucket(next?)?;
            next = self.parent(ItemId(bucket.id.0));
            Some(bucket)
        })
    }

    /// The ancestor of `item` of type `type_id`, if any.
    pub fn ancestor_of_type(&self, item: ItemId, type_id: TypeId) -> Option<&Bucket> {
        self.ancestors(item).find(|bucket| bucket.type_id == type_id)
    }

    /// Devices below an item (the item itself if it is a device), in any tree incl. shadow
    /// trees; sorted, without duplicates.
    pub fn devices_under(&self, item: ItemId) -> Vec<DeviceId> {
        let mut out = Vec::new();
        let mut stack = vec![item];
        let mut steps = 0usize;
        while let Some(item) = stack.pop() {
            steps += 1;
            if steps > 1 << 24 {
                break;
            }
            match item.device() {
                Some(device) => out.push(device),
                None => {
                    if let Some(bucket) = self.bucket(BucketId(item.0)) {
                        stack.extend(bucket.items.iter().copied());
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The location of a device as (type name, bucket name) pairs, root first.
    pub fn location(&self, device: DeviceId) -> Vec<(&str, &str)> {
        let mut path: Vec<(&str, &str)> = self
            .ancestors(ItemId(device.0 as i32))
            .map(|bucket| (self.type_name(bucket.type_id).unwrap_or("?"), bucket.name.as_str()))
            .collect();
        path.reverse();
        path
    }

    /// Ceph's reweight vector (`osd_weight`): one 16.16 entry per device id, 0 for out or
    /// missing devices.
    pub fn reweight_vector(&self) -> Vec<u32> {
        let mut vector = vec![0; self.max_devices() as usize];
        for device in &self.devices {
            vector[device.id.0 as usize] = device.effective_reweight().0;
        }
        vector
    }
}

/// A map under construction, as the builder shows it to the checks of its rules and pools and
/// to the engines' checks ([`engine`](crate::engine)): what is resolved so far, before the map
/// is valid. Defined here, below the engines, so that they validate without depending on the
/// builder; the builder adds its own look-ups of item references.
pub(crate) struct PartialMap<'a> {
    /// The bucket types.
    pub(crate) types: &'a [BucketType],
    /// The devices.
    pub(crate) devices: &'a [Device],
    /// Device id → position in `devices` (`u32::MAX` for none).
    pub(crate) device_slots: &'a [u32],
    /// Bucket id → bucket (`BucketId::index`), shadow buckets included.
    pub(crate) buckets: &'a [Option<Bucket>],
    /// Every device and bucket by name.
    pub(crate) names: &'a HashMap<String, ItemId>,
}

impl PartialMap<'_> {
    /// The bucket with this id.
    pub(crate) fn bucket(&self, id: BucketId) -> Option<&Bucket> {
        self.buckets.get(id.index())?.as_ref()
    }

    /// The type named `name`, or an unknown-reference error about `subject`.
    pub(crate) fn type_id(&self, subject: &Subject, name: &str) -> Result<TypeId, MapError> {
        self.type_by_name(name).ok_or_else(|| {
            MapError::new(
                subject.clone(),
                MapErrorKind::UnknownReference { what: "type", name: name.to_string() },
            )
        })
    }

    /// The type named `name`, if any.
    pub(crate) fn type_by_name(&self, name: &str) -> Option<TypeId> {
        self.types.iter().find(|t| t.name == name).map(|t| t.id)
    }

    /// The devices.
    pub(crate) fn devices(&self) -> &[Device] {
        self.devices
    }

    /// Whether the map has a device with this id.
    pub(crate) fn has_device(&self, id: DeviceId) -> bool {
        self.device_slots.get(id.0 as usize).is_some_and(|s| *s != u32::MAX)
    }

    /// The CRUSH weight of device `id` (zero for a missing device).
    pub(crate) fn device_weight(&self, id: i32) -> Weight {
        self.device_slots
            .get(id as usize)
            .and_then(|slot| self.devices.get(*slot as usize))
            .map(|d| d.weight)
            .unwrap_or_default()
    }
}
