//! `optio place` prints exactly what crushtool prints, and places objects and PGs as Ceph does.

use crate::support::*;

/// `--format crushtool` is byte-identical to `crushtool --test --show-mappings` on a map given
/// to Optio as Ceph text and to crushtool compiled from that same text, with and without
/// `--pool-id` and reweights, for every replica count of the rule.
#[test]
fn crushtool_format_is_identical() {
    let Some(crushtool) = crushtool() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["ceph-40osd.txt", "ceph-classes.txt"] {
        let text = example(name);
        let binary = compiled(&crushtool, &text, dir.path());
        for extra in [
            vec![],
            vec!["--pool-id", "7"],
            vec!["--weight", "3", "0.5", "--weight", "11", "0", "--weight", "2", "0.3"],
        ] {
            for num_rep in ["1", "3", "5"] {
                let mut common =
                    vec!["--rule", "0", "--num-rep", num_rep, "--min-x", "0", "--max-x", "4999"];
                common.extend(extra.iter().copied());
                let mut theirs_args =
                    vec!["-i", binary.to_str().expect("UTF-8"), "--test", "--show-mappings"];
                theirs_args.extend(common.iter().copied());
                let theirs = crushtool_run(&crushtool, &theirs_args);
                let mut ours_args =
                    vec!["place", "--map", text.to_str().expect("UTF-8"), "--format", "crushtool"];
                ours_args.extend(common.iter().copied());
                let ours = optio_ok(&ours_args);
                assert_eq!(ours.lines().count(), 5000);
                assert!(
                    ours == theirs,
                    "{name} {extra:?} num-rep {num_rep}: optio and crushtool differ"
                );
            }
        }
    }
}

/// Statistics lines match crushtool's `--show-statistics` (rule min..max sizes, result sizes).
#[test]
fn statistics_format_matches() {
    let Some(crushtool) = crushtool() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    let text = example("ceph-40osd.txt");
    let binary = compiled(&crushtool, &text, dir.path());
    let theirs = crushtool_run(
        &crushtool,
        &[
            "-i",
            binary.to_str().expect("UTF-8"),
            "--test",
            "--show-statistics",
            "--rule",
            "0",
            "--num-rep",
            "5",
            "--min-x",
            "0",
            "--max-x",
            "999",
        ],
    );
    let ours = optio_ok(&[
        "place",
        "--map",
        text.to_str().expect("UTF-8"),
        "--format",
        "statistics",
        "--rule",
        "0",
        "--num-rep",
        "5",
        "--min-x",
        "0",
        "--max-x",
        "999",
    ]);
    assert_eq!(ours, theirs);
}

/// An object name goes to the PG and devices osdmaptool reports (CRUSH.md: `foo` in pool 1
/// with 2048 PGs is PG 1.406, pps 0x5565dee8).
#[test]
fn object_to_pg() {
    let map = example("ceph-40osd.txt");
    let out = optio_ok(&[
        "place",
        "--map",
        map.to_str().expect("UTF-8"),
        "--object",
        "foo",
        "--pg-num",
        "2048",
        "--size",
        "2",
        "--json",
    ]);
    let rows: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(rows[0]["pg"], "1.406");
    assert_eq!(rows[0]["key"], 0x5565dee8u32);
    assert_eq!(rows[0]["devices"].as_array().expect("devices").len(), 2);
}

