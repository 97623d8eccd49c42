//! Objects of an erasure-coded pool (issue 41) on a cluster of nine servers with a `4+2` pool
//! (`optio up --erasure 4+2`): round trips, reads with two servers killed and a clear error
//! with three, a flipped bit found and repaired, and writes that stopped between chunks
//! (a writer killed, too few devices) never leaving an object that is lost or mixed.

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use optio_client::ClientError;
use optio_local::cluster::{ERASURE_POOL, LocalCluster, LocalClusterSpec, PLAIN_POOL};
use optio_net::{Call, Endpoint, HttpTransport, Op, Transport};
use optio_placement::PoolId;
use optio_proto::ObjectVersion;
use optio_proto::snap::SnapContext;

use crate::{client, cluster, data, runtime};

/// Nine servers (3 zones × 3 hosts), the six replicated pools and `ec` = `4+2`, one chunk
/// per host.
fn spec() -> LocalClusterSpec {
    LocalClusterSpec {
        capacity_bytes: 1 << 30,
        pg_num: 32,
        erasure: Some("4+2".into()),
        ..LocalClusterSpec::default()
    }
}

fn ec_pool(cluster: &LocalCluster) -> PoolId {
    cluster.load_map().unwrap().pool_by_name(ERASURE_POOL).expect("the ec pool").id
}

/// Files under the erasure-coded pool's directory of every device: heads, tombstones and
/// kept earlier versions.
fn ec_files(cluster: &LocalCluster) -> usize {
    fn walk(path: &Path) -> usize {
        let Ok(entries) = std::fs::read_dir(path) else { return 0 };
        entries.flatten().map(|e| if e.path().is_dir() { walk(&e.path()) } else { 1 }).sum()
    }
    let pool = ec_pool(cluster);
    cluster
        .load_map()
        .unwrap()
        .devices()
        .iter()
        .map(|d| {
            walk(&cluster.device_dir(d.id.0).unwrap().join("objects").join(pool.0.to_string()))
        })
        .sum()
}

fn address(cluster: &LocalCluster, device: u32) -> Endpoint {
    let map = cluster.load_map().unwrap();
    let addr = map.device(optio_placement::DeviceId(device)).unwrap().addr.clone().unwrap();
    Endpoint { device, addr }
}

