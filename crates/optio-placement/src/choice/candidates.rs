//! An object's k candidate placements (CHOICE, Algorithm 1).
//!
//! Candidate 0 is the object's ordinary placement: the unit its name hashes to. Candidate i
//! (i ≥ 1) is the unit `name + string(j)` hashes to, for increasing j = 1, 2, …, skipping any j
//! whose unit *collides* with an earlier candidate's:
//!
//! * in a pool with placement groups (every `crush` pool; a `ring` pool with `pg_num > 0`),
//!   the unit is the PG (`stable_mod(hash, pg_num)`): two candidates collide when they are the
//!   same PG;
//! * in an object-level pool (`pg_num = 0`), the unit is the engine key (the ring position
//!   `hash32_2(hash, pool id)`): two candidates collide when they have the same key.
//!
//! A collision is decided on the unit the engine places, never on devices: devices change with
//! the cluster, and the candidates must not. So the candidate set is a function of the name,
//! the pool id, `pg_num` and `choices` only — not of devices, weights, states, rules,
//! `pgp_num` or the epoch. (Changing `pg_num` splits PGs and re-homes objects, as in Ceph.)
//! Two candidates may still land on the same or overlapping devices, more often on small
//! clusters; that only narrows the choice.
//!
//! At most [`SUFFIX_ATTEMPTS_MAX`] suffixes are tried; the builder requires `pg_num ≥ choices`,
//! so running out has probability below 10⁻⁵⁰ (k = pg_num = 8: (7/8)^1024) — and even then the
//! result is deterministic, only shorter.
//!
//! Cost: one string hash per candidate (plus one per collision), no allocation; mapping each
//! candidate to devices is one engine lookup each.

use crate::choice::hash::NameHasher;
use crate::choice::settings::{CHOICES_MAX, ChoiceSettings};
use crate::crush::hash::hash32_2;
use crate::pg::{self, PgId};
use crate::placement::{PoolPlacement, Scratch};
use crate::replica::ReplicaSet;

/// Most suffixes tried for one object's candidates.
pub const SUFFIX_ATTEMPTS_MAX: u32 = 1024;

const CAPACITY: usize = CHOICES_MAX as usize;

/// One candidate, without its devices: which suffix made it, its PG and its engine key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CandidateKey {
    /// Position in the candidate set: 0 is the object's home. This is what a client records
    /// as the object's choice.
    pub index: u8,
    /// The j appended to the name (`name + string(j)`); 0 for candidate 0, which hashes the
    /// bare name.
    pub suffix: u32,
    /// The PG, in pools with placement groups.
    pub pg: Option<PgId>,
    /// The engine's input (the PG's pps, or the ring position).
    pub key: u32,
}

impl std::fmt::Display for CandidateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pg {
            Some(pg) => write!(f, "candidate {} (PG {pg})", self.index),
            None => write!(f, "candidate {} (key {:#010x})", self.index, self.key),
        }
    }
}

/// An object's candidate keys: a fixed-capacity set (at most [`CHOICES_MAX`]), reusable
/// across objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CandidateKeys {
    len: u8,
    name_hash: u32,
    items: [CandidateKey; CAPACITY],
}

impl CandidateKeys {
    /// An empty set.
    pub fn new() -> CandidateKeys {
        CandidateKeys::default()
    }

    /// The candidates, home first.
    pub fn as_slice(&self) -> &[CandidateKey] {
        &self.items[..usize::from(self.len)]
    }

    /// How many candidates there are.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are none (only before the first generation).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Candidate `index`.
    pub fn get(&self, index: usize) -> Option<&CandidateKey> {
        self.as_slice().get(index)
    }

    /// The hash of the object's name (`ceph_str_hash_rjenkins`), which seeds the `random`
    /// policy.
    pub fn name_hash(&self) -> u32 {
        self.name_hash
    }

    fn clear(&mut self, name_hash: u32) {
        self.len = 0;
        self.name_hash = name_hash;
    }

