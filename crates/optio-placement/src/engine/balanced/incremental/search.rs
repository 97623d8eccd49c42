//! Bringing every device into its band with few moved copies.
//!
//! A *hop* is one price step that moves exactly one copy: a device (per class) or a domain
//! (per class) set to its nearest threshold. Every device and domain offers `2 × CLASSES`
//! hops (raise or lower one class's price), so the balancer chooses among many single-copy
//! moves instead of following one fixed chain.
//!
//! The loop takes the device farthest out of its band (ties: lowest index) and searches,
//! breadth first up to [`PATH_DEPTH`] hops, for a path that moves one copy out of it (when
//! over) into a device with room, or into it (when under) from a device with copies to spare;
//! the devices in between give one and take one. Paths are ranked by the copies they add to
//! the change (a hop that returns a copy to the device that held it before the change costs
//! −1, one that moves it elsewhere again 0, a fresh move 1), then by how much they even out
//! devices and domains (the change of `Σ fill² + Σ domain fill²`, `fill = load − target`),
//! then by length. When no path exists and the device's whole domain is outside the sum of
//! its devices' bands (every device of a domain that must grow can sit at its floor), one
//! copy crosses the domain's border by one of the domain's own hops.
//!
//! Every hop through a unit is kept, per mover, class and direction, in crossing order
//! ([`Hops`]); a unit's hops are recomputed when a copy moves in it. A step also shifts,
//! slightly, the thresholds of other movers in the stepping mover's other units (they compare
//! against its keys); those stay stale until their unit changes or a refresh, so a path is
//! executed hop by hop, each hop recomputed first, and a hop whose devices changed since the
//! search stops the path. The placement itself is always exact (`layout.rs`).
//!
//! A device whose search fails is skipped until another succeeds. Every successful path moves
//! one copy out of (or into) a device out of its band without pushing another out, so the
//! total excess falls by at least one per path; the loop is also bounded by
//! [`ITERATIONS_PER_COPY`].

use std::collections::BTreeSet;

use super::engine::{Engine, NONE, class_numbers};
use super::layout::{
    Layout, Members, Move, domain_pull_price, domain_push_price, pull_price, push_price,
    set_device_price, set_domain_price,
};
use super::state::CLASSES;
use crate::narrow::index32;

/// Longest path of hops searched.
pub const PATH_DEPTH: usize = 3;
/// Iterations of the loop per copy of the pool (and [`ITERATIONS_EXTRA`]), a bound that is
/// never reached in practice.
pub const ITERATIONS_PER_COPY: u64 = 4;
/// See [`ITERATIONS_PER_COPY`].
pub const ITERATIONS_EXTRA: u64 = 4096;
/// Stale paths in a row for one device before it is skipped.
const STALE_MAX: u32 = 8;
/// Recomputations of a mover's nearest hop before it is taken as it is.
const FRESH_TRIES: u32 = 16;
/// Successful paths between two recomputations of every hop.
const REFRESH_INTERVAL: u64 = 1024;
/// Fixed-point bits of fills.
const FILL_SHIFT: u32 = 20;

/// Whose price a hop changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mover {
    Device(u32),
    Domain(u32),
}

/// One copy moved by one price step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hop {
    pub unit: u32,
    pub from: u32,
    pub to: u32,
    pub mover: Mover,
    pub class: u8,
    /// Raise (the mover gives a copy away) or lower (it takes one).
    pub raise: bool,
    pub price: u64,
}

/// Each device's band of loads.
pub(crate) fn bands(engine: &Engine, tight: bool) -> Vec<(i64, i64)> {
    (0..engine.devices())
        .map(|d| {
            if engine.leaving[d] {
                return (0, 0);
            }
            let t = &engine.targets[d];
            if tight {
                (t.floor(), t.ceil())
            } else {
                // round(t) ± 1: three loads, so that the spread of a pool of equal devices
                // is at most 1.
                let rounded = (2 * t.numerator + t.denominator) / (2 * t.denominator);
                let rounded = i64::try_from(rounded).unwrap_or(i64::MAX - 1);
                ((rounded - 1).max(0), rounded + 1)
            }
        })
        .collect()
}

