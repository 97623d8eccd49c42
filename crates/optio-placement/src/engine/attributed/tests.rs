//! The paper's worked examples (sectors of Figure 2, node addition of Figure 5, bandwidth
//! ranges of Figure 3(b), location strategy of Figure 3(c), strategy selection of Figure
//! 4), the compiled ring against a naive reference, and locality of change.

use super::*;
use super::{hash::*, layout::*, slots::*, strategy::*};
use crate::builder::{ClusterMapBuilder, DeviceSpec, EngineRef, PoolSpec};
use crate::crush::hash::hash32_2;
use crate::ids::{DeviceId, ItemId};
use crate::ids::{PoolId, Weight};
use crate::map::ClusterMap;
use crate::map::EngineSpec;
use crate::narrow::index32;
use crate::replica::ReplicaSet;

const GIB: u64 = 1 << 30;

/// Owners A, B, C, D, E (ids 0..5): HDDs at 146 MB/s except C, an SSD at 540 MB/s (class
/// 1); zones: A, B, D zone 0; C, E zone 1.
fn owners() -> Vec<OwnerSpec> {
    let hdd = |device, zone| OwnerSpec { device, zone, class: 0, bandwidth: 146 };
    vec![
        hdd(0, 0),
        hdd(1, 0),
        OwnerSpec { device: 2, zone: 1, class: 1, bandwidth: 540 },
        hdd(3, 0),
        hdd(4, 1),
    ]
}
const A: u32 = 0;
const B: u32 = 1;
const C: u32 = 2;
const D: u32 = 3;
const E: u32 = 4;

/// Positions are written as in the figures (10, 20, …) and spread over the ring.
const SPREAD: u32 = 1 << 24;

fn slot(position: u32, owner: u32) -> SlotSpec {
    SlotSpec { position: position * SPREAD, owner, base: true, state: SlotState::Live }
}

/// The `i`-th test key below figure position `limit`.
fn key_below(i: u32, salt: u32, limit: u32) -> u32 {
    hash32_2(i, salt) % (limit * SPREAD)
}

fn params(sector_size: u32) -> AttributedParams {
    AttributedParams { sector_size, ..AttributedParams::default() }
}

/// Figure 2(b): eleven virtual nodes, sectors of three from position 0: sector 0 ends at
/// A1, sector 1 at B1, sector 2 at C1, and the last sector holds two nodes, D1 last.
fn figure_2() -> Vec<SlotSpec> {
    vec![
        slot(10, B),
        slot(20, D),
        slot(30, A), // A1: the position of sector 0
        slot(40, D),
        slot(50, A),
        slot(60, B), // B1: sector 1
        slot(70, A),
        slot(80, D),
        slot(90, C), // C1: sector 2
        slot(100, B),
        slot(110, D), // D1: the last sector, two nodes
    ]
}

fn devices(ring: &AttributedRing, k: usize) -> Vec<u32> {
    ring.sector_slots(k).iter().map(|(d, _)| d.expect("a device").0).collect()
}

#[test]
fn figure_2_sectors_of_s_consecutive_vnodes_located_by_their_last() {
    let ring = AttributedRing::from_specs(&owners(), figure_2(), &params(3));
    assert_eq!(ring.sector_count(), 4, "⌈11 / 3⌉ sectors");
    let at = |p: u32| p * SPREAD;
    let positions: Vec<u32> = (0..4).filter_map(|k| ring.sector_position(k)).collect();
    assert_eq!(positions, vec![at(30), at(60), at(90), at(110)]);
    assert_eq!(devices(&ring, 0), vec![B, D, A]);
    assert_eq!(devices(&ring, 1), vec![D, A, B]);
    assert_eq!(devices(&ring, 2), vec![A, D, C]);
    assert_eq!(devices(&ring, 3), vec![B, D], "the last sector may be shorter");
    // Figure 2(c): keys go to their first successor sector.
    assert_eq!(ring.sector_of(0), 0);
    assert_eq!(ring.sector_of(at(30)), 0, "a key at A1's position belongs to sector 0");
    assert_eq!(ring.sector_of(at(30) + 1), 1, "x2, past A1, goes to sector 1 (position B1)");
    assert_eq!(ring.sector_of(at(60)), 1);
    assert_eq!(ring.sector_of(at(95)), 3);
    assert_eq!(ring.sector_of(at(110) + 1), 0, "past the last sector the ring wraps");
    assert_eq!(ring.sector_of(u32::MAX), 0);
    // Sectors of all-HDD nodes are homogeneous; sector 2 holds the SSD C1.
    assert!(ring.is_homogeneous(0) && ring.is_homogeneous(1) && ring.is_homogeneous(3));
    assert!(!ring.is_homogeneous(2));
}

