//! Proves: Optio's `Placement` — object name → PG → pps → CRUSH → up set and primary — gives
//! what Ceph's OSDMap gives (`osdmaptool --test-map-object` and `--test-map-pgs-dump`) for
//! whole pools with power-of-two and other `pg_num`, `pgp_num < pg_num`, sizes 1–6, an out
//! device, device classes, and choose_args chosen per pool with the default set as fallback.

use std::path::{Path, PathBuf};

use optio_placement::{
    ClusterMap, CrushSpec, EngineRef, Placement, PoolId, PoolSpec, RuleId, RuleRef,
    placement::Scratch,
};

use crate::ceph::{Ceph, ceph, path_str};
use crate::textmap::{TextMap, Weights, level};

/// An OSDMap made by `osdmaptool --createsimple` with the crush map imported.
struct OsdMap {
    path: PathBuf,
    pg_num: u32,
    pgp_num: u32,
    size: u32,
    rule: u32,
    /// `--mark-out`: the one device osdmaptool can mark out.
    out: Option<u32>,
}

impl OsdMap {
    /// `osdmaptool --createsimple` with `pg_bits`/`pgp_bits` per OSD and pool size `size`,
    /// then `--import-crush`.
    fn new(ceph: &Ceph, crush: &Path, osds: u32, pg_bits: u32, pgp_bits: u32, size: u32) -> OsdMap {
        let path = ceph.path("osdmap");
        let (osds, pg_bits, pgp_bits, size) =
            (osds.to_string(), pg_bits.to_string(), pgp_bits.to_string(), size.to_string());
        ceph.run(
            "osdmaptool",
            &[
                "--createsimple",
                &osds,
                "--with-default-pool",
                path_str(&path),
                "--clobber",
                "--pg-bits",
                &pg_bits,
                "--pgp-bits",
                &pgp_bits,
                "--osd_pool_default_size",
                &size,
            ],
        );
        ceph.run("osdmaptool", &[path_str(&path), "--import-crush", path_str(crush)]);
        let dump = ceph.run("osdmaptool", &[path_str(&path), "--dump", "json"]);
        let json: serde_json::Value =
            serde_json::from_str(&dump[dump.find('{').expect("JSON in the dump")..]).expect("JSON");
        let pool = &json["pools"][0];
        assert_eq!(pool["pool"], 1);
        assert_eq!(pool["object_hash"], 2, "rjenkins object hash");
        assert_eq!(pool["flags_names"], "hashpspool");
        let field = |name: &str| pool[name].as_u64().expect("a pool field") as u32;
        OsdMap {
            pg_num: field("pg_num"),
            pgp_num: field("pg_placement_num"),
            size: field("size"),
            rule: field("crush_rule"),
            path,
            out: None,
        }
    }

    fn mark_out(mut self, device: u32) -> OsdMap {
        self.out = Some(device);
        self
    }

    /// The state flags every query passes: all OSDs up and in, one maybe out.
    fn state_args(&self) -> Vec<String> {
        let mut args = vec![path_str(&self.path).to_string(), "--mark-up-in".to_string()];
        if let Some(out) = self.out {
            args.extend(["--mark-out".to_string(), out.to_string()]);
        }
        args
    }

    /// The same cluster as an Optio map: the crush map, pool 1 and the device states.
    fn optio(&self, crush: &ClusterMap) -> ClusterMap {
        let mut builder = crush.to_builder();
        for device in &mut builder.devices {
            device.is_in = Some(device.id.0) != self.out;
        }
        builder.pools.push(PoolSpec {
            pgp_num: Some(self.pgp_num),
            engine: EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(RuleId(self.rule))) }),
            ..PoolSpec::crush(1, "rbd", self.pg_num, self.size)
        });
        builder.build().expect("the pool fits the map")
    }
}

/// Parses `[1,2,3]`.
fn parse_set(text: &str) -> Vec<i32> {
    let inner = text.trim().trim_start_matches('[').trim_end_matches(']');
    if inner.is_empty() {
        Vec::new()
    } else {
        inner.split(',').map(|v| v.parse().expect("osd id")).collect()
    }
}