/// The order in which a mover's hops of one class and direction are crossed: raising crosses
/// the least price first, lowering the greatest; ties by unit.
#[inline]
fn order_key(hop: &Hop) -> (u64, u32) {
    if hop.raise { (hop.price, hop.unit) } else { (u64::MAX - hop.price, hop.unit) }
}

/// Every hop of every mover, class and direction through every unit, with the nearest of
/// each mover's class at hand. A unit's hops are recomputed whenever a copy moves in it; a
/// step also shifts, slightly, the thresholds of other movers in the mover's other units
/// (they compare against its keys) — those are left stale until their unit changes, and
/// [`Balancer::fix`] re-checks a hop before taking it.
struct Hops {
    /// Per candidate (an index of `Engine::cand_at`): its device's hop through the unit.
    device: Vec<Option<Hop>>,
    /// Per (domain, unit) entry (`Engine::domain_entry_start[h]` + the index in
    /// `Engine::domain_units`).
    domain: Vec<Option<Hop>>,
    /// Per mover, class and direction ([`Hops::index`]): its hops in crossing order.
    ordered: Vec<BTreeSet<(u64, u32)>>,
    /// Per mover, class and direction: its nearest hop.
    nearest: Vec<Option<Hop>>,
    /// Per device: the movers' classes and directions whose nearest hop moves a copy out of
    /// it, and into it.
    leaving: Vec<Vec<u32>>,
    arriving: Vec<Vec<u32>>,
    devices: usize,
}

impl Hops {
    fn index(&self, mover: Mover, class: u8, raise: bool) -> usize {
        let base = match mover {
            Mover::Device(d) => d as usize,
            Mover::Domain(h) => self.devices + h as usize,
        };
        (base * CLASSES + usize::from(class)) * 2 + usize::from(raise)
    }

    /// No hop computed yet.
    fn empty(engine: &Engine) -> Hops {
        let total =
            *engine.domain_entry_start.last().expect("one entry per domain and the end") as usize;
        let cands = engine.cand_range(engine.units().saturating_sub(1)).end as usize;
        let sets = (engine.devices() + engine.domains()) * CLASSES * 2;
        Hops {
            device: vec![None; if engine.units() == 0 { 0 } else { cands }],
            domain: vec![None; total],
            ordered: vec![BTreeSet::new(); sets],
            nearest: vec![None; sets],
            leaving: vec![Vec::new(); engine.devices()],
            arriving: vec![Vec::new(); engine.devices()],
            devices: engine.devices(),
        }
    }

    fn all(engine: &Engine, layout: &Layout) -> Hops {
        let mut hops = Hops::empty(engine);
        // Every unit's hops (independent: with many candidates, two halves of the units side
        // by side, each writing its own candidates' hops and listing its domain hops), then
        // the ordered sets in bulk, then the nearest hops.
        let units = engine.units();
        if units >= PARALLEL_UNITS_MIN {
            let half = units / 2;
            let split = engine.cand_range(half).start as usize;
            // (About half of the domain entries each: sized once, not grown.)
            let entries = hops.domain.len() / 2 + 64;
            let (first, second) = hops.device.split_at_mut(split);
            let compute =
                |units: std::ops::Range<usize>, device: &mut [Option<Hop>], base: usize| {
                    let mut domain = Vec::with_capacity(entries);
                    for unit in units {
                        unit_hops(engine, layout, unit, |slot, hop| match slot {
                            Slot::Device(index) => device[index - base] = hop,
                            Slot::Domain(entry) => domain.push((entry, hop)),
                        });
                    }
                    domain
                };
            let (domain_first, domain_second) = std::thread::scope(|scope| {
                let second = scope.spawn(|| compute(half..units, second, split));
                let domain_first = compute(0..half, first, 0);
                (domain_first, second.join().expect("computing hops does not panic"))
            });
            for (entry, hop) in domain_first.into_iter().chain(domain_second) {
                hops.domain[entry] = hop;
            }
        } else {
            for unit in 0..units {
                hops.compute_unit(engine, layout, unit, false);
            }
        }
        let mut keys: Vec<Vec<(u64, u32)>> = vec![Vec::new(); hops.ordered.len()];
        for hop in hops.device.iter().chain(&hops.domain).flatten() {
            keys[hops.index(hop.mover, hop.class, hop.raise)].push(order_key(hop));
        }
        for (set, mut keys) in hops.ordered.iter_mut().zip(keys) {
            keys.sort_unstable();
            *set = keys.into_iter().collect();
        }
        let movers: Vec<Mover> = (0..index32(engine.devices()))
            .map(Mover::Device)
            .chain((0..index32(engine.domains())).map(Mover::Domain))
            .collect();
        for mover in movers {
            for class in class_numbers() {
                for raise in [false, true] {
                    hops.renew(engine, mover, class, raise);
                }
            }
        }
        hops
    }