#[test]
fn figure_5_a_new_node_merges_into_existing_sectors() {
    let before = AttributedRing::from_specs(&owners(), figure_2(), &params(3));
    let mut slots = figure_2();
    // E1 falls in sector 0's arc, E2 in sector 2's: merged, not new sectors.
    slots.push(SlotSpec { base: false, ..slot(15, E) });
    slots.push(SlotSpec { base: false, ..slot(75, E) });
    let after = AttributedRing::from_specs(&owners(), slots, &params(3));
    assert_eq!(after.sector_count(), 4);
    for k in 0..4 {
        assert_eq!(after.sector_position(k), before.sector_position(k));
    }
    assert_eq!(devices(&after, 0), vec![B, E, D, A]);
    assert_eq!(devices(&after, 2), vec![A, E, D, C]);
    assert_eq!(devices(&after, 1), devices(&before, 1));
    assert_eq!(devices(&after, 3), devices(&before, 3));
    // One replica: only keys of sectors 0 and 2 may move, and only within their sector.
    let (mut x, mut y) = (ReplicaSet::new(), ReplicaSet::new());
    let mut moved = [0u32; 4];
    for i in 0..20_000u32 {
        let key = key_below(i, 7, 120);
        before.place(key, 1, &mut x);
        after.place(key, 1, &mut y);
        let k = before.sector_of(key);
        if x != y {
            moved[k] += 1;
            assert!(k == 0 || k == 2, "key {key} of sector {k} moved: {x:?} → {y:?}");
        }
    }
    assert!(moved[0] > 0 && moved[2] > 0, "{moved:?}");
}

#[test]
fn removal_marks_and_skips_keeping_sector_sizes() {
    let before = AttributedRing::from_specs(&owners(), figure_2(), &params(3));
    let slots: Vec<SlotSpec> = figure_2()
        .into_iter()
        .map(|s| if s.owner == D { SlotSpec { state: SlotState::Marked, ..s } } else { s })
        .collect();
    let after = AttributedRing::from_specs(&owners(), slots, &params(3));
    for k in 0..4 {
        assert_eq!(after.sector_slots(k).len(), before.sector_slots(k).len(), "sector {k}");
    }
    let (mut x, mut y) = (ReplicaSet::new(), ReplicaSet::new());
    for i in 0..20_000u32 {
        let key = key_below(i, 9, 120);
        before.place(key, 2, &mut x);
        after.place(key, 2, &mut y);
        assert!(!y.contains(DeviceId(D)), "key {key}: the removed node was chosen");
        // In homogeneous sectors (0, 1, 3) only D's keys move: the modulus keeps s.
        let k = before.sector_of(key);
        if k != 2 && x.as_slice()[0] != D as i32 {
            assert_eq!(x.as_slice()[0], y.as_slice()[0], "key {key} of sector {k}");
        }
    }
}

#[test]
fn figure_3b_one_bandwidth_range_per_physical_node() {
    // A1, B1, A2, C1 with min bandwidth 146: A [0, 1), B [1, 2.5), C [2.5, 4.5).
    let owners = vec![
        OwnerSpec { device: 0, zone: 0, class: 0, bandwidth: 146 },
        OwnerSpec { device: 1, zone: 1, class: 0, bandwidth: 219 },
        OwnerSpec { device: 2, zone: 2, class: 1, bandwidth: 292 },
    ];
    let slots = vec![slot(10, 0), slot(20, 1), slot(30, 0), slot(40, 2)];
    let ring = AttributedRing::from_specs(&owners, slots, &params(4));
    assert!(!ring.is_homogeneous(0));
    let ranges = ring.sector_ranges(0);
    let min = ranges.iter().map(|(_, s, e)| e - s).min().expect("ranges");
    let in_units: Vec<(u32, f64, f64)> = ranges
        .iter()
        .map(|(d, s, e)| (d.0, *s as f64 / min as f64, *e as f64 / min as f64))
        .collect();
    assert_eq!(in_units, vec![(0, 0.0, 1.0), (1, 1.0, 2.5), (2, 2.5, 4.5)]);
    // Draws fall in proportion to bandwidth: A 2/9, B 3/9, C 4/9 of single replicas.
    let mut counts = [0u32; 3];
    let mut out = ReplicaSet::new();
    for i in 0..90_000u32 {
        ring.place(hash32_2(i, 3), 1, &mut out);
        counts[out.as_slice()[0] as usize] += 1;
    }
    for (device, expected) in [(0, 20_000.0), (1, 30_000.0), (2, 40_000.0)] {
        let got = f64::from(counts[device]);
        assert!((got - expected).abs() < 0.03 * expected, "device {device}: {counts:?}");
    }
}

#[test]
fn figure_3c_location_strategy_skips_a_node_in_a_held_zone() {
    // Sector 0 = [A1]; sector 1 = [B1, C1] (homogeneous: all class 0 here). A and B
    // share zone 0, C is in zone 1.
    let owners = vec![
        OwnerSpec { device: 0, zone: 0, class: 0, bandwidth: 146 },
        OwnerSpec { device: 1, zone: 0, class: 0, bandwidth: 146 },
        OwnerSpec { device: 2, zone: 1, class: 0, bandwidth: 146 },
    ];
    let zones = AttributedParams { distinct_zones: true, ..params(1) };
    let slots = vec![slot(100, 0), SlotSpec { base: false, ..slot(150, 1) }, slot(200, 2)];
    let ring = AttributedRing::from_specs(&owners, slots.clone(), &zones);
    assert_eq!(devices(&ring, 0), vec![0]);
    assert_eq!(devices(&ring, 1), vec![1, 2]);
    // Find keys whose second replica is aimed at B1 and check they land on C1 instead.
    let mut aimed_at_b = 0;
    let mut out = ReplicaSet::new();
    for i in 0..2000u32 {
        let key = key_below(i, 11, 100); // sector 0
        let h = capacity_hash(key);
        let j = (u64::from(h) + 2 * u64::from(ring.prime())) % 2;
        ring.place(key, 2, &mut out);
        assert_eq!(out.as_slice(), &[0, 2], "key {key}: A1 then C1, never B1 (zone 0)");
        aimed_at_b += u32::from(j == 0);
    }
    assert!(aimed_at_b > 500, "B1 was the strategy's first choice for some keys");
    // Without distinct zones B1 is acceptable.
    let ring = AttributedRing::from_specs(&owners, slots, &params(1));
    let mut seen_b = false;
    for i in 0..200u32 {
        ring.place(key_below(i, 11, 100), 2, &mut out);
        seen_b |= out.as_slice() == [0, 1];
    }
    assert!(seen_b);
}