/// PG ids are checked against the pool.
#[test]
fn pg_lookup_and_its_errors() {
    let map = example("small.toml");
    let map = map.to_str().expect("UTF-8");
    let out = optio_ok(&["place", "--map", map, "--pg", "1.0", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(rows[0]["pg"], "1.0");
    let error = optio_err(&["place", "--map", map, "--pg", "1.ffffff"]);
    assert!(error.contains("PGs"), "{error}");
    let error = optio_err(&["place", "--map", map, "--pg", "x"]);
    assert!(error.contains("POOL.SEED"), "{error}");
    let error = optio_err(&["place", "--map", map]);
    assert!(error.contains("nothing to place"), "{error}");
}

/// `optio place … | head -1`: when the reader goes away the command ends as Unix tools do —
/// killed by SIGPIPE, no "Broken pipe" error and no panic.
#[test]
fn closed_pipe_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let map = example("ceph-40osd.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_optio"))
        .args(["place", "--map", map.to_str().expect("UTF-8"), "--rule", "0", "--num-rep", "3"])
        .args(["--min-x", "0", "--max-x", "1000000", "--format", "crushtool"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("optio runs");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut first).expect("a line");
    assert_eq!(first, "CRUSH rule 0 x 0 [0,39,15]\n");
    // The reader is dropped here: the pipe is closed with most of the output unwritten.
    let output = child.wait_with_output().expect("optio ends");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.is_empty(), "nothing on stderr: {stderr}");
    assert_eq!(output.status.signal(), Some(SIGPIPE), "{:?}", output.status);
}

/// `text` (a Ceph text map) compiled by crushtool into `dir/map.bin`.
fn compiled(
    crushtool: &std::path::Path,
    text: &std::path::Path,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let binary = dir.join("map.bin");
    crushtool_run(
        crushtool,
        &["-c", text.to_str().expect("UTF-8"), "-o", binary.to_str().expect("UTF-8")],
    );
    binary
}

/// SIGPIPE's number on Linux.
const SIGPIPE: i32 = 13;

/// `--format bad-mappings` prints what `crushtool --test --show-bad-mappings` prints, byte for
/// byte.
#[test]
fn bad_mappings_match_crushtool() {
    let Some(crushtool) = crushtool() else { return };
    let dir = tempfile::tempdir().expect("temp dir");
    for name in ["ceph-40osd.txt", "ceph-classes.txt"] {
        let text = example(name);
        let binary = compiled(&crushtool, &text, dir.path());
        for num_rep in ["3", "5", "12"] {
            let common = ["--rule", "0", "--num-rep", num_rep, "--min-x", "0", "--max-x", "999"];
            let mut theirs_args =
                vec!["-i", binary.to_str().expect("UTF-8"), "--test", "--show-bad-mappings"];
            theirs_args.extend(common);
            let theirs = crushtool_run(&crushtool, &theirs_args);
            let mut ours_args =
                vec!["place", "--map", text.to_str().expect("UTF-8"), "--format", "bad-mappings"];
            ours_args.extend(common);
            let ours = optio_ok(&ours_args);
            assert!(ours == theirs, "{name} num-rep {num_rep}: optio and crushtool differ");
            if num_rep == "12" {
                assert!(ours.lines().count() > 0, "{name}: 12 replicas cannot all be placed");
            }
        }
    }
}

/// An erasure-coded pool: each device of a placement is labelled with the chunk it holds
/// (data `d0`…, parity `p0`…), and the JSON lists the chunks.
#[test]
fn erasure_pools_show_which_device_holds_which_chunk() {
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
         \n[[pools]]\nid = 1\nname = \"ec\"\npg_num = 16\nerasure = \"4+2\"\n",
    );
    let map = dir.path().join("ec.toml");
    std::fs::write(&map, text).expect("write map");
    let map = map.to_str().expect("UTF-8");
    let out = optio_ok(&["place", "--map", map, "--object", "foo", "--json"]);
    let rows: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(rows[0]["erasure"], "4+2");
    let chunks = rows[0]["chunks"].as_array().expect("chunks");
    assert_eq!(chunks.len(), 6);
    for (index, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk["index"], index);
        assert_eq!(chunk["kind"], if index < 4 { "data" } else { "parity" });
        assert_eq!(chunk["device"], rows[0]["devices"][index]);
    }
    for extra in [None, Some("--candidates")] {
        let mut args = vec!["place", "--map", map, "--object", "foo"];
        args.extend(extra);
        let table = optio_ok(&args);
        for label in ["d0:osd.", "d3:osd.", "p0:osd.", "p1:osd."] {
            assert!(table.contains(label), "{label} in\n{table}");
        }
    }
}