    /// The nearest hop of a mover's class in one direction.
    fn nearest(&self, _engine: &Engine, mover: Mover, class: u8, raise: bool) -> Option<Hop> {
        self.nearest[self.index(mover, class, raise)]
    }

    /// The nearest hop of a set, from the hops stored per unit.
    fn first(&self, engine: &Engine, mover: Mover, class: u8, raise: bool) -> Option<Hop> {
        let &(_, unit) = self.ordered[self.index(mover, class, raise)].first()?;
        match mover {
            Mover::Device(d) => {
                let index = engine.cand_index(unit as usize, d)?;
                self.device[index as usize]
            }
            Mover::Domain(h) => {
                let index = engine.domain_unit_index(h, class, unit)?;
                self.domain[engine.domain_entry_start[h as usize] as usize + index]
            }
        }
    }

    /// Replaces a unit's hop `old` by `new` (already stored per unit) in the ordered sets.
    fn replace(&mut self, engine: &Engine, old: Option<Hop>, new: Option<Hop>) {
        if old == new {
            return;
        }
        if let Some(old) = old {
            let index = self.index(old.mover, old.class, old.raise);
            self.ordered[index].remove(&order_key(&old));
            self.renew(engine, old.mover, old.class, old.raise);
        }
        if let Some(new) = new {
            let index = self.index(new.mover, new.class, new.raise);
            self.ordered[index].insert(order_key(&new));
            self.renew(engine, new.mover, new.class, new.raise);
        }
    }

    /// Updates a set's nearest hop and the per-device indexes.
    fn renew(&mut self, engine: &Engine, mover: Mover, class: u8, raise: bool) {
        let index = self.index(mover, class, raise);
        let hop = self.first(engine, mover, class, raise);
        let old = self.nearest[index];
        if old == hop {
            return;
        }
        let set = index32(index);
        if let Some(old) = old {
            remove(&mut self.leaving[old.from as usize], set);
            remove(&mut self.arriving[old.to as usize], set);
        }
        if let Some(hop) = hop {
            self.leaving[hop.from as usize].push(set);
            self.arriving[hop.to as usize].push(set);
        }
        self.nearest[index] = hop;
    }

    /// Recomputes every hop through `unit`.
    fn unit_changed(&mut self, engine: &Engine, layout: &Layout, unit: usize) {
        self.compute_unit(engine, layout, unit, true);
    }

    /// Computes every hop through `unit`, and with `update` keeps the ordered sets and the
    /// nearest hops up to date.
    fn compute_unit(&mut self, engine: &Engine, layout: &Layout, unit: usize, update: bool) {
        unit_hops(engine, layout, unit, |slot, hop| {
            let old = match slot {
                Slot::Device(index) => std::mem::replace(&mut self.device[index], hop),
                Slot::Domain(entry) => std::mem::replace(&mut self.domain[entry], hop),
            };
            if update {
                self.replace(engine, old, hop);
            }
        });
    }
}

/// Where a hop through a unit is kept: a candidate's (its index in `Engine::cand_at`), or a
/// (domain, unit) entry's.
#[derive(Clone, Copy)]
enum Slot {
    Device(usize),
    Domain(usize),
}

