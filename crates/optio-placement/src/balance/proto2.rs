//! PROTOTYPE 2 (not for commit): assignments certified by per-device prices.
#![allow(missing_docs, dead_code)]

use super::rank;
use super::targets::{self, Target};
use super::{pool_rule, usable_devices};
use crate::map::{ClusterMap, Pool};

pub const NONE: u32 = u32::MAX;
pub const PRICE_ONE: u128 = 1 << 40;

#[derive(Clone, Copy, Debug)]
pub struct Cand {
    pub device: u32,
    pub rank: u64, // 2k+1
    pub hash: u32,
}

pub struct Engine {
    pub size: usize,
    pub units: usize,
    pub ids: Vec<u32>,
    pub domain: Vec<u32>,
    pub targets: Vec<Target>,
    pub lists: Vec<Vec<(u32, u64, u32)>>, // per device: (unit, rank, hash)
    pub cand_start: Vec<u32>,
    pub cand: Vec<Cand>,
}

pub type Key = (u128, u32, u32);

#[derive(Clone)]
pub struct Layout {
    pub price: Vec<u64>,
    pub members: Vec<u32>,
    pub load: Vec<i64>,
    /// home[unit*size+i]: whether members[..] held the unit before (for cost accounting)
    pub before: Vec<u32>, // original members (device ids), NONE padded
    pub moves: i64,
    pub changes: u64,
    pub trials: u64,
}

pub fn neutral_price(t: &Target) -> u64 {
    u64::try_from(PRICE_ONE * t.denominator / t.numerator.max(1)).unwrap_or(u64::MAX).max(1)
}

impl Engine {
    pub fn new(map: &ClusterMap, pool: &Pool) -> Engine {
        let (take, domain_type) = pool_rule(map, pool).expect("rule");
        let keys: Vec<u32> = (0..pool.pgp_num).map(|s| crate::pg::pool_pps(pool, s)).collect();
        let devices = usable_devices(map, take, domain_type);
        let size = pool.size as usize;
        let targets = targets::targets(
            &devices.weights,
            &devices.domain,
            devices.domain_count,
            keys.len() as u64,
            size as u64,
        );
        let mut scratch = Vec::new();
        let lists: Vec<Vec<(u32, u64, u32)>> = devices
            .ids
            .iter()
            .zip(&targets)
            .map(|(&id, target)| {
                let count = target.numerator.saturating_mul(6) / target.denominator + 16;
                rank::ranking(id, &keys, target, count as usize, &mut scratch)
                    .iter()
                    .enumerate()
                    .map(|(k, r)| (r.unit, 2 * k as u64 + 1, r.hash))
                    .collect()
            })
            .collect();
        let units = keys.len();
        let mut count = vec![0u32; units + 1];
        for r in &lists {
            for x in r {
                count[x.0 as usize + 1] += 1;
            }
        }
        for u in 0..units {
            count[u + 1] += count[u];
        }
        let mut fill = count.clone();
        let mut cand = vec![Cand { device: 0, rank: 0, hash: 0 }; count[units] as usize];
        for (d, r) in lists.iter().enumerate() {
            for x in r {
                let slot = &mut fill[x.0 as usize];
                cand[*slot as usize] = Cand { device: d as u32, rank: x.1, hash: x.2 };
                *slot += 1;
            }
        }
        Engine {
            size,
            units,
            ids: devices.ids,
            domain: devices.domain,
            targets,
            lists,
            cand_start: count,
            cand,
        }
    }

    pub fn cands(&self, unit: usize) -> &[Cand] {
        &self.cand[self.cand_start[unit] as usize..self.cand_start[unit + 1] as usize]
    }

    #[inline]
    pub fn key(&self, c: &Cand, price: &[u64]) -> Key {
        (u128::from(c.rank) * u128::from(price[c.device as usize]), c.hash, self.ids[c.device as usize])
    }

    pub fn band(&self, d: usize, tight: bool) -> (i64, i64) {
        let t = &self.targets[d];
        if tight { (t.floor(), t.ceil()) } else { ((t.floor() - 1).max(0), t.floor() + 1) }
    }

    pub fn greedy(&self, unit: usize, price: &[u64], buf: &mut Vec<(Key, u32)>, out: &mut Vec<u32>) {
        buf.clear();
        buf.extend(self.cands(unit).iter().map(|c| (self.key(c, price), c.device)));
        buf.sort_unstable();
        out.clear();
        for &(_, d) in buf.iter() {
            if out.len() == self.size {
                break;
            }
            let dom = self.domain[d as usize];
            if out.iter().all(|&o| self.domain[o as usize] != dom) {
                out.push(d);
            }
        }
    }

