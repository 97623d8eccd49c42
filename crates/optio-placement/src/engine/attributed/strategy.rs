//! The strategies ("Homogeneous sectors", "Heterogeneous sectors", "Location strategy" and
//! "Rendezvous selection" in [`super`]): the capacity strategy's slot, the bandwidth
//! strategy's range, the rendezvous scores, and the search on through later slots, sectors
//! and finally the ring when a choice is taken, marked or down.

use super::SectorSelection;
use super::hash::{bandwidth_draw, device_cost, fastmod, rendezvous_key, scale, slot_score};
use super::layout::{AttributedRing, DOWN, FIRST, MARKED, OWNER_MASK, Sector, range_length};

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
pub(super) struct Chosen<'a> {
    pub(super) owners: &'a [u32],
    pub(super) zones: &'a [u32],
}

impl Chosen<'_> {
    // A plain loop: `contains` is built for long slices, these hold a few entries (the slow
    // path's instructions per call fell by a sixth, callgrind).
    #[allow(clippy::manual_contains)]
    #[inline(always)]
    pub(super) fn excludes(&self, ring: &AttributedRing, owner: u32) -> bool {
        if ring.distinct_zones {
            let zone = ring.zones[owner as usize];
            self.zones.iter().any(|z| *z == zone)
        } else {
            self.owners.iter().any(|o| *o == owner)
        }
    }
}

impl AttributedRing {
    /// The slot word the strategy of `sector` picks first for `replica` ([`MARKED`] for an
    /// empty sector): the capacity strategy's slot, or the bandwidth strategy's range.
    #[inline(never)]
    pub(super) fn first_choice(&self, key: u32, h: u32, replica: u32, sector: usize) -> u32 {
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
            let size = crate::narrow::index32(slots.len());
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
    pub(super) fn rendezvous(&self, hr: u64, sector: usize, eligible: impl Fn(u32) -> bool) -> u32 {
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
    pub(super) fn sector_u(&self, sector: Sector) -> u64 {
        if sector.is_fast() {
            range_length(sector.inline_slots(), &self.bandwidths)
        } else {
            sector.u_apart()
        }
    }

    /// One replica: the strategy of each sector from `start` on, then a ring walk.
    #[inline(never)]
    pub(super) fn select(
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
    pub(super) fn capacity(
        &self,
        h: u32,
        replica: u32,
        slots: &[u32],
        chosen: Chosen<'_>,
    ) -> Option<u32> {
        let size = crate::narrow::index32(slots.len());
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
    pub(super) fn bandwidth(
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
