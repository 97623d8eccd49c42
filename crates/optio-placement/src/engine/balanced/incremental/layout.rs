//! A placement with its prices, kept equal to [`Engine::place_unit`] under those prices while
//! single prices change ("steps"), and the price at which each device or domain would next
//! gain or lose a unit.
//!
//! Why a step moves what it moves: raising the price of device `v` in class `c` only makes
//! `v`'s keys in its class-`c` units worse. In a unit where `v` is a member, the greedy choice
//! then differs only if `v` now loses to its *replacement* — the best non-member whose domain
//! is free without `v` (a sibling in `v`'s domain, or the best device of a domain the unit
//! lacks) — and then exactly `v` leaves and the replacement joins. Lowering it makes `v` join
//! a unit exactly when it beats the member it would *displace* (its domain's member, or the
//! unit's worst member when its domain is absent). A domain price scales all the domain's
//! keys alike: the domain leaves a unit when its member loses to the best device of an
//! absent domain, and joins one when its best device beats the worst member. Each unit
//! changes by at most one device, so [`set_device_price`] and [`set_domain_price`] update the
//! placement exactly, and a price set to the nearest threshold moves exactly one copy.

use super::engine::{Cand, Engine, Key, NONE, Prices, Scratch};
use super::state::{CLASSES, DOMAIN_PRICE_MAX, PRICE_MAX};
use crate::narrow::index32;

/// A placement and its prices.
pub(crate) struct Layout {
    pub prices: Prices,
    /// `size` device indices per unit ([`NONE`] for a missing copy).
    pub members: Vec<u32>,
    /// Per slot, the member's index among the candidates ([`NONE`]: placed by the straw2
    /// fallback, or no member; such slots never move).
    pub member_cands: Vec<u32>,
    /// Copies per device.
    pub load: Vec<i64>,
    /// Copies per domain.
    pub domain_load: Vec<i64>,
    /// The previous placement's device ids per slot, for counting moved copies.
    pub home: Option<Vec<u32>>,
    /// Copies on a device that did not hold them in `home`.
    pub cost: i64,
    /// Price steps taken.
    pub steps: u64,
}

/// One copy moved: (unit, from, to).
pub(crate) type Move = (u32, u32, u32);

/// The members of one unit: device, domain, key (for members placed by price).
pub(crate) struct Members {
    len: usize,
    device: [u32; crate::replica::REPLICAS_MAX],
    domain: [u32; crate::replica::REPLICAS_MAX],
    key: [Option<Key>; crate::replica::REPLICAS_MAX],
    full: bool,
}

impl Members {
    pub(crate) fn of(engine: &Engine, layout: &Layout, unit: usize) -> Members {
        let size = engine.size;
        let mut m = Members {
            len: 0,
            device: [NONE; crate::replica::REPLICAS_MAX],
            domain: [NONE; crate::replica::REPLICAS_MAX],
            key: [None; crate::replica::REPLICAS_MAX],
            full: true,
        };
        for s in unit * size..(unit + 1) * size {
            let d = layout.members[s];
            if d == NONE {
                m.full = false;
                continue;
            }
            m.device[m.len] = d;
            m.domain[m.len] = engine.domain[d as usize];
            let c = layout.member_cands[s];
            m.key[m.len] = (c != NONE).then(|| engine.key(engine.cand_at(c), &layout.prices));
            m.len += 1;
        }
        m
    }

    #[inline]
    pub(crate) fn has_device(&self, d: u32) -> bool {
        self.device[..self.len].contains(&d)
    }

    #[inline]
    pub(crate) fn has_domain(&self, h: u32) -> bool {
        self.domain[..self.len].contains(&h)
    }

    /// The member placed by price in domain `h`.
    fn in_domain(&self, h: u32) -> Option<(Key, u32)> {
        (0..self.len)
            .find(|&i| self.domain[i] == h)
            .and_then(|i| self.key[i].map(|k| (k, self.device[i])))
    }

    /// The worst member of a full unit whose members were all placed by price.
    fn worst(&self) -> Option<(Key, u32)> {
        if !self.full {
            return None;
        }
        let mut worst: Option<(Key, u32)> = None;
        for i in 0..self.len {
            let key = self.key[i]?;
            if worst.is_none_or(|w| key > w.0) {
                worst = Some((key, self.device[i]));
            }
        }
        worst
    }

    /// The key of member `d`, if it was placed by price.
    pub(crate) fn key_of(&self, d: u32) -> Option<Key> {
        (0..self.len).find(|&i| self.device[i] == d).and_then(|i| self.key[i])
    }
}

