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
