//! A lookup: the key's sector, every replica's first choice — on the fast path from the
//! sector's entry alone, without a branch on its strategy — then the checks that the choices
//! are live and distinct, and the long way ([`super::strategy`]) for those that are not.

use crate::ids::ITEM_NONE;
use crate::narrow::index32;
use crate::replica::{REPLICAS_MAX, ReplicaSet};

use super::hash::{DRAW_SALTS, capacity_hash, fold16, mix32_folded};
use super::layout::{
    AttributedRing, DOWN, FAST, FAST_REPLICAS, FAST_SLOTS, MARKED, OWNER_MASK, SEARCH_DENSE,
    SEARCH_ENTRIES, SEARCH_RESIDUAL, Sector, SectorSearch,
};
use super::strategy::{Chosen, Strategy};

/// Whether `value` is among the first `count` entries of `list`: for short lists, compared
/// with every entry at once (no loop exit for the CPU to predict).
#[inline(always)]
pub(super) fn held<const N: usize>(list: &[u32; N], count: usize, value: u32) -> bool {
    if N <= 8 {
        (0..N).fold(false, |hit, i| hit | (i < count) & (list[i] == value))
    } else {
        list[..count.min(N)].contains(&value)
    }
}

impl AttributedRing {
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
                match self.select(key, h, index32(replica), sector, chosen) {
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
            self.first_choice(key, h, index32(replica), sector)
        }
    }

    /// The slot word the strategy of a [`FAST`] sector picks first for `replica` (below
    /// [`FAST_REPLICAS`]), `t` being `h mod 12`: the bandwidth draw and the capacity
    /// strategy's slot number both come from the key alone (so the CPU computes them while it
    /// waits for the sector's entry), one is picked without a branch (which strategy a sector
    /// uses is as unpredictable as the key), and the slot is the count of the sector's
    /// thresholds below it.
    #[inline(always)]
    pub(super) fn fast_choice(&self, this: &Sector, replica: usize, t: usize, key: u32) -> u32 {
        let slot = u32::from(self.fast_slots[replica][t]);
        let draw = mix32_folded(fold16(key) ^ DRAW_SALTS[replica]);
        let value = std::hint::select_unpredictable(this.is_heterogeneous(), draw, slot);
        let index: usize = this.bounds.iter().map(|b| usize::from(value > *b)).sum();
        this.words[index & (FAST_SLOTS - 1)]
    }
}
