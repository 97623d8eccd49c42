//! Criterion benchmarks of the placement core: CRUSH mappings, ring, attributed and elastic
//! lookups, map building.
//!
//! Run: `cargo bench -p optio-placement --bench placement`. The side-by-side comparison with
//! Ceph's crushtool is `scripts/bench-crush-vs-crushtool.sh`. The attributed-CH paper's
//! Table 1 (100,000 ids, 3 replicas, two node types) is `table1/…`: `attributed`, `ring` (256
//! vnodes per node, as the paper's consistent hashing) on the same nodes, in the same run.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use optio_placement::crush::hash::hash32_2;
use optio_placement::crush::{CrushWork, Simd};
use optio_placement::{
    AttributedSpec, ClusterMap, ClusterMapBuilder, DeviceSpec, EngineRef, Placement, PoolId,
    PoolSpec, ReplicaSet, RingSpec, RuleId,
};

/// A map like `crushtool --build --num_osds N host straw2 H rack straw2 R root straw2 0`.
fn hierarchy(racks: u32, hosts_per_rack: u32, osds_per_host: u32) -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    let mut id = 0;
    for rack in 0..racks {
        for host in 0..hosts_per_rack {
            let host_name = format!("host{}", rack * hosts_per_rack + host);
            let rack_name = format!("rack{rack}");
            for _ in 0..osds_per_host {
                let location: Vec<(&str, &str)> = if racks > 1 {
                    vec![("host", &host_name), ("rack", &rack_name)]
                } else {
                    vec![("host", &host_name)]
                };
                builder = builder.device(DeviceSpec::new(id).at(&location));
                id += 1;
            }
        }
    }
    builder.replicated_rule(0, "replicated_rule", "default", "host").build().expect("valid map")
}

fn crush(c: &mut Criterion) {
    let mut group = c.benchmark_group("crush_do_rule_3_replicas");
    group.throughput(Throughput::Elements(1));
    for (name, map) in [
        ("10x10x10", hierarchy(10, 10, 10)),
        ("50x20", hierarchy(1, 50, 20)),
        ("4x10", hierarchy(1, 4, 10)),
    ] {
        let placement = Placement::new(&map).expect("compiles");
        let weights = map.reweight_vector();
        for simd in [Simd::Baseline, Simd::Avx2, Simd::Avx512] {
            if simd > Simd::detect() {
                continue;
            }
            let mut crush = placement.crush().clone();
            crush.set_simd(simd);
            let mut work = CrushWork::new(&crush);
            let mut out = [0i32; 3];
            let mut x = 0u32;
            group.bench_function(format!("{name}/{simd:?}"), |b| {
                b.iter(|| {
                    x = x.wrapping_add(1);
                    black_box(crush.do_rule(RuleId(0), x, &mut out, &weights, None, &mut work));
                })
            });
        }
    }
    group.finish();
}

fn ring_map(devices: u32, vnodes: u64) -> ClusterMap {
    let vnode_bytes = 8u64 << 30;
    let capacity = vnode_bytes * vnodes;
    let mut builder = ClusterMapBuilder::new();
    for id in 0..devices {
        let zone = format!("zone{}", id % 3);
        let host = format!("host{id}");
        builder = builder
            .device(DeviceSpec::new(id).capacity(capacity).at(&[("zone", &zone), ("host", &host)]));
    }
    builder
        .pool(PoolSpec {
            engine: EngineRef::Ring(RingSpec {
                vnode_bytes: Some(vnode_bytes),
                failure_domain: None,
            }),
            ..PoolSpec::crush(1, "ring", 0, 3)
        })
        .build()
        .expect("valid map")
}

fn ring(c: &mut Criterion) {
    let map = ring_map(1000, 160);
    let placement = Placement::new(&map).expect("compiles");
    let pool = placement.pool(PoolId(1)).expect("pool");
    let ring = pool.ring().expect("ring pool");
    eprintln!(
        "ring: {} vnodes, {} bytes, {:.2} bytes per vnode",
        ring.vnode_count(),
        ring.memory_bytes(),
        ring.memory_bytes() as f64 / ring.vnode_count() as f64
    );
    let mut group = c.benchmark_group("ring_1000x160");
    group.throughput(Throughput::Elements(1));
    let mut key = 0u32;
    group.bench_function("primary", |b| {
        b.iter(|| {
            key = key.wrapping_add(0x9e37_79b9);
            black_box(ring.primary(key))
        })
    });
    let mut out = ReplicaSet::new();
    group.bench_function("3_distinct_replicas", |b| {
        b.iter(|| {
            key = key.wrapping_add(0x9e37_79b9);
            ring.place(key, 3, &mut out);
            black_box(out.len())
        })
    });
    group.finish();
}

fn build(c: &mut Criterion) {
    let mut group = c.benchmark_group("map_build");
    group.sample_size(10);
    let specs: Vec<DeviceSpec> = (0..100_000u32)
        .map(|id| {
            let host = format!("host{}", id / 20);
            let rack = format!("rack{}", id / 2000);
            DeviceSpec::new(id).capacity(1 << 39).at(&[("host", &host), ("rack", &rack)])
        })
        .collect();
    group.bench_function("100000_devices", |b| {
        b.iter(|| {
            let mut builder = ClusterMapBuilder::new();
            builder.devices = specs.clone();
            let map = builder
                .replicated_rule(0, "replicated_rule", "default", "host")
                .pool(PoolSpec::crush(1, "rbd", 4096, 3))
                .build()
                .expect("valid");
            black_box(map.devices().len())
        })
    });
    group.finish();
}

