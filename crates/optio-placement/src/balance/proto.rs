//! PROTOTYPE (not for commit): incremental per-device scale balancing over rank scores.
#![allow(missing_docs, dead_code)]

use super::rank::{self, Ranked};
use super::targets::{self, Target};
use super::{pool_rule, usable_devices};
use crate::map::{ClusterMap, Pool};

pub const NEUTRAL: u64 = 1 << 24;

#[derive(Clone, Copy, Debug)]
pub struct Cand {
    pub device: u32,
    pub hash: u32,
    pub score: u64,
}

pub struct Engine {
    pub size: usize,
    pub units: usize,
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
}

pub const NONE: u32 = u32::MAX;

#[inline]
fn key(c: &Cand, m: &[u64]) -> (u128, u32, u32) {
    (u128::from(c.score) * u128::from(m[c.device as usize]), c.hash, c.device)
}

impl Engine {
    pub fn new(map: &ClusterMap, pool: &Pool, per_target: u64) -> Engine {
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
                let count = target.numerator.saturating_mul(u128::from(per_target))
                    / target.denominator
                    + 16;
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
            ids: devices.ids,
            domain: devices.domain,
            targets,
            rank: rankings,
            cand_start: count,
            cand,
        }
    }

    pub fn cands(&self, unit: usize) -> &[Cand] {
        &self.cand[self.cand_start[unit] as usize..self.cand_start[unit + 1] as usize]
    }

    /// Greedy picks of `unit` under `m`, excluding `exclude`; returns picks (device indices).
    pub fn greedy(&self, unit: usize, m: &[u64], exclude: u32, buf: &mut Vec<(u128, u32, u32)>, out: &mut Vec<u32>) {
        buf.clear();
        buf.extend(self.cands(unit).iter().filter(|c| c.device != exclude).map(|c| key(c, m)));
        buf.sort_unstable();
        out.clear();
        for &(_, _, d) in buf.iter() {
            if out.len() == self.size {
                break;
            }
            let dom = self.domain[d as usize];
            if out.iter().all(|&o| self.domain[o as usize] != dom) {
                out.push(d);
            }
        }
    }

    pub fn band(&self, d: usize, tight: bool) -> (i64, i64) {
        let t = &self.targets[d];
        if tight {
            (t.floor(), t.ceil())
        } else {
            match std::env::var("BAND").as_deref() {
                Ok("floor") => ((t.floor() - 1).max(0), t.floor() + 1),
                Ok("four") => ((t.floor() - 1).max(0), t.ceil() + 1),
                _ => {
                    // centred: round(t) ± 1
                    let c = ((2 * t.numerator + t.denominator) / (2 * t.denominator)) as i64;
                    ((c - 1).max(0), c + 1)
                }
            }
        }
    }

    pub fn place_all(&self, m: Vec<u64>) -> Layout {
        let mut layout = Layout {
            m,
            members: vec![NONE; self.units * self.size],
            load: vec![0; self.ids.len()],
            steps: 0,
            bad: 0,
        };
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for unit in 0..self.units {
            self.greedy(unit, &layout.m, NONE, &mut buf, &mut out);
            for (i, &d) in out.iter().enumerate() {
                layout.members[unit * self.size + i] = d;
                layout.load[d as usize] += 1;
            }
        }
        layout
    }

    fn is_member(&self, l: &Layout, unit: usize, d: u32) -> bool {
        l.members[unit * self.size..(unit + 1) * self.size].contains(&d)
    }

    fn cand_of(&self, unit: usize, d: u32) -> &Cand {
        self.cands(unit).iter().find(|c| c.device == d).expect("member is a candidate")
    }

    fn ukey(&self, l: &Layout, unit: usize, d: u32) -> (u128, u32, u32) {
        key(self.cand_of(unit, d), &l.m)
    }

    /// Replacement of member `v` in `unit`: best non-member whose domain is free without v.
    fn replacement(&self, l: &Layout, unit: usize, v: u32) -> Option<&Cand> {
        let slots = &l.members[unit * self.size..(unit + 1) * self.size];
        let mut best: Option<(&Cand, (u128, u32, u32))> = None;
        for c in self.cands(unit) {
            if slots.contains(&c.device) {
                continue;
            }
            let dom = self.domain[c.device as usize];
            if slots.iter().any(|&o| o != NONE && o != v && self.domain[o as usize] == dom) {
                continue;
            }
            let k = key(c, &l.m);
            if best.is_none_or(|b| k < b.1) {
                best = Some((c, k));
            }
        }
        best.map(|b| b.0)
    }

    /// The member `u` would displace in `unit` (u not a member).
    fn displaced(&self, l: &Layout, unit: usize, u: u32) -> Option<u32> {
        let slots = &l.members[unit * self.size..(unit + 1) * self.size];
        let dom = self.domain[u as usize];
        if let Some(&x) = slots.iter().find(|&&d| d != NONE && self.domain[d as usize] == dom) {
            return Some(x);
        }
        if slots.contains(&NONE) {
            return None;
        }
        slots.iter().copied().max_by_key(|&d| self.ukey(l, unit, d))
    }

    /// Smallest m' > m_v at which v loses a unit: (m', unit, recipient).
    pub fn push_edge(&self, l: &Layout, v: u32) -> Option<(u64, usize, u32)> {
        let mut best: Option<(u64, usize, u32)> = None;
        for r in &self.rank[v as usize] {
            let unit = r.unit as usize;
            if !self.is_member(l, unit, v) {
                continue;
            }
            let Some(c) = self.replacement(l, unit, v) else { continue };
            let a_r = u128::from(c.score) * u128::from(l.m[c.device as usize]);
            let mp = u64::try_from(a_r / u128::from(r.score) + 1).unwrap_or(u64::MAX);
            if best.is_none_or(|b| (mp, unit) < (b.0, b.1)) {
                best = Some((mp, unit, c.device));
            }
        }
        best
    }

    /// Largest m' < m_u at which u gains a unit: (m', unit, donor).
    pub fn pull_edge(&self, l: &Layout, u: u32) -> Option<(u64, usize, u32)> {
        let mut best: Option<(u64, usize, u32)> = None;
        for r in &self.rank[u as usize] {
            let unit = r.unit as usize;
            if self.is_member(l, unit, u) {
                continue;
            }
            let Some(x) = self.displaced(l, unit, u) else { continue };
            let a_x = self.ukey(l, unit, x).0;
            if a_x <= 1 {
                continue;
            }
            let mp = u64::try_from((a_x - 1) / u128::from(r.score)).unwrap_or(u64::MAX);
            if mp == 0 {
                continue;
            }
            if best.is_none_or(|b| mp > b.0 || (mp == b.0 && unit < b.1)) {
                best = Some((mp, unit, x));
            }
        }
        best
    }

    /// Sets m_v = m and updates the units that change. Returns units changed.
    pub fn apply(&self, l: &mut Layout, v: u32, m: u64) -> u32 {
        let old = l.m[v as usize];
        l.m[v as usize] = m;
        l.steps += 1;
        let mut changed = 0;
        for r in &self.rank[v as usize] {
            let unit = r.unit as usize;
            let kv = (u128::from(r.score) * u128::from(m), r.hash, v);
            let member = self.is_member(l, unit, v);
            if m > old && member {
                let Some(c) = self.replacement(l, unit, v) else { continue };
                if kv > key(c, &l.m) {
                    let rep = c.device;
                    let slot = (unit * self.size..(unit + 1) * self.size)
                        .find(|&s| l.members[s] == v)
                        .expect("member");
                    l.members[slot] = rep;
                    l.load[v as usize] -= 1;
                    l.load[rep as usize] += 1;
                    changed += 1;
                }
            } else if m < old && !member {
                let Some(x) = self.displaced(l, unit, v) else { continue };
                if kv < self.ukey(l, unit, x) {
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

    fn all_pull(&self, l: &Layout) -> Vec<Option<(u64, usize, u32)>> {
        (0..self.ids.len()).map(|u| self.pull_edge(l, u as u32)).collect()
    }

    fn all_push(&self, l: &Layout) -> Vec<Option<(u64, usize, u32)>> {
        (0..self.ids.len()).map(|u| self.push_edge(l, u as u32)).collect()
    }

    /// BFS over natural edges. Over: forward from o (first hop push or pull-from-o, then
    /// pulls); under: backward into u (first hop u's pull or pushes-into-u, then pushes).
    fn try_fix(&self, l: &mut Layout, o: u32, over: bool, tight: bool, depth: usize) -> bool {
        let n = self.ids.len();
        let good = |l: &Layout, d: u32| {
            let (lo, hi) = self.band(d as usize, tight);
            if over { l.load[d as usize] < hi } else { l.load[d as usize] > lo }
        };
        // edges: for over, takers[y] = devices whose pull takes from y; for under,
        // givers[y] = devices whose push gives to y.
        let edges = if over { self.all_pull(l) } else { self.all_push(l) };
        let mut by_other: Vec<Vec<u32>> = vec![Vec::new(); n];
        for (d, e) in edges.iter().enumerate() {
            if let Some((_, _, other)) = e {
                by_other[*other as usize].push(d as u32);
            }
        }
        // node, parent index, mover
        let mut nodes: Vec<(u32, usize, u32, usize)> = Vec::new(); // (device, parent, mover, depth)
        let mut seen = vec![false; n];
        seen[o as usize] = true;
        let own = if over { self.push_edge(l, o) } else { self.pull_edge(l, o) };
        if let Some((_, _, other)) = own {
            seen[other as usize] = true;
            nodes.push((other, usize::MAX, o, 1));
        }
        for &d in &by_other[o as usize] {
            if !seen[d as usize] {
                seen[d as usize] = true;
                nodes.push((d, usize::MAX, d, 1));
            }
        }
        let mut head = 0;
        let mut found = None;
        while head < nodes.len() {
            let (y, _, _, dep) = nodes[head];
            if good(l, y) {
                found = Some(head);
                break;
            }
            if dep < depth {
                for &d in &by_other[y as usize] {
                    if !seen[d as usize] {
                        seen[d as usize] = true;
                        nodes.push((d, head, d, dep + 1));
                    }
                }
            }
            head += 1;
        }
        let Some(mut at) = found else {
            if std::env::var("DBG3").is_ok() {
                let (lo, hi) = self.band(o as usize, tight);
                eprintln!("bfs fail dev {o} over {over} load {} [{lo},{hi}] reach {:?}", l.load[o as usize],
                    nodes.iter().map(|x| (x.0, l.load[x.0 as usize], x.3)).collect::<Vec<_>>());
            }
            return false
        };
        let mut path = Vec::new();
        loop {
            path.push(at);
            let parent = nodes[at].1;
            if parent == usize::MAX {
                break;
            }
            at = parent;
        }
        path.reverse();
        // execute: each hop moves a unit from prev to node (over) or node to prev (under).
        let mut prev = o;
        for &i in &path {
            let (y, _, mover, _) = nodes[i];
            let edge = if over {
                if mover == prev { self.push_edge(l, mover) } else { self.pull_edge(l, mover) }
            } else if mover == prev {
                self.pull_edge(l, mover)
            } else {
                self.push_edge(l, mover)
            };
            let other = if mover == prev { y } else { prev };
            match edge {
                Some((th, _, x)) if x == other => {
                    self.apply(l, mover, th);
                }
                _ => return true,
            }
            prev = y;
        }
        true
    }

    pub fn fix(&self, l: &mut Layout, tight: bool, limit: u64) -> u64 {
        let mut steps = 0;
        let mut skip = vec![false; self.ids.len()];
        let mut forced = 0;
        while steps < limit {
            let mut worst: Option<(i64, usize, bool)> = None;
            let mut any = false;
            for d in 0..self.ids.len() {
                let (lo, hi) = self.band(d, tight);
                let load = l.load[d];
                let (v, over) = if load > hi {
                    (load - hi, true)
                } else if load < lo {
                    (lo - load, false)
                } else {
                    continue;
                };
                any = true;
                if skip[d] {
                    continue;
                }
                if worst.is_none_or(|w| v > w.0) {
                    worst = Some((v, d, over));
                }
            }
            if !any {
                break;
            }
            let Some((_, d, over)) = worst else {
                // every violator is stuck: force one step on the first
                forced += 1;
                if forced > 50 {
                    break;
                }
                skip.iter_mut().for_each(|s| *s = false);
                let d = (0..self.ids.len())
                    .find(|&d| {
                        let (lo, hi) = self.band(d, tight);
                        l.load[d] > hi || l.load[d] < lo
                    })
                    .expect("any");
                let over = l.load[d] > self.band(d, tight).1;
                let e = if over { self.push_edge(l, d as u32) } else { self.pull_edge(l, d as u32) };
                if let Some((th, _, _)) = e {
                    self.apply(l, d as u32, th);
                }
                steps += 1;
                continue;
            };
            let ok = self.try_fix(l, d as u32, over, tight, 4);
            if ok {
                skip.iter_mut().for_each(|s| *s = false);
            } else {
                skip[d] = true;
                if std::env::var("DBG3").is_ok() {
                    let pe = self.push_edge(l, d as u32);
                    let qe = self.pull_edge(l, d as u32);
                    let (lo, hi) = self.band(d, tight);
                    eprintln!("stuck dev {d} (dom {}) load {} band [{lo},{hi}] m {} push {:?} load {:?} pull {:?} load {:?}", self.domain[d], l.load[d], l.m[d],
                        pe, pe.map(|e| (l.load[e.2 as usize], self.domain[e.2 as usize])), qe, qe.map(|e| (l.load[e.2 as usize], self.domain[e.2 as usize])));
                }
            }
            steps += 1;
        }
        let bad: i64 = (0..self.ids.len())
            .map(|d| {
                let (lo, hi) = self.band(d, tight);
                (lo - l.load[d]).max(0) + (l.load[d] - hi).max(0)
            })
            .sum();
        l.bad += bad as u64;
        if std::env::var("DBG").is_ok() {
            eprintln!("fix: {steps} iterations, {forced} forced, {bad} out of band");
        }
        steps
    }

    /// Coarse multiplicative scaling rounds from scratch.
    pub fn coarse(&self, l: &mut Layout, rounds: u32) {
        for _ in 0..rounds {
            let mut m = l.m.clone();
            for d in 0..self.ids.len() {
                let t = self.targets[d].as_f64();
                let load = l.load[d] as f64;
                if t > 0.0 {
                    let f = (load.max(0.5) / t).powf(0.8);
                    m[d] = ((m[d] as f64) * f).round().max(1.0) as u64;
                }
            }
            *l = self.place_all(m);
        }
    }

    pub fn prev_m(&self, prev: Option<(&Engine, &Layout)>) -> Vec<u64> {
        self.ids
            .iter()
            .map(|id| match prev {
                Some((e, l)) => e.ids.iter().position(|x| x == id).map_or(NEUTRAL, |i| l.m[i]),
                None => NEUTRAL,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::{ClusterMapBuilder, DeviceSpec, PoolSpec};
    use crate::ids::{DeviceId, PoolId, Weight};
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

    fn rebalance(e: &Engine, prev: Option<(&Engine, &Layout)>) -> Layout {
        let m = e.prev_m(prev);
        let mut l = e.place_all(m);
        let dbg = |l: &Layout, what: &str| {
            if std::env::var("DBG").is_ok() {
                let loads: Vec<f64> = l.load.iter().map(|&x| x as f64).collect();
                let s = Summary::of(&loads);
                eprintln!("{what}: stdev {:.2} min {} max {} steps {}", s.stdev, s.min, s.max, l.steps);
            }
        };
        dbg(&l, "natural");
        if prev.is_none() {
            e.coarse(&mut l, 6);
            dbg(&l, "coarse");
            e.fix(&mut l, true, 20_000);
            dbg(&l, "tight");
        }
        e.fix(&mut l, false, 20_000);
        dbg(&l, "wide");
        if std::env::var("CHECK").is_ok() {
            let fresh = e.place_all(l.m.clone());
            assert_eq!(fresh.load, l.load, "incremental loads differ");
            for u in 0..e.units {
                let mut a = fresh.members[u * e.size..(u + 1) * e.size].to_vec();
                let mut b = l.members[u * e.size..(u + 1) * e.size].to_vec();
                a.sort();
                b.sort();
                assert_eq!(a, b, "unit {u}");
            }
        }
        l
    }

    #[test]
    #[ignore]
    fn proto_sim() {
        let trials: u32 = std::env::var("TRIALS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
        let maps: Vec<u32> = std::env::var("MAPS").ok().map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(vec![40, 1000]);
        let pgs: Vec<u32> = std::env::var("PGS").ok().map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(vec![2048, 32768]);
        let sizes: Vec<u32> = std::env::var("SIZES").ok().map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(vec![2, 3]);
        for &mapn in &maps {
            let (racks, hosts, osds) = if mapn == 40 { (0, 4, 10) } else { (10, 10, 10) };
            let n = racks.max(1) * hosts * osds;
            let nh = racks.max(1) * hosts;
            for &pg in &pgs {
                for &size in &sizes {
                    let ma = map(racks, hosts, osds, None, pg, size);
                    let t0 = Instant::now();
                    let ea = Engine::new(&ma, ma.pool(PoolId(1)).unwrap(), 6);
                    let t1 = t0.elapsed();
                    let la = rebalance(&ea, None);
                    let t2 = t0.elapsed();
                    let loads: Vec<f64> = la.load.iter().map(|&x| x as f64).collect();
                    let s = Summary::of(&loads);
                    let mut sums = [(0.0f64, 0.0f64, 0u64); 3];
                    for trial in 0..trials {
                        let changes = [
                            Change::Add(trial.wrapping_mul(7) % nh),
                            Change::Remove((trial.wrapping_mul(37) + 3) % n),
                            Change::Reweight((trial.wrapping_mul(53) + 11) % n),
                        ];
                        for (k, ch) in changes.into_iter().enumerate() {
                            let mb = map(racks, hosts, osds, Some(ch), pg, size);
                            let eb = Engine::new(&mb, mb.pool(PoolId(1)).unwrap(), 6);
                            let lb = rebalance(&eb, Some((&ea, &la)));
                            let mv = moved(&ea, &la, &eb, &lb);
                            let copies = lb.load.iter().sum::<i64>() as u64;
                            sums[k].0 += mv as f64;
                            sums[k].1 += minimum(&ma, &mb, copies);
                            sums[k].2 += lb.bad;
                            let _ = DeviceId(0);
                        }
                    }
                    println!(
                        "{mapn:>5} {pg:>6} {size} stdev {:.2} max/mean {:.3} | add {:.2} rem {:.2} rw {:.2} | bad {} {} {} | engine {:?} base {:?}",
                        s.stdev, s.max_over_mean,
                        sums[0].0 / sums[0].1, sums[1].0 / sums[1].1, sums[2].0 / sums[2].1,
                        sums[0].2, sums[1].2, sums[2].2, t1, t2 - t1
                    );
                }
            }
        }
    }
}
