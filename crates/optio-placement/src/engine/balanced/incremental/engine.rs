//! The placement function of the incremental method: which devices hold a placement unit,
//! given the devices and the prices.
//!
//! Every device ranks the units by its ranking hash (`rank.rs`, as the history-free method
//! does); the unit at position `k` has score `2k + 1`. A device's units fall into
//! [`CLASSES`] classes by that hash, a domain's by a hash of the domain's name and the unit's
//! key. The key of device `d` (in domain `h`) for unit `u` is
//!
//! ```text
//! score(u, d) × price[d][class(d, u)] × domain_price[h][domain_class(h, u)]
//! ```
//!
//! (integers; ties by ranking hash, then device id), and a unit takes its devices in
//! increasing key, at most one per failure domain. A unit whose ranked candidates span
//! fewer failure domains than the pool's size (rare: its candidates are few) completes its set
//! by straw2 draw over the other domains, independent of the prices.
//!
//! Rescaling every device's prices by one factor changes nothing, so prices carry no unit;
//! a fresh device's price is `2^40 / t` (its target `t`), which makes every device's keys
//! spread alike — the rank normalisation of the history-free method.

use super::state::{CLASSES, DOMAIN_PRICE_ONE, PRICE_MAX};
use crate::engine::balanced::Member;
use crate::engine::balanced::rank;
use crate::engine::balanced::score;
use crate::engine::balanced::targets::{self, Target};
use crate::engine::balanced::{RANKED_EXTRA, RANKED_PER_TARGET};
use crate::narrow::index32;

/// No device.
pub(crate) const NONE: u32 = u32::MAX;
/// The price that makes a device's keys spread like a device of target 1: `2^40 / t`.
pub(crate) const PRICE_UNIT: u128 = 1 << 40;
/// (Device, unit) pairs from which [`Engine::new`] ranks on two threads (a million pairs take
/// a few milliseconds to hash; a thread costs tens of microseconds).
pub(crate) const PARALLEL_PAIRS_MIN: usize = 1 << 20;
/// Salt of the domain-class hash (any constant; part of the placement version).
const DOMAIN_CLASS_SALT: u32 = 0x5bd1_e995;

/// A neutral price for a device of target `t`: `2^40 / t`, within 1 to [`PRICE_MAX`].
pub(crate) fn neutral_price(t: &Target) -> u64 {
    let price = PRICE_UNIT.saturating_mul(t.denominator) / t.numerator.max(1);
    u64::try_from(price).unwrap_or(PRICE_MAX).clamp(1, PRICE_MAX)
}

/// The class of a unit with ranking hash `hash`: `hash mod CLASSES`.
fn class_of(hash: u32) -> u8 {
    u8::try_from(hash as usize % CLASSES).expect("below CLASSES (16)")
}

/// The class numbers, `0..CLASSES`.
pub(crate) fn class_numbers() -> impl Iterator<Item = u8> {
    (0..CLASSES).map(|class| u8::try_from(class).expect("below CLASSES (16)"))
}

/// The salt of a domain's class hash, from its name.
fn domain_salt(name: &str) -> u32 {
    let mut h = DOMAIN_CLASS_SALT;
    for byte in name.bytes() {
        h = rank::mix(h ^ u32::from(byte)).wrapping_add(0x9e37_79b9);
    }
    h
}

/// The failure domains of `members` in the order they first appear, and each member's index
/// among them.
fn domains_of(members: &[&Member]) -> (Vec<String>, Vec<u32>) {
    let mut names: Vec<String> = Vec::new();
    let mut domain = Vec::with_capacity(members.len());
    for member in members {
        let index = match names.iter().position(|n| *n == member.domain) {
            Some(index) => index,
            None => {
                names.push(member.domain.clone());
                names.len() - 1
            }
        };
        domain.push(index32(index));
    }
    (names, domain)
}

/// The targets [`Engine::new`] gives `members` (none leaving) for `units` units of `size`
/// copies, without building the engine.
pub(crate) fn targets_of(size: usize, units: usize, members: &[Member]) -> Vec<Target> {
    let all: Vec<&Member> = members.iter().collect();
    let (names, domain) = domains_of(&all);
    let weights: Vec<u64> = members.iter().map(|m| m.weight).collect();
    targets::targets(&weights, &domain, names.len(), units as u64, size as u64)
}

