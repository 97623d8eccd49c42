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

/// Editing a Ceph text map file offline keeps it Ceph text, leaves no lock file and says no
/// server follows it; a change Ceph text cannot hold (an out device) is refused unless the
/// result goes to an Optio TOML file with `--output`; `convert` names what it leaves out.
#[test]
fn offline_edits_of_ceph_maps_keep_their_format_or_say_what_they_cannot_hold() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mine = dir.path().join("mine.txt");
    std::fs::copy(example("ceph-40osd.txt"), &mine).expect("copy");
    let path = mine.to_str().unwrap();
    let out = optio_ok(&["map", "remove-device", "7", "--map", path]);
    assert!(out.contains("Ceph text") && !out.contains("servers rebalance"), "{out}");
    let text = std::fs::read_to_string(&mine).unwrap();
    assert!(text.starts_with("# begin crush map"), "still Ceph text: {}", &text[..60]);
    assert!(!text.contains("osd.7 "), "osd.7 is gone");
    assert!(!dir.path().join("mine.txt.lock").exists(), "no lock file is left");
    let out = optio_ok(&["map", "reweight", "3", "0.5", "--map", path]);
    assert!(out.contains("wrote the edited map"), "{out}");
    assert!(std::fs::read_to_string(&mine).unwrap().contains("item osd.3 weight 0.500"));

    let before = std::fs::read(&mine).unwrap();
    let error = optio_err(&["map", "set-state", "3", "--out", "--map", path]);
    assert!(error.contains("cannot hold this change") && error.contains("--output"), "{error}");
    assert_eq!(std::fs::read(&mine).unwrap(), before, "nothing was written");
    let toml = dir.path().join("mine-out.toml");
    optio_ok(&[
        "map",
        "set-state",
        "3",
        "--out",
        "--map",
        path,
        "--output",
        toml.to_str().unwrap(),
    ]);
    let written = std::fs::read_to_string(&toml).unwrap();
    assert!(
        written.lines().any(|l| l.contains("id = 3,") && l.contains("in = false")),
        "{written}"
    );
    assert_eq!(std::fs::read(&mine).unwrap(), before, "the source is left as it is");

    let output = optio(&["map", "convert", "--map", toml.to_str().unwrap(), "--to", "ceph-text"]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("osd.3: in false"), "convert names what it leaves out: {stderr}");
}