    pub fn place(&self, price: Vec<u64>) -> Layout {
        let mut l = Layout {
            price,
            members: vec![NONE; self.units * self.size],
            load: vec![0; self.ids.len()],
            before: Vec::new(),
            moves: 0,
            changes: 0,
            trials: 0,
        };
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for unit in 0..self.units {
            self.greedy(unit, &l.price, &mut buf, &mut out);
            for (i, &d) in out.iter().enumerate() {
                l.members[unit * self.size + i] = d;
                l.load[d as usize] += 1;
            }
        }
        l
    }

    fn slots<'a>(&self, l: &'a Layout, unit: usize) -> &'a [u32] {
        &l.members[unit * self.size..(unit + 1) * self.size]
    }

    fn cand_of(&self, unit: usize, d: u32) -> Option<&Cand> {
        self.cands(unit).iter().find(|c| c.device == d)
    }

    /// A violated constraint of `unit`: (member that must beat, non-member that must lose).
    /// Returns None when consistent. Units with a hole report nothing for free domains.
    fn violation(&self, l: &Layout, unit: usize) -> Option<(u32, u32)> {
        let slots = self.slots(l, unit);
        let full = !slots.contains(&NONE);
        let mut worst: Option<(Key, u32)> = None;
        for &x in slots.iter().filter(|&&x| x != NONE) {
            let k = self.key(self.cand_of(unit, x)?, &l.price);
            if worst.is_none_or(|w| k > w.0) {
                worst = Some((k, x));
            }
        }
        for c in self.cands(unit) {
            if slots.contains(&c.device) {
                continue;
            }
            let ky = self.key(c, &l.price);
            let dom = self.domain[c.device as usize];
            if let Some(&x) = slots.iter().find(|&&x| x != NONE && self.domain[x as usize] == dom) {
                let kx = self.key(self.cand_of(unit, x)?, &l.price);
                if kx > ky {
                    return Some((x, c.device));
                }
            } else if full
                && let Some((kw, w)) = worst
                && kw > ky
            {
                return Some((w, c.device));
            }
        }
        None
    }

    fn set_price(&self, l: &mut Layout, d: u32, p: u64, log: &mut Vec<(u32, u64)>) {
        log.push((d, l.price[d as usize]));
        l.price[d as usize] = p;
        l.changes += 1;
    }

    /// Makes every unit in `work` (and those affected) consistent by lowering members (lower)
    /// or raising non-members (raise). Returns false if over the limit.
    fn settle(&self, l: &mut Layout, work: &mut Vec<u32>, lower: bool, log: &mut Vec<(u32, u64)>, limit: usize) -> bool {
        let mut queued = vec![false; self.units];
        for &u in work.iter() {
            queued[u as usize] = true;
        }
        let mut changes = 0usize;
        while let Some(unit) = work.pop() {
            let unit = unit as usize;
            queued[unit] = false;
            while let Some((x, y)) = self.violation(l, unit) {
                changes += 1;
                if changes > limit {
                    return false;
                }
                let cx = *self.cand_of(unit, x).expect("member cand");
                let cy = *self.cand_of(unit, y).expect("cand");
                let ky = self.key(&cy, &l.price);
                let kx = self.key(&cx, &l.price);
                let moved = if lower {
                    // largest price of x with key_x < key_y
                    let mut p = ky.0 / u128::from(cx.rank);
                    if (u128::from(cx.rank) * p, cx.hash, self.ids[x as usize]) >= ky {
                        p = p.saturating_sub(1);
                    }
                    if p == 0 {
                        return false;
                    }
                    self.set_price(l, x, u64::try_from(p).unwrap_or(u64::MAX), log);
                    x
                } else {
                    let mut p = kx.0 / u128::from(cy.rank);
                    if (u128::from(cy.rank) * p, cy.hash, self.ids[y as usize]) <= kx {
                        p += 1;
                    }
                    if p > u128::from(u64::MAX >> 2) {
                        return false;
                    }
                    self.set_price(l, y, p as u64, log);
                    y
                };
                // units where `moved` may now break: lowering breaks its non-member units,
                // raising breaks its member units.
                for &(u2, _, _) in &self.lists[moved as usize] {
                    let member = self.slots(l, u2 as usize).contains(&moved);
                    if member != lower && !queued[u2 as usize] && u2 as usize != unit {
                        queued[u2 as usize] = true;
                        work.push(u2);
                    }
                }
            }
        }
        true
    }

    fn revert(&self, l: &mut Layout, log: &mut Vec<(u32, u64)>) {
        while let Some((d, p)) = log.pop() {
            l.price[d as usize] = p;
        }
    }

    fn home(&self, l: &Layout, unit: usize, d: u32) -> bool {
        l.before.is_empty() || l.before[unit * self.size..(unit + 1) * self.size].contains(&self.ids[d as usize])
    }

    /// Replaces `from` (or a hole if NONE) by `to` in `unit` and settles. Reverts on failure.
    pub fn try_move(&self, l: &mut Layout, unit: usize, from: u32, to: u32, prefer_lower: bool, limit: usize) -> bool {
        l.trials += 1;
        let slot = (unit * self.size..(unit + 1) * self.size)
            .find(|&s| l.members[s] == from)
            .expect("slot");
        l.members[slot] = to;
        if from != NONE {
            l.load[from as usize] -= 1;
        }
        l.load[to as usize] += 1;
        let mut log = Vec::new();
        for lower in [prefer_lower, !prefer_lower] {
            let mut work = vec![unit as u32];
            if self.settle(l, &mut work, lower, &mut log, limit) {
                let cost = i64::from(!self.home(l, unit, to)) - i64::from(from != NONE && !self.home(l, unit, from));
                l.moves += cost;
                return true;
            }
            self.revert(l, &mut log);
        }
        l.members[slot] = from;
        if from != NONE {
            l.load[from as usize] += 1;
        }
        l.load[to as usize] -= 1;
        false
    }

    fn eligible(&self, l: &Layout, unit: usize, leaving: u32, d: u32) -> bool {
        let slots = self.slots(l, unit);
        if slots.contains(&d) {
            return false;
        }
        let dom = self.domain[d as usize];
        slots.iter().all(|&x| x == NONE || x == leaving || self.domain[x as usize] != dom)
    }

    fn gap(&self, l: &Layout, unit: usize, from: u32, to: u32) -> u128 {
        let kt = self.key(self.cand_of(unit, to).expect("cand"), &l.price).0;
        let kf = if from == NONE { 1 } else { self.key(self.cand_of(unit, from).expect("cand"), &l.price).0 };
        (kt << 16) / kf.max(1)
    }

    fn fix_over(&self, l: &mut Layout, o: u32, tight: bool, tries: usize, limit: usize) -> bool {
        let mut options: Vec<(i64, i64, u128, usize, u32)> = Vec::new();
        for &(unit, _, _) in &self.lists[o as usize] {
            let unit = unit as usize;
            if !self.slots(l, unit).contains(&o) {
                continue;
            }
            for c in self.cands(unit) {
                let u = c.device;
                if !self.eligible(l, unit, o, u) {
                    continue;
                }
                let (lo, hi) = self.band(u as usize, tight);
                let _ = lo;
                if l.load[u as usize] >= hi {
                    continue;
                }
                let cost = i64::from(!self.home(l, unit, u)) - i64::from(!self.home(l, unit, o));
                let fill = l.load[u as usize] - self.targets[u as usize].floor();
                options.push((cost, fill, self.gap(l, unit, o, u), unit, u));
            }
        }
        options.sort_unstable();
        for &(_, _, _, unit, u) in options.iter().take(tries) {
            if self.try_move(l, unit, o, u, false, limit) {
                return true;
            }
        }
        false
    }

    fn fix_under(&self, l: &mut Layout, u: u32, tight: bool, tries: usize, limit: usize) -> bool {
        let mut options: Vec<(i64, i64, u128, usize, u32)> = Vec::new();
        let dom = self.domain[u as usize];
        for &(unit, _, _) in &self.lists[u as usize] {
            let unit = unit as usize;
            let slots = self.slots(l, unit);
            if slots.contains(&u) || slots.contains(&NONE) {
                continue;
            }
            let same = slots.iter().copied().find(|&x| self.domain[x as usize] == dom);
            let donors: Vec<u32> = match same {
                Some(x) => vec![x],
                None => slots.to_vec(),
            };
            for v in donors {
                let (lo, _) = self.band(v as usize, tight);
                if l.load[v as usize] <= lo {
                    continue;
                }
                let cost = i64::from(!self.home(l, unit, u)) - i64::from(!self.home(l, unit, v));
                let fill = self.targets[v as usize].floor() - l.load[v as usize];
                options.push((cost, fill, self.gap(l, unit, v, u), unit, v));
            }
        }
        options.sort_unstable();
        for &(_, _, _, unit, v) in options.iter().take(tries) {
            if self.try_move(l, unit, v, u, true, limit) {
                return true;
            }
        }
        false
    }

    fn fill_holes(&self, l: &mut Layout, tight: bool, limit: usize) -> u64 {
        let mut unfilled = 0;
        for unit in 0..self.units {
            while self.slots(l, unit).contains(&NONE) {
                let mut options: Vec<(i64, u128, u32)> = Vec::new();
                for c in self.cands(unit) {
                    if !self.eligible(l, unit, NONE, c.device) {
                        continue;
                    }
                    let (_, hi) = self.band(c.device as usize, tight);
                    let full = i64::from(l.load[c.device as usize] >= hi);
                    options.push((full, self.gap(l, unit, NONE, c.device), c.device));
                }
                options.sort_unstable();
                let mut done = false;
                for &(_, _, d) in options.iter().take(16) {
                    if self.try_move(l, unit, NONE, d, true, limit) {
                        done = true;
                        break;
                    }
                }
                if !done {
                    unfilled += 1;
                    break;
                }
            }
        }
        unfilled
    }

    pub fn repair(&self, l: &mut Layout, tight: bool, tries: usize, limit: usize) -> (u64, u64) {
        let unfilled = self.fill_holes(l, tight, limit);
        let mut skip = vec![false; self.ids.len()];
        let mut iterations = 0u64;
        loop {
            iterations += 1;
            if iterations > 200_000 {
                break;
            }
            let mut worst: Option<(i64, usize, bool)> = None;
            for d in 0..self.ids.len() {
                if skip[d] {
                    continue;
                }
                let (lo, hi) = self.band(d, tight);
                let load = l.load[d];
                let (v, over) = if load > hi {
                    (load - hi, true)
                } else if load < lo {
                    (lo - load, false)
                } else {
                    continue;
                };
                if worst.is_none_or(|w| v > w.0) {
                    worst = Some((v, d, over));
                }
            }
            let Some((_, d, over)) = worst else { break };
            let ok = if over {
                self.fix_over(l, d as u32, tight, tries, limit)
            } else {
                self.fix_under(l, d as u32, tight, tries, limit)
            };
            if ok {
                skip.iter_mut().for_each(|s| *s = false);
            } else {
                skip[d] = true;
            }
        }
        let bad = (0..self.ids.len())
            .map(|d| {
                let (lo, hi) = self.band(d, tight);
                ((lo - l.load[d]).max(0) + (l.load[d] - hi).max(0)) as u64
            })
            .sum();
        (unfilled, bad)
    }

    /// Coarse multiplicative scaling rounds from scratch (integer).
    pub fn coarse(&self, l: &mut Layout, rounds: u32) {
        for _ in 0..rounds {
            let mut price = l.price.clone();
            for d in 0..self.ids.len() {
                let t = &self.targets[d];
                let load = l.load[d].max(1) as u128;
                // price *= load / t  (t = num/den) -> price * load * den / num
                let p = u128::from(price[d]) * load * t.denominator / t.numerator.max(1);
                // damp: average with old
                let p = (p + u128::from(price[d])) / 2;
                price[d] = u64::try_from(p).unwrap_or(u64::MAX).max(1);
            }
            *l = self.place(price);
        }
    }

    /// Start from a previous layout: members mapped by id (holes for vanished devices),
    /// prices mapped; new devices priced to hold nothing.
    pub fn from_previous(&self, prev: &Engine, pl: &Layout) -> Layout {
        let index = |id: u32| self.ids.iter().position(|&x| x == id).map(|i| i as u32);
        let mut price = vec![0u64; self.ids.len()];
        let mut known = vec![false; self.ids.len()];
        for (i, &id) in prev.ids.iter().enumerate() {
            if let Some(j) = index(id) {
                price[j as usize] = pl.price[i];
                known[j as usize] = true;
            }
        }
        let mut l = Layout {
            price,
            members: vec![NONE; self.units * self.size],
            load: vec![0; self.ids.len()],
            before: vec![NONE; self.units * self.size],
            moves: 0,
            changes: 0,
            trials: 0,
        };
        for unit in 0..self.units {
            let mut k = 0;
            for s in 0..prev.size {
                let d = pl.members[unit * prev.size + s];
                if d == NONE {
                    continue;
                }
                let id = prev.ids[d as usize];
                l.before[unit * self.size + s] = id;
                if let Some(j) = index(id)
                    && self.cand_of(unit, j).is_some()
                    && self.slots(&l, unit).iter().all(|&x| x == NONE || self.domain[x as usize] != self.domain[j as usize])
                {
                    l.members[unit * self.size + k] = j;
                    l.load[j as usize] += 1;
                    k += 1;
                }
            }
        }
        // new devices: price so high they beat nobody.
        for d in 0..self.ids.len() {
            if known[d] {
                continue;
            }
            let mut need: u128 = 1;
            for &(unit, rank, _) in &self.lists[d] {
                let slots = self.slots(&l, unit as usize);
                for &x in slots.iter().filter(|&&x| x != NONE) {
                    let kx = self.key(self.cand_of(unit as usize, x).expect("cand"), &l.price).0;
                    need = need.max(kx / u128::from(rank) + 1);
                }
            }
            l.price[d] = u64::try_from(need).unwrap_or(u64::MAX);
        }
        l
    }

    pub fn check(&self, l: &Layout) {
        let fresh = self.place(l.price.clone());
        for u in 0..self.units {
            let mut a = fresh.members[u * self.size..(u + 1) * self.size].to_vec();
            let mut b = l.members[u * self.size..(u + 1) * self.size].to_vec();
            a.sort();
            b.sort();
            assert_eq!(a, b, "unit {u}: violation {:?}", self.violation(l, u));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{ClusterMapBuilder, DeviceSpec, PoolSpec};
    use crate::ids::{PoolId, Weight};
    use crate::stats::{Summary, minimum_movement_share};
    use std::time::Instant;

    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Change {
        Add(u32),
        Remove(u32),
        Reweight(u32),
    }

    fn map(racks: u32, hosts: u32, osds: u32, change: Option<Change>, pg: u32, size: u32) -> ClusterMap {
        let mut b = ClusterMapBuilder::new();
        let n = racks.max(1) * hosts * osds;
        let loc = |host: u32| {
            let mut l = vec![("host".to_string(), format!("host{host}"))];
            if racks > 0 {
                l.push(("rack".to_string(), format!("rack{}", host / hosts)));
            }
            l
        };
        for id in 0..n {
            if change == Some(Change::Remove(id)) {
                continue;
            }
            let mut d = DeviceSpec::new(id);
            d.location = loc(id / osds);
            if change == Some(Change::Reweight(id)) {
                d.reweight = Weight(0x8000);
            }
            b.devices.push(d);
        }
        if let Some(Change::Add(h)) = change {
            let mut d = DeviceSpec::new(n);
            d.location = loc(h % (racks.max(1) * hosts));
            b.devices.push(d);
        }
        let mut pool = PoolSpec::crush(1, "pool", pg, size);
        pool.balance.balanced = true;
        b.replicated_rule(0, "replicated_rule", "default", "host").pool(pool).build().expect("valid")
    }

    fn moved(ea: &Engine, la: &Layout, eb: &Engine, lb: &Layout) -> u64 {
        let mut moved = 0;
        for u in 0..ea.units {
            let a: Vec<u32> = la.members[u * ea.size..(u + 1) * ea.size].iter().filter(|&&d| d != NONE).map(|&d| ea.ids[d as usize]).collect();
            for &d in lb.members[u * eb.size..(u + 1) * eb.size].iter().filter(|&&d| d != NONE) {
                if !a.contains(&eb.ids[d as usize]) {
                    moved += 1;
                }
            }
        }
        moved
    }

    fn minimum(ma: &ClusterMap, mb: &ClusterMap, copies: u64) -> f64 {
        let p = ma.pool(PoolId(1)).unwrap();
        let q = mb.pool(PoolId(1)).unwrap();
        minimum_movement_share(&crate::analysis::target_shares(ma, p), &crate::analysis::target_shares(mb, q)) * copies as f64
    }

    fn env_usize(name: &str, default: usize) -> usize {
        std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    }

    fn dbg(l: &Layout, what: &str) {
        if std::env::var("DBG").is_ok() {
            let loads: Vec<f64> = l.load.iter().map(|&x| x as f64).collect();
            let s = Summary::of(&loads);
            eprintln!("{what}: stdev {:.2} min {} max {} moves {} changes {} trials {}", s.stdev, s.min, s.max, l.moves, l.changes, l.trials);
        }
    }

    fn scratch(e: &Engine) -> Layout {
        let tries = env_usize("TRIES", 32);
        let limit = env_usize("LIMIT", 2000);
        let price: Vec<u64> = e.targets.iter().map(neutral_price).collect();
        let mut l = e.place(price);
        dbg(&l, "natural");
        e.coarse(&mut l, env_usize("COARSE", 4) as u32);
        dbg(&l, "coarse");
        let r = e.repair(&mut l, true, tries, limit);
        dbg(&l, &format!("tight {r:?}"));
        let r = e.repair(&mut l, false, tries, limit);
        dbg(&l, &format!("wide {r:?}"));
        l
    }

    fn incremental(e: &Engine, prev: &Engine, pl: &Layout) -> Layout {
        let tries = env_usize("TRIES", 32);
        let limit = env_usize("LIMIT", 2000);
        let mut l = e.from_previous(prev, pl);
        dbg(&l, "mapped");
        let r = e.repair(&mut l, false, tries, limit);
        dbg(&l, &format!("wide {r:?}"));
        l
    }

    #[test]
    #[ignore]
    fn proto2_sim() {
        let trials = env_usize("TRIALS", 5) as u32;
        let list = |name: &str, d: Vec<u32>| -> Vec<u32> {
            std::env::var(name).ok().map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(d)
        };
        let maps = list("MAPS", vec![40, 1000]);
        let pgs = list("PGS", vec![2048, 32768]);
        let sizes = list("SIZES", vec![2, 3]);
        let check = std::env::var("CHECK").is_ok();
        for &mapn in &maps {
            let (racks, hosts, osds) = if mapn == 40 { (0, 4, 10) } else { (10, 10, 10) };
            let n = racks.max(1) * hosts * osds;
            let nh = racks.max(1) * hosts;
            for &pg in &pgs {
                for &size in &sizes {
                    let ma = map(racks, hosts, osds, None, pg, size);
                    let t0 = Instant::now();
                    let ea = Engine::new(&ma, ma.pool(PoolId(1)).unwrap());
                    let t1 = t0.elapsed();
                    let la = scratch(&ea);
                    let t2 = t0.elapsed();
                    if check {
                        ea.check(&la);
                    }
                    let loads: Vec<f64> = la.load.iter().map(|&x| x as f64).collect();
                    let s = Summary::of(&loads);
                    let mut sums = [(0.0f64, 0.0f64, 0u64); 3];
                    let mut worst_stdev = 0.0f64;
                    let ti = Instant::now();
                    for trial in 0..trials {
                        let changes = [
                            Change::Add(trial.wrapping_mul(7) % nh),
                            Change::Remove((trial.wrapping_mul(37) + 3) % n),
                            Change::Reweight((trial.wrapping_mul(53) + 11) % n),
                        ];
                        for (k, ch) in changes.into_iter().enumerate() {
                            let mb = map(racks, hosts, osds, Some(ch), pg, size);
                            let eb = Engine::new(&mb, mb.pool(PoolId(1)).unwrap());
                            let lb = incremental(&eb, &ea, &la);
                            if check {
                                eb.check(&lb);
                            }
                            let mv = moved(&ea, &la, &eb, &lb);
                            let copies = lb.load.iter().sum::<i64>() as u64;
                            sums[k].0 += mv as f64;
                            sums[k].1 += minimum(&ma, &mb, copies);
                            sums[k].2 += lb.changes;
                            let loads: Vec<f64> = lb.load.iter().map(|&x| x as f64).collect();
                            let sb = Summary::of(&loads);
                            if !matches!(ch, Change::Reweight(_)) {
                                worst_stdev = worst_stdev.max(sb.stdev);
                            }
                        }
                    }
                    let tinc = ti.elapsed() / (3 * trials);
                    println!(
                        "{mapn:>5} {pg:>6} {size} stdev {:.2} max/mean {:.3} | add {:.2} rem {:.2} rw {:.2} | after stdev {:.2} | changes {} {} {} | engine {:?} base {:?} inc {:?}",
                        s.stdev, s.max_over_mean,
                        sums[0].0 / sums[0].1, sums[1].0 / sums[1].1, sums[2].0 / sums[2].1,
                        worst_stdev,
                        sums[0].2, sums[1].2, sums[2].2, t1, t2 - t1, tinc
                    );
                }
            }
        }
    }
}
