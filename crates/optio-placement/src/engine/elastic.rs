//! The `elastic` engine: elastic consistent hashing (W. Xie and Y. Chen, "Elastic Consistent
//! Hashing for Distributed Storage Systems", IPDPS'17).
//!
//! * **Ranks.** Every device of the map is a server with a rank 1..n: the map's
//!   [`Membership::order`](crate::map::Membership) (rank 1 first), then the unlisted devices by
//!   id. Servers power down from the highest rank (the paper's expansion chain).
//! * **Primaries.** Ranks 1..=p are primaries, p = ⌈n / e²⌉ unless the pool sets it (the
//!   builder pins p in the map, so adding a server never changes it).
//! * **Equal-work layout.** On one ring (positions `hash32_2(device id, index)`, as `ring`), a
//!   primary gets round(B / p) virtual nodes and the secondary of rank i round(B / i), at least
//!   one — so a server of higher rank stores less (Rabbit's equal-work layout).
//! * **Primary-server placement** (the paper's Algorithm 1). Walk the ring from the key; each
//!   replica is the next eligible server after the previous replica's virtual node. Eligible:
//!   active, not chosen, and of the right class — once a replica is on a primary, only
//!   secondaries; for the last replica, when none is on a primary yet, only primaries;
//!   otherwise any. So every object has exactly one replica on a primary. Inactive servers are
//!   skipped (write-availability offloading). When fewer than r − 1 secondaries are active,
//!   primaries stand in for secondaries, so the replication level holds.
//! * **Membership versions.** Each version of the map's membership is a table of active
//!   servers. [`ElasticRing::place_as_of`] places as of any version (that table only, for
//!   re-integration); [`ElasticRing::place`] places now: the latest version, skipping devices
//!   that are down or out. *Full power*: every server active.
//!
//! Invariants: a server's virtual nodes depend only on its id and rank (and p, B); activating
//! a server changes only the replicas whose walk passes one of its virtual nodes, and each such
//! object trades exactly the replica the server takes over.
//!
//! Complexity: one table read and a short scan find the key's successor; a replica that must go
//! to one class jumps to that class's next virtual node (each virtual node records where the
//! next primary and the next secondary one are), then steps on past inactive, down or chosen
//! servers (a few at full power; more when many are inactive). Memory: 16 bytes per virtual
//! node plus the index.

use crate::engine::vnode::{RingIndex, vnode_position};
use crate::error::{MapError, MapErrorKind as Kind, Subject};
use crate::ids::DeviceId;
use crate::map::{ActiveSet, ClusterMap, Membership};
use crate::narrow::index32;
use crate::replica::{REPLICAS_MAX, ReplicaSet};

pub use crate::params::elastic::ElasticParams;

/// Default B: large enough that the lowest-ranked of a few hundred servers has over a hundred
/// virtual nodes.
pub const ELASTIC_SCALE_DEFAULT: u32 = 1 << 16;
/// Largest B.
pub const ELASTIC_SCALE_MAX: u32 = 1 << 22;
/// Most virtual nodes one elastic ring may have.
pub const ELASTIC_VNODES_MAX: u64 = 1 << 24;
/// Most membership versions a map may keep.
pub const VERSIONS_MAX: usize = 1 << 16;

/// e² as a fraction (e² = 7.389056098930650…, 16 digits).
const E_SQUARED_NUMERATOR: u128 = 7_389_056_098_930_650;
const E_SQUARED_DENOMINATOR: u128 = 1_000_000_000_000_000;

/// p = ⌈n / e²⌉ (at least 1 for n ≥ 1), in integers: the least p with p · e² ≥ n.
pub fn default_primaries(n: u32) -> u32 {
    let primaries = (u128::from(n) * E_SQUARED_DENOMINATOR).div_ceil(E_SQUARED_NUMERATOR).max(1);
    u32::try_from(primaries).expect("⌈n / e²⌉ is at most n")
}

/// Virtual nodes of the server of rank `rank` (1-based): round(B / p) for a primary, round(B /
/// rank) for a secondary, at least 1.
pub fn vnodes_of_rank(params: &ElasticParams, rank: u32) -> u32 {
    let divisor = if rank <= params.primaries { params.primaries } else { rank }.max(1);
    ((params.scale + divisor / 2) / divisor).max(1)
}

/// Virtual nodes of a ring of `n` servers.
pub fn total_vnodes(params: &ElasticParams, n: u32) -> u64 {
    (1..=n).map(|rank| u64::from(vnodes_of_rank(params, rank))).sum()
}

/// "No such virtual node".
const NONE: u32 = u32::MAX;

/// A virtual node of the ring.
#[derive(Clone, Copy, Debug)]
struct Vnode {
    position: u32,
    /// Rank index (0-based) of its server.
    owner: u32,
    /// Index of the first primary (secondary) virtual node at or after this one, before the
    /// end of the ring ([`NONE`] if none).
    next_primary: u32,
    next_secondary: u32,
}

/// One membership version, compiled.
#[derive(Clone, Debug)]
struct VersionTable {
    number: u64,
    /// Active ranks: the first k, or a bit per rank (rank 1 is bit 0).
    first_ranks: Option<u32>,
    bits: Vec<u64>,
    /// Active (primaries, secondaries): by the table alone, and also up and in.
    counts: (u32, u32),
    counts_now: (u32, u32),
}

