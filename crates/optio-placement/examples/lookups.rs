//! One engine's Table 1 lookups alone, for profilers (perf, callgrind) and quick A/Bs: the map
//! of `optio sim attributed-cost` (nodes alternating ⟨4096 GiB, 146 MB/s, hdd⟩ and ⟨1024 GiB,
//! 540 MB/s, ssd⟩; attributed c_throttle 1 GiB, s = 4; ring 16 GiB and 1 GiB vnodes; elastic),
//! ids `0..ids` hashed before the clock starts, in random or sorted order.
//!
//! ```sh
//! cargo run --release -p optio-placement --example lookups -- ENGINE NODES [ORDER] [RUNS] [IDS]
//! # ENGINE: attributed | batch | ring | ring_1g | elastic; ORDER: random | sorted
//! ```
//!
//! Prints the best of RUNS (seconds for IDS ids × 3 replicas) and a checksum of the placements
//! (equal checksums: equal placements, for before/after comparisons); on stderr, the seconds
//! `Placement::new` took.

use std::time::Instant;

use optio_placement::crush::hash::hash32_2;
use optio_placement::{
    AttributedSpec, ClusterMapBuilder, DeviceSpec, EngineRef, Placement, PoolId, PoolSpec,
    ReplicaSet, RingSpec, Weight,
};

const GIB: u64 = 1 << 30;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let engine = args.get(1).map_or("attributed", String::as_str);
    let nodes: u32 = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(64);
    let sorted = args.get(3).is_some_and(|o| o == "sorted");
    let runs: u32 = args.get(4).and_then(|n| n.parse().ok()).unwrap_or(5);
    let ids: u32 = args.get(5).and_then(|n| n.parse().ok()).unwrap_or(100_000);

    let mut builder = ClusterMapBuilder::new();
    for id in 0..nodes {
        let hdd = id.is_multiple_of(2);
        let host = format!("node{id}");
        let capacity = if hdd { 4096 * GIB } else { 1024 * GIB };
        // CRUSH weight 1.0 per 4 TiB (as `optio sim attributed-cost`), so that 32,768 nodes
        // fit the 16.16 bucket weights; only CRUSH reads it.
        let mut device = DeviceSpec::new(id)
            .capacity(capacity)
            .weight(Weight(
                u32::try_from((u128::from(capacity) << 16) / (4u128 << 40))
                    .expect("a few TiB as a 16.16 weight"),
            ))
            .at(&[("zone", if hdd { "zone0" } else { "zone1" }), ("host", &host)]);
        device.bandwidth_mb_per_s = if hdd { 146 } else { 540 };
        device.class = Some(if hdd { "hdd" } else { "ssd" }.to_string());
        builder = builder.device(device);
    }
    let (pool_id, mut pool) = match engine {
        "attributed" | "batch" => (1, PoolSpec::crush(1, "attributed", 0, 3)),
        "ring" => (2, PoolSpec::crush(2, "ring", 0, 3)),
        "ring_1g" => (4, PoolSpec::crush(4, "ring_1g", 0, 3)),
        "elastic" => (3, PoolSpec::crush(3, "elastic", 0, 3)),
        other => panic!("unknown engine {other}: attributed, batch, ring, ring_1g or elastic"),
    };
    pool.engine = match pool_id {
        1 => EngineRef::Attributed(AttributedSpec {
            throttle_bytes: Some(GIB),
            sector_size: Some(4),
            ..AttributedSpec::default()
        }),
        2 => EngineRef::Ring(RingSpec { vnode_bytes: Some(16 * GIB), failure_domain: None }),
        4 => EngineRef::Ring(RingSpec { vnode_bytes: Some(GIB), failure_domain: None }),
        _ => EngineRef::elastic(),
    };
    let map = builder.pool(pool).build().expect("valid map");
    let compile = Instant::now();
    let placement = Placement::new(&map).expect("compiles");
    eprintln!("compiled in {:.3} s", compile.elapsed().as_secs_f64());
    let pool = placement.pool(PoolId(pool_id)).expect("pool");
    let mut keys: Vec<u32> = (0..ids).map(|i| hash32_2(i, pool_id)).collect();
    if sorted {
        keys.sort_unstable();
    }
    let mut scratch = placement.scratch();
    let mut out = ReplicaSet::new();
    let mut sets = vec![ReplicaSet::new(); keys.len()];
    let mut best = f64::INFINITY;
    let mut checksum = 0u64;
    for _ in 0..runs.max(1) {
        checksum = 0;
        let start = Instant::now();
        if engine == "batch" {
            pool.attributed().expect("attributed").place_batch(&keys, 3, &mut sets);
            for set in &sets {
                for d in set.as_slice() {
                    checksum = checksum.wrapping_mul(31).wrapping_add(*d as u64);
                }
            }
        } else {
            for &key in &keys {
                pool.place(key, &mut scratch, &mut out);
                for d in out.as_slice() {
                    checksum = checksum.wrapping_mul(31).wrapping_add(*d as u64);
                }
            }
        }
        best = best.min(start.elapsed().as_secs_f64());
    }
    println!(
        "{engine} {nodes} {} {best:.6} {checksum:016x}",
        if sorted { "sorted" } else { "random" }
    );
}
