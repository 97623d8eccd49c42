//! The compiled ring's layout ("Layout" in [`super`]): one 32-byte entry per sector with its
//! position, flags, thresholds and (when they fit) its slot words; the slots of the other
//! sectors apart; the search that finds a key's sector, chosen by the ring's size; and the
//! accessors that read them.

use crate::engine::vnode::{ResidualIndex, RingIndex};
use crate::ids::DeviceId;

use super::SectorSelection;

/// Slot word: owner index in the low bits.
pub(super) const OWNER_MASK: u32 = (1 << 24) - 1;

/// Slot word: the first unmarked slot of its device in its sector (the device's range).
pub(super) const FIRST: u32 = 1 << 29;

/// Slot word: the device is down (skipped, still a member of the sector).
pub(super) const DOWN: u32 = 1 << 30;

/// Slot word: marked (removed, out, or beyond the reweighted count): skipped, not a member.
pub(super) const MARKED: u32 = 1 << 31;

/// Sector flags, in the first word of a [`Sector`]'s `words` (bits no slot word uses, so that
/// a fast sector's first slot word carries them): the sector is heterogeneous (bandwidth
/// strategy).
pub(super) const HETEROGENEOUS: u32 = 1 << 27;

/// Sector flag: the sector's first choices take the fast path ([`Sector::bounds`] holds its
/// thresholds, `words` its slots).
pub(super) const FAST: u32 = 1 << 28;

/// Sector flags: a [`FAST`] sector's slot count less one (bits 24 and 25).
pub(super) const LEN_SHIFT: u32 = 24;

/// Every sector flag (none is part of a slot: owners are below 2^24).
pub(super) const SECTOR_FLAGS: u32 = HETEROGENEOUS | FAST | 3 << LEN_SHIFT;

/// Entries up to this size in all (half this machine's L3 cache) are searched for a key's
/// sector themselves ([`SectorSearch::Entries`]); larger rings search their dense positions
/// or a residual index. Measured with the `optio` binary (huge pages), Table 1's
/// map: at 64 and 512 nodes (1.3 and 10.5 MB of entries) searching the entries is as fast
/// or faster (up to 10 % at 64 nodes in random key order, 6–12 % at 512), at 4,096 and
/// 32,768 nodes (84 and 672 MB) searching the dense positions was 10–25 % faster.
pub(super) const SEARCH_ENTRIES_BYTES: usize = 16 << 20;

/// Rings with more bytes of sector positions than this (4 each) search a [`ResidualIndex`]
/// instead of a dense copy of them ([`SectorSearch::Residual`]): measured at 4,096 nodes
/// (10.5 MB of positions) the dense copy is 25 % faster in sorted key order (the residual
/// words, read one line in two or three, are not streamed as the positions are), at 32,768
/// nodes (84 MB) the residual index is about 30 % faster in either order.
pub(super) const DENSE_POSITIONS_BYTES: usize = 16 << 20;

/// Most slots a sector on the fast path has.
pub(super) const FAST_SLOTS: usize = 4;

/// Replicas whose first choice can take the fast path (the later ones take the general one).
pub(super) const FAST_REPLICAS: usize = 4;

/// Owner index of slots of devices no longer in the map.
pub(super) const NO_OWNER: u32 = OWNER_MASK;

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

/// A compiled attributed ring.
#[derive(Clone, Debug)]
pub struct AttributedRing {
    /// Per sector, in ring order: one 32-byte entry holding what a lookup reads there once
    /// it knows the sector — the strategy, its precomputed range ends and, for the usual
    /// sectors of at most [`FAST_SLOTS`] slots, the slots themselves — so that a key's
    /// replicas read one or two cache lines. After the last, copies of the first
    /// [`FAST_REPLICAS`] − 1 (wrapping), so that the sectors of a key's replicas are
    /// consecutive entries.
    pub(super) sectors: Vec<Sector>,
    /// Number of sectors (without the copies).
    pub(super) sector_count: usize,
    /// How a key's sector is found.
    pub(super) search: SectorSearch,
    /// Slot words of the sectors whose slots are not in their entry, sector by sector, each
    /// sector in ring order.
    pub(super) overflow: Vec<u32>,
    /// The ring position of each slot of `overflow` (rendezvous selection only, where every
    /// sector's slots are there; empty otherwise).
    pub(super) slot_positions: Vec<u32>,
    /// Slots in all (marked ones included).
    pub(super) slot_count: usize,
    pub(super) selection: SectorSelection,
    /// Per owner: device id, zone, bandwidth.
    pub(super) device_ids: Vec<u32>,
    pub(super) zones: Vec<u32>,
    pub(super) bandwidths: Vec<u32>,
    /// Fastmod constants by sector size (slot count).
    pub(super) fastmod: Vec<u64>,
    pub(super) prime: u32,
    /// The fast path's capacity strategy: per replica and `h mod 12`, the slot it picks in a
    /// homogeneous sector of s slots, the ring's sector size, when s ≤ 4 (12 is a multiple
    /// of every such size, so `h mod 12` fixes `h mod s`).
    pub(super) fast_slots: [[u8; 12]; FAST_REPLICAS],
    /// s, the sector size the sectors were formed with.
    pub(super) sector_size: u32,
    pub(super) distinct_zones: bool,
    /// Distinct zones (or devices) with a live slot: the most replicas a key can get.
    pub(super) available: usize,
}

