//! Volume snapshots (issue 40): a snapshot keeps what the volume held when it was taken —
//! read back by `optio volume export VOL@SNAP` and by real NBD clients through a read-only
//! `optio nbd VOL@SNAP` — while the volume moves on; taken while `optio nbd` writes (the lock
//! holder takes it), refused cleanly when the holder does not answer (SIGSTOP), taken at once
//! when the holder was killed with SIGKILL; rollback; and removal leaves no clone behind, on
//! the servers' own device directories.

use std::path::Path;
use std::process::Command;

use crate::volumes::{Nbd, fails, image, run, settle, spec};
use crate::{cluster, have_tool as have, ok_at as ok};

const MIB: u64 = 1 << 20;

/// What an object file under a device's `objects/` holds, from the key after its 64-byte
/// header: a volume data object's head (`volume_data.ID.INDEX`) or clone (`…@VERSION`);
/// tombstones hold nothing.
#[derive(PartialEq)]
enum Held {
    Head,
    Clone,
    Other,
}

fn held(file: &Path) -> Held {
    let Ok(bytes) = std::fs::read(file) else { return Held::Other };
    // The key's length is bytes 20..22 of the header; the key follows the 64 bytes.
    if bytes.len() < 64 {
        return Held::Other;
    }
    // Flags, bytes 10..12: bit 1 marks a tombstone (a deleted head), which holds nothing.
    if u16::from_le_bytes([bytes[10], bytes[11]]) & 2 != 0 {
        return Held::Other;
    }
    let len = u16::from_le_bytes([bytes[20], bytes[21]]) as usize;
    let Some(key) = bytes.get(64..64 + len).and_then(|k| std::str::from_utf8(k).ok()) else {
        return Held::Other;
    };
    match (key.starts_with("volume_data."), key.contains('@')) {
        (true, true) => Held::Clone,
        (true, false) => Held::Head,
        _ => Held::Other,
    }
}

/// Calls `f` with every file under `path` and what it holds.
fn walk(path: &Path, f: &mut impl FnMut(&Path, Held)) {
    let Ok(entries) = std::fs::read_dir(path) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, f);
        } else {
            f(&path, held(&path));
        }
    }
}

/// The head files (`volume_data.…` keys) and clone files (`…@VERSION`) under one device
/// directory.
pub(crate) fn heads_and_clones(device_dir: &Path) -> (usize, usize) {
    let mut out = (0, 0);
    walk(&device_dir.join("objects"), &mut |_, held| match held {
        Held::Head => out.0 += 1,
        Held::Clone => out.1 += 1,
        Held::Other => {}
    });
    out
}

/// Snapshot clone files in every device directory of the cluster in `dir`, and the bytes
/// their files take on the disk (a sparse file counts what it holds), found by reading the
/// devices' files themselves.
pub(crate) fn clone_files_and_disk_bytes(dir: &Path) -> (usize, u64) {
    files_and_disk_bytes(dir, true)
}

/// As [`clone_files_and_disk_bytes`], for the head files (`clones` false) or the clones.
pub(crate) fn files_and_disk_bytes(dir: &Path, clones: bool) -> (usize, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut out = (0, 0);
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        walk(&entry.path().join("objects"), &mut |path, held| {
            if matches!((held, clones), (Held::Clone, true) | (Held::Head, false)) {
                out.0 += 1;
                out.1 += std::fs::metadata(path).map_or(0, |m| m.blocks() * 512);
            }
        });
    }
    out
}

/// Snapshot clone files in every device directory of the cluster in `dir`.
pub(crate) fn clone_files(dir: &Path) -> usize {
    clone_files_and_disk_bytes(dir).0
}

pub(crate) fn export(dir: &Path, spec: &str, to: &Path) -> Vec<u8> {
    ok(dir, &["volume", "export", spec, to.to_str().unwrap()]);
    std::fs::read(to).unwrap()
}

/// `nbdcopy` of a whole export into a file, read back.
fn nbd_read(uri: &str, to: &Path) -> Vec<u8> {
    run("nbdcopy", &[uri, to.to_str().unwrap()]);
    std::fs::read(to).unwrap()
}

