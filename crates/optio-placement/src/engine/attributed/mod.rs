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

use crate::engine::vnode::{ResidualIndex, RingIndex, vnode_position};
use crate::ids::{DeviceId, ITEM_NONE, ItemId};
use crate::map::ClusterMap;
use crate::replica::{REPLICAS_MAX, ReplicaSet};

pub use crate::params::attributed::{AttributedParams, AttributedPool, SectorSelection};

/// Most virtual nodes (slots) one attributed ring may have (about 870 MB of lookup tables);
/// the builder refuses pools that would exceed it.
pub const ATTRIBUTED_VNODES_MAX: u64 = 1 << 27;
/// Most virtual nodes one device may have (the paper's bound).
pub const VNODES_PER_DEVICE_MAX: u32 = 65_536;
/// Largest sector size `s`.
pub const SECTOR_SIZE_MAX: u32 = 65_536;
/// Largest bandwidth tolerance, in percent.
pub const TOLERANCE_PERCENT_MAX: u32 = 10_000;

/// Slot word: owner index in the low bits.
const OWNER_MASK: u32 = (1 << 24) - 1;
/// Slot word: the first unmarked slot of its device in its sector (the device's range).
const FIRST: u32 = 1 << 29;
/// Slot word: the device is down (skipped, still a member of the sector).
const DOWN: u32 = 1 << 30;
/// Slot word: marked (removed, out, or beyond the reweighted count): skipped, not a member.
const MARKED: u32 = 1 << 31;
/// Sector flags, in the first word of a [`Sector`]'s `words` (bits no slot word uses, so that
/// a fast sector's first slot word carries them): the sector is heterogeneous (bandwidth
/// strategy).
const HETEROGENEOUS: u32 = 1 << 27;
/// Sector flag: the sector's first choices take the fast path ([`Sector::bounds`] holds its
/// thresholds, `words` its slots).
const FAST: u32 = 1 << 28;
/// Sector flags: a [`FAST`] sector's slot count less one (bits 24 and 25).
const LEN_SHIFT: u32 = 24;
/// Every sector flag (none is part of a slot: owners are below 2^24).
const SECTOR_FLAGS: u32 = HETEROGENEOUS | FAST | 3 << LEN_SHIFT;
/// Entries up to this size in all (half this machine's L3 cache) are searched for a key's
/// sector themselves ([`SectorSearch::Entries`]); larger rings search their dense positions
/// or a residual index. Measured with the `optio` binary (huge pages), Table 1's
/// map: at 64 and 512 nodes (1.3 and 10.5 MB of entries) searching the entries is as fast
/// or faster (up to 10 % at 64 nodes in random key order, 6–12 % at 512), at 4,096 and
/// 32,768 nodes (84 and 672 MB) searching the dense positions was 10–25 % faster.
const SEARCH_ENTRIES_BYTES: usize = 16 << 20;
/// Rings with more bytes of sector positions than this (4 each) search a [`ResidualIndex`]
/// instead of a dense copy of them ([`SectorSearch::Residual`]): measured at 4,096 nodes
/// (10.5 MB of positions) the dense copy is 25 % faster in sorted key order (the residual
/// words, read one line in two or three, are not streamed as the positions are), at 32,768
/// nodes (84 MB) the residual index is about 30 % faster in either order.
const DENSE_POSITIONS_BYTES: usize = 16 << 20;
/// Most slots a sector on the fast path has.
const FAST_SLOTS: usize = 4;
/// Replicas whose first choice can take the fast path (the later ones take the general one).
const FAST_REPLICAS: usize = 4;
/// Owner index of slots of devices no longer in the map.
const NO_OWNER: u32 = OWNER_MASK;

/// Salt of the capacity strategy's hash h(x).
const CAPACITY_SALT: u32 = 0x5ec7_0c11;
/// Salt of the bandwidth strategy's draws.
const BANDWIDTH_SALT: u32 = 0xb5ad_4ece;
/// The salts of the first draws of the first [`FAST_REPLICAS`] replicas (see
/// [`bandwidth_draw`]), folded (see [`mix32_folded`]).
const DRAW_SALTS: [u32; FAST_REPLICAS] = {
    let mut salts = [0; FAST_REPLICAS];
    let mut replica = 0;
    while replica < FAST_REPLICAS {
        salts[replica] = fold16(mix32(BANDWIDTH_SALT ^ ((replica as u32) << 8)));
        replica += 1;
    }
    salts
};
/// The capacity strategy's salt, folded (see [`mix32_folded`]).
const CAPACITY_SALT_FOLDED: u32 = fold16(CAPACITY_SALT);

/// How many virtual nodes a device of `capacity_bytes` gets: ⌈capacity / throttle⌉, 1 to
/// 65,536.
pub fn vnode_count(capacity_bytes: u64, throttle_bytes: u64) -> u32 {
    capacity_bytes.div_ceil(throttle_bytes.max(1)).clamp(1, u64::from(VNODES_PER_DEVICE_MAX)) as u32
}

/// A 32-bit integer mixer (Chris Wellons' `lowbias32`): a bijection with good avalanche, used
/// for the strategies' hashes. Fixed forever: placements depend on it.
#[inline]
pub const fn mix32(x: u32) -> u32 {
    mix32_folded(fold16(x))
}

/// mix32's first step, `x ^ (x >> 16)`. It distributes over xor, so for `x = key ^ salt` it
/// is `fold16(key) ^ fold16(salt)`: the lookup folds its key once for all its hashes.
#[inline(always)]
const fn fold16(x: u32) -> u32 {
    x ^ (x >> 16)
}

/// mix32 after its first step: `mix32(x) == mix32_folded(fold16(x))`.
#[inline(always)]
const fn mix32_folded(mut x: u32) -> u32 {
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The capacity strategy's h(x).
#[inline]
pub fn capacity_hash(key: u32) -> u32 {
    mix32_folded(fold16(key) ^ CAPACITY_SALT_FOLDED)
}

/// The bandwidth strategy's pseudo-random draw for replica `replica` (0-based), attempt
/// `attempt` (0: the first draw; 1: the draw among the ranges still eligible).
#[inline]
pub fn bandwidth_draw(key: u32, replica: u32, attempt: u32) -> u32 {
    mix32(key ^ mix32(BANDWIDTH_SALT ^ (replica << 8) ^ attempt))
}

/// SplitMix64's finalizer (Steele, Lea & Flood): the rendezvous selection's 64-bit hash.
#[inline]
fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous selection's per-replica hash of a key.
#[inline]
fn rendezvous_key(key: u32, replica: u32) -> u64 {
    splitmix64((u64::from(key) << 32 | u64::from(replica)) ^ 0x5ec7_0a6d_e5f0_0d1e)
}

/// A slot's rendezvous score for a key (the highest wins): a hash of the slot's ring position,
/// which depends only on its device and index.
#[inline]
fn slot_score(hr: u64, position: u32) -> u64 {
    splitmix64(hr ^ u64::from(position))
}

/// A device's weighted rendezvous cost for a key (the lowest wins): straw2's draw, `(2^48 −
/// crush_ln(u16)) / bandwidth`, so a device wins in proportion to its bandwidth.
#[inline]
fn device_cost(hr: u64, device: u32, bandwidth: u32) -> u64 {
    let u = (splitmix64(hr ^ (u64::from(device) << 32 | 0xd1b5)) >> 48) as u32;
    ((1u64 << 48) - crate::crush::ln::crush_ln(u)) / u64::from(bandwidth.max(1))
}

/// A value in `[0, u)` from a 32-bit draw: `⌊draw · u / 2³²⌋`.
#[inline]
fn scale(draw: u32, u: u64) -> u64 {
    ((u128::from(draw) * u128::from(u)) >> 32) as u64
}

/// The prime `p > s` of the capacity strategy: the first prime at or after
/// `s + 1 + mix32(s) mod 1024` — chosen "randomly but deterministically", as CRUSH chooses the
/// primes of uniform buckets.
pub fn strategy_prime(sector_size: u32) -> u32 {
    let mut candidate = sector_size + 1 + mix32(sector_size) % 1024;
    while !is_prime(candidate) {
        candidate += 1;
    }
    candidate
}

fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2u32;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// Lemire's fastmod constant for divisor `d` (`d ≥ 1`).
fn fastmod_constant(d: u32) -> u64 {
    (u64::MAX / u64::from(d)).wrapping_add(1)
}

/// `a mod d` with `m = fastmod_constant(d)`, exact for every 32-bit `a` and `d`.
#[inline]
fn fastmod(a: u32, m: u64, d: u32) -> u32 {
    let low = m.wrapping_mul(u64::from(a));
    ((u128::from(low) * u128::from(d)) >> 64) as u32
}

/// The state of one slot (virtual node) of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SlotState {
    /// Usable.
    Live,
    /// Its device is down: skipped, but the sector's strategy and ranges still count it.
    Down,
    /// Marked: its device is out, removed, or reweighted below this vnode. Skipped.
    Marked,
}

