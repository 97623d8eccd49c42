//! Elastic resizing proves: scaling an elastic pool down to its primaries moves no data and
//! leaves every object readable; writes while servers are inactive are recorded in the dirty
//! table (local log or Redis) and offloaded; at full power selective re-integration copies
//! exactly the offloaded replicas (counted against the placement of every dirty object),
//! empties the table, prunes the old membership versions, and every object — overwritten,
//! new or deleted while small — reads back as last written.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use optio_client::{ClientError, Patch, ReintegrationStatus};
use optio_local::cluster::{LocalCluster, LocalClusterSpec};
use optio_placement::{ActiveSpec, MapChange, Placement, ReplicaSet};

use crate::{client, cluster, data, runtime, statuses, wait_settled};

const POOL: &str = "elastic";

fn ten_servers(dirty: Option<String>) -> LocalClusterSpec {
    LocalClusterSpec {
        zones: 2,
        hosts_per_zone: 5,
        capacity_bytes: 1 << 30,
        pg_num: 32,
        replicas: 2,
        dirty,
        ..LocalClusterSpec::default()
    }
}

async fn copies_moved(cluster: &LocalCluster) -> u64 {
    statuses(cluster).await.iter().flatten().map(|s| s.migration.total_copies_moved).sum()
}

async fn reintegration(cluster: &LocalCluster) -> ReintegrationStatus {
    cluster
        .source()
        .statuses::<ReintegrationStatus>()
        .await
        .ok()
        .and_then(|mut s| s.remove("reintegrator"))
        .unwrap_or_default()
}