#[test]
fn a_snapshot_keeps_what_it_saw_while_optio_nbd_writes_and_goes_without_a_trace() {
    if !(have("nbdcopy", "libnbd-bin") && have("nbdinfo", "libnbd-bin")) {
        return;
    }
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let size = 12 * MIB;
    ok(&dir, &["volume", "create", "vm", "12MiB", "--object-size", "1MiB"]);
    let a = image(size, 1);
    let b = image(size, 2);
    let a_file = tmp.path().join("a.raw");
    let b_file = tmp.path().join("b.raw");
    std::fs::write(&a_file, &a).unwrap();
    std::fs::write(&b_file, &b).unwrap();
    ok(&dir, &["volume", "import", "vm", a_file.to_str().unwrap()]);
    assert_eq!(clone_files(&dir), 0);

    // Taken while optio nbd holds the volume's lock: the holder takes it.
    let nbd = Nbd::start(&dir, &["vm"]).expect("optio nbd serves");
    let taken: serde_json::Value =
        serde_json::from_str(&ok(&dir, &["volume", "snap", "create", "vm@a", "--json"])).unwrap();
    assert_eq!(taken["id"], 1, "{taken}");
    assert!(taken["mark"].as_u64().is_some(), "taken with a mark: {taken}");
    // Pattern B over it through NBD (every byte: B's holes are written as zeros).
    run("nbdcopy", &[b_file.to_str().unwrap(), &nbd.uri("vm")]);
    ok(&dir, &["volume", "snap", "create", "vm@b"]);
    let out = tmp.path().join("out.raw");
    assert!(nbd_read(&nbd.uri("vm"), &out) == b, "the volume reads B");
    assert!(export(&dir, "vm@a", &out) == a, "snapshot a reads A (export)");
    assert!(export(&dir, "vm@b", &out) == b, "snapshot b reads B (export)");
    // The copies were made on the servers, once per changed object and replica.
    let clones = clone_files(&dir);
    assert!(clones > 0 && clones <= 12 * 3, "{clones} clone files for 12 objects");

    // A snapshot served by optio nbd is read-only and reads A.
    let snap_nbd = Nbd::start(&dir, &["vm@a"]).expect("optio nbd serves a snapshot");
    let info = run("nbdinfo", &[&snap_nbd.uri("vm@a")]);
    assert!(info.contains("is_read_only: true"), "{info}");
    assert!(nbd_read(&snap_nbd.uri("vm@a"), &out) == a, "snapshot a reads A (NBD)");
    // It cannot be removed while served: the refusal names the reader.
    let error = fails(&dir, &["volume", "snap", "rm", "vm@a"]);
    assert!(error.contains("is being read by") && error.contains(" pid "), "{error}");
    snap_nbd.stop();

    // Listing, protection, and what may not be done.
    let listed: serde_json::Value =
        serde_json::from_str(&ok(&dir, &["volume", "snap", "ls", "vm", "--json"])).unwrap();
    let names: Vec<&str> =
        listed.as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(fails(&dir, &["volume", "snap", "create", "vm@a"]).contains("already"));
    assert!(fails(&dir, &["volume", "snap", "create", "vm"]).contains("VOLUME@SNAPSHOT"));
    assert!(fails(&dir, &["volume", "export", "vm@zz", "/dev/null"]).contains("no snapshot 'zz'"));
    ok(&dir, &["volume", "snap", "protect", "vm@a"]);
    assert!(fails(&dir, &["volume", "snap", "rm", "vm@a"]).contains("protected"));
    nbd.stop();
    assert!(fails(&dir, &["volume", "rm", "vm"]).contains("protected snapshots (vm@a)"));
    let info = ok(&dir, &["volume", "info", "vm"]);
    assert!(info.contains("snapshot     vm@a") && info.contains("protected"), "{info}");

    // Rollback to a: the volume reads A again; both snapshots keep theirs.
    ok(&dir, &["volume", "snap", "rollback", "vm@a"]);
    assert!(export(&dir, "vm", &out) == a, "rolled back to A");
    assert!(export(&dir, "vm@b", &out) == b, "snapshot b still reads B");

    // Removal trims every clone: none left in any device directory.
    ok(&dir, &["volume", "snap", "unprotect", "vm@a"]);
    ok(&dir, &["volume", "snap", "rm", "vm@a", "--wait"]);
    assert!(export(&dir, "vm@b", &out) == b, "snapshot b still reads B after a went");
    ok(&dir, &["volume", "snap", "rm", "vm@b", "--wait"]);
    assert_eq!(clone_files(&dir), 0, "no clone left after every snapshot was removed");
    assert!(export(&dir, "vm", &out) == a);
    ok(&dir, &["volume", "rm", "vm"]);
}

