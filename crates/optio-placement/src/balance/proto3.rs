//! PROTOTYPE 3 (not for commit): per-device, per-class prices over rank scores; BFS over
//! natural threshold moves.
#![allow(missing_docs, dead_code)]

use super::rank::{self, Ranked};
use super::targets::{self, Target};
use super::{pool_rule, usable_devices};
use crate::map::{ClusterMap, Pool};

pub const NEUTRAL: u64 = 1 << 24;
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
                rank::ranking(id, &keys, target, count as usize, &mut scratch)
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
        }
    }

    #[inline]
    pub fn class(&self, hash: u32) -> usize {
        (hash as usize) % self.k
    }

    #[inline]
    pub fn key(&self, c: &Cand, m: &[u64]) -> Key {
        let price = m[c.device as usize * self.k + self.class(c.hash)];
        (u128::from(c.score) * u128::from(price), c.hash, self.ids[c.device as usize])
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
        buf.extend(self.cands(unit).iter().map(|c| (self.key(c, m), c.device)));
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
            let k = self.key(c, &l.m);
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
            return Some((self.key(self.cand_of(unit, x), &l.m), x));
        }
        if slots.contains(&NONE) {
            return None;
        }
        slots.iter().map(|&d| (self.key(self.cand_of(unit, d), &l.m), d)).max()
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
            let th = u64::try_from(kr.0 / u128::from(r.score) + 1).unwrap_or(u64::MAX);
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
            let th = u64::try_from((kx.0 - 1) / u128::from(r.score)).unwrap_or(u64::MAX);
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
            let kv = (u128::from(r.score) * u128::from(m), r.hash, self.ids[v as usize]);
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
            if self.try_fix(l, d as u32, over, tight, depth) {
                skip.iter_mut().for_each(|s| *s = false);
            } else {
                skip[d] = true;
                l.unresolved_iters += 1;
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
        let mut m = vec![NEUTRAL; self.ids.len() * self.k];
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
    fn proto3_sim() {
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