impl Layout {
    /// The placement of `engine` under `prices`.
    pub(crate) fn new(engine: &Engine, prices: Prices, home: Option<Vec<u32>>) -> Layout {
        let size = engine.size;
        let mut layout = Layout {
            prices,
            members: vec![NONE; engine.units() * size],
            member_cands: vec![NONE; engine.units() * size],
            load: vec![0; engine.devices()],
            domain_load: vec![0; engine.domains()],
            home,
            cost: 0,
            steps: 0,
        };
        let mut scratch = Scratch::default();
        let mut out = Vec::with_capacity(size);
        for unit in 0..engine.units() {
            let ranked = engine.place_unit(unit, &layout.prices, &mut scratch, &mut out);
            for (i, &d) in out.iter().enumerate() {
                let slot = unit * size + i;
                layout.members[slot] = d;
                if i < ranked {
                    layout.member_cands[slot] =
                        engine.cand_index(unit, d).expect("ranked members are candidates");
                }
                layout.load[d as usize] += 1;
                layout.domain_load[engine.domain[d as usize] as usize] += 1;
                if !layout.at_home(engine, unit, d) {
                    layout.cost += 1;
                }
            }
        }
        layout
    }

    /// Whether `d` held `unit` in the previous placement (always, without one).
    #[inline]
    pub(crate) fn at_home(&self, engine: &Engine, unit: usize, d: u32) -> bool {
        match &self.home {
            None => true,
            Some(home) => {
                home[unit * engine.size..(unit + 1) * engine.size].contains(&engine.ids[d as usize])
            }
        }
    }

    /// What moving `unit`'s copy from `from` to `to` adds to [`Layout::cost`]: −1, 0 or 1.
    #[inline]
    pub(crate) fn move_cost(&self, engine: &Engine, unit: usize, from: u32, to: u32) -> i64 {
        i64::from(!self.at_home(engine, unit, to)) - i64::from(!self.at_home(engine, unit, from))
    }

    fn relocate(&mut self, engine: &Engine, unit: usize, from: u32, to: u32) {
        let size = engine.size;
        let slot = (unit * size..(unit + 1) * size)
            .find(|&s| self.members[s] == from)
            .expect("the device leaving a unit is one of its members");
        self.cost += self.move_cost(engine, unit, from, to);
        self.members[slot] = to;
        self.member_cands[slot] =
            engine.cand_index(unit, to).expect("a device joins a unit as its candidate");
        self.load[from as usize] -= 1;
        self.load[to as usize] += 1;
        self.domain_load[engine.domain[from as usize] as usize] -= 1;
        self.domain_load[engine.domain[to as usize] as usize] += 1;
    }
}

/// The best non-member of `unit` whose domain is free once `v` leaves (NONE: no one leaves).
fn replacement_in(
    engine: &Engine,
    prices: &Prices,
    unit: usize,
    m: &Members,
    v: u32,
) -> Option<(Key, u32)> {
    let leaving = engine.domain.get(v as usize).copied().unwrap_or(NONE);
    let mut best: Option<(Key, u32)> = None;
    for index in engine.cand_range(unit) {
        let c = engine.cand_at(index);
        if m.has_device(c.device) {
            continue;
        }
        let h = engine.domain[c.device as usize];
        if h != leaving && m.has_domain(h) {
            continue;
        }
        let key = engine.key(c, prices);
        if best.is_none_or(|b| key < b.0) {
            best = Some((key, c.device));
        }
    }
    best
}

/// The member `u` (not a member) would displace: its domain's member, or the worst member
/// when its domain is absent and the unit is full.
fn displaced_in(engine: &Engine, m: &Members, u: u32) -> Option<(Key, u32)> {
    let h = engine.domain[u as usize];
    if m.has_domain(h) {
        return m.in_domain(h);
    }
    m.worst()
}

/// The best candidate of `unit` in a domain the unit lacks.
fn best_absent(engine: &Engine, prices: &Prices, unit: usize, m: &Members) -> Option<(Key, u32)> {
    replacement_in(engine, prices, unit, m, NONE)
}

/// The best candidate of domain `h` in `unit`.
fn domain_best(engine: &Engine, prices: &Prices, unit: usize, h: u32) -> Option<(Key, Cand)> {
    let mut best: Option<(Key, Cand)> = None;
    for index in engine.cand_range(unit) {
        let c = engine.cand_at(index);
        if engine.domain[c.device as usize] != h {
            continue;
        }
        let key = engine.key(c, prices);
        if best.is_none_or(|b| key < b.0) {
            best = Some((key, *c));
        }
    }
    best
}

