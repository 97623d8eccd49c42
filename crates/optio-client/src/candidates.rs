//! An object's candidates: the placement library's CHOICE candidates (Algorithm 1 of the
//! paper: candidate 0 from the key, candidate i from `key + j`, collisions skipped), as the
//! client uses them. The pool's `choices` setting in the map decides k.

use optio_placement::pg::PgId;
use optio_placement::{DeviceId, Placement, PoolPlacement};

pub use optio_placement::choice::CHOICES_MAX;

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

/// The candidates of `key` in `pool` (k from the pool's settings), in the library's form (for
/// its policies) and in the client's.
pub fn candidates(
    placement: &Placement,
    pool: &PoolPlacement<'_>,
    key: &str,
) -> (optio_placement::choice::Candidates, Vec<Candidate>) {
    let mut scratch = placement.scratch();
    let mut set = optio_placement::choice::Candidates::new();
    pool.candidates(key, &mut scratch, &mut set);
    let list = set
        .iter()
        .map(|(k, devices)| Candidate {
            index: k.index,
            pg: k.pg,
            placement_key: k.key,
            devices: devices.devices().collect(),
        })
        .collect();
    (set, list)
}