/// Every PG of pool 1: osdmaptool's up set and primary against Optio's. Returns the PG count.
fn assert_pool_matches(ceph: &Ceph, what: &str, osdmap: &OsdMap, crush: &ClusterMap) -> usize {
    let mut args = osdmap.state_args();
    args.extend(["--test-map-pgs-dump", "--pool", "1"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let stdout = ceph.run("osdmaptool", &args);
    let map = osdmap.optio(crush);
    let placement = Placement::new(&map).expect("compiles");
    let pool = placement.pool(PoolId(1)).expect("pool 1");
    let mut scratch: Scratch = placement.scratch();
    let mut out = optio_placement::ReplicaSet::new();
    let mut compared = 0;
    let mut mismatches = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with("1.")) {
        // 1.1f	[5,39,23]	5
        let mut fields = line.split('\t');
        let pg: optio_placement::pg::PgId = fields.next().expect("pg").parse().expect("pg id");
        let expected = parse_set(fields.next().expect("set"));
        let primary: i32 = fields.next().expect("primary").trim().parse().expect("primary");
        pool.place(pool.pg_key(pg.seed), &mut scratch, &mut out);
        let actual: Vec<i32> = out.as_slice().to_vec();
        let ours_primary = out.primary().map_or(-1, |d| d.0 as i32);
        if actual != expected || ours_primary != primary {
            mismatches.push(format!(
                "{pg}: osdmaptool {expected:?} p{primary}, optio {actual:?} p{ours_primary}"
            ));
        }
        compared += 1;
    }
    assert_eq!(compared, osdmap.pg_num as usize, "{what}: osdmaptool printed every PG");
    assert!(
        mismatches.is_empty(),
        "{what}: {} of {compared} PGs differ:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(8)].join("\n")
    );
    eprintln!("{what}: {compared} PGs identical to osdmaptool");
    compared
}

/// Object names of every length class Ceph's string hash treats differently (tail bytes
/// 0–11, several 12-byte blocks), with separators and non-ASCII bytes.
const NAMES: [&str; 16] = [
    "foo",
    "bar",
    "a",
    "obj1",
    "rbd_data.1234",
    "hello_world_object_name_longer_than_12",
    "abcdefghijkl",
    "abcdefghijklm",
    "0123456789abcdef0123456789abcdef",
    "a b/c:d",
    "émoji_ü",
    "x",
    "12",
    "rbd_header.5e7a2ae8944a",
    "benchmark_data_host_1234_object99",
    "zzzzzzzzzzz",
];

/// Every name in [`NAMES`]: osdmaptool's PG and up set against Optio's `locate`.
fn assert_objects_match(ceph: &Ceph, what: &str, osdmap: &OsdMap, crush: &ClusterMap) -> usize {
    let map = osdmap.optio(crush);
    let placement = Placement::new(&map).expect("compiles");
    let pool = placement.pool(PoolId(1)).expect("pool 1");
    for name in NAMES {
        let mut args = osdmap.state_args();
        args.extend([
            "--test-map-object".to_string(),
            name.to_string(),
            "--pool".to_string(),
            "1".to_string(),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let stdout = ceph.run("osdmaptool", &args);
        // " object 'foo' -> 1.406 -> [34,15,28]"
        let line = stdout.lines().find(|l| l.contains(" object '")).expect("a mapping line");
        let mut parts = line.rsplit(" -> ");
        let expected_set = parse_set(parts.next().expect("set"));
        let expected_pg = parts.next().expect("pg").trim();
        let location = pool.locate(name);
        assert_eq!(
            location.pg.expect("crush pools have PGs").to_string(),
            expected_pg,
            "{what}: PG of {name:?}"
        );
        assert_eq!(
            location.devices.as_slice(),
            expected_set.as_slice(),
            "{what}: devices of {name:?}"
        );
    }
    eprintln!("{what}: {} objects identical to osdmaptool", NAMES.len());
    NAMES.len()
}

#[test]
fn four_hosts_size_3_and_objects() {
    let Some(ceph) = ceph() else { return };
    let crush_path = ceph.build(40, "host straw2 10 root straw2 0");
    let crush = ceph.load(&crush_path);
    // 40 << 6 = 2560 PGs: not a power of two, so stable_mod folds the high seeds.
    let osdmap = OsdMap::new(&ceph, &crush_path, 40, 6, 6, 3);
    assert_eq!((osdmap.pg_num, osdmap.pgp_num), (2560, 2560));
    assert_pool_matches(&ceph, "4 hosts, size 3", &osdmap, &crush);
    assert_objects_match(&ceph, "4 hosts, size 3", &osdmap, &crush);
    let osdmap = osdmap.mark_out(15);
    assert_pool_matches(&ceph, "4 hosts, size 3, osd.15 out", &osdmap, &crush);
    assert_objects_match(&ceph, "4 hosts, size 3, osd.15 out", &osdmap, &crush);
}

#[test]
fn pgp_num_below_pg_num_and_sizes() {
    let Some(ceph) = ceph() else { return };
    let crush_path = ceph.build(48, "host straw2 3 rack straw2 2 root straw2 0");
    let crush_path =
        ceph.modify(&crush_path, &["--create-simple-rule", "unused", "root", "rack", "firstn"]);
    let crush = ceph.load(&crush_path);
    // 8 hosts: sizes 1, 2, 5 and 6 across hosts; pg 768/pgp 384, pg 3072/pgp 1536, pg 48/pgp 48.
    for (size, pg_bits, pgp_bits) in [(1, 4, 3), (2, 6, 5), (5, 4, 3), (6, 0, 0)] {
        let osdmap = OsdMap::new(&ceph, &crush_path, 48, pg_bits, pgp_bits, size);
        assert_eq!(osdmap.pgp_num, 48 << pgp_bits);
        let what = format!("8 hosts, size {size}, pg {} pgp {}", osdmap.pg_num, osdmap.pgp_num);
        assert_pool_matches(&ceph, &what, &osdmap, &crush);
    }
    let osdmap = OsdMap::new(&ceph, &crush_path, 48, 4, 3, 4).mark_out(7);
    assert_objects_match(&ceph, "8 hosts, size 4, pgp < pg, osd.7 out", &osdmap, &crush);
}

/// Random weights without zeros: `osdmaptool --mark-up-in` gives every device of CRUSH
/// weight 0 the weight 1.0 (a quirk of the tool, not of Ceph's OSDMap), and the crushtool
/// tests cover zero weights.
fn class_map(take: &str) -> TextMap {
    let levels =
        [level("root", "straw2", 3), level("rack", "straw2", 2), level("host", "straw2", 4)];
    TextMap::hierarchy(&levels, Weights::Random { zero_percent: 0 }, &["hdd", "ssd"], 77).rule(
        0,
        "replicated",
        &[take, "chooseleaf firstn 0 type host", "emit"],
    )
}

#[test]
fn device_class_rule() {
    let Some(ceph) = ceph() else { return };
    let map = class_map("take default class hdd");
    let crush_path = ceph.compile(&map.text());
    let crush = ceph.load(&crush_path);
    let osdmap = OsdMap::new(&ceph, &crush_path, map.devices, 5, 5, 3);
    assert_pool_matches(&ceph, "class hdd, random weights", &osdmap, &crush);
    assert_objects_match(&ceph, "class hdd, random weights", &osdmap, &crush.clone());
}

#[test]
fn choose_args_of_the_pool_else_the_default_set() {
    // An OSDMap maps pool P with choose_args P, else the default set (-1), never set 0. The
    // rule takes a class: the weight sets of the shadow buckets are the ones used.
    let Some(ceph) = ceph() else { return };
    let plain = class_map("take default class ssd");
    let plain_path = ceph.compile(&plain.text());
    let plain_map = ceph.load(&plain_path);
    let plain_osdmap = OsdMap::new(&ceph, &plain_path, plain.devices, 5, 5, 3);
    let baseline = pool_sets(&plain_osdmap.optio(&plain_map));
    for (sets, used) in
        [(&[1][..], true), (&[-1][..], true), (&[0][..], false), (&[0, -1][..], true)]
    {
        let mut map = class_map("take default class ssd");
        for (i, id) in sets.iter().enumerate() {
            map = map.with_choose_args(*id, 2, i == 0, 11 + i as u64);
        }
        let text = map.text().replace("choose_args -1 ", "choose_args 18446744073709551615 ");
        let crush_path = ceph.compile(&text);
        let crush = ceph.load(&crush_path);
        let osdmap = OsdMap::new(&ceph, &crush_path, map.devices, 5, 5, 3);
        assert_pool_matches(&ceph, &format!("choose_args {sets:?}"), &osdmap, &crush);
        let changed = pool_sets(&osdmap.optio(&crush)) != baseline;
        assert_eq!(changed, used, "choose_args {sets:?} used for pool 1");
    }
}

/// Every PG's up set of pool 1.
fn pool_sets(map: &ClusterMap) -> Vec<Vec<i32>> {
    let placement = Placement::new(map).expect("compiles");
    let pool = placement.pool(PoolId(1)).expect("pool 1");
    let mut scratch = placement.scratch();
    let mut out = optio_placement::ReplicaSet::new();
    (0..pool.pool().pg_num)
        .map(|seed| {
            pool.place(pool.pg_key(seed), &mut scratch, &mut out);
            out.as_slice().to_vec()
        })
        .collect()
}