impl VersionTable {
    /// Compiles `version` of `membership` for `n` ranked servers whose usability now is
    /// `usable` (by rank index), the first `primaries` of them primaries.
    fn compile(
        version: &crate::map::MembershipVersion,
        membership: &Membership,
        (n, primaries): (u32, u32),
        usable: &[bool],
    ) -> VersionTable {
        let (first_ranks, bits) = match &version.active {
            ActiveSet::All => (Some(n), Vec::new()),
            ActiveSet::FirstRanks(k) => (Some((*k).min(n)), Vec::new()),
            ActiveSet::Devices(_) => {
                let mut bits = vec![0u64; (n as usize).div_ceil(64)];
                for rank_index in 0..n {
                    if membership.is_active(version, rank_index + 1) {
                        bits[(rank_index / 64) as usize] |= 1 << (rank_index % 64);
                    }
                }
                (None, bits)
            }
        };
        let mut table = VersionTable {
            number: version.version,
            first_ranks,
            bits,
            counts: (0, 0),
            counts_now: (0, 0),
        };
        for rank_index in 0..n {
            if !table.active(rank_index) {
                continue;
            }
            let primary = rank_index < primaries;
            let count = |c: &mut (u32, u32)| {
                if primary { c.0 += 1 } else { c.1 += 1 }
            };
            count(&mut table.counts);
            if usable[rank_index as usize] {
                count(&mut table.counts_now);
            }
        }
        table
    }

    #[inline]
    fn active(&self, rank_index: u32) -> bool {
        match self.first_ranks {
            Some(k) => rank_index < k,
            None => self.bits[(rank_index / 64) as usize] >> (rank_index % 64) & 1 == 1,
        }
    }
}

/// Which servers a replica may go to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Any,
    Primary,
    Secondary,
}

/// A compiled elastic ring.
#[derive(Clone, Debug)]
pub struct ElasticRing {
    /// Virtual nodes in ring order, each with its owner and where the next primary and the
    /// next secondary virtual node are: a replica that must go to one class jumps there.
    vnodes: Vec<Vnode>,
    /// The first primary and the first secondary virtual node ([`NONE`] if there is none).
    first_of_class: [u32; 2],
    index: RingIndex,
    /// Per rank index: device id, and whether the device is up and in (usable now).
    device_ids: Vec<u32>,
    usable: Vec<bool>,
    primaries: u32,
    versions: Vec<VersionTable>,
    /// Every server active: where data belongs at full power (what rebalancing aims for).
    full_power: VersionTable,
    /// Where [`place`](ElasticRing::place) puts keys now, per virtual node, for the replica
    /// counts of the pools using this ring (see [`ElasticRing::prepare`]).
    sets: Vec<Sets>,
}

/// The devices of every virtual node's replica set now (the latest version, devices' current
/// states), for one replica count: a key's placement depends on the key only through its
/// successor, so a lookup is the successor and one read. `replicas` device ids per virtual
/// node, [`NONE`] after the last when fewer are available.
#[derive(Clone, Debug)]
struct Sets {
    replicas: usize,
    devices: Vec<u32>,
}

/// Most replicas per set [`ElasticRing::prepare`] compiles sets for.
const SETS_REPLICAS_MAX: usize = 8;
/// Most device ids [`ElasticRing::prepare`] stores for one replica count (64 MiB); rings
/// beyond it place by walking the ring on every lookup.
const SETS_ENTRIES_MAX: usize = 1 << 24;

/// The version a placement is computed as of.
#[derive(Clone, Copy)]
struct View<'a> {
    table: &'a VersionTable,
    now: bool,
}

impl ElasticRing {
    /// Compiles the elastic ring of `map` (whose membership gives ranks and versions).
    pub fn new(map: &ClusterMap, params: &ElasticParams) -> ElasticRing {
        let fallback;
        let membership = match map.membership() {
            Some(m) => m,
            None => {
                let order: Vec<DeviceId> = map.devices().iter().map(|d| d.id).collect();
                fallback = Membership {
                    order,
                    versions: vec![crate::map::MembershipVersion {
                        version: 1,
                        active: ActiveSet::All,
                    }],
                };
                &fallback
            }
        };
        let usable: Vec<bool> = membership
            .order
            .iter()
            .map(|id| map.device(*id).is_some_and(|d| d.is_usable()))
            .collect();
        let device_ids: Vec<u32> = membership.order.iter().map(|d| d.0).collect();
        ElasticRing::from_ranks(device_ids, usable, params, membership)
    }

    /// Compiles a ring for servers `device_ids` in rank order.
    fn from_ranks(
        device_ids: Vec<u32>,
        usable: Vec<bool>,
        params: &ElasticParams,
        membership: &Membership,
    ) -> ElasticRing {
        let n = index32(device_ids.len());
        let total = usize::try_from(total_vnodes(params, n))
            .expect("the builder checked the total against ELASTIC_VNODES_MAX (2^24)");
        let mut vnodes: Vec<(u32, u32)> = Vec::with_capacity(total);
        for (rank_index, device) in device_ids.iter().enumerate() {
            let rank_index = index32(rank_index);
            let count = vnodes_of_rank(params, rank_index + 1);
            for vnode in 0..count {
                vnodes.push((vnode_position(DeviceId(*device), vnode), rank_index));
            }
        }
        ElasticRing::from_vnodes(vnodes, device_ids, usable, params.primaries, membership)
    }

