//! Proves: each device's load tracks its weight within statistical tolerance — for CRUSH
//! (one replica: straw2 picks a child with probability weight / total at every level, so a
//! device gets exactly its share of the total weight) and for the ring (a device owns
//! ⌈capacity × reweight / vnode_bytes⌉ vnodes; the arcs they cover add Beta noise).

use optio_placement::engine::ring::vnode_count;
use optio_placement::{EngineRef, Placement, PoolId, PoolSpec, ReplicaSet, RingSpec};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

use crate::strategies::{key, shape};

const KEYS: u32 = 40_000;

/// Devices per key of pool `pool` over [`KEYS`] keys.
fn loads(placement: &Placement, pool: PoolId) -> Vec<f64> {
    let pool = placement.pool(pool).expect("pool");
    let mut scratch = placement.scratch();
    let mut out = ReplicaSet::new();
    let mut loads = vec![0f64; 64];
    for i in 0..KEYS {
        pool.place(key(0x10ad, i), &mut scratch, &mut out);
        out.devices().for_each(|d| loads[d.0 as usize] += 1.0);
    }
    loads
}

proptest! {
    // A fixed seed: the bounds are statistical (5 sigma), and a test must not fail at random.
    #![proptest_config(ProptestConfig {
        cases: 24,
        rng_seed: RngSeed::Fixed(0xba1a),
        ..ProptestConfig::default()
    })]

    #[test]
    fn crush_load_tracks_weight(shape in shape(true)) {
        let map = shape.map(1);
        let placement = Placement::new(&map).expect("compiles");
        let loads = loads(&placement, PoolId(1));
        let total: f64 = map.devices().iter().map(|d| d.weight.as_f64()).sum();
        let n = f64::from(KEYS);
        for device in map.devices() {
            let p = device.weight.as_f64() / total;
            let (expected, sigma) = (n * p, (n * p * (1.0 - p)).sqrt());
            let got = loads[device.id.0 as usize];
            prop_assert!(
                (got - expected).abs() <= 5.0 * sigma + 1.0,
                "{}: weight share {:.4}, expected {:.0} ± {:.0}, got {}",
                device.name, p, expected, sigma, got
            );
        }
    }

    #[test]
    fn ring_load_tracks_capacity(shape in shape(true)) {
        let vnode_bytes = 2 << 30;
        let mut pool = PoolSpec::crush(9, "ring", 0, 1);
        pool.engine = EngineRef::Ring(RingSpec { vnode_bytes: Some(vnode_bytes), failure_domain: None });
        let map = shape.builder().pool(pool).build().expect("valid");
        let placement = Placement::new(&map).expect("compiles");
        let loads = loads(&placement, PoolId(9));
        let vnodes: Vec<f64> = map
            .devices()
            .iter()
            .map(|d| f64::from(vnode_count(d.capacity_bytes, d.reweight.0, vnode_bytes)))
            .collect();
        let all_vnodes: f64 = vnodes.iter().sum();
        let capacity: f64 = map.devices().iter().map(|d| d.capacity_bytes as f64).sum();
        let n = f64::from(KEYS);
        for (device, v) in map.devices().iter().zip(&vnodes) {
            // The vnode share is the capacity share up to rounding: each of the D devices
            // rounds up by less than one vnode, so |v/V - c/C| < max(1, D c/C) / V.
            let p = v / all_vnodes;
            let capacity_share = device.capacity_bytes as f64 / capacity;
            let rounding = (1.0f64).max(vnodes.len() as f64 * capacity_share) / all_vnodes;
            prop_assert!((p - capacity_share).abs() < rounding, "{}: vnode share {} vs capacity share {}", device.name, p, capacity_share);
            // v of V arcs cover Beta(v, V - v) of the ring: variance p(1 - p)/(V + 1); the
            // keys add binomial variance p(1 - p)/n.
            let sigma = (p * (1.0 - p) * (1.0 / (all_vnodes + 1.0) + 1.0 / n)).sqrt();
            let got = loads[device.id.0 as usize] / n;
            prop_assert!(
                (got - p).abs() <= 5.0 * sigma,
                "{}: {} vnodes of {}, share {:.4} ± {:.4}, got {:.4}",
                device.name, v, all_vnodes, p, sigma, got
            );
        }
    }
}