#[test]
fn a_holder_that_does_not_answer_makes_snap_create_fail_and_a_killed_one_does_not() {
    if !have("nbdcopy", "libnbd-bin") {
        return;
    }
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "vm", "4MiB", "--object-size", "1MiB"]);
    let a = image(4 * MIB, 3);
    let a_file = tmp.path().join("a.raw");
    std::fs::write(&a_file, &a).unwrap();
    let nbd = Nbd::start(&dir, &["vm"]).expect("optio nbd serves");
    run("nbdcopy", &[a_file.to_str().unwrap(), &nbd.uri("vm")]);

    // Stopped (SIGSTOP): it holds the lock but answers nothing. No snapshot is made.
    let pid = nbd.pid().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let error = fails(&dir, &["volume", "snap", "create", "vm@frozen"]);
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    assert!(
        error.contains("did not take snapshot 'frozen'") && error.contains("no snapshot was made"),
        "{error}"
    );
    let listed = ok(&dir, &["volume", "snap", "ls", "vm", "--json"]);
    assert_eq!(listed.trim(), "[]", "the unmarked snapshot was taken back");

    // Killed with SIGKILL: its lock is a dead process's on this machine, so the snapshot is
    // taken without it, at once, and holds every write it acknowledged.
    nbd.kill();
    ok(&dir, &["volume", "snap", "create", "vm@after-kill"]);
    let out = tmp.path().join("out.raw");
    assert!(export(&dir, "vm@after-kill", &out) == a);
    // A restarted optio nbd writes over it; the snapshot keeps A.
    let nbd = Nbd::start(&dir, &["vm"]).expect("a restarted optio nbd serves");
    let b_file = tmp.path().join("b.raw");
    std::fs::write(&b_file, image(4 * MIB, 4)).unwrap();
    run("nbdcopy", &[b_file.to_str().unwrap(), &nbd.uri("vm")]);
    nbd.stop();
    assert!(export(&dir, "vm@after-kill", &out) == a);
    assert!(export(&dir, "vm", &out) == std::fs::read(&b_file).unwrap());
}

#[test]
fn clones_of_a_protected_snapshot_read_through_and_write_their_own_and_flatten() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let size = 6 * MIB;
    ok(&dir, &["volume", "create", "base", "6MiB", "--object-size", "1MiB"]);
    let a = image(size, 5);
    // B has holes where A has data (every third 64 KiB chunk from the third).
    let mut b = image(size, 6);
    for (i, chunk) in b.chunks_mut(64 << 10).enumerate() {
        if i % 3 == 2 {
            chunk.fill(0);
        }
    }
    let (a_file, b_file) = (tmp.path().join("a.raw"), tmp.path().join("b.raw"));
    std::fs::write(&a_file, &a).unwrap();
    std::fs::write(&b_file, &b).unwrap();
    ok(&dir, &["volume", "import", "base", a_file.to_str().unwrap()]);
    ok(&dir, &["volume", "snap", "create", "base@gold"]);
    let error = fails(&dir, &["volume", "clone", "base@gold", "c1"]);
    assert!(error.contains("not protected"), "{error}");
    ok(&dir, &["volume", "snap", "protect", "base@gold"]);
    ok(&dir, &["volume", "clone", "base@gold", "c1"]);
    ok(&dir, &["volume", "clone", "base@gold", "c2"]);
    assert!(fails(&dir, &["volume", "clone", "base@gold", "c1"]).contains("exists already"));

    // c1 gets B's non-zero 64 KiB chunks only (partial writes of objects it reads from the
    // parent: each is copied up first); c2 is written whole with B.
    ok(&dir, &["volume", "import", "c1", b_file.to_str().unwrap(), "--chunk", "64KiB"]);
    let merged: Vec<u8> = a
        .chunks(64 << 10)
        .zip(b.chunks(64 << 10))
        .flat_map(|(a, b)| if b.iter().all(|x| *x == 0) { a.to_vec() } else { b.to_vec() })
        .collect();
    assert!(merged != a && merged != b);
    let c2_data = image(size, 7);
    let c2_file = tmp.path().join("c2.raw");
    std::fs::write(&c2_file, &c2_data).unwrap();
    ok(&dir, &["volume", "import", "c2", c2_file.to_str().unwrap()]);
    let out = tmp.path().join("out.raw");
    assert!(export(&dir, "c1", &out) == merged, "c1: B where written, the parent elsewhere");
    assert!(export(&dir, "c2", &out) == c2_data);
    assert!(export(&dir, "base", &out) == a, "the parent is unchanged");
    assert!(export(&dir, "base@gold", &out) == a);

    // A clone of a clone reads through two levels.
    ok(&dir, &["volume", "snap", "create", "c1@s"]);
    ok(&dir, &["volume", "snap", "protect", "c1@s"]);
    ok(&dir, &["volume", "clone", "c1@s", "cc"]);
    assert!(export(&dir, "cc", &out) == merged);
    let info = ok(&dir, &["volume", "info", "cc"]);
    assert!(info.contains("parent       c1@s"), "{info}");

    // The parent snapshot names its clones and cannot go while they read from it.
    let error = fails(&dir, &["volume", "snap", "unprotect", "base@gold"]);
    assert!(error.contains("has clones (c1, c2)"), "{error}");
    let error = fails(&dir, &["volume", "snap", "rm", "base@gold"]);
    assert!(error.contains("has clones (c1, c2)"), "{error}");

    // Flatten c1: it reads the same, no longer from base; base@gold has c2 left.
    let out_text = ok(&dir, &["volume", "flatten", "c1"]);
    assert!(out_text.contains("flattened volume 'c1'"), "{out_text}");
    assert!(export(&dir, "c1", &out) == merged);
    assert!(export(&dir, "cc", &out) == merged, "the clone of c1 still reads through c1@s");
    assert!(!ok(&dir, &["volume", "info", "c1"]).contains("parent "));
    assert!(fails(&dir, &["volume", "flatten", "c1"]).contains("not a clone"));
    ok(&dir, &["volume", "rm", "c2"]);
    ok(&dir, &["volume", "snap", "unprotect", "base@gold"]);
    ok(&dir, &["volume", "snap", "rm", "base@gold"]);
    assert!(export(&dir, "c1", &out) == merged, "a flattened clone needs no parent");
}