/// Every hop through `unit` under `layout`, each given to `emit` with where it is kept.
fn unit_hops(
    engine: &Engine,
    layout: &Layout,
    unit: usize,
    mut emit: impl FnMut(Slot, Option<Hop>),
) {
    let m = Members::of(engine, layout, unit);
    let u = index32(unit);
    let mut domains_seen = [NONE; 64];
    let mut seen = 0usize;
    for index in engine.cand_range(unit) {
        let c = engine.cand_at(index);
        let v = c.device;
        let mover = Mover::Device(v);
        let hop = if m.key_of(v).is_some() {
            push_price(engine, &layout.prices, unit, &m, c).map(|(price, to)| Hop {
                unit: u,
                from: v,
                to,
                mover,
                class: c.class,
                raise: true,
                price,
            })
        } else if !m.has_device(v) {
            pull_price(engine, &layout.prices, &m, c).map(|(price, from)| Hop {
                unit: u,
                from,
                to: v,
                mover,
                class: c.class,
                raise: false,
                price,
            })
        } else {
            None
        };
        emit(Slot::Device(index as usize), hop);
        let h = engine.domain[v as usize];
        if domains_seen[..seen].contains(&h) {
            continue;
        }
        if seen < domains_seen.len() {
            domains_seen[seen] = h;
            seen += 1;
        }
        let entry = c.dentry as usize;
        let mover = Mover::Domain(h);
        let hop =
            if m.has_domain(h) {
                domain_push_price(engine, &layout.prices, unit, &m, h).map(|(price, from, to)| {
                    Hop { unit: u, from, to, mover, class: c.dclass, raise: true, price }
                })
            } else {
                domain_pull_price(engine, &layout.prices, unit, &m, h).map(|(price, from, to)| {
                    Hop { unit: u, from, to, mover, class: c.dclass, raise: false, price }
                })
            };
        emit(Slot::Domain(entry), hop);
    }
}

/// Units from which [`Hops::all`] computes the hops of two halves of the units side by side.
const PARALLEL_UNITS_MIN: usize = 4096;

/// Removes `value` from `list` (order does not matter).
fn remove(list: &mut Vec<u32>, value: u32) {
    if let Some(i) = list.iter().position(|&v| v == value) {
        list.swap_remove(i);
    }
}

/// What a search for a root found.
enum Outcome {
    /// The path was executed.
    Moved,
    /// A hop of the path was no longer as searched; the cache was corrected.
    Stale,
    /// No path.
    None,
}

/// The balancer's working state.
pub(crate) struct Balancer<'e> {
    engine: &'e Engine,
    pub layout: Layout,
    hops: Hops,
    band: Vec<(i64, i64)>,
    moves: Vec<Move>,
}

