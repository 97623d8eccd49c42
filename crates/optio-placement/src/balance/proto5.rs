//! PROTOTYPE 5 (not for commit): per-device class prices + per-domain class prices, home-aware
//! min-cost correction paths, virtual leaving devices.
#![allow(missing_docs, dead_code, clippy::all)]

use super::rank::{self, Ranked};
use super::targets::{self, Target};
use super::{devices_under, pool_rule};
use crate::ids::{DeviceId, ItemId, TypeId};
use crate::map::{ClusterMap, Pool};

pub const PRICE_ONE: u128 = 1 << 40;
pub const PRICE_NONE: u64 = u64::MAX >> 8;
pub const DPRICE_ONE: u64 = 1 << 20;
pub const NONE: u32 = u32::MAX;

pub fn neutral(t: &Target) -> u64 {
    u64::try_from(PRICE_ONE * t.denominator / t.numerator.max(1)).unwrap_or(PRICE_NONE).clamp(1, PRICE_NONE)
}

/// A device as the balancer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dev {
    pub id: u32,
    pub dom: i64,
    pub weight: u64,
}

pub fn devs_of(map: &ClusterMap, pool: &Pool) -> Vec<Dev> {
    let (take, domain_type) = pool_rule(map, pool).expect("rule");
    let mut out = Vec::new();
    for device in devices_under(map, take) {
        let Some(d) = map.device(device) else { continue };
        if !d.is_usable() {
            continue;
        }
        let weight = (u64::from(d.weight.0) * u64::from(d.reweight.0.min(0x10000))) >> 16;
        if weight == 0 {
            continue;
        }
        let dom = if domain_type == TypeId(0) {
            i64::from(device.0)
        } else {
            match map.ancestor_of_type(ItemId::from(device), domain_type) {
                Some(b) => i64::from(b.id.0),
                None => continue,
            }
        };
        out.push(Dev { id: device.0, dom, weight });
    }
    out
}

#[derive(Clone, Copy, Debug)]
pub struct Cand {
    pub device: u32,
    pub hash: u32,
    pub score: u64,
}

pub type Key = (u128, u32, u32);

pub struct Engine {
    pub size: usize,
    pub units: usize,
    pub k: usize,
    pub devs: Vec<Dev>,
    pub leaving: Vec<bool>,
    pub ids: Vec<u32>,
    pub domain: Vec<u32>,
    pub targets: Vec<Target>,
    pub rank: Vec<Vec<Ranked>>,
    pub cand_start: Vec<u32>,
    pub cand: Vec<Cand>,
    pub keys: Vec<u32>,
    pub ndom: usize,
    pub dom_key: Vec<i64>,
    pub dunits: Vec<Vec<u32>>,
    pub dom_devices: Vec<Vec<u32>>,
}

#[derive(Clone)]
pub struct Layout {
    pub m: Vec<u64>,
    pub members: Vec<u32>,
    pub load: Vec<i64>,
    pub home: Vec<u32>, // device ids per slot (previous placement), empty: no accounting
    pub cost: i64,
    pub steps: u64,
    pub bad: u64,
}

/// A one-unit move available by one price step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub from: u32,
    pub to: u32,
    pub unit: u32,
    /// mover: device index (domain: ndevices + domain index)
    pub mover: u32,
    pub class: u32,
    pub th: u64,
}

