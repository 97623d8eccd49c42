//! Bad input gets a clear error naming the file and line, exit status 1, and never a panic.

use crate::support::*;

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("UTF-8").to_string()
}

#[test]
fn malformed_maps_name_the_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = [
        ("dup.txt", "device 0 osd.0\ndevice 0 osd.1\ntype 0 osd\ntype 1 root\n", "dup.txt:2"),
        (
            "syntax.txt",
            "device 0 osd.0\ntype 0 osd\nroot default {\n id -1\n alg straw2\n item osd.0 weight abc\n}\n",
            "syntax.txt:6",
        ),
        (
            "cycle.toml",
            "[[devices]]\nid = 0\n\n[[buckets]]\nid = -1\nname = \"a\"\ntype = \"host\"\nitems = [{ name = \"b\" }]\n\n[[buckets]]\nid = -2\nname = \"b\"\ntype = \"root\"\nitems = [{ name = \"a\" }]\n",
            "cycle.toml:",
        ),
        ("bad.json", "{ \"devices\": [ {\"id\": 0} ", "bad.json:"),
        (
            "pool.toml",
            "[[devices]]\nid = 0\nlocation = { host = \"h0\" }\n\n[[pools]]\nid = 1\nname = \"p\"\npg_num = 8\nsize = 3\n",
            "pool.toml:",
        ),
    ];
    for (name, text, expected) in cases {
        let path = write(dir.path(), name, text);
        let error = optio_err(&["map", "validate", "--map", &path]);
        assert!(error.contains(expected), "{name}: {error}");
    }
}

#[test]
fn missing_and_binary_files() {
    let dir = tempfile::tempdir().expect("temp dir");
    let error = optio_err(&["map", "validate", "--map", "/nonexistent/map.toml"]);
    assert!(error.contains("cannot read map file"), "{error}");
    let path = dir.path().join("binary");
    std::fs::write(&path, [0u8, 159, 146, 150, 0, 1]).expect("write");
    let error = optio_err(&["map", "validate", "--map", path.to_str().expect("UTF-8")]);
    assert!(error.contains("crushtool -d"), "{error}");
}

#[test]
fn bad_arguments() {
    let map = example("ceph-40osd.txt");
    let map = map.to_str().expect("UTF-8");
    for (args, expected) in [
        (vec!["place", "--map", map, "--rule", "9"], "no such rule"),
        (vec!["place", "--map", map, "--rule", "0", "--min-x", "5", "--max-x", "1"], "above"),
        (vec!["place", "--map", map, "--rule", "0", "--weight", "3", "1.5"], "between 0 and 1"),
        (vec!["place", "--map", map, "--rule", "0", "--weight", "999", "0.5"], "device ids"),
        (vec!["analyze", "--map", map, "--by", "planet"], "no such type"),
        (vec!["analyze", "--map", map, "--pool", "nope"], "no pool"),
        (vec!["analyze", "--map", map, "--size", "9"], "cannot simulate"),
        (vec!["bench", "io", "elastic", "--hot-fraction", "0.9"], "from 0.02 to 0.5"),
        (
            vec!["bench", "io", "local", "--hot-fraction", "0.2"],
            "for `optio bench io elastic` only",
        ),
        (vec!["bench", "io", "elastic", "--modes", "sideways"], "--modes"),
        (vec!["bench", "io", "elastic", "--migration-rate", "fast"], "--migration-rate"),
        (vec!["bench", "io", "elastic", "--migration-rate", "10kbit"], "below the least"),
        (vec!["bench", "io", "crush", "--migration-rate", "8MB/s"], "elastic` only"),
    ] {
        let error = optio_err(&args);
        assert!(error.contains(expected), "{args:?}: {error}");
    }
}