impl<'e> Balancer<'e> {
    pub(crate) fn new(engine: &'e Engine, layout: Layout) -> Balancer<'e> {
        let hops = Hops::all(engine, &layout);
        Balancer { engine, layout, hops, band: bands(engine, false), moves: Vec::new() }
    }

    /// Copies by which devices are outside their bands.
    pub(crate) fn excess(&self) -> u64 {
        (0..self.engine.devices()).map(|d| self.outside(d) as u64).sum()
    }

    fn outside(&self, d: usize) -> i64 {
        let (lo, hi) = self.band[d];
        let load = self.layout.load[d];
        (lo - load).max(0) + (load - hi).max(0)
    }

    /// Fill of device `d`, `(load − target) × 2^FILL_SHIFT`.
    fn fill(&self, d: u32) -> i128 {
        let t = &self.engine.targets[d as usize];
        let den = t.denominator as i128;
        ((i128::from(self.layout.load[d as usize]) * den - t.numerator as i128) << FILL_SHIFT) / den
    }

    fn domain_fill(&self, h: u32) -> i128 {
        self.engine.domain_devices[h as usize].iter().map(|&d| self.fill(d)).sum()
    }

    /// The change of `Σ fill² + Σ domain fill²` (scaled) when a copy goes from `from` to `to`.
    fn delta(&self, from: u32, to: u32) -> i128 {
        let one: i128 = 1 << FILL_SHIFT;
        let mut delta = 2 * (self.fill(to) - self.fill(from)) + 2 * one;
        let (a, b) = (self.engine.domain[from as usize], self.engine.domain[to as usize]);
        if a != b {
            delta += 2 * (self.domain_fill(b) - self.domain_fill(a)) + 2 * one;
        }
        delta
    }

    /// Brings devices into their bands (`tight`: `⌊t⌋ to ⌈t⌉`; otherwise `round(t) ± 1`).
    pub(crate) fn run(&mut self, tight: bool) {
        self.band = bands(self.engine, tight);
        let devices = self.engine.devices();
        let copies = (self.engine.units() * self.engine.size) as u64;
        let limit = copies.saturating_mul(ITERATIONS_PER_COPY).saturating_add(ITERATIONS_EXTRA);
        let mut skip = vec![false; devices];
        let mut stale_in_a_row = 0u32;
        let mut since_refresh = 0u64;
        for _ in 0..limit {
            let mut worst: Option<(i64, usize)> = None;
            for (d, skipped) in skip.iter().enumerate() {
                let outside = self.outside(d);
                if outside > 0 && !skipped && worst.is_none_or(|w| outside > w.0) {
                    worst = Some((outside, d));
                }
            }
            let Some((_, root)) = worst else { break };
            let over = self.layout.load[root] > self.band[root].1;
            let root_device = index32(root);
            let mut outcome = self.fix(root_device, over);
            if matches!(outcome, Outcome::None) {
                // The root's hops may be stale: recompute those through its units, retry.
                self.refresh_device(root_device);
                outcome = self.fix(root_device, over);
            }
            match outcome {
                Outcome::Moved => {
                    skip.iter_mut().for_each(|s| *s = false);
                    stale_in_a_row = 0;
                    since_refresh += 1;
                    if since_refresh >= REFRESH_INTERVAL {
                        self.refresh();
                        since_refresh = 0;
                    }
                }
                Outcome::Stale => {
                    stale_in_a_row += 1;
                    if stale_in_a_row == STALE_MAX / 2 {
                        self.refresh();
                        since_refresh = 0;
                    }
                    if stale_in_a_row > STALE_MAX {
                        skip[root] = true;
                        stale_in_a_row = 0;
                    }
                }
                Outcome::None if self.domain_fix(root_device, over) => {
                    skip.iter_mut().for_each(|s| *s = false);
                }
                Outcome::None => skip[root] = true,
            }
        }
    }

    /// When `root`'s domain as a whole is outside the sum of its devices' bands (over, or
    /// under), no path of hops through its devices may exist (every device of a domain that
    /// must grow can be at its floor): moves one copy across the domain's border by one of the
    /// domain's own hops, the one that adds least to the change and evens out most.
    fn domain_fix(&mut self, root: u32, over: bool) -> bool {
        let engine = self.engine;
        let h = engine.domain[root as usize];
        let (mut lo, mut hi) = (0i64, 0i64);
        for &d in &engine.domain_devices[h as usize] {
            lo += self.band[d as usize].0;
            hi += self.band[d as usize].1;
        }
        let load = self.layout.domain_load[h as usize];
        if (over && load <= hi) || (!over && load >= lo) {
            return false;
        }
        let mut best: Option<((i64, i128), Hop)> = None;
        for class in class_numbers() {
            let Some(hop) = self.hops.nearest(engine, Mover::Domain(h), class, over) else {
                continue;
            };
            let giver_ok = self.layout.load[hop.from as usize] > self.band[hop.from as usize].0;
            let taker_ok = self.layout.load[hop.to as usize] < self.band[hop.to as usize].1;
            if !giver_ok || !taker_ok {
                continue;
            }
            let rank = (
                self.layout.move_cost(engine, hop.unit as usize, hop.from, hop.to),
                self.delta(hop.from, hop.to),
            );
            if best.is_none_or(|b| rank < b.0) {
                best = Some((rank, hop));
            }
        }
        let Some((_, hop)) = best else { return false };
        self.hops.unit_changed(engine, &self.layout, hop.unit as usize);
        match self.fresh_nearest(hop.mover, hop.class, hop.raise) {
            Some(fresh) if fresh.from == hop.from && fresh.to == hop.to => {
                self.step(fresh);
                true
            }
            _ => false,
        }
    }

    /// Recomputes every hop through the units device `d` ranks.
    fn refresh_device(&mut self, d: u32) {
        for entry in &self.engine.lists[d as usize] {
            self.hops.unit_changed(self.engine, &self.layout, entry.unit as usize);
        }
    }

    /// Recomputes every hop.
    fn refresh(&mut self) {
        for unit in 0..self.engine.units() {
            self.hops.unit_changed(self.engine, &self.layout, unit);
        }
    }

    /// Searches and executes a path for `root`.
    fn fix(&mut self, root: u32, over: bool) -> Outcome {
        let Some(path) = self.search(root, over) else { return Outcome::None };
        for hop in path {
            // The unit's hops afresh, then the mover's nearest, made fresh too: the one
            // searched (or one moving a copy between the same devices), or stale.
            self.hops.unit_changed(self.engine, &self.layout, hop.unit as usize);
            let fresh = self.fresh_nearest(hop.mover, hop.class, hop.raise);
            match fresh {
                Some(f) if f.from == hop.from && f.to == hop.to => {
                    self.step(f);
                }
                _ => return Outcome::Stale,
            }
        }
        Outcome::Moved
    }

    /// A mover's nearest hop, with the hops of its unit recomputed until the nearest stays
    /// the same (at most [`FRESH_TRIES`] times).
    fn fresh_nearest(&mut self, mover: Mover, class: u8, raise: bool) -> Option<Hop> {
        let mut hop = self.hops.nearest(self.engine, mover, class, raise)?;
        for _ in 0..FRESH_TRIES {
            self.hops.unit_changed(self.engine, &self.layout, hop.unit as usize);
            let again = self.hops.nearest(self.engine, mover, class, raise)?;
            if again == hop {
                return Some(hop);
            }
            hop = again;
        }
        Some(hop)
    }

    /// Takes one hop and updates the cached hops it touched.
    fn step(&mut self, hop: Hop) {
        self.moves.clear();
        match hop.mover {
            Mover::Device(d) => set_device_price(
                self.engine,
                &mut self.layout,
                d,
                usize::from(hop.class),
                hop.price,
                &mut self.moves,
            ),
            Mover::Domain(h) => set_domain_price(
                self.engine,
                &mut self.layout,
                h,
                usize::from(hop.class),
                hop.price,
                &mut self.moves,
            ),
        }
        let moves = std::mem::take(&mut self.moves);
        for &(unit, _, _) in &moves {
            self.hops.unit_changed(self.engine, &self.layout, unit as usize);
        }
        self.moves = moves;
    }

    /// The best path for `root`: breadth first over cached hops, up to [`PATH_DEPTH`].
    fn search(&self, root: u32, over: bool) -> Option<Vec<Hop>> {
        let engine = self.engine;
        let devices = engine.devices();
        // The nearest hops moving a copy out of (over) or into (under) a device.
        let adjacent = if over { &self.hops.leaving } else { &self.hops.arriving };
        struct Node {
            device: u32,
            parent: u32,
            hop: Option<Hop>,
            cost: i64,
            depth: u8,
            /// The reverse of the hop that reached it (its own class, its domain's class).
            blocked: [(Mover, u8); 2],
        }
        let none = (Mover::Device(NONE), u8::MAX);
        let mut nodes = vec![Node {
            device: root,
            parent: u32::MAX,
            hop: None,
            cost: 0,
            depth: 0,
            blocked: [none, none],
        }];
        let mut best_at: Vec<Option<(i64, u8)>> = vec![None; devices];
        best_at[root as usize] = Some((0, 0));
        let mut best: Option<((i64, i128, u8), usize)> = None;
        let mut head = 0;
        while head < nodes.len() {
            let (y, cost, depth) = (nodes[head].device, nodes[head].cost, nodes[head].depth);
            if head > 0 {
                let (lo, hi) = self.band[y as usize];
                let load = self.layout.load[y as usize];
                if (over && load < hi) || (!over && load > lo) {
                    let (from, to) = if over { (root, y) } else { (y, root) };
                    let rank = (cost, self.delta(from, to), depth);
                    if best.is_none_or(|b| rank < b.0) {
                        best = Some((rank, head));
                    }
                }
            }
            if usize::from(depth) < PATH_DEPTH {
                for &set in &adjacent[y as usize] {
                    let Some(hop) = self.hops.nearest[set as usize] else { continue };
                    if nodes[head].blocked.contains(&(hop.mover, hop.class)) {
                        continue;
                    }
                    let next = if over { hop.to } else { hop.from };
                    if next == root {
                        continue;
                    }
                    let cost =
                        cost + self.layout.move_cost(engine, hop.unit as usize, hop.from, hop.to);
                    if best_at[next as usize].is_some_and(|b| b <= (cost, depth + 1)) {
                        continue;
                    }
                    best_at[next as usize] = Some((cost, depth + 1));
                    let unit = hop.unit as usize;
                    let c = engine.cand_index(unit, next).map(|i| engine.cand_at(i));
                    let own = c.map_or(none, |c| (Mover::Device(next), c.class));
                    let domain =
                        c.map_or(none, |c| (Mover::Domain(engine.domain[next as usize]), c.dclass));
                    nodes.push(Node {
                        device: next,
                        parent: index32(head),
                        hop: Some(hop),
                        cost,
                        depth: depth + 1,
                        blocked: [own, domain],
                    });
                }
            }
            head += 1;
        }
        let (_, goal) = best?;
        let mut path = Vec::new();
        let mut at = goal;
        while nodes[at].parent != u32::MAX {
            path.push(nodes[at].hop.expect("every node but the root has a hop"));
            at = nodes[at].parent as usize;
        }
        path.reverse();
        Some(path)
    }

    /// Scales every device's prices by its load over its target (halfway), `rounds` times,
    /// recomputing the placement each time: a quick start for a balance from scratch.
    pub(crate) fn rescale(engine: &Engine, layout: &mut Layout, rounds: u32) {
        for _ in 0..rounds {
            let mut prices = layout.prices.clone();
            for d in 0..engine.devices() {
                let t = &engine.targets[d];
                let load = u128::try_from(layout.load[d].max(1)).unwrap_or(1);
                for price in &mut prices.device[d * CLASSES..(d + 1) * CLASSES] {
                    let scaled = u128::from(*price) * load * t.denominator / t.numerator.max(1);
                    let halfway = (scaled + u128::from(*price)) / 2;
                    *price = u64::try_from(halfway)
                        .unwrap_or(super::state::PRICE_MAX)
                        .clamp(1, super::state::PRICE_MAX);
                }
            }
            *layout = Layout::new(engine, prices, layout.home.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::balanced::Member;

    /// The hops [`Hops::all`] computes for two halves of the units side by side are those
    /// computed unit by unit.
    #[test]
    fn hops_computed_side_by_side_are_those_computed_one_by_one() {
        let members: Vec<Member> = (0..60u32)
            .map(|id| Member {
                id,
                domain: format!("h{}", id % 12),
                weight: u64::from(1 + id % 3) << 16,
            })
            .collect();
        let keys: Vec<u32> = (0..8192u32).map(|k| k.wrapping_mul(2_654_435_761)).collect();
        let engine = Engine::new(3, keys, &members, &[]);
        assert!(engine.units() >= PARALLEL_UNITS_MIN);
        let layout = Layout::new(&engine, engine.neutral_prices(), None);
        let side_by_side = Hops::all(&engine, &layout);
        let mut one_by_one = Hops::empty(&engine);
        for unit in 0..engine.units() {
            one_by_one.compute_unit(&engine, &layout, unit, false);
        }
        assert!(one_by_one.device.iter().any(Option::is_some));
        assert!(one_by_one.domain.iter().any(Option::is_some));
        assert_eq!(side_by_side.device, one_by_one.device);
        assert_eq!(side_by_side.domain, one_by_one.domain);
    }
}