/// A unit in a device's ranking.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub unit: u32,
    /// `2k + 1` for position `k`.
    pub score: u32,
    /// The ranking hash.
    pub hash: u32,
    pub class: u8,
    /// Where the device is among the unit's candidates (an index of [`Engine::cand_at`]).
    pub cand: u32,
}

/// A device among a unit's candidates.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cand {
    pub device: u32,
    pub score: u32,
    /// The ranking hash (first tie-break).
    pub hash: u32,
    pub class: u8,
    /// The class of the unit for the device's domain.
    pub dclass: u8,
    /// Where the unit is among its domain's units (an index of the engine's domain entries:
    /// `domain_entry_start(h)` + the index in [`Engine::domain_units`]).
    pub dentry: u32,
}

/// A key: (score × prices, ranking hash, device id); lower wins.
pub(crate) type Key = (u128, u32, u32);

/// Device prices (`CLASSES` per device) and domain prices (`CLASSES` per domain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Prices {
    pub device: Vec<u64>,
    pub domain: Vec<u64>,
}

/// Devices, domains, rankings and candidates of one pool's balancing.
pub(crate) struct Engine {
    pub size: usize,
    pub keys: Vec<u32>,
    pub ids: Vec<u32>,
    pub domain: Vec<u32>,
    pub weights: Vec<u64>,
    /// Devices that must end with nothing (in the previous state, not usable now).
    pub leaving: Vec<bool>,
    pub targets: Vec<Target>,
    pub domain_names: Vec<String>,
    pub domain_devices: Vec<Vec<u32>>,
    /// Each device's ranked units, by class, best first within a class.
    pub lists: Vec<Vec<Entry>>,
    /// Where each class starts in a device's list.
    class_start: Vec<[u32; CLASSES + 1]>,
    cand_start: Vec<u32>,
    cands: Vec<Cand>,
    /// Each domain's units (those where one of its devices is a candidate), with the unit's
    /// class for the domain, by class, then unit.
    pub domain_units: Vec<Vec<(u32, u8)>>,
    /// Where each class starts in a domain's units.
    domain_class_start: Vec<[u32; CLASSES + 1]>,
    /// Where each domain starts among all domains' entries (and the total at the end).
    pub domain_entry_start: Vec<u32>,
    /// Units whose candidates span fewer domains than the pool's size.
    pub short: Vec<bool>,
    /// Non-leaving devices, for the straw2 fallback.
    fallback_ids: Vec<u32>,
    fallback_weights: Vec<u64>,
    fallback_index: Vec<u32>,
}

