//! `optio map` validates, shows and converts between the three formats without changing
//! placements.

use crate::support::*;

/// TOML → Ceph text → TOML keeps every CRUSH placement of the map.
#[test]
fn conversions_keep_placements() {
    let dir = tempfile::tempdir().expect("temp dir");
    let source = example("ceph-classes.txt");
    let toml = dir.path().join("m.toml");
    let text = dir.path().join("m.txt");
    let json = dir.path().join("m.json");
    optio_ok(&[
        "map",
        "convert",
        "--map",
        source.to_str().expect("UTF-8"),
        "--to",
        "toml",
        "-o",
        toml.to_str().expect("UTF-8"),
    ]);
    optio_ok(&[
        "map",
        "convert",
        "--map",
        toml.to_str().expect("UTF-8"),
        "--to",
        "ceph-text",
        "-o",
        text.to_str().expect("UTF-8"),
    ]);
    optio_ok(&[
        "map",
        "convert",
        "--map",
        text.to_str().expect("UTF-8"),
        "--to",
        "ceph-json",
        "-o",
        json.to_str().expect("UTF-8"),
    ]);
    let place = |map: &std::path::Path| {
        optio_ok(&[
            "place",
            "--map",
            map.to_str().expect("UTF-8"),
            "--rule",
            "0",
            "--num-rep",
            "3",
            "--max-x",
            "2000",
            "--format",
            "crushtool",
        ])
    };
    let original = place(&source);
    assert_eq!(place(&toml), original);
    assert_eq!(place(&text), original);
    assert_eq!(place(&json), original);
}

/// validate prints a summary; show prints the tree.
#[test]
fn validate_and_show() {
    let map = example("small.toml");
    let out = optio_ok(&["map", "validate", "--map", map.to_str().expect("UTF-8")]);
    assert!(out.contains("valid Optio TOML map") && out.contains("9 devices"), "{out}");
    let out = optio_ok(&["map", "show", "--map", map.to_str().expect("UTF-8")]);
    assert!(out.contains("root default") && out.contains("zone z1"), "{out}");
    let shown: serde_json::Value = serde_json::from_str(&optio_ok(&[
        "map",
        "show",
        "--map",
        map.to_str().expect("UTF-8"),
        "--json",
    ]))
    .expect("JSON");
    assert_eq!(shown["devices"].as_array().expect("devices").len(), 9);
}