#[test]
fn figure_4_strategy_selection() {
    // sector 0 = [D1, A1] and sector 1 = [B1, D2] are homogeneous HDD sectors; sector 2 =
    // [A2, C1] mixes HDD and SSD. Find a key whose replicas go A1 (capacity), B1
    // (capacity), and whose third replica is first drawn into A's range in sector 2: the
    // location strategy draws again and places it on C1.
    let slots = vec![slot(10, D), slot(20, A), slot(30, B), slot(40, D), slot(50, A), slot(60, C)];
    let ring = AttributedRing::from_specs(&owners(), slots, &params(2));
    assert_eq!(ring.sector_count(), 3);
    assert!(ring.is_homogeneous(0) && ring.is_homogeneous(1) && !ring.is_homogeneous(2));
    let mut found = 0;
    let mut out = ReplicaSet::new();
    for i in 0..50_000u32 {
        let key = key_below(i, 5, 20); // sector 0
        let u = 146 + 540;
        let first_draw_on_a = scale(bandwidth_draw(key, 2, 0), u) < 146;
        let mut strategies = Vec::new();
        ring.place_traced(key, 3, &mut out, &mut |sector, s| strategies.push((sector, s)));
        if out.as_slice()[..2] == [A as i32, B as i32] && first_draw_on_a {
            assert_eq!(out.as_slice(), &[A as i32, B as i32, C as i32], "key {key}");
            assert_eq!(
                strategies,
                vec![(0, Strategy::Capacity), (1, Strategy::Capacity), (2, Strategy::Bandwidth)]
            );
            found += 1;
        }
    }
    assert!(found > 100, "the figure's case occurs ({found} keys)");
}

fn rendezvous(sector_size: u32) -> AttributedParams {
    AttributedParams { selection: SectorSelection::Rendezvous, ..params(sector_size) }
}

#[test]
fn rendezvous_a_new_node_takes_keys_and_nothing_else_moves() {
    // All-HDD sectors (E is an HDD too): the sectors stay homogeneous, and a key either
    // keeps its device or moves to E.
    let hdd_only: Vec<SlotSpec> = figure_2().into_iter().filter(|s| s.owner != C).collect();
    let before = AttributedRing::from_specs(&owners(), hdd_only.clone(), &rendezvous(3));
    let mut slots = hdd_only;
    slots.push(SlotSpec { base: false, ..slot(15, E) });
    slots.push(SlotSpec { base: false, ..slot(75, E) });
    let after = AttributedRing::from_specs(&owners(), slots, &rendezvous(3));
    let (mut x, mut y) = (ReplicaSet::new(), ReplicaSet::new());
    let (mut to_e, mut keys) = (0, 0);
    for i in 0..40_000u32 {
        let key = key_below(i, 13, 120);
        before.place(key, 1, &mut x);
        after.place(key, 1, &mut y);
        keys += 1;
        if x != y {
            assert_eq!(y.as_slice(), &[E as i32], "key {key}: {x:?} → {y:?}");
            to_e += 1;
        }
    }
    // E holds 2 of the 10 slots in 2 of the 4 sectors' arcs: about 1/4 of those sectors'
    // keys; far from everything they hold.
    assert!(to_e > keys / 20 && to_e < keys / 4, "{to_e} of {keys}");
    // Marking D out moves only D's keys, in every sector.
    let marked: Vec<SlotSpec> = figure_2()
        .into_iter()
        .filter(|s| s.owner != C)
        .map(|s| if s.owner == D { SlotSpec { state: SlotState::Marked, ..s } } else { s })
        .collect();
    let marked = AttributedRing::from_specs(&owners(), marked, &rendezvous(3));
    for i in 0..20_000u32 {
        let key = key_below(i, 17, 120);
        before.place(key, 1, &mut x);
        marked.place(key, 1, &mut y);
        assert!(x == y || x.as_slice() == [D as i32], "key {key}: {x:?} → {y:?}");
    }
}

