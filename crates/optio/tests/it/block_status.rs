//! `NBD_CMD_BLOCK_STATUS` over `optio nbd` (issue 40, "NBD for backup tools"): `nbdinfo
//! --map`, `qemu-img map`, `nbdcopy` and `qemu-img convert` see a volume's unwritten data
//! objects as holes — of a volume being written, of a read-only snapshot `VOL@SNAP`, and of a
//! clone, whose objects from its parent are data (`qemu:allocation-depth` 2) — and copies stay
//! byte for byte what the volume holds.

use std::collections::BTreeSet;
use std::path::Path;

use crate::volumes::{Nbd, run, settle, spec};
use crate::{cluster, have_tool as have, ok_at as ok};

const MIB: u64 = 1 << 20;
/// The volume's size and object size.
const SIZE: u64 = 16 * MIB;
const OBJECT: u64 = MIB;

/// `base:allocation` types as nbdinfo prints them.
const DATA: u32 = 0;
const HOLE_ZERO: u32 = 3;

/// `nbdinfo --map[=CONTEXT]` of `uri`: (offset, length, type) runs, neighbours of the same
/// type joined, checked to cover the export from 0 without gaps.
fn map(uri: &str, context: &str) -> Vec<(u64, u64, u32)> {
    let flag = if context.is_empty() { "--map".to_string() } else { format!("--map={context}") };
    let text = run("nbdinfo", &[&flag, uri]);
    let mut out: Vec<(u64, u64, u32)> = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let numbers: Vec<u64> = fields.iter().take(3).map_while(|f| f.parse().ok()).collect();
        let [offset, length, kind] = numbers[..] else { continue };
        let expected_at = out.last().map_or(0, |(o, l, _)| o + l);
        assert_eq!(offset, expected_at, "runs are consecutive: {text}");
        match out.last_mut() {
            Some((_, l, k)) if *k == kind as u32 => *l += length,
            _ => out.push((offset, length, kind as u32)),
        }
    }
    assert_eq!(out.last().map(|(o, l, _)| o + l), Some(SIZE), "the whole export: {text}");
    out
}

/// The runs objects of `kinds` (per object index, `default` elsewhere) make.
fn expected(kinds: &[(u64, u32)], default: u32) -> Vec<(u64, u64, u32)> {
    let mut out: Vec<(u64, u64, u32)> = Vec::new();
    for index in 0..SIZE / OBJECT {
        let kind = kinds.iter().find(|(i, _)| *i == index).map_or(default, |(_, k)| *k);
        match out.last_mut() {
            Some((_, l, k)) if *k == kind => *l += OBJECT,
            _ => out.push((index * OBJECT, OBJECT, kind)),
        }
    }
    out
}

/// Data where `objects` are, holes elsewhere.
fn data_at(objects: &BTreeSet<u64>) -> Vec<(u64, u64, u32)> {
    let kinds: Vec<(u64, u32)> = objects.iter().map(|i| (*i, DATA)).collect();
    expected(&kinds, HOLE_ZERO)
}

/// Writes `len` bytes of `byte` at `offset` through NBD (qemu-io), and into `model`.
fn write(uri: &str, model: &mut [u8], offset: u64, len: u64, byte: u8) {
    let command = format!("write -P {byte:#x} {offset} {len}");
    run("qemu-io", &["-f", "raw", "-c", &command, uri]);
    model[offset as usize..(offset + len) as usize].fill(byte);
}

/// The export's bytes, by nbdcopy and by qemu-img convert, both `model`.
fn copies_match(uri: &str, model: &[u8], dir: &Path, what: &str) {
    let by_nbdcopy = dir.join("nbdcopy.raw");
    let _ = std::fs::remove_file(&by_nbdcopy);
    run("nbdcopy", &[uri, by_nbdcopy.to_str().unwrap()]);
    assert!(std::fs::read(&by_nbdcopy).unwrap() == model, "{what}: nbdcopy's copy differs");
    let by_qemu = dir.join("qemu.raw");
    let _ = std::fs::remove_file(&by_qemu);
    run("qemu-img", &["convert", "-f", "raw", "-O", "raw", uri, by_qemu.to_str().unwrap()]);
    assert!(std::fs::read(&by_qemu).unwrap() == model, "{what}: qemu-img convert's copy differs");
}