#[test]
fn erasure_coded_objects_read_back_with_two_servers_killed_and_fail_clearly_with_three() {
    let (_dir, mut cluster) = cluster(spec());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let sizes = [0, 1, 100, 4096, 65_535, 4 * 65_536 + 3, (1 << 20) + 17];
    let mut objects = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let key = format!("obj-{i}");
        let bytes = data(i, len);
        let report = rt.block_on(client.put(ERASURE_POOL, &key, bytes.clone())).unwrap();
        assert_eq!(report.devices.len(), 6, "{key}: six chunks on six devices");
        let mut distinct = report.devices.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 6, "{key}: the chunks are on distinct devices");
        objects.push((key, bytes, report.devices));
    }
    for (key, bytes, _) in &objects {
        assert_eq!(&rt.block_on(client.get(ERASURE_POOL, key)).unwrap(), bytes, "{key}");
    }
    // A range, across stripe units.
    let (key, bytes, _) = &objects[6];
    let (_, part) =
        rt.block_on(client.get_range(ERASURE_POOL, key, Some((70_000, 200_000)))).unwrap();
    assert_eq!(part, bytes.slice(70_000..200_001));
    // An overwrite reads back new; a delete is gone; every device holds the heads and
    // tombstones only (what the writes kept was dropped by their commits).
    let newer = data(99, 300_000);
    rt.block_on(client.put(ERASURE_POOL, "obj-3", newer.clone())).unwrap();
    assert_eq!(rt.block_on(client.get(ERASURE_POOL, "obj-3")).unwrap(), newer);
    objects[3].1 = newer;
    rt.block_on(client.delete(ERASURE_POOL, "obj-2")).unwrap();
    assert!(matches!(
        rt.block_on(client.get(ERASURE_POOL, "obj-2")),
        Err(ClientError::NotFound { .. })
    ));
    assert!(matches!(
        rt.block_on(client.delete(ERASURE_POOL, "obj-2")),
        Err(ClientError::NotFound { .. })
    ));
    assert_eq!(ec_files(&cluster), 6 * objects.len(), "one file per chunk, nothing kept");
    objects.remove(2);

    // Two servers killed (one data chunk's and one parity chunk's of the largest object):
    // every object still reads back, decoded.
    let devices = objects.last().unwrap().2.clone();
    cluster.kill(devices[0]).unwrap();
    cluster.kill(devices[5]).unwrap();
    for (key, bytes, _) in &objects {
        let read = rt.block_on(client.get(ERASURE_POOL, key));
        assert_eq!(&read.unwrap_or_else(|e| panic!("{key}: {e}")), bytes, "{key}");
    }
    // A write now reaches four chunks of six, below min_size (5): refused, taken back, and
    // the object still reads as it was.
    let (key, bytes, _) = objects.last().unwrap();
    match rt.block_on(client.put(ERASURE_POOL, key, data(7, 5000))) {
        Err(ClientError::NotEnoughChunks { acked: 4, needed: 5, chunks: 6, .. }) => {}
        other => panic!("a write to 4 of 6 chunks with min_size 5: {other:?}"),
    }
    assert_eq!(&rt.block_on(client.get(ERASURE_POOL, key)).unwrap(), bytes);

    // A third: the largest object has three chunks left, fewer than K = 4: a clear error,
    // never wrong bytes.
    cluster.kill(devices[1]).unwrap();
    match rt.block_on(client.get(ERASURE_POOL, key)) {
        Err(ClientError::Undecodable { reason, .. }) => {
            assert!(reason.contains("4 intact chunks of 6"), "{reason}");
        }
        other => panic!("three chunks of a 4+2 object lost: {:?}", other.map(|b| b.len())),
    }
}

#[test]
fn a_flipped_bit_in_a_chunk_is_found_and_the_chunk_rewritten() {
    let (_dir, cluster) = cluster(spec());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let bytes = data(1, 1 << 20);
    let report = rt.block_on(client.put(ERASURE_POOL, "flip", bytes.clone())).unwrap();
    // Flip a bit in the middle of data chunk 1's file, behind the server's back.
    let dir = cluster.device_dir(report.devices[1]).unwrap();
    let path = optio_server::store::object_path(&dir, ec_pool(&cluster), "flip");
    let mut file = std::fs::read(&path).unwrap();
    let at = file.len() / 2;
    file[at] ^= 0x10;
    std::fs::write(&path, &file).unwrap();
    let before = client.stats().repairs;
    assert_eq!(rt.block_on(client.get(ERASURE_POOL, "flip")).unwrap(), bytes);
    assert_eq!(client.stats().repairs, before + 1, "the damaged chunk was rewritten");
    assert_ne!(std::fs::read(&path).unwrap(), file, "the file holds the chunk again");
    // Read again: nothing left to repair.
    assert_eq!(rt.block_on(client.get(ERASURE_POOL, "flip")).unwrap(), bytes);
    assert_eq!(client.stats().repairs, before + 1);
}

