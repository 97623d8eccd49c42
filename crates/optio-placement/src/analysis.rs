//! Load and movement of a pool's placement: PG copies, objects and bytes per device, the
//! share each device should get, and what moves between two maps against the minimum.
//!
//! Objects are simulated by name (`obj-0`, `obj-1`, …) so that object counts follow the real
//! object → PG → device path; everything is deterministic.

use std::collections::BTreeMap;

use crate::ids::{ITEM_NONE, ItemId, PoolId, TypeId};
use crate::map::{ClusterMap, EngineSpec, Pool, Step};
use crate::placement::{Placement, PoolPlacement};
use crate::replica::ReplicaSet;
use crate::stats::{Summary, minimum_movement_share};

/// The name of simulated object `index`.
pub fn object_name(index: u64) -> String {
    format!("obj-{index}")
}

/// Per-device load of one pool. Vectors are indexed by device id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolLoad {
    /// PG copies per device (0 for object-level pools).
    pub pg_copies: Vec<u64>,
    /// Object copies per device.
    pub objects: Vec<u64>,
    /// Bytes per device.
    pub bytes: Vec<u64>,
    /// PGs (or objects, for object-level pools) that got fewer devices than the pool size.
    pub undersized: u64,
    /// Units placed: PGs, or objects for object-level pools.
    pub units: u64,
    /// Bytes clients stored in the simulated objects (objects × object size): the pool's
    /// logical bytes, which `bytes` (raw: every replica or chunk) adds up to `copy_factor`
    /// times when nothing is undersized.
    pub logical_bytes: u64,
}

impl PoolLoad {
    /// Raw bytes: every replica or chunk on every device.
    pub fn raw_bytes(&self) -> u64 {
        self.bytes.iter().sum()
    }
}

/// How many units of work [`pool_load`] reports progress in.
pub fn pool_load_steps(pool: &Pool, objects: u64) -> u64 {
    u64::from(pool.pg_num) + objects
}

/// Computes a pool's load with `objects` simulated objects of `object_size` bytes.
/// `progress` is called with the number of steps done since its last call.
pub fn pool_load(
    placement: &Placement,
    pool: PoolPlacement<'_>,
    max_devices: u32,
    objects: u64,
    object_size: u64,
    progress: &mut dyn FnMut(u64),
) -> PoolLoad {
    PlacedPool::place(placement, pool, objects, progress).load(max_devices, object_size)
}

/// A pool placed once: the set of every PG (pools with PGs) or of every simulated object
/// (the others), and the PG of each simulated object — what a pool's load, the movement
/// between two maps and the copies a change leaves short are all counted from, so that a
/// judge of a change places each map once.
#[derive(Clone, Debug, PartialEq)]
pub struct PlacedPool {
    /// The pool.
    pub pool: PoolId,
    /// Its size (copies per set).
    pub size: u32,
    /// Its PG count (0: object-level).
    pub pg_num: u32,
    /// Each PG's set (pools with PGs), else each simulated object's: `size` entries each
    /// (a set's length in `lens`), so that a million objects cost 13 MB at size 3, not 130.
    sets: Vec<i32>,
    lens: Vec<u8>,
    /// Each simulated object's PG (pools with PGs; empty otherwise).
    object_pgs: Vec<u32>,
    /// The pool's erasure profile (an object's copies are then chunks).
    erasure: Option<crate::params::erasure::ErasureParams>,
}