impl Engine {
    /// `devs`: usable devices first, then `leaving` ones (target 0; lists from `leave_weight`).
    pub fn new(size: usize, keys: Vec<u32>, devs: &[Dev], leaving: &[Dev], k: usize) -> Engine {
        let mut dom_key: Vec<i64> = Vec::new();
        let mut domain = Vec::new();
        for d in devs.iter().chain(leaving) {
            let h = match dom_key.iter().position(|&x| x == d.dom) {
                Some(h) => h,
                None => {
                    dom_key.push(d.dom);
                    dom_key.len() - 1
                }
            };
            domain.push(h as u32);
        }
        let ndom = dom_key.len();
        let weights: Vec<u64> = devs.iter().map(|d| d.weight).collect();
        let mut tgts = targets::targets(&weights, &domain[..devs.len()], ndom, keys.len() as u64, size as u64);
        // leaving devices: list length from their weight as if still there (approx: same share).
        let total_w: u128 = weights.iter().map(|&w| u128::from(w)).sum::<u128>().max(1);
        let copies = keys.len() as u128 * size as u128;
        let mut list_targets = tgts.clone();
        for d in leaving {
            list_targets.push(Target { numerator: copies * u128::from(d.weight), denominator: total_w });
            tgts.push(Target { numerator: 0, denominator: 1 });
        }
        let mut scratch = Vec::new();
        let all: Vec<Dev> = devs.iter().chain(leaving).copied().collect();
        let rankings: Vec<Vec<Ranked>> = all
            .iter()
            .zip(&list_targets)
            .map(|(d, target)| {
                let count = target.numerator.saturating_mul(6) / target.denominator.max(1) + 16;
                let mut r = rank::ranking(d.id, &keys, target, count as usize, &mut scratch);
                for (k, x) in r.iter_mut().enumerate() {
                    x.score = 2 * k as u64 + 1;
                }
                r
            })
            .collect();
        let units = keys.len();
        let mut count = vec![0u32; units + 1];
        for r in &rankings {
            for x in r {
                count[x.unit as usize + 1] += 1;
            }
        }
        for u in 0..units {
            count[u + 1] += count[u];
        }
        let mut fill = count.clone();
        let mut cand = vec![Cand { device: 0, hash: 0, score: 0 }; count[units] as usize];
        for (d, r) in rankings.iter().enumerate() {
            for x in r {
                let slot = &mut fill[x.unit as usize];
                cand[*slot as usize] = Cand { device: d as u32, hash: x.hash, score: x.score };
                *slot += 1;
            }
        }
        let mut dom_devices: Vec<Vec<u32>> = vec![Vec::new(); ndom];
        for (d, &h) in domain.iter().enumerate() {
            dom_devices[h as usize].push(d as u32);
        }
        let mut dunits: Vec<Vec<u32>> = vec![Vec::new(); ndom];
        for (d, r) in rankings.iter().enumerate() {
            dunits[domain[d] as usize].extend(r.iter().map(|x| x.unit));
        }
        for u in &mut dunits {
            u.sort_unstable();
            u.dedup();
        }
        let mut leaving_flags = vec![false; devs.len()];
        leaving_flags.extend(std::iter::repeat_n(true, leaving.len()));
        Engine {
            size,
            units,
            k,
            devs: all.clone(),
            leaving: leaving_flags,
            ids: all.iter().map(|d| d.id).collect(),
            domain,
            targets: tgts,
            rank: rankings,
            cand_start: count,
            cand,
            keys,
            ndom,
            dom_key,
            dunits,
            dom_devices,
        }
    }

    pub fn n(&self) -> usize {
        self.ids.len()
    }

    #[inline]
    pub fn class(&self, hash: u32) -> usize {
        (hash as usize) % self.k
    }

    #[inline]
    pub fn dclass(&self, h: usize, unit: usize) -> usize {
        (rank::rank_hash(self.dom_key[h] as u32 ^ 0x5bd1_e995, self.keys[unit]) as usize) % self.k
    }

    #[inline]
    pub fn dprice_index(&self, h: usize, unit: usize) -> usize {
        self.n() * self.k + h * self.k + self.dclass(h, unit)
    }

    #[inline]
    pub fn base(&self, c: &Cand, m: &[u64]) -> u128 {
        u128::from(c.score) * u128::from(m[c.device as usize * self.k + self.class(c.hash)])
    }

    #[inline]
    pub fn key_in(&self, c: &Cand, m: &[u64], unit: usize) -> Key {
        let h = self.domain[c.device as usize] as usize;
        (self.base(c, m) * u128::from(m[self.dprice_index(h, unit)]), c.hash, self.ids[c.device as usize])
    }

    pub fn cands(&self, unit: usize) -> &[Cand] {
        &self.cand[self.cand_start[unit] as usize..self.cand_start[unit + 1] as usize]
    }

    fn cand_of(&self, unit: usize, d: u32) -> &Cand {
        self.cands(unit).iter().find(|c| c.device == d).expect("candidate")
    }

