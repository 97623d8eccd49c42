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

/// An incremental balanced pool through the CLI: `optio map add-device` on a map file stores
/// the next epoch with a state rebalanced from the previous one, so `optio diff` of the two
/// files moves at most 1.5 times the minimum; `optio analyze` sees a balanced pool.
#[test]
fn incremental_pool_edits_move_little() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut text = String::new();
    for id in 0..40 {
        text.push_str(&format!(
            "[[devices]]\nid = {id}\nlocation = {{ host = \"host{}\" }}\n\n",
            id / 10
        ));
    }
    text.push_str(
        "[[pools]]\nid = 1\nname = \"rbd\"\npg_num = 2048\nsize = 3\nbalanced = \"incremental\"\n",
    );
    let a = variant(&text, dir.path(), "a.toml");
    let b = dir.path().join("b.toml");
    std::fs::copy(&a, &b).expect("copy");
    let a_str = a.to_str().expect("UTF-8");
    let b_str = b.to_str().expect("UTF-8");
    let out = optio_ok(&[
        "map",
        "add-device",
        "--id",
        "40",
        "--at",
        "host=host2",
        "--capacity",
        "1TiB",
        "--map",
        b_str,
    ]);
    assert!(out.contains("pool 'rbd'") && out.contains("moved/minimum"), "{out}");
    let edited = std::fs::read_to_string(&b).expect("the stored map");
    assert!(edited.contains("[pools.balance_state]"), "{edited}");
    let report: serde_json::Value =
        serde_json::from_str(&optio_ok(&["diff", a_str, b_str, "--objects", "0", "--json"]))
            .expect("JSON");
    let pool = &report["pools"][0];
    assert_eq!(pool["balanced"], "incremental");
    let ratio = pool["moved_over_minimum"].as_f64().expect("ratio");
    assert!((0.9..=1.5).contains(&ratio), "moved/minimum {ratio}");
    let analysis: serde_json::Value =
        serde_json::from_str(&optio_ok(&["analyze", "--map", b_str, "--objects", "0", "--json"]))
            .expect("JSON");
    assert_eq!(analysis["pools"][0]["balanced"], "incremental");
    let stdev = analysis["pools"][0]["stdev"].as_f64().expect("stdev");
    assert!(stdev <= 1.0, "stdev {stdev}");
    let text = optio_ok(&["analyze", "--map", b_str, "--objects", "0"]);
    assert!(text.contains("incremental balanced placement"), "{text}");
}
