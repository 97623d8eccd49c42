//! `optio analyze` reports balance for people and scripts, for every engine.

use crate::support::*;

fn json(args: &[&str]) -> serde_json::Value {
    serde_json::from_str(&optio_ok(args)).expect("JSON")
}

/// The JSON has the documented fields, and the per-device PG copies add up to pg_num × size.
#[test]
fn json_fields_and_totals() {
    let map = example("ceph-40osd.txt");
    let report = json(&[
        "analyze",
        "--map",
        map.to_str().expect("UTF-8"),
        "--pg-num",
        "2048",
        "--size",
        "3",
        "--objects",
        "1000",
        "--json",
    ]);
    let devices = report["devices"].as_array().expect("devices");
    assert_eq!(devices.len(), 40);
    let total: u64 = devices.iter().map(|d| d["pgs"].as_u64().expect("pgs")).sum();
    assert_eq!(total, 2048 * 3);
    assert!(devices.iter().all(|d| d["id"].is_u64()));
    let stdev = report["stdev"].as_f64().expect("stdev");
    // CRUSH spreads like independent random placement: stdev about sqrt(mean) (mean 153.6).
    assert!(stdev > 5.0 && stdev < 20.0, "stdev {stdev}");
    let max_over_mean = report["max_over_mean"].as_f64().expect("max_over_mean");
    assert!(max_over_mean > 1.0 && max_over_mean < 1.5, "{max_over_mean}");
    assert_eq!(report["domains"]["type"], "host");
    assert_eq!(report["domains"]["entries"].as_array().expect("hosts").len(), 4);
}

/// Object-level (ring) pools are analysed by objects; every object has `size` copies.
#[test]
fn ring_pool_by_objects() {
    let map = example("small.toml");
    let report = json(&[
        "analyze",
        "--map",
        map.to_str().expect("UTF-8"),
        "--pool",
        "objects",
        "--objects",
        "9000",
        "--json",
    ]);
    assert_eq!(report["metric"], "objects");
    let copies: u64 = report["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .map(|d| d["objects"].as_u64().expect("n"))
        .sum();
    assert_eq!(copies, 9000 * 3);
    assert_eq!(report["undersized"], 0);
}

/// The text report shows the summary line, the histogram and the failure domains.
#[test]
fn text_report() {
    let map = example("small.toml");
    let out = optio_ok(&[
        "analyze",
        "--map",
        map.to_str().expect("UTF-8"),
        "--pool",
        "rbd",
        "--objects",
        "1000",
    ]);
    assert!(out.contains("PG copies per device"), "{out}");
    assert!(out.contains("per zone (3 zones)"), "{out}");
    assert!(out.contains("stdev"), "{out}");
}

/// Raw against logical space per pool: a replicated pool's simulated objects take `size`
/// times their bytes, an erasure-coded pool's (K+M)/K times (each chunk a K-th of the object,
/// in whole stripe units), in the JSON and the text report.
#[test]
fn raw_and_logical_space_per_pool() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut text = String::from("format_version = 1\n");
    for id in 0..8 {
        text.push_str(&format!(
            "\n[[devices]]\nid = {id}\ncapacity = \"1TiB\"\nlocation = {{ host = \"h{id}\" }}\n"
        ));
    }
    text.push_str(
        "\n[[rules]]\nid = 0\nname = \"ec\"\ntype = \"erasure\"\n\
         steps = [\"take default\", \"chooseleaf indep 0 type host\", \"emit\"]\n\
         \n[[rules]]\nid = 1\nname = \"rep\"\n\
         steps = [\"take default\", \"chooseleaf firstn 0 type host\", \"emit\"]\n\
         \n[[pools]]\nid = 1\nname = \"ec\"\npg_num = 64\nerasure = \"4+2\"\nrule = \"ec\"\n\
         \n[[pools]]\nid = 2\nname = \"rep\"\npg_num = 64\nsize = 3\nrule = \"rep\"\n",
    );
    let map = dir.path().join("ec.toml");
    std::fs::write(&map, text).expect("write map");
    let map = map.to_str().expect("UTF-8");
    // 4 MiB objects: a 4+2 pool's chunk is 1 MiB (16 stripe units of 64 KiB).
    let args = ["analyze", "--map", map, "--objects", "500", "--object-size", "4MiB"];
    let report: serde_json::Value =
        serde_json::from_str(&optio_ok(&[&args[..], &["--json"]].concat())).expect("JSON");
    let pools = report["pools"].as_array().expect("pools");
    let space = |name: &str| -> serde_json::Value {
        pools.iter().find(|p| p["name"] == name).expect("the pool")["space"].clone()
    };
    let logical = 500u64 * (4 << 20);
    assert_eq!(
        space("ec"),
        serde_json::json!({ "redundancy": "erasure 4+2", "logical_bytes": logical,
            "raw_bytes": 500u64 * 6 * (1 << 20), "raw_over_logical": 1.5 })
    );
    assert_eq!(
        space("rep"),
        serde_json::json!({ "redundancy": "replicated 3", "logical_bytes": logical,
            "raw_bytes": 3 * logical, "raw_over_logical": 3.0 })
    );
    // The devices' bytes are the raw bytes of both.
    let device_bytes: u64 = report["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .filter_map(|d| d["bytes"].as_u64())
        .sum();
    assert_eq!(device_bytes, 500 * 6 * (1 << 20) + 3 * logical);
    let text = optio_ok(&args);
    assert!(text.contains("erasure 4+2: 6 chunks of 1.00 MiB each"), "{text}");
    assert!(text.contains("raw/logical 1.500") && text.contains("raw/logical 3.000"), "{text}");
}
