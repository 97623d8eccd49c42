//! An object's candidates: CHOICE's Algorithm 1 over the pool's engine.
//!
//! PROVISIONAL: this is the seam where the placement library's candidate API (issue 4,
//! branch `choice`) plugs in; until it lands, candidates are generated here exactly as the
//! paper does — candidate 0 from the key, candidate i from `key + j` for increasing j,
//! skipping collisions (same PG for PG pools, same engine input otherwise) — so the set never
//! changes whatever happens to the cluster map.

use optio_placement::pg::PgId;
use optio_placement::{DeviceId, Placement, PoolPlacement, ReplicaSet};

/// Most candidates an object may have.
pub const CHOICES_MAX: u8 = 16;
/// Most suffixes tried per candidate before giving up on collisions (pools with fewer PGs
/// than candidates get fewer candidates).
const SUFFIX_TRIES_PER_CANDIDATE: u32 = 64;

/// One candidate placement of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its index (0 = the object's home candidate).
    pub index: u8,
    /// Its PG, for pools with PGs.
    pub pg: Option<PgId>,
    /// The engine input.
    pub placement_key: u32,
    /// Its devices, primary first.
    pub devices: Vec<DeviceId>,
}

impl Candidate {
    /// The primary device.
    pub fn primary(&self) -> Option<DeviceId> {
        self.devices.first().copied()
    }
}

/// The first `choices` candidates of `key` (fewer when the pool cannot give that many).
pub fn candidates(
    placement: &Placement,
    pool: &PoolPlacement<'_>,
    key: &str,
    choices: u8,
) -> Vec<Candidate> {
    let choices = choices.clamp(1, CHOICES_MAX);
    let mut out: Vec<Candidate> = Vec::with_capacity(usize::from(choices));
    let mut scratch = placement.scratch();
    let mut push = |pg: Option<PgId>, placement_key: u32, out: &mut Vec<Candidate>| {
        let mut set = ReplicaSet::new();
        pool.place(placement_key, &mut scratch, &mut set);
        let index = out.len() as u8;
        out.push(Candidate { index, pg, placement_key, devices: set.devices().collect() });
    };
    let (pg, placement_key) = pool.object_key(key);
    push(pg, placement_key, &mut out);
    let mut j = 0u32;
    let tries = u32::from(choices) * SUFFIX_TRIES_PER_CANDIDATE;
    while out.len() < usize::from(choices) && j < tries {
        j += 1;
        let (pg, placement_key) = pool.object_key(&format!("{key}{j}"));
        let collides = out.iter().any(|c| match (c.pg, pg) {
            (Some(a), Some(b)) => a == b,
            _ => c.placement_key == placement_key,
        });
        if !collides {
            push(pg, placement_key, &mut out);
        }
    }
    out
}