/// How a ring finds a key's sector, by size (measured with the `optio` binary, huge pages,
/// Table 1's map, against the search over the entries alone).
#[derive(Clone, Debug)]
pub(super) enum SectorSearch {
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
    pub(super) fn new(positions: Vec<u32>) -> SectorSearch {
        SectorSearch::of_kind(SectorSearch::kind(positions.len()), positions)
    }

    /// Which search (a `SEARCH_` constant) a ring of `count` sectors uses.
    pub(super) fn kind(count: usize) -> u8 {
        if count * std::mem::size_of::<Sector>() <= SEARCH_ENTRIES_BYTES {
            SEARCH_ENTRIES
        } else if count * 4 <= DENSE_POSITIONS_BYTES || count >= ResidualIndex::CAPACITY {
            SEARCH_DENSE
        } else {
            SEARCH_RESIDUAL
        }
    }

    /// The search of `kind` for sectors at `positions` (ascending).
    pub(super) fn of_kind(kind: u8, positions: Vec<u32>) -> SectorSearch {
        let count = positions.len();
        match kind {
            SEARCH_ENTRIES => SectorSearch::Entries(RingIndex::new(count, |k| positions[k])),
            SEARCH_DENSE => SectorSearch::Dense(RingIndex::new(count, |k| positions[k]), positions),
            _ => SectorSearch::Residual(ResidualIndex::new(count, |k| positions[k])),
        }
    }

    pub(super) fn memory_bytes(&self) -> usize {
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
pub(super) const SEARCH_ENTRIES: u8 = 0;

pub(super) const SEARCH_DENSE: u8 = 1;

pub(super) const SEARCH_RESIDUAL: u8 = 2;

/// One sector: its position, its flags and where its slots are, what its strategy needs
/// (precomputed), and its slots when they fit. 32 bytes, aligned: two per cache line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(32))]
pub(super) struct Sector {
    /// The sector's position (searched for a key's sector in rings that search their
    /// entries; larger rings search a dense copy or a residual index, [`SectorSearch`]).
    pub(super) position: u32,
    /// [`FAST`] sectors: three *thresholds*, such that the slot a replica's strategy picks
    /// first is the count of thresholds below a value from the key
    /// ([`AttributedRing::fast_choice`]). Heterogeneous sectors compare the bandwidth draw
    /// itself: slot i's range ends at e_i (the bandwidths of the ranges up to and including
    /// slot i's; a slot that starts no range adds nothing), and `⌊draw · u / 2³²⌋ ≥ e_i`
    /// exactly when `draw > ⌈e_i · 2³² / u⌉ − 1`, the threshold (`u32::MAX` when e_i = u).
    /// Homogeneous sectors compare the capacity strategy's slot number: thresholds 0, 1, 2
    /// (`u32::MAX` beyond the last slot). Other sectors: the first of their slots in
    /// `overflow`, the end of them, and 0.
    pub(super) bounds: [u32; FAST_SLOTS - 1],
    /// [`FAST`] sectors: their slot words ([`MARKED`] after the last). Others: u in
    /// `words[1]` (low half) and `words[2]` (high half), for heterogeneous sectors. In both,
    /// `words[0]` carries the sector's flags ([`SECTOR_FLAGS`]) in bits no slot word uses.
    pub(super) words: [u32; FAST_SLOTS],
}

impl Sector {
    pub(super) fn new(position: u32, begin: u32, end: u32) -> Sector {
        Sector { position, bounds: [begin, end, 0], words: [0, 0, 0, MARKED] }
    }

    /// Whether the sector is heterogeneous (bandwidth strategy).
    #[inline(always)]
    pub(super) fn is_heterogeneous(&self) -> bool {
        self.words[0] & HETEROGENEOUS != 0
    }

    /// Whether the sector's first choices take the fast path.
    #[inline(always)]
    pub(super) fn is_fast(&self) -> bool {
        self.words[0] & FAST != 0
    }

    /// The slot words a [`FAST`] sector holds in its entry.
    #[inline(always)]
    pub(super) fn inline_slots(&self) -> &[u32] {
        &self.words[..((self.words[0] >> LEN_SHIFT & 3) + 1) as usize]
    }

    /// u of a heterogeneous sector off the fast path.
    pub(super) fn u_apart(&self) -> u64 {
        u64::from(self.words[1]) | u64::from(self.words[2]) << 32
    }
}

/// The total length of the bandwidth ranges `slots` start (a slot starts one when it is its
/// device's first in the sector: [`FIRST`]), in MB/s; for a whole sector, its u. Every
/// bandwidth in `bandwidths` is at least 1.
pub(super) fn range_length(slots: &[u32], bandwidths: &[u32]) -> u64 {
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
pub(super) fn fast_bounds(
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
        if u32::try_from(size) != Ok(sector_size) {
            return None;
        }
        for (bound, i) in bounds.iter_mut().zip(0..).take(size - 1) {
            *bound = i;
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
        *bound = u32::try_from((u128::from(end.max(1)) << 32).div_ceil(u128::from(u)) - 1)
            .expect("at most 2^32 - 1, as above");
    }
    Some(bounds)
}

impl AttributedRing {
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
    pub(super) fn position(&self, k: usize) -> u32 {
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
    pub(super) fn slots_of(&self, k: usize) -> &[u32] {
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
    pub(super) fn overflow_range(&self, k: usize) -> (usize, usize) {
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
    pub(super) fn sector_in<const SEARCH: u8>(&self, key: u32) -> usize {
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
}
