//! A map compiled for lookups: per pool, object → PG → placement key → devices.

use crate::crush::hash::hash32_2;
use crate::crush::{CrushMap, CrushWork};
use crate::ids::{DeviceId, ITEM_NONE, PoolId};
use crate::map::{ClusterMap, EngineSpec, Pool, REPLICAS_MAX, RuleKind};
use crate::pg::{self, PgId};
use crate::ring::Ring;

/// An ordered set of devices (primary first). Positional sets (erasure-coded pools) may hold
/// [`ITEM_NONE`] holes. Two sets are equal when their entries are: whatever lies beyond
/// `len` (left there by [`clear`](Self::clear)) does not count.
#[derive(Clone, Copy)]
pub struct ReplicaSet {
    len: u8,
    items: [i32; REPLICAS_MAX],
}

impl PartialEq for ReplicaSet {
    fn eq(&self, other: &ReplicaSet) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for ReplicaSet {}

impl Default for ReplicaSet {
    fn default() -> ReplicaSet {
        ReplicaSet { len: 0, items: [ITEM_NONE; REPLICAS_MAX] }
    }
}

impl std::fmt::Debug for ReplicaSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl ReplicaSet {
    /// An empty set.
    pub fn new() -> ReplicaSet {
        ReplicaSet::default()
    }
    /// The raw entries (device ids or `ITEM_NONE`).
    pub fn as_slice(&self) -> &[i32] {
        &self.items[..self.len as usize]
    }
    /// Number of entries, holes included.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Most entries a set can hold.
    pub fn capacity(&self) -> usize {
        REPLICAS_MAX
    }
    /// Removes every entry.
    pub fn clear(&mut self) {
        self.len = 0;
    }
    /// Appends an entry (ignored when full).
    pub fn push(&mut self, item: i32) {
        if (self.len as usize) < REPLICAS_MAX {
            self.items[self.len as usize] = item;
            self.len += 1;
        }
    }
    /// The devices, holes skipped.
    pub fn devices(&self) -> impl Iterator<Item = DeviceId> + '_ {
        self.as_slice().iter().filter(|&&i| i >= 0 && i != ITEM_NONE).map(|&i| DeviceId(i as u32))
    }
    /// The primary: the first device.
    pub fn primary(&self) -> Option<DeviceId> {
        self.devices().next()
    }
    /// Whether `device` is in the set.
    pub fn contains(&self, device: DeviceId) -> bool {
        self.devices().any(|d| d == device)
    }
    fn set_from(&mut self, items: &[i32]) {
        self.len = items.len().min(REPLICAS_MAX) as u8;
        self.items[..self.len as usize].copy_from_slice(&items[..self.len as usize]);
    }
}

/// Where an object lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Its placement group, for pools with PGs.
    pub pg: Option<PgId>,
    /// The engine's input (Ceph's pps for PG pools).
    pub key: u32,
    /// The devices, primary first.
    pub devices: ReplicaSet,
}

#[derive(Clone, Debug)]
enum PoolEngine {
    Crush { rule: crate::ids::RuleId, erasure: bool },
    Ring(usize),
}

#[derive(Clone, Debug)]
struct PoolInfo {
    pool: Pool,
    engine: PoolEngine,
}

/// Per-device state the post-processing of CRUSH results needs.
#[derive(Clone, Debug, Default)]
struct DeviceTable {
    exists: Vec<bool>,
    up: Vec<bool>,
    primary_affinity: Vec<u32>,
    reweights: Vec<u32>,
    any_affinity: bool,
}

/// A cluster map compiled for placement lookups. Immutable; share it between threads.
#[derive(Clone, Debug)]
pub struct Placement {
    crush: CrushMap,
    rings: Vec<Ring>,
    pools: Vec<PoolInfo>,
    devices: DeviceTable,
    epoch: crate::ids::Epoch,
}

/// Scratch space for lookups; one per thread, reused across calls.
#[derive(Clone, Debug, Default)]
pub struct Scratch {
    crush: CrushWork,
    raw: Vec<i32>,
}

