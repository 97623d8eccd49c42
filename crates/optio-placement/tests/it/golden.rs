//! Proves: placements have not changed. Each fixture in `tests/golden/` holds a map (as a
//! small JSON description), object names, and what every pool of the map placed them on
//! (PG, engine key, devices, primary); elastic pools also as of each membership version. Any
//! change of mapping output — CRUSH, ring, attributed or elastic, hashing, PG folding, primary
//! affinity, up/out handling, sectors, strategies, ranks — fails here. A change that is meant is a new,
//! named placement version: rewrite the fixtures with `OPTIO_BLESS=1 cargo test golden` and
//! say so in the commit.

use std::fmt::Write as _;
use std::path::PathBuf;

use optio_placement::{
    ActiveSpec, AttributedSpec, BucketAlg, BucketSpec, ClusterMap, ClusterMapBuilder, CrushSpec,
    DeviceId, DeviceSpec, ElasticSpec, EngineRef, ItemRef, MembershipSpec, Placement, PoolId,
    PoolSpec, ReplicaSet, RingSpec, RuleId, RuleKind, RuleRef, RuleSpec, Step, StepSpec, Tunables,
    TunablesProfile, VersionSpec, Weight,
};
use serde_json::{Value, json};

/// Objects placed per pool.
const OBJECTS: usize = 256;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests").join("golden")
}

/// A small deterministic generator for the fixtures' weights and states.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    *state >> 33
}

/// `racks` × `hosts` × `per_host` devices with varied weights and capacities; every 7th
/// device reweighted, every 11th out, every 13th down, every 5th with primary affinity 0.5.
fn devices(racks: u32, hosts: u32, per_host: u32, classes: &[&str], seed: u64) -> Vec<Value> {
    let mut state = seed;
    let mut devices = Vec::new();
    for id in 0..racks * hosts * per_host {
        let host = id / per_host;
        let weight = 0x4000 + next(&mut state) % 0x40000;
        let mut device = json!({
            "id": id,
            "weight": weight,
            "capacity_bytes": (weight << 24) + next(&mut state) % (1 << 30),
            "location": [["rack", format!("rack{}", host / hosts)], ["host", format!("host{host}")]],
        });
        if id % 7 == 3 {
            device["reweight"] = json!(0x8000 + next(&mut state) % 0x8000);
        }
        if id % 11 == 5 {
            device["in"] = json!(false);
        }
        if id % 13 == 6 {
            device["up"] = json!(false);
        }
        if id % 5 == 2 {
            device["primary_affinity"] = json!(0x8000);
        }
        if !classes.is_empty() {
            device["class"] = json!(
                classes
                    [usize::try_from(next(&mut state) % classes.len() as u64).expect("an index")]
            );
        }
        devices.push(device);
    }
    devices
}