impl PlacedPool {
    /// Places every PG of `pool` (compiled in `placement`) and `objects` simulated objects
    /// ([`object_name`]). `progress` counts PGs placed and objects placed or hashed to
    /// their PG ([`pool_load_steps`] in all).
    pub fn place(
        placement: &Placement,
        pool: PoolPlacement<'_>,
        objects: u64,
        progress: &mut dyn FnMut(u64),
    ) -> PlacedPool {
        const BATCH: u64 = 4096;
        let mut scratch = placement.scratch();
        let mut set = ReplicaSet::new();
        let info = pool.pool();
        let mut placed = PlacedPool {
            pool: info.id,
            size: info.size,
            pg_num: if pool.has_pgs() { info.pg_num } else { 0 },
            sets: Vec::new(),
            lens: Vec::new(),
            object_pgs: Vec::new(),
            erasure: info.erasure,
        };
        if pool.has_pgs() {
            placed.reserve(u64::from(info.pg_num));
            for seed in 0..info.pg_num {
                pool.place(pool.pg_key(seed), &mut scratch, &mut set);
                placed.push(&set);
                if u64::from(seed + 1) % BATCH == 0 {
                    progress(BATCH);
                }
            }
            progress(u64::from(info.pg_num) % BATCH);
            placed.object_pgs.reserve(usize::try_from(objects).unwrap_or(0));
            for index in 0..objects {
                let pg = pool.object_pg(&object_name(index)).expect("pool has PGs");
                placed.object_pgs.push(pg.seed);
                if (index + 1) % BATCH == 0 {
                    progress(BATCH);
                }
            }
        } else {
            placed.reserve(objects);
            for index in 0..objects {
                let (_, key) = pool.object_key(&object_name(index));
                pool.place(key, &mut scratch, &mut set);
                placed.push(&set);
                if (index + 1) % BATCH == 0 {
                    progress(BATCH);
                }
            }
        }
        progress(objects % BATCH);
        placed
    }

    /// `pool` placed on the map that is `old` with device `out` marked out and nothing else
    /// changed (`MapChange::SetState` with `is_in: false` alone), from `previous` (the same
    /// pool placed on `old`, with the same `objects`), when CRUSH confines the change to the
    /// PGs that held the device: it was in, up and at full reweight. CRUSH reads a
    /// device's reweight only where a descent reaches that device and would take it, and at
    /// full reweight it takes it; so a PG whose set does not hold the device never read its
    /// reweight, its descent is the same on the new map, and it keeps its set — only the
    /// PGs that held the device are placed again (a few in a thousand at 1,000 devices).
    /// Exactly what [`PlacedPool::place`] gives (tested against it). `None` when this does
    /// not apply — an engine other than `crush`, a pool without PGs, a pool that changed, a
    /// device that was out, down or below full reweight: place it then.
    pub fn place_after(
        placement: &Placement,
        pool: PoolPlacement<'_>,
        objects: u64,
        old: &ClusterMap,
        out: crate::ids::DeviceId,
        previous: &PlacedPool,
    ) -> Option<PlacedPool> {
        let device = &out;
        let info = pool.pool();
        let was = old.device(*device)?;
        let confined = pool.is_crush()
            && pool.has_pgs()
            && old.pool(info.id) == Some(info)
            && was.is_in
            && was.up
            && was.reweight == crate::ids::Weight::ONE
            && previous.pool == info.id
            && previous.pg_num == info.pg_num
            && previous.size == info.size
            && previous.erasure == info.erasure
            && previous.lens.len() == info.pg_num as usize
            && previous.object_pgs.len() as u64 == objects;
        if !confined {
            return None;
        }
        let mut placed = previous.clone();
        let stride = placed.stride();
        let id = i32::try_from(device.0).ok()?;
        let mut scratch = placement.scratch();
        let mut set = ReplicaSet::new();
        for seed in 0..info.pg_num {
            let index = seed as usize;
            let slots = index * stride..index * stride + usize::from(placed.lens[index]);
            if !placed.sets[slots].contains(&id) {
                continue;
            }
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            let items = &set.as_slice()[..set.len().min(stride)];
            let all = &mut placed.sets[index * stride..(index + 1) * stride];
            all.fill(ITEM_NONE);
            all[..items.len()].copy_from_slice(items);
            placed.lens[index] = u8::try_from(items.len()).unwrap_or(u8::MAX);
        }
        Some(placed)
    }

    fn stride(&self) -> usize {
        (self.size as usize).clamp(1, crate::replica::REPLICAS_MAX)
    }

    fn reserve(&mut self, sets: u64) {
        let sets = usize::try_from(sets).unwrap_or(0);
        self.sets.reserve(sets.saturating_mul(self.stride()));
        self.lens.reserve(sets);
    }

