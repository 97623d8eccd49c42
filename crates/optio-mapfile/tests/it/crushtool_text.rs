//! Proves: hand-written text maps compiled by `crushtool -c` — random weights (zeros, ties,
//! large values), every bucket algorithm, every rule shape (choose + choose, chooseleaf,
//! positive and negative counts, several take/emit, several choices per bucket, every `set_*` step), device classes,
//! choose_args, legacy tunables and straw_calc_version — map 10,000 inputs, with and without
//! `--pool-id`, exactly as `crushtool --test` does; and that each of those features changes
//! the mapping (so the comparison is not vacuous).

use crate::ceph::{Run, ceph, optio_mappings};
use crate::textmap::{Level, TextMap, Weights, level};

const ALL_SIZES: [usize; 6] = [1, 2, 3, 4, 5, 6];

/// The two rules every generated map gets: replicated across hosts, and erasure across hosts
/// with the tries Ceph's EC rules set.
fn host_rules(map: TextMap) -> TextMap {
    map.rule(0, "replicated", &["take default", "chooseleaf firstn 0 type host", "emit"]).rule(
        1,
        "erasure",
        &[
            "set_chooseleaf_tries 5",
            "set_choose_tries 100",
            "take default",
            "chooseleaf indep 0 type host",
            "emit",
        ],
    )
}

fn two_level(alg: &'static str, hosts: usize, per_host: usize) -> [Level; 2] {
    [level("root", alg, hosts), level("host", alg, per_host)]
}

#[test]
fn random_weights_every_algorithm() {
    let Some(ceph) = ceph() else { return };
    for (seed, alg) in ["uniform", "list", "tree", "straw", "straw2"].into_iter().enumerate() {
        let weights = Weights::Random { zero_percent: 10 };
        let map = host_rules(TextMap::hierarchy(&two_level(alg, 6, 5), weights, &[], seed as u64));
        let path = ceph.compile(&map.text());
        ceph.sweep(&format!("random {alg}"), &path, &[0, 1], &[3, 6], 11, &[]);
    }
}

#[test]
fn mixed_algorithms_three_levels() {
    let Some(ceph) = ceph() else { return };
    let levels = [
        level("root", "straw", 3),
        level("rack", "tree", 4),
        level("host", "list", 3),
        level("osd_group", "uniform", 2),
    ];
    // osd_group is a fourth bucket level; rules choose across racks and hosts.
    let map = TextMap::hierarchy(&levels, Weights::Random { zero_percent: 5 }, &[], 40)
        .rule(0, "replicated", &["take default", "chooseleaf firstn 0 type rack", "emit"])
        .rule(1, "erasure", &["take default", "chooseleaf indep 0 type host", "emit"])
        .rule(
            2,
            "replicated",
            &["take default", "choose firstn 0 type rack", "chooseleaf firstn 2 type host", "emit"],
        );
    let path = ceph.compile(&map.text());
    ceph.sweep("straw/tree/list/uniform, 4 levels", &path, &[0, 1, 2], &[2, 5], 3, &[]);
}

#[test]
fn three_levels_random_and_large_weights() {
    let Some(ceph) = ceph() else { return };
    let levels =
        [level("root", "straw2", 4), level("rack", "straw2", 3), level("host", "straw2", 4)];
    for (name, weights) in
        [("random", Weights::Random { zero_percent: 10 }), ("large", Weights::Large)]
    {
        let map = TextMap::hierarchy(&levels, weights, &[], 7)
            .rule(0, "replicated", &["take default", "chooseleaf firstn 0 type rack", "emit"])
            .rule(
                1,
                "erasure",
                &[
                    "take default",
                    "choose indep 2 type rack",
                    "chooseleaf indep 2 type host",
                    "emit",
                ],
            )
            .rule(
                2,
                "replicated",
                &[
                    "take default",
                    "choose firstn 0 type rack",
                    "choose firstn 1 type host",
                    "choose firstn 1 type osd",
                    "emit",
                ],
            );
        let path = ceph.compile(&map.text());
        ceph.sweep(&format!("3 levels, {name} weights"), &path, &[0, 1, 2], &[4], 5, &[]);
    }
}