/// The fixtures: name → map description.
fn fixtures() -> Vec<(&'static str, Value)> {
    let crush = json!({
        "tunables": "optimal",
        "devices": devices(3, 4, 4, &["hdd", "ssd"], 1),
        "rules": [
            {"id": 0, "name": "replicated", "kind": "replicated",
             "steps": ["take default", "chooseleaf firstn 0 type host", "emit"]},
            {"id": 1, "name": "ec", "kind": "erasure",
             "steps": ["set_chooseleaf_tries 5", "set_choose_tries 100", "take default",
                       "chooseleaf indep 0 type host", "emit"]},
            {"id": 2, "name": "racks", "kind": "replicated",
             "steps": ["take default", "choose firstn 0 type rack", "chooseleaf firstn 1 type host", "emit"]},
            {"id": 3, "name": "ssd", "kind": "replicated",
             "steps": ["take default class ssd", "chooseleaf firstn 0 type host", "emit"]},
        ],
        "pools": [
            {"id": 1, "name": "rbd", "engine": "crush", "rule": 0, "pg_num": 128, "size": 3},
            {"id": 2, "name": "ec", "engine": "crush", "rule": 1, "pg_num": 100, "size": 6},
            {"id": 3, "name": "racks", "engine": "crush", "rule": 2, "pg_num": 64, "pgp_num": 48, "size": 3},
            {"id": 4, "name": "ssd", "engine": "crush", "rule": 3, "pg_num": 32, "size": 2},
            {"id": 5, "name": "old", "engine": "crush", "rule": 0, "pg_num": 64, "size": 2, "hashpspool": false},
        ],
    });
    let legacy = json!({
        "tunables": "legacy",
        "devices": devices(1, 1, 12, &[], 2).into_iter().map(|mut d| {
            d.as_object_mut().expect("object").remove("location");
            d
        }).collect::<Vec<_>>(),
        "buckets": [
            {"id": -2, "name": "u0", "type": "host", "alg": "uniform",
             "items": [["osd.0", 65536], ["osd.1", 65536], ["osd.2", 65536]]},
            {"id": -3, "name": "l0", "type": "host", "alg": "list",
             "items": [["osd.3", null], ["osd.4", null], ["osd.5", null]]},
            {"id": -4, "name": "t0", "type": "host", "alg": "tree",
             "items": [["osd.6", null], ["osd.7", null], ["osd.8", null]]},
            {"id": -5, "name": "s0", "type": "host", "alg": "straw",
             "items": [["osd.9", null], ["osd.10", null], ["osd.11", null]]},
            {"id": -1, "name": "default", "type": "root", "alg": "straw",
             "items": [["u0", null], ["l0", null], ["t0", null], ["s0", null]]},
        ],
        "rules": [
            {"id": 0, "name": "replicated", "kind": "replicated",
             "steps": ["take default", "chooseleaf firstn 0 type host", "emit"]},
            {"id": 1, "name": "ec", "kind": "erasure",
             "steps": ["take default", "chooseleaf indep 0 type host", "emit"]},
        ],
        "pools": [
            {"id": 1, "name": "rbd", "engine": "crush", "rule": 0, "pg_num": 256, "size": 3},
            {"id": 2, "name": "ec", "engine": "crush", "rule": 1, "pg_num": 64, "size": 4},
        ],
    });
    let ring = json!({
        "tunables": "optimal",
        "devices": devices(2, 3, 3, &[], 3),
        "rules": [],
        "pools": [
            {"id": 1, "name": "hosts", "engine": "ring", "vnode_bytes": 64u64 << 30,
             "failure_domain": "host", "pg_num": 0, "size": 3},
            {"id": 2, "name": "racks", "engine": "ring", "vnode_bytes": 16u64 << 30,
             "failure_domain": "rack", "pg_num": 0, "size": 2},
            {"id": 3, "name": "devices", "engine": "ring", "vnode_bytes": 8u64 << 30,
             "pg_num": 0, "size": 4},
            {"id": 4, "name": "pgs", "engine": "ring", "vnode_bytes": 64u64 << 30,
             "failure_domain": "host", "pg_num": 512, "pgp_num": 300, "size": 3},
        ],
    });
    // The attributed-CH paper's two node types: every third device an SSD.
    let mut hetero = devices(3, 2, 3, &[], 4);
    for (i, device) in hetero.iter_mut().enumerate() {
        let ssd = i % 3 == 0;
        device["class"] = json!(if ssd { "ssd" } else { "hdd" });
        device["bandwidth"] = json!(if ssd { 540 } else { 146 + i % 3 });
    }
    let mut base: Vec<Value> = (0..18).map(|id| json!([id, 20 + id % 7])).collect();
    base.push(json!([40, 12])); // a device since removed: its slots stay, marked
    let attributed = json!({
        "tunables": "optimal",
        "devices": hetero,
        "rules": [],
        "pools": [
            {"id": 1, "name": "capacity", "engine": "attributed", "throttle": 64u64 << 30,
             "sector_size": 4, "pg_num": 0, "size": 3},
            {"id": 2, "name": "racks", "engine": "attributed", "throttle": 16u64 << 30,
             "sector_size": 3, "zone_type": "rack", "distinct_zones": true, "pg_num": 0, "size": 2},
            {"id": 3, "name": "grown", "engine": "attributed", "throttle": 32u64 << 30,
             "sector_size": 5, "zone_type": "host", "distinct_zones": true, "sector_base": base,
             "pg_num": 0, "size": 3},
            {"id": 4, "name": "pgs", "engine": "attributed", "throttle": 64u64 << 30,
             "pg_num": 256, "size": 2},
            {"id": 5, "name": "rendezvous", "engine": "attributed", "throttle": 32u64 << 30,
             "sector_size": 5, "zone_type": "host", "distinct_zones": true, "sector_base": base,
             "selection": "rendezvous", "pg_num": 0, "size": 3},
        ],
    });
    let order: Vec<u32> = (0..18).map(|i| (i * 7) % 18).collect();
    let elastic = json!({
        "tunables": "optimal",
        "devices": devices(2, 3, 3, &[], 5),
        "rules": [],
        "pools": [
            {"id": 1, "name": "twoway", "engine": "elastic", "scale": 8192, "pg_num": 0, "size": 2},
            {"id": 2, "name": "threeway", "engine": "elastic", "primaries": 4, "pg_num": 0, "size": 3},
        ],
        "membership": {
            "order": order,
            "versions": [
                {"version": 7, "active": 18},
                {"version": 8, "active": 9},
                {"version": 9, "active": [0, 7, 14, 3, 10, 17, 6, 13, 1, 2, 4]},
            ],
        },
    });
    vec![
        ("crush", crush),
        ("crush_legacy", legacy),
        ("ring", ring),
        ("attributed", attributed),
        ("elastic", elastic),
    ]
}

