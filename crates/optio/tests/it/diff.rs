//! `optio diff` counts what moves between two maps against the minimum.

use crate::support::*;

fn variant(text: &str, dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write map");
    path
}

/// Identical maps move nothing; removing one of 40 devices moves about its share (the minimum
/// is the change of weight shares; the removed device's actual load varies around it) and, for
/// CRUSH, not wildly more.
#[test]
fn movement_against_the_minimum() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = std::fs::read_to_string(example("ceph-40osd.txt")).expect("example");
    let a = variant(&text, dir.path(), "a.txt");
    let same: serde_json::Value = serde_json::from_str(&optio_ok(&[
        "diff",
        a.to_str().expect("UTF-8"),
        a.to_str().expect("UTF-8"),
        "--objects",
        "1000",
        "--json",
    ]))
    .expect("JSON");
    assert_eq!(same["pools"][0]["moved"], 0);
    // Remove osd.7 from host0 (and its device line): 1/40 of the data must move.
    let removed: String = text
        .lines()
        .filter(|l| !l.contains("osd.7 ") && !l.ends_with("osd.7"))
        .collect::<Vec<_>>()
        .join("\n");
    let b = variant(&removed, dir.path(), "b.txt");
    let report: serde_json::Value = serde_json::from_str(&optio_ok(&[
        "diff",
        a.to_str().expect("UTF-8"),
        b.to_str().expect("UTF-8"),
        "--objects",
        "1000",
        "--json",
    ]))
    .expect("JSON");
    let pool = &report["pools"][0];
    let minimum = pool["minimum_fraction"].as_f64().expect("minimum");
    assert!((minimum - 1.0 / 40.0).abs() < 1e-9, "{minimum}");
    let ratio = pool["moved_over_minimum"].as_f64().expect("ratio");
    assert!((0.8..3.0).contains(&ratio), "moved/minimum {ratio}");
}