#[test]
fn rendezvous_spreads_by_bandwidth_in_mixed_sectors_and_evenly_in_others() {
    // Figure 3(b)'s sector with the rendezvous selection: A 2/9, B 3/9, C 4/9.
    let owners = vec![
        OwnerSpec { device: 0, zone: 0, class: 0, bandwidth: 146 },
        OwnerSpec { device: 1, zone: 1, class: 0, bandwidth: 219 },
        OwnerSpec { device: 2, zone: 2, class: 1, bandwidth: 292 },
    ];
    let slots = vec![slot(10, 0), slot(20, 1), slot(30, 0), slot(40, 2)];
    let ring = AttributedRing::from_specs(&owners, slots, &rendezvous(4));
    let mut counts = [0u32; 3];
    let mut out = ReplicaSet::new();
    for i in 0..90_000u32 {
        ring.place(hash32_2(i, 3), 1, &mut out);
        counts[out.as_slice()[0] as usize] += 1;
    }
    for (device, expected) in [(0, 20_000.0), (1, 30_000.0), (2, 40_000.0)] {
        let got = f64::from(counts[device]);
        assert!((got - expected).abs() < 0.03 * expected, "device {device}: {counts:?}");
    }
    // Homogeneous: every slot alike (A has 2 of 3 slots).
    let same = vec![
        OwnerSpec { device: 0, zone: 0, class: 0, bandwidth: 146 },
        OwnerSpec { device: 1, zone: 1, class: 0, bandwidth: 146 },
    ];
    let ring = AttributedRing::from_specs(
        &same,
        vec![slot(10, 0), slot(20, 1), slot(30, 0)],
        &rendezvous(4),
    );
    let mut on_a = 0u32;
    for i in 0..30_000u32 {
        ring.place(hash32_2(i, 5), 1, &mut out);
        on_a += u32::from(out.as_slice()[0] == 0);
    }
    assert!((19_000..21_000).contains(&on_a), "{on_a}");
    // Batches agree.
    let keys: Vec<u32> = (0..3000u32).map(|i| hash32_2(i, 9)).collect();
    let mut sets = vec![ReplicaSet::new(); keys.len()];
    ring.place_batch(&keys, 2, &mut sets);
    for (key, set) in keys.iter().zip(&sets) {
        assert_eq!(set.as_slice(), place(&ring, *key, 2).as_slice());
    }
}

/// The lookup folds its key once for all its hashes: folding distributes over xor, so the
/// folded salts give the hashes the definitions give.
#[test]
fn folded_hashes_are_the_defined_ones() {
    for i in 0..100_000u32 {
        let key = hash32_2(i, 7) ^ i.rotate_left(13);
        assert_eq!(capacity_hash(key), mix32(key ^ CAPACITY_SALT));
        for (replica, salt) in DRAW_SALTS.iter().enumerate() {
            assert_eq!(mix32_folded(fold16(key) ^ salt), bandwidth_draw(key, index32(replica), 0));
        }
    }
}

#[test]
fn fastmod_is_exact() {
    for d in [1u32, 2, 3, 4, 5, 7, 11, 64, 1000, 65_537, u32::MAX] {
        let m = fastmod_constant(d);
        for a in [0u32, 1, 2, 3, d - 1, d, d.wrapping_add(1), 123_456_789, u32::MAX - 1, u32::MAX] {
            assert_eq!(fastmod(a, m, d), a % d, "{a} mod {d}");
        }
        for i in 0..1000u32 {
            let a = hash32_2(i, d);
            assert_eq!(fastmod(a, m, d), a % d, "{a} mod {d}");
        }
    }
}

#[test]
fn the_strategy_prime_is_a_prime_above_s() {
    for s in [1u32, 2, 3, 4, 10, 100, SECTOR_SIZE_MAX] {
        let p = strategy_prime(s);
        assert!(p > s && is_prime(p), "s {s}: p {p}");
        assert_eq!(strategy_prime(s), p, "deterministic");
    }
    assert_eq!(strategy_prime(4), 727, "pinned: placements depend on it");
    assert_eq!(vnode_count(4096 * GIB, GIB), 4096);
    assert_eq!(vnode_count(GIB + 1, GIB), 2);
    assert_eq!(vnode_count(1, GIB), 1);
    assert_eq!(vnode_count(u64::MAX, 1), 65_536);
}

// --- The map-level engine against a naive reference. ---

/// Devices of two kinds (the paper's HDD ⟨4096 GB, 146 MB/s⟩ and SSD ⟨1024 GB, 540 MB/s⟩
/// scaled down) in `zones` zones; every 7th down, every 11th out.
fn builder(devices: u32, zones: u32) -> ClusterMapBuilder {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..devices {
        builder = builder.device(device(id, zones));
    }
    builder
}

fn device(id: u32, zones: u32) -> DeviceSpec {
    let zone = format!("zone{}", id % zones);
    let host = format!("host{id}");
    let ssd = id.is_multiple_of(3);
    let mut spec = DeviceSpec::new(id)
        .capacity(if ssd { 16 * GIB } else { 64 * GIB + u64::from(id) * GIB / 2 })
        .at(&[("zone", &zone), ("host", &host)]);
    spec.class = Some(if ssd { "ssd" } else { "hdd" }.into());
    spec.bandwidth_mb_per_s = if ssd { 540 } else { 146 + id % 5 };
    spec
}

fn pool(distinct_zones: bool) -> PoolSpec {
    let mut pool = PoolSpec::crush(1, "hetero", 0, 3);
    pool.engine = EngineRef::Attributed(crate::builder::AttributedSpec {
        throttle_bytes: Some(GIB),
        sector_size: Some(4),
        zone_type: None,
        distinct_zones,
        bandwidth_tolerance_percent: None,
        sector_base: None,
        selection: None,
    });
    pool
}

fn compile(map: &ClusterMap) -> AttributedRing {
    let pool = map.pool(PoolId(1)).expect("pool");
    let EngineSpec::Attributed(params) = pool.engine_spec() else { unreachable!("attributed") };
    AttributedRing::new(map, &params, pool.sector_base())
}

