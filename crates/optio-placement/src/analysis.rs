//! Load and movement of a pool's placement: PG copies, objects and bytes per device, the
//! share each device should get, and what moves between two maps against the minimum.
//!
//! Objects are simulated by name (`obj-0`, `obj-1`, …) so that object counts follow the real
//! object → PG → device path; everything is deterministic.

use crate::ids::ITEM_NONE;
use crate::map::{ClusterMap, EngineSpec, Pool, Step};
use crate::placement::{Placement, PoolPlacement};
use crate::replica::ReplicaSet;
use crate::stats::minimum_movement_share;

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
    let n = max_devices as usize;
    let mut load = PoolLoad {
        pg_copies: vec![0; n],
        objects: vec![0; n],
        bytes: vec![0; n],
        ..PoolLoad::default()
    };
    let size = pool.pool().size as usize;
    let mut scratch = placement.scratch();
    let mut set = ReplicaSet::new();
    const BATCH: u64 = 4096;
    if pool.has_pgs() {
        let pg_num = pool.pool().pg_num;
        let mut sets: Vec<ReplicaSet> = Vec::with_capacity(pg_num as usize);
        for seed in 0..pg_num {
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            for device in set.devices() {
                load.pg_copies[device.0 as usize] += 1;
            }
            if set.devices().count() < size {
                load.undersized += 1;
            }
            sets.push(set);
            if u64::from(seed + 1) % BATCH == 0 {
                progress(BATCH);
            }
        }
        progress(u64::from(pg_num) % BATCH);
        load.units = u64::from(pg_num);
        for index in 0..objects {
            let pg = pool.object_pg(&object_name(index)).expect("pool has PGs");
            for device in sets[pg.seed as usize].devices() {
                load.objects[device.0 as usize] += 1;
            }
            if (index + 1) % BATCH == 0 {
                progress(BATCH);
            }
        }
    } else {
        for index in 0..objects {
            let (_, key) = pool.object_key(&object_name(index));
            pool.place(key, &mut scratch, &mut set);
            for device in set.devices() {
                load.objects[device.0 as usize] += 1;
            }
            if set.devices().count() < size {
                load.undersized += 1;
            }
            if (index + 1) % BATCH == 0 {
                progress(BATCH);
            }
        }
        load.units = objects;
    }
    progress(objects % BATCH);
    for (bytes, count) in load.bytes.iter_mut().zip(&load.objects) {
        *bytes = count.saturating_mul(object_size);
    }
    load
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
/// objects are compared one by one.
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
    let devices = map_a.max_devices().max(map_b.max_devices()) as usize;
    let mut result = Movement { gained: vec![0; devices], ..Movement::default() };
    let positional = map_b
        .rule(match pool_b.pool().engine_spec() {
            EngineSpec::Crush { rule } => rule,
            _ => crate::ids::RuleId(u32::MAX),
        })
        .is_some_and(|r| r.kind == crate::map::RuleKind::Erasure);
    let (mut scratch_a, mut scratch_b) = (placement_a.scratch(), placement_b.scratch());
    let (mut before, mut after) = (ReplicaSet::new(), ReplicaSet::new());
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
    let same_pgs =
        pool_a.has_pgs() && pool_b.has_pgs() && pool_a.pool().pg_num == pool_b.pool().pg_num;
    if same_pgs {
        let pg_num = pool_b.pool().pg_num;
        let mut per_pg = vec![0u64; pg_num as usize];
        for index in 0..objects {
            if let Some(pg) = pool_b.object_pg(&object_name(index)) {
                per_pg[pg.seed as usize] += 1;
            }
        }
        for seed in 0..pg_num {
            pool_a.place(pool_a.pg_key(seed), &mut scratch_a, &mut before);
            pool_b.place(pool_b.pg_key(seed), &mut scratch_b, &mut after);
            account(&before, &after, per_pg[seed as usize], &mut result);
            if seed % 4096 == 4095 {
                progress(4096);
            }
        }
        progress(u64::from(pg_num) % 4096);
    } else {
        for index in 0..objects {
            let name = object_name(index);
            let (_, key_a) = pool_a.object_key(&name);
            let (_, key_b) = pool_b.object_key(&name);
            pool_a.place(key_a, &mut scratch_a, &mut before);
            pool_b.place(key_b, &mut scratch_b, &mut after);
            account(&before, &after, 1, &mut result);
            if index % 4096 == 4095 {
                progress(4096);
            }
        }
        progress(objects % 4096);
    }
    result.minimum_share = minimum_movement_share(
        &target_shares(map_a, pool_a.pool()),
        &target_shares(map_b, pool_b.pool()),
    );
    result
}