    fn push(&mut self, suffix: u32, pg: Option<PgId>, key: u32) {
        let index = usize::from(self.len);
        if index < CAPACITY {
            self.items[index] = CandidateKey { index: self.len, suffix, pg, key };
            self.len += 1;
        }
    }
}

/// An object's candidates with their devices: what a client probes and a policy chooses from.
/// Fixed capacity, reusable across objects (keep one per thread, as [`Scratch`]).
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    keys: CandidateKeys,
    devices: [ReplicaSet; CAPACITY],
}

impl Candidates {
    /// An empty set.
    pub fn new() -> Candidates {
        Candidates::default()
    }

    /// The candidates' keys, home first.
    pub fn keys(&self) -> &CandidateKeys {
        &self.keys
    }

    /// How many candidates there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Candidate `index`: its key and its devices (primary first).
    pub fn get(&self, index: usize) -> Option<(&CandidateKey, &ReplicaSet)> {
        Some((self.keys.get(index)?, self.devices.get(index)?))
    }

    /// The candidates with their devices, home first.
    pub fn iter(&self) -> impl Iterator<Item = (&CandidateKey, &ReplicaSet)> {
        self.keys.as_slice().iter().zip(self.devices.iter())
    }

    /// The hash of the object's name.
    pub fn name_hash(&self) -> u32 {
        self.keys.name_hash()
    }
}