    /// Appends a set (at most `size` entries: what every engine places).
    fn push(&mut self, set: &ReplicaSet) {
        let stride = self.stride();
        let items = &set.as_slice()[..set.len().min(stride)];
        self.sets.extend_from_slice(items);
        self.sets.extend(std::iter::repeat_n(ITEM_NONE, stride - items.len()));
        self.lens.push(u8::try_from(items.len()).unwrap_or(u8::MAX));
    }

    /// Set `index` (a PG's, or an object's in object-level pools).
    fn set(&self, index: usize) -> ReplicaSet {
        let stride = self.stride();
        let mut set = ReplicaSet::new();
        set.set_from(&self.sets[index * stride..index * stride + usize::from(self.lens[index])]);
        set
    }

    /// The sets placed (PGs, or objects in object-level pools).
    fn sets(&self) -> impl Iterator<Item = ReplicaSet> + '_ {
        (0..self.lens.len()).map(|index| self.set(index))
    }

    /// Every PG's set, by seed (none for an object-level pool).
    pub fn pg_sets(&self) -> impl Iterator<Item = ReplicaSet> + '_ {
        let pgs = if self.has_pgs() { self.lens.len() } else { 0 };
        (0..pgs).map(|index| self.set(index))
    }

    /// Whether the pool places PGs.
    pub fn has_pgs(&self) -> bool {
        self.pg_num > 0
    }

    /// The simulated objects placed.
    pub fn objects(&self) -> u64 {
        self.object_count() as u64
    }

    fn object_count(&self) -> usize {
        if self.has_pgs() { self.object_pgs.len() } else { self.lens.len() }
    }

    /// Simulated object `index`'s set.
    fn object_set(&self, index: usize) -> ReplicaSet {
        if self.has_pgs() { self.set(self.object_pgs[index] as usize) } else { self.set(index) }
    }

    /// The pool's load on `max_devices` device ids, objects of `object_size` bytes: each
    /// copy on a device takes `object_size` bytes, or one chunk's for an erasure-coded pool
    /// ([`ErasureParams::chunk_bytes`](crate::params::erasure::ErasureParams::chunk_bytes)).
    pub fn load(&self, max_devices: u32, object_size: u64) -> PoolLoad {
        let n = max_devices as usize;
        let mut load = PoolLoad {
            pg_copies: vec![0; n],
            objects: vec![0; n],
            bytes: vec![0; n],
            ..PoolLoad::default()
        };
        let size = self.size as usize;
        let undersized = |set: &ReplicaSet| u64::from(set.devices().count() < size);
        if self.has_pgs() {
            for set in self.sets() {
                for device in set.devices() {
                    load.pg_copies[device.0 as usize] += 1;
                }
                load.undersized += undersized(&set);
            }
            load.units = u64::from(self.pg_num);
        } else {
            for set in self.sets() {
                load.undersized += undersized(&set);
            }
            load.units = self.objects();
        }
        for index in 0..self.object_count() {
            for device in self.object_set(index).devices() {
                load.objects[device.0 as usize] += 1;
            }
        }
        let copy_bytes = self.erasure.map_or(object_size, |e| e.chunk_bytes(object_size));
        for (bytes, count) in load.bytes.iter_mut().zip(&load.objects) {
            *bytes = count.saturating_mul(copy_bytes);
        }
        load.logical_bytes = (self.object_count() as u64).saturating_mul(object_size);
        load
    }

    /// Of the first `objects` simulated objects, how many have fewer devices than `size` and
    /// than `min_size`.
    pub fn short_of(&self, objects: u64, size: u32, min_size: u32) -> (u64, u64) {
        let (mut below_size, mut below_min_size) = (0u64, 0u64);
        for index in 0..usize::try_from(objects).unwrap_or(usize::MAX).min(self.object_count()) {
            let copies = self.object_set(index).devices().count();
            let copies = u32::try_from(copies).unwrap_or(u32::MAX);
            below_size += u64::from(copies < size);
            below_min_size += u64::from(copies < min_size);
        }
        (below_size, below_min_size)
    }
}

