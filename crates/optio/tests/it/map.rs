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

/// An edit that leaves data with fewer copies than min_size is refused without `--yes`; one
/// that only degrades it says so; what moves is labelled as simulated data.
#[test]
fn edits_below_min_size_need_yes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let map = dir.path().join("three.toml");
    std::fs::write(
        &map,
        r#"format_version = 1
epoch = 1
devices = [
  { id = 0, capacity = "1TiB", location = { zone = "z1", host = "h1" } },
  { id = 1, capacity = "1TiB", location = { zone = "z2", host = "h2" } },
  { id = 2, capacity = "1TiB", location = { zone = "z3", host = "h3" } },
]
rules = [ { id = 0, name = "by-zone", steps = ["take default", "chooseleaf firstn 0 type zone", "emit"] } ]

[[pools]]
id = 1
name = "data"
pg_num = 64
size = 3
"#,
    )
    .expect("write");
    let path = map.to_str().unwrap();
    let out = optio_ok(&["map", "set-state", "2", "--out", "--map", path]);
    assert!(out.contains("degraded, still writable: min_size 2"), "{out}");
    assert!(
        out.contains("simulated objects") && out.contains("not the cluster's own data"),
        "{out}"
    );
    assert!(out.contains("no server serves this map"), "{out}");
    let error = optio_err(&["map", "set-state", "1", "--out", "--map", path]);
    assert!(
        error.contains("fewer copies than its pool's min_size") && error.contains("--yes"),
        "{error}"
    );
    assert!(std::fs::read_to_string(&map).unwrap().contains("epoch = 2"), "nothing stored");
    optio_ok(&["map", "set-state", "1", "--out", "--map", path, "--yes"]);
    assert!(std::fs::read_to_string(&map).unwrap().contains("epoch = 3"));

    // The same edits and a validation, as JSON.
    let json = |args: &[&str]| -> serde_json::Value {
        serde_json::from_str(&optio_ok(args)).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    };
    let edit = json(&["map", "set-state", "1", "--in", "--map", path, "--json"]);
    assert_eq!((edit["epoch_before"].as_u64(), edit["epoch"].as_u64()), (Some(3), Some(4)));
    assert_eq!(edit["stored"], true);
    assert_eq!(edit["moves"][0]["pool"], "data", "{edit}");
    assert_eq!(edit["moves"][0]["unit"], "pg_copies", "{edit}");
    let dry =
        json(&["map", "set-state", "0", "--out", "--map", path, "--json", "--dry-run", "--yes"]);
    assert_eq!((dry["dry_run"].as_bool(), dry["stored"].as_bool()), (Some(true), Some(false)));
    assert!(dry["short_of_copies"][0]["below_min_size"].as_u64().unwrap() > 0, "{dry}");
    let refused = optio(&["map", "set-state", "0", "--out", "--map", path, "--json"]);
    assert_eq!(refused.status.code(), Some(1));
    let answer: serde_json::Value = serde_json::from_slice(&refused.stdout).expect("JSON");
    assert!(answer["refused"].as_str().unwrap().contains("--yes"), "{answer}");
    let valid = json(&["map", "validate", "--map", path, "--json"]);
    assert_eq!((valid["valid"].as_bool(), valid["pools"].as_u64()), (Some(true), Some(1)));
    let broken = dir.path().join("broken.toml");
    std::fs::write(&broken, "devices = [").unwrap();
    let output = optio(&["map", "validate", "--map", broken.to_str().unwrap(), "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let answer: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(answer["valid"], false);
    assert!(answer["error"].as_str().unwrap().contains("broken.toml:1"), "{answer}");
}

/// `optio map init` makes a cluster's map (the pools `optio up` makes) with the addresses
/// given, never over an existing map, and says how to start each host's server.
#[test]
fn map_init_makes_a_new_map_and_never_overwrites_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let map = dir.path().join("cluster.toml");
    let path = map.to_str().unwrap();
    let args = ["map", "init", "--map", path, "--zones", "3", "--hosts", "2", "--capacity", "2TiB"];
    let mut with_addr = args.to_vec();
    with_addr.extend(["--addr", "z2-h1=10.0.0.21:7000"]);
    let out = optio_ok(&with_addr);
    assert!(out.contains("stored epoch 1") && out.contains("6 devices"), "{out}");
    assert!(out.contains("z2-h1: optio server --listen 10.0.0.21:7000 --device 2:"), "{out}");
    let loaded = optio_mapfile::parse(&std::fs::read_to_string(&map).unwrap()).expect("valid");
    assert_eq!(loaded.devices().len(), 6);
    assert_eq!(loaded.pools().len(), 6);
    let addressed: Vec<_> = loaded.devices().iter().filter_map(|d| d.addr.clone()).collect();
    assert_eq!(addressed, vec!["10.0.0.21:7000".to_string()]);
    let before = std::fs::read(&map).unwrap();
    let error = optio_err(&args);
    assert!(error.contains("already stored") && error.contains("epoch 1"), "{error}");
    assert_eq!(std::fs::read(&map).unwrap(), before, "nothing was written");
    let other = dir.path().join("other.toml");
    let other = other.to_str().unwrap();
    for (bad, says) in [
        (vec!["--addr", "z9-h1=10.0.0.1:7000"], "no host 'z9-h1'"),
        (vec!["--addr", "z1-h1"], "is not HOST=IP:PORT"),
        (vec!["--addr", "z1-h1=somewhere"], "is not IP:PORT"),
        (vec!["--zones", "0"], "makes 0 devices"),
    ] {
        let mut args = vec!["map", "init", "--map", other];
        args.extend(bad);
        let error = optio_err(&args);
        assert!(error.contains(says), "{error}");
    }
    assert!(!dir.path().join("other.toml").exists());
    // Hosts without an address: a few named, the rest counted.
    let many = dir.path().join("many.toml");
    let out = optio(&["map", "init", "--map", many.to_str().unwrap(), "--hosts", "4"]);
    assert!(out.status.success());
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(
        note.contains("12 host(s) have no address yet (z1-h1, z1-h2, z1-h3, z1-h4, z2-h1, z2-h2, z2-h3, z2-h4 and 4 more)"),
        "{note}"
    );
}