    pub fn band(&self, d: usize, tight: bool) -> (i64, i64) {
        if self.leaving[d] {
            return (0, 0);
        }
        let t = &self.targets[d];
        if tight {
            return (t.floor(), t.ceil());
        }
        let c = ((2 * t.numerator + t.denominator) / (2 * t.denominator)) as i64;
        ((c - 1).max(0), c + 1)
    }

    pub fn greedy(&self, unit: usize, m: &[u64], buf: &mut Vec<(Key, u32)>, out: &mut Vec<u32>) {
        buf.clear();
        buf.extend(self.cands(unit).iter().map(|c| (self.key_in(c, m, unit), c.device)));
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

    pub fn place(&self, m: Vec<u64>) -> Layout {
        let mut l = Layout {
            m,
            members: vec![NONE; self.units * self.size],
            load: vec![0; self.n()],
            home: Vec::new(),
            cost: 0,
            steps: 0,
            bad: 0,
        };
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for unit in 0..self.units {
            self.greedy(unit, &l.m, &mut buf, &mut out);
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

    fn at_home(&self, l: &Layout, unit: usize, d: u32) -> bool {
        l.home.is_empty() || l.home[unit * self.size..(unit + 1) * self.size].contains(&self.ids[d as usize])
    }

    fn move_cost(&self, l: &Layout, unit: usize, from: u32, to: u32) -> i64 {
        i64::from(!self.at_home(l, unit, to)) - i64::from(!self.at_home(l, unit, from))
    }

    fn do_move(&self, l: &mut Layout, unit: usize, from: u32, to: u32) {
        let slot = (unit * self.size..(unit + 1) * self.size).find(|&s| l.members[s] == from).expect("member");
        l.cost += self.move_cost(l, unit, from, to);
        l.members[slot] = to;
        l.load[from as usize] -= 1;
        l.load[to as usize] += 1;
    }

    fn replacement(&self, l: &Layout, unit: usize, v: u32) -> Option<(Key, u32)> {
        let slots = self.slots(l, unit);
        let mut best: Option<(Key, u32)> = None;
        for c in self.cands(unit) {
            if slots.contains(&c.device) {
                continue;
            }
            let dom = self.domain[c.device as usize];
            if slots.iter().any(|&o| o != NONE && o != v && self.domain[o as usize] == dom) {
                continue;
            }
            let k = self.key_in(c, &l.m, unit);
            if best.is_none_or(|b| k < b.0) {
                best = Some((k, c.device));
            }
        }
        best
    }

    fn displaced(&self, l: &Layout, unit: usize, u: u32) -> Option<(Key, u32)> {
        let slots = self.slots(l, unit);
        let dom = self.domain[u as usize];
        if let Some(&x) = slots.iter().find(|&&d| d != NONE && self.domain[d as usize] == dom) {
            return Some((self.key_in(self.cand_of(unit, x), &l.m, unit), x));
        }
        if slots.contains(&NONE) {
            return None;
        }
        slots.iter().map(|&d| (self.key_in(self.cand_of(unit, d), &l.m, unit), d)).max()
    }

    /// Device push hops of v: per class, the nearest unit it would lose.
    pub fn push_hops(&self, l: &Layout, v: u32) -> Vec<Hop> {
        let mut best: Vec<Option<Hop>> = vec![None; self.k];
        for r in &self.rank[v as usize] {
            let unit = r.unit as usize;
            if !self.slots(l, unit).contains(&v) {
                continue;
            }
            let Some((kr, rep)) = self.replacement(l, unit, v) else { continue };
            let sd = u128::from(r.score) * u128::from(l.m[self.dprice_index(self.domain[v as usize] as usize, unit)]);
            let th = u64::try_from(kr.0 / sd + 1).unwrap_or(u64::MAX);
            let c = self.class(r.hash);
            if best[c].is_none_or(|b| (th, unit as u32) < (b.th, b.unit)) {
                best[c] = Some(Hop { from: v, to: rep, unit: unit as u32, mover: v, class: c as u32, th });
            }
        }
        best.into_iter().flatten().collect()
    }

    /// Device pull hops of u: per class, the nearest unit it would gain.
    pub fn pull_hops(&self, l: &Layout, u: u32) -> Vec<Hop> {
        let mut best: Vec<Option<Hop>> = vec![None; self.k];
        for r in &self.rank[u as usize] {
            let unit = r.unit as usize;
            if self.slots(l, unit).contains(&u) {
                continue;
            }
            let Some((kx, x)) = self.displaced(l, unit, u) else { continue };
            if kx.0 <= 1 {
                continue;
            }
            let sd = u128::from(r.score) * u128::from(l.m[self.dprice_index(self.domain[u as usize] as usize, unit)]);
            let th = u64::try_from((kx.0 - 1) / sd).unwrap_or(u64::MAX);
            if th == 0 {
                continue;
            }
            let c = self.class(r.hash);
            if best[c].is_none_or(|b| th > b.th || (th == b.th && (unit as u32) < b.unit)) {
                best[c] = Some(Hop { from: x, to: u, unit: unit as u32, mover: u, class: c as u32, th });
            }
        }
        best.into_iter().flatten().collect()
    }

    /// Domain pull hops of h (h captures a unit it lacks): per dclass.
    pub fn dpull_hops(&self, l: &Layout, h: usize) -> Vec<Hop> {
        let mut best: Vec<Option<Hop>> = vec![None; self.k];
        for &unit in &self.dunits[h] {
            let unit = unit as usize;
            let slots = self.slots(l, unit);
            if slots.contains(&NONE) || slots.iter().any(|&x| self.domain[x as usize] as usize == h) {
                continue;
            }
            let Some((_, b)) = self
                .cands(unit)
                .iter()
                .filter(|c| self.domain[c.device as usize] as usize == h)
                .map(|c| (self.key_in(c, &l.m, unit), c.device))
                .min()
            else {
                continue;
            };
            let (kw, w) = slots.iter().map(|&d| (self.key_in(self.cand_of(unit, d), &l.m, unit), d)).max().expect("full");
            let base = self.base(self.cand_of(unit, b), &l.m);
            if kw.0 <= 1 {
                continue;
            }
            let th = u64::try_from((kw.0 - 1) / base).unwrap_or(u64::MAX);
            if th == 0 {
                continue;
            }
            let c = self.dclass(h, unit);
            if best[c].is_none_or(|e| th > e.th || (th == e.th && (unit as u32) < e.unit)) {
                best[c] = Some(Hop { from: w, to: b, unit: unit as u32, mover: (self.n() + h) as u32, class: c as u32, th });
            }
        }
        best.into_iter().flatten().collect()
    }

    /// Domain push hops of h (h leaves a unit): per dclass.
    pub fn dpush_hops(&self, l: &Layout, h: usize) -> Vec<Hop> {
        let mut best: Vec<Option<Hop>> = vec![None; self.k];
        for &unit in &self.dunits[h] {
            let unit = unit as usize;
            let slots = self.slots(l, unit);
            let Some(&x) = slots.iter().find(|&&x| x != NONE && self.domain[x as usize] as usize == h) else {
                continue;
            };
            let Some((kr, r)) = self
                .cands(unit)
                .iter()
                .filter(|c| {
                    let dom = self.domain[c.device as usize];
                    !slots.iter().any(|&y| y != NONE && self.domain[y as usize] == dom)
                })
                .map(|c| (self.key_in(c, &l.m, unit), c.device))
                .min()
            else {
                continue;
            };
            let base = self.base(self.cand_of(unit, x), &l.m);
            let th = u64::try_from(kr.0 / base + 1).unwrap_or(u64::MAX);
            let c = self.dclass(h, unit);
            if best[c].is_none_or(|e| (th, unit as u32) < (e.th, e.unit)) {
                best[c] = Some(Hop { from: x, to: r, unit: unit as u32, mover: (self.n() + h) as u32, class: c as u32, th });
            }
        }
        best.into_iter().flatten().collect()
    }

    /// Applies the price step of a hop exactly (every unit of the class that crosses moves).
    pub fn apply(&self, l: &mut Layout, mover: u32, class: usize, price: u64) -> u32 {
        l.steps += 1;
        if (mover as usize) < self.n() {
            let v = mover;
            let index = v as usize * self.k + class;
            let old = l.m[index];
            l.m[index] = price;
            let mut changed = 0;
            for r in &self.rank[v as usize] {
                if self.class(r.hash) != class {
                    continue;
                }
                let unit = r.unit as usize;
                let kv = (
                    u128::from(r.score) * u128::from(price) * u128::from(l.m[self.dprice_index(self.domain[v as usize] as usize, unit)]),
                    r.hash,
                    self.ids[v as usize],
                );
                let member = self.slots(l, unit).contains(&v);
                if price > old && member {
                    if let Some((kr, rep)) = self.replacement(l, unit, v)
                        && kv > kr
                    {
                        self.do_move(l, unit, v, rep);
                        changed += 1;
                    }
                } else if price < old && !member {
                    if let Some((kx, x)) = self.displaced(l, unit, v)
                        && kv < kx
                    {
                        self.do_move(l, unit, x, v);
                        changed += 1;
                    }
                }
            }
            changed
        } else {
            let h = mover as usize - self.n();
            let index = self.n() * self.k + h * self.k + class;
            let old = l.m[index];
            l.m[index] = price;
            let mut changed = 0;
            for &unit in &self.dunits[h] {
                let unit = unit as usize;
                if self.dclass(h, unit) != class {
                    continue;
                }
                let slots: Vec<u32> = self.slots(l, unit).to_vec();
                if slots.contains(&NONE) {
                    continue;
                }
                let present = slots.iter().copied().find(|&x| self.domain[x as usize] as usize == h);
                if price < old && present.is_none() {
                    let Some((kb, b)) = self
                        .cands(unit)
                        .iter()
                        .filter(|c| self.domain[c.device as usize] as usize == h)
                        .map(|c| (self.key_in(c, &l.m, unit), c.device))
                        .min()
                    else {
                        continue;
                    };
                    let (kw, w) = slots.iter().map(|&d| (self.key_in(self.cand_of(unit, d), &l.m, unit), d)).max().expect("full");
                    if kb < kw {
                        self.do_move(l, unit, w, b);
                        changed += 1;
                    }
                } else if price > old
                    && let Some(x) = present
                {
                    let Some((kr, r)) = self
                        .cands(unit)
                        .iter()
                        .filter(|c| {
                            let dom = self.domain[c.device as usize];
                            !slots.iter().any(|&y| self.domain[y as usize] == dom)
                        })
                        .map(|c| (self.key_in(c, &l.m, unit), c.device))
                        .min()
                    else {
                        continue;
                    };
                    let kx = self.key_in(self.cand_of(unit, x), &l.m, unit);
                    if kx > kr {
                        self.do_move(l, unit, x, r);
                        changed += 1;
                    }
                }
            }
            changed
        }
    }

    fn fill(&self, l: &Layout, d: u32) -> i128 {
        let t = &self.targets[d as usize];
        ((l.load[d as usize] as i128) * t.denominator as i128 - t.numerator as i128) * (1 << 20) / t.denominator as i128
    }

    fn dfill(&self, l: &Layout, h: usize) -> i128 {
        self.dom_devices[h].iter().filter(|&&x| !self.leaving[x as usize]).map(|&x| self.fill(l, x)).sum::<i128>()
            + self.dom_devices[h].iter().filter(|&&x| self.leaving[x as usize]).map(|&x| (l.load[x as usize] as i128) << 20).sum::<i128>()
    }

    /// Change of Φ = Σ fill² + λ Σ dfill² when one unit goes from `from` to `to` (scaled).
    fn delta(&self, l: &Layout, from: u32, to: u32) -> i128 {
        let one: i128 = 1 << 20;
        let mut d = 2 * (self.fill(l, to) - self.fill(l, from)) + 2 * one;
        let (a, b) = (self.domain[from as usize] as usize, self.domain[to as usize] as usize);
        if a != b {
            let lambda = std::env::var("LAMBDA").ok().and_then(|s| s.parse::<i128>().ok()).unwrap_or(1);
            d += lambda * (2 * (self.dfill(l, b) - self.dfill(l, a)) + 2 * one);
        }
        d
    }

    fn violation(&self, l: &Layout, d: usize, tight: bool) -> i64 {
        let (lo, hi) = self.band(d, tight);
        (lo - l.load[d]).max(0) + (l.load[d] - hi).max(0)
    }

    /// All hops, grouped: hops[i] for every device/domain mover.
    fn all_hops(&self, l: &Layout, domains: bool) -> Vec<Hop> {
        let mut hops = Vec::new();
        for d in 0..self.n() as u32 {
            hops.extend(self.push_hops(l, d));
            hops.extend(self.pull_hops(l, d));
        }
        if domains {
            for h in 0..self.ndom {
                hops.extend(self.dpush_hops(l, h));
                hops.extend(self.dpull_hops(l, h));
            }
        }
        hops
    }

    /// Min-cost path of hops from root (over: units flow out of root; under: into root).
    fn fix_root(&self, l: &mut Layout, root: u32, over: bool, tight: bool, depth: usize, domains: bool) -> bool {
        let hops = self.all_hops(l, domains);
        let n = self.n();
        // adjacency: over: by from; under: by to
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, h) in hops.iter().enumerate() {
            let key = if over { h.from } else { h.to };
            adj[key as usize].push(i);
        }
        struct Node {
            device: u32,
            parent: usize,
            hop: usize,
            cost: i64,
            depth: usize,
            blocked: Vec<(u32, u32)>,
        }
        let mut nodes: Vec<Node> = vec![Node { device: root, parent: usize::MAX, hop: usize::MAX, cost: 0, depth: 0, blocked: Vec::new() }];
        let mut best_at: Vec<Option<(i64, usize)>> = vec![None; n];
        best_at[root as usize] = Some((0, 0));
        let mut head = 0;
        let mut goals: Vec<usize> = Vec::new();
        while head < nodes.len() {
            let (y, cost, dep) = (nodes[head].device, nodes[head].cost, nodes[head].depth);
            if head > 0 {
                let (lo, hi) = self.band(y as usize, tight);
                let good = if over { l.load[y as usize] < hi } else { l.load[y as usize] > lo };
                if good {
                    goals.push(head);
                }
            }
            if dep < depth {
                for &i in &adj[y as usize] {
                    let h = hops[i];
                    if nodes[head].blocked.contains(&(h.mover, h.class)) {
                        continue;
                    }
                    let next = if over { h.to } else { h.from };
                    if next == root {
                        continue;
                    }
                    let c = cost + self.move_cost(l, h.unit as usize, h.from, h.to);
                    if let Some((bc, bd)) = best_at[next as usize]
                        && (bc, bd) <= (c, dep + 1)
                    {
                        continue;
                    }
                    best_at[next as usize] = Some((c, dep + 1));
                    // block the reverse of this hop at `next`: its own device class and its domain class.
                    let cls = self.class(self.cand_of(h.unit as usize, next).hash) as u32;
                    let hd = self.domain[next as usize] as usize;
                    let dcls = self.dclass(hd, h.unit as usize) as u32;
                    let blocked = vec![(next, cls), ((n + hd) as u32, dcls)];
                    nodes.push(Node { device: next, parent: head, hop: i, cost: c, depth: dep + 1, blocked });
                }
            }
            head += 1;
        }
        // choose the goal: min cost, then depth, then best fill for the end.
        let Some(&goal) = goals.iter().min_by_key(|&&g| {
            let end = nodes[g].device;
            let (from, to) = if over { (root, end) } else { (end, root) };
            (nodes[g].cost, self.delta(l, from, to), nodes[g].depth)
        }) else {
            return false;
        };
        let mut path = Vec::new();
        let mut at = goal;
        while nodes[at].parent != usize::MAX {
            path.push(nodes[at].hop);
            at = nodes[at].parent;
        }
        path.reverse();
        // execute with verification
        for &i in &path {
            let planned = hops[i];
            let fresh = if (planned.mover as usize) < n {
                if planned.mover == planned.from { self.push_hops(l, planned.mover) } else { self.pull_hops(l, planned.mover) }
            } else {
                let h = planned.mover as usize - n;
                let is_push = self.domain[planned.from as usize] as usize == h;
                if is_push { self.dpush_hops(l, h) } else { self.dpull_hops(l, h) }
            };
            match fresh.iter().find(|x| x.class == planned.class) {
                Some(x) if x.unit == planned.unit && x.from == planned.from && x.to == planned.to => {
                    self.apply(l, planned.mover, planned.class as usize, x.th);
                }
                _ => return true,
            }
        }
        true
    }

    pub fn fix(&self, l: &mut Layout, tight: bool, depth: usize, domains: bool) {
        let mut skip = vec![false; self.n()];
        let mut iterations = 0u64;
        loop {
            iterations += 1;
            if iterations > 200_000 {
                break;
            }
            let mut worst: Option<(i64, usize, bool)> = None;
            for d in 0..self.n() {
                if skip[d] {
                    continue;
                }
                let v = self.violation(l, d, tight);
                if v > 0 && worst.is_none_or(|w| v > w.0) {
                    worst = Some((v, d, l.load[d] > self.band(d, tight).1));
                }
            }
            let Some((_, d, over)) = worst else { break };
            if self.fix_root(l, d as u32, over, tight, depth, domains) {
                skip.iter_mut().for_each(|s| *s = false);
            } else {
                skip[d] = true;
            }
        }
        l.bad = (0..self.n()).map(|d| self.violation(l, d, tight) as u64).sum();
    }

    pub fn coarse(&self, l: &mut Layout, rounds: u32) {
        for _ in 0..rounds {
            let mut m = l.m.clone();
            for d in 0..self.n() {
                let t = &self.targets[d];
                let load = l.load[d].max(1) as u128;
                for c in 0..self.k {
                    let p = u128::from(m[d * self.k + c]) * load * t.denominator / t.numerator.max(1);
                    let p = (p + u128::from(m[d * self.k + c])) / 2;
                    m[d * self.k + c] = u64::try_from(p).unwrap_or(u64::MAX).max(1);
                }
            }
            *l = self.place(m);
        }
    }

    pub fn scratch(&self, depth: usize, domains: bool) -> Layout {
        let mut m: Vec<u64> = (0..self.n() * self.k).map(|i| neutral(&self.targets[i / self.k])).collect();
        m.extend(std::iter::repeat_n(DPRICE_ONE, self.ndom * self.k));
        let mut l = self.place(m);
        self.coarse(&mut l, 4);
        self.fix(&mut l, true, depth, domains);
        self.fix(&mut l, false, depth, domains);
        l
    }

    /// Incremental: prices from prev (by id / domain key), new devices none; home = prev.
    pub fn incremental(&self, prev: &Engine, pl: &Layout, depth: usize, domains: bool) -> Layout {
        let mut m = vec![PRICE_NONE; self.n() * self.k];
        for d in 0..self.n() {
            if let Some(i) = prev.ids.iter().position(|&x| x == self.ids[d]) {
                m[d * self.k..(d + 1) * self.k].copy_from_slice(&pl.m[i * prev.k..(i + 1) * prev.k]);
            }
        }
        m.extend(std::iter::repeat_n(DPRICE_ONE, self.ndom * self.k));
        for h in 0..self.ndom {
            if let Some(g) = prev.dom_key.iter().position(|&x| x == self.dom_key[h]) {
                let a = self.n() * self.k + h * self.k;
                let b = prev.n() * prev.k + g * prev.k;
                m[a..a + self.k].copy_from_slice(&pl.m[b..b + self.k]);
            }
        }
        let mut l = self.place(m);
        l.home = vec![NONE; self.units * self.size];
        for unit in 0..self.units {
            for s in 0..prev.size {
                let d = pl.members[unit * prev.size + s];
                if d != NONE {
                    l.home[unit * self.size + s] = prev.ids[d as usize];
                }
            }
        }
        // cost of the natural step
        let mut cost = 0;
        for unit in 0..self.units {
            for &d in self.slots(&l, unit) {
                if d != NONE && !self.at_home(&l, unit, d) {
                    cost += 1;
                }
            }
        }
        l.cost = cost;
        self.fix(&mut l, false, depth, domains);
        l
    }

    pub fn check(&self, l: &Layout) {
        let fresh = self.place(l.m.clone());
        assert_eq!(fresh.load, l.load, "loads differ");
        for u in 0..self.units {
            let mut a = fresh.members[u * self.size..(u + 1) * self.size].to_vec();
            let mut b = l.members[u * self.size..(u + 1) * self.size].to_vec();
            a.sort();
            b.sort();
            assert_eq!(a, b, "unit {u}");
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

    fn engine(map: &ClusterMap, leaving: &[Dev], k: usize) -> Engine {
        let pool = map.pool(PoolId(1)).unwrap();
        let keys: Vec<u32> = (0..pool.pgp_num).map(|s| crate::pg::pool_pps(pool, s)).collect();
        Engine::new(pool.size as usize, keys, &devs_of(map, pool), leaving, k)
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

    #[test]
    #[ignore]
    fn proto5_sim() {
        let trials = env_usize("TRIALS", 5) as u32;
        let k = env_usize("K", 16);
        let depth = env_usize("DEPTH", 3);
        let domains = std::env::var("NODOM").is_err();
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
                    let ea = engine(&ma, &[], k);
                    let t1 = t0.elapsed();
                    let la = ea.scratch(depth, domains);
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
                        for (j, ch) in changes.into_iter().enumerate() {
                            let mb = map(racks, hosts, osds, Some(ch), pg, size);
                            let pb = mb.pool(PoolId(1)).unwrap();
                            let now = devs_of(&mb, pb);
                            let leaving: Vec<Dev> = ea.devs.iter().filter(|d| !now.iter().any(|x| x.id == d.id)).copied().collect();
                            let eu = engine(&mb, &leaving, k);
                            let lu = eu.incremental(&ea, &la, depth, domains);
                            // final: the map's engine with the union's prices (leaving dropped)
                            let eb = engine(&mb, &[], k);
                            let mut m = lu.m[..eb.n() * k].to_vec();
                            m.extend_from_slice(&lu.m[eu.n() * k..]);
                            assert_eq!(eb.ndom, eu.ndom, "domains");
                            let lb = eb.place(m);
                            if check {
                                assert_eq!(lu.load[..eb.n()].to_vec(), lb.load, "final differs from the rebalanced layout");
                            }
                            let mv = moved(&ea, &la, &eb, &lb);
                            if std::env::var("DBG4").is_ok() {
                                let (mut ni, mut nx, mut oi, mut ox) = (0, 0, 0, 0);
                                let newid = n;
                                for u in 0..ea.units {
                                    let a: Vec<u32> = la.members[u * ea.size..(u + 1) * ea.size].iter().filter(|&&d| d != NONE).map(|&d| ea.ids[d as usize]).collect();
                                    let b: Vec<u32> = lb.members[u * eb.size..(u + 1) * eb.size].iter().filter(|&&d| d != NONE).map(|&d| eb.ids[d as usize]).collect();
                                    let hostof = |id: u32| if id == newid { trial.wrapping_mul(7) % nh } else { id / osds };
                                    let gone: Vec<u32> = a.iter().copied().filter(|x| !b.contains(x)).collect();
                                    for &x in b.iter().filter(|x| !a.contains(x)) {
                                        let intra = gone.iter().any(|&g| hostof(g) == hostof(x));
                                        if x == newid { if intra { ni += 1 } else { nx += 1 } } else if intra { oi += 1 } else { ox += 1 }
                                    }
                                }
                                eprintln!("{ch:?}: new intra {ni} inter {nx}; other intra {oi} inter {ox}; min {:.1}", minimum(&ma, &mb, lb.load.iter().sum::<i64>() as u64));
                            }
                            let copies = lb.load.iter().sum::<i64>() as u64;
                            if std::env::var("DBG").is_ok() {
                                eprintln!("{ch:?}: moved {mv} cost {} min {:.1} bad {} steps {}", lu.cost, minimum(&ma, &mb, copies), lu.bad, lu.steps);
                            }
                            sums[j].0 += mv as f64;
                            sums[j].1 += minimum(&ma, &mb, copies);
                            sums[j].2 += lu.bad;
                            if !matches!(ch, Change::Reweight(_)) {
                                let loads: Vec<f64> = lb.load.iter().map(|&x| x as f64).collect();
                                worst_stdev = worst_stdev.max(Summary::of(&loads).stdev);
                            }
                        }
                    }
                    let tinc = ti.elapsed() / (3 * trials);
                    println!(
                        "{mapn:>5} {pg:>6} {size} stdev {:.2} max/mean {:.3} bad {} | add {:.2} rem {:.2} rw {:.2} | after {:.2} | bad {} {} {} | engine {:?} base {:?} inc {:?}",
                        s.stdev, s.max_over_mean, la.bad,
                        sums[0].0 / sums[0].1, sums[1].0 / sums[1].1, sums[2].0 / sums[2].1,
                        worst_stdev,
                        sums[0].2, sums[1].2, sums[2].2, t1, t2 - t1, tinc
                    );
                }
            }
        }
    }
}