/// The data objects of `volume` that `optio nbd` read, as it logged when it stopped.
fn object_reads(log: &str, volume: &str) -> u64 {
    let named = format!("volume={volume} ");
    let line = log
        .lines()
        .find(|line| line.contains("closing") && line.contains(&named))
        .unwrap_or_else(|| panic!("optio nbd logs its reads of {volume} when it stops: {log}"));
    let at = line.find("object_reads=").unwrap() + "object_reads=".len();
    line[at..].chars().take_while(char::is_ascii_digit).collect::<String>().parse().unwrap()
}

#[test]
fn block_status_shows_holes_where_no_object_is_stored_for_volumes_snapshots_and_clones() {
    if !(have("nbdinfo", "libnbd-bin")
        && have("nbdcopy", "libnbd-bin")
        && have("qemu-img", "qemu-utils")
        && have("qemu-io", "qemu-utils"))
    {
        return;
    }
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    ok(&dir, &["volume", "create", "vm", "16MiB", "--object-size", "1MiB"]);
    let mut model = vec![0u8; SIZE as usize];

    // Objects 1 and 5 stored before optio nbd opens the volume (import skips chunks of zeros).
    let mut image = vec![0u8; SIZE as usize];
    image[(MIB + 4096) as usize..(MIB + 4096 + 100_000) as usize].fill(0x11);
    image[(6 * MIB - 1) as usize] = 0x55;
    let file = tmp.path().join("image.raw");
    std::fs::write(&file, &image).unwrap();
    ok(&dir, &["volume", "import", "vm", file.to_str().unwrap(), "--chunk", "64KiB"]);
    model.copy_from_slice(&image);

    let nbd = Nbd::start(&dir, &["vm"]).expect("optio nbd serves");
    let vm = nbd.uri("vm");
    let mut stored = BTreeSet::from([1, 5]);
    assert_eq!(map(&vm, ""), data_at(&stored), "the objects import stored");
    // Objects 2 and 12 written through NBD after the first block status.
    write(&vm, &mut model, 2 * MIB, 64 << 10, 0x22);
    write(&vm, &mut model, 12 * MIB + 500, 10, 0xcc);
    stored.extend([2, 12]);
    assert_eq!(map(&vm, ""), data_at(&stored), "and the objects written since");
    // Zeros written over an unstored object keep it unstored.
    run("qemu-io", &["-f", "raw", "-c", "write -z 9M 64k", &vm]);
    assert_eq!(map(&vm, ""), data_at(&stored));
    // qemu-img map agrees.
    let qemu_map: Vec<serde_json::Value> =
        serde_json::from_str(&run("qemu-img", &["map", "--output=json", "-f", "raw", &vm]))
            .unwrap();
    let mut qemu_data = BTreeSet::new();
    for run in &qemu_map {
        let (start, length) = (run["start"].as_u64().unwrap(), run["length"].as_u64().unwrap());
        if run["data"].as_bool().unwrap() {
            assert_eq!((start % OBJECT, length % OBJECT), (0, 0), "{run}");
            qemu_data.extend(start / OBJECT..(start + length) / OBJECT);
        } else {
            assert!(run["zero"].as_bool().unwrap(), "holes read as zeros: {run}");
        }
    }
    assert_eq!(qemu_data, stored, "qemu-img map: {qemu_map:?}");
    copies_match(&vm, &model, tmp.path(), "the volume");
    // Every object its own: allocation depth 1, holes 0.
    let depth: Vec<(u64, u32)> = stored.iter().map(|i| (*i, 1)).collect();
    assert_eq!(map(&vm, "qemu:allocation-depth"), expected(&depth, 0));

    // A snapshot, taken while optio nbd holds the volume; then object 8 written and object 1
    // overwritten: the snapshot shows what it saw.
    ok(&dir, &["volume", "snap", "create", "vm@s1"]);
    let at_snapshot = model.clone();
    write(&vm, &mut model, 8 * MIB, 4096, 0x88);
    write(&vm, &mut model, MIB, 4096, 0x99);
    let mut now_stored = stored.clone();
    now_stored.insert(8);
    assert_eq!(map(&vm, ""), data_at(&now_stored));
    let log = nbd.stop();
    assert!(!log.contains("answering all data"), "block status never fell back: {log}");

    // nbdcopy reads only the stored objects: its reads of a fresh optio nbd are those of
    // the 5 stored objects (1 MiB requests), not of the 16.
    let nbd = Nbd::start(&dir, &["vm", "vm@s1"]).expect("optio nbd serves a snapshot");
    let copy = tmp.path().join("copy.raw");
    run("nbdcopy", &["--request-size=1048576", &nbd.uri("vm"), copy.to_str().unwrap()]);
    assert!(std::fs::read(&copy).unwrap() == model, "nbdcopy's copy differs");
    let snap = nbd.uri("vm@s1");
    assert_eq!(map(&snap, ""), data_at(&stored), "the snapshot's objects, not object 8");
    copies_match(&snap, &at_snapshot, tmp.path(), "the snapshot");
    let reads = object_reads(&nbd.stop(), "vm");
    assert!(reads <= 5 + 2, "nbdcopy read {reads} objects of vm, 5 stored (16 in all)");

    // A clone of the snapshot: its own writes are depth 1, what it reads from the parent
    // depth 2, and both data; copies read the parent's objects through.
    ok(&dir, &["volume", "snap", "protect", "vm@s1"]);
    ok(&dir, &["volume", "clone", "vm@s1", "c1"]);
    let nbd = Nbd::start(&dir, &["c1"]).expect("optio nbd serves a clone");
    let c1 = nbd.uri("c1");
    let mut clone_model = at_snapshot.clone();
    assert_eq!(map(&c1, ""), data_at(&stored), "the parent's objects are data");
    let depth: Vec<(u64, u32)> = stored.iter().map(|i| (*i, 2)).collect();
    assert_eq!(map(&c1, "qemu:allocation-depth"), expected(&depth, 0));
    write(&c1, &mut clone_model, 3 * MIB, 4096, 0x33); // an object the parent lacks
    write(&c1, &mut clone_model, 5 * MIB, 4096, 0x35); // one it has: copied up
    let mut clone_stored = stored.clone();
    clone_stored.insert(3);
    assert_eq!(map(&c1, ""), data_at(&clone_stored));
    let depth: Vec<(u64, u32)> =
        clone_stored.iter().map(|i| (*i, if [3, 5].contains(i) { 1 } else { 2 })).collect();
    assert_eq!(map(&c1, "qemu:allocation-depth"), expected(&depth, 0));
    copies_match(&c1, &clone_model, tmp.path(), "the clone");
    nbd.stop();

    // Read-only, a live volume is listed again while a writer holds it, and whenever its
    // header changed (a writer came and went): what another writer wrote shows at once.
    let reader = Nbd::start(&dir, &["vm", "--read-only"]).expect("optio nbd serves read-only");
    let writer = Nbd::start(&dir, &["vm"]).expect("and a writer");
    assert_eq!(map(&reader.uri("vm"), ""), data_at(&now_stored));
    write(&writer.uri("vm"), &mut model, 14 * MIB, 4096, 0xee);
    now_stored.insert(14);
    assert_eq!(map(&reader.uri("vm"), ""), data_at(&now_stored), "the reader sees it");
    writer.stop();
    assert_eq!(map(&reader.uri("vm"), ""), data_at(&now_stored), "no writer: listed and kept");
    assert_eq!(map(&reader.uri("vm"), ""), data_at(&now_stored));
    let mut late = vec![0u8; SIZE as usize];
    late[(15 * MIB) as usize..(15 * MIB + 10) as usize].fill(0xff);
    let late_file = tmp.path().join("late.raw");
    std::fs::write(&late_file, &late).unwrap();
    ok(&dir, &["volume", "import", "vm", late_file.to_str().unwrap(), "--chunk", "64KiB"]);
    now_stored.insert(15);
    assert_eq!(map(&reader.uri("vm"), ""), data_at(&now_stored), "a writer came and went");
    reader.stop();
}