#[test]
fn a_server_down_during_the_first_writes_after_a_snapshot_catches_up_its_clones() {
    if !have("nbdcopy", "libnbd-bin") {
        return;
    }
    let (tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "vm", "12MiB", "--object-size", "1MiB"]);
    let a = image(12 * MIB, 8);
    let b = image(12 * MIB, 9);
    let (a_file, b_file) = (tmp.path().join("a.raw"), tmp.path().join("b.raw"));
    std::fs::write(&a_file, &a).unwrap();
    std::fs::write(&b_file, &b).unwrap();
    // Written by the optio nbd that goes on writing (it knows every object, as a writer
    // does, so it needs no object's home while a server is down).
    let nbd = Nbd::start(&dir, &["vm"]).expect("optio nbd serves");
    run("nbdcopy", &[a_file.to_str().unwrap(), &nbd.uri("vm")]);
    // A server killed with SIGKILL; the snapshot is taken and B written without it: its
    // replicas get no clone then.
    // The victim: the server of object 0's second replica.
    let info: serde_json::Value =
        serde_json::from_str(&ok(&dir, &["volume", "info", "vm", "--placement", "--json"]))
            .unwrap();
    let victim = info["placement"][0]["devices"][1].as_u64().unwrap() as u32;
    let server = cluster
        .servers()
        .iter()
        .find(|s| s.devices.iter().any(|(d, _)| *d == victim))
        .expect("a server holds it");
    let victim_dirs: Vec<std::path::PathBuf> =
        server.devices.iter().map(|(_, path)| path.clone()).collect();
    cluster.kill(victim).unwrap();
    ok(&dir, &["volume", "snap", "create", "vm@a"]);
    run("nbdcopy", &[b_file.to_str().unwrap(), &nbd.uri("vm")]);
    nbd.stop();
    let out = tmp.path().join("out.raw");
    assert!(export(&dir, "vm@a", &out) == a);
    let before: (usize, usize) =
        victim_dirs.iter().map(|d| heads_and_clones(d)).fold((0, 0), |s, x| (s.0 + x.0, s.1 + x.1));
    assert_eq!(before.1, 0, "no clone made on a server that was down");
    // Back: it catches up on the heads it missed and on their clones, placed by their
    // heads' seeds — one clone per head it holds, all B's objects having been rewritten.
    cluster.restart(victim).unwrap();
    settle(&cluster);
    let (heads, clones) =
        victim_dirs.iter().map(|d| heads_and_clones(d)).fold((0, 0), |s, x| (s.0 + x.0, s.1 + x.1));
    assert!(heads > 0, "the server holds replicas of the volume");
    assert_eq!(clones, heads, "a clone caught up for every head it holds");
    assert!(export(&dir, "vm@a", &out) == a);
    assert!(export(&dir, "vm", &out) == b);
    // And trimming removes them there too.
    ok(&dir, &["volume", "snap", "rm", "vm@a", "--wait"]);
    assert_eq!(clone_files(&dir), 0);
}

