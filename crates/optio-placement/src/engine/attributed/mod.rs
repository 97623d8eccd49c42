//! The `attributed` engine: attributed consistent hashing (attributedCH; J. Zhou, Y. Chen,
//! W. Wang, "Attributed Consistent Hashing for Heterogeneous Storage Systems", PACT'18).
//!
//! Devices carry three attributes taken from the map: capacity (`capacity_bytes`), bandwidth
//! (`bandwidth_mb_per_s`) and location (the device's ancestor of the pool's `zone_type`).
//!
//! * **Virtual nodes.** A device gets ⌈capacity / c_throttle⌉ virtual nodes (1 to 65,536), at
//!   the same ring positions as the `ring` engine's (`hash32_2(device id, index)`). A reweight
//!   below 1 keeps the first ⌈capacity × reweight / c_throttle⌉ of them and marks the rest.
//! * **Sectors.** The pool's *sector base* — the devices and virtual-node counts present when
//!   the sectors were formed, stored in the map — is cut into sectors of `s` consecutive
//!   virtual nodes from position 0; a sector's position is its last base virtual node (the last
//!   sector may be shorter). Every other virtual node (devices added later, or grown) *merges*
//!   into the sector whose arc it falls in, so adding a device never creates or shifts a
//!   sector. A device marked out (or down, or reweighted) keeps its virtual nodes as *marked*
//!   (or skipped) slots, and a base device removed from the map keeps its base virtual nodes as
//!   marked slots, so sectors keep their size (a device added after the sectors were formed and
//!   then removed from the map leaves its sectors as they were before it came). A key belongs
//!   to its first successor sector; replica r (0-based) starts in the r-th sector after it.
//! * **Homogeneous sectors** (see below) use the *capacity strategy*: slot
//!   `(h(x) + (r+1)·p) mod s'` of the sector's `s'` slots (marked ones included), `p` a prime
//!   greater than `s` chosen deterministically from `s` ([`strategy_prime`]).
//! * **Heterogeneous sectors** use the *bandwidth strategy*: one range per *physical* device in
//!   the sector (in ring order, at its first virtual node), of length bandwidth / min_bandwidth
//!   — kept as integers: lengths in MB/s, which is the same ratio scaled by min_bandwidth — and
//!   a pseudo-random value in `[0, u)` (`u` = the sum) picks the range: `⌊draw(x, r) · u / 2³²⌋`.
//! * **Location strategy.** A replica never lands on a device that already holds one, nor, when
//!   the pool sets `distinct_zones`, in a zone that does. When the strategy's choice is taken,
//!   marked or down, the capacity strategy searches on through the sector's later slots and the
//!   bandwidth strategy draws again among the ranges still eligible; when the sector has none,
//!   the search moves on to the next sector, and after a full turn walks the ring slot by slot.
//!
//! * **Rendezvous selection** (`selection = "rendezvous"`, Optio's variant, not the paper's):
//!   the same sectors and distributions, but the slot of highest rendezvous score in a
//!   homogeneous sector and the device of lowest bandwidth-weighted straw2 cost in a
//!   heterogeneous one, so that a sector that gains or loses a slot or device moves only the
//!   keys that slot or device wins or held.
//!
//! **Homogeneous**, precisely: a sector is homogeneous when all the devices of its unmarked
//! slots (up or down) have the same device class (or all none) and bandwidths within
//! `bandwidth_tolerance_percent` of each other: `max × 100 ≤ min × (100 + tolerance)`. A device
//! with unknown bandwidth (0) counts as the slowest known bandwidth of the devices that may hold
//! data (in, with weight, reweight and capacity; 1 MB/s when none is known). A sector with one
//! device, or none, is homogeneous.
//!
//! Layout: one 32-byte entry per sector (two per cache line) with its position, its strategy,
//! its slots (one 4-byte word each: owner, marked, down, first-of-its-device flags) and, made
//! when the map is compiled, three *thresholds*: the slot a replica's strategy picks first is
//! the count of thresholds below a value computed from the key alone — the bandwidth draw
//! itself (a range ends at e where `⌊draw · u / 2³²⌋ ≥ e` exactly when `draw` exceeds
//! `⌈e · 2³² / u⌉ − 1`) or the capacity strategy's slot number (thresholds 0, 1, 2) — with
//! both values computed and one selected without a branch (which strategy a sector uses is
//! as unpredictable as the key). Sectors with more than four slots (merged virtual nodes),
//! homogeneous ones of other than `s` slots and heterogeneous ones whose first slot is marked
//! keep their slots apart and take the general path; entries for the first sectors are
//! repeated after the last, so a key's replicas read consecutive entries. A lookup finds
//! the key's sector (below), then per replica makes three comparisons on the entries of the
//! sectors found (consecutive: one or two cache lines). The search depends on the ring's size
//! (`SectorSearch`): up to 16 MiB of entries, a top-bits index (as in `ring`) and a count
//! over four positions in the entries — two dependent reads, the second one the lookup needs
//! anyway; up to 16 MiB of positions, the same over a dense copy of the positions, an eighth
//! of the entries' bytes, which stays in cache (and which a sorted key stream reads line
//! after line) where the entries do not; larger, a residual index whose 8-byte bucket
//! words usually place the key without reading any position, one dependent read where the
//! dense copy, out of cache itself, made two. With 12 bytes per device: about 8.4 bytes per
//! virtual node at `s = 4`, 9.3–9.6 with the dense copy or the residual index.
//! [`AttributedRing::place_batch`] interleaves 16 keys. No division (`mod s'` is Lemire's
//! fastmod with a per-size constant; on the fast path `h mod 12` and a table).
//!
//! Invariants: sector boundaries depend only on the sector base; a device's slots only on its
//! id and counts. So adding a device changes only the sectors its virtual nodes merge into,
//! and marking one out changes only the sectors holding its virtual nodes.

mod build;
mod hash;
mod layout;
mod lookup;
mod shares;
mod slots;
pub(crate) mod spec;
mod strategy;

pub use crate::params::attributed::{AttributedParams, AttributedPool, SectorSelection};
pub use hash::{bandwidth_draw, capacity_hash, mix32, strategy_prime};
pub use layout::{AttributedRing, SlotState};
pub use slots::{OwnerSpec, SlotSpec, slot_specs, vnode_count};
pub use strategy::Strategy;

/// Most virtual nodes (slots) one attributed ring may have (about 870 MB of lookup tables);
/// the builder refuses pools that would exceed it.
pub const ATTRIBUTED_VNODES_MAX: u64 = 1 << 27;

/// Most virtual nodes one device may have (the paper's bound).
pub const VNODES_PER_DEVICE_MAX: u32 = 65_536;

/// Largest sector size `s`.
pub const SECTOR_SIZE_MAX: u32 = 65_536;

/// Largest bandwidth tolerance, in percent.
pub const TOLERANCE_PERCENT_MAX: u32 = 10_000;

#[cfg(test)]
mod tests;