impl Placement {
    /// Compiles `map`. Never fails for a map the builder accepted; the `Result` is for engines
    /// whose parameters are checked at compile time.
    pub fn new(map: &ClusterMap) -> Result<Placement, crate::MapError> {
        let crush = CrushMap::new(map);
        let mut rings: Vec<(crate::map::RingParams, Ring)> = Vec::new();
        let mut pools = Vec::with_capacity(map.pools().len());
        for pool in map.pools() {
            let engine = match pool.engine {
                EngineSpec::Crush { rule } => {
                    let erasure = map.rule(rule).is_some_and(|r| r.kind == RuleKind::Erasure);
                    PoolEngine::Crush { rule, erasure }
                }
                EngineSpec::Ring(params) => {
                    let index = match rings.iter().position(|(p, _)| *p == params) {
                        Some(index) => index,
                        None => {
                            rings.push((params, Ring::new(map, &params)));
                            rings.len() - 1
                        }
                    };
                    PoolEngine::Ring(index)
                }
            };
            pools.push(PoolInfo { pool: pool.clone(), engine });
        }
        let max = map.max_devices() as usize;
        let mut devices = DeviceTable {
            exists: vec![false; max],
            up: vec![false; max],
            primary_affinity: vec![0x10000; max],
            reweights: map.reweight_vector(),
            any_affinity: false,
        };
        for device in map.devices() {
            let i = device.id.0 as usize;
            devices.exists[i] = true;
            devices.up[i] = device.up;
            devices.primary_affinity[i] = device.primary_affinity.0;
            devices.any_affinity |= device.primary_affinity.0 < 0x10000;
        }
        Ok(Placement {
            crush,
            rings: rings.into_iter().map(|(_, r)| r).collect(),
            pools,
            devices,
            epoch: map.epoch(),
        })
    }

    /// The epoch of the map this was compiled from.
    pub fn epoch(&self) -> crate::ids::Epoch {
        self.epoch
    }

    /// The compiled CRUSH map (for crushtool-style tests of rules).
    pub fn crush(&self) -> &CrushMap {
        &self.crush
    }

    /// Fresh scratch space for this placement.
    pub fn scratch(&self) -> Scratch {
        Scratch { crush: CrushWork::new(&self.crush), raw: Vec::new() }
    }

    /// The pool with this id.
    pub fn pool(&self, id: PoolId) -> Option<PoolPlacement<'_>> {
        let info = self.pools.iter().find(|p| p.pool.id == id)?;
        Some(PoolPlacement { placement: self, info })
    }

    /// The pool with this name.
    pub fn pool_by_name(&self, name: &str) -> Option<PoolPlacement<'_>> {
        let info = self.pools.iter().find(|p| p.pool.name == name)?;
        Some(PoolPlacement { placement: self, info })
    }

    /// Every pool.
    pub fn pools(&self) -> impl Iterator<Item = PoolPlacement<'_>> {
        self.pools.iter().map(move |info| PoolPlacement { placement: self, info })
    }
}

/// Placement in one pool.
#[derive(Clone, Copy, Debug)]
pub struct PoolPlacement<'a> {
    placement: &'a Placement,
    info: &'a PoolInfo,
}