#[test]
fn clones_move_with_their_heads_when_the_map_moves_data() {
    if !have("nbdcopy", "libnbd-bin") {
        return;
    }
    // Two hosts per zone: a device marked out has a place for its data to go.
    let (tmp, cluster) =
        cluster(optio_local::cluster::LocalClusterSpec { hosts_per_zone: 2, ..spec() });
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "vm", "8MiB", "--object-size", "1MiB"]);
    let a = image(8 * MIB, 10);
    let b = image(8 * MIB, 11);
    let (a_file, b_file) = (tmp.path().join("a.raw"), tmp.path().join("b.raw"));
    std::fs::write(&a_file, &a).unwrap();
    std::fs::write(&b_file, &b).unwrap();
    let nbd = Nbd::start(&dir, &["vm"]).expect("optio nbd serves");
    run("nbdcopy", &[a_file.to_str().unwrap(), &nbd.uri("vm")]);
    ok(&dir, &["volume", "snap", "create", "vm@a"]);
    run("nbdcopy", &[b_file.to_str().unwrap(), &nbd.uri("vm")]);
    nbd.stop();
    // Every replica of every head has its clone beside it.
    let per_device = |cluster: &optio_local::cluster::LocalCluster| -> Vec<(u32, usize, usize)> {
        let mut out = Vec::new();
        for server in cluster.servers() {
            for (device, path) in &server.devices {
                let (heads, clones) = heads_and_clones(path);
                out.push((*device, heads, clones));
            }
        }
        out
    };
    for (device, heads, clones) in per_device(&cluster) {
        assert_eq!(heads, clones, "device {device} before the map change");
    }
    // Device 0 marked out: rebalancing moves its heads and their clones, placed by seed.
    let moved = per_device(&cluster).iter().find(|(_, heads, _)| *heads > 0).unwrap().0;
    ok(&dir, &["map", "set-state", &moved.to_string(), "--out"]);
    settle(&cluster);
    for (device, heads, clones) in per_device(&cluster) {
        if device == moved {
            assert_eq!((heads, clones), (0, 0), "device {device} is out: nothing left on it");
        } else {
            assert_eq!(heads, clones, "device {device}: every head it received has its clone");
        }
    }
    let out = tmp.path().join("out.raw");
    assert!(export(&dir, "vm@a", &out) == a);
    assert!(export(&dir, "vm", &out) == b);
}

/// A clone file under one of the cluster's devices: (device, path).
fn a_clone_file(cluster: &optio_local::cluster::LocalCluster) -> Option<(u32, std::path::PathBuf)> {
    fn find(path: &Path) -> Option<std::path::PathBuf> {
        for entry in std::fs::read_dir(path).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if let Some(found) = find(&path) {
                    return Some(found);
                }
            } else if held(&path) == Held::Clone {
                return Some(path);
            }
        }
        None
    }
    cluster
        .servers()
        .iter()
        .flat_map(|s| s.devices.iter())
        .find_map(|(device, dir)| find(&dir.join("objects")).map(|path| (*device, path)))
}