#[test]
fn a_writer_stopped_between_chunks_leaves_the_old_object_until_k_chunks_of_the_new_one_exist() {
    let (_dir, cluster) = cluster(spec());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let pool = ec_pool(&cluster);
    let old = data(1, 700_000);
    let report = rt.block_on(client.put(ERASURE_POOL, "torn", old.clone())).unwrap();
    let files = ec_files(&cluster);
    // A writer killed after three of six chunk writes of a new version: written here as it
    // writes them (each keeping what it replaces), with no acknowledgement and no commit.
    let new = data(2, 500_000);
    let profile = optio_erasure::Profile::parse("4+2").unwrap();
    let chunks = optio_erasure::encode(profile, &new).unwrap();
    let version = ObjectVersion(report.version.0 + 1_000);
    let epoch = cluster.load_map().unwrap().epoch().0;
    let transport = HttpTransport::with_credentials(None).unwrap();
    let write = |i: usize| {
        let endpoint = address(&cluster, report.devices[i]);
        let bytes = Bytes::from(chunks[i].to_bytes());
        let op = Op::Put {
            key: "torn",
            data: bytes.clone(),
            version,
            checksum: optio_proto::checksum(&bytes),
            pg_seed: None,
        };
        let transport = &transport;
        async move {
            let mut call = Call::new(&endpoint, pool, epoch, op);
            call.snap = Some(SnapContext { seq: 0, mark: version });
            transport.send(call).await.map(|_| ()).map_err(|(f, _)| f.to_string())
        }
    };
    for i in [0, 2, 5] {
        rt.block_on(write(i)).unwrap();
    }
    assert_eq!(ec_files(&cluster), files + 3, "each of the three kept what it replaced");
    // Three chunks of the new version, fewer than K: the old one reads back whole, and is
    // the one listed.
    assert_eq!(rt.block_on(client.get(ERASURE_POOL, "torn")).unwrap(), old);
    let listed = rt.block_on(client.list(ERASURE_POOL, "torn")).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].size_bytes, listed[0].version), (old.len() as u64, report.version));
    // A fourth makes the new version decodable: it is read, and its missing chunks written.
    rt.block_on(write(3)).unwrap();
    assert_eq!(rt.block_on(client.get(ERASURE_POOL, "torn")).unwrap(), new);
    let repaired = client.stats().repairs;
    assert_eq!(repaired, 2, "chunks 1 and 4 were rewritten at the new version");
    // A new write commits: nothing kept is left behind.
    let newest = data(3, 10_000);
    rt.block_on(client.put(ERASURE_POOL, "torn", newest.clone())).unwrap();
    assert_eq!(rt.block_on(client.get(ERASURE_POOL, "torn")).unwrap(), newest);
    assert!(
        crate::wait_until(Duration::from_secs(5), || ec_files(&cluster) == files),
        "kept versions left: {} files for {files} chunks",
        ec_files(&cluster)
    );
}

#[test]
fn a_device_marked_out_sends_each_chunk_it_held_to_the_device_of_that_chunks_position() {
    let (_dir, cluster) = cluster(spec());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let mut objects = Vec::new();
    let mut chunks_on: std::collections::HashMap<u32, usize> = Default::default();
    for i in 0..24 {
        let key = format!("moved-{i}");
        let bytes = data(i, 150_000 + 1_000 * i);
        let report = rt.block_on(client.put(ERASURE_POOL, &key, bytes.clone())).unwrap();
        for device in &report.devices {
            *chunks_on.entry(*device).or_default() += 1;
        }
        objects.push((key, bytes));
    }
    let (&out, &held) = chunks_on.iter().max_by_key(|(_, n)| **n).unwrap();
    let pool = ec_pool(&cluster);
    let files_of = |device: u32| {
        let dir = cluster.device_dir(device).unwrap().join("objects").join(pool.0.to_string());
        walkdir_count(&dir)
    };
    assert_eq!(files_of(out), held);
    let before = ec_files(&cluster);
    let change = optio_placement::MapChange::SetState {
        device: optio_placement::DeviceId(out),
        up: None,
        is_in: Some(false),
    };
    cluster.change_map(&change).unwrap();
    rt.block_on(crate::wait_settled(&cluster, Duration::from_secs(60)));
    rt.block_on(client.refresh()).unwrap();
    assert_eq!(files_of(out), 0, "device {out} (out) still holds chunks");
    assert_eq!(ec_files(&cluster), before, "each chunk moved, none copied twice");
    // Every chunk is where the new placement puts it: the reads find nothing to repair.
    let repairs = client.stats().repairs;
    for (key, bytes) in &objects {
        assert_eq!(&rt.block_on(client.get(ERASURE_POOL, key)).unwrap(), bytes, "{key}");
    }
    assert_eq!(client.stats().repairs, repairs, "a chunk was not at its position");
}