    /// Compiles a ring from explicit virtual nodes `(position, rank index)`, for the paper's
    /// worked examples (a ring drawn by hand) and tests.
    pub fn from_vnodes(
        mut vnodes: Vec<(u32, u32)>,
        device_ids: Vec<u32>,
        usable: Vec<bool>,
        primaries: u32,
        membership: &Membership,
    ) -> ElasticRing {
        vnodes.sort_unstable();
        let index = RingIndex::new(vnodes.len(), |i| vnodes[i].0);
        let n = index32(device_ids.len());
        let primaries = primaries.min(n);
        let compile = |version: &crate::map::MembershipVersion| {
            VersionTable::compile(version, membership, (n, primaries), &usable)
        };
        let versions = membership.versions.iter().map(compile).collect();
        let full_power =
            compile(&crate::map::MembershipVersion { version: u64::MAX, active: ActiveSet::All });
        // Next-of-class pointers, filled from the end of the ring backwards.
        let mut next: Vec<Vnode> = vnodes
            .iter()
            .map(|&(position, owner)| Vnode {
                position,
                owner,
                next_primary: NONE,
                next_secondary: NONE,
            })
            .collect();
        let (mut primary_at, mut secondary_at) = (NONE, NONE);
        for i in (0..next.len()).rev() {
            if next[i].owner < primaries {
                primary_at = index32(i);
            } else {
                secondary_at = index32(i);
            }
            next[i].next_primary = primary_at;
            next[i].next_secondary = secondary_at;
        }
        ElasticRing {
            first_of_class: [
                next.iter().position(|v| v.owner < primaries).map_or(NONE, index32),
                next.iter().position(|v| v.owner >= primaries).map_or(NONE, index32),
            ],
            vnodes: next,
            index,
            device_ids,
            usable,
            primaries,
            versions,
            full_power,
            sets: Vec::new(),
        }
    }

    /// Compiles every virtual node's replica set now for `replicas` copies (once per count),
    /// so that [`place`](Self::place) with that count is a successor search and one read.
    /// Costs `replicas` × 4 bytes per virtual node; skipped above [`SETS_REPLICAS_MAX`]
    /// replicas or [`SETS_ENTRIES_MAX`] entries (such lookups walk the ring as before).
    pub fn prepare(&mut self, replicas: usize) {
        let Some(table) = self.versions.last() else { return };
        let n = self.vnodes.len();
        if replicas == 0
            || replicas > SETS_REPLICAS_MAX
            || n.saturating_mul(replicas) > SETS_ENTRIES_MAX
            || self.sets.iter().any(|s| s.replicas == replicas)
        {
            return;
        }
        let view = View { table, now: true };
        let mut devices = vec![NONE; n * replicas];
        let mut out = ReplicaSet::new();
        for (cursor, set) in devices.chunks_exact_mut(replicas).enumerate() {
            self.place_from(view, cursor, replicas, &mut out);
            for (slot, device) in set.iter_mut().zip(out.as_slice()) {
                *slot = *device as u32;
            }
        }
        self.sets.push(Sets { replicas, devices });
    }

    /// Number of virtual nodes.
    pub fn vnode_count(&self) -> usize {
        self.vnodes.len()
    }

    /// Number of servers (ranked devices).
    pub fn servers(&self) -> u32 {
        index32(self.device_ids.len())
    }

    /// p: the servers of ranks 1..=p are primaries.
    pub fn primaries(&self) -> u32 {
        self.primaries
    }

    /// The device of rank `rank` (1-based).
    pub fn device_of_rank(&self, rank: u32) -> Option<DeviceId> {
        self.device_ids.get((rank as usize).checked_sub(1)?).map(|d| DeviceId(*d))
    }

    /// The rank (1-based) of a device.
    pub fn rank_of(&self, device: DeviceId) -> Option<u32> {
        self.device_ids.iter().position(|d| *d == device.0).map(|i| index32(i) + 1)
    }

    /// Whether a device is one of the primaries.
    pub fn is_primary(&self, device: DeviceId) -> bool {
        self.rank_of(device).is_some_and(|rank| rank <= self.primaries)
    }