#[test]
fn rule_shapes() {
    let Some(ceph) = ceph() else { return };
    let map = TextMap::hierarchy(
        &two_level("straw2", 6, 4),
        Weights::Random { zero_percent: 10 },
        &[],
        3,
    )
    .rule(
        0,
        "replicated",
        &["take default", "choose firstn 0 type host", "choose firstn 1 type osd", "emit"],
    )
    .rule(
        1,
        "erasure",
        &["take default", "choose indep 0 type host", "choose indep 1 type osd", "emit"],
    )
    .rule(2, "replicated", &["take default", "chooseleaf firstn -1 type host", "emit"])
    .rule(
        3,
        "replicated",
        &["take default", "choose firstn 2 type host", "chooseleaf firstn 2 type osd", "emit"],
    )
    .rule(
        4,
        "replicated",
        &[
            "take host0",
            "chooseleaf firstn 1 type osd",
            "emit",
            "take default",
            "chooseleaf firstn -1 type host",
            "emit",
        ],
    )
    .rule(
        5,
        "replicated",
        &[
            "set_choose_tries 3",
            "set_chooseleaf_tries 2",
            "set_choose_local_tries 1",
            "set_choose_local_fallback_tries 2",
            "set_chooseleaf_vary_r 0",
            "set_chooseleaf_stable 0",
            "take default",
            "chooseleaf firstn 0 type host",
            "emit",
        ],
    )
    .rule(
        6,
        "erasure",
        &[
            "set_chooseleaf_vary_r 3",
            "set_chooseleaf_stable 1",
            "set_choose_tries 2",
            "take default",
            "chooseleaf indep 0 type host",
            "emit",
        ],
    )
    .rule(7, "replicated", &["take default", "choose firstn 0 type osd", "emit"])
    .rule(
        8,
        "replicated",
        &["take default", "choose firstn 0 type host", "choose firstn 2 type osd", "emit"],
    )
    .rule(
        9,
        "erasure",
        &[
            "take default",
            "chooseleaf indep -2 type host",
            "emit",
            "take host5",
            "choose indep 2 type osd",
            "emit",
        ],
    )
    .rule(
        10,
        "replicated",
        &[
            "take host2",
            "choose firstn 0 type osd",
            "emit",
            "take host3",
            "choose firstn 0 type osd",
            "emit",
        ],
    );
    let path = ceph.compile(&map.text());
    ceph.sweep("rule shapes", &path, &[0, 1, 5, 6], &ALL_SIZES, 13, &[]);
    ceph.sweep("rule shapes", &path, &[2, 3, 4, 7, 8, 9, 10], &[2, 5], 13, &[]);
}

#[test]
fn device_classes() {
    let Some(ceph) = ceph() else { return };
    let levels =
        [level("root", "straw2", 3), level("rack", "straw2", 2), level("host", "straw2", 5)];
    let map = TextMap::hierarchy(
        &levels,
        Weights::Random { zero_percent: 5 },
        &["hdd", "ssd", "nvme"],
        17,
    )
    .rule(0, "replicated", &["take default class hdd", "chooseleaf firstn 0 type host", "emit"])
    .rule(1, "erasure", &["take default class ssd", "chooseleaf indep 0 type host", "emit"])
    .rule(2, "replicated", &["take host1 class hdd", "choose firstn 0 type osd", "emit"])
    .rule(
        3,
        "replicated",
        &[
            "take default class nvme",
            "chooseleaf firstn 1 type rack",
            "emit",
            "take default class hdd",
            "chooseleaf firstn -1 type rack",
            "emit",
        ],
    )
    .rule(4, "replicated", &["take rack0 class ssd", "chooseleaf firstn 0 type host", "emit"]);
    let path = ceph.compile(&map.text());
    ceph.sweep("device classes", &path, &[0, 1], &[1, 3, 6], 2, &[(4, 0.0), (9, 0.5)]);
    ceph.sweep("device classes", &path, &[2, 3, 4], &[3], 2, &[]);
}

#[test]
fn choose_args_weight_sets_and_ids() {
    let Some(ceph) = ceph() else { return };
    let levels = [level("root", "straw2", 5), level("host", "straw2", 4)];
    let base =
        host_rules(TextMap::hierarchy(&levels, Weights::Random { zero_percent: 5 }, &[], 31));
    let plain = ceph.compile(&base.text());
    let plain_map = ceph.load(&plain);
    for (positions, with_ids) in [(1, false), (3, false), (0, true), (2, true)] {
        let what = format!("choose_args 0, {positions} positions, ids {with_ids}");
        let map = TextMap::hierarchy(&levels, Weights::Random { zero_percent: 5 }, &[], 31);
        let map = host_rules(map).with_choose_args(0, positions, with_ids, 99 + positions as u64);
        let path = ceph.compile(&map.text());
        // Sizes beyond the number of positions use the last weight set.
        ceph.sweep(&what, &path, &[0, 1], &[1, 4], 1, &[]);
        // Not vacuous: the weight set or ids change the mapping.
        let with_args = optio_mappings(&ceph.load(&path), &Run::new(0, 3));
        let without = optio_mappings(&plain_map, &Run::new(0, 3));
        let changed = (0..with_args.len()).filter(|&x| with_args[x] != without[x]).count();
        assert!(changed > 1000, "{what}: only {changed} mappings changed");
    }
}