fn walkdir_count(path: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries.flatten().map(|e| if e.path().is_dir() { walkdir_count(&e.path()) } else { 1 }).sum()
}

#[test]
fn a_listing_shows_each_object_once_with_its_size_and_not_a_deleted_one() {
    let (_dir, cluster) = cluster(spec());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let sizes = [0usize, 10, 300_000, 1 << 20];
    for (i, len) in sizes.iter().enumerate() {
        rt.block_on(client.put(ERASURE_POOL, &format!("list/{i}"), data(i, *len))).unwrap();
    }
    rt.block_on(client.put(ERASURE_POOL, "other", data(9, 5))).unwrap();
    // Overwritten (the kept version gone by its commit), and deleted.
    rt.block_on(client.put(ERASURE_POOL, "list/1", data(11, 77))).unwrap();
    rt.block_on(client.put(ERASURE_POOL, "list/gone", data(12, 5))).unwrap();
    rt.block_on(client.delete(ERASURE_POOL, "list/gone")).unwrap();
    let listed = rt.block_on(client.list(ERASURE_POOL, "list/")).unwrap();
    let got: Vec<(String, u64)> = listed.iter().map(|o| (o.key.clone(), o.size_bytes)).collect();
    assert_eq!(
        got,
        vec![
            ("list/0".to_string(), 0),
            ("list/1".to_string(), 77),
            ("list/2".to_string(), 300_000),
            ("list/3".to_string(), 1 << 20),
        ]
    );
    // The command shows the same, and no crc32c it does not know.
    let out = crate::ok_at(cluster.dir(), &["ls", "--pool", ERASURE_POOL, "list/", "--json"]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let objects = json["objects"].as_array().unwrap();
    assert_eq!(objects.len(), 4);
    assert_eq!(objects[2]["size"], 300_000);
    assert!(objects[2]["crc32c"].is_null());

    // Space (`optio status`): raw is every chunk, logical raw × K / (K+M); a three-copy pool
    // beside it holds three times what it stores.
    for i in 0..4 {
        rt.block_on(client.put(PLAIN_POOL, &format!("plain/{i}"), data(i, 10_000))).unwrap();
    }
    let mut last = serde_json::Value::Null;
    let settled = crate::wait_until(Duration::from_secs(30), || {
        let out = crate::optio_at(cluster.dir(), &["status", "--json"]);
        last = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let pool = |name: &str| {
            last["space"]["pools"].as_array().and_then(|p| p.iter().find(|p| p["name"] == name))
        };
        // Five objects of six chunks each once every kept version is dropped by its commit.
        pool(ERASURE_POOL).is_some_and(|p| p["raw_objects"] == 30)
            && pool(PLAIN_POOL).is_some_and(|p| p["raw_objects"] == 12)
    });
    assert!(settled, "{last:#}");
    let space = &last["space"];
    assert_eq!(space["devices_missing"], 0, "{space:#}");
    let pools = space["pools"].as_array().unwrap();
    let ec = pools.iter().find(|p| p["name"] == ERASURE_POOL).unwrap();
    let (raw, logical) = (ec["raw_bytes"].as_u64().unwrap(), ec["logical_bytes"].as_u64().unwrap());
    assert_eq!(
        (ec["kind"].as_str(), ec["redundancy"].as_str()),
        (Some("erasure"), Some("erasure 4+2"))
    );
    assert_eq!(ec["copy_factor"].as_f64(), Some(1.5));
    assert_eq!(ec["objects"], 5, "{ec}");
    assert_eq!(logical, (raw * 4 + 3) / 6, "{ec}");
    // Chunks are whole stripe units (64 KiB) per stripe of 4: 77 B, 5 B → one stripe each,
    // 300,000 B → two, 1 MiB → four, the empty object none; plus headers.
    let chunk_data = 6 * (1 + 1 + 2 + 4) * 65_536;
    assert!(raw >= chunk_data && raw < chunk_data + 30 * 2048, "{ec}");
    let plain = pools.iter().find(|p| p["name"] == PLAIN_POOL).unwrap();
    let (raw, logical) =
        (plain["raw_bytes"].as_u64().unwrap(), plain["logical_bytes"].as_u64().unwrap());
    assert_eq!(
        (plain["kind"].as_str(), plain["copy_factor"].as_f64()),
        (Some("replicated"), Some(3.0))
    );
    assert_eq!(plain["objects"], 4, "{plain}");
    assert!(raw.abs_diff(3 * logical) <= 2, "raw ≈ size × logical: {plain}");
    assert!((40_000..40_000 + 4 * 2048).contains(&logical), "{plain}");
    let total = |field: &str| pools.iter().map(|p| p[field].as_u64().unwrap()).sum::<u64>();
    for field in ["raw_bytes", "logical_bytes", "raw_objects", "objects"] {
        assert_eq!(space[field].as_u64(), Some(total(field)), "{field}: {space:#}");
    }
    // The text says the same, and how logical is estimated.
    let out = crate::optio_at(cluster.dir(), &["status"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("space per pool") && text.contains("logical = raw /"), "{text}");
    let line = text.lines().find(|l| l.starts_with("ec ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("erasure 4+2") && line.trim_end().ends_with(" 5"), "{line}");
}

#[test]
fn writes_go_on_with_a_server_down_and_its_chunks_are_rewritten_once_it_is_back() {
    let (_dir, mut cluster) = cluster(spec());
    let rt = runtime();
    let client = rt.block_on(client(&cluster, None));
    let probe = rt.block_on(client.put(ERASURE_POOL, "probe", data(0, 10))).unwrap();
    let down = probe.devices[2];
    cluster.kill(down).unwrap();
    // Written while it is down: five chunks of six, min_size 5: acknowledged.
    let mut written = Vec::new();
    for i in 0..12 {
        let key = format!("degraded-{i}");
        let bytes = data(i, 200_000 + i);
        let report = rt.block_on(client.put(ERASURE_POOL, &key, bytes.clone())).unwrap();
        assert!(!report.devices.contains(&down));
        written.push((key, bytes, report.devices.len()));
    }
    let degraded = written.iter().filter(|(_, _, n)| *n == 5).count();
    assert!(degraded > 0, "some objects have a chunk on device {down}");
    cluster.restart(down).unwrap();
    // Back, and done catching up on the replicated pools (it serves no read meanwhile; its
    // chunks it does not fetch: reads rebuild them).
    let caught_up = crate::wait_until(Duration::from_secs(30), || {
        rt.block_on(crate::statuses(&cluster))
            .iter()
            .flatten()
            .flat_map(|s| &s.devices)
            .all(|d| !d.recovering)
    });
    assert!(caught_up, "device {down} still catching up");
    // The reads find its chunks missing and rewrite them; the second pass finds nothing to do.
    let before = client.stats().repairs;
    let read_all = |what: &str| {
        for (key, bytes, _) in &written {
            let read = crate::wait_until(Duration::from_secs(20), || {
                rt.block_on(client.get(ERASURE_POOL, key)).is_ok_and(|b| b == *bytes)
            });
            assert!(read, "{what}: {key} reads back");
        }
    };
    read_all("first pass");
    let repaired = client.stats().repairs - before;
    assert_eq!(repaired as usize, degraded, "one chunk rewritten per degraded object");
    read_all("second pass");
    assert_eq!(client.stats().repairs - before, repaired);
}
