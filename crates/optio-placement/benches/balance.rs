//! Criterion benchmarks of balance: Optio's balanced placement (computed once per map, when a
//! `Placement` is compiled), the cost it adds to `Placement::new` against plain CRUSH, a lookup
//! in a balanced pool, seed 002's adaptive search, and the incremental method (its placement
//! from a stored state, its state from scratch, and a rebalance after one OSD joins — the
//! work of every map edit), against the history-free method in the same run.
//!
//! Run: `cargo bench -p optio-placement --bench balance`. Numbers: `docs/benchmarks.md`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use optio_placement::change::linear::tune_linear_param;
use optio_placement::engine::balanced::balance;
use optio_placement::engine::balanced::incremental;
use optio_placement::{
    BalanceMethod, BucketAlg, ClusterMap, ClusterMapBuilder, DeviceSpec, LinearParamSpec,
    Placement, PoolId, PoolSpec, PpsGenerator, ReplicaSet,
};

/// Racks × hosts × OSDs (no rack level when `racks` is 0) with pool 1: `pg_num` PGs, `size`
/// replicas, balanced or not.
fn cluster(
    racks: u32,
    hosts: u32,
    osds: u32,
    pg_num: u32,
    size: u32,
    balanced: bool,
) -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..racks.max(1) * hosts * osds {
        let host = format!("host{}", id / osds);
        let rack = format!("rack{}", id / osds / hosts);
        let location: Vec<(&str, &str)> =
            if racks > 0 { vec![("host", &host), ("rack", &rack)] } else { vec![("host", &host)] };
        builder = builder.device(DeviceSpec::new(id).at(&location));
    }
    let mut pool = PoolSpec::crush(1, "rbd", pg_num, size);
    if balanced {
        pool.balance.balanced = BalanceMethod::HistoryFree;
    }
    builder
        .replicated_rule(0, "replicated_rule", "default", "host")
        .pool(pool)
        .build()
        .expect("valid")
}

fn balanced(c: &mut Criterion) {
    let mut group = c.benchmark_group("balance");
    group.sample_size(10);
    for (name, racks, hosts, pg_num, size) in [
        ("1000_osds_32768_pgs_3_replicas", 10, 10, 32768, 3),
        ("1000_osds_32768_pgs_2_replicas", 10, 10, 32768, 2),
        ("1000_osds_2048_pgs_3_replicas", 10, 10, 2048, 3),
        ("40_osds_2048_pgs_3_replicas", 0, 4, 2048, 3),
        ("40_osds_32768_pgs_3_replicas", 0, 4, 32768, 3),
    ] {
        let map = cluster(racks, hosts, 10, pg_num, size, true);
        let pool = map.pool(PoolId(1)).expect("pool").clone();
        group.bench_function(name, |b| {
            b.iter(|| black_box(balance(&map, &pool).expect("ok").sets.len()))
        });
    }
    group.finish();
}

fn compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("placement_new_1000_osds_32768_pgs_3_replicas");
    group.sample_size(10);
    for (name, balanced) in [("crush", false), ("balanced", true)] {
        let map = cluster(10, 10, 10, 32768, 3, balanced);
        group.bench_function(name, |b| {
            b.iter(|| black_box(Placement::new(&map).expect("ok").epoch()))
        });
    }
    group.finish();
}

fn lookup(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup_1000_osds_32768_pgs_3_replicas");
    for (name, balanced) in [("crush", false), ("balanced", true)] {
        let map = cluster(10, 10, 10, 32768, 3, balanced);
        let placement = Placement::new(&map).expect("ok");
        let pool = placement.pool(PoolId(1)).expect("pool");
        let mut scratch = placement.scratch();
        let mut out = ReplicaSet::new();
        let mut seed = 0u32;
        group.bench_function(name, |b| {
            b.iter(|| {
                seed = (seed + 1) & 32767;
                pool.place(pool.pg_key(seed), &mut scratch, &mut out);
                black_box(out.len())
            })
        });
    }
    group.finish();
}

fn seed002(c: &mut Criterion) {
    let mut group = c.benchmark_group("seed002_search");
    group.sample_size(10);
    let base = cluster(0, 4, 10, 2048, 3, false);
    let mut builder = base.to_builder();
    for bucket in &mut builder.buckets {
        if bucket.type_name == "host" {
            bucket.alg = BucketAlg::Linear;
        }
    }
    builder.pools[0].balance.pps = PpsGenerator::Congruential;
    builder.pools[0].balance.linear_param = LinearParamSpec::Fixed(0x10000);
    let map = builder.build().expect("valid");
    let pool = map.pools()[0].clone();
    group.bench_function("40_osds_2048_pgs_3_replicas_256_trials", |b| {
        b.iter(|| black_box(tune_linear_param(&map, &pool).param))
    });
    group.finish();
}

fn incremental(c: &mut Criterion) {
    let mut group = c.benchmark_group("incremental");
    group.sample_size(10);
    for (name, racks, hosts, pg_num, size) in [
        ("1000_osds_32768_pgs_3_replicas", 10, 10, 32768, 3),
        ("40_osds_2048_pgs_3_replicas", 0, 4, 2048, 3),
    ] {
        let plain = cluster(racks, hosts, 10, pg_num, size, false);
        let mut builder = plain.to_builder();
        builder.pools[0].balance.balanced = BalanceMethod::Incremental;
        let map = builder.build().expect("valid");
        let pool = map.pools()[0].clone();
        let state = pool.balance_state().cloned().expect("computed");
        // One OSD joins host 0: the map every edit builds, rebalanced from `state`.
        let mut grown = map.to_builder();
        grown.devices.push(DeviceSpec::new(map.max_devices()).at(&if racks > 0 {
            vec![("host", "host0"), ("rack", "rack0")]
        } else {
            vec![("host", "host0")]
        }));
        let grown = grown.build().expect("valid");
        let grown_pool = grown.pools()[0].clone();
        group.bench_function(format!("{name}/history_free_balance"), |b| {
            b.iter(|| black_box(balance(&map, &pool).expect("ok").sets.len()))
        });
        group.bench_function(format!("{name}/place_from_state"), |b| {
            b.iter(|| black_box(incremental::place(&map, &pool).expect("ok").sets.len()))
        });
        group.bench_function(format!("{name}/state_from_scratch"), |b| {
            b.iter(|| black_box(incremental::rebalance(&map, &pool, None).expect("ok").1.steps))
        });
        group.bench_function(format!("{name}/rebalance_after_add"), |b| {
            b.iter(|| {
                black_box(
                    incremental::rebalance(&grown, &grown_pool, Some(&state)).expect("ok").1.moved,
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, balanced, compile, lookup, seed002, incremental);
criterion_main!(benches);