    /// The membership version numbers, oldest first.
    pub fn versions(&self) -> impl Iterator<Item = u64> + '_ {
        self.versions.iter().map(|v| v.number)
    }

    /// Bytes of memory the lookup structures use.
    pub fn memory_bytes(&self) -> usize {
        self.vnodes.capacity() * std::mem::size_of::<Vnode>()
            + self.index.memory_bytes()
            + self.device_ids.capacity() * 4
            + self.usable.capacity()
            + self.versions.iter().map(|v| 48 + v.bits.capacity() * 8).sum::<usize>()
            + self.sets.iter().map(|s| s.devices.capacity() * 4).sum::<usize>()
    }

    /// The first virtual node at or after `key` (wrapping).
    #[inline]
    fn successor(&self, key: u32) -> usize {
        self.index.successor(key, &self.vnodes, |v| v.position)
    }

    /// Up to `replicas` devices for `key` now: as of the latest membership version, skipping
    /// devices that are down or out. Exactly one on a primary when at least `replicas − 1`
    /// secondaries are active and a primary is.
    #[inline]
    pub fn place(&self, key: u32, replicas: usize, out: &mut ReplicaSet) {
        if let Some(sets) = self.sets.iter().find(|s| s.replicas == replicas) {
            out.clear();
            if self.vnodes.is_empty() {
                return;
            }
            let first = self.successor(key) * replicas;
            for &device in &sets.devices[first..first + replicas] {
                if device == NONE {
                    break;
                }
                out.push(device as i32);
            }
            return;
        }
        match self.versions.last() {
            Some(table) => self.place_in(View { table, now: true }, key, replicas, out),
            None => out.clear(),
        }
    }

    /// Up to `replicas` devices for `key` at full power — every ranked server active —
    /// skipping devices that are down or out: where data belongs once every server is back,
    /// which is what rebalancing after a change of the servers (not of the membership) aims for.
    pub fn place_full_power(&self, key: u32, replicas: usize, out: &mut ReplicaSet) {
        self.place_in(View { table: &self.full_power, now: true }, key, replicas, out);
    }

    /// Up to `replicas` devices for `key` as of membership version `version` (its table of
    /// active servers; devices' current up/in states do not count). `false`, with `out`
    /// empty, when the map has no such version.
    pub fn place_as_of(
        &self,
        version: u64,
        key: u32,
        replicas: usize,
        out: &mut ReplicaSet,
    ) -> bool {
        match self.versions.binary_search_by_key(&version, |v| v.number) {
            Ok(i) => {
                self.place_in(View { table: &self.versions[i], now: false }, key, replicas, out);
                true
            }
            Err(_) => {
                out.clear();
                false
            }
        }
    }

    /// Algorithm 1 as of `view`.
    #[inline]
    fn place_in(&self, view: View<'_>, key: u32, replicas: usize, out: &mut ReplicaSet) {
        out.clear();
        if self.vnodes.is_empty() {
            return;
        }
        self.place_from(view, self.successor(key), replicas, out);
    }

    /// Algorithm 1 as of `view` for a key whose successor is virtual node `cursor`: the
    /// placement depends on the key only through it.
    #[inline]
    fn place_from(&self, view: View<'_>, mut cursor: usize, replicas: usize, out: &mut ReplicaSet) {
        out.clear();
        let (active_primaries, active_secondaries) =
            if view.now { view.table.counts_now } else { view.table.counts };
        let wanted =
            replicas.min((active_primaries + active_secondaries) as usize).min(out.capacity());
        if wanted == 0 || self.vnodes.is_empty() {
            return;
        }
        let mut chosen = [u32::MAX; REPLICAS_MAX];
        let mut has_primary = false;
        let mut secondaries = 0u32;
        let n = self.vnodes.len();
        for replica in 0..wanted {
            let mut class = if has_primary {
                Class::Secondary
            } else if replica + 1 == wanted {
                Class::Primary
            } else {
                Class::Any
            };
            // Stand-ins: too few active secondaries (or no active primary) for the rule.
            if (class == Class::Secondary && secondaries >= active_secondaries)
                || (class == Class::Primary && active_primaries == 0)
            {
                class = Class::Any;
            }
            let mut found = None;
            // Each round jumps to the next virtual node of the wanted class (wrapping) and
            // takes it if its server is eligible; n rounds cover the ring.
            for _ in 0..n {
                let here = self.vnodes[cursor];
                let mut at = match class {
                    Class::Any => index32(cursor),
                    Class::Primary => here.next_primary,
                    Class::Secondary => here.next_secondary,
                };
                if at == NONE {
                    at = self.first_of_class[usize::from(class == Class::Secondary)];
                    if at == NONE {
                        break;
                    }
                }
                let at = at as usize;
                let owner = self.vnodes[at].owner;
                cursor = if at + 1 == n { 0 } else { at + 1 };
                if view.table.active(owner)
                    && (!view.now || self.usable[owner as usize])
                    && !chosen[..replica].contains(&owner)
                {
                    found = Some((owner, at));
                    break;
                }
            }
            let Some((owner, _)) = found else { return };
            chosen[replica] = owner;
            if owner < self.primaries {
                has_primary = true;
            } else {
                secondaries += 1;
            }
            out.push(self.device_ids[owner as usize] as i32);
        }
    }
}

impl ElasticRing {
    /// The share of all copies each server is expected to hold now (device id, share): active,
    /// usable primaries 1/(r·p_active) each and active secondaries the rest in proportion to
    /// their virtual nodes; when fewer than r − 1 secondaries are active (primaries stand in),
    /// every active server in proportion to its virtual nodes. For reports and movement
    /// minimums only; placement never uses floats.
    pub fn expected_shares(&self, replicas: usize) -> Vec<(DeviceId, f64)> {
        let Some(table) = self.versions.last() else { return Vec::new() };
        let (active_primaries, active_secondaries) = table.counts_now;
        let n = self.device_ids.len();
        let mut vnodes = vec![0u64; n];
        for Vnode { owner, .. } in &self.vnodes {
            vnodes[*owner as usize] += 1;
        }
        let active = |i: usize| table.active(index32(i)) && self.usable[i];
        let r = replicas.min((active_primaries + active_secondaries) as usize).max(1) as f64;
        let primary = |i: usize| index32(i) < self.primaries;
        let rule_holds = active_primaries > 0 && f64::from(active_secondaries) >= r - 1.0;
        let secondary_vnodes: f64 =
            (0..n).filter(|&i| active(i) && !primary(i)).map(|i| vnodes[i] as f64).sum();
        let all_vnodes: f64 = (0..n).filter(|&i| active(i)).map(|i| vnodes[i] as f64).sum();
        (0..n)
            .map(|i| {
                let share = if !active(i) {
                    0.0
                } else if !rule_holds {
                    vnodes[i] as f64 / all_vnodes
                } else if primary(i) {
                    1.0 / (r * f64::from(active_primaries))
                } else if secondary_vnodes > 0.0 {
                    (r - 1.0) / r * vnodes[i] as f64 / secondary_vnodes
                } else {
                    0.0
                };
                (DeviceId(self.device_ids[i]), share)
            })
            .collect()
    }
}