/// One virtual node, before compilation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotSpec {
    /// Position on the 32-bit ring.
    pub position: u32,
    /// Index of its device in the owner table (`2^24 - 1` for devices no longer in the map).
    pub owner: u32,
    /// Whether it belongs to the sector base (forms sector boundaries).
    pub base: bool,
    /// Its state.
    pub state: SlotState,
}

impl SlotSpec {
    /// The slot as one sortable word: position, owner, not-base, state — ring order, ties
    /// broken by owner, base slots first.
    pub fn pack(&self) -> u64 {
        let state = match self.state {
            SlotState::Live => 0,
            SlotState::Down => 1,
            SlotState::Marked => 2,
        };
        u64::from(self.position) << 32
            | u64::from(self.owner.min(NO_OWNER)) << 8
            | u64::from(!self.base) << 2
            | state
    }
}

/// One device, before compilation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerSpec {
    /// Device id.
    pub device: u32,
    /// Zone number (equal numbers: same zone).
    pub zone: u32,
    /// Device class number (`u32::MAX`: none).
    pub class: u32,
    /// Bandwidth in MB/s as the engine counts it (unknown already replaced; at least 1).
    pub bandwidth: u32,
}

/// A compiled attributed ring.
#[derive(Clone, Debug)]
pub struct AttributedRing {
    /// Per sector, in ring order: one 32-byte entry holding what a lookup reads there once
    /// it knows the sector — the strategy, its precomputed range ends and, for the usual
    /// sectors of at most [`FAST_SLOTS`] slots, the slots themselves — so that a key's
    /// replicas read one or two cache lines. After the last, copies of the first
    /// [`FAST_REPLICAS`] − 1 (wrapping), so that the sectors of a key's replicas are
    /// consecutive entries.
    sectors: Vec<Sector>,
    /// Number of sectors (without the copies).
    sector_count: usize,
    /// How a key's sector is found.
    search: SectorSearch,
    /// Slot words of the sectors whose slots are not in their entry, sector by sector, each
    /// sector in ring order.
    overflow: Vec<u32>,
    /// The ring position of each slot of `overflow` (rendezvous selection only, where every
    /// sector's slots are there; empty otherwise).
    slot_positions: Vec<u32>,
    /// Slots in all (marked ones included).
    slot_count: usize,
    selection: SectorSelection,
    /// Per owner: device id, zone, bandwidth.
    device_ids: Vec<u32>,
    zones: Vec<u32>,
    bandwidths: Vec<u32>,
    /// Fastmod constants by sector size (slot count).
    fastmod: Vec<u64>,
    prime: u32,
    /// The fast path's capacity strategy: per replica and `h mod 12`, the slot it picks in a
    /// homogeneous sector of s slots, the ring's sector size, when s ≤ 4 (12 is a multiple
    /// of every such size, so `h mod 12` fixes `h mod s`).
    fast_slots: [[u8; 12]; FAST_REPLICAS],
    /// s, the sector size the sectors were formed with.
    sector_size: u32,
    distinct_zones: bool,
    /// Distinct zones (or devices) with a live slot: the most replicas a key can get.
    available: usize,
}

/// How a ring finds a key's sector, by size (measured with the `optio` binary, huge pages,
/// Table 1's map, against the search over the entries alone).
#[derive(Clone, Debug)]
enum SectorSearch {
    /// Entries of up to [`SEARCH_ENTRIES_BYTES`] in all: a top-bits index, then a count over
    /// the positions in the entries — two dependent reads, the second one the lookup needs
    /// anyway, on tables in cache.
    Entries(RingIndex),
    /// Up to [`DENSE_POSITIONS_BYTES`] of positions: the same index over a dense copy of the
    /// positions (4 bytes each, an eighth of the entries' bytes), which stays in cache and
    /// which a sorted key stream reads line after line. 4,096 nodes: 25 % faster in sorted
    /// key order (12.2–12.5 → 9.0–9.5 ms), as fast in random order.
    Dense(RingIndex, Vec<u32>),
    /// Larger: a [`ResidualIndex`], whose word usually places the key without reading a
    /// position (about 2 % of keys read the entries' positions) — one dependent read where
    /// the dense copy, no longer in cache, made two. 32,768 nodes: 30 % faster than the dense
    /// copy in either key order.
    Residual(ResidualIndex),
}

impl SectorSearch {
    /// The search for sectors at `positions` (ascending).
    fn new(positions: Vec<u32>) -> SectorSearch {
        SectorSearch::of_kind(SectorSearch::kind(positions.len()), positions)
    }

    /// Which search (a `SEARCH_` constant) a ring of `count` sectors uses.
    fn kind(count: usize) -> u8 {
        if count * std::mem::size_of::<Sector>() <= SEARCH_ENTRIES_BYTES {
            SEARCH_ENTRIES
        } else if count * 4 <= DENSE_POSITIONS_BYTES || count >= ResidualIndex::CAPACITY {
            SEARCH_DENSE
        } else {
            SEARCH_RESIDUAL
        }
    }

    /// The search of `kind` for sectors at `positions` (ascending).
    fn of_kind(kind: u8, positions: Vec<u32>) -> SectorSearch {
        let count = positions.len();
        match kind {
            SEARCH_ENTRIES => SectorSearch::Entries(RingIndex::new(count, |k| positions[k])),
            SEARCH_DENSE => SectorSearch::Dense(RingIndex::new(count, |k| positions[k]), positions),
            _ => SectorSearch::Residual(ResidualIndex::new(count, |k| positions[k])),
        }
    }

    fn memory_bytes(&self) -> usize {
        match self {
            SectorSearch::Entries(index) => index.memory_bytes(),
            SectorSearch::Dense(index, positions) => {
                index.memory_bytes() + positions.capacity() * 4
            }
            SectorSearch::Residual(index) => index.memory_bytes(),
        }
    }
}

/// [`SectorSearch`] variants as constants, for the lookups' compiled paths.
const SEARCH_ENTRIES: u8 = 0;
const SEARCH_DENSE: u8 = 1;
const SEARCH_RESIDUAL: u8 = 2;