/// Waits (a minute at most) until re-integration is done at full power: the dirty table
/// empty, one membership version left; its status then.
async fn reintegrated(cluster: &LocalCluster) -> ReintegrationStatus {
    let started = Instant::now();
    loop {
        let status = reintegration(cluster).await;
        let versions = cluster.load_map().unwrap().membership().unwrap().versions.len();
        if status.dirty_entries == 0 && versions == 1 && status.full_power {
            return status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "re-integration did not finish: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn resize(cluster: &LocalCluster, active: u32) {
    cluster.change_map(&MapChange::SetActive(ActiveSpec::FirstRanks(active))).expect("resize");
}

/// The replicas a write in the current (not full-power) version offloads: the devices of its
/// full-power placement that the current placement skips.
fn offloaded(map: &optio_placement::ClusterMap, key: &str) -> u64 {
    let placement = Placement::new(map).expect("compiles");
    let pool = placement.pool_by_name(POOL).expect("pool");
    let (_, engine_key) = pool.object_key(key);
    let mut scratch = placement.scratch();
    let (mut now, mut full) = (ReplicaSet::new(), ReplicaSet::new());
    pool.place(engine_key, &mut scratch, &mut now);
    pool.place_full_power(engine_key, &mut scratch, &mut full);
    full.devices().filter(|d| !now.contains(*d)).count() as u64
}

/// The size of the block objects written in place.
const BLOCK_OBJECT: u64 = 64 * 1024;

fn resize_cycle(dirty: Option<String>) {
    let (_dir, cluster) = cluster(ten_servers(dirty));
    let rt = runtime();
    rt.block_on(async {
        let client = client(&cluster, None).await;
        let servers = cluster.load_map().unwrap().membership().map(|m| m.order.len()).unwrap();
        assert_eq!(servers, 10);
        // Phase 1, full power.
        let mut expected: BTreeMap<String, Option<usize>> = BTreeMap::new();
        for i in 0..60 {
            let key = format!("e/{i}");
            client.put(POOL, &key, data(i, 2000)).await.expect("write");
            expected.insert(key, Some(i));
        }
        // Block objects (a volume's), written in place: created, then changed in place.
        let mut blocks: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for i in 0..6 {
            let key = format!("b/{i}");
            let mut model = vec![0u8; BLOCK_OBJECT as usize];
            let mut known = None;
            for (offset, seed) in [(100u64, i), (5000, i + 50)] {
                let bytes = data(seed, 3000);
                model[offset as usize..offset as usize + bytes.len()].copy_from_slice(&bytes);
                let patch = Patch::Data(bytes);
                let written = client
                    .write_in_place(POOL, &key, BLOCK_OBJECT, offset, &patch, known.as_ref(), false)
                    .await
                    .expect("write in place");
                known = Some(written);
            }
            blocks.insert(key, model);
        }
        // Down to the primaries (p = ⌈10 / e²⌉ = 2): nothing moves, everything reads.
        resize(&cluster, 2);
        wait_settled(&cluster, Duration::from_secs(60)).await;
        assert_eq!(copies_moved(&cluster).await, 0, "scaling down moves no data");
        for (key, i) in &expected {
            let got = client.get(POOL, key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_eq!(got, data(i.unwrap(), 2000), "{key} readable at p servers");
        }
        // Phase 2 with 6 of 10 active: overwrites, new objects, deletes — all offloaded.
        resize(&cluster, 6);
        wait_settled(&cluster, Duration::from_secs(60)).await;
        let map = cluster.load_map().unwrap();
        let mut offloaded_replicas = 0;
        let mut operations = 0;
        for i in 0..40 {
            let key = format!("e/{}", i * 2);
            client.put(POOL, &key, data(1000 + i, 2000)).await.expect("overwrite");
            offloaded_replicas += offloaded(&map, &key);
            expected.insert(key, Some(1000 + i));
            operations += 1;
        }
        // Block objects changed in place while offloaded: the replicas the smaller
        // membership adds hold no copy, so the write goes whole there — one dirty entry still.
        for (i, (key, model)) in blocks.iter_mut().enumerate() {
            let bytes = data(2000 + i, 5000);
            model[9000..14000].copy_from_slice(&bytes);
            client
                .write_in_place(POOL, key, BLOCK_OBJECT, 9000, &Patch::Data(bytes), None, false)
                .await
                .expect("write in place while offloaded");
            offloaded_replicas += offloaded(&map, key);
            operations += 1;
        }
        for i in 0..5 {
            let key = format!("e/{}", i * 2 + 1);
            client.delete(POOL, &key).await.expect("delete");
            expected.insert(key, None);
            operations += 1;
        }
        let table = optio_cluster::dirty::DirtyTable::open(
            optio_cluster::dir::cluster_dirty_spec(cluster.dir()).unwrap().as_deref(),
            cluster.dir(),
        )
        .await
        .unwrap();
        assert_eq!(table.len().await.unwrap(), operations, "one dirty entry per write and delete");
        assert_eq!(
            copies_moved(&cluster).await,
            0,
            "servers leave offloaded copies to re-integration"
        );
        // Full power: selective re-integration.
        resize(&cluster, 10);
        let status = reintegrated(&cluster).await;
        assert_eq!(
            status.replicas_copied, offloaded_replicas,
            "exactly the offloaded replicas are copied: {status:?}"
        );
        assert_eq!(status.offloaded_copied, offloaded_replicas, "{status:?}");
        assert_eq!(table.len().await.unwrap(), 0);
        let fresh = crate::client(&cluster, None).await;
        for (key, i) in &expected {
            match (i, fresh.get(POOL, key).await) {
                (Some(i), Ok(got)) => assert_eq!(got, data(*i, 2000), "{key}: the last write"),
                (None, Err(ClientError::NotFound { .. })) => {}
                (i, other) => panic!("{key}: expected {i:?}, read {other:?}"),
            }
        }
        for (key, model) in &blocks {
            let got = fresh.get(POOL, key).await.unwrap_or_else(|e| panic!("{key}: {e}"));
            assert!(got[..] == model[..], "{key}: the block object as last written in place");
        }
    });
}

#[test]
fn resize_down_to_primaries_and_back_with_selective_reintegration() {
    resize_cycle(None);
}

#[test]
fn the_dirty_table_in_redis() {
    if !optio_local::redis::redis_available() {
        return;
    }
    let redis = optio_local::redis::RedisServer::start().expect("redis starts");
    resize_cycle(Some(redis.url()));
}

/// The live keys a device's files hold (tombstones left out), read from the files' headers.
fn device_keys(cluster: &LocalCluster, device: u32) -> std::collections::BTreeSet<String> {
    fn walk(path: &std::path::Path, out: &mut std::collections::BTreeSet<String>) {
        let Ok(entries) = std::fs::read_dir(path) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
                continue;
            }
            let Ok(bytes) = std::fs::read(&path) else { continue };
            // Header: key length at 20..22, flags at 10..12 (bit 1: a tombstone).
            if bytes.len() < 64 || bytes[..8] != *b"OPTIOOBJ" {
                continue;
            }
            if u16::from_le_bytes([bytes[10], bytes[11]]) & 2 != 0 {
                continue;
            }
            let len = u16::from_le_bytes([bytes[20], bytes[21]]) as usize;
            if let Some(key) = bytes.get(64..64 + len).and_then(|k| std::str::from_utf8(k).ok()) {
                out.insert(key.to_string());
            }
        }
    }
    let mut out = std::collections::BTreeSet::new();
    walk(&cluster.dir().join(format!("dev{device}")).join("objects"), &mut out);
    out
}

#[test]
fn snapshot_clones_made_on_offload_servers_are_reintegrated_with_their_heads() {
    let (_dir, cluster) = cluster(ten_servers(None));
    runtime().block_on(async {
        let client = client(&cluster, None).await;
        let prefix = "volume_data.00000000feedface.";
        let keys: Vec<String> = (0..12u64).map(|i| format!("{prefix}{i:016x}")).collect();
        for (i, key) in keys.iter().enumerate() {
            let patch = Patch::Data(data(i, 3000));
            client
                .write_in_place(POOL, key, BLOCK_OBJECT, 0, &patch, None, false)
                .await
                .expect("first write");
        }
        // Small (6 of 10 active): a snapshot, then every object changed in place — the
        // servers keep each old content as a clone, offload servers included.
        resize(&cluster, 6);
        wait_settled(&cluster, Duration::from_secs(60)).await;
        let small = cluster.load_map().unwrap();
        let offloaded_replicas: u64 = keys.iter().map(|k| offloaded(&small, k)).sum();
        assert!(offloaded_replicas > 0, "some writes go to offload servers");
        let mark = client.version_mark();
        let context = optio_proto::snap::SnapContext { seq: 1, mark };
        client.set_snap_context(prefix, Some(context));
        let fresh_writer = crate::client(&cluster, None).await;
        fresh_writer.set_snap_context(prefix, Some(context));
        for (i, key) in keys.iter().enumerate() {
            let patch = Patch::Data(data(100 + i, 3000));
            fresh_writer
                .write_in_place(POOL, key, BLOCK_OBJECT, 0, &patch, None, false)
                .await
                .expect("write after the snapshot");
        }
        // Full power: re-integration brings every head home — and its clone with it.
        resize(&cluster, 10);
        reintegrated(&cluster).await;
        let map = cluster.load_map().unwrap();
        let placement = Placement::new(&map).unwrap();
        let pool = placement.pool_by_name(POOL).unwrap();
        let mut scratch = placement.scratch();
        for (i, key) in keys.iter().enumerate() {
            let (_, engine_key) = pool.object_key(key);
            let mut home = ReplicaSet::new();
            pool.place(engine_key, &mut scratch, &mut home);
            let home: Vec<u32> = home.devices().map(|d| d.0).collect();
            let clones_of = |device: u32| -> Vec<String> {
                device_keys(&cluster, device)
                    .into_iter()
                    .filter(|k| k.starts_with(&format!("{key}@")))
                    .collect()
            };
            for device in 0..10u32 {
                let clones = clones_of(device);
                if home.contains(&device) {
                    assert_eq!(
                        clones.len(),
                        1,
                        "{key}: device {device} of {home:?} holds its clone"
                    );
                } else {
                    assert!(
                        clones.is_empty(),
                        "{key}: device {device} is not home, has {clones:?}"
                    );
                }
            }
            // And a read as of the snapshot finds the old content.
            let (_, old) = client
                .get_range_as_of(POOL, key, Some((0, 2999)), mark)
                .await
                .unwrap_or_else(|e| panic!("{key} as of the snapshot: {e}"));
            assert_eq!(old, data(i, 3000), "{key} as of the snapshot");
        }
    });
}