fn int(value: &Value, key: &str) -> u64 {
    value[key].as_u64().unwrap_or_else(|| panic!("{key} in {value}"))
}

/// `value[key]`, a number that must fit 32 bits.
fn int32(value: &Value, key: &str) -> u32 {
    u32::try_from(int(value, key)).unwrap_or_else(|_| panic!("{key} in {value} exceeds 32 bits"))
}

/// `value` as a number that must fit 32 bits, if it is a number.
fn u32_value(value: &Value) -> Option<u32> {
    value.as_u64().map(|n| u32::try_from(n).unwrap_or_else(|_| panic!("{n} exceeds 32 bits")))
}

fn text(value: &Value, key: &str) -> String {
    value[key].as_str().unwrap_or_else(|| panic!("{key} in {value}")).to_string()
}

/// `take X [class C]`, `choose|chooseleaf firstn|indep N type T`, `emit`, `set_… N`.
fn step(line: &str) -> StepSpec {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words[..] {
        ["take", item] => StepSpec::Take { item: ItemRef::Name(item.into()), class: None },
        ["take", item, "class", class] => {
            StepSpec::Take { item: ItemRef::Name(item.into()), class: Some(class.into()) }
        }
        [op @ ("choose" | "chooseleaf"), mode, num, "type", type_name] => StepSpec::Choose {
            leaf: op == "chooseleaf",
            indep: mode == "indep",
            num: num.parse().expect("a count"),
            type_name: type_name.into(),
        },
        ["emit"] => StepSpec::Emit,
        [set, value] => {
            let value: i32 = value.parse().expect("a value");
            StepSpec::Set(match set {
                "set_choose_tries" => Step::SetChooseTries(value),
                "set_chooseleaf_tries" => Step::SetChooseleafTries(value),
                other => panic!("unknown step {other}"),
            })
        }
        _ => panic!("unknown step {line}"),
    }
}