/// One sector: its position, its flags and where its slots are, what its strategy needs
/// (precomputed), and its slots when they fit. 32 bytes, aligned: two per cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(32))]
struct Sector {
    /// The sector's position (searched for a key's sector in rings that search their
    /// entries; larger rings search a dense copy or a residual index, [`SectorSearch`]).
    position: u32,
    /// [`FAST`] sectors: three *thresholds*, such that the slot a replica's strategy picks
    /// first is the count of thresholds below a value from the key
    /// ([`AttributedRing::fast_choice`]). Heterogeneous sectors compare the bandwidth draw
    /// itself: slot i's range ends at e_i (the bandwidths of the ranges up to and including
    /// slot i's; a slot that starts no range adds nothing), and `⌊draw · u / 2³²⌋ ≥ e_i`
    /// exactly when `draw > ⌈e_i · 2³² / u⌉ − 1`, the threshold (`u32::MAX` when e_i = u).
    /// Homogeneous sectors compare the capacity strategy's slot number: thresholds 0, 1, 2
    /// (`u32::MAX` beyond the last slot). Other sectors: the first of their slots in
    /// `overflow`, the end of them, and 0.
    bounds: [u32; FAST_SLOTS - 1],
    /// [`FAST`] sectors: their slot words ([`MARKED`] after the last). Others: u in
    /// `words[1]` (low half) and `words[2]` (high half), for heterogeneous sectors. In both,
    /// `words[0]` carries the sector's flags ([`SECTOR_FLAGS`]) in bits no slot word uses.
    words: [u32; FAST_SLOTS],
}

impl Sector {
    fn new(position: u32, begin: u32, end: u32) -> Sector {
        Sector { position, bounds: [begin, end, 0], words: [0, 0, 0, MARKED] }
    }

    /// Whether the sector is heterogeneous (bandwidth strategy).
    #[inline(always)]
    fn is_heterogeneous(&self) -> bool {
        self.words[0] & HETEROGENEOUS != 0
    }

    /// Whether the sector's first choices take the fast path.
    #[inline(always)]
    fn is_fast(&self) -> bool {
        self.words[0] & FAST != 0
    }

    /// The slot words a [`FAST`] sector holds in its entry.
    #[inline(always)]
    fn inline_slots(&self) -> &[u32] {
        &self.words[..((self.words[0] >> LEN_SHIFT & 3) + 1) as usize]
    }

    /// u of a heterogeneous sector off the fast path.
    fn u_apart(&self) -> u64 {
        u64::from(self.words[1]) | u64::from(self.words[2]) << 32
    }
}

/// The total length of the bandwidth ranges `slots` start (a slot starts one when it is its
/// device's first in the sector: [`FIRST`]), in MB/s; for a whole sector, its u. Every
/// bandwidth in `bandwidths` is at least 1.
fn range_length(slots: &[u32], bandwidths: &[u32]) -> u64 {
    slots
        .iter()
        .filter(|w| **w & FIRST != 0)
        .map(|w| u64::from(bandwidths[(w & OWNER_MASK) as usize]))
        .sum()
}

/// The thresholds of a sector with `slots` for the fast path (see [`Sector::bounds`]), or
/// `None` when it cannot take it: no slot or more than [`FAST_SLOTS`]; homogeneous with a
/// slot count other than the ring's sector size (the fast path's slot numbers are for that
/// size only); heterogeneous with a first slot that starts no range (a marked one: its
/// threshold would be below every draw).
fn fast_bounds(
    heterogeneous: bool,
    slots: &[u32],
    bandwidths: &[u32],
    sector_size: u32,
) -> Option<[u32; FAST_SLOTS - 1]> {
    let size = slots.len();
    if size == 0 || size > FAST_SLOTS {
        return None;
    }
    let mut bounds = [u32::MAX; FAST_SLOTS - 1];
    if !heterogeneous {
        if size as u32 != sector_size {
            return None;
        }
        for (i, bound) in bounds.iter_mut().enumerate().take(size - 1) {
            *bound = i as u32;
        }
        return Some(bounds);
    }
    if slots[0] & FIRST == 0 {
        return None;
    }
    let u = range_length(slots, bandwidths);
    let mut end = 0u64;
    for (i, bound) in bounds.iter_mut().enumerate() {
        end += range_length(slots.get(i..=i).unwrap_or_default(), bandwidths);
        // ⌈e · 2³² / u⌉ − 1, with 1 ≤ e ≤ u: at most 2³² − 1.
        *bound = ((u128::from(end.max(1)) << 32).div_ceil(u128::from(u)) - 1) as u32;
    }
    Some(bounds)
}

/// Whether `value` is among the first `count` entries of `list`: for short lists, compared
/// with every entry at once (no loop exit for the CPU to predict).
#[inline(always)]
fn held<const N: usize>(list: &[u32; N], count: usize, value: u32) -> bool {
    if N <= 8 {
        (0..N).fold(false, |hit, i| hit | (i < count) & (list[i] == value))
    } else {
        list[..count.min(N)].contains(&value)
    }
}

/// Where a replica came from, for tests and the simulator's statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// The capacity strategy of a homogeneous sector.
    Capacity,
    /// The bandwidth strategy of a heterogeneous sector.
    Bandwidth,
    /// The final ring walk (no sector had an eligible device where its strategy looked).
    Walk,
}

/// The replicas chosen so far in one lookup: owners and zones.
#[derive(Clone, Copy)]
struct Chosen<'a> {
    owners: &'a [u32],
    zones: &'a [u32],
}

impl Chosen<'_> {
    // A plain loop: `contains` is built for long slices, these hold a few entries (the slow
    // path's instructions per call fell by a sixth, callgrind).
    #[allow(clippy::manual_contains)]
    #[inline(always)]
    fn excludes(&self, ring: &AttributedRing, owner: u32) -> bool {
        if ring.distinct_zones {
            let zone = ring.zones[owner as usize];
            self.zones.iter().any(|z| *z == zone)
        } else {
            self.owners.iter().any(|o| *o == owner)
        }
    }
}

impl AttributedRing {
    /// Compiles the attributed ring of `map` for `params` and `sector_base`.
    pub fn new(
        map: &ClusterMap,
        params: &AttributedParams,
        sector_base: &[(DeviceId, u32)],
    ) -> AttributedRing {
        let mut packed = Vec::with_capacity(slot_count(map, params, sector_base));
        let owners = for_each_slot(map, params, sector_base, |slot| packed.push(slot.pack()));
        AttributedRing::from_packed(&owners, packed, params)
    }

    /// Compiles a ring from explicit slots (positions given), for the paper's worked examples
    /// and the simulator. Slots need not be sorted.
    pub fn from_specs(
        owners: &[OwnerSpec],
        slots: Vec<SlotSpec>,
        params: &AttributedParams,
    ) -> AttributedRing {
        let packed = slots.iter().map(SlotSpec::pack).collect();
        AttributedRing::from_packed(owners, packed, params)
    }

