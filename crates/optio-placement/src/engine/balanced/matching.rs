//! The balanced matching of placement units to devices: a stable matching over the
//! normalised rank scores with per-device caps, then a repair that lifts devices below their
//! floor by taking copies only from devices above theirs.
//!
//! 1. **Matching.** Every (unit, device) pair of the devices' rankings, in increasing score
//!    (ties: ranking hash, device, unit), is accepted when the unit still needs a copy, the
//!    device is below its cap and the unit has no copy in the device's failure domain. This
//!    is the unique stable matching of the units and devices that both rank by the score
//!    ("master list"): it does not depend on any processing order.
//! 2. **Fallback.** A unit that no ranked pair could complete (rare: its domains full) takes
//!    its cheapest devices by straw2 draw that are below their cap and domain-free, and only
//!    if none is, one over its cap.
//! 3. **Shedding.** A device over its cap (only after a fallback) moves its worst copies to
//!    devices below their cap.
//! 4. **Lifting.** A device below its floor, in device order, walks its own ranking and takes
//!    each unit's copy from the member that scores worst among those more than
//!    [`LIFT_DONOR_MARGIN`] above their own floor (and whose domain it can take over), until it
//!    reaches its floor.
//!
//! Steps 3 and 4 never push a device across the other side of its band, so they end.

use super::rank::Ranked;
use super::score;
use crate::narrow::index32;

/// No device.
pub(crate) const NONE: u32 = u32::MAX;
/// A device gives a copy to a device below its floor only while it holds more than its own
/// floor plus this margin: donors stay off their floor, which keeps the spread narrow
/// (measured: stdev 0.6–0.8 instead of 0.7–0.85 with no margin, same movement).
pub(crate) const LIFT_DONOR_MARGIN: i64 = 1;
/// Score of a copy placed by the fallback (worse than any ranked pair).
const FALLBACK_SCORE: u64 = u64::MAX;

/// The input of one matching.
pub(crate) struct Problem<'a> {
    /// Copies per unit.
    pub size: usize,
    /// Units.
    pub units: usize,
    /// The units' keys (pps), for the fallback's straw2 draws.
    pub keys: &'a [u32],
    /// Device ids (hashed by the fallback).
    pub ids: &'a [u32],
    /// Device weights (16.16, > 0), for the fallback.
    pub weights: &'a [u64],
    /// Failure domain of every device.
    pub domain: &'a [u32],
    /// Fewest copies per device.
    pub lower: &'a [i64],
    /// Most copies per device.
    pub upper: &'a [i64],
    /// Every device's ranking, best first.
    pub rankings: &'a [Vec<Ranked>],
}

/// The matching found.
pub(crate) struct Matching {
    /// `size` device indices per unit, best first ([`NONE`] for a missing copy).
    pub members: Vec<u32>,
    /// Copies per device.
    pub load: Vec<i64>,
    /// Copies placed by the fallback.
    pub fallback: u64,
    /// Copies by which devices end outside their band.
    pub unresolved: u64,
}

struct State<'a> {
    problem: &'a Problem<'a>,
    members: Vec<u32>,
    scores: Vec<u64>,
    load: Vec<i64>,
}

impl State<'_> {
    fn slots(&self, unit: usize) -> std::ops::Range<usize> {
        unit * self.problem.size..(unit + 1) * self.problem.size
    }

    /// Whether `unit` may have a copy on `device` instead of the one in `slot` (`None`: in
    /// addition to its copies): not already there, and its domain free.
    fn fits(&self, unit: usize, device: u32, slot: Option<usize>) -> bool {
        let domain = self.problem.domain;
        let wanted = domain[device as usize];
        self.slots(unit).all(|s| {
            let member = self.members[s];
            member == NONE
                || Some(s) == slot
                || (member != device && domain[member as usize] != wanted)
        })
    }

    fn place(&mut self, unit: usize, device: u32, score: u64) -> bool {
        let Some(slot) = self.slots(unit).find(|&s| self.members[s] == NONE) else {
            return false;
        };
        self.members[slot] = device;
        self.scores[slot] = score;
        self.load[device as usize] += 1;
        true
    }

    fn replace(&mut self, slot: usize, device: u32, score: u64) {
        self.load[self.members[slot] as usize] -= 1;
        self.members[slot] = device;
        self.scores[slot] = score;
        self.load[device as usize] += 1;
    }

    fn missing(&self, unit: usize) -> usize {
        self.slots(unit).filter(|&s| self.members[s] == NONE).count()
    }

    /// Devices by increasing straw2 draw for `unit`.
    fn by_draw(&self, unit: usize, costs: &mut Vec<i64>, order: &mut Vec<(i64, u32)>) {
        let p = self.problem;
        score::costs(p.keys[unit], p.ids, p.weights, 0, costs);
        order.clear();
        order.extend(costs.iter().enumerate().map(|(d, &c)| (c, index32(d))));
        order.sort_unstable();
    }
}