/// The map a description stands for.
fn build(description: &Value) -> ClusterMap {
    let mut builder = ClusterMapBuilder::new();
    builder.tunables = match description["tunables"].as_str() {
        Some("legacy") => Tunables::legacy(),
        _ => TunablesProfile::Jewel.tunables(),
    };
    for d in description["devices"].as_array().expect("devices") {
        let mut device = DeviceSpec::new(int32(d, "id"))
            .weight(Weight(int32(d, "weight")))
            .capacity(int(d, "capacity_bytes"));
        if let Some(location) = d["location"].as_array() {
            device.location = location
                .iter()
                .map(|pair| {
                    (pair[0].as_str().expect("type").into(), pair[1].as_str().expect("name").into())
                })
                .collect();
        }
        device.reweight = Weight(u32_value(&d["reweight"]).unwrap_or(0x10000));
        device.primary_affinity = Weight(u32_value(&d["primary_affinity"]).unwrap_or(0x10000));
        device.is_in = d["in"].as_bool().unwrap_or(true);
        device.up = d["up"].as_bool().unwrap_or(true);
        device.class = d["class"].as_str().map(String::from);
        device.bandwidth_mb_per_s = u32_value(&d["bandwidth"]).unwrap_or(0);
        builder = builder.device(device);
    }
    for b in description["buckets"].as_array().into_iter().flatten() {
        builder.buckets.push(BucketSpec {
            id: b["id"]
                .as_i64()
                .map(|id| optio_placement::BucketId(i32::try_from(id).expect("a 32-bit id"))),
            name: text(b, "name"),
            type_name: text(b, "type"),
            alg: BucketAlg::from_name(&text(b, "alg")).expect("an algorithm"),
            hash: 0,
            items: b["items"]
                .as_array()
                .expect("items")
                .iter()
                .map(|item| {
                    let name = ItemRef::Name(item[0].as_str().expect("item").into());
                    (name, u32_value(&item[1]).map(Weight))
                })
                .collect(),
            class_ids: Vec::new(),
        });
    }
    for r in description["rules"].as_array().expect("rules") {
        builder = builder.rule(RuleSpec {
            id: RuleId(int32(r, "id")),
            name: text(r, "name"),
            kind: if text(r, "kind") == "erasure" {
                RuleKind::Erasure
            } else {
                RuleKind::Replicated
            },
            min_size: 1,
            max_size: 10,
            steps: r["steps"]
                .as_array()
                .expect("steps")
                .iter()
                .map(|s| step(s.as_str().expect("step")))
                .collect(),
        });
    }
    for p in description["pools"].as_array().expect("pools") {
        let mut pool =
            PoolSpec::crush(int32(p, "id"), &text(p, "name"), int32(p, "pg_num"), int32(p, "size"));
        pool.pgp_num = u32_value(&p["pgp_num"]);
        pool.hashpspool = p["hashpspool"].as_bool().unwrap_or(true);
        pool.engine = match text(p, "engine").as_str() {
            "crush" => {
                EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(RuleId(int32(p, "rule")))) })
            }
            "attributed" => EngineRef::Attributed(AttributedSpec {
                throttle_bytes: p["throttle"].as_u64(),
                sector_size: u32_value(&p["sector_size"]),
                zone_type: p["zone_type"].as_str().map(String::from),
                distinct_zones: p["distinct_zones"].as_bool().unwrap_or(false),
                bandwidth_tolerance_percent: None,
                selection: p["selection"]
                    .as_str()
                    .and_then(optio_placement::SectorSelection::from_name),
                sector_base: p["sector_base"].as_array().map(|base| {
                    base.iter()
                        .map(|pair| {
                            (
                                DeviceId(u32_value(&pair[0]).expect("id")),
                                u32_value(&pair[1]).expect("count"),
                            )
                        })
                        .collect()
                }),
            }),
            "elastic" => EngineRef::Elastic(ElasticSpec {
                primaries: u32_value(&p["primaries"]),
                scale: u32_value(&p["scale"]),
            }),
            _ => EngineRef::Ring(RingSpec {
                vnode_bytes: p["vnode_bytes"].as_u64(),
                failure_domain: p["failure_domain"].as_str().map(String::from),
            }),
        };
        builder = builder.pool(pool);
    }
    if let Some(m) = description.get("membership") {
        let id = |v: &Value| {
            ItemRef::Id(optio_placement::ItemId(
                i32::try_from(v.as_i64().expect("a device id")).expect("a 32-bit id"),
            ))
        };
        builder.membership = Some(MembershipSpec {
            order: m["order"].as_array().expect("order").iter().map(id).collect(),
            versions: m["versions"]
                .as_array()
                .expect("versions")
                .iter()
                .map(|v| VersionSpec {
                    version: v["version"].as_u64(),
                    active: match v["active"].as_array() {
                        Some(devices) => ActiveSpec::Devices(devices.iter().map(id).collect()),
                        None => ActiveSpec::FirstRanks(int32(v, "active")),
                    },
                })
                .collect(),
        });
    }
    builder.build().expect("a fixture map is valid")
}

