//! The share of all copies each device is expected to hold, from the ring's structure (for
//! reports and movement minimums; placement never uses floats).

use crate::ids::DeviceId;

use super::SectorSelection;
use super::layout::{AttributedRing, DOWN, FIRST, MARKED, OWNER_MASK};

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
