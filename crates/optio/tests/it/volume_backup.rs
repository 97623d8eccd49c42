//! Incremental backup of volumes (issue 40): `optio volume diff` lists exactly the objects
//! written, shrunk away or grown between two snapshots; a full `export-diff` and an
//! incremental one, imported into a fresh volume (through a file and through a pipe),
//! reproduce the snapshots byte for byte and take them there; a damaged, cut or misplaced
//! stream is refused with a clear error and changes nothing; `du` counts what each snapshot
//! holds alone.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::volumes::{fails, settle, spec};
use crate::{binary, cluster, ok_at as ok};

const MIB: u64 = 1 << 20;
const MIB_USIZE: usize = 1 << 20;

fn export(dir: &Path, spec: &str, to: &Path) -> Vec<u8> {
    ok(dir, &["volume", "export", spec, to.to_str().unwrap()]);
    std::fs::read(to).unwrap()
}

/// Bytes that differ from object to object and from seed to seed, none zero.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i / 512) as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

/// `len` bytes of zeros with `pieces` (offset, bytes) laid over them: imported with a 64 KiB
/// chunk, only the pieces' chunks are written.
fn sparse(len: u64, pieces: &[(u64, &[u8])]) -> Vec<u8> {
    let mut out = vec![0u8; len as usize];
    for (offset, bytes) in pieces {
        out[*offset as usize..*offset as usize + bytes.len()].copy_from_slice(bytes);
    }
    out
}

fn import_sparse(dir: &Path, tmp: &Path, volume: &str, image: &[u8]) {
    let file = tmp.join("piece.raw");
    std::fs::write(&file, image).unwrap();
    ok(dir, &["volume", "import", volume, file.to_str().unwrap(), "--chunk", "64KiB"]);
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// `(offset, length, type)` of each extent of `optio volume diff ARGS --json`.
fn extents(dir: &Path, args: &[&str]) -> Vec<(u64, u64, String)> {
    let mut all = vec!["volume", "diff"];
    all.extend_from_slice(args);
    all.push("--json");
    let value = json(&ok(dir, &all));
    assert_eq!(value["granularity"], "object", "{value}");
    value["extents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (e["offset"].as_u64().unwrap(), e["length"].as_u64().unwrap(), e["type"].to_string())
        })
        .collect()
}

fn extent(offset_mib: u64, length_mib: u64, kind: &str) -> (u64, u64, String) {
    (offset_mib * MIB, length_mib * MIB, format!("\"{kind}\""))
}