/// Every pool of a map placed once ([`PlacedPool`]), with the compiled map.
pub struct PlacedMap {
    /// The compiled map.
    pub placement: Placement,
    /// Its pools, in the map's order.
    pub pools: Vec<PlacedPool>,
}

impl PlacedMap {
    /// Compiles `map` and places each of its pools with `objects` simulated objects.
    pub fn new(map: &ClusterMap, objects: u64) -> Result<PlacedMap, crate::MapError> {
        let placement = Placement::new(map)?;
        let pools = map
            .pools()
            .iter()
            .filter_map(|pool| placement.pool(pool.id))
            .map(|pool| PlacedPool::place(&placement, pool, objects, &mut |_| {}))
            .collect();
        Ok(PlacedMap { placement, pools })
    }

    /// Pool `id`, placed.
    pub fn pool(&self, id: PoolId) -> Option<&PlacedPool> {
        self.pools.iter().find(|p| p.pool == id)
    }
}

/// The share of a pool's data each device should hold given weights and states (indexed by
/// device id, summing to 1 when any device can hold data): for `crush` pools the devices under
/// the rule's `take` items, by CRUSH weight × reweight; for `ring` pools the devices on the
/// ring, by capacity × reweight; for `attributed` and `elastic` pools the shares their layouts
/// are designed to give (`AttributedRing::expected_shares`, `ElasticRing::expected_shares`:
/// sectors' capacity and bandwidth strategies; primaries 1/r, equal-work secondaries). Out,
/// down and zero-weight devices get 0.
pub fn target_shares(map: &ClusterMap, pool: &Pool) -> Vec<f64> {
    let mut shares = vec![0.0; map.max_devices() as usize];
    match pool.engine_spec() {
        EngineSpec::Crush { rule } => {
            let Some(rule) = map.rule(rule) else { return shares };
            for step in &rule.steps {
                if let Step::Take(item) = step {
                    for device in map.devices_under(*item) {
                        if let Some(d) = map.device(device)
                            && d.up
                            && d.is_in
                        {
                            shares[device.0 as usize] = d.weight.as_f64() * d.reweight.as_f64();
                        }
                    }
                }
            }
        }
        EngineSpec::Ring(_) => {
            for d in map.devices() {
                if d.up && d.is_in && d.weight.0 > 0 {
                    shares[d.id.0 as usize] = d.capacity_bytes as f64 * d.reweight.as_f64();
                }
            }
        }
        EngineSpec::Attributed(params) => {
            let ring =
                crate::engine::attributed::AttributedRing::new(map, &params, pool.sector_base());
            for (device, share) in ring.expected_shares(pool.size as usize) {
                shares[device.0 as usize] = share;
            }
        }
        EngineSpec::Elastic(params) => {
            let ring = crate::engine::elastic::ElasticRing::new(map, &params);
            for (device, share) in ring.expected_shares(pool.size as usize) {
                shares[device.0 as usize] = share;
            }
        }
    }
    let total: f64 = shares.iter().sum();
    if total > 0.0 {
        for share in &mut shares {
            *share /= total;
        }
    }
    shares
}

/// What moves in one pool between two placements.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Movement {
    /// Copies (PG copies, or object copies for object-level pools) after the change.
    pub copies: u64,
    /// Copies that are on a device that did not hold them before.
    pub moved: u64,
    /// Bytes in all copies after the change (from the simulated objects).
    pub bytes: u64,
    /// Bytes that move.
    pub moved_bytes: u64,
    /// The least share any placement must move for this change of weights and states.
    pub minimum_share: f64,
    /// Copies gained per device id (negative: lost).
    pub gained: Vec<i64>,
}

impl Movement {
    /// Moved copies over the minimum (1.0 is optimal; ∞ when the minimum is 0 and something
    /// moved; 1.0 when nothing had to move and nothing did).
    pub fn ratio_to_minimum(&self) -> f64 {
        let minimum = self.minimum_copies();
        if minimum == 0.0 {
            return if self.moved == 0 { 1.0 } else { f64::INFINITY };
        }
        self.moved as f64 / minimum
    }

    /// The minimum, in copies.
    pub fn minimum_copies(&self) -> f64 {
        self.minimum_share * self.copies as f64
    }
}

