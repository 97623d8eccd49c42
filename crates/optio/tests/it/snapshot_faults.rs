//! Faults during the snapshot and clone commands (issue 40, "Faults"): a storage server
//! killed with SIGKILL while `snap rm --wait` trims, while `flatten` copies, while `clone`
//! runs; and `optio nbd` killed with SIGKILL while it flattens the clone it serves. After a
//! restart every snapshot and clone either exists and reads what it should or does not exist
//! (and can be made again), the interrupted job finishes when run again, and no copy of a
//! removed snapshot is left on any device (read from the devices' own files).

use std::path::Path;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

use optio_local::cluster::{LocalCluster, Supervision};

use crate::snapshot_clients::{exists, has_parent, snapshot, spawn, text};
use crate::snapshots::{eventually, export, heads_and_clones, volume_jobs};
use crate::volumes::{Nbd, fails, image, settle, spec};
use crate::{cluster, ok_at as ok, optio_at};

const MIB: u64 = 1 << 20;

/// The monitor's part, played by the test (as `optio up` does): a killed server's devices
/// marked down at once (a refused connection), a restarted one's up again; nothing restarted.
fn monitor() -> Supervision {
    Supervision { restart: false, ..Supervision::default() }
}

/// One round of the monitor's part (when `cluster` is given), then a short sleep.
fn tick(cluster: Option<&mut LocalCluster>) {
    if let Some(cluster) = cluster {
        for event in cluster.supervise(&monitor()).expect("supervision") {
            eprintln!("supervisor: {event}");
        }
    }
    std::thread::sleep(Duration::from_millis(100));
}

/// Waits (at most `bound`) for `child` to exit, playing the monitor meanwhile if `cluster` is
/// given; its output, or `None` if it is still running (then it is killed). Its output is
/// small: the pipes never fill.
fn finish_within(
    mut child: Child,
    bound: Duration,
    mut cluster: Option<&mut LocalCluster>,
) -> Option<Output> {
    let deadline = Instant::now() + bound;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return Some(child.wait_with_output().expect("output"));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        tick(cluster.as_deref_mut());
    }
}

/// Kills the server of `device` with SIGKILL and plays the monitor for `down` (it is marked
/// down), or until `child` exits; whether `child` was still running at the kill.
fn kill_for(cluster: &mut LocalCluster, device: u32, down: Duration, child: &mut Child) -> bool {
    let running = matches!(child.try_wait(), Ok(None));
    cluster.kill(device).unwrap();
    let until = Instant::now() + down;
    while Instant::now() < until && matches!(child.try_wait(), Ok(None)) {
        tick(Some(cluster));
    }
    running
}

/// Restarts the server of `device` and plays the monitor until the cluster is healthy
/// again (its devices marked up, caught up).
fn restart_and_settle(cluster: &mut LocalCluster, device: u32) {
    cluster.restart(device).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while optio_at(cluster.dir(), &["status"]).status.code() != Some(0) {
        assert!(Instant::now() < deadline, "the cluster did not settle after the restart");
        tick(Some(cluster));
    }
    settle(cluster);
}

/// (device, heads, clones) of every device of the cluster, from its files.
fn per_device(cluster: &LocalCluster) -> Vec<(u32, usize, usize)> {
    let mut out = Vec::new();
    for server in cluster.servers() {
        for (device, path) in &server.devices {
            let (heads, clones) = heads_and_clones(path);
            out.push((*device, heads, clones));
        }
    }
    out
}

/// The volume jobs of `kind` on `volume` (`optio status --json`).
fn job_of(dir: &Path, volume: &str, kind: &str) -> Option<serde_json::Value> {
    volume_jobs(dir).into_iter().find(|j| j["volume"] == volume && j["kind"] == kind)
}

/// The first device of each server.
fn devices(cluster: &LocalCluster) -> Vec<u32> {
    cluster.servers().iter().map(|s| s.devices[0].0).collect()
}