    /// Compiles a ring from packed slots ([`SlotSpec::pack`]), in any order.
    fn from_packed(
        owners: &[OwnerSpec],
        mut packed: Vec<u64>,
        params: &AttributedParams,
    ) -> AttributedRing {
        packed.sort_unstable();
        let is_base = |p: u64| p & (1 << 2) == 0;
        let bases = packed.iter().filter(|p| is_base(**p)).count();
        let sector_size = params.sector_size.max(1) as usize;
        // Sector ends: every s-th base slot, and the last base slot.
        let mut ends: Vec<(usize, u32)> = Vec::with_capacity(bases.div_ceil(sector_size));
        let mut seen = 0usize;
        for (i, p) in packed.iter().enumerate() {
            if is_base(*p) {
                seen += 1;
                if seen.is_multiple_of(sector_size) || seen == bases {
                    ends.push((i, (*p >> 32) as u32));
                }
            }
        }
        let rendezvous = params.selection == SectorSelection::Rendezvous;
        let positions: Vec<u32> = if rendezvous {
            packed.iter().map(|p| (*p >> 32) as u32).collect()
        } else {
            Vec::new()
        };
        let words: Vec<u32> = packed
            .iter()
            .map(|p| {
                let owner = (*p >> 8) as u32 & OWNER_MASK;
                owner
                    | match p & 3 {
                        0 => 0,
                        1 => DOWN,
                        _ => MARKED,
                    }
            })
            .collect();
        drop(packed);
        if ends.is_empty() && !words.is_empty() {
            // No base: one sector spanning the ring (the builder refuses this for maps with
            // devices; it keeps hand-made rings total).
            ends.push((words.len() - 1, u32::MAX));
        }
        let sectors = ends.len();
        // With room for the copies of the first entries after the last (see `sectors`).
        let mut sector_list = Vec::with_capacity(sectors + FAST_REPLICAS - 1);
        let sector_positions: Vec<u32> = ends.iter().map(|(_, position)| *position).collect();
        let mut ordered: Vec<u32> = Vec::with_capacity(words.len());
        let mut ordered_positions: Vec<u32> = Vec::with_capacity(positions.len());
        // Sector 0 starts with the slots after the last sector end (they wrap around).
        let tail = ends.last().map_or(0, |(i, _)| i + 1);
        let mut begin = 0usize;
        for (k, (end, _)) in ends.iter().enumerate() {
            let start = ordered.len() as u32;
            if k == 0 {
                ordered.extend_from_slice(&words[tail..]);
                if rendezvous {
                    ordered_positions.extend_from_slice(&positions[tail..]);
                }
            }
            ordered.extend_from_slice(&words[begin..=*end]);
            if rendezvous {
                ordered_positions.extend_from_slice(&positions[begin..=*end]);
            }
            sector_list.push(Sector::new(sector_positions[k], start, ordered.len() as u32));
            begin = end + 1;
        }
        drop(words);
        let search = SectorSearch::new(sector_positions);
        let mut ring = AttributedRing {
            sectors: sector_list,
            sector_count: sectors,
            search,
            slot_count: ordered.len(),
            overflow: ordered,
            slot_positions: ordered_positions,
            selection: params.selection,
            device_ids: owners.iter().map(|o| o.device).collect(),
            zones: owners.iter().map(|o| o.zone).collect(),
            bandwidths: owners.iter().map(|o| o.bandwidth.max(1)).collect(),
            fastmod: Vec::new(),
            prime: strategy_prime(params.sector_size.max(1)),
            fast_slots: [[0; 12]; FAST_REPLICAS],
            sector_size: params.sector_size.max(1),
            distinct_zones: params.distinct_zones,
            available: 0,
        };
        ring.classify(owners, params.bandwidth_tolerance_percent);
        let largest = (0..sectors).map(|k| ring.slots_of(k).len()).max().unwrap_or(0);
        ring.fastmod = (0..=largest as u32).map(|d| fastmod_constant(d.max(1))).collect();
        ring.prepare_fast();
        if sectors > 0 {
            let copies: Vec<Sector> =
                (0..FAST_REPLICAS - 1).map(|i| ring.sectors[i % sectors]).collect();
            ring.sectors.extend(copies);
        }
        ring.available = ring.count_available();
        ring
    }

    /// Marks each device's first unmarked slot per sector and flags heterogeneous sectors.
    fn classify(&mut self, owners: &[OwnerSpec], tolerance_percent: u32) {
        let mut stamp = vec![u32::MAX; owners.len()];
        for k in 0..self.sector_count() {
            let (mut class, mut low, mut high) = (None, u32::MAX, 0u32);
            let mut mixed_class = false;
            let (begin, end) = self.overflow_range(k);
            for slot in &mut self.overflow[begin..end] {
                if *slot & MARKED != 0 {
                    continue;
                }
                let owner = (*slot & OWNER_MASK) as usize;
                if stamp[owner] != k as u32 {
                    stamp[owner] = k as u32;
                    *slot |= FIRST;
                }
                let spec = &owners[owner];
                match class {
                    None => class = Some(spec.class),
                    Some(c) if c != spec.class => mixed_class = true,
                    Some(_) => {}
                }
                low = low.min(spec.bandwidth.max(1));
                high = high.max(spec.bandwidth.max(1));
            }
            let spread =
                u64::from(high) * 100 > u64::from(low) * (100 + u64::from(tolerance_percent));
            if class.is_some() && (mixed_class || spread) {
                let u = range_length(&self.overflow[begin..end], &self.bandwidths);
                let sector = &mut self.sectors[k];
                sector.words[0] |= HETEROGENEOUS;
                (sector.words[1], sector.words[2]) = (u as u32, (u >> 32) as u32);
            }
        }
    }

    /// Precomputes the fast path of the first choices (not for rendezvous selection): the
    /// thresholds of each sector that can take it ([`fast_bounds`]), its slots in its entry,
    /// and the per-replica slot numbers of homogeneous sectors.
    fn prepare_fast(&mut self) {
        let size = self.sector_size;
        if size as usize <= FAST_SLOTS {
            for (replica, slots) in self.fast_slots.iter_mut().enumerate() {
                let offset = (replica as u32 + 1) * self.prime % size;
                for (t, slot) in slots.iter_mut().enumerate() {
                    *slot = ((t as u32 % size + offset) % size) as u8;
                }
            }
        }
        if self.selection == SectorSelection::Rendezvous {
            return;
        }
        let mut kept = Vec::new();
        for k in 0..self.sector_count() {
            let (begin, end) = self.overflow_range(k);
            let slots = &self.overflow[begin..end];
            let sector = &mut self.sectors[k];
            let heterogeneous = sector.words[0] & HETEROGENEOUS;
            match fast_bounds(heterogeneous != 0, slots, &self.bandwidths, size) {
                Some(bounds) => {
                    debug_assert!(slots.iter().all(|w| w & SECTOR_FLAGS == 0), "flags are free");
                    sector.bounds = bounds;
                    sector.words = [MARKED; FAST_SLOTS];
                    sector.words[..slots.len()].copy_from_slice(slots);
                    sector.words[0] |= heterogeneous | FAST | (slots.len() as u32 - 1) << LEN_SHIFT;
                }
                None => {
                    // Its slots stay apart, at their place in the compacted overflow.
                    sector.bounds = [kept.len() as u32, (kept.len() + slots.len()) as u32, 0];
                    kept.extend_from_slice(slots);
                }
            }
        }
        kept.shrink_to_fit();
        self.overflow = kept;
    }

    fn count_available(&self) -> usize {
        let mut seen: Vec<u32> = (0..self.sector_count())
            .flat_map(|k| self.slots_of(k))
            .filter(|w| **w & (MARKED | DOWN) == 0)
            .map(|w| {
                let owner = *w & OWNER_MASK;
                if self.distinct_zones { self.zones[owner as usize] } else { owner }
            })
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen.len()
    }

    /// Number of virtual nodes (slots, marked ones included).
    pub fn vnode_count(&self) -> usize {
        self.slot_count
    }

    /// Number of sectors.
    pub fn sector_count(&self) -> usize {
        self.sector_count
    }

    /// The position of sector `k` (below `sector_count`).
    #[inline]
    fn position(&self, k: usize) -> u32 {
        self.sectors[k].position
    }

    /// The position of sector `k` (its last base virtual node).
    pub fn sector_position(&self, k: usize) -> Option<u32> {
        (k < self.sector_count()).then(|| self.position(k))
    }

