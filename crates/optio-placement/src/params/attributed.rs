//! The `attributed` engine's parameters ([`engine::attributed`](crate::engine::attributed)):
//! the parameters and the sector base an `attributed` pool carries.

use crate::ids::{DeviceId, TypeId};

/// What an `attributed` pool carries: its parameters and its sector base — the devices, with
/// their virtual-node counts, whose virtual nodes formed the sectors (sorted by device id).
/// Devices added later merge into these sectors; devices removed keep their places as
/// marked, skipped slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributedPool {
    /// The parameters.
    pub params: AttributedParams,
    /// The sector base.
    pub sector_base: Vec<(DeviceId, u32)>,
}

/// How an `attributed` pool picks a device within a sector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SectorSelection {
    /// The paper's strategies: `(h(x) + r·p) mod s` over the slots of homogeneous sectors, a
    /// value in `[0, u)` over the bandwidth ranges of heterogeneous ones.
    #[default]
    Paper,
    /// Optio's variant: rendezvous hashing over the slots of homogeneous sectors, and weighted
    /// rendezvous (straw2's draw, weight = bandwidth) over the devices of heterogeneous ones —
    /// the same distributions, but a sector that gains or loses a slot or a device moves only
    /// the keys that slot or device takes or held.
    Rendezvous,
}

impl SectorSelection {
    /// The name used in map files.
    pub fn name(self) -> &'static str {
        match self {
            SectorSelection::Paper => "paper",
            SectorSelection::Rendezvous => "rendezvous",
        }
    }

    /// Parses a name used in map files.
    pub fn from_name(name: &str) -> Option<SectorSelection> {
        match name {
            "paper" => Some(SectorSelection::Paper),
            "rendezvous" => Some(SectorSelection::Rendezvous),
            _ => None,
        }
    }
}

/// Parameters of the `attributed` engine (attributed consistent hashing, Zhou, Chen & Wang,
/// PACT'18; see [`attributed`](crate::engine::attributed)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttributedParams {
    /// c_throttle: the capacity one virtual node stands for; a device gets
    /// ⌈capacity / throttle_bytes⌉ virtual nodes, 1 to 65,536.
    pub throttle_bytes: u64,
    /// s: virtual nodes per sector when the sectors are formed (at least 1).
    pub sector_size: u32,
    /// The location attribute: a device's zone is its ancestor of this type. Type 0 (the
    /// device level), or a device without such an ancestor, makes the device its own zone.
    pub zone_type: TypeId,
    /// Replicas go to distinct zones (the pool asks for it); otherwise only to distinct
    /// devices.
    pub distinct_zones: bool,
    /// Bandwidths within this many percent of each other count as equal when deciding whether
    /// a sector is homogeneous.
    pub bandwidth_tolerance_percent: u32,
    /// How a device is picked within a sector.
    pub selection: SectorSelection,
}

impl Default for AttributedParams {
    fn default() -> AttributedParams {
        AttributedParams {
            throttle_bytes: 1 << 30,
            sector_size: 4,
            zone_type: TypeId(0),
            distinct_zones: false,
            bandwidth_tolerance_percent: 10,
            selection: SectorSelection::Paper,
        }
    }
}
