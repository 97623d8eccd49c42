//! Choices from the command line: `optio place --candidates` lists an object's candidates, each
//! placed where the object `name + suffix` is; bad choice settings are refused with the pool
//! and the line; the choice experiments run and print JSON.

use crate::support::*;

#[test]
fn candidates_are_the_placements_of_the_suffixed_names() {
    let map = example("choice.toml");
    let map = map.to_str().expect("UTF-8");
    let json =
        optio_ok(&["place", "--map", map, "--object", "vm-3/disk.7", "--candidates", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let rows = rows.as_array().expect("an array");
    let per_pool = |pool: &str| rows.iter().filter(|r| r["pool"] == pool).count();
    assert_eq!((per_pool("images"), per_pool("volumes"), per_pool("objects")), (2, 3, 2));
    for row in rows {
        let pool = row["pool"].as_str().expect("pool");
        let alias = row["as_object"].as_str().expect("alias");
        let plain = optio_ok(&["place", "--map", map, "--pool", pool, "--object", alias, "--json"]);
        let plain: serde_json::Value = serde_json::from_str(&plain).expect("JSON");
        assert_eq!(plain[0]["devices"], row["devices"], "{pool} {alias}");
        assert_eq!(plain[0]["pg"], row["pg"], "{pool} {alias}");
    }
    let table = optio_ok(&[
        "place",
        "--map",
        map,
        "--object",
        "vm-3/disk.7",
        "--candidates",
        "--pool",
        "volumes",
    ]);
    assert!(table.contains("0 (home)") && table.lines().count() == 4, "{table}");
    let error = optio_err(&["place", "--map", map, "--all-pgs", "--candidates"]);
    assert!(error.contains("--candidates lists an object's candidates"), "{error}");
}

#[test]
fn bad_choice_settings_name_the_pool_and_the_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("map.toml");
    let base = "[[devices]]\nid = 0\nlocation = { host = \"h\" }\n\n[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\nsize = 1\n";
    for (extra, fragment) in [
        ("choices = 9\n", ":5: pool 'p': choices = 9 is out of range"),
        ("policy = \"fastest\"\n", ":10: map.pools[0].policy: unknown policy 'fastest'"),
        (
            "policy = \"composite\"\npolicy_weights = { cpu = 0 }\n",
            ":5: pool 'p': policy_weights = {} is out of range",
        ),
    ] {
        std::fs::write(&path, format!("{base}{extra}")).expect("write");
        let error = optio_err(&["map", "validate", "--map", path.to_str().expect("UTF-8")]);
        assert!(error.contains(fragment), "{error}");
    }
}

#[test]
fn choice_experiments_print_json() {
    let space = optio_ok(&[
        "sim",
        "space",
        "--disks",
        "12",
        "--disks-per-host",
        "2",
        "--size",
        "2",
        "--blocks-per-disk",
        "500",
        "--pg-nums",
        "64",
        "--max-choices",
        "2",
        "--json",
    ]);
    let space: serde_json::Value = serde_json::from_str(&space).expect("JSON");
    assert_eq!(space["calibrated_pg_num"], 64);
    assert_eq!(space["results"].as_array().expect("rows").len(), 4);
    let local =
        optio_ok(&["sim", "local", "--objects-per-client", "200", "--max-choices", "2", "--json"]);
    let local: serde_json::Value = serde_json::from_str(&local).expect("JSON");
    assert_eq!(local["scenarios"].as_array().expect("scenarios").len(), 2);
    let policies = optio_ok(&["sim", "policies", "--objects", "2000", "--json"]);
    let policies: serde_json::Value = serde_json::from_str(&policies).expect("JSON");
    assert_eq!(policies["policies"].as_array().expect("rows").len(), 9);
    let error = optio_err(&["sim", "space", "--max-choices", "9"]);
    assert!(error.contains("--max-choices"), "{error}");
}