    /// Number of heterogeneous sectors (bandwidth strategy).
    pub fn heterogeneous_count(&self) -> usize {
        self.sectors[..self.sector_count].iter().filter(|s| s.is_heterogeneous()).count()
    }

    /// The prime p of the capacity strategy.
    pub fn prime(&self) -> u32 {
        self.prime
    }

    /// Bytes of memory the lookup structures use.
    pub fn memory_bytes(&self) -> usize {
        self.sectors.capacity() * std::mem::size_of::<Sector>()
            + self.search.memory_bytes()
            + self.overflow.capacity() * 4
            + self.slot_positions.capacity() * 4
            + self.device_ids.capacity() * 4
            + self.zones.capacity() * 4
            + self.bandwidths.capacity() * 4
            + self.fastmod.capacity() * 8
    }

    /// The slot words of sector `k`, in ring order.
    #[inline]
    fn slots_of(&self, k: usize) -> &[u32] {
        let sector = &self.sectors[k];
        if sector.is_fast() {
            sector.inline_slots()
        } else {
            let (begin, end) = self.overflow_range(k);
            &self.overflow[begin..end]
        }
    }

    /// Where the slots of sector `k`, not a [`FAST`] one, are in `overflow` (and, for
    /// rendezvous selection, their positions in `slot_positions`).
    #[inline]
    fn overflow_range(&self, k: usize) -> (usize, usize) {
        let sector = &self.sectors[k];
        debug_assert!(!sector.is_fast(), "sector {k} keeps its slots in its entry");
        (sector.bounds[0] as usize, sector.bounds[1] as usize)
    }

    /// Whether sector `k` is homogeneous (capacity strategy).
    pub fn is_homogeneous(&self, k: usize) -> bool {
        k < self.sector_count() && !self.sectors[k].is_heterogeneous()
    }

    /// The sector a key belongs to: its first successor sector (wrapping).
    #[inline(always)]
    pub fn sector_of(&self, key: u32) -> usize {
        match self.search {
            SectorSearch::Entries(_) => self.sector_in::<SEARCH_ENTRIES>(key),
            SectorSearch::Dense(..) => self.sector_in::<SEARCH_DENSE>(key),
            SectorSearch::Residual(_) => self.sector_in::<SEARCH_RESIDUAL>(key),
        }
    }

    /// [`sector_of`](Self::sector_of) for a ring whose search is `SEARCH` (a
    /// [`SectorSearch`] constant): the lookups choose once, so that each of their compiled
    /// paths is as short as one that knew no other.
    #[inline(always)]
    fn sector_in<const SEARCH: u8>(&self, key: u32) -> usize {
        let entries = &self.sectors[..self.sector_count];
        match (SEARCH, &self.search) {
            (SEARCH_DENSE, SectorSearch::Dense(index, positions)) => {
                index.successor_near(key, positions, |p| *p)
            }
            (_, SectorSearch::Entries(index) | SectorSearch::Dense(index, _)) => {
                index.successor_near(key, entries, |s| s.position)
            }
            (_, SectorSearch::Residual(index)) => {
                index.successor(key, entries.len(), |k| entries[k].position)
            }
        }
    }

    /// The devices (ids) of sector `k`'s slots in ring order, with their states.
    pub fn sector_slots(&self, k: usize) -> Vec<(Option<DeviceId>, SlotState)> {
        self.slots_of(k)
            .iter()
            .map(|w| {
                let owner = *w & OWNER_MASK;
                let device = self.device_ids.get(owner as usize).map(|d| DeviceId(*d));
                let state = if w & MARKED != 0 {
                    SlotState::Marked
                } else if w & DOWN != 0 {
                    SlotState::Down
                } else {
                    SlotState::Live
                };
                (device, state)
            })
            .collect()
    }

    /// The bandwidth ranges of sector `k`: (device, start, end) in MB/s units, in ring order.
    /// Dividing by the smallest length gives the paper's `bandwidth / min_bandwidth` ranges.
    pub fn sector_ranges(&self, k: usize) -> Vec<(DeviceId, u64, u64)> {
        let mut start = 0u64;
        let mut ranges = Vec::new();
        for w in self.slots_of(k) {
            if w & FIRST != 0 {
                let owner = (w & OWNER_MASK) as usize;
                let length = u64::from(self.bandwidths[owner]);
                ranges.push((DeviceId(self.device_ids[owner]), start, start + length));
                start += length;
            }
        }
        ranges
    }

    /// Up to `replicas` devices for `key`, on distinct devices (and zones when the pool asks),
    /// primary first. Fewer when fewer distinct devices (zones) are live.
    // Always inlined: with its two search paths it would otherwise stay a call (measured: 14
    // more instructions per lookup, +7 % at 64 nodes).
    #[inline(always)]
    pub fn place(&self, key: u32, replicas: usize, out: &mut ReplicaSet) {
        self.place_with(key, replicas, out, |_, _| {});
    }

    /// [`place`](Self::place) for many keys: `out[i]` gets the devices of `keys[i]` (up to
    /// the shorter of the two). The same results as one `place` per key, faster for large
    /// rings: the lookups of a block of keys run stage by stage (find the sectors, then every
    /// replica's first choice, then the checks), so the memory reads of different keys
    /// overlap instead of waiting for each other.
    pub fn place_batch(&self, keys: &[u32], replicas: usize, out: &mut [ReplicaSet]) {
        let wanted = replicas.min(self.available).min(REPLICAS_MAX);
        match wanted {
            0 => out.iter_mut().zip(keys).for_each(|(set, _)| set.clear()),
            1 => self.place_batch_n::<1>(keys, out),
            2 => self.place_batch_n::<2>(keys, out),
            3 => self.place_batch_n::<3>(keys, out),
            4 => self.place_batch_n::<4>(keys, out),
            _ => {
                for (key, set) in keys.iter().zip(out.iter_mut()) {
                    self.place(*key, replicas, set);
                }
            }
        }
    }