#[test]
fn crushtool_test_uses_choose_args_0_else_the_default_set() {
    // crushtool --test takes choose_args set 0, falling back to the default set (-1); a set
    // named after the pool is not used even with --pool-id (CRUSH.md §1.9 says otherwise).
    let Some(ceph) = ceph() else { return };
    let levels = [level("root", "straw2", 4), level("host", "straw2", 4)];
    let plain =
        host_rules(TextMap::hierarchy(&levels, Weights::Random { zero_percent: 0 }, &[], 5));
    let plain_map = ceph.load(&ceph.compile(&plain.text()));
    for id in [1, -1] {
        let map = TextMap::hierarchy(&levels, Weights::Random { zero_percent: 0 }, &[], 5);
        let map = host_rules(map).with_choose_args(id, 2, true, 7);
        let text = map.text().replace("choose_args -1 ", "choose_args 18446744073709551615 ");
        let path = ceph.compile(&text);
        ceph.sweep(&format!("choose_args {id} only"), &path, &[0, 1], &[3], 1, &[]);
        let run = Run::new(0, 3).pool(1);
        let with_args = optio_mappings(&ceph.load(&path), &run);
        let without = optio_mappings(&plain_map, &run);
        let used = with_args != without;
        assert_eq!(used, id == -1, "choose_args {id} used by crushtool --test --pool-id 1");
    }
}

#[test]
fn choose_args_with_device_classes() {
    // Weight sets on shadow buckets (named by their `id N class C` ids) steer class rules.
    let Some(ceph) = ceph() else { return };
    let levels = [level("root", "straw2", 4), level("host", "straw2", 6)];
    let map = || {
        TextMap::hierarchy(&levels, Weights::Random { zero_percent: 5 }, &["hdd", "ssd"], 51)
            .rule(
                0,
                "replicated",
                &["take default class hdd", "chooseleaf firstn 0 type host", "emit"],
            )
            .rule(1, "replicated", &["take default", "chooseleaf firstn 0 type host", "emit"])
    };
    let plain = ceph.load(&ceph.compile(&map().text()));
    let path = ceph.compile(&map().with_choose_args(0, 2, false, 3).text());
    ceph.sweep("choose_args + classes", &path, &[0, 1], &[3], 6, &[]);
    let with_args = ceph.load(&path);
    for rule in [0, 1] {
        let changed = optio_mappings(&with_args, &Run::new(rule, 3))
            != optio_mappings(&plain, &Run::new(rule, 3));
        assert!(changed, "choose_args change rule {rule}");
    }
}

#[test]
fn legacy_tunables_and_straw_calc_version() {
    let Some(ceph) = ceph() else { return };
    let levels = [level("root", "straw", 6), level("host", "straw", 5)];
    // No tunable lines: Ceph's legacy (argonaut) values, straw_calc_version 0.
    let legacy = host_rules(TextMap::hierarchy(&levels, Weights::Few, &[], 8).tunables(&[]));
    let legacy_path = ceph.compile(&legacy.text());
    ceph.sweep(
        "legacy text map, straw v0",
        &legacy_path,
        &[0, 1],
        &[3, 5],
        4,
        &[(2, 0.0), (7, 0.5)],
    );
    let fixed = host_rules(
        TextMap::hierarchy(&levels, Weights::Few, &[], 8).tunables(&[("straw_calc_version", 1)]),
    );
    let fixed_path = ceph.compile(&fixed.text());
    ceph.sweep("legacy text map, straw v1", &fixed_path, &[0, 1], &[3], 4, &[(2, 0.0), (7, 0.5)]);
    let v0 = optio_mappings(&ceph.load(&legacy_path), &Run::new(0, 3));
    let v1 = optio_mappings(&ceph.load(&fixed_path), &Run::new(0, 3));
    assert!((0..v0.len()).any(|x| v0[x] != v1[x]), "straw_calc_version must matter with ties");
    // Legacy tunables with straw2 buckets (allowed once allowed_bucket_algs says so).
    let straw2 = [level("root", "straw2", 6), level("host", "straw2", 5)];
    let map = host_rules(
        TextMap::hierarchy(&straw2, Weights::Random { zero_percent: 10 }, &[], 9)
            .tunables(&[("allowed_bucket_algs", 54)]),
    );
    let path = ceph.compile(&map.text());
    ceph.sweep("legacy tunables, straw2", &path, &[0, 1], &[2, 6], 4, &[(2, 0.0), (7, 0.5)]);
}