/// The reference: every step spelt out, no tables, plain `%`.
struct Naive {
    params: AttributedParams,
    owners: Vec<OwnerSpec>,
    slots: Vec<SlotSpec>,
    sectors: Vec<Vec<SlotSpec>>,
    positions: Vec<u32>,
}

impl Naive {
    fn new(map: &ClusterMap) -> Naive {
        let pool = map.pool(PoolId(1)).expect("pool");
        let EngineSpec::Attributed(params) = pool.engine_spec() else { unreachable!("attributed") };
        let (owners, mut slots) = slot_specs(map, &params, pool.sector_base());
        slots.sort_by_key(|s| (s.position, s.owner, !s.base, s.state));
        let base: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].base).collect();
        let s = params.sector_size as usize;
        let ends: Vec<usize> = base
            .iter()
            .enumerate()
            .filter(|(n, _)| (n + 1) % s == 0 || n + 1 == base.len())
            .map(|(_, i)| *i)
            .collect();
        let mut sectors: Vec<Vec<SlotSpec>> = Vec::new();
        let mut begin = 0;
        for (k, end) in ends.iter().enumerate() {
            let mut sector = Vec::new();
            if k == 0 {
                sector.extend_from_slice(&slots[ends.last().expect("ends") + 1..]);
            }
            sector.extend_from_slice(&slots[begin..=*end]);
            sectors.push(sector);
            begin = end + 1;
        }
        let positions: Vec<u32> = ends.iter().map(|i| slots[*i].position).collect();
        Naive { params, owners, slots, sectors, positions }
    }
}

fn naive(n: &Naive, key: u32, replicas: usize) -> Vec<i32> {
    let Naive { params, owners, slots, sectors, positions } = n;
    let zone = |o: u32| owners[o as usize].zone;
    let live = |sl: &SlotSpec| sl.state == SlotState::Live;
    let mut available: Vec<u32> = slots
        .iter()
        .filter(|sl| live(sl))
        .map(|sl| if params.distinct_zones { zone(sl.owner) } else { sl.owner })
        .collect();
    available.sort_unstable();
    available.dedup();
    let wanted = replicas.min(available.len());
    let first = positions.iter().position(|p| *p >= key).unwrap_or(0);
    let mut chosen: Vec<u32> = Vec::new();
    let ok = |o: u32, chosen: &Vec<u32>| {
        !chosen.iter().any(|c| if params.distinct_zones { zone(*c) == zone(o) } else { *c == o })
    };
    let prime = u64::from(strategy_prime(params.sector_size));
    for r in 0..wanted {
        let mut found = None;
        for step in 0..sectors.len() {
            let sector = &sectors[(first + r + step) % sectors.len()];
            let members: Vec<&SlotSpec> =
                sector.iter().filter(|sl| sl.state != SlotState::Marked).collect();
            let class0 = members.first().map(|m| owners[m.owner as usize].class);
            let bws: Vec<u32> =
                members.iter().map(|m| owners[m.owner as usize].bandwidth).collect();
            let (lo, hi) =
                (bws.iter().min().copied().unwrap_or(1), bws.iter().max().copied().unwrap_or(1));
            let homogeneous =
                members.iter().all(|m| Some(owners[m.owner as usize].class) == class0)
                    && u64::from(hi) * 100
                        <= u64::from(lo) * u64::from(100 + params.bandwidth_tolerance_percent);
            if homogeneous {
                let j = usize::try_from(
                    (u64::from(capacity_hash(key)) + (r as u64 + 1) * prime) % sector.len() as u64,
                )
                .expect("below the sector's length");
                found = sector[j..]
                    .iter()
                    .find(|sl| live(sl) && ok(sl.owner, &chosen))
                    .map(|sl| sl.owner);
            } else {
                let mut ranges: Vec<(u32, bool)> = Vec::new();
                for m in &members {
                    if !ranges.iter().any(|(o, _)| *o == m.owner) {
                        ranges.push((m.owner, m.state == SlotState::Live));
                    }
                }
                let bw = |o: u32| u64::from(owners[o as usize].bandwidth);
                let u: u64 = ranges.iter().map(|(o, _)| bw(*o)).sum();
                let v = (u64::from(bandwidth_draw(key, index32(r), 0)) * u) >> 32;
                let mut acc = 0;
                for (o, up) in &ranges {
                    acc += bw(*o);
                    if v < acc {
                        if *up && ok(*o, &chosen) {
                            found = Some(*o);
                        }
                        break;
                    }
                }
                if found.is_none() {
                    let eligible: Vec<u32> = ranges
                        .iter()
                        .filter(|(o, up)| *up && ok(*o, &chosen))
                        .map(|(o, _)| *o)
                        .collect();
                    let u: u64 = eligible.iter().map(|o| bw(*o)).sum();
                    if u > 0 {
                        let v = (u64::from(bandwidth_draw(key, index32(r), 1)) * u) >> 32;
                        let mut acc = 0;
                        found = eligible.into_iter().find(|o| {
                            acc += bw(*o);
                            v < acc
                        });
                    }
                }
            }
            if found.is_some() {
                break;
            }
        }
        if found.is_none() {
            let start = (first + r) % sectors.len();
            let walk: Vec<&SlotSpec> =
                sectors[start..].iter().chain(&sectors[..start]).flatten().collect();
            found = walk.iter().find(|sl| live(sl) && ok(sl.owner, &chosen)).map(|sl| sl.owner);
        }
        let Some(owner) = found else { break };
        chosen.push(owner);
    }
    chosen.iter().map(|o| owners[*o as usize].device as i32).collect()
}

