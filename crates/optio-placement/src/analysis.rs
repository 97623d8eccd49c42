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
    let n = map.max_devices() as usize;
    let mut load = ClusterLoad {
        total: PoolLoad {
            pg_copies: vec![0; n],
            objects: vec![0; n],
            bytes: vec![0; n],
            ..PoolLoad::default()
        },
        expected_pgs: vec![0.0; n],
        expected_objects: vec![0.0; n],
        ..ClusterLoad::default()
    };
    for &id in pools {
        let Some(pool) = placement.pool(id) else { continue };
        let pool_load =
            pool_load(placement, pool, map.max_devices(), objects, object_size, progress);
        let shares = target_shares(map, pool.pool());
        let pg_total: u64 = pool_load.pg_copies.iter().sum();
        let object_total: u64 = pool_load.objects.iter().sum();
        for (i, share) in shares.iter().enumerate() {
            load.total.pg_copies[i] += pool_load.pg_copies[i];
            load.total.objects[i] += pool_load.objects[i];
            load.total.bytes[i] += pool_load.bytes[i];
            load.expected_pgs[i] += share * pg_total as f64;
            load.expected_objects[i] += share * object_total as f64;
        }
        load.total.undersized += pool_load.undersized;
        load.pools.push((id, pool_load, shares));
    }
    load.eligible = (0..n)
        .filter(|&i| {
            load.expected_pgs[i] > 0.0
                || load.expected_objects[i] > 0.0
                || load.total.objects[i] > 0
                || load.total.pg_copies[i] > 0
        })
        .collect();
    load
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