/// Devices of `after` not in `before` (for replicated sets), or positions whose device changed
/// (for positional sets with holes).
fn changed(before: &ReplicaSet, after: &ReplicaSet, positional: bool) -> u64 {
    if positional {
        after
            .as_slice()
            .iter()
            .enumerate()
            .filter(|(i, d)| **d != ITEM_NONE && before.as_slice().get(*i) != Some(*d))
            .count() as u64
    } else {
        after.devices().filter(|d| !before.contains(*d)).count() as u64
    }
}

/// What moves in pool `pool_a` (of map A) → `pool_b` (of map B), with `objects` simulated
/// objects of `object_size` bytes. PG pools with equal `pg_num` compare PG by PG; otherwise
/// objects are compared one by one. `progress` counts map B's steps ([`pool_load_steps`]).
#[allow(clippy::too_many_arguments)]
pub fn movement(
    map_a: &ClusterMap,
    placement_a: &Placement,
    map_b: &ClusterMap,
    placement_b: &Placement,
    pool_a: PoolPlacement<'_>,
    pool_b: PoolPlacement<'_>,
    objects: u64,
    object_size: u64,
    progress: &mut dyn FnMut(u64),
) -> Movement {
    let a = PlacedPool::place(placement_a, pool_a, objects, &mut |_| {});
    let b = PlacedPool::place(placement_b, pool_b, objects, progress);
    movement_between(map_a, &a, map_b, &b, object_size)
}

/// What moves from pool `a` placed on map A to pool `b` placed on map B (both placed with the
/// same simulated objects), objects of `object_size` bytes: [`movement`] on placements made
/// once.
pub fn movement_between(
    map_a: &ClusterMap,
    a: &PlacedPool,
    map_b: &ClusterMap,
    b: &PlacedPool,
    object_size: u64,
) -> Movement {
    let devices = map_a.max_devices().max(map_b.max_devices()) as usize;
    let mut result = Movement { gained: vec![0; devices], ..Movement::default() };
    let (Some(info_a), Some(info_b)) = (map_a.pool(a.pool), map_b.pool(b.pool)) else {
        return result;
    };
    let positional = map_b
        .rule(match info_b.engine_spec() {
            EngineSpec::Crush { rule } => rule,
            _ => crate::ids::RuleId(u32::MAX),
        })
        .is_some_and(|r| r.kind == crate::map::RuleKind::Erasure);
    let account =
        |before: &ReplicaSet, after: &ReplicaSet, weight_objects: u64, result: &mut Movement| {
            let copies = after.devices().count() as u64;
            let moved = changed(before, after, positional);
            result.copies += copies;
            result.moved += moved;
            result.bytes += copies * weight_objects * object_size;
            result.moved_bytes += moved * weight_objects * object_size;
            for d in after.devices() {
                if !before.contains(d) {
                    result.gained[d.0 as usize] += 1;
                }
            }
            for d in before.devices() {
                if !after.contains(d) {
                    result.gained[d.0 as usize] -= 1;
                }
            }
        };
    let objects = a.object_count().min(b.object_count());
    if a.has_pgs() && b.has_pgs() && a.pg_num == b.pg_num {
        let mut per_pg = vec![0u64; b.pg_num as usize];
        for &pg in &b.object_pgs[..objects] {
            per_pg[pg as usize] += 1;
        }
        for ((before, after), count) in a.sets().zip(b.sets()).zip(&per_pg) {
            account(&before, &after, *count, &mut result);
        }
    } else {
        for index in 0..objects {
            account(&a.object_set(index), &b.object_set(index), 1, &mut result);
        }
    }
    result.minimum_share =
        minimum_movement_share(&target_shares(map_a, info_a), &target_shares(map_b, info_b));
    result
}