fn place(ring: &AttributedRing, key: u32, replicas: usize) -> Vec<i32> {
    let mut out = ReplicaSet::new();
    ring.place(key, replicas, &mut out);
    out.as_slice().to_vec()
}

#[test]
fn matches_the_naive_reference() {
    for distinct_zones in [false, true] {
        let mut b = builder(30, 4).pool(pool(distinct_zones));
        b.devices[7].up = false;
        b.devices[11].is_in = false;
        b.devices[13].reweight = Weight(0x6000);
        let map = b.build().expect("valid");
        // Then grow: two devices merge into the formed sectors; one is removed.
        let mut grown = map.to_builder().device(device(30, 4)).device(device(31, 4));
        grown.devices.retain(|d| d.id.0 != 20);
        for bucket in &mut grown.buckets {
            bucket.items.retain(|(item, _)| *item != crate::builder::ItemRef::Id(ItemId(20)));
        }
        let grown = grown.build().expect("valid");
        for map in [&map, &grown] {
            let ring = compile(map);
            let reference = Naive::new(map);
            assert!(
                ring.heterogeneous_count() > 0 && ring.heterogeneous_count() < ring.sector_count()
            );
            for i in 0..20_000u32 {
                let key = hash32_2(i, 0xbeef);
                for replicas in [1, 3, 5] {
                    assert_eq!(
                        place(&ring, key, replicas),
                        naive(&reference, key, replicas),
                        "key {key:#x}, {replicas} replicas, distinct zones {distinct_zones}"
                    );
                }
            }
        }
    }
}

#[test]
fn batches_place_as_single_lookups_do() {
    let mut b = builder(40, 4).pool(pool(false));
    b.devices[3].up = false;
    b.devices[8].is_in = false;
    let map = b.build().expect("valid");
    let ring = compile(&map);
    let keys: Vec<u32> = (0..5000u32).map(|i| hash32_2(i, 77)).collect();
    for replicas in [1, 3, 4, 6] {
        let mut batch = vec![ReplicaSet::new(); keys.len()];
        ring.place_batch(&keys, replicas, &mut batch);
        for (key, set) in keys.iter().zip(&batch) {
            assert_eq!(set.as_slice(), place(&ring, *key, replicas).as_slice(), "key {key:#x}");
        }
    }
}

#[test]
fn replicas_are_distinct_and_never_down_or_out() {
    let mut b = builder(24, 3).pool(pool(true));
    b.devices[4].up = false;
    b.devices[5].is_in = false;
    let map = b.build().expect("valid");
    let ring = compile(&map);
    let zone = map.type_by_name("zone").expect("zone type");
    for i in 0..20_000u32 {
        let set = place(&ring, hash32_2(i, 1), 3);
        assert_eq!(set.len(), 3);
        let mut zones: Vec<i32> = set
            .iter()
            .map(|d| map.ancestor_of_type(ItemId(*d), zone).expect("zoned").id.0)
            .collect();
        zones.sort_unstable();
        zones.dedup();
        assert_eq!(zones.len(), 3, "{set:?}");
        assert!(!set.contains(&4) && !set.contains(&5));
    }
    // Four replicas, three zones: three.
    assert_eq!(place(&ring, 12345, 4).len(), 3);
}

#[test]
fn adding_a_device_changes_only_keys_of_the_sectors_it_joins() {
    let map = builder(20, 4).pool(pool(false)).build().expect("valid");
    let grown = map.to_builder().device(device(20, 4)).build().expect("valid");
    let (before, after) = (compile(&map), compile(&grown));
    assert_eq!(before.sector_count(), after.sector_count(), "no new sector");
    for k in 0..before.sector_count() {
        assert_eq!(before.sector_position(k), after.sector_position(k));
    }
    let changed: Vec<bool> = (0..before.sector_count())
        .map(|k| before.sector_slots(k) != after.sector_slots(k))
        .collect();
    let affected = changed.iter().filter(|c| **c).count();
    assert!(affected > 0 && affected <= vnode_count(device_capacity(20), GIB) as usize);
    let mut moved = 0;
    let sectors = changed.len();
    for i in 0..50_000u32 {
        let key = hash32_2(i, 2);
        let k = before.sector_of(key);
        // The sectors each replica's search went through, from its own to where it landed.
        let (mut touched, mut replica) = (false, 0);
        let mut out = ReplicaSet::new();
        before.place_traced(key, 3, &mut out, &mut |landed, strategy| {
            let start = (k + replica) % sectors;
            let span = (landed + sectors - start) % sectors;
            touched |= strategy == Strategy::Walk
                || (0..=span).any(|step| changed[(start + step) % sectors]);
            replica += 1;
        });
        if place(&before, key, 3) != place(&after, key, 3) {
            moved += 1;
            assert!(touched, "key {key:#x} moved though its sectors did not change");
        }
    }
    assert!(moved > 0);
}

fn device_capacity(id: u32) -> u64 {
    device(id, 4).capacity_bytes.expect("set")
}