impl Engine {
    /// An engine for `current` devices (targets from their weights) and `leaving` ones (target
    /// 0, ranked as deep as the given targets). `keys[u]` is unit `u`'s pps.
    pub(crate) fn new(
        size: usize,
        keys: Vec<u32>,
        current: &[Member],
        leaving: &[(Member, Target)],
    ) -> Engine {
        let all: Vec<&Member> = current.iter().chain(leaving.iter().map(|(m, _)| m)).collect();
        let (domain_names, domain) = domains_of(&all);
        let weights: Vec<u64> = all.iter().map(|m| m.weight).collect();
        let units = keys.len();
        let mut targets = targets::targets(
            &weights[..current.len()],
            &domain[..current.len()],
            domain_names.len(),
            units as u64,
            size as u64,
        );
        let mut list_targets = targets.clone();
        for (_, target) in leaving {
            targets.push(Target { numerator: 0, denominator: 1 });
            list_targets.push(*target);
        }
        // (Rankings the process computed lately for these keys serve again.)
        let rankings = super::rankings::Rankings::of(&keys);
        let rank_all = |members: &[&Member], targets: &[Target]| -> Vec<Vec<Entry>> {
            let mut scratch = Vec::new();
            members
                .iter()
                .zip(targets)
                .map(|(member, target)| {
                    let count = target.numerator.saturating_mul(u128::from(RANKED_PER_TARGET))
                        / target.denominator.max(1)
                        + u128::from(RANKED_EXTRA);
                    let count = usize::try_from(count).unwrap_or(usize::MAX);
                    rankings
                        .top(member.id, count, &mut scratch)
                        .iter()
                        .take(count)
                        .enumerate()
                        .map(|(k, &(hash, unit))| Entry {
                            unit,
                            score: index32(2 * k + 1),
                            hash,
                            class: class_of(hash),
                            cand: 0,
                        })
                        .collect()
                })
                .collect()
        };
        // Every device ranks every unit: with many pairs, the two halves of the devices are
        // ranked side by side (the rankings are independent; the result is the same).
        let lists: Vec<Vec<Entry>> = if all.len().saturating_mul(units) >= PARALLEL_PAIRS_MIN {
            let half = all.len() / 2;
            std::thread::scope(|scope| {
                let second = scope.spawn(|| rank_all(&all[half..], &list_targets[half..]));
                let mut lists = rank_all(&all[..half], &list_targets[..half]);
                lists.extend(second.join().expect("ranking does not panic"));
                lists
            })
        } else {
            rank_all(&all, &list_targets)
        };
        let mut lists = lists;
        // Each list by class (independent lists: with many pairs, two halves side by side).
        let by_class = |lists: &mut [Vec<Entry>]| -> Vec<[u32; CLASSES + 1]> {
            lists
                .iter_mut()
                .map(|list| {
                    list.sort_unstable_by_key(|e| (e.class, e.score));
                    let mut starts = [0u32; CLASSES + 1];
                    for entry in list.iter() {
                        starts[usize::from(entry.class) + 1] += 1;
                    }
                    for c in 0..CLASSES {
                        starts[c + 1] += starts[c];
                    }
                    starts
                })
                .collect()
        };
        let class_start = if all.len().saturating_mul(units) >= PARALLEL_PAIRS_MIN {
            let half = lists.len() / 2;
            let (first, second) = lists.split_at_mut(half);
            std::thread::scope(|scope| {
                let second = scope.spawn(|| by_class(second));
                let mut starts = by_class(first);
                starts.extend(second.join().expect("sorting does not panic"));
                starts
            })
        } else {
            by_class(&mut lists)
        };
        let salts: Vec<u32> = domain_names.iter().map(|n| domain_salt(n)).collect();
        let mut cand_start = vec![0u32; units + 1];
        for list in &lists {
            for entry in list {
                cand_start[entry.unit as usize + 1] += 1;
            }
        }
        for u in 0..units {
            cand_start[u + 1] += cand_start[u];
        }
        let mut fill = cand_start.clone();
        let mut cands = vec![
            Cand { device: 0, score: 0, hash: 0, class: 0, dclass: 0, dentry: 0 };
            cand_start[units] as usize
        ];
        let mut domain_units: Vec<Vec<(u32, u8)>> = vec![Vec::new(); domain_names.len()];
        for (d, list) in lists.iter_mut().enumerate() {
            let h = domain[d] as usize;
            for entry in list.iter_mut() {
                let unit = entry.unit as usize;
                entry.cand = fill[unit];
                let dclass = class_of(rank::salted_hash(salts[h], keys[unit]));
                let slot = &mut fill[unit];
                cands[*slot as usize] = Cand {
                    device: index32(d),
                    score: entry.score,
                    hash: entry.hash,
                    class: entry.class,
                    dclass,
                    dentry: 0,
                };
                *slot += 1;
                domain_units[h].push((entry.unit, dclass));
            }
        }
        let mut domain_class_start = Vec::with_capacity(domain_units.len());
        for list in &mut domain_units {
            list.sort_unstable_by_key(|&(unit, dclass)| (dclass, unit));
            list.dedup();
            let mut starts = [0u32; CLASSES + 1];
            for &(_, dclass) in list.iter() {
                starts[usize::from(dclass) + 1] += 1;
            }
            for c in 0..CLASSES {
                starts[c + 1] += starts[c];
            }
            domain_class_start.push(starts);
        }
        // Entries, all domains together, number at most RANKED_PER_TARGET × units × size +
        // RANKED_EXTRA × devices < 2^29 (units ≤ 2^20, size ≤ 32, devices ≤ 2^16).
        let mut domain_entry_start = Vec::with_capacity(domain_units.len() + 1);
        let mut total = 0u32;
        for list in &domain_units {
            domain_entry_start.push(total);
            total += index32(list.len());
        }
        domain_entry_start.push(total);
        for unit in 0..units {
            for c in &mut cands[cand_start[unit] as usize..cand_start[unit + 1] as usize] {
                let h = domain[c.device as usize] as usize;
                let starts = &domain_class_start[h];
                let class = usize::from(c.dclass);
                let range = starts[class] as usize..starts[class + 1] as usize;
                let at = domain_units[h][range.clone()]
                    .binary_search_by_key(&index32(unit), |&(u, _)| u)
                    .expect("a candidate's unit is among its domain's units");
                c.dentry = domain_entry_start[h] + index32(range.start + at);
            }
        }
        let mut short = vec![false; units];
        let mut seen: Vec<u32> = Vec::new();
        for (unit, flag) in short.iter_mut().enumerate() {
            seen.clear();
            for c in &cands[cand_start[unit] as usize..cand_start[unit + 1] as usize] {
                let h = domain[c.device as usize];
                if !seen.contains(&h) {
                    seen.push(h);
                    if seen.len() >= size {
                        break;
                    }
                }
            }
            *flag = seen.len() < size;
        }
        let mut domain_devices = vec![Vec::new(); domain_names.len()];
        for (d, &h) in domain.iter().enumerate() {
            domain_devices[h as usize].push(index32(d));
        }
        let fallback_index: Vec<u32> = (0..index32(current.len())).collect();
        Engine {
            size,
            keys,
            ids: all.iter().map(|m| m.id).collect(),
            domain,
            leaving: (0..all.len()).map(|d| d >= current.len()).collect(),
            fallback_ids: current.iter().map(|m| m.id).collect(),
            fallback_weights: weights[..current.len()].to_vec(),
            fallback_index,
            weights,
            targets,
            domain_names,
            domain_devices,
            lists,
            class_start,
            cand_start,
            cands,
            domain_units,
            domain_class_start,
            domain_entry_start,
            short,
        }
    }

