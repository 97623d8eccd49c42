//! A map compiled for lookups: per pool, object → PG → placement key → devices.

use crate::crush::hash::hash32_2;
use crate::crush::{CrushMap, CrushWork};
use crate::engine::EngineParams;
use crate::engine::attributed::{AttributedParams, AttributedRing};
use crate::engine::balanced::table::BalancedTable;
use crate::engine::crush::{CrushPool, DeviceTable};
use crate::engine::elastic::{ElasticParams, ElasticRing};
use crate::engine::ring::{Ring, RingParams};
use crate::ids::{DeviceId, PoolId};
use crate::map::{ClusterMap, Pool};
use crate::pg::{self, PgId};
use crate::replica::ReplicaSet;

/// What identifies a compiled attributed ring: its parameters and sector base.
type AttributedKey<'m> = (AttributedParams, &'m [(DeviceId, u32)]);

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

/// A pool's compiled engine: its own compiled form, or an index into the placement's shared
/// rings (pools with the same parameters share one).
#[derive(Clone, Debug)]
enum PoolEngine {
    Crush(CrushPool),
    /// Optio's balanced placement: the sets, computed once when the map is compiled.
    Balanced(BalancedTable),
    Ring(usize),
    Attributed(usize),
    Elastic(usize),
}

#[derive(Clone, Debug)]
struct PoolInfo {
    pool: Pool,
    engine: PoolEngine,
}

