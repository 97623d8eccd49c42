//! Proves: `analysis::cluster_load` adds up its pools' loads and expectations, counts only
//! devices that can hold data, and judges balance on PG copies when a pool places PGs; the
//! per-domain loads add up to the total.

use optio_placement::analysis::{
    cluster_load, cluster_load_steps, domain_loads, failure_domain, pool_load,
};
use optio_placement::{ClusterMapBuilder, DeviceSpec, Placement, PoolId, PoolSpec};

fn map() -> optio_placement::ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    for id in 0..12u32 {
        let host = format!("host{}", id / 3);
        let mut device = DeviceSpec::new(id).at(&[("host", &host)]);
        if id == 11 {
            device.is_in = false;
        }
        builder = builder.device(device);
    }
    builder
        .replicated_rule(0, "replicated_rule", "default", "host")
        .pool(PoolSpec::crush(1, "rbd", 128, 3))
        .pool(PoolSpec::crush(2, "more", 64, 2))
        .build()
        .expect("a valid map")
}

#[test]
fn the_cluster_load_is_the_sum_of_its_pools() {
    let map = map();
    let placement = Placement::new(&map).expect("compiles");
    let pools = [PoolId(1), PoolId(2)];
    let mut steps = 0;
    let load = cluster_load(&map, &placement, &pools, 1000, 4096, &mut |n| steps += n);
    assert_eq!(steps, cluster_load_steps(&map, &pools, 1000), "progress adds up");
    assert!(load.uses_pgs());
    assert_eq!(load.pools.len(), 2);
    for i in 0..12 {
        let sum: u64 = pools
            .iter()
            .map(|id| {
                let pool = placement.pool(*id).expect("pool");
                pool_load(&placement, pool, 12, 1000, 4096, &mut |_| {}).pg_copies[i]
            })
            .sum();
        assert_eq!(load.total.pg_copies[i], sum, "device {i}");
    }
    assert_eq!(load.total.pg_copies.iter().sum::<u64>(), 128 * 3 + 64 * 2);
    assert_eq!(load.eligible, (0..11).collect::<Vec<_>>(), "the out device is not eligible");
    let expected: f64 = load.expected_pgs.iter().sum();
    assert!((expected - (128.0 * 3.0 + 64.0 * 2.0)).abs() < 1e-6, "{expected}");
    let (count, expected) = load.judged(0);
    assert_eq!(count, load.total.pg_copies[0] as f64);
    assert_eq!(expected, load.expected_pgs[0]);
    let order = load.by_excess();
    assert_eq!(order.len(), 11);
    let excess = |i: usize| load.judged(i).0 - load.judged(i).1;
    assert!(order.windows(2).all(|w| excess(w[0]) >= excess(w[1])), "most loaded first");
    assert!(load.pg_deviation() >= 0.0 && load.pg_summary().count == 11);

    let host = failure_domain(&map, PoolId(1)).expect("the rule's failure domain");
    assert_eq!(map.type_name(host), Some("host"));
    let domains = domain_loads(&map, host, &load.eligible, &load.total);
    assert_eq!(domains.len(), 4);
    let copies: u64 = domains.values().map(|d| d.pg_copies).sum();
    assert_eq!(copies, load.total.pg_copies.iter().sum::<u64>());
}