    /// Devices (current and leaving).
    pub(crate) fn devices(&self) -> usize {
        self.ids.len()
    }

    /// Placement units.
    pub(crate) fn units(&self) -> usize {
        self.keys.len()
    }

    /// Failure domains.
    pub(crate) fn domains(&self) -> usize {
        self.domain_names.len()
    }

    /// Device `d`'s ranked units of class `class`.
    #[inline]
    pub(crate) fn class_entries(&self, d: u32, class: usize) -> &[Entry] {
        let starts = &self.class_start[d as usize];
        &self.lists[d as usize][starts[class] as usize..starts[class + 1] as usize]
    }

    /// Domain `h`'s units of class `class`.
    #[inline]
    pub(crate) fn domain_class_units(&self, h: u32, class: usize) -> &[(u32, u8)] {
        let starts = &self.domain_class_start[h as usize];
        &self.domain_units[h as usize][starts[class] as usize..starts[class + 1] as usize]
    }

    /// Where `unit` is among domain `h`'s units (whose class for `h` is `class`).
    #[inline]
    pub(crate) fn domain_unit_index(&self, h: u32, class: u8, unit: u32) -> Option<usize> {
        let starts = &self.domain_class_start[h as usize];
        let start = starts[usize::from(class)] as usize;
        self.domain_class_units(h, usize::from(class))
            .binary_search_by_key(&unit, |&(u, _)| u)
            .ok()
            .map(|i| start + i)
    }

    /// The candidates of `unit`, by device index.
    #[inline]
    pub(crate) fn cands(&self, unit: usize) -> &[Cand] {
        &self.cands[self.cand_start[unit] as usize..self.cand_start[unit + 1] as usize]
    }

    /// Device `device` among the candidates of `unit`: its index for [`Engine::cand_at`].
    #[inline]
    pub(crate) fn cand_index(&self, unit: usize, device: u32) -> Option<u32> {
        let start = self.cand_start[unit];
        self.cands(unit)
            .binary_search_by_key(&device, |c| c.device)
            .ok()
            .map(|i| start + index32(i))
    }

    /// A candidate by index.
    #[inline]
    pub(crate) fn cand_at(&self, index: u32) -> &Cand {
        &self.cands[index as usize]
    }

    /// The index range of `unit`'s candidates.
    #[inline]
    pub(crate) fn cand_range(&self, unit: usize) -> std::ops::Range<u32> {
        self.cand_start[unit]..self.cand_start[unit + 1]
    }

    /// The price index of a candidate's class.
    #[inline]
    pub(crate) fn price_index(&self, c: &Cand) -> usize {
        c.device as usize * CLASSES + usize::from(c.class)
    }

    /// The domain-price index of a candidate's domain class.
    #[inline]
    pub(crate) fn domain_price_index(&self, c: &Cand) -> usize {
        self.domain[c.device as usize] as usize * CLASSES + usize::from(c.dclass)
    }

    /// `score × device price` (the key without the domain price).
    #[inline]
    pub(crate) fn base(&self, c: &Cand, prices: &Prices) -> u128 {
        u128::from(c.score) * u128::from(prices.device[self.price_index(c)])
    }

