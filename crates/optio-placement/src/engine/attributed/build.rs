//! Compiling a ring ("Sectors" and "Layout" in [`super`]): the sectors cut from the sector
//! base, the other slots merged into them, each sector classified homogeneous or
//! heterogeneous, and the fast path's thresholds and slot numbers precomputed.

use crate::ids::DeviceId;
use crate::map::ClusterMap;
use crate::narrow::{index32, low32};

use super::hash::{fastmod_constant, strategy_prime};
use super::layout::{
    AttributedRing, DOWN, FAST, FAST_REPLICAS, FAST_SLOTS, FIRST, HETEROGENEOUS, LEN_SHIFT, MARKED,
    OWNER_MASK, SECTOR_FLAGS, Sector, SectorSearch, fast_bounds, range_length,
};
use super::slots::{OwnerSpec, SlotSpec, for_each_slot, slot_count};
use super::{AttributedParams, SectorSelection};

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
                // The owner's bits of the packed slot (the position's are dropped).
                let owner = low32(*p >> 8) & OWNER_MASK;
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
            let start = index32(ordered.len());
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
            sector_list.push(Sector::new(sector_positions[k], start, index32(ordered.len())));
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
        ring.fastmod = (0..=index32(largest)).map(|d| fastmod_constant(d.max(1))).collect();
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
                if stamp[owner] != index32(k) {
                    stamp[owner] = index32(k);
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
                (sector.words[1], sector.words[2]) = (low32(u), (u >> 32) as u32);
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
                let offset = (index32(replica) + 1) * self.prime % size;
                for (t, slot) in slots.iter_mut().enumerate() {
                    let number = (index32(t) % size + offset) % size;
                    *slot =
                        u8::try_from(number).expect("below the sector size, at most FAST_SLOTS");
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
                    sector.words[0] |=
                        heterogeneous | FAST | (index32(slots.len()) - 1) << LEN_SHIFT;
                }
                None => {
                    // Its slots stay apart, at their place in the compacted overflow.
                    sector.bounds = [index32(kept.len()), index32(kept.len() + slots.len()), 0];
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
}