/// One capacity tier of a [`CapacityPlan`]: neighbouring ranks given the same capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityTier {
    /// First and last rank (1-based) of the group.
    pub ranks: (u32, u32),
    /// The capacity each of its servers gets.
    pub capacity_bytes: u64,
    /// Data its servers are expected to hold in all (the equal-work layout scaled so that the
    /// most loaded server fills the largest capacity).
    pub data_bytes: f64,
    /// Data over capacity for the group.
    pub utilisation: f64,
}

/// What the capacity-configuration helper proposes.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityPlan {
    /// The groups, rank 1 first.
    pub tiers: Vec<CapacityTier>,
    /// Data the cluster holds when its most loaded server is full.
    pub data_bytes: f64,
    /// Total capacity of the plan.
    pub capacity_bytes: u128,
    /// Data over capacity with the plan.
    pub utilisation: f64,
    /// Data over capacity when every server has the largest capacity (no plan).
    pub uniform_utilisation: f64,
    /// Expected share of all copies per rank (rank 1 first).
    pub shares: Vec<f64>,
}

/// Expected share of all copies on each rank (rank 1 first) of the equal-work layout with
/// `replicas` replicas, everyone active: each primary holds 1/(r·p) (exactly one replica of
/// every object is on a primary), the secondaries the remaining (r−1)/r in proportion to their
/// virtual nodes. For reports and capacity planning only (placement never uses floats).
pub fn expected_shares(params: &ElasticParams, servers: u32, replicas: u32) -> Vec<f64> {
    let p = params.primaries.min(servers);
    let r = f64::from(replicas.max(1));
    let secondary_vnodes: f64 =
        (p + 1..=servers).map(|rank| f64::from(vnodes_of_rank(params, rank))).sum();
    (1..=servers)
        .map(|rank| {
            if rank <= p {
                if secondary_vnodes > 0.0 { 1.0 / (r * f64::from(p)) } else { 1.0 / f64::from(p) }
            } else {
                (r - 1.0) / r * f64::from(vnodes_of_rank(params, rank)) / secondary_vnodes
            }
        })
        .collect()
}

/// The capacity-configuration helper (the paper's section III-D): with only a few capacities
/// available (`capacities_bytes`, any order), give each rank the smallest capacity that holds
/// its expected data — neighbouring ranks fall into the same group — and report the resulting
/// utilisation against giving every server the largest capacity.
pub fn capacity_plan(
    params: &ElasticParams,
    servers: u32,
    replicas: u32,
    capacities_bytes: &[u64],
) -> CapacityPlan {
    let shares = expected_shares(params, servers, replicas);
    let mut capacities: Vec<u64> = capacities_bytes.iter().copied().filter(|c| *c > 0).collect();
    capacities.sort_unstable();
    capacities.dedup();
    let largest_bytes = capacities.last().copied().unwrap_or(0);
    let largest = largest_bytes as f64;
    let max_share = shares.iter().copied().fold(0.0f64, f64::max);
    // Total copies' bytes such that the most loaded server is exactly full.
    let data = if max_share > 0.0 { largest / max_share } else { 0.0 };
    let mut tiers: Vec<CapacityTier> = Vec::new();
    for (i, share) in shares.iter().enumerate() {
        let rank = index32(i) + 1;
        let need = share * data;
        // Smallest capacity holding it (relative slack for float rounding).
        let capacity = capacities
            .iter()
            .copied()
            .find(|c| *c as f64 >= need * (1.0 - 1e-12))
            .unwrap_or(largest_bytes);
        match tiers.last_mut() {
            Some(tier) if tier.capacity_bytes == capacity => {
                tier.ranks.1 = rank;
                tier.data_bytes += need;
            }
            _ => tiers.push(CapacityTier {
                ranks: (rank, rank),
                capacity_bytes: capacity,
                data_bytes: need,
                utilisation: 0.0,
            }),
        }
    }
    let mut capacity_total: u128 = 0;
    for tier in &mut tiers {
        let count = u128::from(tier.ranks.1 - tier.ranks.0 + 1);
        let capacity = count * u128::from(tier.capacity_bytes);
        capacity_total += capacity;
        tier.utilisation = if capacity > 0 { tier.data_bytes / capacity as f64 } else { 0.0 };
    }
    let uniform = f64::from(servers) * largest;
    CapacityPlan {
        tiers,
        data_bytes: data,
        capacity_bytes: capacity_total,
        utilisation: if capacity_total > 0 { data / capacity_total as f64 } else { 0.0 },
        uniform_utilisation: if uniform > 0.0 { data / uniform } else { 0.0 },
        shares,
    }
}

/// An elastic pool's engine parameters as given (defaults unresolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ElasticSpec {
    /// p: number of primaries (default ⌈n / e²⌉ for the n ranked servers).
    pub primaries: Option<u32>,
    /// B of the equal-work layout (default [`ELASTIC_SCALE_DEFAULT`]).
    pub scale: Option<u32>,
}