/// A cluster map compiled for placement lookups. Immutable; share it between threads.
#[derive(Clone, Debug)]
pub struct Placement {
    crush: CrushMap,
    rings: Vec<Ring>,
    attributed: Vec<AttributedRing>,
    elastic: Vec<ElasticRing>,
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

/// The shared compiled rings, each with the parameters it was compiled for.
#[derive(Default)]
struct Engines<'m> {
    rings: Vec<(RingParams, Ring)>,
    attributed: Vec<(AttributedKey<'m>, AttributedRing)>,
    elastic: Vec<(ElasticParams, ElasticRing)>,
}

impl<'m> Engines<'m> {
    /// Compiles the engine of `pool`; pools of equal ring parameters share a ring.
    fn compile(
        &mut self,
        map: &'m ClusterMap,
        pool: &'m Pool,
    ) -> Result<PoolEngine, crate::MapError> {
        Ok(match &pool.engine {
            EngineParams::Balanced(_) => PoolEngine::Balanced(BalancedTable::new(map, pool)?),
            EngineParams::Crush(crush) => PoolEngine::Crush(CrushPool::new(map, pool, crush)),
            EngineParams::Ring(params) => {
                PoolEngine::Ring(shared(&mut self.rings, *params, || Ring::new(map, params)))
            }
            EngineParams::Attributed(attributed) => {
                let (params, base) = (attributed.params, attributed.sector_base.as_slice());
                PoolEngine::Attributed(shared(&mut self.attributed, (params, base), || {
                    AttributedRing::new(map, &params, base)
                }))
            }
            EngineParams::Elastic(params) => {
                let index = shared(&mut self.elastic, *params, || ElasticRing::new(map, params));
                self.elastic[index].1.prepare(pool.size as usize);
                PoolEngine::Elastic(index)
            }
        })
    }
}

/// The index of the entry for `key` in `list`, compiled by `make` and added when missing.
fn shared<K: PartialEq, V>(list: &mut Vec<(K, V)>, key: K, make: impl FnOnce() -> V) -> usize {
    match list.iter().position(|(k, _)| *k == key) {
        Some(index) => index,
        None => {
            list.push((key, make()));
            list.len() - 1
        }
    }
}

impl Placement {
    /// Compiles `map`. Never fails for a map the builder accepted; the `Result` is for engines
    /// whose parameters are checked at compile time.
    pub fn new(map: &ClusterMap) -> Result<Placement, crate::MapError> {
        let mut engines = Engines::default();
        let mut pools = Vec::with_capacity(map.pools().len());
        for pool in map.pools() {
            let engine = engines.compile(map, pool)?;
            pools.push(PoolInfo { pool: pool.clone(), engine });
        }
        Ok(Placement {
            crush: CrushMap::new(map),
            rings: engines.rings.into_iter().map(|(_, r)| r).collect(),
            attributed: engines.attributed.into_iter().map(|(_, r)| r).collect(),
            elastic: engines.elastic.into_iter().map(|(_, r)| r).collect(),
            pools,
            devices: DeviceTable::new(map),
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

    /// The engine input of a PG: Ceph's pps (or, with seed 002's generator, the congruential
    /// pps); for a balanced pool, the placement unit — the seed folded by `pgp_num` — which
    /// indexes the pool's computed table.
    pub fn pg_key(&self, seed: u32) -> u32 {
        let pool = &self.info.pool;
        match self.info.engine {
            PoolEngine::Balanced(_) => {
                pg::stable_mod(seed, pool.pgp_num, pg::pg_mask(pool.pgp_num))
            }
            _ => pg::pool_pps(pool, seed),
        }
    }

    /// Whether the pool is placed by its CRUSH rule (the `crush` engine, not balanced).
    pub fn is_crush(&self) -> bool {
        matches!(self.info.engine, PoolEngine::Crush(_))
    }

    /// Whether the pool uses Optio's balanced placement.
    pub fn is_balanced(&self) -> bool {
        matches!(self.info.engine, PoolEngine::Balanced(_))
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
    /// for erasure-coded ones — and primary affinity applied); for balanced pools the
    /// computed set of placement unit `key` (empty for a key beyond the pool's units).
    pub fn place(&self, key: u32, scratch: &mut Scratch, out: &mut ReplicaSet) {
        let size = self.info.pool.size as usize;
        let placement = self.placement;
        match &self.info.engine {
            PoolEngine::Balanced(table) => {
                table.place(key, out);
                placement.devices.apply_primary_affinity(key, false, out);
            }
            PoolEngine::Ring(index) => placement.rings[*index].place(key, size, out),
            PoolEngine::Attributed(index) => placement.attributed[*index].place(key, size, out),
            PoolEngine::Elastic(index) => placement.elastic[*index].place(key, size, out),
            PoolEngine::Crush(pool) => pool.place(
                &placement.crush,
                &placement.devices,
                key,
                (&mut scratch.crush, &mut scratch.raw),
                out,
            ),
        }
    }

    /// Where the copies of engine input `key` belong once the cluster is at full power: for
    /// `elastic` pools every ranked server active (membership versions aside); for the other
    /// engines the same as [`place`](Self::place).
    pub fn place_full_power(&self, key: u32, scratch: &mut Scratch, out: &mut ReplicaSet) {
        match self.elastic() {
            Some(ring) => ring.place_full_power(key, self.info.pool.size as usize, out),
            None => self.place(key, scratch, out),
        }
    }

    /// The engine input of a stored candidate, from the seed in its header: a PG seed (pools
    /// with PGs) or the placement key itself (object-level pools).
    pub fn key_of_seed(&self, seed: u32) -> u32 {
        if self.has_pgs() { self.pg_key(seed) } else { seed }
    }

    /// The raw CRUSH result (before up/exists filtering) for engine input `key` (for
    /// balanced pools, the computed set).
    pub fn place_raw(&self, key: u32, scratch: &mut Scratch, out: &mut ReplicaSet) {
        match &self.info.engine {
            PoolEngine::Balanced(table) => table.place(key, out),
            PoolEngine::Ring(_) | PoolEngine::Attributed(_) | PoolEngine::Elastic(_) => {
                self.place(key, scratch, out);
            }
            PoolEngine::Crush(pool) => {
                let placement = self.placement;
                let raw = &mut scratch.raw;
                pool.place_raw(&placement.crush, &placement.devices, key, &mut scratch.crush, raw);
                out.set_from(raw);
            }
        }
    }

    /// Whether the pool uses the `elastic` engine (membership versions, full power,
    /// re-integration).
    pub fn is_elastic(&self) -> bool {
        matches!(self.info.engine, PoolEngine::Elastic(_))
    }

    /// The membership version numbers the pool places by, oldest first: those of the map's
    /// membership for `elastic` pools, none for the other engines.
    pub fn membership_versions(&self) -> impl Iterator<Item = u64> + 'a {
        self.elastic().into_iter().flat_map(|ring| ring.versions())
    }

    /// The compiled ring of a `ring` pool, for engine-specific inspection (tests, benches,
    /// analyses); placement callers use [`place`](Self::place) and the capabilities
    /// ([`is_elastic`](Self::is_elastic), [`membership_versions`](Self::membership_versions)).
    pub fn ring(&self) -> Option<&'a Ring> {
        match self.info.engine {
            PoolEngine::Ring(index) => Some(&self.placement.rings[index]),
            _ => None,
        }
    }

    /// The compiled ring of an `attributed` pool.
    pub fn attributed(&self) -> Option<&'a AttributedRing> {
        match self.info.engine {
            PoolEngine::Attributed(index) => Some(&self.placement.attributed[index]),
            _ => None,
        }
    }

    /// The compiled ring of an `elastic` pool.
    pub fn elastic(&self) -> Option<&'a ElasticRing> {
        match self.info.engine {
            PoolEngine::Elastic(index) => Some(&self.placement.elastic[index]),
            _ => None,
        }
    }

    /// The devices for engine input `key` as of membership version `version`, for `elastic`
    /// pools (where data written in that version lives). `false`, with `out` empty, for
    /// other engines and unknown versions.
    pub fn place_as_of(&self, version: u64, key: u32, out: &mut ReplicaSet) -> bool {
        match self.elastic() {
            Some(ring) => ring.place_as_of(version, key, self.info.pool.size as usize, out),
            None => {
                out.clear();
                false
            }
        }
    }
}

#[cfg(test)]
mod primary_affinity_tests {
    //! Ceph's `_apply_primary_affinity`: a device of affinity a stays primary of about a of
    //! the PGs it would lead; replicated sets move the new primary to the front, erasure-coded
    //! sets keep every shard in place and only name another primary.