    /// `score × domain price` (the key without the device price).
    #[inline]
    pub(crate) fn domain_base(&self, c: &Cand, prices: &Prices) -> u128 {
        u128::from(c.score) * u128::from(prices.domain[self.domain_price_index(c)])
    }

    /// The key of a candidate.
    #[inline]
    pub(crate) fn key(&self, c: &Cand, prices: &Prices) -> Key {
        (
            self.base(c, prices) * u128::from(prices.domain[self.domain_price_index(c)]),
            c.hash,
            self.ids[c.device as usize],
        )
    }

    /// Neutral prices: `2^40 / t` per device class, [`DOMAIN_PRICE_ONE`] per domain class.
    pub(crate) fn neutral_prices(&self) -> Prices {
        let mut device = Vec::with_capacity(self.devices() * CLASSES);
        for target in &self.targets {
            device.extend(std::iter::repeat_n(neutral_price(target), CLASSES));
        }
        Prices { device, domain: vec![DOMAIN_PRICE_ONE; self.domains() * CLASSES] }
    }

    /// The devices of `unit` under `prices`, best first, into `out` (device indices);
    /// returns how many come from the candidates (the rest from the straw2 fallback).
    pub(crate) fn place_unit(
        &self,
        unit: usize,
        prices: &Prices,
        scratch: &mut Scratch,
        out: &mut Vec<u32>,
    ) -> usize {
        scratch.keys.clear();
        scratch.keys.extend(self.cands(unit).iter().map(|c| (self.key(c, prices), c.device)));
        scratch.keys.sort_unstable();
        out.clear();
        for &(_, d) in &scratch.keys {
            if out.len() == self.size {
                break;
            }
            let h = self.domain[d as usize];
            if out.iter().all(|&o| self.domain[o as usize] != h) {
                out.push(d);
            }
        }
        let ranked = out.len();
        if ranked < self.size && self.short[unit] {
            self.fallback(unit, scratch, out);
        }
        ranked
    }

    /// Completes a short unit by straw2 draw over the domains it does not use yet.
    fn fallback(&self, unit: usize, scratch: &mut Scratch, out: &mut Vec<u32>) {
        score::costs(
            self.keys[unit],
            &self.fallback_ids,
            &self.fallback_weights,
            0,
            &mut scratch.costs,
        );
        // Ties by device id, so that the order of the map's devices does not matter.
        scratch.order.clear();
        scratch.order.extend(
            scratch.costs.iter().enumerate().map(|(i, &c)| (c, self.fallback_ids[i], index32(i))),
        );
        scratch.order.sort_unstable();
        for &(_, _, i) in &scratch.order {
            if out.len() == self.size {
                break;
            }
            let d = self.fallback_index[i as usize];
            let h = self.domain[d as usize];
            if out.iter().all(|&o| self.domain[o as usize] != h) {
                out.push(d);
            }
        }
    }
}

/// Reusable buffers of [`Engine::place_unit`].
#[derive(Default)]
pub(crate) struct Scratch {
    keys: Vec<(Key, u32)>,
    costs: Vec<i64>,
    order: Vec<(i64, u32, u32)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With enough pairs to rank on two threads, every device's list is its own ranking, in
    /// the devices' order.
    #[test]
    fn rankings_made_side_by_side_are_each_devices_own() {
        let members: Vec<Member> = (0..40u32)
            .map(|id| Member { id: id * 3, domain: format!("h{}", id % 8), weight: 1 << 16 })
            .collect();
        let keys: Vec<u32> = (0..32_768u32).map(|k| k.wrapping_mul(2_654_435_761)).collect();
        assert!(members.len() * keys.len() >= PARALLEL_PAIRS_MIN);
        let engine = Engine::new(3, keys.clone(), &members, &[]);
        assert_eq!(engine.ids, members.iter().map(|m| m.id).collect::<Vec<_>>());
        let mut scratch = Vec::new();
        for (d, member) in members.iter().enumerate() {
            let target = &engine.targets[d];
            let count = target.numerator * u128::from(RANKED_PER_TARGET) / target.denominator
                + u128::from(RANKED_EXTRA);
            let count = usize::try_from(count).unwrap();
            let mut expected: Vec<u32> =
                rank::ranking(member.id, &keys, target, count, &mut scratch)
                    .iter()
                    .map(|r| r.unit)
                    .collect();
            let mut listed: Vec<u32> = engine.lists[d].iter().map(|e| e.unit).collect();
            expected.sort_unstable();
            listed.sort_unstable();
            assert_eq!(listed, expected, "device {}", member.id);
        }
    }
}
