//! Proves: maps made by `crushtool --build` (1-, 2- and 3-level, every bucket algorithm,
//! firstn and indep rules, every tunables profile and each tunable changed alone, reweighted
//! and out devices) map 10,000 inputs, with and without `--pool-id`, exactly as
//! `crushtool --test` does.

use std::path::PathBuf;

use crate::ceph::{Ceph, ceph};

const ALL_SIZES: [usize; 6] = [1, 2, 3, 4, 5, 6];

/// Adds `crushtool --create-simple-rule NAME ROOT TYPE MODE` rules, one per invocation.
fn with_rules(ceph: &Ceph, map: PathBuf, rules: &[(&str, &str, &str)]) -> PathBuf {
    rules.iter().enumerate().fold(map, |map, (i, (root, type_name, mode))| {
        let name = format!("simple{i}");
        ceph.modify(&map, &["--create-simple-rule", &name, root, type_name, mode])
    })
}

#[test]
fn one_level_flat_root() {
    let Some(ceph) = ceph() else { return };
    let map = ceph.build(12, "root straw2 0");
    // Rule 0 of a one-level build chooses leaves of type root: it must map to nothing.
    let map = with_rules(&ceph, map, &[("root", "osd", "firstn"), ("root", "osd", "indep")]);
    ceph.sweep("1 level, 12 osds", &map, &[1, 2], &[1, 4, 6], 3, &[]);
    ceph.sweep("1 level, 12 osds, leaves of type root", &map, &[0], &[3], 3, &[]);
}

#[test]
fn two_level_hosts() {
    let Some(ceph) = ceph() else { return };
    let map = ceph.build(40, "host straw2 10 root straw2 0");
    let map = with_rules(&ceph, map, &[("root", "host", "indep")]);
    ceph.sweep("2 levels, 4 hosts x 10", &map, &[0, 1], &ALL_SIZES, 1, &[]);
}

#[test]
fn three_level_racks() {
    let Some(ceph) = ceph() else { return };
    let map = ceph.build(240, "host straw2 4 rack straw2 5 root straw2 0");
    let map = with_rules(&ceph, map, &[("root", "rack", "firstn"), ("root", "rack", "indep")]);
    ceph.sweep("3 levels, 12 racks x 5 hosts x 4", &map, &[0, 1, 2], &[1, 3, 5], 7, &[]);
}

#[test]
fn every_bucket_algorithm() {
    let Some(ceph) = ceph() else { return };
    for alg in ["uniform", "list", "tree", "straw", "straw2"] {
        let map = ceph.build(42, &format!("host {alg} 7 root {alg} 0"));
        let map = with_rules(&ceph, map, &[("root", "host", "indep"), ("root", "osd", "firstn")]);
        // Size 2 divides the root's 6 hosts: uniform indep retries step by numrep + 1.
        ceph.sweep(&format!("{alg} buckets"), &map, &[0, 1, 2], &[2, 5], 2, &[]);
    }
    // Mixed: uniform hosts in list racks under a tree root; straw hosts under straw2.
    let map = ceph.build(72, "host uniform 3 rack list 4 root tree 0");
    ceph.sweep("uniform/list/tree", &map, &[0], &[3], 5, &[]);
    let map = ceph.build(40, "host straw 5 root straw2 0");
    ceph.sweep("straw/straw2", &map, &[0], &[3], 5, &[]);
}

/// Devices marked out (0), nearly out and partly reweighted: the `is_out` path.
const REWEIGHTS: [(u32, f32); 9] = [
    (0, 0.0),
    (3, 0.5),
    (7, 0.25),
    (11, 0.0),
    (12, 0.8),
    (19, 0.1),
    (20, 0.0),
    (27, 0.999),
    (31, 0.0),
];