    use super::*;
    use crate::builder::{ClusterMapBuilder, DeviceSpec, EngineRef, PoolSpec, RuleSpec, StepSpec};
    use crate::ids::{RuleId, Weight};
    use crate::map::RuleKind;

    /// 6 hosts × 2 devices; pool 1 replicated size 3, pool 2 erasure (indep) size 4.
    fn map(affinity: &[(u32, u32)]) -> ClusterMap {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..12u32 {
            let host = format!("host{}", id / 2);
            let mut device = DeviceSpec::new(id).at(&[("host", &host)]);
            if let Some((_, a)) = affinity.iter().find(|(d, _)| *d == id) {
                device.primary_affinity = Weight(*a);
            }
            builder = builder.device(device);
        }
        let ec = RuleSpec {
            id: RuleId(1),
            name: "ec".into(),
            kind: RuleKind::Erasure,
            min_size: 1,
            max_size: 10,
            steps: vec![
                StepSpec::Take {
                    item: crate::builder::ItemRef::Name("default".into()),
                    class: None,
                },
                StepSpec::Choose { leaf: true, indep: true, num: 0, type_name: "host".into() },
                StepSpec::Emit,
            ],
        };
        let mut ec_pool = PoolSpec::crush(2, "ec", 1024, 4);
        ec_pool.engine = EngineRef::Crush(crate::builder::CrushSpec {
            rule: Some(crate::builder::RuleRef::Id(RuleId(1))),
        });
        builder
            .replicated_rule(0, "replicated", "default", "host")
            .rule(ec)
            .pool(PoolSpec::crush(1, "rbd", 1024, 3))
            .pool(ec_pool)
            .build()
            .expect("valid")
    }

    /// (set without affinity, set with) for every PG of `pool`.
    fn sets(pool: u32, affinity: &[(u32, u32)]) -> Vec<(ReplicaSet, ReplicaSet)> {
        let (plain, tuned) = (map(&[]), map(affinity));
        let (plain, tuned) =
            (Placement::new(&plain).expect("ok"), Placement::new(&tuned).expect("ok"));
        let (a, b) =
            (plain.pool(PoolId(pool)).expect("pool"), tuned.pool(PoolId(pool)).expect("pool"));
        let (mut sa, mut sb) = (plain.scratch(), tuned.scratch());
        (0..1024)
            .map(|seed| {
                let (mut x, mut y) = (ReplicaSet::new(), ReplicaSet::new());
                a.place(a.pg_key(seed), &mut sa, &mut x);
                b.place(b.pg_key(seed), &mut sb, &mut y);
                (x, y)
            })
            .collect()
    }

    #[test]
    fn zero_affinity_replicated_moves_another_replica_to_the_front() {
        let mut led = 0;
        for (plain, tuned) in sets(1, &[(4, 0)]) {
            let mut sorted = (plain.as_slice().to_vec(), tuned.as_slice().to_vec());
            sorted.0.sort_unstable();
            sorted.1.sort_unstable();
            assert_eq!(sorted.0, sorted.1, "the same devices");
            if plain.primary() == Some(DeviceId(4)) {
                led += 1;
                // Device 4 steps down; the next replica leads; the rest keep their order.
                let p = plain.as_slice();
                assert_eq!(tuned.as_slice(), &[p[1], p[0], p[2]], "{plain:?} → {tuned:?}");
            } else {
                assert_eq!(tuned, plain);
            }
            assert_ne!(tuned.primary(), Some(DeviceId(4)));
        }
        assert!(led > 20, "device 4 led some PGs");
    }

    #[test]
    fn zero_affinity_erasure_keeps_shards_in_place() {
        let mut led = 0;
        for (plain, tuned) in sets(2, &[(4, 0)]) {
            assert_eq!(tuned.as_slice(), plain.as_slice(), "shards never move");
            if plain.primary() == Some(DeviceId(4)) {
                led += 1;
                // The primary is the next shard's device (Ceph: the first one accepted).
                let next = plain.devices().nth(1);
                assert_eq!(tuned.primary(), next, "{plain:?}");
                assert_ne!(tuned, plain, "a different primary is a different set");
            } else {
                assert_eq!(tuned.primary(), plain.primary());
            }
        }
        assert!(led > 20, "device 4 led some PGs");
    }

    #[test]
    fn partial_affinity_keeps_its_share_of_primaries() {
        // Affinity 0.25: device 4 keeps about a quarter of the PGs it would lead.
        let (mut led, mut kept) = (0, 0);
        for (plain, tuned) in sets(1, &[(4, 0x4000)]) {
            if plain.primary() == Some(DeviceId(4)) {
                led += 1;
                kept += usize::from(tuned.primary() == Some(DeviceId(4)));
            }
        }
        let share = kept as f64 / led as f64;
        assert!((0.1..0.4).contains(&share), "kept {kept} of {led}");
    }

    #[test]
    fn when_every_replica_declines_the_first_stays_primary() {
        // All three replicas at affinity 0: each is rejected, the first rejected is kept.
        let all: Vec<(u32, u32)> = (0..12).map(|d| (d, 0)).collect();
        for (plain, tuned) in sets(1, &all) {
            assert_eq!(tuned, plain);
        }
    }
}