    /// [`place_batch`](Self::place_batch) for `N` replicas (what `place` gives for `N`).
    fn place_batch_n<const N: usize>(&self, keys: &[u32], out: &mut [ReplicaSet]) {
        const BLOCK: usize = 16;
        for (keys, out) in keys.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
            let n = keys.len().min(out.len());
            // Stage 1: the sectors (each a chain of memory reads; the chains of the block's
            // keys run side by side).
            let mut first = [0usize; BLOCK];
            for i in 0..n {
                first[i] = self.sector_of(keys[i]);
            }
            // Stage 2: whether each key's replicas take the fast path, which reads their
            // entries (apart from stage 1, so that these reads overlap too when the search
            // did not read the entries: a short loop of independent loads).
            let mut fast = [false; BLOCK];
            for i in 0..n {
                fast[i] = self.fast_block::<N>(first[i]);
            }
            // Stage 3: every replica's first choice, the checks, and the long way for the
            // choices that fail them.
            for i in 0..n {
                let h = capacity_hash(keys[i]);
                let candidates = self.first_choices::<N>(keys[i], h, first[i], N, fast[i]);
                self.finish::<N>(keys[i], h, first[i], N, &candidates, &mut out[i], |_, _| {});
            }
        }
    }

    /// [`place`](Self::place), reporting the sector and strategy of each replica.
    pub fn place_traced(
        &self,
        key: u32,
        replicas: usize,
        out: &mut ReplicaSet,
        trace: &mut dyn FnMut(usize, Strategy),
    ) {
        self.place_with(key, replicas, out, trace);
    }

    #[inline(always)]
    fn place_with(
        &self,
        key: u32,
        replicas: usize,
        out: &mut ReplicaSet,
        trace: impl FnMut(usize, Strategy),
    ) {
        out.clear();
        let wanted = replicas.min(self.available).min(out.capacity());
        match self.search {
            SectorSearch::Entries(_) => {
                self.place_searching::<SEARCH_ENTRIES>(key, wanted, out, trace);
            }
            SectorSearch::Dense(..) => {
                self.place_searching::<SEARCH_DENSE>(key, wanted, out, trace);
            }
            SectorSearch::Residual(_) => {
                self.place_searching::<SEARCH_RESIDUAL>(key, wanted, out, trace);
            }
        }
    }

    /// [`place_with`](Self::place_with) for `wanted` replicas, finding the key's sector as
    /// [`sector_in::<SEARCH>`](Self::sector_in) does.
    #[inline(always)]
    fn place_searching<const SEARCH: u8>(
        &self,
        key: u32,
        wanted: usize,
        out: &mut ReplicaSet,
        trace: impl FnMut(usize, Strategy),
    ) {
        // The usual replica counts compiled apart, so that their loops unroll and their
        // working arrays are small (zeroing 32-entry ones costs more than the lookup).
        match wanted {
            0 => {}
            1 => self.place_n::<1, SEARCH>(key, wanted, out, trace),
            2 => self.place_n::<2, SEARCH>(key, wanted, out, trace),
            3 => self.place_n::<3, SEARCH>(key, wanted, out, trace),
            4 => self.place_n::<4, SEARCH>(key, wanted, out, trace),
            _ => self.place_n::<REPLICAS_MAX, SEARCH>(key, wanted, out, trace),
        }
    }

    #[inline(always)]
    fn place_n<const N: usize, const SEARCH: u8>(
        &self,
        key: u32,
        wanted: usize,
        out: &mut ReplicaSet,
        trace: impl FnMut(usize, Strategy),
    ) {
        if wanted == 0 {
            return;
        }
        let first = self.sector_in::<SEARCH>(key);
        let h = capacity_hash(key);
        let fast = self.fast_block::<N>(first);
        let candidates = self.first_choices::<N>(key, h, first, wanted, fast);
        self.finish::<N>(key, h, first, wanted, &candidates, out, trace);
    }

    /// Whether the first `N` replicas of a key in sector `first` take the fast path: their
    /// sectors, consecutive entries, are all [`FAST`].
    #[inline(always)]
    fn fast_block<const N: usize>(&self, first: usize) -> bool {
        N <= FAST_REPLICAS
            && self
                .sectors
                .get(first..first + N)
                .is_some_and(|block| block.iter().fold(FAST, |all, s| all & s.words[0]) != 0)
    }

    /// The first choices of the first `wanted` replicas (at most `N`) of `key` (`h` its
    /// capacity hash, `first` its sector; `fast` what [`fast_block`](Self::fast_block) says of
    /// it), independent of each other so that the CPU overlaps their work;
    /// [`finish`](Self::finish) checks them.
    #[inline(always)]
    fn first_choices<const N: usize>(
        &self,
        key: u32,
        h: u32,
        first: usize,
        wanted: usize,
        fast: bool,
    ) -> [u32; N] {
        let mut candidates = [MARKED; N];
        if fast && let Some(block) = self.sectors.get(first..first + N) {
            // The usual case: the replicas' sectors are consecutive entries, all fast.
            let t = (h % 12) as usize;
            for (replica, candidate) in candidates.iter_mut().enumerate() {
                *candidate = self.fast_choice(&block[replica], replica, t, key);
            }
            return candidates;
        }
        let sectors = self.sector_count();
        let mut sector = first;
        for (replica, candidate) in candidates.iter_mut().take(wanted).enumerate() {
            *candidate = self.choose_first(key, h, replica, sector);
            sector += 1;
            if sector == sectors {
                sector = 0;
            }
        }
        candidates
    }

    /// Checks each replica's first choice against the replicas before it, takes the long way
    /// for those that fail, and writes the devices.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn finish<const N: usize>(
        &self,
        key: u32,
        h: u32,
        first: usize,
        wanted: usize,
        candidates: &[u32; N],
        out: &mut ReplicaSet,
        mut trace: impl FnMut(usize, Strategy),
    ) {
        let sectors = self.sector_count();
        let wanted = wanted.min(N);
        // The usual case first: every first choice live and on a distinct device (zone),
        // checked for all pairs at once.
        if N <= FAST_REPLICAS {
            let mut differ = [0u32; N];
            let mut ok = true;
            for i in 0..N {
                let owner = candidates[i] & OWNER_MASK;
                differ[i] = if self.distinct_zones {
                    self.zones.get(owner as usize).copied().unwrap_or(u32::MAX)
                } else {
                    owner
                };
                ok &= i >= wanted || candidates[i] & (MARKED | DOWN) == 0;
                for j in 0..i {
                    ok &= i >= wanted || differ[i] != differ[j];
                }
            }
            if ok {
                let mut sector = first;
                for _ in 0..wanted {
                    trace(sector, self.strategy_of(sector));
                    sector += 1;
                    if sector == sectors {
                        sector = 0;
                    }
                }
                out.fill(wanted, |i| {
                    let owner = (candidates[i] & OWNER_MASK) as usize;
                    self.device_ids.get(owner).map_or(ITEM_NONE, |d| *d as i32)
                });
                return;
            }
        }
        let (mut owners, mut zones) = ([0u32; N], [0u32; N]);
        out.clear();
        let mut sector = first;
        for replica in 0..wanted {
            let word = candidates[replica];
            let owner = word & OWNER_MASK;
            // Zones only matter when the pool asks for distinct ones (a predictable branch).
            let (zone, taken) = if self.distinct_zones {
                let zone = self.zones.get(owner as usize).copied().unwrap_or(u32::MAX);
                (zone, held(&zones, replica, zone))
            } else {
                (0, held(&owners, replica, owner))
            };
            let (owner, zone, landed, strategy) = if word & (MARKED | DOWN) == 0 && !taken {
                (owner, zone, sector, self.strategy_of(sector))
            } else {
                let chosen = Chosen { owners: &owners[..replica], zones: &zones[..replica] };
                match self.select(key, h, replica as u32, sector, chosen) {
                    Some((owner, landed, strategy)) => {
                        (owner, self.zones[owner as usize], landed, strategy)
                    }
                    None => break,
                }
            };
            trace(landed, strategy);
            owners[replica] = owner;
            zones[replica] = zone;
            out.push(self.device_ids[owner as usize] as i32);
            sector += 1;
            if sector == sectors {
                sector = 0;
            }
        }
    }

    /// The strategy sector `k` uses (for traces).
    #[inline(always)]
    fn strategy_of(&self, k: usize) -> Strategy {
        // `get`: no bounds check left behind when the trace is not used.
        match self.sectors.get(k) {
            Some(sector) if sector.is_heterogeneous() => Strategy::Bandwidth,
            _ => Strategy::Capacity,
        }
    }

    /// The slot word the strategy of `sector` picks first for `replica`: [`fast_choice`]
    /// (Self::fast_choice) when the sector has its thresholds, else [`first_choice`]
    /// (Self::first_choice).
    #[inline(always)]
    fn choose_first(&self, key: u32, h: u32, replica: usize, sector: usize) -> u32 {
        let this = &self.sectors[sector];
        if this.is_fast() && replica < FAST_REPLICAS {
            self.fast_choice(this, replica, (h % 12) as usize, key)
        } else {
            self.first_choice(key, h, replica as u32, sector)
        }
    }

    /// The slot word the strategy of a [`FAST`] sector picks first for `replica` (below
    /// [`FAST_REPLICAS`]), `t` being `h mod 12`: the bandwidth draw and the capacity
    /// strategy's slot number both come from the key alone (so the CPU computes them while it
    /// waits for the sector's entry), one is picked without a branch (which strategy a sector
    /// uses is as unpredictable as the key), and the slot is the count of the sector's
    /// thresholds below it.
    #[inline(always)]
    fn fast_choice(&self, this: &Sector, replica: usize, t: usize, key: u32) -> u32 {
        let slot = u32::from(self.fast_slots[replica][t]);
        let draw = mix32_folded(fold16(key) ^ DRAW_SALTS[replica]);
        let value = std::hint::select_unpredictable(this.is_heterogeneous(), draw, slot);
        let index: usize = this.bounds.iter().map(|b| usize::from(value > *b)).sum();
        this.words[index & (FAST_SLOTS - 1)]
    }

    /// The slot word the strategy of `sector` picks first for `replica` ([`MARKED`] for an
    /// empty sector): the capacity strategy's slot, or the bandwidth strategy's range.
    #[inline(never)]
    fn first_choice(&self, key: u32, h: u32, replica: u32, sector: usize) -> u32 {
        if self.selection == SectorSelection::Rendezvous {
            let hr = rendezvous_key(key, replica);
            return self.rendezvous(hr, sector, |w| w & (MARKED | DOWN) == 0);
        }
        let this = self.sectors[sector];
        let slots = self.slots_of(sector);
        if slots.is_empty() {
            return MARKED;
        }
        if !this.is_heterogeneous() {
            let size = slots.len() as u32;
            let m = self.fastmod[size as usize];
            let mut j = fastmod(h, m, size) + fastmod((replica + 1) * self.prime, m, size);
            if j >= size {
                j -= size;
            }
            slots[j as usize]
        } else {
            let value = scale(bandwidth_draw(key, replica, 0), self.sector_u(this));
            let mut acc = 0u64;
            for &w in slots {
                if w & FIRST != 0 {
                    acc += u64::from(self.bandwidths[(w & OWNER_MASK) as usize]);
                    if value < acc {
                        return w;
                    }
                }
            }
            MARKED
        }
    }

    /// The rendezvous selection in a sector, among the slots `eligible` accepts ([`MARKED`]
    /// when none): in a homogeneous sector the slot of highest score, in a heterogeneous one
    /// the device (at its first unmarked slot) of lowest bandwidth-weighted cost; ties go to the
    /// first in ring order.
    #[inline]
    fn rendezvous(&self, hr: u64, sector: usize, eligible: impl Fn(u32) -> bool) -> u32 {
        let mut pick = MARKED;
        let slots = self.slots_of(sector);
        if !self.sectors[sector].is_heterogeneous() {
            // Rendezvous rings keep every sector's slots in `overflow`, beside their positions.
            let (begin, _) = self.overflow_range(sector);
            let mut best = 0u64;
            for (i, &w) in slots.iter().enumerate() {
                let score = slot_score(hr, self.slot_positions[begin + i]);
                if eligible(w) && (pick == MARKED || score > best) {
                    (pick, best) = (w, score);
                }
            }
        } else {
            let mut best = u64::MAX;
            for &w in slots {
                if w & FIRST == 0 || !eligible(w) {
                    continue;
                }
                let owner = (w & OWNER_MASK) as usize;
                let cost = device_cost(hr, self.device_ids[owner], self.bandwidths[owner]);
                if pick == MARKED || cost < best {
                    (pick, best) = (w, cost);
                }
            }
        }
        pick
    }

    /// u of a heterogeneous sector: the sum of its ranges' lengths.
    #[inline(always)]
    fn sector_u(&self, sector: Sector) -> u64 {
        if sector.is_fast() {
            range_length(sector.inline_slots(), &self.bandwidths)
        } else {
            sector.u_apart()
        }
    }

    /// One replica: the strategy of each sector from `start` on, then a ring walk.
    #[inline(never)]
    fn select(
        &self,
        key: u32,
        h: u32,
        replica: u32,
        start: usize,
        chosen: Chosen<'_>,
    ) -> Option<(u32, usize, Strategy)> {
        let sectors = self.sector_count();
        let mut sector = start;
        for _ in 0..sectors {
            let slots = self.slots_of(sector);
            if !slots.is_empty() && self.selection == SectorSelection::Rendezvous {
                let hr = rendezvous_key(key, replica);
                let eligible =
                    |w: u32| w & (MARKED | DOWN) == 0 && !chosen.excludes(self, w & OWNER_MASK);
                let word = self.rendezvous(hr, sector, eligible);
                if word & MARKED == 0 {
                    let strategy = if !self.sectors[sector].is_heterogeneous() {
                        Strategy::Capacity
                    } else {
                        Strategy::Bandwidth
                    };
                    return Some((word & OWNER_MASK, sector, strategy));
                }
            } else if !slots.is_empty() {
                if !self.sectors[sector].is_heterogeneous() {
                    if let Some(owner) = self.capacity(h, replica, slots, chosen) {
                        return Some((owner, sector, Strategy::Capacity));
                    }
                } else if let Some(owner) = self.bandwidth(key, replica, sector, slots, chosen) {
                    return Some((owner, sector, Strategy::Bandwidth));
                }
            }
            sector += 1;
            if sector == sectors {
                sector = 0;
            }
        }
        // Every sector's strategy missed (possible only when eligible devices are scarce):
        // walk the ring slot by slot from the start sector (`available` guarantees a find).
        (0..sectors)
            .flat_map(|step| self.slots_of((start + step) % sectors))
            .find(|&&w| w & (MARKED | DOWN) == 0 && !chosen.excludes(self, w & OWNER_MASK))
            .map(|w| (w & OWNER_MASK, start, Strategy::Walk))
    }

    /// The capacity strategy: slot `(h + (r+1)·p) mod s'`, then the sector's later slots.
    #[inline]
    fn capacity(&self, h: u32, replica: u32, slots: &[u32], chosen: Chosen<'_>) -> Option<u32> {
        let size = slots.len() as u32;
        let m = self.fastmod[size as usize];
        let a = fastmod(h, m, size);
        let b = fastmod((replica + 1) * self.prime, m, size);
        let mut j = a + b;
        if j >= size {
            j -= size;
        }
        for &w in &slots[j as usize..] {
            if w & (MARKED | DOWN) == 0 && !chosen.excludes(self, w & OWNER_MASK) {
                return Some(w & OWNER_MASK);
            }
        }
        None
    }

    /// The bandwidth strategy: a draw over the ranges; if its device is taken or down, a second
    /// draw over the ranges still eligible.
    #[inline]
    fn bandwidth(
        &self,
        key: u32,
        replica: u32,
        sector: usize,
        slots: &[u32],
        chosen: Chosen<'_>,
    ) -> Option<u32> {
        let u = self.sector_u(self.sectors[sector]);
        let value = scale(bandwidth_draw(key, replica, 0), u);
        let mut acc = 0u64;
        for &w in slots {
            if w & FIRST != 0 {
                let owner = w & OWNER_MASK;
                acc += u64::from(self.bandwidths[owner as usize]);
                if value < acc {
                    if w & DOWN == 0 && !chosen.excludes(self, owner) {
                        return Some(owner);
                    }
                    break;
                }
            }
        }
        // Drawn again among the ranges still eligible.
        let eligible =
            |w: u32| w & FIRST != 0 && w & DOWN == 0 && !chosen.excludes(self, w & OWNER_MASK);
        let mut u_eligible = 0u64;
        for &w in slots {
            if eligible(w) {
                u_eligible += u64::from(self.bandwidths[(w & OWNER_MASK) as usize]);
            }
        }
        if u_eligible == 0 {
            return None;
        }
        let value = scale(bandwidth_draw(key, replica, 1), u_eligible);
        let mut acc = 0u64;
        for &w in slots {
            if eligible(w) {
                acc += u64::from(self.bandwidths[(w & OWNER_MASK) as usize]);
                if value < acc {
                    return Some(w & OWNER_MASK);
                }
            }
        }
        None
    }
}