/// The price of `c`'s device class at which it would leave `unit` (it is a member placed by
/// price), and who would take its place.
pub(crate) fn push_price(
    engine: &Engine,
    prices: &Prices,
    unit: usize,
    m: &Members,
    c: &Cand,
) -> Option<(u64, u32)> {
    let (kr, r) = replacement_in(engine, prices, unit, m, c.device)?;
    let price = kr.0 / engine.domain_base(c, prices) + 1;
    // A leaving device's prices are dropped afterwards: it may go as high as it must.
    let limit = if engine.leaving[c.device as usize] { u64::MAX } else { PRICE_MAX };
    let price = u64::try_from(price).ok().filter(|p| *p <= limit)?;
    Some((price, r))
}

/// The price of `c`'s device class at which it would join `unit` (it is not a member), and
/// whom it would displace.
pub(crate) fn pull_price(
    engine: &Engine,
    prices: &Prices,
    m: &Members,
    c: &Cand,
) -> Option<(u64, u32)> {
    let (kx, x) = displaced_in(engine, m, c.device)?;
    let price = kx.0.checked_sub(1)? / engine.domain_base(c, prices);
    let price = u64::try_from(price).ok().filter(|p| *p >= 1)?;
    Some((price, x))
}

/// The price of domain `h`'s class at which it would leave `unit`: (price, member, taker).
pub(crate) fn domain_push_price(
    engine: &Engine,
    prices: &Prices,
    unit: usize,
    m: &Members,
    h: u32,
) -> Option<(u64, u32, u32)> {
    let (_, x) = m.in_domain(h)?;
    let (kr, r) = best_absent(engine, prices, unit, m)?;
    let cx = engine.cand_at(engine.cand_index(unit, x)?);
    let price = kr.0 / engine.base(cx, prices) + 1;
    let price = u64::try_from(price).ok().filter(|p| *p <= DOMAIN_PRICE_MAX)?;
    Some((price, x, r))
}

/// The price of domain `h`'s class at which it would join `unit`: (price, worst member, the
/// domain's best device).
pub(crate) fn domain_pull_price(
    engine: &Engine,
    prices: &Prices,
    unit: usize,
    m: &Members,
    h: u32,
) -> Option<(u64, u32, u32)> {
    if m.has_domain(h) {
        return None;
    }
    let (kw, w) = m.worst()?;
    let (_, cb) = domain_best(engine, prices, unit, h)?;
    let price = kw.0.checked_sub(1)? / engine.base(&cb, prices);
    let price = u64::try_from(price).ok().filter(|p| *p >= 1)?;
    Some((price, w, cb.device))
}

/// Sets device `v`'s price of `class` and updates the placement exactly; the copies moved
/// are appended to `moves`.
pub(crate) fn set_device_price(
    engine: &Engine,
    layout: &mut Layout,
    v: u32,
    class: usize,
    price: u64,
    moves: &mut Vec<Move>,
) {
    let index = v as usize * CLASSES + class;
    let old = layout.prices.device[index];
    layout.prices.device[index] = price;
    layout.steps += 1;
    if price == old {
        return;
    }
    for entry in engine.class_entries(v, class) {
        let unit = entry.unit as usize;
        let m = Members::of(engine, layout, unit);
        let kv = engine.key(engine.cand_at(entry.cand), &layout.prices);
        if price > old {
            if m.key_of(v).is_none() {
                continue;
            }
            if let Some((kr, r)) = replacement_in(engine, &layout.prices, unit, &m, v)
                && kv > kr
            {
                layout.relocate(engine, unit, v, r);
                moves.push((index32(unit), v, r));
            }
        } else if !m.has_device(v)
            && let Some((kx, x)) = displaced_in(engine, &m, v)
            && kv < kx
        {
            layout.relocate(engine, unit, x, v);
            moves.push((index32(unit), x, v));
        }
    }
}

/// Sets domain `h`'s price of `class` and updates the placement exactly.
pub(crate) fn set_domain_price(
    engine: &Engine,
    layout: &mut Layout,
    h: u32,
    class: usize,
    price: u64,
    moves: &mut Vec<Move>,
) {
    let index = h as usize * CLASSES + class;
    let old = layout.prices.domain[index];
    layout.prices.domain[index] = price;
    layout.steps += 1;
    if price == old {
        return;
    }
    for &(unit, _) in engine.domain_class_units(h, class) {
        let unit = unit as usize;
        let m = Members::of(engine, layout, unit);
        if price > old {
            let Some((kx, x)) = m.in_domain(h) else { continue };
            if let Some((kr, r)) = best_absent(engine, &layout.prices, unit, &m)
                && kx > kr
            {
                layout.relocate(engine, unit, x, r);
                moves.push((index32(unit), x, r));
            }
        } else if !m.has_domain(h)
            && let Some((kw, w)) = m.worst()
            && let Some((kb, cb)) = domain_best(engine, &layout.prices, unit, h)
            && kb < kw
        {
            layout.relocate(engine, unit, w, cb.device);
            moves.push((index32(unit), w, cb.device));
        }
    }
}