/// Resolves an elastic pool's parameters for `servers` ranked servers.
pub(crate) fn resolve_params(
    subject: &Subject,
    primaries: Option<u32>,
    scale: Option<u32>,
    servers: usize,
) -> Result<ElasticParams, MapError> {
    use crate::engine::elastic::{ELASTIC_SCALE_DEFAULT, ELASTIC_SCALE_MAX, ELASTIC_VNODES_MAX};
    let range = |field: &'static str, value: u64, reason: String| {
        MapError::new(subject.clone(), Kind::OutOfRange { field, value: value.to_string(), reason })
    };
    if servers == 0 {
        return Err(range(
            "servers",
            0,
            "an elastic pool needs at least one device to rank; add devices".to_string(),
        ));
    }
    let n = index32(servers);
    let primaries = primaries.unwrap_or_else(|| crate::engine::elastic::default_primaries(n));
    if primaries == 0 {
        return Err(range(
            "primaries (p)",
            0,
            format!(
                "at least one server must be primary; use primaries = {} (⌈n/e²⌉, the default) or more",
                crate::engine::elastic::default_primaries(n)
            ),
        ));
    }
    if primaries > n {
        return Err(range(
            "primaries (p)",
            primaries.into(),
            format!(
                "p must not exceed the number of servers n = {n}; use primaries = {} (⌈n/e²⌉) or at most {n}",
                crate::engine::elastic::default_primaries(n)
            ),
        ));
    }
    let scale = scale.unwrap_or(ELASTIC_SCALE_DEFAULT);
    if scale == 0 || scale > ELASTIC_SCALE_MAX {
        return Err(range(
            "scale (B)",
            scale.into(),
            format!(
                "between 1 and {ELASTIC_SCALE_MAX}; large values balance better (default {ELASTIC_SCALE_DEFAULT})"
            ),
        ));
    }
    let params = ElasticParams { primaries, scale };
    let vnodes = crate::engine::elastic::total_vnodes(&params, n);
    if vnodes > ELASTIC_VNODES_MAX {
        return Err(range(
            "scale (B)",
            scale.into(),
            format!(
                "the ring would have {vnodes} virtual nodes, more than {ELASTIC_VNODES_MAX}; lower the scale"
            ),
        ));
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    //! The paper's worked examples — Figure 4's ring (10 servers, 2 primaries, 2-way, servers 9
    //! and 10 inactive), the 10-server equal-work weights with B = 1000, Figure 6's versions —
    //! and the invariants: one replica on a primary, offloading, re-activation moves only what
    //! the re-activated servers take.

    use super::*;
    use crate::builder::{
        ActiveSpec, ClusterMapBuilder, DeviceSpec, EngineRef, MembershipSpec, PoolSpec, VersionSpec,
    };
    use crate::crush::hash::hash32_2;
    use crate::ids::PoolId;
    use crate::map::{EngineSpec, MembershipVersion};

    proptest::proptest! {
        /// With prepared sets, `place` gives what the walk gives, for any key, replica count,
        /// mix of unusable servers and latest version (first ranks, or any set of devices).
        #[test]
        fn prepared_sets_place_as_the_walk_does(
            servers in 2u32..40,
            primaries in 1u32..6,
            usable in proptest::collection::vec(proptest::bool::weighted(0.8), 40),
            active in proptest::collection::vec(proptest::bool::weighted(0.7), 40),
            first in 1u32..40,
            by_devices in proptest::bool::ANY,
            replicas in 1usize..7,
            keys in proptest::collection::vec(proptest::num::u32::ANY, 64),
        ) {
            let ids: Vec<u32> = (0..servers).map(|i| i * 3 + 1).collect();
            let latest = if by_devices {
                let chosen = ids.iter().zip(&active).filter(|(_, a)| **a);
                ActiveSet::Devices(chosen.map(|(d, _)| DeviceId(*d)).collect())
            } else {
                ActiveSet::FirstRanks(first.min(servers))
            };
            let membership = Membership {
                order: ids.iter().map(|d| DeviceId(*d)).collect(),
                versions: vec![
                    MembershipVersion { version: 1, active: ActiveSet::All },
                    MembershipVersion { version: 2, active: latest },
                ],
            };
            let params = ElasticParams { primaries, scale: 300 };
            let walk = ElasticRing::from_ranks(
                ids.clone(),
                usable[..servers as usize].to_vec(),
                &params,
                &membership,
            );
            let mut prepared = walk.clone();
            prepared.prepare(replicas);
            proptest::prop_assert_eq!(prepared.sets.len(), 1);
            prepared.prepare(replicas);
            proptest::prop_assert_eq!(prepared.sets.len(), 1, "compiled once per count");
            let at_vnodes = walk.vnodes.iter().flat_map(|v| {
                [v.position, v.position.wrapping_add(1), v.position.wrapping_sub(1)]
            });
            for key in keys.iter().copied().chain(at_vnodes).chain([0, u32::MAX]) {
                for r in [replicas, replicas + 1] {
                    proptest::prop_assert_eq!(
                        place(&prepared, key, r),
                        place(&walk, key, r),
                        "key {} replicas {}", key, r
                    );
                }
            }
        }
    }

    #[test]
    fn p_is_n_over_e_squared_rounded_up() {
        for (n, p) in [(1, 1), (7, 1), (8, 2), (10, 2), (14, 2), (15, 3), (100, 14), (1000, 136)] {
            assert_eq!(default_primaries(n), p, "n = {n}");
        }
    }

    #[test]
    fn equal_work_weights_of_the_10_server_example() {
        // B = 1000, p = 2: each primary 1000/2 = 500 virtual nodes; server 6 1000/6 = 167.
        let params = ElasticParams { primaries: 2, scale: 1000 };
        let weights: Vec<u32> = (1..=10).map(|rank| vnodes_of_rank(&params, rank)).collect();
        assert_eq!(weights, vec![500, 500, 333, 250, 200, 167, 143, 125, 111, 100]);
        assert_eq!(total_vnodes(&params, 10), 2429);
        assert_eq!(
            vnodes_of_rank(&ElasticParams { primaries: 1, scale: 10 }, 1000),
            1,
            "at least one"
        );
    }

    /// Servers 1..=10 with device ids equal to their numbers (rank = number), one virtual
    /// node each at the positions of `order` (clockwise), 2 primaries, versions as given.
    fn figure_4_ring(order: [u32; 10], versions: Vec<MembershipVersion>) -> ElasticRing {
        let vnodes: Vec<(u32, u32)> = order
            .iter()
            .enumerate()
            .map(|(i, server)| ((index32(i) + 1) * 100, server - 1))
            .collect();
        let membership = Membership { order: (1..=10).map(DeviceId).collect(), versions };
        ElasticRing::from_vnodes(vnodes, (1..=10).collect(), vec![true; 10], 2, &membership)
    }

    fn first_ranks(version: u64, k: u32) -> MembershipVersion {
        MembershipVersion { version, active: ActiveSet::FirstRanks(k) }
    }

    fn place(ring: &ElasticRing, key: u32, replicas: usize) -> Vec<i32> {
        let mut out = ReplicaSet::new();
        ring.place(key, replicas, &mut out);
        out.as_slice().to_vec()
    }

    #[test]
    fn figure_4_primary_server_placement() {
        // Left of the figure: servers 9 and 10 inactive (8 active, a version of the map).
        let left = [3, 8, 1, 2, 4, 5, 9, 6, 10, 7];
        let ring = figure_4_ring(left, vec![first_ranks(1, 10), first_ranks(2, 8)]);
        // D1 hashes just before server 3: first copy on 3; the second on the first primary
        // after it, server 1 (plain consistent hashing would pick server 8).
        assert_eq!(place(&ring, 50, 2), vec![3, 1]);
        // D2 lands on primary 2 first, so its second copy goes to the next secondary, 4.
        assert_eq!(place(&ring, 350, 2), vec![2, 4]);
        // D3 hashes before server 9, which is inactive: skipped (its write is offloaded) to 6,
        // then the next primary after 6: past 10 (inactive), 7, 3 and 8 to server 1.
        assert_eq!(place(&ring, 650, 2), vec![6, 1]);
        // At full power (version 1) D3's first copy is on 9.
        let mut out = ReplicaSet::new();
        assert!(ring.place_as_of(1, 650, 2, &mut out));
        assert_eq!(out.as_slice(), &[9, 1]);
        assert!(!ring.place_as_of(7, 650, 2, &mut out), "no version 7");
        assert!(out.is_empty());
        // Right of the figure: servers 10 and 1 swap places on the ring, and D1's second copy
        // goes to primary 2 instead.
        let right = [3, 8, 10, 2, 4, 5, 9, 6, 1, 7];
        let ring = figure_4_ring(right, vec![first_ranks(1, 8)]);
        assert_eq!(place(&ring, 50, 2), vec![3, 2]);
        assert_eq!(
            place(&ring, 350, 2),
            vec![10, 2].into_iter().filter(|_| false).chain([2, 4]).collect::<Vec<_>>()
        );
    }

    #[test]
    fn primaries_stand_in_when_too_few_secondaries_are_active() {
        // Only the two primaries and server 3 active; three replicas need two secondaries.
        let ring = figure_4_ring([3, 8, 1, 2, 4, 5, 9, 6, 10, 7], vec![first_ranks(1, 3)]);
        for key in (0..1000).map(|i| i * 1000) {
            let set = place(&ring, key, 3);
            let mut sorted = set.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![1, 2, 3], "key {key}: {set:?}");
        }
        // Two replicas need one secondary: the rule holds, exactly one primary.
        for key in (0..1000).map(|i| i * 1000) {
            let set = place(&ring, key, 2);
            assert_eq!(set.iter().filter(|d| **d <= 2).count(), 1, "key {key}: {set:?}");
        }
    }

    /// A map of `n` devices with an elastic pool and the given membership.
    fn map(n: u32, scale: u32, size: u32, versions: Vec<VersionSpec>) -> ClusterMap {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..n {
            builder = builder.device(DeviceSpec::new(id));
        }
        let mut pool = PoolSpec::crush(1, "elastic", 0, size);
        pool.engine =
            EngineRef::Elastic(crate::builder::ElasticSpec { primaries: None, scale: Some(scale) });
        builder.membership = Some(MembershipSpec { order: Vec::new(), versions });
        builder.pool(pool).build().expect("valid map")
    }

    fn ring_of(map: &ClusterMap) -> ElasticRing {
        let EngineSpec::Elastic(params) = map.pool(PoolId(1)).expect("pool").engine_spec() else {
            unreachable!("elastic")
        };
        ElasticRing::new(map, &params)
    }

    fn version(number: u64, k: u32) -> VersionSpec {
        VersionSpec { version: Some(number), active: ActiveSpec::FirstRanks(k) }
    }

    #[test]
    fn ten_servers_two_primaries_two_way_exactly_one_primary_copy_and_equal_work() {
        let map = map(10, 1000, 2, Vec::new());
        let ring = ring_of(&map);
        assert_eq!(ring.primaries(), 2);
        assert_eq!(ring.vnode_count(), 2429);
        for i in 0..100_000u32 {
            let set = place(&ring, hash32_2(i, 4), 2);
            assert_eq!(set.len(), 2);
            assert_eq!(set.iter().filter(|d| **d < 2).count(), 1, "{set:?}");
        }
        // With a large B the layout is the equal-work curve: primaries hold half of the copies,
        // equally; secondaries fall with rank as B/i.
        let map = super::tests::map(10, 1 << 16, 2, Vec::new());
        let ring = ring_of(&map);
        let mut per_server = [0f64; 10];
        let objects = 200_000u32;
        for i in 0..objects {
            for d in place(&ring, hash32_2(i, 4), 2) {
                per_server[d as usize] += 1.0;
            }
        }
        let expected = expected_shares(&ElasticParams { primaries: 2, scale: 1 << 16 }, 10, 2);
        for (rank, share) in expected.iter().enumerate() {
            let got = per_server[rank] / f64::from(2 * objects);
            assert!((got - share).abs() < 0.06 * share, "rank {}: {got} vs {share}", rank + 1);
        }
    }

    #[test]
    fn figure_6_versions_placement_as_of_each_version() {
        // Version 9: servers 1–5 active; version 10: four more (1–9); version 11: all ten.
        let map = map(10, 4000, 2, vec![version(9, 5), version(10, 9), version(11, 10)]);
        let ring = ring_of(&map);
        assert_eq!(ring.versions().collect::<Vec<_>>(), vec![9, 10, 11]);
        let (mut v9, mut v10, mut v11) = (ReplicaSet::new(), ReplicaSet::new(), ReplicaSet::new());
        let (mut moved_9_10, mut moved_10_11) = (0, 0);
        for i in 0..20_000u32 {
            let key = hash32_2(i, 6);
            assert!(ring.place_as_of(9, key, 2, &mut v9));
            assert!(ring.place_as_of(10, key, 2, &mut v10));
            assert!(ring.place_as_of(11, key, 2, &mut v11));
            assert!(v9.devices().all(|d| d.0 < 5), "{v9:?} in version 9");
            assert!(v10.devices().all(|d| d.0 < 9), "{v10:?} in version 10");
            // Re-integration moves replicas only onto re-activated servers, and the primary
            // copy stays where it is: data written in version 9 stays readable.
            for (old, new, woken) in [(&v9, &v10, 5..9), (&v10, &v11, 9..10)] {
                for d in new.devices().filter(|d| !old.contains(*d)) {
                    assert!(woken.contains(&d.0), "{old:?} → {new:?}");
                }
                let primary = |set: &ReplicaSet| set.devices().find(|d| d.0 < 2);
                assert_eq!(primary(old), primary(new));
            }
            moved_9_10 += usize::from(v9 != v10);
            moved_10_11 += usize::from(v10 != v11);
            // Now is the last version: full power.
            assert_eq!(place(&ring, key, 2), v11.as_slice());
        }
        assert!(moved_9_10 > moved_10_11 && moved_10_11 > 0);
    }

    #[test]
    fn now_skips_down_devices_as_of_does_not() {
        let mut builder = map(10, 1000, 2, Vec::new()).to_builder();
        builder.devices[4].up = false;
        let map = builder.build().expect("valid");
        let ring = ring_of(&map);
        let mut out = ReplicaSet::new();
        let mut skipped = 0;
        for i in 0..5000u32 {
            let key = hash32_2(i, 8);
            let now = place(&ring, key, 2);
            assert!(!now.contains(&4));
            ring.place_as_of(1, key, 2, &mut out);
            skipped += usize::from(out.contains(DeviceId(4)));
        }
        assert!(skipped > 0);
    }

    #[test]
    fn capacity_plan_groups_neighbouring_ranks() {
        let params = ElasticParams { primaries: 14, scale: 1 << 16 };
        let tb = 1_000_000_000_000u64;
        let capacities = [2 * tb, 3 * tb / 2, tb, 3 * tb / 4, tb / 2, 32 * tb / 100];
        let plan = capacity_plan(&params, 100, 3, &capacities);
        assert_eq!(plan.tiers.first().map(|t| (t.ranks.0, t.capacity_bytes)), Some((1, 2 * tb)));
        assert_eq!(plan.tiers.last().map(|t| t.ranks.1), Some(100));
        for pair in plan.tiers.windows(2) {
            assert_eq!(pair[0].ranks.1 + 1, pair[1].ranks.0, "contiguous groups");
            assert!(pair[0].capacity_bytes > pair[1].capacity_bytes, "falling capacities");
        }
        for tier in &plan.tiers {
            assert!(tier.utilisation <= 1.0 + 1e-9, "{tier:?}");
        }
        assert!(plan.utilisation > plan.uniform_utilisation, "{plan:?}");
        let total: f64 = plan.shares.iter().sum();
        assert!((total - 1.0).abs() < 1e-9);
    }
}
