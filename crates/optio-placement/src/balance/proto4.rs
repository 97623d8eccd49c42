//! PROTOTYPE 4 (not for commit): per-device, per-class prices over rank scores; BFS over
//! natural threshold moves.
#![allow(missing_docs, dead_code)]

use super::rank::{self, Ranked};
use super::targets::{self, Target};
use super::{pool_rule, usable_devices};
use crate::map::{ClusterMap, Pool};

pub const PRICE_ONE: u128 = 1 << 40;
pub const PRICE_NONE: u64 = u64::MAX >> 8;
pub const DPRICE_ONE: u64 = 1 << 20;

pub fn neutral(t: &Target) -> u64 {
    u64::try_from(PRICE_ONE * t.denominator / t.numerator.max(1)).unwrap_or(PRICE_NONE).clamp(1, PRICE_NONE)
}
pub const NONE: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
pub struct Cand {
    pub device: u32,
    pub hash: u32,
    pub score: u64,
}

pub type Key = (u128, u32, u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub th: u64,
    pub unit: u32,
    pub partner: u32,
}

pub struct Engine {
    pub size: usize,
    pub units: usize,
    pub k: usize,
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
    pub steps: u64,
    pub bad: u64,
    pub unresolved_iters: u64,
}

impl Engine {
    pub fn new(map: &ClusterMap, pool: &Pool, k: usize) -> Engine {
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
        let rankings: Vec<Vec<Ranked>> = devices
            .ids
            .iter()
            .zip(&targets)
            .map(|(&id, target)| {
                let count = target.numerator.saturating_mul(6) / target.denominator + 16;
                let mut r = rank::ranking(id, &keys, target, count as usize, &mut scratch);
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
        let ndom = devices.domain_count;
        let mut dom_key = vec![0i64; ndom];
        let mut dom_devices: Vec<Vec<u32>> = vec![Vec::new(); ndom];
        for (d, &id) in devices.ids.iter().enumerate() {
            let h = devices.domain[d] as usize;
            dom_devices[h].push(d as u32);
            dom_key[h] = match map.ancestor_of_type(crate::ids::ItemId::from(crate::ids::DeviceId(id)), domain_type) {
                Some(b) if domain_type != crate::ids::TypeId(0) => i64::from(b.id.0),
                _ => i64::from(id),
            };
        }
        let mut dunits: Vec<Vec<u32>> = vec![Vec::new(); ndom];
        for (d, r) in rankings.iter().enumerate() {
            dunits[devices.domain[d] as usize].extend(r.iter().map(|x| x.unit));
        }
        for u in &mut dunits {
            u.sort_unstable();
            u.dedup();
        }
        Engine {
            size,
            units,
            k,
            ids: devices.ids,
            domain: devices.domain,
            targets,
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
        self.ids.len() * self.k + h * self.k + self.dclass(h, unit)
    }

    /// score × device price (without the domain price).
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
        let t = &self.targets[d];
        if tight {
            return (t.floor(), t.ceil());
        }
        match std::env::var("BAND").as_deref() {
            Ok("floor") => ((t.floor() - 1).max(0), t.floor() + 1),
            Ok("four") => ((t.floor() - 1).max(0), t.ceil() + 1),
            _ => {
                let c = ((2 * t.numerator + t.denominator) / (2 * t.denominator)) as i64;
                ((c - 1).max(0), c + 1)
            }
        }
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
            load: vec![0; self.ids.len()],
            steps: 0,
            bad: 0,
            unresolved_iters: 0,
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

    /// Per class: the smallest price above the current at which v loses a unit.
    pub fn push_edges(&self, l: &Layout, v: u32) -> Vec<Option<Edge>> {
        let mut best: Vec<Option<Edge>> = vec![None; self.k];
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
                best[c] = Some(Edge { th, unit: unit as u32, partner: rep });
            }
        }
        best
    }

    /// Per class: the largest price below the current at which u gains a unit.
    pub fn pull_edges(&self, l: &Layout, u: u32) -> Vec<Option<Edge>> {
        let mut best: Vec<Option<Edge>> = vec![None; self.k];
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
                best[c] = Some(Edge { th, unit: unit as u32, partner: x });
            }
        }
        best
    }

    /// Sets the price of (v, class) and updates the units that change.
    pub fn apply(&self, l: &mut Layout, v: u32, class: usize, m: u64) -> u32 {
        let index = v as usize * self.k + class;
        let old = l.m[index];
        l.m[index] = m;
        l.steps += 1;
        let mut changed = 0;
        for r in &self.rank[v as usize] {
            if self.class(r.hash) != class {
                continue;
            }
            let unit = r.unit as usize;
            let kv = (u128::from(r.score) * u128::from(m) * u128::from(l.m[self.dprice_index(self.domain[v as usize] as usize, unit)]), r.hash, self.ids[v as usize]);
            let member = self.slots(l, unit).contains(&v);
            if m > old && member {
                let Some((kr, rep)) = self.replacement(l, unit, v) else { continue };
                if kv > kr {
                    let slot = (unit * self.size..(unit + 1) * self.size)
                        .find(|&s| l.members[s] == v)
                        .expect("member");
                    l.members[slot] = rep;
                    l.load[v as usize] -= 1;
                    l.load[rep as usize] += 1;
                    changed += 1;
                }
            } else if m < old && !member {
                let Some((kx, x)) = self.displaced(l, unit, v) else { continue };
                if kv < kx {
                    let slot = (unit * self.size..(unit + 1) * self.size)
                        .find(|&s| l.members[s] == x)
                        .expect("member");
                    l.members[slot] = v;
                    l.load[x as usize] -= 1;
                    l.load[v as usize] += 1;
                    changed += 1;
                }
            }
        }
        changed
    }

    fn class_of(&self, unit: u32, d: u32) -> usize {
        self.class(self.cand_of(unit as usize, d).hash)
    }

    /// BFS over natural threshold moves; see module docs.
    fn try_fix(&self, l: &mut Layout, root: u32, over: bool, tight: bool, depth: usize) -> bool {
        let n = self.ids.len();
        let good = |l: &Layout, d: u32| {
            let (lo, hi) = self.band(d as usize, tight);
            if over { l.load[d as usize] < hi } else { l.load[d as usize] > lo }
        };
        let pushes: Vec<Vec<Option<Edge>>> = (0..n).map(|d| self.push_edges(l, d as u32)).collect();
        let pulls: Vec<Vec<Option<Edge>>> = (0..n).map(|d| self.pull_edges(l, d as u32)).collect();
        // Over: a unit travels root -> y via y's own... For over: own moves are pushes (mover =
        // holder), others' are pulls (mover = receiver). For under: own moves are pulls (mover
        // = receiver), others' are pushes (mover = holder).
        let (own, others) = if over { (&pushes, &pulls) } else { (&pulls, &pushes) };
        let mut by_partner: Vec<Vec<(u32, usize)>> = vec![Vec::new(); n];
        for (d, edges) in others.iter().enumerate() {
            for (c, e) in edges.iter().enumerate() {
                if let Some(e) = e {
                    by_partner[e.partner as usize].push((d as u32, c));
                }
            }
        }
        // (device, blocked class, parent, mover, class, unit, depth)
        struct Node {
            device: u32,
            blocked: usize,
            parent: usize,
            mover: u32,
            class: usize,
            unit: u32,
            depth: usize,
        }
        let mut nodes: Vec<Node> = Vec::new();
        let mut seen = vec![false; n];
        seen[root as usize] = true;
        let expand = |nodes: &mut Vec<Node>, seen: &mut Vec<bool>, y: u32, blocked: usize, parent: usize, dep: usize| {
            for (c, e) in own[y as usize].iter().enumerate() {
                if c == blocked {
                    continue;
                }
                if let Some(e) = e
                    && !seen[e.partner as usize]
                {
                    seen[e.partner as usize] = true;
                    let blocked = self.class_of(e.unit, e.partner);
                    nodes.push(Node { device: e.partner, blocked, parent, mover: y, class: c, unit: e.unit, depth: dep });
                }
            }
            for &(d, c) in &by_partner[y as usize] {
                if !seen[d as usize] {
                    seen[d as usize] = true;
                    let e = others[d as usize][c].expect("edge");
                    nodes.push(Node { device: d, blocked: c, parent, mover: d, class: c, unit: e.unit, depth: dep });
                }
            }
        };
        expand(&mut nodes, &mut seen, root, usize::MAX, usize::MAX, 1);
        let mut head = 0;
        let mut found = None;
        while head < nodes.len() {
            let (y, blocked, dep) = (nodes[head].device, nodes[head].blocked, nodes[head].depth);
            if good(l, y) {
                found = Some(head);
                break;
            }
            if dep < depth {
                expand(&mut nodes, &mut seen, y, blocked, head, dep + 1);
            }
            head += 1;
        }
        let Some(mut at) = found else { return false };
        let mut path = Vec::new();
        loop {
            path.push(at);
            if nodes[at].parent == usize::MAX {
                break;
            }
            at = nodes[at].parent;
        }
        path.reverse();
        let mut prev = root;
        for &i in &path {
            let node = &nodes[i];
            let own_move = node.mover == prev;
            let edge = if own_move == over {
                self.push_edges(l, node.mover)[node.class]
            } else {
                self.pull_edges(l, node.mover)[node.class]
            };
            let partner = if own_move { node.device } else { prev };
            match edge {
                Some(e) if e.partner == partner && e.unit == node.unit => {
                    self.apply(l, node.mover, node.class, e.th);
                }
                _ => return true,
            }
            prev = node.device;
        }
        true
    }

    /// Relative fill of d: (load - t) scaled, comparable across devices.
    fn fill(&self, l: &Layout, d: u32) -> i128 {
        let t = &self.targets[d as usize];
        // (load - num/den) * 2^20 / 1  ~ compare via (load*den - num) * 2^20 / den
        ((l.load[d as usize] as i128) * t.denominator as i128 - t.numerator as i128) * (1 << 20)
            / t.denominator as i128
    }

    /// Domain pull edges of h per dclass: (new dprice, unit, donor, receiver).
    pub fn dpull_edges(&self, l: &Layout, h: usize) -> Vec<Option<(u64, u32, u32, u32)>> {
        let mut best: Vec<Option<(u64, u32, u32, u32)>> = vec![None; self.k];
        for &unit in &self.dunits[h] {
            let unit = unit as usize;
            let slots = self.slots(l, unit);
            if slots.contains(&NONE) || slots.iter().any(|&x| self.domain[x as usize] as usize == h) {
                continue;
            }
            let Some((b, bc)) = self.cands(unit).iter().filter(|c| self.domain[c.device as usize] as usize == h)
                .map(|c| (c, self.key_in(c, &l.m, unit))).min_by_key(|x| x.1).map(|x| (x.0.device, *x.0)) else { continue };
            let Some((kw, w)) = slots.iter().map(|&d| (self.key_in(self.cand_of(unit, d), &l.m, unit), d)).max() else { continue };
            let base = self.base(&bc, &l.m);
            if kw.0 <= 1 {
                continue;
            }
            let th = u64::try_from((kw.0 - 1) / base).unwrap_or(u64::MAX);
            if th == 0 {
                continue;
            }
            let c = self.dclass(h, unit);
            if best[c].is_none_or(|e| th > e.0 || (th == e.0 && (unit as u32) < e.1)) {
                best[c] = Some((th, unit as u32, w, b));
            }
        }
        best
    }

    /// Domain push edges of h per dclass: (new dprice, unit, donor, receiver).
    pub fn dpush_edges(&self, l: &Layout, h: usize) -> Vec<Option<(u64, u32, u32, u32)>> {
        let mut best: Vec<Option<(u64, u32, u32, u32)>> = vec![None; self.k];
        for &unit in &self.dunits[h] {
            let unit = unit as usize;
            let slots = self.slots(l, unit);
            let Some(&x) = slots.iter().find(|&&x| x != NONE && self.domain[x as usize] as usize == h) else { continue };
            // best candidate of an absent domain
            let Some((kr, r)) = self.cands(unit).iter().filter(|c| {
                let dom = self.domain[c.device as usize];
                !slots.iter().any(|&y| y != NONE && self.domain[y as usize] == dom)
            }).map(|c| (self.key_in(c, &l.m, unit), c.device)).min() else { continue };
            let base = self.base(self.cand_of(unit, x), &l.m);
            let th = u64::try_from(kr.0 / base + 1).unwrap_or(u64::MAX);
            let c = self.dclass(h, unit);
            if best[c].is_none_or(|e| (th, unit as u32) < (e.0, e.1)) {
                best[c] = Some((th, unit as u32, x, r));
            }
        }
        best
    }

    pub fn apply_domain(&self, l: &mut Layout, h: usize, class: usize, price: u64) -> u32 {
        let index = self.ids.len() * self.k + h * self.k + class;
        let old = l.m[index];
        l.m[index] = price;
        l.steps += 1;
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
                let Some((kb, b)) = self.cands(unit).iter().filter(|c| self.domain[c.device as usize] as usize == h)
                    .map(|c| (self.key_in(c, &l.m, unit), c.device)).min() else { continue };
                let (kw, w) = slots.iter().map(|&d| (self.key_in(self.cand_of(unit, d), &l.m, unit), d)).max().expect("full");
                if kb < kw {
                    let slot = (unit * self.size..(unit + 1) * self.size).find(|&s| l.members[s] == w).expect("member");
                    l.members[slot] = b;
                    l.load[w as usize] -= 1;
                    l.load[b as usize] += 1;
                    changed += 1;
                }
            } else if price > old && let Some(x) = present {
                let Some((kr, r)) = self.cands(unit).iter().filter(|c| {
                    let dom = self.domain[c.device as usize];
                    !slots.iter().any(|&y| self.domain[y as usize] == dom)
                }).map(|c| (self.key_in(c, &l.m, unit), c.device)).min() else { continue };
                let kx = self.key_in(self.cand_of(unit, x), &l.m, unit);
                if kx > kr {
                    let slot = (unit * self.size..(unit + 1) * self.size).find(|&s| l.members[s] == x).expect("member");
                    l.members[slot] = r;
                    l.load[x as usize] -= 1;
                    l.load[r as usize] += 1;
                    changed += 1;
                }
            }
        }
        changed
    }

    fn dband(&self, h: usize, tight: bool) -> (i64, i64) {
        let mut lo = 0;
        let mut hi = 0;
        for &d in &self.dom_devices[h] {
            let (a, b) = self.band(d as usize, tight);
            lo += a;
            hi += b;
        }
        (lo, hi)
    }

    /// One domain-level move for a domain outside its band; false if none possible.
    fn steer_domain(&self, l: &mut Layout, h: usize, over: bool, tight: bool) -> bool {
        let edges = if over { self.dpush_edges(l, h) } else { self.dpull_edges(l, h) };
        let mut best: Option<(i128, usize, u64)> = None;
        for (c, e) in edges.iter().enumerate() {
            let Some((th, _, donor, receiver)) = e else { continue };
            let (lo, _) = self.band(*donor as usize, tight);
            let (_, hi) = self.band(*receiver as usize, tight);
            if l.load[*donor as usize] <= lo || l.load[*receiver as usize] >= hi {
                continue;
            }
            let score = self.delta(l, *donor, *receiver);
            if best.is_none_or(|b| score < b.0) {
                best = Some((score, c, *th));
            }
        }
        let Some((_, c, th)) = best else { return false };
        self.apply_domain(l, h, c, th);
        true
    }

    /// Domain fill: (Σ load − Σ t) × 2^20 of d's domain.
    fn dfill(&self, l: &Layout, d: u32) -> i128 {
        let dom = self.domain[d as usize];
        (0..self.ids.len())
            .filter(|&x| self.domain[x] == dom)
            .map(|x| self.fill(l, x as u32))
            .sum()
    }

    /// Change of Φ = Σ fill² + λ Σ dfill² (× 2^-20 scaled) when one unit moves from `from` to `to`.
    fn delta(&self, l: &Layout, from: u32, to: u32) -> i128 {
        let one: i128 = 1 << 20;
        let mut d = 2 * (self.fill(l, to) - self.fill(l, from)) + 2 * one;
        if self.domain[from as usize] != self.domain[to as usize] {
            let lambda = std::env::var("LAMBDA").ok().and_then(|s| s.parse::<i128>().ok()).unwrap_or(1);
            d += lambda * (2 * (self.dfill(l, to) - self.dfill(l, from)) + 2 * one);
        }
        d
    }

    /// Fixes one unit of violation with the device's own move, picking the best partner
    /// among its classes' nearest thresholds.
    fn steer(&self, l: &mut Layout, d: u32, over: bool, tight: bool) -> bool {
        let edges = if over { self.push_edges(l, d) } else { self.pull_edges(l, d) };
        let mut best: Option<(i128, usize, Edge)> = None;
        for (c, e) in edges.iter().enumerate() {
            let Some(e) = e else { continue };
            let (lo, hi) = self.band(e.partner as usize, tight);
            let load = l.load[e.partner as usize];
            let ok = if over { load < hi } else { load > lo };
            if !ok {
                continue;
            }
            let score = if over { self.delta(l, d, e.partner) } else { self.delta(l, e.partner, d) };
            if best.is_none_or(|b| score < b.0) {
                best = Some((score, c, *e));
            }
        }
        // domain options where d is the donor (over) or the receiver (under)
        let mut dbest: Option<(i128, usize, u64)> = None;
        if std::env::var("DOMOPT").is_ok() {
            let h = self.domain[d as usize] as usize;
            let dedges = if over { self.dpush_edges(l, h) } else { self.dpull_edges(l, h) };
            for (c, e) in dedges.iter().enumerate() {
                let Some((th, _, donor, receiver)) = e else { continue };
                let (partner, ok) = if over {
                    (*receiver, *donor == d && l.load[*receiver as usize] < self.band(*receiver as usize, tight).1)
                } else {
                    (*donor, *receiver == d && l.load[*donor as usize] > self.band(*donor as usize, tight).0)
                };
                if !ok {
                    continue;
                }
                let score = if over { self.delta(l, d, partner) } else { self.delta(l, partner, d) };
                if dbest.is_none_or(|b| score < b.0) {
                    dbest = Some((score, c, *th));
                }
            }
        }
        match (best, dbest) {
            (Some((s1, c, e)), Some((s2, _, _))) if s1 <= s2 => { self.apply(l, d, c, e.th); }
            (Some((_, c, e)), None) => { self.apply(l, d, c, e.th); }
            (_, Some((_, c, th))) => { self.apply_domain(l, self.domain[d as usize] as usize, c, th); }
            (None, None) => return false,
        }
        true
    }

    pub fn fix(&self, l: &mut Layout, tight: bool, depth: usize) {
        let mut skip = vec![false; self.ids.len()];
        let mut iterations = 0u64;
        loop {
            iterations += 1;
            if iterations > 100_000 {
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
            let domain_move = |l: &mut Layout| {
                let h = self.domain[d] as usize;
                let (lo, hi) = self.dband(h, tight);
                let load: i64 = self.dom_devices[h].iter().map(|&x| l.load[x as usize]).sum();
                std::env::var("NODOM").is_err()
                    && ((over && load > hi) || (!over && load < lo))
                    && self.steer_domain(l, h, over, tight)
            };
            if self.steer(l, d as u32, over, tight) || self.try_fix(l, d as u32, over, tight, depth) || domain_move(l) {
                skip.iter_mut().for_each(|s| *s = false);
            } else {
                skip[d] = true;
                l.unresolved_iters += 1;
                if std::env::var("DBG3").is_ok() {
                    let (lo, hi) = self.band(d, tight);
                    let edges = if over { self.push_edges(l, d as u32) } else { self.pull_edges(l, d as u32) };
                    eprintln!("stuck {d} dom {} load {} [{lo},{hi}] over {over} edges {:?}", self.domain[d], l.load[d],
                        edges.iter().map(|e| e.map(|e| (e.partner, self.domain[e.partner as usize], l.load[e.partner as usize], e.th))).collect::<Vec<_>>());
                }
            }
        }
        let bad: i64 = (0..self.ids.len())
            .map(|d| {
                let (lo, hi) = self.band(d, tight);
                (lo - l.load[d]).max(0) + (l.load[d] - hi).max(0)
            })
            .sum();
        l.bad = bad as u64;
    }

    pub fn coarse(&self, l: &mut Layout, rounds: u32) {
        for _ in 0..rounds {
            let mut m = l.m.clone();
            for d in 0..self.ids.len() {
                let _ = 0;
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

    pub fn prev_m(&self, prev: Option<(&Engine, &Layout)>) -> Vec<u64> {
        let mut m: Vec<u64> = (0..self.ids.len() * self.k)
            .map(|i| if prev.is_some() { PRICE_NONE } else { neutral(&self.targets[i / self.k]) })
            .collect();
        m.extend(std::iter::repeat_n(DPRICE_ONE, self.ndom * self.k));
        if let Some((e, pl)) = prev {
            for h in 0..self.ndom {
                if let Some(g) = e.dom_key.iter().position(|&x| x == self.dom_key[h]) {
                    let a = self.ids.len() * self.k + h * self.k;
                    let b = e.ids.len() * e.k + g * e.k;
                    m[a..a + self.k].copy_from_slice(&pl.m[b..b + self.k]);
                }
            }
        }
        if let Some((e, pl)) = prev {
            for (d, id) in self.ids.iter().enumerate() {
                if let Some(i) = e.ids.iter().position(|x| x == id) {
                    m[d * self.k..(d + 1) * self.k].copy_from_slice(&pl.m[i * self.k..(i + 1) * self.k]);
                }
            }
        }
        m
    }

    pub fn check(&self, l: &Layout) {
        let fresh = self.place(l.m.clone());
        assert_eq!(fresh.load, l.load, "incremental loads differ");
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
            eprintln!("{what}: stdev {:.2} min {} max {} steps {} bad {} unresolved {}", s.stdev, s.min, s.max, l.steps, l.bad, l.unresolved_iters);
        }
    }

    fn rebalance(e: &Engine, prev: Option<(&Engine, &Layout)>) -> Layout {
        let depth = env_usize("DEPTH", 4);
        let mut l = e.place(e.prev_m(prev));
        dbg(&l, "natural");
        if prev.is_none() {
            e.coarse(&mut l, env_usize("COARSE", 4) as u32);
            dbg(&l, "coarse");
            e.fix(&mut l, true, depth);
            dbg(&l, "tight");
        }
        e.fix(&mut l, false, depth);
        dbg(&l, "wide");
        l
    }

    #[test]
    #[ignore]
    fn proto4_sim() {
        let trials = env_usize("TRIALS", 5) as u32;
        let k = env_usize("K", 4);
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
                    let ea = Engine::new(&ma, ma.pool(PoolId(1)).unwrap(), k);
                    let t1 = t0.elapsed();
                    let la = rebalance(&ea, None);
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
                            let eb = Engine::new(&mb, mb.pool(PoolId(1)).unwrap(), k);
                            let lb = rebalance(&eb, Some((&ea, &la)));
                            if check {
                                eb.check(&lb);
                            }
                            let mv = moved(&ea, &la, &eb, &lb);
                            if std::env::var("DBG4").is_ok() {
                                // classify moves: into which device, from which domain
                                let mut into_new_intra = 0; let mut into_new_inter = 0; let mut other_intra = 0; let mut other_inter = 0;
                                let newid = *eb.ids.iter().max().unwrap();
                                for u in 0..ea.units {
                                    let a: Vec<u32> = la.members[u * ea.size..(u + 1) * ea.size].iter().filter(|&&d| d != NONE).map(|&d| ea.ids[d as usize]).collect();
                                    let b: Vec<u32> = lb.members[u * eb.size..(u + 1) * eb.size].iter().filter(|&&d| d != NONE).map(|&d| eb.ids[d as usize]).collect();
                                    let hostof = |id: u32| if id == newid && matches!(ch, Change::Add(_)) { (trial.wrapping_mul(7) % nh) } else { id / osds };
                                    let gone: Vec<u32> = a.iter().copied().filter(|x| !b.contains(x)).collect();
                                    for &x in b.iter().filter(|x| !a.contains(x)) {
                                        let intra = gone.iter().any(|&g| hostof(g) == hostof(x));
                                        if x == newid && matches!(ch, Change::Add(_)) { if intra { into_new_intra += 1 } else { into_new_inter += 1 } }
                                        else if intra { other_intra += 1 } else { other_inter += 1 }
                                    }
                                }
                                eprintln!("{ch:?}: new intra {into_new_intra} inter {into_new_inter}; other intra {other_intra} inter {other_inter}; min {:.1}", minimum(&ma, &mb, lb.load.iter().sum::<i64>() as u64));
                            }
                            let copies = lb.load.iter().sum::<i64>() as u64;
                            sums[j].0 += mv as f64;
                            sums[j].1 += minimum(&ma, &mb, copies);
                            sums[j].2 += lb.bad;
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