/// Every sector's entry holds the slots the reference forms for it, in ring order; a sector
/// is on the fast path exactly when it has 1 to 4 slots and, homogeneous, s of them (the
/// sector size), heterogeneous, a first slot that starts a range; and the copies after the
/// last sector are the first ones.
#[test]
fn sector_entries_hold_the_slots_the_reference_forms() {
    for (devices, sector_size) in [(3, 4), (17, 4), (60, 4), (30, 3), (30, 7), (30, 1)] {
        let mut pool = pool(false);
        if let EngineRef::Attributed(spec) = &mut pool.engine {
            spec.sector_size = Some(sector_size);
        }
        let map = builder(devices, 3).pool(pool).build().expect("valid map");
        let grown = map.to_builder().device(device(devices, 3)).build().expect("valid map");
        for map in [&map, &grown] {
            let ring = compile(map);
            let reference = Naive::new(map);
            assert_eq!(ring.sector_count(), reference.sectors.len());
            for (k, sector) in reference.sectors.iter().enumerate() {
                let expected: Vec<(Option<DeviceId>, SlotState)> = sector
                    .iter()
                    .map(|sl| {
                        (Some(DeviceId(reference.owners[sl.owner as usize].device)), sl.state)
                    })
                    .collect();
                assert_eq!(ring.sector_slots(k), expected, "{devices} devices, sector {k}");
                let entry = &ring.sectors[k];
                let fast = (1..=FAST_SLOTS).contains(&sector.len())
                    && if entry.is_heterogeneous() {
                        sector[0].state != SlotState::Marked
                    } else {
                        sector.len() == sector_size as usize
                    };
                assert_eq!(entry.is_fast(), fast, "{devices} devices, sector {k}");
            }
            let count = ring.sector_count();
            for i in 0..FAST_REPLICAS - 1 {
                assert_eq!(ring.sectors[count + i], ring.sectors[i % count]);
            }
        }
    }
}