#[test]
fn a_deep_scrub_finds_and_repairs_a_damaged_clone() {
    if !have("nbdcopy", "libnbd-bin") {
        return;
    }
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "vm", "4MiB", "--object-size", "1MiB"]);
    let a = image(4 * MIB, 12);
    let (a_file, b_file) = (tmp.path().join("a.raw"), tmp.path().join("b.raw"));
    std::fs::write(&a_file, &a).unwrap();
    std::fs::write(&b_file, image(4 * MIB, 13)).unwrap();
    let nbd = Nbd::start(&dir, &["vm"]).expect("optio nbd serves");
    run("nbdcopy", &[a_file.to_str().unwrap(), &nbd.uri("vm")]);
    ok(&dir, &["volume", "snap", "create", "vm@a"]);
    run("nbdcopy", &[b_file.to_str().unwrap(), &nbd.uri("vm")]);
    nbd.stop();
    // A bit flipped in the data of one replica of one clone.
    let (device, path) = a_clone_file(&cluster).expect("clones were made");
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    let scrub = |dir: &Path| -> serde_json::Value {
        let output = Command::new(crate::binary())
            .args(["scrub", "--deep", "--json", "--cluster"])
            .arg(dir)
            .output()
            .unwrap();
        serde_json::from_slice(&output.stdout).expect("scrub --json prints JSON")
    };
    let report = scrub(&dir);
    let mine = report["devices"].as_array().unwrap().iter().find(|d| d["device"] == device);
    let repaired = mine.and_then(|d| d["repaired"].as_u64()).unwrap_or(0);
    assert!(repaired >= 1, "the damaged clone on device {device} repaired: {report:#}");
    // A second deep scrub finds nothing more, and the snapshot reads A.
    let again = scrub(&dir);
    let total: u64 =
        again["devices"].as_array().unwrap().iter().filter_map(|d| d["repaired"].as_u64()).sum();
    assert_eq!(total, 0, "{again:#}");
    let out = tmp.path().join("out.raw");
    assert!(export(&dir, "vm@a", &out) == a);
}