/// The load of several pools placed together, per device, beside what each device's target
/// share says it should hold: what `optio analyze` reports. Vectors are indexed by device id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterLoad {
    /// The pools' loads, added up.
    pub total: PoolLoad,
    /// PG copies each device should hold by its target shares, summed over the pools.
    pub expected_pgs: Vec<f64>,
    /// Objects each device should hold by its target shares, summed over the pools.
    pub expected_objects: Vec<f64>,
    /// Each pool's own load and target shares ([`target_shares`]), in the order asked.
    pub pools: Vec<(PoolId, PoolLoad, Vec<f64>)>,
    /// Devices that can hold data in any of the pools (some expected or placed load), by id.
    pub eligible: Vec<usize>,
}

impl ClusterLoad {
    /// Whether any pool places PGs (then balance is judged on PG copies, else on objects).
    pub fn uses_pgs(&self) -> bool {
        self.total.pg_copies.iter().any(|&c| c > 0)
    }

    /// PG copies over the eligible devices.
    pub fn pg_summary(&self) -> Summary {
        self.summary(&self.total.pg_copies)
    }

    /// Objects over the eligible devices.
    pub fn object_summary(&self) -> Summary {
        self.summary(&self.total.objects)
    }

    /// The standard deviation of PG copies from their expected counts.
    pub fn pg_deviation(&self) -> f64 {
        self.deviation(&self.total.pg_copies, &self.expected_pgs)
    }

    /// The standard deviation of objects from their expected counts.
    pub fn object_deviation(&self) -> f64 {
        self.deviation(&self.total.objects, &self.expected_objects)
    }

    /// Device `i`'s count and expected count of the metric balance is judged on (PG copies when
    /// [`uses_pgs`](Self::uses_pgs), else objects).
    pub fn judged(&self, i: usize) -> (f64, f64) {
        if self.uses_pgs() {
            (self.total.pg_copies[i] as f64, self.expected_pgs[i])
        } else {
            (self.total.objects[i] as f64, self.expected_objects[i])
        }
    }

    /// The eligible devices, most loaded against their expectation first (ties by id).
    pub fn by_excess(&self) -> Vec<usize> {
        let excess = |i: usize| {
            let (count, expected) = self.judged(i);
            count - expected
        };
        let mut order = self.eligible.clone();
        order.sort_by(|&a, &b| {
            excess(b).partial_cmp(&excess(a)).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b))
        });
        order
    }

    fn summary(&self, counts: &[u64]) -> Summary {
        let values: Vec<f64> = self.eligible.iter().map(|&i| counts[i] as f64).collect();
        Summary::of(&values)
    }

    fn deviation(&self, counts: &[u64], expected: &[f64]) -> f64 {
        let values: Vec<f64> =
            self.eligible.iter().map(|&i| counts[i] as f64 - expected[i]).collect();
        (values.iter().map(|v| v * v).sum::<f64>() / values.len() as f64).sqrt()
    }
}

/// How many units of work [`cluster_load`] reports progress in.
pub fn cluster_load_steps(map: &ClusterMap, pools: &[PoolId], objects: u64) -> u64 {
    pools.iter().filter_map(|id| map.pool(*id)).map(|pool| pool_load_steps(pool, objects)).sum()
}

/// Places `pools` of `map` (compiled as `placement`; ids it lacks are skipped) with `objects` simulated objects of
/// `object_size` bytes each, and adds up their loads and expectations. `progress` is called
/// with the number of steps done since its last call ([`cluster_load_steps`] in all).
pub fn cluster_load(
    map: &ClusterMap,
    placement: &Placement,
    pools: &[PoolId],
    objects: u64,
    object_size: u64,
    progress: &mut dyn FnMut(u64),
) -> ClusterLoad {
    // One pool placed at a time: a pool's placed objects are dropped before the next.
    let mut load = ClusterLoad::empty(map);
    for &id in pools {
        let Some(pool) = placement.pool(id) else { continue };
        load.add(map, &PlacedPool::place(placement, pool, objects, progress), object_size);
    }
    load.finish();
    load
}

/// [`cluster_load`] of pools already placed (on `map`).
pub fn cluster_load_of<'a>(
    map: &ClusterMap,
    placed: impl IntoIterator<Item = &'a PlacedPool>,
    object_size: u64,
) -> ClusterLoad {
    let mut load = ClusterLoad::empty(map);
    for pool in placed {
        load.add(map, pool, object_size);
    }
    load.finish();
    load
}