/// Compiling a map whose one pool is elastic (B = 65,536, 3 replicas): what every server and
/// client pays on each new epoch, the replica sets of `ElasticRing::prepare` included.
fn compile_elastic(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile_elastic");
    group.sample_size(10);
    for nodes in [64u32, 4096] {
        let mut builder = ClusterMapBuilder::new();
        for id in 0..nodes {
            builder = builder.device(DeviceSpec::new(id).capacity(1 << 40));
        }
        let mut pool = PoolSpec::crush(1, "elastic", 0, 3);
        pool.engine = EngineRef::elastic();
        let map = builder.pool(pool).build().expect("valid map");
        group.bench_function(format!("{nodes}"), |b| {
            b.iter(|| black_box(Placement::new(&map).expect("compiles")))
        });
    }
    group.finish();
}

const GIB: u64 = 1 << 30;

/// The attributed-CH paper's simulation nodes: half ⟨4096 GB, 146 MB/s, zone0⟩ (HDD), half
/// ⟨1024 GB, 540 MB/s, zone1⟩ (SSD), with an attributed pool (c_throttle 1 GiB, s = 4), a
/// ring pool (16 GiB vnodes: 256 per HDD, 64 per SSD) and an elastic pool, all of 3 replicas.
fn table1_map(nodes: u32) -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..nodes {
        let hdd = id.is_multiple_of(2);
        let zone = if hdd { "zone0" } else { "zone1" };
        let host = format!("node{id}");
        let mut device = DeviceSpec::new(id)
            .capacity(if hdd { 4096 * GIB } else { 1024 * GIB })
            .at(&[("zone", zone), ("host", &host)]);
        device.bandwidth_mb_per_s = if hdd { 146 } else { 540 };
        device.class = Some(if hdd { "hdd" } else { "ssd" }.to_string());
        builder = builder.device(device);
    }
    let mut attributed = PoolSpec::crush(1, "attributed", 0, 3);
    attributed.engine = EngineRef::Attributed(AttributedSpec {
        throttle_bytes: Some(GIB),
        sector_size: Some(4),
        zone_type: None,
        distinct_zones: false,
        bandwidth_tolerance_percent: None,
        sector_base: None,
        selection: None,
    });
    let mut ring = PoolSpec::crush(2, "ring", 0, 3);
    // 256 vnodes per HDD (the paper's CH had 256 per node; the ring weights by capacity).
    ring.engine = EngineRef::Ring(RingSpec { vnode_bytes: Some(16 * GIB), failure_domain: None });
    let mut elastic = PoolSpec::crush(3, "elastic", 0, 3);
    elastic.engine = EngineRef::elastic();
    builder = builder.pool(attributed).pool(ring).pool(elastic);
    // As many virtual nodes as attributed (1 GiB each), for a like-for-like lookup cost —
    // while that fits under the ring's vnode cap (about 6,500 of these nodes).
    if ring_1g_fits(nodes) {
        let mut ring_1g = PoolSpec::crush(4, "ring_1g", 0, 3);
        ring_1g.engine = EngineRef::Ring(RingSpec { vnode_bytes: Some(GIB), failure_domain: None });
        builder = builder.pool(ring_1g);
    }
    builder.build().expect("valid map")
}

/// Whether `nodes` of [`table1_map`]'s (2,560 GiB each on average) fit in a ring of 1 GiB
/// virtual nodes.
fn ring_1g_fits(nodes: u32) -> bool {
    u64::from(nodes) * 2560 <= optio_placement::engine::ring::RING_VNODES_MAX
}

/// 100,000 ids, 3 replicas each, per engine (the paper's Table 1 unit of work).
fn table1(c: &mut Criterion) {
    let mut group = c.benchmark_group("table1_100000_ids_3_replicas");
    group.throughput(Throughput::Elements(100_000));
    group.sample_size(20);
    let sizes: Vec<u32> = match std::env::var("OPTIO_BENCH_TABLE1_NODES") {
        Ok(list) => list.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
        Err(_) => vec![64, 512, 4096],
    };
    for nodes in sizes {
        let map = table1_map(nodes);
        let placement = Placement::new(&map).expect("compiles");
        for (name, id) in [("attributed", 1), ("ring", 2), ("elastic", 3), ("ring_1g", 4)] {
            if id == 4 && !ring_1g_fits(nodes) {
                continue;
            }
            let pool = placement.pool(PoolId(id)).expect("pool");
            let mut scratch = placement.scratch();
            let mut out = ReplicaSet::new();
            group.bench_function(format!("{name}/{nodes}"), |b| {
                b.iter(|| {
                    let mut sum = 0usize;
                    for i in 0..100_000u32 {
                        pool.place(hash32_2(i, 1), &mut scratch, &mut out);
                        sum += out.len();
                    }
                    black_box(sum)
                })
            });
        }
        // The same placements through the attributed ring's batch interface.
        let pool = placement.pool(PoolId(1)).expect("pool");
        let ring = pool.attributed().expect("attributed");
        let mut keys = vec![0u32; 100_000];
        let mut sets = vec![ReplicaSet::new(); 100_000];
        group.bench_function(format!("attributed_batch/{nodes}"), |b| {
            b.iter(|| {
                for (i, key) in (0u32..).zip(keys.iter_mut()) {
                    *key = hash32_2(i, 1);
                }
                ring.place_batch(&keys, 3, &mut sets);
                black_box(sets[99_999].len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, crush, ring, build, compile_elastic, table1);
criterion_main!(benches);