impl<'a> PoolPlacement<'a> {
    /// The pool.
    pub fn pool(&self) -> &'a Pool {
        &self.info.pool
    }

    /// Whether objects are grouped into PGs.
    pub fn has_pgs(&self) -> bool {
        self.info.pool.pg_num > 0
    }

    /// The PG an object belongs to (pools with PGs).
    pub fn object_pg(&self, name: &str) -> Option<PgId> {
        let pool = &self.info.pool;
        (pool.pg_num > 0).then(|| PgId { pool: pool.id, seed: pg::object_seed(name, pool.pg_num) })
    }

    /// The engine input of a PG: Ceph's pps.
    pub fn pg_key(&self, seed: u32) -> u32 {
        let pool = &self.info.pool;
        pg::pg_pps(pool.id, seed, pool.pgp_num, pool.hashpspool)
    }

    /// The engine input of an object: its PG's pps, or for object-level pools a hash of the
    /// name salted with the pool id.
    pub fn object_key(&self, name: &str) -> (Option<PgId>, u32) {
        match self.object_pg(name) {
            Some(pg) => (Some(pg), self.pg_key(pg.seed)),
            None => (None, hash32_2(pg::object_hash(name), self.info.pool.id.0)),
        }
    }

    /// Where an object lives (allocates scratch; use [`place`](Self::place) in loops).
    pub fn locate(&self, name: &str) -> Location {
        let (pg, key) = self.object_key(name);
        let mut scratch = self.placement.scratch();
        let mut devices = ReplicaSet::new();
        self.place(key, &mut scratch, &mut devices);
        Location { pg, key, devices }
    }

    /// The acting devices for engine input `key`, primary first: for `crush` pools Ceph's up
    /// set (non-existent and down devices removed — shifted out for replicated pools, holes
    /// for erasure-coded ones — and primary affinity applied).
    pub fn place(&self, key: u32, scratch: &mut Scratch, out: &mut ReplicaSet) {
        match &self.info.engine {
            PoolEngine::Ring(index) => {
                self.placement.rings[*index].place(key, self.info.pool.size as usize, out);
            }
            PoolEngine::Crush { rule, erasure } => {
                self.place_raw_crush(*rule, key, scratch);
                let table = &self.placement.devices;
                out.clear();
                for &item in &scratch.raw {
                    let usable = item >= 0
                        && item != ITEM_NONE
                        && table.exists.get(item as usize).copied().unwrap_or(false)
                        && table.up[item as usize];
                    if usable {
                        out.push(item);
                    } else if *erasure {
                        out.push(ITEM_NONE);
                    }
                }
                if table.any_affinity {
                    apply_primary_affinity(table, key, *erasure, out);
                }
            }
        }
    }

    /// The raw CRUSH result (before up/exists filtering) for engine input `key`.
    pub fn place_raw(&self, key: u32, scratch: &mut Scratch, out: &mut ReplicaSet) {
        match &self.info.engine {
            PoolEngine::Ring(index) => {
                self.placement.rings[*index].place(key, self.info.pool.size as usize, out);
            }
            PoolEngine::Crush { rule, .. } => {
                self.place_raw_crush(*rule, key, scratch);
                out.set_from(&scratch.raw);
            }
        }
    }

    fn place_raw_crush(&self, rule: crate::ids::RuleId, key: u32, scratch: &mut Scratch) {
        let size = self.info.pool.size as usize;
        scratch.raw.resize(size, 0);
        let n = self.placement.crush.do_rule(
            rule,
            key,
            &mut scratch.raw,
            &self.placement.devices.reweights,
            self.placement.crush.choose_args_for_pool(i64::from(self.info.pool.id.0)),
            &mut scratch.crush,
        );
        scratch.raw.truncate(n);
    }

    /// The ring of a `ring` pool.
    pub fn ring(&self) -> Option<&'a Ring> {
        match self.info.engine {
            PoolEngine::Ring(index) => Some(&self.placement.rings[index]),
            PoolEngine::Crush { .. } => None,
        }
    }
}

/// Ceph's `_apply_primary_affinity`.
fn apply_primary_affinity(table: &DeviceTable, pps: u32, erasure: bool, set: &mut ReplicaSet) {
    let items = set.as_slice();
    let any = items.iter().any(|&o| o != ITEM_NONE && table.primary_affinity[o as usize] < 0x10000);
    if !any {
        return;
    }
    let mut chosen: Option<usize> = None;
    for (position, &osd) in items.iter().enumerate() {
        if osd == ITEM_NONE {
            continue;
        }
        let affinity = table.primary_affinity[osd as usize];
        if affinity < 0x10000 && (hash32_2(pps, osd as u32) >> 16) >= affinity {
            // Rejected; remember the first one as a fallback.
            if chosen.is_none() {
                chosen = Some(position);
            }
            continue;
        }
        chosen = Some(position);
        break;
    }
    let Some(position) = chosen else { return };
    if !erasure && position > 0 {
        let mut items: Vec<i32> = set.as_slice().to_vec();
        let primary = items.remove(position);
        items.insert(0, primary);
        set.set_from(&items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_sets_compare_by_their_entries_only() {
        // A reused set keeps stale entries past its length; they must not make it unequal
        // to a fresh set with the same entries (they did when equality was derived).
        let mut reused = ReplicaSet::new();
        for d in [4, 8, 15] {
            reused.push(d);
        }
        reused.clear();
        reused.push(2);
        let mut fresh = ReplicaSet::new();
        fresh.push(2);
        assert_eq!(reused, fresh);
        fresh.push(3);
        assert_ne!(reused, fresh);
    }
}
