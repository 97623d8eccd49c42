//! Scrubbing (issue 13): damage planted on disk — bit flips, truncations, deleted files,
//! another key's file — is found by a deep scrub and repaired from good replicas, or left
//! quarantined when no good replica exists; a replica that missed a write is found by a light
//! scrub and brought up to date.

use std::path::PathBuf;

use bytes::Bytes;
use optio_local::cluster::{LocalCluster, PLAIN_POOL};
use optio_net::{Call, Endpoint, HttpTransport, Op, Transport};
use optio_placement::PoolId;
use optio_proto::ObjectVersion;

use crate::{client, cluster, data, runtime, small};

/// `optio scrub --json` on the cluster: (exit code, the reports by device).
fn scrub(cluster: &LocalCluster, deep: bool) -> (i32, serde_json::Value) {
    let mut command = std::process::Command::new(crate::binary());
    command.args(["scrub", "--json", "--cluster"]).arg(cluster.dir());
    if deep {
        command.arg("--deep");
    }
    let output = command.output().expect("optio scrub runs");
    let json = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), json)
}

fn device_report(json: &serde_json::Value, device: u32) -> &serde_json::Value {
    json["devices"].as_array().unwrap().iter().find(|d| d["device"] == device).expect("a report")
}

fn file(cluster: &LocalCluster, device: u32, pool: PoolId, key: &str) -> PathBuf {
    optio_server::store::object_path(&cluster.device_dir(device).unwrap(), pool, key)
}

/// What `device` answers for `key`: its data, if it holds a good copy.
async fn direct(cluster: &LocalCluster, device: u32, pool: PoolId, key: &str) -> Option<Bytes> {
    let map = cluster.load_map().unwrap();
    let addr = map.device(optio_placement::DeviceId(device)).unwrap().addr.clone().unwrap();
    let endpoint = Endpoint { device, addr };
    let call = Call::new(&endpoint, pool, map.epoch().0, Op::Get { key, range: None });
    HttpTransport::new().unwrap().send(call).await.ok().map(|a| a.body.to_bytes())
}

fn flip_last_byte(path: &PathBuf) {
    let mut bytes = std::fs::read(path).unwrap();
    *bytes.last_mut().unwrap() ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_deep_scrub_repairs_planted_damage_and_quarantines_what_it_cannot() {
    let (_dir, cluster) = cluster(small());
    let rt = runtime();
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id;
    let client = rt.block_on(client(&cluster, None));
    let keys: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    rt.block_on(async {
        for (i, key) in keys.iter().enumerate() {
            client.put(PLAIN_POOL, key, data(i, 5000)).await.unwrap();
        }
    });
    // 3 servers, 3 replicas: every device holds every key. Damage device 0's copies.
    flip_last_byte(&file(&cluster, 0, pool, "s0"));
    let truncated = file(&cluster, 0, pool, "s1");
    let half = std::fs::read(&truncated).unwrap().len() / 2;
    std::fs::OpenOptions::new().write(true).open(&truncated).unwrap().set_len(half as u64).unwrap();
    std::fs::remove_file(file(&cluster, 0, pool, "s2")).unwrap();
    std::fs::copy(file(&cluster, 0, pool, "s4"), file(&cluster, 0, pool, "s3")).unwrap();
    // And s5 on every replica: nothing good is left of it.
    for device in 0..3 {
        flip_last_byte(&file(&cluster, device, pool, "s5"));
    }

    let (code, json) = scrub(&cluster, true);
    assert_eq!(code, 2, "an unrepairable object makes the exit status 2: {json:#}");
    // Device 0's own damage is found and repaired by its own pass.
    let zero = device_report(&json, 0);
    assert_eq!(zero["repaired"], 4, "{zero:#}");
    // s5 is damaged everywhere: whichever pass meets a copy first quarantines it (its own,
    // or a peer's attempt to repair from it, which the passes run at once on every server
    // may make first), so which device counts it varies; at least one says unrepairable,
    // and no device keeps or serves a copy.
    let damaged: u64 = (0..3).map(|d| device_report(&json, d)["damaged"].as_u64().unwrap()).sum();
    let unrepairable: u64 =
        (0..3).map(|d| device_report(&json, d)["unrepairable"].as_u64().unwrap()).sum();
    assert!(damaged >= 5 && unrepairable >= 1, "{json:#}");
    let s5 = file(&cluster, 0, pool, "s5");
    let s5_name = s5.file_name().unwrap().to_string_lossy().to_string();
    for device in 0..3 {
        let quarantine = cluster.device_dir(device).unwrap().join("quarantine");
        let held = std::fs::read_dir(&quarantine)
            .unwrap()
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().starts_with(&s5_name));
        assert!(held, "s5 quarantined on device {device}");
        assert!(!file(&cluster, device, pool, "s5").exists(), "no copy of s5 left in place");
    }
    rt.block_on(async {
        for (i, key) in keys.iter().enumerate().filter(|(i, _)| *i != 5) {
            assert_eq!(
                direct(&cluster, 0, pool, key).await,
                Some(data(i, 5000)),
                "{key} on device 0"
            );
        }
        // The damaged object is served by no replica; the client says so rather than
        // return wrong data.
        assert_eq!(direct(&cluster, 0, pool, "s5").await, None);
        assert!(client.get(PLAIN_POOL, "s5").await.is_err());
    });
    let quarantined =
        std::fs::read_dir(cluster.device_dir(0).unwrap().join("quarantine")).unwrap().count();
    assert!(
        quarantined >= 3,
        "bit flip, truncation, another key's file and s5 quarantined: {quarantined}"
    );

    // A second pass finds nothing new to repair.
    let (_, json) = scrub(&cluster, true);
    assert_eq!(device_report(&json, 0)["repaired"], 0, "{json:#}");
}