impl AttributedRing {
    /// The share of all copies each device is expected to hold (device id, share), from the
    /// ring's structure: each sector serves the keys of the sector `r` before it for replica
    /// `r`, in proportion to arc length; within a sector the capacity strategy spreads evenly
    /// over the slots (a skipped slot's share goes to the next live one) and the bandwidth
    /// strategy in proportion to the live devices' bandwidths. Location conflicts are ignored.
    /// For reports and movement minimums only; placement never uses floats.
    pub fn expected_shares(&self, replicas: usize) -> Vec<(DeviceId, f64)> {
        let sectors = self.sector_count();
        let mut shares = vec![0.0f64; self.device_ids.len()];
        if sectors == 0 {
            return Vec::new();
        }
        let replicas = replicas.clamp(1, sectors.max(1)).min(self.available.max(1));
        let arcs: Vec<f64> = (0..sectors)
            .map(|k| {
                let previous = self.position(if k == 0 { sectors - 1 } else { k - 1 });
                let arc = self.position(k).wrapping_sub(previous);
                if sectors == 1 { 4_294_967_296.0 } else { f64::from(arc) }
            })
            .collect();
        for j in 0..sectors {
            let weight: f64 =
                (0..replicas).map(|r| arcs[(j + sectors - r % sectors) % sectors]).sum();
            let slots = self.slots_of(j);
            let live = |w: u32| w & (MARKED | DOWN) == 0;
            if !self.sectors[j].is_heterogeneous() {
                if self.selection == SectorSelection::Rendezvous {
                    let live_slots = slots.iter().filter(|w| live(**w)).count() as f64;
                    for &w in slots.iter().filter(|w| live(**w)) {
                        shares[(w & OWNER_MASK) as usize] += weight / live_slots;
                    }
                    continue;
                }
                let size = slots.len() as f64;
                let mut pending = 0.0;
                for &w in slots {
                    pending += 1.0;
                    if live(w) {
                        shares[(w & OWNER_MASK) as usize] += weight * pending / size;
                        pending = 0.0;
                    }
                }
            } else {
                let u: f64 = slots
                    .iter()
                    .filter(|w| **w & FIRST != 0 && live(**w))
                    .map(|w| f64::from(self.bandwidths[(w & OWNER_MASK) as usize]))
                    .sum();
                if u > 0.0 {
                    for &w in slots.iter().filter(|w| **w & FIRST != 0 && live(**w)) {
                        let owner = (w & OWNER_MASK) as usize;
                        shares[owner] += weight * f64::from(self.bandwidths[owner]) / u;
                    }
                }
            }
        }
        let total: f64 = shares.iter().sum();
        self.device_ids
            .iter()
            .zip(shares)
            .map(|(d, s)| (DeviceId(*d), if total > 0.0 { s / total } else { 0.0 }))
            .collect()
    }
}

