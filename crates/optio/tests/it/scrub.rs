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
    HttpTransport::new().unwrap().send(call).await.ok().map(|a| a.body)
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