#[test]
fn a_light_scrub_brings_a_replica_that_missed_a_write_up_to_date() {
    let (_dir, cluster) = cluster(small());
    let rt = runtime();
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id;
    let client = rt.block_on(client(&cluster, None));
    rt.block_on(async {
        let report = client.put(PLAIN_POOL, "missed", data(1, 3000)).await.unwrap();
        // A newer version lands on device 1 only (as if the others had missed it).
        let map = cluster.load_map().unwrap();
        let addr = map.device(optio_placement::DeviceId(1)).unwrap().addr.clone().unwrap();
        let endpoint = Endpoint { device: 1, addr };
        let newer = data(2, 3000);
        let info = HttpTransport::new()
            .unwrap()
            .send(Call::new(
                &endpoint,
                pool,
                map.epoch().0,
                Op::Probe { key: "missed", want_choice: false },
            ))
            .await
            .unwrap()
            .info
            .unwrap();
        let put = Op::Put {
            key: "missed",
            checksum: optio_proto::checksum(&newer),
            data: newer.clone(),
            version: ObjectVersion(report.version.0 + 1),
            pg_seed: info.pg_seed,
        };
        HttpTransport::new()
            .unwrap()
            .send(Call::new(&endpoint, pool, map.epoch().0, put))
            .await
            .unwrap();
        assert_eq!(direct(&cluster, 0, pool, "missed").await, Some(data(1, 3000)));
    });
    let (code, json) = scrub(&cluster, false);
    assert_eq!(code, 0, "{json:#}");
    for device in [0, 2] {
        let report = device_report(&json, device);
        assert_eq!((&report["stale"], &report["repaired"]), (&1.into(), &1.into()), "{report:#}");
    }
    rt.block_on(async {
        for device in 0..3 {
            assert_eq!(direct(&cluster, device, pool, "missed").await, Some(data(2, 3000)));
        }
    });
}

/// Tombstones held by `device` in `pool` (a listing with tombstones).
async fn tombstones(cluster: &LocalCluster, device: u32, pool: PoolId) -> usize {
    let map = cluster.load_map().unwrap();
    let addr = map.device(optio_placement::DeviceId(device)).unwrap().addr.clone().unwrap();
    let endpoint = Endpoint { device, addr };
    let query = optio_proto::ListQuery { tombstones: Some(true), ..Default::default() };
    let (_, listing) =
        HttpTransport::new().unwrap().list(&endpoint, pool, map.epoch().0, query).await.unwrap();
    listing.deleted.len()
}