#[test]
fn a_storage_server_killed_while_snap_rm_trims_leaves_no_copy_of_the_snapshot_behind() {
    let (tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    // 256 objects of 64 KiB.
    ok(&dir, &["volume", "create", "vm", "16MiB", "--object-size", "64KiB"]);
    let (a, b, c) = (image(16 * MIB, 71), image(16 * MIB, 72), image(16 * MIB, 73));
    let file = tmp.path().join("in.raw");
    let out = tmp.path().join("out.raw");
    for (data, snap) in [(&a, Some("vm@s1")), (&b, Some("vm@s2")), (&c, None)] {
        std::fs::write(&file, data).unwrap();
        ok(&dir, &["volume", "import", "vm", file.to_str().unwrap()]);
        if let Some(snap) = snap {
            ok(&dir, &["volume", "snap", "create", snap]);
        }
    }
    // Every device holds every object (three servers, three replicas): its head, its copy
    // for s1 (A) and its copy for s2 (B).
    let objects = per_device(&cluster)[0].1;
    assert!(objects > 0);
    for (device, heads, clones) in per_device(&cluster) {
        assert_eq!((heads, clones), (objects, 2 * objects), "device {device} before snap rm");
    }

    // snap rm --wait, slowly (a copy of each object at 50 a second: 5 s); a server killed
    // once it has recorded progress, and restarted 2 s later (the command may still run).
    let victim = devices(&cluster)[1];
    let mut rm = spawn(&dir, &["volume", "snap", "rm", "vm@s1", "--wait", "--rate", "50"]);
    eventually("snap rm records trim progress", || {
        job_of(&dir, "vm", "trim").is_some_and(|job| job["count"].as_u64() > Some(0))
    });
    assert!(kill_for(&mut cluster, victim, Duration::from_secs(2), &mut rm), "killed mid-trim");
    // The snapshot is gone at once; s2 reads whole with the server down.
    assert!(snapshot(&dir, "vm", "s1").is_none());
    assert!(export(&dir, "vm@s2", &out) == b, "s2 reads B with a server down");
    restart_and_settle(&mut cluster, victim);
    let said = finish_within(rm, Duration::from_secs(90), Some(&mut cluster))
        .expect("snap rm --wait ends");
    eprintln!(
        "snap rm --wait with device {victim}'s server killed: {:?}: {}",
        said.status.code(),
        text(&said).trim()
    );
    let said_text = text(&said);
    assert!(
        said.status.success() || (said.status.code() == Some(1) && said_text.contains("error: ")),
        "fails cleanly or finishes: {said_text}"
    );
    assert!(!said_text.contains("panicked"), "{said_text}");
    settle(&cluster);
    // Run again (or with nothing left to do): it ends, and no job is left.
    let said = ok(&dir, &["volume", "snap", "trim", "vm", "--rate", "0"]);
    eprintln!("snap trim after the restart: {}", said.trim());
    assert!(job_of(&dir, "vm", "trim").is_none(), "{:?}", volume_jobs(&dir));

    // On every device, the restarted one too, each head has one copy left: s2's.
    for (device, heads, clones) in per_device(&cluster) {
        assert_eq!((heads, clones), (objects, objects), "device {device}: s1's copies left");
    }
    assert!(export(&dir, "vm", &out) == c, "the volume reads C");
    assert!(export(&dir, "vm@s2", &out) == b, "s2 reads B");
    // Removing s2 as well leaves no copy anywhere.
    ok(&dir, &["volume", "snap", "rm", "vm@s2", "--wait"]);
    for (device, heads, clones) in per_device(&cluster) {
        assert_eq!((heads, clones), (objects, 0), "device {device}: copies left");
    }
    assert!(export(&dir, "vm", &out) == c);
}

/// A volume `base` of `size` (objects of `object_size`) holding `image(size, seed)`, with
/// snapshot `base@gold` protected: its data.
fn golden(dir: &Path, tmp: &Path, size: u64, object_size: &str, seed: u64) -> Vec<u8> {
    let data = image(size, seed);
    let file = tmp.join("golden.raw");
    std::fs::write(&file, &data).unwrap();
    let size_arg = format!("{}MiB", size / MIB);
    ok(dir, &["volume", "create", "base", &size_arg, "--object-size", object_size]);
    ok(dir, &["volume", "import", "base", file.to_str().unwrap()]);
    ok(dir, &["volume", "snap", "create", "base@gold"]);
    ok(dir, &["volume", "snap", "protect", "base@gold"]);
    data
}

/// `golden` with the odd `object`-sized pieces replaced by `image(len, seed)`'s, and the
/// file that holds only those (zeros elsewhere: `import` skips them).
fn half_written(tmp: &Path, golden: &[u8], object: u64, seed: u64) -> (Vec<u8>, String) {
    let mut part = image(golden.len() as u64, seed);
    for (i, chunk) in part.chunks_mut(object as usize).enumerate() {
        if i % 2 == 0 {
            chunk.fill(0);
        }
    }
    let want: Vec<u8> = golden
        .chunks(object as usize)
        .zip(part.chunks(object as usize))
        .enumerate()
        .flat_map(|(i, (g, p))| if i % 2 == 0 { g.to_vec() } else { p.to_vec() })
        .collect();
    let file = tmp.join("part.raw");
    std::fs::write(&file, &part).unwrap();
    (want, file.to_str().unwrap().to_string())
}

/// After a flatten of `clone` ended: it has no parent, reads `want`, and base@gold (no clone
/// left) can be unprotected and removed, after which `clone` still reads `want`.
fn detached_and_parent_goes(dir: &Path, clone: &str, want: &[u8], golden: &[u8], out: &Path) {
    assert!(!has_parent(dir, clone), "{clone} is detached");
    assert!(export(dir, clone, out) == want, "{clone} reads what it read before");
    assert!(fails(dir, &["volume", "flatten", clone]).contains("not a clone"));
    assert!(export(dir, "base@gold", out) == golden);
    ok(dir, &["volume", "snap", "unprotect", "base@gold"]);
    ok(dir, &["volume", "snap", "rm", "base@gold", "--wait"]);
    assert!(export(dir, clone, out) == want, "{clone} reads the same without its parent");
    assert!(export(dir, "base", out) == golden);
}

#[test]
fn a_storage_server_killed_during_flatten_leaves_the_clone_whole_and_a_rerun_detaches_it() {
    let (tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let out = tmp.path().join("out.raw");
    // 32 objects of 256 KiB; the clone wrote the odd ones, flatten copies the 16 others.
    let golden = golden(&dir, tmp.path(), 8 * MIB, "256KiB", 81);
    ok(&dir, &["volume", "clone", "base@gold", "c1"]);
    let (want, part) = half_written(tmp.path(), &golden, 256 << 10, 82);
    ok(&dir, &["volume", "import", "c1", &part, "--chunk", "256KiB"]);
    assert!(export(&dir, "c1", &out) == want);

    // Flatten at 4 objects a second (8 s for the 32 it goes through); a server killed once
    // it has copied some.
    let victim = devices(&cluster)[2];
    let mut flatten = spawn(&dir, &["volume", "flatten", "c1", "--rate", "4"]);
    eventually("flatten records progress", || {
        job_of(&dir, "c1", "flatten").is_some_and(|job| job["count"].as_u64() > Some(0))
    });
    let mid_way = kill_for(&mut cluster, victim, Duration::from_millis(500), &mut flatten);
    assert!(mid_way, "killed while the flatten ran");
    let said =
        finish_within(flatten, Duration::from_secs(90), Some(&mut cluster)).expect("flatten ends");
    let said_text = text(&said);
    eprintln!("flatten with device {victim}'s server killed: {:?}: {said_text}", said.status);
    assert!(
        said.status.success() || (said.status.code() == Some(1) && said_text.contains("error: ")),
        "fails cleanly or finishes: {said_text}"
    );
    assert!(!said_text.contains("panicked"), "{said_text}");
    // Whole meanwhile, with the server down.
    assert!(export(&dir, "c1", &out) == want, "c1 reads the same with a server down");

    restart_and_settle(&mut cluster, victim);
    assert!(export(&dir, "c1", &out) == want, "c1 reads the same after the restart");
    if has_parent(&dir, "c1") {
        let said = ok(&dir, &["volume", "flatten", "c1", "--rate", "0"]);
        assert!(said.contains("flattened volume 'c1'"), "{said}");
    }
    assert!(job_of(&dir, "c1", "flatten").is_none(), "{:?}", volume_jobs(&dir));
    detached_and_parent_goes(&dir, "c1", &want, &golden, &out);
}

#[test]
fn a_storage_server_killed_during_clone_leaves_a_whole_clone_or_none_that_can_be_made_again() {
    let (tmp, mut cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let out = tmp.path().join("out.raw");
    let golden = golden(&dir, tmp.path(), 4 * MIB, "1MiB", 91);
    let devices = devices(&cluster);
    let mut outcomes = Vec::new();
    let mut clones = Vec::new();
    let mut killed_running = 0;
    for (round, delay_ms) in [0u64, 5, 15, 40].into_iter().enumerate() {
        let name = format!("k{round}");
        let victim = devices[round % devices.len()];
        let mut child = spawn(&dir, &["volume", "clone", "base@gold", &name]);
        std::thread::sleep(Duration::from_millis(delay_ms));
        killed_running += u32::from(kill_for(&mut cluster, victim, Duration::ZERO, &mut child));
        let said =
            finish_within(child, Duration::from_secs(90), Some(&mut cluster)).expect("clone ends");
        let said_text = text(&said);
        assert!(
            said.status.success()
                || (said.status.code() == Some(1) && said_text.contains("error: ")),
            "clone fails cleanly or finishes: {said_text}"
        );
        assert!(!said_text.contains("panicked"), "{said_text}");
        restart_and_settle(&mut cluster, victim);
        let made = exists(&dir, &name);
        outcomes.push(format!(
            "{name} (device {victim} killed after {delay_ms} ms): clone said {:?} {:?}, {}",
            said.status.code(),
            said_text.trim(),
            if made { "exists" } else { "does not exist" }
        ));
        if said.status.success() {
            assert!(made, "{name} was reported made but does not exist");
        }
        if made {
            assert!(has_parent(&dir, &name));
            assert!(export(&dir, &name, &out) == golden, "{name} reads the parent snapshot");
            assert!(
                fails(&dir, &["volume", "clone", "base@gold", &name]).contains("exists already")
            );
        } else {
            ok(&dir, &["volume", "clone", "base@gold", &name]);
            assert!(has_parent(&dir, &name));
            assert!(export(&dir, &name, &out) == golden, "{name} made again");
        }
        clones.push(name);
        // The parent snapshot is untouched and knows every clone (it cannot go from under
        // them).
        let gold = snapshot(&dir, "base", "gold").expect("base@gold is there");
        assert!(gold["mark"].as_u64().is_some() && gold["protected"] == true, "{gold}");
        assert!(export(&dir, "base@gold", &out) == golden);
        let error = fails(&dir, &["volume", "snap", "unprotect", "base@gold"]);
        assert!(error.contains(&format!("has clones ({})", clones.join(", "))), "{error}");
    }
    eprintln!("{outcomes:#?}");
    assert!(killed_running >= 1, "some server was killed while a clone ran");
    // Each clone is a volume of its own: written, it keeps the parent's data elsewhere.
    let (want, part) = half_written(tmp.path(), &golden, MIB, 92);
    ok(&dir, &["volume", "import", "k0", &part, "--chunk", "1MiB"]);
    assert!(export(&dir, "k0", &out) == want);
    assert!(export(&dir, "k1", &out) == golden);
}

#[test]
fn optio_nbd_killed_while_it_flattens_the_clone_it_serves_and_a_rerun_finishes() {
    let (tmp, cluster) = cluster(spec());
    settle(&cluster);
    let dir = cluster.dir().to_path_buf();
    let out = tmp.path().join("out.raw");
    // 24 objects of 512 KiB; the clone wrote the odd ones.
    let golden = golden(&dir, tmp.path(), 12 * MIB, "512KiB", 101);
    ok(&dir, &["volume", "clone", "base@gold", "c1"]);
    let (want, part) = half_written(tmp.path(), &golden, 512 << 10, 102);
    ok(&dir, &["volume", "import", "c1", &part, "--chunk", "512KiB"]);

    // optio nbd serves c1 and takes the flatten up (at 4 objects a second: 6 s); killed
    // with SIGKILL once it has copied some.
    let nbd = Nbd::start(&dir, &["c1"]).expect("optio nbd serves");
    let flatten = spawn(&dir, &["volume", "flatten", "c1", "--rate", "4"]);
    eventually("optio nbd takes the flatten up and records progress", || {
        job_of(&dir, "c1", "flatten")
            .is_some_and(|job| job["by"].is_string() && job["count"].as_u64() > Some(0))
    });
    nbd.kill();
    // The command following the dead holder's flatten does not wait for it forever: it
    // carries the flatten out itself or fails saying so.
    let said = finish_within(flatten, Duration::from_secs(60), None)
        .expect("flatten ends once the holder it followed is killed");
    let said_text = text(&said);
    eprintln!("flatten whose holder was killed: {:?}: {said_text}", said.status);
    assert!(
        said.status.success() || (said.status.code() == Some(1) && said_text.contains("error: ")),
        "fails cleanly or finishes: {said_text}"
    );
    assert!(!said_text.contains("panicked"), "{said_text}");
    assert!(export(&dir, "c1", &out) == want, "c1 reads the same after the kill");

    // Run again (the dead holder's lock is taken over at once): it finishes.
    if has_parent(&dir, "c1") {
        let said = ok(&dir, &["volume", "flatten", "c1", "--rate", "0"]);
        assert!(said.contains("flattened volume 'c1'"), "{said}");
    }
    assert!(job_of(&dir, "c1", "flatten").is_none(), "{:?}", volume_jobs(&dir));
    detached_and_parent_goes(&dir, "c1", &want, &golden, &out);
}