/// Runs the four steps.
pub(crate) fn solve(problem: &Problem<'_>) -> Matching {
    let devices = problem.domain.len();
    let size = problem.size;
    let mut state = State {
        problem,
        members: vec![NONE; problem.units * size],
        scores: vec![FALLBACK_SCORE; problem.units * size],
        load: vec![0; devices],
    };
    // 1. The stable matching over the master list.
    let mut pairs: Vec<(u64, u32, u32, u32)> = Vec::new();
    for (device, ranking) in problem.rankings.iter().enumerate() {
        let device = index32(device);
        pairs.extend(ranking.iter().map(|r| (r.score, r.hash, device, r.unit)));
    }
    pairs.sort_unstable();
    let mut needed = problem.units * size;
    for &(score, _, device, unit) in &pairs {
        if needed == 0 {
            break;
        }
        let unit = unit as usize;
        if state.load[device as usize] < problem.upper[device as usize]
            && state.missing(unit) > 0
            && state.fits(unit, device, None)
        {
            state.place(unit, device, score);
            needed -= 1;
        }
    }
    drop(pairs);
    // 2. Fallback for units the ranked pairs did not complete.
    let (mut costs, mut order) = (Vec::new(), Vec::new());
    let mut fallback = 0u64;
    for unit in 0..problem.units {
        if state.missing(unit) == 0 {
            continue;
        }
        state.by_draw(unit, &mut costs, &mut order);
        for over_cap in [false, true] {
            for &(_, device) in &order {
                if state.missing(unit) == 0 {
                    break;
                }
                let room = state.load[device as usize] < problem.upper[device as usize];
                if (room || over_cap) && state.fits(unit, device, None) {
                    state.place(unit, device, FALLBACK_SCORE);
                    fallback += 1;
                }
            }
        }
    }
    // 3. Shedding: devices over their cap move their worst copies to devices with room.
    if fallback > 0 {
        shed(&mut state, &mut costs, &mut order);
    }
    // 4. Lifting, in device order.
    for device in 0..devices {
        lift(&mut state, index32(device));
    }
    let unresolved = (0..devices)
        .map(|d| {
            let load = state.load[d];
            ((problem.lower[d] - load).max(0) + (load - problem.upper[d]).max(0)) as u64
        })
        .sum();
    // Best first within each unit (missing copies last).
    for unit in 0..problem.units {
        let range = state.slots(unit);
        let mut pairs: Vec<(u64, u32)> = state.scores[range.clone()]
            .iter()
            .zip(&state.members[range.clone()])
            .map(|(&s, &d)| (if d == NONE { u64::MAX } else { s }, d))
            .collect();
        pairs.sort_unstable_by_key(|&(s, d)| (d == NONE, s, d));
        for (slot, (_, device)) in range.zip(pairs) {
            state.members[slot] = device;
        }
    }
    Matching { members: state.members, load: state.load, fallback, unresolved }
}

fn shed(state: &mut State<'_>, costs: &mut Vec<i64>, order: &mut Vec<(i64, u32)>) {
    let problem = state.problem;
    for device in 0..problem.domain.len() {
        while state.load[device] > problem.upper[device] {
            // Its copies, worst first.
            let mut held: Vec<(u64, usize)> = (0..state.members.len())
                .filter(|&s| state.members[s] == index32(device))
                .map(|s| (state.scores[s], s))
                .collect();
            held.sort_unstable_by(|a, b| b.cmp(a));
            let mut moved = false;
            for &(_, slot) in &held {
                let unit = slot / problem.size;
                state.by_draw(unit, costs, order);
                let target = order.iter().map(|&(_, d)| d).find(|&d| {
                    state.load[d as usize] < problem.upper[d as usize]
                        && state.fits(unit, d, Some(slot))
                });
                if let Some(target) = target {
                    state.replace(slot, target, FALLBACK_SCORE);
                    moved = true;
                    break;
                }
            }
            if !moved {
                break;
            }
        }
    }
}

fn lift(state: &mut State<'_>, device: u32) {
    let problem = state.problem;
    let d = device as usize;
    if state.load[d] >= problem.lower[d] {
        return;
    }
    for ranked in &problem.rankings[d] {
        if state.load[d] >= problem.lower[d] {
            return;
        }
        let unit = ranked.unit as usize;
        if state.slots(unit).any(|s| state.members[s] == device) {
            continue;
        }
        // The member to take over: above its floor, replaceable without a domain clash,
        // scoring worst for the unit (ties: the higher device index).
        let mut best: Option<(u64, u32, usize)> = None;
        for slot in state.slots(unit) {
            let member = state.members[slot];
            if member == NONE
                || state.load[member as usize] <= problem.lower[member as usize] + LIFT_DONOR_MARGIN
                || !state.fits(unit, device, Some(slot))
            {
                continue;
            }
            let key = (state.scores[slot], member, slot);
            if best.is_none_or(|b| (key.0, key.1) > (b.0, b.1)) {
                best = Some(key);
            }
        }
        if let Some((_, _, slot)) = best {
            state.replace(slot, device, ranked.score);
        }
    }
}