/// The owner table and slots of `map` for an attributed pool.
pub fn slot_specs(
    map: &ClusterMap,
    params: &AttributedParams,
    sector_base: &[(DeviceId, u32)],
) -> (Vec<OwnerSpec>, Vec<SlotSpec>) {
    let mut slots = Vec::with_capacity(slot_count(map, params, sector_base));
    let owners = for_each_slot(map, params, sector_base, |s| slots.push(s));
    (owners, slots)
}

/// The number of slots of `map`'s attributed ring.
fn slot_count(
    map: &ClusterMap,
    params: &AttributedParams,
    sector_base: &[(DeviceId, u32)],
) -> usize {
    let based = |id: DeviceId| {
        sector_base.binary_search_by_key(&id, |(d, _)| *d).map_or(0, |i| sector_base[i].1)
    };
    let present: u64 =
        map.devices().iter().map(|d| u64::from(current_count(d, params).max(based(d.id)))).sum();
    let removed: u64 = sector_base
        .iter()
        .filter(|(d, _)| map.device(*d).is_none())
        .map(|(_, c)| u64::from(*c))
        .sum();
    (present + removed).min(ATTRIBUTED_VNODES_MAX) as usize
}

/// Calls `slot` for every slot of `map`'s attributed ring and returns the owner table.
fn for_each_slot(
    map: &ClusterMap,
    params: &AttributedParams,
    sector_base: &[(DeviceId, u32)],
    mut slot: impl FnMut(SlotSpec),
) -> Vec<OwnerSpec> {
    let devices = map.devices();
    let slowest_known = devices
        .iter()
        .filter(|d| d.bandwidth_mb_per_s > 0 && is_member(d))
        .map(|d| d.bandwidth_mb_per_s)
        .min()
        .unwrap_or(1);
    let mut zone_numbers: Vec<i32> = Vec::new();
    let mut owners = Vec::with_capacity(devices.len());
    for (n, device) in devices.iter().enumerate() {
        let zone = match map.ancestor_of_type(ItemId::from(device.id), params.zone_type) {
            Some(bucket) if params.zone_type.0 != 0 => {
                match zone_numbers.iter().position(|z| *z == bucket.id.0) {
                    Some(z) => z as u32,
                    None => {
                        zone_numbers.push(bucket.id.0);
                        zone_numbers.len() as u32 - 1
                    }
                }
            }
            _ => u32::MAX - n as u32,
        };
        let class = device
            .class
            .as_ref()
            .and_then(|c| map.classes().iter().position(|k| k == c))
            .map_or(u32::MAX, |c| c as u32);
        let bandwidth =
            if device.bandwidth_mb_per_s > 0 { device.bandwidth_mb_per_s } else { slowest_known };
        owners.push(OwnerSpec { device: device.id.0, zone, class, bandwidth });
    }
    let based = |id: DeviceId| {
        sector_base.binary_search_by_key(&id, |(d, _)| *d).map_or(0, |i| sector_base[i].1)
    };
    for (owner, device) in devices.iter().enumerate() {
        let full = current_count(device, params);
        let base = based(device.id);
        let live = if is_member(device) {
            crate::engine::ring::vnode_count(
                device.capacity_bytes,
                device.reweight.0,
                params.throttle_bytes,
            )
            .min(full)
        } else {
            0
        };
        let state = if device.up { SlotState::Live } else { SlotState::Down };
        for index in 0..full.max(base) {
            slot(SlotSpec {
                position: vnode_position(device.id, index),
                owner: owner as u32,
                base: index < base,
                state: if index < live { state } else { SlotState::Marked },
            });
        }
    }
    // Base devices no longer in the map: marked slots that keep their sectors' boundaries.
    for (device, count) in sector_base {
        if map.device(*device).is_none() {
            for index in 0..*count {
                slot(SlotSpec {
                    position: vnode_position(*device, index),
                    owner: NO_OWNER,
                    base: true,
                    state: SlotState::Marked,
                });
            }
        }
    }
    owners
}

/// Whether a device may hold data of an attributed pool (it may still be down).
fn is_member(device: &crate::map::Device) -> bool {
    device.is_in && device.weight.0 > 0 && device.reweight.0 > 0 && device.capacity_bytes > 0
}

/// The virtual nodes a device has now, ⌈capacity / c_throttle⌉ (0 without capacity).
fn current_count(device: &crate::map::Device, params: &AttributedParams) -> u32 {
    if device.capacity_bytes == 0 {
        0
    } else {
        vnode_count(device.capacity_bytes, params.throttle_bytes)
    }
}

pub(crate) mod spec;

#[cfg(test)]
mod tests;