/// `optio volume export-diff SPEC - [--from-snap FROM]`: the stream on standard output.
fn export_diff_to_stdout(dir: &Path, spec: &str, from: &str) -> Vec<u8> {
    let out = Command::new(binary())
        .args(["volume", "export-diff", spec, "-", "--from-snap", from, "--cluster"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// `optio volume import-diff - VOLUME` fed `stream`: its exit code and standard error.
fn import_diff_from_stdin(dir: &Path, volume: &str, stream: &[u8]) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .args(["volume", "import-diff", "-", volume, "--cluster"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The child may refuse the stream before reading it all: a broken pipe is its answer.
    let _ = child.stdin.take().unwrap().write_all(stream);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (out.status.code(), stderr)
}

fn snapshot_names(dir: &Path, volume: &str) -> Vec<String> {
    let listed = json(&ok(dir, &["volume", "snap", "ls", volume, "--json"]));
    listed.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_string()).collect()
}

#[test]
fn diffs_list_what_changed_and_an_incremental_backup_reproduces_the_volume() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let tmp = tmp.path();
    let out = tmp.join("out.raw");
    // 8 objects of 1 MiB; pattern A in objects 0-5, 6 and 7 never written.
    ok(&dir, &["volume", "create", "vm", "8MiB", "--object-size", "1MiB"]);
    import_sparse(&dir, tmp, "vm", &sparse(8 * MIB, &[(0, &pattern(6 * MIB_USIZE, 1))]));
    ok(&dir, &["volume", "snap", "create", "vm@s1"]);
    let s1 = export(&dir, "vm@s1", &out);

    // Pattern B: 64 KiB into objects 1 and 3; objects 5-7 shrunk away and grown back (5 held
    // A: it reads as zeros now); then object 7 written.
    let b = pattern(64 << 10, 2);
    import_sparse(&dir, tmp, "vm", &sparse(8 * MIB, &[(MIB + 4096 * 16, &b), (3 * MIB, &b)]));
    ok(&dir, &["volume", "resize", "vm", "5MiB", "--allow-shrink"]);
    ok(&dir, &["volume", "resize", "vm", "8MiB"]);
    import_sparse(&dir, tmp, "vm", &sparse(8 * MIB, &[(7 * MIB + 512, &b)]));
    ok(&dir, &["volume", "snap", "create", "vm@s2"]);
    let s2 = export(&dir, "vm@s2", &out);
    assert!(s1 != s2 && s2[5 * MIB_USIZE..6 * MIB_USIZE].iter().all(|x| *x == 0));
    // s1 still reads object 5, whose head the shrink deleted (its clone is found without it).
    assert!(export(&dir, "vm@s1", &out) == s1, "s1 reads as before the shrink");

    // The diff: exactly the objects changed, with zeros where object 5 went.
    assert_eq!(
        extents(&dir, &["vm@s2", "--from-snap", "s1"]),
        [extent(1, 1, "data"), extent(3, 1, "data"), extent(5, 1, "zero"), extent(7, 1, "data")]
    );
    assert_eq!(extents(&dir, &["vm", "--from-snap", "s2"]), [], "the head is s2");
    assert_eq!(extents(&dir, &["vm@s1", "--from-snap", "s1"]), []);
    // From s2 back to s1: the same objects, as s1 holds them (7 was never written then).
    assert_eq!(
        extents(&dir, &["vm@s1", "--from-snap", "s2"]),
        [extent(1, 1, "data"), extent(3, 1, "data"), extent(5, 1, "data"), extent(7, 1, "zero")]
    );
    // Without --from-snap: every allocated extent, adjacent ones merged.
    assert_eq!(extents(&dir, &["vm@s1"]), [extent(0, 6, "data")]);
    assert_eq!(extents(&dir, &["vm@s2"]), [extent(0, 5, "data"), extent(7, 1, "data")]);
    let table = ok(&dir, &["volume", "diff", "vm@s2", "--from-snap", "s1"]);
    assert!(table.contains("offset") && table.contains("5242880") && table.contains("zero"));
    assert!(
        fails(&dir, &["volume", "diff", "vm", "--from-snap", "nope"])
            .contains("no snapshot 'nope'")
    );
    assert!(fails(&dir, &["volume", "diff", "vm@nope"]).contains("no snapshot 'nope'"));
    assert!(fails(&dir, &["volume", "diff", "nothere"]).contains("no volume 'nothere'"));

    // A full backup of s1, then the increment s1→s2 through a pipe, into a fresh volume of
    // another object size and size (the stream resizes it).
    let full = tmp.join("full.diff");
    ok(&dir, &["volume", "export-diff", "vm@s1", full.to_str().unwrap()]);
    let incremental = export_diff_to_stdout(&dir, "vm@s2", "s1");
    ok(&dir, &["volume", "create", "copy", "4MiB"]);
    ok(&dir, &["volume", "create", "other", "8MiB"]);
    // The increment needs s1 where it is applied.
    let (code, error) = import_diff_from_stdin(&dir, "other", &incremental);
    assert_eq!(code, Some(1), "{error}");
    assert!(error.contains("no snapshot 's1'") && error.contains("nothing was written"), "{error}");
    ok(&dir, &["volume", "import-diff", full.to_str().unwrap(), "copy"]);
    assert_eq!(snapshot_names(&dir, "copy"), ["s1"], "the full stream's end snapshot taken");
    assert!(export(&dir, "copy", &out) == s1, "copy reads s1 after the full stream");
    let again = fails(&dir, &["volume", "import-diff", full.to_str().unwrap(), "copy"]);
    assert!(again.contains("snapshot 's1' already"), "{again}");

    // Damaged: one byte flipped in the middle of the data. Refused (from a file: before any
    // write), and through a pipe too; the copy still reads s1.
    let mut damaged = incremental.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x10;
    let damaged_file = tmp.join("damaged.diff");
    std::fs::write(&damaged_file, &damaged).unwrap();
    let error = fails(&dir, &["volume", "import-diff", damaged_file.to_str().unwrap(), "copy"]);
    assert!(
        error.contains("checksum mismatch") && error.contains("nothing was written"),
        "{error}"
    );
    let (code, error) = import_diff_from_stdin(&dir, "copy", &damaged);
    assert_eq!(code, Some(1), "{error}");
    assert!(error.contains("damaged"), "{error}");
    // Cut short, and not a stream at all.
    let (code, error) = import_diff_from_stdin(&dir, "copy", &incremental[..incremental.len() - 5]);
    assert_eq!(code, Some(1), "{error}");
    assert!(error.contains("cut short") || error.contains("stops at byte"), "{error}");
    let garbage = tmp.join("garbage.diff");
    std::fs::write(&garbage, b"this is not a diff stream").unwrap();
    let error = fails(&dir, &["volume", "import-diff", garbage.to_str().unwrap(), "copy"]);
    assert!(error.contains("not an optio diff stream"), "{error}");
    assert_eq!(snapshot_names(&dir, "copy"), ["s1"]);

    // Whole, through the pipe: the copy reads s2 byte for byte, and keeps s1 and s2.
    let (code, error) = import_diff_from_stdin(&dir, "copy", &incremental);
    assert_eq!(code, Some(0), "{error}");
    assert_eq!(snapshot_names(&dir, "copy"), ["s1", "s2"]);
    assert!(export(&dir, "copy", &out) == s2, "copy reads s2 after the increment");
    assert!(export(&dir, "copy@s2", &out) == s2);
    assert!(export(&dir, "copy@s1", &out) == s1);
    assert!(export(&dir, "vm@s2", &out) == s2, "the source is unchanged");
    // The copy's own diff between its snapshots covers what changed (at its 4 MiB objects).
    assert_eq!(extents(&dir, &["copy@s2", "--from-snap", "s1"]), [extent(0, 8, "data")]);
}

#[test]
fn du_counts_what_each_snapshot_holds_alone() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let tmp = tmp.path();
    ok(&dir, &["volume", "create", "vm", "8MiB", "--object-size", "1MiB"]);
    import_sparse(&dir, tmp, "vm", &sparse(8 * MIB, &[(0, &pattern(4 * MIB_USIZE, 3))]));
    let du = |dir: &Path| json(&ok(dir, &["volume", "du", "vm", "--json"]));
    let value = du(&dir);
    let rows = value["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{value}");
    assert_eq!(rows[0]["name"], "vm");
    assert_eq!(rows[0]["provisioned_bytes"], 8 * MIB);
    assert_eq!(rows[0]["used_bytes"], 4 * MIB, "{value}");

    // s1, then object 1 overwritten: s1 alone holds object 1's old copy.
    ok(&dir, &["volume", "snap", "create", "vm@s1"]);
    let value = du(&dir);
    let rows = value["rows"].as_array().unwrap();
    assert_eq!(
        (rows[0]["used_bytes"].as_u64(), rows[1]["used_bytes"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(rows[0]["referenced_bytes"], 4 * MIB, "{value}");
    import_sparse(&dir, tmp, "vm", &sparse(8 * MIB, &[(MIB, &pattern(4096, 4))]));
    // s2, then objects 1 (again) and 2 overwritten and object 6 written: s2 alone holds
    // object 1's second copy; object 2's old copy is s1's and s2's.
    ok(&dir, &["volume", "snap", "create", "vm@s2"]);
    let pieces =
        [(MIB, pattern(4096, 5)), (2 * MIB, pattern(4096, 6)), (6 * MIB, pattern(4096, 7))];
    let pieces: Vec<(u64, &[u8])> = pieces.iter().map(|(o, p)| (*o, p.as_slice())).collect();
    import_sparse(&dir, tmp, "vm", &sparse(8 * MIB, &pieces));
    let value = du(&dir);
    let rows = value["rows"].as_array().unwrap();
    let row = |name: &str| rows.iter().find(|r| r["name"] == name).unwrap().clone();
    let (s1, s2, head) = (row("vm@s1"), row("vm@s2"), row("vm"));
    assert_eq!(s1["used_bytes"], MIB, "s1 alone holds object 1's first copy: {value}");
    assert_eq!(s2["used_bytes"], MIB, "s2 alone holds object 1's second copy: {value}");
    assert_eq!(head["used_bytes"], 3 * MIB, "the head alone: objects 1, 2 and 6: {value}");
    assert_eq!(s1["referenced_bytes"], 4 * MIB);
    assert_eq!(s2["referenced_bytes"], 4 * MIB);
    assert_eq!(head["referenced_bytes"], 5 * MIB);
    assert_eq!(head["objects"], 5);
    // Stored: the head's 5 objects and three old copies; shared: objects 0 and 3 (all three
    // points) and object 2's old copy (s1 and s2).
    assert_eq!(value["stored_bytes"], 8 * MIB, "{value}");
    assert_eq!(value["shared_bytes"], 3 * MIB, "{value}");
    assert_eq!(value["unreferenced_bytes"], 0);
    let table = ok(&dir, &["volume", "du", "vm"]);
    assert!(table.contains("vm@s1") && table.contains("<total>"), "{table}");

    // Removing s1 frees what it held alone: its copy is trimmed, and du no longer counts it;
    // object 2's old copy is s2's alone now.
    ok(&dir, &["volume", "snap", "rm", "vm@s1", "--wait"]);
    let value = du(&dir);
    assert_eq!(value["stored_bytes"], 7 * MIB, "{value}");
    assert_eq!(value["rows"][0]["name"], "vm@s2");
    assert_eq!(value["rows"][0]["used_bytes"], 2 * MIB, "{value}");
}

#[test]
fn a_clones_diff_sees_through_its_parent_and_its_backup_reads_the_same() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let tmp = tmp.path();
    let out = tmp.join("out.raw");
    // The parent: objects 0 and 2 of 4 written, snapshot gold protected, cloned.
    ok(&dir, &["volume", "create", "base", "4MiB", "--object-size", "1MiB"]);
    let a = pattern(MIB_USIZE, 8);
    import_sparse(&dir, tmp, "base", &sparse(4 * MIB, &[(0, &a), (2 * MIB, &a)]));
    ok(&dir, &["volume", "snap", "create", "base@gold"]);
    ok(&dir, &["volume", "snap", "protect", "base@gold"]);
    ok(&dir, &["volume", "clone", "base@gold", "vm"]);
    // Nothing written in the clone yet: a full diff is what it reads from its parent.
    assert_eq!(extents(&dir, &["vm"]), [extent(0, 1, "data"), extent(2, 1, "data")]);
    ok(&dir, &["volume", "snap", "create", "vm@c1"]);
    // Object 3 written in the clone, object 2 partly overwritten (copied up first).
    let b = pattern(64 << 10, 9);
    import_sparse(&dir, tmp, "vm", &sparse(4 * MIB, &[(2 * MIB, &b), (3 * MIB, &b)]));
    ok(&dir, &["volume", "snap", "create", "vm@c2"]);
    assert_eq!(extents(&dir, &["vm@c2", "--from-snap", "c1"]), [extent(2, 2, "data")]);
    assert_eq!(extents(&dir, &["vm@c2"]), [extent(0, 1, "data"), extent(2, 2, "data")]);
    // A full backup of c1 and the increment to c2 reproduce the clone on a plain volume.
    let (full, increment) = (tmp.join("full.diff"), tmp.join("inc.diff"));
    ok(&dir, &["volume", "export-diff", "vm@c1", full.to_str().unwrap()]);
    let args = ["volume", "export-diff", "vm@c2", increment.to_str().unwrap(), "--from-snap", "c1"];
    ok(&dir, &args);
    ok(&dir, &["volume", "create", "copy", "4MiB", "--object-size", "1MiB"]);
    ok(&dir, &["volume", "import-diff", full.to_str().unwrap(), "copy"]);
    ok(&dir, &["volume", "import-diff", increment.to_str().unwrap(), "copy"]);
    let c2 = export(&dir, "vm@c2", &out);
    assert!(c2[2 * MIB_USIZE..2 * MIB_USIZE + (64 << 10)] == b[..]);
    assert!(export(&dir, "copy", &out) == c2, "the copy reads as the clone's c2");
    assert!(export(&dir, "copy@c1", &out) == export(&dir, "vm@c1", &out));
    // du: the clone's own objects only (2 and 3, written after c1: c2's and the head's).
    let value = json(&ok(&dir, &["volume", "du", "vm", "--json"]));
    assert_eq!(value["stored_bytes"], 2 * MIB, "{value}");
    let rows = value["rows"].as_array().unwrap();
    assert_eq!(rows[0]["referenced_bytes"], 0, "c1 read everything from its parent: {value}");
    // Every new command says what it does.
    for command in ["diff", "export-diff", "import-diff", "du"] {
        let help = ok(&dir, &["volume", command, "--help"]);
        assert!(help.contains("Usage:") && help.len() > 200, "{command}: {help}");
    }
    let help = ok(&dir, &["volume", "export-diff", "--help"]);
    assert!(help.contains("--from-snap"), "{help}");
}