/// `optio status --json`'s volume jobs.
pub(crate) fn volume_jobs(dir: &Path) -> Vec<serde_json::Value> {
    let out = Command::new(crate::binary())
        .args(["status", "--json", "--cluster", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    value["volume_jobs"].as_array().unwrap_or_else(|| panic!("{value}")).clone()
}

/// Runs a closure when dropped (also when a test fails).
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Polls `done` for up to a minute.
pub(crate) fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what} within a minute");
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

#[test]
fn snap_rm_trims_in_the_background_resumably_and_a_volume_goes_with_its_snapshots() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "vm", "16MiB", "--object-size", "256KiB"]);
    let (a, b) = (image(16 * MIB, 31), image(16 * MIB, 32));
    let (a_file, b_file, out) =
        (tmp.path().join("a.raw"), tmp.path().join("b.raw"), tmp.path().join("out.raw"));
    std::fs::write(&a_file, &a).unwrap();
    std::fs::write(&b_file, &b).unwrap();
    ok(&dir, &["volume", "import", "vm", a_file.to_str().unwrap()]);
    ok(&dir, &["volume", "snap", "create", "vm@s"]);
    ok(&dir, &["volume", "import", "vm", b_file.to_str().unwrap()]);
    let clones = clone_files(&dir);
    assert_eq!(clones, 64 * 3, "every object kept for s, on each replica");

    // `snap rm` returns at once: the snapshot is gone, its copies wait for a trimmer, and
    // `optio status` shows the job.
    let said = ok(&dir, &["volume", "snap", "rm", "vm@s"]);
    assert!(said.contains("in the background"), "{said}");
    assert!(
        fails(&dir, &["volume", "export", "vm@s", out.to_str().unwrap()]).contains("no snapshot")
    );
    assert_eq!(clone_files(&dir), clones, "nothing trimmed without a trimmer");
    let jobs = volume_jobs(&dir);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!((jobs[0]["volume"].as_str(), jobs[0]["kind"].as_str()), (Some("vm"), Some("trim")));
    let text = ok(&dir, &["status"]);
    assert!(text.contains("trimming the snapshot copies of 'vm'"), "{text}");

    // A trimmer killed with SIGKILL half-way leaves its progress in the header…
    let mut trimmer = Command::new(crate::binary())
        .args(["volume", "snap", "trim", "vm", "--rate", "10", "--cluster", dir.to_str().unwrap()])
        .spawn()
        .unwrap();
    eventually("the trimmer records progress", || {
        volume_jobs(&dir).first().is_some_and(|job| job["count"].as_u64() > Some(0))
    });
    trimmer.kill().unwrap();
    trimmer.wait().unwrap();
    let left = clone_files(&dir);
    assert!(left > 0 && left < clones, "half-way: {left} of {clones} clone files left");

    // One runner at a time: a second trimmer finds the first one's claim and follows its
    // progress instead of sending the same deletions; when the first is killed, it takes over
    // at once (the claim's holder is gone from this machine) and stops short of the end.
    let spawn_trimmer = |rate: &str| {
        Command::new(crate::binary())
            .args(["volume", "snap", "trim", "vm", "--rate", rate])
            .args(["--cluster", dir.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let by = |job: &serde_json::Value| job["by"].as_str().unwrap_or_default().to_string();
    // (Slow rates: copies must be left for the first runner to work on while it is watched,
    // on a loaded machine too.)
    let mut first = spawn_trimmer("2");
    let first_pid = format!("pid {}", first.id());
    eventually("the first trimmer claims the job", || {
        volume_jobs(&dir).first().is_some_and(|job| by(job).ends_with(&first_pid))
    });
    let mut second = spawn_trimmer("0");
    for _ in 0..10 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let jobs = volume_jobs(&dir);
        let runner = jobs.first().map(by).unwrap_or_default();
        assert!(runner.ends_with(&first_pid), "the first keeps the job: {jobs:?}");
    }
    assert!(clone_files(&dir) > 0, "the second did not trim at full speed beside the first");
    first.kill().unwrap();
    first.wait().unwrap();
    let status = second.wait().unwrap();
    assert!(status.success(), "the second trimmer finishes the job: {status}");
    assert!(volume_jobs(&dir).is_empty());
    assert_eq!(clone_files(&dir), 0, "every copy of the removed snapshot trimmed");

    // The background trimmer of `optio manager` (it has no job left now) runs the removal
    // below.
    let mut manager = Command::new(crate::binary())
        .args(["manager", "--cluster", dir.to_str().unwrap(), "--trim-rate", "0"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let manager_pid = manager.id();
    let _stop_manager = Defer(move || {
        let _ = Command::new("kill")
            .args(["-9", &manager_pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    });
    assert!(export(&dir, "vm", &out) == b);

    // A volume removed with its snapshots goes in the background too (not with a protected
    // one): nothing of it is left on any device.
    ok(&dir, &["volume", "snap", "create", "vm@t"]);
    ok(&dir, &["volume", "import", "vm", a_file.to_str().unwrap()]);
    ok(&dir, &["volume", "snap", "protect", "vm@t"]);
    assert!(fails(&dir, &["volume", "rm", "vm"]).contains("protected snapshots (vm@t)"));
    ok(&dir, &["volume", "snap", "unprotect", "vm@t"]);
    let said = ok(&dir, &["volume", "rm", "vm"]);
    assert!(said.contains("in the background"), "{said}");
    assert!(fails(&dir, &["volume", "import", "vm", a_file.to_str().unwrap()]).contains("vm"));
    eventually("the volume's removal ends", || {
        let count = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|entry| heads_and_clones(&entry.path()))
            .fold((0, 0), |s, x| (s.0 + x.0, s.1 + x.1));
        let jobs = volume_jobs(&dir);
        eprintln!("heads and clones left: {count:?}; jobs: {jobs:?}");
        count == (0, 0) && jobs.is_empty()
    });
    assert!(fails(&dir, &["volume", "info", "vm"]).contains("vm"));
    manager.kill().unwrap();
    manager.wait().unwrap();
}

#[test]
fn optio_nbd_flattens_the_clone_it_serves_while_it_writes_and_a_flatten_resumes() {
    if !(have("nbdcopy", "libnbd-bin") && have("qemu-io", "qemu-utils")) {
        return;
    }
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let size = 12 * MIB;
    ok(&dir, &["volume", "create", "base", "12MiB", "--object-size", "512KiB"]);
    let a = image(size, 41);
    let (a_file, out) = (tmp.path().join("a.raw"), tmp.path().join("out.raw"));
    std::fs::write(&a_file, &a).unwrap();
    ok(&dir, &["volume", "import", "base", a_file.to_str().unwrap()]);
    ok(&dir, &["volume", "snap", "create", "base@gold"]);
    ok(&dir, &["volume", "snap", "protect", "base@gold"]);
    ok(&dir, &["volume", "clone", "base@gold", "c1"]);
    ok(&dir, &["volume", "clone", "base@gold", "c2"]);

    // An interrupted flatten (the command killed with SIGKILL) leaves its progress; run
    // again, it resumes and completes.
    let mut flatten = Command::new(crate::binary())
        .args(["volume", "flatten", "c2", "--rate", "8", "--cluster", dir.to_str().unwrap()])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    flatten.kill().unwrap();
    flatten.wait().unwrap();
    let info = ok(&dir, &["volume", "info", "c2", "--json"]);
    assert!(info.contains("\"flatten\""), "a flatten under way is recorded: {info}");
    let said = ok(&dir, &["volume", "flatten", "c2", "--rate", "0"]);
    assert!(said.contains("flattened volume 'c2'"), "{said}");
    assert!(export(&dir, "c2", &out) == a);

    // c1 served by optio nbd: the holder takes the flatten up, at 8 objects a second, and
    // goes on serving writes meanwhile.
    let nbd = Nbd::start(&dir, &["c1"]).expect("optio nbd serves");
    let uri = nbd.uri("c1");
    let mut expected = a.clone();
    let mut flatten = Command::new(crate::binary())
        .args(["volume", "flatten", "c1", "--rate", "8", "--cluster", dir.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for (i, at) in [0u64, 5 * MIB + 4096, 11 * MIB].iter().enumerate() {
        let byte = 0x51 + i as u8;
        run("qemu-io", &["-f", "raw", "-c", &format!("write -P {byte} {at} 64k"), &uri]);
        expected[*at as usize..(*at + 64 * 1024) as usize].fill(byte);
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let status = flatten.wait().unwrap();
    let mut said = String::new();
    std::io::Read::read_to_string(&mut flatten.stdout.take().unwrap(), &mut said).unwrap();
    assert!(status.success() && said.contains("flattened volume 'c1'"), "{said}");
    assert!(nbd_read(&uri, &out) == expected, "served and flattened, c1 reads A with its writes");
    nbd.stop();
    assert!(!ok(&dir, &["volume", "info", "c1"]).contains("parent "));

    // Both flattened: the parent snapshot has no clones left and may go, and so may the
    // parent; the clones read the same without them.
    ok(&dir, &["volume", "snap", "unprotect", "base@gold"]);
    ok(&dir, &["volume", "snap", "rm", "base@gold", "--wait"]);
    ok(&dir, &["volume", "rm", "base"]);
    assert!(export(&dir, "c1", &out) == expected);
    assert!(export(&dir, "c2", &out) == a);
}

#[test]
fn a_storage_server_killed_during_snap_create_leaves_each_snapshot_whole_or_absent() {
    if !have("nbdcopy", "libnbd-bin") {
        return;
    }
    let (tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "vm", "4MiB", "--object-size", "1MiB"]);
    let devices: Vec<u32> = cluster.servers().iter().map(|s| s.devices[0].0).collect::<Vec<_>>();
    let nbd = Nbd::start(&dir, &["vm"]).expect("optio nbd serves");
    let file = tmp.path().join("in.raw");
    let mut taken = Vec::new();
    for round in 0..4u64 {
        // What the volume holds when the snapshot is asked for.
        let content = image(4 * MIB, 60 + round);
        std::fs::write(&file, &content).unwrap();
        run("nbdcopy", &[file.to_str().unwrap(), &nbd.uri("vm")]);
        let name = format!("s{round}");
        let (spec, at) = (format!("vm@{name}"), dir.clone());
        let create = std::thread::spawn(move || {
            Command::new(crate::binary())
                .args(["volume", "snap", "create", &spec, "--cluster"])
                .arg(&at)
                .output()
        });
        let victim = devices[round as usize % devices.len()];
        std::thread::sleep(std::time::Duration::from_millis(15 * round));
        cluster.kill(victim).unwrap();
        let reported = create.join().unwrap().unwrap();
        cluster.restart(victim).unwrap();
        settle(&cluster);
        eprintln!(
            "{name}: server of device {victim} killed; snap create said {:?}: {}",
            reported.status.code(),
            String::from_utf8_lossy(&reported.stderr).trim()
        );
        taken.push((name, content, reported.status.success()));
    }
    nbd.stop();
    let listed: serde_json::Value =
        serde_json::from_str(&ok(&dir, &["volume", "snap", "ls", "vm", "--json"])).unwrap();
    let listed = listed.as_array().unwrap();
    let out = tmp.path().join("out.raw");
    let mut kept = 0;
    for (name, content, reported) in &taken {
        match listed.iter().find(|s| s["name"] == name.as_str()) {
            Some(snapshot) => {
                assert!(snapshot["mark"].as_u64().is_some(), "{name} has its mark: {snapshot}");
                assert!(
                    export(&dir, &format!("vm@{name}"), &out) == *content,
                    "{name} reads whole"
                );
                kept += 1;
            }
            None => assert!(!reported, "{name} was reported taken but does not exist"),
        }
    }
    assert!(kept > 0, "some snapshot was taken: {listed:?}");
}