/// Every pool's placement of [`OBJECTS`] names, one line per object:
/// `[name, pg or null, key, [devices…], primary]` (`2147483647` is an erasure-coded hole;
/// primary affinity can make an erasure-coded set's primary other than its first device).
fn placements(map: &ClusterMap) -> String {
    let placement = Placement::new(map).expect("compiles");
    let mut out = String::from("{\n");
    let pools: Vec<PoolId> = map.pools().iter().map(|p| p.id).collect();
    for (n, id) in pools.iter().enumerate() {
        let pool = placement.pool(*id).expect("pool");
        writeln!(out, "  {}: [", json!(pool.pool().name)).expect("write");
        for i in 0..OBJECTS {
            let name = format!("object-{i}");
            let location = pool.locate(&name);
            let pg = location.pg.map_or(Value::Null, |pg| json!(pg.to_string()));
            let comma = if i + 1 < OBJECTS { "," } else { "" };
            let primary = location.devices.primary().map_or(-1, |d| i64::from(d.0));
            let line = json!([name, pg, location.key, location.devices.as_slice(), primary]);
            writeln!(out, "    {line}{comma}").expect("write");
        }
        let versions: Vec<u64> =
            pool.elastic().map(|ring| ring.versions().collect()).unwrap_or_default();
        writeln!(out, "  ]{}", if n + 1 < pools.len() || !versions.is_empty() { "," } else { "" })
            .expect("write");
        // Elastic pools: where each object lives as of each membership version.
        for (v, version) in versions.iter().enumerate() {
            writeln!(out, "  {}: [", json!(format!("{}@{version}", pool.pool().name)))
                .expect("write");
            let mut set = ReplicaSet::new();
            for i in 0..OBJECTS {
                let name = format!("object-{i}");
                let (_, key) = pool.object_key(&name);
                assert!(pool.place_as_of(*version, key, &mut set), "version {version}");
                let comma = if i + 1 < OBJECTS { "," } else { "" };
                writeln!(out, "    {}{comma}", json!([name, key, set.as_slice()])).expect("write");
            }
            let last = n + 1 == pools.len() && v + 1 == versions.len();
            writeln!(out, "  ]{}", if last { "" } else { "," }).expect("write");
        }
    }
    out.push('}');
    out
}

fn render(description: &Value, placements: &str) -> String {
    let description = serde_json::to_string_pretty(description).expect("JSON");
    let description = description.replace('\n', "\n  ");
    format!(
        "{{\n  \"about\": \"Golden placements: see crates/optio-placement/tests/it/golden.rs. Rewrite with OPTIO_BLESS=1 only for a deliberate, named placement change.\",\n  \"map\": {description},\n  \"placements\": {}\n}}\n",
        placements.replace('\n', "\n  ")
    )
}

#[test]
fn placements_match_the_golden_fixtures() {
    let bless = std::env::var("OPTIO_BLESS").is_ok_and(|v| v == "1");
    let dir = golden_dir();
    let mut checked = 0;
    for (name, description) in fixtures() {
        let path = dir.join(format!("{name}.json"));
        if bless {
            let map = build(&description);
            std::fs::create_dir_all(&dir).expect("create tests/golden");
            std::fs::write(&path, render(&description, &placements(&map))).expect("write fixture");
            eprintln!("blessed {}", path.display());
            continue;
        }
        let stored = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e}; create it with OPTIO_BLESS=1 cargo test golden", path.display())
        });
        let stored: Value = serde_json::from_str(&stored).expect("a fixture is JSON");
        // The map comes from the fixture itself, so the fixture alone pins the output.
        let map = build(&stored["map"]);
        let computed: Value = serde_json::from_str(&placements(&map)).expect("JSON");
        let expected = &stored["placements"];
        for (pool, entries) in expected.as_object().expect("pools") {
            let now = &computed[pool];
            let entries = entries.as_array().expect("entries");
            let changed: Vec<String> = entries
                .iter()
                .zip(now.as_array().expect("pool present"))
                .filter(|(a, b)| a != b)
                .take(5)
                .map(|(a, b)| format!("    fixture {a}\n    now     {b}"))
                .collect();
            assert!(
                changed.is_empty() && entries.len() == now.as_array().map_or(0, Vec::len),
                "{name}.json pool {pool}: placements changed. If this is a deliberate, named \
                 placement change, rewrite the fixtures with OPTIO_BLESS=1.\n{}",
                changed.join("\n")
            );
            checked += entries.len();
        }
        assert_eq!(
            computed.as_object().map(|o| o.len()),
            expected.as_object().map(|o| o.len()),
            "{name}: pools"
        );
        // And the description in the code still matches the fixture (no silent drift).
        assert_eq!(
            &stored["map"], &description,
            "{name}.json: the fixture's map differs from golden.rs; bless again"
        );
    }
    if !bless {
        // 11 crush and ring pools, 5 attributed pools, 2 elastic pools with 3 versions each.
        assert_eq!(checked, OBJECTS * (11 + 5 + 2 * 4), "every pool of every fixture was compared");
    }
}