/// A heterogeneous sector's thresholds give, for draws at and next to each of them and at
/// the ends, the slot the bandwidth strategy's definition gives: the count of range ends at
/// or below `⌊draw · u / 2³²⌋` (bandwidths from 1 to 40,000 MB/s, so that u takes odd values
/// and values above 2^16).
#[test]
fn thresholds_count_the_range_ends_below_the_scaled_draw() {
    let bandwidths: Vec<u32> = vec![1, 3, 146, 540, 541, 7_000, 40_000, 39_999, 65_535, 65_536];
    let slot_word = |owner: u32, first: bool| owner | if first { FIRST } else { 0 };
    let mut cases = 0;
    let owners = index32(bandwidths.len());
    for a in 0..owners {
        for b in 0..owners {
            for c in 0..owners {
                for shape in 0..4 {
                    // Four slots: the third repeats the first device (no range) in shape 1,
                    // the fourth is marked in shape 2, both in shape 3.
                    let slots = [
                        slot_word(a, true),
                        slot_word(b, b != a),
                        if shape & 1 != 0 { slot_word(a, false) } else { slot_word(c, true) },
                        if shape & 2 != 0 { MARKED } else { slot_word((c + 1) % 10, true) },
                    ];
                    let bounds = fast_bounds(true, &slots, &bandwidths, 4)
                        .expect("first slot starts a range");
                    let mut ends = [0u64; FAST_SLOTS];
                    let mut acc = 0u64;
                    for (i, w) in slots.iter().enumerate() {
                        if w & FIRST != 0 {
                            acc += u64::from(bandwidths[(w & OWNER_MASK) as usize]);
                        }
                        ends[i] = acc;
                    }
                    let u = acc;
                    for bound in bounds {
                        for draw in
                            [bound.wrapping_sub(1), bound, bound.wrapping_add(1), 0, 1, u32::MAX]
                        {
                            let value = scale(draw, u);
                            let want =
                                ends[..FAST_SLOTS - 1].iter().filter(|e| **e <= value).count();
                            let got = bounds.iter().filter(|t| draw > **t).count();
                            assert_eq!(got, want, "slots {slots:x?}, draw {draw:#x}, u {u}");
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(cases > 10_000);
}

/// A map of `count` devices of random capacities (1 to 40 GiB), bandwidths (from a few
/// values, so that sectors of both kinds occur) and classes, in `zones` zones.
fn random_map(
    count: usize,
    zones: u32,
    (sector_size, distinct_zones): (u32, bool),
    devices: &[(u64, u32, bool, u8)],
) -> ClusterMapBuilder {
    let mut b = ClusterMapBuilder::new();
    for (id, &(gib, bandwidth, ssd, state)) in devices.iter().enumerate().take(count) {
        let zone = format!("zone{}", index32(id) % zones);
        let host = format!("host{id}");
        let mut spec = DeviceSpec::new(index32(id))
            .capacity(gib * GIB)
            .at(&[("zone", &zone), ("host", &host)]);
        spec.class = Some(if ssd { "ssd" } else { "hdd" }.into());
        spec.bandwidth_mb_per_s = bandwidth;
        spec.up = state != 1;
        spec.is_in = state != 2;
        if state == 3 {
            spec.reweight = Weight(0x8000);
        }
        b = b.device(spec);
    }
    let mut pool = pool(distinct_zones);
    if let EngineRef::Attributed(spec) = &mut pool.engine {
        spec.sector_size = Some(sector_size);
    }
    b.pool(pool)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// On random maps — devices down, out and reweighted, sectors of 1 to 8, grown after the
    /// sectors formed, bandwidths up to 40,000 MB/s (so that some sectors' u exceeds the fast
    /// path's 16 bits) — the fast first choice of every sector is the general one, and
    /// lookups give what the naive reference gives.
    #[test]
    fn the_fast_path_agrees_with_the_general_one_and_the_reference(
        devices in proptest::collection::vec(
            (
                1u64..40,
                proptest::sample::select(vec![0u32, 146, 150, 540, 7000, 40_000]),
                proptest::bool::ANY,
                proptest::sample::select(vec![0u8, 0, 0, 0, 0, 0, 1, 2, 3]),
            ),
            40,
        ),
        count in 3usize..30,
        grow in 0usize..6,
        zones in 1u32..5,
        sector_size in 1u32..9,
        distinct_zones in proptest::bool::ANY,
        keys in proptest::collection::vec(proptest::num::u32::ANY, 150),
    ) {
        let map = random_map(count, zones, (sector_size, distinct_zones), &devices)
            .build()
            .expect("valid map");
        // Grown: devices added after the sectors formed merge into them.
        let mut grown = map.to_builder();
        let more = random_map(count + grow, zones, (sector_size, distinct_zones), &devices)
            .devices;
        grown.devices = more;
        let grown = grown.build().expect("valid map");
        for map in [&map, &grown] {
            let ring = compile(map);
            let reference = Naive::new(map);
            for &key in &keys {
                let h = capacity_hash(key);
                for sector in 0..ring.sector_count() {
                    let entry = &ring.sectors[sector];
                    if !entry.is_fast() {
                        continue;
                    }
                    for replica in 0..FAST_REPLICAS {
                        proptest::prop_assert_eq!(
                            ring.fast_choice(entry, replica, (h % 12) as usize, key),
                            ring.first_choice(key, h, index32(replica), sector),
                            "key {:#x}, sector {}, replica {}", key, sector, replica
                        );
                    }
                }
                for replicas in [1, 2, 3, 4, 6] {
                    proptest::prop_assert_eq!(
                        place(&ring, key, replicas),
                        naive(&reference, key, replicas),
                        "key {:#x}, {} replicas", key, replicas
                    );
                }
            }
        }
    }
}

/// The three searches for a key's sector — over the entries (rings of up to
/// [`SEARCH_ENTRIES_BYTES`] of them), over a dense copy of the positions, and with a
/// [`ResidualIndex`] (the largest rings) — find the sectors a binary search over the sector
/// positions finds, and the lookups built on them the same placements, for random keys and
/// keys at and next to every position sampled. All three run on one ring of 72,000 sectors,
/// each forced; the size rule is checked apart.
#[test]
fn the_three_sector_searches_find_the_same_sectors() {
    let owners: Vec<OwnerSpec> = (0..64u32)
        .map(|d| OwnerSpec {
            device: d,
            zone: d % 4,
            class: d % 2,
            bandwidth: if d % 2 == 0 { 146 } else { 540 },
        })
        .collect();
    let slots: Vec<SlotSpec> = (0..64u32)
        .flat_map(|owner| {
            (0..4_500u32).map(move |i| SlotSpec {
                position: hash32_2(owner, i),
                owner,
                base: true,
                state: if owner == 5 { SlotState::Down } else { SlotState::Live },
            })
        })
        .collect();
    let ring = AttributedRing::from_specs(&owners, slots, &params(4));
    let positions: Vec<u32> =
        (0..ring.sector_count()).map(|k| ring.sector_position(k).expect("a sector")).collect();
    assert!(positions.is_sorted());
    let rings: Vec<AttributedRing> = [SEARCH_ENTRIES, SEARCH_DENSE, SEARCH_RESIDUAL]
        .into_iter()
        .map(|kind| AttributedRing {
            search: SectorSearch::of_kind(kind, positions.clone()),
            ..ring.clone()
        })
        .collect();
    let keys = (0..20_000u32).map(|i| hash32_2(i, 0x5eed)).chain(
        positions.iter().step_by(37).flat_map(|p| [*p, p.wrapping_add(1), p.wrapping_sub(1)]),
    );
    for key in keys {
        let expected = match positions.partition_point(|p| *p < key) {
            k if k == positions.len() => 0,
            k => k,
        };
        for (kind, searching) in rings.iter().enumerate() {
            assert_eq!(searching.sector_of(key), expected, "key {key:#x}, search {kind}");
            for replicas in [1, 3, 5] {
                assert_eq!(place(searching, key, replicas), place(&rings[0], key, replicas));
            }
        }
    }
    // The size rule: entries up to 16 MiB of them, dense positions up to 16 MiB of those.
    assert_eq!(SectorSearch::kind(ring.sector_count()), SEARCH_ENTRIES);
    assert_eq!(SectorSearch::kind(SEARCH_ENTRIES_BYTES / 32), SEARCH_ENTRIES);
    assert_eq!(SectorSearch::kind(SEARCH_ENTRIES_BYTES / 32 + 1), SEARCH_DENSE);
    assert_eq!(SectorSearch::kind(DENSE_POSITIONS_BYTES / 4), SEARCH_DENSE);
    assert_eq!(SectorSearch::kind(DENSE_POSITIONS_BYTES / 4 + 1), SEARCH_RESIDUAL);
}