#[test]
fn tombstones_are_collected_once_every_replica_holds_them_and_every_device_is_up() {
    let spec = optio_local::LocalClusterSpec {
        tombstone_grace: Some(std::time::Duration::from_secs(1)),
        ..small()
    };
    let (_dir, mut cluster) = cluster(spec);
    let rt = runtime();
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id;
    let client = rt.block_on(client(&cluster, None));
    rt.block_on(async {
        for i in 0..6 {
            let key = format!("t{i}");
            client.put(PLAIN_POOL, &key, data(i, 100)).await.unwrap();
            client.delete(PLAIN_POOL, &key).await.unwrap();
        }
        // Too young: kept.
        for device in 0..3 {
            assert_eq!(tombstones(&cluster, device, pool).await, 6);
        }
    });
    let (_, json) = scrub(&cluster, false);
    assert_eq!(json["devices"][0]["tombstones_collected"], 0, "{json:#}");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // A device down: kept (it could come back with an older copy while no tombstone says
    // the key was deleted).
    cluster.kill(2).unwrap();
    let change = optio_placement::MapChange::SetState {
        device: optio_placement::DeviceId(2),
        up: Some(false),
        is_in: None,
    };
    cluster.change_map(&change).unwrap();
    let (_, json) = scrub(&cluster, false);
    for report in json["devices"].as_array().unwrap() {
        assert_eq!(report["tombstones_collected"], 0, "{json:#}");
    }
    cluster.restart(2).unwrap();
    let change = optio_placement::MapChange::SetState {
        device: optio_placement::DeviceId(2),
        up: Some(true),
        is_in: None,
    };
    let epoch = cluster.change_map(&change).unwrap().epoch().0;
    cluster.wait_for_epoch(epoch).unwrap();
    rt.block_on(crate::wait_settled(&cluster, std::time::Duration::from_secs(60)));
    assert!(
        crate::wait_until(std::time::Duration::from_secs(30), || {
            optio_local::cluster::health(&cluster.servers()[2].addr)
                .is_some_and(|h| h.recovering == 0)
        }),
        "device 2 caught up"
    );
    // Every device up, every replica holds the tombstones, nothing moving: collected.
    let (code, json) = scrub(&cluster, false);
    assert_eq!(code, 0, "{json:#}");
    let collected: u64 = json["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["tombstones_collected"].as_u64().unwrap())
        .sum();
    assert_eq!(collected, 18, "6 keys × 3 replicas: {json:#}");
    rt.block_on(async {
        for device in 0..3 {
            assert_eq!(tombstones(&cluster, device, pool).await, 0);
        }
        // Still deleted for readers.
        for i in 0..6 {
            assert!(matches!(
                client.get(PLAIN_POOL, &format!("t{i}")).await,
                Err(optio_client::ClientError::NotFound { .. })
            ));
        }
    });
}

/// Block objects (volumes' data, written in place with a checksum per 4 KiB block): a
/// damaged block is caught by the ranged read that touches it — the reader is served from a
/// good replica and the damaged one repaired — or by a deep scrub; a deleted block object
/// stays deleted.
#[test]
fn damaged_blocks_of_objects_written_in_place_are_repaired_by_reads_and_deep_scrubs() {
    use optio_client::Patch;
    const SIZE: u64 = 64 * 1024;
    let (_dir, cluster) = cluster(small());
    let rt = runtime();
    let pool = cluster.load_map().unwrap().pool_by_name(PLAIN_POOL).unwrap().id;
    let client = rt.block_on(client(&cluster, None));
    let mut models = Vec::new();
    rt.block_on(async {
        for (i, key) in ["b0", "b1", "b2"].iter().enumerate() {
            let mut model = vec![0u8; SIZE as usize];
            let mut known = None;
            for (offset, len) in [(0u64, 20_000usize), (30_000, 10_000)] {
                let bytes = data(i * 10 + offset as usize, len);
                model[offset as usize..offset as usize + len].copy_from_slice(&bytes);
                let written = client
                    .write_in_place(
                        PLAIN_POOL,
                        key,
                        SIZE,
                        offset,
                        &Patch::Data(bytes),
                        known.as_ref(),
                        false,
                    )
                    .await
                    .unwrap();
                known = Some(written);
            }
            models.push(model);
        }
    });
    // One byte of block 1 (bytes 4096..8192) damaged on device 0, in b0 and b1.
    let layout = optio_proto::blocks::BlockLayout::new(2, SIZE);
    for key in ["b0", "b1"] {
        let path = file(&cluster, 0, pool, key);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[(layout.data_offset + 4096 + 10) as usize] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
    }
    rt.block_on(async {
        // A ranged read of the damaged block: right bytes, and device 0 repaired.
        let got = client.read_in_place(PLAIN_POOL, "b0", 4000, 200).await.unwrap().unwrap();
        assert!(got[..] == models[0][4000..4200]);
        let repaired = direct(&cluster, 0, pool, "b0").await;
        assert!(repaired.is_some_and(|d| d[..] == models[0][..]), "b0 repaired on device 0");
    });
    // b1, not read: a deep scrub finds and repairs it.
    let (code, json) = scrub(&cluster, true);
    assert_eq!(code, 0, "{json:#}");
    assert!(device_report(&json, 0)["repaired"].as_u64().unwrap() >= 1, "{json:#}");
    rt.block_on(async {
        let repaired = direct(&cluster, 0, pool, "b1").await;
        assert!(repaired.is_some_and(|d| d[..] == models[1][..]), "b1 repaired on device 0");
        // Written in place again after the repair (a whole copy): in place still works.
        let written = client
            .write_in_place(PLAIN_POOL, "b1", SIZE, 8, &Patch::Data(data(99, 100)), None, true)
            .await
            .unwrap();
        let mut model = models[1].clone();
        model[8..108].copy_from_slice(&data(99, 100));
        for device in written.devices {
            assert!(direct(&cluster, device, pool, "b1").await.is_some_and(|d| d[..] == model[..]));
        }
        // Deleted: gone, and a new write starts from zeros rather than bringing it back.
        client.delete(PLAIN_POOL, "b2").await.unwrap();
        assert_eq!(client.read_in_place(PLAIN_POOL, "b2", 0, 10).await.unwrap(), None);
        client
            .write_in_place(
                PLAIN_POOL,
                "b2",
                SIZE,
                0,
                &Patch::Data(Bytes::from_static(b"new")),
                None,
                false,
            )
            .await
            .unwrap();
        let got = client.get(PLAIN_POOL, "b2").await.unwrap();
        assert_eq!(&got[..3], b"new");
        assert!(got[3..].iter().all(|b| *b == 0), "nothing of the deleted object came back");
    });
}

/// A pass under way is in the servers' `/v1/status` (what `optio console` shows): how many
/// objects of how many it looked at, the bytes it re-read and for how long; once done, the
/// last report instead.
#[test]
fn a_scrub_under_way_shows_how_far_it_is() {
    let (_dir, cluster) = cluster(small());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    // 24 objects of 256 KiB on every device (3 devices, 3 copies): 6 MiB, which a deep pass
    // at 1 MiB/s takes about 6 s to re-read.
    rt.block_on(async {
        for i in 0..24 {
            client.put(PLAIN_POOL, &format!("p{i}"), data(i, 256 << 10)).await.unwrap();
        }
    });
    let addr = cluster
        .load_map()
        .unwrap()
        .device(optio_placement::DeviceId(0))
        .unwrap()
        .addr
        .clone()
        .unwrap();
    let mut pass = std::process::Command::new(crate::binary())
        .args(["scrub", "--deep", "--rate", "1MiB", "--json", "--cluster"])
        .arg(cluster.dir())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("optio scrub starts");
    let transport = HttpTransport::new().unwrap();
    let device_status = |status: optio_proto::ServerStatus| {
        status.devices.into_iter().find(|d| d.metrics.device == 0).expect("device 0")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let seen = loop {
        let status = rt.block_on(transport.server_status(&addr)).expect("the status");
        if let Some(progress) = device_status(status).scrubbing
            && progress.objects > 1
        {
            break progress;
        }
        assert!(std::time::Instant::now() < deadline, "no scrub under way seen");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(seen.deep, "{seen:?}");
    assert!(seen.objects < seen.objects_total, "{seen:?}");
    assert!(seen.objects_total >= 24, "{seen:?}");
    assert!(seen.bytes_read > 0 && seen.seconds > 0.0, "{seen:?}");
    assert!(pass.wait().expect("optio scrub ends").success());
    let after = device_status(rt.block_on(transport.server_status(&addr)).expect("the status"));
    assert_eq!(after.scrubbing, None, "no pass under way once it ended");
    let last = after.scrub.expect("the last pass's report");
    assert!(last.deep && last.objects == seen.objects_total, "{last:?} after {seen:?}");
}