#[test]
fn reweighted_and_out_devices() {
    let Some(ceph) = ceph() else { return };
    let map = ceph.build(40, "host straw2 5 root straw2 0");
    let map = with_rules(&ceph, map, &[("root", "host", "indep"), ("root", "osd", "firstn")]);
    ceph.sweep("reweights", &map, &[0, 1, 2], &[1, 3, 6], 1, &REWEIGHTS);
    // A whole host out: chooseleaf must retry elsewhere.
    let host_out: Vec<(u32, f32)> = (0..5).map(|d| (d, 0.0)).collect();
    ceph.sweep("host out", &map, &[0, 1], &[3, 8], 1, &host_out);
}

/// crushtool flags that set each tunable.
const LEGACY: [&str; 12] = [
    "--set_choose_local_tries",
    "2",
    "--set_choose_local_fallback_tries",
    "5",
    "--set_choose_total_tries",
    "19",
    "--set_chooseleaf_descend_once",
    "0",
    "--set_chooseleaf_vary_r",
    "0",
    "--set_chooseleaf_stable",
    "0",
];

#[test]
fn tunables_profiles() {
    let Some(ceph) = ceph() else { return };
    // Few hosts, many rejections: retries, local tries and fallbacks all get exercised.
    let base = ceph.build(30, "host straw2 5 root straw2 0");
    let base = with_rules(&ceph, base, &[("root", "host", "indep")]);
    let profiles: [(&str, &[&str]); 4] = [
        ("legacy", &LEGACY),
        (
            "bobtail",
            &[
                "--set_choose_local_tries",
                "0",
                "--set_choose_local_fallback_tries",
                "0",
                "--set_choose_total_tries",
                "50",
                "--set_chooseleaf_descend_once",
                "1",
                "--set_chooseleaf_vary_r",
                "0",
                "--set_chooseleaf_stable",
                "0",
            ],
        ),
        (
            "firefly",
            &[
                "--set_choose_local_tries",
                "0",
                "--set_choose_local_fallback_tries",
                "0",
                "--set_choose_total_tries",
                "50",
                "--set_chooseleaf_descend_once",
                "1",
                "--set_chooseleaf_vary_r",
                "1",
                "--set_chooseleaf_stable",
                "0",
            ],
        ),
        ("jewel", &[]),
    ];
    for (name, flags) in profiles {
        let map = if flags.is_empty() { base.clone() } else { ceph.modify(&base, flags) };
        ceph.sweep(&format!("{name} tunables"), &map, &[0, 1], &[3, 6], 9, &REWEIGHTS);
    }
}

#[test]
fn each_tunable_changed_alone() {
    let Some(ceph) = ceph() else { return };
    let base = ceph.build(30, "host straw2 5 root straw2 0");
    let base = with_rules(&ceph, base, &[("root", "host", "indep")]);
    let changes: [(&str, &str); 8] = [
        ("--set_choose_local_tries", "2"),
        ("--set_choose_local_fallback_tries", "5"),
        ("--set_choose_total_tries", "19"),
        ("--set_choose_total_tries", "3"),
        ("--set_chooseleaf_descend_once", "0"),
        ("--set_chooseleaf_vary_r", "0"),
        ("--set_chooseleaf_vary_r", "2"),
        ("--set_chooseleaf_stable", "0"),
    ];
    for (flag, value) in changes {
        let map = ceph.modify(&base, &[flag, value]);
        ceph.sweep(&format!("{flag} {value}"), &map, &[0, 1], &[3, 6], 4, &REWEIGHTS);
    }
    // And each one changed alone from legacy.
    for pair in LEGACY.chunks(2) {
        let mut flags = LEGACY.to_vec();
        let optimal = match pair[0] {
            "--set_choose_local_tries" | "--set_choose_local_fallback_tries" => "0",
            "--set_choose_total_tries" => "50",
            _ => "1",
        };
        let at = flags.iter().position(|f| *f == pair[0]).expect("flag present");
        flags[at + 1] = optimal;
        let map = ceph.modify(&base, &flags);
        ceph.sweep(
            &format!("legacy but {} {optimal}", pair[0]),
            &map,
            &[0],
            &[3, 6],
            4,
            &REWEIGHTS,
        );
    }
}