impl<'a> PoolPlacement<'a> {
    /// The pool's choice settings.
    pub fn choice(&self) -> &'a ChoiceSettings {
        &self.pool().choice
    }

    /// The engine unit of a raw name hash: (PG, key, collision unit).
    #[inline]
    fn unit(&self, raw: u32) -> (Option<PgId>, u32) {
        let pool = self.pool();
        if pool.pg_num > 0 {
            let seed = pg::stable_mod(raw, pool.pg_num, pg::pg_mask(pool.pg_num));
            (Some(PgId { pool: pool.id, seed }), seed)
        } else {
            (None, hash32_2(raw, pool.id.0))
        }
    }

    /// Fills `out` with the first `wanted` candidates of `name` (at most `choices`).
    fn generate(&self, name: &str, wanted: usize, out: &mut CandidateKeys) {
        let wanted = wanted.min(self.choice().choices as usize).clamp(1, CAPACITY);
        let hasher = NameHasher::new(name.as_bytes());
        let raw = hasher.plain();
        out.clear(raw);
        let has_pgs = self.has_pgs();
        let mut units = [0u32; CAPACITY];
        let (pg, unit) = self.unit(raw);
        units[0] = unit;
        out.push(0, pg, if has_pgs { self.pg_key(unit) } else { unit });
        let mut suffix = 0;
        while out.len() < wanted && suffix < SUFFIX_ATTEMPTS_MAX {
            suffix += 1;
            let (pg, unit) = self.unit(hasher.suffixed(suffix));
            if units[..out.len()].contains(&unit) {
                continue;
            }
            units[out.len()] = unit;
            out.push(suffix, pg, if has_pgs { self.pg_key(unit) } else { unit });
        }
    }

    /// The candidate keys of `name` (the pool's `choices` of them, home first), without
    /// devices. Allocation-free.
    pub fn candidate_keys(&self, name: &str, out: &mut CandidateKeys) {
        self.generate(name, CAPACITY, out);
    }

    /// Candidate `index` of `name` alone — what a client that cached an object's choice
    /// needs. `None` if the pool has fewer candidates.
    pub fn candidate_key(&self, name: &str, index: u8) -> Option<CandidateKey> {
        let mut keys = CandidateKeys::new();
        self.generate(name, usize::from(index) + 1, &mut keys);
        keys.get(usize::from(index)).copied()
    }

    /// The candidates of `name` with their devices (each through the pool's engine, as
    /// [`place`](Self::place)). Allocation-free given a warm `scratch`.
    pub fn candidates(&self, name: &str, scratch: &mut Scratch, out: &mut Candidates) {
        self.candidates_with(name, out, |key, devices| self.place(key.key, scratch, devices));
    }

    /// The candidates of `name`, their devices filled in by `devices_of` — for a caller that
    /// keeps its own table of PG → devices for the current epoch (the devices must be what
    /// [`place`](Self::place) gives for `key.key`).
    pub fn candidates_with(
        &self,
        name: &str,
        out: &mut Candidates,
        mut devices_of: impl FnMut(&CandidateKey, &mut ReplicaSet),
    ) {
        self.candidate_keys(name, &mut out.keys);
        for (key, devices) in out.keys.as_slice().iter().zip(out.devices.iter_mut()) {
            devices_of(key, devices);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{ClusterMapBuilder, DeviceSpec, EngineRef, PoolSpec};
    use crate::placement::Placement;

    fn placement(pg_num: u32, choices: u32) -> Placement {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..12u32 {
            let host = format!("host{}", id / 3);
            builder = builder.device(DeviceSpec::new(id).capacity(1 << 40).at(&[("host", &host)]));
        }
        let mut crush = PoolSpec::crush(1, "crush", pg_num, 3);
        crush.choice.choices = choices;
        let mut ring = PoolSpec {
            engine: EngineRef::Ring(crate::builder::RingSpec {
                vnode_bytes: Some(1 << 36),
                failure_domain: None,
            }),
            ..PoolSpec::crush(2, "ring", 0, 3)
        };
        ring.choice.choices = choices;
        let map = builder
            .replicated_rule(0, "replicated_rule", "default", "host")
            .pool(crush)
            .pool(ring)
            .build()
            .expect("valid");
        Placement::new(&map).expect("compiles")
    }

    #[test]
    fn candidate_zero_is_the_ordinary_placement_and_others_are_suffixed_names() {
        let placement = placement(64, 4);
        let mut scratch = placement.scratch();
        for pool in placement.pools() {
            let mut candidates = Candidates::new();
            for name in ["a", "foo", "rbd_data.1234.0000000000000042"] {
                pool.candidates(name, &mut scratch, &mut candidates);
                assert_eq!(candidates.len(), 4);
                let (home, devices) = candidates.get(0).expect("home");
                assert_eq!((home.pg, home.key), pool.object_key(name));
                assert_eq!(*devices, pool.locate(name).devices);
                for (key, devices) in candidates.iter().skip(1) {
                    let alias = format!("{name}{}", key.suffix);
                    assert_eq!((key.pg, key.key), pool.object_key(&alias), "{alias}");
                    assert_eq!(*devices, pool.locate(&alias).devices);
                }
            }
        }
    }

    #[test]
    fn candidates_are_distinct_even_with_as_many_pgs_as_choices() {
        let placement = placement(8, 8);
        let pool = placement.pool_by_name("crush").expect("pool");
        let mut keys = CandidateKeys::new();
        for i in 0..2000 {
            pool.candidate_keys(&format!("object{i}"), &mut keys);
            assert_eq!(keys.len(), 8);
            let mut seeds: Vec<u32> =
                keys.as_slice().iter().map(|k| k.pg.expect("pg").seed).collect();
            seeds.sort_unstable();
            seeds.dedup();
            assert_eq!(seeds.len(), 8);
        }
    }

    #[test]
    fn one_candidate_by_index_matches_the_set() {
        let placement = placement(32, 3);
        let mut keys = CandidateKeys::new();
        for pool in placement.pools() {
            pool.candidate_keys("photo.jpg", &mut keys);
            for (index, key) in keys.as_slice().iter().enumerate() {
                let index = u8::try_from(index).expect("at most CHOICES_MAX candidates");
                assert_eq!(pool.candidate_key("photo.jpg", index), Some(*key));
            }
            assert_eq!(pool.candidate_key("photo.jpg", 3), None);
        }
    }
}