impl ClusterLoad {
    fn empty(map: &ClusterMap) -> ClusterLoad {
        let n = map.max_devices() as usize;
        ClusterLoad {
            total: PoolLoad {
                pg_copies: vec![0; n],
                objects: vec![0; n],
                bytes: vec![0; n],
                ..PoolLoad::default()
            },
            expected_pgs: vec![0.0; n],
            expected_objects: vec![0.0; n],
            ..ClusterLoad::default()
        }
    }

    /// Adds a placed pool of `map`.
    fn add(&mut self, map: &ClusterMap, placed: &PlacedPool, object_size: u64) {
        let Some(pool) = map.pool(placed.pool) else { return };
        let pool_load = placed.load(map.max_devices(), object_size);
        let shares = target_shares(map, pool);
        let pg_total: u64 = pool_load.pg_copies.iter().sum();
        let object_total: u64 = pool_load.objects.iter().sum();
        for (i, share) in shares.iter().enumerate() {
            self.total.pg_copies[i] += pool_load.pg_copies[i];
            self.total.objects[i] += pool_load.objects[i];
            self.total.bytes[i] += pool_load.bytes[i];
            self.expected_pgs[i] += share * pg_total as f64;
            self.expected_objects[i] += share * object_total as f64;
        }
        self.total.undersized += pool_load.undersized;
        self.pools.push((placed.pool, pool_load, shares));
    }

    /// The eligible devices, once every pool is added.
    fn finish(&mut self) {
        self.eligible = (0..self.total.pg_copies.len())
            .filter(|&i| {
                self.expected_pgs[i] > 0.0
                    || self.expected_objects[i] > 0.0
                    || self.total.objects[i] > 0
                    || self.total.pg_copies[i] > 0
            })
            .collect();
    }
}

/// The failure domain of a pool: the last non-device type its rule chooses (`crush`), the
/// ring's distinct type, the attributed pool's location type, else hosts.
pub fn failure_domain(map: &ClusterMap, id: PoolId) -> Option<TypeId> {
    let pool = map.pool(id)?;
    match pool.engine_spec() {
        EngineSpec::Crush { rule } => {
            map.rule(rule)?.steps.iter().rev().find_map(|step| match *step {
                Step::ChooseFirstn { type_id, .. }
                | Step::ChooseIndep { type_id, .. }
                | Step::ChooseleafFirstn { type_id, .. }
                | Step::ChooseleafIndep { type_id, .. }
                    if type_id != TypeId(0) =>
                {
                    Some(type_id)
                }
                _ => None,
            })
        }
        EngineSpec::Ring(params) => params.failure_domain.or_else(|| map.type_by_name("host")),
        // The location attribute (zones), else hosts.
        EngineSpec::Attributed(params) if params.zone_type != TypeId(0) => Some(params.zone_type),
        EngineSpec::Attributed(_) | EngineSpec::Elastic(_) => map.type_by_name("host"),
    }
}

/// The load of one failure domain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DomainLoad {
    /// PG copies on its devices.
    pub pg_copies: u64,
    /// Objects on its devices.
    pub objects: u64,
    /// Bytes on its devices.
    pub bytes: u64,
}

/// The load of `devices` added up per ancestor of type `type_id`, by the ancestor's name
/// (`(none)` for devices without one).
pub fn domain_loads(
    map: &ClusterMap,
    type_id: TypeId,
    devices: &[usize],
    load: &PoolLoad,
) -> BTreeMap<String, DomainLoad> {
    let mut per: BTreeMap<String, DomainLoad> = BTreeMap::new();
    for &i in devices {
        // An index past every device id has no ancestor: "(none)", as for a device without one.
        let name = i32::try_from(i)
            .ok()
            .and_then(|id| map.ancestor_of_type(ItemId(id), type_id))
            .map_or_else(|| "(none)".to_string(), |b| b.name.clone());
        let domain = per.entry(name).or_default();
        domain.pg_copies += load.pg_copies[i];
        domain.objects += load.objects[i];
        domain.bytes += load.bytes[i];
    }
    per
}
